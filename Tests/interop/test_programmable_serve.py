"""`blemu host --serve DEVICE|FILE.json`: the programmable host's advertised links are served a
device's GATT database, values and behaviour (here the heart-rate device), while the program
still decides what is advertised and when (Docs/CONTROL.md, "The programmable host").

A Bumble central connects to what `advertise` puts on the air, discovers the Heart Rate service
and reads its Body Sensor Location, as it would from `blemu run heart-rate`; a name that is no
device, or a broadcaster (nothing to serve), is refused before anything opens.
"""

from __future__ import annotations

import contextlib
import os
import shutil

import pytest
from bumble.device import Device, Peer

from harness import run_cli, unique_name
from test_programmable_advertising import ScanningPeer, until_event
from test_programmable_host import HostClient, HostEvents, HostProcess, ad

HEART_RATE_SERVICE = 0x180D
BODY_SENSOR_LOCATION = 0x2A38


class ServingHost(HostProcess):
    """`blemu host ... --serve DEVICE`."""

    def __init__(self, controller: str, state_dir: str, serve: str):
        super().__init__(controller, state_dir)
        self.serve = serve

    @property
    def command(self) -> list[str]:
        return [*super().command, "--serve", self.serve]


@pytest.fixture
def serving(rootcanal, tmp_path):
    process = ServingHost(rootcanal.controller_spec, str(tmp_path / "state"), "heart-rate").start()
    process.wait_ready()
    client = HostClient(process.control_path)
    events = HostEvents(process.control_path)
    yield client, events
    events.close()
    client.close()
    assert process.stop() == 0, process.log_tail()
    with contextlib.suppress(OSError):
        shutil.rmtree(os.path.dirname(process.control_path))


@pytest.fixture
def peer(rootcanal):
    bumble = ScanningPeer(rootcanal.controller_spec).start()
    yield bumble
    bumble.stop()


def test_an_advertised_link_is_served_the_devices_database(serving, peer):
    client, events = serving
    our = client.ok("address")["address"]
    advertisement = client.ok("advertise", data=ad(unique_name("SV")).hex(), legacy=True, connectable=True,
                              own_address_type="public")["advertisement"]
    connection = peer.connect_to(our, public=True)
    connected = until_event(events, "connected", advertisement=advertisement)
    assert connected["role"] == "peripheral", connected

    async def read_body_sensor_location(device: Device):
        remote = Peer(connection)
        await remote.discover_services()
        services = [s for s in remote.services if s.uuid.to_hex_str() == f"{HEART_RATE_SERVICE:04X}"]
        assert services, [s.uuid.to_hex_str() for s in remote.services]
        await services[0].discover_characteristics()
        locations = [c for c in services[0].characteristics if c.uuid.to_hex_str() == f"{BODY_SENSOR_LOCATION:04X}"]
        assert locations, [c.uuid.to_hex_str() for c in services[0].characteristics]
        return bytes(await locations[0].read_value())

    value = peer.call(read_body_sensor_location, timeout=20)
    # Body Sensor Location (GATT Specification Supplement 3.27): one octet, 0x00-0x06 defined.
    assert len(value) == 1 and value[0] <= 0x06, value
    client.ok("disconnect", link=connected["link"])
    until_event(events, "disconnected", link=connected["link"])


@pytest.mark.parametrize("serve, expected", [
    ("no-such-device", "--serve: unknown device 'no-such-device'"),
    ("ibeacon", "--serve: ibeacon is a broadcaster"),
    ("/nonexistent/profile.json", "--serve:"),
])
def test_what_cannot_be_served_is_refused_before_anything_opens(serve, expected):
    result = run_cli(["host", "--controller", "tcp:127.0.0.1:1", "--control", "/tmp/blemu-serve-refused.sock", "--serve", serve])
    assert result.returncode != 0
    assert expected in result.stderr, result.stderr
    assert not os.path.exists("/tmp/blemu-serve-refused.sock")
