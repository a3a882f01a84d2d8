"""One blemu thermostat on rootcanal read by a Bumble central, for the tools that measure one ATT
request from the outside: scripts/request-syscalls (strace) and scripts/request-walk (callgrind).

`run_reads` starts rootcanal and `blemu run thermostat` (behind `prefix`, e.g. valgrind),
connects a Bumble central, finds the Temperature characteristic and reads it: a few reads to
warm up, then `before(pid)`, `reads` timed ATT Read Requests one after another, `after(pid)`.
It returns the latencies in seconds (request sent to response received, at the central).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(REPO / "scripts"))
from blemu_testkit.rootcanal import RootCanal  # noqa: E402

NAME = "blemu-reads"
UUID_ESS = 0x181A
UUID_TEMPERATURE = 0x2A6E


async def _reads(controller: str, pid: int, reads: int, warm_up: int, scan_timeout: float,
                 before: Callable[[int], None], after: Callable[[int], None]) -> list[float]:
    from bumble import att
    from bumble.core import UUID

    from bumble_central import Central

    async with Central(controller, name="read-requests") as central:
        found = await central.scan_for(NAME, timeout=scan_timeout)
        conn = await central.connect(found.address, timeout=scan_timeout)
        characteristic = await conn.discover_characteristic(UUID.from_16_bits(UUID_ESS),
                                                            UUID.from_16_bits(UUID_TEMPERATURE), timeout=scan_timeout)
        request = att.ATT_Read_Request(attribute_handle=characteristic.handle)
        for _ in range(warm_up):
            await conn.request(request, timeout=scan_timeout)
        before(pid)
        latencies = []
        for _ in range(reads):
            start = time.perf_counter()
            response = await conn.request(request, timeout=scan_timeout)
            latencies.append(time.perf_counter() - start)
            if response.op_code != att.Opcode.ATT_READ_RESPONSE:
                raise SystemExit(f"unexpected answer to ATT_READ_REQ: {response}")
        after(pid)
        await conn.disconnect()
        return latencies


def run_reads(blemu: str, reads: int, *, prefix: list[str] | None = None, warm_up: int = 20,
              scan_timeout: float = 20.0, before: Callable[[int], None] = lambda pid: None,
              after: Callable[[int], None] = lambda pid: None, logs: Path | None = None) -> list[float]:
    logs = logs or Path(tempfile.mkdtemp(prefix="blemu-reads-"))
    rootcanal = RootCanal(log_path=logs / "rootcanal.log").start()
    blemu_log = open(logs / "blemu.log", "wb")
    process = subprocess.Popen([*(prefix or []), blemu, "run", "thermostat", "--controller", rootcanal.controller_spec,
                                "--name", NAME], stdout=blemu_log, stderr=blemu_log, stdin=subprocess.DEVNULL, cwd=REPO)
    try:
        return asyncio.run(_reads(rootcanal.controller_spec, process.pid, reads, warm_up, scan_timeout, before, after))
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        blemu_log.close()
        rootcanal.stop()


def median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if ordered else 0.0


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))] if ordered else 0.0


if __name__ == "__main__":
    blemu = sys.argv[1] if len(sys.argv) > 1 else str(REPO / ".build/debug/blemu")
    latencies = run_reads(blemu, 50)
    print(f"median {median(latencies) * 1000:.2f} ms over {len(latencies)} reads ({os.path.basename(blemu)})")
