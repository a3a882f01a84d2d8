import Testing
import BlemuCore
import BlemuHCI
@testable import BlemuL2CAP

/// L2CAP reassembly (Vol 3, Part A, 3 and 7.2; Vol 4, Part E, 5.4.2), LE signalling
/// (Vol 3, Part A, 4) and the Security Manager stub (Vol 3, Part H, 3).

private func hex(_ text: String) -> [UInt8] {
    guard let bytes = Hex.parse(text) else {
        Issue.record("bad hex literal in test: \(text)")
        return []
    }
    return bytes
}

private func acl(_ boundary: ACLPacket.Boundary, _ text: String, handle: UInt16 = 0x0040) -> ACLPacket {
    ACLPacket(handle: handle, boundary: boundary, data: hex(text)[...])
}

/// Feeds fragments, collecting what is delivered and what is thrown, fragment by fragment.
private struct ReassemblyRun {
    var reassembler: L2CAPReassembler
    var delivered: [(cid: UInt16, payload: [UInt8])] = []
    var errors: [ReassemblyError?] = []

    init(maxPDU: Int = L2CAPReassembler.defaultMaxPDU) {
        reassembler = L2CAPReassembler(maxPDU: maxPDU)
    }

    /// The error this fragment raised, or nil.
    @discardableResult
    mutating func feed(_ packet: ACLPacket) -> ReassemblyError? {
        var got: [(UInt16, [UInt8])] = []
        let error: ReassemblyError?
        do {
            try reassembler.receive(packet) { cid, payload in got.append((cid, Array(payload))) }
            error = nil
        } catch let thrown {
            error = thrown
        }
        delivered += got.map { (cid: $0.0, payload: $0.1) }
        errors.append(error)
        return error
    }
}

@Suite struct L2CAPReassemblerTests {
    /// A controller-to-host start fragment (PB 0b10) that holds the whole basic frame.
    @Test func completeStartFragmentIsDeliveredAsASliceOfTheACLData() throws {
        let bytes = hex("0500 0400 0a0b0c0d0e")
        let packet = try ACLPacket(packet: (hex("4020 0900") + bytes)[...])
        var reassembler = L2CAPReassembler()
        var deliveries = 0
        try reassembler.receive(packet) { cid, payload in
            deliveries += 1
            #expect(cid == L2CAPChannel.att)
            #expect(Array(payload) == hex("0a0b0c0d0e"))
            // No copy: the payload is the ACL data's own storage, four bytes in.
            #expect(payload.startIndex == packet.data.startIndex + 4)
            let payloadBase = payload.withUnsafeBufferPointer { $0.baseAddress }
            let dataBase = packet.data.withUnsafeBufferPointer { $0.baseAddress }
            #expect(payloadBase != nil && payloadBase == dataBase.map { $0 + 4 })
        }
        #expect(deliveries == 1)
        #expect(!reassembler.isIncomplete)
    }

    /// Vol 4, Part E, 5.4.2: on LE-U the controller marks a start fragment PB 0b10.
    @Test func firstFlushableStartsAPDU() {
        var run = ReassemblyRun()
        #expect(run.feed(acl(.firstFlushable, "0100 0600 05")) == nil)
        #expect(run.delivered.count == 1)
        #expect(run.delivered.first?.cid == L2CAPChannel.securityManager)
    }

    @Test func emptyPayloadIsDelivered() {
        var run = ReassemblyRun()
        #expect(run.feed(acl(.firstFlushable, "0000 0500")) == nil)
        #expect(run.delivered.count == 1)
        #expect(run.delivered.first?.payload == [])
    }

    @Test func pduFragmentedOverThreeContinuingFragments() {
        var run = ReassemblyRun()
        // 11-byte ATT payload: 2 in the start fragment, then 4 + 4 + 1.
        #expect(run.feed(acl(.firstFlushable, "0b00 0400 1b2a")) == nil)
        #expect(run.reassembler.isIncomplete)
        #expect(run.feed(acl(.continuing, "00010203")) == nil)
        #expect(run.feed(acl(.continuing, "04050607")) == nil)
        #expect(run.delivered.isEmpty, "nothing is delivered before the last fragment")
        #expect(run.reassembler.isIncomplete)
        #expect(run.feed(acl(.continuing, "08")) == nil)
        #expect(run.delivered.count == 1)
        #expect(run.delivered.first?.cid == L2CAPChannel.att)
        #expect(run.delivered.first?.payload == hex("1b2a 0001020304050607 08"))
        #expect(!run.reassembler.isIncomplete)
    }

    @Test func reassemblerIsReusableAfterADelivery() {
        var run = ReassemblyRun()
        run.feed(acl(.firstFlushable, "0300 0400 01"))
        run.feed(acl(.continuing, "0203"))
        run.feed(acl(.firstFlushable, "0200 0500 aa"))
        run.feed(acl(.continuing, "bb"))
        run.feed(acl(.firstFlushable, "0100 0600 cc"))
        #expect(run.errors.allSatisfy { $0 == nil })
        #expect(run.delivered.map(\.cid) == [4, 5, 6])
        #expect(run.delivered.map(\.payload) == [hex("010203"), hex("aabb"), hex("cc")])
    }

    /// The basic header itself may be cut: length in the start fragment, CID in the next.
    @Test func headerSplitAcrossFragments() {
        var run = ReassemblyRun()
        #expect(run.feed(acl(.firstFlushable, "0300")) == nil)
        #expect(run.feed(acl(.continuing, "04")) == nil)
        #expect(run.feed(acl(.continuing, "00 0102")) == nil)
        #expect(run.delivered.isEmpty)
        #expect(run.feed(acl(.continuing, "03")) == nil)
        #expect(run.delivered.count == 1)
        #expect(run.delivered.first?.cid == L2CAPChannel.att)
        #expect(run.delivered.first?.payload == hex("010203"))
    }

    @Test func headerSplitAfterThreeBytes() {
        var run = ReassemblyRun()
        #expect(run.feed(acl(.firstFlushable, "020005")) == nil)
        #expect(run.feed(acl(.continuing, "00 aabb")) == nil)
        #expect(run.delivered.first?.cid == L2CAPChannel.leSignaling)
        #expect(run.delivered.first?.payload == hex("aabb"))
    }

    @Test func emptyStartFragmentIsRejected() {
        var run = ReassemblyRun()
        #expect(run.feed(acl(.firstFlushable, "")) == .truncatedHeader)
        #expect(!run.reassembler.isIncomplete)
    }

    /// Nothing in Vol 4, Part E, 5.4.2 or Vol 3, Part A, 7.2 requires a start fragment to hold
    /// the whole Length field: a controller may pass on a 1-octet start LL PDU, and hosts gather
    /// it (Zephyr: "Still not enough data received to retrieve the L2CAP header length field").
    @Test func startFragmentOfOneOctetIsGathered() {
        var run = ReassemblyRun()
        #expect(run.feed(acl(.firstFlushable, "03")) == nil)
        #expect(run.feed(acl(.continuing, "00 0400 0102")) == nil)
        #expect(run.feed(acl(.continuing, "03")) == nil)
        #expect(run.delivered.first?.cid == L2CAPChannel.att)
        #expect(run.delivered.first?.payload == hex("010203"))
    }

    @Test func continuationWithoutStartIsAnError() {
        var run = ReassemblyRun()
        #expect(run.feed(acl(.continuing, "0102")) == .continuationWithoutStart)
        #expect(run.delivered.isEmpty)
        // And after a completed PDU, a stray continuation is just as orphaned.
        run.feed(acl(.firstFlushable, "0100 0400 01"))
        #expect(run.feed(acl(.continuing, "02")) == .continuationWithoutStart)
        #expect(run.delivered.count == 1)
    }

    @Test func newStartWhileIncompleteDropsThePreviousAndKeepsTheNewOne() {
        var run = ReassemblyRun()
        run.feed(acl(.firstFlushable, "0a00 0400 0102"))            // 10 bytes expected, 2 here
        #expect(run.feed(acl(.firstFlushable, "0400 0500 1112")) == .startWhileIncomplete)
        #expect(run.reassembler.isIncomplete, "the new PDU is being gathered")
        #expect(run.feed(acl(.continuing, "1314")) == nil)
        #expect(run.delivered.count == 1)
        #expect(run.delivered.first?.cid == L2CAPChannel.leSignaling)
        #expect(run.delivered.first?.payload == hex("11121314"))
    }

    @Test func completeStartWhileIncompleteIsDeliveredAndReported() {
        var run = ReassemblyRun()
        run.feed(acl(.firstFlushable, "0a00 0400 0102"))
        #expect(run.feed(acl(.firstFlushable, "0100 0600 01")) == .startWhileIncomplete)
        #expect(run.delivered.map(\.payload) == [[0x01]])
        #expect(!run.reassembler.isIncomplete)
        #expect(run.feed(acl(.continuing, "0304")) == .continuationWithoutStart, "the dropped PDU stays dropped")
    }

    @Test func splitHeaderStartWhileIncompleteIsReported() {
        var run = ReassemblyRun()
        run.feed(acl(.firstFlushable, "0a00 0400 0102"))
        #expect(run.feed(acl(.firstFlushable, "0100")) == .startWhileIncomplete)
        #expect(run.feed(acl(.continuing, "0400 ff")) == nil)
        #expect(run.delivered.map(\.payload) == [[0xFF]])
    }

    @Test func pduLongerThanTheBoundIsRefused() {
        var run = ReassemblyRun(maxPDU: 16)
        #expect(run.feed(acl(.firstFlushable, "1100 0400 0102")) == .tooLong(17))
        #expect(!run.reassembler.isIncomplete)
        #expect(run.feed(acl(.continuing, "03")) == .continuationWithoutStart, "nothing of it is gathered")
        // Exactly the bound is fine.
        #expect(run.feed(acl(.firstFlushable, "1000 0400 " + String(repeating: "00", count: 8))) == nil)
        #expect(run.feed(acl(.continuing, String(repeating: "01", count: 8))) == nil)
        #expect(run.delivered.first?.payload.count == 16)
    }

    @Test func pduLengthFromASplitHeaderIsBoundedToo() {
        var run = ReassemblyRun(maxPDU: 16)
        #expect(run.feed(acl(.firstFlushable, "ffff")) == .tooLong(0xFFFF))
        #expect(!run.reassembler.isIncomplete)
    }

    @Test func continuingFragmentsCarryingTooMuchAreAnOverrun() {
        var run = ReassemblyRun()
        run.feed(acl(.firstFlushable, "0400 0400 0102"))
        #expect(run.feed(acl(.continuing, "0304 0506 07")) == .overrun(expected: 4, got: 7))
        #expect(run.delivered.isEmpty)
        #expect(!run.reassembler.isIncomplete)
        #expect(run.feed(acl(.continuing, "08")) == .continuationWithoutStart)
    }

    @Test func startFragmentCarryingMoreThanItsLengthIsAnOverrun() {
        var run = ReassemblyRun()
        #expect(run.feed(acl(.firstFlushable, "0200 0400 0102 0304 05")) == .overrun(expected: 2, got: 5))
        #expect(run.delivered.isEmpty)
        #expect(!run.reassembler.isIncomplete)
    }

    @Test func resetForgetsAnIncompletePDU() {
        var run = ReassemblyRun()
        run.feed(acl(.firstFlushable, "0400 0400 0102"))
        run.reassembler.reset()
        #expect(!run.reassembler.isIncomplete)
        #expect(run.feed(acl(.continuing, "0304")) == .continuationWithoutStart)
    }

    @Test func errorsDescribeThemselves() {
        #expect(ReassemblyError.tooLong(2000).description.contains("2000"))
        #expect(ReassemblyError.overrun(expected: 4, got: 7).description.contains("4"))
        #expect(!ReassemblyError.continuationWithoutStart.description.isEmpty)
    }

    /// Vol 3, Part A, 3.1: Length (2), Channel ID (2), payload.
    @Test func basicFrameHeader() {
        var out: [UInt8] = [0xEE]
        appendL2CAPFrame(cid: L2CAPChannel.att, payload: hex("0a0300")[...], to: &out)
        #expect(out == hex("ee 0300 0400 0a0300"))
    }

    /// Vol 3, Part A, 2.1: the LE-U fixed channels.
    @Test func fixedChannelIdentifiers() {
        #expect(L2CAPChannel.att == 0x0004)
        #expect(L2CAPChannel.leSignaling == 0x0005)
        #expect(L2CAPChannel.securityManager == 0x0006)
    }
}

@Suite struct SignalingCommandTests {
    /// Vol 3, Part A, 4: Code, Identifier, Length (2), data.
    @Test func decodesOneCommand() throws {
        let frame = hex("12 01 0800 1800 2800 0000 f401")
        let command = try SignalingCommand(frame: frame[...])
        #expect(command.code == SignalingCode.connectionParameterUpdateRequest)
        #expect(command.identifier == 0x01)
        #expect(Array(command.data) == hex("1800 2800 0000 f401"))
    }

    @Test func decodeThenEncodeRoundTrips() throws {
        let frame = hex("13 07 0200 0100")
        var out: [UInt8] = []
        try SignalingCommand(frame: frame[...]).encode(into: &out)
        #expect(out == frame)
    }

    /// LE signalling frames carry exactly one command (Vol 3, Part A, 4).
    @Test func lengthMustMatchTheFrame() {
        let short = #expect(throws: DecodeError.self) { try SignalingCommand(frame: hex("12 01 0800 1800 2800 0000")[...]) }
        #expect(short?.kind == .lengthMismatch)
        let twoCommands = #expect(throws: DecodeError.self) {
            try SignalingCommand(frame: hex("13 07 0200 0000 13 08 0200 0000")[...])
        }
        #expect(twoCommands?.kind == .lengthMismatch)
        #expect(throws: DecodeError(.truncated)) { try SignalingCommand(frame: hex("12 01 08")[...]) }
        #expect(throws: DecodeError(.truncated)) { try SignalingCommand(frame: [][...]) }
    }

    @Test func decodesFromASliceThatDoesNotStartAtZero() throws {
        let pdu = hex("0800 0500 06 02 0400 4000 4100")   // basic header, then Disconnection Request
        let command = try SignalingCommand(frame: pdu[4...])
        #expect(command.code == SignalingCode.disconnectionRequest)
        #expect(command.identifier == 2)
        #expect(Array(command.data) == hex("4000 4100"))
    }

    /// Vol 3, Part A, 4.1: Command Reject, reason 0x0000 Command not understood.
    @Test func commandRejectBytes() {
        var out: [UInt8] = []
        SignalingCommand.commandReject(identifier: 0x07).encode(into: &out)
        #expect(out == hex("01 07 0200 0000"))
        out.removeAll()
        // Reason 0x0002 Invalid CID in request, with the local and remote CIDs as data.
        SignalingCommand.commandReject(identifier: 0x08, reason: 0x0002, data: hex("4000 4100")).encode(into: &out)
        #expect(out == hex("01 08 0600 0200 4000 4100"))
    }

    /// Vol 3, Part A, 4.20: Interval Min, Interval Max, Latency, Timeout (2 octets each), code 0x12.
    @Test func connectionParameterUpdateRequestBytes() {
        let command = SignalingCommand.connectionParameterUpdateRequest(identifier: 0x03, intervalMin: 24, intervalMax: 40,
                                                                        latency: 2, timeout: 400)
        var payload: [UInt8] = []
        command.encode(into: &payload)
        #expect(payload == hex("12 03 0800 1800 2800 0200 9001"))
        var frame: [UInt8] = []
        appendL2CAPFrame(cid: L2CAPChannel.leSignaling, payload: payload[...], to: &frame)
        #expect(frame == hex("0c00 0500 12 03 0800 1800 2800 0200 9001"))
    }

    /// Vol 3, Part A, 4.23: DCID, MTU, MPS, Initial Credits, Result (0x0002 SPSM not supported).
    @Test func leCreditBasedConnectionRefusalBytes() {
        var out: [UInt8] = []
        SignalingCommand.leCreditBasedConnectionRefused(identifier: 0x09).encode(into: &out)
        #expect(out == hex("15 09 0a00 0000 0000 0000 0000 0200"))
        out.removeAll()
        SignalingCommand.leCreditBasedConnectionRefused(identifier: 0x0A, result: 0x0004).encode(into: &out)
        #expect(out == hex("15 0a 0a00 0000 0000 0000 0000 0400"))
    }

    /// Vol 3, Part A, 4.26: MTU, MPS, Initial Credits, Result, then one Destination CID per
    /// requested channel (at most 5).
    @Test func creditBasedConnectionRefusalBytes() {
        var out: [UInt8] = []
        SignalingCommand.creditBasedConnectionRefused(identifier: 0x04, channels: 2).encode(into: &out)
        #expect(out == hex("18 04 0c00 0000 0000 0000 0200 0000 0000"))
        out.removeAll()
        SignalingCommand.creditBasedConnectionRefused(identifier: 0x05, channels: 9).encode(into: &out)
        #expect(out.count == 4 + 8 + 2 * 5, "never more than 5 channels")
        out.removeAll()
        SignalingCommand.creditBasedConnectionRefused(identifier: 0x06, channels: -1).encode(into: &out)
        #expect(out == hex("18 06 0800 0000 0000 0000 0200"))
    }

    @Test func responsesAreToldFromRequests() {
        for code in [SignalingCode.commandReject, SignalingCode.disconnectionResponse,
                     SignalingCode.connectionParameterUpdateResponse, SignalingCode.leCreditBasedConnectionResponse,
                     SignalingCode.flowControlCredit, SignalingCode.creditBasedConnectionResponse,
                     SignalingCode.creditBasedReconfigureResponse] {
            #expect(SignalingCode.isResponse(code), "\(Hex.byte(code))")
        }
        for code in [SignalingCode.disconnectionRequest, SignalingCode.connectionParameterUpdateRequest,
                     SignalingCode.leCreditBasedConnectionRequest, SignalingCode.creditBasedConnectionRequest,
                     SignalingCode.creditBasedReconfigureRequest, 0x0A, 0x40] {
            #expect(!SignalingCode.isResponse(code), "\(Hex.byte(code))")
        }
    }
}

@Suite struct SecurityManagerTests {
    /// Vol 3, Part H, 3.5.1 Pairing Request -> 3.5.5 Pairing Failed, 0x05 Pairing Not Supported.
    @Test func pairingRequestIsAnsweredWithPairingNotSupported() {
        let pairingRequest = hex("01 03 00 01 10 07 07")
        #expect(SecurityManager.answer(to: pairingRequest[...]) == [0x05, 0x05])
        // From a slice of a bigger buffer, too (after the L2CAP header).
        let frame = hex("0700 0600") + pairingRequest
        #expect(SecurityManager.answer(to: frame[4...]) == [0x05, 0x05])
    }

    @Test func otherPairingCommandsAreRefusedTheSameWay() {
        for code: UInt8 in [0x03, 0x04, 0x0C] {   // Confirm, Random, Public Key
            #expect(SecurityManager.answer(to: [code, 0x00][...]) == [0x05, 0x05], "\(Hex.byte(code))")
        }
    }

    /// Answering a Pairing Failed would ping-pong failures between the two devices.
    @Test func pairingFailedGetsNoAnswer() {
        #expect(SecurityManager.answer(to: [0x05, 0x08][...]) == nil)
        #expect(SecurityManager.answer(to: [0x05][...]) == nil)
    }

    @Test func emptyPDUGetsNoAnswer() {
        #expect(SecurityManager.answer(to: [][...]) == nil)
    }

    /// Vol 3, Part H, 3.3: "If a packet is received with a reserved Code it shall be ignored."
    /// Codes 0x01-0x0E are defined in Core 5.4 (Table 3.3); 0x00 and 0x0F-0xFF are reserved.
    @Test(arguments: [0x00, 0x0F, 0x20, 0xFF] as [UInt8])
    func reservedCodeIsIgnored(code: UInt8) {
        #expect(SecurityManager.answer(to: [code, 0x01, 0x02][...]) == nil)
    }
}
