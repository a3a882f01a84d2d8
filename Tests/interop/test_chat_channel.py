"""`blemu chat` over the host's L2CAP chat channel (Docs/CHAT.md, "The chat channel").

Two blemu nodes chat over an LE credit based channel (the SPSM read from the chat service's
ABDD3056 characteristic), one frame a SDU; a member with `--transport gatt` (Frames) is in the
same room; a host without a channel is joined over GATT.
"""

from __future__ import annotations

import time
from pathlib import Path

from harness import unique_name
from test_chat import ChatProcess, lines_from, say_all, wait_for_all, wait_in_log

BURST = 1000


def test_a_channel_member_and_a_gatt_member_in_one_room(rootcanal):
    """The channel member's 1000-line burst reaches the host and the GATT member whole, in
    order, once; the GATT member's line reaches the channel member; the host's log shows the
    channel open, the members' logs which way each joined."""
    room = unique_name("Coc")
    host = ChatProcess(rootcanal.controller_spec, "--name", room)
    fast = slow = None
    try:
        time.sleep(1)
        fast = ChatProcess(rootcanal.controller_spec, "--role", "central", "--room", room, "--name", "fast")
        wait_in_log(fast, "on its chat channel (SPSM 0x00", "the channel member's join")
        wait_in_log(host, "chat channel 0x", "the channel open at the host")
        slow = ChatProcess(rootcanal.controller_spec, "--role", "central", "--room", room, "--name", "slow",
                           "--transport", "gatt")
        wait_in_log(slow, "joined chat room", "the GATT member's join")
        assert "chat channel" not in Path(slow.log).read_text()
        fast.wait_for(lambda line: line.endswith(" joined"), "the GATT member's join at the channel member")
        up = [f"up {index}" for index in range(BURST)]
        say_all(fast, up)
        wait_for_all(host, "fast", "up ", BURST, "the burst at the host", 30)
        wait_for_all(slow, "fast", "up ", BURST, "the burst at the GATT member", 30)
        assert lines_from(host, "fast", "up ") == [f"[fast] {line}" for line in up]
        assert lines_from(slow, "fast", "up ") == [f"[fast] {line}" for line in up]
        slow.say("from gatt")
        fast.wait_for(lambda line: line == "[slow] from gatt", "the GATT member's line at the channel member")
        host.say("from the host")
        fast.wait_for(lambda line: line == f"[{room}] from the host", "the host's line at the channel member")
        assert not any("missed" in line for line in fast.lines + slow.lines)
    finally:
        for member in (fast, slow):
            if member is not None:
                member.stop()
        assert host.stop() == 0, Path(host.log).read_text()


def test_a_host_without_a_channel_is_joined_over_gatt(rootcanal):
    """`--transport gatt` on the host publishes no channel: a member (auto) chats over Frames."""
    room = unique_name("NoCoc")
    host = ChatProcess(rootcanal.controller_spec, "--name", room, "--transport", "gatt")
    member = None
    try:
        time.sleep(1)
        member = ChatProcess(rootcanal.controller_spec, "--role", "central", "--room", room, "--name", "board-2")
        wait_in_log(member, "joined chat room", "the member's join")
        member.say("over gatt")
        host.wait_for(lambda line: line == "[board-2] over gatt", "the member's line at the host")
        assert "chat channel" not in Path(member.log).read_text() + Path(host.log).read_text()
    finally:
        if member is not None:
            member.stop()
        assert host.stop() == 0, Path(host.log).read_text()


def test_a_channel_needing_encryption_is_opened_after_pairing(rootcanal, tmp_path):
    """`--require-encryption`: the channel is refused (0x0008) until the member pairs; then it opens."""
    room = unique_name("EncCoc")
    host = ChatProcess(rootcanal.controller_spec, "--name", room, "--require-encryption", "--state-dir", str(tmp_path / "h"))
    member = None
    try:
        time.sleep(1)
        member = ChatProcess(rootcanal.controller_spec, "--role", "central", "--room", room, "--name", "board-2",
                             "--state-dir", str(tmp_path / "m"))
        wait_in_log(member, "refused for want of security (its chat channel refused: insufficient encryption)", "the channel's refusal")
        wait_in_log(member, "on its chat channel (SPSM 0x00", "the channel member's join")
        member.say("sealed link")
        host.wait_for(lambda line: line == "[board-2] sealed link", "the member's line at the host")
    finally:
        if member is not None:
            member.stop()
        assert host.stop() == 0, Path(host.log).read_text()
