#!/usr/bin/env python3
"""Watch a BLE heart-rate sensor: connect, subscribe, print each measurement until Ctrl-C.

A small Bumble central, independent of blemu. It finds the sensor by name (or, without
--name, the first advertiser of the Heart Rate service 0x180D), subscribes to Heart Rate
Measurement (0x2A37) and prints one line per notification:

    12:00:01  72 bpm, contact, energy 15 kJ, RR 833ms

After a disconnection it scans again. Examples:
    .venv/bin/python scripts/watch_heart_rate.py --controller tcp:127.0.0.1:6402 --name blemu-heart
    BLEMU_CONTROLLER=tcp:127.0.0.1:6402 .venv/bin/python scripts/watch_heart_rate.py --count 5
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bumble_central import (  # noqa: E402
    UUID_BODY_SENSOR_LOCATION,
    UUID_HEART_RATE_MEASUREMENT,
    UUID_HEART_RATE_SERVICE,
    Central,
    MeasurementFormatError,
    decode_heart_rate_measurement,
)

# HRS 1.0, 3.2.1: Body Sensor Location values.
BODY_SENSOR_LOCATIONS = ["other", "chest", "wrist", "finger", "hand", "ear lobe", "foot"]


def stamp() -> str:
    return time.strftime("%H:%M:%S")


async def watch_once(central: Central, name: str | None, scan_timeout: float, remaining: list[int]) -> int:
    """One scan-connect-subscribe session; returns the disconnection reason."""
    if name:
        result = await central.scan_for(name, timeout=scan_timeout, want_scan_response=False)
    else:
        result = await central.scan_until(lambda r: 0x180D in r.service_uuids_16(), "Heart Rate (0x180D) advertiser",
                                          timeout=scan_timeout, want_scan_response=False)
    advertised = next(iter(result.names().values()), (0, "?"))[1]
    print(f"{stamp()}  found {advertised} at {result.address}; connecting", flush=True)
    conn = await central.connect(result.address)
    try:
        hrm = await conn.discover_characteristic(UUID_HEART_RATE_SERVICE, UUID_HEART_RATE_MEASUREMENT)
        location_text = ""
        locations = conn.peer.get_characteristics_by_uuid(UUID_BODY_SENSOR_LOCATION)
        if locations:
            value = await conn.read(locations[0])
            if len(value) == 1:
                location_text = f", sensor on the {BODY_SENSOR_LOCATIONS[value[0]] if value[0] < 7 else f'location {value[0]}'}"
        print(f"{stamp()}  connected{location_text}; subscribing to heart rate measurements", flush=True)

        def on_measurement(value: bytes) -> None:
            try:
                line = decode_heart_rate_measurement(bytes(value)).describe()
            except MeasurementFormatError as error:
                line = f"malformed measurement: {error}"
            print(f"{stamp()}  {line}", flush=True)
            if remaining[0] > 0:
                remaining[0] -= 1
                if remaining[0] == 0 and not conn.disconnected.done():
                    conn.disconnected.set_result(-1)  # enough: stop watching

        await conn.subscribe(hrm, on_measurement)
        reason = await conn.disconnected
        return reason
    finally:
        if conn.is_connected or conn.disconnected.result() == -1:
            try:
                await conn.connection.disconnect()
            except Exception:
                pass


async def watch(args: argparse.Namespace) -> int:
    remaining = [args.count if args.count > 0 else -1]
    async with Central(args.controller, name="heart-rate-watcher") as central:
        target = repr(args.name) if args.name else "a heart rate sensor"
        print(f"{stamp()}  scanning for {target} on {args.controller} (Ctrl-C to stop)", flush=True)
        while True:
            try:
                reason = await watch_once(central, args.name, args.scan_timeout, remaining)
            except AssertionError as error:  # nothing found / connection failed: try again
                print(f"{stamp()}  {error}; still looking", flush=True)
                continue
            if reason == -1:
                return 0
            print(f"{stamp()}  disconnected (reason 0x{reason:02x}); scanning again", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--controller", default=os.environ.get("BLEMU_CONTROLLER", "tcp:127.0.0.1:6402"),
                        help="controller spec: tcp:HOST:PORT, unix:PATH, serial:DEV[:BAUD], hciN, or a Bumble "
                             "transport (default $BLEMU_CONTROLLER or tcp:127.0.0.1:6402)")
    parser.add_argument("--name", help="the sensor's advertised name (default: any Heart Rate advertiser)")
    parser.add_argument("--count", type=int, default=0, help="stop after this many measurements (default: never)")
    parser.add_argument("--scan-timeout", type=float, default=10.0, help="seconds per scan attempt")
    parser.add_argument("--verbose", action="store_true", help="show Bumble's log")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO if args.verbose else logging.ERROR, stream=sys.stderr)
    try:
        return asyncio.run(watch(args))
    except KeyboardInterrupt:
        print(f"\n{stamp()}  stopped", flush=True)
        return 0
    except ConnectionError as error:
        print(f"watch_heart_rate: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
