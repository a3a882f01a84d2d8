"""A proxy in front of rootcanal's HCI port that refuses chosen HCI commands, as a controller
that does not support them does (netsim refused five that blemu sends: Bumble #220).

Each connection blemu opens to the proxy is a connection of the proxy to rootcanal (so a new
controller on rootcanal's radio). Packets pass unchanged both ways, but a command whose opcode
is in `refused` never reaches rootcanal: the proxy answers it with Unknown HCI Command (0x01),
as Core 5.4, Vol 4, Part E, 4.5 says a controller answers a command it does not support: a
Command Status event (7.7.15) for the commands that are answered with one, a Command Complete
(7.7.14) with that status as its only return parameter for the others. It runs in threads of
the test process and records every opcode blemu sent (`sent`) and those it refused (`refusals`).
"""

from __future__ import annotations

import socket
import struct
import threading

UNKNOWN_HCI_COMMAND = 0x01

# The commands the Core answers with Command Status (their result comes in a later event).
ANSWERED_WITH_STATUS = {
    0x0406,  # Disconnect (7.1.6)
    0x041D,  # Read Remote Version Information (7.1.23)
    0x200D,  # LE Create Connection (7.8.12)
    0x2013,  # LE Connection Update (7.8.18)
    0x2016,  # LE Read Remote Features (7.8.21)
    0x2019,  # LE Enable Encryption (7.8.24)
    0x2032,  # LE Set PHY (7.8.49)
    0x2043,  # LE Extended Create Connection (7.8.66)
    0x2044,  # LE Periodic Advertising Create Sync (7.8.67)
}


def refusal(opcode: int) -> bytes:
    """The H4 event refusing `opcode`, with Num_HCI_Command_Packets 1."""
    if opcode in ANSWERED_WITH_STATUS:
        return bytes([0x04, 0x0F, 4, UNKNOWN_HCI_COMMAND, 1]) + struct.pack("<H", opcode)
    return bytes([0x04, 0x0E, 4, 1]) + struct.pack("<H", opcode) + bytes([UNKNOWN_HCI_COMMAND])


def packet_length(buffer: bytearray) -> int | None:
    """The whole length of the H4 packet at the start of `buffer`, or None while its header is incomplete."""
    if not buffer:
        return None
    kind = buffer[0]
    if kind in (0x01, 0x03):  # command, SCO: 3-byte header, length in the third
        return 4 + buffer[3] if len(buffer) >= 4 else None
    if kind == 0x04:  # event: 2-byte header, length in the second
        return 3 + buffer[2] if len(buffer) >= 3 else None
    if kind in (0x02, 0x05):  # ACL, ISO: 4-byte header, length in the last two (ISO: 14 bits)
        if len(buffer) < 5:
            return None
        length = struct.unpack_from("<H", buffer, 3)[0]
        return 5 + (length & 0x3FFF if kind == 0x05 else length)
    raise ValueError(f"unknown H4 packet indicator 0x{kind:02x}")


class RefusingProxy:
    def __init__(self, upstream_port: int, refused: set[int] | frozenset[int]):
        self.upstream_port = upstream_port
        self.refused = frozenset(refused)
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(8)
        self.port = self.listener.getsockname()[1]
        self.sent: list[int] = []
        self.refusals: list[int] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._sockets: list[socket.socket] = []
        self._threads: list[threading.Thread] = [threading.Thread(target=self._accept, daemon=True)]

    @property
    def spec(self) -> str:
        return f"tcp:127.0.0.1:{self.port}"

    def __enter__(self) -> "RefusingProxy":
        self._threads[0].start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.listener.close()
        for sock in self._sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        for thread in self._threads:
            thread.join(5)

    def _accept(self) -> None:
        self.listener.settimeout(0.1)
        while not self._stop.is_set():
            try:
                downstream, _ = self.listener.accept()
            except (socket.timeout, OSError):
                continue
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=5)
            for sock in (downstream, upstream):
                sock.settimeout(None)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._sockets += [downstream, upstream]
            lock = threading.Lock()
            for target in (self._from_host, self._from_controller):
                thread = threading.Thread(target=target, args=(downstream, upstream, lock), daemon=True)
                self._threads.append(thread)
                thread.start()

    def _from_host(self, downstream: socket.socket, upstream: socket.socket, lock: threading.Lock) -> None:
        pending = bytearray()
        try:
            while data := downstream.recv(65536):
                pending += data
                while (length := packet_length(pending)) is not None and len(pending) >= length:
                    packet = bytes(pending[:length])
                    del pending[:length]
                    if packet[0] == 0x01:
                        opcode = struct.unpack_from("<H", packet, 1)[0]
                        self.sent.append(opcode)
                        if opcode in self.refused:
                            self.refusals.append(opcode)
                            with lock:
                                downstream.sendall(refusal(opcode))
                            continue
                    upstream.sendall(packet)
        except (OSError, ValueError) as error:
            if not self._stop.is_set():
                self.errors.append(repr(error))
        finally:
            self._shut_both(downstream, upstream)

    @staticmethod
    def _shut_both(downstream: socket.socket, upstream: socket.socket) -> None:
        """Either direction ending ends the other: both sockets shut down."""
        for sock in (downstream, upstream):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _from_controller(self, downstream: socket.socket, upstream: socket.socket, lock: threading.Lock) -> None:
        # Whole packets only: a refusal must never land inside one of rootcanal's (it writes a
        # packet's indicator and body in two sends).
        pending = bytearray()
        try:
            while data := upstream.recv(65536):
                upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)
                pending += data
                while (length := packet_length(pending)) is not None and len(pending) >= length:
                    with lock:
                        downstream.sendall(bytes(pending[:length]))
                    del pending[:length]
        except (OSError, ValueError) as error:
            if not self._stop.is_set():
                self.errors.append(repr(error))
        finally:
            self._shut_both(downstream, upstream)
