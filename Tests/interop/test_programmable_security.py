"""The programmable host's security ops (Docs/CONTROL.md, "The programmable host": `pairing-config`,
`secure`, `pairing-answer`, `bonded`, `forget`; events `pairing-request`, `security`,
`security-failed`), blemu host as central (it connects with the `connect` op, from its static random
address) against a Bumble peripheral on the same rootcanal radio with the IO capability each test
gives it: Just Works, Numeric Comparison, Passkey Entry both ways, answered yes, no or with a
passkey; level 3 refused against a peer without IO; a bond asked about, used on a reconnect,
forgotten, and deleted by `reset`.

Spec references: Core 5.4, Vol 3, Part H, 2.3.5.1 (Table 2.8: the method from the IO
capabilities), 2.2.6-2.2.8 (the addresses SMP hashes), 3.5.5 (Pairing Failed reasons);
Vol 3, Part C, 10.2.1 (LE security mode 1 levels).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

import pytest
from bumble import crypto, hci
from bumble.device import Device
from bumble.keys import MemoryKeyStore
from bumble.pairing import PairingConfig, PairingDelegate
from bumble.transport import open_transport

from bumble_central import bumble_transport_spec
from test_programmable_host import HostClient, HostEvents, HostProcess, events, host_client  # noqa: F401 (fixtures)

IO = PairingDelegate.IoCapability


class Delegate(PairingDelegate):
    """The Bumble user: answers as the test says, keeps what it was shown."""

    def __init__(self, peer: "PairingPeer", io_capability: int):
        super().__init__(io_capability=io_capability)
        self.peer = peer

    async def accept(self) -> bool:
        return True

    async def confirm(self, auto: bool = False) -> bool:
        return True

    async def compare_numbers(self, number: int, digits: int) -> bool:
        self.peer.shown = number
        return self.peer.compare_answer

    async def display_number(self, number: int, digits: int) -> None:
        self.peer.shown = number

    async def get_number(self) -> int | None:
        # Types what blemu shows (the test hands it over once blemu's event told it).
        for _ in range(200):
            if self.peer.to_type is not None:
                return self.peer.to_type
            await asyncio.sleep(0.05)
        return None


class PairingPeer:
    """A Bumble peripheral advertising from its own random address, pairing as its IO capability says."""

    def __init__(self, controller: str, random_address: str, io_capability: int, mitm: bool = True):
        self.controller = controller
        self.random_address = random_address
        self.io_capability = io_capability
        self.mitm = mitm
        self.shown: int | None = None
        self.to_type: int | None = None
        self.compare_answer = True
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.device: Device | None = None
        self.pairings: list[str] = []
        self.connection = None
        self.stopping: asyncio.Event | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._main())

    async def _main(self) -> None:
        self.stopping = asyncio.Event()
        async with await open_transport(bumble_transport_spec(self.controller)) as (source, sink):
            device = Device.with_hci("peer", self.random_address, source, sink)
            device.keystore = MemoryKeyStore()
            device.pairing_config_factory = lambda connection: PairingConfig(
                sc=True, mitm=self.mitm, bonding=True, delegate=Delegate(self, self.io_capability))

            def on_connection(connection) -> None:
                self.connection = connection
                connection.on("pairing", lambda keys: self.pairings.append("paired"))
                connection.on("pairing_failure", lambda reason: self.pairings.append(f"failed {reason}"))

            device.on("connection", on_connection)
            self.device = device
            await device.power_on()
            await device.start_advertising(own_address_type=hci.OwnAddressType.RANDOM, auto_restart=True)
            self.ready.set()
            await self.stopping.wait()

    def start(self) -> "PairingPeer":
        self.thread.start()
        assert self.ready.wait(20), "the Bumble peer did not start"
        return self

    def stop(self) -> None:
        if self.stopping is not None:
            self.loop.call_soon_threadsafe(self.stopping.set)
        self.thread.join(10)
        if not self.thread.is_alive():
            self.loop.close()


@pytest.fixture(scope="module")
def host(rootcanal, tmp_path_factory):
    process = HostProcess(rootcanal.controller_spec, str(tmp_path_factory.mktemp("host-security-state"))).start()
    process.wait_ready()
    yield process
    if process.exited() is not None:
        pytest.fail(f"blemu host died during the tests: {process.exited()}", pytrace=False)
    assert process.stop() == 0, process.log_tail()


@pytest.fixture
def client(host):
    with host_client(host) as connection:
        connection.ok("pairing-config")  # each test starts from the default pairing settings
        yield connection


_addresses = iter(f"F0:F1:F2:F3:{i // 256:02X}:{i % 256:02X}" for i in range(0x10, 0x10000))


def make_peer(rootcanal, io_capability: int, mitm: bool = True) -> PairingPeer:
    # Each test its own peer address: no bond of another test applies.
    return PairingPeer(rootcanal.controller_spec, next(_addresses), io_capability, mitm).start()


@contextlib.contextmanager
def peer_of(rootcanal, io_capability: int, mitm: bool = True):
    peer = make_peer(rootcanal, io_capability, mitm)
    try:
        yield peer
    finally:
        peer.stop()


def connect(client: HostClient, events: HostEvents, peer: PairingPeer) -> int:
    attempt = client.ok("connect", address=peer.random_address, address_type="random", own_address_type="random")["attempt"]
    event = events.until(lambda e: e.get("attempt") == attempt and e["event"] in ("connected", "connect-failed"), 15, "the link")
    assert event["event"] == "connected", event
    assert event["own_address_type"] == "random", event
    # rootcanal tells both ends; Bumble's thread may take its event after blemu's, and a test
    # that then uses the peer's side (`peer.connection`) must find it there.
    wait_for(lambda: peer.connection is not None, "Bumble's side of the link")
    return event["link"]


def wait_for(predicate, what: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"no {what} within {timeout} s"
        time.sleep(0.05)


def is_(event: dict, name: str, link: int) -> bool:
    return event.get("event") == name and event.get("link") == link


def outcome(events: HostEvents, link: int, timeout: float = 20.0) -> dict:
    return events.until(lambda e: is_(e, "security", link) or is_(e, "security-failed", link) or is_(e, "disconnected", link),
                        timeout, f"security on link {link}")


def request(events: HostEvents, link: int) -> dict:
    return events.until(lambda e: is_(e, "pairing-request", link), 15, f"a pairing request on link {link}")


# ---------------------------------------------------------------------------------------------


def test_level_2_just_works_from_our_random_address_bonds_and_a_reconnect_encrypts_with_the_bond(rootcanal, client, events):
    """SC Just Works against a peer without IO: the `pairing-request` asks to accept it, the link
    reaches level 2, then turns bonded. The link was made from our static random address: SMP
    hashes that one (Vol 3, Part H, 2.2.8: f6's A1), or the DHKey checks do not match."""
    with peer_of(rootcanal, IO.NO_OUTPUT_NO_INPUT) as peer:
        link = connect(client, events, peer)
        assert client.ok("secure", link=link, level=2) == {"id": client.next_id - 1, "ok": True}
        asked = request(events, link)
        assert asked["method"] == "just-works" and asked["passkey"] is None, asked
        client.ok("pairing-answer", pairing=asked["pairing"], confirm=True)
        rose = outcome(events, link)
        assert rose["event"] == "security", rose
        assert (rose["level"], rose["encrypted"], rose["key_size"], rose["authenticated"], rose["secure_connections"]) \
            == (2, True, 16, False, True), rose
        bonded = rose if rose["bonded"] else events.until(lambda e: is_(e, "security", link) and e["bonded"], 10, "bonded")
        assert bonded["level"] == 2, bonded
        wait_for(lambda: peer.pairings == ["paired"], f"Bumble's pairing (saw {peer.pairings})")
        assert client.ok("bonded", address=peer.random_address, address_type="random")["bonded"] is True
        # The level it has: at once, nothing done.
        assert client.ok("secure", link=link, level=2).get("already") is True
        assert client.ok("secure", link=link, level=1).get("already") is True
        assert [l["level"] for l in client.ok("links")["links"] if l["link"] == link] == [2]

        # Again, with the bond: encrypted with its key, no pairing, no question.
        client.ok("disconnect", link=link)
        events.until(lambda e: is_(e, "disconnected", link), 10, "the disconnection")
        link = connect(client, events, peer)
        client.ok("secure", link=link, level=2)
        again = outcome(events, link)
        assert again["event"] == "security" and again["level"] == 2 and again["bonded"] is True, again
        assert peer.pairings == ["paired"], peer.pairings
        assert not [e for e in events.collect(0.5) if e.get("event") == "pairing-request"]

        # Forgotten: not bonded any more, and a second forget finds nothing.
        assert client.ok("forget", address=peer.random_address, address_type="random")["forgotten"] is True
        assert client.ok("bonded", address=peer.random_address, address_type="random")["bonded"] is False
        assert client.ok("forget", address=peer.random_address, address_type="random")["forgotten"] is False


def test_level_3_against_a_peer_without_io_fails_authentication(rootcanal, client, events):
    """MITM asked, but a peer without IO leaves Just Works (Table 2.8): level 2, not 3."""
    with peer_of(rootcanal, IO.NO_OUTPUT_NO_INPUT, mitm=False) as peer:
        link = connect(client, events, peer)
        client.ok("secure", link=link, level=3)
        asked = request(events, link)
        assert asked["method"] == "just-works", asked
        client.ok("pairing-answer", pairing=asked["pairing"], confirm=True)
        seen = []
        while True:
            event = outcome(events, link)
            seen.append(event)
            if event["event"] != "security":
                break
        assert seen[-1]["event"] == "security-failed" and seen[-1]["reason"] == "authentication-failure", seen
        assert all(e["level"] == 2 for e in seen[:-1]), seen
        assert [l["level"] for l in client.ok("links")["links"] if l["link"] == link] == [2]


def test_just_works_refused_fails_the_pairing(rootcanal, client, events):
    with peer_of(rootcanal, IO.NO_OUTPUT_NO_INPUT) as peer:
        link = connect(client, events, peer)
        client.ok("secure", link=link, level=2)
        asked = request(events, link)
        client.ok("pairing-answer", pairing=asked["pairing"])   # neither confirm nor passkey: no
        failed = outcome(events, link)
        assert failed["event"] == "security-failed" and failed["reason"] == "pairing-failure", failed
        assert "Unspecified Reason (0x08)" in failed["detail"], failed
        # The prompt is gone: a second answer is refused by code.
        late = client.host("pairing-answer", pairing=asked["pairing"], confirm=True)
        assert late["ok"] is False and late["code"] == "unknown-pairing", late
        assert client.ok("bonded", address=peer.random_address, address_type="random")["bonded"] is False


@pytest.mark.parametrize("answer", [True, False])
def test_numeric_comparison_answered_yes_reaches_level_4_and_no_fails(rootcanal, client, events, answer):
    """Both sides can say yes or no (DisplayYesNo against our KeyboardDisplay): Numeric
    Comparison, the same six digits on both sides."""
    with peer_of(rootcanal, IO.DISPLAY_OUTPUT_AND_YES_NO_INPUT) as peer:
        link = connect(client, events, peer)
        client.ok("secure", link=link, level=4)
        asked = request(events, link)
        assert asked["method"] == "numeric-comparison", asked
        assert isinstance(asked["passkey"], int) and 0 <= asked["passkey"] <= 999999, asked
        client.ok("pairing-answer", pairing=asked["pairing"], confirm=answer)
        result = outcome(events, link)
        if answer:
            assert result["event"] == "security" and result["level"] == 4 and result["authenticated"], result
            assert peer.shown == asked["passkey"], (peer.shown, asked)
        else:
            assert result["event"] == "security-failed" and result["reason"] == "pairing-failure", result
            assert "Numeric Comparison Failed (0x0c)" in result["detail"], result


@pytest.mark.parametrize("right", [True, False])
def test_passkey_entry_typed_from_the_peers_display(rootcanal, client, events, right):
    """The peer only shows (DisplayOnly): we type its passkey (`passkey-entry`, answered with
    `passkey`); a wrong one fails with Confirm Value Failed (Vol 3, Part H, 2.3.5.6.3)."""
    with peer_of(rootcanal, IO.DISPLAY_OUTPUT_ONLY) as peer:
        link = connect(client, events, peer)
        client.ok("secure", link=link, level=3)
        asked = request(events, link)
        assert asked["method"] == "passkey-entry" and asked["passkey"] is None, asked
        wait_for(lambda: peer.shown is not None, "passkey shown by the peer")
        typed = peer.shown if right else (peer.shown + 1) % 1000000
        client.ok("pairing-answer", pairing=asked["pairing"], passkey=typed)
        result = outcome(events, link)
        if right:
            assert result["event"] == "security" and result["level"] == 4 and result["authenticated"], result
        else:
            assert result["event"] == "security-failed" and result["reason"] == "pairing-failure", result
            assert "Confirm Value Failed (0x04)" in result["detail"], result


def test_passkey_display_shows_the_passkey_the_peer_types(rootcanal, client, events):
    """We only show (DisplayOnly by `pairing-config`), the peer types (KeyboardOnly): the
    `pairing-request` is `passkey-display` with the passkey; no answer needed."""
    client.ok("pairing-config", io_capability="display-only")
    with peer_of(rootcanal, IO.KEYBOARD_INPUT_ONLY) as peer:
        link = connect(client, events, peer)
        client.ok("secure", link=link, level=3)
        asked = request(events, link)
        assert asked["method"] == "passkey-display" and isinstance(asked["passkey"], int), asked
        peer.to_type = asked["passkey"]
        result = outcome(events, link)
        assert result["event"] == "security" and result["level"] == 4 and result["authenticated"], result


def test_reset_deletes_the_bonds_and_puts_the_pairing_settings_back(rootcanal, client, events):
    client.ok("pairing-config", io_capability="no-input-no-output", mitm=False)
    with peer_of(rootcanal, IO.NO_OUTPUT_NO_INPUT, mitm=False) as peer:
        link = connect(client, events, peer)
        client.ok("secure", link=link, level=2)
        asked = request(events, link)
        client.ok("pairing-answer", pairing=asked["pairing"], confirm=True)
        events.until(lambda e: is_(e, "security", link) and e["bonded"], 20, "bonded")
        assert client.ok("bonded", address=peer.random_address, address_type="random")["bonded"] is True
        client.ok("reset")
        events.until(lambda e: e.get("event") == "reset", 15, "the reset")
        assert client.ok("bonded", address=peer.random_address, address_type="random")["bonded"] is False
        # Settings back to KeyboardDisplay with MITM: a DisplayYesNo peer now gets Numeric Comparison.
    with peer_of(rootcanal, IO.DISPLAY_OUTPUT_AND_YES_NO_INPUT) as peer:
        link = connect(client, events, peer)
        client.ok("secure", link=link, level=2)
        assert request(events, link)["method"] == "numeric-comparison"


def test_a_link_closing_mid_pairing_fails_its_secure_with_connection_died(rootcanal, client, events):
    with peer_of(rootcanal, IO.NO_OUTPUT_NO_INPUT) as peer:
        link = connect(client, events, peer)
        client.ok("secure", link=link, level=2)
        asked = request(events, link)
        client.ok("disconnect", link=link)
        failed = outcome(events, link)
        assert failed["event"] == "security-failed" and failed["reason"] == "connection-died", failed
        events.until(lambda e: is_(e, "disconnected", link), 10, "the disconnection")
        late = client.host("pairing-answer", pairing=asked["pairing"], confirm=True)
        assert late["ok"] is False and late["code"] == "unknown-pairing", late


def test_a_pairing_the_peer_asks_for_is_prompted_and_its_refusal_told(rootcanal, client, events):
    """The peripheral's Security Request (Vol 3, Part H, 3.6.7), no `secure` of ours: the pairing
    it starts asks the program all the same; refused, it is told as `security-failed`."""
    with peer_of(rootcanal, IO.NO_OUTPUT_NO_INPUT) as peer:
        link = connect(client, events, peer)
        peer.loop.call_soon_threadsafe(lambda: peer.connection.request_pairing())
        asked = request(events, link)
        assert asked["method"] == "just-works", asked
        client.ok("pairing-answer", pairing=asked["pairing"], confirm=False)
        failed = outcome(events, link)
        assert failed["event"] == "security-failed" and failed["reason"] == "pairing-failure", failed
        # Asked again and accepted this time: the rise is told though no `secure` asked for it.
        time.sleep(0.3)
        peer.loop.call_soon_threadsafe(lambda: peer.connection.request_pairing())
        asked = request(events, link)
        client.ok("pairing-answer", pairing=asked["pairing"], confirm=True)
        rose = outcome(events, link)
        assert rose["event"] == "security" and rose["level"] == 2, rose


def test_a_peer_that_bonded_with_the_host_as_central_resolves_its_advertised_private_addresses(rootcanal, client, events):
    """One IRK for both roles (Docs/SECURITY.md, "The programmable host's IRK"): the IRK the host
    distributes as central (Identity Information, Vol 3, Part H, 3.6.4) is the one its
    advertisements' resolvable private addresses are made from (Vol 6, Part B, 1.3.2.2), so the
    Bumble peripheral it bonded with recognises the host advertising later."""
    with peer_of(rootcanal, IO.NO_OUTPUT_NO_INPUT) as peer:
        link = connect(client, events, peer)
        client.ok("secure", link=link, level=2)
        asked = request(events, link)
        client.ok("pairing-answer", pairing=asked["pairing"], confirm=True)
        events.until(lambda e: is_(e, "security", link) and e["bonded"], 20, "the bond")
        wait_for(lambda: peer.pairings == ["paired"], f"Bumble's pairing (saw {peer.pairings})")
        stored = asyncio.run_coroutine_threadsafe(peer.device.keystore.get_all(), peer.loop).result(5)
        irks = [keys.irk.value for _, keys in stored if keys.irk is not None]
        assert len(irks) == 1, stored
        client.ok("disconnect", link=link)
        events.until(lambda e: is_(e, "disconnected", link), 10, "the disconnection")

        name = ("RPA" + peer.random_address.replace(":", "")[-4:]).encode()
        data = bytes([0x02, 0x01, 0x06, len(name) + 1, 0x09]) + name
        advertisement = client.ok("advertise", data=data.hex(), own_address_type="resolvable-or-random",
                                  interval_ms=30)["advertisement"]
        seen: list = []

        async def scan(device: Device) -> None:
            device.on("advertisement", seen.append)
            await device.start_scanning(legacy=False, active=False, filter_duplicates=False)
            await asyncio.sleep(2.0)
            await device.stop_scanning()
            device.remove_listener("advertisement", seen.append)

        asyncio.run_coroutine_threadsafe(scan(peer.device), peer.loop).result(10)
        client.ok("advertise-stop", advertisement=advertisement)
        ours = [a.address for a in seen if a.data_bytes == data]
        assert ours, f"Bumble saw nothing of the advertisement ({len(seen)} others)"
        for address in ours:
            raw = bytes(address)
            assert address.is_resolvable and crypto.ah(irks[0], raw[3:6]) == raw[0:3], \
                f"{address} does not resolve with the IRK the host gave as central"


def test_security_requests_that_name_nothing_are_refused_by_code(client, events):
    unknown = client.host("secure", link=999, level=2)
    assert unknown["ok"] is False and unknown["code"] == "unknown-link", unknown
    answer = client.host("pairing-answer", pairing=999, confirm=True)
    assert answer["ok"] is False and answer["code"] == "unknown-pairing", answer
    for fields in ({"io_capability": "telepathy"}, {"keys": ["enc", "enc"]}, {"mitm": "yes"}):
        refused = client.host("pairing-config", **fields)
        assert refused["ok"] is False and "code" not in refused, refused
    assert client.host("secure", link=1, level=5)["ok"] is False
    assert client.host("pairing-answer", pairing=1, passkey=1000000)["ok"] is False
    assert client.host("bonded", address="C0:11:22:33:44:55")["ok"] is False
    assert not [e for e in events.collect(0.5) if e.get("event") in ("security", "security-failed", "pairing-request")]

