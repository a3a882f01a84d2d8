import BlemuATT
import BlemuConnection
import BlemuCore
import BlemuCrypto
import BlemuGATT
import BlemuHCI
import BlemuL2CAP
import BlemuSMP
import Logging

/// Links to centrals: what their opening and closing mean to the device (the links
/// themselves are `DeviceLinks`).
extension Peripheral {
    func connectionAttemptFailed(status: UInt8) {
        madeConnectionParts?.links.attemptFailed(status: status)
    }

    /// A link made from this device's advertising (the host routed it here), or from a
    /// programmed advertisement's (`ProgrammedAdvertisingRoute`), which says the address it
    /// advertised from: `localAddress`, and, when that is a resolvable private address the
    /// program made, the identity its pairing distributes, `identityAddress`. The link, once
    /// opened (nil: refused).
    @discardableResult
    func connectionOpened(_ event: LEConnectionComplete, fromAdvertising: Bool, localAddress: LEAddress? = nil,
                          identityAddress: LEAddress? = nil) -> LEConnection? {
        guard let links = madeConnectionParts?.links else {
            // A broadcaster advertises non-connectable (Vol 6, Part B, 2.3.1.3): a controller
            // that reports a link from it anyway is answered with HCI Disconnect, and the link
            // never becomes the device's.
            refuseLink(event)
            return nil
        }
        advertising.linkMade()
        let connection: LEConnection
        switch links.open(event) {
        case .success(let opened): connection = opened
        case .failure(.full):
            statistics.linksRefused += 1
            return nil
        case .failure(.centralRole): return nil
        }
        // The address the central connected to: for the pairing's confirm and check values.
        let local = localAddress ?? LEAddress(advertising.advertisedAddress ?? advertising.address, isRandom: true)
        let peer = connection.peer
        host.linkOpened(event.handle, by: self)
        // Peer_Address_Type: 0x01 random, 0x03 random identity (Vol 4, Part E, 7.7.65.10). With
        // 0x02/0x03 the controller resolved the central's private address with the resolving
        // list: the bond is looked up by the identity; pairing uses the address of the
        // connection (the private one, Vol 3, Part H, 2.2.3). Else the host resolves with ah().
        let peerAddress = event.peer
        if event.peerIdentityResolved {
            let overTheAir = event.peerResolvablePrivateAddress.map { LEAddress($0, isRandom: true) } ?? peerAddress
            security.linkOpened(event.handle, peer: overTheAir, local: local, resolvedIdentity: peerAddress, identityAddress: identityAddress)
            logger.info("controller resolved \(overTheAir.address) to identity \(event.peerAddress) (resolving list)",
                        metadata: [LogKey.connHandle: .string("\(event.handle)")])
        } else {
            security.linkOpened(event.handle, peer: peerAddress, local: local, identityAddress: identityAddress)
        }
        // A bonded central reading a protected value is told to encrypt, not to pair (Vol 3, Part C, 10.3.1).
        connection.session.linkSecurity.hasLongTermKey = security.bond(on: event.handle) != nil
        // A bonded central's signing state and caching state are back (signed writes also on a
        // link it does not encrypt, Vol 3, Part C, 10.4).
        bondedClients.linkOpened(connection, log: &links.linkLog)
        statistics.connectionsTotal += 1
        logger.event(.connected, .notice, "connected to \(event.peerAddress): \(DeviceLinks.describe(event.parameters))", [
            LogKey.peer: .string(event.peerAddress.description), LogKey.connHandle: .string("\(event.handle)"),
        ])
        links.linkReady(connection)
        eventObserver?(.connected(peer: peer))
        if deviceStarted { device.peerConnected(peer) }
        // Keep advertising while another central may connect.
        startAdvertising(fast: true)
        return connection
    }

    func connectionClosed(handle: UInt16, reason: UInt8, restartAdvertising: Bool = true) {
        guard let connection = links.close(handle) else { return }
        defer { host.linkClosed(handle, reason: reason) }
        // What a bonded central knew of the database, for when it comes back (Vol 3, Part G, 7.1).
        bondedClients.linkClosing(connection)
        security.linkClosed(handle)
        // Indications still outstanding end as `.disconnected`; subscriptions end with the link.
        connection.stage?.close()
        let held = connection.server?.close() ?? []
        subscriptionsEnded(held, peer: connection.peer)
        logger.event(.disconnected, Self.disconnectionLevel(reason), "disconnected from \(connection.peer.address) (reason \(Hex.byte(reason)))", [
            LogKey.peer: .string(connection.peer.address.description), LogKey.connHandle: .string("\(handle)"),
            LogKey.reason: .string(Hex.byte(reason)),
        ])
        eventObserver?(.disconnected(peer: connection.peer, reason: reason))
        if deviceStarted { device.peerDisconnected(connection.peer) }
        guard !isStopping, restartAdvertising else { return }
        // Apple's guidelines: fast advertising for 30 s after every disconnection, even when
        // a slow phase was running for another central.
        startAdvertising(fast: true)
    }

    /// A link lost rather than closed is a warning, so `journalctl -p warning` shows it: the
    /// supervision timeout (0x08), LL response timeout (0x22), MIC failure (0x3D) and a
    /// connection that failed to be established (0x3E) (Core Vol 1, Part F, 1.3); a central
    /// or blemu hanging up is routine.
    static func disconnectionLevel(_ reason: UInt8) -> Logger.Level {
        switch reason {
        case 0x08, 0x22, 0x3D, 0x3E: return .warning
        default: return .notice
        }
    }

    func dropAllConnections(reason: String) {
        guard let parts = madeConnectionParts else { return }
        for handle in parts.links.connections.keys.sorted() {
            connectionClosed(handle: handle, reason: HCIStatus.hardwareFailure)
        }
    }

    /// A link a broadcaster cannot have (it takes no connections): disconnected at once, with a
    /// line within the host's routing budget (a broken controller could report many).
    private func refuseLink(_ event: LEConnectionComplete) {
        if let leftOut = host.routingLog.take(now: scheduler.nowNanoseconds, for: logger) {
            logger.warning("controller reported a link from \(event.peerAddress) to a broadcaster, which takes no connections: disconnecting\(LogBudget.note(leftOut))",
                           metadata: [LogKey.connHandle: "\(event.handle)"])
        }
        hci.send(.disconnect(handle: event.handle, reason: HCIStatus.remoteUserTerminated))
    }
}
