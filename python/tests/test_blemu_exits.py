"""A blemu that dies under the kit: waits, commands and `with Blemu(...)` say it died, with its
exit status and the tail of its output. The blemu here is a stand-in (a Python script that
answers `list` and `watch` like blemu, and exits with status 3 when told to crash), so these
tests need neither a build nor a radio."""

from __future__ import annotations

import stat
import sys
import time
from pathlib import Path

import pytest

from blemu_testkit import Blemu, BlemuError, Control, EventTimeout

FAKE_BLEMU = r'''
import json, os, signal, socket, sys, threading
control = sys.argv[sys.argv.index("--control") + 1]
signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind(control)
listener.listen(8)
print("fake blemu: listening", flush=True)
DEVICE = {"ref": "heart-rate", "device": "heart-rate", "name": "HR", "address": "C0:00:00:00:00:01",
          "advertising": True}

def serve(conn):
    for line in conn.makefile("rb"):
        request = json.loads(line)
        if request.get("cmd") == "set" and request.get("key") == "crash":
            print("fake blemu: Fatal error: the emulated crash", file=sys.stderr, flush=True)
            os._exit(3)
        reply = {"id": request["id"], "ok": True}
        if request.get("cmd") == "list":
            reply["devices"] = [DEVICE]
        conn.sendall(json.dumps(reply).encode() + b"\n")

while True:
    conn, _ = listener.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
'''


@pytest.fixture
def fake_blemu(tmp_path: Path) -> str:
    path = tmp_path / "blemu"
    path.write_text(f"#!{sys.executable}\n{FAKE_BLEMU}")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def crash(blemu: Blemu) -> None:
    """Tell the stand-in to crash, from a connection of the test's own (its reply never comes)."""
    with Control(blemu.control_path, timeout=5) as control, pytest.raises(BlemuError):
        control.set("heart-rate", "crash", 1)
    assert blemu.process is not None
    blemu.process.wait(5)


def test_a_wait_after_blemu_died_says_its_exit_status_and_output(fake_blemu, tmp_path):
    blemu = Blemu("heart-rate", binary=fake_blemu, log_dir=tmp_path).start(timeout=10)
    try:
        crash(blemu)
        started = time.monotonic()
        with pytest.raises(EventTimeout) as died:
            blemu.wait_for("connected", timeout=20)
        assert time.monotonic() - started < 5
        message = str(died.value)
        assert "blemu exited (status 3)" in message, message
        assert "Fatal error: the emulated crash" in message, message
    finally:
        blemu.stop()


def test_a_command_after_blemu_died_says_its_exit_status(fake_blemu, tmp_path):
    blemu = Blemu("heart-rate", binary=fake_blemu, log_dir=tmp_path).start(timeout=10)
    try:
        with pytest.raises(BlemuError) as died:
            blemu.set("crash", 1)  # it dies before answering
        assert "blemu exited (status 3)" in str(died.value)
        with pytest.raises(BlemuError, match=r"blemu exited \(status 3\)"):
            blemu.list()
    finally:
        blemu.stop()


def test_with_blemu_raises_when_blemu_crashed_in_the_block(fake_blemu, tmp_path):
    with pytest.raises(BlemuError) as died:
        with Blemu("heart-rate", binary=fake_blemu, log_dir=tmp_path) as blemu:
            crash(blemu)
    message = str(died.value)
    assert "exited before the end of the `with` block" in message, message
    assert "status 3" in message and "Fatal error: the emulated crash" in message, message


def test_with_blemu_is_quiet_after_a_clean_stop_and_leaves_the_block_s_own_error_alone(fake_blemu, tmp_path):
    with Blemu("heart-rate", binary=fake_blemu, log_dir=tmp_path) as blemu:
        assert blemu.address() == "C0:00:00:00:00:01"
    assert blemu.exit_status == 0
    with pytest.raises(KeyError):
        with Blemu("heart-rate", binary=fake_blemu, log_dir=tmp_path) as blemu:
            crash(blemu)
            raise KeyError("the test's own failure")
