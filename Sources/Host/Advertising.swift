import BlemuATT
import BlemuCore
import BlemuGATT
import BlemuHCI
import BlemuL2CAP
import Logging

/// Advertising: when, how fast, and what (Vol 6, Part B, 4.4.2; Apple Accessory Design Guidelines).
extension Peripheral {
    func setAdvertising(_ on: Bool, log: Bool) {
        advertisingRequested = false
        guard isAdvertising != on else { return }
        isAdvertising = on
        if log && !on { logger.event(.advertisingStopped, .info, "advertising stopped") }
    }

    /// Starts (or restarts) advertising, fast for the first phase, when the device can take
    /// another link.
    func startAdvertising(fast: Bool) {
        guard hci.isReady, !isStopping, connections.count < configuration.maxConnections else { return }
        if let timer = advertisingPhaseTimer { scheduler.cancel(timer) }
        advertisingPhaseTimer = nil
        let timing = device.profile.advertisingTiming
        let interval = fast ? timing.fastInterval : timing.slowInterval
        if isAdvertising || advertisingRequested {
            hci.send(.leSetAdvertisingEnable(false))
        }
        advertisingRequested = true
        hci.send(.leSetAdvertisingParameters(intervalMin: interval, intervalMax: interval, ownAddressType: .randomDevice))
        hci.send(.leSetAdvertisingData(advertisingPayload.advertisingData))
        hci.send(.leSetScanResponseData(advertisingPayload.scanResponseData))
        hci.send(.leSetAdvertisingEnable(true)) { [weak self] result in
            // Cancelled: the controller went away or was reset; that path logs for itself.
            guard let self, !self.isStopping, result != .cancelled else { return }
            self.advertisingRequested = false
            guard result.succeeded else {
                // E.g. Command Disallowed or Connection Limit Exceeded while links are up: the
                // controller can take no more; advertising resumes at the next disconnection.
                self.logger.warning("advertising could not start; will retry after a disconnection",
                                    metadata: [LogKey.hciStatus: .string(result.status.map(Hex.byte) ?? "timeout")])
                self.isAdvertising = false
                return
            }
            self.isAdvertising = true
            let ms = Double(interval) * 0.625
            self.logger.event(.advertisingStarted, .info,
                              "advertising as \"\(self.configuration.name)\" (\(self.address)) every \(ms) ms")
            if fast {
                self.advertisingPhaseTimer = self.scheduler.schedule(after: timing.fastDuration) { [weak self] in
                    self?.advertisingPhaseTimer = nil
                    if self?.isAdvertising == true { self?.startAdvertising(fast: false) }
                }
            }
        }
    }
}
