"""Process management for the interop tests: blemu under test, with its output in a file."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO / "scripts") not in sys.path:
    sys.path.insert(0, str(REPO / "scripts"))

from bumble import att  # noqa: E402

from bumble_central import Central, ScanResult, error_code_of  # noqa: E402
from rootcanal_server import BlemuError, RootCanal, free_tcp_ports  # noqa: E402

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
    """One `blemu run DEVICE... [--controller SPEC] [--name NAME]` with its output in a file.

    By default: heart-rate on `controller`, named `name`, with $BLEMU_LOG_ARGS. `controller`
    or `name` None leaves that option out (BLEMU_CONTROLLER, the device's default name);
    `env` adds to the environment (a None value removes the variable); `log_args` replaces
    $BLEMU_LOG_ARGS; `split_stdout` sends stdout to its own file (`stdout_path`), so the
    log file holds stderr alone.
    """

    def __init__(self, controller: str | None, name: str | None, device: str = "heart-rate", *,
                 devices: list[str] | None = None, extra_args: list[str] | tuple[str, ...] = (),
                 env: dict[str, str | None] | None = None, log_args: list[str] | None = None,
                 split_stdout: bool = False, name_in_config: bool = False):
        self.controller = controller
        self.name = name
        # The name is the config file's (--config): looked for, not passed as --name.
        self.name_in_config = name_in_config
        self.device = device
        self.devices = list(devices) if devices is not None else [device]
        self.extra_args = list(extra_args)
        self.env = dict(env or {})
        self.log_args = log_args
        # A device may be a profile's path: only its file name goes into the log's name.
        label = name or (os.path.basename(self.devices[0]) if self.devices else "config")
        fd, path = tempfile.mkstemp(prefix=f"blemu-{label}-", suffix=".log", dir=log_dir())
        os.close(fd)
        self.log_path = Path(path)
        self.stdout_path: Path | None = self.log_path.with_suffix(".stdout") if split_stdout else None
        self.process: subprocess.Popen[bytes] | None = None
        self.exit_status: int | None = None
        self.scan: ScanResult | None = None  # what the readiness scan saw

    @property
    def command(self) -> list[str]:
        log_args = self.log_args if self.log_args is not None else shlex.split(
            os.environ.get("BLEMU_LOG_ARGS", DEFAULT_LOG_ARGS))
        command = [str(blemu_binary()), "run", *self.devices]
        if self.controller is not None:
            command += ["--controller", self.controller]
        if self.name is not None and not self.name_in_config:
            command += ["--name", self.name]
        return command + self.extra_args + log_args

    def start(self) -> "BlemuProcess":
        binary = blemu_binary()
        if not binary.exists():
            pytest.fail(
                f"blemu binary not found at {binary}: build it with `swift build` "
                f"(or set BLEMU_BIN to the executable)",
                pytrace=False,
            )
        with open(self.log_path, "wb") as log:
            stdout = open(self.stdout_path, "wb") if self.stdout_path is not None else None
            try:
                self.process = subprocess.Popen(
                    self.command, stdout=stdout or log, stderr=log, stdin=subprocess.DEVNULL,
                    cwd=REPO, env=child_environment(self.env) if self.env else None,
                )
            finally:
                if stdout is not None:
                    stdout.close()
        return self

    def exited(self) -> str | None:
        """None while running; otherwise why it is not."""
        if self.process is None:
            return "blemu was not started"
        status = self.process.poll()
        if status is None:
            return None
        return f"blemu exited with status {status}; output:\n{self.log_tail()}"

    def wait_advertising(self, rootcanal: RootCanal, timeout: float = 20.0, name: str | None = None,
                         alive: Callable[[], str | None] | None = None) -> ScanResult:
        """Scan until this process advertises its name (or `name`); fail early if it exits, or
        when `alive` says why the process that advertises stopped (a probe that was never
        started scans for another process: without `alive`, its first poll would end the scan)."""
        wanted = name or self.name
        assert wanted is not None, "no name to scan for: pass name="

        async def scan() -> ScanResult:
            async with Central(rootcanal.controller_spec, name="readiness-scanner") as central:
                return await central.scan_for(wanted, timeout=timeout, alive=alive or self.exited)

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
        """The last lines of blemu's output: for a failure's message, not for what a test checks
        (a line that scrolled out of the tail would be missed)."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no output)"

    def log_text(self) -> str:
        """blemu's whole output so far: what a test counts or looks for in it."""
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_entries(self) -> list[LogEntry]:
        """blemu's log lines so far, parsed (lines that are not log entries are left out)."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return []
        return [entry for line in text.splitlines() if (entry := parse_log_line(line)) is not None]

    def events(self, event: str) -> list[LogEntry]:
        """The log entries carrying `event=EVENT` (Docs/REFERENCE.md, Logs: BLEMU_EVENT)."""
        return [entry for entry in self.log_entries() if entry.fields.get("event") == event]

    def wait_for_event(self, event: str, count: int = 1, timeout: float = 10.0,
                       allow_exit: bool = False) -> list[LogEntry]:
        """Poll the log until `count` entries carry `event=EVENT`; return them.

        Fails after `timeout`, or as soon as blemu exits (unless `allow_exit`).
        """
        deadline = time.monotonic() + timeout
        while True:
            found = self.events(event)
            if len(found) >= count:
                return found
            if not allow_exit and (reason := self.exited()) is not None:
                raise AssertionError(f"waiting for {count} event={event} (have {len(found)}): {reason}")
            if time.monotonic() >= deadline:
                raise AssertionError(
                    f"{len(found)} of {count} event={event} log entries within {timeout:.0f} s; "
                    f"output ({self.log_path}):\n{self.log_tail()}")
            time.sleep(0.05)


# ---------------------------------------------------------------------------------------------
# blemu's stderr log lines (Sources/Core/Logging.swift, StderrLogHandler):
#   LEVEL message  [key=value key=value]
# The keys are LogKey's; with --log journal each becomes the field BLEMU_<KEY>.

LOG_LEVELS = ("TRACE", "DEBUG", "INFO", "NOTICE", "WARNING", "ERROR", "CRITICAL")


@dataclasses.dataclass
class LogEntry:
    level: str
    message: str
    fields: dict[str, str]
    line: str


def parse_log_line(line: str) -> LogEntry | None:
    """One stderr log line, or None when the line is not a log entry (say, the exit reason)."""
    level, space, rest = line.partition(" ")
    if not space or level not in LOG_LEVELS:
        return None
    fields: dict[str, str] = {}
    message = rest
    head, bracket, tail = rest.rpartition("  [")
    if bracket and tail.endswith("]"):
        message = head
        key = None
        for token in tail[:-1].split(" "):
            name, equals, value = token.partition("=")
            if equals and name and all(c.islower() or c == "_" for c in name):
                key = name
                fields[key] = value
            elif key is not None:  # a value with spaces in it
                fields[key] += " " + token
    return LogEntry(level=level, message=message, fields=fields, line=line)


def child_environment(overrides: dict[str, str | None]) -> dict[str, str]:
    """This process's environment with `overrides` applied (a None value removes the variable)."""
    env = dict(os.environ)
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


@dataclasses.dataclass
class CliResult:
    args: list[str]
    returncode: int
    stdout: str
    stderr: str
    elapsed: float

    @property
    def reason_lines(self) -> list[str]:
        """stderr lines that are not log entries: what blemu says about why it stopped."""
        return [line for line in self.stderr.splitlines() if line.strip() and parse_log_line(line) is None]

    def describe(self) -> str:
        return (f"`blemu {shlex.join(self.args)}` exited {self.returncode} after {self.elapsed:.1f} s\n"
                f"--- stdout:\n{self.stdout}--- stderr:\n{self.stderr}")


def run_cli(args: list[str], env: dict[str, str | None] | None = None, timeout: float = 10.0) -> CliResult:
    """Run `blemu ARGS` to completion (fail after `timeout`). BLEMU_CONTROLLER is removed from
    the environment unless `env` sets it, so the user's own setting cannot leak in."""
    binary = blemu_binary()
    if not binary.exists():
        pytest.fail(f"blemu binary not found at {binary}: build it or set BLEMU_BIN", pytrace=False)
    started = time.monotonic()
    try:
        completed = subprocess.run(
            [str(binary), *args], capture_output=True, stdin=subprocess.DEVNULL, cwd=REPO, timeout=timeout,
            env=child_environment({"BLEMU_CONTROLLER": None, **(env or {})}),
        )
    except subprocess.TimeoutExpired as error:
        raise AssertionError(
            f"`blemu {shlex.join(args)}` did not exit within {timeout:.0f} s; stderr so far:\n"
            f"{(error.stderr or b'').decode(errors='replace')}") from None
    return CliResult(args=args, returncode=completed.returncode,
                     stdout=completed.stdout.decode(errors="replace"),
                     stderr=completed.stderr.decode(errors="replace"),
                     elapsed=time.monotonic() - started)


def closed_tcp_port() -> int:
    """A port on 127.0.0.1 nobody listens on (free a moment ago)."""
    return free_tcp_ports(1)[0]


class RestartableRootCanal:
    """A rootcanal whose HCI port stays the same across `crash()` and `restart()`.

    Quacks like RootCanal where the harness needs it (`controller_spec`, `log_path`,
    `log_tail`, `stop`). Every instance's log is kept in `log_paths`.
    """

    def __init__(self, label: str = "rc"):
        self.label = label
        self.server: RootCanal | None = None
        self.hci_port: int | None = None
        self.log_paths: list[Path] = []

    def _new_server(self) -> RootCanal:
        path = log_dir() / f"rootcanal-{unique_name(self.label)}.log"
        self.log_paths.append(path)
        return RootCanal(hci_port=self.hci_port, log_path=path)

    def start(self) -> "RestartableRootCanal":
        assert self.server is None or self.server.process is None or self.server.process.poll() is not None, \
            "rootcanal is already running"
        server = self._new_server()
        try:
            server.start()
        except BlemuError as error:
            pytest.fail(str(error), pytrace=False)
        self.server = server
        self.hci_port = server.hci_port
        return self

    def restart(self) -> "RestartableRootCanal":
        """A new rootcanal (a new radio, new controllers) on the same HCI port."""
        return self.start()

    def crash(self) -> None:
        """SIGKILL rootcanal's whole process group: connections drop without a goodbye."""
        server = self.server
        if server is None or server.process is None or server.process.poll() is not None:
            raise AssertionError("rootcanal is not running")
        try:
            os.killpg(server.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        server.process.wait(5)

    @property
    def controller_spec(self) -> str:
        assert self.hci_port is not None, "rootcanal was never started"
        return f"tcp:127.0.0.1:{self.hci_port}"

    @property
    def log_path(self) -> Path | None:
        return self.log_paths[-1] if self.log_paths else None

    def log_tail(self, lines: int = 40) -> str:
        return self.server.log_tail(lines) if self.server is not None else "(never started)"

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()


class BlemuFactory:
    def __init__(self, rootcanal: RootCanal):
        self.rootcanal = rootcanal
        self.processes: list[BlemuProcess] = []

    def start(self, name: str | None, wait_advertising: bool = True, **options: Any) -> BlemuProcess:
        """Start a blemu (options: BlemuProcess's; `controller` defaults to this radio's spec)."""
        controller = options.pop("controller", self.rootcanal.controller_spec)
        process = BlemuProcess(controller, name, **options)
        self.processes.append(process)
        process.start()
        if wait_advertising:
            process.wait_advertising(self.rootcanal)
        return process

    def cleanup(self) -> None:
        for process in self.processes:
            process.kill()


# ---------------------------------------------------------------------------------------------
# Shared by the device test modules.


async def find_each(scanner: Central, blemu, names: list[str], timeout: float = 20.0) -> list:
    """Each named device's advertisements, found by the address blemu says it advertises from
    (`advertising as "NAME" (ADDRESS)`, event=advertising-started). Its complete name is only in
    its scan response, and rootcanal answers a scanner's scan requests for one set at a time,
    always the same first: with several sets on one controller a scan response of another set
    can take longer than any timeout, above all on a loaded machine. The names are checked over
    GATT (Device Name) where a test connects. With `--privacy` the address is the set's
    resolvable private address, current until it rotates."""
    deadline = time.monotonic() + timeout
    addresses: dict[str, str] = {}
    while len(addresses) < len(names):
        for entry in blemu.events("advertising-started"):
            match = re.match(r'advertising as "(.*)" \(([0-9A-F:]{17})[,)]', entry.message)
            if match and match.group(1) in names:
                addresses[match.group(1)] = match.group(2)
        if len(addresses) == len(names):
            break
        if (reason := blemu.exited()) is not None or time.monotonic() > deadline:
            raise AssertionError(f"advertising of {sorted(set(names) - set(addresses))}: {reason or 'not started'}\n{blemu.log_tail()}")
        await asyncio.sleep(0.05)
    return [await scanner.scan_until(lambda result, address=addresses[name]: str(result.address) == address,
                                     f"{name} at {addresses[name]}", timeout=timeout,
                                     want_scan_response=False, alive=blemu.exited)
            for name in names]


def paced_device(controller: str, name: str, device: str, fast_interval_ms: float,
                 slow_interval_ms: float) -> BlemuProcess:
    """`blemu run --config` with one device at its own advertising intervals: for devices that
    share a rootcanal with others while a central finds them by name. rootcanal 1.10 adds no
    advDelay (Vol 6, Part B, 4.4.2.2.1: 0-10 ms at random in each event) and runs its advertisers
    on a 5 ms tick, so two devices at one interval can advertise in the same tick for good; its
    scanner then sends one scan request a tick and the other device's scan response, with its
    name, is never heard (rootcanal logs "Not sending LE Scan request ... already pending").
    Intervals a tick or more apart keep them out of step (Docs/TESTING.md, rootcanal 1.10)."""
    fd, path = tempfile.mkstemp(prefix=f"blemu-{name}-", suffix=".yaml", dir=log_dir())
    with os.fdopen(fd, "w") as file:
        file.write(f"devices:\n  - device: {device}\n    name: {name}\n"
                   f"    advertising: {{ fast_interval_ms: {fast_interval_ms}, slow_interval_ms: {slow_interval_ms} }}\n")
    return BlemuProcess(controller, name, device, devices=[], extra_args=["--config", path], name_in_config=True)


def start_advertising(process: BlemuProcess, rootcanal: RootCanal) -> BlemuProcess:
    """Start `process` and wait until it advertises; kill it if it never does."""
    process.start()
    try:
        process.wait_advertising(rootcanal)
    except BaseException:
        process.kill()
        raise
    return process


JUST_WORKS = "just-works"


def pairing_config(pair: int | str):
    """Bumble's pairing for `connected(pair=...)`: JUST_WORKS (no IO, Secure Connections), or a
    passkey the user types (KeyboardOnly, MITM), as a phone does for a device with a label."""
    from bumble.pairing import PairingConfig, PairingDelegate

    if pair == JUST_WORKS:
        delegate = PairingDelegate(PairingDelegate.NO_OUTPUT_NO_INPUT)
        return lambda _connection: PairingConfig(sc=True, mitm=False, bonding=True, delegate=delegate)

    class Keyboard(PairingDelegate):
        def __init__(self):
            super().__init__(io_capability=PairingDelegate.KEYBOARD_INPUT_ONLY)

        async def get_number(self) -> int | None:
            return int(pair)

    keyboard = Keyboard()
    return lambda _connection: PairingConfig(sc=True, mitm=True, bonding=True, delegate=keyboard)


def passkey_of(process: "BlemuProcess", timeout: float = 10.0) -> int:
    """The passkey a lock without --passkey generated on its first start: logged at start."""
    import re

    entries = process.wait_for_event("state-changed", timeout=timeout)
    found = [int(m.group(1)) for e in entries if (m := re.search(r"pair with the passkey (\d{6})\b", e.message))]
    assert found, f"no generated passkey logged; state-changed lines: {[e.line for e in entries]}"
    return found[-1]


@contextlib.asynccontextmanager
async def connected(blemu: BlemuProcess, label: str = "central", discover: bool = False, pair: int | str | None = None):
    """A new Bumble central on blemu's radio, connected at its advertised address (and its
    database discovered with `discover`); disconnected after, and blemu checked still running.
    `pair`: pair first (JUST_WORKS, or the passkey to type), as the lock's control point and
    event log and the thermostat's writes need (Docs/SECURITY.md)."""
    assert blemu.scan is not None
    async with Central(blemu.controller, name=label) as central:
        if pair is not None:
            central.device.pairing_config_factory = pairing_config(pair)
        conn = await central.connect(blemu.scan.address)
        try:
            if pair is not None:
                await conn.connection.pair()
                assert conn.connection.is_encrypted, "pairing left the link unencrypted"
            if discover:
                await conn.discover_all()
            yield conn
        finally:
            if conn.is_connected:
                with contextlib.suppress(Exception):
                    await conn.disconnect()
    if (reason := blemu.exited()) is not None:
        raise AssertionError(f"blemu is not running after the scenario: {reason}")


async def expect_write_error(conn, characteristic, value: bytes, code: int) -> None:
    """A write that must be refused with ATT error `code`."""
    try:
        await conn.write(characteristic, value)
    except att.ATT_Error as error:
        assert error_code_of(error) == code, f"writing {value.hex()} to {characteristic.uuid}: {error}, expected 0x{code:02x}"
    else:
        raise AssertionError(f"writing {value.hex()} to {characteristic.uuid} succeeded; expected ATT error 0x{code:02x}")
