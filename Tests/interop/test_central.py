"""blemu as a central (`blemu scan`, `blemu gatt`) against blemu's own emulated peripherals and
a Bumble peripheral with a database of its own, all on one rootcanal radio.

Each `blemu scan`/`blemu gatt` is its own process with its own controller on the radio; the
peripherals' values are checked against what the devices are known to serve (Docs/REFERENCE.md)
or what the Bumble peripheral was given.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import select
import signal
import struct
import subprocess
import threading
import time

import pytest
from bumble import gatt
from bumble.core import AdvertisingData
from bumble.hci import HCI_Error
from bumble.device import Device
from bumble.transport import open_transport

from bumble_central import bumble_transport_spec
from harness import BlemuProcess, blemu_binary, paced_device, passkey_of, run_cli, start_advertising, unique_name

THERMOSTAT_TARGET = "7d3c0101-9a5e-4d1a-8f6e-5c1b2d3e4f50"


@pytest.fixture(scope="module")
def heart_rate(rootcanal):
    process = start_advertising(BlemuProcess(rootcanal.controller_spec, unique_name("HR")), rootcanal)
    yield process
    assert process.stop() == 0, process.log_tail()


@pytest.fixture(scope="module")
def thermostat(rootcanal):
    # Beside the heart rate sensor (20 ms, then 152.5 ms) on this module's rootcanal: other
    # intervals, so the two never advertise in step (harness.paced_device).
    process = start_advertising(paced_device(rootcanal.controller_spec, unique_name("TH"), "thermostat",
                                             fast_interval_ms=30, slow_interval_ms=211.25), rootcanal)
    yield process
    assert process.stop() == 0, process.log_tail()


def blemu_cli(rootcanal, *args: str, timeout: float = 40.0):
    return run_cli([args[0], "--controller", rootcanal.controller_spec, *args[1:]], timeout=timeout)


def json_lines(result) -> list[dict]:
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    assert lines, f"no output:\n{result.describe()}"
    return lines


# ---------------------------------------------------------------------------------------------
# blemu scan


def test_scan_lists_the_emulated_devices_with_what_they_advertise(rootcanal, heart_rate, thermostat):
    result = blemu_cli(rootcanal, "scan", "--timeout", "6", "--json")
    assert result.returncode == 0, result.describe()
    seen = {entry["address"]: entry for entry in json_lines(result)}
    hr = seen.get(str(heart_rate.scan.address.to_string(with_type_qualifier=False)).upper())
    assert hr is not None, f"heart-rate {heart_rate.scan.address} not in {list(seen)}"
    # The last line of an advertiser holds everything its data and scan response say.
    last = [entry for entry in json_lines(result) if entry["address"] == hr["address"]][-1]
    assert last["name"] == heart_rate.name, last
    assert {"180D", "180F"} <= set(last["services"]), last
    assert last["appearance"] == 0x0341 and last["address_type"] == "random" and last["connectable"] is True, last
    # Named from the SIG's assigned numbers (Sources/AssignedNumbers).
    assert last["appearance_name"] == "Heart Rate Sensor: Heart Rate Belt", last
    assert isinstance(last["rssi"], int) and -127 <= last["rssi"] <= 20, last
    assert json_lines(result)[0]["update"] == "new"
    names = {entry["name"] for entry in json_lines(result)}
    assert thermostat.name in names, names


def test_scan_filters_by_service_and_name(rootcanal, heart_rate, thermostat):
    by_service = blemu_cli(rootcanal, "scan", "--timeout", "3", "--json", "--service", "181A")
    assert by_service.returncode == 0, by_service.describe()
    assert {entry["name"] for entry in json_lines(by_service) if entry["name"]} == {thermostat.name}
    by_name = blemu_cli(rootcanal, "scan", "--timeout", "3", "--name", heart_rate.name)
    assert by_name.returncode == 0, by_name.describe()
    lines = by_name.stdout.splitlines()
    assert lines and all(heart_rate.name in line or "services [180D (Heart Rate) 180F (Battery Service)]" in line
                         for line in lines), by_name.describe()
    assert not any(thermostat.name in line for line in lines)


def test_scan_table_redraws_every_advertiser_in_place(rootcanal, heart_rate):
    """`blemu scan --table`: the screen cleared, then a table redrawn from the top each second,
    the heart-rate sensor's row naming its services and appearance."""
    result = blemu_cli(rootcanal, "scan", "--timeout", "4", "--table", "--name", heart_rate.name)
    assert result.returncode == 0, result.describe()
    frames = result.stdout.split("\x1b[H")[1:]
    assert result.stdout.startswith("\x1b[2J") and len(frames) >= 3, result.describe()
    last = [line.removesuffix("\x1b[K") for line in frames[-1].split("\x1b[J")[0].splitlines()]
    assert last[0].startswith("ADDRESS") and last[1] == "1 advertiser", last
    assert heart_rate.name[:20] in last[2] and "dBm" in last[2], last
    assert "180D (Heart Rate); 180F (Battery Service); Heart Rate Sensor: Heart Rate Belt" in last[2], last
    assert run_cli(["scan", "--controller", "tcp:127.0.0.1:1", "--table", "--json"]).returncode == 64


def test_scan_refuses_bad_options():
    assert run_cli(["scan", "--controller", "tcp:127.0.0.1:1", "--service", "nope"]).returncode == 64
    assert run_cli(["scan", "--controller", "tcp:127.0.0.1:1", "--timeout", "-1"]).returncode == 64
    result = run_cli(["scan"])
    assert result.returncode == 64 and "--controller" in result.stderr, result.describe()


# ---------------------------------------------------------------------------------------------
# blemu gatt against blemu's devices


def test_gatt_dump_decodes_the_heart_rate_sensor(rootcanal, heart_rate):
    result = blemu_cli(rootcanal, "gatt", "--name", heart_rate.name, "dump", "--json")
    assert result.returncode == 0, result.describe()
    [dump] = json_lines(result)
    assert dump["name"] == heart_rate.name
    services = {service["uuid"]: service for service in dump["services"]}
    assert list(services)[:2] == ["1800", "1801"], list(services)
    assert {"180D", "180A", "180F", "7d3c0001-9a5e-4d1a-8f6e-5c1b2d3e4f50"} <= set(services)
    chars = {c["uuid"]: c for c in services["180D"]["characteristics"]}
    assert chars["2A38"]["decoded"] == "chest" and chars["2A38"]["value"] == "01"
    assert chars["2A37"]["properties"] == ["notify"] and "value" not in chars["2A37"]
    assert [d["uuid"] for d in chars["2A37"]["descriptors"]] == ["2902"]
    # Names from the SIG's assigned numbers, beside the UUIDs.
    assert services["180D"]["name"] == "Heart Rate" and services["1800"]["name"] == "Generic Access", services["180D"]
    assert chars["2A37"]["name"] == "Heart Rate Measurement" and chars["2A38"]["name"] == "Body Sensor Location"
    [cccd] = chars["2A37"]["descriptors"]
    assert cccd["name"] == "Client Characteristic Configuration" and cccd["decoded"] == "0x0000 (off)", cccd
    gap = {c["uuid"]: c for c in services["1800"]["characteristics"]}
    assert gap["2A01"]["decoded"] == "0x0341 (Heart Rate Sensor: Heart Rate Belt)", gap["2A01"]
    dis = {c["uuid"]: c for c in services["180A"]["characteristics"]}
    assert dis["2A29"]["decoded"] == '"blemu"'
    battery = services["180F"]["characteristics"][0]
    assert battery["decoded"] == "100 %"
    diagnostics = services["7d3c0001-9a5e-4d1a-8f6e-5c1b2d3e4f50"]["characteristics"][0]
    # A long value (more than one ATT_MTU at the default) read whole by Read Blob.
    value = json.loads(bytes.fromhex(diagnostics["value"]))
    assert value["device"] == "heart-rate" and value["connections"] == 1, value


def test_gatt_subscribe_prints_heart_rates(rootcanal, heart_rate):
    result = blemu_cli(rootcanal, "gatt", "--service", "180D", "subscribe", "2A37", "--count", "3", "--json")
    assert result.returncode == 0, result.describe()
    values = json_lines(result)
    assert len(values) == 3, values
    for value in values:
        # When it came (UTC), for scripts that time notifications.
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", value["time"]), value
        assert value["name"] == "Heart Rate Measurement", value
        bpm, unit = value["decoded"].split(",")[0].split(" ")
        assert value["uuid"] == "2A37" and unit == "bpm" and 30 <= int(bpm) <= 220, value
        # The decoded text is the measurement's own bytes (HRS 1.0, 3.1): flags, then the rate.
        raw = bytes.fromhex(value["value"])
        assert (raw[1] if raw[0] & 0x01 == 0 else raw[1] | raw[2] << 8) == int(bpm), value


def test_ctrl_c_on_subscribe_is_a_clean_stop(rootcanal, heart_rate):
    """Ctrl-C (SIGINT) on `blemu gatt ... subscribe`, the demo's watcher, after a value came: the
    stop the user asked for exits 0 and says nothing on stderr (the link's local disconnection,
    0x16, was reported as `Error: the peripheral disconnected` with status 1)."""
    watcher = subprocess.Popen([str(blemu_binary()), "gatt", "--controller", rootcanal.controller_spec,
                                "--name", heart_rate.name, "--log-level", "error", "subscribe", "2A37"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        # A measurement: connected and subscribed (within 30 s, or fail rather than hang).
        ready, _, _ = select.select([watcher.stdout], [], [], 30)
        first = watcher.stdout.readline() if ready else b""
        assert b"bpm" in first, (first, watcher.poll())
        watcher.send_signal(signal.SIGINT)
        _, stderr = watcher.communicate(timeout=15)
    finally:
        if watcher.poll() is None:
            watcher.kill()
    assert watcher.returncode == 0, stderr.decode(errors="replace")
    assert stderr.decode(errors="replace").strip() == ""


def test_gatt_shell_runs_several_commands_on_one_connection(rootcanal, heart_rate):
    """`blemu gatt ... shell`: commands from stdin on one connection; a bad or failing command
    is said on stderr and the shell goes on (exit 1 at the end); values subscribed to keep
    coming between commands; `quit` ends it."""
    script = "read 2A19\n# a comment\nread 2A38\nfrobnicate\nread 2A6E\nwrite 2A38 01\nread 2A29\n"
    completed = subprocess.run([str(blemu_binary()), "gatt", "--controller", rootcanal.controller_spec, "--name", heart_rate.name,
                                "shell"], input=script.encode(), capture_output=True, timeout=60)
    stdout, stderr = completed.stdout.decode(), completed.stderr.decode(errors="replace")
    assert stdout.splitlines() == ["100 %  [64]", "chest  [01]", '"blemu"'], (stdout, stderr)
    assert stderr.count("connected to ") == 1, stderr
    assert "unknown command 'frobnicate'" in stderr and "no characteristic 2A6E" in stderr, stderr
    assert "Write Not Permitted (0x03)" in stderr and "3 shell commands failed" in stderr, stderr
    assert completed.returncode == 1, (completed.returncode, stderr)

    watcher = subprocess.Popen([str(blemu_binary()), "gatt", "--controller", rootcanal.controller_spec, "--name", heart_rate.name,
                                "shell", "--json"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        watcher.stdin.write(b"subscribe 2A37\n")
        watcher.stdin.flush()
        def next_value():
            ready, _, _ = select.select([watcher.stdout], [], [], 30)
            assert ready, watcher.poll()
            return json.loads(watcher.stdout.readline())
        assert next_value()["uuid"] == "2A37"
        # A read between two notifications, on the same connection.
        watcher.stdin.write(b"read 2A19\n")
        watcher.stdin.flush()
        values = [next_value() for _ in range(4)]
        assert any(v["uuid"] == "2A19" and v["decoded"] == "100 %" for v in values), values
        assert sum(v["uuid"] == "2A37" and "time" in v for v in values) >= 2, values
        watcher.stdin.write(b"unsubscribe 2A37\nquit\n")
        watcher.stdin.flush()
        _, stderr = watcher.communicate(timeout=15)
    finally:
        if watcher.poll() is None:
            watcher.kill()
    assert watcher.returncode == 0, stderr.decode(errors="replace")
    assert b"unsubscribed from 2A37" in stderr, stderr


def test_gatt_shell_names_characteristics_by_name_and_handle_and_labels_several_values(rootcanal, heart_rate):
    """A shell line names a characteristic by the name `dump` shows ("Battery Level" in quotes,
    or battery-level) or by its value handle (0x00NN), as well as by UUID; a read of several
    values labels each with its characteristic; `--json` names it as `dump` does."""
    first = blemu_cli(rootcanal, "gatt", "--name", heart_rate.name, "read", "2A19", "--json")
    assert first.returncode == 0, first.describe()
    handle = json_lines(first)[0]["handle"]
    script = f'read "Battery Level"\nread {handle}\nread body-sensor-location BATTERY_LEVEL\nread no-such-thing\n'
    completed = subprocess.run([str(blemu_binary()), "gatt", "--controller", rootcanal.controller_spec, "--name", heart_rate.name,
                                "shell"], input=script.encode(), capture_output=True, timeout=60)
    stdout, stderr = completed.stdout.decode(), completed.stderr.decode(errors="replace")
    assert stdout.splitlines() == ["100 %  [64]", "100 %  [64]", "2A38 (Body Sensor Location): chest  [01]",
                                   "2A19 (Battery Level): 100 %  [64]"], (stdout, stderr)
    assert "has no characteristic named 'no-such-thing'" in stderr and "1 shell command failed" in stderr, stderr
    # stdin is not a terminal: no prompt.
    assert "gatt> " not in stderr, stderr
    named = blemu_cli(rootcanal, "gatt", "--name", heart_rate.name, "read", "battery-level", "0x2A38", "--json")
    assert named.returncode == 0, named.describe()
    assert [(v["uuid"], v["name"]) for v in json_lines(named)] == [("2A19", "Battery Level"), ("2A38", "Body Sensor Location")], named.stdout


def test_gatt_shell_at_a_terminal_edits_lines_and_keeps_a_history(rootcanal, heart_rate):
    """At a terminal (a pty here) the shell's lines are edited with libedit: a prompt on stderr
    when the next command is taken, Backspace works, the up arrow brings the last line back; the
    prompt and the echo stay off stdout, and the terminal has its modes back after `quit`."""
    import os
    import pty
    import termios
    if not any(os.path.exists(os.path.join(d, "libedit.so.2")) for d in ("/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib")):
        pytest.fail("libedit2 (Debian's libedit2) is missing: scripts/setup installs it", pytrace=False)
    controller, terminal = pty.openpty()
    modes_before = termios.tcgetattr(terminal)
    shell = subprocess.Popen([str(blemu_binary()), "gatt", "--controller", rootcanal.controller_spec, "--name", heart_rate.name,
                              "shell"], stdin=terminal, stdout=subprocess.PIPE, stderr=terminal)
    screen = bytearray()

    def until(expected: bytes, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while expected not in screen:
            ready, _, _ = select.select([controller], [], [], max(0.0, deadline - time.monotonic()))
            assert ready, f"no {expected!r} on the terminal: {bytes(screen)!r}"
            screen.extend(os.read(controller, 4096))

    def value() -> str:
        ready, _, _ = select.select([shell.stdout], [], [], 30)
        assert ready, f"no value on stdout; terminal: {bytes(screen)!r}"
        return shell.stdout.readline().decode().rstrip("\n")

    try:
        until(b"gatt> ")
        screen.clear()
        os.write(controller, b"read 2A19\r")
        assert value() == "100 %  [64]"
        until(b"gatt> ")
        screen.clear()
        os.write(controller, b"rxx\x7f\x7fead 2A38\r")          # two typos taken back with Backspace
        assert value() == "chest  [01]"
        until(b"gatt> ")
        screen.clear()
        os.write(controller, b"\x1b[A\x1b[A\r")                 # up twice: the first line again
        assert value() == "100 %  [64]"
        until(b"gatt> ")
        os.write(controller, b"quit\r")
        assert shell.wait(15) == 0
        assert shell.stdout.read() == b"", "the prompt or the echo reached stdout"
        modes_after = termios.tcgetattr(terminal)
        assert modes_after[3] & (termios.ICANON | termios.ECHO) == modes_before[3] & (termios.ICANON | termios.ECHO), \
            "the terminal was left in raw mode"
    finally:
        if shell.poll() is None:
            shell.kill()
        os.close(controller)
        os.close(terminal)


def test_two_advertisers_of_one_name_are_listed_not_guessed(rootcanal):
    """Two heart-rate sensors under one name: `blemu gatt --name` names neither, it lists both
    (name, address, RSSI) and asks for --address; --address then reads from the one chosen."""
    name = unique_name("TW")
    first = start_advertising(BlemuProcess(rootcanal.controller_spec, name, extra_args=["--address", "C4:00:00:00:00:01"]), rootcanal)
    second = start_advertising(BlemuProcess(rootcanal.controller_spec, name, extra_args=["--address", "C4:00:00:00:00:02"]), rootcanal)
    try:
        result = blemu_cli(rootcanal, "gatt", "--name", name, "read", "2A19")
        assert result.returncode == 1, result.describe()
        [line] = [line for line in result.stderr.splitlines() if "advertisers match" in line]
        assert f"2 advertisers match name '{name}': " in line and "give --address to choose one" in line, line
        assert "C4:00:00:00:00:01" in line and "C4:00:00:00:00:02" in line and line.count(f'"{name}"') == 2, line
        assert "dBm" in line or "RSSI unknown" in line, line
        # Decided once the window is over, not at the timeout.
        assert result.elapsed < 6, result.describe()
        chosen = blemu_cli(rootcanal, "gatt", "--address", "C4:00:00:00:00:02", "read", "2A19")
        assert chosen.returncode == 0 and chosen.stdout.startswith("100 %"), chosen.describe()
    finally:
        assert second.stop() == 0, second.log_tail()
    # The other one gone, the name is unique again: read at once (the window, not the timeout).
    try:
        alone = blemu_cli(rootcanal, "gatt", "--name", name, "read", "2A19", "--json")
        assert alone.returncode == 0 and json_lines(alone)[0]["value"] == "64", alone.describe()
        assert alone.elapsed < 6, alone.describe()
    finally:
        assert first.stop() == 0, first.log_tail()


def test_gatt_read_and_errors_by_spec_name(rootcanal, heart_rate):
    read = blemu_cli(rootcanal, "gatt", "--name", heart_rate.name, "read", "2A19")
    assert read.returncode == 0 and read.stdout.strip().startswith("100 %"), read.describe()
    write = blemu_cli(rootcanal, "gatt", "--name", heart_rate.name, "write", "2A38", "01")
    assert write.returncode == 1, write.describe()
    assert "Write Not Permitted (0x03)" in write.stderr, write.describe()
    missing = blemu_cli(rootcanal, "gatt", "--name", heart_rate.name, "read", "2A6E")
    assert missing.returncode == 1 and "no characteristic 2A6E" in missing.stderr, missing.describe()
    nobody = blemu_cli(rootcanal, "gatt", "--name", "nobody-" + unique_name(), "--timeout", "2", "dump")
    assert nobody.returncode == 1 and "no advertiser matching" in nobody.stderr, nobody.describe()


def test_gatt_write_then_read_back_on_the_thermostat(rootcanal, thermostat, tmp_path):
    value = struct.pack("<h", 2150).hex()
    state = ["--state-dir", str(tmp_path)]
    # The thermostat's writes need an encrypted link: refused (0x05), blemu gatt pairs (Just
    # Works) and writes again, as a phone does.
    write = blemu_cli(rootcanal, "gatt", "--name", thermostat.name, *state, "write", THERMOSTAT_TARGET, value)
    assert write.returncode == 0, write.describe()
    assert "Insufficient Authentication" in write.stderr and "paired:" in write.stderr, write.describe()
    read = blemu_cli(rootcanal, "gatt", "--name", thermostat.name, *state, "read", THERMOSTAT_TARGET, "--json")
    assert read.returncode == 0, read.describe()
    assert json_lines(read)[0]["value"] == value
    # Out of range: the thermostat's rule, 0xFF, by its name (after encrypting with the bond).
    bad = blemu_cli(rootcanal, "gatt", "--name", thermostat.name, *state, "write", THERMOSTAT_TARGET, struct.pack("<h", 9000).hex())
    assert bad.returncode == 1 and "(0xff)" in bad.stderr.lower(), bad.describe()
    assert "encrypted with our bond" in bad.stderr, bad.describe()
    # A person's dump: names beside the UUIDs, the target decoded by its Presentation Format
    # (it printed `6608`), descriptors named and decoded, its Valid Range in degrees.
    dump = blemu_cli(rootcanal, "gatt", "--name", thermostat.name, *state, "--pair", "dump")
    assert dump.returncode == 0, dump.describe()
    lines = dump.stdout.splitlines()
    assert "service 181A (Environmental Sensing)" in dump.stdout and "(Thermostat) handles" in dump.stdout, dump.stdout
    [target] = [line for line in lines if line.startswith(f"  characteristic {THERMOSTAT_TARGET}")]
    assert "(Target temperature)" in target and target.endswith(": 21.50 °C  [6608]"), target
    assert re.search(r"characteristic 2A6E \(Temperature\) handle \S+ \[read notify\]: -?\d+\.\d+ °C  \[[0-9a-f]{4}\]", dump.stdout), dump.stdout
    assert re.search(r"descriptor 2904 \(Characteristic Presentation Format\) handle \S+: format 0x0e, exponent -2, unit °C", dump.stdout), dump.stdout
    assert re.search(r"descriptor 2906 \(Valid Range\) handle \S+: 5\.00 °C to 35\.00 °C", dump.stdout), dump.stdout
    assert re.search(r"descriptor 2902 \(Client Characteristic Configuration\) handle \S+: 0x0000 \(off\)", dump.stdout), dump.stdout
    assert re.search(r"characteristic 7d3c0102-\S+ \(Mode: 0 off, 1 heat, 2 cool, 3 auto\) handle \S+ \[read write notify\]: (off|heat|cool|auto)  \[0[0-3]\]",
                     dump.stdout), dump.stdout
    # One read with --json: the name and the value decoded by the Presentation Format read with it.
    read = blemu_cli(rootcanal, "gatt", "--name", thermostat.name, *state, "read", THERMOSTAT_TARGET)
    assert read.returncode == 0 and read.stdout.strip() == "21.50 °C  [6608]", read.describe()


# ---------------------------------------------------------------------------------------------
# blemu gatt against an independent peripheral (Bumble)

CUSTOM_SERVICE = "6e400001-b5a3-f393-e0a9-e50e24dcca9e"
CUSTOM_LONG = "6e400003-b5a3-f393-e0a9-e50e24dcca9e"
CUSTOM_WRITE = "6e400002-b5a3-f393-e0a9-e50e24dcca9e"
CUSTOM_INDICATE = "6e400004-b5a3-f393-e0a9-e50e24dcca9e"
INCLUDED_SERVICE = "6e400010-b5a3-f393-e0a9-e50e24dcca9e"
LONG_VALUE = bytes(range(200))


class BumblePeripheral:
    """A Bumble peripheral on its own thread and event loop: a 128-bit service that includes
    another, a 200-byte value and a writable characteristic that keeps what it is given."""

    def __init__(self, controller: str, name: str):
        self.controller = controller
        self.name = name
        self.written: list[bytes] = []
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.stopping: asyncio.Event | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._main())

    async def _advertise_until_stopped(self, device) -> None:
        """Advertises the name (connectable, general discoverable), says ready, and serves
        until `stop()`: the life of the subclasses, which differ only in their database."""
        device.advertising_data = bytes(AdvertisingData([
            (AdvertisingData.FLAGS, bytes([0x06])),
            (AdvertisingData.COMPLETE_LOCAL_NAME, self.name.encode()),
        ]))
        await device.power_on()
        await device.start_advertising(auto_restart=True)
        self.ready.set()
        await self.stopping.wait()
        with contextlib.suppress(HCI_Error):
            await device.stop_advertising()

    async def _main(self) -> None:
        self.stopping = asyncio.Event()
        async with await open_transport(bumble_transport_spec(self.controller)) as (source, sink):
            device = Device.with_hci(self.name, "F0:F1:F2:F3:F4:F5", source, sink)
            included = gatt.Service(INCLUDED_SERVICE, [
                gatt.Characteristic("2A19", gatt.Characteristic.Properties.READ, gatt.Characteristic.READABLE, bytes([42])),
            ], primary=False)
            written = gatt.Characteristic(
                CUSTOM_WRITE, gatt.Characteristic.Properties.READ | gatt.Characteristic.Properties.WRITE,
                gatt.Characteristic.READABLE | gatt.Characteristic.WRITEABLE,
                gatt.CharacteristicValue(read=lambda _: self.written[-1] if self.written else b"",
                                         write=lambda _, value: self.written.append(bytes(value))))
            indicating = gatt.Characteristic(CUSTOM_INDICATE, gatt.Characteristic.Properties.INDICATE,
                                             gatt.Characteristic.READABLE, b"")
            service = gatt.Service(CUSTOM_SERVICE, [
                gatt.Characteristic(CUSTOM_LONG, gatt.Characteristic.Properties.READ, gatt.Characteristic.READABLE, LONG_VALUE),
                written,
                indicating,
            ], included_services=[included])
            device.add_services([included, service])
            device.advertising_data = bytes(AdvertisingData([
                (AdvertisingData.FLAGS, bytes([0x06])),
                (AdvertisingData.COMPLETE_LOCAL_NAME, self.name.encode()),
            ]))
            await device.power_on()
            await device.start_advertising(auto_restart=True)
            self.ready.set()
            # Indications to whoever subscribed, a counter, every 300 ms.
            count = 0
            while not self.stopping.is_set():
                with contextlib.suppress(Exception):
                    await device.indicate_subscribers(indicating, bytes([count & 0xFF]))
                count += 1
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self.stopping.wait(), 0.3)
            # A legacy advertisement ends with the connection it gets (auto_restart starts it
            # after the disconnection): stopping it while a central is still on is disallowed.
            with contextlib.suppress(HCI_Error):
                await device.stop_advertising()

    def start(self) -> "BumblePeripheral":
        self.thread.start()
        assert self.ready.wait(20), "the Bumble peripheral did not start"
        return self

    def stop(self) -> None:
        if self.stopping is not None:
            self.loop.call_soon_threadsafe(self.stopping.set)
        self.thread.join(10)


def test_gatt_against_bumble_long_values_includes_and_long_writes(rootcanal):
    name = unique_name("BP")
    peripheral = BumblePeripheral(rootcanal.controller_spec, name).start()
    try:
        dump = blemu_cli(rootcanal, "gatt", "--name", name, "dump", "--json")
        assert dump.returncode == 0, dump.describe()
        services = {service["uuid"]: service for service in json_lines(dump)[0]["services"]}
        assert CUSTOM_SERVICE in services, list(services)
        custom = services[CUSTOM_SERVICE]
        assert custom["includes"] == [INCLUDED_SERVICE], custom
        chars = {c["uuid"]: c for c in custom["characteristics"]}
        assert bytes.fromhex(chars[CUSTOM_LONG]["value"]) == LONG_VALUE
        long_write = bytes(range(100, 180))
        write = blemu_cli(rootcanal, "gatt", "--name", name, "write", CUSTOM_WRITE, long_write.hex())
        assert write.returncode == 0, write.describe()
        assert peripheral.written[-1] == long_write, peripheral.written
        text = blemu_cli(rootcanal, "gatt", "--name", name, "write", CUSTOM_WRITE, "--text", "hello")
        assert text.returncode == 0 and peripheral.written[-1] == b"hello", text.describe()
        # Indications from an independent server, each confirmed (or Bumble would send no more).
        indications = blemu_cli(rootcanal, "gatt", "--name", name, "subscribe", CUSTOM_INDICATE, "--count", "3", "--json")
        assert indications.returncode == 0, indications.describe()
        counters = [int(line["value"], 16) for line in json_lines(indications)]
        assert len(counters) == 3 and all((b - a) % 256 == 1 for a, b in zip(counters, counters[1:])), counters
    finally:
        peripheral.stop()


HUGE_SERVICE = "6e400020-b5a3-f393-e0a9-e50e24dcca9e"


class HugePeripheral(BumblePeripheral):
    """A Bumble peripheral serving one service of `count` write-only characteristics without
    descriptors (a dump reads none of them): the database a hostile room host could serve."""

    def __init__(self, controller: str, name: str, count: int):
        super().__init__(controller, name)
        self.count = count

    async def _main(self) -> None:
        self.stopping = asyncio.Event()
        async with await open_transport(bumble_transport_spec(self.controller)) as (source, sink):
            device = Device.with_hci(self.name, "F0:F1:F2:F3:F4:F6", source, sink)
            device.add_services([gatt.Service(HUGE_SERVICE, [
                gatt.Characteristic(f"{0x7000 + n % 0x800:04X}", gatt.Characteristic.Properties.WRITE,
                                    gatt.Characteristic.WRITEABLE, b"")
                for n in range(self.count)
            ])])
            await self._advertise_until_stopped(device)


def dump_with_peak_rss(rootcanal, count: int) -> tuple[int, float]:
    """`blemu gatt dump --json` of a HugePeripheral of `count` characteristics: how many it
    listed, and the process's peak resident size in MB. GNU time forks blemu from its own small
    image and reports the child's ru_maxrss: wait4's figure for a child of this test would count
    the Python image the child ran in before its exec (about 60 MB)."""
    import os
    from harness import REPO, blemu_binary, child_environment
    name = unique_name("HG")
    peripheral = HugePeripheral(rootcanal.controller_spec, name, count).start()
    try:
        process = subprocess.Popen(
            ["/usr/bin/time", "-f", "blemu-peak-rss-kb %M", str(blemu_binary()), "gatt", "--controller", rootcanal.controller_spec, "--name", name, "dump", "--json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, cwd=REPO,
            env=child_environment({"BLEMU_CONTROLLER": None}))
        # The pipes are read on threads so the child never blocks on a full one.
        out: dict[str, bytes] = {}
        readers = [threading.Thread(target=lambda key, pipe: out.__setitem__(key, pipe.read()), args=(key, pipe))
                   for key, pipe in (("stdout", process.stdout), ("stderr", process.stderr))]
        for reader in readers:
            reader.start()
        deadline = time.monotonic() + 150
        while True:
            pid, status, _ = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                process.kill()
                raise AssertionError(f"blemu gatt dump of {count} characteristics did not finish within 150 s")
            time.sleep(0.1)
        for reader in readers:
            reader.join(10)
        process.returncode = os.waitstatus_to_exitcode(status)
        stderr = out.get("stderr", b"").decode(errors="replace")
        assert process.returncode == 0, stderr[-3000:]
        [dump] = [json.loads(line) for line in out["stdout"].decode().splitlines() if line.strip()]
        services = {service["uuid"]: service for service in dump["services"]}
        [peak] = [int(line.split()[1]) for line in stderr.splitlines() if line.startswith("blemu-peak-rss-kb ")]
        return len(services[HUGE_SERVICE]["characteristics"]), peak / 1024
    finally:
        peripheral.stop()


def test_gatt_dump_of_ten_thousand_characteristics_stays_small(rootcanal):
    """Discovery walks the database iteratively, in memory linear in it (Docs/PERFORMANCE.md):
    it once recursed per characteristic, 1.5-2.7 GB for 10,000 characteristics, or a stack
    overflow. The whole dump stays well under 64 MB (about 25 MB in a release build, 10,000
    characteristics adding about 7 MB), and what the 10,000 add to a dump of 10 is held to the
    same bound in debug and release builds, whose own sizes differ."""
    listed, small = dump_with_peak_rss(rootcanal, 10)
    assert listed == 10
    listed, huge = dump_with_peak_rss(rootcanal, 10_000)
    assert listed == 10_000
    print(f"blemu gatt dump: peak RSS {small:.1f} MB for 10 characteristics, {huge:.1f} MB for 10,000")
    assert huge - small < 24, f"10,000 characteristics added {huge - small:.1f} MB ({small:.1f} -> {huge:.1f} MB)"
    assert huge < 48, f"a dump of 10,000 characteristics peaked at {huge:.1f} MB"


class MTUProbePeripheral(BumblePeripheral):
    """A Bumble peripheral that, once blemu's client has exchanged the MTU, sends blemu's own
    small GATT server a 39-byte Read Multiple Request (Vol 3, Part F, 3.4.4.7), past the
    default ATT_MTU of 23, and keeps the answer."""

    def __init__(self, controller: str, name: str):
        super().__init__(controller, name)
        self.answer = None
        self.mtu = None
        self.answered = threading.Event()

    async def _main(self) -> None:
        from bumble import att
        self.stopping = asyncio.Event()
        async with await open_transport(bumble_transport_spec(self.controller)) as (source, sink):
            device = Device.with_hci(self.name, "F0:F1:F2:F3:F4:F7", source, sink)
            device.add_services([gatt.Service(CUSTOM_SERVICE, [
                gatt.Characteristic(CUSTOM_LONG, gatt.Characteristic.Properties.READ, gatt.Characteristic.READABLE, b"probe"),
            ])])

            async def probe(connection) -> None:
                with contextlib.suppress(Exception):
                    self.mtu = connection.att_mtu
                    self.answer = await connection.gatt_client.send_request(
                        att.ATT_Read_Multiple_Request(set_of_handles=[0x0003] * 19))
                self.answered.set()

            def on_connection(connection) -> None:
                connection.on("connection_att_mtu_update", lambda: asyncio.ensure_future(probe(connection)))

            device.on("connection", on_connection)
            await self._advertise_until_stopped(device)


def test_the_central_serves_requests_at_the_mtu_its_client_negotiated(rootcanal):
    """Vol 3, Part F, 3.2.8: one ATT_MTU per link. blemu's central exchanges 517; the
    peripheral's request of 39 bytes to blemu's GAP/GATT server is then answered, not refused
    with Invalid PDU as when the server kept 23 for itself."""
    name = unique_name("MP")
    peripheral = MTUProbePeripheral(rootcanal.controller_spec, name).start()
    try:
        dump = blemu_cli(rootcanal, "gatt", "--name", name, "dump", "--json")
        assert dump.returncode == 0, dump.describe()
        assert peripheral.answered.wait(10), "the peripheral's request was not answered"
        assert peripheral.mtu is not None and peripheral.mtu > 39, peripheral.mtu
        assert type(peripheral.answer).__name__ == "ATT_Read_Multiple_Response", peripheral.answer
    finally:
        peripheral.stop()


# ---------------------------------------------------------------------------------------------
# Cloning: dump --profile, then blemu run PROFILE.json

STACK_SERVICES = {"1800", "1801", "7d3c0001-9a5e-4d1a-8f6e-5c1b2d3e4f50"}


def comparable(profile: dict) -> list:
    """The services a clone serves as the profile says (the stack adds GAP, GATT and Diagnostics
    of its own), without handles."""
    return [service for service in profile["services"] if service["uuid"] not in STACK_SERVICES]


def test_a_bumble_peripheral_dumped_served_and_dumped_again_is_the_same(rootcanal, tmp_path):
    name = unique_name("BP")
    peripheral = BumblePeripheral(rootcanal.controller_spec, name).start()
    try:
        first = blemu_cli(rootcanal, "gatt", "--name", name, "dump", "--profile")
        assert first.returncode == 0, first.describe()
    finally:
        peripheral.stop()
    original = json.loads(first.stdout)
    assert original["format"] == "blemu-gatt-profile" and original["name"] == name, original
    custom = [service for service in original["services"] if service["uuid"] == CUSTOM_SERVICE]
    assert custom and custom[0]["includes"] == [INCLUDED_SERVICE], original["services"]
    assert any(service["uuid"] == INCLUDED_SERVICE and service.get("primary") is False for service in original["services"])
    path = tmp_path / "clone.json"
    path.write_text(first.stdout)

    # No --name: the clone advertises the profile's name.
    clone = BlemuProcess(rootcanal.controller_spec, None, device=str(path)).start()
    try:
        clone.wait_advertising(rootcanal, name=name)
        second = blemu_cli(rootcanal, "gatt", "--name", name, "dump", "--profile")
        assert second.returncode == 0, second.describe()
        again = json.loads(second.stdout)
        assert again["name"] == name and again["appearance"] == original["appearance"]
        assert comparable(again) == comparable(original), (comparable(again), comparable(original))
        # What was writable stays writable in the clone.
        write = blemu_cli(rootcanal, "gatt", "--name", name, "write", CUSTOM_WRITE, "0a0b0c")
        assert write.returncode == 0, write.describe()
        read = blemu_cli(rootcanal, "gatt", "--name", name, "read", CUSTOM_WRITE, "--json")
        assert json_lines(read)[0]["value"] == "0a0b0c", read.describe()
    finally:
        assert clone.stop() == 0, clone.log_tail()


def test_a_malformed_profile_is_refused_before_anything_starts(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"format": "blemu-gatt-profile", "version": 1, "name": "x", "services": [
        {"uuid": "180D", "characteristics": [{"uuid": "2A37", "properties": ["read", "teleport"]}]}]}))
    result = run_cli(["run", str(path), "--controller", "tcp:127.0.0.1:1"])
    assert result.returncode == 64, result.describe()
    assert f"{path}: services[0].characteristics[0].properties[1]: 'teleport' is not one of" in result.stderr, result.describe()


def test_the_lock_dumps_with_its_services(rootcanal, tmp_path):
    lock = start_advertising(BlemuProcess(rootcanal.controller_spec, unique_name("LK"), device="lock"), rootcanal)
    try:
        # The event log needs a link paired with the lock's (generated, logged) passkey: --pair.
        result = blemu_cli(rootcanal, "gatt", "--name", lock.name, "--pair", "--passkey", f"{passkey_of(lock):06d}",
                           "--state-dir", str(tmp_path), "dump", "--json")
        assert result.returncode == 0, result.describe()
        services = {service["uuid"]: service for service in json_lines(result)[0]["services"]}
        lock_service = services["7d3c0200-9a5e-4d1a-8f6e-5c1b2d3e4f50"]
        chars = {c["uuid"]: c for c in lock_service["characteristics"]}
        assert chars["7d3c0201-9a5e-4d1a-8f6e-5c1b2d3e4f50"]["value"] == "01"   # starts locked
        assert chars["7d3c0202-9a5e-4d1a-8f6e-5c1b2d3e4f50"]["properties"] == ["write", "indicate"]
        # The event log is long, dynamic text: read whole.
        log = chars["7d3c0203-9a5e-4d1a-8f6e-5c1b2d3e4f50"]
        assert log["decoded"].startswith('"') and bytes.fromhex(log["value"]).decode(), log
    finally:
        assert lock.stop() == 0, lock.log_tail()


LOCK_SERVICE = "7d3c0200-9a5e-4d1a-8f6e-5c1b2d3e4f50"
LOCK_STATE = "7d3c0201-9a5e-4d1a-8f6e-5c1b2d3e4f50"
LOCK_EVENT_LOG = "7d3c0203-9a5e-4d1a-8f6e-5c1b2d3e4f50"


def lock_characteristics(profile: dict) -> dict:
    [service] = [s for s in profile["services"] if s["uuid"] == LOCK_SERVICE]
    return {c["uuid"]: c for c in service["characteristics"]}


def test_a_dumped_profile_asks_for_what_the_original_refused(rootcanal, tmp_path):
    """The lock's event log needs an authenticated link (Docs/SECURITY.md): a dump as a stranger
    gets Insufficient Authentication (0x05) and records `read-authenticated`; with --pair it reads
    first as a stranger, pairs, reads the log and keeps the permission. The clone refuses an
    unpaired read with the same 0x05 and serves the value to a central that paired with a passkey."""
    from bumble import att
    from bumble.core import UUID
    from bumble_central import error_code_of
    from harness import connected as central_on
    from harness import run

    lock = start_advertising(BlemuProcess(rootcanal.controller_spec, unique_name("LK"), device="lock"), rootcanal)
    try:
        stranger = blemu_cli(rootcanal, "gatt", "--name", lock.name, "--state-dir", str(tmp_path / "a"), "dump", "--profile")
        assert stranger.returncode == 0, stranger.describe()
        chars = lock_characteristics(json.loads(stranger.stdout))
        assert chars[LOCK_EVENT_LOG].get("permissions") == ["read-authenticated"] and "value" not in chars[LOCK_EVENT_LOG], chars
        assert "permissions" not in chars[LOCK_STATE] and chars[LOCK_STATE]["value"] == "01", chars
        # Without --pair the dump never secures the link itself (the lock's Security Request
        # may start a pairing that fails without a passkey: that changes nothing read).
        assert "refused for want of security" not in stranger.stderr, stranger.describe()

        paired = blemu_cli(rootcanal, "gatt", "--name", lock.name, "--pair", "--passkey", f"{passkey_of(lock):06d}",
                           "--state-dir", str(tmp_path / "b"), "dump", "--profile")
        assert paired.returncode == 0, paired.describe()
        assert "paired" in paired.stderr, paired.describe()
        profile = json.loads(paired.stdout)
    finally:
        assert lock.stop() == 0, lock.log_tail()
    chars = lock_characteristics(profile)
    log = chars[LOCK_EVENT_LOG]
    assert log.get("permissions") == ["read-authenticated"] and bytes.fromhex(log["value"]).decode(), log
    # Writes are not probed: the control point's need for a passkey is not in the file.
    assert "permissions" not in chars["7d3c0202-9a5e-4d1a-8f6e-5c1b2d3e4f50"], chars

    path = tmp_path / "lock.json"
    path.write_text(paired.stdout)
    clone = start_advertising(BlemuProcess(rootcanal.controller_spec, unique_name("LC"), device=str(path),
                                           extra_args=["--passkey", "123456"]), rootcanal)
    try:
        async def scenario():
            async with central_on(clone, "unpaired", discover=True) as conn:
                try:
                    await conn.read(conn.characteristic(UUID(LOCK_EVENT_LOG), UUID(LOCK_SERVICE)))
                except att.ATT_Error as error:
                    assert error_code_of(error) == 0x05, error
                else:
                    raise AssertionError("an unpaired central read the clone's event log")
                assert await conn.read(conn.characteristic(UUID(LOCK_STATE), UUID(LOCK_SERVICE))) == b"\x01"
            async with central_on(clone, "paired", discover=True, pair=123456) as conn:
                value = await conn.read(conn.characteristic(UUID(LOCK_EVENT_LOG), UUID(LOCK_SERVICE)))
                assert value.hex() == log["value"], (value, log)

        run(scenario())
    finally:
        assert clone.stop() == 0, clone.log_tail()


def test_captured_notifications_are_replayed_by_the_clone(rootcanal, heart_rate, tmp_path):
    dump = blemu_cli(rootcanal, "gatt", "--name", heart_rate.name, "dump", "--profile", "--capture", "3")
    assert dump.returncode == 0, dump.describe()
    profile = json.loads(dump.stdout)
    [measurement] = [c for s in profile["services"] for c in s["characteristics"] if c["uuid"] == "2A37"]
    captured = measurement.get("notifications", [])
    assert len(captured) >= 2, measurement
    name = unique_name("CL")
    profile["name"] = name
    path = tmp_path / "hr.json"
    path.write_text(json.dumps(profile))
    clone = BlemuProcess(rootcanal.controller_spec, None, device=str(path)).start()
    try:
        clone.wait_advertising(rootcanal, name=name)
        result = blemu_cli(rootcanal, "gatt", "--name", name, "subscribe", "2A37", "--count", "3", "--json")
        assert result.returncode == 0, result.describe()
        values = [line["value"] for line in json_lines(result)]
        assert len(values) == 3 and all(value in captured for value in values), (values, captured)
        # In turn, as captured: consecutive values follow each other in the capture.
        pairs = {(captured[i], captured[(i + 1) % len(captured)]) for i in range(len(captured))}
        assert (values[0], values[1]) in pairs and (values[1], values[2]) in pairs, (values, captured)
    finally:
        assert clone.stop() == 0, clone.log_tail()


def test_a_silent_peripheral_hits_the_30_s_att_timeout(rootcanal, tmp_path):
    """Vol 3, Part F, 3.3.3, for real: blemu's own fault injection holds every read of Body
    Sensor Location for 40 s; the central gives up after 30 s with a timeout, named."""
    control = str(tmp_path / "ctl.sock")
    silent = start_advertising(BlemuProcess(rootcanal.controller_spec, unique_name("SL"), extra_args=["--control", control]), rootcanal)
    try:
        fault = run_cli(["ctl", control, "fault", "heart-rate", "2A38", "delay", "40000"])
        assert fault.returncode == 0, fault.describe()
        result = blemu_cli(rootcanal, "gatt", "--name", silent.name, "read", "2A38", timeout=60)
        assert result.returncode == 1, result.describe()
        assert "no response within 30 s" in result.stderr, result.describe()
        assert 30 <= result.elapsed < 45, result.describe()
    finally:
        assert silent.stop() == 0, silent.log_tail()


def test_service_changed_reaches_a_subscribed_central(rootcanal, tmp_path):
    """Vol 3, Part G, 7.1 for real: while `blemu gatt` listens to Battery Level, the peripheral
    takes the Battery service out (the control socket's `service`); the client rediscovers and
    ends, saying what is gone."""
    control = str(tmp_path / "ctl.sock")
    sensor = start_advertising(BlemuProcess(rootcanal.controller_spec, unique_name("SC"), extra_args=["--control", control]), rootcanal)
    try:
        binary = str(blemu_binary())
        watcher = subprocess.Popen([binary, "gatt", "--controller", rootcanal.controller_spec, "--name", sensor.name,
                                    "--log-level", "notice", "subscribe", "2A19"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 20
            while not any(link for device in json.loads(run_cli(["ctl", control, "list"]).stdout)["devices"]
                          for link in device["connections"]):
                assert time.monotonic() < deadline and watcher.poll() is None, "the central never connected"
                time.sleep(0.2)
            time.sleep(3)   # discovery and the CCCD write done
            change = run_cli(["ctl", control, "service", "heart-rate", "180F", "off"])
            assert change.returncode == 0 and json.loads(change.stdout)["indicated"] == 1, change.describe()
            _, stderr = watcher.communicate(timeout=20)
        finally:
            if watcher.poll() is None:
                watcher.kill()
        text = stderr.decode(errors="replace")
        assert watcher.returncode == 1, text
        assert "changed its database" in text and "characteristic 2A19 is gone" in text, text
    finally:
        assert sensor.stop() == 0, sensor.log_tail()
