#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (Fuzz/Corpus/<target>/), one small file per
scenario, from real PDUs written out below. Run it again after changing a target's input
format; scripts/fuzz only reads the files.

    python3 Fuzz/seeds.py

Handles are those of the databases the targets build: LengthRulesDevice for att-server (and
l2cap when its device byte is odd), heart-rate with GAP, GATT and Diagnostics otherwise.
"""
import hashlib
import pathlib
import struct

ROOT = pathlib.Path(__file__).resolve().parent / "Corpus"


def le16(v):
    return struct.pack("<H", v)


# --- ATT PDUs (Vol 3, Part F, 3.4) -------------------------------------------------------

def mtu(n):
    return b"\x02" + le16(n)


def find_info(start=1, end=0xFFFF):
    return b"\x04" + le16(start) + le16(end)


def find_by_type_value(start, end, type16, value):
    return b"\x06" + le16(start) + le16(end) + le16(type16) + bytes(value)


def read_by_type(start, end, type16):
    return b"\x08" + le16(start) + le16(end) + le16(type16)


def read_by_group(start=1, end=0xFFFF, type16=0x2800):
    return b"\x10" + le16(start) + le16(end) + le16(type16)


def read(h):
    return b"\x0A" + le16(h)


def read_blob(h, offset):
    return b"\x0C" + le16(h) + le16(offset)


def read_multiple(*handles):
    return b"\x0E" + b"".join(le16(h) for h in handles)


def read_multiple_variable(*handles):
    return b"\x20" + b"".join(le16(h) for h in handles)


def write(h, value):
    return b"\x12" + le16(h) + bytes(value)


def write_command(h, value):
    return b"\x52" + le16(h) + bytes(value)


def signed_write(h, value):
    return b"\xD2" + le16(h) + bytes(value) + bytes(range(12))


def prepare(h, offset, value):
    return b"\x16" + le16(h) + le16(offset) + bytes(value)


def execute(flag=1):
    return b"\x18" + bytes([flag])


CONFIRM = b"\x1E"

# LengthRulesDevice handles (see Fuzz/Sources/FuzzSupport/LengthRulesDevice.swift).
ONE, FOUR, FOUR_CCCD, FORTY, ZERO, TWENTY, BIG, BIG_CCCD, REFUSING, ENCRYPTED = 7, 9, 10, 14, 16, 18, 20, 21, 23, 25
CACHED, BATTERY, BATTERY_CCCD = 28, 30, 31
# heart-rate handles.
HR_MEASUREMENT, HR_CCCD, HR_LOCATION, HR_CONTROL = 0x14, 0x15, 0x17, 0x19
SERVICE_CHANGED_CCCD, CLIENT_FEATURES, DATABASE_HASH, BATTERY_LEVEL, BATTERY_LEVEL_CCCD = 0x0B, 0x0D, 0x0F, 0x29, 0x2A

DISCOVERY = [read_by_group(), read_by_group(0x0A), read_by_type(1, 0xFFFF, 0x2803), read_by_type(0x10, 0xFFFF, 0x2803),
             find_info(), find_info(0x1C), find_by_type_value(1, 0xFFFF, 0x2800, le16(0x180F)),
             read_by_group(1, 0xFFFF, 0x2801), read_by_type(1, 0xFFFF, 0x2802)]


# --- att-server: config byte, then records ----------------------------------------------

def att_records(config, *items):
    out = bytes([config])
    for item in items:
        if isinstance(item, tuple):  # a control record
            out += bytes(item)
        elif len(item) < 0xF0:
            out += bytes([len(item)]) + item
        else:
            out += b"\xF0" + le16(len(item)) + item
    return out


def typed_att(selector, *fields):
    """A typed ATT record of the whole-stack targets (FuzzSupport/TypedATT.swift): an opcode
    selector into 02 04 06 08 0A 0C 0E 10 12 52 D2 16 18 1E 20, then its field selectors."""
    return bytes([selector, *fields])


TYPED_ATT = [
    typed_att(7, 0, 0xFF, 0),              # Read By Group Type, handles 1-FFFF, primary services
    typed_att(3, 0, 0xFF, 3),              # Read By Type, characteristics
    typed_att(1, 0, 0xFF),                 # Find Information over everything
    typed_att(4, ONE - 1),                 # Read
    typed_att(5, BIG - 1, 20),             # Read Blob at 80
    typed_att(8, FOUR - 1, 4, 1, 2, 3, 4), # Write 4 bytes
    typed_att(11, TWENTY - 1, 0, 5, 1, 2, 3, 4, 5),   # Prepare Write
    typed_att(11, TWENTY - 1, 4, 10, *range(10)),     # Prepare Write at 16: past the maximum
    typed_att(12, 1),                      # Execute Write
    typed_att(6, 3, ONE - 1, FORTY - 1, TWENTY - 1),  # Read Multiple
    typed_att(14, 2, BIG - 1, TWENTY - 1), # Read Multiple Variable
    typed_att(0, 0x80, 0x00, 0x02),        # Exchange MTU 512
]


def att_server_seeds():
    return {
        "typed": bytes([0]) + b"".join(b"\xF8" + t for t in TYPED_ATT),
        "typed-mtu23": bytes([1]) + b"".join(b"\xF8" + t for t in TYPED_ATT[:5] + TYPED_ATT[6:9]),
        "discovery-mtu23": att_records(0, *DISCOVERY),
        "discovery-mtu517": att_records(0, mtu(517), *DISCOVERY),
        "reads": att_records(0, mtu(64), *[read(h) for h in range(1, 32)],
                             read_blob(FORTY, 0), read_blob(FORTY, 22), read_blob(FORTY, 40), read_blob(FORTY, 41),
                             read_blob(BIG, 0), read_blob(BIG, 61), read_blob(BIG, 300), read_blob(CACHED, 22),
                             read_blob(ONE, 1), read_blob(FOUR_CCCD, 0), read_blob(TWENTY, 3)),
        "long-read": att_records(0, read(BIG), *[read_blob(BIG, 22 * i) for i in range(1, 15)]),
        "writes": att_records(0, write(ONE, [7]), write(FOUR, [1, 2, 3, 4]), write(FORTY, range(40)), write(ZERO, []),
                              write(TWENTY, range(20)), write(TWENTY, [1]), write(BIG, range(19)),
                              write_command(ONE, [9]), write_command(TWENTY, [1, 2]), write_command(FORTY, range(40)),
                              signed_write(ONE, [5]), write(REFUSING, [0xEE]), write(REFUSING, [1]), read(REFUSING),
                              write(CACHED, [1]), write(ENCRYPTED, [1]), read(ENCRYPTED), write(ONE, [1, 2]),
                              write(FOUR, [1, 2, 3])),
        "mtu-then-long-writes": att_records(0, mtu(517), write(BIG, bytes(range(256)) + bytes(range(256))[:250])),
        "updates": att_records(0, write(FOUR_CCCD, [1, 0]), write(FOUR, [0xA5, 0, 0, 0]), write(FOUR_CCCD, [2, 0]),
                               write(FOUR, [0xA6, 0, 0, 0]), CONFIRM, write(FOUR, [0xA6, 1, 1, 1]),
                               (0xF4, 0), (0xF4, 0), (0xF4, 0), (0xF3, 0), write(BIG_CCCD, [1, 0]), (0xF3, 1),
                               write(BATTERY_CCCD, [1, 0]), (0xF3, 2), (0xF5,), (0xF3, 1), (0xF4, 0), (0xF5,),
                               CONFIRM, CONFIRM, (0xF1, 20), (0xF2,), read(ONE), write(FOUR_CCCD, [3, 0])),
        "prepared-writes": att_records(0, prepare(TWENTY, 0, range(10)), prepare(TWENTY, 10, range(10)), execute(1),
                                       read(TWENTY), prepare(BIG, 0, range(18)), prepare(BIG, 18, range(18)),
                                       prepare(BIG, 36, range(18)), execute(1), prepare(ONE, 0, [3]), execute(1),
                                       prepare(FOUR, 0, [1, 2, 3, 4]), prepare(FORTY, 0, range(18)),
                                       prepare(FORTY, 18, range(18)), prepare(FORTY, 36, range(4)), execute(1),
                                       prepare(ONE, 0, [4]), execute(0), prepare(FOUR_CCCD, 0, [1, 0]), execute(1),
                                       prepare(REFUSING, 0, [0xEE]), execute(1), execute(1)),
        "read-multiple": att_records(0, read_multiple(ONE, FOUR, CACHED), read_multiple_variable(ONE, FORTY, TWENTY, BIG),
                                     read_multiple(ONE, ENCRYPTED), read_multiple(ONE, 0x99), mtu(100),
                                     read_multiple_variable(BIG, BIG), read_multiple(FORTY, FORTY, FORTY)),
        "errors": att_records(3, read(0), read(0xFFFF), find_info(5, 2), find_info(0, 4), read_by_group(1, 0xFFFF, 0x2803),
                              b"\x3F\x01", b"\x3F", b"\x7F\x01", b"\x03\x17\x00", b"\x1B\x07\x00\x01", b"\x0A\x07",
                              write(ONE, range(30)), b"\x18\x05", b"\x02", mtu(10), mtu(517), mtu(23)),
    }


# --- l2cap: flags, sizes, device, then ops ------------------------------------------------

def connect(idx, central=False):
    return bytes([0, idx | (0x80 if central else 0)])


def disconnect(idx, reason=0x13):
    return bytes([1, idx, reason])


def frame(idx, payload, cid_sel=0, cid=None, fragment=None, lie=None, first00=False):
    a = idx | (cid_sel << 2)
    out = b""
    if cid_sel == 3:
        out += le16(cid)
    if fragment is not None:
        a |= 0x10
        out += bytes([fragment - 1])
    if lie is not None:
        a |= 0x20
        out += le16(lie)
    if len(payload) > 255:
        a |= 0x40
        out += le16(len(payload))
    else:
        out += bytes([len(payload)])
    if first00:
        a |= 0x80
    return bytes([2, a]) + out + bytes(payload)


def raw(idx, pb, data):
    return bytes([3, idx | (pb << 2), len(data)]) + bytes(data)


def clock(t):
    return bytes([4, t])


COMPLETE = bytes([5])
STOP = bytes([6])


def le_event(idx, kind, params):
    return bytes([7, idx, kind]) + bytes(params)


def l2cap(flags, sizes, device, *ops):
    return bytes([flags, sizes, device]) + b"".join(ops)


def signaling(code, ident, data):
    return bytes([code, ident]) + le16(len(data)) + bytes(data)


def l2cap_seeds():
    att = lambda p, idx=0, **kw: frame(idx, p, **kw)
    typed = b"".join(b"\xE0" + t for t in TYPED_ATT)
    return {
        "typed-length-rules": l2cap(0, 0x0C, 1, connect(0), typed, clock(200), COMPLETE, typed, disconnect(0)),
        # An SMP Pairing Request (Just Works, bonding, SC), Pairing Public Key, then the central
        # starts encryption with no key (the peripheral answers Negative Reply).
        "typed-smp-and-encryption": l2cap(0, 0x0C, 0, connect(0), b"\xE4\x00\x03\x00\x09\x10\x07\x07",
                                          b"\xE4\x0B" + bytes(range(64)), b"\xE8\x00\x00", COMPLETE,
                                          b"\xE8\x03\x34\x12\x00\x01\x01", clock(201), disconnect(0)),
        "length-rules-att": l2cap(0, 0x0C, 1, connect(0), att(mtu(517)), *[att(p) for p in DISCOVERY[:4]],
                                  att(write(FORTY, range(40)), fragment=9), att(read(BIG)), att(read_blob(BIG, 200)),
                                  att(prepare(TWENTY, 0, range(5))), att(execute(1)), att(write(FOUR_CCCD, [2, 0])),
                                  att(write(FOUR, [0xA6, 0, 0, 0])), clock(231), att(read(ONE)), disconnect(0)),
        "heart-rate-notify": l2cap(0x02, 0x04, 0, connect(0), att(write(HR_CCCD, [1, 0])), clock(150), clock(150),
                                   COMPLETE, att(write(HR_CONTROL, [1])), att(write(HR_CONTROL, [2])),
                                   att(write(BATTERY_LEVEL_CCCD, [1, 0])), att(write(SERVICE_CHANGED_CCCD, [2, 0])),
                                   clock(202), COMPLETE, clock(203), att(read(DATABASE_HASH)),
                                   att(write(CLIENT_FEATURES, [1])), STOP, clock(200)),
        "heart-rate-mtu": l2cap(0, 0x0F, 0, connect(0), att(mtu(247)), att(read_by_group()), att(read(0x2D)),
                                att(read_blob(0x2D, 100)), att(write(HR_CCCD, [1, 0])), clock(100), disconnect(0, 0x08),
                                clock(201)),
        "signaling": l2cap(0, 0x0C, 0, connect(0), clock(200), clock(100),
                           frame(0, signaling(0x13, 1, le16(0)), cid_sel=1),
                           frame(0, signaling(0x01, 2, le16(0)), cid_sel=1),
                           frame(0, signaling(0x12, 3, le16(24) + le16(40) + le16(0) + le16(400)), cid_sel=1),
                           frame(0, signaling(0x14, 4, le16(0x80) + le16(0x40) + le16(23) + le16(23) + le16(1)), cid_sel=1),
                           frame(0, signaling(0x17, 5, le16(0x80) + le16(64) + le16(64) + le16(1) + le16(0x40) + le16(0x41)), cid_sel=1),
                           frame(0, signaling(0x06, 6, le16(0x40) + le16(0x41)), cid_sel=1),
                           frame(0, signaling(0x06, 7, le16(0x40)), cid_sel=1),
                           frame(0, signaling(0x99, 8, b""), cid_sel=1), frame(0, b"\x12\x09\x05", cid_sel=1),
                           frame(0, signaling(0x01, 0, b""), cid_sel=1)),
        "smp": l2cap(0, 0x0C, 0, connect(0), frame(0, b"\x01\x03\x00\x01\x10\x07\x07", cid_sel=2),
                     frame(0, b"\x05\x05", cid_sel=2), frame(0, b"", cid_sel=2), frame(0, b"\x0B\x01", cid_sel=2),
                     frame(0, b"\x0F", cid_sel=2)),
        "reassembly": l2cap(0, 0x00, 1, connect(0), raw(0, 2, b"\x07\x00\x04\x00\x12"), clock(100),
                            raw(0, 1, le16(ONE) + b"\x05\x00"), raw(0, 1, b"\x01"), raw(0, 2, b"\x05\x00"), clock(201),
                            raw(0, 1, b"\x04\x00\x0A\x07\x00"), raw(0, 1, b"\x00"), raw(0, 0, b"\x03\x00\x04\x00\x0A\x07\x00"),
                            raw(0, 3, b"\x03\x00\x04\x00\x0A\x07\x00"), raw(0, 2, b"\x01"), raw(0, 2, b""),
                            frame(0, read(ONE), lie=0x0400), frame(0, read(ONE), lie=1),
                            frame(0, read(ONE), cid_sel=3, cid=0x0040), frame(1, read(ONE)),
                            frame(0, bytes(600), fragment=27), frame(0, read(ONE), fragment=1, first00=True)),
        "two-links": l2cap(0x02, 0x00, 1, connect(0), connect(1), frame(0, mtu(100)), frame(1, mtu(200)),
                           frame(0, write(BIG_CCCD, [1, 0])), frame(1, write(BIG_CCCD, [1, 0])),
                           frame(0, write(FOUR_CCCD, [1, 0])), frame(1, write(FOUR, [0xA5, 0, 0, 0])),
                           frame(0, read(BIG)), frame(1, read(BIG)), COMPLETE, disconnect(1), connect(1),
                           le_event(0, 0, [0, 24, 0, 0, 0, 0x90, 1]), le_event(0, 1, le16(6) + le16(12) + le16(0) + le16(100)),
                           le_event(0, 1, le16(1) + le16(1) + le16(600) + le16(1)), le_event(0, 2, le16(251) + le16(2120) * 3),
                           le_event(1, 3, [0, 2, 2]), le_event(1, 4, [0, 1]), le_event(1, 5, []), connect(2), disconnect(2),
                           connect(3, central=True)),
        "stop-with-links": l2cap(0, 0x0C, 0, connect(0), connect(1), frame(0, write(HR_CCCD, [1, 0])), clock(100),
                                 STOP, clock(201), connect(0)),
        "failing-controller": l2cap(0x11 | 0x20, 0x0C, 0, connect(0), clock(200), disconnect(0), clock(202)),
        # channel-echo (device byte 2): typed credit based signalling (0xEC) and K-frames (0xF0)
        # on handle 0: an LE channel to SPSM 0x0080 from CID 0x0040 (MTU 279, MPS 151, 10
        # credits), an SDU in one K-frame and one in two, credits, three enhanced channels,
        # a reconfiguration, a K-frame with a lying SDU length, then the LE channel disconnected.
        "channel-echo": l2cap(0, 0x0C, 2, connect(0),
                              b"\xEC\x00\x01\x00\x00\x20\x10\x0A\x00",
                              b"\xF0\x00\x01\x05" + b"hello", COMPLETE,
                              b"\xF0\x00\x03\x04" + bytes(4) + le16(10), b"\xF0\x00\x00\x06" + bytes(6), COMPLETE,
                              b"\xEC\x02\x02\x00\x00\x05",
                              b"\xEC\x03\x03\x00\x08\x08\x04\x00\x03\x01\x02\x03", COMPLETE,
                              b"\xEC\x05\x04\x20\x08\x01\x01",
                              b"\xF0\x01\x03\x04" + bytes(4) + le16(0xFFFF), COMPLETE,
                              b"\xEC\x07\x05\x00\x00", clock(200), COMPLETE, disconnect(0)),
    }


# --- h4-host: flags, sizes, chunk, step, then an H4 stream --------------------------------

PEER = bytes([0xF5, 0xF4, 0xF3, 0xF2, 0xF1, 0xF0])


def evt(code, params):
    return bytes([0x04, code, len(params)]) + bytes(params)


def acl(handle, pb, data):
    return bytes([0x02, handle & 0xFF, (handle >> 8) | (pb << 4)]) + le16(len(data)) + bytes(data)


def l2(cid, payload):
    return le16(len(payload)) + le16(cid) + bytes(payload)


def conn_complete(handle, role=1, enhanced=False):
    if enhanced:
        return evt(0x3E, [0x0A, 0x00] + list(le16(handle)) + [role, 0x01] + list(PEER) + [0] * 12 + [24, 0, 0, 0, 0x90, 1, 0])
    return evt(0x3E, [0x01, 0x00] + list(le16(handle)) + [role, 0x01] + list(PEER) + [24, 0, 0, 0, 0x90, 1, 0])


def command_complete(opcode, returned, credits=1):
    return evt(0x0E, [credits] + list(le16(opcode)) + list(returned))


def command_status(opcode, status=0):
    return evt(0x0F, [status, 1] + list(le16(opcode)))


def h4(flags, sizes, chunk, step, *parts):
    return bytes([flags, sizes, chunk, step]) + b"".join(parts)


def h4_typed_seeds():
    """Typed records (sizes bit 5): 0 + event selector + fields, 1 + typed ATT, 2 + typed SMP."""
    le_connection_complete = bytes([0, 6]) + bytes([0, 0, 0, 1, 1]) + PEER + bytes([24, 0, 0, 0, 0x90, 1, 0])
    disconnection = bytes([0, 0, 0, 0, 0, 0x13])
    atts = b"".join(b"\x01" + t for t in TYPED_ATT)
    return {
        "typed-session": h4(0, 0x2C, 0, 0, le_connection_complete, atts, b"\x02\x00\x03\x00\x09\x10\x07\x07",
                            bytes([0, 2, 0, 0, 0, 1, 0]), disconnection),
        "typed-events": h4(0x01, 0x2C, 5, 20, le_connection_complete, bytes([0, 0xF0, 5, 0, 0]),
                           bytes([0, 0xF1, 1, 0]), bytes([0, 9]) + bytes(12), bytes([0, 11]) + bytes([251, 0, 0x48, 8, 251, 0, 0x48, 8, 0, 0]),
                           bytes([0, 10]) + bytes([6, 0, 12, 0, 0, 0, 100, 0, 0, 0]), bytes([0, 12, 0, 0, 0, 2, 2]),
                           bytes([0, 0xF0, 7, 0x80, 0x0C, 0]), atts, disconnection),
    }


def h4_seeds():
    h = 0x0040
    a = lambda p: acl(h, 2, l2(4, p))
    session = [conn_complete(h), a(mtu(185)), a(read_by_group()), a(read(HR_LOCATION)), a(write(HR_CCCD, [1, 0])),
               evt(0x13, [1] + list(le16(h)) + [1, 0]), a(read_blob(0x2D, 10)),
               acl(h, 2, l2(4, write(HR_CONTROL, [1]))[:5]), acl(h, 1, l2(4, write(HR_CONTROL, [1]))[5:]),
               evt(0x05, [0] + list(le16(h)) + [0x13])]
    return {
        "session": h4(0, 0x0C, 0, 0, *session),
        "session-chunked": h4(0, 0x0C, 7, 21, *session),
        "session-bytewise": h4(0x02, 0x00, 1, 1, *session),
        "manual-commands": h4(0x01, 0x0C, 0, 20, conn_complete(h), command_complete(0x2022, [0] + list(le16(h))),
                              a(write(HR_CCCD, [1, 0])), evt(0x13, [1] + list(le16(h)) + [4, 0]),
                              evt(0x05, [0] + list(le16(h)) + [0x08]), command_complete(0x2006, [0]),
                              command_complete(0x2008, [0]), command_complete(0x2009, [0]), command_complete(0x200A, [0]),
                              command_complete(0x0000, [], credits=2), command_status(0x0406, 0x02)),
        "hardware-error": h4(0, 0x0C, 0, 40, conn_complete(h), a(mtu(100)), evt(0x10, [0x00]), evt(0x1A, [1]),
                             conn_complete(h, enhanced=True), a(read(HR_LOCATION))),
        "le-events": h4(0, 0x0C, 0, 5, conn_complete(h), evt(0x3E, [0x03, 0] + list(le16(h)) + [6, 0, 0, 0, 0x64, 0]),
                        evt(0x3E, [0x06] + list(le16(h)) + [6, 0, 12, 0, 0, 0, 100, 0]),
                        evt(0x3E, [0x06] + list(le16(h)) + [1, 0, 1, 0, 0xF4, 1, 1, 0]),
                        evt(0x3E, [0x07] + list(le16(h)) + [251, 0, 0x48, 8, 251, 0, 0x48, 8]),
                        evt(0x3E, [0x0C, 0] + list(le16(h)) + [2, 2]), evt(0x3E, [0x05] + list(le16(h)) + [0] * 10),
                        evt(0x3E, [0x02, 1, 0, 0] + list(PEER) + [3, 2, 1, 6, 0xC5]), evt(0x08, [0] + list(le16(h)) + [1]),
                        evt(0x3E, [0x99]), evt(0xFF, [1, 2, 3]), conn_complete(0x41, role=0)),
        "signaling-smp": h4(0, 0x0C, 0, 200, conn_complete(h), acl(h, 2, l2(5, signaling(0x13, 1, le16(0)))),
                            acl(h, 2, l2(5, signaling(0x14, 4, le16(0x80) + le16(0x40) + le16(23) + le16(23) + le16(1)))),
                            acl(h, 2, l2(6, b"\x01\x03\x00\x01\x10\x07\x07")), acl(h, 2, l2(0x41, b"\x00")),
                            acl(0x99, 2, l2(4, read(1)))),
        "framing-noise": h4(0, 0x0C, 3, 0, b"\x00\xFF\x07", evt(0x13, [1, 0x40, 0, 1]), b"\x04\x0E",
                            conn_complete(h), b"\x03\x40\x00\x01\x00", b"\x05\x40\x00\x01\x00\x00", a(read(1)),
                            acl(h, 2, b"")),
    }


# --- decoders: selector, then bytes --------------------------------------------------------

def decoder_seeds():
    hr_adv = bytes.fromhex("020106 05030D180F18 03194103 020AFC 0A09426C656D7520485221".replace(" ", ""))
    seeds = {
        "ad-structures": bytes([0]) + hr_adv + b"\x00\x00",
        "ad-content": bytes([1, len(hr_adv)]) + hr_adv + b"\x11\x07" + bytes(range(16)),
        "ad-build": bytes([2, 0x1F, 0x06]) + le16(0x0341) + b"\xFC\x05\x4C\x00\x01\x02\x03"
                    + bytes([0]) + le16(0x180D) + bytes([1]) + le16(0x1234) + le16(0x5678)
                    + bytes([2]) + bytes(range(16)) + "blemu Heart Rate ❤️ sensor".encode(),
        "hci-event-cc": bytes([3]) + evt(0x0E, [1, 0x03, 0x0C, 0])[1:],
        "hci-event-conn": bytes([3]) + conn_complete(0x40)[1:],
        "hci-event-enhanced": bytes([3]) + conn_complete(0x40, enhanced=True)[1:],
        "hci-event-report": bytes([3]) + evt(0x3E, [0x02, 1, 0, 0] + list(PEER) + [3, 2, 1, 6, 0xC5])[1:],
        "hci-event-nocp": bytes([3]) + evt(0x13, [2, 0x40, 0, 1, 0, 0x41, 0, 2, 0])[1:],
        "hci-event-ltk": bytes([3]) + evt(0x3E, [0x05, 0x40, 0] + [0] * 10)[1:],
        "acl": bytes([4]) + acl(0x40, 2, l2(4, read(1)))[1:],
        "hci-event-ext-report": bytes([3]) + evt(0x3E, [0x0D, 1, 0x13, 0, 1] + list(PEER) + [1, 0, 0xFF, 0x7F, 0xC4, 0, 0, 0]
                                                 + [0] * 6 + [3, 2, 1, 6])[1:],
        # Chat frames, each with its length first: "abc" from "x" as a DATA and a MORE, then an ACK.
        "chat-frames": bytes([10]) + bytes([12, 0x01, 1, 0, 0, 0, 4, 1, 4, 0]) + b"xab"
                       + bytes([4, 0x03, 3, 0]) + b"c" + bytes([5, 0x02, 1, 0, 0, 0]),
        "signaling": bytes([6]) + signaling(0x12, 1, le16(24) + le16(40) + le16(0) + le16(400)),
        "connection-parameters": bytes([7]) + le16(24) + le16(40) + le16(0) + le16(400),
        "h4-stream": bytes([8, 5]) + conn_complete(0x40) + acl(0x40, 2, l2(4, read(1))) + b"\x03\x01\x00\x00\x05\x01\x00\x00\x00",
        "heart-rate-measurement": bytes([9, 0x1E, 72, 0x10, 0x00, 0x41, 0x03, 0x42, 0x03]),
        # bumble-bench (Sources/Bench/BenchPacket.swift): a SEQUENCE (LAST, 4 payload bytes), an ACK, a RESET.
        "bench-sequence": bytes([11, 1, 0x01]) + struct.pack("<II", 7, 123456) + bytes(4),
        "bench-ack": bytes([11, 2, 0x01]) + struct.pack("<I", 7),
        "bench-reset": bytes([11, 0]),
        # Its stream (2-byte big-endian lengths), cut at 3 and 3 + 9: a RESET, a SEQUENCE, an
        # empty packet, an ACK, then half of a packet.
        "bench-stream": bytes([12, 3, 9]) + b"\x00\x01\x00" + b"\x00\x0e" + bytes([1, 0]) + struct.pack("<II", 1, 2) + bytes(4)
                        + b"\x00\x00" + b"\x00\x06" + bytes([2, 1]) + struct.pack("<I", 1) + b"\x00\x0a\x01",
    }
    att = [bytes.fromhex(h) for h in ["010A03000A", "02F700", "030502", "040100FFFF", "060100FFFF00280D18",
                                      "080100FFFF0328", "080100FFFF9ECADC240EE5A9E093F3A3B50100406E", "100100FFFF0028",
                                      "0A0300", "0C19001600", "0E03000600 0A00".replace(" ", ""), "2003000600",
                                      "120D000100", "520F00AABB", "D20F00AABB000102030405060708090A0B",
                                      "160F00120001020 3".replace(" ", ""), "1801", "1B0C000048", "1D0C000048", "1E",
                                      "0B626C656D75", "0D0102", "0907020002030000 2A05000A0600192A".replace(" ", ""),
                                      "110601000300001807001600 0D18".replace(" ", ""),
                                      "05010100002802000328", "05021900 9ECADC240EE5A9E093F3A3B50100406E".replace(" ", ""),
                                      "13"]]
    for i, pdu in enumerate(att):
        seeds[f"att-{i:02d}"] = bytes([5]) + pdu
    return seeds


# --- control: chunk size, line limit, then what a client sends (Docs/CONTROL.md) ----------

def control_seeds():
    lines = [
        '{"id":1,"cmd":"list"}',
        '  { "cmd" : "list" , "id" : 42 }  ',
        '{"id":2,"cmd":"set","device":"heart-rate","key":"bpm","value":"150"}',
        '{"id":3,"cmd":"set","device":"thermostat","key":"room","value":21.5}',
        '{"id":4,"cmd":"set","device":"lock","key":"jammed","value":true}',
        '{"id":5,"cmd":"set","device":"t","key":"outside","value":-5}',
        '{"id":6,"cmd":"disconnect","device":"heart-rate","reason":"0x15"}',
        '{"id":7,"cmd":"disconnect","device":"heart-rate#2"}',
        '{"id":8,"cmd":"advertise","device":"heart-rate","on":false}',
        '{"id":9,"cmd":"fault","device":"heart-rate","uuid":"2A19","action":"error","error":"0x80","count":2}',
        '{"id":10,"cmd":"fault","device":"heart-rate","uuid":"2A37","action":"drop"}',
        '{"id":11,"cmd":"fault","device":"heart-rate","uuid":"00002a37-0000-1000-8000-00805f9b34fb","action":"delay","ms":31000}',
        '{"id":12,"cmd":"fault","action":"clear"}',
        '{"id":13,"cmd":"fault","action":"clear","device":"lock"}',
    ]
    # Pairing answers and authorization (Docs/CONTROL.md), in the plain requests only.
    answers = [
        '{"id":14,"cmd":"pairing","device":"heart-rate","answer":"confirm"}',
        '{"id":15,"cmd":"pairing","device":"lock","answer":"reject"}',
        '{"id":16,"cmd":"authorize","device":"heart-rate","uuid":"2A38","answer":"allow"}',
        '{"id":17,"cmd":"authorize","device":"lock","uuid":"7d3c0203-9a5e-4d1a-8f6e-5c1b2d3e4f50","answer":"deny"}',
        '{"id":18,"cmd":"authorize","device":"thermostat","uuid":"2A6E","answer":"maybe"}',
    ]
    bad = ['{"id":-1,"cmd":"list"}', '{"id":1.5,"cmd":"list"}', '{"cmd":"list"}', '[1,2]', 'not json',
           '{"id":1,"cmd":"list","extra":1}', '{"id":9007199254740992,"cmd":"list"}', '{"id":1,"cmd":"nope"}',
           '{"id":1,"cmd":"set","device":"' + "x" * 300 + '","key":"k","value":"v"}', '2A37', '0x13']
    # scripts/fuzz runs this target with -max_len=512, which cuts longer seeds: the lines go
    # into seeds of at most 512 bytes.
    def groups(name, head, items, end):
        out, group = {}, []
        for item in (line.encode() for line in items):
            if group and len(head) + len(end.join(group + [item])) + len(end) > 512:
                out[f"{name}-{len(out) + 1}"] = head + end.join(group) + end
                group = []
            group.append(item)
        out[f"{name}-{len(out) + 1}"] = head + end.join(group) + end
        return out
    return {
        **groups("requests", bytes([0, 0]), lines + answers, b"\n"),
        **groups("requests-crlf-chunked", bytes([7, 0]), lines, b"\r\n"),
        **groups("refusals", bytes([0, 0]), bad, b"\n"),
        "line-too-long": bytes([16, 8]) + lines[2].encode() + b"\n" + b"{" * 40,
        "unfinished": bytes([3, 0]) + lines[0].encode() + b"\n" + lines[1].encode(),
    }


# --- gatt-client: config byte, then records -----------------------------------------------

def gatt_client_seeds():
    def proc(p, handle_index=0):
        return bytes([0xF0, p, handle_index])
    ALL = bytes([0xFF])
    WHOLE_WALK = 0xC0
    return {
        "discover-all": bytes([0]) + proc(0) + ALL + proc(10, 8) + ALL,
        "discover-all-mtu23": bytes([1]) + proc(0) + ALL,
        "by-uuid-and-reads": bytes([1]) + proc(1) + ALL + proc(2, 5) + ALL + proc(3, 5) + ALL + proc(4, 5) + ALL,
        "writes": bytes([1]) + proc(5, 7) + ALL + proc(6, 9) + ALL + proc(7, 9) + ALL + proc(9, 7) + ALL,
        "mtu-then-long-read": bytes([0]) + proc(8, 40) + ALL + proc(2, 30) + ALL,
        "queued-then-timeout": bytes([1]) + proc(0) + proc(2, 5) + proc(6, 9) + bytes([0xF1, 1, 0xF4]) + proc(2, 5),
        "corrupted": bytes([1]) + proc(0) + bytes([0xF1, 1, 0xF2, 2, 0x05]) + ALL + proc(7, 9) + bytes([0xF1, 1, 0xF2, 5, 0x01]) + ALL,
        "injected": bytes([1]) + proc(2, 5) + bytes([3, 0x0B, 1, 2, 5, 0x1D, 0x03, 0x00, 0x01, 0x02, 1, 0x13]) + ALL,
        "closed": bytes([1]) + proc(0) + proc(2, 5) + bytes([0xF1, 1, 0xF5]) + proc(2, 5),
        # Config bits 3-4 pick the database: 1 huge (3,000 characteristics in one service),
        # 2 deep (250 nested included services), 3 both. Bits 6 and 7 (WHOLE_WALK): the walk
        # goes to the end (Link.walkMoves); without them the link moves at most 512 PDUs
        # (Link.boundedMoves).
        "huge-discover-all": bytes([0x08 | WHOLE_WALK]) + proc(0) + ALL + proc(10) + ALL,
        "huge-discover-all-mtu64": bytes([0x0B]) + proc(0) + ALL,
        "huge-corrupted-midway": bytes([0x08]) + proc(0) + bytes([0xF1, 60, 0xF2, 3, 0x40]) + ALL,
        "huge-timeout-midway": bytes([0x0C]) + proc(0) + bytes([0xF1, 90, 0xF4]) + proc(0),
        "deep-discover-all": bytes([0x10 | WHOLE_WALK]) + proc(0) + ALL + proc(2, 7) + ALL,
        "deep-discover-all-mtu23": bytes([0x11]) + proc(0) + ALL,
        "deep-corrupted-include": bytes([0x11]) + proc(0) + bytes([0xF1, 3, 0xF2, 4, 0x01]) + ALL,
        "huge-and-deep": bytes([0x18 | WHOLE_WALK]) + proc(0) + ALL + proc(1) + ALL,
        # Config bit 5: a generated database, three bytes (GeneratedDatabase): shape a, shape b, gaps.
        "generated-200-services-chain": bytes([0x20 | WHOLE_WALK, 0x14, 0x07, 0x00]) + proc(0) + ALL + proc(10) + ALL,
        "generated-diamonds-with-gaps": bytes([0x21, 0x22, 0x0F, 0x89]) + proc(0) + ALL + proc(2, 40) + ALL,
        "generated-thousands-128bit": bytes([0x20 | WHOLE_WALK, 0x2B, 0x21, 0x00]) + proc(0) + ALL,
        "generated-secondary-fan-gaps": bytes([0x23, 0x1B, 0x4A, 0x92]) + proc(0) + ALL + proc(1) + ALL,
    }


# --- smp: two config bytes, then ops (op, direction, operands) -------------------------------

def smp_seeds():
    MOVE_ALL = bytes([0, 0, 0])
    START = bytes([9, 0])
    SC = 0x40 | 0x80
    BOND_ID = 0x01 | 0x02 | 0x20

    def io(initiator, responder):  # displayOnly 0, displayYesNo 1, keyboardOnly 2, noInputNoOutput 3, keyboardDisplay 4
        return initiator | responder << 3

    return {
        "sc-just-works": bytes([io(3, 3) | SC, BOND_ID]) + START + MOVE_ALL,
        "sc-numeric-comparison": bytes([io(1, 1) | SC, BOND_ID | 0x04]) + START + MOVE_ALL,
        "sc-passkey": bytes([io(2, 0) | SC, BOND_ID | 0x08]) + START + MOVE_ALL,
        "sc-passkey-both-type": bytes([io(2, 2) | SC, BOND_ID | 0x04]) + START + MOVE_ALL,
        "legacy-just-works": bytes([io(3, 3), BOND_ID]) + START + MOVE_ALL,
        "legacy-passkey": bytes([io(4, 0), BOND_ID | 0x08]) + START + MOVE_ALL,
        "legacy-key-size-7": bytes([io(3, 3), BOND_ID | 0x40]) + START + MOVE_ALL,
        "sc-only-against-legacy": bytes([io(3, 3) | 0x80, BOND_ID | 0x10]) + START + MOVE_ALL,
        "tampered-confirm": bytes([io(3, 3) | SC, BOND_ID]) + START + bytes([0, 0, 4, 1, 0, 3, 0xFF]) + MOVE_ALL,
        "wrong-passkey": bytes([io(2, 0) | SC, BOND_ID]) + START + bytes([0, 0, 4, 5, 0, 0]) + MOVE_ALL,
        "reflected-public-key": bytes([io(3, 3) | SC, BOND_ID]) + START + bytes([0, 0, 3, 4, 0, 2]) + MOVE_ALL,
        "security-request": bytes([io(3, 3) | SC, BOND_ID]) + bytes([11, 0, 0, 0, 1, 9, 1]) + MOVE_ALL,
        "timeout-midway": bytes([io(3, 3) | SC, BOND_ID]) + START + bytes([0, 0, 3, 7, 1]) + MOVE_ALL + START + MOVE_ALL,
        "injected-keys": bytes([io(3, 3), BOND_ID]) + START + MOVE_ALL + bytes([3, 0, 5]) + bytes(16)
                         + bytes([3, 1, 7]) + bytes(7) + bytes([10, 1]) + MOVE_ALL,
        "aborted-and-again": bytes([io(1, 1) | SC, BOND_ID]) + START + bytes([0, 0, 2, 8, 1, 3]) + MOVE_ALL
                             + START + MOVE_ALL,
    }


def chat_frames_seeds():
    """Typed operations on a chat room's host (Fuzz/Sources/chat-frames/Fuzz.swift): a config byte
    (bit 0 no trust, 1 signed-only, 2 private, 3 the host has no key, 4 and 5 real Ed25519 instead
    of the stand-in), then operations."""
    ED25519 = 0x30
    ALICE, BOB, CAROL, HOST, EMPTY, UNVERIFIED = 0, 1, 2, 3, 4, 5
    MTU23, MTU100, MTU517 = 0, 4, 7

    def connect(link, mtu=MTU23, plain=False):
        return bytes([0, link, mtu | (0x80 if plain else 0)])

    def raw(link, frame):
        return bytes([1, link, len(frame)]) + frame

    def plain(link, text):
        return bytes([2, link, len(text)]) + text

    def resume(link, sender, choice):
        return bytes([3, link, sender, choice])

    def drop(link):
        return bytes([4, link])

    def clock(t):
        return bytes([5, t])

    def signed(link, identity, sender, number, text, field=0):
        return bytes([6, link, identity, sender, number, len(text)]) + text + bytes([field])

    def host(text):
        return bytes([7, len(text)]) + text

    def full(link):
        return bytes([8, link])

    READY = bytes([9])

    def unsubscribe(link):
        return bytes([10, link])

    def pin(sender, identity):
        return bytes([11, sender, identity])

    def join(link):
        return bytes([12, link])

    def data(number, sender, text, kind=0x01, hops=4):
        stream = sender + text
        return bytes([kind]) + struct.pack("<IBBH", number, hops, len(sender), len(stream)) + stream

    members = connect(0) + connect(1, MTU100, plain=True) + connect(2, MTU517)
    seeds = {
        "two-members-chat": bytes([0]) + members + signed(0, 0, ALICE, 1, b"hello") + plain(1, b"hi there")
                            + host(b"welcome") + signed(2, 1, BOB, 1, b"bob here") + drop(1) + clock(10),
        "every-forgery": bytes([0]) + members + signed(0, 0, ALICE, 1, b"honest")
                         + b"".join(signed(2, 0, ALICE, 2 + f, b"forged line", f) for f in range(1, 8))
                         + signed(0, 0, HOST, 9, b"I am the host") + signed(0, 0, EMPTY, 10, b"* bob left"),
        "impersonation-and-pins": bytes([0]) + members + signed(0, 0, ALICE, 1, b"me") + signed(2, 1, ALICE, 2, b"also me")
                                  + pin(ALICE, 1) + signed(2, 1, ALICE, 3, b"pinned") + pin(ALICE, 9)
                                  + signed(0, 2, ALICE, 4, b"forgotten"),
        "resume-after-drop": bytes([0]) + members + signed(0, 0, ALICE, 1, b"one") + host(b"two") + drop(0)
                             + host(b"three") + plain(1, b"four") + resume(0, HOST, 0) + connect(0) + resume(0, ALICE, 0x81)
                             + connect(0) + drop(2) + connect(2, MTU517) + resume(2, ALICE, 0),
        "signed-only-room": bytes([0x02]) + members + plain(1, b"refused") + raw(0, data(1, b"alice", b"unsigned"))
                            + signed(0, 0, ALICE, 1, b"signed") + plain(1, b"/name mallory"),
        "private-room": bytes([0x04]) + members + signed(0, 0, ALICE, 1, b"sealed", 8) + signed(2, 1, BOB, 1, b"wrong room key", 9)
                        + signed(0, 0, ALICE, 2, b"in the clear") + host(b"a sealed host line"),
        "full-link-and-stall": bytes([0]) + members + full(0) + b"".join(host(bytes([0x61 + i]) * 40) for i in range(8))
                               + clock(0xFF) + host(b"after the stall") + READY + unsubscribe(2) + host(b"after"),
        "raw-frames": bytes([0]) + members + raw(0, data(7, b"board", b"x" * 20)[:20]) + raw(0, b"\x03\x0b\x00" + b"y" * 8)
                      + raw(0, b"\x03\x00\x00zz") + raw(0, data(8, b"", b"announce")) + raw(0, b"\x02\x01\x00\x00\x00alice")
                      + raw(0, b"\x05" + struct.pack("<IBBH", 1, 4, 5, 40) + bytes(20)) + raw(0, b"\x09junk") + raw(0, b"\x04\x01"),
        "plain-clients-named": bytes([0]) + members + plain(1, b"/name alice") + plain(1, b"as alice?") + connect(3, plain=True)
                               + plain(3, b"/name ~x") + plain(1, ("e" + "\u0301" * 14).encode()) + signed(0, 0, ALICE, 1, b"the real alice"),
        "no-trust-host-without-key": bytes([0x09]) + members + signed(0, 0, ALICE, 1, b"hi", 6) + host(b"unsigned host")
                                     + raw(2, data(3, b"carol", b"plain frame")),
        # JOIN is a chat channel's first frame; on Frames it is ignored, typed or raw, before
        # and after the link subscribed.
        "join-on-frames": bytes([0]) + join(3) + members + join(0) + raw(1, b"\x07") + raw(2, b"\x07\x00") + join(2)
                          + signed(0, 0, ALICE, 1, b"after the joins"),
        "long-signed-at-mtu-23": bytes([0]) + members + signed(0, 2, CAROL, 5, b"z" * 255) + signed(0, 2, CAROL, 5, b"z" * 255),
    }
    # The same with real Ed25519 (the others sign with the target's stand-in).
    for name in ("every-forgery", "private-room", "two-members-chat"):
        seeds[name + "-ed25519"] = bytes([seeds[name][0] | ED25519]) + seeds[name][1:]
    return seeds


def main():
    corpora = {"att-server": att_server_seeds(), "l2cap": l2cap_seeds(), "h4-host": {**h4_seeds(), **h4_typed_seeds()}, "decoders": decoder_seeds(),
               "control": control_seeds(), "gatt-client": gatt_client_seeds(), "smp": smp_seeds(),
               "chat-frames": chat_frames_seeds()}
    for target, seeds in corpora.items():
        folder = ROOT / target
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.glob("*"):
            old.unlink()
        for name, data in seeds.items():
            (folder / name).write_bytes(data)
        total = sum(len(d) for d in seeds.values())
        digest = hashlib.sha1(b"".join(seeds[k] for k in sorted(seeds))).hexdigest()[:12]
        print(f"{target}: {len(seeds)} seeds, {total} bytes ({digest})")


if __name__ == "__main__":
    main()
