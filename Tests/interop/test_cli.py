"""blemu's command line, as Docs/REFERENCE.md gives it ("The program", "Controller specs", "Logs").

Most tests need no radio: they check what `blemu devices` prints and how `blemu run` refuses
a bad command line or an unreachable controller (non-zero status, a one-line reason on
stderr that says what failed and what to do). The rest run blemu on the module's rootcanal
and look at it with a Bumble scanner or central: --address, --name, BLEMU_CONTROLLER, two
devices on one tcp: spec, and the journal-field metadata of a normal run's log lines.
"""

from __future__ import annotations

import errno
import os
import shlex
import socket
import tempfile
from pathlib import Path

import pytest

from bumble_central import UUID_DEVICE_NAME, UUID_GAP_SERVICE, Central, ScanResult, is_static_random
from harness import REPO, BlemuProcess, CliResult, closed_tcp_port, passkey_of, run, run_cli, unique_name

# A controller spec nobody answers at: the validation tests give it so that, were the
# option under test accepted, blemu would fail on the controller instead (and say "refused").
UNREACHABLE = f"tcp:127.0.0.1:{closed_tcp_port()}"


def only_reason(result: CliResult) -> str:
    """The failure's reason: exactly one stderr line that is not a log entry (Docs/REFERENCE.md,
    "Exit status": a one-line reason). Usage hints from the argument parser after it are allowed."""
    lines = [line for line in result.reason_lines if not is_usage_hint(line)]
    assert len(lines) == 1, f"expected one line giving the reason, got {len(lines)}:\n{result.describe()}"
    return lines[0]


def is_usage_hint(line: str) -> bool:
    return line.startswith("Usage: ") or line.strip().startswith("See 'blemu")


def assert_fails(result: CliResult, *, within: float = 5.0) -> str:
    assert result.returncode != 0, f"expected a non-zero exit:\n{result.describe()}"
    assert result.returncode > 0, f"killed by signal {-result.returncode}:\n{result.describe()}"
    assert result.elapsed < within, f"took {result.elapsed:.1f} s to fail (limit {within:.0f} s):\n{result.describe()}"
    assert result.stdout == "", f"a failure printed to stdout:\n{result.describe()}"
    return only_reason(result)


def contains_all(text: str, *parts: str) -> bool:
    return all(part.lower() in text.lower() for part in parts)


# ---------------------------------------------------------------------------------------------
# blemu devices


def device_listing() -> dict[str, list[str]]:
    """`blemu devices` as {device name: the lines below it}."""
    result = run_cli(["devices"])
    assert result.returncode == 0, result.describe()
    devices: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in result.stdout.splitlines():
        if not line.strip():
            continue
        if not line[0].isspace():
            current = devices.setdefault(line.split()[0], [])
        elif current is not None:
            current.append(line.strip())
    return devices


def test_devices_lists_heart_rate_and_its_services():
    devices = device_listing()
    assert "heart-rate" in devices, f"heart-rate not listed: {sorted(devices)}"
    assert set(devices) <= {"heart-rate", "thermostat", "lock", "chat", "channel-echo"} | BROADCASTERS, f"names outside Docs/REFERENCE.md: {sorted(devices)}"
    services = [line.split()[1].upper() for line in devices["heart-rate"] if line.startswith("service ")]
    for uuid in ("180D", "180A", "180F"):
        assert any(s in (uuid, f"0000{uuid}-0000-1000-8000-00805F9B34FB", f"0X{uuid}") for s in services), (
            f"heart-rate's service {uuid} not listed; services: {services}")
    for name, lines in connectable(devices).items():
        # Docs/REFERENCE.md, UUIDs: the Diagnostics service is on every device.
        assert any("7d3c0001-9a5e-4d1a-8f6e-5c1b2d3e4f50" in line for line in lines), f"{name} lists no Diagnostics service"


# Docs/BROADCASTERS.md: never connectable, so no database is listed.
BROADCASTERS = {"bthome-thermometer", "bthome-door", "ibeacon", "eddystone"}


def connectable(devices: dict[str, list[str]]) -> dict[str, list[str]]:
    return {name: lines for name, lines in devices.items() if name not in BROADCASTERS}


def test_devices_lists_the_broadcasters_as_broadcast_only():
    devices = device_listing()
    for name in BROADCASTERS:
        assert name in devices, f"{name} not listed: {sorted(devices)}"
        assert not listed_services(devices[name]), f"{name} lists services: {devices[name]}"
        assert any(line.startswith("broadcasts only (non-connectable") for line in devices[name]), devices[name]
    assert "temperature, humidity, battery, interval" in " ".join(devices["bthome-thermometer"])


DIAGNOSTICS_SERVICE = "7d3c0001-9a5e-4d1a-8f6e-5c1b2d3e4f50"
DIAGNOSTICS_CHARACTERISTIC = "7d3c0002-9a5e-4d1a-8f6e-5c1b2d3e4f50"


def listed_services(lines: list[str]) -> list[tuple[str, list[str]]]:
    """One device's `blemu devices` lines as [(service UUID, [characteristic UUIDs])], in order."""
    services: list[tuple[str, list[str]]] = []
    for line in lines:
        if line.startswith("service "):
            services.append((line.split()[1], []))
        elif line.startswith("characteristic ") and services:
            services[-1][1].append(line.split()[1].rstrip(":"))
    return services


def test_devices_lists_every_service_served_gap_gatt_and_diagnostics_included():
    """README: every device also has GAP, GATT and Diagnostics, and `blemu devices` shows them."""
    for name, lines in connectable(device_listing()).items():
        services = listed_services(lines)
        uuids = [uuid.upper() for uuid, _ in services]
        assert uuids[:2] == ["1800", "1801"], f"{name}: GAP 1800 and GATT 1801 do not come first: {uuids}"
        assert uuids[-1] == DIAGNOSTICS_SERVICE.upper(), f"{name}: Diagnostics is not the last service: {uuids}"
        gap, gatt, diagnostics = services[0][1], services[1][1], services[-1][1]
        assert "2A00" in gap, f"{name}: GAP lists no Device Name 2A00: {gap}"
        assert "2B2A" in gatt, f"{name}: GATT lists no Database Hash 2B2A: {gatt}"
        assert diagnostics == [DIAGNOSTICS_CHARACTERISTIC], f"{name}: Diagnostics lists {diagnostics}"
    heart_rate = [uuid.upper() for uuid, _ in listed_services(device_listing()["heart-rate"])]
    assert heart_rate == ["1800", "1801", "180D", "180A", "180F", DIAGNOSTICS_SERVICE.upper()], heart_rate


def test_devices_listing_is_what_a_central_discovers(rootcanal, blemu_factory):
    """The listing comes from the database blemu serves: a central discovers the same
    services, with the same characteristics, in the same order."""
    from bumble.core import UUID

    listed = listed_services(device_listing()["heart-rate"])
    blemu = blemu_factory.start(unique_name("DV"))

    async def discover() -> list[tuple[UUID, list[UUID]]]:
        async with Central(rootcanal.controller_spec, name="listing-checker") as central:
            conn = await central.connect(blemu.scan.address)
            try:
                await conn.discover_all()
                return [(service.uuid, [c.uuid for c in service.characteristics]) for service in conn.services()]
            finally:
                if conn.is_connected:
                    await conn.disconnect()

    def text(uuids: list[UUID]) -> list[str]:
        return [uuid.to_hex_str() for uuid in uuids]

    discovered = run(discover(), 40)
    expected = [(UUID(service), [UUID(c) for c in characteristics]) for service, characteristics in listed]
    assert text([s for s, _ in discovered]) == text([s for s, _ in expected]), (
        f"services discovered {text([s for s, _ in discovered])}, listed {text([s for s, _ in expected])}")
    for (service, found), (_, wanted) in zip(discovered, expected):
        assert text(found) == text(wanted), f"service {service}: discovered {text(found)}, listed {text(wanted)}"
    assert blemu.stop() == 0, blemu.log_tail()


# ---------------------------------------------------------------------------------------------
# Controllers that cannot be used


def test_closed_tcp_port_fails_fast_with_one_line_naming_rootcanal():
    port = closed_tcp_port()
    result = run_cli(["run", "heart-rate", "--controller", f"tcp:127.0.0.1:{port}"])
    reason = assert_fails(result, within=5.0)
    assert contains_all(reason, "refused", "rootcanal", str(port)), f"reason does not say refused/rootcanal/{port}: {reason!r}"


def kernel_has_bluetooth() -> bool:
    family = getattr(socket, "AF_BLUETOOTH", 31)
    protocol = getattr(socket, "BTPROTO_HCI", 1)
    try:
        socket.socket(family, socket.SOCK_RAW, protocol).close()
    except OSError as error:
        return error.errno != errno.EAFNOSUPPORT
    return True


@pytest.mark.skipif(kernel_has_bluetooth(), reason="this kernel has Bluetooth: no EAFNOSUPPORT to check")
def test_hci_controller_without_kernel_bluetooth_says_eafnosupport():
    result = run_cli(["run", "heart-rate", "--controller", "hci0"])
    reason = assert_fails(result)
    assert contains_all(reason, "hci0", "EAFNOSUPPORT"), f"reason does not name hci0 and EAFNOSUPPORT: {reason!r}"
    assert contains_all(reason, "tcp:"), f"reason does not point at the rootcanal alternative: {reason!r}"


# Every accepted form must be named, so the user can fix the spec (Docs/REFERENCE.md, Controller specs).
ACCEPTED_FORMS = ("hciN", "tcp:HOST", "unix:PATH", "serial:DEVICE")


@pytest.mark.parametrize("spec", [
    "bogus:x",
    "hci",  # no adapter number
    "hcix",
    "tcp:",  # no host
    "tcp:127.0.0.1:0",  # port 0
    "tcp:127.0.0.1:70000",  # port out of range
    "tcp:::1:6402",  # IPv6 without brackets
    "unix:",  # no path
    "serial:/dev/ttyS0:1234",  # a baud rate termios has no constant for
    "serial:/dev/ttyS0:abc",  # a baud rate that is not a number
])
def test_invalid_controller_spec_names_the_accepted_forms(spec):
    result = run_cli(["run", "heart-rate", "--controller", spec])
    reason = assert_fails(result)
    assert spec in reason, f"reason does not quote the spec {spec!r}: {reason!r}"
    missing = [form for form in ACCEPTED_FORMS if form not in reason]
    assert not missing, f"reason does not name {missing}: {reason!r}"


# ---------------------------------------------------------------------------------------------
# Devices and options that are refused before any controller is opened


def test_unknown_device_names_the_known_devices():
    known = sorted(device_listing())
    result = run_cli(["run", "no-such-device", "--controller", UNREACHABLE])
    reason = assert_fails(result)
    assert "no-such-device" in reason, f"reason does not name the unknown device: {reason!r}"
    missing = [name for name in known if name not in reason]
    assert not missing, f"reason does not name the known devices {missing}: {reason!r}"
    assert "refused" not in result.stderr, f"blemu went on to the controller:\n{result.describe()}"


@pytest.mark.parametrize("address, expected", [
    # Vol 6, Part B, 1.3.2.1: a static address has its two most significant bits set...
    ("00:11:22:33:44:55", ("00:11:22:33:44:55", "static random", "two top bits")),
    ("7F:11:22:33:44:55", ("7F:11:22:33:44:55", "static random", "two top bits")),
    # ...and the rest of it neither all zeros nor all ones.
    ("FF:FF:FF:FF:FF:FF", ("FF:FF:FF:FF:FF:FF", "static random")),
    ("C0:00:00:00:00:00", ("C0:00:00:00:00:00", "static random")),
    # Not an address at all.
    ("C4:12:34:56:78", ("C4:12:34:56:78", "not an address")),
    ("C4:12:34:56:78:9G", ("C4:12:34:56:78:9G", "not an address")),
])
def test_address_that_is_not_static_random_is_refused(address, expected):
    result = run_cli(["run", "heart-rate", "--controller", UNREACHABLE, "--address", address])
    reason = assert_fails(result)
    assert contains_all(reason, *expected), f"reason for --address {address} lacks {expected}: {reason!r}"
    assert "refused" not in result.stderr, f"blemu went on to the controller:\n{result.describe()}"


def test_address_with_two_devices_is_refused():
    result = run_cli(["run", "heart-rate", "heart-rate", "--controller", UNREACHABLE, "--address", "C4:12:34:56:78:9A"])
    reason = assert_fails(result)
    assert contains_all(reason, "--address", "one device"), f"reason does not explain --address needs one device: {reason!r}"
    assert "refused" not in result.stderr, f"blemu went on to the controller:\n{result.describe()}"


@pytest.mark.parametrize("environment", [{}, {"BLEMU_CONTROLLER": ""}], ids=["unset", "empty"])
def test_no_controller_and_no_environment_default_mentions_blemu_controller(environment):
    result = run_cli(["run", "heart-rate"], env=environment)
    reason = assert_fails(result)
    assert contains_all(reason, "--controller", "BLEMU_CONTROLLER"), f"reason does not mention BLEMU_CONTROLLER: {reason!r}"


def test_blemu_controller_environment_is_the_default_controller():
    port = closed_tcp_port()
    result = run_cli(["run", "heart-rate"], env={"BLEMU_CONTROLLER": f"tcp:127.0.0.1:{port}"})
    reason = assert_fails(result)
    assert contains_all(reason, f"tcp:127.0.0.1:{port}", "refused"), f"reason does not name BLEMU_CONTROLLER's port: {reason!r}"


def test_controller_option_overrides_blemu_controller():
    port = closed_tcp_port()
    result = run_cli(["run", "heart-rate", "--controller", f"tcp:127.0.0.1:{port}"], env={"BLEMU_CONTROLLER": "bogus:x"})
    reason = assert_fails(result)
    assert contains_all(reason, f"tcp:127.0.0.1:{port}", "refused"), f"--controller was not the one used: {reason!r}"
    assert "bogus" not in result.stderr, f"BLEMU_CONTROLLER was used although --controller was given:\n{result.describe()}"


# ---------------------------------------------------------------------------------------------
# On the radio


def test_blemu_controller_environment_reaches_a_running_rootcanal(rootcanal, blemu_factory):
    blemu = blemu_factory.start(unique_name("EV"), controller=None, env={"BLEMU_CONTROLLER": rootcanal.controller_spec})
    assert "--controller" not in blemu.command
    up = blemu.wait_for_event("controller-up")[0]
    assert up.fields.get("controller") == rootcanal.controller_spec, f"controller-up does not name the spec: {up.line}"
    assert blemu.stop() == 0, blemu.log_tail()


def test_address_option_is_the_advertised_address(blemu_factory):
    blemu = blemu_factory.start(unique_name("AD"), extra_args=["--address", "C4:12:34:56:78:9A"])
    address = blemu.scan.address
    # Bumble keeps address bytes least significant first, as the HCI does.
    assert bytes(address.address_bytes) == bytes.fromhex("C4123456789A")[::-1], f"advertised as {address}, not C4:12:34:56:78:9A"
    assert address.is_random and is_static_random(address), f"{address!r} is not advertised as a random (static) address"
    assert blemu.stop() == 0, blemu.log_tail()


def test_name_option_sets_the_advertised_name_and_the_gap_device_name(rootcanal, blemu_factory):
    name = f"Pulsé {unique_name('')[1:7]}"  # non-ASCII: the name goes out as UTF-8 both ways
    blemu = blemu_factory.start(name)  # returns once a scanner saw the complete local name
    assert blemu.scan.matches_name(name)

    async def read_device_name() -> bytes:
        async with Central(rootcanal.controller_spec, name="name-reader") as central:
            conn = await central.connect(blemu.scan.address)
            try:
                characteristic = await conn.discover_characteristic(UUID_GAP_SERVICE, UUID_DEVICE_NAME)
                return await conn.read(characteristic)
            finally:
                if conn.is_connected:
                    await conn.disconnect()

    value = run(read_device_name(), 30)
    assert value.decode("utf-8", errors="replace") == name, f"GAP Device Name 0x2A00 is {value!r}, --name was {name!r}"
    assert blemu.stop() == 0, blemu.log_tail()


def test_two_devices_on_one_tcp_spec_both_advertise_with_distinct_addresses(rootcanal, blemu_factory):
    """Each connection to rootcanal is a new controller, so two devices can share one tcp:
    spec (Docs/REFERENCE.md, Controller specs); on one radio they must be two advertisers."""
    blemu = blemu_factory.start(None, wait_advertising=False, devices=["heart-rate", "heart-rate"])
    blemu.wait_for_event("advertising-started", count=2, timeout=10.0)

    # Any advertiser of the Heart Rate service on this module's radio is one of the two
    # (whatever names they were given): the other tests stop their blemu before they end.
    seen: dict[bytes, ScanResult] = {}

    def two_advertisers(result: ScanResult) -> bool:
        if 0x180D in result.service_uuids_16():
            seen[bytes(result.address.address_bytes) + bytes([int(result.address.address_type)])] = result
        return len(seen) >= 2

    async def scan() -> None:
        async with Central(rootcanal.controller_spec, name="two-device-scanner") as central:
            await central.scan_until(two_advertisers, "two Heart Rate advertisers",
                                     timeout=6.0, want_scan_response=False, alive=blemu.exited)

    try:
        run(scan(), 20)
    except AssertionError as error:
        addresses = [str(r.address) for r in seen.values()]
        raise AssertionError(f"two devices on {rootcanal.controller_spec} should advertise from two addresses; "
                             f"seen {addresses}. Log:\n"
                             + "\n".join(e.line for e in blemu.events("advertising-started"))) from error
    assert all(is_static_random(r.address) for r in seen.values()), [str(r.address) for r in seen.values()]
    ups = blemu.events("controller-up")
    assert len(ups) == 2, f"{len(ups)} controller-up events for two devices"
    assert blemu.stop() == 0, blemu.log_tail()


def test_normal_run_logs_journal_fields_on_stderr(rootcanal, blemu_factory):
    """Docs/REFERENCE.md, Logs: a run's log lines carry event=, device=, controller=, and for
    a link peer= and conn_handle= (BLEMU_EVENT, BLEMU_DEVICE, ... in the journal)."""
    name = unique_name("JF")
    # The defaults a user gets (--log auto, which is stderr outside systemd; level info).
    blemu = blemu_factory.start(name, log_args=[], split_stdout=True, env={"JOURNAL_STREAM": None, "INVOCATION_ID": None})
    spec = rootcanal.controller_spec

    started = blemu.wait_for_event("started")
    up = blemu.wait_for_event("controller-up")
    advertising = blemu.wait_for_event("advertising-started")
    assert len(started) == 1, f"event=started logged {len(started)} times"
    for entry in up + advertising:
        assert entry.fields.get("controller") == spec and entry.fields.get("device") == "heart-rate", (
            f"no controller={spec} / device=heart-rate on: {entry.line}")

    async def connect_and_disconnect() -> tuple[str, int]:
        async with Central(spec, name="journal-central") as central:
            conn = await central.connect(blemu.scan.address)
            handle = conn.connection.handle
            await conn.disconnect()
            return str(central.device.random_address), handle

    central_address, central_handle = run(connect_and_disconnect(), 30)
    connected = blemu.wait_for_event("connected")[-1]
    disconnected = blemu.wait_for_event("disconnected")[-1]
    for entry in (connected, disconnected):
        assert entry.fields.get("peer") == central_address, f"peer= is not the central's {central_address}: {entry.line}"
        handle = entry.fields.get("conn_handle", "")
        assert handle.isdigit(), f"conn_handle= is not a decimal handle: {entry.line}"
        assert entry.fields.get("device") == "heart-rate" and entry.fields.get("controller") == spec, entry.line
    assert connected.fields["conn_handle"] == disconnected.fields["conn_handle"], (connected.line, disconnected.line)
    # rootcanal gives both ends of a link the same handle.
    assert int(connected.fields["conn_handle"]) == central_handle, f"central has handle {central_handle}: {connected.line}"

    assert blemu.stop() == 0, blemu.log_tail()
    assert blemu.events("stopping"), "no event=stopping on SIGTERM"
    stdout = blemu.stdout_path.read_text(errors="replace") if blemu.stdout_path else ""
    assert "event=" not in stdout, f"log lines went to stdout, not stderr:\n{stdout}"


# ---------------------------------------------------------------------------------------------
# What a new user meets first: bad bauds, the rootcanal hint, --help, the start-up order


@pytest.mark.parametrize("spec, baud", [("serial:/dev/ttyS0:abc", "abc"), ("serial:/dev/ttyUSB0:115k", "115k")])
def test_serial_baud_that_is_not_a_number_is_named_as_a_bad_baud(spec, baud):
    """`serial:/dev/ttyS0:abc` is a typo in the baud, not the device `/dev/ttyS0:abc`."""
    result = run_cli(["run", "heart-rate", "--controller", spec])
    reason = assert_fails(result)
    assert contains_all(reason, spec, f"baud {baud}", "not a number", "115200"), (
        f"reason does not name the bad baud {baud!r}: {reason!r}")
    assert "no such device" not in reason.lower(), f"blemu opened the baud as part of the path: {reason!r}"


def test_connection_refused_names_the_readmes_way_to_start_rootcanal():
    readme = (REPO / "README.md").read_text()
    assert "`.venv/bin/python scripts/rootcanal_server.py --hci-port 6402`" in readme, (
        "README no longer starts rootcanal with scripts/rootcanal_server.py: update this test and the hint together")
    port = closed_tcp_port()
    result = run_cli(["run", "heart-rate", "--controller", f"tcp:127.0.0.1:{port}"])
    reason = assert_fails(result)
    assert f".venv/bin/python scripts/rootcanal_server.py --hci-port {port}" in reason, (
        f"the hint does not give the README's command for port {port}: {reason!r}")


@pytest.mark.parametrize("args", [["run", "--help"], ["help", "run"]])
def test_help_offers_every_log_destination_and_says_what_auto_does(args):
    result = run_cli(args)
    assert result.returncode == 0, result.describe()
    text = " ".join(result.stdout.split())
    assert "auto, journal or stderr" in text, f"--log does not list its values:\n{result.stdout}"
    assert contains_all(text, "JOURNAL_STREAM", "INVOCATION_ID", "falls back to stderr"), result.stdout


def test_mistyped_log_destination_is_told_the_values():
    result = run_cli(["run", "heart-rate", "--controller", UNREACHABLE, "--log", "jornal"])
    assert result.returncode > 0, result.describe()
    assert contains_all(result.stderr, "jornal", "'auto'", "'journal'", "'stderr'"), result.describe()


def test_fatal_start_up_error_logs_no_started_event():
    """A controller that cannot be opened ends the run before it started: no event=started
    line may precede the reason."""
    result = run_cli(["run", "heart-rate", "--controller", f"tcp:127.0.0.1:{closed_tcp_port()}"])
    reason = assert_fails(result)
    assert "refused" in reason, reason
    assert "event=started" not in result.stderr, f"event=started logged for a run that never started:\n{result.describe()}"


def test_started_is_logged_once_the_controller_is_up(rootcanal, blemu_factory):
    blemu = blemu_factory.start(unique_name("ST"))
    blemu.wait_for_event("started")
    events = [entry.fields.get("event") for entry in blemu.log_entries() if entry.fields.get("event")]
    assert events.count("started") == 1, events
    assert "controller-up" in events[:events.index("started")], (
        f"event=started came before the controller was up: {events}")
    assert blemu.stop() == 0, blemu.log_tail()


# ---------------------------------------------------------------------------------------------
# The command line as the docs give it (Tests/CLITests/DocumentedCommandsTests parses every one)


def readme_command(starts_with: str) -> list[str]:
    """The README's code-block command line that starts (after `.build/release/blemu`) with
    `starts_with`, as the shell would split it (comments dropped)."""
    in_block = False
    for line in (REPO / "README.md").read_text().replace("\\\n", " ").splitlines():
        if line.strip().startswith("```"):
            in_block = not in_block
            continue
        words = shlex.split(line, comments=True) if in_block else []
        if words and words[0].endswith("blemu") and " ".join(words[1:]).startswith(starts_with):
            return words[1:]
    raise AssertionError(f"README.md has no command `blemu {starts_with}...` in a code block")


def replaced(words: list[str], option: str, value: str) -> list[str]:
    """`words` with OPTION's value replaced by `value` (the option must be there)."""
    index = words.index(option)
    return words[:index + 1] + [value] + words[index + 2:]


def test_the_readmes_bench_runs_with_its_pin_on_the_lock(restartable_rootcanal, tmp_path):
    """README's "Running blemu", for real: three devices with --pin (it failed at once:
    `--pin: heart-rate takes no PIN`), then its `ctl … set thermostat room 18.5`, then its
    `blemu gatt … write` that unlocks with PIN 2468 (given the lock's own passkey)."""
    rootcanal = restartable_rootcanal
    control = str(tmp_path / "blemu.sock")
    bench = readme_command("run heart-rate thermostat lock")
    assert "--pin" in bench, bench
    bench = replaced(replaced(bench, "--controller", rootcanal.controller_spec), "--control", control)
    process = BlemuProcess(None, None, devices=[], extra_args=bench[1:]).start()
    try:
        process.wait_for_event("advertising-started", count=3, timeout=30)
        assert not any("PIN is" in entry.message for entry in process.log_entries()), "the PIN given was not the lock's"
        setting = readme_command("ctl /tmp/blemu.sock set thermostat")
        result = run_cli([setting[0], control, *setting[2:]])
        assert result.returncode == 0 and '"ok":true' in result.stdout.replace(" ", ""), result.describe()

        unlock = readme_command("gatt ")
        unlock = replaced(replaced(unlock, "--controller", rootcanal.controller_spec), "--passkey", f"{passkey_of(process):06d}")
        # A longer search than the default 10 s: a loaded machine's radio may be slow to show it.
        result = run_cli(unlock + ["--state-dir", str(tmp_path / "central"), "--timeout", "30"], timeout=90)
        assert result.returncode == 0, result.describe()
        assert "800201" in result.stdout.replace(" ", ""), f"the unlock with PIN 2468 did not succeed:\n{result.describe()}"
    finally:
        assert process.stop() == 0, process.log_tail()


def test_a_refused_setting_exits_64_before_any_file_is_written(tmp_path):
    """A config file's `pin:` for the heart-rate sensor (which takes none), after a lock: the run
    was refused only in run(), exit status 1, after the lock's passkey file had been written. A bad
    command line is 64, with nothing written: no state file, no capture, no socket."""
    state = tmp_path / "state"
    state.mkdir()
    config = tmp_path / "bench.yaml"
    config.write_text('devices:\n  - device: lock\n  - device: heart-rate\n    pin: "2468"\n')
    result = run_cli(["run", "--config", str(config), "--controller", UNREACHABLE, "--state-dir", str(state),
                      "--btsnoop", str(tmp_path / "hci.btsnoop"), "--control", str(tmp_path / "ctl.sock")])
    assert result.returncode == 64, result.describe()
    assert "heart-rate" in only_reason(result), result.describe()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench.yaml", "state"], list(tmp_path.iterdir())
    assert list(state.iterdir()) == [], list(state.iterdir())


def test_pin_with_no_device_that_takes_one_exits_64(tmp_path):
    result = run_cli(["run", "heart-rate", "thermostat", "--pin", "2468", "--controller", UNREACHABLE,
                      "--state-dir", str(tmp_path)])
    assert result.returncode == 64, result.describe()
    assert contains_all(only_reason(result), "--pin", "lock"), result.describe()
    assert list(tmp_path.iterdir()) == []


def test_a_run_without_state_dir_keeps_its_state_in_the_tests_own_directory(tmp_path):
    """The tests never write to ~/.local/state/blemu: $STATE_DIRECTORY is a temporary directory
    of each test's (conftest.py), where the lock's passkey file goes."""
    state = os.environ.get("STATE_DIRECTORY", "")
    assert state.startswith(tempfile.gettempdir()) or "pytest" in state, state
    result = run_cli(["run", "lock", "--name", "Temp Lock", "--controller", UNREACHABLE])
    assert result.returncode == 1 and "refused" in result.stderr, result.describe()
    assert [p.name for p in Path(state).iterdir()] == ["passkey-lock-Temp_Lock.txt"], list(Path(state).iterdir())
