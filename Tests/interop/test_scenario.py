"""Scenario files (`blemu run --scenario FILE.yaml`) and `--seed`, against a Bumble "app".

The scenario waits for what the app does (its subscription, its write, its read) and acts on
the device meanwhile (`set`, `notify`); blemu's exit status is the outcome: 0 when every step
held, 1 with the failing step's FILE:LINE when the app misbehaves. `--seed` makes the heart's
values the same on every run. Format: Docs/CONTROL.md, "Scenario files".
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import struct
import tempfile
import time

import pytest
from bumble.core import UUID

from bumble_central import (
    Central,
    UUID_BODY_SENSOR_LOCATION,
    UUID_HEART_RATE_CONTROL_POINT,
    UUID_HEART_RATE_MEASUREMENT,
    UUID_HEART_RATE_SERVICE,
    collect_notifications,
)
from harness import JUST_WORKS, BlemuProcess, pairing_config, run, run_cli, start_advertising, unique_name

UUID_THERMOSTAT_SERVICE = UUID("7d3c0100-9a5e-4d1a-8f6e-5c1b2d3e4f50")
UUID_TARGET = UUID("7d3c0101-9a5e-4d1a-8f6e-5c1b2d3e4f50")

SCENARIO = """\
device: heart-rate
steps:
  - log: waiting for the app
  - wait: connected
    timeout: 30
  - wait: subscribed 2a37
    timeout: 20
  - set: bpm 150
  - notify: 2a37 0096
  - wait: write 2a39 equals 01
    timeout: 8
  - expect: write 2a39
  - wait: read 2a38
    timeout: 20
"""


@pytest.fixture
def scenario_file():
    directory = tempfile.mkdtemp(prefix="blemu-scenario-")
    path = os.path.join(directory, "app.yaml")
    with open(path, "w") as file:
        file.write(SCENARIO)
    yield path
    shutil.rmtree(directory, ignore_errors=True)


async def app(process: BlemuProcess, control_point_value: bytes) -> list[bytes]:
    """The app under test: connects, subscribes to the measurement, writes the control point,
    reads the sensor location, then stays until blemu (the scenario over) drops the link.
    Returns the measurements it got."""
    assert process.scan is not None
    async with Central(process.controller, name="scenario-app") as central:
        conn = await central.connect(process.scan.address)
        hrm = await conn.discover_characteristic(UUID_HEART_RATE_SERVICE, UUID_HEART_RATE_MEASUREMENT)
        await conn.subscribe(hrm)
        # The scenario's `notify: 2a37 0096` (150 bpm) arrives after the subscription.
        deadline = time.monotonic() + 15
        while not any(n.handle == hrm.handle and n.value == bytes([0x00, 0x96]) for n in conn.notifications):
            assert time.monotonic() < deadline, f"no 0096 notification; got {[n.value.hex() for n in conn.notifications]}"
            await asyncio.sleep(0.05)
        control_point = await conn.discover_characteristic(UUID_HEART_RATE_SERVICE, UUID_HEART_RATE_CONTROL_POINT)
        with contextlib.suppress(Exception):  # 0x02 is refused (0x80): the app does not care
            await conn.write(control_point, control_point_value)
        location = await conn.discover_characteristic(UUID_HEART_RATE_SERVICE, UUID_BODY_SENSOR_LOCATION)
        with contextlib.suppress(Exception):  # the failing scenario may already have ended the run
            await conn.read(location)
        deadline = time.monotonic() + 30
        while conn.is_connected and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        return [n.value for n in conn.notifications if n.handle == hrm.handle]


def run_scenario(rootcanal, path: str, control_point_value: bytes) -> tuple[int, str]:
    process = BlemuProcess(rootcanal.controller_spec, unique_name("SC"), extra_args=["--scenario", path])
    start_advertising(process, rootcanal)
    try:
        run(app(process, control_point_value), timeout=90)
        assert process.process is not None
        status = process.process.wait(timeout=30)
    finally:
        process.kill()
    return status, process.log_path.read_text(errors="replace")


def test_a_scenario_the_app_follows_passes_with_exit_status_0(rootcanal, scenario_file):
    status, output = run_scenario(rootcanal, scenario_file, bytes([0x01]))
    assert status == 0, output[-4000:]
    assert f"scenario {scenario_file}: passed (8 step(s))" in output, output[-4000:]
    # Each step is logged as it runs, with its line.
    for line, text in [(3, "log: waiting for the app"), (6, "wait: subscribed 2a37"), (8, "set: bpm 150"),
                       (12, "expect: write 2a39"), (13, "wait: read 2a38")]:
        assert f"{scenario_file}:{line}: {text}" in output, f"step at line {line} not logged:\n{output[-4000:]}"


# The app should set the thermostat's target to 22.5 °C (ca08, 2250 in 0.01 °C) once paired.
THERMOSTAT_SCENARIO = """\
device: thermostat
steps:
  - wait: connected
    timeout: 30
  - wait: write 7d3c0101-9a5e-4d1a-8f6e-5c1b2d3e4f50 equals ca08
    timeout: 8
  - log: never reached
"""


def test_an_app_that_writes_the_wrong_value_fails_at_the_step_with_file_and_line(rootcanal, scenario_file):
    with open(scenario_file, "w") as file:
        file.write(THERMOSTAT_SCENARIO)
    process = BlemuProcess(rootcanal.controller_spec, unique_name("SF"), device="thermostat",
                           extra_args=["--scenario", scenario_file])
    start_advertising(process, rootcanal)

    async def misbehaving_app() -> None:
        assert process.scan is not None
        async with Central(process.controller, name="scenario-bad-app") as central:
            central.device.pairing_config_factory = pairing_config(JUST_WORKS)
            conn = await central.connect(process.scan.address)
            await conn.connection.pair()  # the thermostat's writes need an encrypted link
            target = await conn.discover_characteristic(UUID_THERMOSTAT_SERVICE, UUID_TARGET)
            await conn.write(target, struct.pack("<h", 2200))  # 22.0 °C: taken, but not what the test wants
            deadline = time.monotonic() + 30
            while conn.is_connected and time.monotonic() < deadline:
                await asyncio.sleep(0.1)

    try:
        run(misbehaving_app(), timeout=90)
        assert process.process is not None
        status = process.process.wait(timeout=30)
    finally:
        process.kill()
    output = process.log_path.read_text(errors="replace")
    assert status == 1, output[-4000:]
    assert (f"{scenario_file}:5: wait: write 7d3c0101-9a5e-4d1a-8f6e-5c1b2d3e4f50 equals ca08 (timeout 8 s): failed"
            in output), output[-4000:]
    assert "expected: a write to 7d3c0101-9a5e-4d1a-8f6e-5c1b2d3e4f50 of ca08 on thermostat within 8 s" in output, output[-4000:]
    # The value written, decoded as `blemu gatt` shows it, with its bytes.
    assert "instead: a write of 22" in output and "[9808] at t=" in output, output[-4000:]
    # The failure is told once (stderr), not again in a log line.
    assert output.count("a write to 7d3c0101-9a5e-4d1a-8f6e-5c1b2d3e4f50 of ca08 on thermostat within 8 s") == 1, output[-4000:]
    # The events before it, as watch lines: the wrong write among them.
    assert '"event":"write","device":"thermostat"' in output and '"value":"9808"' in output, output[-4000:]
    assert "never reached" not in output and "passed" not in output


def heart_values(rootcanal, seed: str, count: int = 4) -> list[bytes]:
    process = BlemuProcess(rootcanal.controller_spec, unique_name("SD"), extra_args=["--seed", seed])
    start_advertising(process, rootcanal)
    try:
        async def listen() -> list[bytes]:
            assert process.scan is not None
            async with Central(process.controller, name="seed-app") as central:
                conn = await central.connect(process.scan.address)
                hrm = await conn.discover_characteristic(UUID_HEART_RATE_SERVICE, UUID_HEART_RATE_MEASUREMENT)
                await conn.subscribe(hrm)
                got = await collect_notifications(conn, hrm.handle, count=count, timeout=count * 2 + 6)
                await conn.disconnect()
                return [n.value for n in got]

        values = run(listen(), timeout=60)
    finally:
        assert process.stop() == 0, process.log_tail()
    return values


def test_seed_gives_the_same_heart_rate_values_on_every_run(rootcanal):
    first = heart_values(rootcanal, "42")
    time.sleep(1.3)  # a different moment of the second: the values must not depend on it
    second = heart_values(rootcanal, "42")
    assert first == second, f"{[v.hex() for v in first]} != {[v.hex() for v in second]}"
    other = heart_values(rootcanal, "43")
    assert other != first, "another seed gave the same values"


def test_a_devices_scenario_in_the_config_file_acts_on_that_device(rootcanal, scenario_file):
    """`scenario:` of a --config device entry, its path relative to the file: its steps act on
    that device without naming it."""
    directory = os.path.dirname(scenario_file)
    with open(scenario_file, "w") as file:
        file.write("steps:\n  - wait: subscribed 2a37\n    timeout: 30\n  - notify: 2a37 0096\n  - sleep: 1\n")
    config = os.path.join(directory, "bench.yaml")
    with open(config, "w") as file:
        file.write(f"devices:\n  - device: heart-rate\n    scenario: {os.path.basename(scenario_file)}\n")
    process = BlemuProcess(rootcanal.controller_spec, unique_name("SC"), devices=[], extra_args=["--config", config])
    start_advertising(process, rootcanal)
    try:
        async def subscriber() -> None:
            assert process.scan is not None
            async with Central(process.controller, name="config-scenario-app") as central:
                conn = await central.connect(process.scan.address)
                hrm = await conn.discover_characteristic(UUID_HEART_RATE_SERVICE, UUID_HEART_RATE_MEASUREMENT)
                await conn.subscribe(hrm)
                deadline = time.monotonic() + 30
                while conn.is_connected and time.monotonic() < deadline:
                    await asyncio.sleep(0.1)
                assert any(n.value == bytes([0x00, 0x96]) for n in conn.notifications), "the scenario's notify did not arrive"

        run(subscriber(), timeout=60)
        assert process.process is not None
        status = process.process.wait(timeout=30)
    finally:
        process.kill()
    output = process.log_path.read_text(errors="replace")
    assert status == 0, output[-4000:]
    assert f"scenario {scenario_file}: passed (3 step(s))" in output, output[-4000:]


def test_every_mistake_is_told_before_anything_starts_values_checked_against_the_device(rootcanal, tmp_path):
    """Exit 64 at once, every mistake at its line, in one run: the file's own (a 600-byte value,
    more than any attribute holds, Vol 3, Part F, 3.2.9; a step's usage in the step's form) and
    each step against the running device (a value out of the setting's range, a characteristic
    that cannot notify), not when the step comes after a 60 s wait."""
    bad_file = tmp_path / "bad.yaml"
    bad_file.write_text("steps:\n  - wait: connected\n    timeout: 60\n  - notify: 2a37 " + "00" * 600
                        + "\n  - set: bpm\n  - jump: 3\n  - set: bpm 500\n")
    result = run_cli(["run", "heart-rate", "--controller", rootcanal.controller_spec, "--scenario", str(bad_file)], timeout=20)
    assert result.returncode == 64, result.describe()
    for line, text in [(4, "notify: the value is 600 bytes long; an attribute value is at most 512 bytes"),
                       (5, "set: usage: set: KEY VALUE [--exact]"), (6, "a step needs one of"),
                       (7, "set: bpm 500: bpm takes a number from 30 to 220, not '500'")]:
        assert f"{bad_file}:{line}: {text}" in result.stderr, result.describe()

    device_file = tmp_path / "device.yaml"
    device_file.write_text("steps:\n  - wait: connected\n    timeout: 60\n  - set: bpm 500\n  - notify: 2a38 01\n  - set: bpm 150 --exact\n")
    result = run_cli(["run", "heart-rate", "--controller", rootcanal.controller_spec, "--scenario", str(device_file)], timeout=20)
    assert result.returncode == 64, result.describe()
    assert result.elapsed < 15, result.describe()
    assert f"{device_file}:4: set: bpm 500: bpm takes a number from 30 to 220, not '500'" in result.stderr, result.describe()
    assert f"{device_file}:5: notify: 2a38 01: characteristic 2A38 of heart-rate neither notifies nor indicates" in result.stderr, result.describe()
    assert f"{device_file}:6:" not in result.stderr, result.describe()


def test_a_wait_stops_when_the_central_is_gone(rootcanal, tmp_path):
    """`wait: write 2a39` with a 60 s timeout fails at once when the only central disconnects."""
    path = tmp_path / "gone.yaml"
    path.write_text("device: heart-rate\nsteps:\n  - wait: connected\n    timeout: 30\n"
                    "  - wait: write 2a39 equals 01\n    timeout: 60\n")
    process = BlemuProcess(rootcanal.controller_spec, unique_name("SG"), extra_args=["--scenario", str(path)])
    start_advertising(process, rootcanal)

    async def leaving_app() -> None:
        assert process.scan is not None
        async with Central(process.controller, name="scenario-leaving-app") as central:
            conn = await central.connect(process.scan.address)
            await asyncio.sleep(1)
            await conn.disconnect()

    try:
        run(leaving_app(), timeout=60)
        left = time.monotonic()
        assert process.process is not None
        status = process.process.wait(timeout=30)
        elapsed = time.monotonic() - left
    finally:
        process.kill()
    output = process.log_path.read_text(errors="replace")
    assert status == 1, output[-4000:]
    assert elapsed < 10, f"blemu ended {elapsed:.1f} s after the central left, not at once"
    assert f"{path}:5: wait: write 2a39 equals 01 (timeout 60 s): failed" in output, output[-4000:]
    assert "instead: the central disconnected (reason 0x" in output and "with none left connected" in output, output[-4000:]


def test_a_repeat_logs_no_line_per_step_at_notice(rootcanal, tmp_path):
    """A `repeat` of 20,000 instant steps: no notice per step (they are at debug), and the
    control commands the steps run within the log budget, what it left out counted."""
    path = tmp_path / "flood.yaml"
    path.write_text("device: heart-rate\nsteps:\n  - repeat: 20000\n    steps:\n      - set: contact 1\n")
    result = run_cli(["run", "heart-rate", "--controller", rootcanal.controller_spec, "--scenario", str(path),
                      "--log", "stderr", "--log-level", "notice"], timeout=60)
    assert result.returncode == 0, result.describe()[-4000:]
    assert "passed (20000 step(s))" in result.stdout, result.describe()[-4000:]
    lines = result.stderr.splitlines()
    assert len(lines) < 400, f"{len(lines)} log lines at notice for 20000 steps:\n" + "\n".join(lines[:20])
    assert "log line(s) of its commands left out by the log budget" in result.stderr, result.describe()[-4000:]
