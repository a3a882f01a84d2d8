"""blemu outlives its controller: rootcanal dies, blemu keeps running and reconnects.

ControllerLink (Sources/Transport/ControllerLink.swift) retries a lost controller with
exponential backoff and never exits on its own; the peripheral logs `controller-lost`,
drops every link, and starts over (`controller-up`, advertising) when the controller is
back. Here the controller is a rootcanal killed with SIGKILL (its whole process group, as
a crash would) and started again on the same HCI port: a new radio, so every central that
wants blemu must find it again by scanning.

Journal fields are checked in the stderr log lines (`event=...`, `controller=...`), which
carry the same keys as the journal's BLEMU_* fields (Docs/REFERENCE.md, Logs).
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from bumble_central import (
    ATT_MAX_VALUE_LENGTH,
    UUID_DIAGNOSTICS_CHARACTERISTIC,
    UUID_DIAGNOSTICS_SERVICE,
    Central,
    CentralConnection,
)
from harness import BlemuFactory, BlemuProcess, RestartableRootCanal, run, unique_name

# Docs/REFERENCE.md, The Diagnostics value.
DIAGNOSTICS_KEYS = {"device", "firmware", "uptime_ms", "connections", "att_requests", "att_errors", "last_error", "reads"}
# The brief: after the controller is back, a new central finds blemu within this.
RECOVERY_DEADLINE_S = 15.0


@pytest.fixture
def recovery_factory(restartable_rootcanal):
    factory = BlemuFactory(restartable_rootcanal)
    yield factory
    factory.cleanup()


async def read_diagnostics(conn: CentralConnection) -> dict:
    characteristic = await conn.discover_characteristic(UUID_DIAGNOSTICS_SERVICE, UUID_DIAGNOSTICS_CHARACTERISTIC)
    value = await conn.read(characteristic)
    assert 100 < len(value) <= ATT_MAX_VALUE_LENGTH, f"Diagnostics value is {len(value)} octets: {value!r}"
    decoded = json.loads(value.decode("utf-8"))
    assert isinstance(decoded, dict), f"Diagnostics is not a JSON object: {decoded!r}"
    missing = DIAGNOSTICS_KEYS - decoded.keys()
    assert not missing, f"Diagnostics lacks {sorted(missing)}: {decoded}"
    return decoded


async def wait_for_event(process: BlemuProcess, event: str, count: int = 1, timeout: float = 10.0):
    """BlemuProcess.wait_for_event without blocking the Bumble central's event loop."""
    return await asyncio.to_thread(process.wait_for_event, event, count, timeout)


def crash_and_check_blemu_survives(rootcanal: RestartableRootCanal, blemu: BlemuProcess, outage: float) -> None:
    """SIGKILL rootcanal; blemu logs controller-lost for this controller and stays up `outage` s."""
    lost_before = len(blemu.events("controller-lost"))
    killed_at = time.monotonic()
    rootcanal.crash()
    lost = blemu.wait_for_event("controller-lost", count=lost_before + 1, timeout=5.0)[-1]
    assert lost.fields.get("controller") == rootcanal.controller_spec, f"controller-lost entry lacks controller=: {lost.line}"
    assert lost.fields.get("device") == "heart-rate", f"controller-lost entry lacks device=: {lost.line}"
    # Down long enough for several reconnection attempts to fail (250 ms backoff, doubling):
    # none of them may end the process.
    while time.monotonic() - killed_at < outage:
        assert blemu.exited() is None, f"blemu exited while its controller was down: {blemu.exited()}"
        time.sleep(0.1)
    assert blemu.exited() is None, f"blemu exited while its controller was down: {blemu.exited()}"


def restart_and_wait_advertising(rootcanal: RestartableRootCanal, blemu: BlemuProcess, ups_before: int):
    """Restart rootcanal on the same port; blemu reconnects and a new scanner sees it in time."""
    restarted_at = time.monotonic()
    rootcanal.restart()
    blemu.wait_for_event("controller-up", count=ups_before + 1, timeout=RECOVERY_DEADLINE_S)
    remaining = RECOVERY_DEADLINE_S - (time.monotonic() - restarted_at)
    assert remaining > 0, f"blemu took more than {RECOVERY_DEADLINE_S:.0f} s to reconnect"
    scan = blemu.wait_advertising(rootcanal, timeout=remaining)
    return scan, time.monotonic() - restarted_at



async def diagnostics_from_new_central(rootcanal, address, central_name: str) -> dict:
    """Connects a fresh Bumble central to `address` and reads the Diagnostics JSON."""
    async with Central(rootcanal.controller_spec, name=central_name) as central:
        conn = await central.connect(address)
        try:
            return await read_diagnostics(conn)
        finally:
            if conn.is_connected:
                await conn.disconnect()

def test_blemu_survives_a_rootcanal_crash_and_advertises_again(restartable_rootcanal, recovery_factory):
    rootcanal = restartable_rootcanal
    blemu = recovery_factory.start(unique_name("RC"))  # returns once a scanner saw it
    first_address = blemu.scan.address
    ups = len(blemu.wait_for_event("controller-up"))
    advertising_starts = len(blemu.events("advertising-started"))

    crash_and_check_blemu_survives(rootcanal, blemu, outage=1.5)
    scan, took = restart_and_wait_advertising(rootcanal, blemu, ups)

    # The same device: same name (the scan matched it) and the same static address.
    assert scan.address == first_address, f"address changed across the controller restart: {first_address} -> {scan.address}"
    assert len(blemu.events("advertising-started")) > advertising_starts, "no new event=advertising-started after recovery"

    diagnostics = run(diagnostics_from_new_central(rootcanal, scan.address, "after-recovery"), 30)
    assert diagnostics["device"] == "heart-rate", diagnostics
    assert blemu.stop() == 0, f"blemu did not stop cleanly after recovering (seen again {took:.1f} s after the restart):\n{blemu.log_tail()}"


def test_links_are_dropped_with_the_controller_and_recovery_serves_new_centrals(restartable_rootcanal, recovery_factory):
    """A central is connected when rootcanal dies: blemu reports that link disconnected, and
    after recovery Diagnostics counts only the new central's link."""
    rootcanal = restartable_rootcanal
    blemu = recovery_factory.start(unique_name("RL"))
    ups = len(blemu.wait_for_event("controller-up"))

    async def connect_then_crash() -> str:
        async with Central(rootcanal.controller_spec, name="before-crash") as central:
            conn = await central.connect(blemu.scan.address)
            connected = await wait_for_event(blemu, "connected")
            handle = connected[-1].fields.get("conn_handle")
            assert handle is not None, f"event=connected without conn_handle=: {connected[-1].line}"
            assert conn.is_connected
            # Crash the radio under the live link (the central's controller goes with it).
            await asyncio.to_thread(crash_and_check_blemu_survives, rootcanal, blemu, 0.5)
            return handle

    old_handle = run(connect_then_crash(), 30)
    dropped = [e for e in blemu.events("disconnected") if e.fields.get("conn_handle") == old_handle]
    assert dropped, (f"no event=disconnected for conn_handle={old_handle} after the controller was lost:\n"
                     f"{blemu.log_tail()}")

    scan, _ = restart_and_wait_advertising(rootcanal, blemu, ups)

    diagnostics = run(diagnostics_from_new_central(rootcanal, scan.address, "after-crash"), 30)
    assert diagnostics["connections"] == 1, (
        f"after the controller was lost and came back, Diagnostics counts {diagnostics['connections']} "
        f"connections (only the new central is connected): {diagnostics}")
    assert blemu.stop() == 0, f"blemu did not stop cleanly:\n{blemu.log_tail()}"
