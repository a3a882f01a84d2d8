"""One `blemu run` for a test: its devices, a control socket, an event log, a clean stop."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, List, Optional, Union

from .control import Control, Event, EventIterator, EventLog
from .errors import BlemuError, CommandError


def blemu_executable(configured: Optional[str] = None) -> str:
    """`configured`, else $BLEMU_BIN, else `blemu` on PATH."""
    path = configured or os.environ.get("BLEMU_BIN") or shutil.which("blemu")
    if not path:
        raise BlemuError("blemu not found: put it on PATH, set BLEMU_BIN, or pass binary=")
    if not os.access(path, os.X_OK):
        raise BlemuError(f"blemu at {path} is not an executable file (build it with `swift build`)")
    return path


def _short_temp_dir(prefix: str) -> str:
    """A new temporary directory short enough for a Unix socket path (at most 107 bytes)."""
    base = tempfile.gettempdir()
    if len(base) > 60:
        base = "/tmp"
    return tempfile.mkdtemp(prefix=prefix, dir=base)


class Blemu:
    """`blemu run DEVICES --controller SPEC --control SOCK [options]`, started by `start()`.

    `devices` are device names or profile paths (`heart-rate`, `thermostat`, `./my.yaml`);
    `options` are more `blemu run` options (`["--passkey", "123456"]`). The state directory
    (bonds, identities) is a new temporary one unless given. After `start()`, `control` is a
    control client and the event log watches every device: `wait_for`, `expect_write`,
    `events()` see everything from the start on.
    """

    def __init__(self, *devices: str, controller: Optional[str] = None, name: Optional[str] = None,
                 options: Sequence[str] = (), binary: Optional[str] = None, state_dir: Optional[str] = None,
                 log_dir: Optional[Union[str, Path]] = None, log_level: str = "info",
                 env: Optional[dict[str, str]] = None):
        if not devices:
            raise ValueError("Blemu needs at least one device (`heart-rate`, a profile's path, …)")
        self.devices = list(devices)
        self.controller = controller
        self.name = name
        self.options = list(options)
        self.binary = binary
        self.log_level = log_level
        self.env = env
        self._own_dirs: list[str] = []
        self._work = _short_temp_dir("blemu-kit-")
        self._own_dirs.append(self._work)
        self.control_path = os.path.join(self._work, "control.sock")
        self.state_dir = state_dir or os.path.join(self._work, "state")
        os.makedirs(self.state_dir, exist_ok=True)
        log_folder = Path(log_dir) if log_dir is not None else Path(tempfile.mkdtemp(prefix="blemu-kit-logs-"))
        log_folder.mkdir(parents=True, exist_ok=True)
        label = (name or os.path.basename(self.devices[0])).replace("/", "_")
        fd, path = tempfile.mkstemp(prefix=f"blemu-{label}-", suffix=".log", dir=log_folder)
        os.close(fd)
        self.log_path = Path(path)
        self.process: Optional[subprocess.Popen[bytes]] = None
        self.exit_status: Optional[int] = None
        self._control: Optional[Control] = None
        self._events: Optional[EventLog] = None

    @property
    def command(self) -> list[str]:
        command = [blemu_executable(self.binary), "run", *self.devices]
        if self.controller is not None:
            command += ["--controller", self.controller]
        if self.name is not None:
            command += ["--name", self.name]
        return command + ["--control", self.control_path, "--state-dir", self.state_dir,
                          "--log", "stderr", "--log-level", self.log_level, *self.options]

    # -- life ----------------------------------------------------------------------------------

    def start(self, timeout: float = 20.0, wait_advertising: bool = True) -> "Blemu":
        """Start blemu; return once its control socket answers, the event log watches, and
        (with `wait_advertising`) every device advertises. Raises BlemuError with blemu's output
        when it exits or is not ready in `timeout`."""
        environment = None if self.env is None else {**os.environ, **self.env}
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, env=environment)
        deadline = time.monotonic() + timeout
        try:
            self._until(deadline, "its control socket answers", self._socket_answers)
            self._events = EventLog.open(self.control_path)
            if wait_advertising:
                self._until(deadline, "every device advertises",
                            lambda: all(d["advertising"] for d in self.control.list()))
        except BaseException:
            self._kill()
            self._remove_own_dirs()
            raise
        return self

    def _remove_own_dirs(self) -> None:
        for folder in self._own_dirs:
            shutil.rmtree(folder, ignore_errors=True)

    def _socket_answers(self) -> bool:
        if not os.path.exists(self.control_path):
            return False
        try:
            self.control.list()
            return True
        except BlemuError:
            return False

    def _until(self, deadline: float, what: str, ready: Callable[[], bool]) -> None:
        while True:
            if self.process is not None and self.process.poll() is not None:
                raise BlemuError(f"blemu exited with status {self.process.returncode} before {what}; "
                                 f"command: {' '.join(self.command)}\noutput ({self.log_path}):\n{self.log_tail()}")
            if ready():
                return
            if time.monotonic() >= deadline:
                raise BlemuError(f"blemu not ready within the start timeout: waited until {what}; "
                                 f"output ({self.log_path}):\n{self.log_tail()}")
            time.sleep(0.05)

    def stop(self, timeout: float = 10.0) -> int:
        """SIGTERM and wait: returns blemu's exit status (0: a clean stop). SIGKILLs and
        raises BlemuError when it does not exit within `timeout`."""
        if self._events is not None:
            self._events.close()
        if self._control is not None:
            self._control.close()
        if self.process is None:
            raise BlemuError("blemu was not started")
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self._kill()
                raise BlemuError(f"blemu did not exit within {timeout:g} s of SIGTERM; output:\n{self.log_tail()}") from None
        self.exit_status = self.process.returncode
        self._remove_own_dirs()
        return self.exit_status

    def _kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(5)

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:]) or "(no output)"
        except OSError:
            return "(no output)"

    def exit_report(self, wait: float = 0.0) -> Optional[str]:
        """None while blemu runs; once it exited, its status and the tail of its output.

        `wait`: how long to give a blemu that is on its way out (its sockets closed first)."""
        if self.process is None:
            return None
        try:
            status = self.process.wait(wait) if wait > 0 else self.process.poll()
        except subprocess.TimeoutExpired:
            return None
        if status is None:
            return None
        how = f"killed by signal {-status}" if status < 0 else f"status {status}"
        return f"blemu exited ({how}); its output ({self.log_path}):\n{self.log_tail(30)}"

    def _after_death(self, error: BlemuError, dying: bool = True) -> BlemuError:
        """`error` with blemu's exit status and output added when blemu is dead (else as is):
        a wait or command that failed because blemu crashed says so, not only "closed".
        `dying`: a sign it is on its way out (its socket closed), so give it a moment to exit."""
        report = self.exit_report(wait=2.0 if dying else 0.0)
        if report is None:
            return error
        return type(error)(f"{error}\n{report}")

    def __enter__(self) -> "Blemu":
        return self.start()

    def __exit__(self, exc_type: Optional[type], *exc: object) -> None:
        """Stop blemu; when it crashed (or did not stop cleanly), raise BlemuError with its exit
        status and output, unless the block already raised (that error goes on, the output is
        in `log_tail()`)."""
        if self.process is None:
            return
        was_running = self.running()
        status = self.stop()
        if exc_type is None and status != 0:
            why = "exited before the end of the `with` block" if not was_running else "did not stop cleanly on SIGTERM"
            raise BlemuError(f"blemu {' '.join(self.devices)} {why}: "
                             f"{self.exit_report() or f'status {status}'}")

    # -- the control socket ----------------------------------------------------------------------

    @property
    def control(self) -> Control:
        """The control client (every command of Docs/CONTROL.md); once blemu died, its errors
        carry blemu's exit status and output."""
        if self._control is None:
            self._control = _ProcessControl(self.control_path, self)
        return self._control

    @property
    def event_log(self) -> EventLog:
        if self._events is None:
            raise BlemuError("blemu is not started: no events yet")
        return self._events

    def _device(self, device: Optional[str]) -> str:
        """The device a command is for: the one given, else the only one this blemu runs."""
        if device is not None:
            return device
        refs = [d["ref"] for d in self.control.list()]
        if len(refs) != 1:
            raise BlemuError(f"this blemu runs {len(refs)} devices ({', '.join(refs)}): say which with device=")
        return str(refs[0])

    def info(self, device: Optional[str] = None) -> dict[str, Any]:
        """The device's entry of `list` (address, advertising, connections, settings, faults)."""
        ref = self._device(device)
        for entry in self.control.list():
            if entry["ref"] == ref or entry["device"] == ref or entry["name"] == ref:
                return entry
        raise BlemuError(f"no device {ref!r} in `list`")

    def address(self, device: Optional[str] = None) -> str:
        """The device's address (static random), as the app connects to it."""
        return str(self.info(device)["address"])

    def set(self, key: str, value: Union[str, int, float, bool], device: Optional[str] = None,
            exact: bool = False) -> dict[str, Any]:
        """`set DEVICE KEY VALUE` (with `exact`, `--exact`: a value that moves by itself is held)."""
        return self.control.set(self._device(device), key, value, exact=exact)

    def notify(self, uuid: str, value: Union[bytes, bytearray, str], device: Optional[str] = None) -> dict[str, Any]:
        """`notify DEVICE UUID HEX`: exactly these bytes to every subscribed central, now."""
        return self.control.notify(self._device(device), uuid, value)

    def fault(self, uuid: str, action: str, *, error: Union[int, str, None] = None, ms: Optional[int] = None,
              count: Optional[int] = None, device: Optional[str] = None) -> dict[str, Any]:
        return self.control.fault(self._device(device), uuid, action, error=error, ms=ms, count=count)

    def fault_clear(self, device: Optional[str] = None) -> dict[str, Any]:
        return self.control.fault_clear(device)

    def disconnect(self, reason: Union[int, str, None] = None, device: Optional[str] = None) -> dict[str, Any]:
        return self.control.disconnect(self._device(device), reason)

    def advertise(self, on: bool, device: Optional[str] = None) -> dict[str, Any]:
        return self.control.advertise(self._device(device), on)

    def service(self, uuid: str, on: bool, device: Optional[str] = None) -> dict[str, Any]:
        return self.control.service(self._device(device), uuid, on)

    def list(self) -> List[dict[str, Any]]:
        return self.control.list()

    # -- events -------------------------------------------------------------------------------

    # A wait that fails because blemu died says so: its exit status and output (_after_death).

    def wait_for(self, event: Optional[str] = None, timeout: float = 10.0,
                 where: Optional[Callable[[Event], bool]] = None, **filters: Any) -> Event:
        """See EventLog.wait_for: `blemu.wait_for("subscribed", uuid="2A37")`."""
        try:
            return self.event_log.wait_for(event, timeout, where, **filters)
        except BlemuError as error:
            raise self._after_death(error, dying=self.event_log.closed_reason is not None) from None

    async def wait_for_async(self, event: Optional[str] = None, timeout: float = 10.0,
                             where: Optional[Callable[[Event], bool]] = None, **filters: Any) -> Event:
        try:
            return await self.event_log.wait_for_async(event, timeout, where, **filters)
        except BlemuError as error:
            raise self._after_death(error, dying=self.event_log.closed_reason is not None) from None

    def expect_write(self, uuid: str, value: Union[bytes, str], timeout: float = 10.0, **filters: Any) -> Event:
        """See EventLog.expect_write: the app's next write to `uuid` must be `value`."""
        try:
            return self.event_log.expect_write(uuid, value, timeout, **filters)
        except BlemuError as error:
            raise self._after_death(error, dying=self.event_log.closed_reason is not None) from None

    def events(self, timeout: Optional[float] = None, from_cursor: bool = True) -> EventIterator:
        return self.event_log.events(timeout, from_cursor)

    def mark(self) -> None:
        self.event_log.mark()

    @property
    def history(self) -> List[Event]:
        return self.event_log.history


class _ProcessControl(Control):
    """Blemu's control client: a request that fails because blemu died says how it died."""

    def __init__(self, path: str, owner: Blemu):
        super().__init__(path)
        self._owner = owner

    def request(self, cmd: str, **fields: Any) -> dict[str, Any]:
        try:
            return super().request(cmd, **fields)
        except CommandError:
            raise
        except BlemuError as error:
            raise self._owner._after_death(error) from None
