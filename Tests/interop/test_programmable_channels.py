"""The programmable host's L2CAP credit based channels (Docs/CONTROL.md, "The programmable host":
channel-connect, channel-listen, channel-send, channel-disconnect and their events) against a
Bumble peer on the same rootcanal radio: blemu (central, through `connect`) opens LE and enhanced
credit based channels to Bumble's L2CAP server, which echoes; Bumble opens a channel to an SPSM
blemu listens on; refusals carry their L2CAP result (Vol 3, Part A, 4.23, 4.26).
"""

from __future__ import annotations

import asyncio
import threading

from bumble import l2cap

# The programmable host's fixtures and helpers (a module-scoped `blemu host`, its socket, its
# event stream, a Bumble peer), shared rather than copied.
from test_programmable_host import (  # noqa: F401  (fixtures)
    BumblePeer, HostClient, HostEvents, advertise_connectable, client, events, host, peer,
)

ECHO_SPSM = 0x0085


class EchoServer:
    """Bumble's LE credit based server on `spsm` (it takes enhanced requests too): each SDU
    recorded and sent back; each channel kept for the test."""

    def __init__(self, peer: BumblePeer, spsm: int, mtu: int = 512, mps: int = 100, credits: int = 4):
        self.received: list[bytes] = []
        self.channels: list = []
        self.closed = threading.Event()
        self.lock = threading.Lock()

        async def serve(device):
            def on_channel(channel):
                self.channels.append(channel)
                channel.on("close", self.closed.set)

                def sink(sdu):
                    with self.lock:
                        self.received.append(bytes(sdu))
                    channel.write(bytes(sdu))

                channel.sink = sink

            device.create_l2cap_server(spec=l2cap.LeCreditBasedChannelSpec(psm=spsm, mtu=mtu, mps=mps, max_credits=credits),
                                       handler=on_channel)

        peer.call(serve)


def connect_to(peer: BumblePeer, client: HostClient, events: HostEvents) -> int:
    address = advertise_connectable(peer, public=False)
    before = len(peer.connections)
    client.ok("connect", address=address, address_type="random")
    connected = events.until(lambda e: e.get("event") in ("connected", "connect-failed"), 15, "connection")
    assert connected["event"] == "connected", connected
    # rootcanal tells both ends; Bumble's thread may take its event after blemu's, and a test
    # that then uses Bumble's side of the link must find it there.
    peer.wait(lambda: len(peer.connections) > before, 5, "Bumble's side of the connection")
    return connected["link"]


def opened_or_failed(events: HostEvents, channel: int) -> dict:
    return events.until(lambda e: e.get("event") in ("channel-opened", "channel-failed") and e["channel"] == channel,
                        10, f"channel {channel} opened or failed")


def test_blemu_opens_a_channel_to_bumbles_server_sends_sdus_hears_the_echo_and_disconnects(client, events, peer):
    server = EchoServer(peer, ECHO_SPSM)
    link = connect_to(peer, client, events)
    channel = client.ok("channel-connect", link=link, spsm=ECHO_SPSM, mtu=300, mps=60, credits=3)["channel"]
    opened = opened_or_failed(events, channel)
    assert opened["event"] == "channel-opened", opened
    assert opened["link"] == link and opened["spsm"] == "0x0085" and opened["incoming"] is False, opened
    assert opened["mtu"] == 300 and opened["mps"] == 60 and opened["peer_mtu"] == 512 and opened["peer_mps"] == 100, opened
    assert 0x40 <= int(opened["cid"], 16) <= 0x7F and 0x40 <= int(opened["peer_cid"], 16) <= 0x7F, opened

    # SDUs past both MPSs (several K-frames each way), more than the credits at once.
    sdus = [bytes([n]) * (50 + 40 * n) for n in range(6)]
    for sdu in sdus:
        client.ok("channel-send", channel=channel, data=sdu.hex())
    # Bumble received each SDU whole; its `write` is a byte stream it cuts into SDUs of up to our
    # MTU, so the echo comes back as the same bytes in SDUs of at most 300.
    echoed: list[bytes] = []
    while sum(map(len, echoed)) < sum(map(len, sdus)):
        echoed.append(bytes.fromhex(events.until(lambda e: e.get("event") == "channel-data" and e["channel"] == channel,
                                                 10, "echo")["data"]))
    assert b"".join(echoed) == b"".join(sdus)
    assert all(len(sdu) <= 300 for sdu in echoed), [len(sdu) for sdu in echoed]
    assert server.received == sdus

    too_long = client.host("channel-send", channel=channel, data="00" * 513)
    assert too_long["ok"] is False and "MTU 512" in too_long["error"], too_long

    client.ok("channel-disconnect", channel=channel)
    closed = events.until(lambda e: e.get("event") == "channel-closed", 10, "channel-closed")
    assert closed == {**closed, "channel": channel, "reason": "disconnected"}, closed
    assert server.closed.wait(5), "Bumble saw no disconnection of its channel"
    stale = client.host("channel-send", channel=channel, data="00")
    assert stale["ok"] is False and stale["code"] == "unknown-channel", stale


def test_an_enhanced_channel_opens_and_echoes(client, events, peer):
    EchoServer(peer, ECHO_SPSM)
    link = connect_to(peer, client, events)
    channel = client.ok("channel-connect", link=link, spsm=ECHO_SPSM, enhanced=True, mtu=128, mps=64)["channel"]
    opened = opened_or_failed(events, channel)
    assert opened["event"] == "channel-opened" and opened["enhanced"] is True, opened
    client.ok("channel-send", channel=channel, data="68656c6c6f")
    echo = events.until(lambda e: e.get("event") == "channel-data", 10, "echo")
    assert echo["channel"] == channel and echo["data"] == "68656c6c6f", echo


def test_a_channel_to_an_spsm_bumble_does_not_serve_fails_with_result_0x0002(client, events, peer):
    link = connect_to(peer, client, events)
    channel = client.ok("channel-connect", link=link, spsm=0x00F3)["channel"]
    failed = opened_or_failed(events, channel)
    assert failed["event"] == "channel-failed", failed
    assert failed["result"] == "0x0002" and failed["reason"] == "spsm-not-supported", failed


def test_bumble_opens_a_channel_to_a_listened_spsm_and_the_link_closing_closes_it(client, events, peer):
    client.ok("channel-listen", spsm="0x0086", mtu=200, mps=80, credits=5)
    try:
        link = connect_to(peer, client, events)
        received: list[bytes] = []
        got = threading.Event()

        async def open_from_bumble(device):
            connection = next(iter(device.connections.values()))
            channel = await connection.create_l2cap_channel(
                spec=l2cap.LeCreditBasedChannelSpec(psm=0x0086, mtu=150, mps=70, max_credits=4))
            channel.sink = lambda sdu: (received.append(bytes(sdu)), got.set())
            channel.write(b"from bumble")
            return channel

        peer.call(open_from_bumble)
        opened = events.until(lambda e: e.get("event") == "channel-opened", 10, "incoming channel")
        assert opened["incoming"] is True and opened["link"] == link and opened["spsm"] == "0x0086", opened
        assert opened["mtu"] == 200 and opened["mps"] == 80 and opened["peer_mtu"] == 150 and opened["peer_mps"] == 70, opened
        data = events.until(lambda e: e.get("event") == "channel-data", 10, "data from Bumble")
        assert data["channel"] == opened["channel"] and bytes.fromhex(data["data"]) == b"from bumble", data
        client.ok("channel-send", channel=opened["channel"], data=b"from blemu".hex())
        assert got.wait(5) and received == [b"from blemu"], received

        client.ok("disconnect", link=link)
        closed = events.until(lambda e: e.get("event") == "channel-closed", 10, "channel-closed")
        assert closed["channel"] == opened["channel"] and closed["reason"] == "link-closed", closed
    finally:
        client.host("channel-unlisten", spsm="0x0086")


def test_hostile_channel_requests_are_refused(client):
    for fields, fragment in [
        ({"link": 1, "spsm": 0}, "spsm"),
        ({"link": 1, "spsm": 128, "mtu": 22}, "mtu"),
        ({"link": 1, "spsm": 128, "credits": 0}, "credits"),
        ({"link": 1, "spsm": 128, "enhanced": True, "mps": 23}, "mps"),
    ]:
        reply = client.host("channel-connect", **fields)
        assert reply["ok"] is False and fragment in reply["error"], reply
    reply = client.host("channel-connect", link=999, spsm=128)
    assert reply["ok"] is False and reply["code"] == "unknown-link", reply
    reply = client.host("channel-send", channel=1, data="zz")
    assert reply["ok"] is False and "hex" in reply["error"], reply
    reply = client.host("channel-unlisten", spsm=0x99)
    assert reply["ok"] is False and reply["code"] == "unknown-channel", reply
    reply = client.host("channel-listen", spsm="0x0027")
    assert reply["ok"] is False and "Enhanced ATT" in reply["error"], reply
