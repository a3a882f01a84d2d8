import Testing
@testable import BlemuCore

/// The Core decoders take bytes and text from outside (controller, central, command line):
/// random and mutated input must give a value or a typed error, never a trap.
@Suite struct CorePropertyTests {
    @Test(arguments: [1, 2, 3] as [UInt64])
    func uuidDecodersNeverTrap(seed: UInt64) throws {
        var random = SeededRandom(seed: seed)
        for _ in 0..<5_000 {
            let bytes = random.bytes(random.below(20))
            do {
                let uuid = try BluetoothUUID(littleEndian: bytes[...])
                // What decodes re-encodes to the same point in UUID space.
                #expect(try BluetoothUUID(littleEndian: uuid.attBytes[...]) == uuid)
                #expect(BluetoothUUID(uuid.description) == uuid)
            } catch {
                #expect(![2, 4, 16].contains(bytes.count))
            }
            let text = String(decoding: random.bytes(random.below(40)).map { 0x2D + $0 % 0x4A }, as: UTF8.self)
            if let parsed = BluetoothUUID(text) { #expect(BluetoothUUID(parsed.description) == parsed) }
        }
    }

    @Test func addressAndHexParsersNeverTrap() {
        var random = SeededRandom(seed: 7)
        let alphabet = Array("0123456789abcdefABCDEFxX:- g")
        for _ in 0..<10_000 {
            let text = String((0..<random.below(24)).map { _ in alphabet[random.below(alphabet.count)] })
            if let address = BluetoothAddress(text) {
                #expect(BluetoothAddress(address.description) == address)
            }
            if let bytes = Hex.parse(text) {
                #expect(Hex.parse(Hex.bytes(bytes)) == bytes)
            }
        }
    }

    @Test func readerNeverReadsPastTheEnd() {
        var random = SeededRandom(seed: 11)
        for _ in 0..<5_000 {
            let bytes = random.bytes(random.below(12))
            var reader = ByteReader(bytes[...])
            var consumed = 0
            while true {
                let before = reader.remaining
                switch random.below(6) {
                case 0: _ = try? reader.u8()
                case 1: _ = try? reader.u16()
                case 2: _ = try? reader.u24()
                case 3: _ = try? reader.u32()
                case 4: _ = try? reader.u64()
                default: _ = try? reader.bytes(random.below(5) - 1)
                }
                consumed += before - reader.remaining
                if random.chance(15) || reader.isAtEnd { break }
            }
            #expect(consumed <= bytes.count)
            #expect(reader.remaining == bytes.count - consumed)
        }
    }
}
