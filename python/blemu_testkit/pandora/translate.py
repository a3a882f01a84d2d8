"""Pandora's messages and blemu's host vocabulary (Docs/CONTROL.md, "The programmable host"),
both ways: addresses, address types, PHYs, the Connection token, advertising reports, pairing
and security outcomes. Pure functions: no host logic, no I/O."""

from __future__ import annotations

from typing import Any, Optional

from google.protobuf import any_pb2, empty_pb2
from pandora import host_pb2, security_pb2
from pandora.host_pb2 import Connection, ScanningResponse

from . import datatypes


class TranslationError(ValueError):
    """A Pandora request that has no meaning for blemu's host (a malformed address or token)."""


# -- addresses -----------------------------------------------------------------------------

def address_text(address: bytes) -> str:
    """Pandora's 6 octets, most significant first (as written), as blemu writes an address."""
    if len(address) != 6:
        raise TranslationError(f"an address is 6 octets, not {len(address)}")
    return ":".join(f"{octet:02X}" for octet in address)


def address_bytes(text: Any) -> bytes:
    """blemu's `AA:BB:CC:DD:EE:FF` as Pandora's 6 octets."""
    if not isinstance(text, str):
        raise TranslationError(f"blemu gave no address: {text!r}")
    parts = text.split(":")
    if len(parts) != 6 or not all(len(p) == 2 for p in parts):
        raise TranslationError(f"blemu gave a malformed address: {text!r}")
    try:
        return bytes(int(p, 16) for p in parts)
    except ValueError:
        raise TranslationError(f"blemu gave a malformed address: {text!r}") from None


# ConnectLERequest's, ScanningResponse's and IsBonded's address oneofs and the four address
# types of LE Create Connection's Peer_Address_Type (Vol 4, Part E, 7.8.12; 7.7.65.2).
ADDRESS_TYPE_OF_FIELD = {"public": "public", "random": "random",
                         "public_identity": "public-identity", "random_static_identity": "random-identity"}
FIELD_OF_ADDRESS_TYPE = {v: k for k, v in ADDRESS_TYPE_OF_FIELD.items()}

# OwnAddressType, Own_Address_Type 0x00-0x03 (Vol 4, Part E, 7.8.5).
OWN_ADDRESS_TYPE = {host_pb2.PUBLIC: "public", host_pb2.RANDOM: "random",
                    host_pb2.RESOLVABLE_OR_PUBLIC: "resolvable-or-public",
                    host_pb2.RESOLVABLE_OR_RANDOM: "resolvable-or-random"}

PRIMARY_PHY = {host_pb2.PRIMARY_1M: "1m", host_pb2.PRIMARY_CODED: "coded"}
PRIMARY_PHY_OF_NAME = {v: k for k, v in PRIMARY_PHY.items()}
SECONDARY_PHY = {host_pb2.SECONDARY_1M: "1m", host_pb2.SECONDARY_2M: "2m", host_pb2.SECONDARY_CODED: "coded"}
SECONDARY_PHY_OF_NAME = {v: k for k, v in SECONDARY_PHY.items()}

# LESecurityLevel (LE_LEVEL1 = 0 … LE_LEVEL4 = 3): LE security mode 1 levels 1-4 (Vol 3, Part C, 10.2.1).
LE_LEVEL = {security_pb2.LE_LEVEL1: 1, security_pb2.LE_LEVEL2: 2, security_pb2.LE_LEVEL3: 3, security_pb2.LE_LEVEL4: 4}

# What LE_LEVEL3 ("authenticated pairing with encryption") asks of a link: `authenticated`, the
# level (Vol 3, Part C, 10.2.1: MITM protection; a Just Works pairing gives level 2), or
# `paired`, any pairing's encryption, as Bumble's and Android's Pandora servers read it (Avatar's
# le_security_test expects a Just Works pairing to pass Secure/WaitSecurity at LE_LEVEL3).
LE_LEVEL3_READINGS = ("authenticated", "paired")


def level_met(wanted: int, reached: Any, le_level3: str = "authenticated") -> bool:
    """Whether a link at blemu's `reached` level (1-4) meets the Pandora level `wanted` (1-4):
    level 3 read as `le_level3` says (LE_LEVEL3_READINGS). Blemu is still asked for the level
    itself, so a pairing sets MITM and its method is what the IO capabilities give."""
    if not isinstance(reached, int) or isinstance(reached, bool):
        return False
    if wanted == 3 and le_level3 == "paired":
        return reached >= 2
    return reached >= wanted

# TX_Power "not available" of an advertising report (Vol 4, Part E, 7.7.65.13).
TX_POWER_NOT_AVAILABLE = 127


def own_address_type(value: int) -> str:
    try:
        return OWN_ADDRESS_TYPE[value]
    except KeyError:
        raise TranslationError(f"own_address_type {value} is none of Pandora's four") from None


def peer_address(request: Any, oneof: str = "address") -> tuple[str, str]:
    """(address, address type) of a request's address oneof (`public`, `random`, …)."""
    which = request.WhichOneof(oneof)
    if which is None:
        raise TranslationError("no address given")
    return address_text(getattr(request, which)), ADDRESS_TYPE_OF_FIELD[which]


# -- the Connection token: blemu's link id ---------------------------------------------------

def connection(link: Any) -> Connection:
    """The token of a link: its id in decimal ASCII (ids are never reused, unlike HCI handles)."""
    if isinstance(link, bool) or not isinstance(link, int) or link < 0:
        raise TranslationError(f"blemu gave no link id: {link!r}")
    return Connection(cookie=any_pb2.Any(value=str(link).encode()))


def link_of(token: Connection) -> int:
    """The link id a token names; a token this server did not make is an error."""
    value = bytes(token.cookie.value)
    if not value or len(value) > 20 or not value.isdigit():
        raise TranslationError(f"not a blemu connection token: {value[:40]!r}")
    return int(value)


def channel(channel_id: Any) -> Any:
    """The token of an L2CAP channel: its id in decimal ASCII (never reused, as a link's)."""
    from pandora.l2cap_pb2 import Channel
    if isinstance(channel_id, bool) or not isinstance(channel_id, int) or channel_id < 0:
        raise TranslationError(f"blemu gave no channel id: {channel_id!r}")
    return Channel(cookie=any_pb2.Any(value=str(channel_id).encode()))


def channel_of(token: Any) -> int:
    """The channel id a token names; a token this server did not make is an error."""
    value = bytes(token.cookie.value)
    if not value or len(value) > 20 or not value.isdigit():
        raise TranslationError(f"not a blemu channel token: {value[:40]!r}")
    return int(value)


# -- advertising reports -----------------------------------------------------------------------

def _direct_field(address: str, address_type: str) -> str:
    """ScanningResponse's direct_address oneof for a directed report's TargetA."""
    if address_type == "public":
        return "direct_public"
    if address_type == "public-identity":
        return "direct_resolved_public"
    if address_type == "random-identity":
        return "direct_resolved_random"
    # A random address the controller could not resolve: a resolvable private one has 0b01 in its
    # two most significant bits (Vol 6, Part B, 1.3.2.2), else it is non-resolvable.
    top = address_bytes(address)[0] >> 6
    return "direct_unresolved_random" if top == 0b01 else "direct_non_resolvable_random"


def scanning_response(report: dict[str, Any], data: bytes) -> ScanningResponse:
    """An `advertisement` event (with `data`: its AD structures, a scan response merged in) as
    a ScanningResponse."""
    response = ScanningResponse(
        legacy=bool(report.get("legacy")),
        connectable=bool(report.get("connectable")),
        scannable=bool(report.get("scannable")),
        truncated=bool(report.get("truncated")),
        sid=_int(report.get("sid"), 0),
        primary_phy=PRIMARY_PHY_OF_NAME.get(report.get("primary_phy"), host_pb2.PRIMARY_1M),
        secondary_phy=SECONDARY_PHY_OF_NAME.get(report.get("secondary_phy"), host_pb2.SECONDARY_NONE),
        tx_power=_int(report.get("tx_power"), TX_POWER_NOT_AVAILABLE),
        rssi=_int(report.get("rssi"), 0),
        periodic_advertising_interval=_number(report.get("periodic_interval_ms")),
        data=datatypes.decode(data),
    )
    field = FIELD_OF_ADDRESS_TYPE.get(report.get("address_type"))
    if field is None:
        raise TranslationError(f"advertisement with an unknown address type {report.get('address_type')!r}")
    setattr(response, field, address_bytes(report.get("address")))
    direct, direct_type = report.get("direct_address"), report.get("direct_address_type")
    if direct is not None and direct_type in FIELD_OF_ADDRESS_TYPE:
        setattr(response, _direct_field(direct, direct_type), address_bytes(direct))
    return response


def _number(value: Any) -> float:
    """A duration in milliseconds (blemu writes 1.25 ms steps as decimals); none is 0."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def hex_data(value: Any) -> bytes:
    """An event's hex `data`; anything else is no data."""
    if not isinstance(value, str):
        return b""
    try:
        return bytes.fromhex(value)
    except ValueError:
        return b""


class ReportMerger:
    """A scannable advertisement's report and its scan response as one report, as Bumble's
    Pandora server gives them (its AdvertisementDataAccumulator), per advertiser: an active
    scan holds a scannable advertisement until its scan response, or until the advertiser's
    next advertisement, which lets the held one go without it."""

    def __init__(self, passive: bool):
        self.passive = passive
        self._last: dict[tuple[Any, Any], tuple[dict[str, Any], bytes]] = {}

    def add(self, report: dict[str, Any]) -> Optional[tuple[dict[str, Any], bytes]]:
        """The report to give now (with its data), or None while one waits for its scan response."""
        key = (report.get("address"), report.get("address_type"))
        data = hex_data(report.get("data"))
        last = self._last.get(key)
        result = None
        if report.get("scan_response"):
            if last is not None and not last[0].get("scan_response"):
                merged = dict(report)
                merged["connectable"] = last[0].get("connectable")
                merged["scannable"] = True
                result = (merged, last[1] + data)
            data = b""
        elif self.passive or not report.get("scannable") or (last is not None and not last[0].get("scan_response")):
            result = (report, data)
        self._last[key] = (report, data)
        if len(self._last) > 4096:  # a crowd of advertisers: forget the oldest
            self._last.pop(next(iter(self._last)))
        return result


# -- pairing and security ------------------------------------------------------------------

def pairing_event(event: dict[str, Any]) -> security_pb2.PairingEvent:
    """A `pairing-request` event as Pandora's PairingEvent."""
    token = connection(event.get("link"))
    method, passkey = event.get("method"), event.get("passkey")
    if method == "just-works":
        return security_pb2.PairingEvent(connection=token, just_works=empty_pb2.Empty())
    if method == "numeric-comparison" and isinstance(passkey, int):
        return security_pb2.PairingEvent(connection=token, numeric_comparison=passkey)
    if method == "passkey-entry":
        return security_pb2.PairingEvent(connection=token, passkey_entry_request=empty_pb2.Empty())
    if method == "passkey-display" and isinstance(passkey, int):
        return security_pb2.PairingEvent(connection=token, passkey_entry_notification=passkey)
    raise TranslationError(f"pairing-request with an unknown method {method!r}")


def pairing_answer_fields(answer: security_pb2.PairingEventAnswer) -> dict[str, Any]:
    """`pairing-answer`'s `confirm` or `passkey` for an answer; none (a rejection) when it has neither."""
    which = answer.WhichOneof("answer")
    if which == "confirm":
        return {"confirm": bool(answer.confirm)}
    if which == "passkey":
        if not 0 <= answer.passkey <= 999999:
            return {}  # no passkey SMP can use (Vol 3, Part H, 2.3.5.3): a rejection
        return {"passkey": answer.passkey}
    return {}


# `security-failed` reasons, and a dead link, as SecureResponse / WaitSecurityResponse results.
FAILURE_RESULT = {"pairing-failure": "pairing_failure", "authentication-failure": "authentication_failure",
                  "encryption-failure": "encryption_failure", "connection-died": "connection_died"}


def failure_result(reason: Any) -> str:
    return FAILURE_RESULT.get(reason, "pairing_failure")
