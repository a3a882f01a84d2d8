"""`blemu chat`: a chat host and members in the seed app's plain protocol (Docs/CHAT.md).

A host (`--role peripheral`) and a member (`--role central`) on one rootcanal radio exchange
lines through their stdin and stdout; a Bumble central plays the seed app against the host.
"""

from __future__ import annotations

import asyncio
import subprocess
import threading
import time
from pathlib import Path

from bumble.core import UUID

from bumble_central import Central
from harness import BlemuProcess, blemu_binary, log_dir, run, run_cli, unique_name

CHAT_SERVICE = UUID("9f37e282-60b6-42b1-a02f-7341da5e2eba")
CHAT_MESSAGE = UUID("890aa912-c414-440d-88a2-c7f66179589b")


class ChatProcess:
    """One `blemu chat` with a stdin pipe and its stdout collected line by line."""

    def __init__(self, controller: str, *args: str):
        self.log = log_dir() / f"chat-{unique_name('c')}.log"
        self.errors = open(self.log, "wb")
        # Logs on stderr whatever the environment (`--log auto` picks the journal under systemd).
        self.process = subprocess.Popen([str(blemu_binary()), "chat", "--controller", controller, "--log", "stderr", *args],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.errors)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            self.lines.append(raw.decode(errors="replace").rstrip("\n"))

    def say(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write((line + "\n").encode())
        self.process.stdin.flush()

    def wait_for(self, predicate, what: str, timeout: float = 15.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if predicate(line):
                    return line
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"no {what} within {timeout:.0f} s; stdout: {self.lines}\nstderr:\n{Path(self.log).read_text()}")

    def exited(self) -> str | None:
        """None while running; otherwise why it is not (for a readiness scan's `alive`)."""
        status = self.process.poll()
        if status is None:
            return None
        return f"blemu chat exited with status {status}; stderr:\n{Path(self.log).read_text()}"

    def stop(self) -> int:
        self.process.terminate()
        try:
            status = self.process.wait(10)
        finally:
            self.errors.close()
        return status


def test_a_host_and_a_member_chat_both_ways(rootcanal):
    room = unique_name("Room")
    host = ChatProcess(rootcanal.controller_spec, "--name", room)
    member = None
    try:
        time.sleep(1)
        member = ChatProcess(rootcanal.controller_spec, "--role", "central", "--room", room, "--name", "board-2")
        host.wait_for(lambda line: line.endswith(" joined"), "join announcement")
        # Between blemu nodes the member signs its lines with its own name.
        name = "board-2"
        member.say("hello from the member")
        host.wait_for(lambda line: line == f"[{name}] hello from the member", "the member's line at the host")
        host.say("hello from the host")
        member.wait_for(lambda line: line == f"[{room}] hello from the host", "the host's line at the member")
        # A line longer than ATT_MTU - 3 goes whole (a long write) and arrives as one line.
        long_line = "x" * 400
        member.say(long_line)
        host.wait_for(lambda line: line == f"[{name}] {long_line}", "the long line at the host")
        # Many lines in a row arrive in order, none twice.
        for index in range(30):
            member.say(f"line {index}")
        host.wait_for(lambda line: line == f"[{name}] line 29", "the last of 30 lines")
        got = [line for line in host.lines if line.startswith(f"[{name}] line ")]
        assert got == [f"[{name}] line {index}" for index in range(30)], got
    finally:
        if member is not None:
            assert member.stop() in (0, 1)
        assert host.stop() == 0, Path(host.log).read_text()


def test_the_seed_apps_plain_protocol_against_the_host(rootcanal):
    """A Bumble central does what the seed app does: subscribe to Message, write UTF-8 text;
    it reads the host's lines as notifications of text, long ones cut between characters."""
    room = unique_name("Seed")
    host = ChatProcess(rootcanal.controller_spec, "--name", room)
    try:
        probe = BlemuProcess(rootcanal.controller_spec, room)   # only for its readiness scan
        probe.wait_advertising(rootcanal, alive=host.exited)

        async def scenario():
            async with Central(rootcanal.controller_spec, name="seed-app") as central:
                conn = await central.connect(probe.scan.address)
                await conn.discover_all()
                message = conn.characteristic(CHAT_MESSAGE, CHAT_SERVICE)
                received: list[bytes] = []
                await conn.subscribe(message, lambda value: received.append(bytes(value)))
                await asyncio.sleep(0.5)
                await conn.write(message, "héllo".encode())
                await asyncio.to_thread(host.wait_for, lambda line: line.endswith("] héllo"), "the seed app's line")
                text = "ü" * 30   # 60 bytes: more than ATT_MTU 23 - 3, so several notifications
                host.say(text)
                deadline = time.monotonic() + 10
                while b"".join(received).decode(errors="replace") != f"{room}: {text}" and time.monotonic() < deadline:
                    await asyncio.sleep(0.1)
                joined = b"".join(received).decode()
                assert joined == f"{room}: {text}", received
                assert all(len(part) <= 20 for part in received), [len(part) for part in received]
                for part in received:
                    part.decode()   # each notification is whole UTF-8 text on its own
                await conn.disconnect()
            await asyncio.to_thread(host.wait_for, lambda line: line.endswith(" left"), "the leave announcement")

        run(scenario(), timeout=60)
    finally:
        assert host.stop() == 0, Path(host.log).read_text()


def test_4_kib_messages_arrive_whole_at_mtu_23_and_517(rootcanal):
    """Between blemu nodes, on Frames: a 4 KiB line arrives whole, once, in both directions,
    whatever the ATT_MTU (23: some 270 frames; 517: a few)."""
    for mtu in ("23", "517"):
        room = unique_name("Big")
        host = ChatProcess(rootcanal.controller_spec, "--name", room)
        member = None
        try:
            time.sleep(1)
            member = ChatProcess(rootcanal.controller_spec, "--role", "central", "--room", room, "--name", "board-2", "--mtu", mtu)
            host.wait_for(lambda line: line.endswith(" joined"), "join announcement")
            upstream = ("up" + mtu + "-") * 4096
            upstream = upstream[:4096]
            member.say(upstream)
            host.wait_for(lambda line: line == f"[board-2] {upstream}", f"the 4 KiB line at the host (MTU {mtu})", timeout=60)
            downstream = ("dn" + mtu + "-") * 4096
            downstream = downstream[:4096]
            host.say(downstream)
            member.wait_for(lambda line: line == f"[{room}] {downstream}", f"the 4 KiB line at the member (MTU {mtu})", timeout=60)
            assert sum(1 for line in host.lines if line.startswith("[board-2] ")) == 1, "delivered more than once"
        finally:
            if member is not None:
                member.stop()
            assert host.stop() == 0, Path(host.log).read_text()


def test_a_member_rejoins_a_host_that_came_back_and_loses_nothing(rootcanal):
    """The host goes away (its link drops) and comes back under the same name: the member finds
    it again on its own; what was typed meanwhile arrives after the reconnection, in order, once."""
    room = unique_name("Back")
    host = ChatProcess(rootcanal.controller_spec, "--name", room)
    member = None
    second = None
    try:
        time.sleep(1)
        member = ChatProcess(rootcanal.controller_spec, "--role", "central", "--room", room, "--name", "board-2")
        host.wait_for(lambda line: line.endswith(" joined"), "join announcement")
        member.say("before")
        host.wait_for(lambda line: line == "[board-2] before", "the first line")
        assert host.stop() == 0
        for index in range(5):
            member.say(f"meanwhile {index}")
        time.sleep(2)
        second = ChatProcess(rootcanal.controller_spec, "--name", room)
        second.wait_for(lambda line: line == "[board-2] meanwhile 4", "the lines typed while the host was away", timeout=40)
        got = [line for line in second.lines if line.startswith("[board-2] ")]
        assert got == [f"[board-2] meanwhile {index}" for index in range(5)], got
        assert member.process.poll() is None, "the member gave up"
    finally:
        if member is not None:
            member.stop()
        if second is not None:
            assert second.stop() == 0, Path(second.log).read_text()


def test_two_autos_started_together_end_in_one_room(rootcanal):
    """`--role auto` on two nodes at the same moment, ten times over (ten rooms at once, each
    pair on a radio of its own): in each room one hosts and the other joins (or, if both
    hosted, they merge), and each hears the other.

    A radio each, not ten rooms on one: rootcanal's scanner keeps one scan request pending
    and sends the next to whichever advertiser its fixed order reaches first, so with ten or
    more hosts advertising every 20 ms on one radio a host can be starved of scan requests for
    good and its name (in the scan response) never heard: the two hosts of a pair stayed
    apart (its log: `Not sending LE Scan request to advertising address ... because an LE Scan
    request is already pending`, every time, for the one host). A controller's backoff
    (Core Vol 6, Part B, 4.4.3.2) skips a random number of scan request opportunities, so no
    advertiser in range is passed over for good."""
    from rootcanal_server import RootCanal

    pairs = []
    radios = []
    try:
        for attempt in range(10):
            radio = rootcanal
            if attempt > 0:
                radio = RootCanal(log_path=log_dir() / f"rootcanal-{unique_name('auto')}.log")
                radios.append(radio)
                radio.start()
            room = unique_name("Auto")
            a = ChatProcess(radio.controller_spec, "--role", "auto", "--room", room, "--name", f"a{attempt}")
            b = ChatProcess(radio.controller_spec, "--role", "auto", "--room", room, "--name", f"b{attempt}")
            pairs.append((attempt, a, b))
        # Whoever hosts announces the other's joining; then lines go both ways. Two hosts of a
        # room meet within a look (3 s every 10 to 20 s), so a pair may take a while to merge.
        deadline = time.monotonic() + 90
        waiting = list(pairs)
        while waiting and time.monotonic() < deadline:
            for attempt, a, b in waiting:
                a.say(f"ping from a {attempt}")
                b.say(f"ping from b {attempt}")
            time.sleep(1)
            waiting = [(attempt, a, b) for attempt, a, b in waiting
                       if not (any(f"[b{attempt}] ping from b" in line for line in a.lines)
                               and any(f"[a{attempt}] ping from a" in line for line in b.lines))]
        for attempt, a, b in waiting:
            a.wait_for(lambda line, n=attempt: line.startswith(f"[b{n}] ping from b"), f"b's line at a (pair {attempt})", timeout=1)
            b.wait_for(lambda line, n=attempt: line.startswith(f"[a{n}] ping from a"), f"a's line at b (pair {attempt})", timeout=1)
        for attempt, a, b in pairs:
            hosting = sum("hosting chat room" in Path(p.log).read_text() and "joining it" not in Path(p.log).read_text() for p in (a, b))
            assert hosting == 1, f"pair {attempt}: {hosting} hosts\n{Path(a.log).read_text()}\n{Path(b.log).read_text()}"
    finally:
        for _, a, b in pairs:
            a.stop()
            b.stop()
        for radio in radios:
            radio.stop()


def static_random(seed: str) -> int:
    """blemu's address for a seed (BluetoothAddress.staticRandom: FNV-1a 64, folded, top bits set)."""
    value = 0xCBF29CE484222325
    for byte in seed.encode():
        value ^= byte
        value = (value * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    random = (value ^ (value >> 48)) & 0x3FFFFFFFFFFF
    if random in (0, 0x3FFFFFFFFFFF):
        random = 0x123456789ABC
    return random | 0xC00000000000


def test_two_hosts_of_one_room_merge(rootcanal):
    """An auto node hosting its room meets a second host of it with a lower address: it gives
    way and joins that one, so the room is one again."""
    room = unique_name("Merge")
    other = static_random(f"blemu/chat/{room}")
    name = next(f"n{index}" for index in range(1000) if static_random(f"blemu/chat/{room}/n{index}") > other)
    auto = ChatProcess(rootcanal.controller_spec, "--role", "auto", "--room", room, "--name", name)
    host = None
    try:
        deadline = time.monotonic() + 20
        while "hosting chat room" not in Path(auto.log).read_text():
            assert time.monotonic() < deadline and auto.process.poll() is None, Path(auto.log).read_text()
            time.sleep(0.2)
        host = ChatProcess(rootcanal.controller_spec, "--name", room)
        deadline = time.monotonic() + 30
        while "joining it" not in Path(auto.log).read_text():
            assert time.monotonic() < deadline, f"the auto node did not give way:\n{Path(auto.log).read_text()}"
            time.sleep(0.2)
        host.wait_for(lambda line: line.endswith(" joined"), "the auto node joining the other host", timeout=20)
        auto.say("one room again")
        host.wait_for(lambda line: line == f"[{name}] one room again", "the auto node's line at the remaining host")
    finally:
        auto.stop()
        if host is not None:
            assert host.stop() == 0, Path(host.log).read_text()


def test_a_member_takes_over_when_the_host_is_gone(rootcanal):
    """auto: the host goes away for good; its member, not finding it again, hosts the room
    itself, and what it was given meanwhile is said there."""
    room = unique_name("Take")
    first = ChatProcess(rootcanal.controller_spec, "--role", "auto", "--room", room, "--name", "first")
    second = None
    third = None
    try:
        deadline = time.monotonic() + 20
        while "hosting chat room" not in Path(first.log).read_text():
            assert time.monotonic() < deadline, Path(first.log).read_text()
            time.sleep(0.2)
        second = ChatProcess(rootcanal.controller_spec, "--role", "auto", "--room", room, "--name", "second")
        first.wait_for(lambda line: line.endswith(" joined"), "the second node joining")
        first.stop()
        second.say("still here")
        deadline = time.monotonic() + 30
        while "taking over" not in Path(second.log).read_text():
            assert time.monotonic() < deadline and second.process.poll() is None, Path(second.log).read_text()
            time.sleep(0.2)
        third = ChatProcess(rootcanal.controller_spec, "--role", "central", "--room", room, "--name", "third")
        second.wait_for(lambda line: line.endswith(" joined"), "a new member at the new host", timeout=20)
        third.say("hello new host")
        second.wait_for(lambda line: line == "[third] hello new host", "the new member's line")
        assert "[second] still here" in second.lines, second.lines
    finally:
        for process in (third, second):
            if process is not None:
                process.stop()


class PlainChatPeripheral:
    """A Bumble peripheral serving the seed app's chat service (what the app does as the
    peripheral): Message (write, notify); what it is written it keeps, and it notifies lines.
    `with_message=False`: a bad room host, advertising the chat service and the room's name
    but serving another characteristic in place of Message."""

    def __init__(self, controller: str, name: str, with_message: bool = True, address: str = "F0:F1:F2:F3:F4:F6"):
        self.controller = controller
        self.name = name
        self.with_message = with_message
        self.address = address
        self.written: list[str] = []
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.subscribed = threading.Event()
        self.stopping: asyncio.Event | None = None
        self.device = None
        self.message = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self._main())
        except BaseException as error:  # reported by start()
            self.error = error

    error: BaseException | None = None

    async def _main(self) -> None:
        from bumble import gatt
        from bumble.core import AdvertisingData
        from bumble.device import Device
        from bumble.transport import open_transport

        from bumble_central import bumble_transport_spec

        self.stopping = asyncio.Event()
        async with await open_transport(bumble_transport_spec(self.controller)) as (source, sink):
            device = Device.with_hci(self.name, self.address, source, sink)
            self.message = gatt.Characteristic(
                str(CHAT_MESSAGE) if self.with_message else "7d3c03ff-9a5e-4d1a-8f6e-5c1b2d3e4f50",
                gatt.Characteristic.Properties.WRITE | gatt.Characteristic.Properties.NOTIFY,
                gatt.Characteristic.WRITEABLE,
                gatt.CharacteristicValue(write=lambda _, value: self.written.append(bytes(value).decode())))
            device.add_service(gatt.Service(str(CHAT_SERVICE), [self.message]))
            device.on("characteristic_subscription", lambda *args: self.subscribed.set())
            device.advertising_data = bytes(AdvertisingData([
                (AdvertisingData.FLAGS, bytes([0x06])),
                (AdvertisingData.COMPLETE_LIST_OF_128_BIT_SERVICE_CLASS_UUIDS, bytes(CHAT_SERVICE.to_bytes())),
            ]))
            device.scan_response_data = bytes(AdvertisingData([(AdvertisingData.COMPLETE_LOCAL_NAME, self.name.encode())]))
            self.device = device
            await device.power_on()
            await device.start_advertising(auto_restart=True)
            self.ready.set()
            await self.stopping.wait()

    def start(self) -> "PlainChatPeripheral":
        self.thread.start()
        assert self.ready.wait(20), f"the Bumble chat peripheral did not start: {self.error!r}"
        return self

    def notify(self, text: str) -> None:
        async def send():
            await self.device.notify_subscribers(self.message, text.encode())
        asyncio.run_coroutine_threadsafe(send(), self.loop).result(10)

    def stop(self) -> None:
        if self.stopping is not None:
            self.loop.call_soon_threadsafe(self.stopping.set)
        self.thread.join(10)


def test_blemus_member_chats_with_a_plain_peripheral(rootcanal):
    """blemu's central against a chat host that speaks only the plain protocol (Bumble, as the
    seed app does): lines go as writes of text, notifications come back as lines."""
    name = unique_name("Plain")
    peripheral = PlainChatPeripheral(rootcanal.controller_spec, name).start()
    member = ChatProcess(rootcanal.controller_spec, "--role", "central", "--room", name, "--name", "board-2")
    try:
        assert peripheral.subscribed.wait(20), f"blemu never subscribed:\n{Path(member.log).read_text()}"
        member.say("hello plain world")
        deadline = time.monotonic() + 10
        while "hello plain world" not in peripheral.written and time.monotonic() < deadline:
            time.sleep(0.1)
        assert peripheral.written == ["hello plain world"], peripheral.written
        peripheral.notify("alice: hi there")
        # A plain host signs nothing: its lines are unverified (Docs/CHAT.md, "Signed messages").
        member.wait_for(lambda line: line == "[~alice] hi there", "the peripheral's line at blemu")
    finally:
        member.stop()
        peripheral.stop()


def test_a_room_host_without_a_message_characteristic_is_set_aside_by_a_member(rootcanal):
    """One advertisement from anyone in range must not end a member: a peripheral advertising
    the chat service and the room's name with no Message characteristic is passed over (logged
    once), and the member goes on looking and joins the room's real host when it comes."""
    room = unique_name("Bad")
    bad = PlainChatPeripheral(rootcanal.controller_spec, room, with_message=False).start()
    member = ChatProcess(rootcanal.controller_spec, "--role", "central", "--room", room, "--name", "board-2")
    host = None
    try:
        wait_in_log(member, "passed over for 60 s", "the bad host set aside")
        time.sleep(3)
        assert member.process.poll() is None, Path(member.log).read_text()
        assert Path(member.log).read_text().count("passed over") == 1, Path(member.log).read_text()
        host = ChatProcess(rootcanal.controller_spec, "--name", room)
        host.wait_for(lambda line: line.endswith(" joined"), "the member joining the good host", timeout=30)
        member.say("found you")
        host.wait_for(lambda line: line == "[board-2] found you", "the member's line at the good host")
    finally:
        if host is not None:
            host.stop()
        assert member.stop() == 0, Path(member.log).read_text()
        bad.stop()


def test_an_auto_node_hosts_the_room_itself_when_the_only_host_is_bad(rootcanal):
    room = unique_name("Bad")
    bad = PlainChatPeripheral(rootcanal.controller_spec, room, with_message=False).start()
    auto = ChatProcess(rootcanal.controller_spec, "--role", "auto", "--room", room, "--name", "board-3")
    try:
        wait_in_log(auto, "passed over for 60 s", "the bad host set aside")
        wait_in_log(auto, f"hosting chat room '{room}'", "the auto node hosting the room", timeout=30)
        # It is a host others can join.
        member = ChatProcess(rootcanal.controller_spec, "--role", "central", "--room", room, "--name", "board-4")
        try:
            auto.wait_for(lambda line: line.endswith(" joined"), "a member joining the auto node", timeout=30)
        finally:
            member.stop()
        assert auto.process.poll() is None
    finally:
        assert auto.stop() == 0, Path(auto.log).read_text()
        bad.stop()


HOSTILE_NAME_TAIL = "\x1b]0;pwned\x07\u202e"
HOSTILE_TEXT = "\x1b[2Jcleared\ralice: faked\u202egnp.exe"
SHOWN_TEXT = "\\x1b[2Jcleared\\x0dalice: faked\\u202egnp.exe"


def test_a_peers_name_and_text_are_shown_visible_never_obeyed(rootcanal):
    """ESC, BEL, CR and U+202E from a peer — in its advertised name and its chat text — reach
    neither blemu's stdout nor its stderr raw: they are shown as escapes, one line each."""
    room = unique_name("Esc")
    peripheral = PlainChatPeripheral(rootcanal.controller_spec, room + HOSTILE_NAME_TAIL).start()
    member = ChatProcess(rootcanal.controller_spec, "--role", "central", "--room", room, "--name", "board-2")
    try:
        assert peripheral.subscribed.wait(30), f"blemu never subscribed:\n{Path(member.log).read_text()}"
        peripheral.notify("mallory\x1b[31m: " + HOSTILE_TEXT)
        line = member.wait_for(lambda line: "faked" in line, "the hostile line")
        assert line == "[~mallory\\x1b[31m] " + SHOWN_TEXT, line   # unverified: a plain host signs nothing
        assert not any("\x1b" in line or "\r" in line or "\u202e" in line for line in member.lines), member.lines
    finally:
        member.stop()
        peripheral.stop()
    errors = Path(member.log).read_bytes()
    assert b"\x1b" not in errors and b"\x07" not in errors and "\u202e".encode() not in errors, errors
    assert f"joined chat room '{room}\\x1b]0;pwned\\x07\\u202e'".encode() in errors, errors


def test_scan_and_gatt_dump_show_a_hostile_name_visible(rootcanal):
    room = unique_name("Esc")
    peripheral = PlainChatPeripheral(rootcanal.controller_spec, room + HOSTILE_NAME_TAIL).start()
    shown = f"{room}\\x1b]0;pwned\\x07\\u202e"
    try:
        scan = run_cli(["scan", "--controller", rootcanal.controller_spec, "--timeout", "4", "--name", room], timeout=30)
        assert scan.returncode == 0, scan.describe()
        assert f'"{shown}"' in scan.stdout, scan.describe()
        dump = run_cli(["gatt", "--controller", rootcanal.controller_spec, "--name", room, "dump"], timeout=40)
        assert dump.returncode == 0, dump.describe()
        assert f'"{shown}"' in dump.stdout.splitlines()[0], dump.describe()
        for result in (scan, dump):
            assert "\x1b" not in result.stdout + result.stderr and "\u202e" not in result.stdout + result.stderr, result.describe()
    finally:
        peripheral.stop()


def test_exit_on_eof_ends_a_piped_burst_once_every_line_is_delivered(rootcanal):
    """`seq 1 40 | blemu chat --role central --exit-on-eof`: every line reaches the host, then
    the member exits 0 by itself; without the flag a node whose stdin ended keeps running."""
    room = unique_name("Eof")
    host = ChatProcess(rootcanal.controller_spec, "--name", room)
    try:
        time.sleep(1)
        burst = "".join(f"burst {index}\n" for index in range(40))
        member = subprocess.run([str(blemu_binary()), "chat", "--controller", rootcanal.controller_spec, "--log", "stderr",
                                 "--role", "central", "--room", room, "--name", "board-2", "--exit-on-eof"],
                                input=burst.encode(), capture_output=True, timeout=60)
        assert member.returncode == 0, member.stderr.decode(errors="replace")
        assert b"every line is delivered" in member.stderr, member.stderr.decode(errors="replace")
        host.wait_for(lambda line: line == "[board-2] burst 39", "the last line of the burst")
        got = [line for line in host.lines if line.startswith("[board-2] burst ")]
        assert got == [f"[board-2] burst {index}" for index in range(40)], got
        # The host (its stdin still open) runs on.
        assert host.process.poll() is None
    finally:
        assert host.stop() == 0, Path(host.log).read_text()


def wait_in_log(process: ChatProcess, text: str, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while text not in Path(process.log).read_text():
        assert time.monotonic() < deadline and process.process.poll() is None, f"no {what}:\n{Path(process.log).read_text()}"
        time.sleep(0.2)


def start_line_of_three(near_spec: str, far_spec: str, room: str, processes: list[ChatProcess],
                        ends: tuple[str, ...] = ()) -> tuple[ChatProcess, ChatProcess, ChatProcess]:
    """`left` on radio 1, `right` on radio 2 and a bridge with a controller on each, all
    `--role auto` in `room`, started in turn until the bridge joined left's room and right the
    bridge's; `ends`: more options for left and right. Each process is added to `processes`
    as it starts, so the caller stops them whatever fails."""
    left = ChatProcess(near_spec, "--role", "auto", "--room", room, "--name", "left", *ends)
    processes.append(left)
    wait_in_log(left, "hosting chat room", "left hosting on radio 1")
    bridge = ChatProcess(near_spec, "--controller", far_spec, "--role", "auto", "--room", room, "--name", "bridge")
    processes.append(bridge)
    left.wait_for(lambda line: line.endswith(" joined"), "the bridge joining left's room", timeout=20)
    wait_in_log(bridge, "hosting chat room", "the bridge hosting on radio 2")
    right = ChatProcess(far_spec, "--role", "auto", "--room", room, "--name", "right", *ends)
    processes.append(right)
    bridge.wait_for(lambda line: line.endswith(" joined"), "right joining the bridge's room", timeout=20)
    return left, bridge, right


def test_a_bridge_joins_rooms_on_two_radios_and_nothing_arrives_twice(rootcanal):
    """Three boards in a line, the ends out of each other's reach (two rootcanals are two
    places): `left` on radio 1, `right` on radio 2, and a bridge with a controller in each,
    all `--role auto` in one room. The bridge is a member on one radio and the host on the
    other and relays between them: the ends chat. A second bridge makes a loop: every line
    still arrives once (identities), and the hop count bounds the relays."""
    from rootcanal_server import RootCanal

    far = RootCanal(log_path=log_dir() / f"rootcanal-{unique_name('far')}.log")
    far.start()
    room = unique_name("Line")
    near_spec, far_spec = rootcanal.controller_spec, far.controller_spec
    processes: list[ChatProcess] = []
    try:
        left, bridge, right = start_line_of_three(near_spec, far_spec, room, processes)

        right.say("hello from the right")
        left.wait_for(lambda line: line == "[right] hello from the right", "right's line at left")
        left.say("hello from the left")
        right.wait_for(lambda line: line == "[left] hello from the left", "left's line at right")
        bridge.say("hello from the middle")
        left.wait_for(lambda line: line == "[bridge] hello from the middle", "the bridge's line at left")
        right.wait_for(lambda line: line == "[bridge] hello from the middle", "the bridge's line at right")
        for line in ("[right] hello from the right", "[left] hello from the left"):
            bridge.wait_for(lambda seen, line=line: seen == line, f"{line} at the bridge")

        # A second bridge between the same radios: now there is a loop.
        loop = ChatProcess(near_spec, "--controller", far_spec, "--role", "auto", "--room", room, "--name", "loop")
        processes.append(loop)
        # It joins both rooms: each host announces a second member.
        for host, what in ((left, "left's room"), (bridge, "the bridge's room")):
            deadline = time.monotonic() + 30
            while sum(1 for line in host.lines if line.endswith(" joined")) < 2:
                assert time.monotonic() < deadline, f"the second bridge did not join {what}:\n{Path(loop.log).read_text()}"
                time.sleep(0.2)
        for index in range(5):
            left.say(f"round {index}")
            right.say(f"back {index}")
        right.wait_for(lambda line: line == "[left] round 4", "left's lines at right through two bridges")
        left.wait_for(lambda line: line == "[right] back 4", "right's lines at left through two bridges")
        time.sleep(2)   # anything that would loop has had time to come round
        for process, sender, text in ((right, "left", "round"), (left, "right", "back"), (loop, "left", "round")):
            got = [line for line in process.lines if line.startswith(f"[{sender}] {text} ")]
            assert got == [f"[{sender}] {text} {index}" for index in range(5)], (process.lines, Path(process.log).read_text()[-3000:])
        for process in processes:
            assert process.process.poll() is None, Path(process.log).read_text()
    finally:
        for process in reversed(processes):
            process.stop()
        far.stop()


def say_all(process: ChatProcess, lines: list[str]) -> None:
    """Pipes every line at once, as `seq 1000 | blemu chat` would."""
    assert process.process.stdin is not None
    process.process.stdin.write("".join(line + "\n" for line in lines).encode())
    process.process.stdin.flush()


def lines_from(process: ChatProcess, sender: str, prefix: str) -> list[str]:
    return [line for line in list(process.lines) if line.startswith(f"[{sender}] {prefix}")]


def wait_for_all(process: ChatProcess, sender: str, prefix: str, count: int, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while len(lines_from(process, sender, prefix)) < count:
        assert time.monotonic() < deadline and process.process.poll() is None, (
            f"{what}: {len(lines_from(process, sender, prefix))} of {count} within {timeout:.0f} s\n"
            + Path(process.log).read_text()[-3000:])
        time.sleep(0.2)


BURST = 1000


def burst_both_ways(rootcanal, room: str, interrupt=None) -> tuple[ChatProcess, ChatProcess]:
    """A host and a member, 1000 lines piped into each at once; `interrupt()` runs once 100
    lines have arrived each way. Returns them once every line arrived, checked: all, in order,
    none twice. The caller stops them."""
    host = ChatProcess(rootcanal.controller_spec, "--name", room)
    member = None
    try:
        time.sleep(1)
        member = ChatProcess(rootcanal.controller_spec, "--role", "central", "--room", room, "--name", "board-2")
        host.wait_for(lambda line: line.endswith(" joined"), "join announcement")
        up = [f"up {index}" for index in range(BURST)]
        down = [f"down {index}" for index in range(BURST)]
        say_all(member, up)
        say_all(host, down)
        if interrupt is not None:
            deadline = time.monotonic() + 60
            while len(lines_from(host, "board-2", "up ")) < 100 or len(lines_from(member, room, "down ")) < 100:
                assert time.monotonic() < deadline, "the bursts did not start"
                time.sleep(0.05)
            interrupt()
        wait_for_all(host, "board-2", "up ", BURST, "the member's burst at the host", 150)
        wait_for_all(member, room, "down ", BURST, "the host's burst at the member", 150)
        time.sleep(0.5)
        assert lines_from(host, "board-2", "up ") == [f"[board-2] {line}" for line in up]
        assert lines_from(member, room, "down ") == [f"[{room}] {line}" for line in down]
        return host, member
    except BaseException:
        if member is not None:
            member.stop()
        host.stop()
        raise


def test_a_burst_of_1000_lines_each_way_arrives_whole_in_order_once(rootcanal):
    """1000 lines piped in on each side at once: every one arrives, in order, none twice — the
    sources are paused (back-pressure), never dropped, however fast they come."""
    host, member = burst_both_ways(rootcanal, unique_name("Burst"))
    try:
        assert not any("missed" in line for line in member.lines), member.lines[-5:]
    finally:
        member.stop()
        assert host.stop() == 0, Path(host.log).read_text()


def test_a_link_dropped_mid_burst_heals_and_loses_nothing(restartable_rootcanal):
    """The radio goes away in the middle of a burst each way (rootcanal killed, then started
    again): both nodes find their controller and each other again; what was not acknowledged is
    resent, what the member missed is replayed (RESUME), and every line arrives once, in order."""
    def drop() -> None:
        restartable_rootcanal.crash()
        time.sleep(1)
        restartable_rootcanal.restart()

    host, member = burst_both_ways(restartable_rootcanal, unique_name("Heal"), interrupt=drop)
    try:
        assert "joined again" in Path(member.log).read_text()
    finally:
        member.stop()
        assert host.stop() == 0, Path(host.log).read_text()


def test_three_members_in_one_room_and_a_stalled_one(rootcanal):
    """A host and three members (two blemu nodes and the seed app, a plain Bumble client): every
    line reaches everyone else, signed; joins and leaves are announced. One member is stopped
    (SIGSTOP) during a burst: the others get the burst at once, and the stopped one, continued,
    gets every line or is told how many it missed — never a silent gap."""
    import signal as signals

    room = unique_name("Three")
    host = ChatProcess(rootcanal.controller_spec, "--name", room)
    members: list[ChatProcess] = []
    try:
        probe = BlemuProcess(rootcanal.controller_spec, room)   # only for its readiness scan
        probe.wait_advertising(rootcanal, alive=host.exited)
        for name in ("m1", "m2"):
            members.append(ChatProcess(rootcanal.controller_spec, "--role", "central", "--room", room, "--name", name))
        deadline = time.monotonic() + 30
        while sum(1 for line in host.lines if line.endswith(" joined")) < 2:
            assert time.monotonic() < deadline, host.lines
            time.sleep(0.1)
        m1, m2 = members

        async def scenario():
            async with Central(rootcanal.controller_spec, name="seed-app") as central:
                conn = await central.connect(probe.scan.address)
                await conn.discover_all()
                message = conn.characteristic(CHAT_MESSAGE, CHAT_SERVICE)
                received: list[str] = []
                await conn.subscribe(message, lambda value: received.append(bytes(value).decode()))
                await asyncio.to_thread(m1.wait_for, lambda line: line.endswith(" joined") and "central-" in line, "the seed app's join at m1")
                await conn.write(message, b"hi from the app")
                for process in (host, m1, m2):
                    await asyncio.to_thread(process.wait_for, lambda line: line.endswith("] hi from the app"), "the app's line")
                m1.say("hi from m1")
                for process in (host, m2):
                    await asyncio.to_thread(process.wait_for, lambda line: line == "[m1] hi from m1", "m1's line")
                deadline = time.monotonic() + 10
                while "m1: hi from m1" not in received and time.monotonic() < deadline:
                    await asyncio.sleep(0.1)
                assert "m1: hi from m1" in received, received
                assert not any(line == "[m1] hi from m1" for line in m1.lines), "a member's own line came back to it"

                # m2 stops answering; a burst from the host still reaches m1 and the app at once.
                m2.process.send_signal(signals.SIGSTOP)
                try:
                    burst = [f"burst {index}" for index in range(300)]
                    say_all(host, burst)
                    await asyncio.to_thread(wait_for_all, m1, room, "burst ", len(burst), "the burst at m1 beside a stopped member", 60)
                    # At ATT_MTU 23 a line comes in pieces: counted in what the app got, joined.
                    deadline = time.monotonic() + 30
                    while "".join(received).count(f"{room}: burst ") < len(burst) and time.monotonic() < deadline:
                        await asyncio.sleep(0.1)
                    assert "".join(received).count(f"{room}: burst ") == len(burst)
                finally:
                    m2.process.send_signal(signals.SIGCONT)
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    got = lines_from(m2, room, "burst ")
                    missed = [line for line in m2.lines if line.startswith("* you missed ")]
                    if got and got[-1] == f"[{room}] burst 299":
                        break
                    await asyncio.sleep(0.2)
                numbers = [int(line.rsplit(" ", 1)[1]) for line in lines_from(m2, room, "burst ")]
                missed_count = sum(int(line.split()[3]) for line in m2.lines if line.startswith("* you missed "))
                assert numbers == sorted(set(numbers)), "out of order or twice"
                assert numbers and numbers[-1] == 299 and len(numbers) + missed_count == 300, (len(numbers), missed_count)
                await conn.disconnect()
            await asyncio.to_thread(host.wait_for, lambda line: line.startswith("* central-") and line.endswith(" left"), "the app's leave")

        run(scenario(), timeout=150)
    finally:
        for process in members:
            process.stop()
        assert host.stop() == 0, Path(host.log).read_text()
