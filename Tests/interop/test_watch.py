"""The control socket's event stream (`watch`, `blemu ctl SOCK watch`, `blemu ctl SOCK wait`).

A Bumble central stands in for the app; the test watches what blemu saw it do, in order, with
the characteristics named by UUID, and a watcher that reads nothing during a flood of events is
told what it missed while the device keeps serving. Protocol: Docs/CONTROL.md, "Events".
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import socket
import subprocess
import tempfile
import threading
import time

import pytest

from bumble_central import (
    collect_indications,
    UUID_BODY_SENSOR_LOCATION,
    UUID_HEART_RATE_CONTROL_POINT,
    UUID_HEART_RATE_MEASUREMENT,
    UUID_HEART_RATE_SERVICE,
)
from harness import BlemuProcess, blemu_binary, child_environment, connected, run, run_cli, start_advertising, unique_name


def short_socket_path(label: str) -> str:
    return os.path.join(tempfile.mkdtemp(prefix=f"blemu-{label}-", dir="/tmp"), "control.sock")


@pytest.fixture(scope="module")
def watched(rootcanal):
    """One heart-rate blemu with a control socket, advertising."""
    path = short_socket_path("watch")
    process = BlemuProcess(rootcanal.controller_spec, unique_name("WA"), extra_args=["--control", path])
    process.control_path = path
    start_advertising(process, rootcanal)
    yield process
    if process.exited() is not None:
        pytest.fail(f"blemu died during the tests: {process.exited()}", pytrace=False)
    assert process.stop() == 0, process.log_tail()
    shutil.rmtree(os.path.dirname(path), ignore_errors=True)


class CtlStream:
    """`blemu ctl SOCK ARGS...` running in the background, its stdout lines in a queue."""

    def __init__(self, process: BlemuProcess, *args: str):
        self.child = subprocess.Popen(
            [str(blemu_binary()), "ctl", process.control_path, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL, env=child_environment({"BLEMU_CONTROLLER": None}))
        self.lines: queue.Queue[str] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.child.stdout is not None
        for raw in self.child.stdout:
            self.lines.put(raw.decode(errors="replace").rstrip("\n"))

    def next(self, timeout: float = 10.0) -> dict:
        line = self.lines.get(timeout=timeout)
        return json.loads(line)

    def until(self, predicate, timeout: float, what: str) -> list[dict]:
        """Lines up to and with the first that `predicate` holds for."""
        seen: list[dict] = []
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {what} within {timeout:.0f} s; saw {[e.get('event') for e in seen]}")
            try:
                event = self.next(timeout=left)
            except queue.Empty:
                continue
            seen.append(event)
            if predicate(event):
                return seen

    def stop(self) -> None:
        if self.child.poll() is None:
            self.child.terminate()
        self.child.wait(timeout=5)


def wait_for_watchers(process: BlemuProcess, count: int, timeout: float = 10.0) -> None:
    """The log says `count` watches were taken (so what follows is seen)."""
    deadline = time.monotonic() + timeout
    while sum("watching" in e.message for e in process.events("control-command")) < count:
        if time.monotonic() >= deadline:
            raise AssertionError(f"fewer than {count} watches taken:\n{process.log_tail()}")
        time.sleep(0.05)


def watches_so_far(process: BlemuProcess) -> int:
    return sum("watching" in e.message for e in process.events("control-command"))


def test_ctl_watch_shows_what_the_central_did_in_order_with_uuids(watched):
    before = watches_so_far(watched)
    stream = CtlStream(watched, "watch", "heart-rate")
    try:
        reply = stream.next()
        assert reply["ok"] is True and reply["watching"] is True and reply["device"] == "heart-rate", reply
        wait_for_watchers(watched, before + 1)

        async def scenario():
            async with connected(watched) as conn:
                hrm = await conn.discover_characteristic(UUID_HEART_RATE_SERVICE, UUID_HEART_RATE_MEASUREMENT)
                await conn.subscribe(hrm)
                control_point = await conn.discover_characteristic(UUID_HEART_RATE_SERVICE, UUID_HEART_RATE_CONTROL_POINT)
                await conn.write(control_point, bytes([0x01]))
                location = await conn.discover_characteristic(UUID_HEART_RATE_SERVICE, UUID_BODY_SENSOR_LOCATION)
                await conn.read(location)

        run(scenario())
        events = stream.until(lambda e: e.get("event") == "disconnected", 15, "disconnected event")
    finally:
        stream.stop()

    seqs = [e["seq"] for e in events]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), f"seq not consecutive: {seqs}"
    assert seqs[0] == 1
    times = [e["t"] for e in events]
    assert times == sorted(times), "t goes backwards"
    assert all(e["device"] == "heart-rate" for e in events)

    def index(kind: str, **fields) -> int:
        for i, e in enumerate(events):
            if e["event"] == kind and all(e.get(k) == v for k, v in fields.items()):
                return i
        raise AssertionError(f"no {kind} {fields} in {[(e['event'], e.get('uuid')) for e in events]}")

    order = [
        index("connected"),
        index("subscribed", uuid="2A37", notify=True),
        index("write", uuid="2A39", value="01", with_response=True, prepared=False),
        index("read", uuid="2A38", offset=0),
        index("unsubscribed", uuid="2A37", cause="link closed"),
        index("disconnected"),
    ]
    assert order == sorted(order), f"out of order: {[(e['event'], e.get('uuid')) for e in events]}"
    connected_event = events[order[0]]
    assert connected_event["peer"] and isinstance(connected_event["conn"], int)
    assert events[order[-1]]["conn"] == connected_event["conn"]
    assert events[order[-1]]["reason"].startswith("0x")
    # The measurements sent while subscribed are there too, named by UUID, with their bytes.
    notifications = [e for e in events if e["event"] == "notification"]
    assert all(e["uuid"] == "2A37" and len(e["value"]) >= 4 for e in notifications)


def test_ctl_wait_returns_when_the_central_subscribes(watched):
    before = watches_so_far(watched)
    waiter = subprocess.Popen(
        [str(blemu_binary()), "ctl", watched.control_path, "wait", "subscribed", "2A37", "--timeout", "30"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
        env=child_environment({"BLEMU_CONTROLLER": None}))
    try:
        wait_for_watchers(watched, before + 1)
        assert waiter.poll() is None, "wait returned before anything happened"

        async def scenario():
            async with connected(watched) as conn:
                hrm = await conn.discover_characteristic(UUID_HEART_RATE_SERVICE, UUID_HEART_RATE_MEASUREMENT)
                subscribed_at = time.monotonic()
                await conn.subscribe(hrm)
                stdout, stderr = await_exit(waiter, 10)
                assert waiter.returncode == 0, stderr
                assert time.monotonic() - subscribed_at < 5
                event = json.loads(stdout.splitlines()[-1])
                assert event["event"] == "subscribed" and event["uuid"] == "2A37", stdout

        run(scenario())
    finally:
        if waiter.poll() is None:
            waiter.kill()
            waiter.wait()


def await_exit(child: subprocess.Popen, timeout: float) -> tuple[str, str]:
    stdout, stderr = child.communicate(timeout=timeout)
    return stdout.decode(errors="replace"), stderr.decode(errors="replace")


def test_ctl_wait_times_out_with_exit_1_and_a_clear_message(watched):
    result = run_cli(["ctl", watched.control_path, "wait", "write", "2A39", "equals", "01", "--timeout", "1"], timeout=10)
    assert result.returncode == 1, result.describe()
    assert "no write to 2A39 of 01 within 1 s" in result.stderr, result.describe()


def test_a_watcher_that_never_reads_is_told_what_it_missed_and_the_device_keeps_serving(watched):
    deaf = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    deaf.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    deaf.settimeout(10)
    deaf.connect(watched.control_path)
    deaf.sendall(b'{"id":1,"cmd":"watch"}\n')
    reads = 1500

    async def scenario():
        async with connected(watched) as conn:
            hrm = await conn.discover_characteristic(UUID_HEART_RATE_SERVICE, UUID_HEART_RATE_MEASUREMENT)
            await conn.subscribe(hrm)
            location = await conn.discover_characteristic(UUID_HEART_RATE_SERVICE, UUID_BODY_SENSOR_LOCATION)
            # A flood of events (a read each, the measurements between) the watcher does not read.
            for _ in range(reads):
                assert len(await conn.read(location)) == 1
            # Still serving, and a control client is still answered.
            listing = run_cli(["ctl", watched.control_path, "list"], timeout=10)
            assert listing.returncode == 0, listing.describe()

    try:
        run(scenario(), timeout=180)
        # Now it reads: events in order, then one `missed` line accounting for the rest.
        buffer = b""
        lines: list[dict] = []
        deadline = time.monotonic() + 20
        while not any(e.get("event") == "missed" for e in lines):
            assert time.monotonic() < deadline, f"no missed line; {len(lines)} lines"
            chunk = deaf.recv(65536)
            assert chunk, "blemu closed the watcher"
            buffer += chunk
            *complete, buffer = buffer.split(b"\n")
            lines += [json.loads(line) for line in complete]
        reply, events = lines[0], lines[1:]
        assert reply["ok"] is True
        missed = events[-1]
        delivered = events[:-1]
        assert [e["seq"] for e in delivered] == list(range(1, len(delivered) + 1))
        assert missed["from_seq"] == len(delivered) + 1
        assert missed["count"] == missed["seq"] - len(delivered) and missed["count"] > 0, missed
        assert missed["seq"] > reads, "every read counted"
        # And events flow again after it, numbered on.
        async def one_more():
            async with connected(watched):
                pass
        run(one_more())
        deadline = time.monotonic() + 10
        following: list[dict] = []
        while not any(e.get("event") == "connected" for e in following):
            assert time.monotonic() < deadline, "no events after the missed line"
            buffer += deaf.recv(65536)
            *complete, buffer = buffer.split(b"\n")
            following += [json.loads(line) for line in complete]
        assert following[0]["seq"] == missed["seq"] + 1
    finally:
        deaf.close()
    assert watched.exited() is None


def test_pairing_encryption_and_a_confirmed_indication_are_watched(rootcanal):
    """The lock: Passkey Entry pairing, then a control point command answered by indication."""
    from harness import passkey_of

    lock_service = "7d3c0200-9a5e-4d1a-8f6e-5c1b2d3e4f50"
    control_point = "7d3c0202-9a5e-4d1a-8f6e-5c1b2d3e4f50"
    path = short_socket_path("watch-lock")
    process = BlemuProcess(rootcanal.controller_spec, unique_name("WL"), device="lock", extra_args=["--control", path])
    process.control_path = path
    start_advertising(process, rootcanal)
    stream = CtlStream(process, "watch", "--kinds", "encrypted,paired,subscribed,write,indication,confirmed")
    try:
        assert stream.next()["ok"] is True
        wait_for_watchers(process, 1)

        async def scenario():
            from bumble.core import UUID
            async with connected(process, discover=True, pair=passkey_of(process)) as conn:
                point = conn.characteristic(UUID(control_point), UUID(lock_service))
                await conn.subscribe(point)
                mark = len(conn.indications)
                await conn.write(point, bytes([0x07]) + b"0000")  # an unknown opcode: answered by indication
                await collect_indications(conn, point.handle, 1, 10, mark)

        run(scenario())
        events = stream.until(lambda e: e.get("event") == "confirmed", 15, "confirmed indication")
    finally:
        stream.stop()
        assert process.stop() == 0, process.log_tail()
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)
    kinds = [e["event"] for e in events]
    encrypted = next(e for e in events if e["event"] == "encrypted")
    paired = next(e for e in events if e["event"] == "paired")
    assert paired["method"] == "passkey" and paired["key_size"] == 16, paired
    assert encrypted["key_size"] == 16
    subscribed = next(e for e in events if e["event"] == "subscribed" and e["uuid"] == control_point)
    assert subscribed["indicate"] is True
    write = next(e for e in events if e["event"] == "write")
    assert write["uuid"] == control_point and write["value"] == "0730303030", write
    indication = next(e for e in events if e["event"] == "indication")
    assert indication["uuid"] == control_point and indication["value"] == "800705", indication
    assert events[-1]["outcome"] == "confirmed" and events[-1]["uuid"] == control_point
    assert kinds.index("write") < kinds.index("indication") < kinds.index("confirmed")
