"""The kit against a real blemu on rootcanal, with a Bumble central standing in for the app.

The fixtures are the plugin's (`blemu_rootcanal`, `blemu_device`); the app connects,
subscribes, writes and reads, and the kit's wait_for / expect_write / events() see it.
"""

from __future__ import annotations

import asyncio

import pytest

from app_standin import HeartRateApp
from blemu_testkit import BlemuError, CommandError, EventTimeout, UnexpectedEvent


def run(coroutine, timeout: float = 40.0):
    return asyncio.run(asyncio.wait_for(coroutine, timeout))


def test_waits_see_what_the_app_did_in_order(blemu_device, blemu_rootcanal):
    heart = blemu_device("heart-rate")

    async def app() -> None:
        async with HeartRateApp(blemu_rootcanal.bumble_transport) as phone:
            await phone.connect(heart.address())
            await phone.subscribe_measurements()
            await phone.write_control_point(b"\x01")
            assert await phone.read_sensor_location() == b"\x01"

    run(app())
    # All of it happened before the waits: the event log kept it, and the waits take it in order.
    connected = heart.wait_for("connected", timeout=5)
    subscribed = heart.wait_for("subscribed", uuid="2a37", timeout=5)
    assert subscribed["notify"] is True and subscribed["peer"] == connected["peer"]
    written = heart.expect_write("0x2A39", b"\x01", timeout=5)
    assert written["with_response"] is True
    heart.wait_for("read", uuid="2A38", timeout=5)
    heart.wait_for("disconnected", timeout=10)
    # The cursor is past the subscription: another wait for one times out, and says what it saw.
    with pytest.raises(EventTimeout) as timed_out:
        heart.wait_for("subscribed", uuid="2A37", timeout=0.3)
    assert "no subscribed uuid=2A37 within 0.3 s" in str(timed_out.value)


def test_wait_while_the_app_runs_and_expect_write_names_the_wrong_value(blemu_device, blemu_rootcanal):
    heart = blemu_device("heart-rate")
    heart.mark()

    async def scenario() -> None:
        async with HeartRateApp(blemu_rootcanal.bumble_transport) as phone:
            await phone.connect(heart.address())
            waiting = asyncio.ensure_future(heart.wait_for_async("subscribed", uuid="2A37", timeout=10))
            await asyncio.sleep(0.2)
            assert not waiting.done(), "the wait returned before the app subscribed"
            await phone.subscribe_measurements()
            assert (await waiting)["uuid"] == "2A37"
            # A device value set from the test reaches the app as a notification.
            heart.set("contact", 0)
            await asyncio.wait_for(phone.measurements.get(), 5)
            # async for over the events: the write appears as the app makes it.
            await phone.write_control_point(b"\x01")
            async for event in heart.events(timeout=5):
                if event["event"] == "write":
                    assert event["value"] == "01"
                    break
            else:
                raise AssertionError("no write event")

    run(scenario())
    with pytest.raises(UnexpectedEvent) as wrong:
        heart.expect_write("2A39", "02", timeout=2)
    assert "expected a write of 02 to 2A39; the app wrote 01 instead" in str(wrong.value)


def test_timeout_lists_the_events_seen(blemu_device, blemu_rootcanal):
    heart = blemu_device("heart-rate")

    async def app() -> None:
        async with HeartRateApp(blemu_rootcanal.bumble_transport) as phone:
            await phone.connect(heart.address())
            await phone.write_control_point(b"\x01")

    run(app())
    heart.wait_for("connected", timeout=5)
    with pytest.raises(EventTimeout) as timed_out:
        heart.wait_for("subscribed", uuid="2A37", timeout=1)
    message = str(timed_out.value)
    assert "no subscribed uuid=2A37 within 1 s" in message
    assert "write heart-rate uuid=2A39" in message and "value=01" in message, message


def test_faults_and_refusals(blemu_device, blemu_rootcanal):
    heart = blemu_device("heart-rate")
    with pytest.raises(CommandError) as refused:
        heart.set("bpm", 500)
    assert "bpm takes a number from 30 to 220" in str(refused.value)
    heart.fault("2A38", "error", error=0x80, count=1)
    assert heart.info()["faults"][0]["uuid"] == "2A38"

    async def app() -> Exception | None:
        async with HeartRateApp(blemu_rootcanal.bumble_transport) as phone:
            await phone.connect(heart.address())
            try:
                await phone.read_sensor_location()
            except Exception as error:  # bumble's ATT error: the fault answered
                return error
            return None

    error = run(app())
    assert getattr(error, "error_code", None) == 0x80, repr(error)
    fault = heart.wait_for("fault", uuid="2A38", timeout=5)
    assert fault["action"] == "error"


def test_blocking_events_iterator_and_disconnect(blemu_device, blemu_rootcanal):
    heart = blemu_device("heart-rate")

    async def app() -> int:
        async with HeartRateApp(blemu_rootcanal.bumble_transport) as phone:
            await phone.connect(heart.address())
            gone: asyncio.Future[int] = asyncio.get_running_loop().create_future()
            phone.connection.on("disconnection", lambda reason: gone.done() or gone.set_result(reason))
            await heart.wait_for_async("connected", timeout=5)
            assert heart.disconnect(reason=0x13)["links"] == 1
            reason = await asyncio.wait_for(gone, 10)
            phone.connection = None
            return reason

    assert run(app()) == 0x13
    seen = []
    for event in heart.events(timeout=5):
        seen.append(event["event"])
        if event["event"] == "disconnected":
            assert event["reason"] == "0x16", event  # blemu's side: Connection Terminated By Local Host
            break
    else:
        raise AssertionError(f"no disconnected event; saw {seen}")


def test_service_and_advertising_changes_are_events(blemu_device):
    heart = blemu_device("heart-rate")
    assert heart.service("180F", False)["changed"] is True
    heart.wait_for("service", uuid="180F", on=False, timeout=5)
    assert heart.info()["services_out"] == ["180F"]
    heart.advertise(False)
    heart.wait_for("advertising", on=False, timeout=5)
    assert heart.info()["advertising"] is False


def test_a_device_blemu_does_not_know_is_reported_with_blemu_s_output(blemu_device):
    with pytest.raises(BlemuError) as failed:
        blemu_device("no-such-device")
    message = str(failed.value)
    assert "blemu exited with status" in message and "before its control socket answers" in message
    assert "no-such-device" in message  # blemu's own reason, from its output


def test_exact_values_reach_the_app_as_set(blemu_device, blemu_rootcanal):
    """`b.set(..., exact=True)` holds the heart at the rate set, and `b.notify` sends exactly the
    bytes given: the app sees those values and no others."""
    heart = blemu_device("heart-rate")

    async def scenario() -> None:
        async with HeartRateApp(blemu_rootcanal.bumble_transport) as phone:
            await phone.connect(heart.address())
            await phone.subscribe_measurements()
            heart.wait_for("subscribed", uuid="2A37", timeout=5)
            assert heart.notify("2A37", bytes([0x00, 0x96]))["centrals"] == 1
            # The notification given, byte for byte, among the heart's own.
            for _ in range(10):
                if await asyncio.wait_for(phone.measurements.get(), 5) == bytes([0x00, 0x96]):
                    break
            else:
                raise AssertionError("the notified bytes never arrived")
            heart.set("bpm", 150, exact=True)
            while not phone.measurements.empty():
                phone.measurements.get_nowait()
            await asyncio.wait_for(phone.measurements.get(), 5)   # one that may have left before the set
            rates = []
            for _ in range(4):
                value = await asyncio.wait_for(phone.measurements.get(), 5)
                rates.append(value[1] if value[0] & 0x01 == 0 else int.from_bytes(value[1:3], "little"))
            assert rates == [150] * 4, rates

    run(scenario())
