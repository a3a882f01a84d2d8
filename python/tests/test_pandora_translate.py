"""blemu-pandora's translation tables: Pandora's DataTypes and the AD structures on the air
(Vol 3, Part C, 11; Core Specification Supplement Part A), addresses and their types, the
Connection token, advertising reports, pairing events and answers. Pure functions: no blemu."""

from __future__ import annotations

import random

import pytest
from google.protobuf import any_pb2, empty_pb2
from pandora import host_pb2, security_pb2
from pandora.host_pb2 import DataTypes

from blemu_testkit.pandora import datatypes, translate

# Every DataTypes of Avatar's le_host_test.test_scan_response_data (pandora-avatar 0.0.11).
AVATAR_SCAN_RESPONSE_DATA = [
    dict(incomplete_service_class_uuids16=["183A", "181F"]),
    dict(incomplete_service_class_uuids32=["FFFF183A", "FFFF181F"]),
    dict(incomplete_service_class_uuids128=["FFFF181F-FFFF-1000-8000-00805F9B34FB"]),
    dict(shortened_local_name="avatar"),
    dict(complete_local_name="avatar_the_last_test_blender"),
    dict(tx_power_level=20),
    dict(class_of_device=0x40680),
    dict(peripheral_connection_interval_min=0x0006, peripheral_connection_interval_max=0x0C80),
    dict(service_solicitation_uuids16=["183A", "181F"]),
    dict(service_solicitation_uuids32=["FFFF183A", "FFFF181F"]),
    dict(service_solicitation_uuids128=["FFFF183A-FFFF-1000-8000-00805F9B34FB"]),
    dict(service_data_uuid16={"183A": bytes([1, 2, 3, 4])}),
    dict(service_data_uuid32={"FFFF183A": bytes([1, 2, 3, 4])}),
    dict(service_data_uuid128={"FFFF181F-FFFF-1000-8000-00805F9B34FB": bytes([1, 2, 3, 4])}),
    dict(appearance=0x0591),
    dict(advertising_interval=0x1000),
    dict(uri="https://www.google.com"),
    dict(le_supported_features=bytes([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0x9F])),
    dict(manufacturer_specific_data=bytes([0, 1, 2, 3, 4])),
]

# The same, each as the AD structure on the air (Length, AD Type, little-endian data).
ON_THE_AIR = [
    "05023a181f18",
    "09043a18ffff1f18ffff",
    "1106fb349b5f800000800010ffff1f18ffff",
    "0708617661746172",
    "1d09" + b"avatar_the_last_test_blender".hex(),
    "020a14",
    "040d800604",
    "05120600800c",
    "05143a181f18",
    "091f3a18ffff1f18ffff",
    "1115fb349b5f800000800010ffff3a18ffff",
    "07163a1801020304",
    "09203a18ffff01020304",
    "1521fb349b5f800000800010ffff1f18ffff01020304",
    "03199105",
    "031a0010",
    "1724" + b"https://www.google.com".hex(),
    "1127" + "00" * 14 + "109f",
    "06ff0001020304",
]


@pytest.mark.parametrize("fields,air", list(zip(AVATAR_SCAN_RESPONSE_DATA, ON_THE_AIR)), ids=[next(iter(f)) for f in AVATAR_SCAN_RESPONSE_DATA])
def test_each_data_type_avatar_checks_goes_on_the_air_as_the_supplement_says_and_comes_back(fields, air) -> None:
    encoded = datatypes.encode(DataTypes(**fields))
    assert encoded.hex() == air
    decoded = datatypes.decode(encoded)
    for key, value in fields.items():
        assert getattr(decoded, key) == value, key


def test_a_report_with_several_types_gives_each_and_lists_add_up_over_structures() -> None:
    air = bytes.fromhex("020106" "03033a18" "03031f18" "0509626c656d" "05ff34120102")
    decoded = datatypes.decode(air)
    assert decoded.complete_service_class_uuids16 == ["183A", "181F"]
    assert decoded.complete_local_name == "blem"
    assert decoded.manufacturer_specific_data == bytes.fromhex("34120102")
    assert decoded.le_discoverability_mode == host_pb2.DISCOVERABLE_GENERAL


def test_flags_come_from_the_discoverability_mode_and_say_br_edr_is_not_supported() -> None:
    assert datatypes.encode(DataTypes(le_discoverability_mode=host_pb2.DISCOVERABLE_GENERAL)).hex() == "020106"
    assert datatypes.encode(DataTypes(le_discoverability_mode=host_pb2.DISCOVERABLE_LIMITED)).hex() == "020105"
    assert datatypes.encode(DataTypes()) == b""
    assert datatypes.decode(bytes.fromhex("020105")).le_discoverability_mode == host_pb2.DISCOVERABLE_LIMITED


def test_the_local_name_and_the_interval_are_included_when_asked() -> None:
    assert datatypes.encode(DataTypes(include_complete_local_name=True), local_name="bench").hex() == "0609" + b"bench".hex()
    assert datatypes.encode(DataTypes(include_shortened_local_name=True), local_name="a-long-name").hex() == "0908" + b"a-long-n".hex()
    assert datatypes.encode(DataTypes(include_advertising_interval=True), advertising_interval=160).hex() == "031aa000"


def test_target_addresses_are_six_octets_each_reversed_on_the_air() -> None:
    encoded = datatypes.encode(DataTypes(public_target_addresses=[bytes.fromhex("112233445566"), bytes.fromhex("AABBCCDDEEFF")]))
    assert encoded.hex() == "0d17" "665544332211" "ffeeddccbbaa"
    assert list(datatypes.decode(encoded).public_target_addresses) == [bytes.fromhex("112233445566"), bytes.fromhex("AABBCCDDEEFF")]


@pytest.mark.parametrize("fields,word", [
    (dict(complete_service_class_uuids16=["18"]), "16-bit"),
    (dict(complete_service_class_uuids32=["XYZW183A"]), "hexadecimal"),
    (dict(tx_power_level=300), "-127..127"),
    (dict(class_of_device=1 << 24), "24 bits"),
    (dict(appearance=70000), "16 bits"),
    (dict(include_tx_power_level=True), "transmit power"),
    (dict(include_class_of_device=True), "Class of Device"),
    (dict(manufacturer_specific_data=bytes(300)), "254"),
    (dict(public_target_addresses=[b"\x01\x02"]), "6 octets"),
])
def test_a_data_type_that_cannot_go_on_the_air_is_refused_with_the_reason(fields, word) -> None:
    with pytest.raises(datatypes.DataTypesError, match=word):
        datatypes.encode(DataTypes(**fields))


@pytest.mark.parametrize("air", [
    "05ff0102",          # Length beyond the data: cut short, ends the data
    "00" "05ff01020304",  # a zero Length ends the significant part
    "0303183a18",        # an odd octet in a 16-bit list
    "020a",              # a TX power structure cut short
    "03193a",            # appearance of 1 octet in a structure that claims 2
    "0316" "3a",         # service data shorter than its UUID
    "0309" "ff" "fe",    # a name that is not UTF-8
])
def test_whatever_a_peer_advertises_decodes_without_an_exception(air) -> None:
    datatypes.decode(bytes.fromhex(air))


def test_random_bytes_always_decode() -> None:
    generator = random.Random(36)
    for _ in range(2000):
        datatypes.decode(bytes(generator.randrange(256) for _ in range(generator.randrange(64))))


def test_a_cut_structure_keeps_what_came_before_it() -> None:
    decoded = datatypes.decode(bytes.fromhex("03ff3412" "09ff0102"))
    assert decoded.manufacturer_specific_data == bytes.fromhex("3412")


# -- addresses, tokens ---------------------------------------------------------------------

def test_pandora_addresses_are_written_most_significant_octet_first_as_blemu_writes_them() -> None:
    assert translate.address_text(bytes.fromhex("F0F1F2F3F4F5")) == "F0:F1:F2:F3:F4:F5"
    assert translate.address_bytes("F0:F1:F2:F3:F4:F5") == bytes.fromhex("F0F1F2F3F4F5")
    for bad in (None, 5, "F0:F1:F2:F3:F4", "F0F1F2F3F4F5", "G0:F1:F2:F3:F4:F5", "F0:F1:F2:F3:F4:F5:F6"):
        with pytest.raises(translate.TranslationError):
            translate.address_bytes(bad)
    with pytest.raises(translate.TranslationError):
        translate.address_text(b"\x01\x02")


def test_connect_le_address_oneof_gives_the_four_address_types() -> None:
    for field, kind in (("public", "public"), ("random", "random"), ("public_identity", "public-identity"),
                        ("random_static_identity", "random-identity")):
        request = host_pb2.ConnectLERequest(**{field: bytes.fromhex("C0C1C2C3C4C5")})
        assert translate.peer_address(request) == ("C0:C1:C2:C3:C4:C5", kind)
    with pytest.raises(translate.TranslationError):
        translate.peer_address(host_pb2.ConnectLERequest())


def test_own_address_types_are_own_address_type_0_to_3() -> None:
    assert [translate.own_address_type(v) for v in range(4)] == ["public", "random", "resolvable-or-public", "resolvable-or-random"]
    with pytest.raises(translate.TranslationError):
        translate.own_address_type(7)


def test_a_connection_token_is_the_link_id_in_decimal_and_only_such_tokens_are_taken() -> None:
    token = translate.connection(42)
    assert token.cookie.value == b"42"
    assert translate.link_of(token) == 42
    for bad in (b"", b"4a", b"-1", b"1" * 21, b"\x00\x2a"):
        with pytest.raises(translate.TranslationError):
            translate.link_of(host_pb2.Connection(cookie=any_pb2.Any(value=bad)))
    for bad_link in (None, -1, True, "3"):
        with pytest.raises(translate.TranslationError):
            translate.connection(bad_link)


# -- advertising reports -------------------------------------------------------------------

def report(**fields):
    base = {"event": "advertisement", "scan": 1, "address": "C0:C1:C2:C3:C4:C5", "address_type": "random",
            "legacy": True, "connectable": True, "scannable": True, "directed": False, "scan_response": False,
            "truncated": False, "sid": None, "primary_phy": "1m", "secondary_phy": None, "tx_power": None,
            "rssi": -40, "periodic_interval_ms": None, "direct_address": None, "direct_address_type": None,
            "data": "0509626c656d"}
    base.update(fields)
    return base


def test_an_advertisement_event_becomes_a_scanning_response() -> None:
    response = translate.scanning_response(report(), bytes.fromhex("0509626c656d"))
    assert response.random == bytes.fromhex("C0C1C2C3C4C5")
    assert response.legacy and response.connectable and response.scannable and not response.truncated
    assert response.rssi == -40 and response.tx_power == 127  # TX power not available (7.7.65.13)
    assert response.primary_phy == host_pb2.PRIMARY_1M and response.secondary_phy == host_pb2.SECONDARY_NONE
    assert response.data.complete_local_name == "blem"
    extended = translate.scanning_response(report(legacy=False, sid=3, primary_phy="coded", secondary_phy="2m",
                                                  tx_power=-4, address_type="public-identity",
                                                  periodic_interval_ms=112.5), b"")
    assert extended.periodic_advertising_interval == 112.5  # blemu writes 1.25 ms steps as decimals
    assert extended.sid == 3 and extended.primary_phy == host_pb2.PRIMARY_CODED
    assert extended.secondary_phy == host_pb2.SECONDARY_2M and extended.tx_power == -4
    assert extended.public_identity == bytes.fromhex("C0C1C2C3C4C5")


def test_a_directed_report_names_its_target_by_kind() -> None:
    def direct(address, kind):
        return translate.scanning_response(report(directed=True, direct_address=address, direct_address_type=kind), b"").direct_address_variant()
    assert direct("11:22:33:44:55:66", "public") == "direct_public"
    assert direct("51:22:33:44:55:66", "random") == "direct_unresolved_random"  # 0b01: resolvable private
    assert direct("11:22:33:44:55:66", "random") == "direct_non_resolvable_random"
    assert direct("11:22:33:44:55:66", "public-identity") == "direct_resolved_public"
    assert direct("D1:22:33:44:55:66", "random-identity") == "direct_resolved_random"


def test_a_report_with_an_unknown_address_type_is_an_error_not_a_wrong_address() -> None:
    with pytest.raises(translate.TranslationError):
        translate.scanning_response(report(address_type="anonymous"), b"")


def test_an_active_scan_gives_a_scannable_advertisement_with_its_scan_response_as_one_report() -> None:
    merger = translate.ReportMerger(passive=False)
    assert merger.add(report(data="0201060309616263")) is None  # held for its scan response
    merged, data = merger.add(report(scan_response=True, connectable=False, data="05ff01020304"))
    assert data == bytes.fromhex("0201060309616263" "05ff01020304")
    assert merged["connectable"] and merged["scannable"]
    # The next advertisement without a scan response in between lets the held one go.
    assert merger.add(report(data="020106")) is None
    ready = merger.add(report(data="020106"))
    assert ready is not None and ready[1] == bytes.fromhex("020106")


def test_a_passive_scan_or_an_unscannable_advertisement_is_given_at_once() -> None:
    assert translate.ReportMerger(passive=True).add(report())[1] == bytes.fromhex("0509626c656d")
    assert translate.ReportMerger(passive=False).add(report(scannable=False))[1] == bytes.fromhex("0509626c656d")


def test_advertisers_are_merged_apart() -> None:
    merger = translate.ReportMerger(passive=False)
    assert merger.add(report(address="C0:00:00:00:00:01", data="020101")) is None
    assert merger.add(report(address="C0:00:00:00:00:02", scan_response=True, data="020102")) is None  # no advertisement of its own
    assert merger.add(report(address="C0:00:00:00:00:01", scan_response=True, data="020103"))[1] == bytes.fromhex("020101020103")


# -- pairing ---------------------------------------------------------------------------------

def test_pairing_requests_become_pairing_events_with_the_link_token() -> None:
    event = {"event": "pairing-request", "link": 7, "pairing": 3}
    assert translate.pairing_event({**event, "method": "just-works", "passkey": None}).method_variant() == "just_works"
    compare = translate.pairing_event({**event, "method": "numeric-comparison", "passkey": 123456})
    assert compare.numeric_comparison == 123456 and translate.link_of(compare.connection) == 7
    assert translate.pairing_event({**event, "method": "passkey-entry", "passkey": None}).method_variant() == "passkey_entry_request"
    assert translate.pairing_event({**event, "method": "passkey-display", "passkey": 42}).passkey_entry_notification == 42
    for bad in ({**event, "method": "oob"}, {**event, "method": "numeric-comparison", "passkey": None}, {**event, "link": None, "method": "just-works"}):
        with pytest.raises(translate.TranslationError):
            translate.pairing_event(bad)


def test_answers_become_pairing_answer_fields_and_no_answer_is_a_rejection() -> None:
    event = security_pb2.PairingEvent(just_works=empty_pb2.Empty())
    assert translate.pairing_answer_fields(security_pb2.PairingEventAnswer(event=event, confirm=True)) == {"confirm": True}
    assert translate.pairing_answer_fields(security_pb2.PairingEventAnswer(event=event, confirm=False)) == {"confirm": False}
    assert translate.pairing_answer_fields(security_pb2.PairingEventAnswer(event=event, passkey=999999)) == {"passkey": 999999}
    assert translate.pairing_answer_fields(security_pb2.PairingEventAnswer(event=event, passkey=1000000)) == {}
    assert translate.pairing_answer_fields(security_pb2.PairingEventAnswer(event=event)) == {}


def test_security_failures_map_to_the_protos_results() -> None:
    assert translate.failure_result("pairing-failure") == "pairing_failure"
    assert translate.failure_result("authentication-failure") == "authentication_failure"
    assert translate.failure_result("encryption-failure") == "encryption_failure"
    assert translate.failure_result("connection-died") == "connection_died"
    assert translate.failure_result("something new") == "pairing_failure"
    assert translate.LE_LEVEL == {security_pb2.LE_LEVEL1: 1, security_pb2.LE_LEVEL2: 2,
                                  security_pb2.LE_LEVEL3: 3, security_pb2.LE_LEVEL4: 4}
