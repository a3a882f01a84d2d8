import Testing
import BlemuChannels
import BlemuCore
import BlemuL2CAP
import BlemuTestSupport
import Logging

/// A hostile central: thousands of random credit based commands (well-formed with random
/// fields, or random bytes) and K-frames on the dynamic CIDs, into a link serving two SPSMs. The
/// link never traps, holds no more channels than its limit, answers every request it can parse
/// with the command's response or a Command Reject, and gives no credits it does not owe.
@Suite struct HostileChannelTests {
    /// A peer may announce an MPS up to 65533; blemu still cuts its K-frames at its own largest,
    /// so one frame fits the host's transmit buffers instead of growing them (4.22).
    @Test func aHugePeerMPSDoesNotMakeHugeFrames() throws {
        let pair = ChannelPair()
        let server = ChannelRecorder()
        let spsm = try #require(pair.peripheralServers.publish(parameters: ChannelParameters(mtu: 8000), delegate: server)).spsm
        pair.centralSends(LECreditBasedConnectionRequest(spsm: spsm, sourceCID: 0x0040, mtu: 8000, mps: 65533, initialCredits: 100)
            .command(identifier: 1))
        let serverEnd = try #require(server.opened.first)
        #expect(serverEnd.peerMPS == 65533)
        #expect(serverEnd.send([UInt8](repeating: 0xA5, count: 5000)))
        pair.flush()
        let frames = pair.peripheralLower.frames(cid: 0x0040)
        #expect(frames.count == (5000 + 2 + Int(ChannelParameters.largestMPS) - 1) / Int(ChannelParameters.largestMPS))
        #expect(frames.allSatisfy { $0.count <= Int(ChannelParameters.largestMPS) })
        #expect(frames.reduce(0) { $0 + $1.count } == 5002)
    }

    /// Refused requests come at the pace the peer sets: 2,000 LE and 2,000 enhanced requests to
    /// an SPSM nobody serves are each refused (0x0002), but the log gets the links' budget of
    /// ten lines (Docs/REFERENCE.md, Budgets); a minute on, the next line says how many it left out.
    @Test func refusedRequestsAreLoggedWithinTheBudget() throws {
        let log = CapturedLog()
        let pair = ChannelPair(logger: log.logger)
        for n in 0..<2000 {
            let identifier = UInt8(n % 255 + 1)
            pair.centralSends(LECreditBasedConnectionRequest(spsm: 0x00F0, sourceCID: 0x0040, mtu: 23, mps: 23, initialCredits: 1)
                .command(identifier: identifier))
            pair.centralSends(CreditBasedConnectionRequest(spsm: 0x00F0, mtu: 64, mps: 64, initialCredits: 1, sourceCIDs: [0x0040, 0x0041])
                .command(identifier: identifier))
        }
        let answers = pair.peripheralLower.signaling
        #expect(answers.filter { $0.code == 0x15 }.count == 2000)
        #expect(answers.filter { $0.code == 0x18 }.count == 2000)
        #expect(try answers.filter { $0.code == 0x15 }.allSatisfy { try LECreditBasedConnectionResponse(data: $0.data).result == 0x0002 })
        let refusals = log.lines.filter { $0.contains("refused") }
        #expect(refusals.count == 10)
        #expect(refusals.first?.lowercased().contains("spsm 0x00f0 refused") == true)
        #expect(pair.peripheral.context.peerLog.leftOutTotal == 3990)

        pair.scheduler.advance(by: .seconds(61))
        pair.centralSends(LECreditBasedConnectionRequest(spsm: 0x00F0, sourceCID: 0x0040, mtu: 23, mps: 23, initialCredits: 1)
            .command(identifier: 1))
        #expect(log.lines.count == 11)
        #expect(log.lines.last?.contains("(3990 similar lines left out)") == true)
    }

    @Test func randomCommandsAndFramesKeepTheLinkBounded() {
        var random = SeededRandom(seed: 0x0C0C)
        let pair = ChannelPair(channelLimit: 6)
        let server = ChannelRecorder()
        server.onReceive = { channel, sdu in _ = channel.send(sdu) }
        _ = pair.peripheralServers.publish(parameters: ChannelParameters(mtu: 300, mps: 64, initialCredits: 3), delegate: server)
        _ = pair.peripheralServers.publish(security: .encrypted, delegate: server)
        func u16() -> UInt16 { UInt16.random(in: 0...UInt16.max, using: &random) }
        /// Mostly values near the interesting ranges: CIDs 0x0040-0x0047, SPSMs 0x0080/0x0081.
        func cid() -> UInt16 { Bool.random(using: &random) ? UInt16.random(in: 0x003E...0x0047, using: &random) : u16() }
        func small() -> UInt16 { Bool.random(using: &random) ? UInt16.random(in: 0...100, using: &random) : u16() }
        let codes: [UInt8] = [0x01, 0x06, 0x07, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1A]
        var answered = 0
        for step in 0..<20_000 {
            pair.peripheralLower.sent.removeAll(keepingCapacity: true)
            let id = UInt8.random(in: 1...255, using: &random)
            switch Int.random(in: 0..<6, using: &random) {
            case 0:
                pair.centralSends(LECreditBasedConnectionRequest(spsm: UInt16.random(in: 0x007F...0x0082, using: &random), sourceCID: cid(),
                                                                 mtu: small(), mps: small(), initialCredits: small()).command(identifier: id))
                answered += 1
                #expect(pair.peripheralLower.signaling.count == 1)
            case 1:
                let count = Int.random(in: 1...5, using: &random)
                pair.centralSends(CreditBasedConnectionRequest(spsm: UInt16.random(in: 0x007F...0x0082, using: &random), mtu: small(),
                                                               mps: small(), initialCredits: small(),
                                                               sourceCIDs: (0..<count).map { _ in cid() }).command(identifier: id))
                #expect(pair.peripheralLower.signaling.count == 1)
            case 2:
                pair.centralSends(FlowControlCreditIndication(cid: cid(), credits: small()).command(identifier: id))
            case 3:
                if Bool.random(using: &random) {
                    pair.centralSends(DisconnectionRequest(destinationCID: cid(), sourceCID: cid()).command(identifier: id))
                } else {
                    pair.centralSends(CreditBasedReconfigureRequest(mtu: small(), mps: small(), destinationCIDs: [cid()]).command(identifier: id))
                }
            case 4:
                let data = (0..<Int.random(in: 0...14, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }
                pair.centralSends(SignalingCommand(code: codes.randomElement(using: &random)!, identifier: id, data: data[...]))
            default:
                var payload = (0..<Int.random(in: 0...80, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }
                if payload.count >= 2, Bool.random(using: &random) { payload[1] = 0 }  // plausible SDU lengths
                pair.centralSendsFrame(cid: UInt16.random(in: 0x0040...0x0047, using: &random), payload)
            }
            pair.peripheralLower.outbox.removeAll()
            let channels = pair.peripheralChannels.channels
            #expect(channels.count <= 6, "step \(step)")
            for channel in channels {
                #expect(channel.receiveCredits >= 0 && channel.receiveCredits <= Int(channel.local.initialCredits))
                #expect(channel.sendCredits >= 0 && channel.sendCredits <= 65535)
                #expect(channel.queuedBytes <= CreditBasedChannel.sendQueueBytes + 65537)
            }
            // Now and then the peripheral's requests time out, freeing what a silent peer holds.
            if step % 1000 == 999 { pair.scheduler.advance(by: .seconds(31)) }
        }
        #expect(answered > 1000)
        #expect(!server.opened.isEmpty)
    }
}
