"""`blemu attach`'s command line: what it says when it cannot start (the bridge itself is in
Tests/RunLoopTests/AttachBridgeTests.swift; on a real kernel's hci_vhci, in scripts/test-kernel)."""

from __future__ import annotations

from harness import closed_tcp_port, run_cli


def test_a_missing_vhci_device_says_to_load_the_module():
    result = run_cli(["attach", "--controller", "tcp:127.0.0.1:6402", "--vhci", "/nonexistent/vhci"])
    assert result.returncode == 1, result.describe()
    assert "no virtual HCI device (ENOENT)" in result.stderr, result.describe()
    assert "sudo modprobe hci_vhci" in result.stderr, result.describe()


def test_an_adapter_of_this_kernel_is_refused_as_a_controller():
    result = run_cli(["attach", "--controller", "hci0"])
    assert result.returncode == 64, result.describe()
    assert "already an adapter of this kernel" in result.stderr, result.describe()


def test_an_unreachable_controller_ends_it_with_the_transports_reason(tmp_path):
    # A regular file stands in for /dev/vhci: it is never opened, the controller fails first.
    device = tmp_path / "vhci"
    device.write_bytes(b"")
    port = closed_tcp_port()
    result = run_cli(["attach", "--controller", f"tcp:127.0.0.1:{port}", "--vhci", str(device)])
    assert result.returncode == 1, result.describe()
    assert f"tcp:127.0.0.1:{port}: connection refused (ECONNREFUSED)" in result.stderr, result.describe()
    assert device.read_bytes() == b"", "the device was written although no controller answered"


def test_netsim_without_an_emulator_says_what_to_do(tmp_path):
    device = tmp_path / "vhci"
    device.write_bytes(b"")
    port = closed_tcp_port()
    result = run_cli(["attach", "--controller", "netsim", "--vhci", str(device)], env={"NETSIM_HCI_PORT": str(port)})
    assert result.returncode == 1, result.describe()
    assert f"netsim:1: nothing listens on netsim's HCI port 127.0.0.1:{port}" in result.stderr, result.describe()
    assert "-netsim-args=\"--no-shutdown\"" in result.stderr, result.describe()
