"""A hostile or broken H4 controller on a TCP port, for what rootcanal will not do.

It runs in a thread of the test process and speaks just enough HCI for blemu to come up:
every command gets a Command Complete with status 0x00 and zeroed return parameters (so
blemu falls back to its defaults), Disconnect gets a Command Status. Behaviours:

- `drop_at_once`: accept each connection and close it at once (counts `accepts`).
- `starve_after`: once a command with this opcode was answered, answer every later command
  with Num_HCI_Command_Packets = 0 and then not at all (a controller that stops taking
  commands).
"""

from __future__ import annotations

import socket
import struct
import threading
import time

LE_SET_ADVERTISING_ENABLE = 0x200A


class FakeController:
    def __init__(self, *, drop_at_once: bool = False, starve_after: int | None = None):
        self.drop_at_once = drop_at_once
        self.starve_after = starve_after
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(8)
        self.port = self.listener.getsockname()[1]
        self.accept_times: list[float] = []
        self.commands: list[int] = []
        self.starving = False
        self._stop = threading.Event()
        self._connections: list[socket.socket] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def spec(self) -> str:
        return f"tcp:127.0.0.1:{self.port}"

    def __enter__(self) -> "FakeController":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.listener.close()
        for connection in self._connections:
            connection.close()
        self._thread.join(5)

    def _serve(self) -> None:
        self.listener.settimeout(0.1)
        while not self._stop.is_set():
            try:
                connection, _ = self.listener.accept()
            except (socket.timeout, OSError):
                continue
            self.accept_times.append(time.monotonic())
            if self.drop_at_once:
                connection.close()
                continue
            self._connections.append(connection)
            threading.Thread(target=self._talk, args=(connection,), daemon=True).start()

    def _talk(self, connection: socket.socket) -> None:
        buffer = b""
        connection.settimeout(0.1)
        while not self._stop.is_set():
            try:
                chunk = connection.recv(4096)
            except socket.timeout:
                continue
            except OSError:
                return
            if not chunk:
                return
            buffer += chunk
            while True:
                packet, buffer = self._take_packet(buffer)
                if packet is None:
                    break
                if packet[0] == 0x01:
                    self._answer(connection, struct.unpack_from("<H", packet, 1)[0])

    @staticmethod
    def _take_packet(buffer: bytes) -> tuple[bytes | None, bytes]:
        """One H4 packet (command or ACL) from the front of `buffer`."""
        if not buffer:
            return None, buffer
        kind = buffer[0]
        if kind == 0x01 and len(buffer) >= 4:
            end = 4 + buffer[3]
        elif kind == 0x02 and len(buffer) >= 5:
            end = 5 + struct.unpack_from("<H", buffer, 3)[0]
        else:
            return None, buffer
        if len(buffer) < end:
            return None, buffer
        return buffer[:end], buffer[end:]

    def _answer(self, connection: socket.socket, opcode: int) -> None:
        self.commands.append(opcode)
        if self.starving:
            return  # no answer at all: the credit it was given is its last
        credits = 1
        if self.starve_after is not None and opcode == self.starve_after:
            self.starving = True
            credits = 0
        if opcode == 0x0406:  # Disconnect: Command Status (Vol 4, Part E, 7.1.6)
            event = bytes([0x04, 0x0F, 4, 0x00, credits]) + struct.pack("<H", opcode)
        else:
            parameters = bytes([credits]) + struct.pack("<H", opcode) + bytes([0x00]) + bytes(64)
            event = bytes([0x04, 0x0E, len(parameters)]) + parameters
        try:
            connection.sendall(event)
        except OSError:
            pass
