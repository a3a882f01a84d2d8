"""blemu's heart-rate device, checked from the outside by Bumble as an independent central.

All devices meet on one rootcanal radio. One blemu serves the whole module (`blemu`
fixture); the restart and clean-stop tests start their own. Each test runs one asyncio
scenario with its own Bumble central (a new controller on the radio) and a deadline.

Spec references: Core 5.4 (Vol/Part/section), Heart Rate Service 1.0 (HRS), Core
Specification Supplement (CSS), Docs/REFERENCE.md for blemu's own names.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time

from bumble import att
from bumble.core import UUID

from bumble_central import (
    AD_COMPLETE_LOCAL_NAME,
    AD_FLAGS,
    AD_SHORTENED_LOCAL_NAME,
    ATT_DEFAULT_MTU,
    ATT_INVALID_HANDLE,
    ATT_INVALID_OFFSET,
    ATT_MAX_VALUE_LENGTH,
    ATT_REQUEST_NOT_SUPPORTED,
    ATT_WRITE_NOT_PERMITTED,
    HCI_REMOTE_USER_TERMINATED_CONNECTION,
    HRS_CONTROL_POINT_NOT_SUPPORTED,
    UUID_BATTERY_LEVEL,
    UUID_BATTERY_SERVICE,
    UUID_BODY_SENSOR_LOCATION,
    UUID_CCCD,
    UUID_DATABASE_HASH,
    UUID_DEVICE_INFORMATION_SERVICE,
    UUID_DEVICE_NAME,
    UUID_DIAGNOSTICS_CHARACTERISTIC,
    UUID_DIAGNOSTICS_SERVICE,
    UUID_FIRMWARE_REVISION,
    UUID_GAP_SERVICE,
    UUID_GATT_SERVICE,
    UUID_HARDWARE_REVISION,
    UUID_HEART_RATE_CONTROL_POINT,
    UUID_HEART_RATE_MEASUREMENT,
    UUID_HEART_RATE_SERVICE,
    UUID_MANUFACTURER_NAME,
    UUID_MODEL_NUMBER,
    UUID_SERIAL_NUMBER,
    UUID_SERVICE_CHANGED,
    UUID_SOFTWARE_REVISION,
    Central,
    CentralConnection,
    collect_notifications,
    decode_heart_rate_measurement,
    error_code_of,
    is_static_random,
    raw_request,
)
from harness import connected, run, unique_name

PROPERTY_READ = 0x02
PROPERTY_WRITE = 0x08
PROPERTY_NOTIFY = 0x10
PROPERTY_INDICATE = 0x20

DIAGNOSTICS_KEYS = {"device", "firmware", "uptime_ms", "connections", "att_requests", "att_errors", "last_error", "reads"}


async def read_diagnostics(conn: CentralConnection, handle: int) -> dict:
    value = await conn.read(handle)
    assert 100 < len(value) <= ATT_MAX_VALUE_LENGTH, f"Diagnostics value is {len(value)} octets: {value!r}"
    try:
        decoded = json.loads(value.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise AssertionError(f"Diagnostics value is not UTF-8 JSON ({error}): {value!r}") from None
    assert isinstance(decoded, dict), f"Diagnostics JSON is not an object: {decoded!r}"
    missing = DIAGNOSTICS_KEYS - decoded.keys()
    assert not missing, f"Diagnostics JSON lacks {sorted(missing)}: {decoded}"
    return decoded


# ---------------------------------------------------------------------------------------------
# Advertising


def test_advertises_name_flags_and_heart_rate_service(blemu):
    scan = blemu.scan
    assert scan is not None
    assert scan.connectable, "blemu's advertisement is not connectable"
    if scan.legacy:
        # Vol 6, Part B, 2.3.1.1 / 2.3.2.2: legacy AdvData and ScanRspData are at most 31 octets.
        assert len(scan.adv_data or b"") <= 31 and len(scan.scan_response or b"") <= 31

    # CSS Part A, 1.3: Flags go in the advertising data (never the scan response); Vol 3,
    # Part C, 9.2.4: a general discoverable device sets LE General Discoverable Mode; an
    # LE-only device sets BR/EDR Not Supported.
    flags = scan.flags()
    assert flags is not None, f"no Flags AD structure in the advertising data {scan.adv_data!r}"
    assert flags & 0x02, f"LE General Discoverable Mode not set in Flags 0x{flags:02x}"
    assert flags & 0x04, f"BR/EDR Not Supported not set in Flags 0x{flags:02x}"
    assert all(t != AD_FLAGS for t, _ in scan.scan_response_structures), "Flags in the scan response"

    # The name: complete somewhere (advertising data or scan response); a shortened name,
    # if any, is a prefix of it (CSS Part A, 1.2).
    names = [(t, d.decode("utf-8", "replace")) for t, d in scan.adv_structures + scan.scan_response_structures
             if t in (AD_COMPLETE_LOCAL_NAME, AD_SHORTENED_LOCAL_NAME)]
    assert (AD_COMPLETE_LOCAL_NAME, blemu.name) in names, f"complete local name {blemu.name!r} not advertised: {names}"
    for ad_type, name in names:
        if ad_type == AD_SHORTENED_LOCAL_NAME:
            assert blemu.name.startswith(name), f"shortened name {name!r} is not a prefix of {blemu.name!r}"

    assert 0x180D in scan.service_uuids_16(), f"Heart Rate service 0x180D not advertised: {scan.service_uuids_16()}"

    # Vol 6, Part B, 1.3.2.1: static random address, two top bits 0b11.
    assert is_static_random(scan.address), f"{scan.address!r} is not a static random address"


def test_address_is_stable_across_restarts_with_the_same_name(blemu, blemu_factory):
    name = unique_name("HS")
    first = blemu_factory.start(name)
    address = first.scan.address
    assert first.stop() == 0, f"first run did not stop cleanly:\n{first.log_tail()}"
    second = blemu_factory.start(name)
    assert second.scan.address == address, f"address changed across restarts: {address} then {second.scan.address}"
    assert is_static_random(second.scan.address)
    assert address != blemu.scan.address, "two devices with different names share one address on the radio"
    assert second.stop() == 0, f"second run did not stop cleanly:\n{second.log_tail()}"


# ---------------------------------------------------------------------------------------------
# MTU


def test_mtu_exchange_and_default_mtu(blemu):
    async def scenario():
        async with connected(blemu) as conn:
            diagnostics = await conn.discover_characteristic(UUID_DIAGNOSTICS_SERVICE, UUID_DIAGNOSTICS_CHARACTERISTIC)
            # Before any exchange ATT_MTU is 23 (Vol 3, Part F, 3.2.8); a Read Response carries
            # the first ATT_MTU-1 octets of a longer value (3.4.4.4).
            response = await conn.request(att.ATT_Read_Request(attribute_handle=diagnostics.handle))
            assert response.op_code == att.Opcode.ATT_READ_RESPONSE, f"read failed: {response}"
            assert len(response.attribute_value) == ATT_DEFAULT_MTU - 1, (
                f"Read Response at the default MTU has {len(response.attribute_value)} octets, expected 22"
            )

            # Vol 3, Part F, 3.4.2: the server answers with its Server Rx MTU (>= 23), and both
            # then use min(client, server).
            server_mtu = await conn.exchange_mtu(247)
            assert server_mtu >= ATT_DEFAULT_MTU, f"Server Rx MTU {server_mtu} is below 23"
            mtu = min(247, server_mtu)
            response = await conn.request(att.ATT_Read_Request(attribute_handle=diagnostics.handle))
            assert response.op_code == att.Opcode.ATT_READ_RESPONSE, f"read failed: {response}"
            part = bytes(response.attribute_value)
            if len(part) < mtu - 1:
                # Shorter than ATT_MTU-1 only if it is the whole value.
                try:
                    json.loads(part)
                except ValueError:
                    raise AssertionError(f"Read Response of {len(part)} octets at ATT_MTU {mtu} is not the whole value: {part!r}") from None
            else:
                assert len(part) == mtu - 1, f"Read Response of {len(part)} octets at ATT_MTU {mtu}"
            # A long read at the new MTU still yields one consistent value (fragmented over
            # 27-octet LE ACL buffers by rootcanal).
            await read_diagnostics(conn, diagnostics.handle)
            return server_mtu

    run(scenario())


# ---------------------------------------------------------------------------------------------
# Discovery


REQUIRED_SERVICES = {
    UUID_GAP_SERVICE, UUID_GATT_SERVICE, UUID_HEART_RATE_SERVICE, UUID_DEVICE_INFORMATION_SERVICE,
    UUID_BATTERY_SERVICE, UUID_DIAGNOSTICS_SERVICE,
}

# (service, characteristic, properties that must be set, needs a CCCD)
REQUIRED_CHARACTERISTICS = [
    (UUID_GAP_SERVICE, UUID_DEVICE_NAME, PROPERTY_READ, False),
    (UUID_GATT_SERVICE, UUID_SERVICE_CHANGED, PROPERTY_INDICATE, True),
    (UUID_GATT_SERVICE, UUID_DATABASE_HASH, PROPERTY_READ, False),
    (UUID_HEART_RATE_SERVICE, UUID_HEART_RATE_MEASUREMENT, PROPERTY_NOTIFY, True),
    (UUID_HEART_RATE_SERVICE, UUID_BODY_SENSOR_LOCATION, PROPERTY_READ, False),
    (UUID_HEART_RATE_SERVICE, UUID_HEART_RATE_CONTROL_POINT, PROPERTY_WRITE, False),
    (UUID_BATTERY_SERVICE, UUID_BATTERY_LEVEL, PROPERTY_READ | PROPERTY_NOTIFY, True),
    (UUID_DEVICE_INFORMATION_SERVICE, UUID_MANUFACTURER_NAME, PROPERTY_READ, False),
    (UUID_DIAGNOSTICS_SERVICE, UUID_DIAGNOSTICS_CHARACTERISTIC, PROPERTY_READ, False),
]


def test_discovers_services_characteristics_and_descriptors(blemu):
    async def scenario():
        async with connected(blemu) as conn:
            await conn.discover_all()
            services = conn.services()
            found = {s.uuid for s in services}
            assert REQUIRED_SERVICES <= found, f"missing services {REQUIRED_SERVICES - found}; have {found}"

            # Vol 3, Part G, 3.1: service groups are disjoint and in handle order.
            ranges = sorted((s.handle, s.end_group_handle, s.uuid) for s in services)
            for (start, end, uuid), (next_start, _, next_uuid) in zip(ranges, ranges[1:]):
                assert start <= end < next_start, f"services {uuid} and {next_uuid} overlap: {ranges}"

            attributes = dict(await conn.find_information())
            for service_uuid, char_uuid, properties, needs_cccd in REQUIRED_CHARACTERISTICS:
                service = conn.service(service_uuid)
                matches = [c for c in service.characteristics if c.uuid == char_uuid]
                assert matches, f"{char_uuid} not found in service {service_uuid}"
                char = matches[0]
                assert char.properties & properties == properties, (
                    f"{char_uuid} properties 0x{int(char.properties):02x} lack 0x{properties:02x}"
                )
                # Vol 3, Part G, 3.3: the declaration sits right before the value.
                assert service.handle < char.handle - 1 and char.handle <= service.end_group_handle
                assert attributes.get(char.handle - 1) == UUID.from_16_bits(0x2803), (
                    f"no characteristic declaration before {char_uuid}'s value handle 0x{char.handle:04x}"
                )
                assert attributes.get(char.handle) == char_uuid
                if needs_cccd:
                    # Vol 3, Part G, 3.3.3.3: notify/indicate requires a CCCD.
                    assert char.get_descriptor(UUID_CCCD) is not None, f"{char_uuid} has no CCCD"

            name = await conn.read(conn.characteristic(UUID_DEVICE_NAME, UUID_GAP_SERVICE))
            assert name.decode("utf-8") == blemu.name, f"Device Name {name!r} != {blemu.name!r}"
            database_hash = await conn.read(conn.characteristic(UUID_DATABASE_HASH, UUID_GATT_SERVICE))
            assert len(database_hash) == 16, f"Database Hash has {len(database_hash)} octets"

    run(scenario())


def test_database_hash_matches_the_database(blemu):
    """Vol 3, Part G, 7.3: the Database Hash read is the one computed from what the central
    discovers (`CentralConnection.computed_database_hash`)."""

    async def scenario():
        async with connected(blemu) as conn:
            expected = await conn.computed_database_hash()
            await conn.discover_characteristic(UUID_GATT_SERVICE, UUID_DATABASE_HASH)
            actual = await conn.read(conn.characteristic(UUID_DATABASE_HASH, UUID_GATT_SERVICE))
            assert actual == expected, f"Database Hash {actual.hex()} != computed {expected.hex()}"

    run(scenario())


# ---------------------------------------------------------------------------------------------
# Reads


def test_reads_body_sensor_location_device_information_and_battery(blemu):
    async def scenario():
        async with connected(blemu) as conn:
            await conn.discover_all()
            # HRS 3.2: Body Sensor Location is one uint8, 0 Other .. 6 Foot.
            location = await conn.read(conn.characteristic(UUID_BODY_SENSOR_LOCATION, UUID_HEART_RATE_SERVICE))
            assert len(location) == 1 and location[0] <= 6, f"Body Sensor Location {location.hex()}"

            # DIS 1.1, 3.x: the string characteristics are UTF-8; Manufacturer Name is required here.
            dis = conn.service(UUID_DEVICE_INFORMATION_SERVICE)
            strings = [UUID_MANUFACTURER_NAME, UUID_MODEL_NUMBER, UUID_SERIAL_NUMBER, UUID_HARDWARE_REVISION,
                       UUID_FIRMWARE_REVISION, UUID_SOFTWARE_REVISION]
            seen = 0
            for char in dis.characteristics:
                if char.uuid in strings:
                    value = await conn.read(char)
                    assert value, f"DIS {char.uuid} is empty"
                    value.decode("utf-8")  # raises on invalid UTF-8
                    seen += 1
            assert seen >= 1

            # BAS 1.0, 3.1: Battery Level is one uint8 percentage 0..100.
            level = await conn.read(conn.characteristic(UUID_BATTERY_LEVEL, UUID_BATTERY_SERVICE))
            assert len(level) == 1 and level[0] <= 100, f"Battery Level {level.hex()}"

    run(scenario())


def test_diagnostics_long_read_counts_one_read_per_value(blemu):
    """Docs/REFERENCE.md, The Diagnostics value: `reads` grows by one per read from offset 0; the Read
    Blob requests that continue a long read do not count. At ATT_MTU 23 each read of the
    >100-octet value is one Read plus several Read Blobs (Vol 3, Part G, 4.8.3)."""

    async def scenario():
        async with connected(blemu) as conn:
            char = await conn.discover_characteristic(UUID_DIAGNOSTICS_SERVICE, UUID_DIAGNOSTICS_CHARACTERISTIC)
            assert conn.mtu == ATT_DEFAULT_MTU
            values = [await read_diagnostics(conn, char.handle) for _ in range(3)]
            reads = [v["reads"] for v in values]
            assert all(isinstance(r, int) for r in reads), f"reads are not integers: {reads}"
            assert reads[1] == reads[0] + 1 and reads[2] == reads[1] + 1, f"reads went {reads}, expected +1 per long read"
            uptimes = [v["uptime_ms"] for v in values]
            assert all(isinstance(u, int) and u >= 0 for u in uptimes) and uptimes == sorted(uptimes), f"uptime_ms {uptimes}"
            assert values[2]["att_requests"] > values[0]["att_requests"], "att_requests did not grow"
            assert values[0]["device"] in ("heart-rate", blemu.name), f"device {values[0]['device']!r}"

    run(scenario())


# ---------------------------------------------------------------------------------------------
# Notifications and the control point


def test_heart_rate_notifications_about_once_a_second_and_stop_on_unsubscribe(blemu):
    async def scenario():
        async with connected(blemu) as conn:
            hrm = await conn.discover_characteristic(UUID_HEART_RATE_SERVICE, UUID_HEART_RATE_MEASUREMENT)
            await conn.subscribe(hrm)
            got = await collect_notifications(conn, hrm.handle, count=5, timeout=8.0)
            gaps = [b.at - a.at for a, b in zip(got, got[1:])]
            assert 0.7 <= statistics.mean(gaps) <= 1.3, f"notification gaps {gaps} s, expected about 1 s"
            for notification in got:
                m = decode_heart_rate_measurement(notification.value)
                assert 30 <= m.heart_rate <= 220, f"implausible heart rate {m.heart_rate} in {notification.value.hex()}"
                if m.rr_intervals:
                    beat = 60.0 / m.heart_rate
                    mean_rr = statistics.mean(m.rr_intervals)
                    # RR intervals are the beats behind the reported rate: within 30 %.
                    assert abs(mean_rr - beat) <= 0.3 * beat, (
                        f"RR intervals {m.rr_intervals} s do not match {m.heart_rate} bpm ({beat:.3f} s)"
                    )

            await conn.unsubscribe(hrm)
            # The CCCD write response came after any notification queued before it, so
            # nothing more arrives (Vol 3, Part G, 3.3.3.3: notifications off).
            mark = len(conn.notifications)
            await asyncio.sleep(2.5)
            late = [n for n in conn.notifications[mark:] if n.handle == hrm.handle]
            assert not late, f"{len(late)} notifications after unsubscribing"

    run(scenario())


def test_control_point_reset_and_unsupported_value(blemu):
    """HRS 3.3: writing 0x01 resets Energy Expended; other values get error 0x80."""

    async def scenario():
        async with connected(blemu) as conn:
            await conn.discover_all()
            control_point = conn.characteristic(UUID_HEART_RATE_CONTROL_POINT, UUID_HEART_RATE_SERVICE)
            hrm = conn.characteristic(UUID_HEART_RATE_MEASUREMENT, UUID_HEART_RATE_SERVICE)
            try:
                await conn.write(control_point, b"\x02")
            except att.ATT_Error as error:
                assert error_code_of(error) == HRS_CONTROL_POINT_NOT_SUPPORTED, f"0x02 gave {error}"
            else:
                raise AssertionError("writing 0x02 to the Heart Rate Control Point succeeded; expected error 0x80")

            await conn.subscribe(hrm)
            await conn.write(control_point, b"\x01")
            reset_at = time.monotonic()
            mark = len(conn.notifications)
            # HRS 3.1.1.3: Energy Expended is typically included once every 10 measurements.
            deadline = reset_at + 13.0
            while time.monotonic() < deadline:
                for n in conn.notifications[mark:]:
                    m = decode_heart_rate_measurement(n.value)
                    if m.energy_expended is not None:
                        # A person spends well under 2 kJ a second.
                        limit = 2 * (n.at - reset_at) + 2
                        assert m.energy_expended <= limit, (
                            f"Energy Expended {m.energy_expended} kJ {n.at - reset_at:.1f} s after a reset"
                        )
                        return
                mark = len(conn.notifications)
                await asyncio.sleep(0.1)
            raise AssertionError("no measurement with Energy Expended within 13 s of the reset")

    run(scenario())


# ---------------------------------------------------------------------------------------------
# Error responses (Vol 3, Part F, 3.4.1.1: request opcode, handle in error, error code)


def expect_error(response, opcode: int, handle: int, code: int) -> None:
    assert response.request_opcode_in_error == opcode, f"Error Response names opcode 0x{response.request_opcode_in_error:02x}, not 0x{opcode:02x}"
    assert response.attribute_handle_in_error == handle, f"Error Response names handle 0x{response.attribute_handle_in_error:04x}, not 0x{handle:04x}"
    assert response.error_code == code, f"error 0x{int(response.error_code):02x}, expected 0x{code:02x}"


def att_error_scenario(blemu, body, timeout: float = 30.0):
    async def scenario():
        async with connected(blemu) as conn:
            await body(conn)
            # The bearer still works after the error.
            char = await conn.discover_characteristic(UUID_BATTERY_SERVICE, UUID_BATTERY_LEVEL)
            assert len(await conn.read(char)) == 1

    run(scenario(), timeout)


def test_read_handle_zero_is_invalid_handle(blemu):
    async def body(conn):
        # Vol 3, Part F, 3.2.2: handle 0x0000 is reserved, never valid.
        response = await conn.request_expecting_error(att.ATT_Read_Request(attribute_handle=0x0000))
        expect_error(response, 0x0A, 0x0000, ATT_INVALID_HANDLE)

    att_error_scenario(blemu, body)


def test_read_past_the_last_handle_is_invalid_handle(blemu):
    async def body(conn):
        last = max(handle for handle, _ in await conn.find_information())
        assert last < 0xFFFF
        response = await conn.request_expecting_error(att.ATT_Read_Request(attribute_handle=last + 1))
        expect_error(response, 0x0A, last + 1, ATT_INVALID_HANDLE)

    att_error_scenario(blemu, body)


def test_read_by_type_with_start_after_end_is_invalid_handle(blemu):
    async def body(conn):
        # Vol 3, Part F, 3.4.4.1: Starting Handle > Ending Handle -> Invalid Handle, with the
        # Starting Handle as the handle in error.
        response = await conn.request_expecting_error(att.ATT_Read_By_Type_Request(
            starting_handle=0x0010, ending_handle=0x0005, attribute_type=UUID.from_16_bits(0x2803)))
        expect_error(response, 0x08, 0x0010, ATT_INVALID_HANDLE)

    att_error_scenario(blemu, body)


def test_find_information_from_handle_zero_is_invalid_handle(blemu):
    async def body(conn):
        # Vol 3, Part F, 3.4.3.1: Starting Handle 0x0000 -> Invalid Handle.
        response = await conn.request_expecting_error(att.ATT_Find_Information_Request(starting_handle=0x0000, ending_handle=0xFFFF))
        expect_error(response, 0x04, 0x0000, ATT_INVALID_HANDLE)

    att_error_scenario(blemu, body)


def test_write_to_read_only_characteristic_is_write_not_permitted(blemu):
    async def body(conn):
        location = await conn.discover_characteristic(UUID_HEART_RATE_SERVICE, UUID_BODY_SENSOR_LOCATION)
        # Vol 3, Part F, 3.4.5.1 / 4: a value without write permission -> Write Not Permitted.
        response = await conn.request_expecting_error(att.ATT_Write_Request(attribute_handle=location.handle, attribute_value=b"\x02"))
        expect_error(response, 0x12, location.handle, ATT_WRITE_NOT_PERMITTED)

    att_error_scenario(blemu, body)


def test_read_blob_past_the_end_is_invalid_offset(blemu):
    async def body(conn):
        char = await conn.discover_characteristic(UUID_DIAGNOSTICS_SERVICE, UUID_DIAGNOSTICS_CHARACTERISTIC)
        value = await conn.read(char)
        # Vol 3, Part F, 3.4.4.5: Value Offset greater than the value's length -> Invalid Offset.
        # 600 is past any value (at most 512 octets, 3.2.9), however the value changed since.
        offset = max(len(value) + 1, 600)
        response = await conn.request_expecting_error(att.ATT_Read_Blob_Request(attribute_handle=char.handle, value_offset=offset))
        expect_error(response, 0x0C, char.handle, ATT_INVALID_OFFSET)

    att_error_scenario(blemu, body)


def test_read_blob_at_the_end_of_a_long_read_is_empty(blemu):
    async def body(conn):
        char = await conn.discover_characteristic(UUID_DIAGNOSTICS_SERVICE, UUID_DIAGNOSTICS_CHARACTERISTIC)
        value = await conn.read(char)
        # Vol 3, Part F, 3.4.4.6: a Value Offset equal to the value's length gives an empty
        # Part Attribute Value. It continues the long read just done, so the length is the
        # length of the value that read returned.
        response = await conn.request(att.ATT_Read_Blob_Request(attribute_handle=char.handle, value_offset=len(value)))
        assert response.op_code == att.Opcode.ATT_READ_BLOB_RESPONSE, f"Read Blob at offset {len(value)} (the end): {response}"
        assert response.part_attribute_value == b"", f"Read Blob at the end returned {response.part_attribute_value!r}"

    att_error_scenario(blemu, body)


def test_unknown_request_opcodes_are_request_not_supported(blemu):
    async def body(conn):
        # Vol 3, Part F, 3.3 / 3.4.1.1: an unsupported request (command flag, bit 6, clear)
        # gets Request Not Supported with handle 0x0000. 0x3F and 0x22 are not defined in 5.4.
        for opcode in (0x3F, 0x22):
            response = await conn.request_expecting_error(raw_request(opcode, b"\x01\x00"))
            expect_error(response, opcode, 0x0000, ATT_REQUEST_NOT_SUPPORTED)

    att_error_scenario(blemu, body)


def test_errors_are_counted_in_diagnostics(blemu):
    async def scenario():
        async with connected(blemu) as conn:
            char = await conn.discover_characteristic(UUID_DIAGNOSTICS_SERVICE, UUID_DIAGNOSTICS_CHARACTERISTIC)
            before = await read_diagnostics(conn, char.handle)
            await conn.request_expecting_error(att.ATT_Read_Request(attribute_handle=0x0000))
            after = await read_diagnostics(conn, char.handle)
            assert after["att_errors"] > before["att_errors"], f"att_errors {before['att_errors']} -> {after['att_errors']}"
            assert after["last_error"], f"last_error is empty after an error: {after['last_error']!r}"

    run(scenario())


# ---------------------------------------------------------------------------------------------
# Several centrals, advertising restart


def test_two_centrals_at_once_and_advertising_restarts(blemu):
    async def scenario():
        async with Central(blemu.controller, name="central-a") as a, Central(blemu.controller, name="central-b") as b:
            conn_a = await a.connect(blemu.scan.address)
            # blemu keeps (or restarts) advertising while one central is connected.
            conn_b = await b.connect(blemu.scan.address)
            level_a, level_b = await asyncio.gather(
                conn_a.discover_characteristic(UUID_BATTERY_SERVICE, UUID_BATTERY_LEVEL),
                conn_b.discover_characteristic(UUID_BATTERY_SERVICE, UUID_BATTERY_LEVEL),
            )
            values = await asyncio.gather(conn_a.read(level_a), conn_b.read(level_b))
            assert all(len(v) == 1 and v[0] <= 100 for v in values), f"battery reads {values}"
            diagnostics = await conn_b.discover_characteristic(UUID_DIAGNOSTICS_SERVICE, UUID_DIAGNOSTICS_CHARACTERISTIC)
            both = await asyncio.gather(read_diagnostics(conn_a, diagnostics.handle), read_diagnostics(conn_b, diagnostics.handle))
            assert all(isinstance(d["reads"], int) for d in both)

            await conn_a.disconnect()
            await asyncio.sleep(0.2)
            assert conn_b.is_connected, "central B lost its connection when A disconnected"
            # Advertising again after a disconnection: a scanner sees blemu, A reconnects.
            seen = await a.scan_for(blemu.name, timeout=10.0, want_scan_response=False)
            assert seen.address == blemu.scan.address
            conn_a2 = await a.connect(blemu.scan.address)
            assert len(await conn_a2.read(level_a.handle)) == 1
            assert len(await conn_b.read(level_b)) == 1
            await conn_a2.disconnect()
            await conn_b.disconnect()

    run(scenario(), 60)
    assert blemu.exited() is None, blemu.exited()


# ---------------------------------------------------------------------------------------------
# Clean stop


def test_sigterm_disconnects_centrals_and_exits_zero(blemu_factory):
    process = blemu_factory.start(unique_name("ST"))

    async def scenario():
        async with Central(process.controller, name="stop-watcher") as central:
            conn = await central.connect(process.scan.address)
            char = await conn.discover_characteristic(UUID_BATTERY_SERVICE, UUID_BATTERY_LEVEL)
            assert len(await conn.read(char)) == 1
            loop = asyncio.get_running_loop()
            status = await loop.run_in_executor(None, process.stop)
            assert status == 0, f"blemu exited with status {status} on SIGTERM:\n{process.log_tail()}"
            # Vol 4, Part E, 7.1.6: on a clean stop the host ends each connection with
            # HCI_Disconnect, and the central sees the reason it gave: Remote User Terminated
            # Connection (0x13). rootcanal reports 0x15 (Remote Device Terminated due to Power
            # Off) when a host just closes its transport, so 0x15 here means no HCI_Disconnect.
            reason = await conn.wait_disconnected(5.0)
            assert reason == HCI_REMOTE_USER_TERMINATED_CONNECTION, (
                f"central saw disconnection reason 0x{reason:02x}, expected 0x13"
                + (" (0x15: blemu closed its transport without HCI_Disconnect)" if reason == 0x15 else "")
            )

    run(scenario(), 40)
