import BlemuHCI
import BlemuTransport
import Testing

struct FramedPacket: Equatable, CustomStringConvertible {
    let type: H4PacketType
    let body: [UInt8]
    var description: String { "\(type)(\(body.count))" }
}

/// Every packet the framer gives for `chunks`, fed one after another.
func frame(_ chunks: [[UInt8]], framer: inout H4Framer) -> [FramedPacket] {
    var out: [FramedPacket] = []
    for chunk in chunks {
        framer.feed(chunk) { type, body in out.append(FramedPacket(type: type, body: Array(body))) }
    }
    return out
}

func frame(_ chunks: [[UInt8]]) -> [FramedPacket] {
    var framer = H4Framer()
    return frame(chunks, framer: &framer)
}

/// The expected packet for H4 bytes built by `h4Packet`.
func expected(_ bytes: [UInt8]) -> FramedPacket {
    FramedPacket(type: H4PacketType(rawValue: bytes[0])!, body: Array(bytes.dropFirst()))
}

@Suite struct H4FramerTests {
    // One of each kind, with lengths that exercise each header's length field.
    static let samples: [[UInt8]] = [
        h4Packet(.event, payload: [0x01, 0x03, 0x0C, 0x00]),          // Command Complete, 2-byte header
        h4Packet(.acl, payload: Array(0..<27), handleOrOpcode: 0x2001),  // u16 length
        h4Packet(.command, payload: [0x01], handleOrOpcode: 0x0C03),
        h4Packet(.sco, payload: [9, 8, 7]),
        h4Packet(.iso, payload: [1, 2, 3, 4, 5], handleOrOpcode: 0x0060),
        h4Packet(.event, payload: []),                                 // zero-length parameters
        h4Packet(.acl, payload: Array(repeating: 0xAB, count: 300)),   // length > 255
    ]

    @Test func severalPacketsInOneChunk() {
        let stream = Self.samples.flatMap { $0 }
        var framer = H4Framer()
        #expect(frame([stream], framer: &framer) == Self.samples.map(expected))
        #expect(framer.discardedBytes == 0)
        #expect(framer.bufferedCount == 0)
        #expect(framer.packetCount == Self.samples.count)
    }

    @Test func splitAtEveryByteBoundary() {
        let stream = Self.samples.flatMap { $0 }
        let want = Self.samples.map(expected)
        for split in 0...stream.count {
            let got = frame([Array(stream[..<split]), Array(stream[split...])])
            #expect(got == want, "split at \(split)")
        }
    }

    @Test func oneByteAtATime() {
        let stream = Self.samples.flatMap { $0 }
        #expect(frame(stream.map { [$0] }) == Self.samples.map(expected))
    }

    @Test func incompletePacketWaitsForTheRest() {
        var framer = H4Framer()
        let packet = h4Packet(.acl, payload: [1, 2, 3, 4])
        #expect(frame([Array(packet.dropLast())], framer: &framer).isEmpty)
        #expect(framer.bufferedCount == packet.count - 1)
        #expect(frame([[packet.last!]], framer: &framer) == [expected(packet)])
    }

    @Test func garbagePrefixIsSkippedAndCounted() {
        var framer = H4Framer()
        let garbage: [UInt8] = [0x00, 0xFF, 0x42, 0x06, 0x80]
        let packet = h4Packet(.event, payload: [0x05, 0x00, 0x40, 0x00, 0x13])
        #expect(frame([garbage + packet], framer: &framer) == [expected(packet)])
        #expect(framer.discardedBytes == garbage.count)
    }

    @Test func isoLengthUsesFourteenBits() {
        // Vol 4, Part E, 5.4.5: the top two bits of the length field are RFU.
        var bytes = h4Packet(.iso, payload: [1, 2, 3])
        bytes[4] |= 0xC0
        let got = frame([bytes])
        #expect(got.count == 1)
        #expect(got.first?.body.count == 4 + 3)
    }

    @Test func largestACLPacketFits() {
        let packet = h4Packet(.acl, payload: Array(repeating: 0x5A, count: 65535))
        #expect(packet.count == H4Framer.maxPacketLength)
        var framer = H4Framer(capacity: 0)  // raised to the minimum that still fits the largest packet
        #expect(framer.capacity > H4Framer.maxPacketLength)
        let got = frame([packet + packet], framer: &framer)
        #expect(got == [expected(packet), expected(packet)])
        #expect(framer.bufferedCount == 0)
    }

    @Test func appendTakesOnlyWhatFits() {
        var framer = H4Framer(capacity: 0)
        let big = Array(repeating: UInt8(0x02), count: framer.capacity + 100)
        let taken = framer.append(contentsOf: big)
        #expect(taken == framer.capacity)
        #expect(framer.freeCapacity == 0)
    }

    @Test func resetDropsAPartialPacket() {
        var framer = H4Framer()
        _ = frame([[0x04, 0x0E, 0x05, 0x01]], framer: &framer)
        framer.reset()
        #expect(framer.discardedBytes == 4)
        let packet = h4Packet(.event, payload: [1])
        #expect(frame([packet], framer: &framer) == [expected(packet)])
    }

    @Test func datagramMustBeExactlyOnePacket() {
        let packet = h4Packet(.event, payload: [1, 2])
        #expect(H4Framer.parseDatagram(packet[...]).map { FramedPacket(type: $0.type, body: Array($0.body)) }
                == expected(packet))
        #expect(H4Framer.parseDatagram(packet.dropLast()) == nil, "truncated")
        #expect(H4Framer.parseDatagram((packet + [0])[...]) == nil, "trailing byte")
        #expect(H4Framer.parseDatagram([0x09, 0x00][...]) == nil, "unknown indicator")
        #expect(H4Framer.parseDatagram([][...]) == nil, "empty")
        #expect(H4Framer.parseDatagram([0x02, 0x01][...]) == nil, "short header")
    }

    /// Random valid streams, mutated or not, in random chunks: the framer never traps, every
    /// packet's length agrees with its header, every byte is accounted for (framed, discarded
    /// or still buffered), and an unmutated stream comes out exactly as it went in.
    @Test func propertyRandomAndMutatedStreams() {
        var random = SplitMix64(seed: 0xB1E_4D00)
        let types: [H4PacketType] = [.command, .acl, .sco, .event, .iso]
        for iteration in 0..<3000 {
            var packets: [[UInt8]] = []
            for _ in 0..<Int.random(in: 0...8, using: &random) {
                let type = types.randomElement(using: &random)!
                let limit = (type == .acl || type == .iso) && Int.random(in: 0..<20, using: &random) == 0 ? 3000 : 255
                let payload = (0..<Int.random(in: 0...limit, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }
                packets.append(h4Packet(type, payload: payload, handleOrOpcode: UInt16.random(in: 0...0x0FFF, using: &random)))
            }
            var stream = packets.flatMap { $0 }
            let mode = Int.random(in: 0..<4, using: &random)
            switch mode {
            case 1:  // flip random bytes
                for _ in 0..<Int.random(in: 1...6, using: &random) where !stream.isEmpty {
                    stream[Int.random(in: 0..<stream.count, using: &random)] = UInt8.random(in: 0...255, using: &random)
                }
            case 2:  // insert garbage
                for _ in 0..<Int.random(in: 1...6, using: &random) {
                    stream.insert(UInt8.random(in: 0...255, using: &random), at: Int.random(in: 0...stream.count, using: &random))
                }
            case 3:  // pure noise
                stream = (0..<Int.random(in: 0...2000, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }
            default:
                break
            }
            var chunks: [[UInt8]] = []
            var offset = 0
            while offset < stream.count {
                let size = min(stream.count - offset, Int.random(in: 1...700, using: &random))
                chunks.append(Array(stream[offset..<offset + size]))
                offset += size
            }
            var framer = H4Framer()
            var framedBytes = 0
            var got: [FramedPacket] = []
            var consistent = true
            for chunk in chunks {
                framer.feed(chunk) { type, body in
                    if type.payloadLength(header: body).map({ $0 + type.headerLength }) != body.count { consistent = false }
                    framedBytes += 1 + body.count
                    got.append(FramedPacket(type: type, body: Array(body)))
                }
                if framer.bufferedCount > framer.capacity { consistent = false }
            }
            #expect(consistent, "iteration \(iteration)")
            #expect(framedBytes + framer.discardedBytes + framer.bufferedCount == stream.count, "iteration \(iteration)")
            if mode == 0 {
                #expect(got == packets.map(expected), "iteration \(iteration)")
                #expect(framer.discardedBytes == 0 && framer.bufferedCount == 0, "iteration \(iteration)")
            }
        }
    }
}
