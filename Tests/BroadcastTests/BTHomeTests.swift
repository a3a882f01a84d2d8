import Testing
import BlemuCore
import BlemuCrypto
@testable import BlemuBroadcast

private func hex(_ text: String) -> [UInt8] { Hex.parse(text) ?? [] }

/// bthome.io/encryption's example: the key, the sensor's MAC 54:48:E6:8F:80:A5.
private let exampleKey = AESCCMKey(hex("231d39c1d7cc1ab1aee224cd096db932"))!
private let exampleAddress = BluetoothAddress("54:48:E6:8F:80:A5")!

private func thermometer(packetID: Int64 = 7, battery: Double = 93, temperature: Double = 21.5, humidity: Double = 48.25) -> BTHomePacket {
    // Given out of order on purpose: the encoder sorts by id.
    BTHomePacket(objects: [
        BTHomeObject(.humidity, value: humidity)!,
        BTHomeObject(.temperature, value: temperature)!,
        BTHomeObject(.packetID, integer: packetID)!,
        BTHomeObject(.battery, value: battery)!,
    ])
}

@Suite struct BTHomeEncoderTests {
    // bthome.io/format's example advertisement: 25.00 °C, 50.55 %.
    @Test func publishedExampleEncodes() {
        let packet = BTHomePacket(objects: [BTHomeObject(.temperature, value: 25.00)!, BTHomeObject(.humidity, value: 50.55)!])
        #expect(BTHome.advertisingData(packet) == hex("02 01 06 0A 16 D2 FC 40 02 C4 09 03 BF 13"))
    }

    // The vectors below were decoded by Home Assistant's parser, bthome-ble 3.25.0
    // (BTHomeBluetoothDeviceData().update with the service data, address 54:48:E6:8F:80:A5), to
    // the values in each comment.
    @Test func thermometerVectorMatchesWhatBTHomeBLEDecoded() {
        // bthome-ble: packet_id 7, battery 93, temperature 21.5, humidity 48.25.
        #expect(BTHome.payload(thermometer()) == hex("40 00 07 01 5D 02 66 08 03 D9 12"))
        #expect(BTHome.advertisingData(thermometer()) == hex("02 01 06 0E 16 D2 FC 40 00 07 01 5D 02 66 08 03 D9 12"))
    }

    @Test func negativeTemperatureIsTwosComplement() {
        // bthome-ble: packet_id 1, temperature -5.25.
        let packet = BTHomePacket(objects: [BTHomeObject(.packetID, integer: 1)!, BTHomeObject(.temperature, value: -5.25)!])
        #expect(BTHome.payload(packet) == hex("40 00 01 02 F3 FD"))
    }

    @Test func doorIsTriggerBasedWithOpeningAndButton() {
        // bthome-ble: packet_id 1, battery 100, opening True, event button "press".
        let packet = BTHomePacket(triggerBased: true, objects: [
            BTHomeObject(.button, integer: Int64(BTHomeButtonEvent.press.rawValue))!,
            BTHomeObject(.opening, integer: 1)!,
            BTHomeObject(.battery, value: 100)!,
            BTHomeObject(.packetID, integer: 1)!,
        ])
        #expect(BTHome.payload(packet) == hex("44 00 01 01 64 11 01 3A 01"))
    }

    @Test func sortKeepsTheOrderOfOneID() {
        let packet = BTHomePacket(objects: [BTHomeObject(.temperature, value: 2)!, BTHomeObject(.battery, value: 1)!, BTHomeObject(.temperature, value: 1)!])
        #expect(BTHome.payload(packet) == hex("40 01 01 02 C8 00 02 64 00"))
    }

    @Test func valuesOutsideTheObjectsBytesAreRefused() {
        #expect(BTHomeObject(.temperature, value: 327.68) == nil)
        #expect(BTHomeObject(.temperature, value: -327.68) != nil)
        #expect(BTHomeObject(.humidity, value: -0.01) == nil)
        #expect(BTHomeObject(.battery, value: 256) == nil)
        #expect(BTHomeObject(.battery, value: .nan) == nil)
        #expect(BTHomeObject(.battery, value: .infinity) == nil)
        #expect(BTHomeObject(.temperature, bytes: [1]) == nil)
    }

    @Test func rawAndTextCarryTheirLength() {
        let text = BTHomeObjectType.forID(0x53)!
        let packet = BTHomePacket(objects: [BTHomeObject(text, bytes: Array("hi".utf8))!])
        #expect(BTHome.payload(packet) == hex("40 53 02 68 69"))
        let reading = try? BTHome.decode(payload: BTHome.payload(packet)[...])
        #expect(reading?.packet == packet)
    }

    @Test func tableIsAscendingAndLengthsArePositive() {
        let ids = BTHomeObjectType.all.map(\.id)
        #expect(ids == ids.sorted() && Set(ids).count == ids.count)
        for type in BTHomeObjectType.all where type.encoding == .signed || type.encoding == .unsigned {
            #expect((1...4).contains(type.length), "0x\(String(type.id, radix: 16))")
        }
    }
}

@Suite struct BTHomeDecoderTests {
    @Test func publishedExampleDecodes() throws {
        let reading = try BTHome.decode(advertisingData: hex("02 01 06 0A 16 D2 FC 40 02 C4 09 03 BF 13")[...])
        #expect(reading.packet.first(.temperature)?.value == 25.00)
        #expect(abs((reading.packet.first(.humidity)?.value ?? 0) - 50.55) < 1e-9)
        #expect(reading.stop == nil && !reading.encrypted && !reading.packet.triggerBased)
    }

    @Test func roundTripsEveryKnownFixedLengthType() throws {
        for type in BTHomeObjectType.all where type.encoding != .text && type.encoding != .raw {
            let range = type.integerRange
            let objects = [BTHomeObject(type, integer: range.lowerBound)!, BTHomeObject(type, integer: range.upperBound)!]
            let reading = try BTHome.decode(payload: BTHome.payload(BTHomePacket(objects: objects))[...])
            #expect(reading.packet.objects == objects, "0x\(String(type.id, radix: 16))")
            #expect(reading.stop == nil)
        }
    }

    @Test func unknownObjectStopsWithTheObjectsBefore() throws {
        // bthome-ble decodes this too as temperature 25.0 and ignores the rest.
        let reading = try BTHome.decode(payload: hex("40 00 07 02 C4 09 FF 01")[...])
        #expect(reading.packet.objects.map(\.id) == [0x00, 0x02])
        #expect(reading.stop == .unknownObject(id: 0xFF, offset: 5))
        #expect(reading.packetID == 7)
    }

    @Test func truncatedObjectsStop() throws {
        #expect(try BTHome.decode(payload: hex("40 01 5D 02 C4")[...]).stop == .truncatedObject(id: 0x02, offset: 2))
        #expect(try BTHome.decode(payload: hex("40 53")[...]).stop == .truncatedObject(id: 0x53, offset: 0))
        #expect(try BTHome.decode(payload: hex("40 54 05 01 02")[...]).stop == .truncatedObject(id: 0x54, offset: 0))
    }

    @Test func otherVersionsAndMissingDataAreRefused() {
        #expect(throws: BTHomeDecodeError.unsupportedVersion(1)) { try BTHome.decode(payload: hex("20 02 C4 09")[...]) }
        #expect(throws: BTHomeDecodeError.unsupportedVersion(3)) { try BTHome.decode(payload: hex("60")[...]) }
        #expect(throws: BTHomeDecodeError.empty) { try BTHome.decode(payload: []) }
        #expect(throws: BTHomeDecodeError.notBTHome) { try BTHome.decode(advertisingData: hex("02 01 06 05 16 AA FE 00 00")[...]) }
        #expect(throws: BTHomeDecodeError.malformedAdvertisingData("lengthMismatch: AD structure of length 10 with 3 bytes left")) {
            try BTHome.decode(advertisingData: hex("02 01 06 0A 16 D2 FC")[...])
        }
    }

    @Test func everyPrefixAndMutationDecodesOrThrows() {
        // Total: whatever the bytes, a reading or an error, never a trap.
        let base = BTHome.advertisingData(thermometer()) + BTHome.payload(BTHomePacket(objects: [BTHomeObject(BTHomeObjectType.forID(0x54)!, bytes: [1, 2, 3])!]))
        var generator = SeededRandom(seed: 24)
        for length in 0...base.count { _ = try? BTHome.decode(advertisingData: base.prefix(length)) }
        for _ in 0..<2000 {
            var bytes = base
            for _ in 0..<3 { bytes[Int.random(in: 0..<bytes.count, using: &generator)] = UInt8.random(in: 0...255, using: &generator) }
            _ = try? BTHome.decode(advertisingData: bytes[...])
            _ = try? BTHome.decode(payload: bytes.dropFirst(7), key: exampleKey, address: exampleAddress)
        }
    }
}

@Suite struct BTHomeEncryptionTests {
    // bthome.io/encryption: objects 02CA09 03BF13, counter bytes 00112233, device information
    // 0x41, nonce 5448e68f80a5d2fc4100112233. The ciphertext and MIC are what the page's
    // Cryptodome call gives (checked with Python's cryptography AESCCM), and bthome-ble, given
    // the bindkey, decoded the payload to 25.06 °C, 50.55 % (and refused it under another key).
    static let publishedPayload = hex("41 A4 72 66 C9 5F 73 00 11 22 33 78 23 72 14")

    @Test func nonceIsMACUUIDInformationCounter() {
        #expect(BTHome.nonce(address: exampleAddress, deviceInformation: 0x41, counter: hex("00112233")) == hex("5448e68f80a5d2fc4100112233"))
    }

    @Test func publishedExampleEncrypts() {
        let packet = BTHomePacket(objects: [BTHomeObject(.temperature, value: 25.06)!, BTHomeObject(.humidity, value: 50.55)!])
        let encryption = BTHomeEncryption(key: exampleKey, address: exampleAddress, counter: 0x3322_1100)
        #expect(BTHome.payload(packet, encryption: encryption) == Self.publishedPayload)
    }

    @Test func publishedExampleDecrypts() throws {
        let reading = try BTHome.decode(payload: Self.publishedPayload[...], key: exampleKey, address: exampleAddress)
        #expect(reading.encrypted && reading.counter == 0x3322_1100)
        #expect(reading.packet.objects.map(\.integer) == [2506, 5055])
    }

    @Test func thermometerVectorMatchesWhatBTHomeBLEDecrypted() throws {
        // bthome-ble with the bindkey: packet_id 7, battery 93, temperature 21.5, humidity 48.25;
        // with the last key byte changed: "Decryption failed", no values.
        let encryption = BTHomeEncryption(key: exampleKey, address: exampleAddress, counter: 0x0102_0304)
        let payload = BTHome.payload(thermometer(), encryption: encryption)
        #expect(payload == hex("41 5a a6 9d 26 7f 18 10 73 9d f7 04 03 02 01 61 45 98 f2"))
        let reading = try BTHome.decode(payload: payload[...], key: exampleKey, address: exampleAddress)
        #expect(reading.packet == BTHomePacket(objects: BTHome.sortedObjects(thermometer().objects)))
    }

    @Test func wrongKeyAddressOrAlteredBytesFailCleanly() {
        let wrongKey = AESCCMKey(hex("231d39c1d7cc1ab1aee224cd096db933"))!
        #expect(throws: BTHomeDecodeError.authenticationFailed) {
            try BTHome.decode(payload: Self.publishedPayload[...], key: wrongKey, address: exampleAddress)
        }
        #expect(throws: BTHomeDecodeError.authenticationFailed) {
            try BTHome.decode(payload: Self.publishedPayload[...], key: exampleKey, address: BluetoothAddress("54:48:E6:8F:80:A6")!)
        }
        for index in 1..<Self.publishedPayload.count {
            var altered = Self.publishedPayload
            altered[index] ^= 0x01
            #expect(throws: BTHomeDecodeError.authenticationFailed) { try BTHome.decode(payload: altered[...], key: exampleKey, address: exampleAddress) }
        }
        // With the bindkey, the encryption bit cleared is refused, not read as plain objects
        // (bthome-ble: "Received plaintext adv … while bindkey is known, ignoring").
        var cleared = Self.publishedPayload
        cleared[0] &= ~0x01
        #expect(throws: BTHomeDecodeError.unencryptedWithKey) { try BTHome.decode(payload: cleared[...], key: exampleKey, address: exampleAddress) }
        #expect(throws: BTHomeDecodeError.unencryptedWithKey) { try BTHome.decode(payload: hex("40 02 C4 09")[...], key: exampleKey, address: exampleAddress) }
        // The trigger-based bit is in the nonce too: flipping it is caught.
        var flipped = Self.publishedPayload
        flipped[0] |= 0x04
        #expect(throws: BTHomeDecodeError.authenticationFailed) { try BTHome.decode(payload: flipped[...], key: exampleKey, address: exampleAddress) }
    }

    @Test func randomPacketsRoundTripAndAnyFlippedBitIsCaught() throws {
        var random = SeededRandom(seed: 2024)
        let fixed = BTHomeObjectType.all.filter { $0.encoding == .signed || $0.encoding == .unsigned }
        for _ in 0..<200 {
            let objects = (0..<random.below(6)).map { _ in
                let type = fixed[random.below(fixed.count)]
                return BTHomeObject(type, integer: Int64.random(in: type.integerRange, using: &random))!
            }
            let packet = BTHomePacket(triggerBased: random.chance(50), objects: objects)
            let key = AESCCMKey(random.bytes(16))!
            let address = BluetoothAddress(value: random.next() & 0xFFFF_FFFF_FFFF)
            let counter = UInt32(truncatingIfNeeded: random.next())
            let payload = BTHome.payload(packet, encryption: BTHomeEncryption(key: key, address: address, counter: counter))
            let reading = try BTHome.decode(payload: payload[...], key: key, address: address)
            #expect(reading.packet == BTHomePacket(triggerBased: packet.triggerBased, objects: BTHome.sortedObjects(objects)))
            #expect(reading.counter == counter && reading.stop == nil)
            var altered = payload
            altered[random.below(altered.count)] ^= 1 << UInt8(random.below(8))
            #expect(throws: BTHomeDecodeError.self) { try BTHome.decode(payload: altered[...], key: key, address: address) }
        }
    }

    @Test func encryptedWithoutKeyOrTooShortIsRefused() {
        #expect(throws: BTHomeDecodeError.encryptedWithoutKey) { try BTHome.decode(payload: Self.publishedPayload[...]) }
        #expect(throws: BTHomeDecodeError.encryptedTooShort(7)) {
            try BTHome.decode(payload: Self.publishedPayload.prefix(8), key: exampleKey, address: exampleAddress)
        }
    }

    @Test func bindkeyOfAnotherLengthIsRefused() {
        #expect(AESCCMKey(hex("231d39c1d7cc1ab1aee224cd096db9")) == nil)
        #expect(AESCCMKey([UInt8](repeating: 0, count: 32)) == nil)
    }
}
