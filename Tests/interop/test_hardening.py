"""Defects found by new users and a hostile controller, checked from the outside by Bumble.

Each test starts its own blemu (heart-rate) on the module's rootcanal radio, so the log lines
it looks for belong to that test alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from bumble import hci

from bumble_central import Central, UUID_HEART_RATE_MEASUREMENT, UUID_HEART_RATE_SERVICE, UUID_DEVICE_NAME, UUID_GAP_SERVICE
from fake_controller import LE_SET_ADVERTISING_ENABLE, FakeController
from harness import BlemuProcess, run, unique_name

# Vol 1, Part F, 1.3: the controller reports a refused key as PIN or Key Missing (Vol 6,
# Part B, 5.1.3.1); rootcanal 1.10.0 reports Authentication Failure. Either is a refusal.
HCI_AUTHENTICATION_FAILURE = 0x05
HCI_PIN_OR_KEY_MISSING = 0x06


@contextlib.asynccontextmanager
async def connected(blemu: BlemuProcess, label: str):
    assert blemu.scan is not None
    async with Central(blemu.controller, name=label) as central:
        conn = await central.connect(blemu.scan.address)
        try:
            yield central, conn
        finally:
            if conn.is_connected:
                with contextlib.suppress(Exception):
                    await conn.disconnect()


def test_encryption_without_a_key_is_refused_at_once(blemu_factory):
    """Vol 4, Part E, 7.7.65.5 / 7.8.26: a central that holds a key for this address starts
    encryption; blemu has no bond, so it answers the LE Long Term Key Request with the
    negative reply and the central hears the refusal at once, instead of waiting for
    the LL procedure to time out (40 s). The link stays up and keeps serving GATT."""
    blemu = blemu_factory.start(unique_name("LTK"))

    async def scenario():
        async with connected(blemu, "ltk-central") as (central, conn):
            failure: asyncio.Future[int] = asyncio.get_running_loop().create_future()
            conn.connection.on(conn.connection.EVENT_CONNECTION_ENCRYPTION_FAILURE,
                               lambda error: failure.done() or failure.set_result(int(error)))
            started = time.monotonic()
            await central.device.send_command(hci.HCI_LE_Enable_Encryption_Command(
                connection_handle=conn.connection.handle, random_number=bytes(range(8)),
                encrypted_diversifier=0x1234, long_term_key=bytes(range(16))))
            error = await asyncio.wait_for(failure, 10.0)
            elapsed = time.monotonic() - started
            assert error in (HCI_PIN_OR_KEY_MISSING, HCI_AUTHENTICATION_FAILURE), (
                f"encryption failed with 0x{error:02x}, expected PIN or Key Missing (or rootcanal's Authentication Failure)")
            assert elapsed < 5.0, f"the refusal took {elapsed:.1f} s"
            await conn.discover_all()
            name = await conn.read(conn.characteristic(UUID_DEVICE_NAME, UUID_GAP_SERVICE))
            assert name.decode() == blemu.name

    run(scenario())
    # Docs/REFERENCE.md, Events: the refusal is the `key-missing` event, with the peer.
    missing = blemu.events("key-missing")
    assert missing and "no bond" in missing[0].message and missing[0].fields.get("peer"), blemu.log_tail()


def test_a_closing_link_ends_its_subscriptions(blemu_factory):
    """A central that subscribed and then disconnected is reported unsubscribed (event
    `unsubscribed`), so the device stops its timers when nobody listens."""
    blemu = blemu_factory.start(unique_name("SUB"))

    async def scenario():
        async with connected(blemu, "sub-central") as (_, conn):
            await conn.discover_all()
            measurement = conn.characteristic(UUID_HEART_RATE_MEASUREMENT, UUID_HEART_RATE_SERVICE)
            await conn.subscribe(measurement)
            assert blemu.events("subscribed"), "the CCCD write was answered, so blemu logged it"
            await conn.disconnect()

    run(scenario())
    ended = blemu.wait_for_event("unsubscribed", timeout=10.0)
    assert any("link closed" in entry.message for entry in ended), [entry.line for entry in ended]


def test_reconnection_backs_off_from_a_controller_that_drops_at_once():
    """A controller that accepts the connection and closes it at once is retried ever more
    slowly (250 ms, 500 ms, 1 s, 2 s, ...), not four times a second forever."""
    with FakeController(drop_at_once=True) as controller:
        blemu = BlemuProcess(controller.spec, unique_name("DROP"))
        blemu.start()
        try:
            time.sleep(4.0)
            accepts = list(controller.accept_times)
        finally:
            status = blemu.stop()
    assert status == 0, f"blemu exited {status} on SIGTERM while its controller was down:\n{blemu.log_tail()}"
    assert 3 <= len(accepts) <= 7, f"{len(accepts)} connections in 4 s (a fixed 250 ms retry makes 16)"
    gaps = [b - a for a, b in zip(accepts, accepts[1:])]
    assert all(later >= earlier * 1.5 for earlier, later in zip(gaps, gaps[1:])), f"gaps do not grow: {gaps}"


def test_sigterm_ends_within_3_s_when_the_controller_stops_taking_commands():
    """Num_HCI_Command_Packets = 0 and then silence: the stop skips what no longer matters and
    ends within its 3 s deadline, with status 0."""
    with FakeController(starve_after=LE_SET_ADVERTISING_ENABLE) as controller:
        blemu = BlemuProcess(controller.spec, unique_name("STARVE"))
        blemu.start()
        blemu.wait_for_event("advertising-started", timeout=15.0)
        assert controller.starving
        started = time.monotonic()
        status = blemu.stop(timeout=15.0)
        elapsed = time.monotonic() - started
    assert status == 0, f"exit status {status}:\n{blemu.log_tail()}"
    assert elapsed < 4.5, f"the stop took {elapsed:.1f} s (deadline 3 s)"


def test_a_fifo_at_the_bond_and_passkey_files_does_not_hold_the_start(blemu_factory, tmp_path):
    """FIFOs planted in --state-dir at the lock's bond file and passkey file. blemu used to
    block in open() (O_NOFOLLOW but no O_NONBLOCK) and never advertised or logged; now each is
    refused at once with a log line naming it, and the lock advertises."""
    import os
    import stat

    state_dir = tmp_path / "state"
    state_dir.mkdir()
    name = unique_name("Fifo")
    bonds = state_dir / f"bonds-lock-{name}.json"
    passkey = state_dir / f"passkey-lock-{name}.txt"
    os.mkfifo(bonds, 0o600)
    os.mkfifo(passkey, 0o600)
    blemu = blemu_factory.start(name, device="lock", extra_args=["--state-dir", str(state_dir)])
    log = blemu.log_tail(400)
    assert f"bond store {bonds} cannot be read (a FIFO, not a regular file)" in log, log
    assert f"{passkey}: a FIFO, not a regular file" in log, log
    # Left where they are, not read, not replaced (no bond was written).
    assert stat.S_ISFIFO(os.lstat(bonds).st_mode) and stat.S_ISFIFO(os.lstat(passkey).st_mode)
    assert blemu.stop() == 0, blemu.log_tail()
