"""`blemu bench` against bumble-bench (bumble/apps/bench.py) over rootcanal, both directions,
GATT and L2CAP, and blemu against blemu: the packets counted at both ends and the results
parsed. Speeds are not asserted (timing belongs in Docs/PERFORMANCE.md, scripts/bench-compare).

Each case starts the peripheral (it advertises), then the central; both must exit 0."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness import REPO, blemu_binary, child_environment, log_dir, unique_name

# bumble-bench itself, with one fix: its GATT modes lack `can_receive`, which its sender calls
# once the packets are sent (AttributeError in Bumble 0.0.236: the GATT send scenario dies before
# the receiver's ACK). Both GATT modes can receive (write one way, notify the other).
BUMBLE_BENCH_FIXED = (
    "import sys; import bumble.apps.bench as bench\n"
    "for mode in (bench.GattClient, bench.GattServer):\n"
    "    if not hasattr(mode, 'can_receive'): mode.can_receive = lambda self: True\n"
    "sys.argv[0] = 'bumble-bench'; bench.main()\n"
)
# bumble-bench's peripheral always advertises from this (random static) address.
BUMBLE_PERIPHERAL = "F1:F1:F1:F1:F1:F1"
PACKETS = 6
SIZE = 120
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def static_random_address() -> str:
    first = 0xC0 | random.randrange(0x40)
    rest = [random.randrange(256) for _ in range(5)]
    return ":".join(f"{byte:02X}" for byte in [first, *rest])


class Side:
    """One end: a blemu bench or a bumble-bench process, its output in the test log folder."""

    def __init__(self, label: str, command: list[str]):
        self.label = label
        self.command = command
        self.log = log_dir() / f"bench-{unique_name(label)}.log"
        self.stdout_path = self.log.with_suffix(".out")
        self._err = open(self.log, "wb")
        self._out = open(self.stdout_path, "wb")
        self.process = subprocess.Popen(command, stdout=self._out, stderr=self._err, stdin=subprocess.DEVNULL, cwd=REPO,
                                        env=child_environment({"BLEMU_CONTROLLER": None, "NO_COLOR": "1"}),
                                        start_new_session=True)

    def wait(self, timeout: float) -> int:
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(f"{self.label} did not exit within {timeout:.0f} s:\n{self.output()}") from None
        finally:
            self._err.close()
            self._out.close()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    @property
    def stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace")

    @property
    def stderr(self) -> str:
        return ANSI.sub("", self.log.read_text(errors="replace"))

    def output(self) -> str:
        return f"$ {' '.join(self.command)}\n--- stdout:\n{self.stdout}--- stderr:\n{self.stderr[-4000:]}"


def blemu_bench(rootcanal, role: str, mode: str, scenario: str, *, peer: str | None = None,
                address: str | None = None, packets: int = PACKETS, size: int = SIZE, timeout: int = 30) -> Side:
    args = [str(blemu_binary()), "bench", "--controller", rootcanal.controller_spec, "--role", role, "--mode", mode,
            "--scenario", scenario, "--packets", str(packets), "--size", str(size), "--json", "--timeout", str(timeout)]
    if peer:
        args += ["--peer", peer]
    if address:
        args += ["--address", address]
    return Side(f"blemu-{role}", args)


def bumble_bench(rootcanal, role: str, mode: str, scenario: str, *, peer: str | None = None,
                 packets: int = PACKETS, size: int = SIZE, options: tuple[str, ...] = ()) -> Side:
    args = [sys.executable, "-c", BUMBLE_BENCH_FIXED, "--mode", mode, "--scenario", scenario, "--packet-count", str(packets),
            "--packet-size", str(size), *options, role]
    if peer:
        args += ["--peripheral", peer]
    args.append(f"tcp-client:127.0.0.1:{rootcanal.hci_port}")
    return Side(f"bumble-{role}", args)


def run_pair(peripheral: Side, start_central) -> tuple[Side, Side]:
    """Starts the central once the peripheral had a moment to advertise; both must exit 0."""
    time.sleep(1.0)
    central = start_central()
    try:
        central_status = central.wait(40)
        peripheral_status = peripheral.wait(15)
    finally:
        central.stop()
        peripheral.stop()
    assert central_status == 0, f"central exited {central_status}:\n{central.output()}\n\npeer:\n{peripheral.output()}"
    assert peripheral_status == 0, f"peripheral exited {peripheral_status}:\n{peripheral.output()}\n\npeer:\n{central.output()}"
    # A clean end: the stop's one Reset (a second one, queued while the first was in flight,
    # went into the closed link: "controller link refused Reset" ended every peripheral run).
    for side in (central, peripheral):
        assert "refused" not in side.stderr, side.output()
    return central, peripheral


def blemu_result(side: Side) -> dict:
    lines = [line for line in side.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1, f"one JSON result expected:\n{side.output()}"
    result = json.loads(lines[0])
    assert result["packets"] == PACKETS, side.output()
    assert result["seconds"] > 0 and result["throughput_kBps"] > 0, side.output()
    return result


def bumble_received(side: Side) -> int:
    return len(re.findall(r"<<< Received packet \d+", side.stderr))


# Sending is write without response (GATT client) or notifications (GATT server), or the channel.
@pytest.mark.parametrize("transport", ["gatt", "l2cap"])
def test_blemu_central_sends_to_bumble(rootcanal, transport):
    peripheral = bumble_bench(rootcanal, "peripheral", f"{transport}-server", "receive")
    central, peripheral = run_pair(peripheral, lambda: blemu_bench(rootcanal, "central", f"{transport}-client", "send",
                                                                   peer=BUMBLE_PERIPHERAL))
    result = blemu_result(central)
    assert result["scenario"] == "send" and result["mode"] == f"{transport}-client"
    assert result["bytes"] == PACKETS * (SIZE - (2 if transport == "l2cap" else 0))
    assert bumble_received(peripheral) == PACKETS, peripheral.output()
    assert "@@@ Received last packet" in peripheral.stderr, peripheral.output()


@pytest.mark.parametrize("transport", ["gatt", "l2cap"])
def test_bumble_central_sends_to_blemu(rootcanal, transport):
    address = static_random_address()
    peripheral = blemu_bench(rootcanal, "peripheral", f"{transport}-server", "receive", address=address)
    central, peripheral = run_pair(peripheral, lambda: bumble_bench(rootcanal, "central", f"{transport}-client", "send",
                                                                    peer=address))
    result = blemu_result(peripheral)
    assert result["scenario"] == "receive" and result["out_of_order"] == 0
    assert "@@@ Received ACK" in central.stderr, central.output()


@pytest.mark.parametrize("transport", ["gatt", "l2cap"])
def test_blemu_central_receives_from_bumble(rootcanal, transport):
    peripheral = bumble_bench(rootcanal, "peripheral", f"{transport}-server", "send")
    central, peripheral = run_pair(peripheral, lambda: blemu_bench(rootcanal, "central", f"{transport}-client", "receive",
                                                                   peer=BUMBLE_PERIPHERAL))
    result = blemu_result(central)
    assert result["scenario"] == "receive" and result["out_of_order"] == 0
    assert "@@@ Received ACK" in peripheral.stderr, peripheral.output()


@pytest.mark.parametrize("transport", ["gatt", "l2cap"])
def test_blemu_pings_bumble(rootcanal, transport):
    peripheral = bumble_bench(rootcanal, "peripheral", f"{transport}-server", "pong")
    central, peripheral = run_pair(peripheral, lambda: blemu_bench(rootcanal, "central", f"{transport}-client", "ping",
                                                                   peer=BUMBLE_PERIPHERAL))
    result = blemu_result(central)
    latency = result["latency_ms"]
    assert 0 < latency["min"] <= latency["p50"] <= latency["p90"] <= latency["p99"] <= latency["max"], central.output()
    assert bumble_received(peripheral) == PACKETS, peripheral.output()


@pytest.mark.parametrize("transport", ["gatt", "l2cap"])
def test_bumble_pings_blemu(rootcanal, transport):
    address = static_random_address()
    peripheral = blemu_bench(rootcanal, "peripheral", f"{transport}-server", "pong", address=address)
    central, peripheral = run_pair(peripheral, lambda: bumble_bench(rootcanal, "central", f"{transport}-client", "ping",
                                                                    peer=address))
    result = blemu_result(peripheral)
    assert result["scenario"] == "pong"
    assert len(re.findall(r"<<< Received ACK \[\d+\]", central.stderr)) == PACKETS, central.output()
    assert "@@@ RTTs" in central.stderr, central.output()


@pytest.mark.parametrize("transport,scenarios", [("gatt", ("send", "receive")), ("gatt", ("ping", "pong")),
                                                 ("l2cap", ("send", "receive")), ("l2cap", ("receive", "send"))])
def test_blemu_to_blemu(rootcanal, transport, scenarios):
    address = static_random_address()
    central_scenario, peripheral_scenario = scenarios
    peripheral = blemu_bench(rootcanal, "peripheral", f"{transport}-server", peripheral_scenario, address=address)
    central, peripheral = run_pair(peripheral, lambda: blemu_bench(rootcanal, "central", f"{transport}-client",
                                                                   central_scenario, peer=address))
    central_result = blemu_result(central)
    peripheral_result = blemu_result(peripheral)
    assert central_result["scenario"] == central_scenario and peripheral_result["scenario"] == peripheral_scenario


def read_result(side: Side) -> dict:
    lines = [line for line in side.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1, f"one JSON result expected:\n{side.output()}"
    result = json.loads(lines[0])
    assert result["scenario"] == "read" and result["mode"] == "gatt-client", side.output()
    assert result["packets"] == PACKETS and result["bytes"] > 0, side.output()
    latency = result["latency_ms"]
    assert 0 < latency["min"] <= latency["p50"] <= latency["p90"] <= latency["p99"] <= latency["max"], side.output()
    return result


# The read scenario reads GAP's Device Name, which every GATT server has: bumble-bench's
# peripheral serves it whatever its own scenario (it waits for packets that never come and is
# stopped once blemu is done).
def test_blemu_reads_from_bumble(rootcanal):
    peripheral = bumble_bench(rootcanal, "peripheral", "gatt-server", "receive")
    time.sleep(1.0)
    central = blemu_bench(rootcanal, "central", "gatt-client", "read", peer=BUMBLE_PERIPHERAL)
    try:
        status = central.wait(40)
    finally:
        central.stop()
        peripheral.stop()
    assert status == 0, f"central exited {status}:\n{central.output()}\n\npeer:\n{peripheral.output()}"
    result = read_result(central)
    # Bumble's Device Name: bumble-bench's DEFAULT_PERIPHERAL_NAME.
    assert result["bytes"] == PACKETS * len("Speed Peripheral"), central.output()


def test_blemu_reads_from_blemu(rootcanal):
    address = static_random_address()
    peripheral = blemu_bench(rootcanal, "peripheral", "gatt-server", "read", address=address)
    central, peripheral = run_pair(peripheral, lambda: blemu_bench(rootcanal, "central", "gatt-client", "read", peer=address))
    result = read_result(central)
    assert result["bytes"] == PACKETS * len("blemu bench"), central.output()
    served = json.loads([line for line in peripheral.stdout.splitlines() if line.startswith("{")][0])
    assert served["scenario"] == "read" and served["mode"] == "gatt-server", peripheral.output()


def test_a_mismatched_pair_fails_saying_what_each_end_waited_for(rootcanal):
    """A `ping` central against a `receive` peripheral: the receiver ACKs only the packet
    flagged LAST, the ping waits for an ACK of its first. Both fail, each saying what it waited
    for and the scenario the peer must run, not a bare timeout."""
    address = static_random_address()
    peripheral = blemu_bench(rootcanal, "peripheral", "gatt-server", "receive", address=address)
    time.sleep(1.0)
    central = blemu_bench(rootcanal, "central", "gatt-client", "ping", peer=address, timeout=4)
    try:
        central_status = central.wait(40)
        peripheral_status = peripheral.wait(15)
    finally:
        central.stop()
        peripheral.stop()
    assert central_status == 1 and peripheral_status == 1, f"{central.output()}\n\npeer:\n{peripheral.output()}"
    assert "no result within 4.0 s; this ping end sent packet 0 of 6 and waited for its ACK: the peer must run `pong`" \
        in central.stderr, central.output()
    assert "disconnected before the run ended; this receive end got 1 packet, none flagged LAST" in peripheral.stderr, \
        peripheral.output()


def test_packets_longer_than_the_peers_channel_mtu_end_the_run_at_once(rootcanal):
    """Each packet is one SDU, which the peer's MTU bounds (Vol 3, Part A, 3.4.3): against a
    bumble-bench whose channel takes SDUs of 64 bytes, `--size 120` could never send one, so
    blemu says so as soon as the channel opens, instead of waiting out its --timeout."""
    peripheral = bumble_bench(rootcanal, "peripheral", "l2cap-server", "receive", options=("--l2cap-mtu", "64"))
    time.sleep(1.0)
    started = time.monotonic()
    central = blemu_bench(rootcanal, "central", "l2cap-client", "send", peer=BUMBLE_PERIPHERAL)
    try:
        status = central.wait(40)
    finally:
        central.stop()
        peripheral.stop()
    elapsed = time.monotonic() - started
    assert status != 0, central.output()
    assert "--size 120 does not fit the peer's L2CAP MTU 64" in central.stdout + central.stderr, central.output()
    assert elapsed < 20, f"the run took {elapsed:.0f} s:\n{central.output()}"
