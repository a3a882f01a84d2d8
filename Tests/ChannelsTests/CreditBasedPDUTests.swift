import Testing
import BlemuChannels
import BlemuCore
import BlemuL2CAP

/// The credit based signalling PDUs (Vol 3, Part A, 4.6, 4.7, 4.22-4.28): the bytes of each, and
/// their decoders against hostile input (truncated, too long, random): an error, never a trap.
@Suite struct CreditBasedPDUTests {
    func bytes<PDU: CreditBasedPDU>(_ pdu: PDU) -> [UInt8] {
        var out: [UInt8] = []
        pdu.encode(into: &out)
        return out
    }

    /// `cidsFrom`: where a list of CIDs starts, for the PDUs whose shorter forms, with fewer
    /// CIDs, are valid too.
    func roundTrips<PDU: CreditBasedPDU>(_ pdu: PDU, _ expected: [UInt8], cidsFrom: Int? = nil) throws {
        #expect(bytes(pdu) == expected)
        #expect(try PDU(data: expected[...]) == pdu)
        // Each shorter prefix is truncated, and a byte more is refused (LE frames hold one command).
        for length in 0..<expected.count {
            if let cidsFrom, length > cidsFrom || (length == cidsFrom && PDU.self == CreditBasedConnectionResponse.self),
               (length - cidsFrom) % 2 == 0 {
                #expect(throws: Never.self) { try PDU(data: expected[..<length]) }
                continue
            }
            #expect(throws: DecodeError.self) { try PDU(data: expected[..<length]) }
        }
        #expect(throws: DecodeError.self) { try PDU(data: (expected + [0x00])[...]) }
    }

    @Test func leConnectionRequestAndResponse() throws {
        try roundTrips(LECreditBasedConnectionRequest(spsm: 0x0080, sourceCID: 0x0040, mtu: 0x0800, mps: 0x03FC, initialCredits: 16),
                       [0x80, 0x00, 0x40, 0x00, 0x00, 0x08, 0xFC, 0x03, 0x10, 0x00])
        try roundTrips(LECreditBasedConnectionResponse(destinationCID: 0x0041, mtu: 23, mps: 23, initialCredits: 1, result: 0),
                       [0x41, 0x00, 0x17, 0x00, 0x17, 0x00, 0x01, 0x00, 0x00, 0x00])
        #expect(bytes(LECreditBasedConnectionResponse.refused(.insufficientEncryption)) == [0, 0, 0, 0, 0, 0, 0, 0, 0x08, 0x00])
        #expect(LECreditBasedConnectionRequest.code == 0x14 && LECreditBasedConnectionResponse.code == 0x15)
    }

    @Test func creditIndicationAndDisconnection() throws {
        try roundTrips(FlowControlCreditIndication(cid: 0x0040, credits: 0xFFFF), [0x40, 0x00, 0xFF, 0xFF])
        try roundTrips(DisconnectionRequest(destinationCID: 0x0041, sourceCID: 0x0042), [0x41, 0x00, 0x42, 0x00])
        try roundTrips(DisconnectionResponse(destinationCID: 0x0041, sourceCID: 0x0042), [0x41, 0x00, 0x42, 0x00])
        #expect(FlowControlCreditIndication.code == 0x16 && DisconnectionRequest.code == 0x06 && DisconnectionResponse.code == 0x07)
    }

    @Test func enhancedConnectionRequestAndResponse() throws {
        try roundTrips(CreditBasedConnectionRequest(spsm: 0x0027, mtu: 64, mps: 64, initialCredits: 5, sourceCIDs: [0x40, 0x41]),
                       [0x27, 0x00, 0x40, 0x00, 0x40, 0x00, 0x05, 0x00, 0x40, 0x00, 0x41, 0x00], cidsFrom: 8)
        try roundTrips(CreditBasedConnectionResponse(mtu: 100, mps: 64, initialCredits: 3, result: 0x0009, destinationCIDs: [0x45, 0]),
                       [0x64, 0x00, 0x40, 0x00, 0x03, 0x00, 0x09, 0x00, 0x45, 0x00, 0x00, 0x00], cidsFrom: 8)
        // 4.25: one to five source CIDs; an odd byte is no CID.
        let base: [UInt8] = [0x27, 0x00, 0x40, 0x00, 0x40, 0x00, 0x05, 0x00]
        #expect(throws: DecodeError.self) { try CreditBasedConnectionRequest(data: base[...]) }
        #expect(throws: DecodeError.self) { try CreditBasedConnectionRequest(data: (base + Array(repeating: 0x40, count: 12))[...]) }
        #expect(throws: DecodeError.self) { try CreditBasedConnectionRequest(data: (base + [0x40, 0x00, 0x41])[...]) }
        #expect(try CreditBasedConnectionRequest(data: (base + Array(repeating: 0x40, count: 10))[...]).sourceCIDs.count == 5)
        // A response refusing an unparsable request may list no CIDs; more than five is wrong.
        #expect(try CreditBasedConnectionResponse(data: [0, 0, 0, 0, 0, 0, 0x0C, 0][...]).destinationCIDs.isEmpty)
        #expect(throws: DecodeError.self) { try CreditBasedConnectionResponse(data: ([0, 0, 0, 0, 0, 0, 0, 0] + Array(repeating: 0, count: 12))[...]) }
        #expect(bytes(CreditBasedConnectionResponse.refused(.spsmNotSupported, channels: 9)).count == 8 + 10)
        #expect(CreditBasedConnectionRequest.code == 0x17 && CreditBasedConnectionResponse.code == 0x18)
    }

    @Test func reconfigureRequestAndResponse() throws {
        try roundTrips(CreditBasedReconfigureRequest(mtu: 512, mps: 100, destinationCIDs: [0x40, 0x41, 0x42]),
                       [0x00, 0x02, 0x64, 0x00, 0x40, 0x00, 0x41, 0x00, 0x42, 0x00], cidsFrom: 4)
        try roundTrips(CreditBasedReconfigureResponse(.mpsReductionNotAllowed), [0x02, 0x00])
        #expect(throws: DecodeError.self) { try CreditBasedReconfigureRequest(data: [0x00, 0x02, 0x64, 0x00][...]) }
        #expect(CreditBasedReconfigureRequest.code == 0x19 && CreditBasedReconfigureResponse.code == 0x1A)
    }

    /// Random and mutated bytes into every decoder: errors only, and what decodes encodes back
    /// to the same bytes.
    @Test func hostileBytesNeverTrap() {
        var random = SeededRandom(seed: 0xC0C)
        let decoders: [(ArraySlice<UInt8>) throws -> [UInt8]] = [
            { try reencode(LECreditBasedConnectionRequest(data: $0)) },
            { try reencode(LECreditBasedConnectionResponse(data: $0)) },
            { try reencode(FlowControlCreditIndication(data: $0)) },
            { try reencode(DisconnectionRequest(data: $0)) },
            { try reencode(DisconnectionResponse(data: $0)) },
            { try reencode(CreditBasedConnectionRequest(data: $0)) },
            { try reencode(CreditBasedConnectionResponse(data: $0)) },
            { try reencode(CreditBasedReconfigureRequest(data: $0)) },
            { try reencode(CreditBasedReconfigureResponse(data: $0)) },
        ]
        var decoded = 0
        for _ in 0..<20_000 {
            let bytes = (0..<Int.random(in: 0...24, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }
            for decode in decoders {
                if let again = try? decode(bytes[...]) {
                    decoded += 1
                    #expect(again == bytes)
                }
            }
        }
        #expect(decoded > 1000)
    }
}

private func reencode<PDU: CreditBasedPDU>(_ pdu: PDU) -> [UInt8] {
    var out: [UInt8] = []
    pdu.encode(into: &out)
    return out
}
