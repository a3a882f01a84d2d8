"""The interop harness's own decoders, checked on hand-made bytes (no blemu, no radio)."""

from __future__ import annotations

import pytest
from bumble import hci

import harness  # noqa: F401  (puts scripts/ on sys.path)
from bumble_central import (
    MeasurementFormatError,
    ScanResult,
    bumble_transport_spec,
    decode_heart_rate_measurement,
    is_static_random,
    parse_ad_structures,
)


def test_decodes_uint8_rate_with_contact_energy_and_rr():
    # flags 0x1E: uint8 rate, contact supported + detected, energy, RR; 72 bpm, 300 kJ, 853/1024 s
    m = decode_heart_rate_measurement(bytes([0x1E, 72, 0x2C, 0x01, 0x55, 0x03]))
    assert (m.heart_rate, m.sensor_contact_supported, m.sensor_contact_detected) == (72, True, True)
    assert m.energy_expended == 300
    assert m.rr_intervals == [0x0355 / 1024]


def test_decodes_uint16_rate_without_optional_fields():
    m = decode_heart_rate_measurement(bytes([0x01, 0x2C, 0x01]))
    assert m.heart_rate == 300 and m.uint16_format
    assert m.energy_expended is None and m.rr_intervals == [] and not m.sensor_contact_supported


@pytest.mark.parametrize("value", [
    bytes([0x00]),  # no rate
    bytes([0x01, 0x48]),  # uint16 rate truncated
    bytes([0x08, 72, 0x01]),  # energy truncated
    bytes([0x10, 72, 0x55]),  # odd RR bytes
    bytes([0x10, 72]),  # RR flag, no RR
    bytes([0x00, 72, 0x00]),  # trailing byte
    bytes([0x20, 72]),  # reserved flag bit
])
def test_rejects_malformed_measurements(value):
    with pytest.raises(MeasurementFormatError):
        decode_heart_rate_measurement(value)


def test_parses_ad_structures_and_rejects_overruns():
    data = bytes([2, 0x01, 0x06, 3, 0x03, 0x0D, 0x18, 5, 0x09]) + b"Beat"
    assert parse_ad_structures(data) == [(0x01, b"\x06"), (0x03, b"\x0d\x18"), (0x09, b"Beat")]
    assert parse_ad_structures(data + bytes([0, 0, 0])) == parse_ad_structures(data)  # zero padding
    with pytest.raises(ValueError):
        parse_ad_structures(bytes([5, 0x09, 0x41]))


def test_scan_result_names_uuids_and_flags():
    result = ScanResult(address=hci.Address("C0:11:22:33:44:55"),
                        adv_data=bytes([2, 0x01, 0x06, 3, 0x02, 0x0D, 0x18, 4, 0x08]) + b"Bea",
                        scan_response=bytes([5, 0x09]) + b"Beat")
    assert result.matches_name("Beat") and not result.matches_name("Other")
    assert result.service_uuids_16() == {0x180D} and result.flags() == 0x06


def test_a_shortened_name_does_not_match_a_name_its_complete_name_differs_from():
    """channel-echo cuts its name to "E" in the advertising data (its 128-bit UUID leaves one
    octet): a scan for another device named "EE-..." must not take its address."""
    shortened = bytes([2, 0x08]) + b"E"
    echo = ScanResult(address=hci.Address("C5:F8:4A:04:8C:C3"), adv_data=shortened,
                      scan_response=bytes([12, 0x09]) + b"EC-8339a8be")
    assert echo.matches_name("EC-8339a8be") and not echo.matches_name("EE-12345678")
    # Before its scan response, the shortened name is all there is to go by.
    assert ScanResult(address=echo.address, adv_data=shortened).matches_name("EE-12345678")


def test_static_random_address_and_transport_specs():
    assert is_static_random(hci.Address("C0:11:22:33:44:55", hci.Address.RANDOM_DEVICE_ADDRESS))
    assert not is_static_random(hci.Address("40:11:22:33:44:55", hci.Address.RANDOM_DEVICE_ADDRESS))
    assert not is_static_random(hci.Address("C0:11:22:33:44:55", hci.Address.PUBLIC_DEVICE_ADDRESS))
    assert bumble_transport_spec("tcp:127.0.0.1:6402") == "tcp-client:127.0.0.1:6402"
    assert bumble_transport_spec("serial:/dev/ttyACM0") == "serial:/dev/ttyACM0,115200"
    assert bumble_transport_spec("hci0") == "hci-socket:0"
