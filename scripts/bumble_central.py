"""Bumble as an independent BLE central for blemu's interop tests and tools.

Written against bumble 0.0.236 (pinned in Tests/interop/requirements.txt). Everything that
waits has a timeout, so a missing or silent peripheral fails a test instead of hanging it.

Spec references are to the Bluetooth Core Specification 5.4 unless noted; the Heart Rate
Measurement format is from the Heart Rate Service 1.0 specification, section 3.1.
"""

from __future__ import annotations

import asyncio
import dataclasses
import struct
import time
from collections.abc import Callable, Iterable
from typing import Any

from bumble import att, gatt_client, hci
from bumble.core import UUID
from bumble.device import Connection, Device, Peer
from bumble.transport import open_transport

# ---------------------------------------------------------------------------------------------
# Quick ACKs on Bumble's TCP transports

def _enable_tcp_quick_acknowledgements() -> None:
    """Rootcanal writes each H4 packet in two sends (indicator, then body); with Nagle on its
    side and delayed ACKs (up to 40 ms) on ours, the body waits for our ACK of the indicator.
    Setting TCP_QUICKACK again after each read (Linux clears it as it goes) sends ACKs at once,
    as blemu's TCP transport does. Without it a central reads about 22 values a second."""
    import socket

    from bumble.transport.common import StreamPacketSource

    if getattr(StreamPacketSource, "_blemu_quick_ack", False) or not hasattr(socket, "TCP_QUICKACK"):
        return
    received = StreamPacketSource.data_received

    def connection_made(self, transport) -> None:  # type: ignore[no-untyped-def]
        sock = transport.get_extra_info("socket")
        self._blemu_socket = sock if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6) else None

    def data_received(self, data: bytes) -> None:
        sock = getattr(self, "_blemu_socket", None)
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)
            except OSError:
                pass
        received(self, data)

    StreamPacketSource.connection_made = connection_made  # type: ignore[method-assign]
    StreamPacketSource.data_received = data_received  # type: ignore[method-assign]
    StreamPacketSource._blemu_quick_ack = True  # type: ignore[attr-defined]


_enable_tcp_quick_acknowledgements()

# ---------------------------------------------------------------------------------------------
# Numbers from the specs

# Vol 3, Part F, 3.2.8 / 3.4.2: the default (minimum) LE ATT_MTU.
ATT_DEFAULT_MTU = 23
# Vol 3, Part F, 3.2.9: an attribute value is at most 512 octets.
ATT_MAX_VALUE_LENGTH = 512

# Vol 3, Part F, 3.4.1.1, Table 3.4: ATT error codes.
ATT_INVALID_HANDLE = 0x01
ATT_READ_NOT_PERMITTED = 0x02
ATT_WRITE_NOT_PERMITTED = 0x03
ATT_REQUEST_NOT_SUPPORTED = 0x06
ATT_INVALID_OFFSET = 0x07
ATT_ATTRIBUTE_NOT_FOUND = 0x0A
ATT_ATTRIBUTE_NOT_LONG = 0x0B
# Heart Rate Service 1.0, 1.6: Application error "Control Point value not supported".
HRS_CONTROL_POINT_NOT_SUPPORTED = 0x80

# Vol 1, Part F, 2: HCI error codes used as disconnection reasons.
HCI_CONNECTION_TIMEOUT = 0x08
HCI_REMOTE_USER_TERMINATED_CONNECTION = 0x13
HCI_REMOTE_DEVICE_TERMINATED_CONNECTION_DUE_TO_POWER_OFF = 0x15
HCI_CONNECTION_TERMINATED_BY_LOCAL_HOST = 0x16

# Supplement to the Core Specification (CSS), Part A, 1: AD types.
AD_FLAGS = 0x01
AD_INCOMPLETE_16BIT_UUIDS = 0x02
AD_COMPLETE_16BIT_UUIDS = 0x03
AD_INCOMPLETE_128BIT_UUIDS = 0x06
AD_COMPLETE_128BIT_UUIDS = 0x07
AD_SHORTENED_LOCAL_NAME = 0x08
AD_COMPLETE_LOCAL_NAME = 0x09

# Assigned numbers.
UUID_GAP_SERVICE = UUID.from_16_bits(0x1800)
UUID_GATT_SERVICE = UUID.from_16_bits(0x1801)
UUID_DEVICE_INFORMATION_SERVICE = UUID.from_16_bits(0x180A)
UUID_HEART_RATE_SERVICE = UUID.from_16_bits(0x180D)
UUID_BATTERY_SERVICE = UUID.from_16_bits(0x180F)
UUID_DEVICE_NAME = UUID.from_16_bits(0x2A00)
UUID_SERVICE_CHANGED = UUID.from_16_bits(0x2A05)
UUID_BATTERY_LEVEL = UUID.from_16_bits(0x2A19)
UUID_MODEL_NUMBER = UUID.from_16_bits(0x2A24)
UUID_SERIAL_NUMBER = UUID.from_16_bits(0x2A25)
UUID_FIRMWARE_REVISION = UUID.from_16_bits(0x2A26)
UUID_HARDWARE_REVISION = UUID.from_16_bits(0x2A27)
UUID_SOFTWARE_REVISION = UUID.from_16_bits(0x2A28)
UUID_MANUFACTURER_NAME = UUID.from_16_bits(0x2A29)
UUID_HEART_RATE_MEASUREMENT = UUID.from_16_bits(0x2A37)
UUID_BODY_SENSOR_LOCATION = UUID.from_16_bits(0x2A38)
UUID_HEART_RATE_CONTROL_POINT = UUID.from_16_bits(0x2A39)
UUID_DATABASE_HASH = UUID.from_16_bits(0x2B2A)
UUID_CCCD = UUID.from_16_bits(0x2902)
# Docs/REFERENCE.md, UUIDs.
UUID_DIAGNOSTICS_SERVICE = UUID("7d3c0001-9a5e-4d1a-8f6e-5c1b2d3e4f50")
UUID_DIAGNOSTICS_CHARACTERISTIC = UUID("7d3c0002-9a5e-4d1a-8f6e-5c1b2d3e4f50")


def bumble_transport_spec(controller: str) -> str:
    """Translate a blemu controller spec (Docs/REFERENCE.md, Controller specs) to Bumble's."""
    if controller.startswith("tcp:"):
        return "tcp-client:" + controller[len("tcp:"):]
    if controller.startswith("unix:"):
        return "unix:" + controller[len("unix:"):]
    if controller.startswith("serial:"):
        rest = controller[len("serial:"):]
        device, _, baud = rest.partition(":")
        return f"serial:{device},{baud or 115200}"
    if controller.startswith("hci") and controller[3:].isdigit():
        return f"hci-socket:{controller[3:]}"
    return controller  # already a Bumble transport spec (tcp-client:..., usb:0, ...)


# ---------------------------------------------------------------------------------------------
# Advertising data


def parse_ad_structures(data: bytes) -> list[tuple[int, bytes]]:
    """Split advertising or scan response data into (AD type, AD data) pairs.

    Vol 3, Part C, 11: each structure is Length (1 octet), then Length octets of
    AD Type + AD Data; a zero Length ends the significant part. Raises ValueError on
    a structure that runs past the end.
    """
    structures = []
    offset = 0
    while offset < len(data):
        length = data[offset]
        if length == 0:
            break
        if offset + 1 + length > len(data):
            raise ValueError(f"AD structure at offset {offset} of length {length} runs past {len(data)} octets")
        structures.append((data[offset + 1], bytes(data[offset + 2 : offset + 1 + length])))
        offset += 1 + length
    return structures


@dataclasses.dataclass
class ScanResult:
    """What a scanner saw from one advertiser: the advertising PDU data and the scan response."""

    address: hci.Address
    adv_data: bytes | None = None
    scan_response: bytes | None = None
    connectable: bool = False
    scannable: bool = False
    legacy: bool = True
    first_seen: float = 0.0

    @property
    def adv_structures(self) -> list[tuple[int, bytes]]:
        return parse_ad_structures(self.adv_data or b"")

    @property
    def scan_response_structures(self) -> list[tuple[int, bytes]]:
        return parse_ad_structures(self.scan_response or b"")

    def names(self) -> dict[str, tuple[int, str]]:
        """{'adv'|'scan_response': (AD type, name)} for every local name seen."""
        found = {}
        for where, structures in (("adv", self.adv_structures), ("scan_response", self.scan_response_structures)):
            for ad_type, ad_data in structures:
                if ad_type in (AD_COMPLETE_LOCAL_NAME, AD_SHORTENED_LOCAL_NAME):
                    found[where] = (ad_type, ad_data.decode("utf-8", errors="replace"))
        return found

    def matches_name(self, name: str) -> bool:
        """The complete local name, where the advertiser sent one, decides; a shortened name
        (Core Supplement, Part A, 1.2: a prefix of the complete one) matches only while no
        complete name is known. Two advertisers whose names begin alike (a device that cuts
        its name to "E" in the advertising data, another named "EE-...") are told apart by
        their scan responses, so a test connects to the address of the device it means."""
        names = self.names().values()
        complete = [local_name for ad_type, local_name in names if ad_type == AD_COMPLETE_LOCAL_NAME]
        if complete:
            return name in complete
        return any(ad_type == AD_SHORTENED_LOCAL_NAME and local_name and name.startswith(local_name)
                   for ad_type, local_name in names)

    def service_uuids_16(self) -> set[int]:
        uuids = set()
        for ad_type, ad_data in self.adv_structures + self.scan_response_structures:
            if ad_type in (AD_INCOMPLETE_16BIT_UUIDS, AD_COMPLETE_16BIT_UUIDS):
                for i in range(0, len(ad_data) - 1, 2):
                    uuids.add(struct.unpack_from("<H", ad_data, i)[0])
        return uuids

    def flags(self) -> int | None:
        for ad_type, ad_data in self.adv_structures:
            if ad_type == AD_FLAGS and ad_data:
                return ad_data[0]
        return None


def is_static_random(address: hci.Address) -> bool:
    """Vol 6, Part B, 1.3.2.1: a static device address is random with its two top bits set."""
    return address.is_random and (address.address_bytes[5] >> 6) == 0b11


# ---------------------------------------------------------------------------------------------
# Heart Rate Measurement (HRS 1.0, 3.1.1)


class MeasurementFormatError(ValueError):
    pass


@dataclasses.dataclass
class HeartRateMeasurement:
    flags: int
    heart_rate: int  # beats per minute
    uint16_format: bool
    sensor_contact_supported: bool
    sensor_contact_detected: bool
    energy_expended: int | None  # kilo joules since the last reset
    rr_intervals: list[float]  # seconds
    raw: bytes

    def describe(self) -> str:
        contact = (
            "contact" if self.sensor_contact_detected else "no contact"
        ) if self.sensor_contact_supported else "contact n/a"
        parts = [f"{self.heart_rate:3d} bpm", contact]
        if self.energy_expended is not None:
            parts.append(f"energy {self.energy_expended} kJ")
        if self.rr_intervals:
            parts.append("RR " + " ".join(f"{rr * 1000:.0f}ms" for rr in self.rr_intervals))
        return ", ".join(parts)


def decode_heart_rate_measurement(value: bytes) -> HeartRateMeasurement:
    """Decode and validate one Heart Rate Measurement value; raise MeasurementFormatError.

    HRS 1.0, 3.1.1.1 Flags: bit 0 value format (0 = uint8, 1 = uint16), bits 1-2 sensor
    contact status (bit 2 supported, bit 1 detected), bit 3 Energy Expended present
    (uint16, kJ), bit 4 RR-Interval present (uint16 each, 1/1024 s), bits 5-7 reserved.
    """
    if len(value) < 2:
        raise MeasurementFormatError(f"too short: {value.hex()}")
    flags = value[0]
    if flags & 0xE0:
        raise MeasurementFormatError(f"reserved flag bits set: flags=0x{flags:02x}")
    offset = 1
    uint16 = bool(flags & 0x01)
    if uint16:
        if len(value) < 3:
            raise MeasurementFormatError(f"uint16 heart rate truncated: {value.hex()}")
        heart_rate = struct.unpack_from("<H", value, offset)[0]
        offset += 2
    else:
        heart_rate = value[offset]
        offset += 1
    energy = None
    if flags & 0x08:
        if len(value) < offset + 2:
            raise MeasurementFormatError(f"energy expended truncated: {value.hex()}")
        energy = struct.unpack_from("<H", value, offset)[0]
        offset += 2
    rr = []
    if flags & 0x10:
        remaining = len(value) - offset
        if remaining < 2 or remaining % 2:
            raise MeasurementFormatError(f"RR intervals: {remaining} octets left, need a non-zero even count: {value.hex()}")
        rr = [struct.unpack_from("<H", value, i)[0] / 1024 for i in range(offset, len(value), 2)]
        offset = len(value)
    if offset != len(value):
        raise MeasurementFormatError(f"{len(value) - offset} trailing octets: {value.hex()}")
    return HeartRateMeasurement(
        flags=flags,
        heart_rate=heart_rate,
        uint16_format=uint16,
        sensor_contact_supported=bool(flags & 0x04),
        sensor_contact_detected=bool(flags & 0x02),
        energy_expended=energy,
        rr_intervals=rr,
        raw=bytes(value),
    )


# ---------------------------------------------------------------------------------------------
# ATT helpers


class AttErrorResponse(Exception):
    """An ATT_ERROR_RSP to a request: carries the three fields of Vol 3, Part F, 3.4.1.1."""

    def __init__(self, request_opcode: int, handle: int, error_code: int):
        super().__init__(
            f"ATT error 0x{error_code:02x} for request 0x{request_opcode:02x} on handle 0x{handle:04x}"
        )
        self.request_opcode = request_opcode
        self.handle = handle
        self.error_code = error_code


def error_code_of(error: BaseException) -> int | None:
    """The ATT error code carried by a Bumble ATT_Error or our AttErrorResponse."""
    if isinstance(error, AttErrorResponse):
        return error.error_code
    if isinstance(error, att.ATT_Error):
        return int(error.error_code)
    return None


def raw_request(opcode: int, payload: bytes = b"") -> att.ATT_PDU:
    """Any ATT PDU from bytes, including opcodes Bumble does not know."""
    return att.ATT_PDU.from_bytes(bytes([opcode]) + payload)


@dataclasses.dataclass
class Notification:
    at: float  # time.monotonic()
    handle: int
    value: bytes


class CentralConnection:
    """One LE connection from a Central, with a GATT client and a notification tap."""

    def __init__(self, central: "Central", connection: Connection):
        self.central = central
        self.connection = connection
        self.peer = Peer(connection)
        self.client: gatt_client.Client = self.peer.gatt_client
        self.notifications: list[Notification] = []
        self.indications: list[Notification] = []
        self.disconnected: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        connection.on(connection.EVENT_DISCONNECTION, self._on_disconnection)
        # Tap every notification/indication before Bumble routes it to subscribers, so a
        # test can see notifications that arrive after unsubscribing too. Bumble's client
        # looks its handlers up by name on the instance (gatt_client.Client.on_gatt_pdu).
        original_notification = self.client.on_att_handle_value_notification
        original_indication = self.client.on_att_handle_value_indication

        def tap_notification(pdu: att.ATT_Handle_Value_Notification) -> None:
            self.notifications.append(Notification(time.monotonic(), pdu.attribute_handle, bytes(pdu.attribute_value)))
            original_notification(pdu)

        def tap_indication(pdu: att.ATT_Handle_Value_Indication) -> None:
            self.indications.append(Notification(time.monotonic(), pdu.attribute_handle, bytes(pdu.attribute_value)))
            original_indication(pdu)

        self.client.on_att_handle_value_notification = tap_notification  # type: ignore[method-assign]
        self.client.on_att_handle_value_indication = tap_indication  # type: ignore[method-assign]

    def _on_disconnection(self, reason: int) -> None:
        if not self.disconnected.done():
            self.disconnected.set_result(int(reason))

    @property
    def is_connected(self) -> bool:
        return not self.disconnected.done()

    @property
    def mtu(self) -> int:
        return self.client.mtu

    async def request(self, pdu: att.ATT_PDU, timeout: float = 5.0) -> att.ATT_PDU:
        """Send one ATT request and return whatever PDU answers it (response or error)."""
        return await asyncio.wait_for(self.client.send_request(pdu), timeout)

    async def request_expecting_error(self, pdu: att.ATT_PDU, timeout: float = 5.0) -> att.ATT_Error_Response:
        response = await self.request(pdu, timeout)
        if response.op_code != att.Opcode.ATT_ERROR_RESPONSE:
            raise AssertionError(f"expected an ATT_ERROR_RSP to {pdu.name}, got {response}")
        return response  # type: ignore[return-value]

    async def exchange_mtu(self, client_rx_mtu: int, timeout: float = 5.0) -> int:
        """Vol 3, Part F, 3.4.2: send ATT_EXCHANGE_MTU_REQ; return the server's Server Rx MTU.

        Sets the connection's ATT_MTU to min(client, server) as 3.4.2.2 says.
        """
        response = await self.request(att.ATT_Exchange_MTU_Request(client_rx_mtu=client_rx_mtu), timeout)
        if response.op_code == att.Opcode.ATT_ERROR_RESPONSE:
            raise AttErrorResponse(response.request_opcode_in_error, response.attribute_handle_in_error, response.error_code)
        if response.op_code != att.Opcode.ATT_EXCHANGE_MTU_RESPONSE:
            raise AssertionError(f"unexpected answer to ATT_EXCHANGE_MTU_REQ: {response}")
        server_rx_mtu = response.server_rx_mtu
        self.client.mtu_exchange_done = True
        self.client.mtu = max(ATT_DEFAULT_MTU, min(client_rx_mtu, server_rx_mtu))
        return server_rx_mtu

    async def discover_all(self, timeout: float = 20.0) -> None:
        """Services, their characteristics, and the characteristics' descriptors (Bumble)."""
        await asyncio.wait_for(self.peer.discover_all(), timeout)

    async def discover_characteristic(self, service: UUID, characteristic: UUID, timeout: float = 10.0):
        """Discover one service by UUID, its characteristics and their descriptors; return one."""

        async def discover() -> gatt_client.CharacteristicProxy:
            services = await self.peer.discover_service(service)
            if not services:
                raise AssertionError(f"service {service} not found")
            characteristics = await self.peer.discover_characteristics(service=services[0])
            for found in characteristics:
                await self.peer.discover_descriptors(found)
            for found in characteristics:
                if found.uuid == characteristic:
                    return found
            raise AssertionError(
                f"characteristic {characteristic} not found in service {service} "
                f"(have {[str(c.uuid) for c in characteristics]})"
            )

        return await asyncio.wait_for(discover(), timeout)

    async def find_information(self, start: int = 0x0001, end: int = 0xFFFF, timeout: float = 20.0) -> list[tuple[int, UUID]]:
        """Vol 3, Part F, 3.4.3.1/2: every (handle, type) in [start, end], strictly checked.

        Unlike Bumble's discover_attributes, any error other than Attribute Not Found, a
        handle that does not increase, or an empty response raises.
        """

        async def walk() -> list[tuple[int, UUID]]:
            found: list[tuple[int, UUID]] = []
            next_handle = start
            while next_handle <= end:
                response = await self.request(att.ATT_Find_Information_Request(starting_handle=next_handle, ending_handle=end))
                if response.op_code == att.Opcode.ATT_ERROR_RESPONSE:
                    if response.error_code == ATT_ATTRIBUTE_NOT_FOUND and found:
                        break
                    raise AttErrorResponse(response.request_opcode_in_error, response.attribute_handle_in_error, response.error_code)
                if response.op_code != att.Opcode.ATT_FIND_INFORMATION_RESPONSE or not response.information:
                    raise AssertionError(f"unexpected answer to ATT_FIND_INFORMATION_REQ: {response}")
                for handle, type_bytes in response.information:
                    if handle < next_handle or handle > end:
                        raise AssertionError(f"Find Information returned handle 0x{handle:04x} outside 0x{next_handle:04x}..0x{end:04x}")
                    found.append((handle, UUID.from_bytes(type_bytes)))
                    next_handle = handle + 1
            return found

        return await asyncio.wait_for(walk(), timeout)

    async def computed_database_hash(self, timeout: float = 30.0) -> bytes:
        """Vol 3, Part G, 7.3: the Database Hash of what this central discovers: AES-CMAC with a
        zero key over, in handle order, handle || type || value of service, include,
        characteristic declarations and extended properties, and handle || type of CUD, CCCD,
        SCCD, presentation and aggregate format descriptors. Fields little-endian, the 128-bit
        result sent least significant octet first."""
        # Imported here: only the tests that check a hash need the cryptography package.
        from cryptography.hazmat.primitives import cmac
        from cryptography.hazmat.primitives.ciphers import algorithms

        with_values = {UUID.from_16_bits(u) for u in (0x2800, 0x2801, 0x2802, 0x2803, 0x2900)}
        type_only = {UUID.from_16_bits(u) for u in (0x2901, 0x2902, 0x2903, 0x2904, 0x2905)}

        async def compute() -> bytes:
            message = b""
            for handle, attribute_type in await self.find_information():
                if attribute_type in with_values:
                    value = await self.read(handle)
                    message += struct.pack("<H", handle) + attribute_type.to_bytes() + value
                elif attribute_type in type_only:
                    message += struct.pack("<H", handle) + attribute_type.to_bytes()
            mac = cmac.CMAC(algorithms.AES(bytes(16)))
            mac.update(message)
            return mac.finalize()[::-1]

        return await asyncio.wait_for(compute(), timeout)

    def services(self) -> list[gatt_client.ServiceProxy]:
        return list(self.peer.services)

    def service(self, uuid: UUID) -> gatt_client.ServiceProxy:
        found = self.peer.get_services_by_uuid(uuid)
        if not found:
            raise AssertionError(f"service {uuid} not found; have {[str(s.uuid) for s in self.services()]}")
        return found[0]

    def characteristic(self, uuid: UUID, service: UUID | None = None) -> gatt_client.CharacteristicProxy:
        if service is not None:
            found = self.peer.get_characteristics_by_uuid(uuid, self.service(service))
        else:
            found = [c for s in self.services() for c in s.characteristics if c.uuid == uuid]
        if not found:
            raise AssertionError(f"characteristic {uuid} not found")
        return found[0]

    async def read(self, attribute: int | gatt_client.AttributeProxy, timeout: float = 10.0) -> bytes:
        """Read a value; Bumble continues with Read Blob while a response fills ATT_MTU-1."""
        return bytes(await asyncio.wait_for(self.client.read_value(attribute), timeout))

    async def write(self, attribute: int | gatt_client.AttributeProxy, value: bytes, timeout: float = 5.0) -> None:
        """Write Characteristic Value (ATT_WRITE_REQ); raises bumble.att.ATT_Error on an error response."""
        await asyncio.wait_for(self.client.write_value(attribute, value, with_response=True), timeout)

    async def subscribe(
        self, characteristic: gatt_client.CharacteristicProxy, callback: Callable[[bytes], Any] | None = None,
        timeout: float = 5.0,
    ) -> None:
        await asyncio.wait_for(self.peer.subscribe(characteristic, callback), timeout)

    async def unsubscribe(self, characteristic: gatt_client.CharacteristicProxy, timeout: float = 5.0) -> None:
        """Write 0x0000 to the CCCD (force: even if Bumble thinks nothing is subscribed)."""
        await asyncio.wait_for(self.client.unsubscribe(characteristic, force=True), timeout)

    async def disconnect(self, timeout: float = 5.0) -> int:
        if not self.is_connected:
            return self.disconnected.result()
        await asyncio.wait_for(
            self.connection.disconnect(hci.HCI_REMOTE_USER_TERMINATED_CONNECTION_ERROR), timeout
        )
        return await asyncio.wait_for(asyncio.shield(self.disconnected), timeout)

    async def wait_disconnected(self, timeout: float) -> int:
        return await asyncio.wait_for(asyncio.shield(self.disconnected), timeout)


class Central:
    """A Bumble device on a controller, used as a central. `async with Central(spec) as c:`."""

    def __init__(self, controller: str, name: str = "blemu-test-central", address: hci.Address | None = None,
                 privacy_irk: bytes | None = None):
        self.controller = controller
        self.name = name
        # With an IRK the central connects from a resolvable private address made from it (a new
        # one each time the central opens); `address` stays its identity (static random) address.
        self.privacy_irk = privacy_irk
        # A fixed address lets a central reconnect as the same peer (bonds are kept by address).
        self.address = address
        self.transport: Any = None
        self.device: Device | None = None
        self._results: dict[bytes, ScanResult] = {}
        self._scan_listeners: list[Callable[[ScanResult], None]] = []

    async def open(self, timeout: float = 10.0) -> "Central":
        spec = bumble_transport_spec(self.controller)
        try:
            self.transport = await asyncio.wait_for(open_transport(spec), timeout)
        except (OSError, asyncio.TimeoutError) as error:
            raise ConnectionError(f"cannot open controller {self.controller} ({spec}): {error!r}") from error
        self.device = Device.with_hci(
            self.name, self.address or hci.Address.generate_static_address(), self.transport.source, self.transport.sink
        )
        if self.privacy_irk is not None:
            self.device.irk = self.privacy_irk
            self.device.le_privacy_enabled = True
            self.device.le_rpa_timeout = 0
        await asyncio.wait_for(self.device.power_on(), timeout)
        self.device.host.on("advertising_report", self._on_advertising_report)
        return self

    async def close(self) -> None:
        if self.transport is not None:
            transport, self.transport = self.transport, None
            try:
                await asyncio.wait_for(transport.close(), 5.0)
            except Exception:  # closing is best effort: the test result is already decided
                pass

    async def __aenter__(self) -> "Central":
        try:
            return await self.open()
        except BaseException:
            await self.close()
            raise

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- scanning ---------------------------------------------------------------------------

    def _on_advertising_report(self, report: Any) -> None:
        """Raw reports from the host, before Bumble merges advertising data and scan responses."""
        key = bytes(report.address.address_bytes) + bytes([int(report.address.address_type)])
        result = self._results.get(key)
        if result is None:
            result = ScanResult(address=report.address, first_seen=time.monotonic())
            self._results[key] = result
        if isinstance(report, hci.HCI_LE_Extended_Advertising_Report_Event.Report):
            # Vol 4, Part E, 7.7.65.13: Event_Type bits 0 connectable, 1 scannable,
            # 2 directed, 3 scan response, 4 legacy PDU.
            event_type = report.event_type
            is_scan_response = bool(event_type & 0x08)
            if not is_scan_response:
                result.connectable = bool(event_type & 0x01)
                result.scannable = bool(event_type & 0x02)
                result.legacy = bool(event_type & 0x10)
        else:
            # Vol 4, Part E, 7.7.65.2: 0 ADV_IND, 1 ADV_DIRECT_IND, 2 ADV_SCAN_IND,
            # 3 ADV_NONCONN_IND, 4 SCAN_RSP.
            event_type = report.event_type
            is_scan_response = event_type == 4
            if not is_scan_response:
                result.connectable = event_type in (0, 1)
                result.scannable = event_type in (0, 2)
                result.legacy = True
        if is_scan_response:
            result.scan_response = bytes(report.data)
        else:
            result.adv_data = bytes(report.data)
        for listener in list(self._scan_listeners):
            listener(result)

    async def scan_for(
        self,
        name: str,
        timeout: float = 10.0,
        want_scan_response: bool = True,
        alive: Callable[[], str | None] | None = None,
    ) -> ScanResult:
        """Active-scan until an advertiser with this local name is seen; return what it sent.

        With want_scan_response, waits (up to the same deadline) for the scan response of a
        scannable advertiser too. `alive` is polled; a non-None string from it (say, "blemu
        exited") aborts the scan with that reason.
        """
        return await self.scan_until(
            lambda result: result.matches_name(name), f"advertisement named {name!r}",
            timeout=timeout, want_scan_response=want_scan_response, alive=alive,
        )

    async def scan_until(
        self,
        predicate: Callable[[ScanResult], bool],
        description: str,
        timeout: float = 10.0,
        want_scan_response: bool = True,
        alive: Callable[[], str | None] | None = None,
    ) -> ScanResult:
        """Active-scan until an advertiser satisfies `predicate` (see scan_for)."""
        assert self.device is not None
        self._results = {}
        found: asyncio.Future[ScanResult] = asyncio.get_running_loop().create_future()

        def complete(result: ScanResult) -> bool:
            if result.adv_data is None or not predicate(result):
                return False
            if want_scan_response and result.scannable and result.scan_response is None:
                return False
            return True

        def listener(result: ScanResult) -> None:
            if not found.done() and complete(result):
                found.set_result(result)

        self._scan_listeners.append(listener)
        await asyncio.wait_for(self.device.start_scanning(active=True, filter_duplicates=False), 5.0)
        try:
            deadline = time.monotonic() + timeout
            restart_every = max(timeout / 4, 2.0)
            restart_at = time.monotonic() + restart_every
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                done, _ = await asyncio.wait({found}, timeout=min(0.2, remaining))
                if done:
                    return found.result()
                if alive is not None and (reason := alive()) is not None:
                    raise AssertionError(f"stopped scanning for {description}: {reason}")
                # The advertiser is seen but its scan response is not: start the scan again, as
                # a phone's app would. rootcanal's scanner has been seen to stop sending scan
                # requests to one of several sets of a controller for the rest of a scan, more
                # often on a loaded machine: start again every quarter of the time.
                if want_scan_response and time.monotonic() >= restart_at:
                    restart_at = time.monotonic() + restart_every
                    if any(r.adv_data is not None and predicate(r) for r in self._results.values()):
                        await asyncio.wait_for(self.device.stop_scanning(), 5.0)
                        await asyncio.wait_for(self.device.start_scanning(active=True, filter_duplicates=False), 5.0)
            # Time is up: a match without its scan response still tells something.
            partial = [r for r in self._results.values() if r.adv_data is not None and predicate(r)]
            if partial and not want_scan_response:
                return partial[0]
            seen = ", ".join(f"{r.address} names={r.names()}" for r in self._results.values()) or "nothing"
            raise AssertionError(
                f"no {description} within {timeout:.0f} s "
                f"({'scan response missing; ' if partial else ''}seen: {seen})"
            )
        finally:
            self._scan_listeners.remove(listener)
            try:
                await asyncio.wait_for(self.device.stop_scanning(), 5.0)
            except Exception:
                pass

    # -- connecting -------------------------------------------------------------------------

    async def connect(self, address: hci.Address, timeout: float = 10.0) -> CentralConnection:
        assert self.device is not None
        try:
            connection = await asyncio.wait_for(self.device.connect(address, timeout=timeout), timeout + 2)
        except asyncio.TimeoutError as error:
            raise AssertionError(f"no connection to {address} within {timeout:.0f} s") from error
        return CentralConnection(self, connection)

    async def connect_by_name(self, name: str, timeout: float = 10.0) -> tuple[ScanResult, CentralConnection]:
        result = await self.scan_for(name, timeout=timeout, want_scan_response=False)
        return result, await self.connect(result.address, timeout=timeout)


async def collect_notifications(
    conn: CentralConnection, handle: int, count: int, timeout: float, start_index: int = 0
) -> list[Notification]:
    """Wait until `count` notifications for `handle` arrived after index `start_index`."""
    deadline = time.monotonic() + timeout
    while True:
        got = [n for n in conn.notifications[start_index:] if n.handle == handle]
        if len(got) >= count:
            return got[:count]
        if not conn.is_connected:
            raise AssertionError(f"disconnected (reason 0x{conn.disconnected.result():02x}) while waiting for notifications")
        if time.monotonic() >= deadline:
            raise AssertionError(f"{len(got)} of {count} notifications on handle 0x{handle:04x} within {timeout:.0f} s")
        await asyncio.sleep(0.05)


def uuids(items: Iterable[Any]) -> set[UUID]:
    return {item.uuid for item in items}


async def collect_indications(
    conn: CentralConnection, handle: int, count: int, timeout: float, start_index: int = 0
) -> list[Notification]:
    """Wait until `count` indications for `handle` arrived after index `start_index` (Bumble
    confirms each one as it arrives, Vol 3, Part F, 3.4.7.3)."""
    deadline = time.monotonic() + timeout
    while True:
        got = [n for n in conn.indications[start_index:] if n.handle == handle]
        if len(got) >= count:
            return got[:count]
        if not conn.is_connected:
            raise AssertionError(f"disconnected (reason 0x{conn.disconnected.result():02x}) while waiting for indications")
        if time.monotonic() >= deadline:
            raise AssertionError(f"{len(got)} of {count} indications on handle 0x{handle:04x} within {timeout:.0f} s")
        await asyncio.sleep(0.05)
