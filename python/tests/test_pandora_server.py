"""blemu-pandora's services against a stand-in for `blemu host`'s control socket.

No blemu, no radio: the stand-in speaks the programmable host's vocabulary (Docs/CONTROL.md,
"The programmable host": `{"cmd":"host","op":…}` requests, one reply each, and a `watch host`
stream of events), records what the server asked, and sends the events a test scripts. Each test
drives the server through Pandora's own client stubs, as Avatar does, and checks both ends:
what the client got and which host requests the server made.
"""

from __future__ import annotations

import json
import os
import re
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Optional

import grpc
import pytest
from google.protobuf import any_pb2, empty_pb2
from pandora import host_grpc, host_pb2, l2cap_grpc, security_grpc, security_pb2
from pandora.host_pb2 import DataTypes

from blemu_testkit.pandora import server as pandora_server
from blemu_testkit.pandora import translate
from blemu_testkit.pandora.host import Host, HostConnection

Reply = dict[str, Any]
Handler = Callable[[dict[str, Any]], "tuple[Reply, list[dict[str, Any]]]"]


class FakeHost:
    """A Unix socket answering `list`, `watch host` and `host` requests. `handlers[op]` gives
    (reply fields, events to send after the reply); `emit` sends an event now."""

    def __init__(self, path: Optional[str] = None) -> None:
        self.folder = tempfile.mkdtemp(prefix="pandora-fake-", dir="/tmp")
        self.path = path or os.path.join(self.folder, "control.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(16)
        self.requests: list[dict[str, Any]] = []
        self.watchers: list[socket.socket] = []
        self.lock = threading.Lock()
        self.seq = 0
        self.links: list[dict[str, Any]] = []
        self.handlers: dict[str, Handler] = {
            "address": lambda r: ({"address": "F0:F1:F2:F3:F4:F5", "address_type": "public",
                                   "random_address": "C0:11:22:33:44:55"}, []),
            "reset": lambda r: ({}, [{"event": "reset"}]),
            "pairing-config": lambda r: ({}, []),
            "links": lambda r: ({"links": list(self.links)}, []),
            "scan": lambda r: ({"scan": 5}, []),
            "scan-stop": lambda r: ({}, [{"event": "scan-stopped", "scan": r["scan"], "reason": "stopped"}]),
            "advertise": lambda r: ({"advertisement": 9}, []),
            "advertise-stop": lambda r: ({}, [{"event": "advertising-stopped", "advertisement": r["advertisement"], "reason": "stopped"}]),
            "pairing-answer": lambda r: ({}, []),
        }
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _send(self, conn: socket.socket, message: dict[str, Any]) -> None:
        conn.sendall((json.dumps(message) + "\n").encode())

    def _serve(self, conn: socket.socket) -> None:
        buffer = b""
        while True:
            try:
                chunk = conn.recv(65536)
            except OSError:
                return
            if not chunk:
                return
            buffer += chunk
            while b"\n" in buffer:
                line, _, buffer = buffer.partition(b"\n")
                request = json.loads(line)
                cmd = request.get("cmd")
                if cmd == "list":
                    self._send(conn, {"id": request["id"], "ok": True, "devices": []})
                elif cmd == "watch":
                    assert request.get("device") == "host"
                    with self.lock:
                        self._send(conn, {"id": request["id"], "ok": True})
                        self.watchers.append(conn)
                elif cmd == "host":
                    with self.lock:
                        self.requests.append(request)
                    handler = self.handlers.get(request["op"])
                    if handler is None:
                        self._send(conn, {"id": request["id"], "ok": False, "error": f"unknown op {request['op']}"})
                        continue
                    fields, events = handler(request)
                    ok = fields.pop("ok", True)
                    self._send(conn, {"id": request["id"], "ok": ok, **fields})
                    for event in events:
                        self.emit(**event)

    def emit(self, **event: Any) -> None:
        with self.lock:
            self.seq += 1
            line = {"seq": self.seq, "t": time.time(), "device": "host", **event}
            for watcher in list(self.watchers):
                try:
                    self._send(watcher, line)
                except OSError:
                    self.watchers.remove(watcher)

    def ops(self, op: Optional[str] = None) -> list[dict[str, Any]]:
        with self.lock:
            return [r for r in self.requests if op is None or r["op"] == op]

    def wait_op(self, op: str, count: int = 1, timeout: float = 5.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.ops(op)
            if len(found) >= count:
                return found[count - 1]
            time.sleep(0.02)
        raise AssertionError(f"no {op} request (got {[r['op'] for r in self.ops()]})")

    def close(self) -> None:
        self.listener.close()
        with self.lock:
            for watcher in self.watchers:
                watcher.close()


@pytest.fixture
def fake() -> Iterator[FakeHost]:
    host = FakeHost()
    yield host
    host.close()


@pytest.fixture
def channel(fake: FakeHost) -> Iterator[grpc.Channel]:
    server, pandora, port = pandora_server.serve(Host(HostConnection(fake.path)), "127.0.0.1:0")
    fake.wait_op("pairing-config")
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield channel
    server.stop(grace=0).wait()
    pandora.stop()


def token(link: int) -> host_pb2.Connection:
    return translate.connection(link)


def in_thread(function: Callable[[], Any]) -> "tuple[threading.Thread, list[Any]]":
    result: list[Any] = []

    def run() -> None:
        try:
            result.append(function())
        except Exception as error:  # noqa: BLE001 - the test looks at it
            result.append(error)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, result


def test_the_server_sets_bumbles_pairing_defaults_with_its_io_capability_when_it_starts(fake: FakeHost, channel: grpc.Channel) -> None:
    config = fake.wait_op("pairing-config")
    assert config["io_capability"] == "keyboard-display"
    assert config["bonding"] is True and config["mitm"] is True and config["secure_connections_only"] is False
    assert config["keys"] == ["enc", "id", "sign"]


def test_read_local_address_is_the_hosts_identity_address(channel: grpc.Channel) -> None:
    assert host_grpc.Host(channel).ReadLocalAddress().address == bytes.fromhex("F0F1F2F3F4F5")


def test_factory_reset_resets_waits_for_the_reset_event_and_sets_the_pairing_defaults_again(fake: FakeHost, channel: grpc.Channel) -> None:
    fake.handlers["reset"] = lambda r: ({}, [])
    thread, result = in_thread(lambda: host_grpc.Host(channel).FactoryReset(timeout=15))
    fake.wait_op("reset")
    time.sleep(0.3)
    assert not result, "FactoryReset answered before the reset event"
    fake.emit(event="reset")
    thread.join(5)
    assert result and isinstance(result[0], empty_pb2.Empty)
    fake.wait_op("pairing-config", count=2)
    assert host_grpc.Host(channel).ReadLocalAddress(timeout=15).address == bytes.fromhex("F0F1F2F3F4F5")


def test_factory_reset_on_a_host_it_cannot_restart_fails_when_blemu_refuses_reset(fake: FakeHost, channel: grpc.Channel) -> None:
    fake.handlers["reset"] = lambda r: ({"ok": False, "error": "unknown op"}, [])
    with pytest.raises(grpc.RpcError) as raised:
        host_grpc.Host(channel).FactoryReset(timeout=15)
    assert raised.value.code() == grpc.StatusCode.UNAVAILABLE


def test_connect_le_connects_and_gives_the_links_token(fake: FakeHost, channel: grpc.Channel) -> None:
    fake.handlers["connect"] = lambda r: ({"attempt": 3}, [
        {"event": "connected", "attempt": 2, "link": 99, "role": "central"},  # another attempt's
        {"event": "connected", "attempt": 3, "link": 12, "role": "central"}])
    response = host_grpc.Host(channel).ConnectLE(random=bytes.fromhex("C0C1C2C3C4C5"), own_address_type=host_pb2.RANDOM, timeout=15)
    assert response.result_variant() == "connection"
    assert response.connection.cookie.value == b"12"
    request = fake.wait_op("connect")
    assert request["address"] == "C0:C1:C2:C3:C4:C5" and request["address_type"] == "random"
    assert request["own_address_type"] == "random"
    assert 14000 <= request["timeout_ms"] <= 15000  # the client's deadline


@pytest.mark.parametrize("event,variant", [
    ({"event": "connect-failed", "attempt": 1, "reason": "timeout", "status": None}, "peer_not_found"),
    ({"event": "connect-failed", "attempt": 1, "reason": "controller", "status": "0x0B"}, "connection_already_exists"),
])
def test_connect_le_failures_are_the_protos_results(fake: FakeHost, channel: grpc.Channel, event, variant) -> None:
    fake.handlers["connect"] = lambda r: ({"attempt": 1}, [event])
    assert host_grpc.Host(channel).ConnectLE(public=bytes(6), timeout=5).result_variant() == variant


def test_connect_le_refused_as_already_connected_says_so(fake: FakeHost, channel: grpc.Channel) -> None:
    fake.handlers["connect"] = lambda r: ({"ok": False, "error": "already connected", "code": "already-connected"}, [])
    assert host_grpc.Host(channel).ConnectLE(public=bytes(6), timeout=5).result_variant() == "connection_already_exists"


def test_a_refused_request_is_a_grpc_error_with_blemus_reason(fake: FakeHost, channel: grpc.Channel) -> None:
    fake.handlers["connect"] = lambda r: ({"ok": False, "error": "timeout_ms 70000 is not 100..60000"}, [])
    with pytest.raises(grpc.RpcError) as raised:
        host_grpc.Host(channel).ConnectLE(public=bytes(6), timeout=5)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "100..60000" in raised.value.details()


def test_a_token_this_server_did_not_make_is_an_invalid_argument(channel: grpc.Channel) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        host_grpc.Host(channel).Disconnect(connection=host_pb2.Connection(cookie=any_pb2.Any(value=b"\x00\x01")), timeout=5)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_disconnect_asks_and_waits_for_the_disconnection(fake: FakeHost, channel: grpc.Channel) -> None:
    fake.handlers["disconnect"] = lambda r: ({}, [])
    thread, result = in_thread(lambda: host_grpc.Host(channel).Disconnect(connection=token(4), timeout=5))
    assert fake.wait_op("disconnect")["link"] == 4
    time.sleep(0.3)
    assert not result
    fake.emit(event="disconnected", link=4, reason="0x16")
    thread.join(5)
    assert isinstance(result[0], empty_pb2.Empty)


def test_disconnect_of_a_link_already_gone_is_done(fake: FakeHost, channel: grpc.Channel) -> None:
    fake.handlers["disconnect"] = lambda r: ({"ok": False, "error": "no link 4", "code": "unknown-link"}, [])
    host_grpc.Host(channel).Disconnect(connection=token(4), timeout=5)


def test_wait_disconnection_waits_while_the_link_lives_and_returns_at_once_when_it_is_gone(fake: FakeHost, channel: grpc.Channel) -> None:
    host_grpc.Host(channel).WaitDisconnection(connection=token(4), timeout=5)  # no such link
    fake.links = [{"link": 4, "role": "peripheral", "level": 1}]
    with pytest.raises(grpc.RpcError) as raised:
        host_grpc.Host(channel).WaitDisconnection(connection=token(4), timeout=1)
    assert raised.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    thread, result = in_thread(lambda: host_grpc.Host(channel).WaitDisconnection(connection=token(4), timeout=5))
    time.sleep(0.5)
    fake.emit(event="disconnected", link=5, reason="0x13")
    fake.emit(event="disconnected", link=4, reason="0x13")
    thread.join(5)
    assert isinstance(result[0], empty_pb2.Empty)


def test_scan_streams_reports_decoded_with_scan_responses_merged_and_stops_the_scan_when_cancelled(fake: FakeHost, channel: grpc.Channel) -> None:
    stream = host_grpc.Host(channel).Scan(own_address_type=host_pb2.RANDOM, timeout=10)
    request = fake.wait_op("scan")
    assert request["own_address_type"] == "random" and request["phys"] == ["1m", "coded"]
    assert request["legacy"] is False and request["passive"] is False
    base = {"event": "advertisement", "scan": 5, "address": "C0:C1:C2:C3:C4:C5", "address_type": "public",
            "legacy": True, "connectable": True, "scannable": True, "directed": False, "truncated": False,
            "sid": None, "primary_phy": "1m", "secondary_phy": None, "tx_power": None, "rssi": -50}
    fake.emit(**{**base, "scan": 4, "data": "020106"})  # another scan's
    fake.emit(**{**base, "scan_response": False, "data": "0bff" + b"pause cafe".hex()})
    fake.emit(**{**base, "scan_response": True, "connectable": False, "data": "0509626c656d"})
    report = next(stream)
    assert report.public == bytes.fromhex("C0C1C2C3C4C5") and report.legacy and report.connectable
    assert report.data.complete_local_name == "blem" and report.data.manufacturer_specific_data == b"pause cafe"
    stream.cancel()
    assert fake.wait_op("scan-stop")["scan"] == 5


def test_scan_with_named_phys_intervals_and_legacy_passes_them_on(fake: FakeHost, channel: grpc.Channel) -> None:
    stream = host_grpc.Host(channel).Scan(legacy=True, passive=True, phys=[host_pb2.PRIMARY_CODED], interval=60, window=30, timeout=5)
    request = fake.wait_op("scan")
    assert request["legacy"] is True and request["passive"] is True and request["phys"] == ["coded"]
    assert request["interval_ms"] == 60 and request["window_ms"] == 30
    stream.cancel()


def test_a_scan_ends_when_blemu_stops_it(fake: FakeHost, channel: grpc.Channel) -> None:
    stream = host_grpc.Host(channel).Scan(timeout=5)
    fake.wait_op("scan")
    fake.emit(event="scan-stopped", scan=5, reason="replaced")
    assert list(stream) == []


def test_advertise_sends_the_data_on_the_air_and_streams_each_connection(fake: FakeHost, channel: grpc.Channel) -> None:
    stream = host_grpc.Host(channel).Advertise(legacy=True, connectable=True, own_address_type=host_pb2.RANDOM,
                                               data=DataTypes(manufacturer_specific_data=b"pause cafe"), timeout=10)
    request = fake.wait_op("advertise")
    assert request["data"] == "0bff" + b"pause cafe".hex()
    assert request["legacy"] is True and request["connectable"] is True and request["scannable"] is True
    assert request["own_address_type"] == "random"
    assert request["scan_response"] == ""  # the stubs' default: an empty scan response (ADV_IND answers with it)
    fake.emit(event="connected", advertisement=8, link=30, role="peripheral")  # another advertisement's
    fake.emit(event="connected", advertisement=9, link=31, role="peripheral")
    assert next(stream).connection.cookie.value == b"31"
    stream.cancel()
    assert fake.wait_op("advertise-stop")["advertisement"] == 9


@pytest.mark.parametrize("kwargs,expected", [
    (dict(legacy=True, connectable=False, scan_response_data=DataTypes(complete_local_name="x")),
     dict(scannable=True, connectable=False, scan_response="020978")),
    (dict(legacy=True, connectable=False, scan_response_data=None), dict(scannable=False, connectable=False, scan_response=None)),
    (dict(legacy=True, connectable=False), dict(scannable=True, connectable=False, scan_response="")),
    (dict(legacy=True, connectable=False, public=bytes.fromhex("112233445566"), data=DataTypes(complete_local_name="x")),
     dict(connectable=True, scannable=False, directed_to="11:22:33:44:55:66", directed_type="public")),
    (dict(legacy=False, connectable=True, primary_phy=host_pb2.PRIMARY_CODED, secondary_phy=host_pb2.SECONDARY_CODED, interval=200),
     dict(scannable=False, scan_response=None, primary_phy="coded", secondary_phy="coded", interval_ms=200)),
    (dict(legacy=False, connectable=True, scan_response_data=DataTypes(complete_local_name="x")),
     dict(scannable=True, scan_response="020978")),  # blemu refuses it, naming the rule
    (dict(legacy=False, connectable=False, random=bytes.fromhex("C00000000001"), scan_response_data=DataTypes()),
     dict(scannable=False, directed_to="C0:00:00:00:00:01", directed_type="random", scan_response=None)),
    # Resolvable private addresses: passed on, blemu's host makes them from its IRK.
    (dict(legacy=True, connectable=True, own_address_type=host_pb2.RESOLVABLE_OR_PUBLIC),
     dict(connectable=True, own_address_type="resolvable-or-public")),
    (dict(legacy=False, connectable=True, own_address_type=host_pb2.RESOLVABLE_OR_RANDOM),
     dict(connectable=True, own_address_type="resolvable-or-random")),
    # The stubs' default empty scan response on extended non-connectable advertising: none, not scannable.
    (dict(legacy=False, connectable=False, data=DataTypes(complete_local_name="x")),
     dict(scannable=False, connectable=False, scan_response=None, data="020978")),
])
def test_advertise_requests_become_the_advertise_fields(fake: FakeHost, channel: grpc.Channel, kwargs, expected) -> None:
    stream = host_grpc.Host(channel).Advertise(**kwargs, timeout=5)
    request = fake.wait_op("advertise")
    for key, value in expected.items():
        assert request.get(key) == value, key
    if kwargs.get("legacy") and kwargs.get("public"):
        assert "data" not in request  # ADV_DIRECT_IND carries no data
    stream.cancel()


def test_advertise_with_data_that_cannot_go_on_the_air_is_an_invalid_argument(fake: FakeHost, channel: grpc.Channel) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        list(host_grpc.Host(channel).Advertise(legacy=True, data=DataTypes(complete_service_class_uuids16=["12345"]), timeout=5))
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert not fake.ops("advertise")


def test_br_edr_and_l2cap_answer_unimplemented(channel: grpc.Channel) -> None:
    host = host_grpc.Host(channel)
    for call in (lambda: host.Connect(address=bytes(6), timeout=5), lambda: host.WaitConnection(address=bytes(6), timeout=5),
                 lambda: list(host.Inquiry(timeout=5)), lambda: host.SetDiscoverabilityMode(timeout=5),
                 lambda: host.SetConnectabilityMode(timeout=5),
                 lambda: security_grpc.Security(channel).Secure(connection=token(1), classic=security_pb2.LEVEL2, timeout=5),
                 lambda: l2cap_grpc.L2CAP(channel).Send(data=b"x", timeout=5)):
        with pytest.raises(grpc.RpcError) as raised:
            call()
        assert raised.value.code() == grpc.StatusCode.UNIMPLEMENTED


# -- security ------------------------------------------------------------------------------

@pytest.mark.parametrize("events,variant", [
    ([{"event": "security", "link": 2, "level": 4}, {"event": "security", "link": 3, "level": 3}], "success"),
    ([{"event": "security", "link": 3, "level": 2}], "not_reached"),
    ([{"event": "security-failed", "link": 3, "reason": "pairing-failure", "detail": "0x05"}], "pairing_failure"),
    ([{"event": "security-failed", "link": 3, "reason": "authentication-failure"}], "authentication_failure"),
    ([{"event": "disconnected", "link": 3, "reason": "0x13"}], "connection_died"),
])
def test_secure_asks_for_the_level_and_answers_with_the_outcome(fake: FakeHost, channel: grpc.Channel, events, variant) -> None:
    fake.handlers["secure"] = lambda r: ({}, events)
    response = security_grpc.Security(channel).Secure(connection=token(3), le=security_pb2.LE_LEVEL3, timeout=5)
    assert response.result_variant() == variant
    request = fake.wait_op("secure")
    assert request["link"] == 3 and request["level"] == 3


def test_secure_at_a_level_the_link_has_succeeds_at_once(fake: FakeHost, channel: grpc.Channel) -> None:
    fake.handlers["secure"] = lambda r: ({"already": True}, [])
    assert security_grpc.Security(channel).Secure(connection=token(3), le=security_pb2.LE_LEVEL2, timeout=5).result_variant() == "success"


def test_wait_security_succeeds_when_the_link_reaches_the_level_whoever_started(fake: FakeHost, channel: grpc.Channel) -> None:
    fake.links = [{"link": 6, "role": "peripheral", "level": 1}]
    thread, result = in_thread(lambda: security_grpc.Security(channel).WaitSecurity(connection=token(6), le=security_pb2.LE_LEVEL3, timeout=5))
    fake.wait_op("links")
    time.sleep(0.2)
    fake.emit(event="security", link=6, level=2)  # not yet
    time.sleep(0.2)
    assert not result
    fake.emit(event="security", link=6, level=3)
    thread.join(5)
    assert result[0].result_variant() == "success"


@pytest.mark.parametrize("links,event,variant", [
    ([{"link": 6, "level": 4}], None, "success"),
    ([], None, "connection_died"),
    ([{"link": 6, "level": 1}], {"event": "security-failed", "link": 6, "reason": "encryption-failure"}, "encryption_failure"),
    ([{"link": 6, "level": 1}], {"event": "disconnected", "link": 6, "reason": "0x08"}, "connection_died"),
    # The peer's pairing ended encrypted below the level (Just Works where level 3 is waited for).
    ([{"link": 6, "level": 1}], {"event": "security", "link": 6, "level": 2, "encrypted": True}, "authentication_failure"),
])
def test_wait_security_outcomes(fake: FakeHost, channel: grpc.Channel, links, event, variant) -> None:
    fake.links = links
    thread, result = in_thread(lambda: security_grpc.Security(channel).WaitSecurity(connection=token(6), le=security_pb2.LE_LEVEL3, timeout=5))
    fake.wait_op("links")
    if event:
        time.sleep(0.2)
        fake.emit(**event)
    thread.join(5)
    assert result[0].result_variant() == variant


@pytest.mark.parametrize("wanted,reached,reading,met", [
    (3, 2, "authenticated", False), (3, 3, "authenticated", True), (3, 2, "paired", True), (3, 1, "paired", False),
    (4, 3, "paired", False), (2, 2, "paired", True), (4, 4, "authenticated", True), (3, None, "paired", False),
    (3, True, "paired", False), (3, "3", "authenticated", False),
])
def test_le_level3_is_read_as_authenticated_or_as_paired_and_nothing_else_changes(wanted, reached, reading, met) -> None:
    assert translate.level_met(wanted, reached, reading) is met


@pytest.fixture
def paired_channel(fake: FakeHost) -> Iterator[grpc.Channel]:
    server, pandora, port = pandora_server.serve(Host(HostConnection(fake.path)), "127.0.0.1:0", le_level3="paired")
    fake.wait_op("pairing-config")
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield channel
    server.stop(grace=0).wait()
    pandora.stop()


def test_with_le_level3_paired_a_just_works_link_passes_secure_and_wait_security_at_level3(fake: FakeHost, paired_channel) -> None:
    fake.handlers["secure"] = lambda r: ({}, [{"event": "security", "link": 3, "level": 2, "encrypted": True}])
    security = security_grpc.Security(paired_channel)
    assert security.Secure(connection=token(3), le=security_pb2.LE_LEVEL3, timeout=5).result_variant() == "success"
    assert fake.wait_op("secure")["level"] == 3, "blemu is still asked for level 3 (the pairing sets MITM)"
    fake.handlers["secure"] = lambda r: ({}, [{"event": "security", "link": 3, "level": 2, "encrypted": True}])
    assert security.Secure(connection=token(3), le=security_pb2.LE_LEVEL4, timeout=5).result_variant() == "not_reached"
    fake.links = [{"link": 6, "role": "peripheral", "level": 1}]
    thread, result = in_thread(lambda: security.WaitSecurity(connection=token(6), le=security_pb2.LE_LEVEL3, timeout=5))
    fake.wait_op("links")
    time.sleep(0.2)
    fake.emit(event="security", link=6, level=2, encrypted=True)
    thread.join(5)
    assert result[0].result_variant() == "success"


def test_an_unknown_le_level3_reading_is_refused() -> None:
    with pytest.raises(pandora_server.BlemuError):
        pandora_server.Pandora(None, le_level3="maybe")  # type: ignore[arg-type]


def test_on_pairing_hands_each_pairing_request_over_and_sends_the_answers_back(fake: FakeHost, channel: grpc.Channel) -> None:
    stream = security_grpc.Security(channel).OnPairing(timeout=10)  # as Avatar: answers go with stream.send
    time.sleep(0.3)  # the stream is open on the server
    fake.emit(event="pairing-request", link=3, pairing=21, method="numeric-comparison", passkey=123456)
    event = next(stream)
    assert event.numeric_comparison == 123456 and event.connection.cookie.value == b"3"
    stream.send(security_pb2.PairingEventAnswer(event=event, confirm=True))
    answer = fake.wait_op("pairing-answer")
    assert answer["pairing"] == 21 and answer["confirm"] is True

    fake.emit(event="pairing-request", link=3, pairing=22, method="passkey-entry", passkey=None)
    event = next(stream)
    assert event.method_variant() == "passkey_entry_request"
    stream.send(security_pb2.PairingEventAnswer(event=event))  # no passkey: a rejection
    answer = fake.wait_op("pairing-answer", count=2)
    assert answer["pairing"] == 22 and "passkey" not in answer and "confirm" not in answer

    fake.emit(event="pairing-request", link=3, pairing=23, method="passkey-display", passkey=42)
    assert next(stream).passkey_entry_notification == 42
    fake.emit(event="pairing-request", link=3, pairing=24, method="passkey-entry", passkey=None)
    stream.send(security_pb2.PairingEventAnswer(event=next(stream), passkey=123))
    answer = fake.wait_op("pairing-answer", count=3)
    assert answer["pairing"] == 24 and answer["passkey"] == 123
    stream.cancel()


def test_without_an_on_pairing_stream_just_works_is_confirmed_and_a_passkey_to_type_refused(fake: FakeHost, channel: grpc.Channel) -> None:
    fake.emit(event="pairing-request", link=3, pairing=31, method="just-works", passkey=None)
    answer = fake.wait_op("pairing-answer")
    assert answer["pairing"] == 31 and answer["confirm"] is True
    fake.emit(event="pairing-request", link=3, pairing=32, method="passkey-entry", passkey=None)
    answer = fake.wait_op("pairing-answer", count=2)
    assert answer["pairing"] == 32 and "confirm" not in answer and "passkey" not in answer
    fake.emit(event="pairing-request", link=3, pairing=33, method="passkey-display", passkey=5)
    time.sleep(0.3)
    assert len(fake.ops("pairing-answer")) == 2  # shown, nothing to answer


def test_is_bonded_and_delete_bond_ask_for_the_address_and_its_type(fake: FakeHost, channel: grpc.Channel) -> None:
    fake.handlers["bonded"] = lambda r: ({"bonded": r["address_type"] == "public"}, [])
    fake.handlers["forget"] = lambda r: ({"forgotten": True}, [])
    storage = security_grpc.SecurityStorage(channel)
    assert storage.IsBonded(public=bytes.fromhex("112233445566"), timeout=5).value is True
    assert storage.IsBonded(random=bytes.fromhex("C12233445566"), timeout=5).value is False
    storage.DeleteBond(random=bytes.fromhex("C12233445566"), timeout=5)
    assert fake.wait_op("bonded")["address"] == "11:22:33:44:55:66"
    forget = fake.wait_op("forget")
    assert forget["address"] == "C1:22:33:44:55:66" and forget["address_type"] == "random"


def test_factory_reset_restarts_blemu_when_it_cannot_reset_and_the_same_grpc_server_goes_on(fake: FakeHost) -> None:
    fake.handlers["reset"] = lambda r: ({"ok": False, "error": "unknown op reset"}, [])
    second = FakeHost()
    second.handlers["address"] = lambda r: ({"address": "A0:A1:A2:A3:A4:A5", "address_type": "public"}, [])
    restarts: list[int] = []

    def restart() -> HostConnection:
        restarts.append(1)
        return HostConnection(second.path)

    server, pandora, port = pandora_server.serve(Host(HostConnection(fake.path), restart=restart), "127.0.0.1:0")
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            host = host_grpc.Host(channel)
            assert host.ReadLocalAddress(timeout=5).address == bytes.fromhex("F0F1F2F3F4F5")
            host.FactoryReset(timeout=15)
            assert restarts == [1]
            assert host.ReadLocalAddress(timeout=15).address == bytes.fromhex("A0A1A2A3A4A5")
            second.wait_op("pairing-config")  # the defaults again, on the new blemu
            # Pairing requests of the new blemu are heard (the dispatcher followed the restart).
            second.emit(event="pairing-request", link=1, pairing=2, method="just-works", passkey=None)
            assert second.wait_op("pairing-answer")["pairing"] == 2
    finally:
        server.stop(grace=0).wait()
        pandora.stop()
        second.close()


def test_the_python_example_of_test_frameworks_md_runs_against_the_vocabulary(fake: FakeHost, capsys) -> None:
    """Docs/TEST-FRAMEWORKS.md's example, as written, against the stand-in host (its socket path
    put in): it scans, connects to the advertiser named thermo and prints the connection."""
    text = (Path(__file__).resolve().parents[2] / "Docs" / "TEST-FRAMEWORKS.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 1, "one Python example expected"
    name = b"\x07\x09thermo".hex()
    fake.handlers["scan"] = lambda r: ({"scan": 5}, [
        {"event": "advertisement", "scan": 5, "address": "C0:00:00:00:00:01", "address_type": "random", "data": "020106"},
        {"event": "advertisement", "scan": 5, "address": "C0:00:00:00:00:02", "address_type": "random", "data": name}])
    fake.handlers["scan-stop"] = lambda r: ({}, [])
    fake.handlers["connect"] = lambda r: ({"attempt": 1}, [
        {"event": "connected", "attempt": 1, "link": 1, "role": "central", "peer": r["address"]}])
    exec(compile(blocks[0].replace("/tmp/host.sock", fake.path), "TEST-FRAMEWORKS.md", "exec"), {})
    connect = fake.wait_op("connect")
    assert connect["address"] == "C0:00:00:00:00:02" and connect["address_type"] == "random"
    assert "'event': 'connected'" in capsys.readouterr().out


# -- L2CAP -------------------------------------------------------------------------------------

def channel_token(channel: int) -> Any:
    return translate.channel(channel)


def opened_event(channel: int, link: int = 3, spsm: str = "0x0080", incoming: bool = False) -> dict[str, Any]:
    return {"event": "channel-opened", "channel": channel, "link": link, "spsm": spsm, "cid": "0x0040", "peer_cid": "0x0041",
            "mtu": 512, "mps": 247, "peer_mtu": 256, "peer_mps": 100, "incoming": incoming, "enhanced": False}


def test_l2cap_connect_opens_an_le_credit_based_channel_with_the_requests_parameters(fake: FakeHost, channel: grpc.Channel) -> None:
    from pandora import l2cap_pb2
    fake.handlers["channel-connect"] = lambda r: ({"channel": 4}, [opened_event(4)])
    response = l2cap_grpc.L2CAP(channel).Connect(connection=token(3), le_credit_based=l2cap_pb2.CreditBasedChannelRequest(
        spsm=0x80, mtu=512, mps=247, initial_credit=8), timeout=5)
    assert response.channel.cookie.value == b"4"
    request = fake.wait_op("channel-connect")
    assert (request["link"], request["spsm"], request["mtu"], request["mps"], request["credits"]) == (3, 0x80, 512, 247, 8)
    assert "enhanced" not in request


def test_l2cap_connect_enhanced_asks_for_enhanced_mode_and_leaves_zero_fields_to_blemu(fake: FakeHost, channel: grpc.Channel) -> None:
    from pandora import l2cap_pb2
    fake.handlers["channel-connect"] = lambda r: ({"channel": 5}, [opened_event(5)])
    response = l2cap_grpc.L2CAP(channel).Connect(connection=token(3), enhanced_credit_based=l2cap_pb2.CreditBasedChannelRequest(
        spsm=0x81), timeout=5)
    assert response.channel.cookie.value == b"5"
    request = fake.wait_op("channel-connect")
    assert request["enhanced"] is True and request["spsm"] == 0x81 and "mtu" not in request and "credits" not in request


def test_l2cap_connect_in_basic_mode_is_unimplemented_and_a_refusal_says_its_result(fake: FakeHost, channel: grpc.Channel) -> None:
    from pandora import l2cap_pb2
    stub = l2cap_grpc.L2CAP(channel)
    with pytest.raises(grpc.RpcError) as basic:
        stub.Connect(connection=token(3), basic=l2cap_pb2.ConnectionOrientedChannelRequest(psm=1), timeout=5)
    assert basic.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert not fake.ops("channel-connect")
    fake.handlers["channel-connect"] = lambda r: ({"channel": 6}, [{"event": "channel-failed", "channel": 6, "result": "0x0002",
                                                                     "reason": "spsm-not-supported"}])
    with pytest.raises(grpc.RpcError) as refused:
        stub.Connect(connection=token(3), le_credit_based=l2cap_pb2.CreditBasedChannelRequest(spsm=0x90), timeout=5)
    assert refused.value.code() == grpc.StatusCode.ABORTED and "0x0002" in refused.value.details()
    fake.handlers["channel-connect"] = lambda r: ({"channel": 7}, [{"event": "channel-failed", "channel": 7, "result": None,
                                                                     "reason": "rejected"}])
    rejected = stub.Connect(connection=token(3), le_credit_based=l2cap_pb2.CreditBasedChannelRequest(spsm=0x90), timeout=5)
    assert rejected.error == l2cap_pb2.COMMAND_NOT_UNDERSTOOD
    fake.handlers["channel-connect"] = lambda r: ({"ok": False, "error": "no link 9 is open", "code": "unknown-link"}, [])
    with pytest.raises(grpc.RpcError) as unknown:
        stub.Connect(connection=token(9), le_credit_based=l2cap_pb2.CreditBasedChannelRequest(spsm=0x90), timeout=5)
    assert unknown.value.code() == grpc.StatusCode.NOT_FOUND


def test_l2cap_wait_connection_listens_and_answers_with_the_peers_channel_on_that_link(fake: FakeHost, channel: grpc.Channel) -> None:
    from pandora import l2cap_pb2
    fake.handlers["channel-listen"] = lambda r: ({}, [])
    thread, result = in_thread(lambda: l2cap_grpc.L2CAP(channel).WaitConnection(
        connection=token(3), le_credit_based=l2cap_pb2.CreditBasedChannelRequest(spsm=0x25, mtu=200), timeout=10))
    listen = fake.wait_op("channel-listen")
    assert listen["spsm"] == 0x25 and listen["mtu"] == 200
    fake.emit(**opened_event(8, link=4, spsm="0x0025", incoming=True))   # another link
    fake.emit(**opened_event(9, link=3, spsm="0x0026", incoming=True))   # another SPSM
    fake.emit(**opened_event(10, link=3, spsm="0x0025", incoming=False))  # ours, not the peer's
    time.sleep(0.3)
    assert not result
    fake.emit(**opened_event(11, link=3, spsm="0x0025", incoming=True))
    thread.join(5)
    assert result and result[0].channel.cookie.value == b"11", result
    # A second WaitConnection on the same SPSM: blemu says it listens already (busy); still fine.
    fake.handlers["channel-listen"] = lambda r: ({"ok": False, "error": "listened on already", "code": "busy"}, [])
    thread, result = in_thread(lambda: l2cap_grpc.L2CAP(channel).WaitConnection(
        connection=token(3), le_credit_based=l2cap_pb2.CreditBasedChannelRequest(spsm=0x25), timeout=10))
    fake.wait_op("channel-listen", count=2)
    time.sleep(0.2)
    fake.emit(**opened_event(12, link=3, spsm="0x0025", incoming=True))
    thread.join(5)
    assert result and result[0].channel.cookie.value == b"12", result


def test_l2cap_receive_streams_the_sdus_kept_since_the_channel_opened_and_ends_when_it_closes(fake: FakeHost, channel: grpc.Channel) -> None:
    from pandora import l2cap_pb2
    fake.handlers["channel-connect"] = lambda r: ({"channel": 4}, [opened_event(4), {"event": "channel-data", "channel": 4, "data": "6869"}])
    stub = l2cap_grpc.L2CAP(channel)
    opened = stub.Connect(connection=token(3), le_credit_based=l2cap_pb2.CreditBasedChannelRequest(spsm=0x80), timeout=5)
    time.sleep(0.3)  # the SDU arrives before anyone receives
    stream = stub.Receive(channel=opened.channel, timeout=10)
    assert next(stream).data == b"hi"
    fake.emit(event="channel-data", channel=5, data="ffff")   # another channel's
    fake.emit(event="channel-data", channel=4, data="")
    fake.emit(event="channel-data", channel=4, data="0102")
    fake.emit(event="channel-closed", channel=4, reason="peer")
    assert [r.data for r in stream] == [b"", b"\x01\x02"]
    done = stub.WaitDisconnection(channel=opened.channel, timeout=5)
    assert done.HasField("success")


def test_l2cap_send_sends_hex_and_waits_for_room_when_the_queue_is_full(fake: FakeHost, channel: grpc.Channel) -> None:
    sends: list[dict[str, Any]] = []

    def send(request: dict[str, Any]) -> tuple[Reply, list[dict[str, Any]]]:
        sends.append(request)
        if len(sends) == 1:
            return {"ok": False, "error": "the send queue is full", "code": "no-room"}, []
        return {}, []
    fake.handlers["channel-send"] = send
    thread, result = in_thread(lambda: l2cap_grpc.L2CAP(channel).Send(channel=channel_token(4), data=b"\x00\xffab", timeout=10))
    fake.wait_op("channel-send")
    time.sleep(0.3)
    assert not result, "Send answered while the queue was full"
    fake.emit(event="channel-ready", channel=4)
    thread.join(5)
    assert result and result[0].HasField("success"), result
    assert [s["data"] for s in sends] == ["00ff6162", "00ff6162"] and sends[0]["channel"] == 4


def test_l2cap_disconnect_waits_for_the_close_and_an_unknown_channel_is_done_already(fake: FakeHost, channel: grpc.Channel) -> None:
    fake.handlers["channel-disconnect"] = lambda r: ({}, [{"event": "channel-closed", "channel": r["channel"], "reason": "disconnected"}])
    stub = l2cap_grpc.L2CAP(channel)
    assert stub.Disconnect(channel=channel_token(4), timeout=5).HasField("success")
    assert fake.wait_op("channel-disconnect")["channel"] == 4
    fake.handlers["channel-disconnect"] = lambda r: ({"ok": False, "error": "no channel", "code": "unknown-channel"}, [])
    assert stub.Disconnect(channel=channel_token(4), timeout=5).HasField("success")
    with pytest.raises(grpc.RpcError) as bad:
        stub.Disconnect(channel=l2cap_pb2_channel(b"x1"), timeout=5)
    assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def l2cap_pb2_channel(cookie: bytes) -> Any:
    from pandora import l2cap_pb2
    return l2cap_pb2.Channel(cookie=any_pb2.Any(value=cookie))
