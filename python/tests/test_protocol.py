"""The kit's client and event log against a scripted stand-in for blemu's control socket.

No blemu, no radio: each test plays the server's side of Docs/CONTROL.md's protocol, including
the lines a misbehaving or closing server sends, and checks what the kit makes of them.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from blemu_testkit import BlemuError, CommandError, Control, EventLog, EventTimeout, UnexpectedEvent

Handler = Callable[[socket.socket], None]


class FakeServer:
    """A Unix socket; each accepted connection is given to the next handler, in a thread."""

    def __init__(self) -> None:
        self.folder = tempfile.mkdtemp(prefix="kit-fake-", dir="/tmp")
        self.path = os.path.join(self.folder, "control.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(8)
        self.handlers: list[Handler] = []
        self.requests: list[dict] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            handler = self.handlers.pop(0)
            threading.Thread(target=self._run, args=(handler, conn), daemon=True).start()

    @staticmethod
    def _run(handler: Handler, conn: socket.socket) -> None:
        """The client may hang up first (its test is done): that ends the handler quietly."""
        try:
            handler(conn)
        except OSError:
            pass
        finally:
            conn.close()

    def read_request(self, conn: socket.socket) -> dict:
        data = b""
        while not data.endswith(b"\n"):
            chunk = conn.recv(65536)
            if not chunk:
                raise ConnectionError("client gone")
            data += chunk
        request = json.loads(data)
        self.requests.append(request)
        return request

    def close(self) -> None:
        self.listener.close()
        os.unlink(self.path)
        os.rmdir(self.folder)


def send(conn: socket.socket, *objects: object) -> None:
    conn.sendall(b"".join(json.dumps(o).encode() + b"\n" for o in objects))


@pytest.fixture
def server() -> Iterator[FakeServer]:
    fake = FakeServer()
    yield fake
    fake.close()


def watch_handler(server: FakeServer, events: list[dict], then: Callable[[socket.socket], None] | None = None) -> Handler:
    def handle(conn: socket.socket) -> None:
        request = server.read_request(conn)
        send(conn, {"id": request["id"], "ok": True, "watching": True}, *events)
        if then is not None:
            then(conn)
        else:
            time.sleep(30)  # stays open: the test closes it
    return handle


def ev(seq: int, kind: str, **fields: object) -> dict:
    return {"seq": seq, "t": 100.0 + seq, "event": kind, "device": "heart-rate", **fields}


def test_requests_leave_out_unset_fields_and_refusals_raise_with_the_reason(server):
    def handle(conn: socket.socket) -> None:
        first = server.read_request(conn)
        send(conn, {"id": first["id"], "ok": True, "device": "heart-rate", "key": "bpm", "value": "150"})
        second = server.read_request(conn)
        send(conn, {"id": second["id"], "ok": False, "error": "bpm takes a number from 30 to 220, not '500'"})
        time.sleep(1)
    server.handlers.append(handle)
    with Control(server.path) as control:
        assert control.set("heart-rate", "bpm", 150)["value"] == "150"
        with pytest.raises(CommandError) as refused:
            control.fault("heart-rate", "2A37", "error", error=0x80)
    assert server.requests[0] == {"id": 1, "cmd": "set", "device": "heart-rate", "key": "bpm", "value": "150"}
    assert server.requests[1] == {"id": 2, "cmd": "fault", "device": "heart-rate", "uuid": "2A37", "action": "error", "error": "0x80"}
    assert "blemu refused set" not in str(refused.value)
    assert "blemu refused fault" in str(refused.value) and "not '500'" in str(refused.value)


def test_host_requests_carry_their_op_and_a_refusal_its_code(server):
    def handle(conn: socket.socket) -> None:
        first = server.read_request(conn)
        send(conn, {"id": first["id"], "ok": True, "scan": 1})
        second = server.read_request(conn)
        send(conn, {"id": second["id"], "ok": False, "error": "no link 9 is open", "code": "unknown-link"})
        time.sleep(1)
    server.handlers.append(handle)
    with Control(server.path) as control:
        assert control.host("scan", phys=["1m", "coded"], legacy=False)["scan"] == 1
        with pytest.raises(CommandError) as refused:
            control.host("disconnect", link=9)
    assert server.requests[0] == {"id": 1, "cmd": "host", "op": "scan", "phys": ["1m", "coded"], "legacy": False}
    assert refused.value.code == "unknown-link" and "no link 9 is open" in str(refused.value)


def test_notify_sends_hex_and_set_exact_sends_exact_true(server):
    def handle(conn: socket.socket) -> None:
        for _ in range(4):
            request = server.read_request(conn)
            send(conn, {"id": request["id"], "ok": True, "centrals": 1})
        time.sleep(1)
    server.handlers.append(handle)
    with Control(server.path) as control:
        assert control.notify("heart-rate", "2A37", bytes([0x00, 0x96]))["centrals"] == 1
        control.notify("heart-rate", "2A37", "00:96")
        control.set("heart-rate", "bpm", 150, exact=True)
        control.set("heart-rate", "bpm", 150)
    assert server.requests[0] == {"id": 1, "cmd": "notify", "device": "heart-rate", "uuid": "2A37", "value": "0096"}
    assert server.requests[1]["value"] == "0096"
    assert server.requests[2] == {"id": 3, "cmd": "set", "device": "heart-rate", "key": "bpm", "value": "150", "exact": True}
    assert "exact" not in server.requests[3]


def test_a_connection_blemu_closed_for_being_idle_is_replaced(server):
    def closed_for_idleness(conn: socket.socket) -> None:
        request = server.read_request(conn)
        send(conn, {"id": request["id"], "ok": True, "devices": []})
        time.sleep(0.1)
        send(conn, {"id": None, "ok": False, "error": "idle for 2.5 s with 16 clients connected; closing"})
        conn.close()

    def fresh(conn: socket.socket) -> None:
        request = server.read_request(conn)
        send(conn, {"id": request["id"], "ok": True, "devices": [{"ref": "lock"}]})
        time.sleep(1)
    server.handlers += [closed_for_idleness, fresh]
    with Control(server.path) as control:
        assert control.list() == []
        time.sleep(0.3)
        assert control.list() == [{"ref": "lock"}]


def test_a_reply_that_is_not_blemu_s_is_an_error_not_a_hang(server):
    def handle(conn: socket.socket) -> None:
        server.read_request(conn)
        conn.sendall(b"x" * (1 << 20) + b"y" * 70000)  # no newline, ever
        time.sleep(2)
    server.handlers.append(handle)
    with Control(server.path, timeout=5) as control, pytest.raises(BlemuError, match="without a newline"):
        control.list()


def test_wait_for_takes_events_in_order_from_before_and_after_the_call(server):
    def later(conn: socket.socket) -> None:
        time.sleep(0.2)
        send(conn, ev(3, "write", uuid="2A39", value="01", with_response=True))
        time.sleep(30)
    server.handlers.append(watch_handler(server, [
        ev(1, "connected", peer="C0:11:22:33:44:55"),
        ev(2, "subscribed", uuid="2A37", notify=True, indicate=False),
    ], then=later))
    log = EventLog.open(server.path)
    try:
        assert log.wait_for("subscribed", uuid="00002a37-0000-1000-8000-00805f9b34fb", timeout=2)["seq"] == 2
        # The connection came before the subscription, whose wait moved the cursor past it.
        with pytest.raises(EventTimeout):
            log.wait_for("connected", timeout=0.1)
        written = log.wait_for("write", uuid="0x2a39", value=b"\x01", with_response=lambda v: v is True, timeout=3)
        assert written["seq"] == 3
        assert [e["seq"] for e in log.history] == [1, 2, 3]
    finally:
        log.close()


def test_timeout_says_what_it_waited_for_and_what_came(server):
    server.handlers.append(watch_handler(server, [
        ev(1, "connected", peer="C0:11:22:33:44:55"),
        ev(2, "write", uuid="2A39", value="02", offset=0, with_response=True, prepared=False),
        {"seq": 40, "t": 141.0, "event": "missed", "count": 37, "from_seq": 3},
    ]))
    log = EventLog.open(server.path)
    try:
        started = time.monotonic()
        with pytest.raises(EventTimeout) as timed_out:
            log.wait_for("write", uuid="2A39", value="01", timeout=0.5)
        assert time.monotonic() - started >= 0.5
        message = str(timed_out.value)
        assert message.startswith("no write uuid=2A39 value=01 within 0.5 s")
        assert "37 event(s) missed" in message
        assert "#2 write heart-rate uuid=2A39 value=02" in message
        assert isinstance(timed_out.value, AssertionError)
    finally:
        log.close()


def test_expect_write_names_the_value_the_app_wrote(server):
    server.handlers.append(watch_handler(server, [ev(1, "write", uuid="2A39", value="02")]))
    log = EventLog.open(server.path)
    try:
        with pytest.raises(UnexpectedEvent, match="expected a write of 01 to 2A39; the app wrote 02 instead"):
            log.expect_write("2a39", "01", timeout=2)
    finally:
        log.close()


def test_a_watch_blemu_closes_ends_waits_at_once_with_its_reason(server):
    def close_it(conn: socket.socket) -> None:
        time.sleep(0.1)
        send(conn, {"id": None, "ok": False, "error": "idle for 1.2 s with 16 clients connected"})
        conn.close()
    server.handlers.append(watch_handler(server, [ev(1, "connected")], then=close_it))
    log = EventLog.open(server.path)
    try:
        started = time.monotonic()
        with pytest.raises(EventTimeout, match="blemu closed the watch connection: idle for 1.2 s"):
            log.wait_for("subscribed", timeout=20)
        assert time.monotonic() - started < 5
        assert [e["event"] for e in log.events()] == ["connected", "control-line"]  # then the iteration ends
    finally:
        log.close()


def test_events_as_an_async_iterator_and_wait_for_async(server):
    def later(conn: socket.socket) -> None:
        for seq in (2, 3):
            time.sleep(0.1)
            send(conn, ev(seq, "notification", uuid="2A37", value=f"06{seq:02x}"))
        time.sleep(30)
    server.handlers.append(watch_handler(server, [ev(1, "connected")], then=later))
    log = EventLog.open(server.path)

    async def consume() -> list[int]:
        await log.wait_for_async("connected", timeout=2)
        seqs = []
        async for event in log.events(timeout=2):
            seqs.append(event["seq"])
            if event["seq"] == 3:
                break
        with pytest.raises(EventTimeout):
            await log.wait_for_async("disconnected", timeout=0.2)
        return seqs

    try:
        assert asyncio.run(consume()) == [2, 3]
    finally:
        log.close()


def test_an_overlong_event_line_ends_the_watch(server):
    def flood(conn: socket.socket) -> None:
        conn.sendall(b"{" * ((1 << 20) + 10))
        time.sleep(30)
    server.handlers.append(watch_handler(server, [], then=flood))
    log = EventLog.open(server.path)
    try:
        with pytest.raises(EventTimeout, match="longer than 1048576 bytes"):
            log.wait_for("connected", timeout=10)
    finally:
        log.close()


def test_waits_after_the_test_closed_the_watch_say_so(server):
    server.handlers.append(watch_handler(server, [ev(1, "connected")]))
    log = EventLog.open(server.path)
    log.wait_for("connected", timeout=2)
    log.close()
    with pytest.raises(EventTimeout, match="the watch was closed"):
        log.wait_for("subscribed", timeout=5)


def dribble(conn: socket.socket, data: bytes, every: float = 0.1) -> None:
    """Send `data` a byte at a time: every recv gets something well within any timeout."""
    for byte in data:
        conn.sendall(bytes([byte]))
        time.sleep(every)


def test_a_reply_dribbled_a_byte_at_a_time_times_out_on_the_whole_reply(server):
    def handle(conn: socket.socket) -> None:
        request = server.read_request(conn)
        dribble(conn, json.dumps({"id": request["id"], "ok": True, "devices": []}).encode() + b"\n")
    server.handlers.append(handle)
    started = time.monotonic()
    with Control(server.path, timeout=1) as control, pytest.raises(BlemuError, match="no reply to list within 1 s"):
        control.list()  # the whole reply would take about 3.6 s
    assert time.monotonic() - started < 2


def test_a_watch_reply_dribbled_a_byte_at_a_time_times_out_on_the_whole_reply(server):
    def handle(conn: socket.socket) -> None:
        request = server.read_request(conn)
        dribble(conn, json.dumps({"id": request["id"], "ok": True, "watching": True}).encode() + b"\n")
    server.handlers.append(handle)
    started = time.monotonic()
    with pytest.raises(BlemuError, match="no reply to watch within 1 s"):
        EventLog.open(server.path, timeout=1)
    assert time.monotonic() - started < 2


NESTED = b"[" * 200_000 + b"]" * 200_000  # valid JSON, deeper than Python's parser recurses


def test_a_deeply_nested_event_line_is_kept_as_unreadable_and_the_watch_goes_on(server):
    def later(conn: socket.socket) -> None:
        conn.sendall(NESTED + b"\n" + b'{"event": {"deep": ' + NESTED + b"}}\n")
        send(conn, ev(2, "connected"))
        time.sleep(30)
    server.handlers.append(watch_handler(server, [ev(1, "advertising")], then=later))
    log = EventLog.open(server.path)
    try:
        assert log.wait_for("connected", timeout=5)["seq"] == 2
        assert [e["event"] for e in log.history] == ["advertising", "unreadable", "unreadable", "connected"]
        assert log.closed_reason is None
    finally:
        log.close()


def test_a_deeply_nested_reply_is_an_error_not_a_recursion_error(server):
    def handle(conn: socket.socket) -> None:
        server.read_request(conn)
        conn.sendall(NESTED + b"\n")
        time.sleep(2)
    server.handlers.append(handle)
    with Control(server.path, timeout=5) as control, pytest.raises(BlemuError, match="is not JSON"):
        control.list()
