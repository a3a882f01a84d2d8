"""blemu's lock, checked from the outside by Bumble as an independent central.

One `blemu run lock` serves most tests; the lockout test starts its own, so its 60 s lockout
touches nobody else. The PIN is the one the lock made up and logged at start (no --pin given),
and so is the passkey every central pairs with first (no --passkey given): the control point
and the event log need a link paired with it (Docs/SECURITY.md).
Spec references: Core 5.4 (Vol/Part/section), Core Specification Supplement (Supplement) Part
B for the common profile error codes, Docs/REFERENCE.md for blemu's Lock service.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import struct

import pytest
from bumble import att
from bumble.core import UUID

from bumble_central import (
    ATT_DEFAULT_MTU,
    collect_indications,
    collect_notifications,
    error_code_of,
)
from harness import BlemuProcess, expect_write_error, passkey_of, run, run_cli, start_advertising, unique_name
from harness import connected as central_on

UUID_LOCK_SERVICE = UUID("7d3c0200-9a5e-4d1a-8f6e-5c1b2d3e4f50")
UUID_LOCK_STATE = UUID("7d3c0201-9a5e-4d1a-8f6e-5c1b2d3e4f50")
UUID_CONTROL_POINT = UUID("7d3c0202-9a5e-4d1a-8f6e-5c1b2d3e4f50")
UUID_EVENT_LOG = UUID("7d3c0203-9a5e-4d1a-8f6e-5c1b2d3e4f50")
UUID_RELOCK_DELAY = UUID("7d3c0204-9a5e-4d1a-8f6e-5c1b2d3e4f50")

UNLOCKED, LOCKED = 0, 1
OP_LOCK, OP_UNLOCK = 0x01, 0x02
RESPONSE = 0x80
SUCCESS, WRONG_PIN, LOCKED_OUT, UNKNOWN_OPCODE = 0x01, 0x02, 0x04, 0x05
ATT_INVALID_ATTRIBUTE_VALUE_LENGTH = 0x0D
# Supplement, Part B, 1.2: common profile and service error codes.
ATT_CCCD_IMPROPERLY_CONFIGURED = 0xFD
ATT_PROCEDURE_ALREADY_IN_PROGRESS = 0xFE


def start_lock(rootcanal_or_factory, label: str) -> BlemuProcess:
    return start_advertising(BlemuProcess(rootcanal_or_factory.controller_spec, unique_name(label), device="lock"),
                             rootcanal_or_factory)


def pin_of(process: BlemuProcess) -> str:
    """The PIN the lock made up at start: logged once, as a notice (Docs/REFERENCE.md)."""
    entries = process.wait_for_event("state-changed", timeout=10.0)
    pins = [m.group(1) for e in entries if (m := re.search(r"PIN is (\d{4,8})\b", e.message))]
    assert len(pins) == 1, f"expected the generated PIN logged once; state-changed lines: {[e.line for e in entries]}"
    return pins[0]


@pytest.fixture(scope="module")
def lock(rootcanal):
    process = start_lock(rootcanal, "LK")
    yield process
    if process.exited() is not None:
        pytest.fail(f"blemu died during the tests: {process.exited()}", pytrace=False)
    assert process.stop() == 0, f"blemu did not stop cleanly:\n{process.log_tail()}"


@contextlib.asynccontextmanager
async def connected(blemu: BlemuProcess, label: str = "lock-central", indications: bool = True):
    """A central paired with the lock's generated passkey (Passkey Entry), with Lock State
    notifications and (by default) the control point's indications on."""
    async with central_on(blemu, label, discover=True, pair=passkey_of(blemu)) as conn:
        if indications:
            await conn.subscribe(conn.characteristic(UUID_CONTROL_POINT, UUID_LOCK_SERVICE))
            await conn.subscribe(conn.characteristic(UUID_LOCK_STATE, UUID_LOCK_SERVICE))
        yield conn


async def operate(conn, opcode: int, pin: str, timeout: float = 5.0) -> bytes:
    """Writes a command; returns the indication that answers it ([0x80, opcode, result])."""
    control_point = conn.characteristic(UUID_CONTROL_POINT, UUID_LOCK_SERVICE)
    mark = len(conn.indications)
    await conn.write(control_point, bytes([opcode]) + pin.encode())
    got = await collect_indications(conn, control_point.handle, 1, timeout, mark)
    return got[0].value


def test_the_pin_is_made_up_and_logged_once(lock):
    pin = pin_of(lock)
    assert 4 <= len(pin) <= 8


def test_the_pin_and_the_passkey_are_labelled_apart(lock):
    """Both are six digits, logged at start: each line says what its number is for."""
    passkey_of(lock)
    messages = [e.message for e in lock.events("state-changed")]
    pin_line = [m for m in messages if "PIN is" in m]
    passkey_line = [m for m in messages if "pair with the passkey" in m]
    assert len(pin_line) == 1 and "not for pairing" in pin_line[0], messages
    assert len(passkey_line) == 1 and "the pairing passkey" in passkey_line[0] and "not the PIN" in passkey_line[0], messages


ATT_INSUFFICIENT_AUTHENTICATION = 0x05


def test_without_pairing_the_control_point_and_the_event_log_refuse(lock):
    """No --passkey: the lock still needs an authenticated link, with the passkey it generated
    and logged (the label on the box): an unpaired central gets 0x05 for both."""

    async def scenario():
        async with central_on(lock, "unpaired-lock-central", discover=True) as conn:
            control_point = conn.characteristic(UUID_CONTROL_POINT, UUID_LOCK_SERVICE)
            await conn.subscribe(control_point)
            await expect_write_error(conn, control_point, bytes([OP_UNLOCK]) + pin_of(lock).encode(),
                                     ATT_INSUFFICIENT_AUTHENTICATION)
            try:
                await conn.read(conn.characteristic(UUID_EVENT_LOG, UUID_LOCK_SERVICE))
            except att.ATT_Error as error:
                assert error_code_of(error) == ATT_INSUFFICIENT_AUTHENTICATION, error
            else:
                raise AssertionError("an unpaired central read the lock's event log")
            state = await conn.read(conn.characteristic(UUID_LOCK_STATE, UUID_LOCK_SERVICE))
            assert state == bytes([LOCKED]), f"the refused command moved the bolt: Lock State {state.hex()}"

    run(scenario())


def test_the_generated_passkey_is_kept_across_restarts(rootcanal, tmp_path):
    """The passkey made on the first start is the label: kept in --state-dir, the same after a restart."""
    name = unique_name("PK")
    first = start_advertising(BlemuProcess(rootcanal.controller_spec, name, device="lock",
                                           extra_args=["--state-dir", str(tmp_path)]), rootcanal)
    passkey = passkey_of(first)
    assert first.stop() == 0, first.log_tail()
    files = [p.name for p in tmp_path.iterdir() if p.name.startswith("passkey-")]
    assert files == [f"passkey-lock-{name}.txt"], files
    assert (tmp_path / files[0]).read_text().strip() == f"{passkey:06d}"
    assert oct((tmp_path / files[0]).stat().st_mode & 0o777) == oct(0o600)
    second = start_advertising(BlemuProcess(rootcanal.controller_spec, name, device="lock",
                                            extra_args=["--state-dir", str(tmp_path)]), rootcanal)
    try:
        assert passkey_of(second) == passkey
    finally:
        assert second.stop() == 0, second.log_tail()


def test_ctl_list_shows_the_made_up_passkey_and_never_one_given(rootcanal, tmp_path):
    """Where to look up the passkey after a refused pairing: `list` gives the lock's made-up
    passkey (as its log does); a --passkey given is shown nowhere (null)."""
    control = str(tmp_path / "ctl.sock")
    # The devices' own names (two devices): ready once both advertise.
    made_up = BlemuProcess(rootcanal.controller_spec, None, devices=["lock", "heart-rate"],
                           extra_args=["--control", control]).start()
    try:
        made_up.wait_for_event("advertising-started", count=2, timeout=20)
        listed = json.loads(run_cli(["ctl", control, "list"]).stdout)["devices"]
        assert [d["passkey"] for d in listed] == [f"{passkey_of(made_up):06d}", None], listed
    finally:
        assert made_up.stop() == 0, made_up.log_tail()
    given = start_advertising(BlemuProcess(rootcanal.controller_spec, unique_name("LG"), device="lock",
                                           extra_args=["--control", control, "--passkey", "135790"]), rootcanal)
    try:
        listed = json.loads(run_cli(["ctl", control, "list"]).stdout)["devices"]
        assert listed[0]["passkey"] is None and "135790" not in json.dumps(listed), listed
    finally:
        assert given.stop() == 0, given.log_tail()


def test_a_writer_without_indications_gets_fd(lock):
    async def scenario():
        async with connected(lock, indications=False) as conn:
            control_point = conn.characteristic(UUID_CONTROL_POINT, UUID_LOCK_SERVICE)
            await expect_write_error(conn, control_point, bytes([OP_UNLOCK]) + pin_of(lock).encode(),
                                     ATT_CCCD_IMPROPERLY_CONFIGURED)
            state = await conn.read(conn.characteristic(UUID_LOCK_STATE, UUID_LOCK_SERVICE))
            assert state == bytes([LOCKED]), f"the refused command moved the bolt: Lock State {state.hex()}"

    run(scenario())


def test_unlock_and_lock_with_the_pin(lock):
    """The Write Response comes at once; the result is indicated when the motor is done, and
    Lock State notifies the new state."""

    async def scenario():
        async with connected(lock) as conn:
            pin = pin_of(lock)
            state_char = conn.characteristic(UUID_LOCK_STATE, UUID_LOCK_SERVICE)
            control_point = conn.characteristic(UUID_CONTROL_POINT, UUID_LOCK_SERVICE)
            assert await conn.read(state_char) == bytes([LOCKED]), "the lock starts locked"
            mark = len(conn.notifications)
            await conn.write(control_point, bytes([OP_UNLOCK]) + pin.encode())
            # One operation at a time: a second command while the motor runs is refused.
            await expect_write_error(conn, control_point, bytes([OP_LOCK]) + pin.encode(), ATT_PROCEDURE_ALREADY_IN_PROGRESS)
            result = await collect_indications(conn, control_point.handle, 1, 5.0)
            assert result[-1].value == bytes([RESPONSE, OP_UNLOCK, SUCCESS]), f"indication {result[-1].value.hex()}"
            states = await collect_notifications(conn, state_char.handle, 1, 3.0, mark)
            assert states[0].value == bytes([UNLOCKED])
            assert await conn.read(state_char) == bytes([UNLOCKED])
            assert await operate(conn, OP_LOCK, pin) == bytes([RESPONSE, OP_LOCK, SUCCESS])
            assert await conn.read(state_char) == bytes([LOCKED])

    run(scenario())


def test_wrong_pin_and_unknown_opcode(lock):
    async def scenario():
        async with connected(lock) as conn:
            pin = pin_of(lock)
            wrong = "0000" if pin != "0000" else "1111"
            assert await operate(conn, OP_UNLOCK, wrong) == bytes([RESPONSE, OP_UNLOCK, WRONG_PIN])
            assert await operate(conn, 0x07, pin) == bytes([RESPONSE, 0x07, UNKNOWN_OPCODE])
            control_point = conn.characteristic(UUID_CONTROL_POINT, UUID_LOCK_SERVICE)
            await expect_write_error(conn, control_point, b"", ATT_INVALID_ATTRIBUTE_VALUE_LENGTH)
            # A right PIN after a wrong one works (and resets the count).
            assert await operate(conn, OP_LOCK, pin) == bytes([RESPONSE, OP_LOCK, SUCCESS])

    run(scenario())


def test_five_wrong_pins_lock_the_control_point_out(rootcanal):
    """Five wrong PINs in a row: the fifth still answers 0x02, then every command 0x04 (for 60 s)."""
    process = start_lock(rootcanal, "LKO")
    try:
        async def scenario():
            async with connected(process, "lockout-central") as conn:
                pin = pin_of(process)
                wrong = "0000" if pin != "0000" else "1111"
                for attempt in range(5):
                    result = await operate(conn, OP_UNLOCK, wrong)
                    assert result == bytes([RESPONSE, OP_UNLOCK, WRONG_PIN]), f"wrong PIN {attempt + 1}: {result.hex()}"
                assert await operate(conn, OP_UNLOCK, pin) == bytes([RESPONSE, OP_UNLOCK, LOCKED_OUT])
                assert await operate(conn, OP_LOCK, pin) == bytes([RESPONSE, OP_LOCK, LOCKED_OUT])
                state = await conn.read(conn.characteristic(UUID_LOCK_STATE, UUID_LOCK_SERVICE))
                assert state == bytes([LOCKED]), "a locked-out command moved the bolt"

        run(scenario())
        assert process.stop() == 0, f"blemu did not stop cleanly:\n{process.log_tail()}"
    finally:
        process.kill()


def test_it_relocks_itself_after_the_delay(lock):
    async def scenario():
        async with connected(lock) as conn:
            pin = pin_of(lock)
            delay = conn.characteristic(UUID_RELOCK_DELAY, UUID_LOCK_SERVICE)
            state_char = conn.characteristic(UUID_LOCK_STATE, UUID_LOCK_SERVICE)
            await expect_write_error(conn, delay, b"\x02", ATT_INVALID_ATTRIBUTE_VALUE_LENGTH)
            await conn.write(delay, struct.pack("<H", 2))
            assert await conn.read(delay) == struct.pack("<H", 2)
            try:
                assert await operate(conn, OP_UNLOCK, pin) == bytes([RESPONSE, OP_UNLOCK, SUCCESS])
                mark = len(conn.notifications)
                indications = len(conn.indications)
                # 2 s, then the motor: Lock State notifies locked, and no command was answered.
                got = await collect_notifications(conn, state_char.handle, 1, 8.0, mark)
                assert got[0].value == bytes([LOCKED])
                assert len(conn.indications) == indications, "the automatic relock sent an indication"
            finally:
                await conn.write(delay, struct.pack("<H", 0))

    run(scenario())


def test_the_event_log_is_read_whole_with_a_long_read(lock):
    """Vol 3, Part G, 4.8.3: the Event Log is longer than ATT_MTU - 1, so the first Read
    Response is full and Read Blobs carry the rest; the text arrives whole."""

    async def scenario():
        async with connected(lock) as conn:
            pin = pin_of(lock)
            assert await operate(conn, OP_UNLOCK, pin) == bytes([RESPONSE, OP_UNLOCK, SUCCESS])
            assert await operate(conn, OP_LOCK, pin) == bytes([RESPONSE, OP_LOCK, SUCCESS])
            log = conn.characteristic(UUID_EVENT_LOG, UUID_LOCK_SERVICE)
            assert conn.mtu == ATT_DEFAULT_MTU
            first = await conn.request(att.ATT_Read_Request(attribute_handle=log.handle))
            assert first.op_code == att.Opcode.ATT_READ_RESPONSE and len(first.attribute_value) == ATT_DEFAULT_MTU - 1
            value = await conn.read(log)
            assert 22 < len(value) <= 512, f"Event Log of {len(value)} octets"
            text = value.decode("utf-8")
            assert text.endswith("\n"), f"the log does not end with a whole line: {text!r}"
            lines = text.splitlines()
            for line in lines:
                assert re.fullmatch(r"\d{2,}:\d{2}:\d{2} .+", line), f"line without a timestamp: {line!r}"
            assert lines[0].endswith("locked (powered on)") or len(value) > 400, lines[0]
            assert re.search(r"unlocked by [0-9A-F:]{17}", text) and lines[-1].split(" ", 1)[1].startswith("locked by"), text
            assert pin not in text, "the PIN is in the Event Log"

    run(scenario())
