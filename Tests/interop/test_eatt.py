"""Enhanced ATT (Core 5.4, Vol 3, Part G, 3.6; Part F, 3.2.11), checked from the outside: Bumble
as an EATT client (`gatt_client.Client.connect_eatt`) against blemu's GATT server, and blemu's
client (`blemu gatt --eatt`) against Bumble's EATT server and blemu's own. The server
says it supports EATT (Server Supported Features, 0x2B3A, bit 0), refuses enhanced bearers on
an unencrypted link (Insufficient Encryption, 0x0008), and after pairing serves requests on
each enhanced bearer with that bearer's own ATT_MTU (the channel's).
"""

from __future__ import annotations

import asyncio
import json
import re

import pytest
from bumble import att, gatt, l2cap
from bumble.core import UUID
from bumble.device import Device, DeviceConfiguration
from bumble.gatt_client import Client
from bumble.hci import Address
from bumble.keys import MemoryKeyStore
from bumble.pairing import PairingConfig, PairingDelegate
from bumble.transport import open_transport

from harness import BlemuProcess, passkey_of, run, run_cli, start_advertising, unique_name
from harness import connected as central_on

UUID_SERVER_SUPPORTED_FEATURES = UUID.from_16_bits(0x2B3A)
UUID_DEVICE_NAME = UUID.from_16_bits(0x2A00)


@pytest.fixture(scope="module")
def device(rootcanal):
    process = start_advertising(BlemuProcess(rootcanal.controller_spec, unique_name("EA"), device="heart-rate"), rootcanal)
    yield process
    if process.exited() is not None:
        pytest.fail(f"blemu died during the tests: {process.exited()}", pytrace=False)
    assert process.stop() == 0, f"blemu did not stop cleanly:\n{process.log_tail()}"


def spec(mtu: int) -> l2cap.LeCreditBasedChannelSpec:
    return l2cap.LeCreditBasedChannelSpec(psm=att.EATT_PSM, mtu=mtu, mps=mtu, max_credits=8)


async def find_information(client: Client) -> int:
    """Find Information over the whole database: how many (handle, UUID) pairs one response
    carries, which only the bearer's ATT_MTU limits (Vol 3, Part F, 3.4.3.2)."""
    response = await client.send_request(att.ATT_Find_Information_Request(starting_handle=1, ending_handle=0xFFFF))
    assert response.op_code == att.Opcode.ATT_FIND_INFORMATION_RESPONSE, str(response)
    return len(response.information)


def test_eatt_is_refused_before_encryption_and_served_per_bearer_after(device):
    async def scenario():
        async with central_on(device, "eatt-client") as conn:
            gatt = conn.connection.gatt_client
            features = await gatt.read_characteristics_by_uuid(UUID_SERVER_SUPPORTED_FEATURES, None)
            assert features and features[0][0] & 0x01, f"Server Supported Features: {features}"

            # Vol 3, Part G, 3.6: enhanced bearers only on an encrypted link.
            with pytest.raises(Exception) as refused:
                await Client.connect_eatt(conn.connection, spec(64))
            assert "0x0008" in str(refused.value) or "ENCRYPTION" in str(refused.value).upper(), str(refused.value)

            await conn.connection.pair()
            assert conn.connection.is_encrypted
            small = await Client.connect_eatt(conn.connection, spec(64))
            large = await Client.connect_eatt(conn.connection, spec(512))

            # A request on each bearer at once: each answered on its own bearer.
            names = await asyncio.wait_for(asyncio.gather(
                small.read_characteristics_by_uuid(UUID_DEVICE_NAME, None),
                large.read_characteristics_by_uuid(UUID_DEVICE_NAME, None)), 20)
            assert names[0] == names[1] and names[0], names
            assert names[0][0].decode() == device.name

            # Each bearer's ATT_MTU is its channel's: 64 fits (64 - 2) / 4 = 15 pairs, 512 more.
            on_small, on_large = await asyncio.wait_for(asyncio.gather(find_information(small), find_information(large)), 20)
            assert on_small == 15, on_small
            assert on_large > 15, on_large

            # The unenhanced bearer still serves too.
            assert (await gatt.read_characteristics_by_uuid(UUID_DEVICE_NAME, None))[0] == names[0][0]
    run(scenario(), timeout=90)


# blemu's GATT client over enhanced bearers (`blemu gatt --eatt`): against Bumble's EATT
# server, and against blemu's own.

def gatt_cli(rootcanal, *args: str, timeout: float = 60.0):
    return run_cli(["gatt", "--controller", rootcanal.controller_spec, *args], timeout=timeout)


def eatt_summary(stderr: str) -> dict:
    """The `--json` line on stderr saying how many bearers carried the reads."""
    for line in stderr.splitlines():
        if line.startswith('{"eatt"'):
            return json.loads(line)["eatt"]
    raise AssertionError(f"no eatt line on stderr:\n{stderr}")


BUMBLE_SERVICE = "5e6a0001-1f2d-4c3b-8a79-0b1c2d3e4f50"
BUMBLE_VALUES = [f"5e6a00{index:02x}-1f2d-4c3b-8a79-0b1c2d3e4f50" for index in range(0x10, 0x16)]


def test_blemu_gatt_reads_over_bumbles_enhanced_bearers_after_pairing(rootcanal, tmp_path):
    """Bumble with EATT on (Server Supported Features bit 0, its EATT server on PSM 0x0027):
    `blemu gatt --pair read U1..U6` pairs, writes Client Supported Features with the EATT bit,
    opens five enhanced bearers and spreads the six reads over the six bearers; Bumble's side
    shows reads served on several enhanced bearers (its channels on the EATT PSM)."""
    name = unique_name("BE")
    address = "F2:E4:A7:7A:00:01"

    async def scenario():
        async with await open_transport(rootcanal.controller_spec.replace("tcp:", "tcp-client:")) as (source, sink):
            config = DeviceConfiguration(name=name, address=Address(address), eatt_enabled=True)
            device = Device.from_config_with_hci(config, source, sink)
            device.keystore = MemoryKeyStore()
            device.pairing_config_factory = lambda _c: PairingConfig(
                sc=True, mitm=False, bonding=True, delegate=PairingDelegate(PairingDelegate.NO_OUTPUT_NO_INPUT))
            device.add_service(gatt.Service(BUMBLE_SERVICE, [
                gatt.Characteristic(uuid, gatt.Characteristic.Properties.READ, gatt.Characteristic.READABLE,
                                    f"value {index}".encode())
                for index, uuid in enumerate(BUMBLE_VALUES)]))
            # Which bearer served each read: the unenhanced one (a Connection) or an EATT channel.
            served: list[tuple[bool, int]] = []
            server = device.gatt_server
            plain_read = server.on_att_read_request

            def on_read(bearer, request):
                enhanced = att.is_enhanced_bearer(bearer)
                served.append((enhanced, bearer.source_cid if enhanced else 0))
                plain_read(bearer, request)
            server.on_att_read_request = on_read
            await device.power_on()
            await device.start_advertising(auto_restart=True)
            loop = asyncio.get_running_loop()
            result = await loop.run_in_executor(None, lambda: gatt_cli(
                rootcanal, "--address", address, "--state-dir", str(tmp_path), "--pair", "--json", "-v", "read", *BUMBLE_VALUES))
            assert result.returncode == 0, result.describe()
            values = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
            assert [v["uuid"].lower() for v in values] == BUMBLE_VALUES, result.stdout
            assert [v["value"] for v in values] == [f"value {index}".encode().hex() for index in range(6)], result.stdout
            assert "eatt: 5 enhanced ATT bearers open" in result.stderr, result.stderr
            summary = eatt_summary(result.stderr)
            assert summary == {"enhanced_bearers": 5, "bearers_used": 6}, summary
            on_enhanced = {cid for enhanced, cid in served if enhanced}
            assert len(on_enhanced) >= 2, f"Bumble served the reads on {served}"

    run(scenario(), timeout=120)


def test_blemu_gatt_reads_over_blemus_enhanced_bearers_and_keeps_one_with_eatt_off(rootcanal, tmp_path):
    device = start_advertising(BlemuProcess(rootcanal.controller_spec, unique_name("EC"), device="heart-rate",
                                            extra_args=["--state-dir", str(tmp_path / "dev")]), rootcanal)
    try:
        uuids = ["2A00", "2A01", "2A38", "2A19"]
        result = gatt_cli(rootcanal, "--name", device.name, "--state-dir", str(tmp_path / "c"), "--pair", "--json", "-v",
                          "read", *uuids)
        assert result.returncode == 0, result.describe()
        values = [json.loads(line) for line in result.stdout.splitlines()]
        assert [v["uuid"] for v in values] == uuids, result.stdout
        assert values[0]["value"] == device.name.encode().hex(), values[0]
        assert "eatt: 5 enhanced ATT bearers open" in result.stderr, result.stderr
        assert eatt_summary(result.stderr) == {"enhanced_bearers": 5, "bearers_used": 4}, result.stderr

        dump = gatt_cli(rootcanal, "--name", device.name, "--state-dir", str(tmp_path / "c"), "--pair", "-v", "dump")
        assert dump.returncode == 0, dump.describe()
        used = re.search(r"eatt: the reads went over (\d+) bearers \(5 enhanced\)", dump.stderr)
        assert used and int(used.group(1)) > 1, dump.stderr
        # Without -v the enhanced bearers still carry the reads, and nothing is said of them.
        quiet = gatt_cli(rootcanal, "--name", device.name, "--state-dir", str(tmp_path / "c"), "--pair", "dump")
        assert quiet.returncode == 0, quiet.describe()
        assert "eatt" not in quiet.stderr, quiet.stderr

        off = gatt_cli(rootcanal, "--name", device.name, "--state-dir", str(tmp_path / "c"), "--pair", "--eatt", "off",
                       "read", *uuids)
        assert off.returncode == 0, off.describe()
        assert "eatt" not in off.stderr, off.stderr
        assert off.stdout.count("\n") == 4, off.stdout
    finally:
        assert device.stop() == 0, device.log_tail()


def test_a_profile_dump_with_eatt_required_reads_as_a_stranger_before_pairing(rootcanal, tmp_path):
    """`dump --profile --pair --eatt require` against the lock: enhanced bearers need an encrypted
    link (Part G, 3.6), yet the stranger pass must come before the pairing, or the profile could
    not say what the lock refuses a stranger. The first reads go over the unenhanced bearer,
    the second pass over the enhanced bearers opened after pairing."""
    lock_service = "7d3c0200-9a5e-4d1a-8f6e-5c1b2d3e4f50"
    event_log = "7d3c0203-9a5e-4d1a-8f6e-5c1b2d3e4f50"
    lock = start_advertising(BlemuProcess(rootcanal.controller_spec, unique_name("EL"), device="lock",
                                          extra_args=["--state-dir", str(tmp_path / "dev")]), rootcanal)
    try:
        result = gatt_cli(rootcanal, "--name", lock.name, "--pair", "--passkey", f"{passkey_of(lock):06d}",
                          "--eatt", "require", "--state-dir", str(tmp_path / "c"), "-v", "dump", "--profile")
        assert result.returncode == 0, result.describe()
        notes = result.stderr
        assert "eatt: the first reads go over the unenhanced bearer" in notes, notes
        assert notes.index("eatt: the first reads") < notes.index("paired") < notes.index("eatt: 5 enhanced ATT bearers open"), notes
        [service] = [s for s in json.loads(result.stdout)["services"] if s["uuid"] == lock_service]
        log = {c["uuid"]: c for c in service["characteristics"]}[event_log]
        # Refused to the stranger (0x05), read after pairing: both are in the profile.
        assert log.get("permissions") == ["read-authenticated"] and bytes.fromhex(log["value"]), log
    finally:
        assert lock.stop() == 0, lock.log_tail()


def test_eatt_require_fails_against_a_peer_without_eatt(rootcanal, tmp_path):
    """A Bumble peripheral without EATT: `--eatt require` pairs, finds no EATT bit in Server
    Supported Features and ends with exit 1; `auto` reads over the one bearer."""
    name = unique_name("BN")
    address = "F2:E4:A7:7A:00:02"

    async def scenario():
        async with await open_transport(rootcanal.controller_spec.replace("tcp:", "tcp-client:")) as (source, sink):
            device = Device.with_hci(name, Address(address), source, sink)
            device.keystore = MemoryKeyStore()
            device.pairing_config_factory = lambda _c: PairingConfig(
                sc=True, mitm=False, bonding=True, delegate=PairingDelegate(PairingDelegate.NO_OUTPUT_NO_INPUT))
            await device.power_on()
            await device.start_advertising(auto_restart=True)
            loop = asyncio.get_running_loop()
            required = await loop.run_in_executor(None, lambda: gatt_cli(
                rootcanal, "--address", address, "--state-dir", str(tmp_path), "--eatt", "require", "read", "2A00"))
            assert required.returncode != 0, required.describe()
            assert "--eatt require: the peer does not support EATT" in required.stderr, required.stderr
            auto = await loop.run_in_executor(None, lambda: gatt_cli(
                rootcanal, "--address", address, "--state-dir", str(tmp_path), "--pair", "-v", "read", "2A00"))
            assert auto.returncode == 0, auto.describe()
            assert "the peer does not support EATT: one bearer" in auto.stderr, auto.stderr

    run(scenario(), timeout=120)


def test_blemu_gatt_writes_and_subscriptions_over_bumbles_enhanced_bearers(rootcanal, tmp_path):
    """Writes and CCCD subscriptions go over enhanced bearers too (any bearer may carry any
    request, Vol 3, Part G, 3.6): `blemu gatt --pair write U1 HEX ... U6 HEX` writes the six values
    at once, spread over the six bearers, and `record` subscribes to six notifying
    characteristics likewise; Bumble's side shows Write Requests (the values, and the CCCDs) on
    several enhanced bearers (its channels on the EATT PSM)."""
    name = unique_name("BW")
    address = "F2:E4:A7:7A:00:02"

    async def scenario():
        async with await open_transport(rootcanal.controller_spec.replace("tcp:", "tcp-client:")) as (source, sink):
            config = DeviceConfiguration(name=name, address=Address(address), eatt_enabled=True)
            device = Device.from_config_with_hci(config, source, sink)
            device.keystore = MemoryKeyStore()
            device.pairing_config_factory = lambda _c: PairingConfig(
                sc=True, mitm=False, bonding=True, delegate=PairingDelegate(PairingDelegate.NO_OUTPUT_NO_INPUT))
            properties = gatt.Characteristic.Properties
            characteristics = [
                gatt.Characteristic(uuid, properties.READ | properties.WRITE | properties.NOTIFY,
                                    gatt.Characteristic.READABLE | gatt.Characteristic.WRITEABLE, b"\x00")
                for uuid in BUMBLE_VALUES]
            device.add_service(gatt.Service(BUMBLE_SERVICE, characteristics))
            # Which bearer carried each Write Request: the unenhanced one (0) or an EATT channel's CID.
            written: list[tuple[int, int]] = []
            server = device.gatt_server
            plain_write = server.on_att_write_request

            def on_write(bearer, request):
                written.append((bearer.source_cid if att.is_enhanced_bearer(bearer) else 0, request.attribute_handle))
                plain_write(bearer, request)
            server.on_att_write_request = on_write
            await device.power_on()
            await device.start_advertising(auto_restart=True)
            loop = asyncio.get_running_loop()
            pairs = [part for index, uuid in enumerate(BUMBLE_VALUES) for part in (uuid, f"{0xA0 + index:02x}")]
            result = await loop.run_in_executor(None, lambda: gatt_cli(
                rootcanal, "--address", address, "--state-dir", str(tmp_path), "--pair", "--json", "-v", "write", *pairs))
            assert result.returncode == 0, result.describe()
            lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
            assert [line["uuid"].lower() for line in lines] == BUMBLE_VALUES, result.stdout
            assert [bytes(c.value) for c in characteristics] == [bytes([0xA0 + index]) for index in range(6)]
            assert eatt_summary(result.stderr) == {"enhanced_bearers": 5, "bearers_used": 6}, result.stderr
            value_handles = {c.handle for c in characteristics}
            writes = [cid for cid, handle in written if handle in value_handles]
            assert len(writes) == 6 and len({cid for cid in writes if cid}) >= 2, f"Bumble took the writes on {written}"

            written.clear()
            recorded = await loop.run_in_executor(None, lambda: gatt_cli(
                rootcanal, "--address", address, "--state-dir", str(tmp_path), "--pair", "record", "--duration", "1"))
            assert recorded.returncode == 0, recorded.describe()
            cccds = {c.handle + 1 for c in characteristics}  # each value's CCCD follows it (Bumble's layout)
            subscriptions = [cid for cid, handle in written if handle in cccds]
            assert len(subscriptions) == 6, f"Bumble took the CCCD writes on {written}"
            assert len({cid for cid in subscriptions if cid}) >= 2, f"Bumble took the CCCD writes on {written}"

    run(scenario(), timeout=150)
