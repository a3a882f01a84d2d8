"""The control socket over a fleet (Docs/CONTROL.md, "Naming several devices"): `list` and
`watch` by a pattern (`Tag 0*`) or by a fleet (`fleet:NAME`), on a real run of a small fleet;
the commands that change a device refuse a pattern."""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import time

from harness import log_dir, run_cli, unique_name


def ctl(path: str, *args: str):
    return run_cli(["ctl", path, *args], timeout=15)


def ctl_reply(path: str, *args: str) -> dict:
    result = ctl(path, *args)
    lines = result.stdout.splitlines()
    assert len(lines) == 1, result.describe()
    return json.loads(lines[0])


def start_fleet(blemu_factory, prefix: str):
    """Twelve ibeacons `PREFIX 0001`… of fleet `beacons`, and two of an unnamed fleet."""
    folder = tempfile.mkdtemp(prefix="blemu-fc-", dir="/tmp")
    path = os.path.join(folder, "control.sock")
    config = log_dir() / f"fleet-control-{prefix}.yaml"
    config.write_text(f"""
fleets:
  - fleet: beacons
    device: ibeacon
    count: 12
    seed: 11
    name: "{prefix} {{index:04}}"
  - device: ibeacon
    count: 2
    seed: 12
    name: "{prefix}-other {{index}}"
""")
    blemu = blemu_factory.start(None, wait_advertising=False, devices=[],
                                extra_args=["--config", str(config), "--share-controller", "--control", path])
    deadline = time.monotonic() + 20
    while True:
        if os.path.exists(path):
            reply = ctl_reply(path, "list")
            if reply.get("ok") and len(reply["devices"]) == 14 and all(d["advertising"] for d in reply["devices"]):
                return blemu, path, folder
        assert blemu.exited() is None, f"blemu stopped:\n{blemu.log_tail()}"
        assert time.monotonic() < deadline, f"the fleet did not come up within 20 s:\n{blemu.log_tail()}"
        time.sleep(0.2)


def test_list_by_a_pattern_or_a_fleet_gives_those_members_and_set_refuses_a_pattern(rootcanal, blemu_factory):
    prefix = unique_name("FC")
    blemu, path, folder = start_fleet(blemu_factory, prefix)
    try:
        listed = ctl_reply(path, "list", f"{prefix} 00[1-4]?")
        assert listed["ok"] is True, listed
        assert [d["name"] for d in listed["devices"]] == [f"{prefix} 0010", f"{prefix} 0011", f"{prefix} 0012"], listed
        assert {d["fleet"] for d in listed["devices"]} == {"fleet:beacons"}
        zero_padded = ctl_reply(path, "list", f"{prefix} 0*")
        assert [d["name"] for d in zero_padded["devices"]] == [f"{prefix} {i:04}" for i in range(1, 13)], zero_padded
        assert len(ctl_reply(path, "list", "fleet:beacons")["devices"]) == 12
        others = ctl_reply(path, "list", "fleet:2")
        assert [d["name"] for d in others["devices"]] == [f"{prefix}-other 1", f"{prefix}-other 2"], others
        # A command that changes a device takes one: a pattern is refused, nothing changes.
        refused = ctl(path, "advertise", f"{prefix} 0*", "off")
        assert refused.returncode != 0 and "is a pattern: advertise acts on one device" in refused.stdout + refused.stderr, refused.describe()
        assert all(d["advertising"] for d in ctl_reply(path, "list")["devices"])
        # A bad pattern: the reason, before anything is sent.
        bad = ctl(path, "list", f"{prefix} [0-4")
        assert bad.returncode != 0 and "not closed by ]" in bad.stdout + bad.stderr, bad.describe()
    finally:
        assert blemu.stop() == 0, blemu.log_tail()
        shutil.rmtree(folder, ignore_errors=True)


def test_watch_by_a_pattern_sees_the_events_of_matching_members_only(rootcanal, blemu_factory):
    prefix = unique_name("FW")
    blemu, path, folder = start_fleet(blemu_factory, prefix)
    try:
        refs = {d["name"]: d["ref"] for d in ctl_reply(path, "list")["devices"]}
        watcher = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        watcher.settimeout(10)
        watcher.connect(path)
        watcher.sendall((json.dumps({"id": 1, "cmd": "watch", "device": f"{prefix} 000[1-3]", "kinds": "advertising"}) + "\n").encode())
        stream = watcher.makefile("rb")
        reply = json.loads(stream.readline())
        assert reply["ok"] is True and reply["devices"] == 3 and reply["device"] == f"{prefix} 000[1-3]", reply
        # A pattern that fits one member is still a pattern: the text, and a count.
        one = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        one.settimeout(10)
        one.connect(path)
        one.sendall((json.dumps({"id": 2, "cmd": "watch", "device": f"{prefix} 000[1]"}) + "\n").encode())
        one_reply = json.loads(one.makefile("rb").readline())
        one.close()
        assert one_reply["ok"] is True and one_reply["devices"] == 1 and one_reply["device"] == f"{prefix} 000[1]", one_reply
        # Two members switched off and on: one the pattern fits, one it does not (switched first).
        for name in (f"{prefix} 0005", f"{prefix} 0002"):
            assert ctl_reply(path, "advertise", name, "off")["ok"] is True
        for name in (f"{prefix} 0005", f"{prefix} 0002"):
            assert ctl_reply(path, "advertise", name, "on")["ok"] is True
        seen = []
        while len([e for e in seen if e["device"] == refs[f"{prefix} 0002"]]) < 2:
            seen.append(json.loads(stream.readline()))
        watcher.close()
        assert {e["device"] for e in seen} == {refs[f"{prefix} 0002"]}, seen
        assert [e["on"] for e in seen] == [False, True], seen
    finally:
        assert blemu.stop() == 0, blemu.log_tail()
        shutil.rmtree(folder, ignore_errors=True)
