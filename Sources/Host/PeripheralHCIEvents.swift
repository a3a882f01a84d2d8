import BlemuATT
import BlemuCore
import BlemuGATT
import BlemuHCI
import BlemuL2CAP
import BlemuSecurity
import Logging

// MARK: - HCI events

extension Peripheral {
    /// The controller is ready; `set` is this device's advertising set (nil: none was left,
    /// which the host reports as fatal).
    func hostReady(advertisingSet set: UInt8?) {
        guard !isStopping else { return }
        advertisingSet = set
        if !deviceStarted {
            deviceStarted = true
            device.start(context: self)
        }
        guard let set else { return }
        // The identity address, or with privacy the private address of the moment.
        let own = advertisingAddress
        host.advertiser.setAddress(own) { [weak self] result in
            guard let self, !result.succeeded, result != .cancelled else { return }
            self.logger.error("controller refused the random address \(own)",
                              metadata: [LogKey.hciStatus: .string(result.status.map(Hex.byte) ?? "timeout")])
        }
        // TX Power Level in the advertisement is the controller's advertising power
        // (Vol 4, Part E, 7.8.6), so a phone can estimate path loss from RSSI.
        if profile.txPowerLevel != nil {
            host.advertiser.readTxPower(set: set, interval: profile.advertisingTiming.fastInterval) { [weak self] power in
                guard let self else { return }
                if let power {
                    self.advertisedTxPower = power
                    self.rebuildAdvertisingPayload()
                }
                self.startAdvertising(fast: true)
            }
        } else {
            startAdvertising(fast: true)
        }
    }

    func disconnectionCompleted(status: UInt8, handle: UInt16, reason: UInt8) {
        guard status == HCIStatus.success else {
            if let leftOut = linkLog.take(now: scheduler.nowNanoseconds, for: logger) {
                logger.warning("disconnection failed\(LogBudget.note(leftOut))",
                               metadata: [LogKey.connHandle: "\(handle)", LogKey.hciStatus: .string(Hex.byte(status))])
            }
            return
        }
        connectionClosed(handle: handle, reason: reason)
    }

    /// An event about one of this device's links.
    func linkEvent(_ event: HCIEvent) {
        switch event {
        case let .leConnectionUpdateComplete(status, handle, parameters):
            guard status == HCIStatus.success, let connection = connections[handle] else { return }
            connection.parameters = parameters
            // A link's state: with the link's keys, so `journalctl BLEMU_CONN_HANDLE=` finds it.
            logger.event(.stateChanged, .info, "connection parameters now \(Self.describe(parameters))", [
                LogKey.peer: .string(connection.peer.address.description), LogKey.connHandle: .string("\(handle)"),
            ])
        case let .leRemoteConnectionParameterRequest(handle, intervalMin, intervalMax, latency, timeout):
            // Vol 6, Part B, 5.1.7: accept what the Core allows, refuse the rest with 0x3B.
            let asked = ConnectionParameters(intervalMin: intervalMin, intervalMax: intervalMax,
                                             peripheralLatency: latency, supervisionTimeout: timeout)
            if asked.coreViolations.isEmpty {
                hci.send(.leRemoteConnectionParameterRequestReply(handle: handle, intervalMin: intervalMin,
                                                                  intervalMax: intervalMax, latency: latency, timeout: timeout))
            } else {
                logger.info("refused connection parameters: \(asked.coreViolations.joined(separator: "; "))",
                            metadata: [LogKey.connHandle: "\(handle)"])
                hci.send(.leRemoteConnectionParameterRequestNegativeReply(handle: handle))
            }
        case let .leDataLengthChange(handle, maxTx, _, maxRx, _):
            logger.debug("data length now \(maxTx) out, \(maxRx) in", metadata: [LogKey.connHandle: "\(handle)"])
        case let .lePHYUpdateComplete(status, handle, tx, rx):
            logger.debug("PHY update: status \(Hex.byte(status)), tx \(tx), rx \(rx)", metadata: [LogKey.connHandle: "\(handle)"])
        case let .leLongTermKeyRequest(handle, randomNumber, encryptedDiversifier):
            // The one place that decides whether a link gets its key (Vol 4, Part E, 7.7.65.5):
            // the pairing under way or a bond, else the negative reply (7.8.26), at once, so the
            // central is not left waiting for its timeout.
            security.longTermKeyRequested(on: handle, randomNumber: randomNumber, encryptedDiversifier: encryptedDiversifier)
        case let .encryptionChange(status, handle, enabled):
            security.encryptionChanged(on: handle, status: status, enabled: enabled != 0)
            checkKeySize(handle, status: status, enabled: enabled != 0)
        case let .encryptionChangeV2(status, handle, enabled, keySize):
            security.encryptionChanged(on: handle, status: status, enabled: enabled != 0, keySize: keySize)
        case let .encryptionKeyRefreshComplete(status, handle):
            security.encryptionChanged(on: handle, status: status, enabled: true, refresh: true)
            checkKeySize(handle, status: status, enabled: true)
        default:
            break
        }
    }

    /// Encryption Change (v1) does not say the key size: ask the controller (Vol 4, Part E,
    /// 7.5.7), so the link's security holds what the controller uses, not what was negotiated.
    func checkKeySize(_ handle: UInt16, status: UInt8, enabled: Bool) {
        guard status == HCIStatus.success, enabled else { return }
        hci.send(.readEncryptionKeySize(handle: handle)) { [weak self] result in
            guard let self, case .complete(let parameters) = result,
                  let answer = try? EncryptionKeySizeReturn(returnParameters: parameters),
                  answer.status == HCIStatus.success, answer.handle == handle else { return }
            self.security.keySizeRead(on: handle, keySize: answer.keySize)
        }
    }

    /// Vol 3, Part G, 7.1: a bonded client whose database changed while it was disconnected
    /// gets Service Changed when it comes back (the range unknown here: all of it), if it
    /// enabled the indication; confirming it makes a robust-caching client change-aware.
    func tellOfChangesWhileAway(_ bond: Bond, on connection: Connection) {
        guard let known = bond.databaseHash, known != database.hash,
              connection.server.isSubscribed(standard.serviceChanged, indications: true) else { return }
        let outcome = connection.faultStage.indicateServiceChanged(standard.serviceChanged, range: 0x0001...0xFFFF)
        logger.event(.stateChanged, .notice,
                     "the database changed while \(connection.peer.address) was away: Service Changed 0x0001-0xFFFF \(outcome == .queued ? "indicated" : "not sent (\(outcome))")",
                     [LogKey.peer: .string(connection.peer.address.description), LogKey.connHandle: .string("\(connection.peer.connectionHandle)")])
    }

    /// The security layer's ways out: SMP PDUs on CID 0x0006, answers to LTK requests.
    func wireSecurity() {
        security.sendSMP = { [weak self] handle, pdu in
            guard let self, let connection = self.connections[handle] else { return }
            _ = connection.link.send(cid: L2CAPChannel.securityManager, pdu[...], priority: .required)
        }
        security.securityChanged = { [weak self] handle, state in
            guard let self, let connection = self.connections[handle] else { return }
            // Security's value as it is; only the host knows whether a bond exists for the peer.
            var linkSecurity = state
            linkSecurity.hasLongTermKey = state.isBonded || self.security.bond(on: handle) != nil
            connection.server.linkSecurity = linkSecurity
            // Bonded now (paired, or encrypted with its bond): its caching state is kept with the bond.
            if state.isBonded {
                self.security.cachingStateKnown(features: self.standard.features(on: handle),
                                                changeAware: connection.server.isChangeAware, on: handle)
            }
            // A pairing that just made a bond with the central's CSRK: its signed writes verify from now on.
            if connection.server.signing == nil { connection.server.signing = self.signingState(on: handle) }
            // Encrypted with a bond's key: the subscriptions it left are back (Vol 3, Part G, 3.3.3.3).
            if state.isEncrypted, state.isBonded, let bond = self.security.bond(on: handle) {
                if !bond.clientConfigurations.isEmpty { connection.server.restoreClientConfigurations(bond.clientConfigurations) }
                self.tellOfChangesWhileAway(bond, on: connection)
                // A new bond keeps the subscriptions made before the pairing finished.
                self.security.clientConfigurationsChanged(connection.server.clientConfigurationValues, on: handle)
            }
        }
        security.bondSaved = { [weak self] bond in
            guard let self else { return }
            self.host.bondSaved(bond, by: self)
        }
        security.answerKeyRequest = { [weak self] handle, key in
            guard let self else { return }
            if let key {
                self.hci.send(.leLongTermKeyRequestReply(handle: handle, key: key))
            } else {
                self.hci.send(.leLongTermKeyRequestNegativeReply(handle: handle))
            }
        }
    }

    /// A bonded central's Client Supported Features and change-awareness are back when its link
    /// opens (Vol 3, Part G, 2.5.2.1): a robust-caching client that was change-unaware when it
    /// left, or whose database changed while it was away (another Database Hash), gets Database
    /// Out Of Sync until it reads the hash or confirms Service Changed. Done at once, before
    /// encryption, so the client's first request already sees it.
    func restoreCachingState(on connection: Connection) {
        guard let bond = security.bond(on: connection.handle), bond.clientSupportedFeatures != 0 else { return }
        standard.restoreFeatures(bond.clientSupportedFeatures, on: connection.handle)
        let server = connection.server
        server.clientSupportsRobustCaching = bond.clientSupportedFeatures & 0x01 != 0
        let changedWhileAway = bond.databaseHash.map { $0 != database.hash } ?? false
        if server.clientSupportsRobustCaching && (!bond.changeAware || changedWhileAway) {
            server.becomeChangeUnaware()
            // A central sets the pace of its connections: budgeted.
            guard let leftOut = linkLog.take(now: scheduler.nowNanoseconds, for: logger) else { return }
            logger.info("\(connection.peer.address) is a bonded robust-caching client \(changedWhileAway ? "whose database changed while it was away" : "that left change-unaware"): Database Out Of Sync until it reads the Database Hash or confirms Service Changed\(LogBudget.note(leftOut))",
                        metadata: [LogKey.peer: .string(connection.peer.address.description), LogKey.connHandle: .string("\(connection.handle)")])
        }
    }

    /// The CSRK and last SignCounter of the bond of the central on `handle`, if it gave a CSRK.
    func signingState(on handle: UInt16) -> ATTSigningState? {
        guard let bond = security.bond(on: handle), let key = bond.signatureKey else { return nil }
        return ATTSigningState(signatureKey: key, lastCounter: bond.signCounter)
    }

    /// Room freed somewhere: a device that was told "queue full" hears `peripheralIsReady`, once.
    func deviceMayProceed() {
        guard deviceWaitingForRoom, deviceStarted else { return }
        deviceWaitingForRoom = false
        device.peripheralIsReady()
    }
}
