import Testing
import BlemuCore
@testable import BlemuBroadcast

private func hex(_ text: String) -> [UInt8] { Hex.parse(text) ?? [] }

@Suite struct IBeaconTests {
    static let uuid = IBeacon.uuidBytes("E2C56DB5-DFFB-48D2-B060-D0F5A71096E0")!

    // Home Assistant's parser, ibeacon-ble 1.2.0 (iBeaconParser.parse, the manufacturer data
    // under 0x004C as bleak hands it), decoded these to the values in each comment.
    @Test func encodesWhatIBeaconBLEDecoded() {
        // ibeacon-ble: uuid e2c56db5-dffb-48d2-b060-d0f5a71096e0, major 258, minor 772, power -59.
        let beacon = IBeacon(uuid: Self.uuid, major: 0x0102, minor: 0x0304, measuredPower: -59)!
        #expect(beacon.advertisingData == hex("02 01 06 1A FF 4C 00 02 15 E2C56DB5DFFB48D2B060D0F5A71096E0 0102 0304 C5"))
        #expect(beacon.advertisingData.count == 30)
        // ibeacon-ble: major 65534, minor 1, power -65 (big-endian, signed).
        let other = IBeacon(uuid: Self.uuid, major: 65534, minor: 1, measuredPower: -65)!
        #expect(other.advertisingData.suffix(5) == hex("FFFE 0001 BF")[...])
    }

    @Test func decodesAndFinds() throws {
        let beacon = IBeacon(uuid: Self.uuid, major: 65534, minor: 1, measuredPower: -65)!
        #expect(try IBeacon.find(in: beacon.advertisingData[...]) == beacon)
        #expect(beacon.uuidText == "E2C56DB5-DFFB-48D2-B060-D0F5A71096E0")
    }

    @Test func otherAppleDataIsNoBeaconAndBadLengthsThrow() {
        // Apple's other manufacturer data (0x10 Nearby Info) is not an iBeacon.
        #expect((try? IBeacon.find(in: hex("02 01 06 07 FF 4C 00 10 02 0B 00")[...])) == .some(nil))
        #expect(throws: DecodeError.self) { try IBeacon(manufacturerPayload: hex("02 14")[...] + Self.uuid + hex("0000 0000 C5")) }
        #expect(throws: DecodeError.self) { try IBeacon(manufacturerPayload: hex("02 15")[...] + Self.uuid + hex("0000 0000")) }
        #expect(throws: DecodeError.self) { try IBeacon(manufacturerPayload: hex("02 15")[...] + Self.uuid + hex("0000 0000 C5 00")) }
        #expect(throws: DecodeError.self) { try IBeacon.find(in: hex("02 01 06 1A FF 4C 00")[...]) }
        #expect(IBeacon(uuid: [1, 2], major: 0, minor: 0, measuredPower: 0) == nil)
        #expect(IBeacon.uuidBytes("E2C56DB5-DFFB-48D2-B060-D0F5A71096E") == nil)
        #expect(IBeacon.uuidBytes("G2C56DB5-DFFB-48D2-B060-D0F5A71096E0") == nil)
    }
}

@Suite struct EddystoneTests {
    static let namespace = hex("00010203040506070809")
    static let instance = hex("AABBCCDDEEFF")

    @Test func uidFrame() throws {
        // protocol-specification / eddystone-uid: type 0x00, TX power at 0 m, namespace, instance, RFU 00 00.
        let frame = EddystoneFrame.uid(txPower: -18, namespace: Self.namespace, instance: Self.instance)
        #expect(try frame.advertisingData() == hex("02 01 06 03 03 AA FE 17 16 AA FE 00 EE 00010203040506070809 AABBCCDDEEFF 0000"))
        #expect(try EddystoneFrame.find(in: frame.advertisingData()[...]) == frame)
        // A frame without the reserved bytes (some beacons send 18) decodes too.
        #expect(try EddystoneFrame(payload: hex("00 12 00010203040506070809 AABBCCDDEEFF")[...]) == .uid(txPower: 18, namespace: Self.namespace, instance: Self.instance))
        #expect(throws: EddystoneFrame.EncodeError.namespaceOrInstanceLength) { try EddystoneFrame.uid(txPower: 0, namespace: [1], instance: Self.instance).payload() }
    }

    @Test func urlFrameUsesSchemeAndExpansions() throws {
        // eddystone-url's example URL: "https://" is scheme 0x03; no expansion in "goo.gl".
        #expect(try EddystoneFrame.encodeURL("https://goo.gl/S6zT6P") == [0x03] + Array("goo.gl/S6zT6P".utf8))
        // "https://www." 0x01, ".com/" 0x00 (not ".com" 0x07 and a "/").
        #expect(try EddystoneFrame.encodeURL("https://www.example.com/a") == [0x01] + Array("example".utf8) + [0x00, 0x61])
        #expect(try EddystoneFrame.encodeURL("http://blemu.org") == [0x02] + Array("blemu".utf8) + [0x08])
        #expect(try EddystoneFrame.encodeURL("http://www.a.info/b.gov") == [0x00, 0x61, 0x04, 0x62, 0x0D])
        let frame = EddystoneFrame.url(txPower: 18, url: "https://www.example.com/a")
        #expect(try frame.payload() == hex("10 12 01") + Array("example".utf8) + [0x00, 0x61])
        #expect(try EddystoneFrame.find(in: frame.advertisingData()[...]) == frame)
    }

    @Test func urlRefusals() {
        #expect(throws: EddystoneFrame.EncodeError.unsupportedScheme) { try EddystoneFrame.encodeURL("ftp://x.org") }
        #expect(throws: EddystoneFrame.EncodeError.unencodableCharacter(0x20)) { try EddystoneFrame.encodeURL("https://a b") }
        #expect(throws: EddystoneFrame.EncodeError.urlTooLong(18)) { try EddystoneFrame.encodeURL("https://abcdefghijklmnopqr") }
        #expect(throws: DecodeError.self) { try EddystoneFrame(payload: hex("10 00 04 61")[...]) }      // no scheme 0x04
        #expect(throws: DecodeError.self) { try EddystoneFrame(payload: hex("10 00 03 61 0E")[...]) }   // reserved 0x0E
        #expect(throws: DecodeError.self) { try EddystoneFrame(payload: hex("10 00 03 61 7F")[...]) }   // reserved 0x7F
        #expect(throws: DecodeError.self) { try EddystoneFrame(payload: hex("10 00 03")[...] + [UInt8](repeating: 0x61, count: 18)) }
    }

    @Test func telemetryIsBigEndianWithFixedPointTemperature() throws {
        // tlm-plain: VBATT mV, TEMP signed 8.8 (0x8000 when not measured), ADV_CNT, SEC_CNT in 0.1 s;
        // the service data AD's length byte is 0x11.
        let frame = EddystoneFrame.telemetry(batteryMillivolts: 3000, temperature: 24.5, advertisingCount: 0x0102_0304, uptimeTenths: 36000)
        #expect(try frame.advertisingData() == hex("02 01 06 03 03 AA FE 11 16 AA FE 20 00 0BB8 1880 01020304 00008CA0"))
        #expect(try EddystoneFrame.find(in: frame.advertisingData()[...]) == frame)
        let negative = EddystoneFrame.telemetry(batteryMillivolts: 0, temperature: -1.25, advertisingCount: 0, uptimeTenths: 0)
        #expect(try negative.payload()[4...5] == hex("FEC0")[...])
        #expect(try EddystoneFrame(payload: negative.payload()[...]) == negative)
        let unmeasured = EddystoneFrame.telemetry(batteryMillivolts: 0, temperature: nil, advertisingCount: 1, uptimeTenths: 1)
        #expect(try unmeasured.payload()[4...5] == hex("8000")[...])
        #expect(try EddystoneFrame(payload: unmeasured.payload()[...]) == unmeasured)
        #expect(throws: EddystoneFrame.EncodeError.temperatureOutOfRange) {
            try EddystoneFrame.telemetry(batteryMillivolts: 0, temperature: 128, advertisingCount: 0, uptimeTenths: 0).payload()
        }
    }

    @Test func unknownFramesAndLengthsThrow() {
        #expect(throws: DecodeError.self) { try EddystoneFrame(payload: hex("30 00 0102030405060708")[...]) }  // EID
        #expect(throws: DecodeError.self) { try EddystoneFrame(payload: hex("20 01 0000 0000 00000000 00000000")[...]) }  // eTLM
        #expect(throws: DecodeError.self) { try EddystoneFrame(payload: hex("20 00 0000 0000 00000000 000000")[...]) }
        #expect(throws: DecodeError.self) { try EddystoneFrame(payload: hex("20 00 0000 0000 00000000 00000000 00")[...]) }
        #expect(throws: DecodeError.self) { try EddystoneFrame(payload: hex("00 00 0001")[...]) }
        #expect(throws: DecodeError.self) { try EddystoneFrame(payload: []) }
        #expect((try? EddystoneFrame.find(in: hex("02 01 06")[...])) == .some(nil))
    }

    @Test func mutatedFramesDecodeOrThrow() throws {
        var generator = SeededRandom(seed: 24)
        let frames = [try EddystoneFrame.uid(txPower: 0, namespace: Self.namespace, instance: Self.instance).advertisingData(),
                      try EddystoneFrame.url(txPower: 0, url: "https://www.example.com/a").advertisingData(),
                      try IBeacon(uuid: IBeaconTests.uuid, major: 1, minor: 2, measuredPower: -59)!.advertisingData]
        for base in frames {
            for length in 0...base.count {
                _ = try? EddystoneFrame.find(in: base.prefix(length))
                _ = try? IBeacon.find(in: base.prefix(length))
            }
            for _ in 0..<1000 {
                var bytes = base
                for _ in 0..<3 { bytes[Int.random(in: 0..<bytes.count, using: &generator)] = UInt8.random(in: 0...255, using: &generator) }
                _ = try? EddystoneFrame.find(in: bytes[...])
                _ = try? IBeacon.find(in: bytes[...])
            }
        }
    }
}
