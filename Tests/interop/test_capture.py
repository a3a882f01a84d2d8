"""`blemu run --btsnoop PATH [--btsnoop-max SIZE]`: the HCI capture, read back by btmon and tshark.

The capture is checked with the decoders field engineers use (`btmon -r`, `tshark -r`) and with
a small btsnoop reader of our own (format: Sources/Capture/Btsnoop.swift), which maps the
`snoop_frame=N` of a log line to the Nth record.
"""

from __future__ import annotations

import re
import shutil
import signal
import struct
import subprocess
from pathlib import Path

import pytest

from bumble_central import UUID_BODY_SENSOR_LOCATION
from harness import BlemuProcess, connected, run, run_cli, start_advertising, unique_name

BTSNOOP_HEADER = b"btsnoop\0" + struct.pack(">II", 1, 1002)
# Microseconds from 0000-01-01 (btsnoop's epoch) to 1970-01-01.
BTSNOOP_UNIX_OFFSET_US = 0x00DCDDB30F2F8000

H4_COMMAND, H4_ACL, H4_EVENT = 0x01, 0x02, 0x04
OPCODE_RESET = 0x0C03
LE_META_EVENT = 0x3E
LE_CONNECTION_COMPLETE_SUBEVENTS = {0x01, 0x0A, 0x29}  # Connection Complete, Enhanced v1 and v2


def read_btsnoop(path: Path) -> list[tuple[int, int, bytes]]:
    """(flags, timestamp in Unix µs, data with its H4 indicator) per record; fails on anything malformed."""
    data = path.read_bytes()
    assert data[:16] == BTSNOOP_HEADER, f"{path}: header {data[:16]!r}"
    records = []
    offset = 16
    while offset < len(data):
        assert len(data) - offset >= 24, f"{path}: truncated record header at {offset}"
        original, included, flags, drops, timestamp = struct.unpack_from(">IIIIq", data, offset)
        assert original == included and drops == 0, f"{path}: record at {offset}"
        body = data[offset + 24: offset + 24 + included]
        assert len(body) == included, f"{path}: truncated record at {offset}"
        records.append((flags, timestamp - BTSNOOP_UNIX_OFFSET_US, body))
        offset += 24 + included
    return records


def is_command(record, opcode: int) -> bool:
    flags, _, body = record
    return body[0] == H4_COMMAND and flags == 2 and struct.unpack_from("<H", body, 1)[0] == opcode


def is_connection_complete(record) -> bool:
    flags, _, body = record
    return (body[0] == H4_EVENT and flags == 3 and body[1] == LE_META_EVENT
            and body[3] in LE_CONNECTION_COMPLETE_SUBEVENTS and body[4] == 0x00)


def is_characteristic_declarations(record) -> bool:
    """An ATT Read By Type Response listing characteristic declarations with 16-bit UUIDs (7-octet entries)."""
    _, _, body = record
    return body[0] == H4_ACL and len(body) > 11 and body[9] == 0x09 and body[10] == 7


def btmon(path: Path) -> str:
    """`btmon -r PATH`'s output. btmon 5.66 (Debian 12's bluez) dies with SIGSEGV on the Read By
    Type Response of a characteristic discovery, in any capture (the request and the response
    alone are enough, either direction): that crash is accepted, at exactly such a frame, and
    what btmon printed before it is returned."""
    if shutil.which("btmon") is None:
        pytest.fail("btmon not found: run scripts/setup --tests (Debian package bluez)", pytrace=False)
    # Line-buffered, so the lines before a crash are not lost in stdio's buffer.
    result = subprocess.run(["stdbuf", "-oL", "btmon", "-r", str(path)], capture_output=True, text=True, timeout=30)
    if result.returncode == -signal.SIGSEGV or result.returncode == 128 + signal.SIGSEGV:
        shown = [int(frame) for frame in re.findall(r" #(\d+) ", result.stdout)]
        crashed_at = (shown[-1] if shown else 0) + 1
        records = read_btsnoop(path)
        assert crashed_at <= len(records) and is_characteristic_declarations(records[crashed_at - 1]), \
            f"btmon -r {path} crashed at frame {crashed_at}, which is not btmon 5.66's known crash"
        return result.stdout
    assert result.returncode == 0, f"btmon -r {path}: {result.returncode}\n{result.stderr}"
    return result.stdout


def tshark(path: Path) -> str:
    if shutil.which("tshark") is None:
        pytest.fail("tshark not found: run scripts/setup --tests (Debian package tshark)", pytrace=False)
    result = subprocess.run(["tshark", "-r", str(path), "-V"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, f"tshark -r {path}: {result.returncode}\n{result.stderr}"
    return result.stdout


def test_capture_holds_every_packet_and_decodes(rootcanal, tmp_path):
    capture = tmp_path / "blemu.btsnoop"
    blemu = start_advertising(BlemuProcess(rootcanal.controller_spec, unique_name(),
                                           extra_args=["--btsnoop", str(capture)]), rootcanal)
    try:
        async def scenario() -> bytes:
            async with connected(blemu, "capture-reader", discover=True) as conn:
                return await conn.read(conn.characteristic(UUID_BODY_SENSOR_LOCATION))

        location = run(scenario())
        assert len(location) == 1
        connected_entries = blemu.wait_for_event("connected")
        blemu.wait_for_event("disconnected")
    finally:
        status = blemu.stop()
    assert status == 0, blemu.log_tail()

    records = read_btsnoop(capture)
    # The first packet is the HCI Reset at start; another comes during the stop, after advertising went off.
    assert is_command(records[0], OPCODE_RESET), records[0]
    resets = [index for index, record in enumerate(records) if is_command(record, OPCODE_RESET)]
    assert len(resets) >= 2 and resets[-1] > len(records) - 6, f"resets at {resets} of {len(records)} frames"
    timestamps = [timestamp for _, timestamp, _ in records]
    assert timestamps == sorted(timestamps)
    assert {flags for flags, _, _ in records} == {0, 1, 2, 3}  # ACL and commands/events, both ways

    # The log line of the connection points at the frame of LE Connection Complete (or at a
    # frame the host sent in answer to it: nothing else arrived in between).
    frame = int(connected_entries[0].fields["snoop_frame"])
    complete = next(index + 1 for index, record in enumerate(records) if is_connection_complete(record))
    assert complete <= frame <= len(records)
    received_between = [n for n in range(complete + 1, frame + 1) if records[n - 1][0] & 1]
    assert not received_between, (f"`connected` says frame {frame}, LE Connection Complete is frame {complete}; "
                                  f"received in between: {received_between}")
    # Every entry written while capturing carries a frame number, and they never go back.
    frames = [int(entry.fields["snoop_frame"]) for entry in blemu.log_entries() if "snoop_frame" in entry.fields]
    assert frames and frames == sorted(frames) and frames[-1] <= len(records)

    # btmon: the HCI side (ATT decoding may stop at btmon 5.66's crash, see btmon()).
    decoded = btmon(capture)
    for wanted in ("HCI Command: Reset", "LE Set Advertise Enable", "LE Connection Complete",
                   "ATT: Read By Group Type Request"):
        assert wanted in decoded or wanted.replace("LE Connection", "LE Enhanced Connection") in decoded, \
            f"btmon -r shows no '{wanted}'"
    # tshark (Wireshark): everything, ATT included.
    decoded = tshark(capture)
    for wanted in (r"Command Opcode: Reset \(0x0c03\)", r"Command Opcode: LE Set Advertise Enable \(0x200a\)",
                   r"Sub Event: LE (Enhanced )?Connection Complete", r"Opcode: Read Request \(0x0a\)",
                   r"Opcode: Read Response \(0x0b\)", r"Event Code: Disconnect Complete"):
        assert re.search(wanted, decoded), f"tshark -V shows nothing like '{wanted}'"


def test_rotation_keeps_files_bounded_and_each_decodes(rootcanal, tmp_path):
    capture = tmp_path / "rotating.btsnoop"
    # A previous run's capture: moved to .1 at start, then on as the run rotates.
    capture.write_bytes(BTSNOOP_HEADER + struct.pack(">IIIIq", 4, 4, 2, 0, BTSNOOP_UNIX_OFFSET_US) + b"\x01\x03\x0c\x00")
    limit = 4096
    blemu = start_advertising(BlemuProcess(rootcanal.controller_spec, unique_name(),
                                           extra_args=["--btsnoop", str(capture), "--btsnoop-max", "4K"]), rootcanal)
    try:
        async def scenario() -> None:
            async with connected(blemu, "rotation-reader", discover=True) as conn:
                characteristic = conn.characteristic(UUID_BODY_SENSOR_LOCATION)
                for _ in range(60):
                    await conn.read(characteristic)

        run(scenario())
    finally:
        status = blemu.stop()
    assert status == 0, blemu.log_tail()

    files = [capture] + [Path(f"{capture}.{n}") for n in (1, 2, 3)]
    for path in files:
        assert path.exists(), f"{path} missing after a run that wrote well over 4 × {limit} bytes"
        assert path.stat().st_size <= limit, f"{path}: {path.stat().st_size} bytes"
        records = read_btsnoop(path)
        assert records, f"{path} holds no record"
        btmon(path)
        shown = len(re.findall(r"^Frame \d+: ", tshark(path), re.MULTILINE))
        assert shown == len(records), f"tshark -r {path} shows {shown} of {len(records)} frames"
    assert not Path(f"{capture}.4").exists()
    # The frame numbers count across files: the last entry's is past what the newest file holds.
    frames = [int(entry.fields["snoop_frame"]) for entry in blemu.log_entries() if "snoop_frame" in entry.fields]
    assert frames[-1] > sum(len(read_btsnoop(path)) for path in files[:2])
    # Each rotation is logged with the frames of the file it closed: the last one says where PATH
    # starts, so the last frame number logged is inside PATH.
    rotated = [re.search(r"holds frames (\d+)-(\d+);", entry.message) for entry in blemu.log_entries()
               if entry.message.startswith("capture rotated: ")]
    assert len(rotated) >= 2 and all(rotated), blemu.log_tail()
    ranges = [(int(match.group(1)), int(match.group(2))) for match in rotated]
    assert ranges[0][0] == 1 and all(a[1] + 1 == b[0] for a, b in zip(ranges, ranges[1:])), ranges
    assert ranges[-1][1] - ranges[-1][0] + 1 == len(read_btsnoop(files[1])), "PATH.1 holds other frames than logged"
    assert ranges[-1][1] < frames[-1] <= ranges[-1][1] + len(read_btsnoop(capture))


def test_capture_command_line_errors(tmp_path):
    result = run_cli(["run", "heart-rate", "--controller", "tcp:127.0.0.1:1", "--btsnoop-max", "10M"])
    assert result.returncode == 64 and "--btsnoop-max needs --btsnoop" in result.stderr, result.describe()
    result = run_cli(["run", "heart-rate", "--controller", "tcp:127.0.0.1:1", "--btsnoop", str(tmp_path / "c"),
                      "--btsnoop-max", "1K"])
    assert result.returncode == 64 and "at least 4K" in result.stderr, result.describe()
    missing = tmp_path / "no-such-dir" / "c.btsnoop"
    result = run_cli(["run", "heart-rate", "--controller", "tcp:127.0.0.1:1", "--btsnoop", str(missing)])
    assert result.returncode == 1, result.describe()
    assert result.reason_lines and str(missing) in result.reason_lines[-1], result.describe()
