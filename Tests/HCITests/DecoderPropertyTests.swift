import Testing
import BlemuCore
@testable import BlemuHCI
@testable import BlemuL2CAP

/// Every decoder of the HCI and L2CAP layers against thousands of random and mutated inputs.
/// Bytes from the controller and the peer are hostile: a decoder may refuse them, with its
/// typed error, but never trap, and what it accepts must be what the format says.

/// The seeded generator of BlemuCore, under the name these tests use.
typealias HCITestRandom = SeededRandom

/// Random inputs: fresh noise and mutations of valid samples, so the decoders are driven past
/// their first length check into every branch.
private struct Fuzzer {
    var random: HCITestRandom
    let corpus: [[UInt8]]
    /// Where the format keeps a length byte/word that covers the rest, to fix it up after a mutation.
    let lengthField: LengthField

    enum LengthField { case none, byte(at: Int, after: Int), word(at: Int, after: Int) }

    init(seed: UInt64, corpus: [[UInt8]], lengthField: LengthField) {
        random = HCITestRandom(seed: seed)
        self.corpus = corpus
        self.lengthField = lengthField
    }

    mutating func byte() -> UInt8 { UInt8.random(in: 0...255, using: &random) }

    mutating func noise(maxLength: Int) -> [UInt8] {
        (0..<Int.random(in: 0...maxLength, using: &random)).map { _ in byte() }
    }

    mutating func next() -> [UInt8] {
        if corpus.isEmpty || Int.random(in: 0..<4, using: &random) == 0 { return noise(maxLength: 80) }
        var bytes = corpus[Int.random(in: 0..<corpus.count, using: &random)]
        for _ in 0..<Int.random(in: 1...3, using: &random) { mutate(&bytes) }
        if Bool.random(using: &random) { fixLength(&bytes) }
        return bytes
    }

    private mutating func mutate(_ bytes: inout [UInt8]) {
        switch Int.random(in: 0..<8, using: &random) {
        case 0 where !bytes.isEmpty:
            let index = Int.random(in: 0..<bytes.count, using: &random)
            bytes[index] ^= 1 << UInt8.random(in: 0...7, using: &random)
        case 1 where !bytes.isEmpty:
            bytes[Int.random(in: 0..<bytes.count, using: &random)] = [0x00, 0xFF, 0x7F, 0x80, byte()][Int.random(in: 0..<5, using: &random)]
        case 2:
            bytes = Array(bytes.prefix(Int.random(in: 0...bytes.count, using: &random)))
        case 3:
            bytes += noise(maxLength: 20)
        case 4:
            bytes.insert(byte(), at: Int.random(in: 0...bytes.count, using: &random))
        case 5 where !bytes.isEmpty:
            bytes.remove(at: Int.random(in: 0..<bytes.count, using: &random))
        case 6:
            let other = corpus[Int.random(in: 0..<corpus.count, using: &random)]
            bytes = Array(bytes.prefix(Int.random(in: 0...bytes.count, using: &random)))
                + other.suffix(Int.random(in: 0...other.count, using: &random))
        default:
            if let first = bytes.first { bytes.append(first) }
        }
    }

    private func fixLength(_ bytes: inout [UInt8]) {
        switch lengthField {
        case .none:
            break
        case let .byte(at, after):
            guard bytes.count > at, bytes.count - after <= 255, bytes.count >= after else { return }
            bytes[at] = UInt8(bytes.count - after)
        case let .word(at, after):
            guard bytes.count > at + 1, bytes.count >= after else { return }
            bytes.setLE(UInt16(truncatingIfNeeded: bytes.count - after), at: at)
        }
    }

    /// `bytes` inside a bigger buffer, as transports hand decoders slices that do not start at 0.
    mutating func embedded(_ bytes: [UInt8]) -> (buffer: [UInt8], range: Range<Int>) {
        let prefix = noise(maxLength: 5)
        let suffix = noise(maxLength: 5)
        return (prefix + bytes + suffix, prefix.count..<(prefix.count + bytes.count))
    }
}

private func hex(_ text: String) -> [UInt8] { Hex.parse(text) ?? [] }

private func le16(_ bytes: [UInt8], at index: Int) -> Int { Int(bytes[index]) | Int(bytes[index + 1]) << 8 }

private let iterations = 5000

/// Valid HCI events of every kind the decoder knows (Vol 4, Part E, 7.7).
private let eventCorpus: [[UInt8]] = [
    "0e04 01 030c 00", "0e0c 01 0910 00 554433221100", "0f04 00 01 0d20", "0504 00 4000 13",
    "1309 02 4000 0300 4100 0100", "1001 42", "1a01 01", "0804 00 4000 01",
    "3e13 01 00 4000 01 01 554433 2211c0 1800 0000 f401 00",
    "3e1f 0a 00 4100 01 00 554433 2211c0 010203040546 0a0b0c0d0e4f 2800 0200 9001 05",
    "3e0a 03 00 4000 2800 0200 9001", "3e0b 06 4000 0600 0c00 0000 f401", "3e0b 07 4000 fb00 4808 1b00 4801",
    "3e06 0c 00 4000 02 01", "3e19 02 02 00 01 554433 2211c0 03 020106 c4 04 00 665544332211 00 b0",
    "3e03 7f 0102", "ff02 aabb",
    "3e1d 0d 01 1b00 01 554433 2211c0 01 00 ff 7f c4 0000 00 000000000000 03 020106",
].map(hex)

@Suite struct DecoderPropertyTests {
    @Test func hciEventDecoderIsTotalAndHonoursTheLengthField() {
        var fuzzer = Fuzzer(seed: 0xE7E7, corpus: eventCorpus, lengthField: .byte(at: 1, after: 2))
        var decoded = 0
        for _ in 0..<iterations {
            let input = fuzzer.next()
            let result: Result<HCIEvent, DecodeError> = Result { () throws(DecodeError) in try HCIEvent(packet: input[...]) }
            switch result {
            case .success:
                decoded += 1
                // Vol 4, Part E, 5.4.4: accepted only when Parameter_Total_Length is exact.
                #expect(input.count >= 2 && Int(input[1]) == input.count - 2, "\(Hex.bytes(input))")
            case .failure(let error):
                if input.count < 2 {
                    #expect(error.kind == .truncated, "\(Hex.bytes(input))")
                } else if Int(input[1]) != input.count - 2 {
                    #expect(error.kind == .lengthMismatch, "\(Hex.bytes(input))")
                } else {
                    #expect([.truncated, .trailingBytes, .lengthMismatch, .invalidValue].contains(error.kind))
                }
            }
            // The same bytes inside a bigger buffer decode the same way.
            let (buffer, range) = fuzzer.embedded(input)
            let embedded: Result<HCIEvent, DecodeError> = Result { () throws(DecodeError) in try HCIEvent(packet: buffer[range]) }
            #expect(sameOutcome(result, embedded), "\(Hex.bytes(input))")
        }
        #expect(decoded > iterations / 10, "the mutations should reach the decoders' bodies")
    }

    @Test func aclPacketDecoderIsTotalAndRoundTrips() {
        let corpus = ["4020 0500 0100 0400 0a", "4110 0200 0102", "ff2f 0000", "0130 0100 ee"].map(hex)
        var fuzzer = Fuzzer(seed: 0xAC1, corpus: corpus, lengthField: .word(at: 2, after: 4))
        var decoded = 0
        for _ in 0..<iterations {
            let input = fuzzer.next()
            let result: Result<ACLPacket, DecodeError> = Result { () throws(DecodeError) in try ACLPacket(packet: input[...]) }
            let wellFormed = input.count >= 4 && le16(input, at: 2) == input.count - 4
            switch result {
            case .success(let packet):
                decoded += 1
                #expect(wellFormed, "\(Hex.bytes(input))")
                #expect(packet.handle <= 0x0FFF)
                // Encoding gives the input back, less the Broadcast flag (bits 14-15), which LE does not use.
                var out: [UInt8] = []
                packet.encode(into: &out)
                var expected = input
                expected[1] &= 0x3F
                #expect(out == expected, "\(Hex.bytes(input))")
            case .failure(let error):
                #expect(!wellFormed, "\(Hex.bytes(input))")
                #expect(error.kind == (input.count < 4 ? .truncated : .lengthMismatch))
            }
            let (buffer, range) = fuzzer.embedded(input)
            let embedded: Result<ACLPacket, DecodeError> = Result { () throws(DecodeError) in try ACLPacket(packet: buffer[range]) }
            #expect(sameOutcome(result, embedded), "\(Hex.bytes(input))")
        }
        #expect(decoded > iterations / 10)
    }

    @Test func signalingCommandDecoderIsTotalAndRoundTrips() {
        let corpus = ["12 01 0800 1800 2800 0000 f401", "01 07 0200 0000", "06 02 0400 4000 4100", "13 03 0200 0000",
                      "14 05 0a00 8000 4000 f700 1700 0a00"].map(hex)
        var fuzzer = Fuzzer(seed: 0x5169, corpus: corpus, lengthField: .word(at: 2, after: 4))
        var decoded = 0
        for _ in 0..<iterations {
            let input = fuzzer.next()
            let result: Result<SignalingCommand, DecodeError> = Result { () throws(DecodeError) in
                try SignalingCommand(frame: input[...])
            }
            let wellFormed = input.count >= 4 && le16(input, at: 2) == input.count - 4
            switch result {
            case .success(let command):
                decoded += 1
                #expect(wellFormed, "\(Hex.bytes(input))")
                var out: [UInt8] = []
                command.encode(into: &out)
                #expect(out == input)
            case .failure(let error):
                #expect(!wellFormed, "\(Hex.bytes(input))")
                #expect(error.kind == (input.count < 4 ? .truncated : .lengthMismatch))
            }
            let (buffer, range) = fuzzer.embedded(input)
            let embedded: Result<SignalingCommand, DecodeError> = Result { () throws(DecodeError) in
                try SignalingCommand(frame: buffer[range])
            }
            #expect(sameOutcome(result, embedded), "\(Hex.bytes(input))")
        }
        #expect(decoded > iterations / 10)
    }

    /// The reassembler fed random fragments: it may refuse them, with a ReassemblyError, but it
    /// never traps, never gathers past its bound, and a valid PDU after any garbage gets through.
    @Test(arguments: [1, 2, 3] as [UInt64])
    func reassemblerSurvivesRandomFragmentsAndRecovers(seed: UInt64) {
        var random = HCITestRandom(seed: 0x4EA5 &+ seed)
        let maxPDU = [16, 64, L2CAPReassembler.defaultMaxPDU][Int(seed % 3)]
        var reassembler = L2CAPReassembler(maxPDU: maxPDU)
        let boundaries: [ACLPacket.Boundary] = [.firstNonFlushable, .continuing, .firstFlushable, .complete]
        var errors = 0
        var deliveries = 0
        for round in 0..<iterations {
            let count = Int.random(in: 0...(Bool.random(using: &random) ? 8 : 120), using: &random)
            var data = (0..<count).map { _ in UInt8.random(in: 0...255, using: &random) }
            if data.count >= 2 && Bool.random(using: &random) {
                // A plausible length, so fragments are gathered and not just refused.
                let bound = Bool.random(using: &random) ? min(maxPDU + 8, 130) : maxPDU + 8
                data.setLE(UInt16.random(in: 0...UInt16(bound), using: &random), at: 0)
            }
            let packet = ACLPacket(handle: 0x0040, boundary: boundaries.randomElement(using: &random)!, data: data[...])
            do {
                try reassembler.receive(packet) { _, payload in
                    deliveries += 1
                    if packet.boundary == .continuing {
                        #expect(payload.count <= maxPDU, "a gathered PDU exceeds the bound")
                    }
                }
            } catch {
                errors += 1
            }

            if round % 50 == 49 {
                // Recovery: a complete start fragment is always delivered, whatever came before.
                let payload = (0..<Int.random(in: 0...10, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }
                var frame: [UInt8] = []
                appendL2CAPFrame(cid: 0x0004, payload: payload[...], to: &frame)
                var got: [(UInt16, [UInt8])] = []
                do {
                    try reassembler.receive(ACLPacket(handle: 0x0040, boundary: .firstFlushable, data: frame[...])) {
                        got.append(($0, Array($1)))
                    }
                } catch {
                    #expect(error == .startWhileIncomplete, "only an abandoned PDU may be reported here")
                }
                #expect(got.count == 1 && got.first?.0 == 0x0004 && got.first?.1 == payload)
                #expect(!reassembler.isIncomplete)
            }
        }
        #expect(errors > 0 && deliveries > 0, "the stream should exercise both paths")
    }

    /// Any valid PDU, cut into fragments anywhere after its length field, comes back whole.
    @Test func reassemblerRebuildsRandomlyFragmentedPDUs() {
        var random = HCITestRandom(seed: 0xF4A6)
        var reassembler = L2CAPReassembler()
        for _ in 0..<iterations / 2 {
            let cid = UInt16.random(in: 0...0xFFFF, using: &random)
            let payload = (0..<Int.random(in: 0...L2CAPReassembler.defaultMaxPDU, using: &random)).map { _ in
                UInt8.random(in: 0...255, using: &random)
            }
            var frame: [UInt8] = []
            appendL2CAPFrame(cid: cid, payload: payload[...], to: &frame)
            var cuts: [Int] = [Int.random(in: 2...min(frame.count, 251), using: &random)]
            while cuts.last! < frame.count {
                cuts.append(min(frame.count, cuts.last! + Int.random(in: 1...251, using: &random)))
            }
            var delivered: [(UInt16, [UInt8])] = []
            var start = 0
            for (index, end) in cuts.enumerated() {
                let packet = ACLPacket(handle: 1, boundary: index == 0 ? .firstFlushable : .continuing, data: frame[start..<end])
                do {
                    try reassembler.receive(packet) { delivered.append(($0, Array($1))) }
                } catch {
                    Issue.record("valid fragment refused: \(error)")
                }
                if index < cuts.count - 1 { #expect(delivered.isEmpty && reassembler.isIncomplete) }
                start = end
            }
            #expect(delivered.count == 1)
            #expect(delivered.first?.0 == cid && delivered.first?.1 == payload)
        }
    }

    /// Vol 3, Part C, 11: [length][type][length - 1 octets]; a zero length ends the significant part.
    @Test func adStructureParserIsTotalAndAccountsForEveryByte() {
        let corpus = ["020106 05030d180f18 03194003 020afc 03094852 05ffffff0102",
                      "0201060000000000", "1107 504f3e2d1b5c6e8f1a4d5e9a01003c7d", "00", ""].map(hex)
        var fuzzer = Fuzzer(seed: 0xAD57, corpus: corpus, lengthField: .none)
        var parsed = 0
        for _ in 0..<iterations {
            let input = fuzzer.next()
            let (buffer, range) = fuzzer.embedded(input)
            do {
                let structures = try AdvertisingPayload.parseADStructures(buffer[range])
                parsed += 1
                // Re-encoded, the structures are a prefix of the input; after them comes the end or a 0 length.
                var reencoded: [UInt8] = []
                for structure in structures {
                    #expect(structure.data.startIndex >= range.lowerBound && structure.data.endIndex <= range.upperBound,
                            "a structure's data must be a slice of the input")
                    reencoded.append(UInt8(structure.data.count + 1))
                    reencoded.append(structure.type)
                    reencoded += structure.data
                }
                #expect(Array(input.prefix(reencoded.count)) == reencoded, "\(Hex.bytes(input))")
                #expect(reencoded.count == input.count || input[reencoded.count] == 0, "\(Hex.bytes(input))")
            } catch {
                #expect(error.kind == .lengthMismatch, "\(Hex.bytes(input)): \(error)")
            }
            // The scan-mode decoder on top of it, with the same input as either payload.
            _ = try? AdvertisingContent(decodingAdvertisingData: buffer[range], scanResponseData: input[...])
        }
        #expect(parsed > iterations / 10)
    }

    @Test func connectionParametersDecoderIsTotal() {
        var fuzzer = Fuzzer(seed: 0xC0AA, corpus: [hex("1800 2800 0000 f401")], lengthField: .none)
        for _ in 0..<iterations {
            let input = fuzzer.next()
            do {
                let parameters = try ConnectionParameters(decoding: input[...])
                #expect(input.count == 8)
                #expect(parameters.encoded == input)
            } catch {
                #expect(input.count != 8)
                #expect(error.kind == (input.count < 8 ? .truncated : .trailingBytes))
            }
        }
    }
}

/// Both decoded to equal values, or both failed with the same kind of error.
private func sameOutcome<T: Equatable>(_ a: Result<T, DecodeError>, _ b: Result<T, DecodeError>) -> Bool {
    switch (a, b) {
    case let (.success(x), .success(y)): return x == y
    case let (.failure(x), .failure(y)): return x.kind == y.kind
    default: return false
    }
}
