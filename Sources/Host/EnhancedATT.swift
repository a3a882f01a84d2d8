import BlemuATT
import BlemuChannels
import BlemuCore
import BlemuGATT

/// One Enhanced ATT bearer of a link (Vol 3, Part F, 3.2.11; Vol 3, Part G, 3.6): an L2CAP
/// channel in Enhanced Credit Based Flow Control Mode on the EATT PSM, an `ATTBearer` over it
/// with its own ATT_MTU, and the device's server on it with its own transaction state, so the
/// client's requests on different bearers are answered each on its own bearer, none waiting
/// for another's.
final class EnhancedBearer: ATTTransport {
    let channel: CreditBasedChannel
    let bearer: ATTBearer
    let server: ATTServer
    let faultStage: FaultStage

    init(channel: CreditBasedChannel, connection: Connection, links: DeviceLinks) {
        self.channel = channel
        // Part F, 3.2.8: for an enhanced bearer ATT_MTU is the smaller of the two MTUs L2CAP
        // configured (each side's receive MTU).
        bearer = ATTBearer(scheduler: links.scheduler, mtu: Int(min(channel.local.mtu, channel.peerMTU)), enhanced: true)
        server = ATTServer(database: links.database, peer: connection.peer, scheduler: links.scheduler, bearer: bearer)
        faultStage = FaultStage(server: server, plan: links.faults, scheduler: links.scheduler)
        bearer.transport = self
        server.clientStateOwner = connection.server
        server.linkSecurity = connection.server.linkSecurity
        server.signing = connection.server.signing
        server.delegate = links.serverDelegate
        server.reportsValueAccess = links.reportsValueAccess
        faultStage.delegate = links.faultDelegate
    }

    /// One ATT PDU is one SDU on the channel (Part F, 3.2.11).
    func sendATT(_ pdu: ArraySlice<UInt8>, kind: ATTSendKind) -> Bool {
        channel.send(pdu)
    }
}

/// The device's EATT server: SPSM 0x0027 (Assigned Numbers, the EATT PSM), served in Enhanced
/// Credit Based Flow Control Mode only and only on an encrypted link (Vol 3, Part G, 3.6: "an
/// Enhanced ATT bearer ... shall only be established on an encrypted link"; before encryption a
/// request gets Insufficient Encryption, 0x0008, as every encrypted-only SPSM's does).
final class EnhancedATTServer: CreditBasedChannelDelegate {
    /// The EATT PSM (Assigned Numbers, L2CAP PSM 0x0027).
    static let psm: UInt16 = 0x0027
    /// The receive MTU of each enhanced bearer: the largest ATT_MTU the server builds PDUs for.
    static let mtu = UInt16(ATTServer.maximumMTU)

    unowned let links: DeviceLinks

    init(links: DeviceLinks) {
        self.links = links
        let server = links.channelServers.serve(spsm: Self.psm, security: .encrypted,
                                                parameters: ChannelParameters(mtu: Self.mtu, mps: Self.mtu, initialCredits: 8),
                                                delegate: self)
        server?.enhancedOnly = true
    }

    private func bearer(of channel: CreditBasedChannel) -> (Connection, EnhancedBearer)? {
        guard let connection = links.connections[channel.linkHandle],
              let bearer = connection.enhancedBearers.first(where: { $0.channel === channel }) else { return nil }
        return (connection, bearer)
    }

    func channelOpened(_ channel: CreditBasedChannel) {
        guard let connection = links.connections[channel.linkHandle] else { return channel.disconnect() }
        connection.enhancedBearers.append(EnhancedBearer(channel: channel, connection: connection, links: links))
    }

    func channel(_ channel: CreditBasedChannel, received sdu: ArraySlice<UInt8>) {
        bearer(of: channel)?.1.bearer.receive(sdu)
    }

    func channelClosed(_ channel: CreditBasedChannel, reason: ChannelCloseReason) {
        guard let (connection, closed) = bearer(of: channel) else { return }
        connection.enhancedBearers.removeAll { $0 === closed }
        _ = closed.server.close()
    }

    func channelIsReady(_ channel: CreditBasedChannel) {}
}
