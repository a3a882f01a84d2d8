import Testing
import BlemuChannels
import BlemuCore
import BlemuHCI
import BlemuL2CAP

/// LE Credit Based Flow Control Mode (Vol 3, Part A, 3.4.3, 4.22-4.24, 10.1) between two links
/// joined in process: opening, SDUs cut into K-frames and gathered again, credits both ways,
/// every refusal, and the rules whose breach disconnects a channel.
@Suite struct LECreditBasedChannelTests {
    let pair = ChannelPair()
    let server = ChannelRecorder()
    let client = ChannelRecorder()

    /// A channel from the central to the peripheral's SPSM, open.
    func open(serverParameters: ChannelParameters = ChannelParameters(), clientParameters: ChannelParameters = ChannelParameters(),
              security: ChannelSecurity = .none) throws -> (client: CreditBasedChannel, server: CreditBasedChannel) {
        let spsm = try #require(pair.peripheralServers.publish(security: security, parameters: serverParameters, delegate: server)).spsm
        let channel = try #require(pair.centralChannels.connect(spsm: spsm, parameters: clientParameters, delegate: client))
        pair.flush()
        try #require(channel.state == .open)
        return (channel, try #require(server.opened.first))
    }

    @Test func aChannelOpensWithEachSidesParameters() throws {
        let (clientEnd, serverEnd) = try open(serverParameters: ChannelParameters(mtu: 500, mps: 100, initialCredits: 7),
                                              clientParameters: ChannelParameters(mtu: 300, mps: 50, initialCredits: 3))
        #expect(client.opened.count == 1 && server.opened.count == 1)
        #expect(clientEnd.spsm == 0x0080 && serverEnd.spsm == 0x0080)
        #expect(clientEnd.remoteCID == serverEnd.localCID && serverEnd.remoteCID == clientEnd.localCID)
        #expect(clientEnd.peerMTU == 500 && clientEnd.peerMPS == 100 && clientEnd.sendCredits == 7)
        #expect(serverEnd.peerMTU == 300 && serverEnd.peerMPS == 50 && serverEnd.sendCredits == 3)
        #expect(pair.peripheralChannels.channels.count == 1)
    }

    /// SDUs of every length from 1 to 300 and around each multiple of the MPS up to 65535 bytes,
    /// both ways: each K-frame at most the peer's MPS, the first with the SDU length, and the SDU
    /// gathered whole (3.4.3).
    @Test func sdusOfOneTo65535BytesAreCutAndGathered() throws {
        let parameters = ChannelParameters(mtu: 65535, mps: 100, initialCredits: 8)
        let (clientEnd, serverEnd) = try open(serverParameters: parameters, clientParameters: parameters)
        var lengths = Array(1...300)
        for multiple in stride(from: 98, to: 65535, by: 100 * 37) { lengths += [multiple - 1, multiple, multiple + 1] }
        lengths += [65533, 65534, 65535]
        var sent: [[UInt8]] = []
        for (index, length) in lengths.enumerated() {
            let sdu = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ index) }
            sent.append(sdu)
            #expect(clientEnd.send(sdu))
            #expect(serverEnd.send(sdu))
            pair.flush()
        }
        #expect(server.received == sent)
        #expect(client.received == sent)
        let frames = pair.centralLower.frames(cid: serverEnd.localCID)
        #expect(frames.allSatisfy { $0.count <= 100 })
        // The first frame: the SDU length (1) and the SDU's one byte.
        #expect(frames.first == [0x01, 0x00, 0x00])
        #expect(clientEnd.sdusSent == lengths.count && serverEnd.sdusReceived == lengths.count)
        // Credits flowed back: far more frames went than the 8 first given.
        #expect(clientEnd.framesSent > 1000)
    }

    /// A receiver that stops taking gives no credits back: the sender stops at zero credits with
    /// the rest queued, and goes on once credits come (10.1: a sender never exceeds them).
    @Test func aSenderRunsOutOfCreditsAndResumes() throws {
        let (clientEnd, serverEnd) = try open(serverParameters: ChannelParameters(mtu: 1000, mps: 50, initialCredits: 4))
        serverEnd.pauseReceiving(true)
        let sdus = (0..<10).map { i in [UInt8](repeating: UInt8(i), count: 120) }  // 3 frames each
        for sdu in sdus { #expect(clientEnd.send(sdu)) }
        pair.flush()
        #expect(clientEnd.sendCredits == 0)
        #expect(pair.centralLower.frames(cid: serverEnd.localCID).count == 4)
        #expect(server.received == [sdus[0]])
        #expect(clientEnd.queuedBytes > 0)
        serverEnd.pauseReceiving(false)
        pair.flush()
        #expect(server.received == sdus)
        #expect(clientEnd.queuedBytes == 0)
        #expect(pair.centralLower.frames(cid: serverEnd.localCID).count == 30)
    }

    /// The control socket's credit stall: the device keeps taking SDUs but no credits go back,
    /// so the peer stops at zero; the device's own pause ending does not end the stall, and the
    /// stall's end gives the window back at once.
    @Test func stalledCreditsStopThePeerUntilTheStallEnds() throws {
        let (clientEnd, serverEnd) = try open(serverParameters: ChannelParameters(mtu: 1000, mps: 50, initialCredits: 4))
        serverEnd.creditsStalled = true
        let sdus = (0..<10).map { i in [UInt8](repeating: UInt8(i), count: 120) }  // 3 frames each
        for sdu in sdus { #expect(clientEnd.send(sdu)) }
        pair.flush()
        #expect(clientEnd.sendCredits == 0 && serverEnd.receiveCredits == 0)
        #expect(server.received == [sdus[0]])
        serverEnd.pauseReceiving(true)
        serverEnd.pauseReceiving(false)
        pair.flush()
        #expect(server.received == [sdus[0]] && clientEnd.sendCredits == 0)
        serverEnd.creditsStalled = false
        pair.flush()
        #expect(server.received == sdus && clientEnd.queuedBytes == 0)
    }

    /// The send queue is bounded: past it `send` says no, and `channelIsReady` follows when it drains.
    @Test func aFullSendQueueRefusesAndSaysWhenReady() throws {
        let (clientEnd, serverEnd) = try open(serverParameters: ChannelParameters(mtu: 2000, mps: 100, initialCredits: 2))
        serverEnd.pauseReceiving(true)
        var accepted = 0
        while clientEnd.send([UInt8](repeating: 1, count: 2000)) { accepted += 1; #expect(accepted < 100) }
        #expect(clientEnd.queuedBytes <= CreditBasedChannel.sendQueueBytes + 2002)
        #expect(client.ready == 0)
        serverEnd.pauseReceiving(false)
        pair.flush()
        #expect(client.ready == 1)
        #expect(server.received.count == accepted)
    }

    /// A K-frame the link's HCI queue refuses is sent again when the queue has room.
    @Test func aRefusedFrameWaitsForTheLinksRoom() throws {
        let (clientEnd, _) = try open()
        pair.centralLower.refuseBestEffort = true
        #expect(clientEnd.send([1, 2, 3]))
        pair.flush()
        #expect(server.received.isEmpty && pair.centralLower.refused == 1)
        pair.centralLower.refuseBestEffort = false
        pair.central.transmitQueueHasRoom()
        pair.flush()
        #expect(server.received == [[1, 2, 3]])
    }

    @Test func sdusPastThePeersMTUAreNotSent() throws {
        let (clientEnd, _) = try open(serverParameters: ChannelParameters(mtu: 100))
        #expect(!clientEnd.send([UInt8](repeating: 0, count: 101)))
        #expect(clientEnd.send([UInt8](repeating: 0, count: 100)))
    }

    // MARK: Refusals (4.23)

    func request(spsm: UInt16 = 0x0080, source: UInt16 = 0x0040, mtu: UInt16 = 100, mps: UInt16 = 100, id: UInt8 = 1) {
        pair.centralSends(LECreditBasedConnectionRequest(spsm: spsm, sourceCID: source, mtu: mtu, mps: mps, initialCredits: 1)
            .command(identifier: id))
    }

    func lastResponse() throws -> LECreditBasedConnectionResponse {
        let answer = try #require(pair.peripheralAnswer)
        #expect(answer.code == 0x15)
        return try LECreditBasedConnectionResponse(data: answer.data)
    }

    func refusal(_ setup: (ChannelPair) -> Void = { _ in }, spsm: UInt16 = 0x0080, source: UInt16 = 0x0040,
                 mtu: UInt16 = 100, mps: UInt16 = 100) throws -> UInt16 {
        setup(pair)
        request(spsm: spsm, source: source, mtu: mtu, mps: mps)
        let response = try lastResponse()
        if response.result != 0 { #expect(response == .refused(CreditBasedResult(rawValue: response.result)!)) }
        return response.result
    }

    @Test func everyRefusalResult() throws {
        let servers = pair.peripheralServers
        // 0x0002: nothing served there.
        #expect(try refusal(spsm: 0x0081) == 0x0002)
        let plain = try #require(servers.publish(delegate: server))
        #expect(plain.spsm == 0x0080)
        // 0x000B: MTU below 23, MPS below 23 or above 65533.
        #expect(try refusal(mtu: 22) == 0x000B)
        #expect(try refusal(mps: 22) == 0x000B)
        #expect(try refusal(mps: 65534) == 0x000B)
        // 0x0009: a source CID outside 0x0040-0x007F.
        #expect(try refusal(source: 0x0004) == 0x0009)
        #expect(try refusal(source: 0x0080) == 0x0009)
        // Accepted, then 0x000A: the same source CID again.
        #expect(try refusal(source: 0x0040) == 0x0000)
        #expect(try refusal(source: 0x0040) == 0x000A)
        // 0x0006: the server's authorization says no.
        plain.authorize = { _ in false }
        #expect(try refusal(source: 0x0041) == 0x0006)
        // 0x0005: a channel that needs a MITM-protected key, on an unauthenticated link.
        let authenticated = try #require(servers.publish(security: .authenticated, delegate: server))
        pair.peripheralChannels.linkSecurity = LinkSecurity(isEncrypted: true, encryptionKeySize: 16)
        #expect(try refusal(spsm: authenticated.spsm, source: 0x0041) == 0x0005)
        // 0x0007: a 7-octet key for a channel that wants 16.
        let longKey = try #require(servers.publish(security: ChannelSecurity(requiresEncryption: true, minimumKeySize: 16), delegate: server))
        pair.peripheralChannels.linkSecurity = LinkSecurity(isEncrypted: true, encryptionKeySize: 7)
        #expect(try refusal(spsm: longKey.spsm, source: 0x0041) == 0x0007)
        // 0x0008: an encrypted-only channel, until the link is encrypted.
        let encrypted = try #require(servers.publish(security: .encrypted, delegate: server))
        pair.peripheralChannels.linkSecurity = .unencrypted
        #expect(try refusal(spsm: encrypted.spsm, source: 0x0041) == 0x0008)
        pair.peripheralChannels.linkSecurity = LinkSecurity(isEncrypted: true, encryptionKeySize: 16)
        #expect(try refusal(spsm: encrypted.spsm, source: 0x0041) == 0x0000)
        #expect(pair.peripheralChannels.channels.count == 2)
    }

    /// 0x0004: a peer cannot open channels past the link's limit.
    @Test func channelsPastTheLinksLimitAreRefusedForResources() throws {
        let pair = ChannelPair(channelLimit: 3)
        _ = pair.peripheralServers.publish(delegate: server)
        var results: [UInt16] = []
        for source: UInt16 in 0x0040...0x0044 {
            pair.centralSends(LECreditBasedConnectionRequest(spsm: 0x0080, sourceCID: source, mtu: 100, mps: 100, initialCredits: 1)
                .command(identifier: UInt8(source)))
            results.append(try LECreditBasedConnectionResponse(data: try #require(pair.peripheralAnswer).data).result)
        }
        #expect(results == [0, 0, 0, 0x0004, 0x0004])
        #expect(pair.peripheralChannels.channels.count == 3)
    }

    /// 0x0004 also past the sum of receive MTUs a link may hold, whatever the channel count:
    /// each channel may gather an SDU of its MTU. The default budget takes six channels of
    /// 65535 (a seventh would make 448 KiB), and a closed channel's room is free again.
    @Test func channelsPastTheLinksReceiveBudgetAreRefusedForResources() throws {
        #expect(CreditBasedChannels.defaultReceiveBudget == 384 * 1024)
        let pair = ChannelPair()
        let big = pair.peripheralServers.publish(parameters: ChannelParameters(mtu: 65535), delegate: server)!.spsm
        let small = pair.peripheralServers.publish(parameters: ChannelParameters(mtu: 23), delegate: server)!.spsm
        func ask(_ spsm: UInt16, _ source: UInt16) throws -> UInt16 {
            pair.centralSends(LECreditBasedConnectionRequest(spsm: spsm, sourceCID: source, mtu: 100, mps: 100, initialCredits: 1)
                .command(identifier: UInt8(source)))
            return try LECreditBasedConnectionResponse(data: try #require(pair.peripheralAnswer).data).result
        }
        let results = try (0x0040...0x0046).map { try ask(big, $0) }
        #expect(results == [0, 0, 0, 0, 0, 0, 0x0004])
        #expect(pair.peripheralChannels.receiveMTUInUse == 6 * 65535)
        // Six bytes are left: not even a channel of the least MTU (23) fits, well within the channel limit.
        #expect(try ask(small, 0x0047) == 0x0004 && pair.peripheralChannels.channels.count == 6)
        // Our own requests are held to it too: none asked for past it.
        #expect(pair.peripheralChannels.connect(spsm: 0x0080, parameters: ChannelParameters(mtu: 65535), delegate: client) == nil)
        // A closed channel's room is free again (here the raw peer never answers our
        // Disconnection Request: the RTX timer frees it).
        pair.peripheralChannels.channels[0].disconnect()
        pair.flush()
        pair.scheduler.advance(by: CreditBasedChannels.responseTimeout)
        #expect(pair.peripheralChannels.channels.count == 5)
        #expect(try ask(big, 0x0048) == 0)
    }

    /// The initiator hears the refusal, and its CID is free again.    /// The initiator hears the refusal, and its CID is free again.
    @Test func theInitiatorHearsARefusal() throws {
        let channel = try #require(pair.centralChannels.connect(spsm: 0x0099, delegate: client))
        pair.flush()
        #expect(client.closed == [.refused(0x0002)])
        #expect(channel.state == .closed && pair.centralChannels.channels.isEmpty)
    }

    /// A peer that does not do credit based channels answers with a Command Reject.
    @Test func aCommandRejectEndsTheRequest() throws {
        let channel = try #require(pair.centralChannels.connect(spsm: 0x0080, delegate: client))
        var payload: [UInt8] = []
        SignalingCommand.commandReject(identifier: 1).encode(into: &payload)
        var frame: [UInt8] = []
        appendL2CAPFrame(cid: L2CAPChannel.leSignaling, payload: payload[...], to: &frame)
        pair.central.receive(ACLPacket(handle: 1, boundary: .firstFlushable, data: frame[...]))
        #expect(client.closed == [.rejected] && channel.state == .closed)
    }

    // MARK: Rules whose breach disconnects (3.4.3, 4.24, 10.1)

    /// The peripheral's end of a channel the central opened by hand, with 2 credits given to the central.
    func rawChannel(mtu: UInt16 = 100, mps: UInt16 = 50) throws -> CreditBasedChannel {
        _ = pair.peripheralServers.publish(parameters: ChannelParameters(mtu: mtu, mps: mps, initialCredits: 2), delegate: server)
        request(source: 0x0050, mtu: 100, mps: 100)
        #expect(try lastResponse().result == 0)
        return try #require(server.opened.first)
    }

    func expectDisconnected(_ channel: CreditBasedChannel, _ why: String) throws {
        let answer = try #require(pair.peripheralAnswer)
        #expect(answer.code == 0x06)
        #expect(try DisconnectionRequest(data: answer.data) == DisconnectionRequest(destinationCID: 0x0050, sourceCID: channel.localCID))
        #expect(server.closed == [.protocolViolation(why)])
        #expect(channel.state == .disconnecting)
        // Nothing more is taken, and the peer's answer frees the CID.
        pair.centralSendsFrame(cid: channel.localCID, [0x01, 0x00, 0x07])
        #expect(server.received.isEmpty)
        pair.centralSends(DisconnectionResponse(destinationCID: 0x0050, sourceCID: channel.localCID).command(identifier: answer.identifier))
        #expect(channel.state == .closed && pair.peripheralChannels.channels.isEmpty)
    }

    @Test func creditsPast65535Disconnect() throws {
        let channel = try rawChannel()
        // The central got 1 credit from... its own request said 1: the peripheral holds 1.
        pair.centralSends(FlowControlCreditIndication(cid: 0x0050, credits: 65534).command(identifier: 9))
        #expect(channel.sendCredits == 65535 && channel.state == .open)
        pair.centralSends(FlowControlCreditIndication(cid: 0x0050, credits: 1).command(identifier: 10))
        try expectDisconnected(channel, "credit count past 65535")
    }

    @Test func aFrameWithoutACreditDisconnects() throws {
        let channel = try rawChannel()
        pair.centralSendsFrame(cid: channel.localCID, [0x01, 0x00, 0xAA])
        pair.centralSendsFrame(cid: channel.localCID, [0x01, 0x00, 0xBB])
        #expect(server.received == [[0xAA], [0xBB]])
        // Credits were given back after the first (half the window of 2 used): 2 again, then
        // after the second, 2 again. Spend them without a top up by pausing.
        channel.pauseReceiving(true)
        pair.centralSendsFrame(cid: channel.localCID, [0x01, 0x00, 0xCC])
        pair.centralSendsFrame(cid: channel.localCID, [0x01, 0x00, 0xDD])
        #expect(channel.receiveCredits == 0)
        server.received.removeAll()
        pair.centralSendsFrame(cid: channel.localCID, [0x01, 0x00, 0xEE])
        try expectDisconnected(channel, "K-frame received without a credit")
    }

    @Test func aFramePastOurMPSDisconnects() throws {
        let channel = try rawChannel(mps: 50)
        pair.centralSendsFrame(cid: channel.localCID, [0x30, 0x00] + [UInt8](repeating: 0, count: 49))
        try expectDisconnected(channel, "K-frame of 51 bytes past our MPS 50")
    }

    @Test func anSDUPastOurMTUDisconnects() throws {
        let channel = try rawChannel(mtu: 100)
        pair.centralSendsFrame(cid: channel.localCID, [0x65, 0x00, 1, 2, 3])
        try expectDisconnected(channel, "SDU of 101 bytes past our MTU 100")
    }

    @Test func framesLongerThanTheirSDUDisconnect() throws {
        let channel = try rawChannel()
        pair.centralSendsFrame(cid: channel.localCID, [0x03, 0x00, 1, 2])
        pair.centralSendsFrame(cid: channel.localCID, [3, 4])
        try expectDisconnected(channel, "K-frames longer than their SDU")
    }

    @Test func aFirstFrameWithoutTheSDULengthDisconnects() throws {
        let channel = try rawChannel()
        pair.centralSendsFrame(cid: channel.localCID, [0x03])
        try expectDisconnected(channel, "first K-frame without the SDU length")
    }

    // MARK: Disconnection (4.6, 4.7)

    @Test func eitherSideDisconnects() throws {
        let (clientEnd, serverEnd) = try open()
        clientEnd.disconnect()
        #expect(client.closed == [.disconnected] && clientEnd.state == .disconnecting)
        pair.flush()
        #expect(server.closed == [.disconnectedByPeer] && serverEnd.state == .closed)
        #expect(clientEnd.state == .closed)
        #expect(pair.centralChannels.channels.isEmpty && pair.peripheralChannels.channels.isEmpty)
        #expect(!clientEnd.send([1]))
    }

    /// Vol 3, Part A, 4.1: Invalid CID in request carries the local endpoint, then the remote
    /// one, as the rejecting side sees them: for a Disconnection Request its Destination CID (ours,
    /// 4.6), then its Source CID (the peer's).
    @Test func disconnectingAnUnknownChannelIsRejectedWithInvalidCID() throws {
        let (_, serverEnd) = try open()
        pair.centralSends(DisconnectionRequest(destinationCID: 0x0077, sourceCID: 0x0040).command(identifier: 5))
        let answer = try #require(pair.peripheralAnswer)
        #expect(answer.code == 0x01 && answer.identifier == 5)
        #expect(Array(answer.data) == [0x02, 0x00, 0x77, 0x00, 0x40, 0x00])
        #expect(pair.peripheralChannels.channels.count == 1)
        // Our channel's CID with a Source CID that is not its peer's: rejected too, ours first.
        let ours = serverEnd.localCID
        pair.centralSends(DisconnectionRequest(destinationCID: ours, sourceCID: 0x0066).command(identifier: 6))
        let second = try #require(pair.peripheralAnswer)
        #expect(second.identifier == 6)
        #expect(Array(second.data) == [0x02, 0x00, UInt8(ours & 0xFF), UInt8(ours >> 8), 0x66, 0x00])
        #expect(serverEnd.state == .open)
    }

    @Test func aClosingLinkClosesItsChannels() throws {
        _ = try open()
        pair.central.close()
        pair.peripheral.close()
        #expect(client.closed == [.linkClosed] && server.closed == [.linkClosed])
    }

    /// Hostile signalling: malformed requests get a Command Reject, malformed indications nothing.
    @Test func malformedCreditBasedCommands() throws {
        _ = pair.peripheralServers.publish(delegate: server)
        pair.centralSends(SignalingCommand(code: 0x14, identifier: 3, data: [0x80, 0x00, 0x40][...]))
        #expect(pair.peripheralAnswer == .commandReject(identifier: 3))
        let before = pair.peripheralLower.sent.count
        pair.centralSends(SignalingCommand(code: 0x16, identifier: 4, data: [0x40][...]))
        pair.centralSends(SignalingCommand(code: 0x15, identifier: 5, data: [][...]))
        #expect(pair.peripheralLower.sent.count == before)
        #expect(pair.peripheralChannels.channels.isEmpty)
    }

    /// A peer that never answers (Vol 3, Part A, 6.2.1, RTX): our connection request fails and
    /// our disconnection request frees the CID after 30 s, so silence cannot use up the link's CIDs.
    @Test func unansweredRequestsTimeOut() throws {
        let channel = try #require(pair.centralChannels.connect(spsm: 0x0080, delegate: client))
        pair.centralLower.outbox.removeAll()  // lost on the way
        pair.scheduler.advance(by: .seconds(29))
        #expect(channel.state == .connecting)
        pair.scheduler.advance(by: .seconds(1))
        #expect(client.closed == [.timedOut] && pair.centralChannels.channels.isEmpty)
        // A late answer finds nothing to open.
        pair.flush()

        let (clientEnd, _) = try open()
        clientEnd.disconnect()
        pair.centralLower.outbox.removeAll()
        #expect(pair.centralChannels.channels.count == 1)
        pair.scheduler.advance(by: .seconds(30))
        #expect(pair.centralChannels.channels.isEmpty)
        #expect(client.closed == [.timedOut, .disconnected])
        #expect(pair.scheduler.pendingCount == 0)
    }

    /// Dynamic SPSMs are handed out from 0x0080 to 0x00FF, then no more.
    @Test func dynamicSPSMsAreAssigned() {
        let servers = ChannelServers()
        let spsms = (0..<130).compactMap { _ in servers.publish(delegate: nil)?.spsm }
        #expect(spsms == Array(0x0080...0x00FF))
        servers.remove(spsm: 0x0085)
        #expect(servers.publish(delegate: nil)?.spsm == 0x0085)
        #expect(servers.serve(spsm: 0x0025, delegate: nil)?.spsm == 0x0025)
        #expect(servers.serve(spsm: 0x0025, delegate: nil) == nil)
        #expect(servers.serve(spsm: 0x0100, delegate: nil) == nil)
    }
}
