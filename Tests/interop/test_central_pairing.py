"""blemu's own central pairing (Docs/SECURITY.md, "Pairing from the central"): `blemu gatt`
against a blemu lock (Passkey Entry with the lock's passkey, then the unlock), against a Bumble
peripheral that requires encryption (Just Works), a bond kept in --state-dir and reused by the
next run, and a wrong passkey reported with a non-zero exit.

Spec references: Core 5.4, Vol 3, Part H (SMP), 2.4.6 (Security Request); Vol 3, Part C, 10.3
(a refusal for want of security, then a retry); Vol 4, Part E, 7.8.24 (LE Enable Encryption).
"""

from __future__ import annotations

import asyncio
import json
import re
import os

from bumble import gatt
from bumble.device import Device
from bumble.hci import Address
from bumble.keys import MemoryKeyStore
from bumble.pairing import PairingConfig, PairingDelegate
from bumble.transport import open_transport

from harness import BlemuProcess, run, run_cli, start_advertising, unique_name

PASSKEY = "123456"
LOCK_CONTROL_POINT = "7d3c0202-9a5e-4d1a-8f6e-5c1b2d3e4f50"
LOCK_EVENT_LOG = "7d3c0203-9a5e-4d1a-8f6e-5c1b2d3e4f50"
OP_UNLOCK = 0x02


def gatt_cli(rootcanal, *args: str, timeout: float = 60.0):
    return run_cli(["gatt", "--controller", rootcanal.controller_spec, *args], timeout=timeout)


def start_lock(rootcanal, state_dir, *extra: str) -> BlemuProcess:
    return start_advertising(BlemuProcess(rootcanal.controller_spec, unique_name("LK"), device="lock",
                                          extra_args=["--state-dir", str(state_dir), "--pin", "2468", *extra]), rootcanal)


def central_bonds(state_dir) -> list[dict]:
    path = os.path.join(state_dir, "bonds-central-blemu_central.json")
    with open(path) as file:
        return json.load(file)["bonds"]


def test_blemu_gatt_pairs_with_the_lock_by_passkey_and_unlocks_it(rootcanal, tmp_path):
    lock = start_lock(rootcanal, tmp_path / "lock", "--passkey", PASSKEY)
    try:
        central_dir = tmp_path / "central"
        # The event log needs an authenticated link: the read is refused (0x05), blemu gatt
        # pairs with the passkey (Passkey Entry, the lock being DisplayOnly) and reads again.
        log = gatt_cli(rootcanal, "--name", lock.name, "--passkey", PASSKEY, "--state-dir", str(central_dir),
                       "read", LOCK_EVENT_LOG)
        assert log.returncode == 0, log.describe()
        assert "Insufficient Authentication" in log.stderr and "pairing" in log.stderr, log.stderr
        assert "paired: encrypted (LE Secure Connections, authenticated, 16-octet key, bonded)" in log.stderr, log.stderr
        bonds = central_bonds(central_dir)
        assert len(bonds) == 1 and bonds[0]["authenticated"] and bonds[0]["secureConnections"], bonds
        # The lock asked for the central's identity (IdKey): the central gave its IRK, kept in its
        # identity file, and its identity address (the static random address it connects from).
        with open(central_dir / "identity-central-blemu_central.json") as file:
            central_identity = json.load(file)
        lock_bond_files = [n for n in os.listdir(tmp_path / "lock") if n.startswith("bonds-lock-") and n.endswith(".json")]
        assert len(lock_bond_files) == 1, os.listdir(tmp_path / "lock")
        with open(tmp_path / "lock" / lock_bond_files[0]) as file:
            lock_bonds = json.load(file)["bonds"]
        assert len(lock_bonds) == 1 and lock_bonds[0]["irk"] == central_identity["irk"], (lock_bonds, central_identity)
        assert lock_bonds[0]["identity"] == central_identity["address"] and lock_bonds[0]["identityRandom"], lock_bonds

        # The next run encrypts with the bond: no pairing, no passkey needed; it unlocks
        # (the control point's indication is printed).
        unlock = gatt_cli(rootcanal, "--name", lock.name, "--state-dir", str(central_dir),
                          "write", LOCK_CONTROL_POINT, bytes([OP_UNLOCK]).hex() + b"2468".hex())
        assert unlock.returncode == 0, unlock.describe()
        assert "encrypting with our bond" in unlock.stderr and "pairing" not in unlock.stderr.replace("pairing again", "?"), unlock.stderr
        assert "written" in unlock.stdout and "indicated" in unlock.stdout, unlock.describe()
        assert "800201" in unlock.stdout.replace(" ", ""), unlock.stdout
        # The indication decoded (opcode, result) and when it came.
        assert re.search(r"^\d\d:\d\d:\d\d\.\d{3}  indicated: unlock: success  \[800201\]$", unlock.stdout, re.M), unlock.stdout
        assert lock.log_text().count("paired with") == 1, lock.log_tail()
    finally:
        assert lock.stop() == 0, lock.log_tail()


def test_a_wrong_passkey_is_reported_and_the_exit_is_non_zero(rootcanal, tmp_path):
    lock = start_lock(rootcanal, tmp_path / "lock", "--passkey", PASSKEY)
    try:
        result = gatt_cli(rootcanal, "--name", lock.name, "--passkey", "654321", "--state-dir", str(tmp_path / "c"),
                          "--pair", "read", LOCK_EVENT_LOG)
        assert result.returncode != 0, result.describe()
        assert "Confirm Value Failed (0x04)" in result.stderr, result.stderr
        # With the hint: the passkey was probably wrong, and where a blemu device's passkey is.
        reason = [line for line in result.reason_lines if line.startswith("Error: ")]
        assert len(reason) == 1 and "probably not the peripheral's passkey" in reason[0], result.stderr
        assert "passkey-DEVICE-NAME.txt" in reason[0] and "ctl PATH list" in reason[0], reason
        assert not os.path.exists(tmp_path / "c" / "bonds-central-blemu_central.json") or not central_bonds(tmp_path / "c")
    finally:
        assert lock.stop() == 0, lock.log_tail()


def test_no_passkey_for_a_passkey_device_says_what_to_give(rootcanal, tmp_path):
    lock = start_lock(rootcanal, tmp_path / "lock", "--passkey", PASSKEY)
    try:
        result = gatt_cli(rootcanal, "--name", lock.name, "--state-dir", str(tmp_path / "c"), "read", LOCK_EVENT_LOG)
        assert result.returncode != 0, result.describe()
        assert "--passkey" in result.stderr and "Passkey Entry Failed (0x01)" in result.stderr, result.stderr
    finally:
        assert lock.stop() == 0, lock.log_tail()


SECRET_SERVICE = "3c1a0001-7b6e-4c55-9d0e-0a1b2c3d4e5f"
SECRET_VALUE = "3c1a0002-7b6e-4c55-9d0e-0a1b2c3d4e5f"


def test_blemu_gatt_pairs_with_a_bumble_peripheral_that_requires_encryption(rootcanal, tmp_path):
    """A Bumble peripheral whose value needs an encrypted link (Just Works is enough): the
    first read is refused, blemu gatt pairs and reads; the second run reuses the bond."""
    name = unique_name("BP")

    async def scenario():
        async with await open_transport(rootcanal.controller_spec.replace("tcp:", "tcp-client:")) as (source, sink):
            device = Device.with_hci(name, Address("F1:F2:F3:F4:F5:F6"), source, sink)
            device.keystore = MemoryKeyStore()
            device.pairing_config_factory = lambda _c: PairingConfig(
                sc=True, mitm=False, bonding=True, delegate=PairingDelegate(PairingDelegate.NO_OUTPUT_NO_INPUT))
            paired: list[str] = []
            device.on("connection", lambda conn: conn.on("pairing", lambda keys: paired.append("paired")))
            device.add_service(gatt.Service(SECRET_SERVICE, [gatt.Characteristic(
                SECRET_VALUE, gatt.Characteristic.Properties.READ, gatt.Characteristic.READ_REQUIRES_ENCRYPTION,
                b"sesame")]))
            await device.power_on()
            await device.start_advertising(auto_restart=True)
            loop = asyncio.get_running_loop()
            first = await loop.run_in_executor(None, lambda: gatt_cli(
                rootcanal, "--address", "F1:F2:F3:F4:F5:F6", "--state-dir", str(tmp_path), "read", SECRET_VALUE))
            assert first.returncode == 0, first.describe()
            assert '"sesame"' in first.stdout, first.describe()
            assert "Insufficient" in first.stderr and "paired:" in first.stderr, first.stderr
            assert paired == ["paired"], paired
            second = await loop.run_in_executor(None, lambda: gatt_cli(
                rootcanal, "--address", "F1:F2:F3:F4:F5:F6", "--state-dir", str(tmp_path), "read", SECRET_VALUE))
            assert second.returncode == 0, second.describe()
            assert '"sesame"' in second.stdout and "encrypted with our bond" in second.stderr, second.stderr
            assert paired == ["paired"], "the second run paired again instead of using its bond"

    run(scenario(), timeout=120)


def test_blemu_gatt_numeric_comparison_with_a_display_yes_no_device(rootcanal, tmp_path):
    """Both sides can display: blemu gatt (KeyboardDisplay, asking for MITM) and a device run
    with --io-capability display-yes-no pair with Numeric Comparison; both print the same six
    digits (gatt on stderr, the device in its log) and accept."""
    device = start_advertising(BlemuProcess(rootcanal.controller_spec, unique_name("NC"),
                                            extra_args=["--state-dir", str(tmp_path / "dev"),
                                                        "--io-capability", "display-yes-no"]), rootcanal)
    try:
        result = gatt_cli(rootcanal, "--name", device.name, "--state-dir", str(tmp_path / "c"), "--pair", "read", "2A38")
        assert result.returncode == 0, result.describe()
        shown = [line.split(": ")[-1].split(" ")[0] for line in result.stderr.splitlines() if "Numeric Comparison with" in line]
        assert len(shown) == 1 and len(shown[0]) == 6 and shown[0].isdigit(), result.stderr
        assert f"Numeric Comparison {shown[0]} accepted" in device.log_text(), device.log_tail()
        assert "LE Secure Connections, authenticated" in result.stderr, result.stderr
    finally:
        assert device.stop() == 0, device.log_tail()


def test_blemu_gatt_recognises_a_bonded_peripheral_under_a_new_private_address(rootcanal, tmp_path):
    """A thermostat with --privacy --rpa-timeout 2 (Vol 6, Part B, 1.3.2.2): `blemu gatt --pair`
    bonds with it from one resolvable private address and keeps its IRK and identity address
    (it asked for IdKey, Vol 3, Part H, 3.6.1); after the address changed, a second run resolves
    the new one with the IRK (ah, 2.2.2) and encrypts with the bond: no pairing."""
    import time

    thermostat = start_advertising(BlemuProcess(rootcanal.controller_spec, unique_name("PT"), device="thermostat",
                                                extra_args=["--state-dir", str(tmp_path / "thermostat"), "--privacy",
                                                            "--rpa-timeout", "2"]), rootcanal)
    try:
        central_dir = tmp_path / "central"
        first = gatt_cli(rootcanal, "--name", thermostat.name, "--pair", "--state-dir", str(central_dir), "read", "2A00")
        assert first.returncode == 0, first.describe()
        assert "paired: encrypted" in first.stderr, first.stderr
        bonds = central_bonds(central_dir)
        assert len(bonds) == 1, bonds
        bond = bonds[0]
        assert bond.get("irk") and bond.get("identity"), bond
        bonded_from = bond["peer"]
        assert bond["identity"] != bonded_from, "the bond was made under a private address, not the identity"

        # Wait for the advertising address to change (a new one every 2 s while advertising).
        changes = thermostat.log_text().count("resolvable private address now")
        deadline = time.monotonic() + 10
        while thermostat.log_text().count("resolvable private address now") < changes + 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert thermostat.log_text().count("resolvable private address now") >= changes + 2, thermostat.log_tail()

        import re

        current = re.findall(r"resolvable private address now ([0-9A-Fa-f:]{17})", thermostat.log_text())[-1]
        assert current.upper() != bonded_from.split("/")[0].upper(), (current, bonded_from)
        second = gatt_cli(rootcanal, "--name", thermostat.name, "--pair", "--state-dir", str(central_dir), "read", "2A00")
        assert second.returncode == 0, second.describe()
        assert "encrypting with our bond" in second.stderr and "encrypted with our bond" in second.stderr, second.stderr
        assert "paired:" not in second.stderr, second.stderr
        assert thermostat.log_text().count("paired with") == 1, thermostat.log_tail()
        assert len(central_bonds(central_dir)) == 1
    finally:
        assert thermostat.stop() == 0, thermostat.log_tail()
