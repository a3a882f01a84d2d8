"""scripts/demo leaves nothing behind, however impatiently it is stopped.

The demo runs rootcanal and blemu in sessions of their own (a Ctrl-C reaches only the script
and its watcher) and stops them in its cleanup. A second SIGINT during that cleanup — a user
pressing Ctrl-C again, `timeout -s INT` — must not cut the cleanup short: when the script has
exited, no process it started may still run, and the next demo must find the HCI port free.

The demo is run as a user runs it, on an already built blemu (BLEMU_BIN, so no release build),
on a port of its own. Every process it starts inherits a marker in its environment, which is
how the test finds them (rootcanal's binary included), whatever their command lines.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from harness import REPO, blemu_binary, closed_tcp_port, log_dir, unique_name

DEMO = REPO / "scripts" / "demo"
MARK_VARIABLE = "BLEMU_DEMO_TEST_MARK"


def marked_processes(mark: str) -> dict[int, str]:
    """pid -> command line of every live process whose environment carries the marker."""
    wanted = f"{MARK_VARIABLE}={mark}".encode()
    found: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if wanted not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if state != "Z":  # a zombie holds no port and runs nothing
            found[int(entry.name)] = command
    return found


def describe(processes: dict[int, str]) -> str:
    return "\n".join(f"  {pid}: {command}" for pid, command in sorted(processes.items())) or "  (none)"


def port_is_free(port: int) -> str | None:
    """None when a listener could take 127.0.0.1:PORT now (as rootcanal would); else why not."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
            probe.listen(1)
        except OSError as error:
            return error.strerror or str(error)
    return None


class Demo:
    """scripts/demo in a session of its own, its output (stdout and stderr) in a file."""

    def __init__(self) -> None:
        binary = blemu_binary()
        if not binary.exists():
            pytest.fail(f"blemu binary not found at {binary}: build it or set BLEMU_BIN", pytrace=False)
        self.port = closed_tcp_port()
        self.mark = uuid.uuid4().hex
        self.output_path = log_dir() / f"demo-{unique_name('out')}.log"
        environment = dict(os.environ)
        environment.update({
            "BLEMU_BIN": str(binary),
            "BLEMU_DEMO_PORT": str(self.port),
            "BLEMU_DEMO_NAME": unique_name("DM"),
            MARK_VARIABLE: self.mark,
        })
        environment.pop("SKIP_BUILD", None)
        with open(self.output_path, "wb") as output:
            # A session of its own, as a terminal gives it a process group: killpg is Ctrl-C.
            self.process = subprocess.Popen(["bash", str(DEMO)], stdout=output, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, cwd=REPO, env=environment,
                                            start_new_session=True)

    def output(self) -> str:
        try:
            return self.output_path.read_text(errors="replace")
        except OSError:
            return ""

    def blemu_log(self) -> str:
        """blemu's log, whose path the demo prints (`(log: PATH)`)."""
        for line in self.output().splitlines():
            if line.startswith("==> blemu run") and "(log: " in line:
                try:
                    return Path(line.rsplit("(log: ", 1)[1].rstrip(")")).read_text(errors="replace")
                except OSError:
                    return ""
        return ""

    def wait_for(self, what: str, condition, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if self.process.poll() is not None:
                raise AssertionError(f"the demo exited with status {self.process.returncode} while waiting for "
                                     f"{what}; its output:\n{self.output()}\n--- blemu's log:\n{self.blemu_log()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {what} within {timeout:.0f} s; the demo's output:\n{self.output()}\n"
                                     f"--- blemu's log:\n{self.blemu_log()}")
            time.sleep(0.05)

    def interrupt(self) -> None:
        """Ctrl-C: SIGINT to the demo's process group (the script and its watcher)."""
        os.killpg(self.process.pid, signal.SIGINT)

    def kill_everything(self) -> None:
        """After the test, pass or fail: nothing of this demo may outlive it."""
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.process.wait(5)
        for pid in marked_processes(self.mark):
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.mark.parametrize("second_sigint", ["right-after-the-first", "while-blemu-stops"])
def test_two_quick_sigints_leave_no_process_and_a_free_port(second_sigint):
    demo = Demo()
    try:
        # Running in earnest: the watcher is connected and receives measurements.
        demo.wait_for("heart rate measurement from the watcher", lambda: " bpm" in demo.output(), timeout=60)
        running = marked_processes(demo.mark)
        commands = " ".join(running.values())
        assert "rootcanal" in commands and str(blemu_binary()) in commands, (
            f"the test does not see the demo's rootcanal and blemu:\n{describe(running)}")

        demo.interrupt()
        if second_sigint == "right-after-the-first":
            time.sleep(0.05)
        else:
            demo.wait_for("event=stopping in blemu's log (the cleanup stops blemu)",
                          lambda: "event=stopping" in demo.blemu_log(), timeout=15)
        assert demo.process.poll() is None, (
            f"the demo had exited before the second SIGINT: not a test of its cleanup\n{demo.output()}")
        demo.interrupt()

        try:
            status = demo.process.wait(40)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the demo did not exit within 40 s of two SIGINTs; its output:\n{demo.output()}")
        left = marked_processes(demo.mark)
        assert not left, (f"the demo exited (status {status}) leaving these running:\n{describe(left)}\n"
                          f"its output:\n{demo.output()}")
        busy = port_is_free(demo.port)
        assert busy is None, f"port {demo.port} cannot be listened on after the demo ({busy}):\n{demo.output()}"
        assert "demo: stopped" in demo.output(), f"the demo did not finish its cleanup:\n{demo.output()}"
        assert status == 0, f"a stop asked for exits 0, not {status}:\n{demo.output()}"
    finally:
        demo.kill_everything()


def test_ctrl_c_stops_the_demo_with_status_0_and_no_error():
    """One Ctrl-C, the way to end the demo: everything stops, status 0, and the watcher (`blemu
    gatt ... subscribe`) does not call its own stop an error (it said `Error: the peripheral
    disconnected (reason 0x16)` and the demo exited 1)."""
    demo = Demo()
    try:
        demo.wait_for("heart rate measurement from the watcher", lambda: " bpm" in demo.output(), timeout=60)
        demo.interrupt()
        try:
            status = demo.process.wait(40)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the demo did not exit within 40 s of Ctrl-C; its output:\n{demo.output()}")
        assert "demo: stopped" in demo.output(), demo.output()
        assert "Error:" not in demo.output(), demo.output()
        assert status == 0, f"status {status}:\n{demo.output()}"
        assert not marked_processes(demo.mark), describe(marked_processes(demo.mark))
    finally:
        demo.kill_everything()


def fake_packaging(tmp_path: Path) -> dict[str, str]:
    """A PATH where dpkg-query knows no package and `id -u` is a user's, so scripts/setup names
    every package it wants and stops there, installing nothing."""
    stubs = tmp_path / "bin"
    stubs.mkdir(parents=True)
    (stubs / "dpkg-query").write_text("#!/bin/sh\nexit 1\n")
    (stubs / "id").write_text("#!/bin/sh\necho 1000\n")
    for stub in stubs.iterdir():
        stub.chmod(0o755)
    return {**os.environ, "PATH": f"{stubs}:{os.environ['PATH']}"}


def packages_setup_wants(tmp_path: Path, *args: str) -> set[str]:
    result = subprocess.run(["bash", str(REPO / "scripts" / "setup"), *args], capture_output=True, text=True,
                            env=fake_packaging(tmp_path), stdin=subprocess.DEVNULL, timeout=30)
    assert result.returncode == 1 and "missing Debian packages: " in result.stderr, result.stderr
    return set(result.stderr.split("missing Debian packages: ", 1)[1].split(";", 1)[0].split())


def test_the_demos_setup_installs_only_what_the_demo_runs(tmp_path):
    """`scripts/setup && scripts/demo`: the build's libraries, nothing of the tests' (qemu,
    valgrind, busybox, tshark, chromium, the kernel package); `scripts/setup --tests`, as
    scripts/test runs it, adds those (chromium for the kernel layer's Web Bluetooth case)."""
    demo = packages_setup_wants(tmp_path / "demo")
    assert demo == {"libbluetooth-dev", "libsystemd-dev", "libyaml-dev", "pkg-config"}, demo
    tests = packages_setup_wants(tmp_path / "tests", "--tests")
    assert demo | {"qemu-system-x86", "valgrind", "busybox-static", "tshark", "bluez", "dbus", "systemd", "jq", "time", "libedit2", "chromium"} == tests, tests
