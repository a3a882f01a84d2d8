import Testing
import BlemuCore
import BlemuCrypto
@testable import BlemuGATT

private func hex(_ text: String) -> [UInt8] {
    Hex.parse(text) ?? []
}

@Suite struct GATTDatabaseHashTests {
    typealias Entry = (handle: UInt16, type: BluetoothUUID, value: [UInt8]?)

    /// The example database of the Core spec's Database Hash example (Vol 3, Part G, Appendix B):
    /// GAP, GATT (Service Changed + CCCD, Client Supported Features, Database Hash), Glucose
    /// (including Battery, a characteristic with CCCD and Extended Properties), Battery (secondary).
    /// Value attributes are in the list too, with values, to check that they are left out.
    static let specDatabase: [Entry] = [
        (0x0001, BluetoothUUID(0x2800), hex("0018")),
        (0x0002, BluetoothUUID(0x2803), hex("0a 0300 002a")),
        (0x0003, BluetoothUUID(0x2A00), Array("blemu".utf8)),
        (0x0004, BluetoothUUID(0x2803), hex("02 0500 012a")),
        (0x0005, BluetoothUUID(0x2A01), hex("0000")),
        (0x0006, BluetoothUUID(0x2800), hex("0118")),
        (0x0007, BluetoothUUID(0x2803), hex("20 0800 052a")),
        (0x0008, BluetoothUUID(0x2A05), nil),
        (0x0009, BluetoothUUID(0x2902), hex("0200")),
        (0x000A, BluetoothUUID(0x2803), hex("0a 0b00 292b")),
        (0x000B, BluetoothUUID(0x2B29), hex("00")),
        (0x000C, BluetoothUUID(0x2803), hex("02 0d00 2a2b")),
        (0x000D, BluetoothUUID(0x2B2A), nil),
        (0x000E, BluetoothUUID(0x2800), hex("0818")),
        (0x000F, BluetoothUUID(0x2802), hex("1400 1600 0f18")),
        (0x0010, BluetoothUUID(0x2803), hex("a2 1100 182a")),
        (0x0011, BluetoothUUID(0x2A18), hex("0102")),
        (0x0012, BluetoothUUID(0x2902), hex("0000")),
        (0x0013, BluetoothUUID(0x2900), hex("0000")),
        (0x0014, BluetoothUUID(0x2801), hex("0f18")),
        (0x0015, BluetoothUUID(0x2803), hex("02 1600 192a")),
        (0x0016, BluetoothUUID(0x2A19), hex("64")),
    ]

    @Test func specExampleMessageAndHash() {
        // M and the AES-CMAC of the spec's example, as the spec prints them (most significant
        // octet first); Bumble's tests/gatt_service_test.py checks the same vector.
        #expect(GATTDatabaseHash.message(Self.specDatabase) == hex("""
            010000280018020003280a0300002a04000328020500012a06000028011807000328200800052a0900
            02290a0003280a0b00292b0c000328020d002a2b0e00002808180f000228140016000f1810000328a2
            1100182a12000229130000290000140001280f1815000328021600192a
            """))
        let cmac = hex("F1CA2D48 ECF58BAC 8A8830BB B9FBA990")
        #expect(AESCMAC.mac(key: [UInt8](repeating: 0, count: 16), message: GATTDatabaseHash.message(Self.specDatabase))
                == cmac)
        // On the wire, least significant octet first: the CMAC reversed.
        #expect(GATTDatabaseHash.compute(Self.specDatabase) == Array(cmac.reversed()))
    }

    @Test func hashesInHandleOrderWhateverTheInputOrder() {
        let shuffled = Array(Self.specDatabase.reversed())
        #expect(GATTDatabaseHash.compute(shuffled) == GATTDatabaseHash.compute(Self.specDatabase))
    }

    @Test func valuesOfNonStructuralAttributesDoNotChangeTheHash() {
        var changed = Self.specDatabase
        changed[2].value = Array("another name".utf8)   // Device Name value
        changed[8].value = hex("0100")                    // CCCD value: hashed without it
        #expect(GATTDatabaseHash.compute(changed) == GATTDatabaseHash.compute(Self.specDatabase))

        var moved = Self.specDatabase
        moved[1].value = hex("02 0300 002a")              // Device Name loses Write: a declaration
        #expect(GATTDatabaseHash.compute(moved) != GATTDatabaseHash.compute(Self.specDatabase))
    }

    /// A database with a 128-bit service and characteristic, CUD, Presentation Format and Extended
    /// Properties. Expected bytes produced independently with Bumble 0.0.236
    /// (/work/venv-probe/bin/python): the services added to a bumble.device.Device, the message built
    /// with `GenericAttributeProfileService.get_attribute_data` over `gatt_server.attributes`, and
    /// the hash as `get_database_hash` returns it, `crypto.aes_cmac(m, bytes(16))[::-1]`.
    @Test func matchesBumbleForA128BitDatabase() throws {
        let diagnosticsService = try #require(BluetoothUUID("7d3c0001-9a5e-4d1a-8f6e-5c1b2d3e4f50"))
        let diagnosticsCharacteristic = try #require(BluetoothUUID("7d3c0002-9a5e-4d1a-8f6e-5c1b2d3e4f50"))
        var declaration: [UInt8] = [0x82, 0x09, 0x00]    // Read | Extended Properties, value handle 9
        diagnosticsCharacteristic.append128(to: &declaration)
        let database: [Entry] = [
            (0x0001, BluetoothUUID(0x2800), hex("0d18")),
            (0x0002, BluetoothUUID(0x2803), hex("10 0300 372a")),
            (0x0003, BluetoothUUID(0x2A37), []),
            (0x0004, BluetoothUUID(0x2902), nil),
            (0x0005, BluetoothUUID(0x2803), hex("02 0600 382a")),
            (0x0006, BluetoothUUID(0x2A38), [0x01]),
            (0x0007, BluetoothUUID(0x2800), diagnosticsService.attBytes),
            (0x0008, BluetoothUUID(0x2803), declaration),
            (0x0009, diagnosticsCharacteristic, Array("{}".utf8)),
            (0x000A, BluetoothUUID(0x2901), Array("Diagnostics".utf8)),
            (0x000B, BluetoothUUID(0x2904), hex("19 00 0027 01 0000")),
            (0x000C, BluetoothUUID(0x2900), hex("0000")),
        ]
        #expect(GATTDatabaseHash.message(database) == hex("""
            010000280d1802000328100300372a0400022905000328020600382a07000028504f3e2d1b5c6e8f1a4d5e
            9a01003c7d08000328820900504f3e2d1b5c6e8f1a4d5e9a02003c7d0a0001290b0004290c0000290000
            """))
        #expect(GATTDatabaseHash.compute(database) == hex("327e9065d0aef2927e47197764e01ed0"))
    }
}
