"""L2CAP credit based channels, checked from the outside: Bumble as an independent central opens
an LE Credit Based Flow Control Mode channel (Core 5.4, Vol 3, Part A, 3.4.3, 4.22-4.24) to
blemu's `channel-echo` device, whose SPSM it reads from the ABDD3056 characteristic (the one
Core Bluetooth apps read), and checks that every SDU comes back whole.
"""

from __future__ import annotations

import asyncio
import struct

import pytest
from bumble import l2cap
from bumble.core import UUID

from harness import BlemuProcess, run, start_advertising, unique_name
from harness import connected as central_on

UUID_ECHO_SERVICE = UUID("7d3c0400-9a5e-4d1a-8f6e-5c1b2d3e4f50")
UUID_L2CAP_PSM = UUID("ABDD3056-28FA-441D-A470-55A75A52553A")


@pytest.fixture(scope="module")
def echo(rootcanal):
    process = start_advertising(BlemuProcess(rootcanal.controller_spec, unique_name("EC"), device="channel-echo"), rootcanal)
    yield process
    if process.exited() is not None:
        pytest.fail(f"blemu died during the tests: {process.exited()}", pytrace=False)
    assert process.stop() == 0, f"blemu did not stop cleanly:\n{process.log_tail()}"


async def open_channel(conn, mtu: int = 65535, mps: int = 247, credits: int = 8):
    """The SPSM from ABDD3056 (UInt16, little-endian), then an LE credit based channel to it."""
    value = await conn.read(conn.characteristic(UUID_L2CAP_PSM, UUID_ECHO_SERVICE))
    assert len(value) == 2, f"the PSM characteristic holds {value.hex()}"
    spsm = struct.unpack("<H", value)[0]
    # Vol 3, Part A, 4.22: a dynamic SPSM is 0x0080-0x00FF; blemu hands out the first free.
    assert spsm == 0x0080, f"SPSM 0x{spsm:04x}"
    channel = await conn.connection.create_l2cap_channel(
        spec=l2cap.LeCreditBasedChannelSpec(psm=spsm, mtu=mtu, mps=mps, max_credits=credits))
    received: asyncio.Queue[bytes] = asyncio.Queue()
    channel.sink = lambda sdu: received.put_nowait(bytes(sdu))
    return channel, received


def test_an_encrypted_channel_is_refused_until_the_link_is_encrypted(rootcanal, blemu_factory):
    """`encrypted: 1`: Insufficient Encryption (0x0008, Vol 3, Part A, 4.23) on a plain link; the
    same request after Just Works pairing opens the channel."""
    from test_config import write_config
    name = unique_name("EE")
    path = write_config(f"controller: {rootcanal.controller_spec}\ndevices:\n  - device: channel-echo\n    name: {name}\n"
                        f"    settings: {{ encrypted: 1 }}\n")
    blemu = blemu_factory.start(None, wait_advertising=False, devices=[], extra_args=["--config", path])
    blemu.wait_advertising(rootcanal, name=name)

    async def scenario():
        async with central_on(blemu, "coc-encrypted", discover=True) as conn:
            with pytest.raises(Exception) as refused:
                await open_channel(conn)
            assert "0x0008" in str(refused.value) or "ENCRYPTION" in str(refused.value).upper(), str(refused.value)
            await conn.connection.pair()
            assert conn.connection.is_encrypted
            channel, received = await open_channel(conn)
            channel.write(b"after pairing")
            assert await asyncio.wait_for(received.get(), 20) == b"after pairing"
    run(scenario(), timeout=90)


def test_sdus_of_1_to_65535_bytes_come_back_whole(echo):
    """Segmentation into K-frames both ways (our MPS 1020, Bumble's 247), SDUs up to the MTU,
    and credits: with 8 credits each way a 65535-byte SDU needs them given back many times."""
    async def scenario():
        async with central_on(echo, "coc-central", discover=True) as conn:
            channel, received = await open_channel(conn)
            for size in (1, 2, 245, 246, 247, 1018, 1019, 1020, 1021, 5000, 65535):
                sdu = bytes((i * 13 + size) & 0xFF for i in range(size))
                channel.write(sdu)
                echoed = await asyncio.wait_for(received.get(), 20)
                assert echoed == sdu, f"{size}-byte SDU came back as {len(echoed)} bytes"
            await channel.disconnect()
    run(scenario(), timeout=90)


def test_a_burst_waits_for_credits_and_arrives_in_order(echo):
    """Fifty writes at once: far more K-frames than either side's credits (Bumble gives 4), so
    both senders stop at zero credits and go on as credits come back (Vol 3, Part A, 10.1).
    Bumble's channel is a byte stream (it packs queued writes into SDUs up to the peer's MTU),
    so what comes back is compared as bytes, in order."""
    async def scenario():
        async with central_on(echo, "coc-burst", discover=True) as conn:
            channel, received = await open_channel(conn, credits=4)
            sent = b"".join(bytes([n]) * (300 + n) for n in range(50))
            for n in range(50):
                channel.write(bytes([n]) * (300 + n))
            echoed = b""
            while len(echoed) < len(sent):
                echoed += await asyncio.wait_for(received.get(), 20)
            assert echoed == sent, f"{len(echoed)} bytes came back for {len(sent)}"
            await channel.disconnect()
    run(scenario(), timeout=90)


def test_an_unserved_spsm_is_refused(echo):
    """Vol 3, Part A, 4.23: result 0x0002, SPSM not supported."""
    async def scenario():
        async with central_on(echo, "coc-refused") as conn:
            with pytest.raises(Exception) as refused:
                await conn.connection.create_l2cap_channel(spec=l2cap.LeCreditBasedChannelSpec(psm=0x00F0))
            assert "0x0002" in str(refused.value) or "PSM" in str(refused.value).upper(), str(refused.value)
    run(scenario(), timeout=60)


def test_five_enhanced_channels_in_one_request(echo):
    """Enhanced Credit Based Flow Control Mode (Vol 3, Part A, 4.25, 4.26): Bumble asks for five
    channels in one request; each opens and echoes what is written on it, not on the others."""
    async def scenario():
        async with central_on(echo, "ecfc-central", discover=True) as conn:
            value = await conn.read(conn.characteristic(UUID_L2CAP_PSM, UUID_ECHO_SERVICE))
            spsm = struct.unpack("<H", value)[0]
            device = conn.connection.device
            channels = await device.l2cap_channel_manager.create_enhanced_credit_based_channels(
                conn.connection, l2cap.LeCreditBasedChannelSpec(psm=spsm, mtu=4096, mps=247, max_credits=8), 5)
            assert len(channels) == 5
            queues = []
            for channel in channels:
                queue: asyncio.Queue[bytes] = asyncio.Queue()
                channel.sink = queue.put_nowait
                queues.append(queue)
            for n, channel in enumerate(channels):
                channel.write(bytes([n]) * (500 + n))
            for n, queue in enumerate(queues):
                echoed = await asyncio.wait_for(queue.get(), 20)
                assert echoed == bytes([n]) * (500 + n), f"channel {n}: {len(echoed)} bytes of {echoed[:1].hex()}"
            for channel in channels:
                await channel.disconnect()
    run(scenario(), timeout=90)


def test_the_control_socket_lists_a_channel_stalls_its_credits_and_drops_it(blemu_factory):
    """`list` shows each link's channels (CIDs, both sides' MTU/MPS, credits both ways, bytes
    queued); `fault DEVICE channel CID stall` gives Bumble no credits back, so a long SDU stops
    part way (Vol 3, Part A, 10.1: a sender never exceeds its credits) until `fault clear`;
    `drop` on the link named by its handle disconnects the channel (4.6) and Bumble's channel closes."""
    from test_control import AsyncControl, short_socket_path
    path = short_socket_path("coc")
    blemu = blemu_factory.start(unique_name("EF"), devices=["channel-echo"], extra_args=["--control", path])

    async def channels_listed(control: AsyncControl) -> list[dict]:
        connections = (await control.ok("list"))["devices"][0]["connections"]
        assert len(connections) == 1, connections
        return connections[0]["channels"]

    async def scenario():
        async with AsyncControl(path) as control, central_on(blemu, "coc-control", discover=True) as conn:
            channel, received = await open_channel(conn, mtu=65535, mps=247, credits=8)
            [listed] = await channels_listed(control)
            cid = listed["cid"]
            assert (listed["spsm"], listed["mode"], int(cid, 16), int(listed["peer_cid"], 16)) == (
                "0x0080", "le", channel.destination_cid, channel.source_cid), listed
            assert (listed["peer_mtu"], listed["peer_mps"], listed["mtu"]) == (65535, 247, 65535), listed
            # Bumble gave 8 credits; blemu gave Bumble its window (channel-echo's: 16).
            assert (listed["credits"], listed["peer_credits"], listed["queued"]) == (8, channel.credits, 0), listed
            assert listed["credits_stalled"] is False

            await control.ok("fault", device="channel-echo", action="stall-credits", cid=cid)
            # Bumble cuts it into K-frames of blemu's MPS: 8 more than the credits it holds.
            sdu = bytes(i & 0xFF for i in range(min(65535, listed["mps"] * (channel.credits + 8))))
            channel.write(sdu)
            await asyncio.sleep(1.5)
            assert received.empty(), "an SDU came back although its K-frames outnumber the credits"
            [stalled] = await channels_listed(control)
            assert stalled["credits_stalled"] is True and stalled["peer_credits"] == 0, stalled
            assert 0 < stalled["reassembling"] < len(sdu), stalled
            assert channel.credits == 0, f"Bumble holds {channel.credits} credits during the stall"

            await control.ok("fault", action="clear")
            echoed = b""
            while len(echoed) < len(sdu):
                echoed += await asyncio.wait_for(received.get(), 20)
            assert echoed == sdu

            closed = asyncio.get_running_loop().create_future()
            channel.once("close", lambda: closed.done() or closed.set_result(True))
            # The link named by its handle, as `list` shows it (CIDs are per link); a link the
            # device does not have is refused.
            handle = (await control.ok("list"))["devices"][0]["connections"][0]["handle"]
            other = await control.request("fault", device="channel-echo", action="drop-channel", cid=cid, handle=(handle + 1) % 0x0F00)
            assert other["ok"] is False and "no link with handle" in other["error"], other
            reply = await control.ok("fault", device="channel-echo", action="drop-channel", cid=cid, handle=handle)
            assert (reply["cid"], reply["handle"]) == (cid, handle), reply
            await asyncio.wait_for(closed, 10)
            assert await channels_listed(control) == []
            refused = await control.request("fault", device="channel-echo", action="drop-channel", cid=cid)
            assert refused["ok"] is False and "no open L2CAP channel" in refused["error"], refused
    run(scenario(), timeout=90)


def test_an_echo_that_can_never_go_holds_up_no_other_channel(blemu_factory):
    """An SDU longer than the peer's MTU can never be echoed (Vol 3, Part A, 3.4.3: an SDU is at
    most the receiver's MTU): channel-echo drops it with a line, and every other channel, on
    another central's link or on the same one, goes on echoing; so does the small channel itself
    with what fits, and the others after the first central left."""
    blemu = blemu_factory.start(unique_name("EB"), devices=["channel-echo"])

    async def scenario():
        async with central_on(blemu, "coc-small", discover=True) as small:
            # 23, the smallest LE MTU (4.22): blemu may send this channel SDUs of at most 23 bytes.
            tiny, tiny_received = await open_channel(small, mtu=23, mps=23)
            tiny.write(bytes(range(100)))
            async with central_on(blemu, "coc-other", discover=True) as other:
                channel, received = await open_channel(other)
                channel.write(b"from the other central")
                assert await asyncio.wait_for(received.get(), 10) == b"from the other central"
                second, second_received = await open_channel(small)
                second.write(b"same link, another channel")
                assert await asyncio.wait_for(second_received.get(), 10) == b"same link, another channel"
                tiny.write(b"fits in 23")
                assert await asyncio.wait_for(tiny_received.get(), 10) == b"fits in 23"
                await small.disconnect()
                channel.write(b"after the first central left")
                assert await asyncio.wait_for(received.get(), 10) == b"after the first central left"
    run(scenario(), timeout=90)
    dropped = [line for line in blemu.log_path.read_text(errors="replace").splitlines()
               if "SDU of 100 bytes dropped, longer than the peer's MTU 23" in line]
    assert len(dropped) == 1, blemu.log_tail()


# Docs/REFERENCE.md, Budgets: lines a peer sets the pace of, 10 a minute for a device's links.
PEER_LINE_BUDGET = 10


def test_a_flood_of_refused_channel_requests_logs_within_the_budget(blemu_factory):
    """A central that sends 2,000 LE Credit Based Connection Requests (4.22) and 1,000 enhanced
    ones (4.25) to an SPSM nobody serves gets each refused (0x0002, SPSM not supported) but costs
    the log at most the budget's ten lines (each request's line comes whether or not its answer
    found room); the rest are counted (the Diagnostics value's
    `log_lines_left_out`; the next line past the minute says how many, as the unit tests check)."""
    from test_controller_recovery import read_diagnostics
    blemu = blemu_factory.start(unique_name("FL"), devices=["channel-echo"])
    refusals: list[int] = []

    async def scenario():
        async with central_on(blemu, "coc-flood", discover=True) as conn:
            connection = conn.connection
            manager = connection.device.l2cap_channel_manager
            answered = manager.on_control_frame

            def on_control_frame(connection_, cid, frame):
                if isinstance(frame, (l2cap.L2CAP_LE_Credit_Based_Connection_Response, l2cap.L2CAP_Credit_Based_Connection_Response)):
                    refusals.append(int(frame.result))
                    return None
                return answered(connection_, cid, frame)
            manager.on_control_frame = on_control_frame
            for n in range(2000):
                identifier = n % 255 + 1
                manager.send_control_frame(connection, l2cap.L2CAP_LE_SIGNALING_CID, l2cap.L2CAP_LE_Credit_Based_Connection_Request(
                    identifier=identifier, le_psm=0x00F0, source_cid=0x0040, mtu=23, mps=23, initial_credits=1))
                if n % 2 == 0:
                    manager.send_control_frame(connection, l2cap.L2CAP_LE_SIGNALING_CID, l2cap.L2CAP_Credit_Based_Connection_Request(
                        identifier=identifier, spsm=0x00F0, mtu=64, mps=64, initial_credits=1, source_cid=[0x0040, 0x0041]))
                if n % 50 == 49:
                    await asyncio.sleep(0)
            # The read is answered after every request before it on the link.
            diagnostics = await read_diagnostics(conn)
            deadline = asyncio.get_running_loop().time() + 10
            while len(refusals) < 3000 and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.1)
            return diagnostics
    diagnostics = run(scenario(), timeout=120)
    # Every answer is a refusal; on a slow link some answers may be dropped by HCI's hard cap of
    # 64 PDUs queued per link (its `link transmit queue full` lines have a budget too).
    assert refusals and set(refusals) == {0x0002}, (len(refusals), set(refusals))
    log = blemu.log_path.read_text(errors="replace").splitlines()
    lines = [line for line in log if "credit based connection" in line and "refused" in line]
    assert 1 <= len(lines) <= PEER_LINE_BUDGET + 1, f"{len(lines)} lines about refused requests:\n" + "\n".join(lines[:20])
    assert len([line for line in log if "transmit queue full" in line]) <= PEER_LINE_BUDGET + 1
    assert diagnostics["log_lines_left_out"] >= 3000 - PEER_LINE_BUDGET, diagnostics


def test_a_disconnection_request_for_no_channel_is_rejected_with_our_endpoint_first(echo):
    """Vol 3, Part A, 4.1: Command Reject, 0x0002 Invalid CID in request, carries the local
    endpoint and then the remote one, as the rejecting side sees them; a Disconnection Request's
    Destination CID is "the channel endpoint on the device receiving this request" (4.6). So a
    request with Destination 0x0052 and Source 0x0047 gets data 52 00 47 00, as Linux (and TI's
    stack, whose l2capInvalidCID_t is localCID = the Destination CID) answer."""
    async def scenario():
        async with central_on(echo, "coc-reject") as conn:
            connection = conn.connection
            manager = connection.device.l2cap_channel_manager
            rejected = asyncio.get_running_loop().create_future()
            original = manager.on_control_frame

            def on_control_frame(connection_, cid, frame):
                if isinstance(frame, l2cap.L2CAP_Command_Reject) and frame.identifier == 0x33:
                    return rejected.done() or rejected.set_result(frame)
                return original(connection_, cid, frame)
            manager.on_control_frame = on_control_frame
            manager.send_control_frame(connection, l2cap.L2CAP_LE_SIGNALING_CID, l2cap.L2CAP_Disconnection_Request(
                identifier=0x33, destination_cid=0x0052, source_cid=0x0047))
            frame = await asyncio.wait_for(rejected, 10)
            assert int(frame.reason) == 0x0002 and bytes(frame.data) == bytes.fromhex("52004700"), frame
    run(scenario(), timeout=60)
