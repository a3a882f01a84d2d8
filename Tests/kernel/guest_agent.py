"""The kernel test guest's agent: runs commands for the host's driver (Tests/kernel/run.py).

Runs as root in the guest, chrooted into the host's root (read-only over 9p), started by
Tests/kernel/init; or on the host itself for `scripts/test-kernel --adapter hciN` (then a
third argument names the folder for the processes' output). It connects to the driver at HOST:PORT (qemu's user network: the host is
10.0.2.2) and answers one JSON request per line with one JSON line:

  {"op": "run", "cmd": [...], "timeout": s, "env": {...}}  -> {"rc", "out", "err"}
  {"op": "spawn", "id": ID, "cmd": [...], "env": {...}}    -> {"pid"}   (output to a log)
  {"op": "log", "id": ID}                                  -> {"text", "rc"}   (rc null: running)
  {"op": "signal", "id": ID, "signal": N}                  -> {}
  {"op": "wait", "id": ID, "timeout": s}                   -> {"rc"}   (null: still running)
  {"op": "bye", "poweroff": bool}                          -> {} and the agent exits (in the
                                   guest, marked by /run/blemu-kernel-guest, with poweroff under
                                   systemd: the guest powers off at once)

Only the standard library: this is the host's /usr/bin/python3 seen through the chroot.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

# /run is a tmpfs in the guest; /tmp is the host's, read-only (the repository may be there).
LOG_DIR = "/run/blemu-kernel"


def connect(host: str, port: int) -> socket.socket:
    deadline = time.monotonic() + 30
    while True:
        try:
            return socket.create_connection((host, port), timeout=10)
        except OSError as error:
            if time.monotonic() > deadline:
                raise SystemExit(f"guest-agent: cannot reach the driver at {host}:{port}: {error}")
            time.sleep(0.5)


def environment(extra: dict[str, str] | None) -> dict[str, str]:
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "LANG": "C.UTF-8",
           "TMPDIR": LOG_DIR}
    env.update(extra or {})
    return env


def main() -> int:
    global LOG_DIR
    host, port = sys.argv[1], int(sys.argv[2])
    if len(sys.argv) > 3:  # run on the host itself (scripts/test-kernel --adapter)
        LOG_DIR = sys.argv[3]
    os.makedirs(LOG_DIR, exist_ok=True)
    conn = connect(host, port)
    conn.settimeout(None)
    reader = conn.makefile("r", encoding="utf-8")
    processes: dict[str, subprocess.Popen[bytes]] = {}

    def answer(message: dict) -> None:
        conn.sendall((json.dumps(message) + "\n").encode())

    answer({"hello": os.uname().release})
    for line in reader:
        request = json.loads(line)
        op = request.get("op")
        try:
            if op == "run":
                try:
                    done = subprocess.run(request["cmd"], capture_output=True, timeout=request.get("timeout", 60),
                                          env=environment(request.get("env")), stdin=subprocess.DEVNULL)
                    answer({"rc": done.returncode, "out": done.stdout.decode(errors="replace"),
                            "err": done.stderr.decode(errors="replace")})
                except subprocess.TimeoutExpired as expired:
                    answer({"rc": None, "out": (expired.stdout or b"").decode(errors="replace"),
                            "err": (expired.stderr or b"").decode(errors="replace") + "\n(timed out)"})
            elif op == "spawn":
                ident = request["id"]
                log = open(os.path.join(LOG_DIR, ident + ".log"), "wb")
                processes[ident] = subprocess.Popen(request["cmd"], stdout=log, stderr=subprocess.STDOUT,
                                                    stdin=subprocess.DEVNULL, env=environment(request.get("env")),
                                                    start_new_session=True)
                log.close()
                answer({"pid": processes[ident].pid})
            elif op == "log":
                ident = request["id"]
                with open(os.path.join(LOG_DIR, ident + ".log"), "rb") as log:
                    text = log.read().decode(errors="replace")
                answer({"text": text, "rc": processes[ident].poll()})
            elif op == "signal":
                process = processes[request["id"]]
                if process.poll() is None:
                    os.kill(process.pid, request.get("signal", signal.SIGTERM))
                answer({})
            elif op == "wait":
                try:
                    rc = processes[request["id"]].wait(request.get("timeout", 10))
                except subprocess.TimeoutExpired:
                    rc = None
                answer({"rc": rc})
            elif op == "bye":
                for process in processes.values():
                    if process.poll() is None:
                        process.kill()
                answer({})
                conn.close()
                # Only in the qemu guest, when the driver asks: under systemd (the agent is a
                # service) power off at once; under Tests/kernel/init the init powers off when
                # the agent exits. Never on the host (scripts/test-kernel --adapter).
                if request.get("poweroff") and os.path.exists("/run/blemu-kernel-guest"):
                    with open("/proc/1/comm") as comm:
                        if comm.read().strip() == "systemd":
                            subprocess.run(["systemctl", "poweroff", "--force", "--force"])
                return 0
            else:
                answer({"error": f"unknown op {op!r}"})
        except Exception as error:  # report it to the driver, keep serving
            answer({"error": repr(error)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
