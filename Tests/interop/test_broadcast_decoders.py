"""The consumers' parsers on blemu's broadcast payloads (issue 24, first step: the encoders).

The vectors are the exact bytes `Tests/BroadcastTests` asserts BlemuBroadcast's encoders produce
(BTHomeTests, BeaconTests); here Home Assistant's own parsers decode them: bthome-ble (plain,
with the bindkey, and refused under a wrong key) and ibeacon-ble. So a change on either side —
blemu's encoder or the parsers' pinned versions — fails a test. No blemu process or controller:
the over-the-air test comes with the devices that broadcast them.
"""

from __future__ import annotations

import asyncio
import time

from bleak.backends.device import BLEDevice
from bthome_ble import BTHomeBluetoothDeviceData
from habluetooth import BluetoothServiceInfoBleak
from home_assistant_bluetooth import BluetoothServiceInfo
from ibeacon_ble import iBeaconParser

BTHOME_UUID = "0000fcd2-0000-1000-8000-00805f9b34fb"
# bthome.io/encryption's example key and MAC address.
BINDKEY = bytes.fromhex("231d39c1d7cc1ab1aee224cd096db932")
ADDRESS = "54:48:E6:8F:80:A5"


def service_data(advertising_data: bytes, uuid16: int) -> bytes:
    """The service data for uuid16 in advertising data, as bleak hands it (after the UUID)."""
    index = 0
    while index < len(advertising_data):
        length, kind = advertising_data[index], advertising_data[index + 1]
        data = advertising_data[index + 2:index + 1 + length]
        if kind == 0x16 and int.from_bytes(data[:2], "little") == uuid16:
            return data[2:]
        index += 1 + length
    raise AssertionError("no service data")


def bthome(payload: bytes, bindkey: bytes | None = None):
    """bthome-ble's reading of one advertisement's BTHome service data."""
    device = BTHomeBluetoothDeviceData(bindkey=bindkey)
    info = BluetoothServiceInfoBleak(
        name="blemu", address=ADDRESS, rssi=-60, manufacturer_data={}, service_data={BTHOME_UUID: payload},
        service_uuids=[BTHOME_UUID], source="local", device=BLEDevice(ADDRESS, "blemu", None), advertisement=None,
        connectable=False, time=time.monotonic(), tx_power=None)
    update = device.update(info)
    values = {key.key: value.native_value for key, value in update.entity_values.items()}
    values.update({key.key: value.native_value for key, value in update.binary_entity_values.items()})
    values.update({key.key: value.event_type for key, value in update.events.items()})
    values.pop("signal_strength", None)
    return device, values


def test_bthome_ble_decodes_the_published_example_and_the_thermometer():
    _, values = bthome(service_data(bytes.fromhex("020106 0A16D2FC 4002C40903BF13"), 0xFCD2))
    assert values == {"temperature": 25.0, "humidity": 50.55}
    _, values = bthome(service_data(bytes.fromhex("020106 0E16D2FC 400007015D02660803D912"), 0xFCD2))
    assert values == {"packet_id": 7, "battery": 93, "temperature": 21.5, "humidity": 48.25}
    _, values = bthome(bytes.fromhex("40000102F3FD"))
    assert values == {"packet_id": 1, "temperature": -5.25}


def test_bthome_ble_decodes_the_door_with_its_button_event():
    _, values = bthome(bytes.fromhex("440001016411013A01"))
    assert values == {"packet_id": 1, "battery": 100, "opening": True, "button": "press"}


def test_bthome_ble_opens_the_encrypted_thermometer_only_with_its_bindkey():
    payload = bytes.fromhex("415aa69d267f1810739df704030201614598f2")
    device, values = bthome(payload, BINDKEY)
    assert device.bindkey_verified
    assert values == {"packet_id": 7, "battery": 93, "temperature": 21.5, "humidity": 48.25}
    wrong = bytes(BINDKEY[:-1]) + bytes([BINDKEY[-1] ^ 0x01])
    device, values = bthome(payload, wrong)
    assert device.decryption_failed and not device.bindkey_verified
    assert values == {}
    # Unencrypted from a device with a bindkey: ignored (BlemuBroadcast refuses it too,
    # BTHomeDecodeError.unencryptedWithKey).
    _, values = bthome(bytes.fromhex("400007015D02660803D912"), BINDKEY)
    assert values == {}
    # The published encryption example (bthome.io/encryption): 25.06 °C, 50.55 %.
    device, values = bthome(bytes.fromhex("41A47266C95F730011223378237214"), BINDKEY)
    assert values == {"temperature": 25.06, "humidity": 50.55}


def test_ibeacon_ble_decodes_the_ibeacon():
    advertising_data = bytes.fromhex("0201061AFF4C000215E2C56DB5DFFB48D2B060D0F5A71096E001020304C5")
    assert advertising_data[5:7] == b"\x4c\x00"
    parser = iBeaconParser()
    asyncio.run(parser.async_setup())
    beacon = parser.parse(BluetoothServiceInfo(
        name="blemu", address="C0:11:22:33:44:55", rssi=-60, manufacturer_data={0x004C: advertising_data[7:]},
        service_data={}, service_uuids=[], source="local"))
    assert (str(beacon.uuid), beacon.major, beacon.minor, beacon.power) == ("e2c56db5-dffb-48d2-b060-d0f5a71096e0", 258, 772, -59)
