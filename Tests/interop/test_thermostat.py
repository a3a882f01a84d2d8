"""blemu's thermostat, checked from the outside by Bumble as an independent central.

One `blemu run thermostat` serves the module. Spec references: Environmental Sensing Service
1.0 (ESS), GATT Specification Supplement (GSS) for the Temperature and Humidity formats, Core
5.4 (Vol/Part/section), Docs/REFERENCE.md for blemu's own Thermostat service.
"""

from __future__ import annotations

import asyncio
import struct

import pytest
from bumble.core import UUID

from bumble_central import (
    ATT_WRITE_NOT_PERMITTED,
    UUID_BATTERY_SERVICE,
    UUID_CCCD,
    UUID_DEVICE_INFORMATION_SERVICE,
    UUID_DIAGNOSTICS_CHARACTERISTIC,
    UUID_DIAGNOSTICS_SERVICE,
    collect_notifications,
)
from harness import JUST_WORKS, BlemuProcess, expect_write_error, pairing_config, run, start_advertising, unique_name
from harness import connected as central_on

UUID_ESS = UUID.from_16_bits(0x181A)
UUID_TEMPERATURE = UUID.from_16_bits(0x2A6E)
UUID_HUMIDITY = UUID.from_16_bits(0x2A6F)
UUID_VALID_RANGE = UUID.from_16_bits(0x2906)
UUID_ES_MEASUREMENT = UUID.from_16_bits(0x290C)
UUID_ES_TRIGGER_SETTING = UUID.from_16_bits(0x290D)
UUID_THERMOSTAT_SERVICE = UUID("7d3c0100-9a5e-4d1a-8f6e-5c1b2d3e4f50")
UUID_TARGET = UUID("7d3c0101-9a5e-4d1a-8f6e-5c1b2d3e4f50")
UUID_MODE = UUID("7d3c0102-9a5e-4d1a-8f6e-5c1b2d3e4f50")
UUID_HEATING_STATE = UUID("7d3c0103-9a5e-4d1a-8f6e-5c1b2d3e4f50")

ATT_INVALID_ATTRIBUTE_VALUE_LENGTH = 0x0D
ATT_OUT_OF_RANGE = 0xFF  # Supplement, Part B, 1.2: common profile error code
PROPERTY_READ, PROPERTY_WRITE, PROPERTY_NOTIFY = 0x02, 0x08, 0x10

MODE_OFF, MODE_HEAT = 0, 1
STATE_IDLE, STATE_HEATING = 0, 1


def temperature(value: bytes) -> float:
    """GSS Temperature: sint16, 0.01 °C."""
    assert len(value) == 2, f"Temperature is {len(value)} octets: {value.hex()}"
    return struct.unpack("<h", value)[0] / 100


def humidity(value: bytes) -> float:
    """GSS Humidity: uint16, 0.01 %."""
    assert len(value) == 2, f"Humidity is {len(value)} octets: {value.hex()}"
    return struct.unpack("<H", value)[0] / 100


@pytest.fixture(scope="module")
def thermostat(rootcanal):
    process = start_advertising(BlemuProcess(rootcanal.controller_spec, unique_name("TH"), device="thermostat"), rootcanal)
    yield process
    if process.exited() is not None:
        pytest.fail(f"blemu died during the tests: {process.exited()}", pytrace=False)
    assert process.stop() == 0, f"blemu did not stop cleanly:\n{process.log_tail()}"


def connected(blemu: BlemuProcess, label: str = "thermostat-central", pair: bool = False):
    """A central on the thermostat; `pair`: Just Works first, as its writes need an encrypted link."""
    return central_on(blemu, label, discover=True, pair=JUST_WORKS if pair else None)


def test_advertises_environmental_sensing_and_the_thermostat_appearance(thermostat):
    scan = thermostat.scan
    assert 0x181A in scan.service_uuids_16(), f"ESS 0x181A not advertised: {scan.service_uuids_16()}"
    appearances = [data for t, data in scan.adv_structures + scan.scan_response_structures if t == 0x19]
    # Assigned Numbers 2.6.3: 0x0601 is HVAC, Thermostat.
    assert appearances == [b"\x01\x06"], f"appearance AD {appearances}"


def test_discovers_ess_with_its_descriptors_and_the_thermostat_service(thermostat):
    async def scenario():
        async with connected(thermostat) as conn:
            found = {s.uuid for s in conn.services()}
            for uuid in (UUID_ESS, UUID_THERMOSTAT_SERVICE, UUID_DEVICE_INFORMATION_SERVICE, UUID_BATTERY_SERVICE,
                         UUID_DIAGNOSTICS_SERVICE):
                assert uuid in found, f"service {uuid} missing; have {found}"
            expected = {
                UUID_TEMPERATURE: (UUID_ESS, PROPERTY_READ | PROPERTY_NOTIFY),
                UUID_HUMIDITY: (UUID_ESS, PROPERTY_READ | PROPERTY_NOTIFY),
                UUID_TARGET: (UUID_THERMOSTAT_SERVICE, PROPERTY_READ | PROPERTY_WRITE | PROPERTY_NOTIFY),
                UUID_MODE: (UUID_THERMOSTAT_SERVICE, PROPERTY_READ | PROPERTY_WRITE | PROPERTY_NOTIFY),
                UUID_HEATING_STATE: (UUID_THERMOSTAT_SERVICE, PROPERTY_READ | PROPERTY_NOTIFY),
            }
            for uuid, (service, properties) in expected.items():
                char = conn.characteristic(uuid, service)
                assert int(char.properties) & properties == properties, f"{uuid}: properties 0x{int(char.properties):02x}"
                assert char.get_descriptor(UUID_CCCD) is not None, f"{uuid} notifies but has no CCCD"

            for uuid, low, high, decode in ((UUID_TEMPERATURE, -40.0, 85.0, temperature), (UUID_HUMIDITY, 0.0, 100.0, humidity)):
                char = conn.characteristic(uuid, UUID_ESS)
                # ESS 1.0, Table 3.2: a notifying ESS characteristic has an ES Trigger Setting
                # (3.1.2.2: condition 0x03, notify when the value changes).
                trigger = char.get_descriptor(UUID_ES_TRIGGER_SETTING)
                assert trigger is not None, f"{uuid} notifies but has no ES Trigger Setting descriptor"
                assert await conn.read(trigger.handle) == b"\x03", "ES Trigger Setting is not 'value changed'"
                # ESS 1.0, 3.1.2.1: ES Measurement is 11 octets: flags (0), sampling function,
                # measurement period (uint24), update interval (uint24), application, uncertainty.
                measurement = char.get_descriptor(UUID_ES_MEASUREMENT)
                assert measurement is not None, f"{uuid} has no ES Measurement descriptor"
                value = await conn.read(measurement.handle)
                assert len(value) == 11, f"ES Measurement is {len(value)} octets: {value.hex()}"
                flags, sampling = struct.unpack_from("<HB", value)
                assert flags == 0 and 0 <= sampling <= 7, f"ES Measurement {value.hex()}"
                # GSS Valid Range: lower and upper bound in the characteristic's own format.
                valid = char.get_descriptor(UUID_VALID_RANGE)
                assert valid is not None, f"{uuid} has no Valid Range"
                bounds = await conn.read(valid.handle)
                assert (decode(bounds[:2]), decode(bounds[2:])) == (low, high), f"Valid Range {bounds.hex()}"

            diagnostics = await conn.read(conn.characteristic(UUID_DIAGNOSTICS_CHARACTERISTIC, UUID_DIAGNOSTICS_SERVICE))
            assert b'"device":"thermostat"' in diagnostics

    run(scenario())


def test_reads_decode_to_a_plausible_room(thermostat):
    async def scenario():
        async with connected(thermostat) as conn:
            room = temperature(await conn.read(conn.characteristic(UUID_TEMPERATURE, UUID_ESS)))
            assert -20 <= room <= 50, f"room {room} °C"
            # The sensor reports in steps of 0.1 °C and 1 % (Docs/REFERENCE.md).
            assert round(room * 100) % 10 == 0, f"room {room} °C is not on a 0.1 °C step"
            rh = humidity(await conn.read(conn.characteristic(UUID_HUMIDITY, UUID_ESS)))
            assert 0 <= rh <= 100 and round(rh * 100) % 100 == 0, f"humidity {rh} %"
            target = temperature(await conn.read(conn.characteristic(UUID_TARGET, UUID_THERMOSTAT_SERVICE)))
            assert 5 <= target <= 35, f"target {target} °C"
            mode = await conn.read(conn.characteristic(UUID_MODE, UUID_THERMOSTAT_SERVICE))
            assert len(mode) == 1 and mode[0] <= 3, f"mode {mode.hex()}"
            state = await conn.read(conn.characteristic(UUID_HEATING_STATE, UUID_THERMOSTAT_SERVICE))
            assert len(state) == 1 and state[0] <= 2, f"heating state {state.hex()}"

    run(scenario())


ATT_INSUFFICIENT_AUTHENTICATION = 0x05


def test_writes_need_an_encrypted_link_reads_do_not(thermostat):
    """The thermostat's Target and Mode writes need encryption, unconditionally (Just Works is
    enough): an unpaired central gets Insufficient Authentication (Vol 3, Part C, 10.3) and
    the value stays; it still reads everything."""

    async def scenario():
        async with connected(thermostat, "unpaired-central") as conn:
            target = conn.characteristic(UUID_TARGET, UUID_THERMOSTAT_SERVICE)
            before = await conn.read(target)
            await expect_write_error(conn, target, struct.pack("<h", 2100), ATT_INSUFFICIENT_AUTHENTICATION)
            await expect_write_error(conn, conn.characteristic(UUID_MODE, UUID_THERMOSTAT_SERVICE), bytes([MODE_OFF]),
                                     ATT_INSUFFICIENT_AUTHENTICATION)
            assert await conn.read(target) == before, "a refused write changed the target"

    run(scenario())


def test_a_write_that_comes_while_the_central_pairs_is_answered_once_the_link_is_encrypted(thermostat):
    """BlueZ pairs on its own (its EATT channel was refused for encryption) while the app's
    write is on its way: a write request that arrives after the Pairing Request and before the
    encryption is held, then answered against the encrypted link, written. Answered at once with
    Insufficient Authentication, BlueZ reads the error once the link is encrypted without MITM
    protection, asks for a MITM pairing the thermostat cannot give, and the write is lost (seen
    in the kernel suite's bleak-thermostat case)."""

    async def scenario():
        async with connected(thermostat, "pairing-writer") as conn:
            conn.connection.device.pairing_config_factory = pairing_config(JUST_WORKS)
            target = conn.characteristic(UUID_TARGET, UUID_THERMOSTAT_SERVICE)
            value = struct.pack("<h", 2150 if await conn.read(target) != struct.pack("<h", 2150) else 2200)
            pairing = asyncio.create_task(conn.connection.pair())
            # The Pairing Request goes out in the task's first step, before the write, on the same link.
            await asyncio.sleep(0)
            assert not conn.connection.is_encrypted
            await conn.write(target, value)
            await asyncio.wait_for(pairing, 15)
            assert conn.connection.is_encrypted
            assert await conn.read(target) == value, "the held write was not applied"

    run(scenario())


def test_writes_are_checked_for_length_and_range(thermostat):
    """Vol 3, Part F, 3.4.5.1: a value of the wrong size is Invalid Attribute Value Length
    (0x0D); a value outside what the characteristic accepts is Out of Range (0xFF)."""

    async def scenario():
        async with connected(thermostat, pair=True) as conn:
            target = conn.characteristic(UUID_TARGET, UUID_THERMOSTAT_SERVICE)
            mode = conn.characteristic(UUID_MODE, UUID_THERMOSTAT_SERVICE)
            before = await conn.read(target)
            await expect_write_error(conn, target, b"\xc4", ATT_INVALID_ATTRIBUTE_VALUE_LENGTH)
            await expect_write_error(conn, target, b"\xc4\x09\x00", ATT_INVALID_ATTRIBUTE_VALUE_LENGTH)
            await expect_write_error(conn, target, struct.pack("<h", 499), ATT_OUT_OF_RANGE)
            await expect_write_error(conn, target, struct.pack("<h", 3501), ATT_OUT_OF_RANGE)
            await expect_write_error(conn, target, struct.pack("<h", -500), ATT_OUT_OF_RANGE)
            assert await conn.read(target) == before, "a refused write changed the target"
            await conn.write(target, struct.pack("<h", 2250))
            assert temperature(await conn.read(target)) == 22.5
            await expect_write_error(conn, mode, b"\x04", ATT_OUT_OF_RANGE)
            await expect_write_error(conn, mode, b"\x01\x00", ATT_INVALID_ATTRIBUTE_VALUE_LENGTH)
            await expect_write_error(conn, conn.characteristic(UUID_HEATING_STATE, UUID_THERMOSTAT_SERVICE), b"\x00",
                                     ATT_WRITE_NOT_PERMITTED)

    run(scenario())


def test_a_higher_target_starts_the_heating_and_the_room_notifies_its_steps(thermostat):
    """Heat mode with a high target: Heating State notifies heating at once; then the room
    warms and Temperature notifies each 0.1 °C step (ES Trigger Setting 'value changed'), about
    every 40 s at the device's heating rate, not on every 5 s tick."""

    async def scenario():
        async with connected(thermostat, pair=True) as conn:
            temperature_char = conn.characteristic(UUID_TEMPERATURE, UUID_ESS)
            state_char = conn.characteristic(UUID_HEATING_STATE, UUID_THERMOSTAT_SERVICE)
            target = conn.characteristic(UUID_TARGET, UUID_THERMOSTAT_SERVICE)
            mode = conn.characteristic(UUID_MODE, UUID_THERMOSTAT_SERVICE)
            await conn.write(mode, bytes([MODE_OFF]))
            assert (await conn.read(state_char))[0] == STATE_IDLE, "mode off leaves the plant idle"
            for char in (temperature_char, state_char, target):
                await conn.subscribe(char)
            mark = len(conn.notifications)

            await conn.write(target, struct.pack("<h", 3500))
            got = await collect_notifications(conn, target.handle, 1, 5.0, mark)
            assert temperature(got[0].value) == 35.0, "the new target is notified to its subscribers"
            start = temperature(await conn.read(temperature_char))
            await conn.write(mode, bytes([MODE_HEAT]))
            state = await collect_notifications(conn, state_char.handle, 1, 5.0, mark)
            assert state[0].value == bytes([STATE_HEATING]), f"Heating State notified {state[0].value.hex()}"

            steps = await collect_notifications(conn, temperature_char.handle, 1, 75.0, mark)
            assert temperature(steps[0].value) == pytest.approx(start + 0.1, abs=0.001), (
                f"the room went {start} -> {temperature(steps[0].value)} °C: not one 0.1 °C step up")
            # The next step is some 40 s away: the 5 s ticks in between send nothing.
            quiet_from = len(conn.notifications)
            await asyncio.sleep(15)
            extra = [n for n in conn.notifications[quiet_from:] if n.handle == temperature_char.handle]
            assert not extra, f"{len(extra)} temperature notifications within 15 s of a step: {[n.value.hex() for n in extra]}"
            await conn.write(mode, bytes([MODE_OFF]))

    run(scenario(), 120)
