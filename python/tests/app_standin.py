"""An "app" for the kit's tests: a Bumble central doing what a heart-rate app does.

It connects to the device's address, subscribes to Heart Rate Measurement (0x2A37), writes
the Heart Rate Control Point (0x2A39) and reads Body Sensor Location (0x2A38). A real app's
BLE stack would stand here; the test asserts on what blemu saw it do.
"""

from __future__ import annotations

import asyncio
from typing import Any

from bumble import hci
from bumble.core import UUID
from bumble.device import Device, Peer
from bumble.transport import open_transport

HEART_RATE = UUID.from_16_bits(0x180D)
MEASUREMENT = UUID.from_16_bits(0x2A37)
BODY_SENSOR_LOCATION = UUID.from_16_bits(0x2A38)
CONTROL_POINT = UUID.from_16_bits(0x2A39)


class HeartRateApp:
    def __init__(self, transport_spec: str):
        self.transport_spec = transport_spec
        self.transport: Any = None
        self.peer: Peer | None = None
        self.connection: Any = None
        self.measurements: asyncio.Queue[bytes] = asyncio.Queue()

    async def __aenter__(self) -> "HeartRateApp":
        self.transport = await asyncio.wait_for(open_transport(self.transport_spec), 10)
        self.device = Device.with_hci("kit-test-app", hci.Address.generate_static_address(),
                                      self.transport.source, self.transport.sink)
        await asyncio.wait_for(self.device.power_on(), 10)
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            if self.connection is not None and self.connection.is_connected:
                await asyncio.wait_for(self.connection.disconnect(), 5)
        except Exception:
            pass
        await asyncio.wait_for(self.transport.close(), 5)

    async def connect(self, address: str) -> None:
        target = hci.Address(address, hci.Address.RANDOM_DEVICE_ADDRESS)
        self.connection = await asyncio.wait_for(self.device.connect(target, timeout=10), 12)
        self.peer = Peer(self.connection)
        await asyncio.wait_for(self.peer.discover_services([HEART_RATE]), 10)
        service = self.peer.get_services_by_uuid(HEART_RATE)[0]
        await asyncio.wait_for(service.discover_characteristics(), 10)
        for characteristic in service.characteristics:
            await asyncio.wait_for(characteristic.discover_descriptors(), 10)

    def characteristic(self, uuid: UUID) -> Any:
        assert self.peer is not None
        return self.peer.get_characteristics_by_uuid(uuid)[0]

    async def subscribe_measurements(self) -> None:
        await asyncio.wait_for(self.characteristic(MEASUREMENT).subscribe(self.measurements.put_nowait), 5)

    async def write_control_point(self, value: bytes) -> None:
        await asyncio.wait_for(self.characteristic(CONTROL_POINT).write_value(value, with_response=True), 5)

    async def read_sensor_location(self) -> bytes:
        return bytes(await asyncio.wait_for(self.characteristic(BODY_SENSOR_LOCATION).read_value(), 5))
