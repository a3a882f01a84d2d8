"""`blemu run --config FILE`: devices and their options from a YAML file, checked before
anything starts (Docs/REFERENCE.md, "Configuration file")."""

from __future__ import annotations

import asyncio

from bumble_central import Central, UUID_DEVICE_NAME, UUID_GAP_SERVICE, UUID_HEART_RATE_MEASUREMENT, UUID_HEART_RATE_SERVICE, decode_heart_rate_measurement
from fake_controller import FakeController
from harness import find_each, log_dir, pairing_config, passkey_of, run, run_cli, unique_name
from test_lock import UUID_CONTROL_POINT, UUID_LOCK_SERVICE, UUID_LOCK_STATE, operate


def write_config(text: str) -> str:
    path = log_dir() / f"config-{unique_name('cfg')}.yaml"
    path.write_text(text)
    return str(path)


def test_devices_names_values_and_pin_come_from_the_file(rootcanal, blemu_factory):
    hr_name, lock_name = unique_name("CH"), unique_name("CL")
    path = write_config(f"""
# two devices on one rootcanal connection
controller: {rootcanal.controller_spec}
devices:
  - device: heart-rate
    name: {hr_name}
    settings: {{ bpm: 150 }}
  - device: lock
    name: {lock_name}
    pin: "024680"
    passkey: "135790"
""")
    blemu = blemu_factory.start(None, wait_advertising=False, devices=[], extra_args=["--config", path, "--share-controller"])

    async def scenario():
        async with Central(rootcanal.controller_spec, name="cfg-central") as central:
            # Each by the address blemu advertises it from; the names are checked over GATT.
            hr, lock = await find_each(central, blemu, [hr_name, lock_name])
            conn = await central.connect(hr.address)
            await conn.discover_all()
            assert (await conn.read(conn.characteristic(UUID_DEVICE_NAME, UUID_GAP_SERVICE))).decode() == hr_name
            measurement = conn.characteristic(UUID_HEART_RATE_MEASUREMENT, UUID_HEART_RATE_SERVICE)
            await conn.subscribe(measurement)
            await asyncio.sleep(2.5)
            rates = [decode_heart_rate_measurement(n.value).heart_rate for n in conn.notifications if n.handle == measurement.handle]
            assert rates and all(130 <= rate <= 170 for rate in rates), f"bpm 150 from the file; measured {rates}"
            await conn.disconnect()

            # The lock's control point needs a link paired with its passkey: the file's.
            central.device.pairing_config_factory = pairing_config(135790)
            conn = await central.connect(lock.address)
            await conn.connection.pair()
            await conn.discover_all()
            assert (await conn.read(conn.characteristic(UUID_DEVICE_NAME, UUID_GAP_SERVICE))).decode() == lock_name
            await conn.subscribe(conn.characteristic(UUID_CONTROL_POINT, UUID_LOCK_SERVICE))
            await conn.subscribe(conn.characteristic(UUID_LOCK_STATE, UUID_LOCK_SERVICE))
            assert await operate(conn, 0x02, "024680") == bytes([0x80, 0x02, 0x01]), "the file's PIN opens the lock"
            await conn.disconnect()

    run(scenario(), timeout=90)
    assert not any("PIN is" in entry.message for entry in blemu.log_entries()), "a PIN given is not made up and logged"
    assert blemu.stop() == 0, blemu.log_tail()


def test_a_profile_named_in_the_file_is_served_with_the_entry_s_options(rootcanal, blemu_factory, tmp_path):
    """`device: ./profiles/x.json`: the path is the config file's folder's, not the working
    directory's; the entry's name and address apply to the clone; a Bumble central reads its value."""
    import json

    from bumble.core import UUID

    folder = tmp_path / "conf"
    (folder / "profiles").mkdir(parents=True)
    service, value_uuid = "7d3c9000-9a5e-4d1a-8f6e-5c1b2d3e4f50", "7d3c9001-9a5e-4d1a-8f6e-5c1b2d3e4f50"
    (folder / "profiles" / "clone.json").write_text(json.dumps({
        "format": "blemu-gatt-profile", "version": 1, "name": "Name In The Profile",
        "services": [{"uuid": service, "characteristics": [{"uuid": value_uuid, "properties": ["read"], "value": "c0ffee"}]}]}))
    name = unique_name("CP")
    config = folder / "run.yaml"
    config.write_text(f"""
controller: {rootcanal.controller_spec}
devices:
  - device: ./profiles/clone.json
    name: {name}
    address: C4:12:34:56:78:9B
    advertising: {{ fast_interval_ms: 20 }}
""")
    blemu = blemu_factory.start(None, wait_advertising=False, devices=[], extra_args=["--config", str(config)])

    async def scenario():
        async with Central(rootcanal.controller_spec, name="cfg-profile-central") as central:
            found = await central.scan_for(name, timeout=20.0, alive=blemu.exited)
            assert str(found.address).upper().startswith("C4:12:34:56:78:9B"), found.address
            conn = await central.connect(found.address)
            await conn.discover_all()
            assert (await conn.read(conn.characteristic(UUID_DEVICE_NAME, UUID_GAP_SERVICE))).decode() == name
            assert await conn.read(conn.characteristic(UUID(value_uuid), UUID(service))) == bytes.fromhex("c0ffee")
            await conn.disconnect()

    run(scenario(), timeout=60)
    assert blemu.stop() == 0, blemu.log_tail()

    # A built-in device's settings make no sense for a profile: one line, file:line:key.
    config.write_text(f"devices:\n  - device: ./profiles/clone.json\n    settings: {{ bpm: 72 }}\n")
    result = run_cli(["run", "--config", str(config), "--controller", rootcanal.controller_spec], timeout=10.0)
    assert result.returncode == 64, result.describe()
    assert f"{config}:3: devices[0].settings: a GATT profile ({folder}/profiles/clone.json) has no settings" in result.stderr, result.describe()
    # A profile that is not there names the entry and the path.
    config.write_text("devices:\n  - device: ./missing.json\n")
    result = run_cli(["run", "--config", str(config), "--controller", rootcanal.controller_spec], timeout=10.0)
    assert result.returncode == 64 and f"{config}:2: devices[0].device: {folder}/missing.json: cannot read the profile" in result.stderr, result.describe()


def test_a_bad_file_is_one_error_before_anything_starts():
    with FakeController() as controller:
        path = write_config(f"controller: {controller.spec}\ndevices:\n  - device: heart-rate\n    settings: {{ bpm: 900 }}\n")
        result = run_cli(["run", "--config", path], timeout=10.0)
        # A value its device refuses is a bad command line too: 64, found before anything starts.
        assert result.returncode == 64, result.describe()
        assert f"{path}:4: devices[0].settings.bpm:" in result.stderr, result.describe()
        path = write_config("devices:\n  - device: lock\n    pin: 12\n")
        result = run_cli(["run", "--config", path, "--controller", controller.spec], timeout=10.0)
        assert result.returncode == 64, result.describe()
        assert f"{path}:3: devices[0].pin: a PIN must be 4 to 8 digits" in result.stderr, result.describe()
        path = write_config("devices:\n  - device: toaster\n")
        result = run_cli(["run", "--config", path, "--controller", controller.spec], timeout=10.0)
        assert "unknown device 'toaster'" in result.stderr, result.describe()
        result = run_cli(["run", "--config", "/nonexistent.yaml", "--controller", controller.spec], timeout=10.0)
        assert "/nonexistent.yaml: No such file or directory" in result.stderr, result.describe()
        assert controller.accept_times == [], "nothing started: the controller was never opened"


def test_pin_on_the_command_line(rootcanal, blemu_factory):
    blemu = blemu_factory.start(unique_name("PL"), device="lock", extra_args=["--pin", "9753"])

    async def scenario():
        async with Central(rootcanal.controller_spec, name="pin-central") as central:
            central.device.pairing_config_factory = pairing_config(passkey_of(blemu))
            conn = await central.connect(blemu.scan.address)
            await conn.connection.pair()
            await conn.discover_all()
            await conn.subscribe(conn.characteristic(UUID_CONTROL_POINT, UUID_LOCK_SERVICE))
            await conn.subscribe(conn.characteristic(UUID_LOCK_STATE, UUID_LOCK_SERVICE))
            assert await operate(conn, 0x02, "9753") == bytes([0x80, 0x02, 0x01])
            await conn.disconnect()

    run(scenario(), timeout=60)
    # A run with no device that takes a PIN: a bad command line (64).
    result = run_cli(["run", "heart-rate", "--pin", "1234", "--controller", "tcp:127.0.0.1:1"])
    assert result.returncode == 64 and "--pin: none of heart-rate takes a PIN (lock does)" in result.stderr, result.describe()


def test_the_run_s_own_settings_come_from_the_file(rootcanal, blemu_factory, tmp_path):
    """`control:`, `state_dir:` and `btsnoop:` at the top of the file act as their options
    (Docs/REFERENCE.md, "Configuration file"), relative to the file's folder."""
    import json

    name = unique_name("CR")
    config = tmp_path / "site.yaml"
    config.write_text(f"""
controller: {rootcanal.controller_spec}
control: ctl.sock
state_dir: state
btsnoop: hci.snoop
devices:
  - device: lock
    name: {name}
""")
    blemu = blemu_factory.start(name, devices=[], extra_args=["--config", str(config)])
    socket = tmp_path / "ctl.sock"
    listed = run_cli(["ctl", str(socket), "list"])
    assert listed.returncode == 0, listed.describe()
    assert name in listed.stdout, listed.stdout
    # The lock's generated passkey is kept in the file's state directory, the capture beside it.
    assert any((tmp_path / "state").iterdir()), "state_dir: holds the lock's passkey"
    assert (tmp_path / "hci.snoop").stat().st_size > 16, "btsnoop: captures"
    assert blemu.stop() == 0, blemu.log_tail()
