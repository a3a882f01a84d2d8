"""blemu on a real Linux kernel: the HCI user channel of hci_vhci adapters, in a qemu guest.

Run by scripts/test-kernel (read that first; Docs/TESTING.md, Kernel tests). This program:
  1. takes Debian's kernel from the cache scripts/setup filled (linux-image-*.deb, extracted
     there once), and builds an initramfs: busybox-static, Tests/kernel/init, the modules for
     Bluetooth, hci_vhci, virtio-net, 9p and overlayfs with their dependencies, and the units
     of the agent;
  2. starts rootcanal on the host, and a TCP port for the guest agent;
  3. boots the kernel once in qemu-system-x86_64 (TCG, no KVM needed): the host's root over
     virtio-9p, read-only under a tmpfs overlay, systemd as PID 1; qemu's user network, where
     the host is 10.0.2.2;
  4. drives the cases through the guest agent (Tests/kernel/guest_agent.py): adapters are
     hci_vhci ones bridged to the host's rootcanal by `blemu attach` in the guest, so blemu in
     the guest and a Bumble central on the host meet on one radio;
  5. prints `kernel: PASS name (…)` or `kernel: FAIL name: why` per case and a summary line,
     and exits 1 if any case failed or the guest could not be run (2: a prerequisite is missing).

With --adapter hciN --central SPEC the same cases (but systemd-unit) run on this machine's own
kernel and adapter instead, with the agent started here.

Environment: BLEMU_BIN (the blemu to test; default .build/debug/blemu), BLEMU_KERNEL_CACHE
(default ${XDG_CACHE_HOME:-~/.cache}/blemu-kernel), BLEMU_KERNEL_LOG_DIR (where the console,
rootcanal and process logs go; default a new /tmp/blemu-kernel-* folder), BLEMU_KERNEL_CASES
(comma-separated case names; default all), BLEMU_KERNEL_INIT (systemd, the default, or busybox:
no systemd, no systemd-unit case), BLEMU_KERNEL_KVM=1 (KVM instead of TCG).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))
sys.path.insert(0, str(REPO / "python"))  # blemu_testkit, the Python kit (Docs/TESTING-APPS.md)

from bumble_central import (  # noqa: E402
    UUID_BODY_SENSOR_LOCATION,
    UUID_HEART_RATE_MEASUREMENT,
    UUID_HEART_RATE_SERVICE,
    Central,
    collect_notifications,
    decode_heart_rate_measurement,
)
from bumble.core import UUID  # noqa: E402
from rootcanal_server import RootCanal  # noqa: E402

# blemu's lock (Docs/REFERENCE.md): the control point takes opcode + PIN, answers by indication.
UUID_LOCK_SERVICE = UUID("7d3c0200-9a5e-4d1a-8f6e-5c1b2d3e4f50")
UUID_LOCK_CONTROL_POINT = UUID("7d3c0202-9a5e-4d1a-8f6e-5c1b2d3e4f50")
LOCK_PASSKEY, LOCK_PIN = 246810, b"1357"

# blemu's thermostat (Docs/REFERENCE.md): Target Temperature, sint16 in 0.01 °C.
UUID_THERMOSTAT_SERVICE = UUID("7d3c0100-9a5e-4d1a-8f6e-5c1b2d3e4f50")
UUID_TARGET_TEMPERATURE = UUID("7d3c0101-9a5e-4d1a-8f6e-5c1b2d3e4f50")

GUEST_PYTHON = "/usr/bin/python3"
# The real app's python (bleak, dbus_fast): the repository's .venv, seen in the guest over 9p.
APP_PYTHON = str(REPO / ".venv/bin/python")
BLEAK_APP = str(REPO / "Tests/kernel/bleak_app.py")
BLUETOOTHD = "/usr/libexec/bluetooth/bluetoothd"
# The Web Bluetooth app: Debian's Chromium driven over the DevTools protocol (standard library).
WEB_BLUETOOTH_APP = str(REPO / "Tests/kernel/web_bluetooth.py")
# Modules the guest loads (their dependencies are added from the .ko files' modinfo).
GUEST_MODULES = ["virtio_pci", "virtio_net", "9pnet_virtio", "9p", "overlay",
                 # The kernel's SMP (BlueZ pairing) needs an ECDH context, whose self-test (run
                 # when bluetooth loads ecdh_generic) draws on the DRBG (hmac(sha512)) seeded by
                 # jitterentropy (sha3-256); SMP's AES-CMAC is cmac. Without them bluetoothd logs
                 # "Unable to create ECDH crypto context" and cannot pair. They are soft
                 # dependencies (no depends=), which busybox's insmod does not follow, and must
                 # load before bluetooth.
                 "sha3_generic", "jitterentropy_rng", "sha512_generic", "drbg", "cmac",
                 "bluetooth", "hci_vhci"]
# Generous: TCG emulation on two shared cores is slow, and this is a test, not a benchmark.
BOOT_TIMEOUT = 120.0
EVENT_TIMEOUT = 45.0
SCAN_TIMEOUT = 30.0
# blemu's ControllerLink retries with a backoff of at most 8 s: recovery within this.
RECOVERY_TIMEOUT = 60.0
# No user in the guest has a capability but root; `nobody` exists in every Debian.
UNPRIVILEGED = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
WITH_NET_ADMIN = UNPRIVILEGED + ["--inh-caps=+net_admin", "--ambient-caps=+net_admin"]


class Failure(Exception):
    """A case failed: the message is its one-line reason."""


# --------------------------------------------------------------------------------------------
# The guest image


def cache_dir() -> Path:
    if os.environ.get("BLEMU_KERNEL_CACHE"):
        return Path(os.environ["BLEMU_KERNEL_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "blemu-kernel"


def kernel_tree() -> tuple[Path, Path]:
    """(vmlinuz, modules directory) of the newest cached kernel package, extracted once."""
    cache = cache_dir()
    packages = sorted(cache.glob("linux-image-*_amd64.deb"), key=lambda path: path.stat().st_mtime)
    if not packages:
        raise SystemExit(
            f"test-kernel: no Debian kernel package in {cache}: run scripts/setup "
            f"(it runs `apt-get download` of the linux-image package linux-image-amd64 depends on)")
    package = packages[-1]
    tree = cache / package.name.removesuffix(".deb")
    if not (tree / ".complete").exists():
        shutil.rmtree(tree, ignore_errors=True)
        tree.mkdir(parents=True)
        subprocess.run(["dpkg-deb", "-x", str(package), str(tree)], check=True)
        (tree / ".complete").touch()
    kernels = sorted((tree / "boot").glob("vmlinuz-*"))
    if not kernels:
        raise SystemExit(f"test-kernel: {package} has no boot/vmlinuz-*")
    version = kernels[-1].name.removeprefix("vmlinuz-")
    return kernels[-1], tree / "lib/modules" / version


_DEPENDS = re.compile(rb"(?:^|\0)depends=([A-Za-z0-9_,-]*)\0")


def module_order(modules_dir: Path, wanted: list[str]) -> list[Path]:
    """The .ko files for `wanted` and everything they depend on, dependencies first.

    Each module's dependencies are in its own .modinfo section (`depends=a,b`); a dependency
    with no .ko file is built into the kernel (modules.builtin)."""
    files: dict[str, Path] = {}
    for path in (modules_dir / "kernel").rglob("*.ko*"):
        name = path.name.split(".ko")[0].replace("-", "_")
        files[name] = path
    builtin = set()
    builtin_list = modules_dir / "modules.builtin"
    if builtin_list.exists():
        for line in builtin_list.read_text().splitlines():
            builtin.add(Path(line).name.split(".ko")[0].replace("-", "_"))
    order: list[Path] = []
    seen: set[str] = set()

    def visit(name: str) -> None:
        name = name.replace("-", "_")
        if name in seen:
            return
        seen.add(name)
        if name not in files:
            if name in builtin:
                return
            raise SystemExit(f"test-kernel: module {name} is neither in {modules_dir} nor built in")
        path = files[name]
        if path.suffix != ".ko":
            raise SystemExit(f"test-kernel: {path} is compressed; busybox insmod needs plain .ko files")
        match = _DEPENDS.search(path.read_bytes())
        for dependency in (match.group(1).decode().split(",") if match and match.group(1) else []):
            visit(dependency)
        order.append(path)

    for name in wanted:
        visit(name)
    return order


class Cpio:
    """A newc ("070701") archive, the initramfs format, written by hand (no cpio needed)."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.inode = 1

    def _entry(self, name: str, mode: int, body: bytes = b"", rdev: tuple[int, int] = (0, 0)) -> None:
        encoded = name.encode() + b"\0"
        fields = [self.inode, mode, 0, 0, 1, 0, len(body), 0, 0, rdev[0], rdev[1], len(encoded), 0]
        self.inode += 1
        self.data += b"070701" + b"".join(b"%08X" % field for field in fields) + encoded
        self.data += b"\0" * (-len(self.data) % 4)
        self.data += body
        self.data += b"\0" * (-len(self.data) % 4)

    def directory(self, name: str) -> None:
        self._entry(name, 0o040755)

    def file(self, name: str, body: bytes, executable: bool = False) -> None:
        self._entry(name, 0o100755 if executable else 0o100644, body)

    def symlink(self, name: str, target: str) -> None:
        self._entry(name, 0o120777, target.encode())

    def char_device(self, name: str, major: int, minor: int) -> None:
        self._entry(name, 0o020600, rdev=(major, minor))

    def finish(self) -> bytes:
        self._entry("TRAILER!!!", 0)
        return bytes(self.data)


def build_initramfs(modules: list[Path], out: Path, extra: dict[str, bytes | Path] | None = None) -> None:
    """The initramfs; `extra` adds files (bytes) and symlinks (Path: the target) by path."""
    busybox = Path("/bin/busybox")
    probe = subprocess.run(["file", "-L", str(busybox)], capture_output=True, text=True) if shutil.which("file") else None
    if not busybox.exists() or (probe is not None and "statically linked" not in probe.stdout):
        raise SystemExit("test-kernel: /bin/busybox (a static busybox) is missing: run scripts/setup "
                         "(apt-get install busybox-static)")
    archive = Cpio()
    for directory in ("bin", "dev", "proc", "sys", "host", "modules"):
        archive.directory(directory)
    archive.char_device("dev/console", 5, 1)
    archive.file("bin/busybox", busybox.read_bytes(), executable=True)
    archive.file("init", (REPO / "Tests/kernel/init").read_bytes(), executable=True)
    for module in modules:
        archive.file(f"modules/{module.name}", module.read_bytes())
    archive.file("modules/order", "".join(f"{module.name}\n" for module in modules).encode())
    made = set()
    for name, content in sorted((extra or {}).items()):
        parts = name.split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            directory = "/".join(parts[:depth])
            if directory not in made:
                made.add(directory)
                archive.directory(directory)
        if isinstance(content, Path):
            archive.symlink(name, str(content))
        else:
            archive.file(name, content)
    out.write_bytes(archive.finish())


def systemd_files(port: int) -> dict[str, bytes | Path]:
    """What the systemd guest adds to the host's root (initramfs /systemd, copied over the
    overlay by Tests/kernel/init): the agent as a service, and a target of its own to boot to."""
    units = "systemd/etc/systemd/system"
    return {
        f"{units}/blemu-kernel.target": b"""[Unit]
Description=blemu kernel tests
Requires=basic.target blemu-kernel-agent.service
After=basic.target
AllowIsolate=yes
""",
        f"{units}/blemu-kernel-agent.service": f"""[Unit]
Description=blemu kernel tests: the agent (Tests/kernel/guest_agent.py)
After=basic.target

[Service]
ExecStartPre=/bin/touch /run/blemu-kernel-guest
ExecStart=/usr/bin/python3 -u {REPO}/Tests/kernel/guest_agent.py 10.0.2.2 {port}
StandardOutput=journal+console
StandardError=journal+console
FailureAction=poweroff-immediate
""".encode(),
        # bluetoothd would power every new adapter on (EBUSY for blemu).
        f"{units}/bluetooth.service": Path("/dev/null"),
        # Slow or pointless here: tmpfiles would empty the host's /tmp (into the overlay: the
        # host's files are safe, read-only under it) over 9p, for minutes under TCG; the rest
        # update caches of the host's root or need the network or real disks.
        **{f"{units}/{name}": Path("/dev/null") for name in (
            "systemd-tmpfiles-setup.service", "systemd-tmpfiles-clean.timer", "ldconfig.service",
            "systemd-hwdb-update.service", "systemd-journal-catalog-update.service",
            "systemd-update-done.service", "systemd-timesyncd.service", "systemd-pstore.service",
            "e2scrub_reap.service", "systemd-random-seed.service", "systemd-update-utmp.service",
            # Chromium asks UPower (which Debian's chromium recommends) for the battery: started
            # by D-Bus activation it would take the cores for a while and answer nothing useful.
            "upower.service",
        )},
    }


# --------------------------------------------------------------------------------------------
# The guest


class Guest:
    """qemu running the guest, and the agent connection to it."""

    def __init__(self, kernel: Path, modules: list[Path], log_dir: Path, systemd: bool = False):
        self.kernel, self.modules, self.log_dir, self.systemd = kernel, modules, log_dir, systemd
        self.console = log_dir / "console.log"
        self.initramfs = log_dir / "initramfs.cpio"
        self.process: subprocess.Popen[bytes] | None = None
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(1)
        self.conn: socket.socket | None = None
        self.reader = None
        self.release = ""

    def boot(self) -> float:
        qemu = shutil.which("qemu-system-x86_64")
        if qemu is None:
            raise SystemExit("test-kernel: qemu-system-x86_64 is missing: run scripts/setup "
                             "(apt-get install qemu-system-x86)")
        port = self.listener.getsockname()[1]
        build_initramfs(self.modules, self.initramfs, systemd_files(port) if self.systemd else None)
        init = " blemu.init=systemd systemd.unit=blemu-kernel.target systemd.show_status=error" if self.systemd else ""
        # TCG by default: the suite must not depend on KVM (often absent in CI and containers);
        # BLEMU_KERNEL_KVM=1 uses it where it works.
        accel = ["-accel", "kvm", "-cpu", "host"] if os.environ.get("BLEMU_KERNEL_KVM") == "1" \
            else ["-accel", "tcg,thread=multi", "-cpu", "max"]
        command = [
            qemu, *accel, "-machine", "q35", "-smp", "2", "-m", "1024",
            "-display", "none", "-monitor", "none", "-serial", f"file:{self.console}", "-no-reboot",
            "-kernel", str(self.kernel), "-initrd", str(self.initramfs),
            "-append", f"console=ttyS0 panic=-1 loglevel=4 blemu.ctl={port} blemu.repo={REPO}{init}",
            "-netdev", "user,id=net0", "-device", "virtio-net-pci,netdev=net0",
            "-fsdev", "local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap",
            "-device", "virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot",
        ]
        started = time.monotonic()
        with open(self.log_dir / "qemu.log", "wb") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            start_new_session=True)
        self.listener.settimeout(1.0)
        while True:
            try:
                self.conn, _ = self.listener.accept()
                break
            except socket.timeout:
                if self.process.poll() is not None:
                    raise SystemExit(f"test-kernel: qemu exited with status {self.process.returncode} before the "
                                     f"guest agent connected; console:\n{self.console_tail()}\nqemu:\n"
                                     f"{(self.log_dir / 'qemu.log').read_text(errors='replace')[-2000:]}")
                if time.monotonic() - started > BOOT_TIMEOUT:
                    self.stop()
                    raise SystemExit(f"test-kernel: the guest agent did not connect within {BOOT_TIMEOUT:.0f} s; "
                                     f"console:\n{self.console_tail()}")
        self.conn.settimeout(None)
        self.reader = self.conn.makefile("r", encoding="utf-8")
        hello = json.loads(self.reader.readline())
        self.release = hello.get("hello", "?")
        return time.monotonic() - started

    def console_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.console.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no console output)"

    def request(self, **message) -> dict:
        assert self.conn is not None and self.reader is not None
        self.conn.sendall((json.dumps(message) + "\n").encode())
        line = self.reader.readline()
        if not line:
            raise Failure(f"the guest agent went away; console:\n{self.console_tail()}")
        answer = json.loads(line)
        if "error" in answer:
            raise Failure(f"guest agent: {answer['error']}")
        return answer

    def run(self, cmd: list[str], timeout: float = 60.0) -> dict:
        return self.request(op="run", cmd=cmd, timeout=timeout)

    def spawn(self, ident: str, cmd: list[str]) -> None:
        self.request(op="spawn", id=ident, cmd=cmd)

    def log(self, ident: str) -> tuple[str, int | None]:
        answer = self.request(op="log", id=ident)
        return answer["text"], answer["rc"]

    def signal(self, ident: str, number: int = signal.SIGTERM) -> None:
        self.request(op="signal", id=ident, signal=number)

    def wait(self, ident: str, timeout: float) -> int | None:
        return self.request(op="wait", id=ident, timeout=timeout)["rc"]

    def stop(self) -> None:
        if self.conn is not None:
            try:
                self.request(op="bye", poweroff=not isinstance(self, LocalAgent))
            except Exception:
                pass
            self.conn.close()
            self.conn = None
        if self.process is not None:
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(5)
        self.listener.close()


class LocalAgent(Guest):
    """The agent on this machine (scripts/test-kernel --adapter): the cases on its own kernel."""

    def __init__(self, log_dir: Path):
        super().__init__(Path("/"), [], log_dir)
        self.release = os.uname().release

    def boot(self) -> float:
        started = time.monotonic()
        port = self.listener.getsockname()[1]
        with open(self.log_dir / "agent.log", "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-u", str(REPO / "Tests/kernel/guest_agent.py"), "127.0.0.1", str(port),
                 str(self.log_dir / "agent")], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)
        self.listener.settimeout(30)
        self.conn, _ = self.listener.accept()
        self.conn.settimeout(None)
        self.reader = self.conn.makefile("r", encoding="utf-8")
        json.loads(self.reader.readline())
        return time.monotonic() - started

    def console_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join((self.log_dir / "agent.log").read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no agent output)"


# --------------------------------------------------------------------------------------------
# Helpers for the cases


class GuestProcess:
    """A process the agent spawned: its output, polled."""

    def __init__(self, guest: Guest, ident: str, cmd: list[str]):
        self.guest, self.ident, self.cmd = guest, ident, cmd
        guest.spawn(ident, cmd)

    def output(self) -> tuple[str, int | None]:
        return self.guest.log(self.ident)

    def count(self, pattern: str) -> int:
        return len(re.findall(pattern, self.output()[0], re.MULTILINE))

    def wait_for(self, pattern: str, timeout: float, count: int = 1, what: str | None = None) -> str:
        """Poll the output until `pattern` (a regex) matched `count` times; fail on exit or timeout."""
        regex = re.compile(pattern, re.MULTILINE)
        deadline = time.monotonic() + timeout
        while True:
            text, rc = self.output()
            if len(regex.findall(text)) >= count:
                return text
            if rc is not None:
                raise Failure(f"{self.ident} exited with status {rc} before {what or pattern!r}: {tail(text)}")
            if time.monotonic() > deadline:
                raise Failure(f"no {what or pattern!r} from {self.ident} within {timeout:.0f} s: {tail(text)}")
            time.sleep(0.25)

    def stop(self, timeout: float = 20.0) -> int:
        self.guest.signal(self.ident, signal.SIGTERM)
        rc = self.guest.wait(self.ident, timeout)
        if rc is None:
            self.guest.signal(self.ident, signal.SIGKILL)
            self.guest.wait(self.ident, 5)
            raise Failure(f"{self.ident} did not exit within {timeout:.0f} s of SIGTERM: {tail(self.output()[0])}")
        return rc

    def save(self, log_dir: Path) -> None:
        try:
            (log_dir / f"{self.ident}.log").write_text(self.output()[0])
        except Exception:
            pass


def tail(text: str, lines: int = 6) -> str:
    kept = [line for line in text.strip().splitlines() if line.strip()][-lines:]
    return " | ".join(kept) if kept else "(no output)"


def blemu_bin() -> str:
    return os.environ.get("BLEMU_BIN") or str(REPO / ".build/debug/blemu")


def blemu_attach(hci_port: int) -> list[str]:
    """`blemu attach` in the guest: a new hci_vhci adapter on the host's rootcanal (qemu's user
    network: the host is 10.0.2.2). It prints `blemu attach: hciN up` once the kernel has it."""
    return [blemu_bin(), "attach", "--controller", f"tcp:10.0.2.2:{hci_port}"]


def blemu_run(controller: str, name: str, prefix: list[str] | None = None, binary: str | None = None) -> list[str]:
    return [*(prefix or []), binary or blemu_bin(), "run", "heart-rate", "--controller", controller, "--name", name,
            "--log", "stderr", "--log-level", "debug"]


class Session:
    """Where the cases run (the qemu guest, or this machine with --adapter) and the state they
    share: the adapter under test and the blemu of the session cases."""

    def __init__(self, guest: Guest, central_spec: str, log_dir: Path):
        self.guest, self.central_spec, self.log_dir = guest, central_spec, log_dir
        self.adapter: str | None = None
        self.blemu: GuestProcess | None = None
        self.spawned: list[GuestProcess] = []

    def spawn(self, ident: str, cmd: list[str]) -> GuestProcess:
        process = GuestProcess(self.guest, ident, cmd)
        self.spawned.append(process)
        return process

    def adapters(self) -> list[str]:
        return self.guest.run(["ls", "/sys/class/bluetooth"])["out"].split()

    def missing_adapter(self) -> str:
        present = set(self.adapters())
        return next(f"hci{index}" for index in range(7, 64) if f"hci{index}" not in present)

    def plug_adapter(self) -> str:
        raise NotImplementedError

    def unplug_adapter(self) -> None:
        raise NotImplementedError


    def btmgmt(self, adapter: str, *arguments: str) -> str:
        """btmgmt's output; it prints nothing without a terminal, so it runs under script(1)."""
        command = " ".join(["btmgmt", "--index", adapter.removeprefix("hci"), *arguments])
        result = self.guest.run(["script", "-qec", command, "/dev/null"], timeout=30)
        text = re.sub(r"\x1b\[[0-9;]*m|[\x01\x02\r]", "", result["out"] + result["err"])
        if result["rc"] != 0:
            raise Failure(f"`{command}` failed ({result['rc']}): {tail(text)}")
        return text

    def adapter_settings(self, adapter: str, timeout: float = EVENT_TIMEOUT) -> str:
        """`btmgmt info`'s current settings; waits while the kernel still sets the adapter up
        (mgmt answers Invalid Index until then)."""
        deadline = time.monotonic() + timeout
        while True:
            text = self.btmgmt(adapter, "info")
            match = re.search(r"current settings: (.*)", text)
            if match:
                return match.group(1)
            if time.monotonic() > deadline:
                raise Failure(f"`btmgmt info` has no current settings for {adapter}: {tail(text)}")
            time.sleep(0.5)

    def wait_powered(self, adapter: str, powered: bool, timeout: float = EVENT_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while True:
            settings = self.adapter_settings(adapter)
            if ("powered" in settings.split()) == powered:
                return
            if time.monotonic() > deadline:
                raise Failure(f"{adapter} not powered {'on' if powered else 'off'} within {timeout:.0f} s: {settings}")
            time.sleep(0.5)

    def btmgmt_power(self, adapter: str, on: bool) -> None:
        self.adapter_settings(adapter)  # set up, known to mgmt
        state = "on" if on else "off"
        text = self.btmgmt(adapter, "power", state)
        if "Set Powered complete" not in text:
            raise Failure(f"`btmgmt power {state}` did not complete: {tail(text)}")
        self.wait_powered(adapter, on)

    def expect_refusal(self, ident: str, cmd: list[str], errno_name: str, line: str) -> str:
        """blemu exits non-zero at once with its one-line reason containing `line` and `(ERRNO)`."""
        process = self.spawn(ident, cmd)
        rc = self.guest.wait(ident, 90)
        text, _ = process.output()
        if rc is None:
            process.stop()
            raise Failure(f"blemu did not exit on its own (expected {errno_name}): {tail(text)}")
        if rc == 0:
            raise Failure(f"blemu exited 0 (expected {errno_name}): {tail(text)}")
        if f"({errno_name})" not in text or line not in text:
            raise Failure(f"blemu exited {rc} without the {errno_name} line {line!r}: {tail(text)}")
        return [l for l in text.splitlines() if errno_name in l][-1]

    def start_blemu(self, ident: str, controller: str, name: str, prefix: list[str] | None = None,
                    binary: str | None = None) -> GuestProcess:
        process = self.spawn(ident, blemu_run(controller, name, prefix, binary))
        process.wait_for(r"event=advertising-started", EVENT_TIMEOUT, what="event=advertising-started")
        return process

    def stop_blemu(self, process: GuestProcess) -> None:
        rc = process.stop()
        if rc != 0:
            raise Failure(f"blemu exited with status {rc} on SIGTERM (a clean stop is 0): {tail(process.output()[0])}")


class GuestSession(Session):
    """The qemu guest: adapters are hci_vhci ones bridged to rootcanal on the host."""

    def __init__(self, guest: Guest, rootcanal: RootCanal, log_dir: Path):
        super().__init__(guest, rootcanal.controller_spec, log_dir)
        self.rootcanal = rootcanal
        self.bridges = 0
        self.bridge: GuestProcess | None = None

    def plug_adapter(self) -> str:
        """A new hci_vhci adapter on rootcanal's radio; returns its name (hciN)."""
        self.bridges += 1
        self.bridge = self.spawn(f"attach{self.bridges}", blemu_attach(self.rootcanal.hci_port))
        text = self.bridge.wait_for(r"hci\d+ up", EVENT_TIMEOUT, what="the vhci adapter")
        return re.findall(r"(hci\d+) up", text)[-1]

    def unplug_adapter(self) -> None:
        """Closing /dev/vhci unregisters the adapter, as pulling a USB adapter does: `blemu
        attach` closes it on SIGTERM and exits 0."""
        assert self.bridge is not None
        rc = self.bridge.stop()
        if rc != 0 or not re.search(r"hci\d+ removed: stopped", self.bridge.output()[0]):
            raise Failure(f"blemu attach did not remove its adapter cleanly on SIGTERM (exit {rc}): "
                          f"{tail(self.bridge.output()[0])}")
        self.bridge = None


class LocalSession(Session):
    """This machine (--adapter): a real adapter, and a central on another controller."""

    def __init__(self, guest: Guest, adapter: str, central_spec: str, log_dir: Path):
        super().__init__(guest, central_spec, log_dir)
        self.given = adapter
        self.usb_device: str | None = None

    def plug_adapter(self) -> str:
        if self.usb_device is not None:  # unplugged by unplug_adapter: authorize it again
            self.guest.run(["sh", "-c", f"echo 1 > {self.usb_device}/authorized"])
        else:
            say_local(f"plug {self.given} back in")
        deadline = time.monotonic() + 120
        while self.given not in self.adapters():
            if time.monotonic() > deadline:
                raise Failure(f"{self.given} did not come back within 120 s")
            time.sleep(0.5)
        return self.given

    def unplug_adapter(self) -> None:
        """A USB adapter is removed by deauthorizing its USB device (sysfs `authorized`), which
        unbinds its driver as pulling it out does; any other adapter is pulled by hand."""
        found = self.guest.run(["sh", "-c", f"d=$(readlink -f /sys/class/bluetooth/{self.given}/device); "
                                "while [ \"$d\" != / ] && [ ! -e \"$d/authorized\" -o -e \"$d/bInterfaceNumber\" ]; "
                                "do d=$(dirname \"$d\"); done; [ -e \"$d/authorized\" ] && echo \"$d\""])["out"].strip()
        if found:
            self.usb_device = found
            self.guest.run(["sh", "-c", f"echo 0 > {found}/authorized"])
        else:
            say_local(f"{self.given} is not a USB device: unplug it (or stop its UART attachment) now")
        deadline = time.monotonic() + 120
        while self.given in self.adapters():
            if time.monotonic() > deadline:
                raise Failure(f"{self.given} did not go away within 120 s")
            time.sleep(0.5)


def say_local(text: str) -> None:
    print(f"kernel: >>> {text}", flush=True)


async def heart_rate_session(controller: str, name: str, notifications: int = 1) -> str:
    """A Bumble central on the host: scan, connect, discover, read 0x2A38, subscribe to 0x2A37."""
    async with Central(controller, name="kernel-central") as central:
        scan, conn = await central.connect_by_name(name, timeout=SCAN_TIMEOUT)
        try:
            await asyncio.wait_for(conn.discover_all(), 60)
            location = await conn.read(conn.characteristic(UUID_BODY_SENSOR_LOCATION, UUID_HEART_RATE_SERVICE), 20)
            if len(location) != 1:
                raise Failure(f"Body Sensor Location is {location.hex()}, not one octet")
            hrm = conn.characteristic(UUID_HEART_RATE_MEASUREMENT, UUID_HEART_RATE_SERVICE)
            await conn.subscribe(hrm, timeout=20)
            got = await collect_notifications(conn, hrm.handle, count=notifications, timeout=30)
            measurement = decode_heart_rate_measurement(got[-1].value)
            return (f"{scan.address}: body sensor location {location[0]}, "
                    f"{len(got)} notification(s), last {measurement.describe()}")
        finally:
            if conn.is_connected:
                try:
                    await conn.disconnect(timeout=10)
                except Exception:
                    pass


def run_async(coroutine, timeout: float):
    async def bounded():
        return await asyncio.wait_for(coroutine, timeout)
    try:
        return asyncio.run(bounded())
    except asyncio.TimeoutError:
        raise Failure(f"the central's scenario did not finish within {timeout:.0f} s") from None
    except AssertionError as error:
        raise Failure(str(error).splitlines()[0]) from None


# --------------------------------------------------------------------------------------------
# The cases, in the order they run on one guest (later ones use the adapter earlier ones plugged)


def case_no_such_adapter(session: Session) -> str:
    """(d) an adapter that does not exist: ENODEV, and blemu's one-line reason."""
    missing = session.missing_adapter()
    return session.expect_refusal(f"blemu-{missing}", blemu_run(missing, "Kernel HR"), "ENODEV",
                                  f"{missing}: no such Bluetooth adapter")


def case_adapter_up_busy(session: Session) -> str:
    """(b) the kernel's host stack has the adapter up: EBUSY; powered off, blemu runs."""
    adapter = session.adapter
    session.btmgmt_power(adapter, True)
    line = session.expect_refusal("blemu-busy", blemu_run(adapter, "Kernel HR"), "EBUSY",
                                  f"{adapter}: the adapter is up or owned by bluetoothd")
    session.btmgmt_power(adapter, False)
    process = session.start_blemu("blemu-after-power-off", adapter, "Kernel HR off")
    session.stop_blemu(process)
    return f"refused with: {line.strip()}; ran after `btmgmt power off`"


def case_unprivileged_eperm(session: Session) -> str:
    """(c) a user without CAP_NET_ADMIN: EPERM."""
    adapter = session.adapter
    session.wait_powered(adapter, False)
    line = session.expect_refusal("blemu-nobody", blemu_run(adapter, "Kernel HR", UNPRIVILEGED), "EPERM",
                                  f"{adapter}: the HCI user channel needs CAP_NET_ADMIN")
    return f"refused with: {line.strip()}"


def case_cap_net_admin_only(session: Session) -> str:
    """(c) the same user with only CAP_NET_ADMIN (ambient) runs, advertises and stops cleanly."""
    adapter = session.adapter
    process = session.start_blemu("blemu-net-admin", adapter, "Kernel HR cap", WITH_NET_ADMIN)
    status = session.guest.run(["sh", "-c", "cat /proc/$(pgrep -f 'Kernel HR cap' | head -1)/status"])["out"]
    uid = re.search(r"^Uid:\s+(\d+)", status, re.MULTILINE)
    effective = re.search(r"^CapEff:\s+([0-9a-f]+)", status, re.MULTILINE)
    session.stop_blemu(process)
    if not uid or not effective:
        raise Failure(f"could not read the process's status: {tail(status)}")
    if uid.group(1) != "65534" or int(effective.group(1), 16) != 1 << 12:
        raise Failure(f"blemu ran as uid {uid.group(1)} with CapEff {effective.group(1)}, not 65534 with CAP_NET_ADMIN only")
    return f"uid 65534, CapEff {effective.group(1)} (CAP_NET_ADMIN only): advertised, exit 0 on SIGTERM"


def case_heart_rate_session(session: Session) -> str:
    """(a) a powered-off adapter: blemu runs; a Bumble central on the host reads and subscribes."""
    adapter = session.adapter
    session.wait_powered(adapter, False)
    session.blemu = session.start_blemu("blemu-session", adapter, "Kernel HR")
    return run_async(heart_rate_session(session.central_spec, "Kernel HR"), 150)


def case_adapter_unplugged(session: Session) -> str:
    """(e) the adapter goes away under a connected central, and comes back: blemu logs it, waits
    (retrying, without exiting), and advertises again on the new adapter without a restart."""
    blemu = session.blemu
    if blemu is None or blemu.output()[1] is not None:
        raise Failure("needs the blemu of heart-rate-session still running")
    notes = []
    connected = blemu.count(r"event=connected\b")
    ups = blemu.count(r"event=controller-up\b")

    async def scenario() -> None:
        async with Central(session.central_spec, name="kernel-central-unplug") as central:
            _, conn = await central.connect_by_name("Kernel HR", timeout=SCAN_TIMEOUT)
            await asyncio.to_thread(blemu.wait_for, r"event=connected\b", EVENT_TIMEOUT, connected + 1, "event=connected")
            await asyncio.to_thread(session.unplug_adapter)
            await asyncio.to_thread(blemu.wait_for, r"event=controller-lost\b", EVENT_TIMEOUT, 1, "event=controller-lost")
            try:
                reason = await conn.wait_disconnected(30)
                notes.append(f"the central was disconnected (0x{reason:02x})")
            except asyncio.TimeoutError:
                notes.append("the central was not told of the disconnection within 30 s")
    run_async(scenario(), 180)
    # Gone for a while: blemu retries (ENODEV) and must not exit.
    blemu.wait_for(r"controller still unreachable.*ENODEV", EVENT_TIMEOUT, 2, "two retries that found no adapter")
    text, rc = blemu.output()
    lost = [line for line in text.splitlines() if "event=controller-lost" in line]
    if not lost or "the adapter was removed" not in lost[-1]:
        raise Failure(f"the loss is not told as an adapter removed: {lost[-1] if lost else 'no controller-lost line'}")
    notes.insert(0, f"logged: {lost[-1].split('  [')[0].strip()}")
    advertising = blemu.count(r"event=advertising-started\b")
    adapter = session.plug_adapter()
    if adapter != session.adapter:
        raise Failure(f"the new adapter is {adapter}, not {session.adapter}: blemu cannot find it")
    plugged = time.monotonic()
    blemu.wait_for(r"event=controller-up\b", RECOVERY_TIMEOUT, ups + 1, "event=controller-up on the new adapter")
    blemu.wait_for(r"event=advertising-started\b", RECOVERY_TIMEOUT, advertising + 1, "advertising on the new adapter")
    notes.append(f"advertising again {time.monotonic() - plugged:.1f} s after the new adapter appeared")
    notes.append("new central: " + run_async(heart_rate_session(session.central_spec, "Kernel HR"), 150))
    if (started := blemu.count(r"event=started\b")) != 1:
        raise Failure(f"blemu logged event=started {started} times: it restarted")
    session.stop_blemu(blemu)
    session.blemu = None
    return "; ".join(notes)


def unit_tools(guest, unit: str):
    """For a case that drives a systemd unit in the guest: `sh` (a command that must succeed, the
    unit's journal in the failure), `journal` (its last lines) and `show` (systemctl show's
    properties of it)."""

    def sh(command: str, timeout: float = 60, what: str | None = None) -> str:
        result = guest.run(["sh", "-c", command], timeout=timeout)
        if result["rc"] != 0:
            raise Failure(f"{what or command} failed ({result['rc']}): {tail(result['out'] + result['err'])}"
                          f"; journal: {journal(8)}")
        return result["out"]

    def journal(lines: int = 12) -> str:
        result = guest.run(["journalctl", "--no-pager", "-o", "cat", "-n", str(lines), "-u", unit], timeout=30)
        return tail(result["out"] + result["err"], lines)

    def show() -> dict[str, str]:
        out = sh(f"systemctl show {unit} -p ActiveState -p SubState -p MainPID -p NRestarts -p StatusText "
                 "-p Result -p ExecMainStatus")
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    return sh, journal, show


def dynamic_user_with_radio_capabilities(sh, pid: str, who: str) -> tuple[int, int]:
    """The uid and effective capabilities of a unit's main process, checked: a DynamicUser, and
    CAP_NET_ADMIN and CAP_NET_RAW (the HCI user channel's) and nothing else."""
    status = sh(f"cat /proc/{pid}/status")
    uid = int(re.search(r"^Uid:\s+(\d+)", status, re.MULTILINE).group(1))
    effective = int(re.search(r"^CapEff:\s+([0-9a-f]+)", status, re.MULTILINE).group(1), 16)
    if not 61184 <= uid <= 65519:  # systemd's DynamicUser range
        raise Failure(f"{who} runs as uid {uid}, not a DynamicUser one")
    if effective != (1 << 12) | (1 << 13):
        raise Failure(f"{who}'s CapEff is {effective:#x}, not CAP_NET_ADMIN and CAP_NET_RAW only")
    return uid, effective


def unit_case(session: Session, unit: str, name: str, body, stop_after: bool = False) -> str:
    """Runs `body(session, sh, journal, show)` (`unit_tools` of `unit`) and keeps the unit's
    journal, which is in the guest's /run, as NAME-journal.log; `stop_after`: the unit is
    stopped after, whatever happened."""
    sh, journal, show = unit_tools(session.guest, unit)
    try:
        return body(session, sh, journal, show)
    finally:
        result = session.guest.run(["journalctl", "--no-pager", "-o", "short-monotonic", "-u", unit], timeout=60)
        (session.log_dir / f"{name}-journal.log").write_text(result["out"] + result["err"])
        if stop_after:
            session.guest.run(["systemctl", "stop", unit], timeout=60)


def start_until_ready(unit: str, sh, journal, show) -> tuple[float, dict[str, str]]:
    """`systemctl start` of a Type=notify unit, which returns once READY=1 came: the seconds it
    took and the unit's properties, checked active and running."""
    started = time.monotonic()
    sh(f"systemctl start {unit}", timeout=120, what=f"systemctl start {unit} (waits for READY=1)")
    ready = time.monotonic() - started
    state = show()
    if (state.get("ActiveState"), state.get("SubState")) != ("active", "running"):
        raise Failure(f"{unit} is {state}; journal: {journal()}")
    return ready, state


def case_systemd_unit(session: Session) -> str:
    """(systemd guest) Docs/systemd/blemu@.service under systemd as PID 1 on hci0, installed as
    Docs/DEPLOYMENT.md says: READY=1 once advertising, DynamicUser with CAP_NET_ADMIN and CAP_NET_RAW
    only, a central's session, the watchdog restarting a stopped blemu, a clean stop."""
    return unit_case(session, "blemu@kernel.service", "systemd-unit", _systemd_unit)


def _systemd_unit(session: Session, sh, journal, show) -> str:
    guest, adapter, unit = session.guest, session.adapter, "blemu@kernel.service"
    session.wait_powered(adapter, False)
    sh(f"install -m 0755 {blemu_bin()} /usr/local/bin/blemu && install -d /etc/blemu && "
       f"printf 'BLEMU_CONTROLLER={adapter}\\nBLEMU_DEVICES=heart-rate\\nBLEMU_OPTIONS=--name KernelUnit\\n' "
       f"> /etc/blemu/kernel.conf && install -m 0644 {REPO}/Docs/systemd/blemu@.service /etc/systemd/system/ "
       "&& systemctl daemon-reload", what="installing the unit")
    ready, state = start_until_ready(unit, sh, journal, show)
    pid = state["MainPID"]
    uid, effective = dynamic_user_with_radio_capabilities(sh, pid, "blemu")
    notes = [f"READY=1 after {ready:.1f} s (status \"{state.get('StatusText', '')}\")",
             f"uid {uid}, CapEff {effective:#x}"]
    notes.append(run_async(heart_rate_session(session.central_spec, "KernelUnit"), 150))

    # The sandbox: as blemu's user, in blemu's mount namespace, only the StateDirectory (and the
    # LogsDirectory, for captures) can be written.
    def can_write(path: str) -> bool:
        result = guest.run(["nsenter", f"--target={pid}", "--mount", f"--setuid={uid}", f"--setgid={uid}",
                            "sh", "-c", f"echo x > {path} && rm -f {path}"], timeout=30)
        return result["rc"] == 0
    writable = {path: can_write(path) for path in ("/var/lib/blemu/kernel/probe", "/var/log/blemu/kernel/probe",
                                                   "/var/lib/blemu/probe", "/etc/blemu-probe",
                                                   "/usr/local/bin/probe", "/root/probe", "/opt/probe")}
    expected = {path: path.startswith(("/var/lib/blemu/kernel/", "/var/log/blemu/kernel/")) for path in writable}
    if writable != expected:
        raise Failure(f"inside the unit's sandbox, writable: {writable} (expected {expected})")
    notes.append("writes only its StateDirectory and LogsDirectory")
    # What a field engineer reads: blemu's own fields and the catalog's MESSAGE_IDs.
    entries = [json.loads(line) for line in sh(f"journalctl --no-pager -o json -u {unit}").splitlines() if line.startswith("{")]
    fields = sorted({key for entry in entries if entry.get("SYSLOG_IDENTIFIER") == "blemu" for key in entry if key.startswith("BLEMU_")})
    with_ids = [entry for entry in entries if entry.get("SYSLOG_IDENTIFIER") == "blemu" and "MESSAGE_ID" in entry]
    if not fields or not with_ids or not any(entry.get("BLEMU_EVENT") == "advertising-started" for entry in entries):
        raise Failure(f"journalctl -u {unit} has BLEMU_ fields {fields} and {len(with_ids)} entries with a MESSAGE_ID")
    notes.append(f"journal: {len(with_ids)} entries with MESSAGE_ID, fields {', '.join(fields[:6])}…")

    # The watchdog: a stopped blemu sends no WATCHDOG=1; systemd aborts it (SIGABRT, then SIGKILL
    # after TimeoutStopSec) and Restart=on-failure starts it again.
    sh(f"kill -STOP {pid}")
    stopped = time.monotonic()
    deadline = stopped + 90
    while True:
        state = show()
        if (int(state.get("NRestarts", "0")) >= 1 and state.get("MainPID") not in ("0", pid)
                and state.get("ActiveState") == "active" and state.get("SubState") == "running"):
            break
        if time.monotonic() > deadline:
            raise Failure(f"no restart within 90 s of stopping blemu ({state}); journal: {journal()}")
        time.sleep(1)
    log = sh(f"journalctl --no-pager -o cat -u {unit}")
    if "Watchdog timeout" not in log:
        raise Failure(f"restarted, but the journal has no watchdog timeout: {journal()}")
    notes.append(f"watchdog restart {time.monotonic() - stopped:.0f} s after SIGSTOP")

    # `systemctl stop` with a central connected: the central is told (not left to time out).
    async def stop_while_connected() -> str:
        async with Central(session.central_spec, name="kernel-central-stop") as central:
            _, conn = await central.connect_by_name("KernelUnit", timeout=SCAN_TIMEOUT)
            await asyncio.to_thread(sh, f"systemctl stop {unit}", 60)
            reason = await conn.wait_disconnected(20)
            return f"systemctl stop disconnected the central (0x{reason:02x})"
    notes.append(run_async(stop_while_connected(), 120))
    state = show()
    if state.get("Result") != "success" or state.get("ExecMainStatus") != "0":
        raise Failure(f"the stop was not clean: {state}; journal: {journal()}")
    notes.append("clean stop (status 0)")
    return "; ".join(notes)


def case_systemd_two_instances(session: Session) -> str:
    """(systemd guest) two instances of Docs/systemd/blemu@.service at once, blemu@a on hci0 and
    blemu@b on the host's rootcanal over tcp: (one air): each with its own user, state, captures
    and control socket; stopping one leaves the other's in place and answering; a single
    instance's state from before the per-instance directories, moved as Docs/DEPLOYMENT.md says."""
    guest = session.guest
    assert isinstance(session, GuestSession)
    units = ("blemu-single@a.service", "blemu@a.service", "blemu@b.service")

    def sh(command: str, timeout: float = 60, what: str | None = None) -> str:
        result = guest.run(["sh", "-c", command], timeout=timeout)
        if result["rc"] != 0:
            journal = guest.run(["journalctl", "--no-pager", "-o", "cat", "-n", "12", *(f"-u{u}" for u in units)],
                                timeout=30)
            raise Failure(f"{what or command} failed ({result['rc']}): {tail(result['out'] + result['err'])}"
                          f"; journal: {tail(journal['out'] + journal['err'], 12)}")
        return result["out"]

    try:
        return _systemd_two_instances(session, sh)
    finally:
        result = guest.run(["journalctl", "--no-pager", "-o", "short-monotonic", *(f"-u{u}" for u in units)], timeout=60)
        (session.log_dir / "systemd-two-instances-journal.log").write_text(result["out"] + result["err"])
        guest.run(["systemctl", "stop", *units], timeout=60)


# The template's directories before they were one per instance, as a drop-in for a copy of it
# (blemu-single@.service): what a single-instance user has. Its ExecStart is without a.conf's
# --control, whose directory it has not.
SINGLE_INSTANCE_DIRECTORIES = """[Service]
User=
StateDirectory=
StateDirectory=blemu
LogsDirectory=
LogsDirectory=blemu
RuntimeDirectory=
RuntimeDirectory=blemu
ExecStart=
ExecStart=/usr/local/bin/blemu run $BLEMU_DEVICES --name KernelA --privacy --btsnoop /var/log/blemu/%i.btsnoop --btsnoop-max 10M
"""


def migration_commands(name: str) -> str:
    """Docs/DEPLOYMENT.md's commands that move a single instance's state into its instance's
    directories (the sh block with /var/lib/private in it), for instance `name`, run as root."""
    text = (REPO / "Docs/DEPLOYMENT.md").read_text()
    blocks = [block for block in re.findall(r"```sh\n(.*?)```", text, re.DOTALL) if "/var/lib/private" in block]
    if len(blocks) != 1:
        raise Failure(f"Docs/DEPLOYMENT.md has {len(blocks)} sh blocks that move state into /var/lib/private, not 1")
    script = blocks[0].replace("name=bench", f"name={name}").replace("sudo ", "")
    return "set -e\n" + script


def _systemd_two_instances(session: GuestSession, sh) -> str:
    adapter = session.adapter
    session.wait_powered(adapter, False)
    tcp = f"tcp:10.0.2.2:{session.rootcanal.hci_port}"
    # --privacy: each device makes its identity file (its IRK) in $STATE_DIRECTORY at the first
    # start. Instance a first runs as a single instance did before the directories were one per
    # instance (blemu-single@a, one daemon-reload for both: a reload takes seconds under TCG).
    # The binary is installed once a boot (systemd-unit may have).
    sh(f"(test -x /usr/local/bin/blemu || install -m 0755 {blemu_bin()} /usr/local/bin/blemu) && install -d /etc/blemu && "
       f"printf 'BLEMU_CONTROLLER={adapter}\\nBLEMU_DEVICES=heart-rate\\n"
       "BLEMU_OPTIONS=--name KernelA --privacy --control /run/blemu/a/control.sock\\n' > /etc/blemu/a.conf && "
       f"printf 'BLEMU_CONTROLLER={tcp}\\nBLEMU_DEVICES=thermostat\\n"
       "BLEMU_OPTIONS=--name KernelB --privacy --control /run/blemu/b/control.sock\\n' > /etc/blemu/b.conf && "
       f"install -m 0644 {REPO}/Docs/systemd/blemu@.service /etc/systemd/system/ && "
       "rm -rf /var/lib/blemu /var/lib/private/blemu /var/log/blemu /var/log/private/blemu && "
       "cp /etc/systemd/system/blemu@.service /etc/systemd/system/blemu-single@.service && "
       "install -d /etc/systemd/system/blemu-single@.service.d && "
       "cat > /etc/systemd/system/blemu-single@.service.d/single.conf <<'EOF'\n" + SINGLE_INSTANCE_DIRECTORIES + "EOF\n"
       "systemctl daemon-reload", what="installing the units")
    notes = []

    # A single instance as the template used to run it: state straight in /var/lib/blemu.
    sh("systemctl start blemu-single@a", timeout=120, what="the single instance blemu-single@a")
    sh("systemctl stop blemu-single@a", timeout=60)
    old_identity = sh("cat /var/lib/blemu/identity-*.json", what="the single instance's identity file")
    # What Docs/DEPLOYMENT.md says to do ("Several instances on one machine"), the unit stopped.
    sh(migration_commands("a"), what="the move Docs/DEPLOYMENT.md gives")

    started = time.monotonic()
    sh("systemctl start blemu@a blemu@b", timeout=150, what="systemctl start blemu@a blemu@b (READY=1 from both)")
    notes.append(f"both READY=1 after {time.monotonic() - started:.1f} s")
    pids, uids = {}, {}
    for name in ("a", "b"):
        state = dict(line.split("=", 1) for line in
                     sh(f"systemctl show blemu@{name} -p ActiveState -p SubState -p MainPID").splitlines() if "=" in line)
        if (state.get("ActiveState"), state.get("SubState")) != ("active", "running"):
            raise Failure(f"blemu@{name} is {state}")
        pids[name] = state["MainPID"]
        uids[name] = int(re.search(r"^Uid:\s+(\d+)", sh(f"cat /proc/{pids[name]}/status"), re.MULTILINE).group(1))
    if uids["a"] == uids["b"]:
        raise Failure(f"both instances run as uid {uids['a']}")

    def listed(name: str) -> str:
        return sh(f"/usr/local/bin/blemu ctl /run/blemu/{name}/control.sock list", what=f"blemu ctl on blemu@{name}'s socket")
    if "KernelA" not in listed("a") or "KernelB" not in listed("b"):
        raise Failure(f"the control sockets answer for the wrong devices: a {listed('a')!r}, b {listed('b')!r}")
    new_identity = sh("cat /var/lib/blemu/a/identity-*.json", what="blemu@a's identity file after the move")
    if new_identity != old_identity:
        raise Failure("blemu@a made a new identity instead of keeping the one it had before the move")
    files = {name: sh(f"ls /var/lib/blemu/{name} /var/log/blemu/{name}").split() for name in ("a", "b")}
    if not any(entry.startswith("identity-thermostat") for entry in files["b"]) or \
            any("thermostat" in entry for entry in files["a"]) or any("heart-rate" in entry for entry in files["b"]) or \
            "a.btsnoop" not in files["a"] or "b.btsnoop" not in files["b"]:
        raise Failure(f"the instances' files are not each in their own directories: {files}")
    notes.append(f"uids {uids['a']} and {uids['b']}; the moved identity kept; state and captures each in its own directory")

    # Each sandbox sees and writes its own directories only.
    def can_write(name: str, path: str) -> bool:
        result = session.guest.run(["nsenter", f"--target={pids[name]}", "--mount", f"--setuid={uids[name]}",
                                    f"--setgid={uids[name]}", "sh", "-c", f"echo x > {path} && rm -f {path}"], timeout=30)
        return result["rc"] == 0
    writable = {path: can_write("a", path) for path in ("/var/lib/blemu/a/probe", "/var/log/blemu/a/probe",
                                                        "/var/lib/blemu/b/probe", "/var/log/blemu/b/probe",
                                                        "/run/blemu/b/probe", "/var/lib/blemu/probe")}
    if writable != {path: "/a/" in path for path in writable}:
        raise Failure(f"inside blemu@a's sandbox, writable: {writable}")

    sh("systemctl stop blemu@a", timeout=60)
    left = sh("ls -a /run/blemu; ls /run/blemu/b /var/lib/blemu/a /var/lib/blemu/b")
    if sh("test -e /run/blemu/a || echo gone").strip() != "gone" or "control.sock" not in left \
            or not any(entry.startswith("identity-heart-rate") for entry in left.split()) \
            or not any(entry.startswith("identity-thermostat") for entry in left.split()):
        raise Failure(f"after stopping blemu@a: {left!r}")
    if "KernelB" not in listed("b"):
        raise Failure("blemu@b's control socket no longer answers after blemu@a stopped")
    if sh("systemctl is-active blemu@b").strip() != "active":
        raise Failure("blemu@b stopped with blemu@a")
    notes.append("blemu@a stopped: its /run/blemu/a removed, blemu@b's socket answers, both state directories kept")
    sh("systemctl stop blemu@b", timeout=60)
    return "; ".join(notes)


def case_systemd_chat(session: Session) -> str:
    """(systemd guest) Docs/systemd/blemu-chat@.service as Docs/CHAT.md installs it: blemu-chat@kitchen
    hosts a room on hci0 (READY=1, STATUS=), a member on the host's rootcanal joins and its line is
    in the unit's journal beside blemu's fields, the identity outlives a restart, only the state
    directory can be written, and a name pinned as CHAT.md says holds."""
    return unit_case(session, "blemu-chat@kitchen.service", "systemd-chat", _systemd_chat, stop_after=True)


def chat_service_conf() -> dict[str, str]:
    """Docs/CHAT.md's /etc/blemu/chat-kitchen.conf ("As a service"): its variables."""
    text = (REPO / "Docs/CHAT.md").read_text()
    section = text[text.index("## As a service"):]
    conf = dict(re.findall(r"^(BLEMU_[A-Z_]+)=(.*)$", section, re.MULTILINE))
    if set(conf) != {"BLEMU_CONTROLLER", "BLEMU_CHAT_OPTIONS"}:
        raise Failure(f"Docs/CHAT.md's chat-kitchen.conf sets {sorted(conf)}, not BLEMU_CONTROLLER and BLEMU_CHAT_OPTIONS")
    return conf


def chat_pin_commands() -> str:
    """Docs/CHAT.md's commands that pin and forget a name for the service's instance (the sh block
    with --pin-name and chown in it), run as root."""
    text = (REPO / "Docs/CHAT.md").read_text()
    blocks = [block for block in re.findall(r"```sh\n(.*?)```", text, re.DOTALL) if "--pin-name" in block and "chown" in block]
    if len(blocks) != 1:
        raise Failure(f"Docs/CHAT.md has {len(blocks)} sh blocks that pin a name and chown, not 1")
    return "set -e\n" + blocks[0].replace("sudo ", "")


class HostChatMember:
    """`blemu chat --role central` on the host, on the rootcanal the guest's hci0 is bridged to:
    its stdin held open until `finish()`, so its line is sent and it stays in the room meanwhile."""

    def __init__(self, session: Session, state_dir: Path, name: str):
        self.log_path = session.log_dir / f"chat-member-{name}.log"
        self.log = open(self.log_path, "wb")
        self.process = subprocess.Popen(
            [blemu_bin(), "chat", "--role", "central", "--room", "kitchen", "--name", name, "--controller", session.central_spec,
             "--state-dir", str(state_dir), "--exit-on-eof", "--log", "stderr", "--log-level", "info"],
            stdin=subprocess.PIPE, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    def say(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write((line + "\n").encode())
        self.process.stdin.flush()

    def text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def finish(self, timeout: float = 60) -> int:
        """stdin ends: the member exits 0 once its lines are delivered."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
            raise Failure(f"the host's chat member did not exit within {timeout:.0f} s of its stdin ending: {tail(self.text())}")
        finally:
            self.log.close()


def _systemd_chat(session: Session, sh, journal, show) -> str:
    guest, adapter, unit = session.guest, session.adapter, "blemu-chat@kitchen.service"
    state = "/var/lib/blemu/chat-kitchen"
    session.wait_powered(adapter, False)
    conf = chat_service_conf()
    # The doc's file, on the session's adapter (hci0 in the doc).
    sh(f"(test -x /usr/local/bin/blemu || install -m 0755 {blemu_bin()} /usr/local/bin/blemu) && install -d /etc/blemu && "
       f"printf 'BLEMU_CONTROLLER={adapter}\\nBLEMU_CHAT_OPTIONS={conf['BLEMU_CHAT_OPTIONS']}\\n' > /etc/blemu/chat-kitchen.conf && "
       f"install -m 0644 {REPO}/Docs/systemd/blemu-chat@.service /etc/systemd/system/ && "
       "rm -rf /var/lib/blemu/chat-kitchen /var/lib/private/blemu/chat-kitchen && systemctl daemon-reload",
       what="installing the unit")
    notes = []

    # Type=notify: `systemctl start` returns once READY=1 came (the room hosted and advertised).
    ready, status = start_until_ready(unit, sh, journal, show)
    if status.get("StatusText") != "room kitchen: hosting, 0 members":
        raise Failure(f"{unit}'s status is {status.get('StatusText')!r}, not 'room kitchen: hosting, 0 members'")
    pid = status["MainPID"]
    uid, effective = dynamic_user_with_radio_capabilities(sh, pid, "blemu chat")
    stdin = sh(f"readlink /proc/{pid}/fd/0").strip()
    if stdin != "/dev/null":
        raise Failure(f"blemu chat's stdin is {stdin!r}, not /dev/null")
    notes.append(f"READY=1 after {ready:.1f} s (status \"{status['StatusText']}\"), uid {uid}, CapEff {effective:#x}")

    # The host's identity, as CHAT.md shows it, and its file.
    def identity() -> tuple[str, str]:
        shown = sh(f"/usr/local/bin/blemu chat --identity --state-dir {state} --name kitchen", what="blemu chat --identity")
        return shown, sh(f"sha256sum {state}/chat-identity").split()[0]
    before = identity()
    if not re.match(r"kitchen( [0-9a-f]{4}){4}\nkitchen=[0-9a-f]{64}\n$", before[0]):
        raise Failure(f"blemu chat --identity printed {before[0]!r}")

    # A member on the host's side of the radio joins, says a line and stays until it is checked.
    line = f"hello from the host side {os.getpid()}"
    with tempfile.TemporaryDirectory(prefix="blemu-chat-member-") as member_state:
        member = HostChatMember(session, Path(member_state), "kernel-member")
        try:
            member.say(line)
            deadline = time.monotonic() + 90
            while f"[kernel-member] {line}" not in sh(f"journalctl --no-pager -o cat -u {unit}"):
                if member.process.poll() is not None:
                    raise Failure(f"the member exited ({member.process.returncode}) before its line reached the host: "
                                  f"{tail(member.text())}; journal: {journal()}")
                if time.monotonic() > deadline:
                    raise Failure(f"the member's line is not in the unit's journal within 90 s: member {tail(member.text())}; "
                                  f"journal: {journal()}")
                time.sleep(1)
            deadline = time.monotonic() + 20
            while (text := show().get("StatusText")) != "room kitchen: hosting, 1 member":
                if time.monotonic() > deadline:
                    raise Failure(f"with the member in the room the status is {text!r}, not 'room kitchen: hosting, 1 member'")
                time.sleep(0.5)
        finally:
            rc = member.finish()
        if rc != 0:
            raise Failure(f"the member exited with status {rc} at the end of its stdin: {tail(member.text())}")
    notes.append("a member on the host's side joined (status \"room kitchen: hosting, 1 member\"); its line is in the journal")

    # What a field engineer reads: blemu's own fields beside the room's lines (stdout).
    entries = [json.loads(text) for text in sh(f"journalctl --no-pager -o json -u {unit}").splitlines() if text.startswith("{")]
    ours = [entry for entry in entries if entry.get("SYSLOG_IDENTIFIER") == "blemu"]
    events = sorted({entry["BLEMU_EVENT"] for entry in ours if "BLEMU_EVENT" in entry})
    with_ids = [entry for entry in ours if "MESSAGE_ID" in entry]
    said = [entry for entry in ours if entry.get("MESSAGE") == f"[kernel-member] {line}"]
    if not {"started", "connected"} <= set(events) or not with_ids:
        raise Failure(f"journalctl -u {unit} has BLEMU_EVENT values {events} and {len(with_ids)} entries with a MESSAGE_ID")
    if len(said) != 1 or said[0].get("_TRANSPORT") != "stdout":
        raise Failure(f"the member's line is in the journal {len(said)} times, as {[entry.get('_TRANSPORT') for entry in said]}")
    fields = sorted({key for entry in ours for key in entry if key.startswith("BLEMU_")})
    notes.append(f"journal: BLEMU_EVENT {', '.join(events)}; {len(with_ids)} entries with MESSAGE_ID; fields {', '.join(fields[:5])}…")

    # The sandbox: as the unit's user, in its mount namespace, only the state directory is writable.
    def can_write(path: str) -> bool:
        result = guest.run(["nsenter", f"--target={pid}", "--mount", f"--setuid={uid}", f"--setgid={uid}",
                            "sh", "-c", f"echo x > {path} && rm -f {path}"], timeout=30)
        return result["rc"] == 0
    writable = {path: can_write(path) for path in (f"{state}/probe", "/var/lib/blemu/probe", "/var/log/blemu/probe",
                                                   "/etc/blemu/probe", "/run/probe", "/usr/local/bin/probe", "/root/probe")}
    if writable != {path: path.startswith(state + "/") for path in writable}:
        raise Failure(f"inside the unit's sandbox, writable: {writable}")
    files = sh(f"ls {state}").split()
    # chat-numbers comes with the node's first own line (this one says none), the names with the
    # member's; its marks 5 s after its line or at the clean stop (below).
    if "chat-identity" not in files or not any(name.startswith("chat-names-") for name in files):
        raise Failure(f"the state directory holds {files}")
    notes.append(f"writes only {state} ({', '.join(files)})")

    # A restart (as a reboot would): the same key, from the state directory.
    sh(f"systemctl restart {unit}", timeout=120, what=f"systemctl restart {unit}")
    after = identity()
    if after != before:
        raise Failure(f"the identity changed across a restart: {before} then {after}")
    member_hex = "kernel-member".encode().hex()
    if not re.search(rf"^{member_hex} [0-9a-f]{{64}} \d+$", sh(f"cat {state}/chat-marks-*", what="the marks file"), re.MULTILINE):
        raise Failure(f"the member's mark was not kept across the restart: {sh(f'ls {state}')}")
    if show().get("StatusText") != "room kitchen: hosting, 0 members":
        raise Failure(f"after the restart the status is {show().get('StatusText')!r}")
    notes.append(f"the identity ({before[0].splitlines()[0]}) and the member's mark outlived a restart")

    # A name pinned as CHAT.md says (stopped, as root, then the directory given back): the
    # restarted node reads it. Without the chown, the file root wrote cannot be read by the unit.
    commands = chat_pin_commands()
    key = re.search(r"--pin-name alice=([0-9a-f]{64})", commands).group(1)
    pinned = re.compile(rf"^616c696365 {key} pinned$", re.MULTILINE)  # "alice" in hex, as chat-names-HEX keeps names
    sh(f"systemctl stop {unit} && /usr/local/bin/blemu chat --state-dir {state} --room kitchen --pin-name alice={key}",
       what="a pin without giving the directory back")
    if not pinned.search(sh(f"cat {state}/chat-names-*")):
        raise Failure("blemu chat --pin-name did not pin alice")
    sh(f"systemctl start {unit}", timeout=120)
    if "cannot be read" not in journal(30) or pinned.search(sh(f"cat {state}/chat-names-*")):
        raise Failure(f"a names file root wrote was read by the unit: {journal()}")
    sh(commands, timeout=180, what="Docs/CHAT.md's pin, as root")
    names = sh(f"cat {state}/chat-names-*")
    owners = set(sh(f"stat -c %u {state}/ {state}/*").split())
    if not pinned.search(names) or len(owners) != 1:
        raise Failure(f"after CHAT.md's pin the names file is {names!r}, owned by {owners}")
    status = show()
    if (status.get("ActiveState"), status.get("StatusText")) != ("active", "room kitchen: hosting, 0 members"):
        raise Failure(f"after CHAT.md's pin {unit} is {status}; journal: {journal()}")
    notes.append("a name pinned as CHAT.md says is kept (without the chown the unit could not read it)")

    # `systemctl stop`: the clean stop, status 0.
    sh(f"systemctl stop {unit}", timeout=60)
    status = show()
    if status.get("Result") != "success" or status.get("ExecMainStatus") != "0":
        raise Failure(f"the stop was not clean: {status}; journal: {journal()}")
    if "stopping on SIGTERM" not in journal(20):
        raise Failure(f"no 'stopping on SIGTERM' in the journal: {journal()}")
    notes.append("clean stop (status 0)")
    return "; ".join(notes)


def case_two_devices_one_adapter(session: Session) -> str:
    """Two devices on one hci0: each in its own extended advertising set; a central connects to
    both at once and each answers as itself."""
    adapter = session.adapter
    session.wait_powered(adapter, False)
    process = session.spawn("blemu-two", [blemu_bin(), "run", "heart-rate", "thermostat", "--controller", adapter,
                                          "--log", "stderr", "--log-level", "debug"])
    process.wait_for(r"event=advertising-started", EVENT_TIMEOUT, 2, "event=advertising-started for both devices")

    async def scenario() -> str:
        # A central each (rootcanal routes two links between the same two controllers badly).
        async with Central(session.central_spec, name="kernel-central-hr") as one, \
                Central(session.central_spec, name="kernel-central-th") as two:
            hr_scan, heart = await one.connect_by_name("blemu Heart Rate", timeout=SCAN_TIMEOUT)
            th_scan, thermostat = await two.connect_by_name("blemu Thermostat", timeout=SCAN_TIMEOUT)
            if hr_scan.address == th_scan.address:
                raise Failure(f"both devices advertise from {hr_scan.address}")
            await asyncio.wait_for(heart.discover_all(), 60)
            await asyncio.wait_for(thermostat.discover_all(), 60)
            location = await heart.read(heart.characteristic(UUID_BODY_SENSOR_LOCATION, UUID_HEART_RATE_SERVICE), 20)
            target = await thermostat.read(thermostat.characteristic(UUID_TARGET_TEMPERATURE, UUID_THERMOSTAT_SERVICE), 20)
            if len(location) != 1 or len(target) != 2:
                raise Failure(f"Body Sensor Location {location.hex()}, Target Temperature {target.hex()}")
            celsius = int.from_bytes(target, "little", signed=True) / 100
            for conn in (heart, thermostat):
                await conn.disconnect(timeout=10)
            return (f"heart rate at {hr_scan.address} (location {location[0]}), thermostat at {th_scan.address} "
                    f"(target {celsius:.2f} °C), both connected at once")

    try:
        return run_async(scenario(), 150)
    finally:
        session.stop_blemu(process)


def case_lock_paired_over_hci0(session: Session) -> str:
    """The lock on hci0 with a passkey: unpaired, its control point answers Insufficient
    Authentication; a central pairs with Passkey Entry (LE Secure Connections, bonding) through
    the kernel's user channel, and unlocks."""
    from bumble.att import ATT_Error
    from bumble.pairing import PairingConfig, PairingDelegate

    class Keyboard(PairingDelegate):
        def __init__(self) -> None:
            super().__init__(io_capability=PairingDelegate.KEYBOARD_INPUT_ONLY)

        async def get_number(self) -> int | None:
            return LOCK_PASSKEY

    adapter = session.adapter
    session.wait_powered(adapter, False)
    state = "/run/blemu-kernel-lock-state"   # writable in both guests (busybox: only /run)
    process = session.spawn("blemu-lock", [blemu_bin(), "run", "lock", "--controller", adapter, "--name", "Kernel Lock",
                                           "--passkey", str(LOCK_PASSKEY), "--pin", LOCK_PIN.decode(), "--state-dir", state,
                                           "--log", "stderr", "--log-level", "debug"])
    process.wait_for(r"event=advertising-started", EVENT_TIMEOUT, what="event=advertising-started")

    async def scenario() -> str:
        async with Central(session.central_spec, name="kernel-central-lock") as central:
            central.device.pairing_config_factory = lambda _connection: PairingConfig(
                sc=True, mitm=True, bonding=True, delegate=Keyboard())
            scan, conn = await central.connect_by_name("Kernel Lock", timeout=SCAN_TIMEOUT)
            await asyncio.wait_for(conn.discover_all(), 60)
            control_point = conn.characteristic(UUID_LOCK_CONTROL_POINT, UUID_LOCK_SERVICE)
            await conn.subscribe(control_point)
            try:
                await conn.write(control_point, bytes([0x02]) + LOCK_PIN)
            except ATT_Error as error:
                if error.error_code != 0x05:
                    raise Failure(f"unpaired unlock refused with {error}, not Insufficient Authentication (0x05)")
            else:
                raise Failure("an unpaired central unlocked the lock")
            await asyncio.wait_for(conn.connection.pair(), 60)
            if not (conn.connection.is_encrypted and conn.connection.authenticated):
                raise Failure("the link is not encrypted with an authenticated key after Passkey Entry")
            mark = len(conn.indications)
            await conn.write(control_point, bytes([0x02]) + LOCK_PIN)
            deadline = time.monotonic() + 10
            while len(conn.indications) <= mark and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            answers = [i.value for i in conn.indications[mark:] if i.handle == control_point.handle]
            if not answers or answers[0] != bytes([0x80, 0x02, 0x01]):
                raise Failure(f"the paired unlock got {[a.hex() for a in answers]}, not success (800201)")
            await conn.disconnect(timeout=10)
            return f"{scan.address}: 0x05 unpaired; Passkey Entry (SC, authenticated) through hci0; then unlocked"

    try:
        result = run_async(scenario(), 150)
        process.wait_for(r"event=paired\b", EVENT_TIMEOUT, what="event=paired")
        bonds = session.guest.run(["sh", "-c", f"ls {state}"])["out"].split()
        if not any(name.startswith("bonds-lock-") for name in bonds):
            raise Failure(f"no bond file in {state}: {bonds}")
        return result + "; bonded (bond file written)"
    finally:
        session.stop_blemu(process)


class BlueZInGuest:
    """BlueZ in the guest for a real app: the system bus (unless systemd started it), bluetoothd
    on an adapter of its own (the session's stays with blemu's cases), and the app; all stopped
    on leaving, and the session's adapter, which bluetoothd's AutoEnable powered on too, powered
    off again for the cases after."""

    def __init__(self, session: Session, label: str):
        assert isinstance(session, GuestSession)
        self.session, self.label = session, label
        self.started: list[GuestProcess] = []
        self.adapter = ""

    def __enter__(self) -> "BlueZInGuest":
        session = self.session
        try:
            for path in (APP_PYTHON, BLUETOOTHD, "/usr/bin/dbus-daemon"):
                if session.guest.run(["test", "-x", path])["rc"] != 0:
                    raise Failure(f"{path} is missing in the guest (scripts/setup --tests: bluez, dbus, the .venv with bleak)")
            bridge = self.spawn(f"{self.label}-attach", blemu_attach(session.rootcanal.hci_port))
            self.adapter = re.findall(r"(hci\d+) up", bridge.wait_for(r"hci\d+ up", EVENT_TIMEOUT, what="the vhci adapter"))[-1]
            session.adapter_settings(self.adapter)
            if session.guest.run(["test", "-S", "/run/dbus/system_bus_socket"])["rc"] != 0:
                session.guest.run(["mkdir", "-p", "/run/dbus"])
                dbus = self.spawn(f"{self.label}-dbus-daemon", ["dbus-daemon", "--system", "--nofork", "--nopidfile"])
                deadline = time.monotonic() + EVENT_TIMEOUT
                while session.guest.run(["test", "-S", "/run/dbus/system_bus_socket"])["rc"] != 0:
                    if time.monotonic() > deadline or dbus.output()[1] is not None:
                        raise Failure(f"the system bus did not come up: {tail(dbus.output()[0])}")
                    time.sleep(0.5)
            bluetoothd = self.spawn(f"{self.label}-bluetoothd", [BLUETOOTHD, "--nodetach", "--debug"])
            try:
                session.wait_powered(self.adapter, True)  # bluetoothd's AutoEnable powers it on
            except Failure as failure:
                text, rc = bluetoothd.output()
                errors = [line for line in text.splitlines() if "Key file does not have" not in line][-4:]
                raise Failure(f"{failure}; bluetoothd (exit {rc}): {' | '.join(errors)}") from None
        except BaseException:
            self.__exit__()
            raise
        return self

    def spawn(self, ident: str, cmd: list[str]) -> GuestProcess:
        process = self.session.spawn(ident, cmd)
        self.started.append(process)
        return process

    def app(self, *arguments: str) -> GuestProcess:
        return self.spawn(f"{self.label}-app", [APP_PYTHON, "-u", BLEAK_APP, self.adapter, *arguments])

    def logs(self) -> str:
        return " || ".join(f"{p.ident}: {tail(p.output()[0], 4)}" for p in self.started if not p.ident.endswith("-bluetoothd"))

    def __exit__(self, *_exc: object) -> None:
        session = self.session
        for process in reversed(self.started):  # the app, bluetoothd, dbus, then the adapter
            if process.output()[1] is None:
                session.guest.signal(process.ident, signal.SIGTERM)
                if session.guest.wait(process.ident, 20) is None:
                    session.guest.signal(process.ident, signal.SIGKILL)
                    session.guest.wait(process.ident, 5)
        if any(process.ident.endswith("-dbus-daemon") for process in self.started):
            # Its socket stays behind: the next case would take it for a running bus.
            session.guest.run(["rm", "-f", "/run/dbus/system_bus_socket"])
        self.started.clear()
        if session.adapter is not None and session.adapter in session.adapters() \
                and "powered" in session.adapter_settings(session.adapter).split():
            session.btmgmt_power(session.adapter, False)


def host_blemu(session: Session, device: str, name: str, options: list[str] | None = None):
    """blemu on the host, its controller the rootcanal the guest's adapters are bridged to,
    started by the Python kit (Docs/TESTING-APPS.md), which then drives and asserts."""
    from blemu_testkit import Blemu

    blemu = Blemu(device, controller=session.central_spec, name=name, options=options or [], binary=blemu_bin(),
                  log_dir=session.log_dir, log_level="debug")
    return blemu.start(timeout=EVENT_TIMEOUT)


def notifications_follow(app: GuestProcess, blemu, bpm: int, near) -> int:
    """`set bpm` on the host's blemu, then the app's notifications (its lines `app: notification
    2a37 HEX bpm=N`) reach it: the first near one (the heart wanders around its rate)."""
    mark = app.count(r"^app: notification 2a37 ")
    blemu.set("bpm", bpm)
    deadline = time.monotonic() + EVENT_TIMEOUT
    while True:
        text, rc = app.output()
        seen = [int(n) for n in re.findall(r"^app: notification 2a37 \S+ bpm=(\d+)$", text, re.MULTILINE)][mark:]
        hits = [n for n in seen if near(n)]
        if hits:
            return hits[0]
        if rc is not None or time.monotonic() > deadline:
            raise Failure(f"after `set bpm {bpm}` the app saw {seen[-8:]} (exit {rc}): {tail(text)}")
        time.sleep(0.5)


def case_bleak_heart_rate(session: Session) -> str:
    """A real Linux app: bleak over BlueZ's bluetoothd in the guest, against blemu's heart-rate on
    the host's rootcanal, driven and asserted by the Python kit: discovery, a read, and
    notifications that follow `set bpm`."""
    notes = []
    with BlueZInGuest(session, "bleak-hr") as bluez:
        blemu = host_blemu(session, "heart-rate", "Kernel Bleak HR")
        try:
            app = bluez.app("heart-rate", "Kernel Bleak HR")
            blemu.wait_for("connected", timeout=90)
            blemu.wait_for("read", uuid="2A38", timeout=EVENT_TIMEOUT)
            blemu.wait_for("subscribed", uuid="2A37", timeout=EVENT_TIMEOUT)
            app.wait_for(r"^app: subscribed 2a37$", EVENT_TIMEOUT, what="the app's subscription")
            found = re.search(r"^app: found (\S+)", app.output()[0], re.MULTILINE)
            notes.append(f"bleak found {found.group(1) if found else '?'}, read 2A38, subscribed to 2A37")

            high = notifications_follow(app, blemu, 150, lambda n: 135 <= n <= 165)
            low = notifications_follow(app, blemu, 45, lambda n: 30 <= n <= 60)
            notes.append(f"its notifications followed set bpm 150 ({high}) and 45 ({low})")
            blemu.mark()
            session.guest.signal(app.ident, signal.SIGTERM)
            rc = session.guest.wait(app.ident, EVENT_TIMEOUT)
            if rc != 0:
                raise Failure(f"the app exited with status {rc}: {tail(app.output()[0])}")
            blemu.wait_for("unsubscribed", uuid="2A37", timeout=EVENT_TIMEOUT)
            blemu.wait_for("disconnected", timeout=EVENT_TIMEOUT)
            notes.append("it unsubscribed and disconnected")
            return "; ".join(notes)
        except AssertionError as error:  # the kit's EventTimeout / UnexpectedEvent
            raise Failure(f"{str(error).splitlines()[0]}; {bluez.logs()}") from None
        finally:
            blemu.stop()


def case_bleak_thermostat(session: Session) -> str:
    """A real Linux app pairs: bleak writes the thermostat's target, blemu refuses it unencrypted
    (0x05), BlueZ pairs Just Works (asking the app's agent) and retries; on reconnection BlueZ
    encrypts with the bond and the write goes through without a new pairing; a service taken
    out, BlueZ's cache follows it."""
    from blemu_testkit.control import event_matches

    target = "7d3c0101-9a5e-4d1a-8f6e-5c1b2d3e4f50"

    def wrote(value: str, before: dict) -> bool:
        return any(event_matches(e, "write", {"uuid": target, "value": value}) and e["seq"] < before["seq"]
                   for e in blemu.history)

    with BlueZInGuest(session, "bleak-th") as bluez:
        blemu = host_blemu(session, "thermostat", "Kernel Bleak TH")
        try:
            session.guest.run(["rm", "-f", "/run/blemu-kernel-bleak-go"])
            app = bluez.app("thermostat", "Kernel Bleak TH")
            blemu.wait_for("connected", timeout=90)
            blemu.wait_for("read", uuid=target, timeout=EVENT_TIMEOUT)
            # BlueZ may pair before the app's read (its EATT channel refused for encryption asks
            # for it): `paired` is then already in the history, behind the read just matched.
            paired = next((e for e in blemu.history if e.get("event") == "paired"), None) \
                or blemu.wait_for("paired", timeout=EVENT_TIMEOUT)
            if paired.get("method") != "just-works" or not paired.get("bonded"):
                raise Failure(f"BlueZ's pairing was {paired}, not a bonded Just Works")
            # BlueZ retries the write once the link is encrypted, which may be before the
            # pairing's key distribution ends (`paired`): look for it on either side.
            written = blemu.wait_for("disconnected", timeout=EVENT_TIMEOUT)
            if not wrote("6608", written):
                raise Failure(f"no write of 6608 on the first connection; {bluez.logs()}")
            # The second connection: encrypted with the bond, no pairing, then the write.
            blemu.mark()
            blemu.wait_for("connected", timeout=90)
            encrypted = blemu.wait_for("encrypted", timeout=EVENT_TIMEOUT)
            if not wrote("9808", blemu.wait_for("disconnected", timeout=EVENT_TIMEOUT)):
                raise Failure(f"no write of 9808 on the second connection; {bluez.logs()}")
            # A service taken out while the bonded app is away: BlueZ's cache must follow it.
            text = app.output()[0]
            before = re.findall(r"^app: services (\S+)$", text, re.MULTILINE)
            if not before or "180f" not in before[-1].split(","):
                raise Failure(f"the app did not see Battery 0x180F before it was taken out: {before}")
            blemu.service("180F", False)
            session.guest.run(["touch", "/run/blemu-kernel-bleak-go"])
            rc = session.guest.wait(app.ident, 120)
            text = app.output()[0]
            after = re.findall(r"^app: services (\S+)$", text, re.MULTILINE)
            if rc == 0 and (len(after) != len(before) + 1 or "180f" in after[-1].split(",")):
                raise Failure(f"BlueZ's cache did not follow Battery 0x180F taken out: services {after[-1] if after else '?'} "
                              f"on reconnection (before: {before[-1]})")
            if rc != 0:
                raise Failure(f"the app exited with status {rc}: {tail(text)}")
            again = [e for e in blemu.history if e.get("event") == "paired"]
            if len(again) != 1:
                raise Failure(f"{len(again)} pairings, not 1: the bond was not reused")
            asked = re.findall(r"^app: (agent (?!registered)\w+)", text, re.MULTILINE)
            # BlueZ set the encrypted link's Authenticated Payload Timeout; rootcanal would abort on it.
            if "answered HCI_Write_Authenticated_Payload_Timeout (0x0c7c)" not in bluez.started[0].output()[0]:
                raise Failure("blemu attach never saw Write Authenticated Payload Timeout: is its answer still needed?")
            # A write that came before BlueZ's pairing was refused (0x05) and retried; one that
            # came while it paired was held until the link was encrypted (Docs/SECURITY.md).
            log = Path(blemu.log_path).read_text(errors="replace") if getattr(blemu, "log_path", None) else ""
            how = ("refused 0x05 and retried" if "Insufficient Authentication (0x05) for opcode 0x12" in log
                   else "held while BlueZ paired, then written")
            return (f"BlueZ paired Just Works (key size {paired.get('key_size')}, "
                    f"SC {paired.get('secure_connections')}, its agent asked: {', '.join(asked) or 'nothing'}); "
                    f"the write (6608) {how}; reconnected, encrypted with the bond "
                    f"(key size {encrypted.get('key_size')}), written (9808) without pairing again; Battery 0x180F "
                    f"taken out, and the bonded app's next connection no longer has it ({after[-1]})")
        except AssertionError as error:
            raise Failure(f"{str(error).splitlines()[0]}; {bluez.logs()}") from None
        finally:
            blemu.stop()


def case_bleak_lock(session: Session) -> str:
    """A real Linux app pairs with a passkey: bleak subscribes to the lock's control point and
    writes Unlock; blemu refuses it (0x05), BlueZ pairs with Passkey Entry, asking the app's agent
    for the passkey, and retries; the lock unlocks and indicates success."""
    control_point = str(UUID_LOCK_CONTROL_POINT).lower()
    with BlueZInGuest(session, "bleak-lock") as bluez:
        blemu = host_blemu(session, "lock", "Kernel Bleak Lock",
                           ["--passkey", str(LOCK_PASSKEY), "--pin", LOCK_PIN.decode()])
        try:
            app = bluez.app("lock", "Kernel Bleak Lock", str(LOCK_PASSKEY), LOCK_PIN.decode())
            blemu.wait_for("connected", timeout=90)
            paired = blemu.wait_for("paired", timeout=60)
            if paired.get("method") != "passkey" or not paired.get("secure_connections"):
                raise Failure(f"BlueZ's pairing was {paired}, not Passkey Entry with LE Secure Connections")
            app.wait_for(r"^app: indication 7d3c0202 800201$", EVENT_TIMEOUT, what="the lock's success indication")
            # BlueZ retries the write as soon as the link is encrypted, which can come before
            # blemu reports the pairing complete: the write is looked up in the whole history,
            # not after the `paired` event (as in the thermostat's case).
            from blemu_testkit.control import event_matches
            unlock = {"uuid": control_point, "value": "02" + LOCK_PIN.hex()}
            deadline = time.monotonic() + EVENT_TIMEOUT
            while not any(event_matches(e, "write", unlock) for e in blemu.history):
                if time.monotonic() > deadline:
                    raise Failure(f"the app's unlock write ({unlock['value']}) never reached blemu: {[e.get('event') for e in blemu.history]}")
                time.sleep(0.2)
            rc = session.guest.wait(app.ident, EVENT_TIMEOUT)
            text = app.output()[0]
            if rc != 0:
                raise Failure(f"the app exited with status {rc}: {tail(text)}")
            if "app: agent passkey" not in text:
                raise Failure(f"BlueZ never asked the agent for the passkey: {tail(text)}")
            return (f"0x05, then BlueZ paired with Passkey Entry (key size {paired.get('key_size')}, SC) typed by "
                    f"the app's agent, retried the unlock and got its indication 800201")
        except AssertionError as error:
            raise Failure(f"{str(error).splitlines()[0]}; {bluez.logs()}") from None
        finally:
            blemu.stop()


def case_web_bluetooth_heart_rate(session: Session) -> str:
    """A real web app: Chromium (headless) in the guest over BlueZ runs Web Bluetooth's requestDevice,
    the chooser answered over DevTools, reads 0x2A38 and gets notifications that follow `set bpm`."""
    name = "Kernel Web HR"
    started = time.monotonic()
    with BlueZInGuest(session, "web-hr") as bluez:
        if session.guest.run(["sh", "-c", "command -v chromium"])["rc"] != 0:
            raise Failure("chromium is missing in the guest (scripts/setup --tests: apt-get install chromium)")
        blemu = host_blemu(session, "heart-rate", name)
        try:
            app = bluez.spawn("web-hr-app", [GUEST_PYTHON, "-u", WEB_BLUETOOTH_APP, name])
            text = app.wait_for(r"^app: availability true$", 600, what="Chromium's navigator.bluetooth.getAvailability()")
            up = re.search(r"^app: chromium (\S+) up in (\S+) s$", text, re.MULTILINE)
            ready = time.monotonic()
            text = app.wait_for(r"^app: chose ", 120, what="the chooser's device")
            chosen = time.monotonic()
            blemu.wait_for("connected", timeout=90)
            blemu.wait_for("read", uuid="2A38", timeout=EVENT_TIMEOUT)
            blemu.wait_for("subscribed", uuid="2A37", timeout=EVENT_TIMEOUT)
            text = app.wait_for(r"^app: subscribed 2a37$", EVENT_TIMEOUT, what="the page's subscription")
            location = re.search(r"^app: read 2a38 (\S*)$", text, re.MULTILINE)
            # blemu's heart rate answers 0x01, chest (Docs/REFERENCE.md, Heart Rate 0x180D).
            if location is None or location.group(1) != "01":
                raise Failure(f"the page read Body Sensor Location {location.group(1) if location else '?'}, not 01 (chest)")
            chooser = re.findall(r"^app: chooser (.*)$", text, re.MULTILINE)
            high = notifications_follow(app, blemu, 150, lambda n: 135 <= n <= 165)
            low = notifications_follow(app, blemu, 45, lambda n: 30 <= n <= 60)
            blemu.mark()
            session.guest.signal(app.ident, signal.SIGTERM)
            rc = session.guest.wait(app.ident, EVENT_TIMEOUT)
            if rc != 0:
                raise Failure(f"the app exited with status {rc}: {tail(app.output()[0])}")
            blemu.wait_for("unsubscribed", uuid="2A37", timeout=EVENT_TIMEOUT)
            blemu.wait_for("disconnected", timeout=EVENT_TIMEOUT)
            return (f"{up.group(1) if up else 'chromium'} up in {up.group(2) if up else '?'} s, getAvailability() true "
                    f"{ready - started:.0f} s into the case; the chooser listed {chooser[-1] if chooser else '?'} and "
                    f"DevTools chose {name!r} {chosen - ready:.0f} s later; the page read 2A38 (01), its "
                    f"notifications followed set bpm 150 ({high}) and 45 ({low}); on SIGTERM it unsubscribed "
                    f"and disconnected")
        except AssertionError as error:  # the kit's EventTimeout / UnexpectedEvent
            raise Failure(f"{str(error).splitlines()[0]}; {bluez.logs()}") from None
        finally:
            blemu.stop()
            # Chromium's own output (in the guest's log folder) next to the case's logs.
            log = session.guest.run(["cat", "/run/blemu-kernel/chromium.log"])
            (session.log_dir / "web-hr-chromium.log").write_text(log["out"] + log["err"])


CASES = [
    ("no-such-adapter", case_no_such_adapter, False),
    ("adapter-up-busy", case_adapter_up_busy, True),
    ("unprivileged-eperm", case_unprivileged_eperm, True),
    ("cap-net-admin-only", case_cap_net_admin_only, True),
    ("heart-rate-session", case_heart_rate_session, True),
    ("adapter-unplugged", case_adapter_unplugged, True),
    ("two-devices-one-adapter", case_two_devices_one_adapter, True),
    ("lock-paired-over-hci0", case_lock_paired_over_hci0, True),
]
# Only in the qemu guest (bluetoothd, dbus and the app run there, on an adapter of their own).
GUEST_CASES = [
    ("bleak-heart-rate", case_bleak_heart_rate, False),
    ("bleak-thermostat", case_bleak_thermostat, False),
    ("bleak-lock", case_bleak_lock, False),
    ("web-bluetooth-heart-rate", case_web_bluetooth_heart_rate, False),
]
# Only where systemd is PID 1 (the qemu guest, unless BLEMU_KERNEL_INIT=busybox).
SYSTEMD_CASES = [
    ("systemd-unit", case_systemd_unit, True),
    ("systemd-two-instances", case_systemd_two_instances, True),
    ("systemd-chat", case_systemd_chat, True),
]


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="scripts/test-kernel",
        description="blemu on a real Linux kernel: in a qemu guest (the default), or on this machine's "
                    "own adapter (--adapter).")
    parser.add_argument("--adapter", metavar="hciN",
                        help="run the cases on this machine's adapter instead of in qemu (root; bluetoothd "
                             "must leave it alone); needs --central")
    parser.add_argument("--central", metavar="SPEC",
                        help="with --adapter: the controller of the Bumble central, on the same air: a second "
                             "adapter (hci1), a Bumble transport (usb:0, serial:/dev/ttyACM0,1000000)")
    parser.add_argument("--cases", metavar="A,B", default=os.environ.get("BLEMU_KERNEL_CASES"),
                        help="only these cases (default: all; also BLEMU_KERNEL_CASES)")
    parser.add_argument("--list", action="store_true", help="list the cases and exit")
    arguments = parser.parse_args()
    if bool(arguments.adapter) != bool(arguments.central):
        parser.error("--adapter and --central go together")
    if arguments.adapter and not re.fullmatch(r"hci\d+", arguments.adapter):
        parser.error("--adapter takes an adapter name, hciN")
    return arguments


def run_cases(session: Session, cases, wanted: set[str] | None, adapter: str | None,
              results: list[tuple[str, bool, str]]) -> None:
    for name, case, needs_adapter in cases:
        if wanted is not None and name not in wanted:
            continue
        case_started = time.monotonic()
        try:
            if needs_adapter and session.adapter is None:
                session.adapter = adapter or session.plug_adapter()
            detail = case(session)
            results.append((name, True, detail))
            print(f"kernel: PASS {name} ({time.monotonic() - case_started:.1f} s): {detail}", flush=True)
        except Failure as failure:
            results.append((name, False, str(failure)))
            print(f"kernel: FAIL {name}: {failure}", flush=True)
        except Exception as error:  # a bug in the case or the rig: still one FAIL line
            results.append((name, False, repr(error)))
            print(f"kernel: FAIL {name}: {error!r}", flush=True)
            traceback.print_exc()


def boot_and_run(guest: Guest, make_session, cases, wanted: set[str] | None, adapter: str | None,
                 results: list[tuple[str, bool, str]], label: str) -> None:
    if wanted is not None and not any(name in wanted for name, _, _ in cases):
        return
    session: Session | None = None
    try:
        boot_time = guest.boot()
        print(f"kernel: {label} {guest.release} up in {boot_time:.1f} s", flush=True)
        session = make_session(guest)
        run_cases(session, cases, wanted, adapter, results)
    except SystemExit as error:
        print(f"kernel: FAIL {label}: {error}", flush=True)
        results.append((label, False, str(error)))
    finally:
        if session is not None:
            for process in session.spawned:
                process.save(guest.log_dir)
        guest.stop()


def main() -> int:
    arguments = parse_arguments()
    if arguments.list:
        for name, case, _ in CASES + GUEST_CASES + SYSTEMD_CASES:
            print(f"{name:20} {(case.__doc__ or '').splitlines()[0]}")
        return 0
    started = time.monotonic()
    log_dir = Path(os.environ.get("BLEMU_KERNEL_LOG_DIR") or tempfile.mkdtemp(prefix="blemu-kernel-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    binary = Path(blemu_bin())
    if not os.access(binary, os.X_OK):
        raise SystemExit(f"test-kernel: no blemu executable at {binary}: build it (swift build) or set BLEMU_BIN")
    for tool in ("setpriv", "btmgmt", "script"):
        if not shutil.which(tool):
            raise SystemExit(f"test-kernel: {tool} is missing: run scripts/setup")
    wanted = set(arguments.cases.split(",")) if arguments.cases else None
    unknown = (wanted or set()) - {name for name, _, _ in CASES + GUEST_CASES + SYSTEMD_CASES}
    if unknown:
        raise SystemExit(f"test-kernel: no case named {', '.join(sorted(unknown))} (--list)")

    results: list[tuple[str, bool, str]] = []
    if arguments.adapter:
        if os.geteuid() != 0:
            raise SystemExit("test-kernel: --adapter needs root (btmgmt power, setpriv to another user)")
        print(f"kernel: this machine's {arguments.adapter}, central on {arguments.central}, blemu {binary}, "
              f"logs {log_dir}", flush=True)
        for name, _, _ in GUEST_CASES:  # asked for by name: a FAIL, never a silent skip
            if wanted is not None and name in wanted:
                results.append((name, False, "runs only in the qemu guest (not with --adapter)"))
                print(f"kernel: FAIL {name}: runs only in the qemu guest (not with --adapter)", flush=True)
        boot_and_run(LocalAgent(log_dir), lambda guest: LocalSession(guest, arguments.adapter, arguments.central, log_dir),
                     CASES, wanted, arguments.adapter, results, "this machine")
    else:
        kernel, modules_dir = kernel_tree()
        modules = module_order(modules_dir, GUEST_MODULES)
        init = os.environ.get("BLEMU_KERNEL_INIT", "systemd")
        if init not in ("systemd", "busybox"):
            raise SystemExit(f"test-kernel: BLEMU_KERNEL_INIT is systemd or busybox, not {init!r}")
        cases = CASES + GUEST_CASES + (SYSTEMD_CASES if init == "systemd" else [])
        print(f"kernel: {kernel.name}, {len(modules)} modules, {init} as init, blemu {binary}, logs {log_dir}",
              flush=True)
        if init != "systemd":
            for name, _, _ in SYSTEMD_CASES:
                if wanted is not None and name in wanted:
                    results.append((name, False, "needs systemd as the guest's init (BLEMU_KERNEL_INIT=systemd)"))
                    print(f"kernel: FAIL {name}: needs systemd as the guest's init (BLEMU_KERNEL_INIT=systemd)")
        rootcanal = RootCanal(log_path=log_dir / "rootcanal.log")
        rootcanal.start()
        try:
            boot_and_run(Guest(kernel, modules, log_dir, systemd=init == "systemd"),
                         lambda guest: GuestSession(guest, rootcanal, log_dir), cases, wanted, None, results, "guest")
        finally:
            rootcanal.stop()
    passed = sum(1 for _, ok, _ in results if ok)
    failed = len(results) - passed
    if not results:
        print("kernel: FAIL no case ran", flush=True)
        failed = 1
    print(f"kernel: {passed} passed, {failed} failed in {time.monotonic() - started:.0f} s (logs {log_dir})", flush=True)
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SystemExit as stop:
        if isinstance(stop.code, str):  # a prerequisite is missing: a FAIL line, not a skip
            print(f"kernel: FAIL prerequisites: {stop.code.removeprefix('test-kernel: ')}", flush=True)
            print("kernel: 0 passed, 1 failed", flush=True)
            sys.exit(2)
        raise
