"""`fleets:` in a `--config` file (Docs/REFERENCE.md, "Fleets"): a fleet's members on the air
from their address pattern, each starting at its drawn part of the fleet's start spread."""

from __future__ import annotations

import os
import time

from bumble_central import Central
from harness import log_dir, run, unique_name

MASK = (1 << 64) - 1


def fnv1a64(text: str) -> int:
    value = 0xCBF29CE484222325
    for byte in text.encode():
        value = ((value ^ byte) * 0x100000001B3) & MASK
    return value


class SplitMix64:
    def __init__(self, seed: int):
        self.state = seed & MASK

    def next(self) -> int:
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return z ^ (z >> 31)


def stream(seed: int, kind: str, key: str, index: int) -> SplitMix64:
    """A member's stream for one key, as REFERENCE.md writes the draws out (FleetDraw.stream)."""
    fleet = SplitMix64(seed ^ fnv1a64(kind + "\0" + key))
    return SplitMix64((fleet.next() + index * 0xD1B54A32D192ED03) & MASK)


def start_delays(seed: int, kind: str, count: int, spread_ms: int) -> list[float]:
    """Each member's start delay in seconds: a whole millisecond from 0 to the spread, exclusive."""
    return [stream(seed, kind, "start_spread", index).next() % spread_ms / 1000 for index in range(1, count + 1)]


def test_a_fleet_s_members_advertise_from_their_addresses_each_after_its_start_delay(rootcanal, blemu_factory):
    kind, count, spread_ms = "ibeacon", 3, 4000
    # A seed whose members start well apart: one early, one late.
    seed = next(s for s in range(1000) if min(d := start_delays(s, kind, count, spread_ms)) < 0.5 and max(d) > 3.0)
    delays = start_delays(seed, kind, count, spread_ms)
    prefix = ":".join(f"{byte:02X}" for byte in bytes([0xC0 | os.urandom(1)[0] & 0x3F]) + os.urandom(3))
    addresses = [f"{prefix}:00:{index:02X}" for index in range(1, count + 1)]
    path = log_dir() / f"fleet-{unique_name('F')}.yaml"
    path.write_text(f"""
fleets:
  - device: {kind}
    count: {count}
    seed: {seed}
    name: "{unique_name('B')} {{index}}"
    address: "{prefix}:00:{{index:02X}}"
    start_spread_s: {spread_ms / 1000}
""")
    started = time.monotonic()
    blemu = blemu_factory.start(None, wait_advertising=False, devices=[], extra_args=["--config", str(path), "--share-controller"])
    first_seen: dict[str, float] = {}

    async def scenario():
        async with Central(rootcanal.controller_spec, name="fleet-scanner") as central:
            def all_seen(result) -> bool:
                address = str(result.address).split("/")[0]
                if address in addresses and address not in first_seen:
                    first_seen[address] = time.monotonic() - started
                return len(first_seen) == count

            await central.scan_until(all_seen, f"the fleet's {count} members", timeout=30,
                                     want_scan_response=False, alive=blemu.exited)

    run(scenario(), timeout=60)
    # Nothing of a member is on the air before its delay has passed (counted from before blemu
    # started, so this bound holds however loaded the machine is); without the delay all three
    # appear within a moment of each other, the last one seconds before its time.
    for address, delay in zip(addresses, delays):
        assert first_seen[address] >= delay, f"{address} seen at {first_seen[address]:.2f} s, its delay is {delay:.3f} s; all: {first_seen}"
    assert blemu.stop() == 0, blemu.log_tail()


def test_a_fleet_is_spread_over_as_many_controller_connections_as_its_advertising_sets_need(rootcanal, blemu_factory):
    """rootcanal gives each TCP connection a controller of its own; blemu asks one how many
    advertising sets it runs (LE Read Number of Supported Advertising Sets) and puts the fleet's
    members that many to a connection, instead of a connection each."""
    import math
    import re

    count = 20
    path = log_dir() / f"fleet-{unique_name('S')}.yaml"
    path.write_text(f"""
fleets:
  - device: ibeacon
    count: {count}
    seed: {int.from_bytes(os.urandom(4), 'little')}
    name: "{unique_name('S')} {{index}}"
""")
    blemu = blemu_factory.start(None, wait_advertising=False, devices=[], extra_args=["--config", str(path)])
    blemu.wait_for_event("advertising-started", count=count, timeout=60)
    notice = next((entry.message for entry in blemu.log_entries() if entry.message.startswith("fleet members on ")), None)
    assert notice is not None, blemu.log_tail()
    match = re.search(r": (\d+) on (\d+) connection\(s\), (\d+) a connection", notice)
    assert match, notice
    members, connections, sets = map(int, match.groups())
    assert sets > 1, f"rootcanal runs several advertising sets: {notice}"
    assert members == count and connections == math.ceil(count / sets), notice
    sockets = [fd for fd in os.listdir(f"/proc/{blemu.process.pid}/fd")
               if os.readlink(f"/proc/{blemu.process.pid}/fd/{fd}").startswith("socket:")]
    # The controller connections, and at most the journal's socket beside them.
    assert connections <= len(sockets) <= connections + 1, f"{len(sockets)} sockets for {connections} connections"
    assert blemu.stop() == 0, blemu.log_tail()


def test_a_fleet_s_controller_connections_open_along_its_start_spread(rootcanal, blemu_factory):
    """Connectable members keep a controller connection each; those connections open when their
    member starts (and at most 8 are brought up at once), not all in the run's first instant:
    opened together, a large fleet's HCI Resets timed out at rootcanal and came back again and
    again (ControllerBringUp)."""
    kind, count, spread_ms = "heart-rate", 16, 6000
    # A seed whose members mostly start late: a run opening everything at once is caught early.
    seed = next(s for s in range(1000) if sorted(start_delays(s, kind, count, spread_ms))[3] > 2.0)
    delays = sorted(start_delays(seed, kind, count, spread_ms))
    path = log_dir() / f"fleet-{unique_name('O')}.yaml"
    path.write_text(f"""
fleets:
  - device: {kind}
    count: {count}
    seed: {seed}
    name: "{unique_name('H')} {{index}}"
    start_spread_s: {spread_ms / 1000}
""")
    spawned = time.monotonic()
    blemu = blemu_factory.start(None, wait_advertising=False, devices=[], extra_args=["--config", str(path)])
    pid = blemu.process.pid
    samples: list[tuple[float, int]] = []
    deadline = spawned + 60
    while time.monotonic() < deadline and len(blemu.events("advertising-started")) < count:
        try:
            sockets = sum(1 for fd in os.listdir(f"/proc/{pid}/fd") if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:"))
        except (FileNotFoundError, ProcessLookupError):
            break
        samples.append((time.monotonic() - spawned, sockets))
        time.sleep(0.1)
    blemu.wait_for_event("advertising-started", count=count, timeout=30)
    # A connection opens no sooner than its member's start, counted from the run's start, which
    # is after the spawn: so at any time t since the spawn, at most the members due by t have
    # one (and the journal's socket beside them).
    for elapsed, sockets in samples:
        due = sum(1 for delay in delays if delay <= elapsed)
        assert sockets <= due + 1, f"{sockets} sockets at {elapsed:.2f} s, {due} members due; delays {delays}; samples {samples}"
    assert any(elapsed < delays[3] for elapsed, _ in samples), f"no sample before the fourth start: {samples}"
    assert any(entry.message.startswith(f"opening {count} controller connections, 8 at a time") for entry in blemu.log_entries()), blemu.log_tail()
    assert not [entry.message for entry in blemu.log_entries() if "timed out" in entry.message], blemu.log_tail()
    assert blemu.stop() == 0, blemu.log_tail()


def test_two_processes_with_a_fleet_each_on_one_rootcanal_are_in_one_air(rootcanal, blemu_factory):
    """Docs/DEPLOYMENT.md, "A fleet in several processes, and beyond one machine": a fleet split
    into two `blemu run --config` processes, one file each, on one rootcanal; a scanner on that
    rootcanal hears every member of both, each from its own file's address pattern."""
    count = 3
    addresses: list[str] = []
    processes = []
    for part in ("a", "b"):
        prefix = ":".join(f"{byte:02X}" for byte in bytes([0xC0 | os.urandom(1)[0] & 0x3F]) + os.urandom(3))
        addresses += [f"{prefix}:00:{index:02X}" for index in range(1, count + 1)]
        path = log_dir() / f"fleet-{part}-{unique_name('P')}.yaml"
        path.write_text(f"""
fleets:
  - fleet: part-{part}
    device: ibeacon
    count: {count}
    seed: {int.from_bytes(os.urandom(4), 'little')}
    name: "{unique_name(part.upper())} {{index}}"
    address: "{prefix}:00:{{index:02X}}"
""")
        processes.append(blemu_factory.start(None, wait_advertising=False, devices=[],
                                             extra_args=["--config", str(path)]))
    for blemu in processes:
        blemu.wait_for_event("advertising-started", count=count, timeout=60)
    heard: set[str] = set()

    async def scenario():
        async with Central(rootcanal.controller_spec, name="fleet-scanner") as central:
            def all_heard(result) -> bool:
                address = str(result.address).split("/")[0]
                if address in addresses:
                    heard.add(address)
                return len(heard) == len(addresses)

            await central.scan_until(all_heard, f"both processes' {len(addresses)} members", timeout=30,
                                     want_scan_response=False,
                                     alive=lambda: processes[0].exited() or processes[1].exited())

    run(scenario(), timeout=60)
    assert heard == set(addresses)
    for blemu in processes:
        assert blemu.stop() == 0, blemu.log_tail()
