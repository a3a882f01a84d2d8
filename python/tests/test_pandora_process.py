"""`blemu-pandora` as a command: it starts `blemu host` (here a stand-in executable speaking the
host vocabulary on the control socket it is given), serves gRPC, restarts blemu for a factory
reset blemu cannot do, and stops both on SIGTERM."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import grpc
from pandora import host_grpc

TESTS = Path(__file__).resolve().parent
KIT = TESTS.parent

# A `blemu host` stand-in: the control socket of test_pandora_server's FakeHost at --control;
# its address is kept in the state directory (a new one once the directory is emptied), and
# it refuses `reset`, so a factory reset must restart it.
FAKE_BLEMU = textwrap.dedent(f"""\
    #!{sys.executable}
    import os, random, signal, sys, time
    sys.path.insert(0, {str(TESTS)!r})
    from test_pandora_server import FakeHost
    args = sys.argv[1:]
    assert args[0] == "host", args
    option = lambda name: args[args.index(name) + 1]
    state = option("--state-dir")
    os.makedirs(state, exist_ok=True)
    kept = os.path.join(state, "host-random-address")
    if not os.path.exists(kept):
        with open(kept, "w") as f:
            f.write(":".join(f"{{random.randrange(256):02X}}" for _ in range(6)))
    address = open(kept).read()
    with open(os.path.join(os.path.dirname(state), "starts"), "a") as f:
        f.write(" ".join(args) + "\\n")
    host = FakeHost(option("--control"))
    host.handlers["address"] = lambda r: ({{"address": address, "address_type": "public"}}, [])
    host.handlers["reset"] = lambda r: ({{"ok": False, "error": "no reset here"}}, [])
    signal.signal(signal.SIGTERM, lambda *_: (host.close(), os.unlink(option("--control")), sys.exit(0)))
    while True:
        time.sleep(1)
    """)


def test_blemu_pandora_starts_blemu_host_serves_restarts_it_for_a_factory_reset_and_stops_both() -> None:
    work = Path(tempfile.mkdtemp(prefix="pandora-process-", dir="/tmp"))
    fake = work / "blemu"
    fake.write_text(FAKE_BLEMU)
    fake.chmod(0o755)
    state = work / "state"
    environment = {**os.environ, "PYTHONPATH": f"{KIT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    server = subprocess.Popen([sys.executable, "-m", "blemu_testkit.pandora", "--controller", "tcp:127.0.0.1:6402",
                               "--listen", "127.0.0.1:0", "--blemu", str(fake), "--state-dir", str(state),
                               "--name", "bench"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environment)
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        port = re.search(r"on port (\d+)", line)
        assert port, f"no port announced: {line!r}"
        starts = (work / "starts").read_text().splitlines()
        assert len(starts) == 1
        assert starts[0].startswith("host --controller tcp:127.0.0.1:6402 --control ")
        assert f"--state-dir {state}" in starts[0] and "--name bench" in starts[0]
        with grpc.insecure_channel(f"127.0.0.1:{port.group(1)}") as channel:
            host = host_grpc.Host(channel)
            before = host.ReadLocalAddress(timeout=5).address
            host.FactoryReset(timeout=15)
            after = host.ReadLocalAddress(timeout=15).address
        assert len((work / "starts").read_text().splitlines()) == 2, "blemu was not restarted"
        assert before != after, "the state directory was not emptied: the same address after a factory reset"
        assert state.is_dir()  # the user's folder is kept, emptied
    finally:
        server.send_signal(signal.SIGTERM)
        output, _ = server.communicate(timeout=20)
    assert server.returncode == 0, output
    time.sleep(0.2)
    leftovers = [entry.name for entry in Path("/proc").iterdir() if entry.name.isdigit() and running(entry, str(fake))]
    assert not leftovers, f"blemu host still runs after blemu-pandora stopped: pids {leftovers}"


def running(process: Path, program: str) -> bool:
    """Whether /proc/PID runs `program` (its command line names it)."""
    try:
        return program.encode() in (process / "cmdline").read_bytes()
    except OSError:  # it ended meanwhile
        return False
