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
        if !on { advertisingInterval = nil }
        guard isAdvertising != on else { return }
        isAdvertising = on
        if log && !on { logger.event(.advertisingStopped, .info, "advertising stopped") }
    }

    /// Starts (or restarts) advertising, fast for the first phase, when the device can take
    /// another link.
    func startAdvertising(fast: Bool) {
        guard hci.isReady, !isStopping, advertisingAllowed, let set = advertisingSet,
              connections.count < configuration.maxConnections else { return }
        let timing = profile.advertisingTiming
        let interval = fast ? timing.fastInterval : timing.slowInterval
        if fast, isAdvertising, !advertisingRequested, advertisingInterval == interval {
            // Already advertising fast: only the fast phase starts over. Turning advertising off
            // and on would open a gap in which a connecting central is lost.
            scheduleSlowPhase(after: timing.fastDuration)
            return
        }
        if let timer = advertisingPhaseTimer { scheduler.cancel(timer) }
        advertisingPhaseTimer = nil
        let request = AdvertisingRequest(interval: interval, address: address,
                                         advertisingData: advertisingPayload.advertisingData,
                                         scanResponseData: advertisingPayload.scanResponseData)
        let wasOn = isAdvertising || advertisingRequested
        advertisingRequested = true
        host.advertiser.start(set: set, request, wasOn: wasOn) { [weak self] result in
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
            self.advertisingInterval = interval
            let ms = Double(interval) * 0.625
            self.logger.event(.advertisingStarted, .info,
                              "advertising as \"\(self.configuration.name)\" (\(self.address)) every \(ms) ms")
            if fast { self.scheduleSlowPhase(after: timing.fastDuration) }
        }
    }

    private func scheduleSlowPhase(after delay: Duration) {
        if let timer = advertisingPhaseTimer { scheduler.cancel(timer) }
        advertisingPhaseTimer = scheduler.schedule(after: delay) { [weak self] in
            self?.advertisingPhaseTimer = nil
            if self?.isAdvertising == true { self?.startAdvertising(fast: false) }
        }
    }

    /// An extended set stops by itself when a link is made from it (Vol 4, Part E, 7.8.56).
    func advertisingSetEnded() {
        isAdvertising = false
        advertisingInterval = nil
        advertisingRequested = false
        if let timer = advertisingPhaseTimer { scheduler.cancel(timer) }
        advertisingPhaseTimer = nil
    }
}
