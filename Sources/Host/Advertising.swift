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

    // MARK: What is advertised

    /// The service UUIDs the payload lists: the profile's, less those whose service is taken out
    /// of the database (`service DEVICE UUID off`), so that a scanner filtering by service (as
    /// apps do) is not sent to a service a central would not find. A UUID the database has no
    /// service of is listed as the profile says.
    var advertisedServiceUUIDs: [BluetoothUUID] {
        let absent = database.absent
        guard !absent.isEmpty else { return profile.advertisedServices }
        return profile.advertisedServices.filter { uuid in
            !absent.contains { $0.uuid == uuid }
                || database.services.contains { $0.uuid == uuid && database.isPresent($0) }
        }
    }

    /// What the payload is made of changed (a service taken out or put back): it is laid out
    /// again and, when advertising is on or starting, only the payloads that changed are sent to
    /// the controller without stopping it (`Advertiser.update`); otherwise the next start carries
    /// them. Returns whether either payload changed.
    @discardableResult
    func advertisingContentChanged() -> Bool {
        let old = advertisingPayload
        rebuildAdvertisingPayload()
        let new = advertisingPayload
        let advertisingData = new.advertisingData != old.advertisingData ? new.advertisingData : nil
        let scanResponseData = new.scanResponseData != old.scanResponseData ? new.scanResponseData : nil
        guard advertisingData != nil || scanResponseData != nil else { return false }
        logger.debug("advertising data now \(Hex.bytes(new.advertisingData)), scan response \(Hex.bytes(new.scanResponseData))")
        guard hci.isReady, !isStopping, let set = advertisingSet, isAdvertising || advertisingRequested else { return true }
        host.advertiser.update(set: set, advertisingData: advertisingData, scanResponseData: scanResponseData) { [weak self] command, result in
            // Refused: the controller keeps the old data until the next start, which sends it all.
            guard let self, !result.succeeded, result != .cancelled else { return }
            self.logger.warning("controller refused \(command.name) for the new advertising data; the next advertising start sends it",
                                metadata: [LogKey.hciStatus: .string(result.status.map(Hex.byte) ?? "timeout")])
        }
        return true
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
