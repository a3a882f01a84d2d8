"""Process management for the interop tests: blemu under test, with its output in a file."""

from __future__ import annotations

import asyncio
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO / "scripts") not in sys.path:
    sys.path.insert(0, str(REPO / "scripts"))

from bumble_central import Central, ScanResult  # noqa: E402
from rootcanal_server import RootCanal  # noqa: E402

DEFAULT_LOG_ARGS = "--log stderr --log-level debug"
_log_dir: Path | None = None


def log_dir() -> Path:
    """Where this test run keeps process output: $BLEMU_TEST_LOG_DIR or a new temp folder."""
    global _log_dir
    if _log_dir is None:
        configured = os.environ.get("BLEMU_TEST_LOG_DIR")
        _log_dir = Path(configured) if configured else Path(tempfile.mkdtemp(prefix="blemu-interop-"))
        _log_dir.mkdir(parents=True, exist_ok=True)
    return _log_dir


def run(coro: Coroutine[Any, Any, Any], timeout: float = 60.0) -> Any:
    """Run one asyncio scenario; fail (never hang) after `timeout` seconds."""

    async def bounded() -> Any:
        try:
            return await asyncio.wait_for(coro, timeout)
        except asyncio.TimeoutError as error:
            raise AssertionError(f"scenario did not finish within {timeout:.0f} s") from error

    return asyncio.run(bounded())


def blemu_binary() -> Path:
    configured = os.environ.get("BLEMU_BIN")
    if configured:
        return Path(configured).resolve()
    debug = REPO / ".build" / "debug" / "blemu"
    return debug if debug.exists() else REPO / ".build" / "release" / "blemu"


def unique_name(prefix: str = "HR") -> str:
    """A short device name, unique to this run (short enough for 31-octet legacy advertising data)."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


class BlemuProcess:
    """One `blemu run heart-rate --controller SPEC --name NAME` with its output in a file."""

    def __init__(self, controller: str, name: str, device: str = "heart-rate"):
        self.controller = controller
        self.name = name
        self.device = device
        fd, path = tempfile.mkstemp(prefix=f"blemu-{name}-", suffix=".log", dir=log_dir())
        os.close(fd)
        self.log_path = Path(path)
        self.process: subprocess.Popen[bytes] | None = None
        self.exit_status: int | None = None
        self.scan: ScanResult | None = None  # what the readiness scan saw

    @property
    def command(self) -> list[str]:
        log_args = shlex.split(os.environ.get("BLEMU_LOG_ARGS", DEFAULT_LOG_ARGS))
        return [str(blemu_binary()), "run", self.device, "--controller", self.controller,
                "--name", self.name, *log_args]

    def start(self) -> "BlemuProcess":
        binary = blemu_binary()
        if not binary.exists():
            pytest.fail(
                f"blemu binary not found at {binary}: build it with `swift build` "
                f"(or set BLEMU_BIN to the executable)",
                pytrace=False,
            )
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                self.command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                cwd=REPO,
            )
        return self

    def exited(self) -> str | None:
        """None while running; otherwise why it is not."""
        if self.process is None:
            return "blemu was not started"
        status = self.process.poll()
        if status is None:
            return None
        return f"blemu exited with status {status}; output:\n{self.log_tail()}"

    def wait_advertising(self, rootcanal: RootCanal, timeout: float = 20.0) -> ScanResult:
        """Scan until this process advertises its name; fail early if it exits."""

        async def scan() -> ScanResult:
            async with Central(rootcanal.controller_spec, name="readiness-scanner") as central:
                return await central.scan_for(self.name, timeout=timeout, alive=self.exited)

        try:
            self.scan = run(scan(), timeout + 15)
        except AssertionError as error:
            raise AssertionError(f"{error}\n--- blemu output ({self.log_path}):\n{self.log_tail()}") from None
        return self.scan

    def stop(self, timeout: float = 10.0) -> int:
        """SIGTERM, then wait; returns the exit status (SIGKILLs and fails after `timeout`)."""
        if self.process is None:
            raise AssertionError("blemu was not started")
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError(f"blemu did not exit within {timeout:.0f} s of SIGTERM; output:\n{self.log_tail()}")
        self.exit_status = self.process.returncode
        return self.exit_status

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(5)

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no output)"


class BlemuFactory:
    def __init__(self, rootcanal: RootCanal):
        self.rootcanal = rootcanal
        self.processes: list[BlemuProcess] = []

    def start(self, name: str, wait_advertising: bool = True) -> BlemuProcess:
        process = BlemuProcess(self.rootcanal.controller_spec, name)
        self.processes.append(process)
        process.start()
        if wait_advertising:
            process.wait_advertising(self.rootcanal)
        return process

    def cleanup(self) -> None:
        for process in self.processes:
            process.kill()
