#!/usr/bin/env python3
"""Run Android's rootcanal virtual controller (PyPI `rootcanal`) on free or given ports.

Every TCP connection to rootcanal's HCI port is a new controller on one simulated
radio, so blemu and any number of Bumble centrals can meet there.

Used two ways:
  - as a module: `RootCanal().start()` / `.stop()` (the interop tests' fixture);
  - as a program: `python scripts/rootcanal_server.py [--hci-port 6402]` runs one
    instance in the foreground until Ctrl-C (scripts/demo).

`python -m rootcanal` is a thin wrapper that runs the packaged binary with
subprocess.call, so killing the wrapper would orphan the binary. We start the
binary itself (found the same way the wrapper finds it) in its own process group
and stop the whole group.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

# rootcanal 1.10.0 logs one line per listening socket, e.g.
#   root-canal I 11-22 00:16:14.715 posix_async_socket_server.cc:79  Listening on: 6402 (6)
# The HCI port is opened last, after the test/link ports, so seeing it means ready.
_LISTENING = re.compile(r"Listening on: (\d+)\b")


def free_tcp_ports(count: int) -> list[int]:
    """`count` distinct TCP ports that were free on 127.0.0.1 a moment ago."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def rootcanal_command(hci_port: int, test_port: int, link_port: int, link_ble_port: int) -> list[str]:
    """The command line that runs the packaged rootcanal binary directly."""
    try:
        import rootcanal.binaries  # type: ignore[import-not-found]

        binary = rootcanal.binaries.get_package_binary_resource_path("rootcanal")
        head = [binary]
    except Exception:  # an older/newer package layout: fall back to the module wrapper
        head = [sys.executable, "-m", "rootcanal"]
    return head + [
        f"-hci_port={hci_port}",
        f"-test_port={test_port}",
        f"-link_port={link_port}",
        f"-link_ble_port={link_ble_port}",
    ]


class RootCanal:
    """One rootcanal process. `start()` returns once its HCI port listens."""

    def __init__(self, hci_port: int | None = None, log_path: Path | None = None):
        ports = free_tcp_ports(4)
        self.hci_port = hci_port or ports[0]
        self.test_port, self.link_port, self.link_ble_port = ports[1], ports[2], ports[3]
        if self.hci_port in (self.test_port, self.link_port, self.link_ble_port):
            raise RuntimeError("port collision, try again")
        if log_path is None:
            fd, name = tempfile.mkstemp(prefix="rootcanal-", suffix=".log")
            os.close(fd)
            log_path = Path(name)
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def controller_spec(self) -> str:
        """blemu's spec for a new controller on this radio (Docs/REFERENCE.md, Controller specs)."""
        return f"tcp:127.0.0.1:{self.hci_port}"

    def start(self, timeout: float = 15.0) -> "RootCanal":
        # rootcanal keeps running without its HCI port when that port is taken: check first.
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(("127.0.0.1", self.hci_port))
            except OSError as error:
                raise RuntimeError(f"port {self.hci_port} is not free ({error.strerror}); pick another") from None
        log = open(self.log_path, "wb")
        try:
            self.process = subprocess.Popen(
                rootcanal_command(self.hci_port, self.test_port, self.link_port, self.link_ble_port),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # its own process group: stop() ends all of it
            )
        finally:
            log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"rootcanal exited with status {self.process.returncode} before listening on "
                    f"{self.hci_port}; log {self.log_path}:\n{self.log_tail()}"
                )
            if str(self.hci_port) in self._listening_ports():
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(
            f"rootcanal did not log 'Listening on: {self.hci_port}' within {timeout:.0f} s; "
            f"log {self.log_path}:\n{self.log_tail()}"
        )

    def _listening_ports(self) -> set[str]:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return set()
        return set(_LISTENING.findall(text))

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, timeout: float = 5.0) -> None:
        process = self.process
        if process is None or process.poll() is not None:
            return
        try:
            os.killpg(process.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait(timeout)

    def __enter__(self) -> "RootCanal":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description="Run rootcanal in the foreground until Ctrl-C.")
    parser.add_argument("--hci-port", type=int, default=6402, help="HCI (H4 over TCP) port, default 6402")
    parser.add_argument("--log", type=Path, default=None, help="rootcanal's log file (default: a temp file)")
    args = parser.parse_args()

    server = RootCanal(hci_port=args.hci_port, log_path=args.log)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        server.start()
    except RuntimeError as error:
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
