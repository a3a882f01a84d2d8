"""Privacy, signed writes and robust caching for bonded centrals (Docs/SECURITY.md), checked from
the outside by Bumble centrals on rootcanal's radio:

- with --privacy the device advertises from resolvable private addresses made from its IRK
  (Vol 6, Part B, 1.3.2.2), renewed every --rpa-timeout and at every start; a central that
  bonded got the IRK and identity address (Vol 3, Part H, 3.6.4, 3.6.5), resolves each new
  address with it (ah computed here with `cryptography`, not Bumble's) and reconnects encrypted
  with its bond; an observer without the IRK sees unrelated addresses and the same payload;
- a Signed Write Command (Vol 3, Part F, 3.4.5.4) from a bonded central on an unencrypted link,
  signed here with `cryptography`'s CMAC and the CSRK it distributed, reaches the device; a
  replay, an old counter and a bad signature do not (Vol 3, Part C, 10.4.2);
- a bonded robust-caching client (Vol 3, Part G, 2.5.2.1) that was away while the database
  changed gets Database Out Of Sync (0x12) until it reads the Database Hash; its Client
  Supported Features survive a restart and cannot be cleared (0x13, 7.2).
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
import struct
import subprocess
import time

from bumble import att, hci
from bumble.core import UUID
from bumble.keys import MemoryKeyStore
from bumble.pairing import PairingConfig, PairingDelegate
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.cmac import CMAC

from bumble_central import (
    UUID_BODY_SENSOR_LOCATION,
    UUID_DATABASE_HASH,
    UUID_GATT_SERVICE,
    UUID_HEART_RATE_SERVICE,
    Central,
    error_code_of,
)
from harness import BlemuProcess, blemu_binary, find_each, run, start_advertising, unique_name

UUID_CLIENT_SUPPORTED_FEATURES = UUID.from_16_bits(0x2B29)
ATT_DATABASE_OUT_OF_SYNC = 0x12
ATT_VALUE_NOT_ALLOWED = 0x13
KEYS_WITH_SIGNING = (PairingDelegate.KeyDistribution.DISTRIBUTE_ENCRYPTION_KEY
                     | PairingDelegate.KeyDistribution.DISTRIBUTE_IDENTITY_KEY
                     | PairingDelegate.KeyDistribution.DISTRIBUTE_SIGNING_KEY)


def pairing(_connection) -> PairingConfig:
    delegate = PairingDelegate(PairingDelegate.NO_OUTPUT_NO_INPUT,
                               local_initiator_key_distribution=KEYS_WITH_SIGNING,
                               local_responder_key_distribution=KEYS_WITH_SIGNING)
    return PairingConfig(sc=True, mitm=False, bonding=True, delegate=delegate)


def start(rootcanal, label: str, state_dir, *extra: str, name: str | None = None, device: str = "heart-rate") -> BlemuProcess:
    process = BlemuProcess(rootcanal.controller_spec, name or unique_name(label), device=device,
                           extra_args=["--state-dir", str(state_dir), *extra])
    return start_advertising(process, rootcanal)


def stop(process: BlemuProcess) -> None:
    assert process.stop() == 0, f"blemu did not stop cleanly:\n{process.log_tail()}"


def state_file(state_dir, prefix: str) -> dict:
    files = [n for n in os.listdir(state_dir) if n.startswith(prefix) and n.endswith(".json")]
    assert len(files) == 1, f"one {prefix} file expected in {state_dir}: {os.listdir(state_dir)}"
    path = os.path.join(state_dir, files[0])
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, f"{path} is not mode 600"
    with open(path) as file:
        return json.load(file)


# -- the spec's functions, computed here independently of blemu and of Bumble ----------------

def aes(key_le: bytes, block_le: bytes) -> bytes:
    """e (Vol 3, Part H, 2.2.1): AES-128 with the spec's most-significant-first order; values here
    are little-endian as on the air."""
    encryptor = Cipher(algorithms.AES(key_le[::-1]), modes.ECB()).encryptor()
    return (encryptor.update(block_le[::-1]) + encryptor.finalize())[::-1]


def resolves(address: hci.Address, irk_le: bytes) -> bool:
    """Vol 6, Part B, 1.3.2.3: hash (the 24 least significant bits) == ah(IRK, prand)."""
    raw = bytes(address.address_bytes)   # little-endian
    prand, hash_ = raw[3:6], raw[0:3]
    if prand[2] & 0xC0 != 0x40:
        return False
    return aes(irk_le, prand + bytes(13))[0:3] == hash_


def signature(message: bytes, counter: int, csrk_le: bytes) -> bytes:
    """Vol 3, Part H, 2.4.5: SignCounter || MAC, MAC = the 64 most significant bits of
    AES-CMAC(CSRK, m || SignCounter); on the air little-endian."""
    signed = message + struct.pack("<I", counter)
    mac = CMAC(algorithms.AES(csrk_le[::-1]))
    mac.update(signed[::-1])
    t = mac.finalize()
    return struct.pack("<I", counter) + t[:8][::-1]


async def scan_for_new_address(central: Central, name: str, not_in: set[str], timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = await central.scan_for(name, timeout=max(1.0, deadline - time.monotonic()))
        if str(result.address) not in not_in:
            return result
        await asyncio.sleep(0.5)
    raise AssertionError(f"{name} kept advertising from {not_in} for {timeout} s")


def test_a_bonded_central_resolves_each_private_address_and_reconnects_encrypted(rootcanal, tmp_path):
    state_dir = tmp_path / "state"
    blemu = start(rootcanal, "RPA", state_dir, "--privacy", "--rpa-timeout", "3")
    central_address = hci.Address.generate_static_address()
    keystore = MemoryKeyStore()
    first = blemu.scan
    assert first is not None

    identity = state_file(state_dir, "identity-")
    identity_address = identity["address"]
    irk = bytes.fromhex(identity["irk"])
    assert str(first.address).replace("/P", "") != identity_address, "the identity address is advertised"
    # The observer's view: a random address whose two top bits are 01 (Vol 6, Part B, 1.3.2.2).
    assert first.address.is_random and first.address.is_resolvable, f"{first.address} is not a resolvable private address"
    assert resolves(first.address, irk)

    async def scenario() -> set[str]:
        async with Central(blemu.controller, name="rpa-central", address=central_address) as central:
            central.device.keystore = keystore
            central.device.pairing_config_factory = pairing
            conn = await central.connect(first.address)
            await conn.connection.pair()
            assert conn.connection.is_encrypted
            await conn.disconnect()
            blemu.wait_for_event("disconnected")

            # What the central received: our IRK and identity address (Vol 3, Part H, 3.6.4, 3.6.5).
            keys = await keystore.get(identity_address)
            assert keys is not None and keys.irk is not None, f"no keys under {identity_address}: {await keystore.get_all()}"
            assert keys.irk.value == irk, "the IRK distributed is not the one in the identity file"
            assert not resolves(first.address, bytes(16)) and not resolves(first.address, os.urandom(16))

            # The timer renews the address; a bonded central resolves the new one.
            seen = {str(first.address)}
            second = await scan_for_new_address(central, blemu.name, seen)
            seen.add(str(second.address))
            assert resolves(second.address, keys.irk.value), f"{second.address} does not resolve with the IRK"
            # Nothing but the address changed: the payload is what the device advertises anyway,
            # and the identity address is in none of it.
            assert (second.adv_data, second.scan_response) == (first.adv_data, first.scan_response)
            for payload in (second.adv_data or b"", second.scan_response or b""):
                assert hci.Address(identity_address).address_bytes not in payload
            events = [e for e in blemu.events("address-changed")]
            assert len(events) >= 2, "renewals are logged (debug)"

            # Back with the bond: Bumble resolves the address to the identity and encrypts with its LTK.
            await central.device.refresh_resolving_list()
            conn = await central.connect(second.address)
            assert str(conn.connection.peer_address).replace("/P", "") == identity_address, conn.connection.peer_address
            await conn.connection.encrypt()
            assert conn.connection.is_encrypted
            await conn.discover_all()
            assert await conn.read(conn.characteristic(UUID_BODY_SENSOR_LOCATION, UUID_HEART_RATE_SERVICE)) == bytes([1])
            await conn.disconnect()
            return seen

    try:
        seen = run(scenario(), timeout=120)
        changes = blemu.events("encryption-changed")
        assert any("bonded" in e.message for e in changes), [e.line for e in changes]
        assert len(blemu.events("paired")) == 1, "the reconnection paired again"
    finally:
        stop(blemu)

    # A restart keeps the IRK (the identity file) but starts from a new address.
    again = start(rootcanal, "RPA", state_dir, "--privacy", name=blemu.name)
    try:
        assert str(again.scan.address) not in seen
        assert resolves(again.scan.address, irk)
        assert state_file(state_dir, "identity-")["irk"] == identity["irk"]
    finally:
        stop(again)


SIGNED_SERVICE = "6b1e0000-3c2d-4e5f-8a9b-0c1d2e3f4a5b"
SIGNED_VALUE = "6b1e0001-3c2d-4e5f-8a9b-0c1d2e3f4a5b"


def test_signed_writes_from_a_bonded_central_are_verified(rootcanal, tmp_path):
    profile = tmp_path / "signed.json"
    profile.write_text(json.dumps({"format": "blemu-gatt-profile", "version": 1, "name": "Signed", "services": [
        {"uuid": SIGNED_SERVICE, "characteristics": [{"uuid": SIGNED_VALUE, "properties": ["read", "signed-write"], "value": "00"}]}]}))
    state_dir = tmp_path / "state"
    blemu = start(rootcanal, "SIG", state_dir, device=str(profile))
    central_address = hci.Address.generate_static_address()
    keystore = MemoryKeyStore()

    async def scenario():
        async with Central(blemu.controller, name="signing-central", address=central_address) as central:
            central.device.keystore = keystore
            central.device.pairing_config_factory = pairing
            conn = await central.connect(blemu.scan.address)
            await conn.connection.pair()
            await conn.disconnect()
            blemu.wait_for_event("disconnected")
            bonds = state_file(state_dir, "bonds-")["bonds"]
            assert len(bonds) == 1 and bonds[0].get("csrk"), f"the central's CSRK was not kept: {bonds}"
            # Bumble distributes its CSRK as it sent it; the test signs with the same key.
            csrk = bytes.fromhex(bonds[0]["csrk"])

            # Back without encrypting: the signature is what authenticates the value.
            conn = await central.connect(blemu.scan.address)
            assert not conn.connection.is_encrypted
            await conn.discover_all()
            characteristic = conn.characteristic(UUID(SIGNED_VALUE), UUID(SIGNED_SERVICE))
            assert characteristic.properties & 0x40, "the characteristic does not declare Authenticated Signed Writes"
            handle = characteristic.handle

            def signed_write(value: bytes, counter: int, *, corrupt: bool = False) -> bytes:
                message = bytes([0xD2]) + struct.pack("<H", handle) + value
                sig = bytearray(signature(message, counter, csrk))
                if corrupt:
                    sig[-1] ^= 0x01
                pdu = message + bytes(sig)
                conn.connection.send_l2cap_pdu(att.ATT_CID, pdu)
                return pdu

            first = signed_write(b"\x2a", 1)
            assert await conn.read(characteristic) == b"\x2a", "a verified signed write did not reach the device"
            signed_write(b"\x2b", 2)
            assert await conn.read(characteristic) == b"\x2b"
            conn.connection.send_l2cap_pdu(att.ATT_CID, first)          # a replay
            assert await conn.read(characteristic) == b"\x2b", "a replayed signed write was taken"
            signed_write(b"\x2c", 3, corrupt=True)                      # a bad signature
            assert await conn.read(characteristic) == b"\x2b", "a bad signature was taken"
            signed_write(b"\x2d", 3)                                    # the bad one did not spend 3
            assert await conn.read(characteristic) == b"\x2d"
            await conn.disconnect()

    try:
        run(scenario(), timeout=90)
        blemu.wait_for_event("disconnected", count=2)
        ignored = [line for line in blemu.log_path.read_text().splitlines() if "signed write to handle" in line]
        assert len(ignored) == 2, ignored
        assert "a replay" in ignored[0] and "does not verify" in ignored[1], ignored
        assert state_file(state_dir, "bonds-")["bonds"][0]["signCounter"] == 3
    finally:
        stop(blemu)
    listed = subprocess.run([str(blemu_binary()), "bonds", "list", "--state-dir", str(state_dir)],
                            capture_output=True, text=True, timeout=20)
    assert "signs writes (SignCounter 3)" in listed.stdout, listed.stdout + listed.stderr
    assert csrk_hex_absent(listed.stdout, state_dir), "a key in `blemu bonds list`"


def csrk_hex_absent(text: str, state_dir) -> bool:
    bond = state_file(state_dir, "bonds-")["bonds"][0]
    return all(bond[key] not in text for key in ("csrk", "ltk") if bond.get(key))


def test_a_bonded_robust_caching_client_is_out_of_sync_after_a_change_while_away(rootcanal, tmp_path):
    control_path = str(tmp_path / "control.sock")
    state_dir = tmp_path / "state"
    name = unique_name("RC")
    blemu = start(rootcanal, "RC", state_dir, "--control", control_path, name=name)
    central_address = hci.Address.generate_static_address()
    keystore = MemoryKeyStore()

    def ctl(*args: str) -> None:
        result = subprocess.run([str(blemu_binary()), "ctl", control_path, *args], capture_output=True, text=True, timeout=20)
        assert result.returncode == 0, result.stderr + result.stdout

    async def first_visit() -> int:
        async with Central(blemu.controller, name="caching-central", address=central_address) as central:
            central.device.keystore = keystore
            central.device.pairing_config_factory = pairing
            conn = await central.connect(blemu.scan.address)
            await conn.connection.pair()
            await conn.discover_all()
            await conn.write(conn.characteristic(UUID_CLIENT_SUPPORTED_FEATURES, UUID_GATT_SERVICE), b"\x01")
            location = conn.characteristic(UUID_BODY_SENSOR_LOCATION, UUID_HEART_RATE_SERVICE).handle
            await conn.disconnect()
            return location

    async def second_visit(location: int) -> None:
        async with Central(blemu.controller, name="caching-central", address=central_address) as central:
            central.device.keystore = keystore
            conn = await central.connect(blemu.scan.address)
            # The client's first request after the change, before it knows: 0x12 (Vol 3, Part G, 2.5.2.1).
            response = await conn.request(att.ATT_Read_Request(attribute_handle=location))
            assert response.op_code == att.Opcode.ATT_ERROR_RESPONSE, response
            assert response.error_code == ATT_DATABASE_OUT_OF_SYNC, response
            # Reading the Database Hash makes it change-aware.
            response = await conn.request(att.ATT_Read_By_Type_Request(
                starting_handle=0x0001, ending_handle=0xFFFF, attribute_type=UUID_DATABASE_HASH))
            assert response.op_code == att.Opcode.ATT_READ_BY_TYPE_RESPONSE, response
            await conn.discover_all()
            assert await conn.read(conn.characteristic(UUID_BODY_SENSOR_LOCATION, UUID_HEART_RATE_SERVICE)) == bytes([1])
            await conn.disconnect()

    async def after_restart(again: BlemuProcess) -> None:
        async with Central(again.controller, name="caching-central", address=central_address) as central:
            central.device.keystore = keystore
            conn = await central.connect(again.scan.address)
            await conn.connection.encrypt()
            # The restart brought the Battery service back: out of sync again until it reads the hash.
            response = await conn.request(att.ATT_Read_By_Type_Request(
                starting_handle=0x0001, ending_handle=0xFFFF, attribute_type=UUID_DATABASE_HASH))
            assert response.op_code == att.Opcode.ATT_READ_BY_TYPE_RESPONSE, response
            await conn.discover_all()
            features = conn.characteristic(UUID_CLIENT_SUPPORTED_FEATURES, UUID_GATT_SERVICE)
            assert await conn.read(features) == b"\x01", "the bonded client's features did not survive the restart"
            try:
                await conn.write(features, b"\x00")
            except att.ATT_Error as error:
                assert error_code_of(error) == ATT_VALUE_NOT_ALLOWED, error
            else:
                raise AssertionError("a bonded client cleared its Robust Caching bit")
            await conn.disconnect()

    try:
        location = run(first_visit(), timeout=60)
        blemu.wait_for_event("disconnected")
        assert state_file(state_dir, "bonds-")["bonds"][0].get("clientFeatures") == 1
        ctl("service", "heart-rate", "180F", "off")   # the Battery service goes while it is away
        run(second_visit(location), timeout=60)
    finally:
        stop(blemu)
    again = start(rootcanal, "RC", state_dir, name=name)
    try:
        run(after_restart(again), timeout=60)
    finally:
        stop(again)


def test_devices_sharing_a_controller_each_advertise_from_their_own_private_addresses(rootcanal, blemu_factory, tmp_path):
    """Two devices on one controller, each in its own extended advertising set: each set gets
    its own resolvable private address (LE Set Advertising Set Random Address, Vol 4, Part E,
    7.8.52), made from its own device's IRK."""
    base = unique_name("SP")
    state_dir = tmp_path / "state"
    blemu = blemu_factory.start(None, wait_advertising=False, devices=["heart-rate", "thermostat"],
                                extra_args=["--share-controller", "--name", base, "--privacy", "--state-dir", str(state_dir)])
    names = [f"{base} heart-rate", f"{base} thermostat"]

    async def scenario():
        async with Central(rootcanal.controller_spec, name="shared-privacy-scanner") as scanner:
            # By the address blemu says each set advertises from: rootcanal answers scan requests
            # for one set at a time, so the scan response with a name may be slow to come.
            return await find_each(scanner, blemu, names)

    seen = run(scenario(), timeout=60)
    irks = {}
    for name in os.listdir(state_dir):
        if name.startswith("identity-"):
            with open(state_dir / name) as file:
                irks[name] = bytes.fromhex(json.load(file)["irk"])
    assert len(irks) == 2, f"one identity per device: {os.listdir(state_dir)}"
    hr_irk = next(irk for name, irk in irks.items() if "heart-rate" in name)
    th_irk = next(irk for name, irk in irks.items() if "thermostat" in name)
    assert hr_irk != th_irk
    heart_rate, thermostat = seen
    assert heart_rate.address != thermostat.address
    assert resolves(heart_rate.address, hr_irk) and not resolves(heart_rate.address, th_irk)
    assert resolves(thermostat.address, th_irk) and not resolves(thermostat.address, hr_irk)


def test_a_central_with_private_addresses_is_recognised_through_the_controllers_resolving_list(rootcanal, tmp_path):
    """rootcanal has LL Privacy (LE feature bit 6, a resolving list of 16): the central's IRK goes
    into it when it bonds, and the next link, from a new private address, comes with the
    central's identity (LE Enhanced Connection Complete, Peer_Address_Type 0x03)."""
    state_dir = tmp_path / "state"
    blemu = start(rootcanal, "RL", state_dir)
    identity = hci.Address.generate_static_address()
    irk = os.urandom(16)
    keystore = MemoryKeyStore()

    async def visit(first: bool) -> str:
        async with Central(blemu.controller, name="rl-central", address=identity, privacy_irk=irk) as central:
            central.device.keystore = keystore
            central.device.pairing_config_factory = pairing
            shown = central.device.random_address
            assert shown.is_random and shown.is_resolvable, f"{shown} is not a resolvable private address"
            conn = await central.connect(blemu.scan.address)
            if first:
                await conn.connection.pair()
            else:
                await conn.connection.encrypt()
            assert conn.connection.is_encrypted
            await conn.disconnect()
            return str(shown).replace("/P", "").upper()

    def messages() -> list[str]:
        return [entry.line for entry in blemu.log_entries()]

    try:
        first = run(visit(True), timeout=60)
        blemu.wait_for_event("disconnected")
        # The identity the central distributed (Bumble's: its controller's public address).
        paired = blemu.events("paired")
        assert len(paired) == 1, blemu.log_tail()
        identity_text = paired[0].message.split("paired with ", 1)[1][:17].upper()
        assert any("resolving list" in line and identity_text in line.upper() and "added" in line for line in messages()), \
            blemu.log_tail()
        second = run(visit(False), timeout=60)
        blemu.wait_for_event("disconnected", count=2)
        assert first != second, "the central showed the same private address twice"
        resolved = [line for line in messages() if "controller resolved" in line]
        assert any(second in line.upper() and identity_text in line.upper() for line in resolved), blemu.log_tail()
        assert len(blemu.events("paired")) == 1, "the reconnection paired again"
        changes = blemu.events("encryption-changed")
        assert any("bonded" in e.message for e in changes), [e.line for e in changes]
    finally:
        stop(blemu)
