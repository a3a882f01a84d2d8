"""blemu's broadcasters over the air (issue 24): `bthome-thermometer`, `bthome-door`, `ibeacon`
and `eddystone` run on rootcanal, never connectable; a Bumble scanner hears their advertisements
and Home Assistant's own parsers decode them: bthome-ble (plain, and encrypted with the bindkey of
`--bindkey-file`; refused under a wrong key) must report what the control socket set, ibeacon-ble
the iBeacon; the Eddystone frames are decoded here by the spec's tables (github.com/google/
eddystone). A broadcaster and a heart-rate device on one controller are both heard.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time

import pytest
from bleak.backends.device import BLEDevice
from bthome_ble import BTHomeBluetoothDeviceData
from habluetooth import BluetoothServiceInfoBleak
from home_assistant_bluetooth import BluetoothServiceInfo
from ibeacon_ble import iBeaconParser

from bumble_central import Central, ScanResult
from harness import REPO, BlemuProcess, blemu_binary, run, run_cli, unique_name

BTHOME_UUID = "0000fcd2-0000-1000-8000-00805f9b34fb"
BINDKEY = "231d39c1d7cc1ab1aee224cd096db932"


# ---------------------------------------------------------------------------------------------
# Helpers


def short_socket_path() -> str:
    return os.path.join(tempfile.mkdtemp(prefix="blemu-bc-", dir="/tmp"), "control.sock")


def ctl(process: BlemuProcess, *args: str) -> dict:
    result = run_cli(["ctl", process.control_path, *args])
    assert result.returncode == 0, result.describe()
    reply = json.loads(result.stdout.splitlines()[0])
    assert reply["ok"] is True, result.describe()
    return reply


def start(rootcanal, devices: list[str], *extra: str) -> BlemuProcess:
    """A blemu with a control socket, running `devices`; returns once `list` shows each
    broadcaster's payload (its first reading advertised)."""
    path = short_socket_path()
    process = BlemuProcess(rootcanal.controller_spec, None, devices=devices, extra_args=["--control", path, *extra])
    process.control_path = path
    process.start()
    deadline = time.monotonic() + 20
    while True:
        if (reason := process.exited()) is not None:
            raise AssertionError(reason)
        if os.path.exists(path):
            result = run_cli(["ctl", path, "list"])
            if result.returncode == 0:
                listing = json.loads(result.stdout.splitlines()[0])["devices"]
                if all(entry["broadcast"] for entry in listing if entry["device"] != "heart-rate") \
                        and all(entry["advertising"] for entry in listing):
                    process.listing = listing
                    return process
        if time.monotonic() > deadline:
            raise AssertionError(f"blemu did not advertise within 20 s:\n{process.log_tail()}")
        time.sleep(0.2)


def stop(process: BlemuProcess) -> None:
    status = process.stop()
    assert status == 0, f"blemu exited with status {status}; output:\n{process.log_tail()}"
    shutil.rmtree(os.path.dirname(process.control_path), ignore_errors=True)


def entry(process: BlemuProcess, device: str) -> dict:
    return next(e for e in ctl(process, "list")["devices"] if e["device"] == device)


def from_address(address_text: str):
    return lambda result: str(result.address).split("/")[0].upper() == address_text.upper()


def service_data(advertising_data: bytes, uuid16: int) -> bytes | None:
    index = 0
    while index + 1 < len(advertising_data):
        length, kind = advertising_data[index], advertising_data[index + 1]
        data = advertising_data[index + 2:index + 1 + length]
        if kind == 0x16 and int.from_bytes(data[:2], "little") == uuid16:
            return data[2:]
        index += 1 + length
    return None


def bthome(payload: bytes, address: str, bindkey: bytes | None = None):
    """bthome-ble's reading of one advertisement's BTHome service data, as Home Assistant makes it."""
    device = BTHomeBluetoothDeviceData(bindkey=bindkey)
    info = BluetoothServiceInfoBleak(
        name="blemu", address=address, rssi=-60, manufacturer_data={}, service_data={BTHOME_UUID: payload},
        service_uuids=[BTHOME_UUID], source="local", device=BLEDevice(address, "blemu", None), advertisement=None,
        connectable=False, time=time.monotonic(), tx_power=None)
    update = device.update(info)
    values = {key.key: value.native_value for key, value in update.entity_values.items()}
    values.update({key.key: value.native_value for key, value in update.binary_entity_values.items()})
    values.update({key.key: value.event_type for key, value in update.events.items()})
    values.pop("signal_strength", None)
    return device, values


async def heard(scanner: Central, address: str, predicate, what: str, process: BlemuProcess,
                timeout: float = 15.0) -> ScanResult:
    """The first advertisement from `address` whose data satisfies `predicate`."""
    match = from_address(address)
    return await scanner.scan_until(lambda r: match(r) and predicate(r.adv_data), what, timeout=timeout,
                                    want_scan_response=False, alive=process.exited)


def assert_broadcast_only(result: ScanResult) -> None:
    # ADV_NONCONN_IND: neither connectable nor scannable, a legacy PDU (the data fits 31 bytes).
    assert not result.connectable and not result.scannable and result.legacy, result


# ---------------------------------------------------------------------------------------------
# BTHome


def test_thermometer_reports_what_the_control_socket_set_to_bthome_ble(rootcanal):
    process = start(rootcanal, ["bthome-thermometer"])
    try:
        address = process.listing[0]["address"]
        ctl(process, "set", "bthome-thermometer", "temperature", "21.5")
        ctl(process, "set", "bthome-thermometer", "humidity", "48.25")
        ctl(process, "set", "bthome-thermometer", "battery", "93")

        def wanted(data: bytes) -> bool:
            payload = service_data(data, 0xFCD2)
            if payload is None:
                return False
            _, values = bthome(payload, address)
            return values.get("battery") == 93 and abs(values.get("temperature", 0) - 21.5) <= 0.05 \
                and abs(values.get("humidity", 0) - 48.25) <= 0.5

        async def scenario():
            async with Central(rootcanal.controller_spec, name="bthome-scanner") as scanner:
                result = await heard(scanner, address, wanted, "the thermometer's reading", process)
            assert_broadcast_only(result)
            assert result.adv_data[:3] == bytes.fromhex("020106"), "the Flags AD BTHome requires"
            _, values = bthome(service_data(result.adv_data, 0xFCD2), address)
            assert set(values) == {"packet_id", "battery", "temperature", "humidity"}
            # The control socket shows the payload that is on the air.
            assert bytes.fromhex(entry(process, "bthome-thermometer")["broadcast"]) == result.adv_data

        run(scenario(), 60)
    finally:
        stop(process)


def test_encrypted_thermometer_opens_with_its_bindkey_only(rootcanal, tmp_path):
    key_file = tmp_path / "bindkey"
    key_file.write_text(BINDKEY + "\n")
    key_file.chmod(0o600)
    state = tmp_path / "state"
    state.mkdir()
    process = start(rootcanal, ["bthome-thermometer"], "--bindkey-file", str(key_file), "--state-dir", str(state))
    try:
        address = process.listing[0]["address"]
        ctl(process, "set", "bthome-thermometer", "temperature", "-5.25")
        ctl(process, "set", "bthome-thermometer", "battery", "42")
        key = bytes.fromhex(BINDKEY)

        def wanted(data: bytes) -> bool:
            payload = service_data(data, 0xFCD2)
            if payload is None:
                return False
            _, values = bthome(payload, address, key)
            return values.get("battery") == 42 and abs(values.get("temperature", 99) + 5.25) <= 0.05

        async def scenario():
            async with Central(rootcanal.controller_spec, name="bthome-scanner") as scanner:
                return await heard(scanner, address, wanted, "the encrypted reading", process)

        result = run(scenario(), 60)
        assert_broadcast_only(result)
        payload = service_data(result.adv_data, 0xFCD2)
        assert payload[0] == 0x41, "device information: version 2, encrypted"
        device, values = bthome(payload, address, key)
        assert device.bindkey_verified
        # Without the key, or with a wrong one, nothing is read.
        wrong = key[:-1] + bytes([key[-1] ^ 0x01])
        device, values = bthome(payload, address, wrong)
        assert device.decryption_failed and not device.bindkey_verified and values == {}
        _, values = bthome(payload, address)
        assert "temperature" not in values
        # The counter is reserved in the state directory, so no nonce repeats after a restart.
        counters = [name for name in os.listdir(state) if name.startswith("bthome-counter-")]
        assert len(counters) == 1, os.listdir(state)
        counter_before = int.from_bytes(payload[-8:-4], "little")
    finally:
        stop(process)

    # Restarted with the same state directory: the counter goes on from the next reserved block.
    process = start(rootcanal, ["bthome-thermometer"], "--bindkey-file", str(key_file), "--state-dir", str(state))
    try:
        async def again():
            async with Central(rootcanal.controller_spec, name="bthome-scanner") as scanner:
                return await heard(scanner, address, lambda d: service_data(d, 0xFCD2) is not None
                                   and bthome(service_data(d, 0xFCD2), address, key)[0].bindkey_verified,
                                   "a reading after the restart", process)

        payload = service_data(run(again(), 60).adv_data, 0xFCD2)
        counter_after = int.from_bytes(payload[-8:-4], "little")
        assert counter_after >= 256 > counter_before, (counter_before, counter_after)
    finally:
        stop(process)


def test_door_reports_opening_and_a_button_press_to_bthome_ble(rootcanal):
    process = start(rootcanal, ["bthome-door"])
    try:
        address = process.listing[0]["address"]

        def reading(data: bytes):
            payload = service_data(data, 0xFCD2)
            return bthome(payload, address)[1] if payload is not None else {}

        async def scenario():
            async with Central(rootcanal.controller_spec, name="door-scanner") as scanner:
                ctl(process, "set", "bthome-door", "open", "1")
                opened = await heard(scanner, address, lambda d: reading(d).get("opening") is True, "the door open", process)
                assert_broadcast_only(opened)
                assert service_data(opened.adv_data, 0xFCD2)[0] == 0x44, "device information: version 2, trigger-based"
                first_id = reading(opened.adv_data)["packet_id"]
                ctl(process, "set", "bthome-door", "button", "press")
                pressed = await heard(scanner, address, lambda d: reading(d).get("button") == "press", "the button press", process)
                values = reading(pressed.adv_data)
                assert values["opening"] is True and values["packet_id"] != first_id
                ctl(process, "set", "bthome-door", "open", "0")
                closed = await heard(scanner, address, lambda d: reading(d).get("opening") is False, "the door closed", process)
                assert "button" not in reading(closed.adv_data), "an event is told in one reading only"

        run(scenario(), 60)
    finally:
        stop(process)


# ---------------------------------------------------------------------------------------------
# Beacons


def test_ibeacon_decoded_by_ibeacon_ble(rootcanal):
    process = start(rootcanal, ["ibeacon"])
    try:
        address = process.listing[0]["address"]
        ctl(process, "set", "ibeacon", "uuid", "74278BDA-B644-4520-8F0C-720EAF059935")
        ctl(process, "set", "ibeacon", "major", "258")
        ctl(process, "set", "ibeacon", "minor", "772")
        ctl(process, "set", "ibeacon", "power", "-61")
        parser = iBeaconParser()

        def parse(data: bytes):
            index = 0
            while index + 1 < len(data):
                length, kind = data[index], data[index + 1]
                if kind == 0xFF and data[index + 2:index + 4] == b"\x4c\x00":
                    return parser.parse(BluetoothServiceInfo(
                        name="blemu", address=address, rssi=-60, manufacturer_data={0x004C: data[index + 4:index + 1 + length]},
                        service_data={}, service_uuids=[], source="local"))
                index += 1 + length
            return None

        def wanted(data: bytes) -> bool:
            beacon = parse(data)
            return beacon is not None and beacon.minor == 772 and beacon.power == -61

        async def scenario():
            await parser.async_setup()
            async with Central(rootcanal.controller_spec, name="ibeacon-scanner") as scanner:
                return await heard(scanner, address, wanted, "the iBeacon", process)

        result = run(scenario(), 60)
        assert_broadcast_only(result)
        beacon = parse(result.adv_data)
        assert (str(beacon.uuid), beacon.major, beacon.minor, beacon.power) == \
            ("74278bda-b644-4520-8f0c-720eaf059935", 258, 772, -61)
    finally:
        stop(process)


# Eddystone, by the spec (github.com/google/eddystone): eddystone-url's scheme prefixes and
# expansion codes, and the frames' layouts, written out here independently of blemu.
URL_SCHEMES = ["http://www.", "https://www.", "http://", "https://"]
URL_EXPANSIONS = [".com/", ".org/", ".edu/", ".net/", ".info/", ".biz/", ".gov/",
                  ".com", ".org", ".edu", ".net", ".info", ".biz", ".gov"]


def eddystone(data: bytes) -> dict | None:
    frame = service_data(data, 0xFEAA)
    if frame is None:
        return None
    kind = frame[0]
    if kind == 0x00:
        assert len(frame) == 20 and frame[18:] == b"\x00\x00", frame.hex()
        return {"type": "uid", "tx": struct.unpack("b", frame[1:2])[0], "namespace": frame[2:12].hex(), "instance": frame[12:18].hex()}
    if kind == 0x10:
        url = URL_SCHEMES[frame[2]] + "".join(URL_EXPANSIONS[b] if b < len(URL_EXPANSIONS) else chr(b) for b in frame[3:])
        return {"type": "url", "tx": struct.unpack("b", frame[1:2])[0], "url": url}
    if kind == 0x20:
        assert len(frame) == 14 and frame[1] == 0x00, frame.hex()
        volts, temperature, count, uptime = struct.unpack(">HhII", frame[2:])
        return {"type": "tlm", "mv": volts, "celsius": temperature / 256, "count": count, "uptime": uptime}
    return {"type": hex(kind)}


def test_eddystone_uid_url_and_truthful_tlm(rootcanal):
    # The spec's URL example (eddystone-url: "https://goo.gl/S6zT6P", scheme 0x03 then the text)
    # goes over the air byte for byte; the frames are decoded by the spec's tables above.
    process = start(rootcanal, ["eddystone"])
    try:
        address = process.listing[0]["address"]
        ctl(process, "set", "eddystone", "url", "https://goo.gl/S6zT6P")
        ctl(process, "set", "eddystone", "power", "-20")
        ctl(process, "set", "eddystone", "namespace", "8b0ca750e7a74e14bd99")
        ctl(process, "set", "eddystone", "instance", "0000000000ab")
        ctl(process, "set", "eddystone", "battery", "2950")
        ctl(process, "set", "eddystone", "temperature", "23.5")

        async def scenario():
            async with Central(rootcanal.controller_spec, name="eddystone-scanner") as scanner:
                url = await heard(scanner, address, lambda d: (eddystone(d) or {}).get("url") == "https://goo.gl/S6zT6P",
                                  "the URL frame", process)
                uid = await heard(scanner, address, lambda d: (eddystone(d) or {}).get("instance") == "0000000000ab",
                                  "the UID frame", process)
                first = await heard(scanner, address, lambda d: (eddystone(d) or {}).get("type") == "tlm", "a TLM frame", process)
                await asyncio.sleep(1.5)
                second = await heard(scanner, address,
                                     lambda d: (eddystone(d) or {}).get("type") == "tlm" and eddystone(d) != eddystone(first.adv_data),
                                     "the next TLM frame", process)
            return url, uid, first, second

        url, uid, first, second = run(scenario(), 90)
        for result in (url, uid, first):
            assert_broadcast_only(result)
            # The Complete List of 16-bit Service UUIDs holds 0xFEAA, as the spec requires.
            assert bytes.fromhex("0303aafe") in result.adv_data
        assert service_data(url.adv_data, 0xFEAA) == bytes([0x10, 0xEC, 0x03]) + b"goo.gl/S6zT6P"
        assert eddystone(uid.adv_data)["namespace"] == "8b0ca750e7a74e14bd99"
        assert eddystone(uid.adv_data)["tx"] == -20
        a, b = eddystone(first.adv_data), eddystone(second.adv_data)
        assert a["mv"] == b["mv"] == 2950 and a["celsius"] == b["celsius"] == 23.5
        # Uptime in 0.1 s and the advertising count (one event every 100 ms) move with time.
        assert b["uptime"] > a["uptime"] and b["count"] > a["count"]
        elapsed = (b["uptime"] - a["uptime"]) / 10
        assert abs((b["count"] - a["count"]) - elapsed * 10) <= 0.2 * elapsed * 10 + 2, (a, b)
    finally:
        stop(process)


# ---------------------------------------------------------------------------------------------
# Beside a connectable device


def test_broadcaster_and_heart_rate_on_one_controller_both_heard(rootcanal):
    name = unique_name("BC")
    process = start(rootcanal, ["bthome-thermometer", "heart-rate"], "--share-controller", "--name", name)
    try:
        listing = process.listing
        thermometer = next(e for e in listing if e["device"] == "bthome-thermometer")
        heart = next(e for e in listing if e["device"] == "heart-rate")
        assert thermometer["controller"] == heart["controller"]
        assert heart["broadcast"] is None
        ctl(process, "set", "bthome-thermometer", "battery", "77")

        async def scenario():
            async with Central(rootcanal.controller_spec, name="shared-scanner") as scanner:
                reading = await heard(scanner, thermometer["address"],
                                      lambda d: service_data(d, 0xFCD2) is not None
                                      and bthome(service_data(d, 0xFCD2), thermometer["address"])[1].get("battery") == 77,
                                      "the thermometer", process)
                hr = await scanner.scan_until(from_address(heart["address"]), "the heart-rate device", timeout=15,
                                              alive=process.exited)
                # The heart-rate device is still connectable beside the broadcaster.
                conn = await scanner.connect(hr.address)
                assert conn.is_connected
            return reading, hr

        reading, hr = run(scenario(), 60)
        assert_broadcast_only(reading)
        assert hr.connectable
        assert str(reading.address) != str(hr.address)
    finally:
        stop(process)


# ---------------------------------------------------------------------------------------------
# blemu to blemu: `blemu scan` observing blemu's own broadcasters


def scan_json(rootcanal, *args: str, seconds: int = 5) -> list[dict]:
    result = run_cli(["scan", "--controller", rootcanal.controller_spec, "--timeout", str(seconds), "--json", *args],
                     timeout=seconds + 30)
    assert result.returncode == 0, result.describe()
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


def key_file_for(tmp_path) -> str:
    path = tmp_path / "bindkey"
    path.write_text(BINDKEY + "\n")
    path.chmod(0o600)
    return str(path)


def close(values: dict, wanted: dict) -> bool:
    """The thermal model moves the room and its moisture between a setting and a reading by a
    hundredth or so; the battery is exact."""
    return all(key in values and abs(values[key] - value) <= 0.05 for key, value in wanted.items())


def test_blemu_scan_decodes_what_ctl_set_on_an_encrypted_thermometer(rootcanal, tmp_path):
    key = key_file_for(tmp_path)
    state = tmp_path / "state"
    state.mkdir()
    process = start(rootcanal, ["bthome-thermometer"], "--bindkey-file", key, "--state-dir", str(state))
    try:
        address = process.listing[0]["address"].upper()
        ctl(process, "set", "bthome-thermometer", "temperature", "23.45")
        ctl(process, "set", "bthome-thermometer", "humidity", "41.5")
        ctl(process, "set", "bthome-thermometer", "battery", "77")
        lines = [line for line in scan_json(rootcanal, "--bindkey-file", key) if line["address"].upper() == address]
        assert lines, "blemu scan did not hear the thermometer"
        reading = lines[-1]["decoded"][0]
        assert reading["format"] == "bthome" and reading["encrypted"], reading
        assert reading["values"]["battery"] == 77, reading
        assert close(reading["values"], {"temperature": 23.45, "humidity": 41.5}), reading
        # --watch ADDRESS: one line per new reading (a new packet id), the one set among them.
        watch = subprocess.Popen([str(blemu_binary()), "scan", "--controller", rootcanal.controller_spec, "--json",
                                  "--timeout", "8", "--watch", address, "--bindkey-file", key],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        first = watch.stdout.readline()
        ctl(process, "set", "bthome-thermometer", "battery", "55")
        time.sleep(1.5)
        ctl(process, "set", "bthome-thermometer", "temperature", "18.5")
        stdout, stderr = watch.communicate(timeout=30)
        assert watch.returncode == 0, stderr
        watched = [json.loads(line) for line in (first + stdout).splitlines() if line.strip()]
        ids = [line["decoded"][0]["packet_id"] for line in watched]
        assert len(ids) == len(set(ids)) and len(ids) >= 3, watched
        assert all(line["address"].upper() == address and line["update"] == "reading" for line in watched)
        values = [line["decoded"][0]["values"] for line in watched]
        assert any(v["battery"] == 55 and close(v, {"temperature": 23.45}) for v in values), values
        assert close(values[-1], {"temperature": 18.5}) and values[-1]["battery"] == 55, values
    finally:
        stop(process)


def test_an_encrypted_reading_opens_under_each_private_address(rootcanal, tmp_path):
    """With --privacy the address changes every 2 s; each reading is sealed again for the new
    address, so no advertisement blemu scan hears fails its MIC."""
    key = key_file_for(tmp_path)
    state = tmp_path / "state"
    state.mkdir()
    process = start(rootcanal, ["bthome-thermometer"], "--bindkey-file", key, "--state-dir", str(state),
                    "--privacy", "--rpa-timeout", "2")
    try:
        lines = [line for line in scan_json(rootcanal, "--bindkey-file", key, seconds=9)
                 if line.get("decoded") and line["decoded"][0].get("format") == "bthome"]
    finally:
        stop(process)
    addresses = {line["address"] for line in lines}
    assert len(addresses) >= 3, lines
    failures = [line for line in lines if "error" in line["decoded"][0]]
    assert failures == [], failures


def test_blemu_scan_synchronizes_to_the_thermometers_periodic_train(rootcanal):
    process = start(rootcanal, ["bthome-thermometer"])
    try:
        address = process.listing[0]["address"].upper()
        ctl(process, "set", "bthome-thermometer", "periodic", "100")
        ctl(process, "set", "bthome-thermometer", "temperature", "24.5")
        ctl(process, "set", "bthome-thermometer", "battery", "64")
        lines = scan_json(rootcanal, "--periodic", seconds=6)
        trains = [line for line in lines if line["update"] == "periodic" and line["address"].upper() == address]
        assert trains, lines
        assert trains[-1]["periodic"]["interval_ms"] == 100, trains
        values = trains[-1]["decoded"][0]["values"]
        assert values["battery"] == 64 and close(values, {"temperature": 24.5}), values
        # Printed when its data changed, not once per periodic event (60 in 6 s).
        assert len(trains) <= 3, trains
        # Off again: the train stops, the advertising goes on.
        ctl(process, "set", "bthome-thermometer", "periodic", "off")
        assert entry(process, "bthome-thermometer")["advertising"]
    finally:
        stop(process)


# ---------------------------------------------------------------------------------------------
# BROADCASTERS.md's bthome-ble decoder, as written


def broadcasters_md_decoder() -> tuple[list[str], str]:
    """The commands and the Python script of BROADCASTERS.md's "Decoding with Home Assistant's
    bthome-ble"."""
    text = (REPO / "Docs" / "BROADCASTERS.md").read_text()
    section = text.split("### Decoding with Home Assistant's bthome-ble", 1)[1]
    commands = section.split("```\n", 1)[1].split("```", 1)[0].strip().splitlines()
    script = section.split("```python\n", 1)[1].split("```", 1)[0]
    return commands, script


def decoded_lines(output: str) -> dict[str, list[dict]]:
    """The script's lines, `ADDRESS {values}`, by address."""
    lines: dict[str, list[dict]] = {}
    for line in output.splitlines():
        address, values = line.split(" ", 1)
        lines.setdefault(address.upper(), []).append(json.loads(values))
    return lines


def test_the_bthome_ble_decoder_of_broadcasters_md_runs_as_written(rootcanal, tmp_path):
    """Issue 34: the doc's script on a plain and an encrypted thermometer over rootcanal, fed by the
    doc's two pipelines (the socket, controller and timeout put in): `blemu ctl … list` gives the
    plain one's values as set, and nothing without the key for the encrypted one; `blemu scan
    --json` with the bindkey file opens the encrypted one's, and the plain one is refused as Home
    Assistant refuses it."""
    commands, script = broadcasters_md_decoder()
    assert len(commands) == 2 and all("python3 bthome_decode.py" in command for command in commands), commands
    (tmp_path / "bthome_decode.py").write_text(script)
    (tmp_path / "bindkey.txt").write_text(BINDKEY + "\n")
    (tmp_path / "bindkey.txt").chmod(0o600)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "blemu").symlink_to(blemu_binary())
    # python3 is the test venv's, which has bthome-ble (its bin directory first on PATH).
    environment = {**os.environ, "PATH": f"{bin_dir}:{os.path.dirname(sys.executable)}:{os.environ['PATH']}"}

    def pipeline(command: str) -> str:
        result = subprocess.run(["sh", "-c", command], capture_output=True, text=True, cwd=tmp_path, env=environment,
                                stdin=subprocess.DEVNULL, timeout=60)
        assert result.returncode == 0, f"{command}: status {result.returncode}\n{result.stdout}\n{result.stderr[-3000:]}"
        return result.stdout

    state = tmp_path / "state"
    state.mkdir()
    plain = start(rootcanal, ["bthome-thermometer"])
    try:
        encrypted = start(rootcanal, ["bthome-thermometer"], "--name", "sealed", "--bindkey-file", str(tmp_path / "bindkey.txt"),
                          "--state-dir", str(state))
        try:
            plain_address = plain.listing[0]["address"].upper()
            sealed_address = encrypted.listing[0]["address"].upper()
            assert plain_address != sealed_address
            for setting, value in (("temperature", "21.5"), ("humidity", "48.25"), ("battery", "93")):
                ctl(plain, "set", "bthome-thermometer", setting, value)
            ctl(encrypted, "set", "bthome-thermometer", "temperature", "-5.25")
            ctl(encrypted, "set", "bthome-thermometer", "battery", "42")

            listed = decoded_lines(pipeline(commands[0].replace("/run/blemu.sock", plain.control_path)))
            (values,) = listed[plain_address]
            assert values["battery"] == 93 and close(values, {"temperature": 21.5, "humidity": 48.25}), values
            assert set(values) == {"packet_id", "battery", "temperature", "humidity"}, values
            # Without the key: nothing read.
            assert decoded_lines(pipeline(commands[0].replace("/run/blemu.sock", encrypted.control_path))) == {sealed_address: [{}]}

            heard = decoded_lines(pipeline(commands[1].replace("hci1", rootcanal.controller_spec)
                                           .replace("--timeout 30", "--timeout 5")))
        finally:
            stop(encrypted)
    finally:
        stop(plain)
    opened = [values for values in heard.get(sealed_address, []) if values]
    assert opened and opened[-1]["battery"] == 42 and close(opened[-1], {"temperature": -5.25}), heard
    # The bindkey is the encrypted one's: a plain advertisement is refused, as Home Assistant does.
    assert heard.get(plain_address) and all("temperature" not in values for values in heard[plain_address]), heard
