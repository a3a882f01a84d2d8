import BlemuATT
import BlemuCore
import BlemuGATT
import BlemuHCI
import BlemuL2CAP
import BlemuSecurity
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
    /// `fastFor`: what is left of a fast phase that runs (a new private address restarts
    /// advertising without starting the fast phase over).
    func startAdvertising(fast: Bool, fastFor: Duration? = nil) {
        guard hci.isReady, !isStopping, advertisingAllowed, !host.resolvingList.changing, let set = advertisingSet,
              connections.count < configuration.maxConnections else { return }
        let timing = profile.advertisingTiming
        let interval = fast ? timing.fastInterval : timing.slowInterval
        if fast, isAdvertising, !advertisingRequested, advertisingInterval == interval, advertisedAddress == advertisingAddress {
            // Already advertising fast: only the fast phase starts over. Turning advertising off
            // and on would open a gap in which a connecting central is lost.
            scheduleSlowPhase(after: timing.fastDuration)
            return
        }
        if let timer = advertisingPhaseTimer { scheduler.cancel(timer) }
        advertisingPhaseTimer = nil
        let request = AdvertisingRequest(interval: interval, address: advertisingAddress,
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
            let changed = self.advertisedAddress != request.address
            self.advertisedAddress = request.address
            // A new private address is worth a line; the same one at the slow phase is not.
            if fast || changed {
                let kind = self.configuration.privacy ? ", a resolvable private address" : ""
                self.logger.event(.advertisingStarted, .info,
                                  "advertising as \"\(self.configuration.name)\" (\(request.address)\(kind)) every \(ms) ms")
            }
            if fast { self.scheduleSlowPhase(after: fastFor ?? timing.fastDuration) }
        }
    }

    private func scheduleSlowPhase(after delay: Duration) {
        if let timer = advertisingPhaseTimer { scheduler.cancel(timer) }
        fastPhaseEnds = scheduler.nowNanoseconds + UInt64(max(0, delay / .nanoseconds(1)))
        advertisingPhaseTimer = scheduler.schedule(after: delay) { [weak self] in
            self?.advertisingPhaseTimer = nil
            if self?.isAdvertising == true { self?.startAdvertising(fast: false) }
        }
    }

    // MARK: Privacy (Vol 3, Part C, 10.7; Vol 6, Part B, 1.3.2.2)

    /// A new resolvable private address from the device's IRK, and the timer for the next one
    /// (TGAP(private_addr_int), Vol 3, Part C, Appendix A). Advertising that runs restarts with
    /// it: the controller refuses a new address while connectable advertising is on (Command
    /// Disallowed, Vol 4, Part E, 7.8.4 and 7.8.52), so the set is stopped, given the address
    /// and started again (`Advertiser.start`). A link keeps the address it was made with.
    func renewPrivateAddress() {
        if let timer = privateAddressTimer { scheduler.cancel(timer) }
        let old = advertisingAddress
        advertisingAddress = ResolvablePrivateAddress.make(irk: security.identity.resolvingKey, random: &privateAddressRandom)
        privateAddressTimer = scheduler.schedule(after: configuration.privateAddressTimeout) { [weak self] in
            guard let self else { return }
            self.privateAddressTimer = nil
            guard !self.isStopping else { return }
            self.renewPrivateAddress()
        }
        logger.event(.addressChanged, .debug,
                     "resolvable private address now \(advertisingAddress) (\(old == address ? "instead of the identity address" : "was \(old)")); the next in \(configuration.privateAddressTimeout)",
                     ["address": .string(advertisingAddress.description)])
        if isAdvertising || advertisingRequested {
            // In the fast phase, only what is left of it: a short --rpa-timeout must not keep
            // the device advertising fast for good.
            let now = scheduler.nowNanoseconds
            if advertisingPhaseTimer != nil, advertisingInterval == profile.advertisingTiming.fastInterval, fastPhaseEnds > now {
                startAdvertising(fast: true, fastFor: .nanoseconds(Int64(fastPhaseEnds - now)))
            } else {
                startAdvertising(fast: false)
            }
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
