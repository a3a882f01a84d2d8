import BlemuCore
import Testing
@testable import BlemuATT

/// The seeded generator of BlemuCore, under the name these tests use.
typealias SplitMix64 = SeededRandom

/// One decoder under test: decode, then re-encode and report whether the input was canonical
/// (so that the re-encoding must equal it).
struct Codec: Sendable, CustomTestStringConvertible {
    let name: String
    let opcode: UInt8
    let samples: [[UInt8]]
    /// Returns the re-encoded PDU and whether the input form is canonical; throws on bad input.
    let decode: @Sendable (ArraySlice<UInt8>) throws(DecodeError) -> (encoded: [UInt8], canonical: Bool)
    var testDescription: String { name }
}

func codec<T: ATTPDU & SendableMetatype>(_ type: T.Type, _ samples: [String],
                      canonical: @escaping @Sendable (T, ArraySlice<UInt8>) -> Bool = { _, _ in true },
                      inspect: @escaping @Sendable (T) -> Void = { _ in }) -> Codec {
    Codec(name: "\(T.self)", opcode: T.opcode.rawValue, samples: samples.map { Hex.parse($0) ?? [] }) {
        (input: ArraySlice<UInt8>) throws(DecodeError) -> (encoded: [UInt8], canonical: Bool) in
        let value = try T(pdu: input)
        inspect(value)
        return (value.encoded, canonical(value, input))
    }
}

/// A 16-byte UUID that is really a 16-bit one re-encodes as 2 bytes: the only non-canonical form.
let uuidFieldCanonical: @Sendable (BluetoothUUID, Int) -> Bool = { uuid, wireCount in uuid.attByteCount == wireCount }

let allCodecs: [Codec] = [
    codec(ATTErrorResponse.self, ["01 0A 0300 0A"]),
    codec(ATTExchangeMTURequest.self, ["02 F700"]),
    codec(ATTExchangeMTUResponse.self, ["03 0502"]),
    codec(ATTFindInformationRequest.self, ["04 0100 FFFF"]),
    codec(ATTFindByTypeValueRequest.self, ["06 0100 FFFF 0028 0D18", "06 0100 FFFF 0028"]),
    codec(ATTReadByTypeRequest.self, ["08 0100 FFFF 0328", "08 0100 FFFF 9ECADC240EE5A9E093F3A3B50100406E"],
          canonical: { pdu, input in uuidFieldCanonical(pdu.attributeType, input.count - 5) }),
    codec(ATTReadByGroupTypeRequest.self, ["10 0100 FFFF 0028", "10 0100 FFFF FB349B5F800000800010000000280000"],
          canonical: { pdu, input in uuidFieldCanonical(pdu.groupType, input.count - 5) }),
    codec(ATTReadRequest.self, ["0A 0300"]),
    codec(ATTReadBlobRequest.self, ["0C 1900 1600"]),
    codec(ATTReadMultipleRequest.self, ["0E 0300 0600 0A00"], inspect: { pdu in
        // Every index the request advertises must be readable without trapping.
        _ = (0..<pdu.handleCount).map(pdu.handle(at:))
    }),
    codec(ATTReadMultipleVariableRequest.self, ["20 0300 0600"], inspect: { pdu in
        _ = (0..<pdu.handleCount).map(pdu.handle(at:))
    }),
    codec(ATTWriteRequest.self, ["12 0D00 0100", "12 0F00"]),
    codec(ATTWriteCommand.self, ["52 0F00 AABB"]),
    codec(ATTSignedWriteCommand.self, ["D2 0F00 AABB 000102030405060708090A0B"]),
    codec(ATTPrepareWriteRequest.self, ["16 0F00 1200 010203"]),
    codec(ATTExecuteWriteRequest.self, ["18 01", "18 00"]),
    codec(ATTHandleValueNotification.self, ["1B 0C00 0048"]),
    codec(ATTHandleValueIndication.self, ["1D 0C00 0048"]),
    codec(ATTHandleValueConfirmation.self, ["1E"]),
    codec(ATTReadResponse.self, ["0B 626C656D75", "0B"]),
    codec(ATTFindByTypeValueResponse.self, ["07 0700 1600 1700 1B00"], inspect: { pdu in
        #expect(pdu.ranges.count == pdu.data.count / 4)
    }),
    codec(ATTPrepareWriteResponse.self, ["17 0F00 1200 010203", "17 0F00 0000"]),
    codec(ATTExecuteWriteResponse.self, ["19"]),
    codec(ATTReadMultipleResponse.self, ["0F 0102", "0F"]),
    codec(ATTReadMultipleVariableResponse.self, ["21 0200 0102 0100 03"]),
    codec(ATTReadBlobResponse.self, ["0D 0102", "0D"]),
    codec(ATTReadByTypeResponse.self, ["09 07 0200 02 0300 002A 0500 0A 0600 192A"], inspect: { pdu in
        let pairs = pdu.pairs
        #expect(pairs.count == pdu.data.count / Int(pdu.pairLength))
        #expect(pairs.allSatisfy { $0.value.count == Int(pdu.pairLength) - 2 })
    }),
    codec(ATTReadByGroupTypeResponse.self, ["11 06 0100 0300 0018 0700 1600 0D18"], inspect: { pdu in
        let entries = pdu.entries
        #expect(entries.count == pdu.data.count / Int(pdu.entryLength))
        #expect(entries.allSatisfy { $0.value.count == Int(pdu.entryLength) - 4 })
    }),
    codec(ATTFindInformationResponse.self, ["05 01 0100 0028 0200 0328",
                                             "05 02 1900 9ECADC240EE5A9E093F3A3B50100406E"], inspect: { pdu in
        #expect(pdu.pairs.count == pdu.data.count / (pdu.format == 0x01 ? 4 : 18))
    }),
    codec(ATTWriteResponse.self, ["13"]),
]

@Suite struct ATTDecoderPropertyTests {
    /// Runs one input through a decoder, at index 0 and as a slice of a larger buffer; both must
    /// agree, never trap, and a decoded canonical value must re-encode to the input.
    static func check(_ codec: Codec, _ input: [UInt8]) {
        let framed = [0x55] + input + [0xAA, 0x55]
        let slice = framed[1..<(1 + input.count)]
        let direct: (encoded: [UInt8], canonical: Bool)?
        let fromSlice: (encoded: [UInt8], canonical: Bool)?
        do { direct = try codec.decode(input[...]) } catch { direct = nil }
        do { fromSlice = try codec.decode(slice) } catch { fromSlice = nil }
        #expect(direct?.encoded == fromSlice?.encoded, "\(codec.name): slice and array disagree on \(Hex.bytes(input))")
        guard let direct else {
            return
        }
        if direct.canonical {
            #expect(direct.encoded == input, "\(codec.name): \(Hex.bytes(input)) re-encoded as \(Hex.bytes(direct.encoded))")
        } else {
            // A non-canonical form must at least reach a fixed point after one re-encoding.
            let again = try? codec.decode(direct.encoded[...])
            #expect(again?.encoded == direct.encoded, "\(codec.name): no fixed point for \(Hex.bytes(input))")
        }
        // Nothing decodes without its own opcode first.
        #expect(input.first == codec.opcode)
    }

    @Test(arguments: allCodecs)
    func samplesDecodeAndRoundTrip(_ codec: Codec) throws {
        for sample in codec.samples {
            let decoded = try codec.decode(sample[...])
            if decoded.canonical {
                #expect(decoded.encoded == sample, "\(codec.name) sample \(Hex.bytes(sample))")
            } else {
                // Only a 16-bit UUID sent in its 16-octet form: it comes back in 2 octets.
                #expect(decoded.encoded.count == sample.count - 14, "\(codec.name) sample \(Hex.bytes(sample))")
            }
        }
    }

    @Test(arguments: allCodecs)
    func randomBytesNeverTrap(_ codec: Codec) {
        var rng = SplitMix64(seed: 0xB1E_0001 &+ UInt64(codec.opcode))
        for _ in 0..<3000 {
            let count = rng.below(40)
            var input = rng.bytes(count)
            // Mostly lead with the right opcode, or nearly everything is rejected at byte 0.
            if !input.isEmpty && rng.chance(85) { input[0] = codec.opcode }
            Self.check(codec, input)
        }
    }

    @Test(arguments: allCodecs)
    func mutatedValidPDUsNeverTrap(_ codec: Codec) {
        var rng = SplitMix64(seed: 0xB1E_0002 &+ UInt64(codec.opcode))
        var decodedCount = 0
        for round in 0..<3000 {
            var input = codec.samples[round % codec.samples.count]
            for _ in 0...rng.below(3) {
                switch rng.below(6) {
                case 0 where !input.isEmpty: // flip one bit
                    let i = rng.below(input.count)
                    input[i] ^= 1 << UInt8(rng.below(8))
                case 1 where !input.isEmpty: // replace one byte
                    input[rng.below(input.count)] = rng.byte()
                case 2: // insert one byte
                    input.insert(rng.byte(), at: rng.below(input.count + 1))
                case 3 where !input.isEmpty: // delete one byte
                    input.remove(at: rng.below(input.count))
                case 4: // truncate
                    input = Array(input.prefix(rng.below(input.count + 1)))
                default: // append a tail
                    input += rng.bytes(1 + rng.below(20))
                }
            }
            if (try? codec.decode(input[...])) != nil { decodedCount += 1 }
            Self.check(codec, input)
        }
        // The mutations must exercise the accepting paths too, not only the rejecting ones.
        #expect(decodedCount > 0, "\(codec.name): no mutated input decoded")
    }

    /// Inputs of every length up to 40 with the right opcode: exhaustive over length, so each
    /// length guard (exactly at, one below, one above the minimum) is hit.
    @Test(arguments: allCodecs)
    func everyLengthNeverTraps(_ codec: Codec) {
        var rng = SplitMix64(seed: 0xB1E_0003 &+ UInt64(codec.opcode))
        for length in 0...40 {
            for _ in 0..<20 {
                var input = rng.bytes(length)
                if !input.isEmpty { input[0] = codec.opcode }
                Self.check(codec, input)
            }
        }
    }
}
