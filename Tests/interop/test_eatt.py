"""Enhanced ATT (Core 5.4, Vol 3, Part G, 3.6; Part F, 3.2.11), checked from the outside: Bumble
as an EATT client (`gatt_client.Client.connect_eatt`) against blemu's GATT server. The server
says it supports EATT (Server Supported Features, 0x2B3A, bit 0), refuses enhanced bearers on
an unencrypted link (Insufficient Encryption, 0x0008), and after pairing serves requests on
each enhanced bearer with that bearer's own ATT_MTU (the channel's).
"""

from __future__ import annotations

import asyncio

import pytest
from bumble import att, l2cap
from bumble.core import UUID
from bumble.gatt_client import Client

from harness import BlemuProcess, run, start_advertising, unique_name
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
