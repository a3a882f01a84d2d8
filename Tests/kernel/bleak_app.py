"""A real Linux BLE app for the kernel tests: bleak (PyPI) over BlueZ's bluetoothd, in the guest.

    python bleak_app.py ADAPTER heart-rate NAME
    python bleak_app.py ADAPTER thermostat NAME
    python bleak_app.py ADAPTER lock NAME PASSKEY PIN

Run by Tests/kernel/run.py (cases bleak-heart-rate, bleak-thermostat) with the repository's .venv
python, inside the qemu guest where bluetoothd owns ADAPTER (a vhci adapter bridged to the host's
rootcanal). It does what an app does, as an app tester's app under test would, and prints one
line per step; the host's driver (blemu's Python kit) drives the device and asserts on both
sides: blemu's events and these lines. Any failure prints `app: error ...` and exits 1.

heart-rate: scans for NAME, connects, reads Body Sensor Location (0x2A38), subscribes to Heart
Rate Measurement (0x2A37) and prints each notification until SIGTERM; then it unsubscribes,
disconnects and exits 0:

  app: found ADDRESS / connected / read 2a38 HEX / subscribed 2a37
  app: notification 2a37 HEX bpm=N
  app: disconnected

thermostat: registers a BlueZ agent (BlueZ asks one even for Just Works), connects, reads Target
Temperature and writes 21.50 °C with response. The thermostat refuses the write on an
unencrypted link (0x05): BlueZ pairs (Just Works) and retries the write on its own. It
disconnects, connects again and writes 22.00 °C: BlueZ encrypts with the bond it kept, no
pairing. Then exits 0:

  app: agent registered / found ADDRESS / connected / read target HEX
  app: agent authorization|confirmation ...   (BlueZ asking the agent, as it pairs)
  app: wrote target 6608 / disconnected / connected again / wrote target 9808 / disconnected

Each connection also prints the services BlueZ resolved (`app: services 180a,180f,...`: 16-bit
UUIDs short). Then it waits for the driver's go (the file GO_FILE appears, once the test has taken
a service out) and connects a third time, printing the services again, and disconnects.

lock: registers an agent that types PASSKEY, connects, subscribes to the Lock Control Point
(indications) and writes Unlock (0x02) with PIN. The lock refuses an unauthenticated link (0x05):
BlueZ pairs with Passkey Entry (asking the agent for the passkey) and retries. Prints the
indication that answers, then disconnects and exits 0:

  app: agent registered / found ADDRESS / connected / agent passkey / subscribed 7d3c0202
  app: wrote unlock / indication 7d3c0202 HEX / disconnected
"""

import asyncio
import os
import signal
import sys

from bleak import BleakClient, BleakScanner
from dbus_fast import BusType, DBusError
from dbus_fast.aio import MessageBus
from dbus_fast.service import ServiceInterface, dbus_method

HEART_RATE_MEASUREMENT = "00002a37-0000-1000-8000-00805f9b34fb"
BODY_SENSOR_LOCATION = "00002a38-0000-1000-8000-00805f9b34fb"
TARGET_TEMPERATURE = "7d3c0101-9a5e-4d1a-8f6e-5c1b2d3e4f50"
LOCK_CONTROL_POINT = "7d3c0202-9a5e-4d1a-8f6e-5c1b2d3e4f50"
AGENT_PATH = "/org/blemu/kernel/agent"
# The driver creates it (over the guest agent) when the thermostat's third connection may start.
GO_FILE = "/run/blemu-kernel-bleak-go"
SIG_BASE = "-0000-1000-8000-00805f9b34fb"


def say(text: str) -> None:
    print(f"app: {text}", flush=True)


def beats_per_minute(value: bytes) -> int:
    """Heart Rate Measurement (Heart Rate Service 1.0, 3.1): flags bit 0 set = uint16 value."""
    if len(value) < 2 or (value[0] & 0x01 and len(value) < 3):
        raise ValueError(f"a Heart Rate Measurement too short: {value.hex()}")
    return int.from_bytes(value[1:3], "little") if value[0] & 0x01 else value[1]


class Agent(ServiceInterface):
    """org.bluez.Agent1 (BlueZ doc/org.bluez.Agent.rst): says what BlueZ asked and agrees; a
    passkey (Passkey Entry) when one was given."""

    def __init__(self, passkey: int | None = None):
        super().__init__("org.bluez.Agent1")
        self.passkey = passkey

    @dbus_method()
    def Release(self):  # noqa: N802 (D-Bus names)
        say("agent released")

    @dbus_method()
    def RequestPinCode(self, device: "o") -> "s":  # noqa: N802, F821
        raise DBusError("org.bluez.Error.Rejected", "no PIN code (LE only)")

    @dbus_method()
    def DisplayPinCode(self, device: "o", pincode: "s"):  # noqa: N802, F821
        say("agent display pin code")

    @dbus_method()
    def RequestPasskey(self, device: "o") -> "u":  # noqa: N802, F821
        if self.passkey is None:
            say("agent passkey asked, none given: rejected")
            raise DBusError("org.bluez.Error.Rejected", "no passkey")
        say("agent passkey")
        return self.passkey

    @dbus_method()
    def DisplayPasskey(self, device: "o", passkey: "u", entered: "q"):  # noqa: N802, F821
        say(f"agent display passkey {passkey:06d}")

    @dbus_method()
    def RequestConfirmation(self, device: "o", passkey: "u"):  # noqa: N802, F821
        say(f"agent confirmation {passkey:06d}")

    @dbus_method()
    def RequestAuthorization(self, device: "o"):  # noqa: N802, F821
        say("agent authorization")

    @dbus_method()
    def AuthorizeService(self, device: "o", uuid: "s"):  # noqa: N802, F821
        say(f"agent authorize service {uuid}")

    @dbus_method()
    def Cancel(self):  # noqa: N802
        say("agent cancelled")


async def register_agent(passkey: int | None = None) -> MessageBus:
    """The default agent, as a desktop's pairing dialog is, with KeyboardDisplay capability."""
    bus = await MessageBus(bus_type=BusType.SYSTEM).connect()
    bus.export(AGENT_PATH, Agent(passkey))
    introspection = await bus.introspect("org.bluez", "/org/bluez")
    manager = bus.get_proxy_object("org.bluez", "/org/bluez", introspection).get_interface("org.bluez.AgentManager1")
    await manager.call_register_agent(AGENT_PATH, "KeyboardDisplay")
    await manager.call_request_default_agent(AGENT_PATH)
    say("agent registered")
    return bus


async def find(adapter: str, name: str):
    device = await BleakScanner.find_device_by_name(name, timeout=60, bluez={"adapter": adapter})
    if device is None:
        raise RuntimeError(f"no device named {name!r} within 60 s")
    say(f"found {device.address}")
    return device


def say_services(client: BleakClient) -> None:
    uuids = sorted(service.uuid[4:8] if service.uuid.endswith(SIG_BASE) and service.uuid.startswith("0000")
                   else service.uuid for service in client.services)
    say(f"services {','.join(uuids)}")


async def thermostat(adapter: str, name: str) -> int:
    bus = await register_agent()
    try:
        device = await find(adapter, name)
        for attempt, centi in enumerate((2150, 2200)):
            async with BleakClient(device, bluez={"adapter": adapter}, timeout=60) as client:
                say("connected" if attempt == 0 else "connected again")
                say_services(client)
                if attempt == 0:
                    target = await client.read_gatt_char(TARGET_TEMPERATURE)
                    say(f"read target {bytes(target).hex()}")
                value = centi.to_bytes(2, "little", signed=True)
                await client.write_gatt_char(TARGET_TEMPERATURE, value, response=True)
                say(f"wrote target {value.hex()}")
            say("disconnected")
        for _ in range(900):
            if os.path.exists(GO_FILE):
                break
            await asyncio.sleep(0.1)
        else:
            raise RuntimeError(f"no {GO_FILE} within 90 s")
        async with BleakClient(device, bluez={"adapter": adapter}, timeout=60) as client:
            say("connected a third time")
            await asyncio.sleep(3)  # BlueZ follows a Service Changed indication after connecting
            say_services(client)
        say("disconnected")
        return 0
    finally:
        bus.disconnect()


async def lock(adapter: str, name: str, passkey: str, pin: str) -> int:
    bus = await register_agent(int(passkey))
    try:
        device = await find(adapter, name)
        answered = asyncio.Event()

        def indicated(_characteristic, data: bytearray) -> None:
            say(f"indication 7d3c0202 {bytes(data).hex()}")
            answered.set()

        async with BleakClient(device, bluez={"adapter": adapter}, timeout=60) as client:
            say("connected")
            await client.start_notify(LOCK_CONTROL_POINT, indicated)
            say("subscribed 7d3c0202")
            await client.write_gatt_char(LOCK_CONTROL_POINT, b"\x02" + pin.encode(), response=True)
            say("wrote unlock")
            await asyncio.wait_for(answered.wait(), 30)
        say("disconnected")
        return 0
    finally:
        bus.disconnect()


async def heart_rate(adapter: str, name: str) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    device = await find(adapter, name)
    async with BleakClient(device, bluez={"adapter": adapter}, timeout=60) as client:
        say("connected")
        location = await client.read_gatt_char(BODY_SENSOR_LOCATION)
        say(f"read 2a38 {bytes(location).hex()}")

        def notified(_characteristic, data: bytearray) -> None:
            value = bytes(data)
            say(f"notification 2a37 {value.hex()} bpm={beats_per_minute(value)}")

        await client.start_notify(HEART_RATE_MEASUREMENT, notified)
        say("subscribed 2a37")
        await stop.wait()
        await client.stop_notify(HEART_RATE_MEASUREMENT)
    say("disconnected")
    return 0


APPS = {"heart-rate": (heart_rate, 1), "thermostat": (thermostat, 1), "lock": (lock, 3)}

if __name__ == "__main__":
    if len(sys.argv) < 4 or sys.argv[2] not in APPS or len(sys.argv) != 3 + APPS[sys.argv[2]][1]:
        sys.exit("usage: bleak_app.py ADAPTER heart-rate|thermostat NAME, or ADAPTER lock NAME PASSKEY PIN")
    try:
        sys.exit(asyncio.run(APPS[sys.argv[2]][0](sys.argv[1], *sys.argv[3:])))
    except Exception as error:  # one line the driver shows
        say(f"error: {error!r}")
        sys.exit(1)
