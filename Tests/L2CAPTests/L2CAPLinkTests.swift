import Testing
import BlemuCore
import BlemuHCI
import BlemuL2CAP
import BlemuTestSupport
import Logging

/// One `L2CAPLink` alone, over a recording stand-in for HCI: reassembly and its timer, the fixed
/// channels registered by CID, framing, and LE signalling in both roles (Vol 3, Part A, 3 and 4).
@Suite struct L2CAPLinkTests {
    final class RecordingLower: L2CAPLower {
        var frames: [(pdu: [UInt8], priority: TransmitPriority)] = []
        var commands: [HCICommand] = []
        func sendL2CAP(handle: UInt16, pdu: ArraySlice<UInt8>, priority: TransmitPriority) -> Bool {
            frames.append((Array(pdu), priority))
            return true
        }
        func send(_ command: HCICommand, completion: ((CommandResult) -> Void)?) -> Bool {
            commands.append(command)
            return true
        }
        /// The signalling commands sent, decoded.
        var signaling: [SignalingCommand] {
            frames.compactMap { frame in
                guard frame.pdu.count >= 4, frame.pdu[2] == 0x05 else { return nil }
                return try? SignalingCommand(frame: frame.pdu[4...])
            }
        }
    }

    let lower = RecordingLower()
    let scheduler = ManualScheduler()
    let link: L2CAPLink
    /// What arrived on the ATT and SMP channels.
    final class Received { var att: [[UInt8]] = []; var smp: [[UInt8]] = [] }
    let received = Received()

    init() { self.init(role: .peripheral) }

    init(role: LinkRole, logger: Logger = Logger(label: "l2cap-test", factory: { _ in SwiftLogNoOpLogHandler() })) {
        let context = L2CAPLinkContext(hci: lower, scheduler: scheduler, logger: logger)
        link = L2CAPLink(handle: 0x0040, role: role, context: context)
        let received = self.received
        link.register(cid: L2CAPChannel.att) { received.att.append(Array($0)) }
        link.register(cid: L2CAPChannel.securityManager) { received.smp.append(Array($0)) }
    }

    func frame(cid: UInt16, _ payload: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        appendL2CAPFrame(cid: cid, payload: payload[...], to: &out)
        return out
    }

    func receive(_ bytes: [UInt8], boundary: ACLPacket.Boundary = .firstFlushable) {
        link.receive(ACLPacket(handle: 0x0040, boundary: boundary, data: bytes[...]))
    }

    @Test func channelsGetTheirPDUsByCID() {
        receive(frame(cid: L2CAPChannel.att, [0x0A, 0x03, 0x00]))
        receive(frame(cid: L2CAPChannel.securityManager, [0x01, 0x03]))
        // A channel nobody registered: dropped, and nothing is answered.
        receive(frame(cid: 0x0040, [0x01]))
        #expect(received.att == [[0x0A, 0x03, 0x00]])
        #expect(received.smp == [[0x01, 0x03]])
        #expect(lower.frames.isEmpty)
    }

    @Test func fragmentsAreGatheredAndTheTimerStopsWithTheLast() {
        let whole = frame(cid: L2CAPChannel.att, [0x12, 0x03, 0x00, 1, 2, 3, 4])
        receive(Array(whole[..<5]))
        #expect(link.isReassembling && scheduler.pendingCount == 1)
        receive(Array(whole[5...]), boundary: .continuing)
        #expect(received.att == [[0x12, 0x03, 0x00, 1, 2, 3, 4]])
        #expect(!link.isReassembling && scheduler.pendingCount == 0)
    }

    /// A peer that stops mid-PDU: after 10 s the half is dropped, so its late last fragment
    /// completes nothing.
    @Test func anIncompletePDUIsDroppedAfterTheReassemblyTimeout() {
        let whole = frame(cid: L2CAPChannel.att, [0x12, 0x03, 0x00, 1, 2, 3, 4])
        receive(Array(whole[..<5]))
        scheduler.advance(by: L2CAPLinkContext.reassemblyTimeout)
        #expect(!link.isReassembling)
        receive(Array(whole[5...]), boundary: .continuing)
        #expect(received.att.isEmpty)
    }

    /// A peer sets the pace of PDUs it leaves incomplete: one link drops at most one each 10 s,
    /// but the links share their context's budget (Docs/REFERENCE.md, Budgets), so 100 links
    /// that each stop mid-PDU make ten lines a minute, the rest counted on the next line.
    @Test func incompletePDUsOfManyLinksAreLoggedWithinTheBudget() {
        let sink = CapturedLog()
        let test = L2CAPLinkTests(role: .peripheral, logger: sink.logger)
        let context = test.link.context
        let links = (0..<100).map { L2CAPLink(handle: 0x0100 + UInt16($0), role: .peripheral, context: context) }
        let half = Array(test.frame(cid: L2CAPChannel.att, [0x12, 0x03, 0x00, 1, 2, 3, 4])[..<5])
        for link in links { link.receive(ACLPacket(handle: link.handle, boundary: .firstFlushable, data: half[...])) }
        test.scheduler.advance(by: L2CAPLinkContext.reassemblyTimeout)
        #expect(links.allSatisfy { !$0.isReassembling }, "every half is dropped")
        #expect(sink.messages.count == 10)
        #expect(sink.messages.allSatisfy { $0.contains("without its last fragment") })
        #expect(context.peerLog.leftOutTotal == 90)
        test.scheduler.advance(by: .seconds(61))
        test.receive(half)
        test.scheduler.advance(by: L2CAPLinkContext.reassemblyTimeout)
        #expect(sink.messages.count == 11)
        #expect(sink.messages.last?.hasSuffix("without its last fragment (90 similar lines left out)") == true)
    }

    @Test func sendFramesWithTheBasicHeaderAndPriority() {
        #expect(link.send(cid: L2CAPChannel.att, [0x1B, 0x03, 0x00, 0x2A][...], priority: .bestEffort))
        #expect(lower.frames.map(\.pdu) == [[0x04, 0x00, 0x04, 0x00, 0x1B, 0x03, 0x00, 0x2A]])
        #expect(lower.frames.first?.priority == .bestEffort)
    }

    @Test func aClosedLinkTakesAndSendsNothing() {
        let whole = frame(cid: L2CAPChannel.att, [0x12, 0x03, 0x00, 1, 2, 3, 4])
        receive(Array(whole[..<5]))
        link.close()
        #expect(scheduler.pendingCount == 0, "the reassembly timer stops with the link")
        receive(frame(cid: L2CAPChannel.att, [0x0A, 0x03, 0x00]))
        #expect(received.att.isEmpty)
        #expect(!link.send(cid: L2CAPChannel.att, [0x0A][...], priority: .required))
    }

    // MARK: LE signalling

    static let parameterUpdateRequest: [UInt8] = [0x12, 0x07, 0x08, 0x00, 0x18, 0x00, 0x28, 0x00, 0x00, 0x00, 0xF4, 0x01]

    /// Vol 3, Part A, 4.20: a peripheral host rejects a Connection Parameter Update Request.
    @Test func aPeripheralRejectsAParameterUpdateRequest() {
        receive(frame(cid: L2CAPChannel.leSignaling, Self.parameterUpdateRequest))
        #expect(lower.signaling == [.commandReject(identifier: 0x07)])
        #expect(lower.commands.isEmpty)
    }

    /// The central accepts parameters the Core allows and asks its controller for them.
    @Test func aCentralAcceptsAParameterUpdateRequestAndUpdatesTheLink() {
        let test = L2CAPLinkTests(role: .central)
        test.receive(test.frame(cid: L2CAPChannel.leSignaling, Self.parameterUpdateRequest))
        #expect(test.lower.signaling == [SignalingCommand(code: SignalingCode.connectionParameterUpdateResponse, identifier: 0x07,
                                                          data: [0x00, 0x00][...])])
        #expect(test.lower.commands == [.leConnectionUpdate(handle: 0x0040, intervalMin: 0x18, intervalMax: 0x28, latency: 0, timeout: 0x1F4)])
    }

    @Test func aCentralRejectsParametersTheCoreForbids() {
        let test = L2CAPLinkTests(role: .central)
        // Interval minimum above its maximum.
        test.receive(test.frame(cid: L2CAPChannel.leSignaling, [0x12, 0x02, 0x08, 0x00, 0x28, 0x00, 0x18, 0x00, 0x00, 0x00, 0xF4, 0x01]))
        #expect(test.lower.signaling.first?.data == [0x01, 0x00][...])
        #expect(test.lower.commands.isEmpty)
    }

    /// Both roles answer a Disconnection Request for a channel that does not exist with Invalid
    /// CID (4.1, reason 0x0002); a credit based request is refused (4.23).
    @Test(arguments: [LinkRole.central, .peripheral])
    func noDynamicChannelInEitherRole(role: LinkRole) {
        let test = L2CAPLinkTests(role: role)
        test.receive(test.frame(cid: L2CAPChannel.leSignaling, [0x06, 0x03, 0x04, 0x00, 0x40, 0x00, 0x41, 0x00]))
        test.receive(test.frame(cid: L2CAPChannel.leSignaling, [0x14, 0x04, 0x0A, 0x00, 0x80, 0x00, 0x40, 0x00, 0x17, 0x00, 0x17, 0x00, 0x01, 0x00]))
        #expect(test.lower.signaling == [.commandReject(identifier: 0x03, reason: 0x0002, data: [0x40, 0x00, 0x41, 0x00]),
                                         .leCreditBasedConnectionRefused(identifier: 0x04)])
    }

    /// Vol 3, Part A, 4.1: the data of Invalid CID in request is the local endpoint, then the
    /// remote one, as the rejecting side sees them; a Disconnection Request's Destination CID is
    /// "the channel endpoint on the device receiving this request" (4.6), so it comes first.
    /// Destination 0x0052, Source 0x0047: the reject's data is 52 00 47 00, byte for byte.
    @Test func anInvalidCIDRejectNamesOurEndpointFirst() {
        receive(frame(cid: L2CAPChannel.leSignaling, [0x06, 0x09, 0x04, 0x00, 0x52, 0x00, 0x47, 0x00]))
        #expect(lower.frames.map(\.pdu) == [[0x0A, 0x00, 0x05, 0x00, 0x01, 0x09, 0x06, 0x00, 0x02, 0x00, 0x52, 0x00, 0x47, 0x00]])
        // A Disconnection Request of another length is not understood (reason 0x0000).
        receive(frame(cid: L2CAPChannel.leSignaling, [0x06, 0x0A, 0x03, 0x00, 0x52, 0x00, 0x47]))
        #expect(lower.signaling.last == .commandReject(identifier: 0x0A))
    }

    /// A peripheral sets the pace of its Connection Parameter Update Requests (4.20): each is
    /// answered, but the central's log gets the links' budget of ten lines a minute, the rest
    /// counted (Docs/REFERENCE.md, Budgets).
    @Test func aFloodOfParameterRequestsIsLoggedWithinTheBudget() {
        let sink = CapturedLog()
        let test = L2CAPLinkTests(role: .central, logger: sink.logger)
        for n in 0..<500 {
            test.receive(test.frame(cid: L2CAPChannel.leSignaling, [0x12, UInt8(n % 255 + 1), 0x08, 0x00, 0x18, 0x00, 0x28, 0x00, 0x00, 0x00, 0xF4, 0x01]))
        }
        #expect(test.lower.signaling.filter { $0.code == SignalingCode.connectionParameterUpdateResponse }.count == 500)
        #expect(sink.messages.count == 10)
        #expect(test.link.context.peerLog.leftOutTotal == 490)
        test.scheduler.advance(by: .seconds(61))
        test.receive(test.frame(cid: L2CAPChannel.leSignaling, [0x12, 0x01, 0x08, 0x00, 0x18, 0x00, 0x28, 0x00, 0x00, 0x00, 0xF4, 0x01]))
        #expect(sink.messages.last?.hasSuffix("(490 similar lines left out)") == true)
    }

    @Test func theParameterRequestOfAPeripheralWaitsForItsAnswer() {
        link.requestConnectionParameters(ConnectionParameters(intervalMin: 24, intervalMax: 40, peripheralLatency: 0, supervisionTimeout: 500))
        #expect(lower.signaling == [.connectionParameterUpdateRequest(identifier: 1, intervalMin: 24, intervalMax: 40, latency: 0, timeout: 500)])
        #expect(link.pendingParameterUpdate == 1)
        // A response to another identifier is not the answer.
        receive(frame(cid: L2CAPChannel.leSignaling, [0x13, 0x09, 0x02, 0x00, 0x00, 0x00]))
        #expect(link.pendingParameterUpdate == 1)
        receive(frame(cid: L2CAPChannel.leSignaling, [0x13, 0x01, 0x02, 0x00, 0x00, 0x00]))
        #expect(link.pendingParameterUpdate == nil)
        #expect(lower.signaling.count == 1, "a response is not answered")
    }

    @Test func malformedSignallingIsRejectedWithItsIdentifier() {
        receive(frame(cid: L2CAPChannel.leSignaling, [0x12, 0x05, 0x08]))
        // Identifier 0 is illegal: dropped without an answer.
        receive(frame(cid: L2CAPChannel.leSignaling, [0x0F, 0x00, 0x00, 0x00]))
        #expect(lower.signaling == [.commandReject(identifier: 0x05)])
    }
}
