#!/usr/bin/env python3
"""Run Android's rootcanal virtual controller (PyPI `rootcanal`) on free or given ports.

Every TCP connection to rootcanal's HCI port is a new controller on one simulated
radio, so blemu and any number of Bumble centrals can meet there.

Used two ways:
- as a module: `RootCanal().start()` / `.stop()` (the interop tests' fixture, the measuring
  scripts): the Python kit's own (python/blemu_testkit/rootcanal.py), taken from the source tree
  so that nothing needs installing, and kept in one place;
- as a program: `python scripts/rootcanal_server.py [--hci-port 6402]` runs one
  instance in the foreground until Ctrl-C (scripts/demo).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO / "python") not in sys.path:
    sys.path.insert(0, str(REPO / "python"))

from blemu_testkit.errors import BlemuError  # noqa: E402
from blemu_testkit.rootcanal import RootCanal, free_tcp_ports  # noqa: E402

__all__ = ["BlemuError", "RootCanal", "free_tcp_ports", "main"]


def main() -> int:
    parser = argparse.ArgumentParser(description="Run rootcanal in the foreground until Ctrl-C.")
    parser.add_argument("--hci-port", type=int, default=6402, help="HCI (H4 over TCP) port, default 6402")
    parser.add_argument("--log", type=Path, default=None, help="rootcanal's log file (default: a temp file)")
    args = parser.parse_args()

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        server = RootCanal(log_path=args.log, hci_port=args.hci_port).start()
    except BlemuError as error:
        print(f"rootcanal_server: {error}", file=sys.stderr)
        return 1
    print(f"rootcanal ready: controller spec {server.controller_spec} (log {server.log_path})", flush=True)
    try:
        while not stop.is_set():
            if server.process is not None and server.process.poll() is not None:
                print(f"rootcanal exited with status {server.process.returncode}:\n{server.log_tail()}",
                      file=sys.stderr)
                return 1
            stop.wait(0.5)
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
