"""The kernel tests' vhci bridge (Tests/kernel/vhci_bridge.py): the one command it answers
itself. rootcanal 1.10 aborts on HCI Write Authenticated Payload Timeout ("Unimplemented command
WRITE_AUTHENTICATED_PAYLOAD_TIMEOUT"), which the kernel sends once BlueZ has encrypted an LE link,
so the bridge must answer it and pass everything else through."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kernel"))

from vhci_bridge import local_answer  # noqa: E402


def test_write_authenticated_payload_timeout_is_answered_with_success_for_its_handle():
    # H4 command 0x0C7C, 4 parameter octets: Connection_Handle 0x0040, timeout 3000 (30 s).
    answer = local_answer(bytes.fromhex("01" "7c0c" "04" "4000" "b80b"))
    # Command Complete (Core 5.4, Vol 4, Part E, 7.7.14): 1 packet, opcode, success, handle.
    assert answer == bytes.fromhex("04" "0e" "06" "01" "7c0c" "00" "4000")


def test_a_wrong_parameter_length_is_refused_with_invalid_parameters():
    assert local_answer(bytes.fromhex("01" "7c0c" "02" "4000")) == bytes.fromhex("04" "0e" "04" "01" "7c0c" "12")


def test_every_other_packet_goes_to_the_controller():
    for packet in ("01030c00",                 # Reset
                   "017b0c024000",             # Read Authenticated Payload Timeout
                   "0240000500010002000304",   # ACL data
                   "040e0401030c00",           # an event (never from the host, but not ours)
                   "01", ""):                  # truncated
        assert local_answer(bytes.fromhex(packet)) is None
