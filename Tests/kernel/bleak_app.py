"""A real Linux BLE app for the kernel tests: bleak (PyPI) over BlueZ's bluetoothd, in the guest.

    python bleak_app.py ADAPTER NAME

Run by Tests/kernel/run.py (case bleak-heart-rate) with the repository's .venv python, inside the
qemu guest where bluetoothd owns ADAPTER (a vhci adapter bridged to the host's rootcanal). It
does what a heart-rate app does, as an app tester's app under test would: scans for NAME,
connects, reads Body Sensor Location (0x2A38), subscribes to Heart Rate Measurement (0x2A37) and
prints one line per step and per notification, until SIGTERM; then it unsubscribes, disconnects
and exits 0. The host's driver (blemu's Python kit) drives the device and asserts on both sides:
blemu's events and these lines:

  app: found ADDRESS
  app: connected
  app: read 2a38 HEX
  app: subscribed 2a37
  app: notification 2a37 HEX bpm=N
  app: disconnected

Any failure prints `app: error ...` and exits 1.
"""

from __future__ import annotations

import asyncio
import signal
import sys

from bleak import BleakClient, BleakScanner

HEART_RATE_MEASUREMENT = "00002a37-0000-1000-8000-00805f9b34fb"
BODY_SENSOR_LOCATION = "00002a38-0000-1000-8000-00805f9b34fb"


def say(text: str) -> None:
    print(f"app: {text}", flush=True)


def beats_per_minute(value: bytes) -> int:
    """Heart Rate Measurement (Heart Rate Service 1.0, 3.1): flags bit 0 set = uint16 value."""
    if len(value) < 2 or (value[0] & 0x01 and len(value) < 3):
        raise ValueError(f"a Heart Rate Measurement too short: {value.hex()}")
    return int.from_bytes(value[1:3], "little") if value[0] & 0x01 else value[1]


async def main(adapter: str, name: str) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    device = await BleakScanner.find_device_by_name(name, timeout=60, adapter=adapter)
    if device is None:
        say(f"error: no device named {name!r} within 60 s")
        return 1
    say(f"found {device.address}")
    async with BleakClient(device, adapter=adapter, timeout=60) as client:
        say("connected")
        location = await client.read_gatt_char(BODY_SENSOR_LOCATION)
        say(f"read 2a38 {bytes(location).hex()}")

        def notified(_characteristic, data: bytearray) -> None:
            value = bytes(data)
            say(f"notification 2a37 {value.hex()} bpm={beats_per_minute(value)}")

        await client.start_notify(HEART_RATE_MEASUREMENT, notified)
        say("subscribed 2a37")
        await stop.wait()
        await client.stop_notify(HEART_RATE_MEASUREMENT)
    say("disconnected")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: bleak_app.py ADAPTER NAME")
    try:
        sys.exit(asyncio.run(main(sys.argv[1], sys.argv[2])))
    except Exception as error:  # one line the driver shows
        say(f"error: {error!r}")
        sys.exit(1)
