"""The programmable host's advertising (`blemu host`'s `advertise` and `advertise-stop`,
Docs/CONTROL.md "The programmable host"), driven over the control socket, with a Bumble peer on
the same rootcanal radio that scans and connects: legacy and extended advertising of each kind
with the data and scan response given, seen by Bumble as given; Bumble connecting to the
public and to the random address the host advertises from (`connected` with `advertisement` and
`"role":"peripheral"`), advertising going on after the connection, the link disconnected,
`advertise-stop` and `advertising-stopped`, a reset stopping advertising, the identity a bonding
central gets, advertising from resolvable private addresses a bonded central resolves, and
hostile requests.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest
from bumble import crypto, hci
from bumble.device import Device

from harness import run_cli, unique_name
from test_programmable_host import BumblePeer, HostEvents, ad, client, events, host  # noqa: F401 (fixtures)


class ScanningPeer(BumblePeer):
    """The Bumble peer, scanning when asked: each advertisement it reports (Bumble merges a scan
    response with the advertising data before it) recorded with its properties."""

    def __init__(self, controller: str):
        super().__init__(controller)
        self.seen: list = []
        self.seen_lock = threading.Lock()

    def start(self) -> "ScanningPeer":
        super().start()

        def on_advertisement(advertisement) -> None:
            with self.seen_lock:
                self.seen.append(advertisement)

        self.loop.call_soon_threadsafe(lambda: self.device.on("advertisement", on_advertisement))
        return self

    def scan(self, seconds: float, address: str) -> list:
        """Scans (active, legacy and extended PDUs on LE 1M) for `seconds`; the advertisements of `address`."""
        with self.seen_lock:
            self.seen.clear()

        async def start(device: Device):
            await device.start_scanning(legacy=False, active=True, filter_duplicates=False,
                                        scanning_phys=(hci.HCI_LE_1M_PHY,))

        async def stop(device: Device):
            await device.stop_scanning()

        self.call(start)
        time.sleep(seconds)
        self.call(stop)
        with self.seen_lock:
            return [a for a in self.seen if a.address.to_string(with_type_qualifier=False) == address]

    def connect_to(self, address: str, public: bool):
        async def connect(device: Device):
            kind = hci.Address.PUBLIC_DEVICE_ADDRESS if public else hci.Address.RANDOM_DEVICE_ADDRESS
            return await device.connect_le(hci.Address(address, kind), timeout=10)

        return self.call(connect, timeout=15)


@pytest.fixture
def peer(rootcanal):
    bumble = ScanningPeer(rootcanal.controller_spec).start()
    yield bumble
    bumble.stop()


@pytest.fixture
def advertising_client(client):
    """The control client; every advertisement a test leaves running is stopped after it."""
    started: list[int] = []
    original = client.ok

    def ok(op: str, **fields) -> dict:
        reply = original(op, **fields)
        if op == "advertise":
            started.append(reply["advertisement"])
        return reply

    client.ok = ok
    yield client
    for advertisement in started:
        client.host("advertise-stop", advertisement=advertisement)


def until_event(events: HostEvents, name: str, timeout: float = 10, **fields) -> dict:
    return events.until(lambda e: e.get("event") == name and all(e.get(k) == v for k, v in fields.items()),
                        timeout, f"{name} {fields}")


# ---------------------------------------------------------------------------------------------
# What Bumble sees


KINDS = [
    # (id, advertise fields, what Bumble's report says: legacy, connectable, scannable, directed)
    ("legacy-connectable", {"legacy": True, "connectable": True}, (True, True, True, False)),
    ("legacy-scannable", {"legacy": True, "scannable": True}, (True, False, True, False)),
    ("legacy-non-connectable", {"legacy": True}, (True, False, False, False)),
    ("extended-connectable", {"connectable": True}, (False, True, False, False)),
    ("extended-scannable", {"scannable": True}, (False, False, True, False)),
    ("extended-non-connectable", {}, (False, False, False, False)),
]


@pytest.mark.parametrize("fields, expected", [k[1:] for k in KINDS], ids=[k[0] for k in KINDS])
def test_bumble_sees_each_kind_with_the_data_and_scan_response_given(advertising_client, events, peer, fields, expected):
    legacy, connectable, scannable, directed = expected
    name = unique_name("PA")
    # Extended advertising carries more than one legacy PDU holds (Vol 6, Part B, 2.3.4.9).
    data = ad(name, padding=0 if legacy else 80)
    scan_response = bytes([0x05, 0xFF, 0xFF, 0xFF]) + name[-2:].encode()
    request = {**fields, "own_address_type": "random"}
    if scannable:
        request["scan_response"] = scan_response.hex()
    if not (scannable and not legacy):   # a scannable extended one carries its data in its scan response
        request["data"] = data.hex()
    else:
        scan_response = data
        request["scan_response"] = data.hex()
    our = advertising_client.ok("address")["random_address"]
    advertisement = advertising_client.ok("advertise", **request)["advertisement"]
    seen = peer.scan(2.5, our)
    assert seen, f"Bumble saw nothing from {our}"
    for report in seen:
        assert (report.is_legacy, report.is_connectable, report.is_directed) == (legacy, connectable, directed), report
    if scannable:
        responses = [r for r in seen if r.is_scan_response]
        assert responses and all(r.data_bytes == scan_response and r.is_scannable for r in responses), seen
        if not legacy:
            assert not any(r.data_bytes for r in seen if not r.is_scan_response), seen
        else:
            assert bytes(responses[0].data) == data + scan_response, responses[0]
    else:
        assert all(not r.is_scan_response and not r.is_scannable and r.data_bytes == data for r in seen), seen
    advertising_client.ok("advertise-stop", advertisement=advertisement)
    stopped = until_event(events, "advertising-stopped", advertisement=advertisement)
    assert stopped["reason"] == "stopped" and stopped["status"] is None, stopped
    # Off: Bumble sees nothing more of it.
    assert peer.scan(1.0, our) == []


# ---------------------------------------------------------------------------------------------
# Connections


@pytest.mark.parametrize("own, legacy", [("public", True), ("random", False)], ids=["public-legacy", "random-extended"])
def test_bumble_connects_and_the_advertisement_goes_on_until_stopped(advertising_client, events, peer, own, legacy):
    addresses = advertising_client.ok("address")
    our = addresses["address"] if own == "public" else addresses["random_address"]
    data = ad(unique_name("PC"))
    advertisement = advertising_client.ok("advertise", data=data.hex(), legacy=legacy, connectable=True,
                                          own_address_type=own, interval_ms=40)["advertisement"]
    assert peer.scan(1.5, our), f"Bumble saw no advertisement from {our}"

    connection = peer.connect_to(our, public=own == "public")
    connected = until_event(events, "connected", advertisement=advertisement)
    assert connected["role"] == "peripheral" and "attempt" not in connected, connected
    assert connected["own_address"] == our and connected["own_address_type"] == own, connected
    assert connected["peer"] == peer.random_address and connected["peer_type"] == "random", connected
    assert connected["interval_ms"] > 0 and connected["timeout_ms"] > 0, connected
    link = connected["link"]
    listed = advertising_client.ok("links")["links"]
    assert [(e["link"], e["role"], e.get("advertisement")) for e in listed] == [(link, "peripheral", advertisement)], listed
    assert connection.peer_address.to_string(with_type_qualifier=False) == our

    # It goes on after the connection (enabled again, as a device's advertising is).
    again = peer.scan(1.5, our)
    assert again and all(r.is_connectable and r.data_bytes == data for r in again if not r.is_scan_response), again

    advertising_client.ok("disconnect", link=link, reason="0x13")
    gone = until_event(events, "disconnected", link=link)
    assert gone["reason"] == "0x16", gone
    peer.wait(lambda: peer.disconnections, 5, "disconnection")
    assert peer.disconnections[-1] == 0x13, peer.disconnections
    assert advertising_client.ok("links")["links"] == []

    advertising_client.ok("advertise-stop", advertisement=advertisement)
    stopped = until_event(events, "advertising-stopped", advertisement=advertisement)
    assert stopped["reason"] == "stopped", stopped
    again = advertising_client.host("advertise-stop", advertisement=advertisement)
    assert again["ok"] is False and again["code"] == "unknown-advertisement", again


@pytest.mark.parametrize("legacy", [True, False], ids=["legacy", "extended"])
def test_directed_advertising_reaches_the_central_it_names_which_connects(advertising_client, events, peer, legacy):
    our = advertising_client.ok("address")["address"]
    # ADV_DIRECT_IND carries no data (Vol 6, Part B, 2.3.1.2); an extended directed one may.
    data = b"" if legacy else ad(unique_name("PD"))
    advertisement = advertising_client.ok("advertise", legacy=legacy, connectable=True, directed_to=peer.random_address,
                                          directed_type="random", data=data.hex())["advertisement"]
    seen = peer.scan(1.5, our)
    assert seen and all(r.is_directed and r.is_connectable and r.is_legacy == legacy and r.data_bytes == data
                        for r in seen), seen
    peer.connect_to(our, public=True)
    connected = until_event(events, "connected", advertisement=advertisement)
    assert connected["peer"] == peer.random_address and connected["role"] == "peripheral", connected
    advertising_client.ok("disconnect", link=connected["link"])
    until_event(events, "disconnected", link=connected["link"])


@pytest.mark.parametrize("own", ["public", "random"])
def test_a_bonding_central_gets_the_address_it_connected_to_as_the_hosts_identity(advertising_client, events, peer, own):
    addresses = advertising_client.ok("address")
    our = addresses["address"] if own == "public" else addresses["random_address"]
    advertisement = advertising_client.ok("advertise", data=ad(unique_name("PI")).hex(), legacy=True, connectable=True,
                                          own_address_type=own)["advertisement"]
    connection = peer.connect_to(our, public=own == "public")
    connected = until_event(events, "connected", advertisement=advertisement)

    async def pair(device: Device):
        await connection.pair()
        return connection.peer_address

    # The advertised link pairs through the host's one set of prompts: Just Works asks the
    # program (`pairing-request`), which accepts it.
    pairing = asyncio.run_coroutine_threadsafe(pair(peer.device), peer.loop)
    asked = until_event(events, "pairing-request", link=connected["link"])
    assert asked["method"] == "just-works", asked
    advertising_client.ok("pairing-answer", pairing=asked["pairing"], confirm=True)
    # Identity Address Information (Vol 3, Part H, 3.6.5): Bumble takes it as the peer's address.
    identity = pairing.result(20)
    kind = hci.Address.PUBLIC_DEVICE_ADDRESS if own == "public" else hci.Address.RANDOM_DEVICE_ADDRESS
    assert (identity.to_string(with_type_qualifier=False), identity.address_type) == (our, kind)
    advertising_client.ok("disconnect", link=connected["link"])
    until_event(events, "disconnected", link=connected["link"])


def scan_for_data(peer: ScanningPeer, seconds: float, data: bytes) -> list:
    """Scans like `ScanningPeer.scan`; the advertisements carrying `data`, from whatever address."""
    with peer.seen_lock:
        peer.seen.clear()

    async def start(device: Device):
        await device.start_scanning(legacy=False, active=True, filter_duplicates=False, scanning_phys=(hci.HCI_LE_1M_PHY,))

    async def stop(device: Device):
        await device.stop_scanning()

    peer.call(start)
    time.sleep(seconds)
    peer.call(stop)
    with peer.seen_lock:
        return [a for a in peer.seen if a.data_bytes == data]


def resolves(address: hci.Address, irk: bytes) -> bool:
    """Vol 6, Part B, 1.3.2.3: the 24 least significant bits are ah(IRK, prand), with Bumble's ah
    as its own resolving list uses it (little-endian bytes as on the air)."""
    raw = bytes(address)
    return address.is_resolvable and crypto.ah(irk, raw[3:6]) == raw[0:3]


@pytest.mark.parametrize("own", ["resolvable-or-public", "resolvable-or-random"])
def test_a_bonded_central_resolves_the_private_address_with_the_irk_it_got_and_bonds_with_the_identity(
        advertising_client, events, peer, own):
    """Own address types resolvable-*: the host advertises a resolvable private address it made
    from its IRK (Vol 6, Part B, 1.3.2.2), a random address whose two top bits are 0b01; Bumble
    connects to it and bonds, and the IRK it receives (Vol 3, Part H, 3.6.4) resolves that address
    and the next ones, while the identity address it receives (3.6.5) is the host's public or static
    random address, never the private one."""
    addresses = advertising_client.ok("address")
    identity = addresses["address"] if own == "resolvable-or-public" else addresses["random_address"]
    data = ad(unique_name("PP"))
    advertisement = advertising_client.ok("advertise", data=data.hex(), connectable=True, own_address_type=own,
                                          interval_ms=40)["advertisement"]
    seen = scan_for_data(peer, 1.5, data)
    assert seen, "Bumble saw nothing of the advertisement"
    private = seen[0].address
    assert private.is_random and private.is_resolvable, f"{private} is not a resolvable private address"
    assert {str(a.address) for a in seen} == {str(private)}, "one address until it is renewed"
    private_text = private.to_string(with_type_qualifier=False)
    assert private_text not in (addresses["address"], addresses["random_address"])

    connection = peer.connect_to(private_text, public=False)
    connected = until_event(events, "connected", advertisement=advertisement)
    assert connected["own_address"] == private_text and connected["own_address_type"] == "random", connected
    received: list = []

    async def pair(device: Device):
        connection.on("pairing", received.append)
        await connection.pair()
        return connection.peer_address

    pairing = asyncio.run_coroutine_threadsafe(pair(peer.device), peer.loop)
    asked = until_event(events, "pairing-request", link=connected["link"])
    advertising_client.ok("pairing-answer", pairing=asked["pairing"], confirm=True)
    bonded_as = pairing.result(20)
    kind = hci.Address.PUBLIC_DEVICE_ADDRESS if own == "resolvable-or-public" else hci.Address.RANDOM_DEVICE_ADDRESS
    assert (bonded_as.to_string(with_type_qualifier=False), bonded_as.address_type) == (identity, kind)
    keys = received[-1]
    assert keys.irk is not None, "no IRK distributed"
    irk = keys.irk.value
    assert resolves(private, irk), f"{private} does not resolve with the IRK distributed"
    assert not resolves(private, bytes(16))
    advertising_client.ok("disconnect", link=connected["link"])
    until_event(events, "disconnected", link=connected["link"])
    advertising_client.ok("advertise-stop", advertisement=advertisement)
    until_event(events, "advertising-stopped", advertisement=advertisement)

    # With a short rpa_timeout_ms, new addresses: each resolves with the same IRK.
    renewing = advertising_client.ok("advertise", data=data.hex(), own_address_type=own, rpa_timeout_ms=1000,
                                     interval_ms=30)["advertisement"]
    renewed = {str(a.address): a.address for a in scan_for_data(peer, 3.5, data)}
    assert len(renewed) >= 2, f"the address was not renewed: {list(renewed)}"
    assert all(resolves(address, irk) for address in renewed.values()), list(renewed)
    assert str(private) not in renewed
    advertising_client.ok("advertise-stop", advertisement=renewing)


# ---------------------------------------------------------------------------------------------
# Reset


def test_reset_stops_advertising_and_closes_the_links_it_accepted(advertising_client, events, peer):
    our = advertising_client.ok("address")["address"]
    first = advertising_client.ok("advertise", data=ad(unique_name("PR")).hex(), legacy=True, connectable=True)["advertisement"]
    second = advertising_client.ok("advertise", data=ad(unique_name("PR"), padding=60).hex())["advertisement"]
    assert second == first + 1
    peer.connect_to(our, public=True)
    link = until_event(events, "connected", advertisement=first)["link"]
    # Nothing new starts while the reset waits for the link to close. Sent with the reset in one
    # write: asked later, the link may be closed already (rootcanal ends it in a few ms) and the
    # reset done, and then `advertise` is right to start.
    reset, during = advertising_client.hosts_at_once(("reset", {}), ("advertise", {}))
    assert reset["ok"] is True, reset
    assert during["ok"] is False and during["code"] == "not-ready", during
    seen: list[dict] = []
    events.until(lambda e: seen.append(e) or e.get("event") == "reset", 10, "reset")
    stops = [(e["advertisement"], e["reason"], e["status"]) for e in seen if e["event"] == "advertising-stopped"]
    assert stops == [(first, "reset", None), (second, "reset", None)], seen
    assert [e["link"] for e in seen if e["event"] == "disconnected"] == [link], seen
    peer.wait(lambda: peer.disconnections, 5, "disconnection")
    assert peer.scan(1.0, our) == []
    # Ids go on after a reset; the new random address is the one advertised from.
    after = advertising_client.ok("address")["random_address"]
    third = advertising_client.ok("advertise", data=ad(unique_name("PR")).hex(), own_address_type="random")["advertisement"]
    assert third == second + 1
    assert peer.scan(1.5, after), f"Bumble saw nothing from the new random address {after}"


# ---------------------------------------------------------------------------------------------
# Hostile requests: a clear error, and nothing changed


@pytest.mark.parametrize("fields, fragment", [
    ({"data": "02010"}, '"data" has an odd number of hex digits'),
    ({"data": "0x0201"}, "is not hex digits"),
    ({"data": [2, 1, 6]}, '"data" must be a string of hex digits'),
    ({"data": "ab" * 1651}, "at most 1650 bytes"),
    ({"legacy": True, "data": "ab" * 32}, "legacy advertising data is at most 31 bytes"),
    ({"legacy": True, "scannable": True, "scan_response": "ab" * 32}, "a legacy scan response is at most 31 bytes"),
    ({"legacy": True, "scan_response": "0201"}, "a scan response needs a scannable advertisement"),
    ({"legacy": True, "connectable": True, "directed_to": "C0:11:22:33:44:55", "directed_type": "random", "data": "020106"},
     "legacy directed advertising carries no data"),
    ({"legacy": True, "directed_to": "C0:11:22:33:44:55", "directed_type": "random"}, "legacy directed advertising is connectable"),
    ({"connectable": True, "scannable": True, "scan_response": "0201"}, "cannot be both connectable and scannable"),
    ({"scannable": True, "data": "020106", "scan_response": "0201"}, "carries its data in the scan response"),
    ({"scannable": True}, "needs a scan response"),
    ({"connectable": True, "data": "ab" * 246}, "connectable extended advertising data is at most"),
    ({"legacy": True, "primary_phy": "coded"}, "legacy advertising PDUs go out on LE 1M only"),
    ({"primary_phy": "2m"}, '"primary_phy" \'2m\' is not 1m or coded'),
    ({"own_address_type": "random", "rpa_timeout_ms": 5000}, "rpa_timeout_ms goes with own address type resolvable"),
    ({"rpa_timeout_ms": 5000}, "rpa_timeout_ms goes with own address type resolvable"),
    ({"own_address_type": "resolvable-or-random", "rpa_timeout_ms": 999}, '"rpa_timeout_ms" must be a whole number from 1000'),
    ({"own_address_type": "resolvable-or-random", "rpa_timeout_ms": "1000"}, '"rpa_timeout_ms" must be a whole number'),
    ({"own_address_type": "resolvable-or-public", "rpa_timeout_ms": 41400001}, '"rpa_timeout_ms" must be a whole number'),
    ({"interval_ms": 19}, '"interval_ms" must be a whole number from 20 to 10240'),
    ({"interval_ms": 20.5}, '"interval_ms" must be a whole number'),
    ({"directed_to": "C0:11:22:33:44:55"}, '"directed_to" needs "directed_type"'),
    ({"directed_to": "C0:11:22:33:44:55", "directed_type": "public-identity"}, '"directed_type"'),
    ({"high_duty_cycle": True}, "host advertise takes no 'high_duty_cycle'"),
])
def test_hostile_advertise_requests_are_refused_and_change_nothing(advertising_client, events, peer, fields, fragment):
    reply = advertising_client.host("advertise", **fields)
    assert reply["ok"] is False and fragment in reply["error"], reply
    assert "code" not in reply, reply
    # Nothing started: no event, and the next advertisement takes the next id, set 0 free.
    assert [e for e in events.collect(0.3) if e.get("event") != "advertisement"] == []


def test_unknown_advertisements_are_refused_by_code(advertising_client):
    for fields in ({"advertisement": 999999}, {"advertisement": 1}):
        reply = advertising_client.host("advertise-stop", **fields)
        if reply["ok"]:   # advertisement 1 of an earlier test may have been stopped already; never twice
            reply = advertising_client.host("advertise-stop", **fields)
        assert reply["ok"] is False and reply["code"] == "unknown-advertisement", reply
    reply = advertising_client.host("advertise-stop", advertisement=0)
    assert reply["ok"] is False and '"advertisement" must be a whole number from 1' in reply["error"], reply


def test_ctl_words_advertise_and_stop(host, events, peer):
    our = json.loads(run_cli(["ctl", host.control_path, "host", "address"]).stdout.splitlines()[-1])["address"]
    data = ad(unique_name("PW"))
    result = run_cli(["ctl", host.control_path, "host", "advertise", "--data", data.hex(), "--legacy", "true",
                      "--connectable", "true", "--scan-response", "03ff0102", "--interval-ms", "30"])
    assert result.returncode == 0, result.describe()
    advertisement = json.loads(result.stdout.splitlines()[-1])["advertisement"]
    seen = peer.scan(1.5, our)
    assert any(r.is_scan_response and r.data_bytes == bytes.fromhex("03ff0102") for r in seen), seen
    result = run_cli(["ctl", host.control_path, "host", "advertise-stop", "--advertisement", str(advertisement)])
    assert result.returncode == 0, result.describe()
    until_event(events, "advertising-stopped", advertisement=advertisement)
    for words, fragment in [(["host", "advertise", "--data", "0g"], "is not hex digits"),
                            (["host", "advertise", "--legacy", "true", "--data", "ab" * 32], "at most 31 bytes"),
                            (["host", "advertise-stop", "--advertisement", str(advertisement)], "unknown-advertisement")]:
        result = run_cli(["ctl", host.control_path, *words])
        assert result.returncode != 0 and fragment in result.stdout + result.stderr, result.describe()
