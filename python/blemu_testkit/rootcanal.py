"""A rootcanal virtual radio (Android's controller emulator, PyPI `rootcanal`) for a test.

Every TCP connection to its HCI port is a new controller on one simulated radio, so blemu and
the app's BLE stack (Bumble, or a VM's kernel through a bridge) meet there. Ports are picked
free so parallel test runs do not collide.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

from .errors import BlemuError

# The newest rootcanal on PyPI whose binary runs on Debian 12 (glibc 2.36); 1.11 on need newer
# glibc (1.13.0: 2.38), and the dynamic loader refuses them before rootcanal logs a line.
WORKING_PIN = "rootcanal==1.10.0"

# The loader's refusal: `…/rootcanal: /lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.38'
# not found (required by …/rootcanal)`, one line per missing version.
_GLIBC_MISSING = re.compile(r"version [`']GLIBC_(\d+)\.(\d+)' not found")

# rootcanal logs one line per listening socket (`... Listening on: 6402 (6)`); the HCI port is
# opened last, so seeing it means the radio is ready.
_LISTENING = re.compile(r"Listening on: (\d+)\b")


def free_tcp_ports(count: int) -> list[int]:
    """`count` distinct TCP ports that were free on 127.0.0.1 a moment ago."""
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def rootcanal_executable() -> list[str]:
    """The command that runs rootcanal: $BLEMU_ROOTCANAL, the PyPI package's binary, or PATH.

    The package's `python -m rootcanal` wrapper runs the binary as a child, so stopping the
    wrapper would orphan it: the binary itself is started, in its own process group.
    """
    configured = os.environ.get("BLEMU_ROOTCANAL")
    if configured:
        return [configured]
    try:
        import rootcanal.binaries  # type: ignore[import-not-found,import-untyped,unused-ignore]

        return [str(rootcanal.binaries.get_package_binary_resource_path("rootcanal"))]
    except ImportError:
        pass
    except Exception:  # another package layout: its module wrapper
        return [sys.executable, "-m", "rootcanal"]
    found = shutil.which("rootcanal")
    if found:
        return [found]
    raise BlemuError(f"rootcanal not found: `pip install '{WORKING_PIN}'` (or set BLEMU_ROOTCANAL to its executable)")


def installed_rootcanal_version() -> Optional[str]:
    """The version of the `rootcanal` package installed here, or None."""
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # pragma: no cover - Python 3.8
        return None
    try:
        return version("rootcanal")
    except PackageNotFoundError:
        return None


def glibc_advice(output: str, executable: str) -> Optional[str]:
    """When `output` is the dynamic loader refusing rootcanal for an older glibc: which glibc
    it needs, which this system has, and the pin that works; else None. `executable`: the
    binary run (named when it is not the installed package's, e.g. $BLEMU_ROOTCANAL)."""
    needed = [(int(major), int(minor)) for major, minor in _GLIBC_MISSING.findall(output)]
    if not needed:
        return None
    major, minor = max(needed)
    package = installed_rootcanal_version()
    which = f"rootcanal {package}" if package and not os.environ.get("BLEMU_ROOTCANAL") else f"rootcanal ({executable})"
    system = platform.libc_ver()
    has = f" (this system has glibc {system[1]})" if system[0] == "glibc" and system[1] else ""
    return f"{which} needs glibc {major}.{minor}{has}; pip install '{WORKING_PIN}'"


class RootCanal:
    """One rootcanal process on free ports (the HCI port given, to keep one across restarts or
    for a fixed address). `start()` returns once its HCI port listens."""

    def __init__(self, log_path: Optional[Path] = None, *, hci_port: Optional[int] = None):
        ports = free_tcp_ports(4)
        self.hci_port = hci_port or ports[0]
        self.test_port, self.link_port, self.link_ble_port = ports[1], ports[2], ports[3]
        if self.hci_port in (self.test_port, self.link_port, self.link_ble_port):
            raise BlemuError(f"port {self.hci_port} was also picked for another of rootcanal's ports: try again")
        if log_path is None:
            fd, name = tempfile.mkstemp(prefix="rootcanal-", suffix=".log")
            os.close(fd)
            log_path = Path(name)
        self.log_path = Path(log_path)
        self.process: Optional[subprocess.Popen[bytes]] = None

    @property
    def controller_spec(self) -> str:
        """blemu's controller spec for a new controller on this radio (`--controller`)."""
        return f"tcp:127.0.0.1:{self.hci_port}"

    @property
    def bumble_transport(self) -> str:
        """The same for Bumble (`open_transport`)."""
        return f"tcp-client:127.0.0.1:{self.hci_port}"

    def start(self, timeout: float = 15.0) -> "RootCanal":
        # rootcanal keeps running without its HCI port when that port is taken: check first.
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(("127.0.0.1", self.hci_port))
            except OSError as error:
                raise BlemuError(f"port {self.hci_port} is not free ({error.strerror}); pick another") from None
        command = rootcanal_executable() + [
            f"-hci_port={self.hci_port}", f"-test_port={self.test_port}",
            f"-link_port={self.link_port}", f"-link_ble_port={self.link_ble_port}",
        ]
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                advice = glibc_advice(self._log_text(), command[0])
                why = f"{advice}. " if advice else ""
                raise BlemuError(f"{why}rootcanal exited with status {self.process.returncode} before listening on "
                                 f"{self.hci_port}; its log ({self.log_path}):\n{self.log_tail()}")
            if str(self.hci_port) in _LISTENING.findall(self._log_text()):
                return self
            time.sleep(0.05)
        self.stop()
        raise BlemuError(f"rootcanal did not listen on {self.hci_port} within {timeout:.0f} s; "
                         f"its log ({self.log_path}):\n{self.log_tail()}")

    def _log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self._log_text().splitlines()[-lines:]) or "(no output)"

    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM to its process group, SIGKILL after `timeout`."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                return
            try:
                process.wait(timeout)
                return
            except subprocess.TimeoutExpired:
                continue

    def __enter__(self) -> "RootCanal":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
