"""Several devices on ONE controller, as on a board with one radio: `blemu run A B C
--controller SPEC --share-controller` puts them on one rootcanal connection, each in its own LE
extended advertising set (Vol 4, Part E, 7.8.53 – 7.8.56). Bumble centrals check that each
advertises its own address and name, that each connection reaches its own device, and that two
centrals on two devices work at once.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import struct
import tempfile
from pathlib import Path

from bumble.core import UUID

from bumble_central import AD_COMPLETE_16BIT_UUIDS, Central, UUID_DEVICE_NAME, UUID_GAP_SERVICE, UUID_HEART_RATE_MEASUREMENT, UUID_HEART_RATE_SERVICE
from fake_controller import FakeController
from harness import find_each, run, run_cli, unique_name


def names_of(base: str) -> list[str]:
    """The local names `blemu run heart-rate heart-rate heart-rate --name BASE` gives its copies."""
    return [f"{base} heart-rate", f"{base} heart-rate 2", f"{base} heart-rate 3"]


def test_three_devices_on_one_controller_each_reached_on_its_own(rootcanal, blemu_factory):
    base = unique_name("S")
    blemu = blemu_factory.start(None, wait_advertising=False, devices=["heart-rate"] * 3,
                                extra_args=["--share-controller", "--name", base])
    names = names_of(base)

    async def scenario():
        async with Central(rootcanal.controller_spec, name="shared-scanner") as scanner:
            seen = await find_each(scanner, blemu, names)
        addresses = {str(result.address) for result in seen}
        assert len(addresses) == 3, f"three devices, three addresses: {addresses}"
        assert all(result.connectable for result in seen), "every set is connectable"

        # Two centrals on two devices at once, each reading its own device's name and one of
        # them receiving its own device's measurements.
        async with Central(rootcanal.controller_spec, name="central-a") as a, \
                   Central(rootcanal.controller_spec, name="central-b") as b:
            conn_a = await a.connect(seen[0].address)
            conn_b = await b.connect(seen[2].address)
            await asyncio.gather(conn_a.discover_all(), conn_b.discover_all())
            name_a = await conn_a.read(conn_a.characteristic(UUID_DEVICE_NAME, UUID_GAP_SERVICE))
            name_b = await conn_b.read(conn_b.characteristic(UUID_DEVICE_NAME, UUID_GAP_SERVICE))
            assert name_a.decode() == names[0]
            assert name_b.decode() == names[2]
            await conn_a.subscribe(conn_a.characteristic(UUID_HEART_RATE_MEASUREMENT, UUID_HEART_RATE_SERVICE))
            await asyncio.sleep(3.5)
            assert len(conn_a.notifications) >= 2, "device A's central gets its measurements"
            assert not conn_b.notifications, "device C's central never gets A's notifications"

            # The middle device still advertises while the others are connected, and a third
            # central reaches it.
            async with Central(rootcanal.controller_spec, name="central-c") as c:
                middle = str(seen[1].address)
                again = await c.scan_until(lambda result: str(result.address) == middle, f"advertising from {middle}",
                                           timeout=15.0, want_scan_response=False, alive=blemu.exited)
                conn_c = await c.connect(again.address)
                await conn_c.discover_all()
                name_c = await conn_c.read(conn_c.characteristic(UUID_DEVICE_NAME, UUID_GAP_SERVICE))
                assert name_c.decode() == names[1]
                await conn_c.disconnect()
            await conn_a.disconnect()
            await conn_b.disconnect()

    run(scenario(), timeout=90)
    assert blemu.exited() is None, f"blemu exited: {blemu.log_tail()}"
    assert blemu.stop() == 0, blemu.log_tail()


def test_a_legacy_only_controller_with_two_devices_is_refused_with_a_reason():
    with FakeController() as controller:
        result = run_cli(["run", "heart-rate", "heart-rate", "--controller", controller.spec, "--share-controller",
                          "--log-level", "error"], timeout=20.0)
    assert result.returncode != 0, result.describe()
    reason = "\n".join(result.reason_lines)
    assert "no LE Extended Advertising" in reason and "--controller" in reason, result.describe()


UUID_THERMOSTAT_SERVICE = UUID("7d3c0100-9a5e-4d1a-8f6e-5c1b2d3e4f50")
UUID_LOCK_SERVICE = UUID("7d3c0200-9a5e-4d1a-8f6e-5c1b2d3e4f50")


def test_heart_rate_thermostat_and_lock_on_one_controller(rootcanal, blemu_factory):
    """The board with one radio: three different devices, each discovered with its own
    services and none of the others'."""
    base = unique_name("M")
    blemu = blemu_factory.start(None, wait_advertising=False, devices=["heart-rate", "thermostat", "lock"],
                                extra_args=["--share-controller", "--name", base])
    expected = {
        f"{base} heart-rate": UUID_HEART_RATE_SERVICE,
        f"{base} thermostat": UUID_THERMOSTAT_SERVICE,
        f"{base} lock": UUID_LOCK_SERVICE,
    }

    async def scenario():
        async with Central(rootcanal.controller_spec, name="multi-scanner") as scanner:
            seen = dict(zip(expected, await find_each(scanner, blemu, list(expected))))
        assert len({str(result.address) for result in seen.values()}) == 3
        for name, own in expected.items():
            async with Central(rootcanal.controller_spec, name="multi-central") as central:
                conn = await central.connect(seen[name].address)
                await conn.discover_all()
                device_name = await conn.read(conn.characteristic(UUID_DEVICE_NAME, UUID_GAP_SERVICE))
                assert device_name.decode() == name, (device_name, name)
                services = {service.uuid for service in conn.services()}
                assert own in services, f"{name}: {services}"
                others = set(expected.values()) - {own}
                assert not services & others, f"{name} serves another device's service: {services & others}"
                await conn.disconnect()

    run(scenario(), timeout=90)
    assert blemu.stop() == 0, blemu.log_tail()


def test_a_service_taken_out_leaves_only_its_own_sets_advertising_data(rootcanal, blemu_factory):
    """Two heart-rate devices, each in an extended set of legacy PDUs: `service heart-rate#2
    180D off` replaces that set's advertising data while it stays enabled (Operation 0x03,
    Vol 4, Part E, 7.8.54), so a new scan shows the second device without 0x180D and the first
    as before; `on` lists it again."""
    base = unique_name("V")
    folder = tempfile.mkdtemp(prefix="blemu-adv-", dir="/tmp")
    path = str(Path(folder) / "control.sock")
    blemu = blemu_factory.start(None, wait_advertising=False, devices=["heart-rate", "heart-rate"],
                                extra_args=["--share-controller", "--name", base, "--control", path])
    names = names_of(base)[:2]

    def ctl(*args: str) -> dict:
        result = run_cli(["ctl", path, *args])
        assert result.returncode == 0, result.describe()
        return json.loads(result.stdout.splitlines()[0])

    def listing(address: str, uuids: list[int]):
        wanted = [(AD_COMPLETE_16BIT_UUIDS, b"".join(struct.pack("<H", u) for u in uuids))]
        return lambda result: (str(result.address) == address
                               and [(t, d) for t, d in result.adv_structures if t in (0x02, 0x03)] == wanted)

    async def scenario():
        async with Central(rootcanal.controller_spec, name="shared-svc-scanner") as scanner:
            seen = await find_each(scanner, blemu, names)
            first, second = (str(result.address) for result in seen)
            assert all({0x180D, 0x180F} <= result.service_uuids_16() for result in seen), seen

            reply = await asyncio.to_thread(ctl, "service", "heart-rate#2", "180D", "off")
            assert reply["ok"] and reply["changed"] and reply["advertising_changed"], reply
            await scanner.scan_until(listing(second, [0x180F]), "the second device without 0x180D",
                                     timeout=30.0, want_scan_response=False, alive=blemu.exited)
            await scanner.scan_until(listing(first, [0x180D, 0x180F]), "the first device as before",
                                     timeout=15.0, want_scan_response=False, alive=blemu.exited)

            reply = await asyncio.to_thread(ctl, "service", "heart-rate#2", "180D", "on")
            assert reply["ok"] and reply["advertising_changed"], reply
            await scanner.scan_until(listing(second, [0x180D, 0x180F]), "the second device with 0x180D again",
                                     timeout=30.0, want_scan_response=False, alive=blemu.exited)

    try:
        run(scenario(), timeout=120)
        assert blemu.stop() == 0, blemu.log_tail()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
