"""blemu under systemd: sd_notify(3) messages on a NOTIFY_SOCKET of the test's own, and the
unit files (Docs/systemd/blemu@.service, Docs/systemd/blemu-chat@.service) through
`systemd-analyze verify` and `security`.

The socket stands in for systemd: READY=1 once the device advertises, STATUS= as connections
come and go, WATCHDOG=1 every half WATCHDOG_USEC from the run loop (none while the process is
stopped: a wedged loop is noticed), STOPPING=1 on SIGTERM. `blemu chat` the same: READY=1 once
the node is in its room (hosting and advertising, or a member of a host's room), STATUS= with
the room's members or the host joined.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from harness import REPO, BlemuProcess, blemu_binary, connected, log_dir, run, start_advertising, unique_name

UNIT = REPO / "Docs" / "systemd" / "blemu@.service"
CHAT_UNIT = REPO / "Docs" / "systemd" / "blemu-chat@.service"
UNITS = {"blemu@bench.service": UNIT, "blemu-chat@kitchen.service": CHAT_UNIT}
# The highest `systemd-analyze security` exposure accepted for the unit (Docs/DEPLOYMENT.md).
EXPOSURE_LIMIT = 2.5


class NotifySocket:
    """An AF_UNIX datagram socket playing systemd's NOTIFY_SOCKET; `abstract` binds an '@' name."""

    def __init__(self, directory: Path, abstract: bool = False):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        if abstract:
            name = f"blemu-notify-{uuid.uuid4().hex[:12]}"
            self.sock.bind("\0" + name)
            self.address = "@" + name
        else:
            path = directory / "notify.sock"
            self.sock.bind(str(path))
            self.address = str(path)
        self.messages: list[tuple[float, dict[str, str]]] = []

    def close(self) -> None:
        self.sock.close()

    def receive(self, timeout: float) -> list[tuple[float, dict[str, str]]]:
        """Messages arriving within `timeout` seconds (all of them, not only the first)."""
        got = []
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(4096)
            except socket.timeout:
                break
            fields = dict(line.split("=", 1) for line in data.decode().split("\n") if "=" in line)
            got.append((time.monotonic(), fields))
        self.messages += got
        return got

    def wait_for(self, key: str, timeout: float, value: str | None = None) -> dict[str, str]:
        """The first message (from now on) with KEY (=VALUE); fails after `timeout`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for _, fields in self.receive(min(0.2, max(0.0, deadline - time.monotonic()))):
                if key in fields and (value is None or fields[key] == value):
                    return fields
        raise AssertionError(f"no {key}{'=' + value if value else ''} within {timeout} s; got {self.messages[-10:]}")


def watchdogs(messages) -> list[float]:
    return [at for at, fields in messages if fields.get("WATCHDOG") == "1"]


@pytest.fixture
def notify_socket(tmp_path):
    sock = NotifySocket(tmp_path)
    yield sock
    sock.close()


def test_ready_status_watchdog_stopping(rootcanal, notify_socket):
    blemu = BlemuProcess(rootcanal.controller_spec, unique_name(),
                         env={"NOTIFY_SOCKET": notify_socket.address, "WATCHDOG_USEC": "500000"})
    start_advertising(blemu, rootcanal)
    try:
        ready = notify_socket.wait_for("READY", timeout=10, value="1")
        # READY=1 is sent once the device advertises: its own STATUS says so, and the log had it first.
        assert "heart-rate advertising, 0 connected" in ready.get("STATUS", ""), ready
        assert blemu.events("advertising-started"), blemu.log_tail()

        async def scenario() -> None:
            async with connected(blemu, "notify-central"):
                notify_socket.wait_for("STATUS", timeout=10, value="heart-rate 1 connected")

        run(scenario())
        status = notify_socket.wait_for("STATUS", timeout=10)
        assert re.fullmatch(r"heart-rate (advertising, )?0 connected", status["STATUS"]), status

        # WATCHDOG=1 about every 250 ms (half of WATCHDOG_USEC).
        pings = watchdogs(notify_socket.receive(2.0))
        assert len(pings) >= 4, f"{len(pings)} WATCHDOG=1 in 2 s"

        # A stopped process (as a wedged loop) sends none; after SIGCONT the pings resume.
        os.kill(blemu.process.pid, signal.SIGSTOP)
        try:
            notify_socket.receive(0.3)  # what was on its way
            silent = watchdogs(notify_socket.receive(1.5))
        finally:
            os.kill(blemu.process.pid, signal.SIGCONT)
        assert not silent, f"WATCHDOG=1 while the process was stopped: {silent}"
        notify_socket.wait_for("WATCHDOG", timeout=2, value="1")

        blemu.process.send_signal(signal.SIGTERM)
        stopping = notify_socket.wait_for("STOPPING", timeout=5, value="1")
        assert "SIGTERM" in stopping.get("STATUS", ""), stopping
    finally:
        status = blemu.stop()
    assert status == 0, blemu.log_tail()
    assert sum(1 for _, fields in notify_socket.messages if fields.get("READY") == "1") == 1


def test_abstract_socket_and_no_watchdog_without_watchdog_usec(rootcanal, tmp_path):
    sock = NotifySocket(tmp_path, abstract=True)
    blemu = BlemuProcess(rootcanal.controller_spec, unique_name(),
                         env={"NOTIFY_SOCKET": sock.address, "WATCHDOG_USEC": None})
    try:
        start_advertising(blemu, rootcanal)
        sock.wait_for("READY", timeout=10, value="1")
        assert not watchdogs(sock.receive(1.0)), "WATCHDOG=1 without WATCHDOG_USEC"
    finally:
        status = blemu.stop()
        sock.close()
    assert status == 0, blemu.log_tail()


def test_bad_environment_is_logged_and_ignored(rootcanal, tmp_path):
    blemu = BlemuProcess(rootcanal.controller_spec, unique_name(),
                         env={"NOTIFY_SOCKET": str(tmp_path / "nobody-listens.sock"), "WATCHDOG_USEC": "soon"})
    try:
        start_advertising(blemu, rootcanal)
        time.sleep(0.5)
        log = blemu.log_path.read_text()
        assert "WATCHDOG_USEC='soon'" in log, blemu.log_tail()
        assert log.count("cannot notify systemd") == 1, blemu.log_tail()
    finally:
        status = blemu.stop()
    assert status == 0, blemu.log_tail()


def test_sighup_is_ignored(rootcanal):
    blemu = start_advertising(BlemuProcess(rootcanal.controller_spec, unique_name()), rootcanal)
    try:
        blemu.process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 5
        while "SIGHUP ignored" not in blemu.log_path.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert blemu.exited() is None
        assert "SIGHUP ignored" in blemu.log_path.read_text(), blemu.log_tail()
    finally:
        status = blemu.stop()
    assert status == 0, blemu.log_tail()


# ---------------------------------------------------------------------------------------------
# The unit file.


def systemd_analyze() -> str:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.fail("systemd-analyze not found: run scripts/setup --tests (Debian package systemd)", pytrace=False)
    return tool


def installed_unit(directory: Path, instance_name: str = "blemu@bench.service") -> Path:
    """The unit with ExecStart pointing at the blemu under test, as `instance_name`."""
    binary = blemu_binary()
    if not binary.exists():
        pytest.fail(f"blemu binary not found at {binary}", pytrace=False)
    source = UNITS[instance_name]
    text = source.read_text().replace("/usr/local/bin/blemu", str(binary))
    template = directory / source.name
    template.write_text(text)
    instance = directory / instance_name
    instance.symlink_to(template.name)
    return instance


@pytest.mark.parametrize("instance_name", sorted(UNITS))
def test_unit_file_verifies(tmp_path, instance_name):
    unit = installed_unit(tmp_path, instance_name)
    result = subprocess.run([systemd_analyze(), "verify", str(unit)], capture_output=True, text=True, timeout=60,
                            cwd=tmp_path)
    # Lines about other units on this machine are not ours to judge.
    ours = [line for line in (result.stdout + result.stderr).splitlines() if instance_name.split("@")[0] + "@" in line]
    assert result.returncode == 0 and not ours, f"systemd-analyze verify:\n{result.stdout}{result.stderr}"


@pytest.mark.parametrize("instance_name", sorted(UNITS))
def test_unit_file_sandboxing_score(tmp_path, instance_name):
    unit = installed_unit(tmp_path, instance_name)
    result = subprocess.run([systemd_analyze(), "security", "--offline=yes", "--no-pager", str(unit)],
                            capture_output=True, text=True, timeout=60, cwd=tmp_path)
    output = result.stdout + result.stderr
    match = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", output)
    assert match, f"systemd-analyze security gave no exposure level:\n{output}"
    exposure = float(match.group(1))
    assert exposure <= EXPOSURE_LIMIT, f"exposure {exposure} above {EXPOSURE_LIMIT}:\n{output}"


# ---------------------------------------------------------------------------------------------
# `blemu chat` under systemd.


class ChatNode:
    """`blemu chat` with stdin from /dev/null (as StandardInput=null) and a NOTIFY_SOCKET."""

    def __init__(self, controller: str, notify: NotifySocket, state_dir: Path, *args: str):
        self.log_path = log_dir() / f"chat-service-{unique_name('c')}.log"
        self.log = open(self.log_path, "wb")
        env = {**os.environ, "NOTIFY_SOCKET": notify.address, "WATCHDOG_USEC": "500000"}
        env.pop("INVOCATION_ID", None)
        env.pop("JOURNAL_STREAM", None)
        self.process = subprocess.Popen([str(blemu_binary()), "chat", "--controller", controller, "--state-dir", str(state_dir),
                                         "--log-level", "info", *args],
                                        stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT, env=env)

    def text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(15)
        finally:
            self.log.close()


def test_chat_ready_status_watchdog_stopping(rootcanal, tmp_path):
    """A host is ready once it advertises its room, a member once it is in the host's room; the
    host's STATUS= counts its members as they come and go."""
    room = unique_name("Svc")
    for name in ("host", "member"):
        (tmp_path / name).mkdir()
    host_socket, member_socket = NotifySocket(tmp_path / "host"), NotifySocket(tmp_path / "member")
    host = ChatNode(rootcanal.controller_spec, host_socket, tmp_path / "host-state", "--role", "peripheral", "--name", room)
    member = None
    try:
        ready = host_socket.wait_for("READY", timeout=20, value="1")
        assert ready.get("STATUS") == f"room {room}: hosting, 0 members", ready
        member = ChatNode(rootcanal.controller_spec, member_socket, tmp_path / "member-state",
                          "--role", "central", "--room", room, "--name", "svc-member")
        joined = member_socket.wait_for("READY", timeout=40, value="1")
        assert re.fullmatch(rf"member of {room} via [0-9A-F:]{{17}}", joined.get("STATUS", "")), joined
        host_socket.wait_for("STATUS", timeout=15, value=f"room {room}: hosting, 1 member")

        # WATCHDOG=1 about every 250 ms (half of WATCHDOG_USEC), from each.
        assert len(watchdogs(host_socket.receive(2.0))) >= 4
        assert len(watchdogs(member_socket.receive(1.0))) >= 2

        # The member leaves (a clean stop: STOPPING=1); the host counts it out.
        assert member.stop() == 0, member.text()
        stopping = member_socket.wait_for("STOPPING", timeout=5, value="1")
        assert "SIGTERM" in stopping.get("STATUS", ""), stopping
        host_socket.wait_for("STATUS", timeout=15, value=f"room {room}: hosting, 0 members")

        host.process.send_signal(signal.SIGTERM)
        stopping = host_socket.wait_for("STOPPING", timeout=5, value="1")
        assert stopping.get("STATUS") == "stopping on SIGTERM", stopping
    finally:
        if member is not None:
            member.stop()
        status = host.stop()
        host_socket.close()
        member_socket.close()
    assert status == 0, host.text()
    for sock in (host_socket, member_socket):
        assert sum(1 for _, fields in sock.messages if fields.get("READY") == "1") == 1, sock.messages
    # Logs went to stderr (no journal outside systemd), with the events a journal would index.
    assert "event=started" in host.text() and "event=stopping" in host.text(), host.text()[-2000:]


def test_chat_exits_64_on_a_refused_command_line(tmp_path):
    """RestartPreventExitStatus=64 in blemu-chat@.service: bad options are no failure to retry."""
    for arguments in (["--mtu", "5"], ["--role", "sideways"], ["--controller", "bogus:1"]):
        result = subprocess.run([str(blemu_binary()), "chat", "--state-dir", str(tmp_path), *arguments],
                                stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
        assert result.returncode == 64, (arguments, result.returncode, result.stderr)
