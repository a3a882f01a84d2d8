"""blemu's programmable host as the Pandora server reaches it: one request connection and one
`watch host` connection on the control socket (Docs/CONTROL.md, "The programmable host"), and
the `blemu host` process behind them, which the server may restart (a factory reset)."""

from __future__ import annotations

import logging
import os
import queue
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional

from ..control import Control, EventLog
from ..errors import BlemuError, CommandError
from ..process import _short_temp_dir, blemu_executable

log = logging.getLogger("blemu-pandora")

# What a subscription hands out when the watch connection ended (blemu stopped or restarted).
CLOSED = {"event": "watch-closed"}


class Subscription:
    """The host's events from the moment of subscribing, for one waiter. Bounded: a waiter that
    does not read (a stalled scan stream) loses the overflow, counted in `missed`."""

    def __init__(self, owner: Any, limit: int = 10_000):
        self._owner = owner
        self._queue: "queue.Queue[dict[str, Any]]" = queue.Queue(limit)
        self.missed = 0

    @property
    def source(self) -> "HostEvents":
        """The watch connection this subscription listens to."""
        return self._owner

    def put(self, event: dict[str, Any]) -> None:
        try:
            self._queue.put_nowait(event)
        except queue.Full:
            self.missed += 1

    def get(self, timeout: float) -> Optional[dict[str, Any]]:
        """The next event, or None after `timeout` seconds without one."""
        try:
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            return None

    def close(self) -> None:
        self._owner.unsubscribe(self)

    def __enter__(self) -> "Subscription":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class HostEvents(EventLog):
    """The kit's event log on `watch host`, its events also handed to each subscriber."""

    def __init__(self, sock: socket.socket, reply: dict[str, Any], pending: bytes = b"", limit: int = 1000):
        self._subscribers: list[Subscription] = []
        self._subscribers_lock = threading.Lock()
        super().__init__(sock, reply, pending, limit)

    def subscribe(self) -> Subscription:
        subscription = Subscription(self)
        with self._subscribers_lock:
            self._subscribers.append(subscription)
        if self.closed_reason is not None:
            subscription.put(CLOSED)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        with self._subscribers_lock:
            if subscription in self._subscribers:
                self._subscribers.remove(subscription)

    def _add(self, line: bytes) -> None:
        super()._add(line)
        with self._condition:
            event = self._events[-1]
        if event.get("device") not in (None, "host"):
            return
        with self._subscribers_lock:
            subscribers = list(self._subscribers)
        for subscription in subscribers:
            subscription.put(event)

    def _read(self) -> None:
        super()._read()
        with self._subscribers_lock:
            subscribers = list(self._subscribers)
        for subscription in subscribers:
            subscription.put(CLOSED)


class HostConnection:
    """The two connections to one control socket: `request(op, …)` and `subscribe()`."""

    def __init__(self, control_path: str, timeout: float = 5.0):
        self.path = control_path
        self.control = Control(control_path, timeout)
        self.events: HostEvents = HostEvents.open(control_path, device="host", timeout=timeout)  # type: ignore[assignment]

    def request(self, op: str, **fields: Any) -> dict[str, Any]:
        """A host request (`{"cmd":"host","op":op,…}`); its reply, or CommandError (with `code`)."""
        return self.control.request("host", op=op, **fields)

    def subscribe(self) -> Subscription:
        return self.events.subscribe()

    @property
    def alive(self) -> bool:
        return self.events.closed_reason is None

    def close(self) -> None:
        self.events.close()
        self.control.close()


class BlemuHostProcess:
    """`blemu host --controller SPEC --control SOCK --state-dir DIR`: started, restarted with
    a new state directory (a factory reset: no bonds, a new random address), stopped."""

    def __init__(self, controller: str, *, binary: Optional[str] = None, state_dir: Optional[str] = None,
                 name: Optional[str] = None, log_path: Optional[Path] = None, log_level: str = "info",
                 options: tuple[str, ...] = ()):
        self.controller = controller
        self.binary = blemu_executable(binary)
        self.name = name
        self.options = list(options)
        self.log_level = log_level
        self._work = _short_temp_dir("blemu-pandora-")
        self.control_path = os.path.join(self._work, "control.sock")
        self._own_state = state_dir is None
        self.state_dir = state_dir or os.path.join(self._work, "state")
        self.log_path = log_path or Path(self._work) / "blemu.log"
        self.process: Optional[subprocess.Popen[bytes]] = None
        self.connection: Optional[HostConnection] = None

    @property
    def command(self) -> list[str]:
        command = [self.binary, "host", "--controller", self.controller, "--control", self.control_path,
                   "--state-dir", self.state_dir, "--log", "stderr", "--log-level", self.log_level]
        if self.name:
            command += ["--name", self.name]
        return command + self.options

    def start(self, timeout: float = 20.0) -> HostConnection:
        os.makedirs(self.state_dir, exist_ok=True)
        if os.path.exists(self.control_path):
            os.unlink(self.control_path)
        log_file = open(self.log_path, "ab")
        try:
            self.process = subprocess.Popen(self.command, stdout=log_file, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
        finally:
            log_file.close()
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise BlemuError(f"blemu host exited with status {self.process.returncode}: {' '.join(self.command)}\n"
                                 f"its output ({self.log_path}):\n{self.log_tail()}")
            if os.path.exists(self.control_path):
                try:
                    Control(self.control_path, 2.0).request("list")
                    break
                except BlemuError:
                    pass
            if time.monotonic() > deadline:
                self.stop()
                raise BlemuError(f"blemu host did not answer on {self.control_path} within {timeout:.0f} s; "
                                 f"its output ({self.log_path}):\n{self.log_tail()}")
            time.sleep(0.05)
        self.connection = HostConnection(self.control_path)
        return self.connection

    def stop(self, timeout: float = 10.0) -> Optional[int]:
        if self.connection is not None:
            self.connection.close()
            self.connection = None
        process = self.process
        if process is None:
            return None
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)
        return process.returncode

    def restart(self) -> HostConnection:
        """Stop, forget the state (bonds, the random address), start again."""
        self.stop()
        if self._own_state:
            shutil.rmtree(self.state_dir, ignore_errors=True)
        else:  # the user's folder: empty it, keep it
            for entry in Path(self.state_dir).iterdir() if os.path.isdir(self.state_dir) else ():
                if entry.is_dir():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)
        return self.start()

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self._work, ignore_errors=True)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(Path(self.log_path).read_text(errors="replace").splitlines()[-lines:]) or "(no output)"
        except OSError:
            return "(no output)"


class Host:
    """What the services talk to: the current connection, swapped by a restart."""

    def __init__(self, connection: HostConnection, restart: Optional[Callable[[], HostConnection]] = None):
        self._connection = connection
        self._restart = restart
        self._lock = threading.Lock()

    @property
    def connection(self) -> HostConnection:
        with self._lock:
            return self._connection

    def request(self, op: str, **fields: Any) -> dict[str, Any]:
        return self.connection.request(op, **fields)

    def subscribe(self) -> Subscription:
        return self.connection.subscribe()

    @property
    def can_restart(self) -> bool:
        return self._restart is not None

    def restart(self) -> None:
        if self._restart is None:
            raise BlemuError("this server attached to a running blemu (--control): it cannot restart it")
        with self._lock:
            old, self._connection = self._connection, self._restart()
            old.close()  # its subscribers hear CLOSED and subscribe again: to the new one


__all__ = ["BlemuHostProcess", "CLOSED", "CommandError", "Host", "HostConnection", "HostEvents", "Subscription"]
