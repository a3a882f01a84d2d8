import BlemuATT
import BlemuCore
import BlemuCrypto
import BlemuGATT
import BlemuHCI
import BlemuL2CAP
import BlemuSMP
import Logging

/// Links to centrals: opening, closing, and the parameters the device prefers.
extension Peripheral {
    func connectionAttemptFailed(status: UInt8) {
        if let leftOut = linkLog.take(now: scheduler.nowNanoseconds, for: logger) {
            logger.warning("connection attempt failed\(LogBudget.note(leftOut))", metadata: [LogKey.hciStatus: .string(Hex.byte(status))])
        }
    }

    /// A link made from this device's advertising (the host routed it here).
    func connectionOpened(_ event: LEConnectionComplete, fromAdvertising: Bool) {
        // Legacy advertising ends when a connection is made (Vol 6, Part B, 4.4.2.4).
        if let timer = advertisingPhaseTimer { scheduler.cancel(timer) }
        advertisingPhaseTimer = nil
        isAdvertising = false
        advertisingRequested = false
        guard event.role == 0x01 else {
            if let leftOut = linkLog.take(now: scheduler.nowNanoseconds, for: logger) {
                logger.warning("link \(event.handle) opened in the central role; disconnecting\(LogBudget.note(leftOut))")
            }
            hci.send(.disconnect(handle: event.handle, reason: HCIStatus.remoteUserTerminated))
            return
        }
        guard connections.count < configuration.maxConnections else {
            // A controller that takes more links than the device allows cannot make memory grow:
            // the extra link is closed at once with Remote Device Terminated due to Low Resources.
            if let leftOut = linkLog.take(now: scheduler.nowNanoseconds, for: logger) {
                logger.warning("link \(event.handle) from \(event.peerAddress) refused: \(connections.count) links open, the limit is \(configuration.maxConnections)\(LogBudget.note(leftOut))",
                               metadata: [LogKey.connHandle: "\(event.handle)", LogKey.peer: .string(event.peerAddress.description)])
            }
            statistics.linksRefused += 1
            hci.send(.disconnect(handle: event.handle, reason: HCIStatus.remoteDeviceTerminatedLowResources))
            return
        }
        let peer = ATTPeer(connectionHandle: event.handle, address: event.peer)
        let connection = makeLink(event, peer: peer)
        let server = connection.server
        connections[event.handle] = connection
        hci.openLink(event.handle)
        host.linkOpened(event.handle, by: self)
        // Peer_Address_Type: 0x01 random, 0x03 random identity (Vol 4, Part E, 7.7.65.10). With
        // 0x02/0x03 the controller resolved the central's private address with the resolving
        // list: the bond is looked up by the identity; pairing uses the address of the
        // connection (the private one, Vol 3, Part H, 2.2.3). Else the host resolves with ah().
        let peerAddress = event.peer
        if event.peerIdentityResolved {
            let overTheAir = event.peerResolvablePrivateAddress.map { LEAddress($0, isRandom: true) } ?? peerAddress
            security.linkOpened(event.handle, peer: overTheAir, local: advertisedAddress ?? advertisingAddress,
                                resolvedIdentity: peerAddress)
            logger.info("controller resolved \(overTheAir.address) to identity \(event.peerAddress) (resolving list)",
                        metadata: [LogKey.connHandle: .string("\(event.handle)")])
        } else {
            security.linkOpened(event.handle, peer: peerAddress, local: advertisedAddress ?? advertisingAddress)
        }
        // A bonded central reading a protected value is told to encrypt, not to pair (Vol 3, Part C, 10.3.1).
        server.linkSecurity.hasLongTermKey = security.bond(on: event.handle) != nil
        // A bonded central may sign writes on a link it does not encrypt (Vol 3, Part C, 10.4).
        server.signing = signingState(on: event.handle)
        restoreCachingState(on: connection)
        statistics.connectionsTotal += 1
        logger.event(.connected, .notice, "connected to \(event.peerAddress): \(Self.describe(event.parameters))", [
            LogKey.peer: .string(event.peerAddress.description), LogKey.connHandle: .string("\(event.handle)"),
        ])
        if hci.info.supportsDataLengthExtension {
            hci.send(.leSetDataLength(handle: event.handle))
        }
        connection.parameterTimer = scheduler.schedule(after: configuration.parameterUpdateDelay) { [weak self, weak connection] in
            guard let self, let connection else { return }
            connection.parameterTimer = nil
            self.requestPreferredParameters(connection)
        }
        if deviceStarted { device.peerConnected(peer) }
        // Keep advertising while another central may connect.
        startAdvertising(fast: true)
    }

    func connectionClosed(handle: UInt16, reason: UInt8, restartAdvertising: Bool = true) {
        guard let connection = connections.removeValue(forKey: handle) else { return }
        hci.closeLink(handle)
        defer { host.linkClosed(handle) }
        if let timer = connection.parameterTimer { scheduler.cancel(timer) }
        connection.link.close()
        // What a bonded central knew of the database, for when it comes back (Vol 3, Part G, 7.1).
        security.databaseHashKnown(database.hash, on: handle)
        security.cachingStateKnown(features: standard.features(on: handle), changeAware: connection.server.isChangeAware, on: handle)
        security.linkClosed(handle)
        standard.connectionClosed(handle)
        // Indications still outstanding end as `.disconnected`; subscriptions end with the link.
        connection.faultStage.close()
        let held = connection.server.close()
        subscriptionsEnded(held, peer: connection.peer)
        logger.event(.disconnected, Self.disconnectionLevel(reason), "disconnected from \(connection.peer.address) (reason \(Hex.byte(reason)))", [
            LogKey.peer: .string(connection.peer.address.description), LogKey.connHandle: .string("\(handle)"),
            LogKey.reason: .string(Hex.byte(reason)),
        ])
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

    /// "interval 30.0 ms, latency 0, timeout 720 ms": units of 1.25 ms and 10 ms (Vol 4, Part E, 7.7.65.1).
    static func describe(_ parameters: LinkParameters) -> String {
        "interval \(Double(parameters.interval) * 1.25) ms, latency \(parameters.latency), timeout \(Int(parameters.supervisionTimeout) * 10) ms"
    }

    func dropAllConnections(reason: String) {
        for handle in connections.keys.sorted() {
            connectionClosed(handle: handle, reason: HCIStatus.hardwareFailure)
        }
    }

    /// Vol 3, Part A, 4.20: the peripheral asks for its preferred parameters when the link's
    /// do not match them.
    /// The device's preferred parameters, or the recommended ones when the device's break the Core rules.
    var preferredParameters: ConnectionParameters {
        let asked = profile.connectionParameters
        return asked.coreViolations.isEmpty ? asked : .recommended
    }

    func requestPreferredParameters(_ connection: Connection) {
        let preferred = preferredParameters
        let current = connection.parameters
        if (preferred.intervalMin...preferred.intervalMax).contains(current.interval),
           current.latency == preferred.peripheralLatency, current.supervisionTimeout == preferred.supervisionTimeout {
            return
        }
        logger.info("asking for connection parameters \(preferred)", metadata: [LogKey.connHandle: "\(connection.handle)"])
        connection.link.requestConnectionParameters(preferred)
    }
}
