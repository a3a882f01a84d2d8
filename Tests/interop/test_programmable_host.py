"""The programmable host (`blemu host`, Docs/CONTROL.md "The programmable host"), driven over its
control socket as a test framework drives it, against a Bumble peer on the same rootcanal radio:
the local address, scanning with the advertising report's fields (legacy and extended, LE 1M and
LE Coded), connecting to public and random peers from a chosen own address type, disconnecting,
a connection attempt that times out, a reset, and hostile requests on the socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import queue
import shutil
import socket
import tempfile
import threading
import time
from pathlib import Path

import pytest
from bumble import hci
from bumble.core import AdvertisingData
from bumble.device import AdvertisingEventProperties, AdvertisingParameters, Device
from bumble.transport import open_transport

from bumble_central import bumble_transport_spec
from harness import BlemuProcess, blemu_binary, run_cli, unique_name


class HostProcess(BlemuProcess):
    """`blemu host --controller SPEC --control PATH --state-dir DIR` with its output in a file."""

    def __init__(self, controller: str, state_dir: str):
        super().__init__(controller, None, device="host")
        self.control_path = os.path.join(tempfile.mkdtemp(prefix="blemu-host-", dir="/tmp"), "control.sock")
        self.state_dir = state_dir

    @property
    def command(self) -> list[str]:
        import shlex
        log_args = shlex.split(os.environ.get("BLEMU_LOG_ARGS", "--log stderr --log-level debug"))
        return [str(blemu_binary()), "host", "--controller", self.controller, "--control", self.control_path,
                "--state-dir", self.state_dir, *log_args]

    def wait_ready(self, timeout: float = 20.0) -> dict:
        """Waits until the socket answers `address` (the controller is up); returns the reply."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            if self.exited() is not None:
                raise AssertionError(f"blemu host exited: {self.exited()}\n{self.log_tail()}")
            if os.path.exists(self.control_path):
                with contextlib.suppress(OSError):
                    client = HostClient(self.control_path)
                    try:
                        last = client.host("address")
                        if last["ok"]:
                            return last
                    finally:
                        client.close()
            time.sleep(0.1)
        raise AssertionError(f"blemu host not ready within {timeout} s (last {last}):\n{self.log_tail()}")


class HostClient:
    """One connection to the control socket: JSON lines both ways."""

    def __init__(self, path: str, timeout: float = 5.0):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.buffer = b""
        self.next_id = 1

    def close(self) -> None:
        self.sock.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_line(self) -> dict:
        while b"\n" not in self.buffer:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise AssertionError(f"the control socket closed (had {self.buffer!r})")
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return json.loads(line)

    def request(self, **fields) -> dict:
        request_id = self.next_id
        self.next_id += 1
        self.send_raw((json.dumps({"id": request_id, **fields}) + "\n").encode())
        reply = self.read_line()
        assert reply.get("id") == request_id, f"reply {reply} to request {request_id}"
        return reply

    def host(self, op: str, **fields) -> dict:
        return self.request(cmd="host", op=op, **fields)

    def hosts_at_once(self, *requests: tuple[str, dict]) -> list[dict]:
        """Several `host` requests in one write: blemu answers the lines of one read in a row,
        before its run loop takes anything else (a controller's event), so the later requests
        see exactly the state the earlier ones left."""
        first = self.next_id
        self.next_id += len(requests)
        lines = [json.dumps({"id": first + offset, "cmd": "host", "op": op, **fields}) + "\n"
                 for offset, (op, fields) in enumerate(requests)]
        self.send_raw("".join(lines).encode())
        replies = [self.read_line() for _ in requests]
        assert [reply.get("id") for reply in replies] == list(range(first, first + len(requests))), replies
        return replies

    def ok(self, op: str, **fields) -> dict:
        reply = self.host(op, **fields)
        assert reply["ok"] is True, f"host {op} {fields} refused: {reply}"
        return reply


class HostEvents:
    """`watch host` on a connection of its own, its event lines in a queue (a reader thread)."""

    def __init__(self, path: str):
        self.client = HostClient(path)
        reply = self.client.request(cmd="watch", device="host")
        assert reply["ok"] is True and reply["watching"] is True and reply["device"] == "host", reply
        self.client.sock.settimeout(None)
        self.events: queue.Queue[dict] = queue.Queue()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        with contextlib.suppress(Exception):
            while True:
                self.events.put(self.client.read_line())

    def until(self, predicate, timeout: float, what: str) -> dict:
        seen: list[str] = []
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {what} within {timeout} s; saw {seen[-20:]}")
            try:
                event = self.events.get(timeout=left)
            except queue.Empty:
                continue
            assert event.get("device") == "host", event
            seen.append(event.get("event"))
            if predicate(event):
                return event

    def collect(self, seconds: float) -> list[dict]:
        events: list[dict] = []
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            with contextlib.suppress(queue.Empty):
                events.append(self.events.get(timeout=left))
        return events

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.client.sock.shutdown(socket.SHUT_RDWR)
        self.client.close()


class BumblePeer:
    """A Bumble device on its own thread: advertises as asked, records connections and
    disconnections (with the address the central used and the reason)."""

    def __init__(self, controller: str, random_address: str = "F0:F1:F2:F3:F4:E1"):
        self.controller = controller
        self.random_address = random_address
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.device: Device | None = None
        self.connections: list[tuple[str, int]] = []   # (central's address, its type)
        self.disconnections: list[int] = []
        self.changed = threading.Condition()
        self.stopping: asyncio.Event | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._main())

    async def _main(self) -> None:
        self.stopping = asyncio.Event()
        async with await open_transport(bumble_transport_spec(self.controller)) as (source, sink):
            device = Device.with_hci("peer", self.random_address, source, sink)
            self.device = device

            def on_connection(connection) -> None:
                with self.changed:
                    self.connections.append((connection.peer_address.to_string(with_type_qualifier=False),
                                             connection.peer_address.address_type))
                    self.changed.notify_all()

                def on_disconnection(reason) -> None:
                    with self.changed:
                        self.disconnections.append(reason)
                        self.changed.notify_all()

                connection.on("disconnection", on_disconnection)

            device.on("connection", on_connection)
            await device.power_on()
            self.ready.set()
            await self.stopping.wait()

    def call(self, coroutine_function, timeout: float = 10.0):
        """Runs `coroutine_function(device)` on the peer's loop; returns its result."""
        future = asyncio.run_coroutine_threadsafe(coroutine_function(self.device), self.loop)
        return future.result(timeout)

    @property
    def public_address(self) -> str:
        assert self.device is not None
        return self.device.public_address.to_string(with_type_qualifier=False)

    def wait(self, predicate, timeout: float, what: str) -> None:
        with self.changed:
            if not self.changed.wait_for(predicate, timeout):
                raise AssertionError(f"the Bumble peer saw no {what} within {timeout} s "
                                     f"(connections {self.connections}, disconnections {self.disconnections})")

    def start(self) -> "BumblePeer":
        self.thread.start()
        assert self.ready.wait(20), "the Bumble peer did not start"
        return self

    def stop(self) -> None:
        if self.stopping is not None:
            self.loop.call_soon_threadsafe(self.stopping.set)
        self.thread.join(10)
        if not self.thread.is_alive():
            self.loop.close()


def ad(name: str, padding: int = 0) -> bytes:
    structures = [(AdvertisingData.FLAGS, bytes([0x06])), (AdvertisingData.COMPLETE_LOCAL_NAME, name.encode())]
    if padding:
        structures.append((AdvertisingData.MANUFACTURER_SPECIFIC_DATA, bytes([0xFF, 0xFF]) + bytes(range(padding))))
    return bytes(AdvertisingData(structures))


@pytest.fixture(scope="module")
def host(rootcanal, tmp_path_factory):
    process = HostProcess(rootcanal.controller_spec, str(tmp_path_factory.mktemp("host-state"))).start()
    process.wait_ready()
    yield process
    if process.exited() is not None:
        pytest.fail(f"blemu host died during the tests: {process.exited()}", pytrace=False)
    assert process.stop() == 0, process.log_tail()
    assert not os.path.exists(process.control_path), "the control socket is still there after a clean stop"
    shutil.rmtree(os.path.dirname(process.control_path), ignore_errors=True)


@contextlib.contextmanager
def host_client(host):
    """A request connection to `host`; on the way out every link it has is disconnected, so no
    test leaves a link behind for the next (the `client` fixtures of the programmable host's files)."""
    connection = HostClient(host.control_path)
    try:
        yield connection
    finally:
        with contextlib.suppress(Exception):
            for link in connection.ok("links")["links"]:
                connection.host("disconnect", link=link["link"])
        connection.close()


@pytest.fixture
def client(host):
    with host_client(host) as connection:
        yield connection


@pytest.fixture
def events(host):
    stream = HostEvents(host.control_path)
    yield stream
    stream.close()


@pytest.fixture
def peer(rootcanal):
    bumble = BumblePeer(rootcanal.controller_spec).start()
    yield bumble
    bumble.stop()


# ---------------------------------------------------------------------------------------------
# Address


def test_address_is_the_controllers_public_one_with_a_random_one_kept_in_the_state_dir(host, client):
    reply = client.ok("address")
    assert reply["address_type"] == "public", reply
    assert reply["address"] != "00:00:00:00:00:00", reply
    random_address = reply["random_address"]
    # A static random address: the two top bits set (Vol 6, Part B, 1.3.2.1).
    assert int(random_address[:2], 16) & 0xC0 == 0xC0, reply
    stored = (Path(host.state_dir) / "host-random-address").read_text().strip()
    assert stored == random_address
    assert client.ok("address") == {**reply, "id": reply["id"] + 1}


# ---------------------------------------------------------------------------------------------
# Scanning


def reports_of(events: HostEvents, address: str, scan: int, seconds: float) -> list[dict]:
    return [e for e in events.collect(seconds)
            if e.get("event") == "advertisement" and e["scan"] == scan and e["address"] == address]


def test_scan_reports_legacy_and_extended_advertising_with_their_fields(client, events, peer):
    name = unique_name("PH")
    legacy_data = ad(name)
    scan_response = bytes(AdvertisingData([(AdvertisingData.SHORTENED_LOCAL_NAME, b"resp")]))
    extended_data = ad(name, padding=60)   # past 31 octets: only an extended PDU carries it

    async def advertise(device: Device):
        await device.create_advertising_set(
            advertising_parameters=AdvertisingParameters(
                advertising_event_properties=AdvertisingEventProperties(is_connectable=True, is_scannable=True, is_legacy=True),
                own_address_type=hci.OwnAddressType.RANDOM),
            random_address=hci.Address("F0:F1:F2:F3:F4:E2"), advertising_data=legacy_data, scan_response_data=scan_response)
        await device.create_advertising_set(
            advertising_parameters=AdvertisingParameters(
                advertising_event_properties=AdvertisingEventProperties(is_connectable=False, is_scannable=False, is_legacy=False),
                own_address_type=hci.OwnAddressType.RANDOM, advertising_sid=5, secondary_advertising_phy=hci.Phy.LE_2M),
            random_address=hci.Address("F0:F1:F2:F3:F4:E3"), advertising_data=extended_data)
        await device.create_advertising_set(
            advertising_parameters=AdvertisingParameters(
                advertising_event_properties=AdvertisingEventProperties(is_connectable=True, is_scannable=False, is_legacy=False),
                own_address_type=hci.OwnAddressType.RANDOM, advertising_sid=7,
                primary_advertising_phy=hci.Phy.LE_CODED, secondary_advertising_phy=hci.Phy.LE_CODED),
            random_address=hci.Address("F0:F1:F2:F3:F4:E4"), advertising_data=ad(name))

    peer.call(advertise)
    scan = client.ok("scan", legacy=False, phys=["1m", "coded"], own_address_type="random")["scan"]
    seen = [e for e in events.collect(3.0) if e.get("event") == "advertisement" and e["scan"] == scan]
    by_address: dict[str, list[dict]] = {}
    for event in seen:
        by_address.setdefault(event["address"], []).append(event)

    legacy = by_address.get("F0:F1:F2:F3:F4:E2", [])
    adv_ind = [e for e in legacy if not e["scan_response"]]
    scan_rsp = [e for e in legacy if e["scan_response"]]
    assert adv_ind and scan_rsp, f"legacy ADV_IND and its SCAN_RSP expected; saw {sorted(by_address)}"
    first = adv_ind[0]
    assert first["legacy"] is True and first["connectable"] is True and first["scannable"] is True, first
    assert first["directed"] is False and first["truncated"] is False and first["sid"] is None, first
    assert first["address_type"] == "random" and first["primary_phy"] == "1m" and first["secondary_phy"] is None, first
    assert bytes.fromhex(first["data"]) == legacy_data and isinstance(first["rssi"], int), first
    assert first["direct_address"] is None and first["direct_address_type"] is None and first["periodic_interval_ms"] is None
    assert bytes.fromhex(scan_rsp[0]["data"]) == scan_response, scan_rsp[0]

    extended = by_address.get("F0:F1:F2:F3:F4:E3", [])
    assert extended, f"the extended advertiser was not reported; saw {sorted(by_address)}"
    assert extended[0]["legacy"] is False and extended[0]["connectable"] is False and extended[0]["scannable"] is False, extended[0]
    assert extended[0]["sid"] == 5 and extended[0]["primary_phy"] == "1m" and extended[0]["secondary_phy"] == "2m", extended[0]
    assert bytes.fromhex(extended[0]["data"]) == extended_data, extended[0]

    coded = by_address.get("F0:F1:F2:F3:F4:E4", [])
    assert coded, f"the LE Coded advertiser was not reported; saw {sorted(by_address)}"
    assert coded[0]["primary_phy"] == "coded" and coded[0]["sid"] == 7 and coded[0]["connectable"] is True, coded[0]

    # A new scan replaces the running one; legacy only: no extended report comes.
    legacy_scan = client.ok("scan", legacy=True)["scan"]
    assert legacy_scan > scan
    stopped = events.until(lambda e: e.get("event") == "scan-stopped", 5, "scan-stopped")
    assert stopped == {**stopped, "scan": scan, "reason": "replaced"}, stopped
    later = [e for e in events.collect(2.0) if e.get("event") == "advertisement"]
    assert later and all(e["legacy"] for e in later) and all(e["scan"] == legacy_scan for e in later), later[:3]
    client.ok("scan-stop", scan=legacy_scan)
    stopped = events.until(lambda e: e.get("event") == "scan-stopped", 5, "scan-stopped")
    assert stopped["scan"] == legacy_scan and stopped["reason"] == "requested", stopped
    # Stopped means stopped: a second stop of it is refused by code.
    again = client.host("scan-stop", scan=legacy_scan)
    assert again["ok"] is False and again["code"] == "unknown-scan", again


def test_directed_advertising_to_us_is_reported_with_its_target_and_a_coded_only_scan_sees_coded(client, events, peer):
    """What Avatar's le_host_test asks of a scan: a legacy ADV_DIRECT_IND to our public address
    is reported directed and connectable, with us as its target (an extended report carries the
    direct address, 7.7.65.13); a scan on LE Coded alone sees an LE Coded advertiser, and not the
    legacy PDUs on LE 1M (which rootcanal hands to it anyway)."""
    from bumble.device import AdvertisingType
    ours = client.ok("address")["address"]

    async def advertise(device: Device):
        await device.start_advertising(advertising_type=AdvertisingType.DIRECTED_CONNECTABLE_LOW_DUTY,
                                       target=hci.Address(ours, hci.Address.PUBLIC_DEVICE_ADDRESS),
                                       own_address_type=hci.OwnAddressType.PUBLIC)
        await device.create_advertising_set(
            advertising_parameters=AdvertisingParameters(
                advertising_event_properties=AdvertisingEventProperties(is_connectable=False, is_scannable=False, is_legacy=False),
                own_address_type=hci.OwnAddressType.RANDOM, advertising_sid=2,
                primary_advertising_phy=hci.Phy.LE_CODED, secondary_advertising_phy=hci.Phy.LE_CODED),
            random_address=hci.Address("F0:F1:F2:F3:F4:E5"), advertising_data=ad("coded"))

    peer.call(advertise)
    scan = client.ok("scan", own_address_type="public")["scan"]
    directed = [e for e in events.collect(2.0) if e.get("event") == "advertisement" and e["address"] == peer.public_address]
    assert directed, "the directed advertising was not reported"
    report = directed[0]
    assert report["scan"] == scan and report["legacy"] is True and report["directed"] is True, report
    assert report["connectable"] is True and report["scannable"] is False and report["data"] == "", report
    assert report["direct_address"] == ours and report["direct_address_type"] == "public", report

    coded_scan = client.ok("scan", phys=["coded"])["scan"]
    seen = [e for e in events.collect(2.5) if e.get("event") == "advertisement" and e["scan"] == coded_scan]
    assert seen and all(e["primary_phy"] == "coded" for e in seen), seen[:3]
    assert any(e["address"] == "F0:F1:F2:F3:F4:E5" and e["secondary_phy"] == "coded" and e["sid"] == 2 for e in seen), seen[:3]
    client.ok("scan-stop", scan=coded_scan)


# ---------------------------------------------------------------------------------------------
# Connecting


def advertise_connectable(peer: BumblePeer, public: bool) -> str:
    """Legacy connectable advertising from the peer's public or random address; returns it."""

    async def advertise(device: Device):
        await device.start_advertising(
            own_address_type=hci.OwnAddressType.PUBLIC if public else hci.OwnAddressType.RANDOM, auto_restart=False)

    peer.call(advertise)
    return peer.public_address if public else peer.random_address


@pytest.mark.parametrize("public_peer", [True, False], ids=["public-peer", "random-peer"])
def test_connect_from_our_random_address_then_disconnect(client, events, peer, public_peer):
    address = advertise_connectable(peer, public_peer)
    our = client.ok("address")
    attempt = client.ok("connect", address=address, address_type="public" if public_peer else "random",
                        own_address_type="random")["attempt"]
    connected = events.until(lambda e: e.get("event") in ("connected", "connect-failed"), 15, "connection")
    assert connected["event"] == "connected", connected
    assert connected["attempt"] == attempt and connected["role"] == "central", connected
    assert connected["peer"] == address and connected["peer_type"] == ("public" if public_peer else "random"), connected
    assert connected["own_address"] == our["random_address"] and connected["own_address_type"] == "random", connected
    assert connected["interval_ms"] > 0 and connected["timeout_ms"] > 0 and "advertisement" not in connected, connected
    # The peer saw the connection come from our static random address.
    peer.wait(lambda: peer.connections, 5, "connection")
    assert peer.connections[-1] == (our["random_address"], hci.Address.RANDOM_DEVICE_ADDRESS), peer.connections

    link = connected["link"]
    listed = client.ok("links")["links"]
    assert [entry["link"] for entry in listed] == [link], listed
    assert listed[0]["encrypted"] is False and listed[0]["level"] == 1 and listed[0]["attempt"] == attempt, listed[0]
    # One link per peer: a second attempt to it is refused by code, nothing started.
    again = client.host("connect", address=address, address_type="public" if public_peer else "random")
    assert again["ok"] is False and again["code"] == "already-connected", again

    client.ok("disconnect", link=link, reason="0x13")
    gone = events.until(lambda e: e.get("event") == "disconnected", 10, "disconnection")
    assert gone["link"] == link and gone["reason"] == "0x16", gone   # this side ended it: 0x16 (Vol 1, Part F, 2.22)
    peer.wait(lambda: peer.disconnections, 5, "disconnection")
    assert peer.disconnections[-1] == 0x13, peer.disconnections
    assert client.ok("links")["links"] == []
    stale = client.host("disconnect", link=link)
    assert stale["ok"] is False and stale["code"] == "unknown-link", stale


def test_connect_from_our_public_address(client, events, peer):
    address = advertise_connectable(peer, public=False)
    our = client.ok("address")
    client.ok("connect", address=address, address_type="random", own_address_type="public")
    connected = events.until(lambda e: e.get("event") in ("connected", "connect-failed"), 15, "connection")
    assert connected["event"] == "connected" and connected["own_address"] == our["address"], connected
    peer.wait(lambda: peer.connections, 5, "connection")
    assert peer.connections[-1] == (our["address"], hci.Address.PUBLIC_DEVICE_ADDRESS), peer.connections
    client.ok("disconnect", link=connected["link"])
    events.until(lambda e: e.get("event") == "disconnected", 10, "disconnection")


def test_connect_to_nobody_fails_with_timeout_and_a_second_attempt_meanwhile_is_busy(client, events):
    attempt = client.ok("connect", address="C0:DE:00:00:00:01", address_type="random", timeout_ms=500)["attempt"]
    busy = client.host("connect", address="C0:DE:00:00:00:02", address_type="random")
    assert busy["ok"] is False and busy["code"] == "busy", busy
    failed = events.until(lambda e: e.get("event") in ("connected", "connect-failed"), 10, "connect-failed")
    assert failed == {**failed, "event": "connect-failed", "attempt": attempt, "reason": "timeout", "status": None}, failed
    # The host is free again.
    second = client.ok("connect", address="C0:DE:00:00:00:03", address_type="public", timeout_ms=300)["attempt"]
    assert second == attempt + 1
    events.until(lambda e: e.get("event") == "connect-failed" and e["attempt"] == second, 10, "second connect-failed")


# ---------------------------------------------------------------------------------------------
# Reset


def test_reset_closes_links_stops_scanning_and_makes_a_new_random_address(host, client, events, peer):
    address = advertise_connectable(peer, public=True)
    before = client.ok("address")
    client.ok("connect", address=address, address_type="public", own_address_type="random")
    connected = events.until(lambda e: e.get("event") in ("connected", "connect-failed"), 15, "connection")
    assert connected["event"] == "connected", connected
    scan = client.ok("scan", passive=True)["scan"]

    # Nothing new starts while it runs: asked in the reset's write, before the link can close.
    reset, during = client.hosts_at_once(("reset", {}), ("scan", {}))
    assert reset["ok"] is True, reset
    assert during["ok"] is False and during["code"] == "not-ready", during
    seen = []
    done = events.until(lambda e: seen.append(e) or e.get("event") == "reset", 10, "reset")
    kinds = [e["event"] for e in seen if e["event"] != "advertisement"]
    assert {"event": "scan-stopped", "scan": scan, "reason": "reset"}.items() <= next(
        e for e in seen if e["event"] == "scan-stopped").items(), seen
    assert kinds.index("disconnected") < kinds.index("reset"), kinds
    assert done["event"] == "reset"
    peer.wait(lambda: peer.disconnections, 5, "disconnection")
    after = client.ok("address")
    assert after["address"] == before["address"] and after["random_address"] != before["random_address"], (before, after)
    assert (Path(host.state_dir) / "host-random-address").read_text().strip() == after["random_address"]
    assert client.ok("links")["links"] == []


# ---------------------------------------------------------------------------------------------
# Hostile requests: a clear error, and nothing changed


@pytest.mark.parametrize("request_fields, fragment", [
    ({"cmd": "host"}, 'missing "op"'),
    ({"cmd": "host", "op": 7}, '"op" must be a string'),
    ({"cmd": "host", "op": "fly"}, "unknown host op 'fly'"),
    ({"cmd": "host", "op": "address", "extra": 1}, "host address takes no 'extra'"),
    ({"cmd": "host", "op": "scan", "phys": "1m"}, '"phys" must be a list'),
    ({"cmd": "host", "op": "scan", "phys": []}, '"phys" must be a list'),
    ({"cmd": "host", "op": "scan", "phys": ["2m"]}, '"phys" holds'),
    ({"cmd": "host", "op": "scan", "phys": ["1m", "1m"]}, '"phys" holds'),
    ({"cmd": "host", "op": "scan", "legacy": "yes"}, '"legacy" must be true or false'),
    ({"cmd": "host", "op": "scan", "interval_ms": 0}, '"interval_ms" must be a whole number from 3 to 10240'),
    ({"cmd": "host", "op": "scan", "interval_ms": 10, "window_ms": 20}, "the window is at most the interval"),
    ({"cmd": "host", "op": "scan", "own_address_type": "secret"}, '"own_address_type"'),
    ({"cmd": "host", "op": "connect", "address_type": "public"}, 'missing "address"'),
    ({"cmd": "host", "op": "connect", "address": "AA:BB", "address_type": "public"}, "is not an address"),
    ({"cmd": "host", "op": "connect", "address": "AA:BB:CC:DD:EE:FF", "address_type": "other"}, '"address_type"'),
    ({"cmd": "host", "op": "connect", "address": "AA:BB:CC:DD:EE:FF", "address_type": "public", "timeout_ms": 99},
     '"timeout_ms" must be a whole number from 100 to 60000'),
    ({"cmd": "host", "op": "connect", "address": "AA:BB:CC:DD:EE:FF", "address_type": "public", "timeout_ms": 1.5},
     '"timeout_ms" must be a whole number'),
    ({"cmd": "host", "op": "disconnect"}, 'missing "link"'),
    ({"cmd": "host", "op": "disconnect", "link": -1}, '"link" must be a whole number'),
    ({"cmd": "host", "op": "disconnect", "link": 1, "reason": "0x16"}, "is not one HCI Disconnect allows"),
    ({"cmd": "host", "op": "disconnect", "link": 1, "reason": "zz"}, "is not a hex octet"),
    ({"cmd": "host", "op": "scan-stop", "scan": "1"}, '"scan" must be a whole number'),
    ({"cmd": "watch", "device": "host", "kinds": "write"}, "watch host takes no kinds or uuid"),
    ({"cmd": "set", "device": "host", "key": "bpm", "value": "1"}, "no device"),
])
def test_hostile_requests_are_refused_and_change_nothing(client, events, request_fields, fragment):
    reply = client.request(**request_fields)
    assert reply["ok"] is False and fragment in reply["error"], reply
    assert client.ok("links")["links"] == []
    # Nothing started: no event came.
    assert [e for e in events.collect(0.3) if e.get("event") != "advertisement"] == []


def test_unknown_ids_are_refused_by_code(client):
    for op, fields, code in [("disconnect", {"link": 999999}, "unknown-link"), ("scan-stop", {"scan": 999999}, "unknown-scan")]:
        reply = client.host(op, **fields)
        assert reply["ok"] is False and reply["code"] == code, reply


def test_ctl_words_reach_the_host_and_are_checked_before_sending(host):
    result = run_cli(["ctl", host.control_path, "host", "address"])
    assert result.returncode == 0, result.describe()
    assert json.loads(result.stdout.splitlines()[-1])["address_type"] == "public"
    result = run_cli(["ctl", host.control_path, "host", "scan", "--phys", "1m,coded", "--passive", "true"])
    assert result.returncode == 0, result.describe()
    scan = json.loads(result.stdout.splitlines()[-1])["scan"]
    result = run_cli(["ctl", host.control_path, "host", "scan-stop", "--scan", str(scan)])
    assert result.returncode == 0, result.describe()
    for words, fragment in [(["host", "fly"], "unknown host op 'fly'"),
                            (["host", "scan", "--phys", "1m,4m"], '"phys" holds'),
                            (["host", "connect", "--address", "AA:BB:CC:DD:EE:FF"], 'missing "address_type"'),
                            (["host", "disconnect", "--link", "one"], "is not a whole number"),
                            (["host", "links", "--link", "1"], "host links takes no --link")]:
        result = run_cli(["ctl", host.control_path, *words])
        assert result.returncode != 0 and fragment in result.stderr, (words, result.describe())


def test_the_device_commands_answer_as_with_no_devices_and_a_watch_of_everything_sees_the_host(host, client):
    assert client.request(cmd="list") == {"id": 1, "ok": True, "devices": []}
    everything = HostClient(host.control_path)
    try:
        reply = everything.request(cmd="watch")
        assert reply["ok"] is True and reply["device"] is None, reply
        scan = client.ok("scan")["scan"]
        client.ok("scan-stop", scan=scan)
        everything.sock.settimeout(5)
        line = everything.read_line()
        while line.get("event") == "advertisement":
            line = everything.read_line()
        assert line["event"] == "scan-stopped" and line["device"] == "host" and line["scan"] == scan, line
    finally:
        everything.close()


def test_ctl_watch_host_streams_the_hosts_events(host, client):
    import subprocess
    from harness import child_environment
    child = subprocess.Popen([str(blemu_binary()), "ctl", host.control_path, "watch", "host"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=child_environment({"BLEMU_CONTROLLER": None}))
    deadline = time.monotonic() + 10
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert child.stdout is not None
        for raw in child.stdout:
            lines.put(raw.decode(errors="replace"))

    threading.Thread(target=read, daemon=True).start()

    def next_line() -> dict:
        """The next line, never waiting past the deadline."""
        try:
            return json.loads(lines.get(timeout=max(0.01, deadline - time.monotonic())))
        except queue.Empty:
            raise AssertionError("blemu ctl watch host printed nothing more in time") from None

    try:
        reply = next_line()
        assert reply["ok"] is True and reply["device"] == "host", reply
        scan = client.ok("scan")["scan"]
        client.ok("scan-stop", scan=scan)
        while time.monotonic() < deadline:
            event = next_line()
            if event["event"] == "scan-stopped":
                assert event["scan"] == scan and event["reason"] == "requested" and event["device"] == "host", event
                break
        else:
            raise AssertionError("no scan-stopped line from blemu ctl watch host")
    finally:
        child.terminate()
        child.wait(timeout=5)
