import Testing
import BlemuBroadcast
import BlemuCore
import BlemuCrypto
import BlemuCentral
@testable import BlemuObserver

private func hex(_ text: String) -> [UInt8] { Hex.parse(text) ?? [] }

/// bthome.io/encryption's example key and MAC address.
private let exampleKey = AESCCMKey(hex("231d39c1d7cc1ab1aee224cd096db932"))!
private let wrongKey = AESCCMKey(hex("231d39c1d7cc1ab1aee224cd096db933"))!
private let exampleAddress = BluetoothAddress("54:48:E6:8F:80:A5")!
/// bthome.io/encryption's example payload (25.06 °C, 50.55 %, counter 0x33221100) in its AD.
private let encryptedAD = hex("02 01 06 12 16 D2 FC 41 A4 72 66 C9 5F 73 00 11 22 33 78 23 72 14")

private func report(_ ad: String, scanResponse: String = "", keys: BroadcastReport.Keys = .init()) -> BroadcastReport {
    BroadcastReport(address: exampleAddress, advertisingData: hex(ad), scanResponseData: hex(scanResponse), keys: keys)
}

@Suite struct BroadcastReportTests {
    @Test func bthomePublishedExampleIsDecodedAndShown() throws {
        let decoded = report("02 01 06 0A 16 D2 FC 40 02 C4 09 03 BF 13")
        let reading = try #require(decoded.bthome)
        #expect(reading.packet.objects.map(\.integer) == [2500, 5055])
        #expect(decoded.textLines == ["bthome  temperature 25.00 °C  humidity 50.55 %"])
        #expect(decoded.json.encoded == #"[{"format":"bthome","encrypted":false,"counter":null,"trigger_based":false,"packet_id":null,"#
            + #""values":{"temperature":25,"humidity":50.55},"objects":[{"id":2,"name":"temperature","value":25,"unit":"°C"},"#
            + #"{"id":3,"name":"humidity","value":50.55,"unit":"%"}],"stop":null}]"#)
    }

    @Test func negativeValuesAndPacketID() {
        // bthome-ble: packet_id 1, temperature -5.25.
        let decoded = report("02 01 06 09 16 D2 FC 40 00 01 02 F3 FD")
        #expect(decoded.textLines == ["bthome  packet id 1  temperature -5.25 °C"])
        #expect(decoded.bthome?.packetID == 1)
    }

    @Test func encryptedWithTheRightKeyOpens() throws {
        let decoded = BroadcastReport(address: exampleAddress, advertisingData: encryptedAD, keys: .init(bindkey: exampleKey))
        let reading = try #require(decoded.bthome)
        #expect(reading.encrypted && reading.counter == 0x3322_1100)
        #expect(decoded.textLines == ["bthome  encrypted (counter 857870592)  temperature 25.06 °C  humidity 50.55 %"])
    }

    @Test func encryptedWithAWrongKeyIsAMICFailureNotGarbage() {
        let decoded = BroadcastReport(address: exampleAddress, advertisingData: encryptedAD, keys: .init(bindkey: wrongKey))
        #expect(decoded.items == [.bthomeError(.authenticationFailed)])
        #expect(decoded.textLines == ["bthome  encrypted BTHome whose MIC does not match (wrong bindkey, or altered)"])
        #expect(decoded.json.encoded.contains(#""error":"mic_failure""#))
        // From another address the nonce differs: the MIC fails too.
        let moved = BroadcastReport(address: BluetoothAddress("54:48:E6:8F:80:A6")!, advertisingData: encryptedAD, keys: .init(bindkey: exampleKey))
        #expect(moved.items == [.bthomeError(.authenticationFailed)])
    }

    @Test func encryptedWithoutAKeySaysSo() {
        #expect(BroadcastReport(address: exampleAddress, advertisingData: encryptedAD).items == [.bthomeError(.encryptedWithoutKey)])
    }

    @Test func aKeyBoundToTheAdvertiserRefusesPlainButAnUnboundKeyDoesNot() {
        let plain = "02 01 06 0A 16 D2 FC 40 02 C4 09 03 BF 13"
        #expect(report(plain, keys: .init(bindkey: exampleKey, bound: true)).items == [.bthomeError(.unencryptedWithKey)])
        #expect(report(plain, keys: .init(bindkey: exampleKey, bound: false)).bthome != nil)
    }

    @Test func iBeacon() {
        let decoded = report("02 01 06 1A FF 4C 00 02 15 E2C56DB5DFFB48D2B060D0F5A71096E0 0102 0304 C5")
        #expect(decoded.textLines == ["ibeacon  uuid E2C56DB5-DFFB-48D2-B060-D0F5A71096E0  major 258  minor 772  power -59 dBm"])
        #expect(decoded.json.encoded == #"[{"format":"ibeacon","uuid":"E2C56DB5-DFFB-48D2-B060-D0F5A71096E0","major":258,"minor":772,"measured_power":-59}]"#)
    }

    @Test func eddystoneUIDURLAndTLM() {
        let uid = report("02 01 06 03 03 AA FE 17 16 AA FE 00 EE 00010203040506070809 AABBCCDDEEFF 0000")
        #expect(uid.textLines == ["eddystone-uid  namespace 00010203040506070809  instance aabbccddeeff  tx -18 dBm"])
        // The spec's example: "https://www.example.com/" → 01 "example" 00.
        let url = report("02 01 06 03 03 AA FE 0E 16 AA FE 10 EB 01 65 78 61 6D 70 6C 65 00")
        #expect(url.textLines == ["eddystone-url  https://www.example.com/  tx -21 dBm"])
        #expect(url.json.encoded == #"[{"format":"eddystone-url","tx_power":-21,"url":"https://www.example.com/"}]"#)
        // TLM: 3000 mV, 23.5 °C (0x1780), 258 advertisements, 123.4 s.
        let tlm = report("02 01 06 03 03 AA FE 11 16 AA FE 20 00 0BB8 1780 00000102 000004D2")
        #expect(tlm.textLines == ["eddystone-tlm  battery 3000 mV  temperature 23.5 °C  advertisements 258  uptime 123.4 s"])
        #expect(tlm.json.encoded == #"[{"format":"eddystone-tlm","battery_mv":3000,"temperature":23.5,"advertising_count":258,"uptime":123.4}]"#)
    }

    @Test func batteryServiceAndUnknownDataRaw() {
        let decoded = report("02 01 06 04 16 0F 18 5D 05 16 0D 18 01 02 05 FF 34 12 AB CD")
        #expect(decoded.items == [.batteryLevel(93), .serviceData(uuid: BluetoothUUID(0x180D), data: [1, 2]),
                                  .manufacturerData(company: 0x1234, data: [0xAB, 0xCD])])
        #expect(decoded.textLines[0] == "battery-service  93 %")
    }

    @Test func manufacturerAndServiceDataAreNamedFromTheAssignedNumbers() {
        // 0x0059: Nordic Semiconductor ASA (Assigned Numbers 7.1); 0x180D: Heart Rate.
        let decoded = report("02 01 06 05 16 0D 18 01 02 05 FF 59 00 AB CD 05 FF FE FF 01 02")
        #expect(decoded.textLines[0] == "service-data 180D (Heart Rate)  0102")
        #expect(decoded.textLines[1] == "manufacturer-data 0x0059 (Nordic Semiconductor ASA)  abcd")
        #expect(decoded.textLines[2] == "manufacturer-data 0xfffe  0102")
        #expect(decoded.json.encoded.contains(#"{"format":"manufacturer-data","company":89,"company_name":"Nordic Semiconductor ASA","data":"abcd"}"#))
        #expect(decoded.json.encoded.contains(#""company":65534,"company_name":null"#))
    }

    @Test func scanResponseIsDecodedToo() {
        let decoded = report("02 01 06", scanResponse: "0A 16 D2 FC 40 02 C4 09 03 BF 13")
        #expect(decoded.bthome?.packet.objects.count == 2)
    }

    // Hostile and truncated advertising data: a reason, never a trap or garbage values.
    @Test func truncatedADStructureIsMalformed() {
        let decoded = report("02 01 06 0A 16 D2 FC 40 02 C4")
        #expect(decoded.items.count == 1)
        guard case .malformed(let format, _) = decoded.items.first else { Issue.record("not malformed: \(decoded.items)"); return }
        #expect(format == "ad")
    }

    @Test func truncatedBTHomeObjectKeepsWhatCameBefore() throws {
        let decoded = report("02 01 06 09 16 D2 FC 40 02 C4 09 03 BF")
        let reading = try #require(decoded.bthome)
        #expect(reading.packet.objects.map(\.id) == [0x02])
        #expect(reading.stop == .truncatedObject(id: 0x03, offset: 3))
        #expect(decoded.textLines[0].hasPrefix("bthome  temperature 25.00 °C  (object 0x3 at byte 3"))
    }

    @Test func brokenFramesAreMalformedItems() {
        #expect(report("05 16 D2 FC 60 02").items == [.bthomeError(.unsupportedVersion(3))])
        #expect(report("03 16 D2 FC").items == [.bthomeError(.empty)])
        #expect(report("06 16 D2 FC 41 00 00").items == [.bthomeError(.encryptedWithoutKey)])
        #expect(BroadcastReport(address: exampleAddress, advertisingData: hex("06 16 D2 FC 41 00 00"), keys: .init(bindkey: exampleKey)).items
            == [.bthomeError(.encryptedTooShort(2))])
        guard case .malformed("ibeacon", _)? = report("08 FF 4C 00 02 15 E2 C5 6D").items.first else { Issue.record("iBeacon"); return }
        guard case .malformed("eddystone", _)? = report("06 16 AA FE 10 EB 05").items.first else { Issue.record("scheme"); return }
        guard case .malformed("eddystone", _)? = report("04 16 AA FE 30").items.first else { Issue.record("EID"); return }
        // Service data too short for its UUID, and zero padding: ignored, not decoded.
        #expect(report("02 16 D2 00 00 00").items.isEmpty)
    }

    @Test func textFromThePeerIsShownVisible() {
        // An Eddystone URL cannot hold control characters; a BTHome text object (0x53) can.
        let decoded = report("0B 16 D2 FC 40 53 05 68 69 1B 5B 32")
        #expect(decoded.textLines == [#"bthome  text "hi\x1b[2""#])
        #expect(decoded.json.encoded.contains(#""text":"hi\u001b[2""#))
    }

    @Test func valueTextHasTheFactorsDecimals() {
        #expect(BTHomeValueText.decimals(0.01) == 2)
        #expect(BTHomeValueText.decimals(1) == 0)
        #expect(BTHomeValueText.decimals(0.35) == nil)
        #expect(BTHomeValueText.text(BTHomeObject(.temperature, integer: -5)!) == "-0.05")
        #expect(BTHomeValueText.text(BTHomeObject(.voltage, integer: 3001)!) == "3.001")
    }
}

/// The fingerprints `blemu scan` compares to tell a new reading (`ScanLines.Reading`).
@Suite struct ReadingFingerprintTests {
    func fingerprints(_ ad: String, keys: BroadcastReport.Keys = .init()) -> [ScanLines.Reading] {
        report(ad, keys: keys).readingFingerprints
    }

    @Test func aNewBTHomeValueOrPacketIDIsANewFingerprintTheSameBytesAreNot() {
        let plain = fingerprints("02 01 06 0A 16 D2 FC 40 02 C4 09 03 BF 13")
        #expect(plain.map(\.kind) == [0])
        #expect(fingerprints("02 01 06 0A 16 D2 FC 40 02 C4 09 03 BF 13") == plain)
        #expect(fingerprints("02 01 06 0A 16 D2 FC 40 02 C5 09 03 BF 13") != plain)
        // With a packet id, the id is the reading (bthome.io/format).
        #expect(fingerprints("02 01 06 09 16 D2 FC 40 00 01 02 F3 FD") == fingerprints("02 01 06 09 16 D2 FC 40 00 01 02 F4 FD"))
        #expect(fingerprints("02 01 06 09 16 D2 FC 40 00 01 02 F3 FD") != fingerprints("02 01 06 09 16 D2 FC 40 00 02 02 F3 FD"))
    }

    @Test func anEncryptedReadingsCounterIsLeftOut() {
        let packet = BTHomePacket(objects: [BTHomeObject(.temperature, value: 21.5)!])
        func sealed(_ counter: UInt32, _ packet: BTHomePacket) -> [ScanLines.Reading] {
            BroadcastReport(address: exampleAddress, advertisingData: BTHome.advertisingData(
                packet, encryption: BTHomeEncryption(key: exampleKey, address: exampleAddress, counter: counter)),
                keys: .init(bindkey: exampleKey)).readingFingerprints
        }
        #expect(sealed(1, packet) == sealed(2, packet))
        #expect(sealed(3, BTHomePacket(objects: [BTHomeObject(.temperature, value: 21.6)!])) != sealed(2, packet))
        // Without the key every advertisement is the same "encrypted, no bindkey".
        let closed = { (counter: UInt32) in
            BroadcastReport(address: exampleAddress, advertisingData: BTHome.advertisingData(
                packet, encryption: BTHomeEncryption(key: exampleKey, address: exampleAddress, counter: counter))).readingFingerprints
        }
        #expect(closed(1) == closed(2))
    }

    @Test func eachEddystoneFrameTypeIsAKindOfItsOwn() {
        let uid = fingerprints("02 01 06 03 03 AA FE 17 16 AA FE 00 EB 00112233445566778899 AABBCCDDEEFF 0000")
        let url = fingerprints("02 01 06 03 03 AA FE 0E 16 AA FE 10 EB 01 6578616D706C65 00")
        let tlm = fingerprints("02 01 06 03 03 AA FE 11 16 AA FE 20 00 0BB8 1780 00000102 000004D2")
        let later = fingerprints("02 01 06 03 03 AA FE 11 16 AA FE 20 00 0BB8 1780 00000103 000004DC")
        #expect(uid.map(\.kind) == [2] && url.map(\.kind) == [3] && tlm.map(\.kind) == [4])
        #expect(later.map(\.kind) == [4] && later != tlm)
    }
}

@Suite struct ReadingWatchTests {
    private let watched = exampleAddress

    @Test func aPacketIDIsPrintedOnce() {
        var watch = ReadingWatch(address: watched)
        var seen: [String] = []
        let first = report("02 01 06 09 16 D2 FC 40 00 01 02 F3 FD")
        seen.append(watch.isNewReading(first, from: watched) ? "new" : "repeat")
        seen.append(watch.isNewReading(first, from: watched) ? "new" : "repeat")
        // Same packet id, whatever else: a repeat (bthome.io: the id filters duplicates).
        seen.append(watch.isNewReading(report("02 01 06 09 16 D2 FC 40 00 01 02 F4 FD"), from: watched) ? "new" : "repeat")
        seen.append(watch.isNewReading(report("02 01 06 09 16 D2 FC 40 00 02 02 F3 FD"), from: watched) ? "new" : "repeat")
        #expect(seen == ["new", "repeat", "repeat", "new"])
    }

    @Test func withoutPacketIDUnchangedPayloadsAreNotRepeated() {
        var watch = ReadingWatch(address: watched)
        var seen: [String] = []
        let beacon = report("02 01 06 1A FF 4C 00 02 15 E2C56DB5DFFB48D2B060D0F5A71096E0 0102 0304 C5")
        seen.append(watch.isNewReading(beacon, from: watched) ? "new" : "repeat")
        seen.append(watch.isNewReading(beacon, from: watched) ? "new" : "repeat")
        seen.append(watch.isNewReading(report("02 01 06 1A FF 4C 00 02 15 E2C56DB5DFFB48D2B060D0F5A71096E0 0102 0305 C5"), from: watched) ? "new" : "repeat")
        #expect(seen == ["new", "repeat", "new"])
    }

    @Test func anEncryptedReadingsCounterIsNotANewReading() {
        var watch = ReadingWatch(address: watched)
        var seen: [String] = []
        let packet = BTHomePacket(objects: [BTHomeObject(.temperature, value: 21.5)!])
        func advertisement(_ counter: UInt32) -> BroadcastReport {
            BroadcastReport(address: watched, advertisingData: BTHome.advertisingData(
                packet, encryption: BTHomeEncryption(key: exampleKey, address: watched, counter: counter)), keys: .init(bindkey: exampleKey, bound: true))
        }
        seen.append(watch.isNewReading(advertisement(1), from: watched) ? "new" : "repeat")
        seen.append(watch.isNewReading(advertisement(2), from: watched) ? "new" : "repeat")
        #expect(seen == ["new", "repeat"])
    }

    @Test func otherAdvertisersAreNotReadings() {
        var watch = ReadingWatch(address: watched)
        var seen: [String] = []
        seen.append(watch.isNewReading(report("02 01 06"), from: BluetoothAddress("11:22:33:44:55:66")!) ? "new" : "repeat")
        #expect(seen == ["repeat"])
    }
}
