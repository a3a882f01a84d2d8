import Testing
import BlemuChannels
import BlemuCore
import BlemuL2CAP

/// Enhanced Credit Based Flow Control Mode (Vol 3, Part A, 4.25-4.28) between two links joined
/// in process: up to five channels in one request, each refused or accepted on its own, and
/// reconfiguration (the MTU only grows; the MPS shrinks only for a single channel).
@Suite struct EnhancedCreditBasedChannelTests {
    let pair = ChannelPair()
    let server = ChannelRecorder()
    let client = ChannelRecorder()

    @Test func fiveChannelsOpenInOneRequestAndCarrySDUs() throws {
        let spsm = try #require(pair.peripheralServers.publish(parameters: ChannelParameters(mtu: 1000, mps: 64, initialCredits: 4),
                                                                delegate: server)).spsm
        let opened = pair.centralChannels.connectEnhanced(spsm: spsm, count: 5, parameters: ChannelParameters(mtu: 500, mps: 80), delegate: client)
        #expect(opened.count == 5)
        #expect(pair.centralLower.signaling.count == 1)
        pair.flush()
        #expect(client.opened.count == 5 && server.opened.count == 5)
        for channel in opened {
            #expect(channel.state == .open && channel.mode == .enhanced && channel.peerMTU == 1000 && channel.peerMPS == 64)
        }
        for channel in server.opened { #expect(channel.peerMTU == 500 && channel.peerMPS == 80) }
        for (index, channel) in opened.enumerated() {
            #expect(channel.send([UInt8](repeating: UInt8(index), count: 300)))
        }
        pair.flush()
        #expect(server.received == (0..<5).map { [UInt8](repeating: UInt8($0), count: 300) })
        // Six is more than one request may ask for.
        #expect(pair.centralChannels.connectEnhanced(spsm: spsm, count: 6, delegate: client).isEmpty)
    }

    /// Either role serves and either opens: here the peripheral opens one LE and three enhanced
    /// channels to an SPSM the central serves.
    @Test func thePeripheralOpensChannelsToTheCentral() throws {
        let spsm = try #require(pair.centralServers.publish(delegate: server)).spsm
        let le = try #require(pair.peripheralChannels.connect(spsm: spsm, delegate: client))
        let enhanced = pair.peripheralChannels.connectEnhanced(spsm: spsm, count: 3, delegate: client)
        pair.flush()
        #expect(le.state == .open && le.mode == .le)
        #expect(enhanced.count == 3 && enhanced.allSatisfy { $0.state == .open && $0.mode == .enhanced })
        #expect(server.opened.count == 4 && pair.centralChannels.channels.count == 4)
        #expect(enhanced[2].send([7, 7, 7]) && le.send([1]))
        pair.flush()
        #expect(server.received == [[7, 7, 7], [1]])
        #expect(enhanced[0].reconfigure(mtu: 4096, mps: 200))
        pair.flush()
        #expect(enhanced[0].local.mtu == 4096 && server.opened[1].peerMTU == 4096)
    }

    func request(_ sources: [UInt16], spsm: UInt16 = 0x0080, mtu: UInt16 = 100, mps: UInt16 = 100, id: UInt8 = 1) throws -> CreditBasedConnectionResponse {
        pair.centralSends(CreditBasedConnectionRequest(spsm: spsm, mtu: mtu, mps: mps, initialCredits: 1, sourceCIDs: sources)
            .command(identifier: id))
        let answer = try #require(pair.peripheralAnswer)
        #expect(answer.code == 0x18 && answer.identifier == id)
        return try CreditBasedConnectionResponse(data: answer.data)
    }

    /// 4.26: each source CID answered on its own, the refused ones with 0x0000, the Result the
    /// reason of a refusal.
    @Test func eachSourceCIDIsAcceptedOrRefusedOnItsOwn() throws {
        let pair = ChannelPair(channelLimit: 3)
        _ = pair.peripheralServers.publish(delegate: server)
        func ask(_ sources: [UInt16]) throws -> CreditBasedConnectionResponse {
            pair.centralSends(CreditBasedConnectionRequest(spsm: 0x0080, mtu: 100, mps: 100, initialCredits: 1, sourceCIDs: sources)
                .command(identifier: 1))
            return try CreditBasedConnectionResponse(data: try #require(pair.peripheralAnswer).data)
        }
        // An invalid source CID among good ones.
        var response = try ask([0x0040, 0x0010])
        #expect(response.result == 0x0009 && response.destinationCIDs.count == 2)
        #expect(response.destinationCIDs[0] != 0 && response.destinationCIDs[1] == 0)
        // One already in use, one used twice in the same request.
        response = try ask([0x0040, 0x0041, 0x0041])
        #expect(response.result == 0x000A && response.destinationCIDs[0] == 0 && response.destinationCIDs[1] != 0
                && response.destinationCIDs[2] == 0)
        // Past the link's limit of 3.
        response = try ask([0x0042, 0x0043])
        #expect(response.result == 0x0004 && response.destinationCIDs[0] != 0 && response.destinationCIDs[1] == 0)
        #expect(server.opened.count == 3)
    }

    /// 4.26: within one request, the channels past the link's receive budget are refused with
    /// No resources (0x0004) and the others open; our reconfiguration may not grow past it either.
    @Test func anEnhancedRequestPastTheReceiveBudgetOpensWhatFits() throws {
        let pair = ChannelPair(receiveBudget: 3 * 4096)
        _ = pair.peripheralServers.publish(parameters: ChannelParameters(mtu: 4096, mps: 100), delegate: server)
        pair.centralSends(CreditBasedConnectionRequest(spsm: 0x0080, mtu: 100, mps: 100, initialCredits: 1,
                                                       sourceCIDs: [0x0040, 0x0041, 0x0042, 0x0043, 0x0044]).command(identifier: 1))
        let response = try CreditBasedConnectionResponse(data: try #require(pair.peripheralAnswer).data)
        #expect(response.result == 0x0004 && response.destinationCIDs.map { $0 != 0 } == [true, true, true, false, false])
        #expect(server.opened.count == 3 && pair.peripheralChannels.receiveMTUInUse == 3 * 4096)
        #expect(!pair.peripheralChannels.reconfigure([server.opened[0]], mtu: 4097, mps: 100))
    }

    @Test func wholeRequestRefusals() throws {
        // 0x0002: no such SPSM.
        #expect(try request([0x0040]).result == 0x0002)
        _ = pair.peripheralServers.publish(security: .encrypted, delegate: server)
        // 0x000C: MTU or MPS below 64 (4.25).
        #expect(try request([0x0040], mtu: 63) == .refused(.invalidParameters, channels: 1))
        #expect(try request([0x0040, 0x0041], mps: 63) == .refused(.invalidParameters, channels: 2))
        // 0x0008 until the link is encrypted, for every channel.
        #expect(try request([0x0040, 0x0041]) == .refused(.insufficientEncryption, channels: 2))
        pair.peripheralChannels.linkSecurity = LinkSecurity(isEncrypted: true, encryptionKeySize: 16)
        #expect(try request([0x0040, 0x0041]).result == 0)
        // Six CIDs, or none: all refused, Invalid parameters; too short for the fields: not understood.
        pair.centralSends(SignalingCommand(code: 0x17, identifier: 7, data: ([0x80, 0, 100, 0, 100, 0, 1, 0] + [UInt8](repeating: 0x50, count: 12))[...]))
        #expect(try CreditBasedConnectionResponse(data: try #require(pair.peripheralAnswer).data) == .refused(.invalidParameters, channels: 5))
        pair.centralSends(SignalingCommand(code: 0x17, identifier: 8, data: [0x80, 0, 100][...]))
        #expect(pair.peripheralAnswer == .commandReject(identifier: 8))
    }

    @Test func theInitiatorSeesPartialRefusals() throws {
        let pair = ChannelPair(channelLimit: 2)
        _ = pair.peripheralServers.publish(delegate: server)
        let asked = pair.centralChannels.connectEnhanced(spsm: 0x0080, count: 2, delegate: client)
        // The peripheral's side has room for one only: one more channel there first.
        _ = pair.peripheralChannels.connect(spsm: 0x0099, delegate: nil)
        pair.flush()
        #expect(asked[0].state == .open && asked[1].state == .closed)
        #expect(client.closed == [.refused(0x0004)])
    }

    // MARK: Reconfiguration (4.27, 4.28)

    func openThree() throws -> [CreditBasedChannel] {
        _ = pair.peripheralServers.publish(parameters: ChannelParameters(mtu: 200, mps: 100), delegate: server)
        let opened = pair.centralChannels.connectEnhanced(spsm: 0x0080, count: 3, parameters: ChannelParameters(mtu: 200, mps: 100),
                                                          delegate: client)
        pair.flush()
        try #require(opened.allSatisfy { $0.state == .open } && server.opened.count == 3)
        return opened
    }

    @Test func aLargerMTUIsTakenByThePeer() throws {
        let opened = try openThree()
        #expect(pair.centralChannels.reconfigure(opened, mtu: 2000, mps: 200))
        pair.flush()
        #expect(pair.centralLower.signaling.last?.code == 0x19)
        #expect(pair.peripheralAnswer == CreditBasedReconfigureResponse(.success).command(identifier: pair.peripheralAnswer!.identifier))
        for channel in opened { #expect(channel.local.mtu == 2000 && channel.local.mps == 200) }
        for channel in server.opened { #expect(channel.peerMTU == 2000 && channel.peerMPS == 200) }
        // The peer now sends SDUs of the new size.
        #expect(server.opened[0].send([UInt8](repeating: 9, count: 2000)))
        pair.flush()
        #expect(client.received == [[UInt8](repeating: 9, count: 2000)])
    }

    @Test func ourOwnReconfigurationKeepsTheRules() throws {
        let opened = try openThree()
        #expect(!pair.centralChannels.reconfigure(opened, mtu: 199, mps: 100))  // MTU may not shrink
        #expect(!pair.centralChannels.reconfigure(opened, mtu: 300, mps: 99))   // nor MPS for several
        #expect(!pair.centralChannels.reconfigure(opened, mtu: 300, mps: 63))
        #expect(opened[0].reconfigure(mtu: 300, mps: 64))                       // MPS for one may
        pair.flush()
        #expect(opened[0].local.mps == 64 && server.opened[0].peerMPS == 64)
    }

    @Test func everyReconfigureRefusal() throws {
        _ = try openThree()
        let ours = server.opened.map(\.remoteCID)  // the central's CIDs, as the central names them
        func reconfigure(_ cids: [UInt16], mtu: UInt16, mps: UInt16) throws -> UInt16 {
            pair.centralSends(CreditBasedReconfigureRequest(mtu: mtu, mps: mps, destinationCIDs: cids).command(identifier: 0x33))
            let answer = try #require(pair.peripheralAnswer)
            #expect(answer.code == 0x1A)
            return try CreditBasedReconfigureResponse(data: answer.data).result
        }
        #expect(try reconfigure(ours, mtu: 199, mps: 100) == 0x0001)
        #expect(try reconfigure(ours, mtu: 200, mps: 99) == 0x0002)
        #expect(try reconfigure([ours[0], 0x007F], mtu: 300, mps: 100) == 0x0003)
        #expect(try reconfigure(ours, mtu: 300, mps: 63) == 0x0004)
        #expect(server.opened.allSatisfy { $0.peerMTU == 200 && $0.peerMPS == 100 })
        #expect(try reconfigure([ours[1]], mtu: 200, mps: 70) == 0x0000)
        #expect(server.opened[1].peerMPS == 70)
    }
}
