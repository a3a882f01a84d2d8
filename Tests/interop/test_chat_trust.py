"""`blemu chat` you can trust (Docs/CHAT.md, "Signed messages and names bound to keys" and
"Private rooms"): a hostile Bumble member that writes frames as it likes cannot speak as the
host or another member, make an announcement, change a signed line or silence a member; a
plain client is unverified in an open room and shown the door in a private one.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import stat
import struct
import time
from pathlib import Path

from bumble import att
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from bumble_central import Central, error_code_of
from harness import BlemuProcess, log_dir, run, run_cli, unique_name
from test_chat import CHAT_MESSAGE, CHAT_SERVICE, ChatProcess, start_line_of_three, wait_in_log
from bumble.core import UUID

CHAT_FRAMES = UUID("7d3c0301-9a5e-4d1a-8f6e-5c1b2d3e4f50")


def data_frame(number: int, sender: str, text: str, hops: int = 4) -> bytes:
    """DATA: the whole message in one frame (it fits at ATT_MTU 517)."""
    stream = sender.encode() + text.encode()
    return bytes([0x01]) + struct.pack("<IBBH", number, hops, len(sender.encode()), len(stream)) + stream


def signed_bytes(room: str, sender: str, number: int, text: bytes) -> bytes:
    return (b"blemu-chat-v1\x00" + bytes([len(room.encode())]) + room.encode() + bytes([len(sender.encode())])
            + sender.encode() + struct.pack("<I", number) + text)


def public_bytes(key: Ed25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def signed_frame(number: int, sender: str, text: str, *, key: bytes, signature: bytes, hops: int = 4) -> bytes:
    """SIGNED: public key, signature, sender, text in one frame."""
    stream = key + signature + sender.encode() + text.encode()
    return bytes([0x05]) + struct.pack("<IBBH", number, hops, len(sender.encode()), len(stream)) + stream


def signed_by(key: Ed25519PrivateKey, room: str, number: int, sender: str, text: str) -> bytes:
    return signed_frame(number, sender, text, key=public_bytes(key),
                        signature=key.sign(signed_bytes(room, sender, number, text.encode())))


def parse_signed(frame: bytes) -> tuple[int, str, str, bytes, bytes] | None:
    """A relayed SIGNED frame that is a whole message: number, sender, text, key, signature
    (a DATA frame, from a node that does not sign: empty key and signature)."""
    if len(frame) < 9 or frame[0] not in (0x01, 0x05):
        return None
    number, _hops, sender_length, total = struct.unpack("<IBBH", frame[1:9])
    stream = frame[9:]
    if len(stream) != total:
        return None
    if frame[0] == 0x01:
        return number, stream[:sender_length].decode(), stream[sender_length:].decode(), b"", b""
    key, signature = stream[:32], stream[32:96]
    sender = stream[96:96 + sender_length].decode()
    return number, sender, stream[96 + sender_length:].decode(), key, signature


async def write_quietly(conn, characteristic, value: bytes) -> None:
    """A write the host may refuse (ATT error): the attack goes on."""
    try:
        await conn.write(characteristic, value)
    except att.ATT_Error:
        pass


def test_a_hostile_member_cannot_forge_replay_or_silence(rootcanal):
    """Mallory, a Bumble central on Frames, forges the host (signed with her key, and
    unsigned), forges alice, forges an announcement, replays alice's signed frame with another
    text and number, and writes alice's next ten numbers (unsigned and signed with her key): the
    issue's suppression attack. Each is refused (an unsigned line shows only as `~NAME`); the
    host warns once per forged name; alice's honest lines all arrive at the host and at bob,
    once, in order."""
    room = unique_name("Trust")
    host = ChatProcess(rootcanal.controller_spec, "--name", room)
    members: list[ChatProcess] = []
    try:
        probe = BlemuProcess(rootcanal.controller_spec, room)   # only for its readiness scan
        probe.wait_advertising(rootcanal, alive=host.exited)
        alice = ChatProcess(rootcanal.controller_spec, "--role", "central", "--room", room, "--name", "alice")
        members.append(alice)
        bob = ChatProcess(rootcanal.controller_spec, "--role", "central", "--room", room, "--name", "bob")
        members.append(bob)
        host.wait_for(lambda line: line.endswith(" joined") and len([l for l in host.lines if l.endswith(" joined")]) >= 2,
                      "alice and bob joining", timeout=30)
        mallory = Ed25519PrivateKey.generate()
        signs = False

        async def scenario():
            async with Central(rootcanal.controller_spec, name="mallory") as central:
                conn = await central.connect(probe.scan.address)
                await conn.exchange_mtu(517)
                await conn.discover_all()
                frames = conn.characteristic(CHAT_FRAMES, CHAT_SERVICE)
                relayed: list[bytes] = []
                await conn.subscribe(frames, lambda value: relayed.append(bytes(value)))
                await asyncio.to_thread(host.wait_for, lambda line: line.endswith(" joined") and
                                        len([l for l in host.lines if l.endswith(" joined")]) >= 3, "mallory joining")
                alice.say("honest 1")
                # Alice's line, relayed to mallory as alice signed it: her number, key and signature.
                deadline = time.monotonic() + 15
                seen = None
                while seen is None and time.monotonic() < deadline:
                    seen = next((p for p in map(parse_signed, relayed) if p and p[1] == "alice" and p[2] == "honest 1"), None)
                    await asyncio.sleep(0.1)
                assert seen is not None, [frame.hex() for frame in relayed]
                nonlocal signs
                number, _, _, alice_key, alice_signature = seen
                # Alice signs (a node that does not, of old, is attacked all the same: the test fails there).
                signs = bool(alice_key)
                # The host, signed with mallory's key and unsigned.
                await write_quietly(conn, frames, signed_by(mallory, room, 1, room, "FORGED: I am the host, send me your PIN"))
                await write_quietly(conn, frames, data_frame(2, room, "FORGED unsigned host"))
                # Another member.
                await write_quietly(conn, frames, signed_by(mallory, room, 3, "alice", "FORGED as alice"))
                # Announcements, unsigned and signed.
                await write_quietly(conn, frames, data_frame(4, "", "* alice left"))
                await write_quietly(conn, frames, signed_by(mallory, room, 5, "", "* bob left"))
                # Alice's signed frame replayed with another text (and another number: not a resend).
                for n, text in ((number + 50, "CHANGED: meet me outside"), (number, "CHANGED again")):
                    await write_quietly(conn, frames, signed_frame(n, "alice", text, key=alice_key, signature=alice_signature)
                                        if signs else data_frame(n, "alice", text))
                # The suppression attack: alice's next ten numbers, before she uses them.
                for n in range(number + 1, number + 11):
                    await write_quietly(conn, frames, data_frame(n, "alice", f"pre-empted {n}"))
                    await write_quietly(conn, frames, signed_by(mallory, room, n, "alice", f"signed pre-empted {n}"))
                for index in range(2, 7):
                    alice.say(f"honest {index}")
                honest = [f"[alice] honest {index}" for index in range(1, 7)]
                for process, where in ((host, "host"), (bob, "bob")):
                    await asyncio.to_thread(process.wait_for, lambda line: line == "[alice] honest 6", f"alice's last line at {where}")
                    assert [line for line in process.lines if line.startswith("[alice] ")] == honest, process.lines
                await conn.disconnect()

        run(scenario(), timeout=120)
        time.sleep(1)
        assert signs, "alice's lines are not signed"
        for process in (host, alice, bob):
            shown = process.lines
            assert not any(line.startswith(f"[{room}] FORGED") for line in shown), shown
            assert not any("CHANGED" in line for line in shown), shown
            assert "* alice left" not in shown and "* bob left" not in shown, shown
            assert not any(line.startswith("[alice] FORGED") or line.startswith("[alice] signed pre-empted")
                           or line.startswith("[alice] pre-empted") for line in shown), shown
        # Unsigned lines are shown, unverified, never under the name a key holds.
        assert f"[~{room}] FORGED unsigned host" in host.lines, host.lines
        assert "[~alice] pre-empted" in " ".join(bob.lines), bob.lines
        # One warning line per forged name, at the host.
        for name in (room, "alice"):
            warnings = [line for line in host.lines if line.startswith(f"* someone tried to speak as {name}:")]
            assert len(warnings) == 1, host.lines
    finally:
        for member in members:
            member.stop()
        assert host.stop() == 0, Path(host.log).read_text()


def test_identity_prints_a_fingerprint_that_stays(tmp_path):
    """`--identity`: the name and the key's fingerprint, the key made on first use (0600) and
    the same on the next run; another state directory is another key."""
    state = tmp_path / "state"
    first = run_cli(["chat", "--identity", "--name", "alice", "--state-dir", str(state)])
    assert first.returncode == 0, first.stderr
    line, pin = first.stdout.strip().split("\n")
    name, *groups = line.split(" ")
    assert name == "alice" and len(groups) == 4 and all(len(g) == 4 and int(g, 16) >= 0 for g in groups), line
    assert stat.S_IMODE(os.stat(state / "chat-identity").st_mode) == 0o600
    again = run_cli(["chat", "--identity", "--name", "alice", "--state-dir", str(state)])
    assert again.stdout.strip() == first.stdout.strip()
    other = run_cli(["chat", "--identity", "--name", "alice", "--state-dir", str(tmp_path / "other")])
    assert other.stdout.strip() != first.stdout.strip() and other.stdout.startswith("alice ")
    # The second line is the whole public key, as another node's --pin-name takes it: its
    # fingerprint is the first line's (the first 8 bytes of SHA-256 of the key).
    pin_name, key = pin.split("=")
    assert pin_name == "alice" and len(key) == 64, pin
    assert hashlib.sha256(bytes.fromhex(key)).digest()[:8].hex() == "".join(groups), (line, pin)
    pinned = run_cli(["chat", "--state-dir", str(tmp_path / "bob"), "--room", "kitchen", "--pin-name", pin])
    assert pinned.returncode == 0 and " ".join(groups) in pinned.stdout, (pinned.stdout, pinned.stderr)


def test_forget_name_lets_a_new_key_speak(tmp_path):
    """A name bound to a key, forgotten from the command line (`--forget-name`), is free again;
    `--pin-name` binds it to a given key."""
    state = tmp_path / "state"
    key = public_bytes(Ed25519PrivateKey.generate()).hex()
    pinned = run_cli(["chat", "--state-dir", str(state), "--room", "kitchen", "--pin-name", f"alice={key}"])
    assert pinned.returncode == 0, pinned.stderr
    names = (state / f"chat-names-{'kitchen'.encode().hex()}").read_text()
    assert f"{'alice'.encode().hex()} {key}" in names, names
    forgot = run_cli(["chat", "--state-dir", str(state), "--room", "kitchen", "--forget-name", "alice"])
    assert forgot.returncode == 0, forgot.stderr
    assert key not in (state / f"chat-names-{'kitchen'.encode().hex()}").read_text()
    bad = run_cli(["chat", "--state-dir", str(state), "--room", "kitchen", "--pin-name", "alice=1234"])
    assert bad.returncode != 0 and "64 hex digits" in bad.stderr, bad.stderr


def test_a_member_without_room_signs_in_its_hosts_room(rootcanal):
    """The room's name is signed: a member started without --room learns it from the host it
    joins (`--name kitchen` on the host), so its lines verify there."""
    room = unique_name("Named")
    host = ChatProcess(rootcanal.controller_spec, "--name", room)
    member = None
    try:
        time.sleep(1)
        member = ChatProcess(rootcanal.controller_spec, "--role", "central", "--name", "board-2")
        member.say("said before joining")
        host.wait_for(lambda line: line == "[board-2] said before joining", "the member's first line")
        member.say("and after")
        host.wait_for(lambda line: line == "[board-2] and after", "the member's second line")
        host.say("from the host")
        member.wait_for(lambda line: line == f"[{room}] from the host", "the host's line at the member")
    finally:
        if member is not None:
            member.stop()
        assert host.stop() == 0, Path(host.log).read_text()


def plain_client(rootcanal, address, *, lines: list[str], wait_closed: bool):
    """The seed app through Bumble: subscribe to Message, write `lines`; what it was notified,
    and whether the host closed its link."""

    async def scenario():
        async with Central(rootcanal.controller_spec, name="seed-app") as central:
            conn = await central.connect(address)
            await conn.discover_all()
            message = conn.characteristic(CHAT_MESSAGE, CHAT_SERVICE)
            received: list[bytes] = []
            await conn.subscribe(message, lambda value: received.append(bytes(value)))
            await asyncio.sleep(0.5)
            for line in lines:
                await write_quietly(conn, message, line.encode())
                await asyncio.sleep(0.2)
            closed = False
            if wait_closed:
                try:
                    await conn.wait_disconnected(10)
                    closed = True
                except asyncio.TimeoutError:
                    closed = False
            else:
                await asyncio.sleep(1)
                await conn.disconnect()
            return b"".join(received).decode(errors="replace"), closed

    return run(scenario(), timeout=60)


def test_a_plain_client_is_unverified_in_an_open_room_and_shown_the_door_in_a_private_one(rootcanal, tmp_path):
    """Open room: the seed app names itself with `/name` and its lines show as `[~NAME]` at the
    host and a blemu member. Private room: the members with the passphrase chat (sealed), the
    seed app is told once that it cannot join and its link is closed."""
    room = unique_name("Open")
    host = ChatProcess(rootcanal.controller_spec, "--name", room)
    member = None
    try:
        probe = BlemuProcess(rootcanal.controller_spec, room)
        probe.wait_advertising(rootcanal, alive=host.exited)
        member = ChatProcess(rootcanal.controller_spec, "--role", "central", "--room", room, "--name", "board-2")
        host.wait_for(lambda line: line.endswith(" joined"), "the member joining")
        _, closed = plain_client(rootcanal, probe.scan.address, lines=["/name phone", "hello from the phone"], wait_closed=False)
        assert not closed
        host.wait_for(lambda line: line == "[~phone] hello from the phone", "the phone's line at the host")
        member.wait_for(lambda line: line == "[~phone] hello from the phone", "the phone's line at the member")
        assert not any(line.startswith("[phone]") for line in host.lines + member.lines)
    finally:
        if member is not None:
            member.stop()
        assert host.stop() == 0, Path(host.log).read_text()

    secret = tmp_path / "passphrase"
    secret.write_text("correct horse battery staple\n")
    room = unique_name("Private")
    host = ChatProcess(rootcanal.controller_spec, "--name", room, "--passphrase-file", str(secret))
    member = None
    try:
        probe = BlemuProcess(rootcanal.controller_spec, room)
        probe.wait_advertising(rootcanal, alive=host.exited)
        member = ChatProcess(rootcanal.controller_spec, "--role", "central", "--room", room, "--name", "board-2",
                             "--passphrase-file", str(secret))
        host.wait_for(lambda line: line.endswith(" joined"), "the member joining")
        member.say("a private line")
        host.wait_for(lambda line: line == "[board-2] a private line", "the sealed line, opened at the host")
        told, closed = plain_client(rootcanal, probe.scan.address, lines=["let me in"], wait_closed=True)
        assert told == "* this room is private: plain clients cannot join it", told
        assert closed, f"the plain client's link was not closed:\n{Path(host.log).read_text()}"
        assert not any("let me in" in line for line in host.lines + member.lines)
        assert not any("private line" in line for line in [told])
    finally:
        if member is not None:
            member.stop()
        assert host.stop() == 0, Path(host.log).read_text()


def test_a_member_with_another_passphrase_is_named_and_told_its_lines_cannot_be_read(rootcanal, tmp_path):
    """A member with the wrong passphrase: it hears, once, that the host's lines cannot be read
    there, and the host's lines never show there. When it talks, the host names it (once) and
    tells it that its own lines cannot be read; the host is never told it cannot read the room."""
    right, wrong = tmp_path / "right", tmp_path / "wrong"
    right.write_text("right\n")
    wrong.write_text("wrong\n")
    room = unique_name("Wrong")
    host = ChatProcess(rootcanal.controller_spec, "--name", room, "--passphrase-file", str(right))
    member = None
    try:
        time.sleep(1)
        member = ChatProcess(rootcanal.controller_spec, "--role", "central", "--room", room, "--name", "eve",
                             "--passphrase-file", str(wrong))
        host.wait_for(lambda line: line.endswith(" joined"), "eve joining")
        host.say("secret one")
        host.say("secret two")
        notice = f"* {room}'s lines cannot be read here: sealed with another passphrase than this node's"
        member.wait_for(lambda line: line == notice, "the notice naming the host")
        member.say("eve talks")
        member.say("eve talks again")
        host.wait_for(lambda line: line == "* eve's lines cannot be read here: sealed with another passphrase than this node's",
                      "the host naming eve")
        member.wait_for(lambda line: line == "* your lines cannot be read in this room: they are sealed with another passphrase than the host's",
                        "eve told her lines cannot be read")
        time.sleep(1)
        assert not any("secret" in line for line in member.lines), member.lines
        assert member.lines.count(notice) == 1, member.lines
        assert len([line for line in member.lines if line.startswith("* your lines cannot be read")]) == 1, member.lines
        assert len([line for line in host.lines if line.startswith("* eve's lines cannot be read")]) == 1, host.lines
        assert not any("cannot be read here: no passphrase" in line for line in host.lines), host.lines
    finally:
        if member is not None:
            member.stop()
        assert host.stop() == 0, Path(host.log).read_text()


def test_an_empty_passphrase_file_is_refused(tmp_path):
    empty = tmp_path / "empty"
    empty.write_text("\n")
    result = run_cli(["chat", "--controller", "tcp:127.0.0.1:1", "--passphrase-file", str(empty), "--state-dir", str(tmp_path)])
    assert result.returncode != 0 and "is empty" in result.stderr, result.stderr


def test_a_bridge_without_the_passphrase_relays_a_private_room_it_cannot_read(rootcanal, tmp_path):
    """Three boards in a line (two rootcanals, two places): left and right have the passphrase,
    the bridge between them has none. Their sealed lines cross the bridge unchanged and are
    read at the ends; the bridge says once that it cannot read them and shows none; its own
    lines (not sealed) are refused by the ends."""
    from rootcanal_server import RootCanal

    secret = tmp_path / "passphrase"
    secret.write_text("between the radios\n")
    far = RootCanal(log_path=log_dir() / f"rootcanal-{unique_name('far')}.log")
    far.start()
    room = unique_name("Sealed")
    near_spec, far_spec = rootcanal.controller_spec, far.controller_spec
    processes: list[ChatProcess] = []
    try:
        left, bridge, right = start_line_of_three(near_spec, far_spec, room, processes,
                                                  ends=("--passphrase-file", str(secret)))

        right.say("sealed from the right")
        left.wait_for(lambda line: line == "[right] sealed from the right", "right's line at left, through the bridge")
        left.say("sealed from the left")
        right.wait_for(lambda line: line == "[left] sealed from the left", "left's line at right, through the bridge")
        bridge.say("the middle cannot post")
        bridge.wait_for(lambda line: line.startswith("* this room is private and its lines cannot be read here"), "the bridge's notice")
        time.sleep(2)
        assert not any("sealed from" in line for line in bridge.lines), bridge.lines
        assert len([line for line in bridge.lines if "cannot be read here" in line]) == 1, bridge.lines
        assert not any("cannot post" in line for line in left.lines + right.lines), (left.lines, right.lines)
        for process in processes:
            assert process.process.poll() is None, Path(process.log).read_text()
    finally:
        for process in reversed(processes):
            process.stop()
        far.stop()


def test_a_signed_only_room_refuses_a_plain_client_and_takes_blemu_members(rootcanal):
    """`--signed-only`: the seed app's writes are refused (ATT error 0x13, said in the host's
    log) and show nowhere; a blemu member's signed lines arrive."""
    room = unique_name("Signed")
    host = ChatProcess(rootcanal.controller_spec, "--name", room, "--signed-only")
    member = None
    try:
        probe = BlemuProcess(rootcanal.controller_spec, room)
        probe.wait_advertising(rootcanal, alive=host.exited)
        member = ChatProcess(rootcanal.controller_spec, "--role", "central", "--room", room, "--name", "board-2")
        host.wait_for(lambda line: line.endswith(" joined"), "the member joining")
        refused: list[int] = []

        async def scenario():
            async with Central(rootcanal.controller_spec, name="seed-app") as central:
                conn = await central.connect(probe.scan.address)
                await conn.discover_all()
                message = conn.characteristic(CHAT_MESSAGE, CHAT_SERVICE)
                await conn.subscribe(message, lambda value: None)
                try:
                    await conn.write(message, b"unsigned hello")
                except att.ATT_Error as error:
                    refused.append(error.error_code)
                await conn.disconnect()

        run(scenario(), timeout=60)
        assert refused == [0x13], refused
        wait_in_log(host, "refused (ATT error 0x13): the room is signed-only", "the refusal in the host's log")
        member.say("signed hello")
        host.wait_for(lambda line: line == "[board-2] signed hello", "the member's signed line")
        assert not any("unsigned hello" in line for line in host.lines + member.lines)
    finally:
        if member is not None:
            member.stop()
        assert host.stop() == 0, Path(host.log).read_text()


ATT_INSUFFICIENT_AUTHENTICATION = 0x05
ATT_INSUFFICIENT_ENCRYPTION = 0x0F


def bond_files(state: Path, prefix: str) -> list[Path]:
    return sorted(path for path in state.glob(f"bonds-{prefix}*.json"))


def test_require_encryption_members_pair_on_their_own_and_keep_the_bond(rootcanal, tmp_path):
    """`--require-encryption`: a blemu member, refused for want of security, pairs on its own
    (Just Works), joins and chats; both keep the bond in their --state-dir; when the host
    restarts (its bonds read back from its --state-dir), the member joins again encrypting with
    the bond, without pairing again, and chats on."""
    room = unique_name("Enc")
    host_state, member_state = tmp_path / "host", tmp_path / "member"
    host = ChatProcess(rootcanal.controller_spec, "--name", room, "--require-encryption", "--state-dir", str(host_state))
    member = None
    try:
        time.sleep(1)
        member = ChatProcess(rootcanal.controller_spec, "--role", "central", "--room", room, "--name", "alice",
                             "--state-dir", str(member_state))
        host.wait_for(lambda line: line.endswith(" joined"), "the member joining", timeout=40)
        member.say("hello over an encrypted link")
        host.wait_for(lambda line: line == "[alice] hello over an encrypted link", "the member's line at the host")
        host.say("hello back")
        member.wait_for(lambda line: line == f"[{room}] hello back", "the host's line at the member")
        log = Path(member.log).read_text()
        assert "refused for want of security" in log and "paired with the chat host" in log, log
        assert "paired with " in Path(host.log).read_text(), Path(host.log).read_text()
        # The bonds, kept: the member's for the host, the host's for the member.
        member_bonds = bond_files(member_state, "chat-member-alice")
        host_bonds = bond_files(host_state, "chat-")
        assert len(member_bonds) == 1 and len(host_bonds) == 1, (list(member_state.iterdir()), list(host_state.iterdir()))
        for path in member_bonds + host_bonds:
            assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, path
            assert len(json.loads(path.read_text())["bonds"]) == 1, path.read_text()
        # The member's identity (Identity Address Information, Vol 3, Part H, 3.6.5) is the
        # address it connected from: its controller's public address, type public, not a
        # static random address it never uses.
        connected = re.findall(r"connected to ([0-9A-F]{2}(?::[0-9A-F]{2}){5})", Path(host.log).read_text())
        assert connected, Path(host.log).read_text()
        [bond] = json.loads(host_bonds[0].read_text())["bonds"]
        assert bond["peer"] == connected[-1] and not bond["peerRandom"], bond
        assert bond["identity"] == connected[-1] and bond["identityRandom"] is False, bond

        # The host restarts with its state directory: the member comes back with its bond.
        assert host.stop() == 0, Path(host.log).read_text()
        host = ChatProcess(rootcanal.controller_spec, "--name", room, "--require-encryption", "--state-dir", str(host_state))
        wait_in_log(member, "encrypted with our bond to the chat host", "the member encrypting with its bond", timeout=40)
        host.wait_for(lambda line: line.endswith(" joined"), "the member joining again", timeout=30)
        member.say("hello again")
        host.wait_for(lambda line: line == "[alice] hello again", "the member's line after the restart")
        assert Path(member.log).read_text().count("paired with the chat host") == 1, Path(member.log).read_text()
        assert "paired with " not in Path(host.log).read_text(), Path(host.log).read_text()

        # The member restarts with its state directory: its bond is read back, and (rootcanal
        # giving its new controller the address the old one had) it encrypts with it.
        member.stop()
        member = ChatProcess(rootcanal.controller_spec, "--role", "central", "--room", room, "--name", "alice",
                             "--state-dir", str(member_state))
        wait_in_log(member, "encrypted with our bond to the chat host", "the restarted member encrypting with its bond", timeout=40)
        member.say("hello after my restart")
        host.wait_for(lambda line: line == "[alice] hello after my restart", "the restarted member's line")
        assert "paired with" not in Path(member.log).read_text(), Path(member.log).read_text()
        assert "paired with " not in Path(host.log).read_text(), Path(host.log).read_text()
    finally:
        if member is not None:
            member.stop()
        assert host.stop() == 0, Path(host.log).read_text()


def test_require_encryption_refuses_a_plain_client_until_it_pairs(rootcanal, tmp_path):
    """A Bumble central (a phone) against a `--require-encryption` host: writing Message or
    Frames, or subscribing to either, is refused with Insufficient Authentication (0x05: no key
    yet, Vol 3, Part C, 10.3.1); once it pairs (Just Works), it subscribes and chats."""
    room = unique_name("EncSeed")
    host = ChatProcess(rootcanal.controller_spec, "--name", room, "--require-encryption", "--state-dir", str(tmp_path))
    try:
        probe = BlemuProcess(rootcanal.controller_spec, room)   # only for its readiness scan
        probe.wait_advertising(rootcanal, alive=host.exited)

        async def scenario():
            async with Central(rootcanal.controller_spec, name="phone") as central:
                from bumble.pairing import PairingConfig, PairingDelegate
                central.device.pairing_config_factory = lambda _connection: PairingConfig(
                    sc=True, mitm=False, bonding=True, delegate=PairingDelegate(PairingDelegate.NO_OUTPUT_NO_INPUT))
                conn = await central.connect(probe.scan.address)
                await conn.discover_all()
                message = conn.characteristic(CHAT_MESSAGE, CHAT_SERVICE)
                frames = conn.characteristic(CHAT_FRAMES, CHAT_SERVICE)
                received: list[bytes] = []
                for characteristic in (message, frames):
                    for attempt in (lambda c=characteristic: conn.write(c, b"hello in the clear"),
                                    lambda c=characteristic: conn.subscribe(c, lambda _value: None)):
                        try:
                            await attempt()
                        except att.ATT_Error as error:
                            assert error_code_of(error) == ATT_INSUFFICIENT_AUTHENTICATION, error
                        else:
                            raise AssertionError(f"{characteristic.uuid} took a request on an unencrypted link")
                await asyncio.sleep(0.5)
                assert not any(line.endswith(" joined") or "clear" in line for line in host.lines), host.lines
                await conn.connection.pair()
                assert conn.connection.is_encrypted
                await conn.subscribe(message, lambda value: received.append(bytes(value)))
                await conn.write(message, "hello, paired".encode())
                await asyncio.to_thread(host.wait_for, lambda line: line.endswith("] hello, paired"), "the paired phone's line")
                host.say("welcome")
                deadline = time.monotonic() + 10
                # At ATT_MTU 23 the line comes as two notifications.
                while b"".join(received) != f"{room}: welcome".encode() and time.monotonic() < deadline:
                    await asyncio.sleep(0.1)
                assert b"".join(received) == f"{room}: welcome".encode(), received
                await conn.disconnect()

        run(scenario(), timeout=60)
        assert not any("clear" in line for line in host.lines), host.lines
    finally:
        assert host.stop() == 0, Path(host.log).read_text()


def test_require_encryption_with_a_passkey_needs_an_authenticated_key(rootcanal, tmp_path):
    """`--require-encryption --passkey`: a member without the passkey cannot pair (Passkey Entry
    fails) and does not join; one with it pairs with an authenticated key and chats."""
    room = unique_name("EncPk")
    host = ChatProcess(rootcanal.controller_spec, "--name", room, "--require-encryption", "--passkey", "123456",
                       "--state-dir", str(tmp_path / "host"))
    members: list[ChatProcess] = []
    try:
        time.sleep(1)
        stranger = ChatProcess(rootcanal.controller_spec, "--role", "central", "--room", room, "--name", "eve",
                               "--state-dir", str(tmp_path / "eve"))
        members.append(stranger)
        wait_in_log(stranger, "securing the link to the chat host", "eve's pairing failing", timeout=40)
        assert not any(line.endswith(" joined") for line in host.lines), host.lines
        stranger.stop()
        time.sleep(3)   # the host makes a central that failed to pair wait 2 s (Vol 3, Part H, 2.3.6)
        member = ChatProcess(rootcanal.controller_spec, "--role", "central", "--room", room, "--name", "alice",
                             "--passkey", "123456", "--state-dir", str(tmp_path / "alice"))
        members.append(member)
        host.wait_for(lambda line: line.endswith(" joined"), "alice joining", timeout=40)
        member.say("typed the passkey")
        host.wait_for(lambda line: line == "[alice] typed the passkey", "alice's line")
        log = Path(member.log).read_text()
        assert "paired with the chat host" in log and "unauthenticated" not in log.split("paired with the chat host")[1].split("\n")[0], log
    finally:
        for process in members:
            process.stop()
        assert host.stop() == 0, Path(host.log).read_text()
