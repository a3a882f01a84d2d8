"""A client of blemu's control socket (Docs/CONTROL.md): commands, and the `watch` event stream.

The protocol is newline-delimited JSON both ways; each request gets one reply line, in order,
carrying its `id`. A `watch` connection carries events only after its reply, so the event log
has a connection of its own, read by a thread of its own into a list that `wait_for`,
`expect_write` and `events()` look through.
"""

from __future__ import annotations

import asyncio
import json
import select
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, List, Optional, Union

from .errors import BlemuError, CommandError, EventTimeout, UnexpectedEvent

Event = dict[str, Any]

_BASE_UUID_TAIL = "-0000-1000-8000-00805F9B34FB"

# blemu's lines are far shorter (a request line is at most 65536 bytes, an event line a few
# hundred): a longer line without a newline means the other end is not blemu, and is not kept.
MAX_LINE = 1 << 20


def receive_line(sock: socket.socket, buffer: bytes, deadline: float, what: str) -> bytes:
    """`buffer` and what `sock` sends until it holds a newline, by `deadline` (time.monotonic()).

    The deadline bounds the whole reply, not each recv: a server that sends a byte a second
    would keep a per-recv timeout waiting forever. Raises socket.timeout when it passes.
    """
    while b"\n" not in buffer:
        left = deadline - time.monotonic()
        if left <= 0:
            raise socket.timeout("timed out")
        sock.settimeout(left)
        chunk = sock.recv(65536)
        if not chunk:
            raise BlemuError(f"blemu closed the control socket before answering {what}")
        buffer += chunk
        if len(buffer) > MAX_LINE and b"\n" not in buffer:
            raise BlemuError(f"the reply to {what} is longer than {MAX_LINE} bytes without a newline")
    return buffer


def parse_line(line: bytes) -> Any:
    """A JSON line, or None when it is not JSON, or nested too deeply for Python's parser
    (which raises RecursionError, not ValueError: `[[[[…` a million deep fits in a line)."""
    try:
        return json.loads(line)
    except (ValueError, RecursionError):
        return None


def normalize_uuid(uuid: str) -> str:
    """`2a37`, `0x2A37` and `00002a37-0000-1000-8000-00805f9b34fb` all become `2A37`."""
    text = uuid.strip().upper()
    if text.startswith("0X"):
        text = text[2:]
    if len(text) == 36 and text.endswith(_BASE_UUID_TAIL) and text.startswith("0000"):
        return text[4:8]
    return text


def normalize_hex(value: Union[bytes, bytearray, str]) -> str:
    """Bytes, or hex with any case, spaces or colons, as blemu writes values: `0a1b`."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex()
    text = value.strip().lower()
    if text.startswith("0x"):
        text = text[2:]
    return text.replace(" ", "").replace(":", "")


def field_matches(key: str, wanted: Any, actual: Any) -> bool:
    if callable(wanted):
        return bool(wanted(actual))
    if actual is None:
        return wanted is None
    if key == "uuid":
        return isinstance(actual, str) and normalize_uuid(actual) == normalize_uuid(str(wanted))
    if key == "value":
        return isinstance(actual, str) and normalize_hex(actual) == normalize_hex(wanted)
    return bool(actual == wanted)


def event_matches(event: Event, kind: Optional[str], filters: dict[str, Any]) -> bool:
    if kind is not None and event.get("event") != kind:
        return False
    return all(field_matches(key, wanted, event.get(key)) for key, wanted in filters.items())


def describe_wanted(kind: Optional[str], filters: dict[str, Any]) -> str:
    words = [kind or "event"]
    for key, wanted in filters.items():
        words.append(f"{key}={getattr(wanted, '__name__', 'predicate')}()" if callable(wanted)
                     else f"{key}={normalize_hex(wanted) if key == 'value' else wanted}")
    return " ".join(words)


_COMMON_FIELDS = ("seq", "t", "event", "device", "peer", "peer_random", "conn", "att_handle")


def describe_event(event: Event) -> str:
    """One event in a line: `#4 write heart-rate uuid=2A39 value=02 …`."""
    extra = " ".join(f"{k}={v}" for k, v in event.items() if k not in _COMMON_FIELDS)
    return f"#{event.get('seq')} {event.get('event')} {event.get('device', '')} {extra}".rstrip()


class Control:
    """One connection to blemu's control socket; every method returns the reply (a dict).

    A refused command raises CommandError with blemu's reason. Safe to share between threads
    (one request at a time). When blemu closed the connection (an idle client gives its place
    to a newcomer when all 16 are taken) the next request reconnects first.
    """

    def __init__(self, path: str, timeout: float = 5.0):
        self.path = path
        self.timeout = timeout
        self._sock: Optional[socket.socket] = None
        self._buffer = b""
        self._next_id = 1
        self._lock = threading.Lock()

    def _connect(self) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.path)
        except OSError as error:
            sock.close()
            raise BlemuError(f"cannot connect to blemu's control socket {self.path}: {error.strerror or error}") from None
        self._buffer = b""
        return sock

    def _usable_socket(self) -> socket.socket:
        """The connection, or a new one if blemu closed or is closing the old one."""
        if self._sock is not None:
            readable, _, _ = select.select([self._sock], [], [], 0)
            if readable:  # nothing is due between requests: only a closing line or EOF
                self._sock.close()
                self._sock = None
        if self._sock is None:
            self._sock = self._connect()
        return self._sock

    def request(self, cmd: str, **fields: Any) -> dict[str, Any]:
        """Send one request (`None` fields left out) and return its reply."""
        with self._lock:
            request_id, self._next_id = self._next_id, self._next_id + 1
            request = {"id": request_id, "cmd": cmd, **{k: v for k, v in fields.items() if v is not None}}
            sock = self._usable_socket()
            deadline = time.monotonic() + self.timeout
            try:
                sock.settimeout(self.timeout)
                sock.sendall((json.dumps(request) + "\n").encode())
                self._buffer = receive_line(sock, self._buffer, deadline, cmd)
            except socket.timeout:
                self.close()
                raise BlemuError(f"no reply to {cmd} within {self.timeout} s from {self.path}") from None
            except OSError as error:
                self.close()
                raise BlemuError(f"control socket {self.path}: {error}") from None
            except BlemuError:
                self.close()
                raise
            line, _, self._buffer = self._buffer.partition(b"\n")
        reply = parse_line(line)
        if reply is None:
            raise BlemuError(f"blemu's reply to {cmd} is not JSON: {line[:200]!r}")
        if not isinstance(reply, dict) or reply.get("id") != request_id:
            raise BlemuError(f"reply to request {request_id} ({cmd}) expected, got {line[:200]!r}")
        if not reply.get("ok"):
            code = reply.get("code")
            raise CommandError(request, str(reply.get("error")), code if isinstance(code, str) else None)
        return reply

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self) -> "Control":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the commands (Docs/CONTROL.md, "Commands") ------------------------------------------

    def list(self, device: Optional[str] = None) -> list[dict[str, Any]]:
        """The devices, as `list` gives them (ref, address, advertising, connections, …): every
        one, or those `device` names: one, a pattern (`Tag 0*`) or a fleet (`fleet:NAME`).
        A reply that could not hold them all (`left_out`) is an error, never a short list."""
        reply = self.request("list", device=device)
        if reply.get("left_out"):
            raise BlemuError(f"list {device or ''}: {reply['left_out']} device(s) left out ({reply.get('why')})")
        devices: list[dict[str, Any]] = reply["devices"]
        return devices

    def set(self, device: str, key: str, value: Union[str, int, float, bool], exact: bool = False) -> dict[str, Any]:
        """Set a value of the device's world; with `exact`, hold a value that moves by itself
        (the heart's wander, a battery's drain) where it is set, until it is set again."""
        if isinstance(value, bool):
            value = "1" if value else "0"
        return self.request("set", device=device, key=key, value=str(value), exact=True if exact else None)

    def notify(self, device: str, uuid: str, value: Union[bytes, bytearray, str]) -> dict[str, Any]:
        """Send exactly these bytes (or hex digits) now to every central subscribed to the
        characteristic: a notification, or an indication to a central that enabled those.
        The reply's `centrals` says how many it reached; a value longer than a subscriber's
        ATT_MTU - 3 is refused whole (CommandError), never cut."""
        return self.request("notify", device=device, uuid=uuid, value=normalize_hex(value))

    def disconnect(self, device: str, reason: Union[int, str, None] = None) -> dict[str, Any]:
        return self.request("disconnect", device=device, reason=reason)

    def advertise(self, device: str, on: bool) -> dict[str, Any]:
        return self.request("advertise", device=device, on=on)

    def service(self, device: str, uuid: str, on: bool) -> dict[str, Any]:
        return self.request("service", device=device, uuid=uuid, on=on)

    def fault(self, device: str, uuid: str, action: str, *, error: Union[int, str, None] = None,
              ms: Optional[int] = None, count: Optional[int] = None) -> dict[str, Any]:
        """Plan a fault: action `error` (with `error`, an ATT code), `delay` (with `ms`) or `drop`."""
        if isinstance(error, int):
            error = f"0x{error:02X}"
        return self.request("fault", device=device, uuid=uuid, action=action, error=error, ms=ms, count=count)

    def fault_clear(self, device: Optional[str] = None) -> dict[str, Any]:
        return self.request("fault", action="clear", device=device)

    def pairing(self, device: str, answer: str) -> dict[str, Any]:
        """Answer a Numeric Comparison: `confirm` or `reject`."""
        return self.request("pairing", device=device, answer=answer)

    def authorize(self, device: str, uuid: str, answer: str, peer: Optional[str] = None,
                  peer_random: Optional[bool] = None) -> dict[str, Any]:
        return self.request("authorize", device=device, uuid=uuid, answer=answer, peer=peer, peer_random=peer_random)

    def bonds(self, device: str) -> List[dict[str, Any]]:
        bonds: List[dict[str, Any]] = self.request("bonds", device=device)["bonds"]
        return bonds

    def forget_bonds(self, device: str, address: Optional[str] = None) -> dict[str, Any]:
        return self.request("bonds", device=device, action="forget", address=address)

    def host(self, op: str, **fields: Any) -> dict[str, Any]:
        """One request to the programmable host (`blemu host`): `host("scan", phys=["1m"])`."""
        return self.request("host", op=op, **fields)

    def watch(self, device: Optional[str] = None, kinds: Optional[List[str]] = None,
              uuid: Optional[str] = None) -> "EventLog":
        """A new connection watching events (with blemu's own filters), read into an EventLog.
        `device`: one device, a pattern (`Tag 0*`) or a fleet (`fleet:NAME`)."""
        return EventLog.open(self.path, device=device, kinds=kinds, uuid=uuid, timeout=self.timeout)


class EventLog:
    """Every event of one `watch` connection, in order, kept as they come (a reader thread).

    `wait_for` and `expect_write` look from a cursor: each match moves the cursor past the
    event, so successive waits see successive events, and an event that came before the wait
    was called still counts (a test cannot miss what the app did while it was busy). `mark()`
    moves the cursor to now. The log holds at most `limit` events (the oldest go first).
    """

    def __init__(self, sock: socket.socket, reply: dict[str, Any], pending: bytes = b"", limit: int = 100_000):
        self.reply = reply
        self._pending = pending  # events that came with the reply
        self.limit = limit
        self._sock = sock
        self._events: list[Event] = []
        self._dropped = 0  # events removed from the front (the limit), so positions stay absolute
        self._cursor = 0
        self._closed_reason: Optional[str] = None
        self._condition = threading.Condition()
        self._async_waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._thread = threading.Thread(target=self._read, name="blemu-events", daemon=True)
        self._thread.start()

    @classmethod
    def open(cls, path: str, device: Optional[str] = None, kinds: Optional[list[str]] = None,
             uuid: Optional[str] = None, timeout: float = 5.0) -> "EventLog":
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        request = {"id": 1, "cmd": "watch", "device": device, "kinds": ",".join(kinds) if kinds else None, "uuid": uuid}
        request = {k: v for k, v in request.items() if v is not None}
        buffer = b""
        deadline = time.monotonic() + timeout
        try:
            sock.connect(path)
            sock.sendall((json.dumps(request) + "\n").encode())
            buffer = receive_line(sock, buffer, deadline, "watch")
        except socket.timeout:
            sock.close()
            raise BlemuError(f"no reply to watch within {timeout:g} s from {path}") from None
        except OSError as error:
            sock.close()
            raise BlemuError(f"cannot watch on {path}: {error}") from None
        except BlemuError:
            sock.close()
            raise
        line, _, rest = buffer.partition(b"\n")
        reply = parse_line(line)
        if not isinstance(reply, dict):
            sock.close()
            raise BlemuError(f"the reply to watch is not a JSON object: {line[:200]!r}")
        if not reply.get("ok"):
            sock.close()
            code = reply.get("code")
            raise CommandError(request, str(reply.get("error")), code if isinstance(code, str) else None)
        sock.settimeout(None)
        return cls(sock, reply, pending=rest)

    # -- the reader thread -------------------------------------------------------------------

    def _read(self) -> None:
        buffer = self._pending
        reason = "blemu closed the watch connection"
        try:
            while True:
                while b"\n" in buffer:
                    line, _, buffer = buffer.partition(b"\n")
                    if line.strip():
                        self._add(line)
                chunk = self._sock.recv(65536)
                if not chunk:
                    break
                buffer += chunk
                if len(buffer) > MAX_LINE and b"\n" not in buffer:
                    reason = f"an event line longer than {MAX_LINE} bytes without a newline; stopped watching"
                    break
        except OSError as error:
            reason = f"the watch connection failed: {error}"
        except Exception as error:  # noqa: BLE001 - a reader that dies silently leaves waits hanging
            reason = f"the event reader stopped: {error!r}"
        with self._condition:
            last = self._events[-1] if self._events else {}
            if last.get("event") == "control-line" and isinstance(last.get("line"), dict):
                reason = f"blemu closed the watch connection: {last['line'].get('error')}"
            if self._closed_reason is None:
                self._closed_reason = reason
            self._condition.notify_all()
        self._wake_async()

    def _add(self, line: bytes) -> None:
        event = parse_line(line)
        if event is None:
            event = {"event": "unreadable", "line": line[:200].decode(errors="replace")}
        if not isinstance(event, dict) or "event" not in event:
            # A line that is no event: blemu closing the connection says why (`"ok": false`).
            event = {"event": "control-line", "line": event}
        with self._condition:
            self._events.append(event)
            if len(self._events) > self.limit:
                del self._events[0]
                self._dropped += 1
            self._condition.notify_all()
        self._wake_async()

    def _wake_async(self) -> None:
        with self._condition:
            waiters, self._async_waiters = self._async_waiters, []
        for loop, future in waiters:
            def wake(future: asyncio.Future[None] = future) -> None:
                if not future.done():
                    future.set_result(None)
            try:
                loop.call_soon_threadsafe(wake)
            except RuntimeError:  # that loop is closed
                pass

    # -- looking -----------------------------------------------------------------------------

    @property
    def history(self) -> list[Event]:
        """Every event kept so far, oldest first."""
        with self._condition:
            return list(self._events)

    @property
    def closed_reason(self) -> Optional[str]:
        """None while the watch is on; otherwise why it ended."""
        return self._closed_reason

    def mark(self) -> None:
        """Forget what happened so far: waits look at events from now on."""
        with self._condition:
            self._cursor = self._dropped + len(self._events)

    def _find(self, start: int, kind: Optional[str], filters: dict[str, Any]) -> tuple[Optional[int], int]:
        """(absolute position of the first match at or after `start`, or None; end position)."""
        end = self._dropped + len(self._events)
        for position in range(max(start, self._dropped), end):
            if event_matches(self._events[position - self._dropped], kind, filters):
                return position, end
        return None, end

    def _since(self, start: int) -> list[Event]:
        return self._events[max(start - self._dropped, 0):]

    def _timeout_error(self, kind: Optional[str], filters: dict[str, Any], timeout: float, start: int) -> EventTimeout:
        seen = self._since(start)
        shown = "\n  ".join(describe_event(e) for e in seen[-30:]) or "(none)"
        more = f" (the last 30 of {len(seen)})" if len(seen) > 30 else ""
        closed = f"; {self._closed_reason}" if self._closed_reason else ""
        missed = sum(int(e.get("count", 0)) for e in seen if e.get("event") == "missed")
        lost = f"; blemu's queue for this watcher overflowed, {missed} event(s) missed" if missed else ""
        return EventTimeout(f"no {describe_wanted(kind, filters)} within {timeout:g} s{closed}{lost}; "
                            f"events seen since the last match{more}:\n  {shown}")

    def _match_now(self, event: Optional[str], where: Optional[Callable[[Event], bool]],
                   filters: dict[str, Any]) -> Optional[Event]:
        """The first match since the cursor, moving the cursor past it (lock held)."""
        position = self._cursor
        while True:
            found, _ = self._find(position, event, filters)
            if found is None:
                return None
            candidate = self._events[found - self._dropped]
            if where is None or where(candidate):
                self._cursor = found + 1
                return candidate
            position = found + 1

    def _give_up(self, event: Optional[str], where: Optional[Callable[[Event], bool]],
                 filters: dict[str, Any], timeout: float) -> EventTimeout:
        shown = {**filters, **({"where": where} if where is not None else {})}
        return self._timeout_error(event, shown, timeout, self._cursor)

    def wait_for(self, event: Optional[str] = None, timeout: float = 10.0,
                 where: Optional[Callable[[Event], bool]] = None, **filters: Any) -> Event:
        """The first event since the cursor of kind `event` whose fields match `filters`.

        Filters compare fields exactly, except `uuid` (any UUID spelling) and `value` (bytes or
        hex, any case); a callable filter is called with the field's value; `where` with the
        whole event. Raises EventTimeout, listing what was seen, when none comes in `timeout`.
        """
        deadline = time.monotonic() + timeout
        with self._condition:
            while True:
                found = self._match_now(event, where, filters)
                if found is not None:
                    return found
                left = deadline - time.monotonic()
                if left <= 0 or self._closed_reason is not None:
                    raise self._give_up(event, where, filters, timeout)
                self._condition.wait(left)

    async def wait_for_async(self, event: Optional[str] = None, timeout: float = 10.0,
                             where: Optional[Callable[[Event], bool]] = None, **filters: Any) -> Event:
        """`wait_for` for asyncio code (a test that runs its BLE central on the same loop)."""
        deadline = time.monotonic() + timeout
        while True:
            future = self._arm_async()
            with self._condition:
                found = self._match_now(event, where, filters)
                if found is not None:
                    return found
                left = deadline - time.monotonic()
                if left <= 0 or self._closed_reason is not None:
                    raise self._give_up(event, where, filters, timeout)
            try:
                await asyncio.wait_for(asyncio.shield(future), left)
            except asyncio.TimeoutError:
                pass

    def _arm_async(self) -> asyncio.Future[None]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        with self._condition:
            self._async_waiters.append((loop, future))
        return future

    def expect_write(self, uuid: str, value: Union[bytes, str], timeout: float = 10.0, **filters: Any) -> Event:
        """The next write to `uuid` since the cursor, which must carry `value` exactly.

        Raises UnexpectedEvent when the app wrote something else first, EventTimeout when it
        wrote nothing to `uuid` in `timeout`.
        """
        written = self.wait_for("write", timeout=timeout, uuid=uuid, **filters)
        if normalize_hex(str(written.get("value", ""))) != normalize_hex(value):
            raise UnexpectedEvent(f"expected a write of {normalize_hex(value) or '(empty)'} to {normalize_uuid(uuid)}; "
                                  f"the app wrote {written.get('value') or '(empty)'} instead: {describe_event(written)}")
        return written

    def events(self, timeout: Optional[float] = None, from_cursor: bool = True) -> "EventIterator":
        """The events from the cursor (or from now) on, as they come: `for e in …` or `async for e in …`.

        Iteration ends when the watch ends, or after `timeout` seconds with no new event.
        """
        with self._condition:
            start = self._cursor if from_cursor else self._dropped + len(self._events)
        return EventIterator(self, start, timeout)

    def close(self) -> None:
        """End the watch (waits then end at once, saying so)."""
        with self._condition:
            if self._closed_reason is None:
                self._closed_reason = "the watch was closed (EventLog.close, or blemu stopped by the test)"
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        self._thread.join(2)


class EventIterator:
    """Events one after another: a blocking iterator and an async iterator at once."""

    def __init__(self, log: EventLog, start: int, timeout: Optional[float]):
        self._log = log
        self._position = start
        self._timeout = timeout

    def _take(self) -> Optional[Event]:
        log = self._log
        if self._position < log._dropped:
            self._position = log._dropped
        index = self._position - log._dropped
        if index < len(log._events):
            self._position += 1
            return log._events[index]
        return None

    def __iter__(self) -> Iterator[Event]:
        return self

    def __next__(self) -> Event:
        deadline = None if self._timeout is None else time.monotonic() + self._timeout
        with self._log._condition:
            while True:
                event = self._take()
                if event is not None:
                    return event
                if self._log._closed_reason is not None:
                    raise StopIteration
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise StopIteration
                self._log._condition.wait(left)

    def __aiter__(self) -> AsyncIterator[Event]:
        return self

    async def __anext__(self) -> Event:
        deadline = None if self._timeout is None else time.monotonic() + self._timeout
        while True:
            future = self._log._arm_async()
            with self._log._condition:
                event = self._take()
                if event is not None:
                    return event
                if self._log._closed_reason is not None:
                    raise StopAsyncIteration
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise StopAsyncIteration
            try:
                await asyncio.wait_for(asyncio.shield(future), left)
            except asyncio.TimeoutError:
                pass
