"""The control socket (`blemu run --control PATH`, `blemu ctl`), checked from the outside.

A test script drives a running blemu through the socket while a Bumble central, the app's
stand-in, watches the air: a value set is what the central reads or is notified, a fault happens
exactly as asked, a disconnection carries the reason asked for, advertising stops and starts.
Bad clients — garbage, a megabyte without a newline, one that hangs up mid-line — are answered
or dropped while the devices and the other clients carry on. Protocol: Docs/CONTROL.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import select
import shutil
import socket
import struct
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from bumble import att
from bumble.core import UUID

from bumble_central import (
    AD_COMPLETE_16BIT_UUIDS,
    AD_INCOMPLETE_16BIT_UUIDS,
    ATT_INVALID_HANDLE,
    HCI_REMOTE_DEVICE_TERMINATED_CONNECTION_DUE_TO_POWER_OFF,
    HCI_REMOTE_USER_TERMINATED_CONNECTION,
    HRS_CONTROL_POINT_NOT_SUPPORTED,
    UUID_BATTERY_LEVEL,
    UUID_BATTERY_SERVICE,
    UUID_DATABASE_HASH,
    UUID_GATT_SERVICE,
    UUID_SERVICE_CHANGED,
    UUID_HEART_RATE_CONTROL_POINT,
    UUID_HEART_RATE_MEASUREMENT,
    UUID_HEART_RATE_SERVICE,
    Central,
    CentralConnection,
    collect_indications,
    collect_notifications,
    decode_heart_rate_measurement,
    error_code_of,
    raw_request,
)
from harness import REPO, BlemuProcess, blemu_binary, closed_tcp_port, connected, run, run_cli, start_advertising, unique_name

# ---------------------------------------------------------------------------------------------
# Control clients: plain sockets (sync) and asyncio streams (inside Bumble scenarios).


class ControlSocket:
    """One connection to the control socket: newline-delimited JSON both ways."""

    def __init__(self, path: str, timeout: float = 5.0):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.buffer = b""
        self.next_id = 1

    def close(self) -> None:
        self.sock.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_reply(self) -> dict:
        while b"\n" not in self.buffer:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise AssertionError(f"the control socket closed without a reply (had {self.buffer!r})")
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        reply = json.loads(line)
        assert isinstance(reply, dict) and isinstance(reply.get("ok"), bool), f"not a reply: {line!r}"
        return reply

    def request(self, cmd: str, **fields) -> dict:
        request_id = self.next_id
        self.next_id += 1
        self.send_raw((json.dumps({"id": request_id, "cmd": cmd, **fields}) + "\n").encode())
        reply = self.read_reply()
        assert reply["id"] == request_id, f"reply {reply} to request {request_id}"
        return reply


class AsyncControl:
    """The same over asyncio streams, so a Bumble scenario's loop never blocks on it."""

    def __init__(self, path: str):
        self.path = path
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.next_id = 1

    async def __aenter__(self) -> "AsyncControl":
        self.reader, self.writer = await asyncio.wait_for(asyncio.open_unix_connection(self.path), 5)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(Exception):
                await self.writer.wait_closed()

    async def request(self, cmd: str, **fields) -> dict:
        assert self.reader is not None and self.writer is not None
        request_id = self.next_id
        self.next_id += 1
        self.writer.write((json.dumps({"id": request_id, "cmd": cmd, **fields}) + "\n").encode())
        await self.writer.drain()
        line = await asyncio.wait_for(self.reader.readline(), 5)
        assert line.endswith(b"\n"), f"no reply line to {cmd} (got {line!r})"
        reply = json.loads(line)
        assert reply["id"] == request_id, f"reply {reply} to request {request_id}"
        return reply

    async def ok(self, cmd: str, **fields) -> dict:
        reply = await self.request(cmd, **fields)
        assert reply["ok"] is True, f"{cmd} {fields} refused: {reply}"
        return reply


def ctl(process: BlemuProcess, *args: str, timeout: float = 10.0):
    """`blemu ctl PATH ARGS...` as a test script runs it."""
    return run_cli(["ctl", process.control_path, *args], timeout=timeout)


def ctl_ok(process: BlemuProcess, *args: str) -> dict:
    result = ctl(process, *args)
    assert result.returncode == 0, result.describe()
    lines = result.stdout.splitlines()
    assert len(lines) == 1, f"expected one reply line:\n{result.describe()}"
    reply = json.loads(lines[0])
    assert reply["ok"] is True and reply["id"] == 1, result.describe()
    return reply


def short_socket_path(label: str) -> str:
    """A socket path in a new folder of its own (Unix socket paths hold at most 107 bytes)."""
    return os.path.join(tempfile.mkdtemp(prefix=f"blemu-{label}-", dir="/tmp"), "control.sock")


def address_text(address) -> str:
    return address.to_string(with_type_qualifier=False).upper()


# ---------------------------------------------------------------------------------------------
# Fixtures


@pytest.fixture(scope="module")
def controlled(rootcanal):
    """One heart-rate blemu with a control socket, advertising; its teardown checks a clean
    stop that removes the socket file."""
    path = short_socket_path("ctl")
    process = BlemuProcess(rootcanal.controller_spec, unique_name("CT"), extra_args=["--control", path])
    process.control_path = path
    start_advertising(process, rootcanal)
    yield process
    if process.exited() is not None:
        pytest.fail(f"blemu died during the tests: {process.exited()}", pytrace=False)
    status = process.stop()
    assert status == 0, f"blemu exited with status {status} on SIGTERM; output:\n{process.log_tail()}"
    assert not os.path.exists(path), "the control socket file is still there after a clean stop"
    shutil.rmtree(os.path.dirname(path), ignore_errors=True)


@pytest.fixture(autouse=True)
def clean_state(request):
    """Each test starts and ends with no faults planned and advertising allowed."""
    if "controlled" not in request.fixturenames:
        yield
        return
    process = request.getfixturevalue("controlled")
    yield
    if process.exited() is None:
        ctl(process, "fault", "clear")
        ctl(process, "advertise", "heart-rate", "on")


def wait_for_log(process: BlemuProcess, fragment: str, what: str, timeout: float = 5.0) -> None:
    """Poll the log until a control-command entry holds `fragment`."""
    deadline = time.monotonic() + timeout
    while not any(fragment in entry.message for entry in process.events("control-command")):
        if time.monotonic() >= deadline:
            raise AssertionError(f"no {what} within {timeout:.0f} s:\n{process.log_tail()}")
        time.sleep(0.05)


async def wait_for(predicate, timeout: float, what: str, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while True:
        value = await predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what} within {timeout:.0f} s")
        await asyncio.sleep(interval)


# ---------------------------------------------------------------------------------------------
# list


def test_list_shows_the_device_and_a_connected_central(controlled):
    async def scenario():
        async with AsyncControl(controlled.control_path) as control:
            listing = (await control.ok("list"))["devices"]
            assert len(listing) == 1, listing
            device = listing[0]
            assert device["ref"] == "heart-rate" and device["device"] == "heart-rate", device
            assert device["name"] == controlled.name
            assert device["address"] == address_text(controlled.scan.address), (device, controlled.scan.address)
            assert device["advertising"] is True and device["advertising_allowed"] is True
            assert device["connections"] == []
            assert {setting["key"] for setting in device["settings"]} >= {"bpm", "contact", "battery"}

            async with connected(controlled) as conn:
                server_mtu = await conn.exchange_mtu(185)
                me = address_text(conn.connection.self_address)

                async def one_link():
                    links = (await control.ok("list"))["devices"][0]["connections"]
                    return links if len(links) == 1 and links[0]["mtu"] == min(185, server_mtu) else None

                links = await wait_for(one_link, 5, "list showing the central with its MTU")
                link = links[0]
                assert link["peer"] == me, f"list shows peer {link['peer']}, the central is {me}"
                assert isinstance(link["handle"], int) and 0 <= link["handle"] <= 0x0EFF, link
                assert link["encrypted"] is False
            # Gone from the list once the central left.
            await wait_for(lambda: _no_links(control), 5, "list showing no connection after the central left")

    run(scenario())


async def _no_links(control: AsyncControl) -> bool:
    return (await control.ok("list"))["devices"][0]["connections"] == []


# ---------------------------------------------------------------------------------------------
# set


def test_set_bpm_and_contact_show_in_the_next_measurement(controlled):
    async def scenario():
        async with AsyncControl(controlled.control_path) as control, connected(controlled) as conn:
            hrm = await conn.discover_characteristic(UUID_HEART_RATE_SERVICE, UUID_HEART_RATE_MEASUREMENT)
            await conn.subscribe(hrm)
            first = await collect_notifications(conn, hrm.handle, count=1, timeout=5)
            start = decode_heart_rate_measurement(first[0].value).heart_rate
            target = 180 if start < 120 else 60
            for bpm, contact in ((target, "0"), (97, "1")):
                reply = await control.ok("set", device="heart-rate", key="bpm", value=str(bpm))
                assert reply == {"id": reply["id"], "ok": True, "device": "heart-rate", "key": "bpm", "value": str(bpm)}
                await control.ok("set", device="heart-rate", key="contact", value=contact)
                answered = time.monotonic()
                mark = len(conn.notifications)
                got = await collect_notifications(conn, hrm.handle, count=3, timeout=6, start_index=mark)
                # A measurement already on its way when the reply came may arrive just after it;
                # the first one made after the set is the next whole tick.
                made_after = [n for n in got if n.at - answered > 0.25]
                assert made_after, f"no measurement arrived well after the set: {[(n.at - answered) for n in got]}"
                stale = [n for n in got if n.at - answered <= 0.25]
                assert len(stale) <= 1, f"{len(stale)} measurements right after the set"
                m = decode_heart_rate_measurement(made_after[0].value)
                assert abs(m.heart_rate - bpm) <= 3, f"set bpm {bpm}; the next measurement says {m.heart_rate}"
                assert m.sensor_contact_supported
                assert m.sensor_contact_detected == (contact == "1"), f"contact {contact}; flags 0x{m.flags:02x}"

    run(scenario())


def test_set_battery_is_what_the_central_reads(controlled):
    async def scenario():
        async with AsyncControl(controlled.control_path) as control, connected(controlled) as conn:
            level = await conn.discover_characteristic(UUID_BATTERY_SERVICE, UUID_BATTERY_LEVEL)
            for percent in (42, 100, 7):
                await control.ok("set", device="heart-rate", key="battery", value=percent)
                value = await conn.read(level)
                assert value == bytes([percent]), f"battery set to {percent} %; the central reads {value.hex()}"

    run(scenario())


def test_set_refusals_change_nothing(controlled):
    result = ctl(controlled, "set", "heart-rate", "bpm", "500")
    assert result.returncode == 1, result.describe()
    reply = json.loads(result.stdout)
    assert reply["ok"] is False and "30 to 220" in reply["error"], reply
    result = ctl(controlled, "set", "heart-rate", "volume", "3")
    assert result.returncode == 1 and "bpm" in json.loads(result.stdout)["error"], result.describe()
    result = ctl(controlled, "set", "thermostat", "room", "21")
    assert result.returncode == 1 and "no device 'thermostat'" in json.loads(result.stdout)["error"], result.describe()


def test_notify_sends_exactly_the_bytes_and_set_exact_gives_only_that_bpm(controlled):
    """`notify heart-rate 2A37 HEX` reaches the subscribed central as exactly those bytes (never
    cut: a value longer than ATT_MTU - 3 is refused, nothing sent), and after
    `set heart-rate bpm 150 --exact` every measurement says 150 until bpm is set again."""

    async def scenario():
        async with AsyncControl(controlled.control_path) as control, connected(controlled) as conn:
            hrm = await conn.discover_characteristic(UUID_HEART_RATE_SERVICE, UUID_HEART_RATE_MEASUREMENT)
            await conn.subscribe(hrm)
            await collect_notifications(conn, hrm.handle, count=1, timeout=5)

            # Exactly these bytes: flags 0x16 (contact detected, RR present), 150 bpm, one RR of 0x0200.
            value = bytes([0x16, 0x96, 0x00, 0x02])
            mark = len(conn.notifications)
            reply = await control.ok("notify", device="heart-rate", uuid="2A37", value=value.hex())
            assert (reply["centrals"], reply["notified"], reply["indicated"], reply["queue_full"]) == (1, 1, 0, 0), reply
            got = await collect_notifications(conn, hrm.handle, count=3, timeout=5, start_index=mark)
            assert value in [n.value for n in got], f"sent {value.hex()}; the central got {[n.value.hex() for n in got]}"

            # One byte more than the link's ATT_MTU - 3: refused whole, not cut.
            mtu = (await control.ok("list"))["devices"][0]["connections"][0]["mtu"]
            too_long = bytes([0x5A]) * (mtu - 2)
            mark = len(conn.notifications)
            refused = await control.request("notify", device="heart-rate", uuid="2A37", value=too_long.hex())
            assert refused["ok"] is False, refused
            assert f"the value is {mtu - 2} bytes" in refused["error"] and "nothing sent" in refused["error"], refused
            await asyncio.sleep(1.5)
            assert all(not n.value.startswith(b"\x5a\x5a") for n in conn.notifications[mark:]), "a cut value arrived"
            # A larger ATT_MTU carries it whole.
            await conn.exchange_mtu(185)
            await wait_for(lambda: _link_mtu_above(control, mtu), 5, "list showing the larger MTU")
            mark = len(conn.notifications)
            await control.ok("notify", device="heart-rate", uuid="2A37", value=too_long.hex())
            got = await collect_notifications(conn, hrm.handle, count=2, timeout=5, start_index=mark)
            assert too_long in [n.value for n in got], [len(n.value) for n in got]

            # Not a characteristic that notifies: refused.
            location = await control.request("notify", device="heart-rate", uuid="2A38", value="01")
            assert location["ok"] is False and "neither notifies nor indicates" in location["error"], location

            try:
                reply = ctl_ok(controlled, "set", "heart-rate", "bpm", "150", "--exact")
                assert reply["exact"] is True and reply["value"] == "150", reply
                mark = len(conn.notifications)
                got = await collect_notifications(conn, hrm.handle, count=8, timeout=12, start_index=mark)
                # The first may have been made before the set; every later one says 150 exactly.
                rates = [decode_heart_rate_measurement(n.value).heart_rate for n in got[1:]]
                assert rates == [150] * len(rates), f"after set bpm 150 --exact: {rates}"
            finally:
                await control.ok("set", device="heart-rate", key="bpm", value="70")

    run(scenario())


async def _link_mtu_above(control: AsyncControl, mtu: int) -> bool:
    links = (await control.ok("list"))["devices"][0]["connections"]
    return bool(links) and links[0]["mtu"] > mtu


# ---------------------------------------------------------------------------------------------
# fault


def test_fault_error_n_times_then_normal_on_reads_and_writes(controlled):
    async def scenario():
        async with AsyncControl(controlled.control_path) as control, connected(controlled) as conn:
            await conn.discover_all()
            level = conn.characteristic(UUID_BATTERY_LEVEL, UUID_BATTERY_SERVICE)
            control_point = conn.characteristic(UUID_HEART_RATE_CONTROL_POINT, UUID_HEART_RATE_SERVICE)

            reply = await control.ok("fault", device="heart-rate", uuid="2A19", action="error", error="0x81", count=2)
            assert reply["count"] == 2 and reply["error"] == "0x81", reply
            for attempt in range(2):
                try:
                    await conn.read(level)
                except att.ATT_Error as error:
                    assert error_code_of(error) == 0x81, f"read {attempt + 1}: {error}"
                else:
                    raise AssertionError(f"read {attempt + 1} of the battery level succeeded; expected ATT error 0x81")
            assert len(await conn.read(level)) == 1, "the third read is normal again"
            assert len(await conn.read(level)) == 1

            # Writes too, by its 16-bit UUID in another form.
            await control.ok("fault", device="heart-rate", uuid="0x2A39", action="error", error="0x0E", count=1)
            with pytest.raises(att.ATT_Error) as caught:
                await conn.write(control_point, b"\x01")
            assert error_code_of(caught.value) == 0x0E
            await conn.write(control_point, b"\x01")  # normal: 0x01 resets Energy Expended
            with pytest.raises(att.ATT_Error) as caught:
                await conn.write(control_point, b"\x02")
            assert error_code_of(caught.value) == HRS_CONTROL_POINT_NOT_SUPPORTED, "the device's own answer is back"

            # Without --count: until cleared, in the 128-bit form.
            await control.ok("fault", device="heart-rate", uuid="00002a19-0000-1000-8000-00805f9b34fb", action="error", error=0x80)
            listing = (await control.ok("list"))["devices"][0]["faults"]
            assert listing == [{"uuid": "2A19", "att_handle": listing[0]["att_handle"], "action": "error", "error": "0x80",
                                "remaining": None}], listing
            for _ in range(3):
                with pytest.raises(att.ATT_Error):
                    await conn.read(level)
            cleared = await control.ok("fault", action="clear", device="heart-rate")
            assert cleared["cleared"] == ["heart-rate"]
            assert len(await conn.read(level)) == 1

    run(scenario())


def test_fault_delay_is_felt_then_gone(controlled):
    async def scenario():
        async with AsyncControl(controlled.control_path) as control, connected(controlled) as conn:
            level = await conn.discover_characteristic(UUID_BATTERY_SERVICE, UUID_BATTERY_LEVEL)
            normal = []
            for _ in range(3):
                started = time.monotonic()
                await conn.read(level)
                normal.append(time.monotonic() - started)
            await control.ok("fault", device="heart-rate", uuid="2A19", action="delay", ms=1500, count=1)
            started = time.monotonic()
            value = await conn.read(level)
            delayed = time.monotonic() - started
            assert len(value) == 1, "a delayed read still gets its value"
            assert 1.45 <= delayed <= 1.5 + 3.0, f"a 1500 ms delay took {delayed:.2f} s (normal reads {normal})"
            started = time.monotonic()
            await conn.read(level)
            after = time.monotonic() - started
            assert after < max(normal) + 0.8 and after < 1.0, f"the read after the delay took {after:.2f} s (normal {normal})"

    run(scenario())


def test_fault_drop_misses_exactly_n_notifications(controlled):
    async def scenario():
        async with AsyncControl(controlled.control_path) as control, connected(controlled) as conn:
            hrm = await conn.discover_characteristic(UUID_HEART_RATE_SERVICE, UUID_HEART_RATE_MEASUREMENT)
            await conn.subscribe(hrm)
            baseline = await collect_notifications(conn, hrm.handle, count=4, timeout=8)
            period = statistics.median(b.at - a.at for a, b in zip(baseline, baseline[1:]))
            assert 0.7 <= period <= 1.3, f"measurements every {period:.2f} s"
            # Asked for right after a measurement arrives, so none is on its way meanwhile.
            fresh = await collect_notifications(conn, hrm.handle, count=1, timeout=5, start_index=len(conn.notifications))
            await control.ok("fault", device="heart-rate", uuid="2A37", action="drop", count=3)
            mark = len(conn.notifications)
            assert time.monotonic() - fresh[0].at < 0.5 * period, "the fault took too long to ask for"
            before = fresh[0].at
            got = await collect_notifications(conn, hrm.handle, count=3, timeout=10, start_index=mark)
            arrivals = [before] + [n.at for n in got]
            gaps = [b - a for a, b in zip(arrivals, arrivals[1:])]
            missing = round(gaps[0] / period) - 1
            assert missing == 3, f"gap of {gaps[0]:.2f} s at a {period:.2f} s period: {missing} measurements missing, expected 3"
            for gap in gaps[1:]:
                assert gap <= 1.6 * period, f"measurements missing after the 3 dropped: gaps {gaps}"
            assert (await control.ok("list"))["devices"][0]["faults"] == [], "the fault is used up"

    run(scenario())


# ---------------------------------------------------------------------------------------------
# disconnect and advertise


@pytest.mark.parametrize("reason", [HCI_REMOTE_USER_TERMINATED_CONNECTION, HCI_REMOTE_DEVICE_TERMINATED_CONNECTION_DUE_TO_POWER_OFF])
def test_disconnect_with_a_reason_the_central_sees(controlled, reason):
    async def scenario():
        async with AsyncControl(controlled.control_path) as control, connected(controlled) as conn:
            await conn.discover_characteristic(UUID_BATTERY_SERVICE, UUID_BATTERY_LEVEL)
            reply = await control.ok("disconnect", device="heart-rate", reason=f"0x{reason:02x}")
            assert reply["links"] == 1 and reply["reason"] == f"0x{reason:02x}", reply
            seen = await conn.wait_disconnected(5.0)
            assert seen == reason, f"the central saw reason 0x{seen:02x}, expected 0x{reason:02x}"
            await wait_for(lambda: _no_links(control), 5, "list showing no connection after the disconnect")
            # The device takes a new central afterwards.
        async with connected(controlled, "after-disconnect") as conn:
            await conn.discover_characteristic(UUID_BATTERY_SERVICE, UUID_BATTERY_LEVEL)

    run(scenario())


def test_disconnect_by_ctl_default_reason_is_0x13(controlled):
    async def scenario():
        async with connected(controlled) as conn:
            await conn.discover_characteristic(UUID_BATTERY_SERVICE, UUID_BATTERY_LEVEL)
            result = await asyncio.to_thread(ctl, controlled, "disconnect", "heart-rate")
            assert result.returncode == 0, result.describe()
            assert json.loads(result.stdout)["reason"] == "0x13"
            assert await conn.wait_disconnected(5.0) == HCI_REMOTE_USER_TERMINATED_CONNECTION

    run(scenario())


def test_advertise_off_then_on(controlled):
    async def scenario():
        async with AsyncControl(controlled.control_path) as control, Central(controlled.controller, name="adv-watch") as central:
            await control.ok("advertise", device="heart-rate", on=False)
            await asyncio.sleep(0.5)  # reports already on their way
            with pytest.raises(AssertionError, match="no advertisement named"):
                await central.scan_for(controlled.name, timeout=3.0, want_scan_response=False)
            device = (await control.ok("list"))["devices"][0]
            assert device["advertising"] is False and device["advertising_allowed"] is False, device
            await control.ok("advertise", device="heart-rate", on=True)
            seen = await central.scan_for(controlled.name, timeout=10.0, want_scan_response=False)
            assert seen.address == controlled.scan.address
            device = (await control.ok("list"))["devices"][0]
            assert device["advertising"] is True and device["advertising_allowed"] is True, device

    run(scenario(), timeout=40)


# ---------------------------------------------------------------------------------------------
# Bad clients


def test_malformed_requests_get_errors_and_harm_nothing(controlled):
    client = ControlSocket(controlled.control_path)
    try:
        cases = [
            (b"this is not json\n", None, "not JSON"),
            (b"[1,2,3]\n", None, "one JSON object per line"),
            (b'{"cmd":"list"}\n', None, "missing \"id\""),
            (b'{"id":"seven","cmd":"list"}\n', None, "\"id\" must be a whole number"),
            (b'{"id":1e999,"cmd":"list"}\n', None, "\"id\""),
            (b'{"id":11}\n', 11, "missing \"cmd\""),
            (b'{"id":12,"cmd":"reboot"}\n', 12, "unknown command"),
            (b'{"id":13,"cmd":"set","device":"heart-rate","key":"bpm"}\n', 13, "missing \"value\""),
            (b'{"id":14,"cmd":"set","device":["heart-rate"],"key":"bpm","value":"80"}\n', 14, "must be a string"),
            (b'{"id":15,"cmd":"fault","device":"heart-rate","uuid":"2A37","action":"drop","count":1e30}\n', 15, "\"count\""),
            (b'{"id":16,"cmd":"fault","device":"heart-rate","uuid":"2A38","action":"drop"}\n', 16, "nothing to drop"),
            (b'{"id":17,"cmd":"disconnect","device":"heart-rate","reason":"0x16"}\n', 17, "HCI Disconnect"),
            (b'{"id":18,"cmd":"advertise","device":"nobody","on":false}\n', 18, "no device 'nobody'"),
            (b'\xff\xfe\x00garbage\n', None, "not JSON"),
        ]
        for line, expected_id, fragment in cases:
            client.send_raw(line)
            reply = client.read_reply()
            assert reply["ok"] is False and reply["id"] == expected_id, f"{line!r}: {reply}"
            assert fragment in reply["error"], f"{line!r}: {reply['error']!r} does not say {fragment!r}"
        # The same connection still works, and so does the device.
        assert client.request("list")["ok"] is True
    finally:
        client.close()
    assert controlled.exited() is None
    refused = [e for e in controlled.events("control-command") if "refused" in e.message]
    assert len(refused) >= 14, f"{len(refused)} refusals logged"

    async def scenario():
        async with connected(controlled) as conn:
            level = await conn.discover_characteristic(UUID_BATTERY_SERVICE, UUID_BATTERY_LEVEL)
            assert len(await conn.read(level)) == 1

    run(scenario())


def test_two_clients_at_once(controlled):
    first = ControlSocket(controlled.control_path)
    second = ControlSocket(controlled.control_path)
    try:
        # Interleaved: half a line on one, a whole request on the other, then the rest.
        first.send_raw(b'{"id":101,"cmd":"se')
        second.send_raw(b'{"id":201,"cmd":"list"}\n')
        assert second.read_reply()["id"] == 201
        first.send_raw(b't","device":"heart-rate","key":"battery","value":"55"}\n{"id":102,"cmd":"list"}\n')
        assert first.read_reply() == {"id": 101, "ok": True, "device": "heart-rate", "key": "battery", "value": "55"}
        assert first.read_reply()["id"] == 102
        assert second.request("list")["ok"] is True
    finally:
        first.close()
        second.close()


def test_a_megabyte_without_a_newline_is_dropped_while_another_client_works(controlled):
    hostile = ControlSocket(controlled.control_path, timeout=10)
    good = ControlSocket(controlled.control_path)
    try:
        assert good.request("list")["ok"] is True
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            hostile.send_raw(b"x" * (1024 * 1024))
        # The server stops at its line limit: it says why (if the kernel still holds that line
        # when the reset comes) and closes. A timeout here would mean it kept the client.
        told = b""
        try:
            while chunk := hostile.sock.recv(65536):
                told += chunk
        except ConnectionResetError:
            pass
        except socket.timeout:
            raise AssertionError(f"the client that sent a megabyte without a newline is still connected (got {told[:200]!r})")
        if told:
            reply = json.loads(told.splitlines()[0])
            assert reply["ok"] is False and "line longer than" in reply["error"], reply
        wait_for_log(controlled, "without a newline", "the log line about the dropped client")
        # The other client never noticed.
        assert good.request("list")["ok"] is True
        reply = good.request("set", device="heart-rate", key="battery", value="88")
        assert reply["ok"] is True, reply
    finally:
        hostile.close()
        good.close()
    assert controlled.exited() is None


def test_a_client_that_hangs_up_mid_request_harms_nothing(controlled):
    client = ControlSocket(controlled.control_path)
    client.send_raw(b'{"id":1,"cmd":"set","device":"heart-rate","key":"battery","val')
    time.sleep(0.2)
    client.close()
    wait_for_log(controlled, "in the middle of a", "the log line about the unfinished line")
    assert ctl_ok(controlled, "list")["devices"][0]["name"] == controlled.name
    # A client that sends its request and leaves before the reply: the request still runs.
    client = ControlSocket(controlled.control_path)
    client.send_raw(b'{"id":2,"cmd":"set","device":"heart-rate","key":"battery","value":"33"}\n')
    client.close()
    wait_for_log(controlled, "battery set to 33", "the request of a client that left before its reply, run")
    assert controlled.exited() is None


def test_sixteen_half_lines_do_not_lock_out_blemu_ctl(controlled):
    """Sixteen clients that each sent half a line used to hold every place for as long as they
    stayed open ("16 clients already"). Now, once they have been idle 1 s, `blemu ctl` takes the
    place of the one idle longest, which is told why; 10 s after its half line each is closed.
    A burst of 500 connects is answered (served or told), not refused by the kernel."""
    holders = [ControlSocket(controlled.control_path, timeout=15) for _ in range(16)]
    try:
        for holder in holders:
            holder.send_raw(b'{"id":1,"cmd":"li')
        time.sleep(1.5)
        assert ctl_ok(controlled, "list")["devices"][0]["name"] == controlled.name
        wait_for_log(controlled, "gave its place to client", "the log line about the idle client giving way")
        told = holders[0].sock.recv(65536)
        assert b"closing this connection for a new client" in told, told
        # The rest: closed 10 s after their half line, with the reason.
        for holder in holders[1:]:
            data = b""
            while chunk := holder.sock.recv(65536):
                data += chunk
            assert b"an unfinished line (no newline)" in data, data
        wait_for_log(controlled, "without its newline for 10.0 seconds", "the log line about an unfinished line")
    finally:
        for holder in holders:
            holder.close()

    burst = []
    try:
        for _ in range(500):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.setblocking(False)
            sock.connect(controlled.control_path)  # with the old backlog of 16: BlockingIOError (EAGAIN)
            burst.append(sock)
        # Every connection beyond the 16 places hears why it is closed (or takes an idle
        # one's place, which then hears why); at most 16 are kept.
        told: set[socket.socket] = set()
        deadline = time.monotonic() + 15
        while len(told) < len(burst) - 16 and time.monotonic() < deadline:
            readable, _, _ = select.select([sock for sock in burst if sock not in told], [], [], 0.5)
            for sock in readable:
                line = sock.recv(65536)
                assert b"clients already" in line or b"for a new client" in line, line
                told.add(sock)
        assert len(told) >= len(burst) - 16, f"{len(told)} of {len(burst)} told"
    finally:
        for sock in burst:
            sock.close()
    assert ctl_ok(controlled, "list")["ok"] is True
    assert controlled.exited() is None


# ---------------------------------------------------------------------------------------------
# blemu ctl and the socket file


def test_ctl_prints_one_reply_line_and_exits_by_ok(controlled):
    reply = ctl_ok(controlled, "list")
    assert reply["devices"][0]["ref"] == "heart-rate"
    raw = ctl(controlled, "--raw", '{"id":77,"cmd":"list"}')
    assert raw.returncode == 0 and json.loads(raw.stdout)["id"] == 77, raw.describe()
    raw = ctl(controlled, "--raw", '{"id":78,"cmd":"nope"}')
    assert raw.returncode == 1, raw.describe()
    reply = json.loads(raw.stdout)
    assert reply["id"] == 78 and reply["ok"] is False and "unknown command 'nope'" in reply["error"], reply
    usage = ctl(controlled, "fault", "heart-rate", "2A37", "melt")
    assert usage.returncode == 64 and "unknown fault 'melt'" in usage.stderr, usage.describe()
    commands = [e for e in controlled.events("control-command") if "client" in e.message]
    assert commands, "commands are logged as control-command"


def test_ctl_says_in_one_line_when_nothing_serves_the_socket(tmp_path):
    missing = run_cli(["ctl", str(tmp_path / "none.sock"), "list"])
    assert missing.returncode == 1, missing.describe()
    assert len(missing.reason_lines) == 1 and "no such socket" in missing.reason_lines[0], missing.describe()
    stale_path = str(tmp_path / "stale.sock")
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(stale_path)
    stale.close()
    refused = run_cli(["ctl", stale_path, "list"])
    assert refused.returncode == 1 and len(refused.reason_lines) == 1 and "refused" in refused.reason_lines[0], refused.describe()
    timeout = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    silent_path = str(tmp_path / "silent.sock")
    timeout.bind(silent_path)
    timeout.listen(1)
    try:
        silent = run_cli(["ctl", "--timeout", "1", silent_path, "list"])
        assert silent.returncode == 1 and "no reply within" in silent.stderr, silent.describe()
        assert silent.elapsed < 5
    finally:
        timeout.close()


def test_socket_is_private_replaces_a_stale_one_and_refuses_a_regular_file(blemu_factory):
    path = short_socket_path("sock")
    try:
        # A stale socket file (its process gone) is replaced.
        stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        stale.bind(path)
        stale.close()
        process = blemu_factory.start(unique_name("SK"), extra_args=["--control", path])
        process.control_path = path
        mode = os.stat(path).st_mode
        assert oct(mode & 0o777) == oct(0o600), f"control socket mode {oct(mode & 0o777)}"
        assert ctl_ok(process, "list")["devices"][0]["name"] == process.name
        # A second blemu on the same path is refused: the first one is live.
        second = run_cli(["run", "heart-rate", "--controller", process.controller, "--control", path, "--name", unique_name("S2")])
        assert second.returncode == 1 and "another process is serving it" in second.stderr, second.describe()
        assert ctl_ok(process, "list")
        assert process.stop() == 0
        assert not os.path.exists(path), "socket file left after a clean stop"

        Path(path).write_text("not a socket\n")
        refused = run_cli(["run", "heart-rate", "--controller", process.controller, "--control", path])
        assert refused.returncode == 1, refused.describe()
        assert len(refused.reason_lines) == 1 and "not a socket" in refused.reason_lines[0], refused.describe()
        assert Path(path).read_text() == "not a socket\n", "the regular file was touched"
    finally:
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# service: a database change at run time


ATT_DATABASE_OUT_OF_SYNC = 0x12
UUID_CLIENT_SUPPORTED_FEATURES = 0x2B29


def test_service_off_and_on_is_announced_by_service_changed_with_a_new_hash(controlled):
    """Vol 3, Part G, 7.1 and 2.5.2.1: taking the Battery service out sends its handle range by
    Service Changed to a client that enabled it; the Database Hash then reads what the central
    computes from what it discovers; a robust-caching client that did not subscribe gets
    Database Out Of Sync once, and its next request is served."""

    async def scenario():
        async with AsyncControl(controlled.control_path) as control, connected(controlled, discover=True) as conn:
            gatt = conn.service(UUID_GATT_SERVICE)
            hash_characteristic = conn.characteristic(UUID_DATABASE_HASH, UUID_GATT_SERVICE)
            service_changed = conn.characteristic(UUID_SERVICE_CHANGED, UUID_GATT_SERVICE)
            features = [c for c in gatt.characteristics if c.uuid == UUID.from_16_bits(UUID_CLIENT_SUPPORTED_FEATURES)]
            assert features, "no Client Supported Features characteristic"
            battery = conn.service(UUID_BATTERY_SERVICE)
            battery_range = (battery.handle, battery.end_group_handle)
            level_handle = conn.characteristic(UUID_BATTERY_LEVEL, UUID_BATTERY_SERVICE).handle
            whole_hash = await conn.read(hash_characteristic)

            await conn.subscribe(service_changed)
            await conn.write(features[0], bytes([0x01]))  # Robust Caching (Vol 3, Part G, 7.2)
            before = len(conn.indications)
            reply = await control.ok("service", device="heart-rate", uuid="180F", on=False)
            assert reply["changed"] is True and reply["indicated"] == 1 and reply["change_unaware"] == 1, reply
            assert (int(reply["range"]["start"], 16), int(reply["range"]["end"], 16)) == battery_range, reply
            [indication] = await collect_indications(conn, service_changed.handle, 1, 5, before)
            assert indication.value == struct.pack("<HH", *battery_range), indication.value.hex()

            # Bumble confirmed the indication, so it is change-aware: the gone handle is just gone.
            response = await conn.request_expecting_error(raw_request(0x0A, struct.pack("<H", level_handle)))
            assert response.error_code == ATT_INVALID_HANDLE, response
            new_hash = await conn.read(hash_characteristic)
            assert new_hash != whole_hash and new_hash.hex() == reply["database_hash"], (new_hash.hex(), reply)
            assert new_hash == await conn.computed_database_hash()
            listing = (await control.ok("list"))["devices"][0]
            assert [u.upper() for u in listing["services_out"]] == ["180F"], listing

            # Not subscribed any more: the next change reaches this client as Database Out Of Sync.
            await conn.unsubscribe(service_changed)
            reply = await control.ok("service", device="heart-rate", uuid="0x180F", on=True)
            assert reply["changed"] is True and reply["indicated"] == 0 and reply["change_unaware"] == 1, reply
            read_level = raw_request(0x0A, struct.pack("<H", level_handle))
            response = await conn.request_expecting_error(read_level)
            assert response.error_code == ATT_DATABASE_OUT_OF_SYNC, response
            assert response.attribute_handle_in_error == level_handle, response
            answer = await conn.request(read_level)
            assert answer.op_code == att.Opcode.ATT_READ_RESPONSE, answer
            assert await conn.read(hash_characteristic) == whole_hash
            assert len(conn.indications) == before + 1, "an indication after unsubscribing"

            # Again: nothing changes, nothing is sent.
            reply = await control.ok("service", device="heart-rate", uuid="180F", on=True)
            assert reply["changed"] is False and reply["range"] is None, reply
            assert (await control.ok("list"))["devices"][0]["services_out"] == []

    run(scenario())


def test_service_off_and_on_is_what_a_scanner_sees(controlled):
    """The advertising data follows the database: with Heart Rate 0x180D taken out, a new scan
    shows only Battery 0x180F in the Complete List of 16-bit Service UUIDs (Core Supplement,
    Part A, 1.1), the other AD structures as before; put back, 0x180D is listed again. Reports
    from before the change may still arrive, so each step waits for a report that shows it."""
    address = str(controlled.scan.address)
    hr, battery = 0x180D, 0x180F

    def uuid_list(result) -> list[tuple[int, bytes]]:
        return [(t, d) for t, d in result.adv_structures if t in (AD_INCOMPLETE_16BIT_UUIDS, AD_COMPLETE_16BIT_UUIDS)]

    def others(result) -> list[tuple[int, bytes]]:
        return [(t, d) for t, d in result.adv_structures if t not in (AD_INCOMPLETE_16BIT_UUIDS, AD_COMPLETE_16BIT_UUIDS)]

    def advertising(uuids: list[int]):
        wanted = [(AD_COMPLETE_16BIT_UUIDS, b"".join(struct.pack("<H", u) for u in uuids))]
        return lambda result: str(result.address) == address and uuid_list(result) == wanted

    async def scenario():
        async with AsyncControl(controlled.control_path) as control, Central(controlled.controller, name="svc-watch") as central:
            before = await central.scan_until(advertising([hr, battery]), "0x180D and 0x180F advertised",
                                              timeout=20.0, want_scan_response=False, alive=controlled.exited)
            try:
                reply = await control.ok("service", device="heart-rate", uuid="180D", on=False)
                assert reply["changed"] is True and reply["advertising_changed"] is True, reply
                without = await central.scan_until(advertising([battery]), "only 0x180F advertised",
                                                   timeout=30.0, want_scan_response=False, alive=controlled.exited)
                assert others(without) == others(before), (without.adv_structures, before.adv_structures)
                assert without.matches_name(controlled.name) and without.connectable, without
                # Advertising went on: the device is still listed as advertising.
                assert (await control.ok("list"))["devices"][0]["advertising"] is True

                reply = await control.ok("service", device="heart-rate", uuid="180D", on=True)
                assert reply["changed"] is True and reply["advertising_changed"] is True, reply
                back = await central.scan_until(advertising([hr, battery]), "0x180D advertised again",
                                                timeout=30.0, want_scan_response=False, alive=controlled.exited)
                assert back.adv_data == before.adv_data, (back.adv_data.hex(), before.adv_data.hex())
            finally:
                await control.request("service", device="heart-rate", uuid="180D", on=True)

            # A service that is not advertised: the advertising data is left alone.
            reply = await control.ok("service", device="heart-rate", uuid="180A", on=False)
            assert reply["changed"] is True and reply["advertising_changed"] is False, reply
            reply = await control.ok("service", device="heart-rate", uuid="180A", on=True)
            assert reply["advertising_changed"] is False, reply

    run(scenario(), timeout=120)


def test_service_refusals_change_nothing(controlled):
    for uuid, fragment in (("1800", "cannot be taken out"), ("1801", "cannot be taken out"), ("1234", "no service")):
        result = ctl(controlled, "service", "heart-rate", uuid, "off")
        assert result.returncode != 0, result.describe()
        reply = json.loads(result.stdout.splitlines()[0])
        assert reply["ok"] is False and fragment in reply["error"], reply
    result = ctl(controlled, "service", "heart-rate", "180F", "maybe")
    assert result.returncode != 0 and "on or off" in result.stderr, result.describe()
    assert ctl_ok(controlled, "list")["devices"][0]["services_out"] == []


# ---------------------------------------------------------------------------------------------
# CONTROL.md's shell script, as written


def control_md_script() -> str:
    """The code block of CONTROL.md's "From a shell script"."""
    text = (REPO / "Docs" / "CONTROL.md").read_text()
    section = text.split("## From a shell script", 1)[1]
    return section.split("```sh\n", 1)[1].split("```", 1)[0]


def blemu_on_path(tmp_path: Path) -> dict[str, str]:
    """An environment where `blemu` is the blemu under test, as the script expects."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "blemu").symlink_to(blemu_binary())
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


def test_the_shell_scripts_wait_gives_up_when_blemu_has_exited(tmp_path):
    """The script's wait for the control socket, up to its loop's `done`, with a blemu that exits at
    once (nothing at its controller): it ends, non-zero, saying so, instead of spinning forever."""
    lines = control_md_script().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("until blemu ctl"))
    end = next(i for i in range(start, len(lines)) if lines[i].rstrip().endswith("done"))
    head = "\n".join(lines[:end + 1]) + "\n"
    head = head.replace("tcp:127.0.0.1:6402", f"tcp:127.0.0.1:{closed_tcp_port()}")
    try:
        result = subprocess.run(["sh", "-c", head], capture_output=True, text=True, env=blemu_on_path(tmp_path),
                                stdin=subprocess.DEVNULL, timeout=20)
    except subprocess.TimeoutExpired:
        raise AssertionError("the script's wait still spins 20 s after blemu exited") from None
    assert result.returncode != 0, result
    assert "blemu exited" in result.stderr, result.stderr


def test_the_shell_script_runs_as_written(rootcanal, tmp_path):
    """The whole script on the module's radio (its pause shortened): every `blemu ctl` in it is
    answered ok (`set -e` stops it at the first that is not) and it ends with blemu stopped."""
    script = control_md_script().replace("tcp:127.0.0.1:6402", rootcanal.controller_spec).replace("sleep 10", "sleep 1")
    if shutil.which("jq") is None:
        pytest.fail("jq is needed to run CONTROL.md's script as written: run scripts/setup --tests (apt-get install jq)", pytrace=False)
    result = subprocess.run(["sh", "-c", script], capture_output=True, text=True, env=blemu_on_path(tmp_path),
                            stdin=subprocess.DEVNULL, timeout=60)
    assert result.returncode == 0, f"status {result.returncode}\n--- stdout:\n{result.stdout}\n--- stderr:\n{result.stderr[-3000:]}"
    assert result.stdout.strip().splitlines()[-1] == "0", result.stdout   # connections: none on the bench
