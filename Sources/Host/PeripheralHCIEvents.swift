import BlemuATT
import BlemuCore
import BlemuGATT
import BlemuHCI
import BlemuL2CAP
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
        host.advertiser.setAddress(address) { [weak self] result in
            guard let self, !result.succeeded, result != .cancelled else { return }
            self.logger.error("controller refused the random address \(self.address)",
                              metadata: [LogKey.hciStatus: .string(result.status.map(Hex.byte) ?? "timeout")])
        }
        // TX Power Level in the advertisement is the controller's advertising power
        // (Vol 4, Part E, 7.8.6), so a phone can estimate path loss from RSSI.
        if profile.txPowerLevel != nil {
            host.advertiser.readTxPower(set: set, interval: profile.advertisingTiming.fastInterval) { [weak self] power in
                guard let self else { return }
                if let power { self.rebuildAdvertisingPayload(txPower: power) }
                self.startAdvertising(fast: true)
            }
        } else {
            startAdvertising(fast: true)
        }
    }

    func disconnectionCompleted(status: UInt8, handle: UInt16, reason: UInt8) {
        guard status == HCIStatus.success else {
            if let leftOut = linkLog.take(now: scheduler.nowNanoseconds) {
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
        case let .leLongTermKeyRequest(handle, _, _):
            longTermKeyRequested(handle: handle)
        default:
            break
        }
    }

    /// The one place that decides whether a link gets its key (Vol 4, Part E, 7.7.65.5). No
    /// pairing exists yet, so no bond and no key: the negative reply (7.8.26) tells the central
    /// at once (PIN or Key Missing), where silence would leave it waiting for its timeout.
    func longTermKeyRequested(handle: UInt16) {
        logger.info("central asked to encrypt the link; no key is held for it: negative reply",
                    metadata: [LogKey.connHandle: "\(handle)"])
        hci.send(.leLongTermKeyRequestNegativeReply(handle: handle))
    }

    /// Room freed somewhere: a device that was told "queue full" hears `peripheralIsReady`, once.
    func deviceMayProceed() {
        guard deviceWaitingForRoom, deviceStarted else { return }
        deviceWaitingForRoom = false
        device.peripheralIsReady()
    }
}
