"""The Pandora server's Security and SecurityStorage services end to end, without Avatar: one
rootcanal radio, blemu-pandora (python/blemu_testkit/pandora) driving `blemu host`, and a Bumble
peripheral advertising from a random address. Run in .venv-avatar (it has grpc, the Pandora
protos and Bumble 0.0.233), with the kit on the path:

    PYTHONPATH=python .venv-avatar/bin/python Tests/avatar/security_smoke.py [--blemu .build/debug/blemu]

The steps (each printed, the first failure ends the run with status 1): ConnectLE from our random
address; Secure LE_LEVEL3 against a peer without IO, its Just Works question answered through
OnPairing, is not reached (the server answers `not_reached` at the first `security` event below
the level, or `authentication_failure`; blemu is strict, Vol 3, Part C, 10.2.1) and leaves the
link at level 2, which WaitSecurity LE_LEVEL2 sees; IsBonded is true; DeleteBond, then IsBonded
is false; a Disconnect, a reconnect, Secure LE_LEVEL2 pairs again (the bond was deleted);
FactoryReset, then IsBonded is false.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import grpc
from bumble import hci
from bumble.device import Device
from bumble.keys import MemoryKeyStore
from bumble.pairing import PairingConfig, PairingDelegate
from bumble.transport import open_transport
from pandora import host_pb2, security_pb2
from pandora.host_grpc import Host
from pandora.security_grpc import Security, SecurityStorage

from blemu_testkit.rootcanal import RootCanal, free_tcp_ports

PEER = "F0:F1:F2:F3:F4:A1"


def peer_thread(transport: str, ready: threading.Event, stop: threading.Event) -> None:
    async def main() -> None:
        async with await open_transport(transport) as (source, sink):
            device = Device.with_hci("peer", PEER, source, sink)
            device.keystore = MemoryKeyStore()
            device.pairing_config_factory = lambda connection: PairingConfig(
                sc=True, mitm=False, bonding=True, delegate=PairingDelegate(io_capability=PairingDelegate.NO_OUTPUT_NO_INPUT))
            await device.power_on()
            await device.start_advertising(own_address_type=hci.OwnAddressType.RANDOM, auto_restart=True)
            ready.set()
            while not stop.is_set():
                await asyncio.sleep(0.1)

    asyncio.run(main())


def step(name: str, ok: bool, detail: object = "") -> None:
    print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + str(detail) if detail != '' else ''}", flush=True)
    if not ok:
        raise SystemExit(1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--blemu", default=os.environ.get("BLEMU_BIN", ".build/debug/blemu"))
    args = parser.parse_args()
    out = Path(tempfile.mkdtemp(prefix="blemu-security-smoke-"))
    radio = RootCanal(out / "rootcanal.log").start()
    server = None
    stop = threading.Event()
    peer_runner = None
    try:
        port = free_tcp_ports(1)[0]
        target = f"127.0.0.1:{port}"
        with open(out / "blemu-pandora.log", "wb") as log:
            server = subprocess.Popen([sys.executable, "-m", "blemu_testkit.pandora", "--controller", radio.controller_spec,
                                       "--listen", target, "--blemu", args.blemu, "--state-dir", str(out / "state"),
                                       "--log", str(out / "blemu.log"), "-v"], stdout=log, stderr=subprocess.STDOUT)
        ready = threading.Event()
        peer_runner = threading.Thread(target=peer_thread, args=(radio.bumble_transport, ready, stop), daemon=True)
        peer_runner.start()
        assert ready.wait(20), "the Bumble peer did not start"
        channel = grpc.insecure_channel(target)
        grpc.channel_ready_future(channel).result(timeout=30)
        host, security, storage = Host(channel), Security(channel), SecurityStorage(channel)
        peer = bytes(int(p, 16) for p in PEER.split(":"))

        # OnPairing: every question answered yes (Just Works, Numeric Comparison).
        asked: list[str] = []
        events = security.OnPairing()

        def on_events() -> None:
            try:
                for event in events:
                    asked.append(event.WhichOneof("method"))
                    events.send(security_pb2.PairingEventAnswer(event=event, confirm=True))
            except grpc.RpcError:
                pass

        threading.Thread(target=on_events, daemon=True).start()
        time.sleep(0.5)   # the stream open before the first question

        connected = host.ConnectLE(own_address_type=host_pb2.RANDOM, random=peer, timeout=20)
        step("ConnectLE from our random address", connected.WhichOneof("result") == "connection", connected)
        connection = connected.connection
        stronger = security.Secure(connection=connection, le=security_pb2.LE_LEVEL3, timeout=40)
        step("Secure LE_LEVEL3 against a peer without IO (Just Works, answered through OnPairing)",
             stronger.WhichOneof("result") in ("not_reached", "authentication_failure"), stronger.WhichOneof("result"))
        step("OnPairing saw the question", asked == ["just_works"], asked)
        waited = security.WaitSecurity(connection=connection, le=security_pb2.LE_LEVEL2, timeout=10)
        step("WaitSecurity LE_LEVEL2 (the level the pairing reached)", waited.WhichOneof("result") == "success", waited)
        time.sleep(0.5)   # the keys distributed after the encryption
        step("IsBonded", storage.IsBonded(random=peer, timeout=10).value is True)
        storage.DeleteBond(random=peer, timeout=10)
        step("DeleteBond, then IsBonded", storage.IsBonded(random=peer, timeout=10).value is False)
        host.Disconnect(connection=connection, timeout=10)
        host.WaitDisconnection(connection=connection, timeout=10)
        again = host.ConnectLE(own_address_type=host_pb2.RANDOM, random=peer, timeout=20)
        step("ConnectLE again", again.WhichOneof("result") == "connection", again)
        asked.clear()
        secured = security.Secure(connection=again.connection, le=security_pb2.LE_LEVEL2, timeout=40)
        step("Secure LE_LEVEL2 pairs again (no bond)", secured.WhichOneof("result") == "success" and asked == ["just_works"],
             (secured, asked))
        host.FactoryReset(timeout=30)
        step("FactoryReset, then IsBonded", storage.IsBonded(random=peer, timeout=10).value is False)
        events.cancel()
        print(f"all steps passed (logs: {out})")
        return 0
    finally:
        stop.set()
        if peer_runner is not None:
            peer_runner.join(5)
        if server is not None:
            server.terminate()
            try:
                server.wait(10)
            except subprocess.TimeoutExpired:
                server.kill()
        radio.stop()


if __name__ == "__main__":
    sys.exit(main())
