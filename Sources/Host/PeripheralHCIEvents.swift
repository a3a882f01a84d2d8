import BlemuATT
import BlemuConnection
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
        advertising.set = set
        if !deviceStarted {
            deviceStarted = true
            if let broadcaster = advertising.broadcaster {
                broadcaster.start(broadcasting: self)
            } else {
                device.start(context: self)
            }
        }
        advertising.controllerReady()
    }

    func disconnectionCompleted(status: UInt8, handle: UInt16, reason: UInt8) {
        guard status == HCIStatus.success else {
            links.disconnectionFailed(status: status, handle: handle)
            return
        }
        connectionClosed(handle: handle, reason: reason)
    }

    /// An event about one of this device's links.
    func linkEvent(_ event: HCIEvent) {
        switch event {
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
            // Parameters, data length, PHY.
            links.linkEvent(event)
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

    /// The security layer's ways out: SMP PDUs on CID 0x0006, answers to LTK requests.
    func wireSecurity() {
        security.sendSMP = { [weak self] handle, pdu in
            guard let self, let connection = self.connections[handle] else { return }
            connection.sendSecurityManager(pdu[...])
        }
        security.securityChanged = { [weak self] handle, state in
            guard let self, let connection = self.connections[handle] else { return }
            // Security's value as it is; only the host knows whether a bond exists for the peer.
            var linkSecurity = state
            linkSecurity.hasLongTermKey = state.isBonded || self.security.bond(on: handle) != nil
            let wasEncrypted = connection.session.linkSecurity.isEncrypted
            // Set once, where the session of every bearer and the channels read it.
            connection.security.current = linkSecurity
            if state.isEncrypted, !wasEncrypted, let observer = self.eventObserver {
                observer(.encrypted(peer: connection.peer, keySize: state.encryptionKeySize, authenticated: state.isAuthenticated))
            }
            // What a bonded central kept: its caching state, signing, subscriptions.
            self.bondedClients.securityChanged(state, on: connection)
            connection.securitySettled()
        }
        security.pairingEnded = { [weak self] handle in
            self?.connections[handle]?.securitySettled()
        }
        security.pairingCompleted = { [weak self] handle, result in
            guard let self, let observer = self.eventObserver, let connection = self.connections[handle] else { return }
            let named: EventPairingMethod
            switch result.method {
            case .justWorks: named = .justWorks
            case .numericComparison: named = .numericComparison
            case .passkeyEntry: named = .passkeyEntry
            case .outOfBand: named = .outOfBand
            }
            observer(.paired(peer: connection.peer, method: named, keySize: result.encryptionKeySize,
                             secureConnections: result.secureConnections, bonded: result.bonded))
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

    /// Room freed on link `handle`: its channels send what waited, then the device may go on.
    func transmitQueueHasRoom(on handle: UInt16) {
        connections[handle]?.link.transmitQueueHasRoom()
        deviceMayProceed()
    }

    /// Room freed somewhere: a device that was told "queue full" hears `peripheralIsReady`, once.
    func deviceMayProceed() {
        guard deviceWaitingForRoom, deviceStarted else { return }
        deviceWaitingForRoom = false
        device.peripheralIsReady()
    }
}
