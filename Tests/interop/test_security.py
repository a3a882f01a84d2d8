"""Pairing, encryption and bonding (Docs/SECURITY.md), checked from the outside by Bumble
centrals on rootcanal's radio: LE Secure Connections Just Works with bonding, a restart of
blemu with the same --state-dir and a reconnection that encrypts without pairing again,
Passkey Entry with the device's static passkey (right and wrong), the repeated-attempts rule,
LE legacy Just Works and Passkey Entry, and no CCCD kept for a central that did not bond.

Spec references: Core 5.4, Vol 3, Part H (SMP); Vol 4, Part E (HCI).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import stat
import subprocess

import pytest
from bumble import att, hci
from bumble.core import UUID, ProtocolError
from bumble.keys import MemoryKeyStore
from bumble.pairing import PairingConfig, PairingDelegate

from bumble_central import (
    UUID_BODY_SENSOR_LOCATION,
    UUID_GATT_SERVICE,
    UUID_SERVICE_CHANGED,
    UUID_HEART_RATE_MEASUREMENT,
    UUID_HEART_RATE_SERVICE,
    Central,
    collect_indications,
    error_code_of,
    collect_notifications,
)
from harness import BlemuProcess, blemu_binary, expect_write_error, run, start_advertising, unique_name

# Vol 3, Part H, 3.5.5, Table 3.7.
SMP_CONFIRM_VALUE_FAILED = 0x04
SMP_REPEATED_ATTEMPTS = 0x09
PASSKEY = 123456


class Keyboard(PairingDelegate):
    """A central whose user types `passkey` when asked (KeyboardOnly)."""

    def __init__(self, passkey: int):
        super().__init__(io_capability=PairingDelegate.KEYBOARD_INPUT_ONLY)
        self.passkey = passkey
        self.asked = 0

    async def get_number(self) -> int | None:
        self.asked += 1
        return self.passkey


def pairing(sc: bool = True, mitm: bool = False, delegate: PairingDelegate | None = None):
    return lambda _connection: PairingConfig(sc=sc, mitm=mitm, bonding=True,
                                             delegate=delegate or PairingDelegate(PairingDelegate.NO_OUTPUT_NO_INPUT))


def start(rootcanal, label: str, state_dir, *extra: str, name: str | None = None) -> BlemuProcess:
    process = BlemuProcess(rootcanal.controller_spec, name or unique_name(label),
                           extra_args=["--state-dir", str(state_dir), *extra])
    return start_advertising(process, rootcanal)


@contextlib.asynccontextmanager
async def central_for(blemu: BlemuProcess, label: str, address: hci.Address | None = None):
    async with Central(blemu.controller, name=label, address=address) as central:
        yield central


async def connect(central: Central, blemu: BlemuProcess):
    assert blemu.scan is not None
    return await central.connect(blemu.scan.address)


async def read_body_sensor_location(conn) -> bytes:
    await conn.discover_all()
    return await conn.read(conn.characteristic(UUID_BODY_SENSOR_LOCATION, UUID_HEART_RATE_SERVICE))


def bond_file(state_dir) -> dict:
    files = [name for name in os.listdir(state_dir) if name.startswith("bonds-") and name.endswith(".json")]
    assert len(files) == 1, f"one bond file expected in {state_dir}: {os.listdir(state_dir)}"
    path = os.path.join(state_dir, files[0])
    mode = stat.S_IMODE(os.stat(path).st_mode)
    assert mode == 0o600, f"{path} has mode {mode:o}, not 600"
    with open(path) as file:
        return json.load(file)


def stop(process: BlemuProcess) -> None:
    assert process.stop() == 0, f"blemu did not stop cleanly:\n{process.log_tail()}"


def test_secure_connections_just_works_bonds_and_survives_a_restart(rootcanal, tmp_path):
    """SC Just Works with bonding encrypts the link; after blemu restarts with the same
    --state-dir, the same central (same address, same key store) encrypts with its LTK
    (EDIV 0, Rand 0, Vol 3, Part H, 2.4.1) without pairing again."""
    state_dir = tmp_path / "state"
    first = start(rootcanal, "SC", state_dir)
    address = hci.Address.generate_static_address()
    keystore = MemoryKeyStore()
    second: BlemuProcess | None = None
    ltk_hex_seen: list[str] = []

    async def scenario():
        nonlocal second
        async with central_for(first, "sc-central", address) as central:
            central.device.keystore = keystore
            central.device.pairing_config_factory = pairing(sc=True)
            conn = await connect(central, first)
            await conn.connection.pair()
            assert conn.connection.is_encrypted, "Bumble's link is not encrypted after pairing"
            assert await read_body_sensor_location(conn) == bytes([1])
            # A bonded central's subscription is kept with its bond (Vol 3, Part G, 3.3.3.3).
            measurement = conn.characteristic(UUID_HEART_RATE_MEASUREMENT, UUID_HEART_RATE_SERVICE)
            await conn.subscribe(measurement)
            await collect_notifications(conn, measurement.handle, 1, 5.0)
            await conn.disconnect()

            paired = first.wait_for_event("paired")
            assert "LE Secure Connections" in paired[0].message and "bonded" in paired[0].message, paired[0].line
            assert paired[0].fields.get("peer") == str(address).replace("/P", ""), paired[0].line
            changes = first.wait_for_event("encryption-changed")
            assert "encrypted (LE Secure Connections, unauthenticated, 16-octet key" in changes[0].message, changes[0].line

            first.wait_for_event("disconnected")  # the bond file holds the CCCD once the link is gone
            keys = await keystore.get(str(first.scan.address))
            assert keys is not None and keys.ltk is not None, "Bumble kept no LTK"
            ltk_hex = keys.ltk.value.hex()
            ltk_hex_seen.append(ltk_hex)
            stored = bond_file(state_dir)
            assert len(stored["bonds"]) == 1 and stored["bonds"][0]["secureConnections"] is True
            assert stored["bonds"][0].get("cccds"), f"the subscription was not kept: {stored}"
            # Keys are never logged in clear.
            assert ltk_hex not in first.log_path.read_text().lower()

            stop(first)
            second = BlemuProcess(rootcanal.controller_spec, first.name, extra_args=["--state-dir", str(state_dir)])
            second.start()
            second.scan = await central.scan_for(first.name, timeout=20.0, alive=second.exited)

            conn = await connect(central, second)
            await conn.connection.encrypt()
            assert conn.connection.is_encrypted, "reconnection not encrypted"
            assert await read_body_sensor_location(conn) == bytes([1])
            # Notifications come without subscribing again: the CCCD came back with the bond.
            measurement = conn.characteristic(UUID_HEART_RATE_MEASUREMENT, UUID_HEART_RATE_SERVICE)
            await collect_notifications(conn, measurement.handle, 1, 5.0)
            await conn.disconnect()

            changes = second.wait_for_event("encryption-changed")
            assert "bonded" in changes[0].message, changes[0].line
            assert not second.events("paired"), "paired again instead of using the bond"
            assert not second.events("key-missing")
            assert ltk_hex not in second.log_path.read_text().lower()

    try:
        run(scenario(), timeout=90)
        stop(second)
        second = None
        # `blemu bonds`: the bond is listed (no key material), then forgotten for good.
        central_address = str(address).replace("/P", "")
        listed = bonds_cli("list", "--state-dir", str(state_dir))
        assert listed.returncode == 0 and central_address in listed.stdout, listed.stderr + listed.stdout
        assert "LE Secure Connections, unauthenticated, 16-octet key" in listed.stdout and "1 subscription(s) kept" in listed.stdout
        assert ltk_hex_seen[0] not in listed.stdout.lower()
        forgot = bonds_cli("forget", central_address, "--state-dir", str(state_dir))
        assert forgot.returncode == 0 and "forgot 1 bond(s)" in forgot.stdout, forgot.stderr + forgot.stdout
        assert bond_file(state_dir)["bonds"] == []
        assert ": 0 bond(s)" in bonds_cli("list", "--state-dir", str(state_dir)).stdout
    finally:
        first.kill()
        if second is not None:
            stop(second)


def bonds_cli(*arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(blemu_binary()), "bonds", *arguments], capture_output=True, text=True, timeout=30)


def test_passkey_entry_with_the_static_passkey(rootcanal, tmp_path):
    """--passkey makes the device DisplayOnly; a KeyboardOnly central types the passkey:
    Passkey Entry (Vol 3, Part H, 2.3.5.6.3), an authenticated key."""
    blemu = start(rootcanal, "PK", tmp_path, "--passkey", str(PASSKEY))
    delegate = Keyboard(PASSKEY)

    async def scenario():
        async with central_for(blemu, "passkey-central") as central:
            central.device.pairing_config_factory = pairing(sc=True, mitm=True, delegate=delegate)
            conn = await connect(central, blemu)
            await conn.connection.pair()
            assert conn.connection.is_encrypted
            assert conn.connection.authenticated, "the key should be authenticated (MITM)"
            assert delegate.asked == 1
            await conn.disconnect()
        paired = blemu.wait_for_event("paired")
        assert "authenticated" in paired[0].message and "unauthenticated" not in paired[0].message, paired[0].line
        assert str(PASSKEY) not in blemu.log_path.read_text()

    try:
        run(scenario(), timeout=60)
    finally:
        stop(blemu)


def test_a_wrong_passkey_fails_and_the_next_attempt_must_wait(rootcanal, tmp_path):
    """A wrong passkey: Pairing Failed, Confirm Value Failed (0x04); an attempt at once after
    it: Repeated Attempts (0x09, Vol 3, Part H, 2.3.6)."""
    blemu = start(rootcanal, "WP", tmp_path, "--passkey", str(PASSKEY))

    async def scenario():
        async with central_for(blemu, "wrong-passkey-central") as central:
            central.device.pairing_config_factory = pairing(sc=True, mitm=True, delegate=Keyboard(654321))
            conn = await connect(central, blemu)
            with pytest.raises(ProtocolError) as failure:
                await conn.connection.pair()
            assert failure.value.error_code == SMP_CONFIRM_VALUE_FAILED, failure.value
            assert not conn.connection.is_encrypted
            with pytest.raises(ProtocolError) as refusal:
                await conn.connection.pair()
            assert refusal.value.error_code == SMP_REPEATED_ATTEMPTS, refusal.value
            await conn.disconnect()
        failed = blemu.wait_for_event("pairing-failed", count=2)
        assert failed[0].fields.get("reason") == "0x04", failed[0].line
        assert failed[1].fields.get("reason") == "0x09", failed[1].line

    try:
        run(scenario(), timeout=60)
    finally:
        stop(blemu)


def test_legacy_just_works_and_reconnection_with_the_distributed_key(rootcanal, tmp_path):
    """LE legacy Just Works (Bumble with sc=False): the STK encrypts, the peripheral
    distributes its LTK, EDIV and Rand (Vol 3, Part H, 3.6.1), and a reconnection encrypts
    with them."""
    blemu = start(rootcanal, "LG", tmp_path)
    address = hci.Address.generate_static_address()

    async def scenario():
        async with central_for(blemu, "legacy-central", address) as central:
            central.device.keystore = MemoryKeyStore()
            central.device.pairing_config_factory = pairing(sc=False)
            conn = await connect(central, blemu)
            await conn.connection.pair()
            assert conn.connection.is_encrypted
            await conn.disconnect()
            paired = blemu.wait_for_event("paired")
            assert "LE legacy" in paired[0].message and "bonded" in paired[0].message, paired[0].line
            stored = bond_file(tmp_path)
            assert stored["bonds"][0]["secureConnections"] is False

            conn = await connect(central, blemu)
            await conn.connection.encrypt()
            assert conn.connection.is_encrypted
            await conn.disconnect()
        assert len(blemu.events("paired")) == 1
        assert not blemu.events("key-missing")

    try:
        run(scenario(), timeout=60)
    finally:
        stop(blemu)


def test_encryption_without_a_bond_gets_the_negative_reply(rootcanal, tmp_path):
    """A central that believes it is bonded but blemu has no bond: LE Long Term Key Request
    Negative Reply, the link stays unencrypted, and key-missing is logged."""
    blemu = start(rootcanal, "NB", tmp_path)

    async def scenario():
        async with central_for(blemu, "stale-central") as central:
            conn = await connect(central, blemu)
            from bumble.keys import PairingKeys
            keys = PairingKeys()
            keys.ltk = PairingKeys.Key(value=bytes(range(16)), authenticated=False)
            central.device.keystore = MemoryKeyStore()
            await central.device.keystore.update(str(blemu.scan.address), keys)
            with pytest.raises(Exception):
                await conn.connection.encrypt()
            assert not conn.connection.is_encrypted
            await conn.disconnect()
        blemu.wait_for_event("key-missing")

    try:
        run(scenario(), timeout=60)
    finally:
        stop(blemu)


# Docs/REFERENCE.md, Lock service.
UUID_LOCK_SERVICE = UUID("7d3c0200-9a5e-4d1a-8f6e-5c1b2d3e4f50")
UUID_LOCK_CONTROL_POINT = UUID("7d3c0202-9a5e-4d1a-8f6e-5c1b2d3e4f50")
UUID_LOCK_EVENT_LOG = UUID("7d3c0203-9a5e-4d1a-8f6e-5c1b2d3e4f50")
ATT_INSUFFICIENT_AUTHENTICATION = 0x05
OP_UNLOCK, RESPONSE, SUCCESS = 0x02, 0x80, 0x01


def test_the_locks_control_point_needs_a_link_paired_with_its_passkey(rootcanal, tmp_path):
    """With --passkey the lock's control point refuses a link that is not encrypted with an
    authenticated key (Insufficient Authentication, Vol 3, Part C, 10.3); after Passkey Entry
    the same write unlocks."""
    lock = start_advertising(BlemuProcess(rootcanal.controller_spec, unique_name("LK"), device="lock",
                                          extra_args=["--state-dir", str(tmp_path), "--passkey", str(PASSKEY),
                                                      "--pin", "2468"]), rootcanal)

    async def scenario():
        async with central_for(lock, "lock-pairing-central") as central:
            central.device.pairing_config_factory = pairing(sc=True, mitm=True, delegate=Keyboard(PASSKEY))
            conn = await connect(central, lock)
            await conn.discover_all()
            control_point = conn.characteristic(UUID_LOCK_CONTROL_POINT, UUID_LOCK_SERVICE)
            await conn.subscribe(control_point)
            requests: list[int] = []
            conn.connection.on("security_request", lambda auth_req: requests.append(int(auth_req)))
            # Who came and went is the owner's business too: the event log needs the same link.
            event_log = conn.characteristic(UUID_LOCK_EVENT_LOG, UUID_LOCK_SERVICE)
            try:
                await conn.read(event_log)
            except att.ATT_Error as error:
                assert error_code_of(error) == ATT_INSUFFICIENT_AUTHENTICATION, error
            else:
                raise AssertionError("an unpaired central read the lock's event log")
            await expect_write_error(conn, control_point, bytes([OP_UNLOCK]) + b"2468", ATT_INSUFFICIENT_AUTHENTICATION)
            await expect_write_error(conn, control_point, bytes([OP_UNLOCK]) + b"2468", ATT_INSUFFICIENT_AUTHENTICATION)
            # The refusals come with a Security Request (Vol 3, Part H, 2.4.6), once per link,
            # asking for bonding (0x01), MITM (0x04) and Secure Connections (0x08).
            deadline = asyncio.get_running_loop().time() + 5
            while not requests and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.05)
            assert len(requests) == 1 and requests[0] & 0x0D == 0x0D, requests
            # A phone pairs when asked: so does this central.
            await conn.connection.pair()
            assert conn.connection.is_encrypted and conn.connection.authenticated
            assert (await conn.read(event_log)).decode()   # paired: the log reads
            mark = len(conn.indications)
            await conn.write(control_point, bytes([OP_UNLOCK]) + b"2468")
            result = await collect_indications(conn, control_point.handle, 1, 5.0, mark)
            assert result[0].value == bytes([RESPONSE, OP_UNLOCK, SUCCESS]), result[0].value.hex()
            await conn.disconnect()

    try:
        run(scenario(), timeout=60)
    finally:
        stop(lock)


def test_the_lock_refuses_a_passkey_pairing_with_a_7_octet_key(rootcanal, tmp_path):
    """The lock promises Security Mode 1 Level 4 (Vol 3, Part C, 10.2.1: a 128-bit key). A
    central pairing with LE Secure Connections Passkey Entry and the right passkey, but offering
    a Maximum Encryption Key Size of 7, is refused with Encryption Key Size (0x06), and the
    control point stays shut; the same central offering 16 octets then pairs and unlocks."""
    lock = start_advertising(BlemuProcess(rootcanal.controller_spec, unique_name("LK7"), device="lock",
                                          extra_args=["--state-dir", str(tmp_path), "--passkey", str(PASSKEY),
                                                      "--pin", "2468"]), rootcanal)

    class ShortKeyboard(Keyboard):
        def __init__(self, passkey: int, key_size: int):
            super().__init__(passkey)
            self.maximum_encryption_key_size = key_size

    async def scenario():
        async with central_for(lock, "short-key-central") as central:
            delegate = ShortKeyboard(PASSKEY, 7)
            central.device.pairing_config_factory = pairing(sc=True, mitm=True, delegate=delegate)
            conn = await connect(central, lock)
            await conn.discover_all()
            control_point = conn.characteristic(UUID_LOCK_CONTROL_POINT, UUID_LOCK_SERVICE)
            await conn.subscribe(control_point)
            with pytest.raises(Exception):
                await conn.connection.pair()
            assert not conn.connection.is_encrypted
            await expect_write_error(conn, control_point, bytes([OP_UNLOCK]) + b"2468", ATT_INSUFFICIENT_AUTHENTICATION)
            refusals = lock.wait_for_event("pairing-failed", timeout=5)
            assert any("Encryption Key Size" in entry.message for entry in refusals), [e.line for e in refusals]
            # The same central with 16 octets: paired, and the control point opens.
            delegate.maximum_encryption_key_size = 16
            # (0x06 is no guesser's failure: no repeated-attempts wait, Vol 3, Part H, 2.3.6.)
            await conn.connection.pair()
            assert conn.connection.is_encrypted and conn.connection.authenticated
            mark = len(conn.indications)
            await conn.write(control_point, bytes([OP_UNLOCK]) + b"2468")
            result = await collect_indications(conn, control_point.handle, 1, 5.0, mark)
            assert result[0].value == bytes([RESPONSE, OP_UNLOCK, SUCCESS]), result[0].value.hex()
            await conn.disconnect()

    try:
        run(scenario(), timeout=60)
    finally:
        stop(lock)


def test_a_7_octet_key_stays_7_octets_whatever_the_controller_reports(rootcanal, tmp_path):
    """The heart-rate sensor takes any key size the Core allows: a central offering 7 octets
    pairs with a 7-octet key. rootcanal answers Read Encryption Key Size with 16 for it; the
    link still counts 7 (the host shortened the key, Vol 3, Part H, 2.3.4) and the log says both."""
    blemu = start(rootcanal, "K7", tmp_path / "state")

    class ShortKeys(PairingDelegate):
        def __init__(self):
            super().__init__(PairingDelegate.NO_OUTPUT_NO_INPUT, maximum_encryption_key_size=7)

    async def scenario():
        async with central_for(blemu, "seven-octet-central") as central:
            central.device.pairing_config_factory = pairing(sc=True, delegate=ShortKeys())
            conn = await connect(central, blemu)
            await conn.connection.pair()
            assert conn.connection.is_encrypted
            await asyncio.sleep(0.5)
            await conn.disconnect()

    try:
        run(scenario(), timeout=60)
        paired = [e.message for e in blemu.events("paired")]
        assert any("7-octet key" in message for message in paired), paired
        tail = blemu.log_tail()
        assert "the controller reports a 16-octet key, 7 octets were negotiated: the link counts as 7" in tail, tail
    finally:
        stop(blemu)


def test_bonds_go_to_STATE_DIRECTORY_by_default(rootcanal, tmp_path):
    """Without --state-dir, systemd's $STATE_DIRECTORY (its first entry) holds the bond file."""
    state = tmp_path / "systemd-state"
    state.mkdir()
    blemu = start_advertising(BlemuProcess(rootcanal.controller_spec, unique_name("SD"),
                                           env={"STATE_DIRECTORY": f"{state}:/nonexistent"}), rootcanal)

    async def scenario():
        async with central_for(blemu, "state-dir-central") as central:
            central.device.pairing_config_factory = pairing(sc=True)
            conn = await connect(central, blemu)
            await conn.connection.pair()
            await conn.disconnect()
        blemu.wait_for_event("paired")

    try:
        run(scenario(), timeout=60)
    finally:
        stop(blemu)
    assert len(bond_file(state)["bonds"]) == 1


def test_a_damaged_bond_file_is_moved_aside_and_reported(rootcanal, tmp_path):
    """A bond file that does not parse: an error naming its path, the file renamed to
    PATH.damaged-1, and blemu runs without those bonds."""
    name = unique_name("DF")
    path = tmp_path / f"bonds-heart-rate-{name}.json"
    path.write_text('{"format": "blemu-bonds", "version": 1, "bonds": [')
    blemu = start(rootcanal, "DF", tmp_path, name=name)
    try:
        errors = [entry for entry in blemu.log_entries() if entry.level == "ERROR" and str(path) in entry.message]
        assert len(errors) == 1, blemu.log_tail()
        assert not path.exists() and (tmp_path / f"{path.name}.damaged-1").exists(), os.listdir(tmp_path)
    finally:
        stop(blemu)


def test_hostile_smp_pdus_get_the_specs_answers_and_the_link_can_still_pair(rootcanal, tmp_path):
    """Raw SMP PDUs over the air (Vol 3, Part H, 3.5): each attack gets Pairing Failed with the
    right reason, blemu stays up, and the same link then pairs normally."""
    blemu = start(rootcanal, "Raw", tmp_path / "state")
    pairing_request = bytes([0x01, 0x03, 0x00, 0x09, 16, 0x00, 0x01])   # NoInputNoOutput, bonding + SC

    async def scenario():
        async with central_for(blemu, "raw-smp-central") as central:
            central.device.pairing_config_factory = pairing(sc=True)
            conn = await connect(central, blemu)
            manager = central.device.smp_manager
            received: asyncio.Queue[bytes] = asyncio.Queue()
            original = manager.on_smp_pdu
            manager.on_smp_pdu = lambda _connection, pdu: received.put_nowait(bytes(pdu))

            async def exchange(pdu: bytes) -> bytes:
                conn.connection.send_l2cap_pdu(0x0006, pdu)
                return await asyncio.wait_for(received.get(), 5)

            # A Pairing Request one octet short: Invalid Parameters.
            assert await exchange(pairing_request[:-1]) == bytes([0x05, 0x0A])
            # Reserved AuthReq bits are ignored (3.5.1): a Pairing Response without them.
            response = await exchange(bytes([0x01, 0x03, 0x00, 0xC9, 16, 0x00, 0x01]))
            assert response[0] == 0x02 and response[3] & 0xC0 == 0, response.hex()
            conn.connection.send_l2cap_pdu(0x0006, bytes([0x05, 0x08]))   # the central gives up
            # A Pairing Confirm with no pairing under way: Unspecified Reason.
            assert await exchange(bytes([0x03]) + bytes(16)) == bytes([0x05, 0x08])
            # A maximum key size outside 7...16 octets (3.5.1): Invalid Parameters (Table 3.7).
            for size in (0, 6, 17):
                assert await exchange(bytes([0x01, 0x03, 0x00, 0x09, size, 0x00, 0x01])) == bytes([0x05, 0x0A]), size
            # A public key that is not on P-256 (CVE-2018-5383): DHKey Check Failed.
            assert (await exchange(pairing_request))[0] == 0x02
            off_curve = bytes([0x0C]) + (1).to_bytes(32, "little") + (1).to_bytes(32, "little")
            assert await exchange(off_curve) == bytes([0x05, 0x0B])
            assert blemu.exited() is None
            # The same link pairs afterwards, once the repeated-attempts wait (2 s) is over.
            manager.on_smp_pdu = original
            await asyncio.sleep(2.5)
            await conn.connection.pair()
            assert conn.connection.is_encrypted
            await conn.disconnect()
        refusals = [event.message for event in blemu.events("pairing-failed")]
        assert any("DHKey" in message or "0x0b" in message.lower() for message in refusals), refusals

    try:
        run(scenario(), timeout=60)
    finally:
        stop(blemu)


def test_a_bonded_central_hears_of_a_database_change_made_while_it_was_away(rootcanal, tmp_path):
    """Vol 3, Part G, 7.1: a bonded client whose database changed while it was disconnected gets
    Service Changed when it comes back and encrypts; an unchanged database sends nothing."""
    control_path = str(tmp_path / "control.sock")
    blemu = start(rootcanal, "Away", tmp_path / "state", "--control", control_path)
    address = hci.Address.generate_static_address()
    keystore = MemoryKeyStore()

    def ctl(*args: str) -> None:
        result = subprocess.run([str(blemu_binary()), "ctl", control_path, *args], capture_output=True, text=True, timeout=20)
        assert result.returncode == 0, result.stderr + result.stdout

    async def come_back(central) -> tuple[object, int]:
        conn = await connect(central, blemu)
        await conn.discover_all()
        service_changed = conn.characteristic(UUID_SERVICE_CHANGED, UUID_GATT_SERVICE)
        before = len(conn.indications)
        await conn.connection.encrypt()
        await asyncio.sleep(1.0)   # anything owed comes right after the encryption
        return conn, len([i for i in conn.indications[before:] if i.handle == service_changed.handle])

    async def scenario():
        async with central_for(blemu, "away-central", address) as central:
            central.device.keystore = keystore
            central.device.pairing_config_factory = pairing(sc=True)
            conn = await connect(central, blemu)
            await conn.connection.pair()
            await conn.discover_all()
            await conn.subscribe(conn.characteristic(UUID_SERVICE_CHANGED, UUID_GATT_SERVICE))
            await conn.disconnect()
            blemu.wait_for_event("disconnected")

            # Nothing changed: nothing to tell.
            conn, told = await come_back(central)
            assert told == 0, "Service Changed without a change"
            await conn.disconnect()
            blemu.wait_for_event("disconnected", count=2)

            ctl("service", "heart-rate", "180F", "off")   # the Battery service goes while it is away
            conn, told = await come_back(central)
            assert told == 1, "no Service Changed for a change made while away"
            service_changed = conn.characteristic(UUID_SERVICE_CHANGED, UUID_GATT_SERVICE)
            [indication] = [i for i in conn.indications if i.handle == service_changed.handle]
            assert indication.value == bytes([0x01, 0x00, 0xFF, 0xFF]), indication.value.hex()
            await conn.disconnect()

    try:
        run(scenario(), timeout=90)
    finally:
        stop(blemu)


class YesNoDisplay(PairingDelegate):
    """A central with a display and yes/no buttons (DisplayYesNo) whose user compares the six
    digits and answers `accept`; the numbers it was shown are kept."""

    def __init__(self, accept: bool = True):
        super().__init__(io_capability=PairingDelegate.DISPLAY_OUTPUT_AND_YES_NO_INPUT)
        self.accept = accept
        self.shown: list[int] = []

    async def compare_numbers(self, number: int, digits: int) -> bool:
        self.shown.append(number)
        return self.accept


SMP_NUMERIC_COMPARISON_FAILED = 0x0C


def test_numeric_comparison_over_the_air_both_sides_see_the_same_number(rootcanal, tmp_path):
    """--io-capability display-yes-no: a DisplayYesNo central asking for MITM pairs with
    Numeric Comparison (Vol 3, Part H, 2.3.5.6.2); blemu logs the six digits the central shows."""
    blemu = start(rootcanal, "NC", tmp_path, "--io-capability", "display-yes-no")
    user = YesNoDisplay()

    async def scenario():
        async with central_for(blemu, "yes-no-central") as central:
            central.device.pairing_config_factory = pairing(sc=True, mitm=True, delegate=user)
            conn = await connect(central, blemu)
            await conn.connection.pair()
            assert conn.connection.is_encrypted and conn.connection.authenticated
            await conn.disconnect()

    try:
        run(scenario(), timeout=60)
        assert len(user.shown) == 1, user.shown
        logged = [line for line in blemu.log_text().splitlines() if "Numeric Comparison" in line]
        assert any(f"Numeric Comparison {user.shown[0]:06d} accepted" in line for line in logged), logged
    finally:
        stop(blemu)


def test_numeric_comparison_rejected_fails_with_0x0C(rootcanal, tmp_path):
    """--numeric-comparison reject: the device's user says the numbers differ; the pairing
    fails with Numeric Comparison Failed (0x0C) and the link stays unencrypted."""
    blemu = start(rootcanal, "NR", tmp_path, "--io-capability", "display-yes-no", "--numeric-comparison", "reject")
    user = YesNoDisplay()

    async def scenario():
        async with central_for(blemu, "yes-no-rejected") as central:
            central.device.pairing_config_factory = pairing(sc=True, mitm=True, delegate=user)
            conn = await connect(central, blemu)
            try:
                await conn.connection.pair()
            except Exception as error:   # Bumble: ProtocolError with the SMP reason
                assert getattr(error, "error_code", None) == SMP_NUMERIC_COMPARISON_FAILED, repr(error)
            else:
                raise AssertionError("a rejected Numeric Comparison paired")
            assert not conn.connection.is_encrypted
            await conn.disconnect()

    try:
        run(scenario(), timeout=60)
        logged = [line for line in blemu.log_text().splitlines() if "Numeric Comparison" in line]
        assert any("rejected" in line for line in logged), logged
        # The line may reach the log a moment after the central heard Pairing Failed (a loaded
        # machine): waited for, not read once.
        failed = blemu.wait_for_event("pairing-failed", timeout=10)
        assert any("Numeric Comparison Failed (0x0c)" in entry.line for entry in failed), [entry.line for entry in failed]
    finally:
        stop(blemu)


@pytest.mark.parametrize("answer", ["confirm", "reject"])
def test_numeric_comparison_answered_from_the_control_socket(rootcanal, tmp_path, answer):
    """--numeric-comparison ask: the device waits for its user; `blemu ctl PATH pairing DEVICE
    confirm|reject` answers (an app's pairing dialog tested both ways). Confirm pairs; reject is
    Numeric Comparison Failed (0x0C). With nothing waiting, the command is refused."""
    import tempfile

    path = os.path.join(tempfile.mkdtemp(prefix="blemu-nc-", dir="/tmp"), "control.sock")
    blemu = start(rootcanal, "NA", tmp_path, "--io-capability", "display-yes-no", "--numeric-comparison", "ask",
                  "--control", path)
    user = YesNoDisplay()

    def ctl(*args: str):
        from harness import run_cli

        return run_cli(["ctl", path, *args], timeout=10.0)

    async def scenario():
        idle = await asyncio.get_running_loop().run_in_executor(None, lambda: ctl("pairing", "heart-rate", "confirm"))
        assert idle.returncode != 0 and "no Numeric Comparison is waiting" in idle.stdout, idle.describe()
        async with central_for(blemu, "yes-no-asked") as central:
            central.device.pairing_config_factory = pairing(sc=True, mitm=True, delegate=user)
            conn = await connect(central, blemu)
            pairing_task = asyncio.ensure_future(conn.connection.pair())
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 10
            while "waiting for the answer" not in blemu.log_text() and loop.time() < deadline:
                await asyncio.sleep(0.1)
            assert "waiting for the answer" in blemu.log_text(), blemu.log_tail()
            # The device's "display" is on the control socket too, for the script to compare.
            while not user.shown and loop.time() < deadline:
                await asyncio.sleep(0.05)
            listed = await loop.run_in_executor(None, lambda: ctl("list"))
            assert listed.returncode == 0, listed.describe()
            shown_on_socket = [link.get("numeric_comparison") for device in json.loads(listed.stdout)["devices"]
                               for link in device["connections"]]
            assert user.shown and shown_on_socket == [f"{user.shown[0]:06d}"], (shown_on_socket, user.shown, listed.stdout)
            reply = await loop.run_in_executor(None, lambda: ctl("pairing", "heart-rate", answer))
            assert reply.returncode == 0 and json.loads(reply.stdout)["answered"] == 1, reply.describe()
            if answer == "confirm":
                await pairing_task
                assert conn.connection.is_encrypted and conn.connection.authenticated
            else:
                try:
                    await pairing_task
                except Exception as error:
                    assert getattr(error, "error_code", None) == SMP_NUMERIC_COMPARISON_FAILED, repr(error)
                else:
                    raise AssertionError("a rejected Numeric Comparison paired")
            await conn.disconnect()

    try:
        run(scenario(), timeout=60)
        assert len(user.shown) == 1
        assert f"Numeric Comparison {user.shown[0]:06d} {'confirmed' if answer == 'confirm' else 'rejected'}" in blemu.log_text(), blemu.log_tail()
    finally:
        stop(blemu)


# Authorization (Vol 3, Part C, 10.5; Vol 3, Part F, 3.2.5): a profile's values that require
# it are refused with Insufficient Authorization (0x08) until `blemu ctl PATH authorize DEVICE
# UUID allow`; `deny` refuses again.
ATT_INSUFFICIENT_AUTHORIZATION = 0x08
AUTHORIZED_SERVICE = "6e400020-b5a3-f393-e0a9-e50e24dcca9e"
AUTHORIZED_READ = "6e400021-b5a3-f393-e0a9-e50e24dcca9e"
AUTHORIZED_WRITE = "6e400022-b5a3-f393-e0a9-e50e24dcca9e"


def start_authorized(rootcanal, tmp_path, label: str):
    """blemu serving a profile with a read-authorized value (AUTHORIZED_READ) and a
    write-authorized one (AUTHORIZED_WRITE), with a control socket: (blemu, ctl)."""
    import tempfile

    from harness import run_cli

    name = unique_name(label)
    profile = {
        "format": "blemu-gatt-profile", "version": 1, "name": name,
        "services": [{"uuid": AUTHORIZED_SERVICE, "characteristics": [
            {"uuid": AUTHORIZED_READ, "properties": ["read"], "value": "2a", "permissions": ["read-authorized"]},
            {"uuid": AUTHORIZED_WRITE, "properties": ["read", "write"], "value": "00", "permissions": ["write-authorized"]},
        ]}],
    }
    profile_path = tmp_path / "authorized.json"
    profile_path.write_text(json.dumps(profile))
    path = os.path.join(tempfile.mkdtemp(prefix="blemu-az-", dir="/tmp"), "control.sock")
    blemu = start_advertising(BlemuProcess(rootcanal.controller_spec, name, device=str(profile_path),
                                           extra_args=["--state-dir", str(tmp_path / "state"), "--control", path]), rootcanal)

    def ctl(*args: str):
        return run_cli(["ctl", path, *args], timeout=10.0)

    return blemu, ctl


async def expect_read_error(conn, characteristic, code: int) -> None:
    try:
        value = await conn.read(characteristic)
    except Exception as error:
        assert error_code_of(error) == code, f"reading {characteristic.uuid}: {error!r}, expected 0x{code:02x}"
    else:
        raise AssertionError(f"reading {characteristic.uuid} gave {value.hex()}; expected ATT error 0x{code:02x}")


def test_authorization_is_asked_of_the_control_socket(rootcanal, tmp_path):
    """A Bumble central reads a read-authorized value and writes a write-authorized one: 0x08
    until `authorize ... allow`, then served; `deny` refuses again. A characteristic that needs
    no authorization is refused by the control command."""
    blemu, ctl = start_authorized(rootcanal, tmp_path, "AZ")

    async def scenario():
        loop = asyncio.get_running_loop()
        async with central_for(blemu, "authorizing") as central:
            conn = await connect(central, blemu)
            await conn.discover_all()
            readable = conn.characteristic(UUID(AUTHORIZED_READ), UUID(AUTHORIZED_SERVICE))
            writable = conn.characteristic(UUID(AUTHORIZED_WRITE), UUID(AUTHORIZED_SERVICE))
            await expect_read_error(conn, readable, ATT_INSUFFICIENT_AUTHORIZATION)
            await expect_write_error(conn, writable, b"\x07", ATT_INSUFFICIENT_AUTHORIZATION)
            assert await conn.read(writable) == b"\x00", "a refused write changed the value"

            allowed = await loop.run_in_executor(None, lambda: ctl("authorize", "profile", AUTHORIZED_READ, "allow"))
            assert allowed.returncode == 0 and json.loads(allowed.stdout)["answer"] == "allow", allowed.describe()
            assert await conn.read(readable) == b"\x2a"
            await expect_write_error(conn, writable, b"\x07", ATT_INSUFFICIENT_AUTHORIZATION)
            listing = await loop.run_in_executor(None, lambda: ctl("list"))
            assert json.loads(listing.stdout)["devices"][0]["authorized"] == [AUTHORIZED_READ], listing.stdout

            allowed = await loop.run_in_executor(None, lambda: ctl("authorize", "profile", AUTHORIZED_WRITE, "allow"))
            assert allowed.returncode == 0, allowed.describe()
            await conn.write(writable, b"\x07")
            assert await conn.read(writable) == b"\x07"

            denied = await loop.run_in_executor(None, lambda: ctl("authorize", "profile", AUTHORIZED_READ, "deny"))
            assert denied.returncode == 0, denied.describe()
            await expect_read_error(conn, readable, ATT_INSUFFICIENT_AUTHORIZATION)

            # The Device Name needs no authorization: nothing to answer for it.
            refused = await loop.run_in_executor(None, lambda: ctl("authorize", "profile", "2A00", "allow"))
            assert refused.returncode != 0 and "requires no authorization" in refused.stdout, refused.describe()
            await conn.disconnect()

    try:
        run(scenario(), timeout=60)
        assert "authorize profile" in blemu.log_text(), blemu.log_tail()
    finally:
        stop(blemu)


def test_authorization_per_central(rootcanal, tmp_path):
    """Two Bumble centrals on one device: `authorize DEVICE UUID allow PEER_A` lets central A
    read the read-authorized value while B gets Insufficient Authorization (0x08); `list` shows
    the answer in `authorized_peers` and leaves `authorized` (every central) empty. An answer for
    A's address as a public one does not serve A (random). A wide `allow` then serves B and its
    reply lists the per-central answers left in place, and `deny PEER_A` refuses A only."""
    blemu, ctl = start_authorized(rootcanal, tmp_path, "AP")

    async def scenario():
        loop = asyncio.get_running_loop()

        async def ask(*args: str):
            result = await loop.run_in_executor(None, lambda: ctl(*args))
            assert result.returncode == 0, result.describe()
            return json.loads(result.stdout)

        async with central_for(blemu, "phone-a") as central_a, central_for(blemu, "phone-b") as central_b:
            conn_a = await connect(central_a, blemu)
            conn_b = await connect(central_b, blemu)
            peer_a = conn_a.connection.self_address.to_string(with_type_qualifier=False).upper()
            peer_b = conn_b.connection.self_address.to_string(with_type_qualifier=False).upper()
            assert peer_a != peer_b
            shown = {link["peer"] for link in (await ask("list"))["devices"][0]["connections"]}
            assert shown == {peer_a, peer_b}, shown
            for conn in (conn_a, conn_b):
                await conn.discover_all()
            readable_a = conn_a.characteristic(UUID(AUTHORIZED_READ), UUID(AUTHORIZED_SERVICE))
            readable_b = conn_b.characteristic(UUID(AUTHORIZED_READ), UUID(AUTHORIZED_SERVICE))

            # Bumble's centrals use random addresses: the same 48 bits as a public address are
            # another device, so an answer for the public one does not serve A.
            links = {link["peer"]: link for link in (await ask("list"))["devices"][0]["connections"]}
            assert links[peer_a]["peer_random"] is True, links
            reply = await ask("authorize", "profile", AUTHORIZED_READ, "allow", peer_a, "public")
            assert reply["peer"] == peer_a and reply["peer_random"] is False, reply
            await expect_read_error(conn_a, readable_a, ATT_INSUFFICIENT_AUTHORIZATION)

            reply = await ask("authorize", "profile", AUTHORIZED_READ, "allow", peer_a)
            assert reply["answer"] == "allow" and reply["peer"] == peer_a and reply["peer_random"] is True, reply
            assert await conn_a.read(readable_a) == b"\x2a"
            await expect_read_error(conn_b, readable_b, ATT_INSUFFICIENT_AUTHORIZATION)
            device = (await ask("list"))["devices"][0]
            assert device["authorized"] == [], device
            assert device["authorized_peers"] == [
                {"uuid": AUTHORIZED_READ, "peer": peer_a, "peer_random": False, "allow": True},
                {"uuid": AUTHORIZED_READ, "peer": peer_a, "peer_random": True, "allow": True},
            ], device

            # A wide answer leaves the per-central ones in place, and its reply lists them.
            reply = await ask("authorize", "profile", AUTHORIZED_READ, "allow")
            assert [(answer["peer"], answer["peer_random"]) for answer in reply["per_central"]] == [
                (peer_a, False), (peer_a, True)], reply
            assert await conn_b.read(readable_b) == b"\x2a"
            await ask("authorize", "profile", AUTHORIZED_READ, "deny", peer_a)
            await expect_read_error(conn_a, readable_a, ATT_INSUFFICIENT_AUTHORIZATION)
            assert await conn_b.read(readable_b) == b"\x2a"

            refused = await loop.run_in_executor(None, lambda: ctl("authorize", "profile", AUTHORIZED_READ, "allow", "phone"))
            assert refused.returncode != 0, refused.describe()
            await conn_a.disconnect()
            await conn_b.disconnect()

    try:
        run(scenario(), timeout=60)
        assert "authorize profile" in blemu.log_text(), blemu.log_tail()
    finally:
        stop(blemu)


def p256_public_key() -> bytes:
    """A fresh valid P-256 public key as SMP carries it: X then Y, each least significant octet first."""
    from cryptography.hazmat.primitives.asymmetric import ec

    numbers = ec.generate_private_key(ec.SECP256R1()).public_key().public_numbers()
    return numbers.x.to_bytes(32, "little") + numbers.y.to_bytes(32, "little")


@contextlib.asynccontextmanager
async def raw_smp(blemu: BlemuProcess, label: str):
    """A Bumble central connected to blemu whose SMP is taken over: `exchange(pdu)` sends one
    raw PDU on CID 0x0006 and returns the next one blemu sends; `next_pdu(timeout)` waits for one
    (None when blemu stays silent); `restore()` gives SMP back to Bumble for a normal pairing."""
    async with central_for(blemu, label) as central:
        central.device.pairing_config_factory = pairing(sc=True)
        conn = await connect(central, blemu)
        manager = central.device.smp_manager
        received: asyncio.Queue[bytes] = asyncio.Queue()
        original = manager.on_smp_pdu
        manager.on_smp_pdu = lambda _connection, pdu: received.put_nowait(bytes(pdu))

        class Raw:
            def send(self, pdu: bytes) -> None:
                conn.connection.send_l2cap_pdu(0x0006, pdu)

            async def next_pdu(self, timeout: float = 5.0) -> bytes | None:
                try:
                    return await asyncio.wait_for(received.get(), timeout)
                except asyncio.TimeoutError:
                    return None

            async def exchange(self, pdu: bytes) -> bytes | None:
                self.send(pdu)
                return await self.next_pdu()

            def restore(self) -> None:
                manager.on_smp_pdu = original

        raw = Raw()
        raw.conn = conn
        yield raw


# Vol 3, Part H, 3.5.1: NoInputNoOutput, no OOB, bonding + Secure Connections, 16 octets, keys
# EncKey|IdKey both ways.
SC_PAIRING_REQUEST = bytes([0x01, 0x03, 0x00, 0x09, 16, 0x03, 0x03])


def test_over_the_air_key_distribution_out_of_phase_and_a_reflected_public_key(rootcanal, tmp_path):
    """Raw SMP from a Bumble central (issue item 7), each answered as the spec has it and none
    stopping blemu or the link from pairing afterwards:

    - key distribution PDUs (Encryption Information, Identity Information, Signing Information;
      Vol 3, Part H, 3.6.2, 3.6.4, 3.6.6) on an unencrypted link, idle or in the middle of
      phase 2: keys are distributed in phase 3, on the encrypted link only (3.6.1), so each is
      out of sequence, answered Pairing Failed with Unspecified Reason (0x08), and nothing is kept;
    - blemu's own public key reflected (2.3.5.6.1): blemu makes its key pair when the central's
      key arrives, so a central can only reflect one from an earlier pairing; blemu answers with a
      new key (another X) and the reflecting central, without the private key, cannot make the
      DHKey check: DHKey Check Failed (0x0B). (A key equal to the one blemu uses is refused with
      0x08: SMPResponderTests, since over the air it cannot be known in time.)
    """
    blemu = start(rootcanal, "Keys", tmp_path / "state")

    async def scenario():
        async with raw_smp(blemu, "raw-keys-central") as raw:
            # Idle link: each key distribution PDU is out of sequence.
            assert await raw.exchange(bytes([0x06]) + bytes(range(16))) == bytes([0x05, 0x08])    # Encryption Information
            assert await raw.exchange(bytes([0x08]) + bytes(range(16))) == bytes([0x05, 0x08])    # Identity Information
            assert await raw.exchange(bytes([0x0A]) + bytes(range(16))) == bytes([0x05, 0x08])    # Signing Information
            # During phase 2, before any encryption: the pairing ends with 0x08.
            assert (await raw.exchange(SC_PAIRING_REQUEST))[0] == 0x02
            assert await raw.exchange(bytes([0x08]) + bytes(16)) == bytes([0x05, 0x08])
            # ... and the responder is idle again: a Public Key now is out of sequence too.
            assert await raw.exchange(bytes([0x0C]) + p256_public_key()) == bytes([0x05, 0x08])

            # Reflection: learn the public key blemu uses in one pairing, abandon it ...
            assert (await raw.exchange(SC_PAIRING_REQUEST))[0] == 0x02
            first_key = await raw.exchange(bytes([0x0C]) + p256_public_key())
            assert first_key is not None and first_key[0] == 0x0C and len(first_key) == 65, first_key
            confirm = await raw.next_pdu()
            assert confirm is not None and confirm[0] == 0x03, confirm   # Cb (Just Works, 2.3.5.6.2)
            raw.send(bytes([0x05, 0x08]))
            # ... then send it back as the central's own in the next one.
            assert (await raw.exchange(SC_PAIRING_REQUEST))[0] == 0x02
            second_key = await raw.exchange(first_key)
            assert second_key is not None and second_key[0] == 0x0C, second_key
            assert second_key[1:33] != first_key[1:33], "blemu reused its key pair: a reflection could match it"
            assert (await raw.next_pdu())[0] == 0x03
            nb = await raw.exchange(bytes([0x04]) + bytes(16))                # Pairing Random Na
            assert nb is not None and nb[0] == 0x04, nb
            # Without the private key of `first_key`, no DHKey: any Ea is wrong.
            assert await raw.exchange(bytes([0x0D]) + bytes(16)) == bytes([0x05, 0x0B])
            assert blemu.exited() is None

            # Nothing was kept, and the link still pairs (after the 2 s repeated-attempts wait
            # the DHKey Check failure started, 2.3.6).
            assert not any("paired with" in entry.message for entry in blemu.events("paired"))
            raw.restore()
            await asyncio.sleep(2.5)
            await raw.conn.connection.pair()
            assert raw.conn.connection.is_encrypted
            await raw.conn.disconnect()

    try:
        run(scenario(), timeout=60)
    finally:
        stop(blemu)


@pytest.mark.slow
def test_smp_timeout_ends_smp_on_the_link_and_a_new_link_pairs(rootcanal, tmp_path):
    """SLOW (about 32 s: the spec's timer). A central that starts pairing and then never
    answers: after 30 s the SMP timeout ends SMP on that link (Vol 3, Part H, 3.4: "No further
    SMP commands shall be sent over the L2CAP Security Manager Channel. A new Pairing process
    shall only be performed when a new physical link has been established"), so a Pairing
    Request on it gets no answer; blemu stays up and a new link pairs normally."""
    blemu = start(rootcanal, "Slow", tmp_path / "state")

    async def scenario():
        async with raw_smp(blemu, "raw-silent-central") as raw:
            assert (await raw.exchange(SC_PAIRING_REQUEST))[0] == 0x02
            # The central never sends its public key. blemu's timer runs out at 30 s.
            assert await raw.next_pdu(timeout=33) is None, "blemu sent SMP after the pairing stalled"
            assert any("30 s" in entry.message or "timeout" in entry.message.lower()
                       for entry in blemu.events("pairing-failed")), blemu.log_tail()
            # SMP is over on this link: a new Pairing Request is not answered.
            raw.send(SC_PAIRING_REQUEST)
            assert await raw.next_pdu(timeout=3) is None, "SMP answered after its timeout on the same link"
            assert blemu.exited() is None
            await raw.conn.disconnect()
        # A new link pairs normally.
        async with central_for(blemu, "after-timeout") as central:
            central.device.pairing_config_factory = pairing(sc=True)
            conn = await connect(central, blemu)
            await conn.connection.pair()
            assert conn.connection.is_encrypted
            await conn.disconnect()

    try:
        run(scenario(), timeout=90)
    finally:
        stop(blemu)


def test_legacy_passkey_entry_with_the_static_passkey(rootcanal, tmp_path):
    """An old central (LE legacy pairing, Bumble with sc=False) types the device's static
    passkey: legacy Passkey Entry (Vol 3, Part H, 2.3.5.3), the TK is the passkey, c1 and s1
    make an authenticated STK, and the LTK the device distributes is authenticated too."""
    blemu = start(rootcanal, "LP", tmp_path, "--passkey", str(PASSKEY))
    delegate = Keyboard(PASSKEY)

    async def scenario():
        async with central_for(blemu, "legacy-passkey-central") as central:
            central.device.keystore = MemoryKeyStore()
            central.device.pairing_config_factory = pairing(sc=False, mitm=True, delegate=delegate)
            conn = await connect(central, blemu)
            await conn.connection.pair()
            assert conn.connection.is_encrypted
            assert conn.connection.authenticated, "a typed passkey gives an authenticated key"
            assert delegate.asked == 1
            await conn.disconnect()
        paired = blemu.wait_for_event("paired")
        message = paired[0].message
        assert "LE legacy" in message and "authenticated" in message and "unauthenticated" not in message, paired[0].line
        assert bond_file(tmp_path)["bonds"][0]["secureConnections"] is False

    try:
        run(scenario(), timeout=60)
    finally:
        stop(blemu)


def test_a_central_that_did_not_bond_subscribes_again_on_each_link(rootcanal, tmp_path):
    """CCCDs are kept only for bonded centrals (Vol 3, Part G, 3.3.3.3): a central that paired
    without bonding and comes back gets no notifications until it subscribes again, and no
    bond is written."""
    blemu = start(rootcanal, "NB", tmp_path)
    address = hci.Address.generate_static_address()

    async def scenario():
        async with central_for(blemu, "unbonded-central", address) as central:
            central.device.keystore = MemoryKeyStore()
            central.device.pairing_config_factory = lambda _connection: PairingConfig(
                sc=True, mitm=False, bonding=False, delegate=PairingDelegate(PairingDelegate.NO_OUTPUT_NO_INPUT))
            conn = await connect(central, blemu)
            await conn.connection.pair()
            assert conn.connection.is_encrypted
            await conn.discover_all()
            measurement = conn.characteristic(UUID_HEART_RATE_MEASUREMENT, UUID_HEART_RATE_SERVICE)
            await conn.subscribe(measurement)
            await collect_notifications(conn, measurement.handle, 1, 5.0)
            await conn.disconnect()
            paired = blemu.wait_for_event("paired")
            assert "not bonded (the central did not ask to bond)" in paired[0].message, paired[0].line
            blemu.wait_for_event("disconnected")

            conn = await connect(central, blemu)
            await conn.discover_all()
            measurement = conn.characteristic(UUID_HEART_RATE_MEASUREMENT, UUID_HEART_RATE_SERVICE)
            await asyncio.sleep(3.5)  # the sensor notifies every second to a subscriber
            assert not [n for n in conn.notifications if n.handle == measurement.handle], \
                "notifications without subscribing again: the CCCD of a central that did not bond was kept"
            await conn.subscribe(measurement)
            await collect_notifications(conn, measurement.handle, 1, 5.0)
            await conn.disconnect()
        bonds = [name for name in os.listdir(tmp_path) if name.startswith("bonds-")]
        assert not bonds or bond_file(tmp_path)["bonds"] == [], f"a bond was written: {bonds}"

    try:
        run(scenario(), timeout=60)
    finally:
        stop(blemu)


def test_bonds_forgotten_through_the_control_socket_while_running(rootcanal, tmp_path):
    """`blemu ctl PATH bonds DEVICE` lists the running device's bonds (no key); `bonds DEVICE
    forget ADDRESS` forgets the central's bond in the running blemu, as a "clear pairings"
    button: the bond file no longer has it, and the same central, coming back with its old key,
    gets the negative reply (key missing) and must pair again, which works. The central uses
    private addresses, so its IRK was in the controller's resolving list: the entry goes too
    (LE Remove Device From Resolving List, advertising stopped for it)."""
    import tempfile

    from harness import run_cli

    path = os.path.join(tempfile.mkdtemp(prefix="blemu-bf-", dir="/tmp"), "control.sock")
    blemu = start(rootcanal, "BF", tmp_path, "--control", path)
    address = hci.Address.generate_static_address()
    keystore = MemoryKeyStore()

    def ctl(*args: str):
        return run_cli(["ctl", path, *args], timeout=10.0)

    async def in_thread(*args: str):
        return await asyncio.get_running_loop().run_in_executor(None, lambda: ctl(*args))

    async def scenario():
        async with Central(blemu.controller, name="forgotten-central", address=address, privacy_irk=os.urandom(16)) as central:
            central.device.keystore = keystore
            central.device.pairing_config_factory = pairing(sc=True)
            conn = await connect(central, blemu)
            await conn.connection.pair()
            assert conn.connection.is_encrypted
            keys = await keystore.get(str(blemu.scan.address))
            ltk_hex = keys.ltk.value.hex()
            await conn.disconnect()
            blemu.wait_for_event("disconnected")

            listed = await in_thread("bonds", "heart-rate")
            assert listed.returncode == 0, listed.describe()
            bonds = json.loads(listed.stdout)["bonds"]
            assert len(bonds) == 1 and bonds[0]["irk"] is True and bonds[0]["identity"], listed.stdout
            # Bumble's identity address: its controller's public address.
            central_address = bonds[0]["identity"]
            assert bonds[0]["secure_connections"] is True and bonds[0]["key_size"] == 16
            assert "LE Secure Connections, unauthenticated, 16-octet key" in bonds[0]["summary"]
            assert ltk_hex not in listed.stdout.lower()

            forgot = await in_thread("bonds", "heart-rate", "forget", central_address)
            assert forgot.returncode == 0, forgot.describe()
            reply = json.loads(forgot.stdout)
            assert [bond["identity"] for bond in reply["forgotten"]] == [central_address] and reply["links_kept"] == 0, reply
            assert reply["resolving_list_removed"] == 1, reply
            assert bond_file(tmp_path)["bonds"] == []
            assert any("forgot 1 bond(s)" in entry.message for entry in blemu.events("control-command"))
            again = await in_thread("bonds", "heart-rate", "forget", central_address)
            assert again.returncode != 0 and "has no bond with" in again.stdout, again.describe()
            assert json.loads((await in_thread("bonds", "heart-rate")).stdout)["bonds"] == []

            # The central comes back with its old key: refused, the link stays unencrypted.
            conn = await connect(central, blemu)
            with pytest.raises(Exception):
                await conn.connection.encrypt()
            assert not conn.connection.is_encrypted
            await conn.disconnect()
            blemu.wait_for_event("key-missing")

            # Pairing again works, and makes a new bond.
            conn = await connect(central, blemu)
            await conn.connection.pair()
            assert conn.connection.is_encrypted
            await conn.disconnect()
            blemu.wait_for_event("disconnected")
            relisted = json.loads((await in_thread("bonds", "heart-rate")).stdout)["bonds"]
            assert [bond["identity"] for bond in relisted] == [central_address]
            assert len(bond_file(tmp_path)["bonds"]) == 1

    def removed() -> bool:
        return any("resolving list" in entry.line and "removed (bond forgotten" in entry.line for entry in blemu.log_entries())

    try:
        run(scenario(), timeout=90)
        assert removed(), blemu.log_tail()
        # Re-paired: the central's IRK is back in the list.
        assert sum("resolving list" in entry.line and "added" in entry.line for entry in blemu.log_entries()) == 2, blemu.log_tail()
    finally:
        stop(blemu)
