"""Record a device, replay it faithfully (`blemu gatt ... record`, `blemu run FILE.json`).

A phone caches a peripheral's GATT database by its address and reads by the cached handles
without discovering again; the twin must keep the original's handles, its address (a static
random one), its advertising and scan response, and its notifications in order.
"""

from __future__ import annotations

import asyncio
import json
import time

from bumble.hci import Address

from bumble_central import Central
from harness import BlemuProcess, run, run_cli, start_advertising, unique_name

HEART_RATE_MEASUREMENT = "2A37"
BODY_SENSOR_LOCATION = "2A38"
DEVICE_NAME = "2A00"


def value_handle(table: list[tuple[int, str]], uuid: str) -> int:
    return next(handle for handle, kind in table if kind == uuid)


def cccd_after(table: list[tuple[int, str]], handle: int) -> int:
    return next(h for h, kind in table if h > handle and kind == "2902")


async def cache_database(controller: str, address: Address) -> tuple[list[tuple[int, str]], dict[str, bytes]]:
    """What a phone caches: every handle and its type, and the values it read."""
    async with Central(controller, name="app-first-visit") as central:
        conn = await central.connect(address)
        table = [(handle, uuid.to_hex_str()) for handle, uuid in await conn.find_information()]
        values = {uuid: await conn.read(value_handle(table, uuid)) for uuid in (BODY_SENSOR_LOCATION, DEVICE_NAME)}
        await conn.disconnect()
        return table, values


async def visit_twin_by_cached_handles(controller: str, address: Address, table: list[tuple[int, str]], count: int):
    """Connects to the twin and, without discovering anything, reads and subscribes by the
    cached handles; returns the values read, the notifications and the twin's own table."""
    async with Central(controller, name="app-second-visit") as central:
        conn = await central.connect(address)
        values = {uuid: await conn.read(value_handle(table, uuid)) for uuid in (BODY_SENSOR_LOCATION, DEVICE_NAME)}
        measurement = value_handle(table, HEART_RATE_MEASUREMENT)
        await conn.write(cccd_after(table, measurement), b"\x01\x00")
        deadline = time.monotonic() + 20
        while len([n for n in conn.notifications if n.handle == measurement]) < count and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        notified = [n for n in conn.notifications if n.handle == measurement]
        twin_table = [(handle, uuid.to_hex_str()) for handle, uuid in await conn.find_information()]
        await conn.disconnect()
        return values, notified, twin_table


def test_a_recorded_heart_rate_is_replayed_at_its_handles_to_a_central_that_cached_them(rootcanal, tmp_path):
    name = unique_name("RR")
    original = start_advertising(BlemuProcess(rootcanal.controller_spec, name), rootcanal)
    try:
        address = original.scan.address
        table, values = run(cache_database(rootcanal.controller_spec, address))
        recorded = run_cli(["gatt", "--controller", rootcanal.controller_spec, "--name", name, "record", "--duration", "4"],
                           timeout=60)
        assert recorded.returncode == 0, recorded.describe()
        advertising = original.scan
    finally:
        assert original.stop() == 0, original.log_tail()
    recording = json.loads(recorded.stdout)
    assert recording["addressType"] == "random" and recording["address"] == str(address).split("/")[0], recording["address"]
    assert recording["advertisingData"], recording
    measurement = value_handle(table, HEART_RATE_MEASUREMENT)
    events = [e for e in recording["recording"]["events"] if e["handle"] == measurement]
    # The heart rate notifies once a second: about four in four seconds.
    assert len(events) >= 3, recording["recording"]
    # The summary on stderr: what the file holds, and that blemu's Diagnostics values are frozen.
    total = len(recording["recording"]["events"])
    services = len(recording["services"])
    characteristics = sum(len(s["characteristics"]) for s in recording["services"])
    assert f"record: {services} services, {characteristics} characteristics, {total} notifications and indications caught in 4 s" \
        in recorded.stderr, recorded.stderr
    assert "the Diagnostics service" in recorded.stderr and "frozen" in recorded.stderr, recorded.stderr
    path = tmp_path / "twin.json"
    path.write_text(recorded.stdout)

    # No --name, no --address: the twin advertises what was recorded, from the recorded address.
    twin = BlemuProcess(rootcanal.controller_spec, None, device=str(path)).start()
    try:
        twin.wait_advertising(rootcanal, name=name)
        assert twin.scan.address == address, (twin.scan.address, address)
        assert twin.scan.adv_data == advertising.adv_data, (twin.scan, advertising)
        assert twin.scan.scan_response == advertising.scan_response, (twin.scan, advertising)
        read, notified, twin_table = run(visit_twin_by_cached_handles(rootcanal.controller_spec, address, table, len(events)),
                                         timeout=60)
        assert twin_table == table, (twin_table, table)
        assert read == values, (read, values)
        # The recorded values, in their order, from the start of the timeline.
        assert [n.value.hex() for n in notified[:len(events)]] == [e["value"] for e in events], (notified, events)
        # On the recorded timeline: the gaps between them as recorded, give or take the radio's.
        for previous, this, (a, b) in zip(notified, notified[1:], zip(events, events[1:])):
            assert abs((this.at - previous.at) - (b["at"] - a["at"])) < 0.5, (notified, events)
    finally:
        assert twin.stop() == 0, twin.log_tail()
