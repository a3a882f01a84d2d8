"""`blemu scan` as an observer (issue 24): Bumble broadcasters on a rootcanal radio send BTHome v2
(plain, and AES-CCM encrypted under a bindkey), an iBeacon and Eddystone URL and TLM frames, and
a periodic advertising train; `blemu scan --json`, `--bindkey-file`, `--watch` and `--periodic`
must report the decoded values.

The payloads are built here, independently of blemu's encoders: the BTHome example is
bthome.io's own (`02 01 06 0A 16 D2 FC 40 02 C4 09 03 BF 13` = 25.00 °C, 50.55 %), and the
encrypted one is sealed with Python's cryptography AESCCM under the nonce bthome.io/encryption
gives (MAC as written, D2 FC, device information, counter).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import threading
import time

from bumble.device import AdvertisingEventProperties, AdvertisingParameters, AdvertisingType, Device, PeriodicAdvertisingParameters
from bumble.hci import HCI_Error
from bumble.transport import open_transport
from cryptography.hazmat.primitives.ciphers.aead import AESCCM

from bumble_central import bumble_transport_spec
from harness import blemu_binary, run_cli

PLAIN = "F0:0B:00:00:00:01"
ENCRYPTED = "F0:0B:00:00:00:02"
IBEACON = "F0:0B:00:00:00:03"
EDDYSTONE_URL = "F0:0B:00:00:00:04"
EDDYSTONE_TLM = "F0:0B:00:00:00:05"
PERIODIC = "F0:0B:00:00:00:06"

BINDKEY = bytes.fromhex("231d39c1d7cc1ab1aee224cd096db932")
WRONG_KEY = bytes.fromhex("231d39c1d7cc1ab1aee224cd096db933")

PLAIN_AD = bytes.fromhex("020106 0A16D2FC 4002C40903BF13")
IBEACON_AD = bytes.fromhex("020106 1AFF4C000215 E2C56DB5DFFB48D2B060D0F5A71096E0 0102 0304 C5")
# Eddystone-URL "https://www.example.com/" (scheme 0x01, "example", expansion 0x00), TX -21 dBm.
EDDYSTONE_URL_AD = bytes.fromhex("020106 0303AAFE 0E16AAFE 10EB 01 6578616D706C65 00")
# Eddystone-TLM: 3000 mV, 23.5 °C (8.8: 0x1780), 258 PDUs, 123.4 s.
EDDYSTONE_TLM_AD = bytes.fromhex("020106 0303AAFE 1116AAFE 2000 0BB8 1780 00000102 000004D2")


def bthome_ad(objects: bytes) -> bytes:
    service_data = bytes([0xD2, 0xFC, 0x40]) + objects
    return bytes.fromhex("020106") + bytes([len(service_data) + 1, 0x16]) + service_data


def encrypted_bthome_ad(mac: str, objects: bytes, counter: int, key: bytes = BINDKEY) -> bytes:
    """bthome.io/encryption: device information 0x41, then AES-CCM(objects), counter, 4-byte MIC."""
    information = 0x41
    counter_bytes = counter.to_bytes(4, "little")
    nonce = bytes.fromhex(mac.replace(":", "")) + bytes([0xD2, 0xFC, information]) + counter_bytes
    sealed = AESCCM(key, tag_length=4).encrypt(nonce, objects, None)
    service_data = bytes([0xD2, 0xFC, information]) + sealed[:-4] + counter_bytes + sealed[-4:]
    return bytes.fromhex("020106") + bytes([len(service_data) + 1, 0x16]) + service_data


class Broadcasters:
    """Bumble devices, one per address, each on its own controller of the radio, advertising
    non-connectable legacy PDUs with the data given; `PERIODIC` instead sends an extended
    advertisement with a periodic train carrying `periodic_data`. On a thread of their own."""

    def __init__(self, controller: str, advertisements: dict[str, bytes], periodic_data: bytes | None = None):
        self.controller = controller
        self.advertisements = advertisements
        self.periodic_data = periodic_data
        self.devices: dict[str, Device] = {}
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.failure: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self._main())
        except BaseException as error:  # noqa: BLE001 - reported to the test through start()
            self.failure = error
            self.ready.set()

    async def _main(self) -> None:
        self.stopping = asyncio.Event()
        async with contextlib.AsyncExitStack() as stack:
            for address, data in self.advertisements.items():
                source, sink = await stack.enter_async_context(await open_transport(bumble_transport_spec(self.controller)))
                device = Device.with_hci(address, address, source, sink)
                await device.power_on()
                await device.start_advertising(advertising_type=AdvertisingType.UNDIRECTED, advertising_data=data,
                                               advertising_interval_min=100, advertising_interval_max=100)
                self.devices[address] = device
            if self.periodic_data is not None:
                source, sink = await stack.enter_async_context(await open_transport(bumble_transport_spec(self.controller)))
                device = Device.with_hci(PERIODIC, PERIODIC, source, sink)
                await device.power_on()
                advertising_set = await device.create_advertising_set(
                    advertising_parameters=AdvertisingParameters(
                        advertising_event_properties=AdvertisingEventProperties(is_connectable=False, is_scannable=False)),
                    advertising_data=bytes.fromhex("020106"),
                    periodic_advertising_parameters=PeriodicAdvertisingParameters(
                        periodic_advertising_interval_min=100, periodic_advertising_interval_max=100),
                    periodic_advertising_data=self.periodic_data)
                await advertising_set.start_periodic()
            self.ready.set()
            await self.stopping.wait()

    async def _replace(self, address: str, data: bytes) -> None:
        device = self.devices[address]
        with contextlib.suppress(HCI_Error):
            await device.stop_advertising()
        await device.start_advertising(advertising_type=AdvertisingType.UNDIRECTED, advertising_data=data,
                                       advertising_interval_min=100, advertising_interval_max=100)

    def replace(self, address: str, data: bytes) -> None:
        asyncio.run_coroutine_threadsafe(self._replace(address, data), self.loop).result(10)

    def __enter__(self) -> "Broadcasters":
        self.thread.start()
        assert self.ready.wait(30), "the Bumble broadcasters did not start"
        if self.failure is not None:
            raise self.failure
        return self

    def __exit__(self, *exc: object) -> None:
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.stopping.set)
        self.thread.join(10)


def scan(rootcanal, *args: str, timeout: float = 40.0):
    return run_cli(["scan", "--controller", rootcanal.controller_spec, *args], timeout=timeout)


def last_decoded(lines: list[dict]) -> dict[str, list[dict]]:
    """Each advertiser's latest decoded items."""
    return {line["address"]: line["decoded"] for line in lines}


def json_lines(result) -> list[dict]:
    assert result.returncode == 0, result.describe()
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


def bindkey_file(tmp_path, key: bytes, name: str = "bindkey"):
    path = tmp_path / name
    path.write_text(key.hex() + "\n")
    path.chmod(0o600)
    return str(path)


def test_scan_decodes_bthome_ibeacon_and_eddystone(rootcanal, tmp_path):
    encrypted = encrypted_bthome_ad(ENCRYPTED, bytes.fromhex("02CA09 03BF13"), counter=0x33221100)
    with Broadcasters(rootcanal.controller_spec, {PLAIN: PLAIN_AD, ENCRYPTED: encrypted, IBEACON: IBEACON_AD,
                                                  EDDYSTONE_URL: EDDYSTONE_URL_AD, EDDYSTONE_TLM: EDDYSTONE_TLM_AD}):
        right_lines = json_lines(scan(rootcanal, "--timeout", "4", "--json", "--bindkey-file", bindkey_file(tmp_path, BINDKEY)))
        right = last_decoded(right_lines)
        wrong = last_decoded(json_lines(scan(rootcanal, "--timeout", "3", "--json",
                                             "--bindkey-file", bindkey_file(tmp_path, WRONG_KEY, "wrong"))))
        text = scan(rootcanal, "--timeout", "3")
    plain = right[PLAIN][0]
    assert plain["format"] == "bthome" and not plain["encrypted"], plain
    assert plain["values"] == {"temperature": 25.0, "humidity": 50.55}, plain
    opened = right[ENCRYPTED][0]
    assert opened["encrypted"] and opened["counter"] == 0x33221100, opened
    assert opened["values"] == {"temperature": 25.06, "humidity": 50.55}, opened
    # Under a wrong key: a MIC failure, said as such, no values.
    assert wrong[ENCRYPTED] == [{"format": "bthome", "error": "mic_failure",
                                 "message": "encrypted BTHome whose MIC does not match (wrong bindkey, or altered)"}]
    # An unbound key leaves plain BTHome readable.
    assert wrong[PLAIN][0]["values"] == {"temperature": 25.0, "humidity": 50.55}
    assert right[IBEACON] == [{"format": "ibeacon", "uuid": "E2C56DB5-DFFB-48D2-B060-D0F5A71096E0", "major": 258,
                               "minor": 772, "measured_power": -59}]
    assert right[EDDYSTONE_URL] == [{"format": "eddystone-url", "tx_power": -21, "url": "https://www.example.com/"}]
    assert right[EDDYSTONE_TLM] == [{"format": "eddystone-tlm", "battery_mv": 3000, "temperature": 23.5,
                                     "advertising_count": 258, "uptime": 123.4}]
    # The raw AD structures stay beside what they decode to.
    assert bytes.fromhex(next(line for line in right_lines if line["address"] == PLAIN)["advertising_data"]) == PLAIN_AD
    assert text.returncode == 0, text.describe()
    assert "    bthome  temperature 25.00 °C  humidity 50.55 %" in text.stdout.splitlines(), text.stdout
    assert "    bthome  encrypted BTHome, and no bindkey" in text.stdout.splitlines(), text.stdout
    assert "    eddystone-url  https://www.example.com/  tx -21 dBm" in text.stdout.splitlines(), text.stdout


def test_watch_prints_each_reading_once(rootcanal, tmp_path):
    key = bindkey_file(tmp_path, BINDKEY)
    first = encrypted_bthome_ad(ENCRYPTED, bytes.fromhex("0001 02C409"), counter=1)
    with Broadcasters(rootcanal.controller_spec, {ENCRYPTED: first, PLAIN: PLAIN_AD}) as broadcasters:
        process = subprocess.Popen([str(blemu_binary()), "scan", "--controller", rootcanal.controller_spec, "--json",
                                    "--timeout", "10", "--watch", ENCRYPTED, "--bindkey-file", key],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # The first reading, heard many times over by now, printed once.
        first_line = process.stdout.readline()
        time.sleep(1)
        # A repeat of packet 1 under a new counter (a new nonce, new bytes): not a new reading.
        broadcasters.replace(ENCRYPTED, encrypted_bthome_ad(ENCRYPTED, bytes.fromhex("0001 02C409"), counter=2))
        time.sleep(1.5)
        broadcasters.replace(ENCRYPTED, encrypted_bthome_ad(ENCRYPTED, bytes.fromhex("0002 02C509"), counter=3))
        stdout, stderr = process.communicate(timeout=20)
        stdout = first_line + stdout
    assert process.returncode == 0, stderr
    lines = [json.loads(line) for line in stdout.splitlines() if line.strip()]
    assert {line["address"] for line in lines} == {ENCRYPTED}, lines
    readings = [(line["decoded"][0]["packet_id"], line["decoded"][0]["values"]["temperature"]) for line in lines]
    assert readings == [(1, 25.0), (2, 25.01)], lines
    assert all(line["update"] == "reading" for line in lines)


def test_periodic_train_is_synchronized_and_decoded(rootcanal):
    with Broadcasters(rootcanal.controller_spec, {}, periodic_data=bthome_ad(bytes.fromhex("0007 02C409 03BF13"))):
        lines = json_lines(scan(rootcanal, "--timeout", "6", "--json", "--periodic"))
    periodic = [line for line in lines if line["update"] == "periodic"]
    assert periodic, lines
    # Printed when its data changes, not once per periodic event (every 100 ms for 6 s).
    assert len(periodic) == 1, periodic
    train = periodic[0]
    assert train["address"] == PERIODIC and train["periodic"]["interval_ms"] == 100, train
    assert train["decoded"][0]["packet_id"] == 7
    assert train["decoded"][0]["values"] == {"packet_id": 7, "temperature": 25.0, "humidity": 50.55}


def test_a_bindkey_file_that_is_no_key_is_a_bad_command_line(tmp_path):
    missing = run_cli(["scan", "--controller", "tcp:127.0.0.1:1", "--bindkey-file", str(tmp_path / "missing")])
    assert missing.returncode == 64 and "cannot read the bindkey file" in missing.stderr, missing.describe()
    short = tmp_path / "short"
    short.write_text("231d39c1d7cc1ab1")
    refused = run_cli(["scan", "--controller", "tcp:127.0.0.1:1", "--bindkey-file", str(short)])
    assert refused.returncode == 64 and "32 hex digits" in refused.stderr, refused.describe()
    assert "231d39c1d7cc1ab1" not in refused.stderr


def bthome_ble_accepts(address: str, payloads: list[bytes]) -> list[bool]:
    """Which of `payloads` (BTHome service data, in turn from one device) Home Assistant's bthome-ble
    accepts under BINDKEY: one BTHomeBluetoothDeviceData for them all, as Home Assistant keeps one
    per device, so its counter check (parser.py `_check_encryption_counter`) applies. Each is
    heard 10 s after the one before."""
    from bleak.backends.device import BLEDevice
    from bthome_ble import BTHomeBluetoothDeviceData
    from habluetooth import BluetoothServiceInfoBleak

    uuid = "0000fcd2-0000-1000-8000-00805f9b34fb"
    device = BTHomeBluetoothDeviceData(bindkey=BINDKEY)
    accepted = []
    for index, payload in enumerate(payloads):
        info = BluetoothServiceInfoBleak(
            name="sensor", address=address, rssi=-60, manufacturer_data={}, service_data={uuid: payload},
            service_uuids=[uuid], source="local", device=BLEDevice(address, "sensor", None), advertisement=None,
            connectable=False, time=time.monotonic() + index * 10, tx_power=None)
        device.update(info)
        # An update it takes moves its counter to the payload's (a refused one leaves it, and the
        # values it returns are the previous ones).
        accepted.append(device.encryption_counter == int.from_bytes(payload[-8:-4], "little"))
    return accepted


def test_a_replayed_encrypted_reading_is_refused(rootcanal, tmp_path):
    """Issue 34: a Bumble broadcaster sends encrypted readings with counters 100 and 101, then replays
    the recorded 100 (bytes as they were), then an older recording with counter 50. `blemu scan`
    must print 100 and 101 only — with `--watch` and in a plain scan alike — and say once that it
    refused a replay. bthome-ble refuses the 100 too, but takes the 50 for a device that counted
    again from 0 (below 100): blemu is stricter there, as Docs/BROADCASTERS.md says."""
    key = bindkey_file(tmp_path, BINDKEY)
    temperatures = {100: "02D007", 101: "023408", 50: "026C07"}   # 20.00, 21.00, 19.00 °C
    recorded = {counter: encrypted_bthome_ad(ENCRYPTED, bytes.fromhex(objects), counter)
                for counter, objects in temperatures.items()}
    sequence = [100, 101, 100, 50]
    expected = bthome_ble_accepts(ENCRYPTED, [recorded[counter][7:] for counter in sequence])
    assert expected == [True, True, False, True], "bthome-ble's rule is not the one this test expects"
    with Broadcasters(rootcanal.controller_spec, {ENCRYPTED: recorded[100]}) as broadcasters:
        watch = subprocess.Popen([str(blemu_binary()), "scan", "--controller", rootcanal.controller_spec, "--json",
                                  "--timeout", "12", "--watch", ENCRYPTED, "--bindkey-file", key],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        plain = subprocess.Popen([str(blemu_binary()), "scan", "--controller", rootcanal.controller_spec,
                                  "--timeout", "12", "--bindkey-file", key],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        first_line = watch.stdout.readline()
        time.sleep(1.5)
        for counter in sequence[1:]:
            broadcasters.replace(ENCRYPTED, recorded[counter])
            time.sleep(2)
        stdout, watch_stderr = watch.communicate(timeout=20)
        plain_stdout, plain_stderr = plain.communicate(timeout=20)
    assert watch.returncode == 0 and plain.returncode == 0, watch_stderr + plain_stderr
    lines = [json.loads(line) for line in (first_line + stdout).splitlines() if line.strip()]
    printed = [(line["decoded"][0]["counter"], line["decoded"][0]["values"]["temperature"]) for line in lines]
    assert printed == [(100, 20.0), (101, 21.0)], lines
    # The plain scan: the advertiser's line under each new reading (service data alone changed),
    # never the replayed one.
    readings = [line.strip() for line in plain_stdout.splitlines() if line.strip().startswith("bthome")]
    assert readings == ["bthome  encrypted (counter 100)  temperature 20.00 °C",
                        "bthome  encrypted (counter 101)  temperature 21.00 °C"], plain_stdout
    for stderr in (watch_stderr, plain_stderr):
        refusals = [line for line in stderr.splitlines() if "refused as a replay" in line]
        assert refusals == [f"blemu scan: {ENCRYPTED}: encrypted BTHome counter 100 after 101: refused as a replay "
                            "(later refusals from it are not said)"], stderr
