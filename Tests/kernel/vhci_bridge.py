"""Bridge a Linux virtual HCI adapter (/dev/vhci, hci_vhci) to a controller over H4/TCP.

    python3 vhci_bridge.py HOST PORT

Connects to HOST:PORT (rootcanal's HCI port: every connection is a new controller on its
radio), opens /dev/vhci, which makes the kernel register a new adapter hciN, then copies
packets both ways until either side closes or SIGTERM arrives. Closing /dev/vhci unregisters
the adapter: that is how the kernel tests unplug it.

hci_vhci (drivers/bluetooth/hci_vhci.c):
  - the first write may be a vendor packet 0xff <opcode>, opcode 0x00 = a primary (BR/EDR/LE)
    adapter; the driver creates the adapter and answers 0xff <opcode> <index, u16 LE>. Without
    it the driver creates a primary adapter after one second on its own.
  - each read returns exactly one packet the host sends, with its H4 indicator;
  - each write must be exactly one packet with its indicator, so the TCP byte stream is cut
    into packets by H4 framing here.

One command never reaches the controller: HCI_Write_Authenticated_Payload_Timeout, which the
kernel sends after encrypting an LE link (BlueZ pairing) and rootcanal 1.10 aborts on
("Unimplemented command WRITE_AUTHENTICATED_PAYLOAD_TIMEOUT"); the bridge answers it itself
(`local_answer`) with success.

Prints `vhci-bridge: hciN up` once the adapter exists. Standard library only.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import struct
import sys

H4_COMMAND, H4_ACL, H4_SCO, H4_EVENT, H4_ISO = 0x01, 0x02, 0x03, 0x04, 0x05


def packet_length(buffer: bytes | bytearray) -> int | None:
    """The whole length (indicator included) of the H4 packet at the start of buffer, or None
    while its header is incomplete. Raises ValueError on an unknown indicator."""
    if not buffer:
        return None
    kind = buffer[0]
    if kind == H4_COMMAND:  # opcode (2), length (1)
        return 4 + buffer[3] if len(buffer) >= 4 else None
    if kind == H4_ACL:  # handle+flags (2), length (2)
        return 5 + struct.unpack_from("<H", buffer, 3)[0] if len(buffer) >= 5 else None
    if kind == H4_SCO:  # handle+flags (2), length (1)
        return 4 + buffer[3] if len(buffer) >= 4 else None
    if kind == H4_EVENT:  # code (1), length (1)
        return 3 + buffer[2] if len(buffer) >= 3 else None
    if kind == H4_ISO:  # handle+flags (2), length (14 bits)
        return 5 + (struct.unpack_from("<H", buffer, 3)[0] & 0x3FFF) if len(buffer) >= 5 else None
    raise ValueError(f"unknown H4 packet indicator 0x{kind:02x}")


# Core 5.4, Vol 4, Part E, 7.3.94 HCI_Write_Authenticated_Payload_Timeout: OGF 0x03, OCF
# 0x007C; parameters Connection_Handle (2), Authenticated_Payload_Timeout (2); returns Status,
# Connection_Handle in an HCI_Command_Complete event (7.7.14: code 0x0E, Num_HCI_Command_Packets,
# Command_Opcode, Return_Parameters).
WRITE_AUTHENTICATED_PAYLOAD_TIMEOUT = 0x0C7C
EVENT_COMMAND_COMPLETE = 0x0E


def local_answer(packet: bytes) -> bytes | None:
    """The H4 event the bridge answers `packet` (one H4 packet from the host) with itself, or
    None when the packet goes to the controller."""
    if len(packet) < 4 or packet[0] != H4_COMMAND:
        return None
    opcode = struct.unpack_from("<H", packet, 1)[0]
    if opcode != WRITE_AUTHENTICATED_PAYLOAD_TIMEOUT:
        return None
    if packet[3] != 4 or len(packet) != 8:  # wrong parameter length: the spec's answer
        return bytes([H4_EVENT, EVENT_COMMAND_COMPLETE, 4, 1]) + struct.pack("<H", opcode) + bytes([0x12])
    handle = struct.unpack_from("<H", packet, 4)[0] & 0x0FFF
    return bytes([H4_EVENT, EVENT_COMMAND_COMPLETE, 6, 1]) + struct.pack("<HBH", opcode, 0x00, handle)


def say(text: str) -> None:
    print(f"vhci-bridge: {text}", flush=True)


def main() -> int:
    host, port = sys.argv[1], int(sys.argv[2])
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    signal.signal(signal.SIGINT, lambda *_: stop.append(True))

    controller = socket.create_connection((host, port), timeout=10)
    controller.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    controller.setblocking(False)
    vhci = os.open("/dev/vhci", os.O_RDWR)
    os.write(vhci, bytes([0xFF, 0x00]))  # a primary adapter, now
    answer = os.read(vhci, 64)
    if len(answer) < 4 or answer[0] != 0xFF:
        say(f"unexpected answer from /dev/vhci: {answer.hex()}")
        return 1
    index = struct.unpack_from("<H", answer, 2)[0]
    say(f"hci{index} up (controller {host}:{port})")

    pending = bytearray()
    try:
        while not stop:
            try:
                readable, _, _ = select.select([vhci, controller], [], [], 0.5)
            except InterruptedError:
                continue
            if vhci in readable:
                packet = os.read(vhci, 4096)
                if not packet:
                    say("/dev/vhci closed")
                    return 1
                answer = local_answer(packet)
                if answer is not None:
                    os.write(vhci, answer)
                    say(f"answered command 0x{struct.unpack_from('<H', packet, 1)[0]:04x} itself")
                    continue
                controller.setblocking(True)
                controller.sendall(packet)
                controller.setblocking(False)
            if controller in readable:
                data = controller.recv(65536)
                # rootcanal writes a packet's indicator and body in two sends: without quick
                # ACKs the body waits for our delayed ACK of the indicator (up to 40 ms).
                controller.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)
                if not data:
                    say("the controller closed the connection")
                    return 1
                pending += data
                while (length := packet_length(pending)) is not None and len(pending) >= length:
                    os.write(vhci, bytes(pending[:length]))
                    del pending[:length]
    finally:
        os.close(vhci)
        controller.close()
    say(f"hci{index} removed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
