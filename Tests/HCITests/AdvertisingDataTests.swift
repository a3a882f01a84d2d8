import Testing
import BlemuCore
@testable import BlemuHCI

private func hex(_ text: String) -> [UInt8] { Hex.parse(text) ?? [] }

private let diagnostics = BluetoothUUID("7d3c0001-9a5e-4d1a-8f6e-5c1b2d3e4f50")!
private let thermostat = BluetoothUUID("7d3c0100-9a5e-4d1a-8f6e-5c1b2d3e4f50")!
private let lock = BluetoothUUID("7d3c0200-9a5e-4d1a-8f6e-5c1b2d3e4f50")!
/// `diagnostics` in its little-endian AD form.
private let diagnosticsLE = "504f3e2d1b5c6e8f1a4d5e9a01003c7d"

private func structures(_ bytes: [UInt8]) throws -> [(type: UInt8, data: [UInt8])] {
    try AdvertisingPayload.parseADStructures(bytes[...]).map { ($0.type, Array($0.data)) }
}

@Suite struct AdvertisingDataLayoutTests {
    @Test func everyStructureHasTheSpecifiedBytes() {
        let content = AdvertisingContent(name: "HR", serviceUUIDs: [BluetoothUUID(0x180D), BluetoothUUID(0x180F)],
                                         appearance: 0x0340, txPowerLevel: -4,
                                         manufacturerData: [0xFF, 0xFF, 0x01, 0x02])
        let payload = AdvertisingPayload.build(content)
        #expect(payload.advertisingData == hex("""
            02 01 06
            05 03 0d18 0f18
            03 19 4003
            02 0a fc
            03 09 4852
            05 ff ffff 0102
            """))
        #expect(payload.scanResponseData == [])
        #expect(payload.omitted == [])
    }

    @Test func oneCompleteList128AndNoFlagsWhenFlagsAreZero() {
        let payload = AdvertisingPayload.build(AdvertisingContent(serviceUUIDs: [diagnostics], flags: 0))
        #expect(payload.advertisingData == hex("11 07" + diagnosticsLE))
    }

    @Test func emptyContentIsJustFlags() {
        #expect(AdvertisingPayload.build(AdvertisingContent()).advertisingData == hex("02 01 06"))
        #expect(AdvertisingPayload.build(AdvertisingContent(flags: 0)).advertisingData == [])
    }

    @Test func longNameIsShortenedInTheAdvertisementAndCompleteInTheScanResponse() {
        let name = "blemu heart-rate sensor 01"   // 26 bytes
        let payload = AdvertisingPayload.build(AdvertisingContent(name: name, serviceUUIDs: [diagnostics]))
        // 3 (flags) + 18 (one 128-bit UUID) leaves 10: a Shortened Local Name of 8 bytes.
        #expect(payload.advertisingData == hex("02 01 06  11 07" + diagnosticsLE) + [9, 0x08] + Array("blemu he".utf8))
        #expect(payload.scanResponseData == [27, 0x09] + Array(name.utf8))
        #expect(payload.omitted == [])
    }

    @Test func shortenedNameNeverSplitsACharacter() throws {
        // 8 bytes of room; "AÄÄÄ" is 7 bytes, one more Ä (2 bytes) would not fit.
        let payload = AdvertisingPayload.build(AdvertisingContent(name: "AÄÄÄÄÄ", serviceUUIDs: [diagnostics]))
        let advertised = try structures(payload.advertisingData)
        #expect(advertised.last?.type == ADType.shortenedLocalName)
        #expect(advertised.last?.data == Array("AÄÄÄ".utf8))

        // A skin-tone thumbs-up is one character of 8 bytes: it goes whole or not at all.
        let emoji = AdvertisingPayload.build(AdvertisingContent(name: "A👍🏽", serviceUUIDs: [diagnostics]))
        #expect(try structures(emoji.advertisingData).last?.data == Array("A".utf8))
        #expect(try structures(emoji.scanResponseData).first?.data == Array("A👍🏽".utf8))
    }

    @Test func nameWithoutRoomForOneCharacterGoesOnlyToTheScanResponse() throws {
        // 3 + 18 + 4 (16-bit list) + 4 (appearance) = 29: 2 bytes left, a name needs 3.
        let content = AdvertisingContent(name: "Thermostat", serviceUUIDs: [thermostat, BluetoothUUID(0x181A)],
                                         appearance: 0x0300, txPowerLevel: 0)
        let payload = AdvertisingPayload.build(content)
        #expect(payload.advertisingData.count == 29)
        #expect(try structures(payload.advertisingData).map(\.type)
                == [ADType.flags, ADType.completeServiceUUIDs16, ADType.completeServiceUUIDs128, ADType.appearance])
        // The complete name first, then what did not fit: the TX power level.
        #expect(payload.scanResponseData == [11, 0x09] + Array("Thermostat".utf8) + [2, 0x0A, 0x00])
        #expect(payload.omitted == [])
    }

    @Test func manyUUIDsGiveIncompleteListsAScanResponseAndOmissions() throws {
        let payload = AdvertisingPayload.build(AdvertisingContent(name: "Lock", serviceUUIDs: [diagnostics, lock, thermostat]))
        // One 128-bit UUID fits beside the flags and the name; the list says it is incomplete.
        #expect(payload.advertisingData == hex("02 01 06  11 06" + diagnosticsLE + "05 09") + Array("Lock".utf8))
        // The scan response holds one more (two would be 34 bytes); the third fits nowhere.
        let scan = try structures(payload.scanResponseData)
        #expect(scan.count == 1)
        #expect(scan.first?.type == ADType.incompleteServiceUUIDs128)
        #expect(scan.first?.data == lock.attBytes)
        #expect(payload.omitted.count == 1)
        #expect(payload.omitted.first?.contains(thermostat.description) == true)
    }

    @Test func uuidsArePlacedGreedilyInPriorityOrder() throws {
        let heartRate = BluetoothUUID(0x180D), battery = BluetoothUUID(0x180F)
        let payload = AdvertisingPayload.build(AdvertisingContent(serviceUUIDs: [diagnostics, heartRate, lock, battery]))
        // 3 + 18 (diagnostics) + 4 (heart rate, with its list header) + 2 (battery) = 27;
        // lock (16 more) waits for the scan response, while the later, smaller battery still fits.
        let advertised = try structures(payload.advertisingData)
        #expect(advertised.map(\.type) == [ADType.flags, ADType.completeServiceUUIDs16, ADType.incompleteServiceUUIDs128])
        #expect(advertised[1].data == hex("0d18 0f18"))
        #expect(advertised[2].data == diagnostics.attBytes)
        #expect(payload.scanResponseData == [17, ADType.incompleteServiceUUIDs128] + lock.attBytes)
    }

    @Test func aListMovedWholeToTheScanResponseIsComplete() throws {
        // Thirteen 16-bit UUIDs fill the 28 bytes after the flags; the only 128-bit UUID moves whole.
        let shorts = (0..<13).map { BluetoothUUID(UInt16(0x1800 + $0)) }
        let payload = AdvertisingPayload.build(AdvertisingContent(serviceUUIDs: shorts + [diagnostics]))
        #expect(payload.advertisingData.count == 31)
        #expect(try structures(payload.advertisingData).last?.type == ADType.completeServiceUUIDs16)
        #expect(try structures(payload.scanResponseData).first?.type == ADType.completeServiceUUIDs128)
    }

    @Test func duplicateUUIDsAreSentOnce() throws {
        let payload = AdvertisingPayload.build(AdvertisingContent(serviceUUIDs: [BluetoothUUID(0x180D), BluetoothUUID(0x180D)]))
        #expect(payload.advertisingData == hex("02 01 06  03 03 0d18"))
    }

    @Test func nameLongerThanOneStructureIsShortenedInBothAndReported() throws {
        let name = String(repeating: "x", count: 40)
        let payload = AdvertisingPayload.build(AdvertisingContent(name: name))
        #expect(try structures(payload.advertisingData).last?.data.count == 26)
        let scan = try structures(payload.scanResponseData)
        #expect(scan.first?.type == ADType.shortenedLocalName)
        #expect(scan.first?.data.count == 29)
        #expect(payload.omitted.count == 1)
        #expect(payload.omitted.first?.contains("complete local name") == true)
    }

    @Test func manufacturerDataGoesWhereItFitsOrIsReported() throws {
        let fits = AdvertisingPayload.build(AdvertisingContent(name: "Chat", manufacturerData: [0xFF, 0xFF, 1]))
        #expect(try structures(fits.advertisingData).last?.type == ADType.manufacturerSpecificData)

        let big = [UInt8](repeating: 0xAB, count: 25)
        let moved = AdvertisingPayload.build(AdvertisingContent(name: "Chat", manufacturerData: big))
        #expect(try structures(moved.scanResponseData).map(\.type) == [ADType.manufacturerSpecificData])

        let huge = AdvertisingPayload.build(AdvertisingContent(manufacturerData: [UInt8](repeating: 1, count: 30)))
        #expect(huge.scanResponseData == [])
        #expect(huge.omitted.first?.contains("manufacturer data (30 bytes)") == true)

        let malformed = AdvertisingPayload.build(AdvertisingContent(manufacturerData: [0x4C]))
        #expect(malformed.advertisingData == hex("02 01 06"))
        #expect(malformed.omitted.first?.contains("company identifier") == true)
    }

    @Test func decodeRoundTripsContentThatFits() throws {
        let content = AdvertisingContent(name: "blemu thermostat", serviceUUIDs: [BluetoothUUID(0x181A), thermostat],
                                         appearance: 0x0300, txPowerLevel: -8, manufacturerData: [0xFF, 0xFF, 7])
        let payload = AdvertisingPayload.build(content)
        #expect(payload.omitted == [])
        #expect(!payload.scanResponseData.isEmpty)   // this one needs both payloads
        let decoded = try AdvertisingContent(decodingAdvertisingData: payload.advertisingData[...],
                                             scanResponseData: payload.scanResponseData[...])
        #expect(decoded == content)
    }
}

@Suite struct ADStructureParsingTests {
    @Test func zeroLengthEndsTheSignificantPart() throws {
        let parsed = try structures(hex("02 01 06  00  ff ff ff"))
        #expect(parsed.count == 1)
        #expect(parsed.first?.type == 0x01)
        #expect(parsed.first?.data == [0x06])
        #expect(try structures([]).isEmpty)
        #expect(try structures([0, 0, 0]).isEmpty)
    }

    @Test func structureWithOnlyATypeHasEmptyData() throws {
        let parsed = try structures(hex("01 09"))
        #expect(parsed.count == 1 && parsed[0].type == 0x09 && parsed[0].data.isEmpty)
    }

    @Test func overrunningLengthIsAnError() {
        #expect(throws: DecodeError(.lengthMismatch, "AD structure of length 3 with 2 bytes left")) {
            try AdvertisingPayload.parseADStructures(hex("02 01 06  03 ff 01")[...])
        }
    }

    @Test func worksOnSlicesThatDoNotStartAtZero() throws {
        let buffer = hex("aa bb 03 19 40 03")
        let parsed = try AdvertisingPayload.parseADStructures(buffer[2...])
        #expect(parsed.count == 1 && Array(parsed[0].data) == [0x40, 0x03])
    }

    @Test func decodeRejectsMalformedKnownStructures() {
        #expect(throws: DecodeError.self) { try AdvertisingContent(decodingAdvertisingData: hex("04 03 0d18 0f")[...]) }
        #expect(throws: DecodeError.self) { try AdvertisingContent(decodingAdvertisingData: hex("04 19 0003 00")[...]) }
        #expect(throws: DecodeError.self) { try AdvertisingContent(decodingAdvertisingData: hex("03 0a 01 02")[...]) }
        #expect(throws: DecodeError.self) { try AdvertisingContent(decodingAdvertisingData: hex("02 ff 4c")[...]) }
    }

    @Test func decodeReads32BitListsAndSkipsUnknownTypes() throws {
        let decoded = try AdvertisingContent(decodingAdvertisingData: hex("05 05 78563412  03 16 aa bb  02 08 41")[...])
        #expect(decoded.serviceUUIDs == [BluetoothUUID(uint32: 0x1234_5678)])
        #expect(decoded.name == "A")
        #expect(decoded.flags == 0)
    }

    @Test func randomBytesNeverTrap() {
        var random = SplitMix64(seed: 0xAD)
        var parsedCount = 0
        for _ in 0..<20_000 {
            let bytes = (0..<Int.random(in: 0...40, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }
            if let parsed = try? AdvertisingPayload.parseADStructures(bytes[...]) {
                parsedCount += 1
                #expect(parsed.reduce(0) { $0 + 2 + $1.data.count } <= bytes.count)
            }
            _ = try? AdvertisingContent(decodingAdvertisingData: bytes[...], scanResponseData: bytes.reversed()[...])
        }
        #expect(parsedCount > 0)   // the generator does hit valid layouts, so the check above ran
    }
}

/// The seeded generator of BlemuCore, under the name these tests use.
typealias SplitMix64 = SeededRandom

@Suite struct AdvertisingDataPropertyTests {
    static let namePieces = ["a", "Z", "7", " ", "-", "é", "ü", "日", "本", "🌡️", "👍🏽", "👩‍👩‍👧", "e\u{301}", "ß"]

    static func randomContent(_ random: inout SplitMix64) -> AdvertisingContent {
        let name = (0..<Int.random(in: 0...30, using: &random))
            .map { _ in namePieces[Int.random(in: 0..<namePieces.count, using: &random)] }.joined()
        let uuids = (0..<Int.random(in: 0...8, using: &random)).map { _ -> BluetoothUUID in
            Bool.random(using: &random)
                ? BluetoothUUID(UInt16.random(in: 0x1800...0x1810, using: &random))
                : BluetoothUUID(high: UInt64.random(in: 0...3, using: &random) | 0x7d3c_0000_0000_0000,
                                low: 0x8f6e_5c1b_2d3e_4f50)
        }
        return AdvertisingContent(
            name: name, serviceUUIDs: uuids,
            appearance: Bool.random(using: &random) ? UInt16.random(in: 0...0xFFFF, using: &random) : nil,
            txPowerLevel: Bool.random(using: &random) ? Int8.random(in: -127...20, using: &random) : nil,
            flags: [0, 0x06, 0x05, 0x1A][Int.random(in: 0...3, using: &random)],
            manufacturerData: Bool.random(using: &random)
                ? (0..<Int.random(in: 0...32, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }
                : nil)
    }

    @Test func randomContentAlwaysFitsAndNothingIsDroppedSilently() throws {
        var random = SplitMix64(seed: 2024)
        var usedScanResponse = 0, omittedSomething = 0, shortenedName = 0
        for _ in 0..<3_000 {
            let content = Self.randomContent(&random)
            let payload = AdvertisingPayload.build(content)
            if !payload.scanResponseData.isEmpty { usedScanResponse += 1 }
            if !payload.omitted.isEmpty { omittedSomething += 1 }
            if payload.advertisingData.count > 2, try structures(payload.advertisingData).contains(where: {
                $0.type == ADType.shortenedLocalName
            }) { shortenedName += 1 }
            #expect(payload == AdvertisingPayload.build(content))   // deterministic
            #expect(payload.advertisingData.count <= 31)
            #expect(payload.scanResponseData.count <= 31)
            try checkStructure(payload, content)
        }
        // The generator reaches the overflow paths, so the checks above cover them.
        #expect(usedScanResponse > 100 && omittedSomething > 100 && shortenedName > 100)
    }

    private func checkStructure(_ payload: AdvertisingPayload, _ content: AdvertisingContent) throws {
        let advertised = try structures(payload.advertisingData)
        let scanned = try structures(payload.scanResponseData)
        let unique = content.serviceUUIDs.reduce(into: [BluetoothUUID]()) { if !$0.contains($1) { $0.append($1) } }
        let total16 = unique.count(where: { $0.uint16 != nil })
        let total128 = unique.count - total16
        let context = Comment(rawValue: "content \(content)")

        #expect(!scanned.contains { $0.type == ADType.flags }, context)
        for block in [advertised, scanned] {
            // At most one list of each size and one name per block (Core Supplement, Part A, 1.1, 1.2).
            let types = block.map(\.type)
            #expect(types.count(where: { [0x02, 0x03].contains($0) }) <= 1, context)
            #expect(types.count(where: { [0x06, 0x07].contains($0) }) <= 1, context)
            #expect(types.count(where: { [0x08, 0x09].contains($0) }) <= 1, context)
            for structure in block {
                switch structure.type {
                case ADType.completeServiceUUIDs16: #expect(structure.data.count == 2 * total16, context)
                case ADType.completeServiceUUIDs128: #expect(structure.data.count == 16 * total128, context)
                case ADType.shortenedLocalName, ADType.completeLocalName:
                    #expect(String(validating: structure.data, as: UTF8.self) != nil, context)
                    #expect(Array(content.name.utf8).starts(with: structure.data), context)
                    #expect(!structure.data.isEmpty, context)
                    if structure.type == ADType.completeLocalName {
                        #expect(structure.data == Array(content.name.utf8), context)
                    }
                default: break
                }
            }
        }

        let decoded = try AdvertisingContent(decodingAdvertisingData: payload.advertisingData[...],
                                             scanResponseData: payload.scanResponseData[...])
        let omitted = payload.omitted.joined(separator: "\n")
        for uuid in unique where !decoded.serviceUUIDs.contains(uuid) {
            #expect(omitted.contains(uuid.description), context)
        }
        #expect(Set(decoded.serviceUUIDs).isSubset(of: Set(unique)), context)
        if decoded.name != content.name {
            #expect(omitted.contains("complete local name"), context)
            #expect(content.name.hasPrefix(decoded.name), context)
        }
        if let appearance = content.appearance, decoded.appearance != appearance {
            #expect(omitted.contains("appearance"), context)
        }
        if let power = content.txPowerLevel, decoded.txPowerLevel != power {
            #expect(omitted.contains("TX power"), context)
        }
        if let manufacturer = content.manufacturerData, decoded.manufacturerData != manufacturer {
            #expect(omitted.contains("manufacturer data"), context)
        }
        #expect(decoded.flags == content.flags, context)
    }
}
