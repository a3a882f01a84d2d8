"""blemu's systemd journal backend (Docs/REFERENCE.md, "Logs"; Docs/DIAGNOSTICS.md).

A real systemd-journald receives blemu's entries (started here when none runs: Debian's
`systemd` package ships it, and it runs by hand once /run/systemd/journal exists); the tests
read them back with `journalctl -o json _PID=<blemu>` and check the events, fields, priorities
and the flood budget, the message catalog through journalctl's own parser, and which
destination `--log auto` picks.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from bumble import att

from bumble_central import (
    ATT_INVALID_HANDLE,
    UUID_HEART_RATE_CONTROL_POINT,
    UUID_HEART_RATE_MEASUREMENT,
    UUID_HEART_RATE_SERVICE,
)
from harness import REPO, BlemuProcess, connected, run, start_advertising, unique_name

JOURNALD = Path("/lib/systemd/systemd-journald")
JOURNAL_SOCKET = Path("/run/systemd/journal/socket")
CATALOG = REPO / "Docs" / "blemu.catalog"
# The MESSAGE_ID table in the code, one `case .event: return "<32 hex>"` per event kind.
MESSAGE_ID_SOURCE = REPO / "Sources" / "Journal" / "JournalFields.swift"
# The flood budget's defaults (Sources/Journal/JournalSink.swift, Docs/REFERENCE.md "Budgets").
BURST, PER_SECOND = 20, 2
# More errors than the host's own line budget passes (100 request events per 10 s per device):
# logging to the journal, that budget steps aside (LogBudget.handlerBudgetsFloods), so every
# error of the flood reaches the journal's budget and is counted there once.
FLOOD = 150
HCI_REMOTE_USER_TERMINATED = 0x13
ID = re.compile(r"^[0-9a-f]{32}$")


def journal_answers() -> bool:
    """Whether a journald listens on the native socket (a datagram to it is accepted)."""
    if not JOURNAL_SOCKET.exists():
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(str(JOURNAL_SOCKET))
        except OSError:
            return False
    return True


@pytest.fixture(scope="session")
def journald():
    """A running systemd-journald for the session: the system's, or one started here (and
    stopped at the end)."""
    if journal_answers():
        yield None
        return
    if not JOURNALD.exists() or shutil.which("journalctl") is None:
        pytest.fail(f"{JOURNALD} or journalctl missing: run scripts/setup --tests (Debian package systemd)", pytrace=False)
    if os.geteuid() != 0:
        pytest.fail("no journald runs and starting one needs root (it owns /run/systemd/journal)", pytrace=False)
    JOURNAL_SOCKET.parent.mkdir(parents=True, exist_ok=True)
    log = open(tempfile.mkstemp(prefix="journald-", suffix=".log")[1], "wb")
    process = subprocess.Popen([str(JOURNALD)], stdout=log, stderr=log, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while not journal_answers():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"systemd-journald did not come up (status {process.poll()}); see {log.name}", pytrace=False)
        time.sleep(0.05)
    yield process
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5)
    log.close()


def journal_entries(process: BlemuProcess, *extra: str) -> list[dict[str, str]]:
    """The journal's entries of one blemu process, as `journalctl -o json` gives them (since it
    started: an older process may have had the same PID)."""
    pid = process.process.pid
    since = f"--since=@{int(process.started_at) - 1}"
    # journald writes what it receives in order; --sync makes sure it has written it all.
    subprocess.run(["journalctl", "--sync"], check=False, capture_output=True, timeout=30)
    result = subprocess.run(["journalctl", "--no-pager", "-o", "json", since, f"_PID={pid}", *extra],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode in (0, 1), f"journalctl failed: {result.stderr}"
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


def code_message_ids() -> set[str]:
    ids = set(re.findall(r'return "([0-9a-f]{32})"', MESSAGE_ID_SOURCE.read_text()))
    assert len(ids) == 21, f"{len(ids)} MESSAGE_IDs in {MESSAGE_ID_SOURCE}; BLEMU_EVENT has 21 values"
    return ids


def catalog_ids() -> list[str]:
    return [line[3:].strip() for line in CATALOG.read_text().splitlines() if line.startswith("-- ")]


def start_blemu(rootcanal, log_args: list[str], env: dict[str, str | None] | None = None,
                stderr_identity_env: str | None = None) -> BlemuProcess:
    """A heart-rate blemu, advertising. `stderr_identity_env` names an environment variable to
    set to the device:inode of the file its stderr goes to (JOURNAL_STREAM's format)."""
    environment = {"JOURNAL_STREAM": None, "INVOCATION_ID": None, **(env or {})}
    process = BlemuProcess(rootcanal.controller_spec, unique_name("JR"), log_args=log_args,
                           env=environment, split_stdout=True)
    if stderr_identity_env is not None:
        status = os.stat(process.log_path)
        process.env[stderr_identity_env] = f"{status.st_dev}:{status.st_ino}"
    process.started_at = time.time()
    return start_advertising(process, rootcanal)


def stop(process: BlemuProcess) -> None:
    status = process.stop()
    assert status == 0, f"blemu exited with {status}; output:\n{process.log_tail()}"


def by_event(entries: list[dict[str, str]], event: str) -> list[dict[str, str]]:
    return [entry for entry in entries if entry.get("BLEMU_EVENT") == event]


def describe(entries: list[dict[str, str]]) -> str:
    return "\n".join(f"{e.get('PRIORITY')} {e.get('BLEMU_EVENT', '-')}: {e.get('MESSAGE')}" for e in entries[-80:])


def test_a_session_in_the_journal(journald, rootcanal):
    """Connect, write, flood ATT errors, disconnect, stop: each event is in the journal with its
    fields and priority, and the flood costs the burst plus a counted remainder."""
    blemu = start_blemu(rootcanal, ["--log", "journal", "--log-level", "info"])
    received_errors = 0

    flood_seconds = 0.0

    async def scenario() -> tuple[str, int, int]:
        nonlocal received_errors, flood_seconds
        async with connected(blemu, "journal-central", discover=True) as conn:
            control_point = conn.characteristic(UUID_HEART_RATE_CONTROL_POINT, UUID_HEART_RATE_SERVICE)
            await conn.exchange_mtu(247)
            await conn.subscribe(conn.characteristic(UUID_HEART_RATE_MEASUREMENT, UUID_HEART_RATE_SERVICE))
            await conn.write(control_point, b"\x01")
            # The flood: Read Requests for handle 0x0000 (Invalid Handle), sent back to back
            # without waiting for the answers, counted as the Error Responses come back.
            original = conn.client.on_gatt_pdu

            def count(pdu: att.ATT_PDU) -> None:
                nonlocal received_errors
                if pdu.op_code == att.Opcode.ATT_ERROR_RESPONSE and pdu.error_code == ATT_INVALID_HANDLE:
                    received_errors += 1
                    return
                original(pdu)

            conn.client.on_gatt_pdu = count  # type: ignore[method-assign]
            request = bytes(att.ATT_Read_Request(attribute_handle=0x0000))
            flood_started = time.monotonic()
            for _ in range(FLOOD):
                conn.connection.send_l2cap_pdu(att.ATT_CID, request)
            deadline = flood_started + 30
            while received_errors < FLOOD and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            flood_seconds = time.monotonic() - flood_started
            conn.client.on_gatt_pdu = original  # type: ignore[method-assign]
            # Quiet for longer than the budget waits before reporting a count on its own.
            await asyncio.sleep(1.5)
            handle = conn.connection.handle
            central = str(conn.central.device.random_address)
            reason = await conn.disconnect()
            return central, handle, reason

    try:
        central, handle, _ = run(scenario(), 90)
        assert received_errors == FLOOD, f"{received_errors} of {FLOOD} Error Responses came back"
        deadline = time.monotonic() + 10
        while not by_event(journal_entries(blemu), "disconnected") and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        stop(blemu)
    entries = journal_entries(blemu)
    assert entries, f"no journal entries for blemu's PID {blemu.process.pid}; its stderr:\n{blemu.log_tail()}"
    listing = describe(entries)

    # Every entry: identifier, priority, where in the code.
    for entry in entries:
        assert entry.get("SYSLOG_IDENTIFIER") == "blemu", entry
        assert entry.get("PRIORITY", "") in "01234567" and entry.get("PRIORITY"), entry
        assert entry.get("CODE_FILE", "").endswith(".swift") and entry.get("CODE_LINE", "").isdigit() and entry.get("CODE_FUNC"), entry
    # Every event entry has a MESSAGE_ID fixed per kind, one of the code's, in the catalog.
    ids_by_event: dict[str, set[str]] = {}
    for entry in entries:
        if "BLEMU_EVENT" in entry:
            ids_by_event.setdefault(entry["BLEMU_EVENT"], set()).add(entry.get("MESSAGE_ID", ""))
        else:
            assert "MESSAGE_ID" not in entry, entry
    for event, ids in ids_by_event.items():
        assert len(ids) == 1 and ID.match(next(iter(ids))), f"{event}: MESSAGE_IDs {ids}"
    all_ids = [next(iter(ids)) for ids in ids_by_event.values()]
    assert len(set(all_ids)) == len(all_ids), f"two event kinds share a MESSAGE_ID: {ids_by_event}"
    assert set(all_ids) <= code_message_ids() and set(all_ids) <= set(catalog_ids()), ids_by_event

    def one(event: str) -> dict[str, str]:
        found = by_event(entries, event)
        assert found, f"no BLEMU_EVENT={event} in the journal:\n{listing}"
        return found[-1]

    started, stopping = one("started"), one("stopping")
    assert started["PRIORITY"] == "5" and stopping["PRIORITY"] == "5", (started, stopping)
    up = one("controller-up")
    assert up["BLEMU_DEVICE"] == "heart-rate" and up["BLEMU_CONTROLLER"] == rootcanal.controller_spec, up
    assert one("advertising-started")["BLEMU_NAME"] == blemu.name
    one("advertising-stopped")

    link = {"BLEMU_DEVICE": "heart-rate", "BLEMU_PEER": central, "BLEMU_CONN_HANDLE": str(handle)}
    connected_entry = one("connected")
    assert {k: connected_entry.get(k) for k in link} == link and connected_entry["PRIORITY"] == "5", connected_entry
    assert "interval" in connected_entry["MESSAGE"], connected_entry
    disconnected = one("disconnected")
    assert {k: disconnected.get(k) for k in link} == link, disconnected
    # The central hung up: Remote User Terminated Connection at blemu's end.
    assert disconnected["BLEMU_REASON"] == f"0x{HCI_REMOTE_USER_TERMINATED:02x}" and disconnected["PRIORITY"] == "5", disconnected

    writes = [e for e in by_event(entries, "write") if e.get("BLEMU_PEER") == central]
    assert writes and re.fullmatch(r"0x[0-9a-f]{4}", writes[-1].get("BLEMU_ATT_HANDLE", "")), listing
    assert writes[-1]["PRIORITY"] == "6" and writes[-1]["BLEMU_CONN_HANDLE"] == str(handle)
    assert any("energy expended reset" in e["MESSAGE"] for e in by_event(entries, "state-changed")), listing
    for event in ("subscribed", "unsubscribed"):
        entry = one(event)
        assert {k: entry.get(k) for k in link} == link and re.fullmatch(r"0x[0-9a-f]{4}", entry.get("BLEMU_ATT_HANDLE", "")), entry
    mtu = one("mtu-changed")
    assert {k: mtu.get(k) for k in link} == link and "247" in mtu["MESSAGE"], mtu

    # The flood: a burst, then the rate, and every error accounted for.
    errors = [e for e in by_event(entries, "att-error") if e.get("BLEMU_ATT_HANDLE") == "0x0000"]
    for entry in errors:
        assert entry.get("BLEMU_ATT_OPCODE") == "0x0a" and entry.get("BLEMU_ATT_ERROR") == "0x01", entry
        assert {k: entry.get(k) for k in link} == link and entry["PRIORITY"] == "6", entry
    suppressed = sum(int(e.get("BLEMU_SUPPRESSED", "0")) for e in errors)
    # A count that went out on its own (the flood then stopped) is an entry of its own.
    summaries = [e for e in errors if "similar entries suppressed; the last:" in e["MESSAGE"]]
    assert summaries and all(int(e.get("BLEMU_SUPPRESSED", "0")) > 0 for e in summaries), (
        f"no entry of its own reports the suppressed count:\n{describe(errors)}")
    one_each = len(errors) - len(summaries)
    assert suppressed > 0, f"the flood of {FLOOD} errors was not budgeted:\n{describe(errors)}"
    assert one_each + suppressed == FLOOD, (
        f"{one_each} att-error entries + {suppressed} suppressed != {FLOOD} errors sent:\n{describe(errors)}")
    # The burst, then 2 a second while the flood lasts (well under a second over rootcanal).
    allowed = BURST + PER_SECOND * math.ceil(flood_seconds)
    assert BURST <= one_each <= allowed, f"{one_each} att-error entries for a {flood_seconds:.2f} s flood:\n{describe(errors)}"

    # `journalctl -p warning` keeps out the routine: links, writes, the session's start and stop.
    warnings = journal_entries(blemu, "-p", "warning")
    routine = [e for e in warnings if e.get("BLEMU_EVENT") in
               {"connected", "disconnected", "write", "att-error", "started", "stopping", "controller-up", "advertising-started"}]
    assert not routine, f"routine events at warning or above:\n{describe(routine)}"
    assert all(int(e["PRIORITY"]) <= 4 for e in warnings), describe(warnings)

    # Nothing went to stderr (or stdout) but what is not a log entry.
    assert "event=" not in blemu.log_path.read_text(errors="replace"), blemu.log_tail()


def test_the_catalog_through_journalctl(tmp_path):
    """journalctl's own parser reads Docs/blemu.catalog: --update-catalog into a root of the
    test's own, then --list-catalog names every MESSAGE_ID of the code, once, as blemu's."""
    if shutil.which("journalctl") is None:
        pytest.fail("journalctl missing: run scripts/setup --tests (Debian package systemd)", pytrace=False)
    catalog_dir = tmp_path / "usr" / "lib" / "systemd" / "catalog"
    catalog_dir.mkdir(parents=True)
    shutil.copy(CATALOG, catalog_dir / "blemu.catalog")
    update = subprocess.run(["journalctl", f"--root={tmp_path}", "--update-catalog"], capture_output=True, text=True, timeout=30)
    assert update.returncode == 0 and not update.stderr.strip(), f"journalctl --update-catalog: {update.stderr}"
    assert (tmp_path / "var" / "lib" / "systemd" / "catalog" / "database").exists()
    listed = subprocess.run(["journalctl", f"--root={tmp_path}", "--list-catalog"], capture_output=True, text=True, timeout=30)
    assert listed.returncode == 0, listed.stderr
    rows = [line.split(" ", 1) for line in listed.stdout.splitlines() if line.strip()]
    assert all(len(row) == 2 and row[1].startswith("blemu: ") for row in rows), listed.stdout
    assert sorted(row[0] for row in rows) == sorted(code_message_ids()), listed.stdout
    # Each entry's text comes out under its id, with the header journalctl -x shows.
    for id in code_message_ids():
        dumped = subprocess.run(["journalctl", f"--root={tmp_path}", "--dump-catalog", id],
                                capture_output=True, text=True, timeout=30)
        assert dumped.returncode == 0 and f"-- {id}" in dumped.stdout and "Defined-By: blemu" in dumped.stdout, dumped.stdout


def test_log_auto_outside_systemd_is_stderr(journald, rootcanal):
    blemu = start_blemu(rootcanal, ["--log", "auto"])
    blemu.wait_for_event("started")
    stop(blemu)
    assert blemu.events("controller-up"), f"no stderr log lines with --log auto:\n{blemu.log_tail()}"
    assert not journal_entries(blemu), "--log auto wrote to the journal outside systemd"


def test_log_auto_with_stderr_as_the_journal_stream_is_the_journal(journald, rootcanal):
    """systemd sets JOURNAL_STREAM to stderr's device:inode; a matching one means the journal."""
    blemu = start_blemu(rootcanal, ["--log", "auto"], stderr_identity_env="JOURNAL_STREAM")
    stop(blemu)
    assert by_event(journal_entries(blemu), "started"), f"--log auto with JOURNAL_STREAM = stderr did not use the journal:\n{blemu.log_tail()}"
    assert not blemu.events("started"), "entries went to stderr too"


def test_log_auto_with_an_inherited_journal_stream_is_stderr(journald, rootcanal):
    """A JOURNAL_STREAM naming another file (inherited from a parent whose stderr was the
    journal) is not ours: stderr."""
    status = os.stat("/")
    blemu = start_blemu(rootcanal, ["--log", "auto"], env={"JOURNAL_STREAM": f"{status.st_dev}:{status.st_ino}"})
    blemu.wait_for_event("started")
    stop(blemu)
    assert not journal_entries(blemu), "an inherited JOURNAL_STREAM sent entries to the journal"


def test_log_journal_without_a_journal_says_so_once_and_uses_stderr(rootcanal):
    """No journald behind /run/systemd/journal (a mount namespace of the test's own hides it):
    one line says the journal cannot be reached, and the entries go to stderr."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.fail("this test hides the journal in a mount namespace: it needs unshare (util-linux) and root", pytrace=False)
    name = unique_name("JX")
    process = BlemuProcess(rootcanal.controller_spec, name, log_args=["--log", "journal"],
                           env={"JOURNAL_STREAM": None, "INVOCATION_ID": None}, split_stdout=True)
    inner = " ".join(f"'{part}'" for part in process.command)
    command = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
               f"mkdir -p /run/systemd/journal && mount -t tmpfs none /run/systemd/journal && exec {inner}"]
    with open(process.log_path, "wb") as log:
        child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log, stdin=subprocess.DEVNULL, cwd=REPO,
                                 env={k: v for k, v in os.environ.items() if k not in ("JOURNAL_STREAM", "INVOCATION_ID")})
    process.process = child
    process.started_at = time.time()
    try:
        process.wait_for_event("started", timeout=20)
    finally:
        stop(process)
    text = process.log_path.read_text(errors="replace")
    notices = [line for line in text.splitlines() if "cannot write to the systemd journal" in line]
    assert len(notices) == 1, f"{len(notices)} lines about the journal:\n{text}"
    assert "logging to stderr" in notices[0], notices[0]
    assert process.events("controller-up") and process.events("stopping"), text
