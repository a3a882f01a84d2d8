"""Pandora's `DataTypes` and advertising data as on the air, both ways.

Advertising and scan response data are a sequence of AD structures, each Length (1 octet,
counting the type and data), AD Type (1 octet), data (Core Vol 3, Part C, 11). The types and
their formats are the Core Specification Supplement's (CSS Part A, section 1.x, cited per type
below) with the numbers of Assigned Numbers 2.3 (Common Data Types). A translation table only:
no host logic. Decoding is total: whatever a peer advertises gives a DataTypes (a structure cut
short ends the data, a value of the wrong size is left out), never an exception.
"""

from __future__ import annotations

import struct
from typing import Iterator, Optional

from pandora.host_pb2 import DISCOVERABLE_GENERAL, DISCOVERABLE_LIMITED, NOT_DISCOVERABLE, DataTypes

# Assigned Numbers 2.3, Common Data Types.
FLAGS = 0x01
INCOMPLETE_UUIDS16 = 0x02
COMPLETE_UUIDS16 = 0x03
INCOMPLETE_UUIDS32 = 0x04
COMPLETE_UUIDS32 = 0x05
INCOMPLETE_UUIDS128 = 0x06
COMPLETE_UUIDS128 = 0x07
SHORTENED_LOCAL_NAME = 0x08
COMPLETE_LOCAL_NAME = 0x09
TX_POWER_LEVEL = 0x0A
CLASS_OF_DEVICE = 0x0D
PERIPHERAL_CONNECTION_INTERVAL_RANGE = 0x12
SOLICITATION_UUIDS16 = 0x14
SOLICITATION_UUIDS128 = 0x15
SERVICE_DATA16 = 0x16
PUBLIC_TARGET_ADDRESS = 0x17
RANDOM_TARGET_ADDRESS = 0x18
APPEARANCE = 0x19
ADVERTISING_INTERVAL = 0x1A
SOLICITATION_UUIDS32 = 0x1F
SERVICE_DATA32 = 0x20
SERVICE_DATA128 = 0x21
URI = 0x24
LE_SUPPORTED_FEATURES = 0x27
ADVERTISING_INTERVAL_LONG = 0x2F
MANUFACTURER_SPECIFIC_DATA = 0xFF

# CSS Part A, 1.3: the Flags bits this translation sets or reads.
LE_LIMITED_DISCOVERABLE = 0x01
LE_GENERAL_DISCOVERABLE = 0x02
BR_EDR_NOT_SUPPORTED = 0x04

# The field name of each UUID list type (CSS Part A, 1.1 Service UUID; 1.10 Service Solicitation).
_UUID_LISTS = {
    INCOMPLETE_UUIDS16: ("incomplete_service_class_uuids16", 2),
    COMPLETE_UUIDS16: ("complete_service_class_uuids16", 2),
    INCOMPLETE_UUIDS32: ("incomplete_service_class_uuids32", 4),
    COMPLETE_UUIDS32: ("complete_service_class_uuids32", 4),
    INCOMPLETE_UUIDS128: ("incomplete_service_class_uuids128", 16),
    COMPLETE_UUIDS128: ("complete_service_class_uuids128", 16),
    SOLICITATION_UUIDS16: ("service_solicitation_uuids16", 2),
    SOLICITATION_UUIDS32: ("service_solicitation_uuids32", 4),
    SOLICITATION_UUIDS128: ("service_solicitation_uuids128", 16),
}
# CSS Part A, 1.11 Service Data: the UUID, then the data.
_SERVICE_DATA = {
    SERVICE_DATA16: ("service_data_uuid16", 2),
    SERVICE_DATA32: ("service_data_uuid32", 4),
    SERVICE_DATA128: ("service_data_uuid128", 16),
}


class DataTypesError(ValueError):
    """A DataTypes that cannot be put on the air as asked (a malformed UUID, a value out of range)."""


# -- UUIDs: Pandora writes them as Bumble does, upper-case hex, 128-bit ones with dashes -------

def uuid_text(value: bytes) -> str:
    """A UUID from the air (little-endian) as Pandora writes it: `183A`, `FFFF183A`,
    `FFFF181F-FFFF-1000-8000-00805F9B34FB`."""
    digits = value[::-1].hex().upper()
    if len(value) == 16:
        return f"{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:]}"
    return digits


def uuid_bytes(text: str, size: int) -> bytes:
    """A UUID as Pandora writes it, in `size` octets little-endian as on the air."""
    digits = text.replace("-", "")
    if len(digits) != size * 2:
        raise DataTypesError(f"UUID {text!r} is not a {size * 8}-bit UUID ({size * 2} hex digits)")
    try:
        return bytes.fromhex(digits)[::-1]
    except ValueError:
        raise DataTypesError(f"UUID {text!r} is not hexadecimal") from None


# -- the air -> DataTypes ------------------------------------------------------------------

def ad_structures(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(AD type, data) of each structure (Vol 3, Part C, 11). A zero Length ends the significant
    part; a structure longer than what is left is cut short and ends the data."""
    offset = 0
    while offset < len(data):
        length = data[offset]
        if length == 0 or offset + 1 + length > len(data):
            return
        yield data[offset + 1], bytes(data[offset + 2:offset + 1 + length])
        offset += 1 + length


def decode(data: bytes) -> DataTypes:
    """The DataTypes of advertising or scan response data. Lists add up over structures of
    one type; for single values (a name, the manufacturer data) the first structure counts."""
    types = DataTypes()
    seen: set[int] = set()
    for kind, value in ad_structures(data):
        first = kind not in seen
        seen.add(kind)
        if kind in _UUID_LISTS:
            name, size = _UUID_LISTS[kind]
            getattr(types, name).extend(uuid_text(value[i:i + size]) for i in range(0, len(value) - size + 1, size))
        elif kind in _SERVICE_DATA:
            name, size = _SERVICE_DATA[kind]
            if len(value) >= size:
                getattr(types, name)[uuid_text(value[:size])] = value[size:]
        elif not first:
            continue
        elif kind == FLAGS and len(value) >= 1:
            if value[0] & LE_LIMITED_DISCOVERABLE:
                types.le_discoverability_mode = DISCOVERABLE_LIMITED
            elif value[0] & LE_GENERAL_DISCOVERABLE:
                types.le_discoverability_mode = DISCOVERABLE_GENERAL
        elif kind == SHORTENED_LOCAL_NAME:
            types.shortened_local_name = value.decode("utf-8", errors="replace")
        elif kind == COMPLETE_LOCAL_NAME:
            types.complete_local_name = value.decode("utf-8", errors="replace")
        elif kind == TX_POWER_LEVEL and len(value) == 1:  # CSS 1.5: -127..127 dBm
            types.tx_power_level = struct.unpack("<b", value)[0]
        elif kind == CLASS_OF_DEVICE and len(value) == 3:
            types.class_of_device = int.from_bytes(value, "little")
        elif kind == PERIPHERAL_CONNECTION_INTERVAL_RANGE and len(value) == 4:  # CSS 1.9
            types.peripheral_connection_interval_min, types.peripheral_connection_interval_max = struct.unpack("<HH", value)
        elif kind in (PUBLIC_TARGET_ADDRESS, RANDOM_TARGET_ADDRESS):  # CSS 1.13, 1.14
            field = types.public_target_addresses if kind == PUBLIC_TARGET_ADDRESS else types.random_target_addresses
            field.extend(value[i:i + 6][::-1] for i in range(0, len(value) - 5, 6))
        elif kind == APPEARANCE and len(value) == 2:  # CSS 1.12
            types.appearance = struct.unpack("<H", value)[0]
        elif kind == ADVERTISING_INTERVAL and len(value) == 2:  # CSS 1.15, 0.625 ms units
            types.advertising_interval = struct.unpack("<H", value)[0]
        elif kind == ADVERTISING_INTERVAL_LONG and len(value) in (3, 4) and ADVERTISING_INTERVAL not in seen:
            types.advertising_interval = int.from_bytes(value, "little")
        elif kind == URI:
            # CSS 1.18 starts a URI with a scheme code point; Pandora's field is the text, and
            # Bumble's Pandora server writes and reads it whole: so does this translation.
            types.uri = value.decode("utf-8", errors="replace")
        elif kind == LE_SUPPORTED_FEATURES:  # CSS 1.19: the feature bits, as many octets as sent
            types.le_supported_features = value
        elif kind == MANUFACTURER_SPECIFIC_DATA:  # CSS 1.4: company identifier, then data
            types.manufacturer_specific_data = value
    return types


# -- DataTypes -> the air ------------------------------------------------------------------

def _structure(kind: int, value: bytes) -> bytes:
    if len(value) > 254:
        raise DataTypesError(f"AD type 0x{kind:02X}: {len(value)} octets do not fit one AD structure (254 at most)")
    return bytes([len(value) + 1, kind]) + value


def _unsigned(value: int, bits: int, what: str) -> int:
    if not 0 <= value < (1 << bits):
        raise DataTypesError(f"{what} {value} does not fit {bits} bits")
    return value


def encode(types: DataTypes, *, local_name: str = "blemu", advertising_interval: Optional[int] = None) -> bytes:
    """The AD structures of a DataTypes, in field order. `local_name` answers the
    `include_*_local_name` fields; `advertising_interval` (0.625 ms units) the
    `include_advertising_interval` one. The length limits (31 octets for legacy PDUs, the
    controller's for extended) are blemu's to check: it refuses data that does not fit."""
    out = bytearray()
    for kind, (name, size) in _UUID_LISTS.items():
        uuids = list(getattr(types, name))
        if uuids:
            out += _structure(kind, b"".join(uuid_bytes(u, size) for u in uuids))
    which = types.WhichOneof("shortened_local_name_oneof")
    if which == "include_shortened_local_name" and types.include_shortened_local_name:
        out += _structure(SHORTENED_LOCAL_NAME, local_name.encode()[:8])
    elif which == "shortened_local_name":
        out += _structure(SHORTENED_LOCAL_NAME, types.shortened_local_name.encode())
    which = types.WhichOneof("complete_local_name_oneof")
    if which == "include_complete_local_name" and types.include_complete_local_name:
        out += _structure(COMPLETE_LOCAL_NAME, local_name.encode())
    elif which == "complete_local_name":
        out += _structure(COMPLETE_LOCAL_NAME, types.complete_local_name.encode())
    which = types.WhichOneof("tx_power_level_oneof")
    if which == "include_tx_power_level" and types.include_tx_power_level:
        raise DataTypesError("include_tx_power_level: blemu does not know its transmit power; give tx_power_level")
    if which == "tx_power_level":
        if not -127 <= types.tx_power_level <= 127:
            raise DataTypesError(f"tx_power_level {types.tx_power_level} is not -127..127 dBm (CSS Part A, 1.5)")
        out += _structure(TX_POWER_LEVEL, struct.pack("<b", types.tx_power_level))
    which = types.WhichOneof("class_of_device_oneof")
    if which == "include_class_of_device" and types.include_class_of_device:
        raise DataTypesError("include_class_of_device: blemu is LE only and has no Class of Device; give class_of_device")
    if which == "class_of_device":
        out += _structure(CLASS_OF_DEVICE, _unsigned(types.class_of_device, 24, "class_of_device").to_bytes(3, "little"))
    if types.peripheral_connection_interval_min or types.peripheral_connection_interval_max:
        low = _unsigned(types.peripheral_connection_interval_min, 16, "peripheral_connection_interval_min")
        high = _unsigned(types.peripheral_connection_interval_max or low, 16, "peripheral_connection_interval_max")
        out += _structure(PERIPHERAL_CONNECTION_INTERVAL_RANGE, struct.pack("<HH", low, high))
    for kind, (name, size) in _SERVICE_DATA.items():
        for uuid, value in sorted(getattr(types, name).items()):
            out += _structure(kind, uuid_bytes(uuid, size) + value)
    for kind, addresses in ((PUBLIC_TARGET_ADDRESS, types.public_target_addresses),
                            (RANDOM_TARGET_ADDRESS, types.random_target_addresses)):
        if addresses:
            for address in addresses:
                if len(address) != 6:
                    raise DataTypesError(f"target address {address.hex()} is not 6 octets")
            out += _structure(kind, b"".join(address[::-1] for address in addresses))
    if types.appearance:
        out += _structure(APPEARANCE, struct.pack("<H", _unsigned(types.appearance, 16, "appearance")))
    which = types.WhichOneof("advertising_interval_oneof")
    interval: Optional[int] = None
    if which == "advertising_interval":
        interval = types.advertising_interval
    elif which == "include_advertising_interval" and types.include_advertising_interval:
        if advertising_interval is None:
            raise DataTypesError("include_advertising_interval: no advertising interval to include")
        interval = advertising_interval
    if interval is not None:
        if interval <= 0xFFFF:
            out += _structure(ADVERTISING_INTERVAL, struct.pack("<H", _unsigned(interval, 16, "advertising_interval")))
        else:
            out += _structure(ADVERTISING_INTERVAL_LONG, _unsigned(interval, 32, "advertising_interval").to_bytes(4, "little"))
    if types.uri:
        out += _structure(URI, types.uri.encode())
    if types.le_supported_features:
        out += _structure(LE_SUPPORTED_FEATURES, types.le_supported_features)
    if types.manufacturer_specific_data:
        out += _structure(MANUFACTURER_SPECIFIC_DATA, types.manufacturer_specific_data)
    if types.le_discoverability_mode != NOT_DISCOVERABLE:
        mode = LE_LIMITED_DISCOVERABLE if types.le_discoverability_mode == DISCOVERABLE_LIMITED else LE_GENERAL_DISCOVERABLE
        # blemu has no BR/EDR: CSS Part A, 1.3 has an LE-only device say so in its Flags.
        out += _structure(FLAGS, bytes([mode | BR_EDR_NOT_SUPPORTED]))
    return bytes(out)
