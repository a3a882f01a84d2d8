"""blemu-pandora: the Pandora test interfaces (Host, Security, SecurityStorage, L2CAP; PyPI
`bt-test-interfaces`) served for blemu's programmable host, so Avatar, PTS-bot or any Pandora
client drives blemu as it drives Bumble or Android (Docs/TEST-FRAMEWORKS.md).

A thin front end: each RPC is one or two host requests on the control socket and a wait for the
host's events (Docs/CONTROL.md, "The programmable host"); the host's logic is blemu's. BR/EDR
RPCs (and L2CAP's fixed channels and basic mode) answer UNIMPLEMENTED. grpcio's threaded server: one thread per RPC in progress.
"""

from __future__ import annotations

import argparse
import functools
import logging
import signal
import sys
import threading
import time
from collections import deque
from concurrent import futures
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, TypeVar

import grpc
from google.protobuf import empty_pb2, wrappers_pb2
from pandora import host_grpc, host_pb2, l2cap_grpc, l2cap_pb2, security_grpc, security_pb2

from ..errors import BlemuError, CommandError
from . import datatypes, translate
from .host import CLOSED, BlemuHostProcess, Host, HostConnection, Subscription
from .translate import TranslationError

log = logging.getLogger("blemu-pandora")

POLL = 0.2  # how often a waiting RPC looks whether its client is still there (seconds)
RESET_TIMEOUT = 12.0  # a reset's `reset` event; Avatar gives FactoryReset 15 s

# A refused host request's `code` (Docs/CONTROL.md) as a gRPC status.
STATUS_OF_CODE = {
    "not-ready": grpc.StatusCode.UNAVAILABLE,
    "busy": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "no-room": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "already-connected": grpc.StatusCode.ALREADY_EXISTS,
    "unknown-link": grpc.StatusCode.NOT_FOUND,
    "unknown-scan": grpc.StatusCode.NOT_FOUND,
    "unknown-advertisement": grpc.StatusCode.NOT_FOUND,
    "unknown-pairing": grpc.StatusCode.NOT_FOUND,
    "unknown-channel": grpc.StatusCode.NOT_FOUND,
}

BR_EDR = "blemu is an LE host: BR/EDR (Classic) is not implemented"

T = TypeVar("T")


def _abort(context: grpc.ServicerContext, error: Exception) -> None:
    if isinstance(error, (TranslationError, datatypes.DataTypesError)):
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
    if isinstance(error, CommandError):
        context.abort(STATUS_OF_CODE.get(error.code or "", grpc.StatusCode.INVALID_ARGUMENT), error.error)
    context.abort(grpc.StatusCode.UNAVAILABLE, f"blemu: {error}")


def rpc(method: Callable[..., T]) -> Callable[..., T]:
    """A unary RPC: blemu's refusals and translation errors as gRPC statuses."""
    @functools.wraps(method)
    def wrapper(self: Any, request: Any, context: grpc.ServicerContext) -> T:
        log.debug("%s(%s)", method.__name__, str(request).replace("\n", " ")[:300])
        try:
            return method(self, request, context)
        except (TranslationError, datatypes.DataTypesError, BlemuError) as error:
            _abort(context, error)
            raise  # not reached: abort raises
    return wrapper


def stream_rpc(method: Callable[..., Iterator[T]]) -> Callable[..., Iterator[T]]:
    """A streaming RPC: the same, for a generator."""
    @functools.wraps(method)
    def wrapper(self: Any, request: Any, context: grpc.ServicerContext) -> Iterator[T]:
        log.debug("%s(%s)", method.__name__, str(request).replace("\n", " ")[:300])
        try:
            yield from method(self, request, context)
        except (TranslationError, datatypes.DataTypesError, BlemuError) as error:
            _abort(context, error)
    return wrapper


def wait_for(subscription: Subscription, context: grpc.ServicerContext,
             match: Callable[[dict[str, Any]], Optional[T]], timeout: Optional[float] = None) -> Optional[T]:
    """What `match` makes of the first event it accepts (not None); None when the client left,
    `timeout` passed, or the watch closed (blemu stopped or restarted: `closed` is then CLOSED)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while context.is_active():
        if deadline is not None and time.monotonic() >= deadline:
            return None
        event = subscription.get(POLL)
        if event is None:
            continue
        if event is CLOSED:
            return match(event)
        result = match(event)
        if result is not None:
            return result
    return None


def _is(event: dict[str, Any], kind: str, **fields: Any) -> bool:
    return event.get("event") == kind and all(event.get(k) == v for k, v in fields.items())


class Pandora:
    """The state the services share: the host, the pairing defaults, the OnPairing stream."""

    def __init__(self, host: Host, *, name: str = "blemu", io_capability: str = "keyboard-display",
                 reset_mode: str = "op", le_level3: str = "authenticated"):
        if le_level3 not in translate.LE_LEVEL3_READINGS:
            raise BlemuError(f"le_level3 {le_level3!r} is not one of {', '.join(translate.LE_LEVEL3_READINGS)}")
        self.host = host
        self.name = name
        self.io_capability = io_capability
        self.reset_mode = reset_mode
        self.le_level3 = le_level3
        self._reset_lock = threading.Lock()
        self.pairing = PairingDispatcher(host)
        self.channels = ChannelTracker(host)

    def start(self) -> None:
        self.configure_pairing()
        self.pairing.start()
        self.channels.start()

    def stop(self) -> None:
        self.pairing.stop()
        self.channels.stop()

    def configure_pairing(self) -> None:
        """The pairing settings of Bumble's Pandora server (bonding, MITM, Secure Connections
        allowed, every LE key) with this server's IO capability."""
        try:
            self.host.request("pairing-config", io_capability=self.io_capability, bonding=True, mitm=True,
                              secure_connections_only=False, keys=["enc", "id", "sign"])
        except CommandError as error:
            log.warning("pairing-config refused: %s", error.error)

    def factory_reset(self) -> None:
        """`reset` and its `reset` event; when blemu cannot (it refuses, it died, no event in
        time) and this server started it, a restart with a new state directory instead."""
        with self._reset_lock:
            done = False
            if self.reset_mode == "op":
                try:
                    with self.host.subscribe() as events:
                        self.host.request("reset")
                        deadline = time.monotonic() + RESET_TIMEOUT
                        while not done and time.monotonic() < deadline:
                            event = events.get(POLL)
                            if event is CLOSED:
                                break
                            done = event is not None and event.get("event") == "reset"
                    if not done:
                        log.warning("no reset event within %.0f s", RESET_TIMEOUT)
                except BlemuError as error:
                    log.warning("reset failed: %s", error)
            if not done:
                if not self.host.can_restart:
                    raise BlemuError("blemu did not reset (and this server attached to it: it cannot restart it)")
                log.info("restarting blemu for the factory reset")
                self.host.restart()
                self.pairing.subscribe()
            self.pairing.forget()
            self.configure_pairing()


class PairingDispatcher:
    """Every `pairing-request`: to the OnPairing stream when one is open, else answered as
    Bumble's Pandora server does without one (just works and numeric comparison confirmed,
    a passkey to type refused: nobody to type it)."""

    def __init__(self, host: Host):
        self.host = host
        self._lock = threading.Lock()
        self._stream: Optional[Subscription] = None  # the open OnPairing's queue of events
        self._stream_owner: Optional[object] = None
        self._pending: dict[bytes, int] = {}  # a sent PairingEvent (serialized) -> pairing id
        self._running = False
        self._thread: Optional[threading.Thread] = None
        self._subscription: Optional[Subscription] = None

    def start(self) -> None:
        self._running = True
        self.subscribe()
        self._thread = threading.Thread(target=self._run, name="pairing-requests", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._running = False

    def forget(self) -> None:
        with self._lock:
            self._pending.clear()

    def subscribe(self) -> None:
        """Listen to the host's current connection, unless already listening to it: at start, at
        once after a restart (so no pairing request of the new blemu goes unheard), and when the
        watch closed under the dispatcher. Idempotent, so those callers never replace (and lose
        the events of) a subscription to the current connection."""
        with self._lock:
            events = self.host.connection.events
            if self._subscription is not None and self._subscription.source is events:
                return
            old, self._subscription = self._subscription, events.subscribe()
        if old is not None:
            old.close()

    def _run(self) -> None:
        while self._running:
            with self._lock:
                subscription = self._subscription
            assert subscription is not None
            event = subscription.get(POLL)
            if event is CLOSED:
                time.sleep(0.1)  # blemu went away: follow it when it is back
                try:
                    self.subscribe()
                except BlemuError:
                    pass
                continue
            if event is not None and event.get("event") == "pairing-request":
                self._dispatch(event)

    def _dispatch(self, event: dict[str, Any]) -> None:
        try:
            message = translate.pairing_event(event)
        except TranslationError as error:
            log.warning("pairing-request not understood: %s", error)
            return
        pairing = event.get("pairing")
        with self._lock:
            stream = self._stream
            if stream is not None:
                self._pending[message.SerializeToString(deterministic=True)] = pairing  # type: ignore[assignment]
                if len(self._pending) > 256:
                    self._pending.pop(next(iter(self._pending)))
        if stream is not None:
            stream.put({"event": "pairing-event", "message": message})
            return
        method = event.get("method")
        if method == "passkey-display":
            return
        fields = {"confirm": True} if method in ("just-works", "numeric-comparison") else {}
        try:
            self.host.request("pairing-answer", pairing=pairing, **fields)
        except BlemuError as error:
            log.warning("pairing-answer %s: %s", pairing, error)

    def open_stream(self, owner: object) -> Subscription:
        """The queue of an OnPairing stream; a new stream replaces the one before."""
        with self._lock:
            self._stream = Subscription(_Unowned())
            self._stream_owner = owner
            return self._stream

    def close_stream(self, owner: object) -> None:
        with self._lock:
            if self._stream_owner is owner:
                self._stream, self._stream_owner = None, None

    def current(self, owner: object) -> bool:
        with self._lock:
            return self._stream_owner is owner

    def answer(self, answer: security_pb2.PairingEventAnswer) -> None:
        key = answer.event.SerializeToString(deterministic=True)
        with self._lock:
            pairing = self._pending.pop(key, None)
        if pairing is None:
            log.warning("an answer to no pairing event this server sent: %s", str(answer.event).replace("\n", " "))
            return
        try:
            self.host.request("pairing-answer", pairing=pairing, **translate.pairing_answer_fields(answer))
        except BlemuError as error:
            log.warning("pairing-answer %s: %s", pairing, error)


class _Unowned:
    def unsubscribe(self, subscription: Subscription) -> None:
        pass


class HostService(host_grpc.HostServicer):
    def __init__(self, pandora: Pandora):
        self.pandora = pandora
        self.host = pandora.host

    @rpc
    def FactoryReset(self, request: empty_pb2.Empty, context: grpc.ServicerContext) -> empty_pb2.Empty:
        self.pandora.factory_reset()
        return empty_pb2.Empty()

    @rpc
    def Reset(self, request: empty_pb2.Empty, context: grpc.ServicerContext) -> empty_pb2.Empty:
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "blemu's reset is a factory reset (bonds deleted): FactoryReset")
        raise AssertionError

    @rpc
    def ReadLocalAddress(self, request: empty_pb2.Empty, context: grpc.ServicerContext) -> host_pb2.ReadLocalAddressResponse:
        reply = self.host.request("address")
        return host_pb2.ReadLocalAddressResponse(address=translate.address_bytes(reply.get("address")))

    def Connect(self, request: Any, context: grpc.ServicerContext) -> Any:
        context.abort(grpc.StatusCode.UNIMPLEMENTED, BR_EDR)

    def WaitConnection(self, request: Any, context: grpc.ServicerContext) -> Any:
        context.abort(grpc.StatusCode.UNIMPLEMENTED, BR_EDR)

    def Inquiry(self, request: Any, context: grpc.ServicerContext) -> Any:
        context.abort(grpc.StatusCode.UNIMPLEMENTED, BR_EDR)

    def SetDiscoverabilityMode(self, request: Any, context: grpc.ServicerContext) -> Any:
        context.abort(grpc.StatusCode.UNIMPLEMENTED, BR_EDR + " (LE discoverability: DataTypes.le_discoverability_mode)")

    def SetConnectabilityMode(self, request: Any, context: grpc.ServicerContext) -> Any:
        context.abort(grpc.StatusCode.UNIMPLEMENTED, BR_EDR + " (LE: Advertise with connectable)")

    def WaitConnectionUpdate(self, request: Any, context: grpc.ServicerContext) -> Any:
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "blemu's host reports no connection updates yet")

    def GetConnectionParameters(self, request: Any, context: grpc.ServicerContext) -> Any:
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "blemu's host reports no connection parameters yet")

    @rpc
    def ConnectLE(self, request: host_pb2.ConnectLERequest, context: grpc.ServicerContext) -> host_pb2.ConnectLEResponse:
        address, address_type = translate.peer_address(request)
        remaining = context.time_remaining()
        timeout_ms = 10_000 if remaining is None or remaining > 3600 else int(max(0.1, min(60.0, remaining - 0.2)) * 1000)
        with self.host.subscribe() as events:
            try:
                reply = self.host.request("connect", address=address, address_type=address_type,
                                          own_address_type=translate.own_address_type(request.own_address_type),
                                          timeout_ms=timeout_ms)
            except CommandError as error:
                if error.code == "already-connected":
                    return host_pb2.ConnectLEResponse(connection_already_exists=empty_pb2.Empty())
                raise
            attempt = reply.get("attempt")

            def outcome(event: dict[str, Any]) -> Optional[host_pb2.ConnectLEResponse]:
                if event is CLOSED:
                    raise BlemuError("blemu stopped during the connection")
                if _is(event, "connected", attempt=attempt):
                    return host_pb2.ConnectLEResponse(connection=translate.connection(event.get("link")))
                if _is(event, "connect-failed", attempt=attempt):
                    if event.get("reason") == "timeout":
                        return host_pb2.ConnectLEResponse(peer_not_found=empty_pb2.Empty())
                    if event.get("status") in ("0x0B", "0x0b"):  # Connection Already Exists (Vol 1, Part F, 2)
                        return host_pb2.ConnectLEResponse(connection_already_exists=empty_pb2.Empty())
                    raise BlemuError(f"the connection failed: {event.get('reason')} (status {event.get('status')})")
                return None

            response = wait_for(events, context, outcome)
        if response is None:  # the client left; the attempt ends by its timeout_ms (the client's deadline)
            context.abort(grpc.StatusCode.CANCELLED, "the client left")
        return response  # type: ignore[return-value]

    def _quietly(self, op: str, **fields: Any) -> None:
        try:
            self.host.request(op, **fields)
        except BlemuError as error:
            log.debug("%s: %s", op, error)

    @rpc
    def Disconnect(self, request: host_pb2.DisconnectRequest, context: grpc.ServicerContext) -> empty_pb2.Empty:
        link = translate.link_of(request.connection)
        with self.host.subscribe() as events:
            try:
                self.host.request("disconnect", link=link)
            except CommandError as error:
                if error.code == "unknown-link":  # gone already: as Bumble's server, done
                    return empty_pb2.Empty()
                raise
            wait_for(events, context, lambda e: True if e is CLOSED or _is(e, "disconnected", link=link) else None,
                     timeout=10.0)
        return empty_pb2.Empty()

    @rpc
    def WaitDisconnection(self, request: host_pb2.WaitDisconnectionRequest, context: grpc.ServicerContext) -> empty_pb2.Empty:
        link = translate.link_of(request.connection)
        with self.host.subscribe() as events:
            if not any(entry.get("link") == link for entry in self.host.request("links").get("links", [])):
                return empty_pb2.Empty()
            wait_for(events, context, lambda e: True if e is CLOSED or _is(e, "disconnected", link=link) else None)
        return empty_pb2.Empty()

    @stream_rpc
    def Advertise(self, request: host_pb2.AdvertiseRequest, context: grpc.ServicerContext) -> Iterator[host_pb2.AdvertiseResponse]:
        fields = advertise_fields(request, self.pandora.name)
        with self.host.subscribe() as events:
            advertisement = self.host.request("advertise", **fields).get("advertisement")
            try:
                while context.is_active():
                    event = events.get(POLL)
                    if event is None:
                        continue
                    if event is CLOSED or _is(event, "advertising-stopped", advertisement=advertisement):
                        return
                    if _is(event, "connected", advertisement=advertisement):
                        yield host_pb2.AdvertiseResponse(connection=translate.connection(event.get("link")))
            finally:
                self._quietly("advertise-stop", advertisement=advertisement)

    @stream_rpc
    def Scan(self, request: host_pb2.ScanRequest, context: grpc.ServicerContext) -> Iterator[host_pb2.ScanningResponse]:
        fields = scan_fields(request)
        merger = translate.ReportMerger(passive=request.passive)
        with self.host.subscribe() as events:
            scan = self.host.request("scan", **fields).get("scan")
            try:
                while context.is_active():
                    event = events.get(POLL)
                    if event is None:
                        continue
                    if event is CLOSED or _is(event, "scan-stopped", scan=scan):
                        return
                    if not _is(event, "advertisement", scan=scan):
                        continue
                    ready = merger.add(event)
                    if ready is None:
                        continue
                    try:
                        response = translate.scanning_response(*ready)
                    except TranslationError as error:
                        log.warning("advertisement left out: %s", error)
                        continue
                    yield response
            finally:
                self._quietly("scan-stop", scan=scan)


def advertise_fields(request: host_pb2.AdvertiseRequest, name: str) -> dict[str, Any]:
    """`advertise`'s fields for an AdvertiseRequest. Pandora's `interval` is in milliseconds
    (as Bumble's server reads it); `interval_range` has no counterpart (blemu takes one interval)."""
    interval_units = int(request.interval / 0.625) if request.interval else None
    target = request.WhichOneof("target")
    legacy_directed = request.legacy and target is not None
    fields: dict[str, Any] = {
        "legacy": request.legacy,
        # Legacy directed advertising is ADV_DIRECT_IND: connectable, without data (Vol 6, Part B, 2.3.1.2).
        "connectable": request.connectable or legacy_directed,
        "own_address_type": translate.own_address_type(request.own_address_type),
    }
    if not legacy_directed:
        fields["data"] = datatypes.encode(request.data, local_name=name, advertising_interval=interval_units).hex()
    # Pandora's Python stubs set an empty scan_response_data unless told None: on extended
    # advertising an empty one means none, so the set is not scannable (as Bumble's server makes
    # it: scannable when the scan response has data; a scannable extended set without one is
    # refused, Vol 4, Part E, 7.8.56).
    has_scan_response = request.HasField("scan_response_data") and not legacy_directed
    if has_scan_response:
        scan_response = datatypes.encode(request.scan_response_data, local_name=name, advertising_interval=interval_units)
        if scan_response or request.legacy:
            fields["scan_response"] = scan_response.hex()
        else:
            has_scan_response = False
    # Legacy undirected connectable advertising is ADV_IND, always scannable; otherwise an
    # advertisement is scannable when it has a scan response (Vol 4, Part E, 7.8.53).
    fields["scannable"] = has_scan_response or (request.legacy and request.connectable and target is None)
    if target is not None:
        fields["directed_to"] = translate.address_text(getattr(request, target))
        fields["directed_type"] = target
    if request.interval:
        fields["interval_ms"] = int(round(request.interval))
    if not request.legacy:
        fields["primary_phy"] = translate.PRIMARY_PHY.get(request.primary_phy, "1m")
        if request.secondary_phy in translate.SECONDARY_PHY:
            fields["secondary_phy"] = translate.SECONDARY_PHY[request.secondary_phy]
    return fields


def scan_fields(request: host_pb2.ScanRequest) -> dict[str, Any]:
    """`scan`'s fields for a ScanRequest; no PHY named scans both, as Bumble's server does.
    `interval` and `window` are milliseconds (as Bumble's server reads them)."""
    phys = [translate.PRIMARY_PHY[p] for p in request.phys if p in translate.PRIMARY_PHY] or ["1m", "coded"]
    fields: dict[str, Any] = {
        "legacy": request.legacy,
        "passive": request.passive,
        "own_address_type": translate.own_address_type(request.own_address_type),
        "phys": sorted(set(phys), key=phys.index),
    }
    if request.interval:
        fields["interval_ms"] = int(round(request.interval))
    if request.window:
        fields["window_ms"] = int(round(request.window))
    return fields


class SecurityService(security_grpc.SecurityServicer):
    def __init__(self, pandora: Pandora):
        self.pandora = pandora
        self.host = pandora.host

    def OnPairing(self, request_iterator: Iterator[security_pb2.PairingEventAnswer],
                  context: grpc.ServicerContext) -> Iterator[security_pb2.PairingEvent]:
        owner = object()
        dispatcher = self.pandora.pairing
        stream = dispatcher.open_stream(owner)

        def answers() -> None:
            try:
                for answer in request_iterator:
                    dispatcher.answer(answer)
            except grpc.RpcError:
                pass
            except Exception as error:  # noqa: BLE001 - the stream ends, the server goes on
                log.debug("OnPairing answers ended: %r", error)

        threading.Thread(target=answers, name="pairing-answers", daemon=True).start()
        try:
            while context.is_active() and dispatcher.current(owner):
                item = stream.get(POLL)
                if item is not None:
                    yield item["message"]
        finally:
            dispatcher.close_stream(owner)

    @rpc
    def Secure(self, request: security_pb2.SecureRequest, context: grpc.ServicerContext) -> security_pb2.SecureResponse:
        if request.WhichOneof("level") != "le":
            context.abort(grpc.StatusCode.UNIMPLEMENTED, BR_EDR)
        link = translate.link_of(request.connection)
        level = translate.LE_LEVEL[request.le]
        with self.host.subscribe() as events:
            try:
                reply = self.host.request("secure", link=link, level=level)
            except CommandError as error:
                if error.code == "unknown-link":
                    return security_pb2.SecureResponse(connection_died=empty_pb2.Empty())
                raise
            if reply.get("already"):
                return security_pb2.SecureResponse(success=empty_pb2.Empty())
            reading = self.pandora.le_level3

            def outcome(event: dict[str, Any]) -> Optional[str]:
                if event is CLOSED or _is(event, "disconnected", link=link):
                    return "connection_died"
                if _is(event, "security", link=link):
                    return "success" if translate.level_met(level, event.get("level"), reading) else "not_reached"
                if _is(event, "security-failed", link=link):
                    return translate.failure_result(event.get("reason"))
                return None

            result = wait_for(events, context, outcome, timeout=60.0) or "not_reached"
        return security_pb2.SecureResponse(**{result: empty_pb2.Empty()})

    @rpc
    def WaitSecurity(self, request: security_pb2.WaitSecurityRequest, context: grpc.ServicerContext) -> security_pb2.WaitSecurityResponse:
        if request.WhichOneof("level") != "le":
            context.abort(grpc.StatusCode.UNIMPLEMENTED, BR_EDR)
        link = translate.link_of(request.connection)
        level = translate.LE_LEVEL[request.le]
        with self.host.subscribe() as events:
            entry = next((e for e in self.host.request("links").get("links", []) if e.get("link") == link), None)
            if entry is None:
                return security_pb2.WaitSecurityResponse(connection_died=empty_pb2.Empty())
            reading = self.pandora.le_level3
            if translate.level_met(level, entry.get("level"), reading):
                return security_pb2.WaitSecurityResponse(success=empty_pb2.Empty())

            def outcome(event: dict[str, Any]) -> Optional[str]:
                if event is CLOSED or _is(event, "disconnected", link=link):
                    return "connection_died"
                if _is(event, "security", link=link) and isinstance(event.get("level"), int):
                    if translate.level_met(level, event["level"], reading):
                        return "success"
                    # The peer's pairing ended with the link encrypted below the level waited for
                    # (Just Works where level 3 was asked): the level is not coming, and
                    # WaitSecurityResponse has no not_reached, so it is the authentication that
                    # fell short (Vol 3, Part C, 10.2.1).
                    if event.get("encrypted"):
                        return "authentication_failure"
                if _is(event, "security-failed", link=link):
                    return translate.failure_result(event.get("reason"))
                return None

            result = wait_for(events, context, outcome)
        if result is None:
            context.abort(grpc.StatusCode.CANCELLED, "the client left")
        return security_pb2.WaitSecurityResponse(**{result: empty_pb2.Empty()})  # type: ignore[misc]


class SecurityStorageService(security_grpc.SecurityStorageServicer):
    def __init__(self, pandora: Pandora):
        self.host = pandora.host

    @rpc
    def IsBonded(self, request: security_pb2.IsBondedRequest, context: grpc.ServicerContext) -> wrappers_pb2.BoolValue:
        address, address_type = translate.peer_address(request)
        return wrappers_pb2.BoolValue(value=bool(self.host.request("bonded", address=address, address_type=address_type).get("bonded")))

    @rpc
    def DeleteBond(self, request: security_pb2.DeleteBondRequest, context: grpc.ServicerContext) -> empty_pb2.Empty:
        address, address_type = translate.peer_address(request)
        self.host.request("forget", address=address, address_type=address_type)
        return empty_pb2.Empty()


class ChannelState:
    """One channel as the tracker knows it: the SDUs received and not yet taken by a Receive
    stream (bounded: past `limit` the oldest go, counted and logged), and whether it closed."""

    def __init__(self, channel: int, limit: int = 4096):
        self.channel = channel
        self.received: "deque[bytes]" = deque()
        self.limit = limit
        self.dropped = 0
        self.closed = threading.Event()
        self.arrived = threading.Condition()

    def add(self, data: bytes) -> None:
        with self.arrived:
            if len(self.received) >= self.limit:
                self.received.popleft()
                self.dropped += 1
                log.warning("channel %d: %d SDUs not received by anyone dropped (the oldest first)", self.channel, self.dropped)
            self.received.append(data)
            self.arrived.notify_all()

    def close(self) -> None:
        self.closed.set()
        with self.arrived:
            self.arrived.notify_all()

    def take(self, timeout: float) -> Optional[bytes]:
        """The next SDU, or None after `timeout` (or at once when it closed with none left)."""
        with self.arrived:
            if not self.received and not self.closed.is_set():
                self.arrived.wait(timeout)
            return self.received.popleft() if self.received else None


class ChannelTracker:
    """The host's channels from the events: each channel's SDUs kept from the moment it opens
    until a Receive stream takes them (Bumble's Pandora server keeps them the same way), and its
    end, for WaitDisconnection."""

    CLOSED_KEPT = 1024  # ended channels remembered (ids only grow)

    def __init__(self, host: Host):
        self.host = host
        self._lock = threading.Lock()
        self._channels: dict[int, ChannelState] = {}
        self._running = False
        self._subscription: Optional[Subscription] = None

    def start(self) -> None:
        self._running = True
        self._subscription = self.host.subscribe()
        threading.Thread(target=self._run, name="l2cap-channels", daemon=True).start()

    def stop(self) -> None:
        self._running = False

    def state(self, channel: int) -> ChannelState:
        with self._lock:
            state = self._channels.get(channel)
            if state is None:
                state = self._channels[channel] = ChannelState(channel)
                ended = [c for c, s in self._channels.items() if s.closed.is_set()]
                for old in ended[:max(0, len(ended) - self.CLOSED_KEPT)]:
                    del self._channels[old]
            return state

    def known(self, channel: int) -> Optional[ChannelState]:
        with self._lock:
            return self._channels.get(channel)

    def _run(self) -> None:
        while self._running:
            subscription = self._subscription
            assert subscription is not None
            event = subscription.get(POLL)
            if event is None:
                continue
            if event is CLOSED:
                with self._lock:
                    states = list(self._channels.values())
                for state in states:  # blemu went away: so did its channels
                    state.close()
                time.sleep(0.1)
                try:
                    self._subscription = self.host.subscribe()
                    subscription.close()
                except BlemuError:
                    pass
                continue
            kind, channel = event.get("event"), event.get("channel")
            if not isinstance(channel, int):
                continue
            if kind == "channel-opened":
                self.state(channel)
            elif kind == "channel-data":
                try:
                    self.state(channel).add(bytes.fromhex(event.get("data", "")))
                except ValueError:
                    log.warning("channel-data not hex: %r", str(event.get("data"))[:40])
            elif kind in ("channel-closed", "channel-failed"):
                self.state(channel).close()


def _credit_based(request: Any, context: grpc.ServicerContext) -> tuple[dict[str, Any], bool]:
    """The channel fields of a Connect or WaitConnection request's `type`: LE or enhanced credit
    based (Vol 3, Part A, 4.22, 4.25); a zero field takes blemu's default. Basic (BR/EDR) mode is
    not blemu's."""
    variant = request.WhichOneof("type")
    if variant not in ("le_credit_based", "enhanced_credit_based"):
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "blemu is an LE host: only LE and enhanced credit based channels, not "
                      f"{variant or 'no type'}")
    spec = getattr(request, variant)
    fields: dict[str, Any] = {"spsm": spec.spsm}
    for name, value in (("mtu", spec.mtu), ("mps", spec.mps), ("credits", spec.initial_credit)):
        if value:
            fields[name] = value
    return fields, variant == "enhanced_credit_based"


class L2CAPService(l2cap_grpc.L2CAPServicer):
    """LE and enhanced credit based channels on the host's links: `channel-connect`,
    `channel-listen`, `channel-send`, `channel-disconnect` and their events. Fixed channels and
    BR/EDR's basic mode answer UNIMPLEMENTED."""

    SEND_PATIENCE = 10.0  # a Send waits this long for room in a full send queue

    def __init__(self, pandora: Pandora):
        self.pandora = pandora
        self.host = pandora.host
        self.channels = pandora.channels

    @rpc
    def Connect(self, request: l2cap_pb2.ConnectRequest, context: grpc.ServicerContext) -> l2cap_pb2.ConnectResponse:
        link = translate.link_of(request.connection)
        fields, enhanced = _credit_based(request, context)
        if enhanced:
            fields["enhanced"] = True
        with self.host.subscribe() as events:
            channel = self.host.request("channel-connect", link=link, **fields).get("channel")

            def outcome(event: dict[str, Any]) -> Optional[dict[str, Any]]:
                if event is CLOSED:
                    raise BlemuError("blemu stopped while the channel was being opened")
                if event.get("event") in ("channel-opened", "channel-failed") and event.get("channel") == channel:
                    return event
                if _is(event, "disconnected", link=link):
                    return {"event": "channel-failed", "reason": "link-closed", "result": None}
                return None

            event = wait_for(events, context, outcome)
        if event is None:
            context.abort(grpc.StatusCode.CANCELLED, "the client left")
        assert event is not None
        if event["event"] == "channel-opened":
            self.channels.state(channel)
            return l2cap_pb2.ConnectResponse(channel=translate.channel(channel))
        if event.get("reason") == "rejected":
            return l2cap_pb2.ConnectResponse(error=l2cap_pb2.COMMAND_NOT_UNDERSTOOD)
        context.abort(grpc.StatusCode.ABORTED, f"the peer refused the channel: {event.get('reason')} (result {event.get('result')})")
        raise AssertionError

    @rpc
    def WaitConnection(self, request: l2cap_pb2.WaitConnectionRequest,
                       context: grpc.ServicerContext) -> l2cap_pb2.WaitConnectionResponse:
        link = translate.link_of(request.connection) if request.HasField("connection") else None
        fields, _ = _credit_based(request, context)  # blemu listens for both modes on an SPSM
        with self.host.subscribe() as events:
            try:
                self.host.request("channel-listen", **fields)
            except CommandError as error:
                if error.code != "busy":  # listened on already (a WaitConnection before): still is
                    raise

            def incoming(event: dict[str, Any]) -> Optional[int]:
                if event is CLOSED:
                    raise BlemuError("blemu stopped while waiting for a channel")
                if (_is(event, "channel-opened", incoming=True) and int(event.get("spsm", "0"), 16) == fields["spsm"]
                        and (link is None or event.get("link") == link)):
                    return event.get("channel")
                return None

            channel = wait_for(events, context, incoming)
        if channel is None:
            context.abort(grpc.StatusCode.CANCELLED, "the client left")
        self.channels.state(channel)  # type: ignore[arg-type]
        return l2cap_pb2.WaitConnectionResponse(channel=translate.channel(channel))

    @rpc
    def Disconnect(self, request: l2cap_pb2.DisconnectRequest, context: grpc.ServicerContext) -> l2cap_pb2.DisconnectResponse:
        channel = translate.channel_of(request.channel)
        with self.host.subscribe() as events:
            try:
                self.host.request("channel-disconnect", channel=channel)
            except CommandError as error:
                if error.code == "unknown-channel":  # closed already: as the peer wanted, done
                    return l2cap_pb2.DisconnectResponse(success=empty_pb2.Empty())
                raise
            wait_for(events, context, lambda e: True if e is CLOSED or _is(e, "channel-closed", channel=channel) else None,
                     timeout=10.0)
        return l2cap_pb2.DisconnectResponse(success=empty_pb2.Empty())

    @rpc
    def WaitDisconnection(self, request: l2cap_pb2.WaitDisconnectionRequest,
                          context: grpc.ServicerContext) -> l2cap_pb2.WaitDisconnectionResponse:
        state = self.channels.known(translate.channel_of(request.channel))
        while state is not None and not state.closed.wait(POLL):
            if not context.is_active():
                context.abort(grpc.StatusCode.CANCELLED, "the client left")
        return l2cap_pb2.WaitDisconnectionResponse(success=empty_pb2.Empty())

    @rpc
    def Send(self, request: l2cap_pb2.SendRequest, context: grpc.ServicerContext) -> l2cap_pb2.SendResponse:
        if request.WhichOneof("sink") != "channel":
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "blemu's host sends on credit based channels only, not fixed channels")
        channel = translate.channel_of(request.channel)
        deadline = time.monotonic() + self.SEND_PATIENCE
        with self.host.subscribe() as events:
            while True:
                try:
                    self.host.request("channel-send", channel=channel, data=bytes(request.data).hex())
                    return l2cap_pb2.SendResponse(success=empty_pb2.Empty())
                except CommandError as error:
                    if error.code != "no-room" or time.monotonic() >= deadline:
                        raise
                # The send queue is full: wait for its room (`channel-ready`), then again.
                wait_for(events, context, lambda e: True if e is CLOSED or _is(e, "channel-ready", channel=channel)
                         or _is(e, "channel-closed", channel=channel) else None, timeout=deadline - time.monotonic())

    @stream_rpc
    def Receive(self, request: l2cap_pb2.ReceiveRequest, context: grpc.ServicerContext) -> Iterator[l2cap_pb2.ReceiveResponse]:
        if request.WhichOneof("source") != "channel":
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "blemu's host receives on credit based channels only, not fixed channels")
        state = self.channels.known(translate.channel_of(request.channel))
        if state is None:
            context.abort(grpc.StatusCode.NOT_FOUND, "no such channel (or not one this server opened or accepted)")
        assert state is not None
        while context.is_active():
            data = state.take(POLL)
            if data is not None:
                yield l2cap_pb2.ReceiveResponse(data=data)
            elif state.closed.is_set():
                return


def serve(host: Host, listen: str, **options: Any) -> tuple[grpc.Server, Pandora, int]:
    """A started gRPC server for `host` on `listen` (HOST:PORT; port 0 picks one): (server,
    its shared state, the port)."""
    pandora = Pandora(host, **options)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=64, thread_name_prefix="pandora"))
    host_grpc.add_HostServicer_to_server(HostService(pandora), server)
    security_grpc.add_SecurityServicer_to_server(SecurityService(pandora), server)
    security_grpc.add_SecurityStorageServicer_to_server(SecurityStorageService(pandora), server)
    l2cap_grpc.add_L2CAPServicer_to_server(L2CAPService(pandora), server)
    port = server.add_insecure_port(listen)
    if port == 0:
        raise BlemuError(f"cannot listen on {listen}")
    pandora.start()
    server.start()
    return server, pandora, port


IO_CAPABILITIES = ("display-only", "display-yes-no", "keyboard-only", "no-input-no-output", "keyboard-display")


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="blemu-pandora", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--controller", metavar="SPEC", help="start `blemu host` on this controller (as blemu's --controller)")
    target.add_argument("--control", metavar="PATH", help="attach to a running `blemu host`'s control socket instead")
    parser.add_argument("--listen", metavar="HOST:PORT", required=True, help="the gRPC address (port 0: any free port, printed)")
    parser.add_argument("--blemu", metavar="PATH", help="the blemu executable (default: BLEMU_BIN, else PATH)")
    parser.add_argument("--state-dir", metavar="DIR", help="blemu's state directory (default: a new temporary one)")
    parser.add_argument("--name", default="blemu", help="the local name (include_*_local_name); also blemu's --name")
    parser.add_argument("--io-capability", choices=IO_CAPABILITIES, default="keyboard-display",
                        help="the host's pairing IO capability (default keyboard-display)")
    parser.add_argument("--le-level3", choices=translate.LE_LEVEL3_READINGS, default="authenticated",
                        help="what LE_LEVEL3 asks of a link: authenticated (MITM protection, Vol 3, Part C, "
                             "10.2.1; the default) or paired (any pairing, Just Works too, as Bumble's and "
                             "Android's Pandora servers read it)")
    parser.add_argument("--reset", choices=("op", "restart"), default="op",
                        help="FactoryReset: blemu's `reset` (default), or restart blemu with a new state directory")
    parser.add_argument("--log", metavar="FILE", type=Path, help="blemu's output (default: in its temporary folder)")
    parser.add_argument("--log-level", default="info", help="blemu's --log-level (default info)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log every RPC")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")

    process: Optional[BlemuHostProcess] = None
    try:
        if args.controller:
            process = BlemuHostProcess(args.controller, binary=args.blemu, state_dir=args.state_dir,
                                       name=args.name, log_path=args.log, log_level=args.log_level)
            host = Host(process.start(), restart=process.restart)
        else:
            if args.reset == "restart":
                parser.error("--reset restart needs --controller (this server starts blemu)")
            host = Host(HostConnection(args.control))
        server, pandora, port = serve(host, args.listen, name=args.name, io_capability=args.io_capability,
                                      reset_mode=args.reset, le_level3=args.le_level3)
    except BlemuError as error:
        print(f"blemu-pandora: {error}", file=sys.stderr)
        if process is not None:
            process.close()
        return 1
    print(f"blemu-pandora: serving Host, Security, SecurityStorage, L2CAP on port {port}", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    server.stop(grace=1).wait()
    pandora.stop()
    if process is not None:
        process.close()
    return 0
