"""A fleet over the air, measured (issue 38, parts 3 and 4; Docs/PERFORMANCE.md, "A fleet over the air").

Shared by scripts/fleet-measure (the tables) and Tests/interop/test_fleet_gateway.py (a small
fixed subset under the test command's time):

- `fleet_file`: a `fleets:` config file (Docs/REFERENCE.md, "Fleets") whose members have
  addresses from a pattern, so a scanner or a central knows every member without scanning.
- `RawScanner`: a passive scanner speaking HCI over rootcanal's TCP port itself. It counts every
  advertising report by address and does nothing else, so what it costs stays small beside
  what it measures (a Bumble `Device` decodes each report into objects; at thousands of reports
  a second that is a core of its own, and the scanner would be the bottleneck measured).
- `ProcessClock`: CPU % of a process from /proc/PID/stat over a window.
- `gateway`: one Bumble central connected to several heart-rate sensors at once, as a gateway
  is: reads Body Sensor Location and subscribes to Heart Rate Measurement on each, then counts
  the notifications each one delivers over a window.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import select
import socket
import struct
import time
from pathlib import Path

# Vol 4, Part A, 2: H4 packet indicators.
H4_COMMAND, H4_ACL, H4_EVENT = 0x01, 0x02, 0x04
# Vol 4, Part E, 7.7.14 / 7.7.15: Command Complete, Command Status.
EVENT_COMMAND_COMPLETE, EVENT_COMMAND_STATUS, EVENT_LE_META = 0x0E, 0x0F, 0x3E
# Vol 4, Part E, 7.7.65.2 / 7.7.65.13: LE Advertising Report, LE Extended Advertising Report.
SUBEVENT_ADVERTISING_REPORT, SUBEVENT_EXTENDED_ADVERTISING_REPORT = 0x02, 0x0D

# Vol 4, Part E, 7.3.2 Reset, 7.3.1 Set Event Mask, 7.8.1 LE Set Event Mask,
# 7.8.10 LE Set Scan Parameters, 7.8.11 LE Set Scan Enable.
OP_RESET, OP_SET_EVENT_MASK, OP_LE_SET_EVENT_MASK = 0x0C03, 0x0C01, 0x2001
OP_LE_SET_SCAN_PARAMETERS, OP_LE_SET_SCAN_ENABLE = 0x200B, 0x200C

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def fleet_file(path: Path, *, device: str, count: int, address_prefix: str, seed: int,
               name: str = "F {index}", interval_ms: float | None = None,
               start_spread_s: float = 2.0, connectable_interval_ms: float | None = None) -> list[str]:
    """Write a one-fleet config file; return the members' addresses, member 1 first.

    `address_prefix` is 4 bytes as `C0:F1:EE:01` (its first byte 0xC0 or above: a static
    random address, Vol 6, Part B, 1.3.2.1); members take `PREFIX:{index:04X}` as REFERENCE.md's
    patterns write it. `interval_ms` sets a broadcaster's `interval` setting; the jitter is 0,
    so every member advertises at exactly that interval plus the controller's advDelay.
    `connectable_interval_ms` sets a connectable device's fast and slow intervals both: rootcanal
    hands every advertising PDU to every controller on its radio, so a hundred sensors at the
    default 20 ms fast interval are 5,000 PDUs a second, each to a hundred-odd controllers.
    """
    settings = f"\n    settings:\n      interval: {interval_ms:g}" if interval_ms is not None else ""
    if connectable_interval_ms is not None:
        settings = (f"\n      fast_interval_ms: {connectable_interval_ms:g}\n"
                    f"      slow_interval_ms: {connectable_interval_ms:g}") + settings
    path.write_text(f"""# scripts/fleet_air.py: {count} x {device}
fleets:
  - device: {device}
    count: {count}
    seed: {seed}
    name: "{name}"
    address: "{address_prefix}:{{index:04X}}"
    start_spread_s: {start_spread_s:g}
    advertising:
      jitter_ms: 0{settings}
""")
    return [f"{address_prefix}:{index >> 8:02X}:{index & 0xFF:02X}" for index in range(1, count + 1)]


@dataclasses.dataclass
class CpuSample:
    ticks: int
    at: float
    # Per thread: nanoseconds on a CPU and waiting on a run queue (/proc/PID/task/TID/schedstat).
    threads: dict[str, tuple[int, int]] = dataclasses.field(default_factory=dict)


class ProcessClock:
    """CPU time of one process (all its threads) from /proc/PID/stat, utime + stime."""

    def __init__(self, pid: int):
        self.pid = pid

    def sample(self) -> CpuSample:
        with open(f"/proc/{self.pid}/stat") as stat:
            fields = stat.read().rpartition(")")[2].split()
        # Fields 14 and 15 (utime, stime) are the 12th and 13th after the command's ")".
        threads = {}
        for tid in os.listdir(f"/proc/{self.pid}/task"):
            try:
                with open(f"/proc/{self.pid}/task/{tid}/schedstat") as stat:
                    running, waiting, _ = stat.read().split()
                threads[tid] = (int(running), int(waiting))
            except (OSError, ValueError):
                pass
        return CpuSample(int(fields[11]) + int(fields[12]), time.monotonic(), threads)

    @staticmethod
    def busiest_thread_demand(start: CpuSample, end: CpuSample) -> float:
        """Of the busiest thread: % of the window it ran or was ready to run but waited for a
        CPU (schedstat). Near 100 the thread would take a whole core on an idle machine: on a
        loaded one its CPU % alone does not tell saturation from a small share."""
        elapsed = max(end.at - start.at, 1e-9) * 1e9
        best = 0.0
        for tid, (running, waiting) in end.threads.items():
            before = start.threads.get(tid, (0, 0))
            best = max(best, 100.0 * ((running - before[0]) + (waiting - before[1])) / elapsed)
        return best

    def threads(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/task"))

    @staticmethod
    def percent(start: CpuSample, end: CpuSample) -> float:
        """Of one core: 100 is a core busy all the window."""
        return 100.0 * (end.ticks - start.ticks) / CLOCK_TICKS / max(end.at - start.at, 1e-9)


def loadavg() -> str:
    with open("/proc/loadavg") as file:
        return " ".join(file.read().split()[:3])


class RawScanner:
    """A passive scanner on its own rootcanal controller, counting advertising reports.

    Legacy scanning (LE Set Scan Enable) with duplicates not filtered (Vol 4, Part E, 7.8.11:
    Filter_Duplicates 0): the controller reports every advertising PDU it receives. blemu's
    broadcasters send legacy PDUs (ADV_NONCONN_IND, ADV_IND), which a legacy scan reports."""

    def __init__(self, host: str, port: int):
        self.sock = socket.create_connection((host, port), timeout=10)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = bytearray()
        self.counts: dict[bytes, int] = {}
        self.first_seen: dict[bytes, float] = {}
        self.reports = 0
        self.counting = False
        self.started_at = 0.0

    def close(self) -> None:
        self.sock.close()

    def _send_command(self, opcode: int, parameters: bytes = b"") -> None:
        self.sock.sendall(bytes([H4_COMMAND]) + struct.pack("<HB", opcode, len(parameters)) + parameters)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            for code, payload in self._read_events(0.5):
                if code == EVENT_COMMAND_COMPLETE and struct.unpack_from("<H", payload, 1)[0] == opcode:
                    if payload[3] != 0:
                        raise RuntimeError(f"HCI command 0x{opcode:04x} failed with status 0x{payload[3]:02x}")
                    return
                if code == EVENT_COMMAND_STATUS and struct.unpack_from("<H", payload, 2)[0] == opcode and payload[0] != 0:
                    raise RuntimeError(f"HCI command 0x{opcode:04x} failed with status 0x{payload[0]:02x}")
        raise RuntimeError(f"no Command Complete for HCI command 0x{opcode:04x} within 10 s")

    def start(self) -> "RawScanner":
        self._send_command(OP_RESET)
        # Vol 4, Part E, 7.3.1: bit 61 LE Meta event, with the default events.
        self._send_command(OP_SET_EVENT_MASK, struct.pack("<Q", 0x3DBFF807FFFBFFFF))
        # Vol 4, Part E, 7.8.1: bit 1 LE Advertising Report, bit 12 LE Extended Advertising Report.
        self._send_command(OP_LE_SET_EVENT_MASK, struct.pack("<Q", 0x1F | 1 << 12))
        # Passive (0), interval = window = 16 x 0.625 ms: listening all the time; public own
        # address (passive scanning sends nothing), accept all (Vol 4, Part E, 7.8.10).
        self._send_command(OP_LE_SET_SCAN_PARAMETERS, struct.pack("<BHHBB", 0, 16, 16, 0, 0))
        self._send_command(OP_LE_SET_SCAN_ENABLE, bytes([1, 0]))
        return self

    def _read_events(self, timeout: float):
        readable, _, _ = select.select([self.sock], [], [], timeout)
        if readable:
            data = self.sock.recv(1 << 16)
            if not data:
                raise ConnectionError("rootcanal closed the scanner's connection")
            try:
                self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)
            except (OSError, AttributeError):
                pass
            self.buffer += data
        buffer = self.buffer
        while buffer:
            kind = buffer[0]
            if kind == H4_EVENT:
                if len(buffer) < 3 or len(buffer) < 3 + buffer[2]:
                    break
                code, length = buffer[1], buffer[2]
                payload = bytes(buffer[3:3 + length])
                del buffer[:3 + length]
                yield code, payload
            elif kind == H4_ACL:
                if len(buffer) < 5:
                    break
                length = struct.unpack_from("<H", buffer, 3)[0]
                if len(buffer) < 5 + length:
                    break
                del buffer[:5 + length]
            else:
                raise ConnectionError(f"unexpected H4 packet type 0x{kind:02x} from rootcanal")

    def _count(self, address: bytes, now: float) -> None:
        self.reports += 1
        if address in self.counts:
            self.counts[address] += 1
        else:
            self.counts[address] = 1
            self.first_seen[address] = now - self.started_at

    def listen(self, seconds: float) -> None:
        """Count every report for `seconds` (the counts and first sightings start afresh)."""
        self.counts, self.first_seen, self.reports = {}, {}, 0
        self.started_at = time.monotonic()
        end = self.started_at + seconds
        while (now := time.monotonic()) < end:
            for code, payload in self._read_events(min(0.2, end - now)):
                if code != EVENT_LE_META or len(payload) < 2:
                    continue
                now = time.monotonic()
                if payload[0] == SUBEVENT_ADVERTISING_REPORT:
                    # Num_Reports, then per report: Event_Type, Address_Type, Address (6),
                    # Data_Length, Data, RSSI (7.7.65.2).
                    offset = 2
                    for _ in range(payload[1]):
                        if offset + 9 > len(payload):
                            break
                        self._count(payload[offset + 2:offset + 8], now)
                        offset += 9 + payload[offset + 8] + 1
                elif payload[0] == SUBEVENT_EXTENDED_ADVERTISING_REPORT:
                    # Per report: Event_Type (2), Address_Type, Address (6), 3 PHY/SID, TX
                    # power, RSSI, interval (2), direct address type and address (7),
                    # Data_Length, Data (7.7.65.13).
                    offset = 2
                    for _ in range(payload[1]):
                        if offset + 24 > len(payload):
                            break
                        self._count(payload[offset + 3:offset + 9], now)
                        offset += 24 + payload[offset + 23]


def address_key(address: str) -> bytes:
    """`C0:F1:EE:01:00:01` as an HCI report carries it (little-endian)."""
    return bytes(reversed(bytes.fromhex(address.replace(":", ""))))


@dataclasses.dataclass
class GatewayResult:
    links: int
    window_s: float
    notifications: list[int]  # per link, over the window
    reads: list[bytes]
    disconnected: int
    connect_s: float  # from the first LE Create Connection to the last link up

    @property
    def total_per_second(self) -> float:
        return sum(self.notifications) / self.window_s

    @property
    def slowest_per_second(self) -> float:
        return min(self.notifications) / self.window_s

    @property
    def fastest_per_second(self) -> float:
        return max(self.notifications) / self.window_s


async def gateway(controller: str, addresses: list[str], window_s: float,
                  connect_timeout: float = 15.0, setup_timeout: float = 30.0,
                  clocks: dict | None = None) -> GatewayResult:
    """Connect to every address (one LE Create Connection at a time, as the controller takes
    one, Vol 4, Part E, 7.8.12; the links then run at once), read Body Sensor Location and
    subscribe to Heart Rate Measurement on each at once, then count the notifications each link
    delivers over `window_s`. `clocks`: name -> ProcessClock, sampled over the window into
    `clocks['percent']` and `clocks['demand']` (ProcessClock.busiest_thread_demand)."""
    from bumble import hci

    from bumble_central import (UUID_BODY_SENSOR_LOCATION, UUID_HEART_RATE_MEASUREMENT,
                                UUID_HEART_RATE_SERVICE, Central)

    async with Central(controller, name="fleet-gateway") as central:
        started = time.monotonic()
        links = []
        for address in addresses:
            links.append(await central.connect(hci.Address(address, hci.Address.RANDOM_DEVICE_ADDRESS),
                                               timeout=connect_timeout))
        connect_s = time.monotonic() - started

        async def set_up(address, link):
            try:
                measurement = await link.discover_characteristic(UUID_HEART_RATE_SERVICE, UUID_HEART_RATE_MEASUREMENT,
                                                                 timeout=setup_timeout)
                location = link.characteristic(UUID_BODY_SENSOR_LOCATION, UUID_HEART_RATE_SERVICE)
                value = await link.read(location, timeout=setup_timeout)
                await link.subscribe(measurement, timeout=setup_timeout)
            except asyncio.TimeoutError as error:
                raise AssertionError(f"the link to {address}: discovering, reading or subscribing took over "
                                     f"{setup_timeout:.0f} s") from error
            return measurement.handle, value

        set_ups = await asyncio.gather(*(set_up(address, link) for address, link in zip(addresses, links)))
        # One measurement's time to arrive everywhere before the window opens.
        await asyncio.sleep(1.5)
        marks = [len(link.notifications) for link in links]
        samples = {name: clock.sample() for name, clock in (clocks or {}).items()}
        await asyncio.sleep(window_s)
        if clocks is not None:
            ends = {name: clocks[name].sample() for name in samples}
            clocks["percent"] = {name: ProcessClock.percent(start, ends[name]) for name, start in samples.items()}
            clocks["demand"] = {name: ProcessClock.busiest_thread_demand(start, ends[name])
                                for name, start in samples.items()}
        counts = [sum(1 for n in link.notifications[mark:] if n.handle == handle)
                  for link, mark, (handle, _) in zip(links, marks, set_ups)]
        disconnected = sum(1 for link in links if not link.is_connected)
        for link in links:
            if link.is_connected:
                try:
                    await link.disconnect()
                except Exception:  # the figures are taken; leaving is best effort
                    pass
        return GatewayResult(len(links), window_s, counts, [value for _, value in set_ups], disconnected, connect_s)
