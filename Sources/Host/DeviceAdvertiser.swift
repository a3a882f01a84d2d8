import BlemuCore
import BlemuDevice
import BlemuGATT
import BlemuHCI
import BlemuSecurity
import Logging

/// One device's advertising (Vol 6, Part B, 4.4.2; Apple Accessory Design Guidelines): what it
/// advertises (the payload), how fast (a fast phase, then a slow one), from which address (the
/// identity address, or with privacy a resolvable private address renewed on a timer), in
/// which of the controller's sets. The sets themselves are the controller's, shared by every
/// device on it: `PeripheralHost.advertiser` sends the commands.
final class DeviceAdvertiser {
    let host: PeripheralHost
    let configuration: PeripheralConfiguration
    let profile: DeviceProfile
    /// The device's identity address (static random).
    let identityAddress: BluetoothAddress
    /// The device's database, whose absent services leave the advertised UUIDs; nil for a
    /// broadcaster, which has none.
    let database: GATTDatabase?
    /// The device's IRK (privacy): its Security Manager's, or a broadcaster's `BroadcasterIdentity`.
    let resolvingKey: () -> [UInt8]
    let scheduler: TimerScheduling
    var logger: Logger
    /// Whether the device can take another link (advertising waits while it cannot).
    var hasRoomForLink: () -> Bool = { true }
    /// A device that never accepts a connection: advertised non-connectable with the data it
    /// gives, at its own interval, without phases (`BroadcastingDevice`).
    let broadcaster: BroadcastingDevice?

    /// This device's advertising set on the controller (nil until the controller is ready, or
    /// when it had none left).
    var set: UInt8?
    /// The address advertising uses: the identity address, or with privacy the resolvable
    /// private address of the moment (Vol 6, Part B, 1.3.2.2).
    private(set) var address: BluetoothAddress
    /// The address the last successful advertising start used (a changed one needs a restart).
    private(set) var advertisedAddress: BluetoothAddress?
    private var privateAddressTimer: TimerID?
    private var privateAddressRandom = SystemRandomNumberGenerator()
    private(set) var isAdvertising = false {
        didSet { if isAdvertising != oldValue { advertisingChanged?(isAdvertising) } }
    }
    /// Told each time advertising starts or stops (the device's `advertising` events).
    var advertisingChanged: ((Bool) -> Void)?
    /// A start or restart was sent and its answer is outstanding.
    private(set) var requested = false
    /// False after `advertise off` from the control socket: advertising stays off, also after
    /// disconnections, until turned on again.
    private(set) var allowed = true
    /// The interval advertising runs at, while it runs (units of 0.625 ms).
    private(set) var interval: UInt16?
    /// True until the configuration's `startDelay` has passed: no advertising before.
    private(set) var waitingToStart = false
    private var startDelayTimer: TimerID?
    /// A broadcaster's periodic train as last sent to the controller (1.25 ms units), nil for none.
    private(set) var periodicInterval: UInt16?
    /// The periodic interval a broadcaster asked for that the controller cannot send, once
    /// reported (reported again only when the ask changes).
    private var refusedPeriodicInterval: UInt16?
    private(set) var payload: AdvertisingPayload
    /// The TX Power Level the payload carries: the profile's, then the controller's once read.
    private var txPower: Int8?
    private var phaseTimer: TimerID?
    /// The fallback from recorded extended advertising was reported (once).
    private var warnedExtendedFallback = false
    /// The payload built from the name and services that goes out instead of a recorded extended
    /// advertisement the controller cannot carry (`start`); nil when none is in use.
    private var fallbackPayload: AdvertisingPayload?
    /// When the fast phase under way ends (the run loop's clock, nanoseconds).
    private var fastPhaseEnds: UInt64 = 0

    init(host: PeripheralHost, configuration: PeripheralConfiguration, profile: DeviceProfile, identityAddress: BluetoothAddress,
         database: GATTDatabase?, resolvingKey: @escaping () -> [UInt8], broadcaster: BroadcastingDevice? = nil, logger: Logger) {
        self.broadcaster = broadcaster
        self.host = host
        self.configuration = configuration
        self.profile = profile
        self.identityAddress = identityAddress
        self.database = database
        self.resolvingKey = resolvingKey
        scheduler = host.scheduler
        self.logger = logger
        address = identityAddress
        txPower = profile.txPowerLevel
        // A broadcaster's data is its own, read once it has started (`controllerReady`).
        payload = broadcaster != nil ? AdvertisingPayload(advertisingData: [], scanResponseData: [], omitted: [])
            : Self.payload(configuration: configuration, profile: profile, serviceUUIDs: profile.advertisedServices,
                           txPower: profile.txPowerLevel)
        if configuration.startDelay > .zero {
            waitingToStart = true
            startDelayTimer = scheduler.schedule(after: configuration.startDelay) { [weak self] in
                guard let self else { return }
                self.waitingToStart = false
                self.startDelayTimer = nil
                self.start(fast: true)
            }
        }
    }

    /// What the configuration makes advertising leave out or do against the guidelines.
    func warnAboutConfiguration() {
        guard broadcaster == nil else { return }
        for line in profile.advertisingTiming.violations {
            logger.warning("advertising timing: \(line)")
        }
        for line in payload.omitted {
            logger.warning("advertising: \(line) does not fit in 31 + 31 bytes and is left out")
        }
    }

    private var hci: HCIHost { host.hci }

    static func payload(configuration: PeripheralConfiguration, profile: DeviceProfile, serviceUUIDs: [BluetoothUUID],
                        txPower: Int8?) -> AdvertisingPayload {
        if let recorded = profile.recordedAdvertising {
            return AdvertisingPayload(advertisingData: recorded.advertisingData, scanResponseData: recorded.scanResponseData, omitted: [])
        }
        return AdvertisingPayload.build(AdvertisingContent(
            name: configuration.name, serviceUUIDs: serviceUUIDs, appearance: profile.appearance,
            txPowerLevel: txPower))
    }

    /// Lays the advertising data and scan response out again from what is true now: the TX
    /// power (the controller's, once read) and the services the database serves
    /// (`advertisedServiceUUIDs`). The one builder decides what fits.
    private func rebuildPayload() {
        if let broadcaster {
            payload = AdvertisingPayload(advertisingData: broadcaster.advertisingData, scanResponseData: [], omitted: [])
            return
        }
        payload = Self.payload(configuration: configuration, profile: profile, serviceUUIDs: advertisedServiceUUIDs, txPower: txPower)
    }

    // MARK: The controller

    /// The controller is ready and gave this device `set`: its address goes in, the TX power
    /// is read when the payload carries it, then advertising starts fast.
    func controllerReady() {
        guard let set else { return }
        if broadcaster != nil { rebuildPayload() }
        // The identity address, or with privacy the private address of the moment.
        let own = address
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
                    self.txPower = power
                    self.rebuildPayload()
                }
                self.start(fast: true)
            }
        } else {
            start(fast: true)
        }
    }

    /// The controller is gone: advertising with it, and its set.
    func controllerWentAway() {
        setAdvertising(false, log: false)
        set = nil
    }

    /// The controller was reset: it forgot the set and that it advertised.
    func controllerReset() {
        isAdvertising = false
        requested = false
        periodicInterval = nil
        set = nil
    }

    /// The stop begins: no timer of advertising runs on.
    func stopping() {
        cancelPhaseTimer()
        if let timer = privateAddressTimer { scheduler.cancel(timer) }
        privateAddressTimer = nil
        if let timer = startDelayTimer { scheduler.cancel(timer) }
        startDelayTimer = nil
    }

    /// Advertising off (for the stop, whose start cancelled the timers: `stopping`).
    func turnOff() {
        guard let set, isAdvertising || requested else { return }
        host.advertiser.stop(set: set)
        setAdvertising(false, log: true)
    }

    // MARK: On and off

    func setAdvertising(_ on: Bool, log: Bool) {
        requested = false
        if !on {
            interval = nil
            periodicInterval = nil
        }
        guard isAdvertising != on else { return }
        isAdvertising = on
        if log && !on { logger.event(.advertisingStopped, .info, "advertising stopped") }
    }

    /// `advertise on|off` from the control socket; off stays off, also after disconnections, until on.
    func setAllowed(_ allowed: Bool) {
        self.allowed = allowed
        if allowed {
            start(fast: true)
        } else if let set, isAdvertising || requested {
            cancelPhaseTimer()
            host.advertiser.stop(set: set)
            setAdvertising(false, log: true)
        }
    }

    /// Legacy advertising ends when a connection is made (Vol 6, Part B, 4.4.2.4).
    func linkMade() {
        cancelPhaseTimer()
        isAdvertising = false
        requested = false
    }

    /// An extended set stops by itself when a link is made from it (Vol 4, Part E, 7.8.56).
    func setEnded() {
        isAdvertising = false
        interval = nil
        periodicInterval = nil
        requested = false
        cancelPhaseTimer()
    }

    private func cancelPhaseTimer() {
        if let timer = phaseTimer { scheduler.cancel(timer) }
        phaseTimer = nil
    }

    /// Starts (or restarts) advertising, fast for the first phase, when the device can take
    /// another link.
    /// `fastFor`: what is left of a fast phase that runs (a new private address restarts
    /// advertising without starting the fast phase over).
    func start(fast: Bool, fastFor: Duration? = nil) {
        guard hci.isReady, !host.isStopping, allowed, !waitingToStart, !host.resolvingList.changing, let set, hasRoomForLink() else { return }
        if let broadcaster {
            startBroadcasting(set: set, interval: broadcaster.broadcastInterval)
            return
        }
        let timing = profile.advertisingTiming
        let interval = fast ? timing.fastInterval : timing.slowInterval
        if fast, isAdvertising, !requested, self.interval == interval, advertisedAddress == address {
            // Already advertising fast: only the fast phase starts over. Turning advertising off
            // and on would open a gap in which a connecting central is lost.
            scheduleSlowPhase(after: timing.fastDuration)
            return
        }
        cancelPhaseTimer()
        var request = AdvertisingRequest(interval: interval, address: address, advertisingData: payload.advertisingData,
                                         scanResponseData: payload.scanResponseData,
                                         connectableExtended: profile.recordedAdvertising != nil && profile.recordedAdvertisingIsExtended)
        if !host.advertiser.canCarry(request) {
            // A recorded extended advertisement on a controller driven with legacy commands, or
            // too long for a connectable set: the payload built from the name and services instead.
            if !warnedExtendedFallback {
                warnedExtendedFallback = true
                let why = host.advertiser.mode == .legacy ? "needs a controller with LE Extended Advertising"
                    : "is more than a connectable extended set of this controller carries (\(host.advertiser.extendedDataLimit(connectable: true)) bytes, in one AUX_ADV_IND)"
                logger.warning("the recorded extended advertising (\(request.advertisingData.count) bytes) \(why): advertising the name and services in legacy PDUs instead")
            }
            let built = builtPayload()
            fallbackPayload = built
            request = AdvertisingRequest(interval: interval, address: address, advertisingData: built.advertisingData,
                                         scanResponseData: built.scanResponseData)
        } else {
            fallbackPayload = nil
        }
        let wasOn = isAdvertising || requested
        requested = true
        host.advertiser.start(set: set, request, wasOn: wasOn) { [weak self] result in
            // Cancelled: the controller went away or was reset; that path logs for itself.
            guard let self, !self.host.isStopping, result != .cancelled else { return }
            self.requested = false
            guard result.succeeded else {
                // E.g. Command Disallowed or Connection Limit Exceeded while links are up: the
                // controller can take no more; advertising resumes at the next disconnection.
                self.logger.warning("advertising could not start; will retry after a disconnection",
                                    metadata: [LogKey.hciStatus: .string(result.status.map(Hex.byte) ?? "timeout")])
                self.isAdvertising = false
                return
            }
            self.isAdvertising = true
            self.interval = interval
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

    /// A broadcaster's advertising: one interval, non-connectable, its data only. A start while
    /// it runs with the same interval and address does nothing; `restart` is for a change of
    /// the set's parameters that these do not show (legacy or extended PDUs).
    private func startBroadcasting(set: UInt8, interval: UInt16, restart: Bool = false) {
        let request = broadcastRequest(interval: interval)
        if !restart, isAdvertising, !requested, self.interval == interval, advertisedAddress == address,
           periodicInterval == request.periodicInterval { return }
        guard host.advertiser.canCarry(request) else {
            let room = host.advertiser.mode == .legacy ? "31 bytes: it is driven without LE Extended Advertising"
                : "\(host.advertiser.extendedDataLimit(connectable: false)) bytes in an extended set"
            logger.error("broadcast data of \(request.advertisingData.count) bytes does not fit this controller's advertising (\(room)): not advertising")
            return
        }
        let wasOn = isAdvertising || requested
        requested = true
        periodicInterval = request.periodicInterval
        host.advertiser.start(set: set, request, wasOn: wasOn) { [weak self] result in
            guard let self, !self.host.isStopping, result != .cancelled else { return }
            self.requested = false
            guard result.succeeded else {
                self.periodicInterval = nil
                self.logger.warning("broadcasting could not start",
                                    metadata: [LogKey.hciStatus: .string(result.status.map(Hex.byte) ?? "timeout")])
                self.isAdvertising = false
                return
            }
            self.isAdvertising = true
            self.interval = interval
            self.advertisedAddress = request.address
            let train = request.periodicInterval.map { ", a periodic train every \(Double($0) * 1.25) ms" } ?? ""
            self.logger.event(.advertisingStarted, .info,
                              "broadcasting (non-connectable, \(request.usesExtendedPDUs ? "extended" : "legacy") PDUs\(train)) from \(request.address) every \(Double(interval) * 0.625) ms: \(Hex.bytes(request.advertisingData))")
        }
    }

    /// What the broadcaster asks for now. A periodic train the controller cannot send is
    /// reported as an error (once per ask) and left out: the readings still go out in the
    /// advertising.
    private func broadcastRequest(interval: UInt16) -> AdvertisingRequest {
        var periodic = broadcaster?.periodicInterval
        if let wanted = periodic, hci.isReady, let reason = host.advertiser.periodicAdvertisingUnsupportedReason {
            if refusedPeriodicInterval != wanted {
                refusedPeriodicInterval = wanted
                logger.error("periodic advertising every \(Double(wanted) * 1.25) ms asked for, but \(reason): broadcasting without the train")
            }
            periodic = nil
        } else {
            refusedPeriodicInterval = nil
        }
        return AdvertisingRequest(interval: interval, address: address, advertisingData: payload.advertisingData, scanResponseData: [],
                                  connectable: false, periodicInterval: periodic)
    }

    /// The request the controller holds now (its interval and train as sent).
    private func sentBroadcastRequest(interval: UInt16) -> AdvertisingRequest {
        AdvertisingRequest(interval: interval, address: address, advertisingData: payload.advertisingData, scanResponseData: [],
                           connectable: false, periodicInterval: periodicInterval)
    }

    /// The broadcaster's data or interval may have changed: only what differs goes to the
    /// controller. The same bytes send nothing; new bytes go in with LE Set (Extended)
    /// Advertising Data while the set runs (Vol 4, Part E, 7.8.7, 7.8.54: the controller uses
    /// them in the following advertising events); a new interval, or data that moves the set
    /// between legacy and extended PDUs, restarts the set with new parameters.
    func broadcastChanged() {
        guard let broadcaster else { return }
        let old = sentBroadcastRequest(interval: interval ?? broadcaster.broadcastInterval)
        rebuildPayload()
        let new = broadcastRequest(interval: broadcaster.broadcastInterval)
        guard new != old else { return }
        guard hci.isReady, !host.isStopping, let set, isAdvertising || requested else { return }
        if new.interval != old.interval || host.advertiser.needsRestart(from: old, to: new) || !host.advertiser.canCarry(new) {
            // New parameters (interval, legacy or extended PDUs, the periodic train): a restart.
            startBroadcasting(set: set, interval: new.interval, restart: true)
            return
        }
        host.advertiser.update(set: set, advertisingData: new.advertisingData, scanResponseData: nil,
                               extendedPDUs: new.usesExtendedPDUs) { [weak self] command, result in
            guard let self, !result.succeeded, result != .cancelled else { return }
            self.logger.warning("controller refused \(command.name) for the new broadcast data",
                                metadata: [LogKey.hciStatus: .string(result.status.map(Hex.byte) ?? "timeout")])
        }
    }

    private func scheduleSlowPhase(after delay: Duration) {
        if let timer = phaseTimer { scheduler.cancel(timer) }
        fastPhaseEnds = scheduler.nowNanoseconds + UInt64(max(0, delay / .nanoseconds(1)))
        phaseTimer = scheduler.schedule(after: delay) { [weak self] in
            self?.phaseTimer = nil
            if self?.isAdvertising == true { self?.start(fast: false) }
        }
    }

    // MARK: What is advertised

    /// The payload built from the name, the services advertised now and the appearance: what a
    /// recorded extended advertisement the controller cannot carry is replaced with.
    private func builtPayload() -> AdvertisingPayload {
        AdvertisingPayload.build(AdvertisingContent(name: configuration.name, serviceUUIDs: advertisedServiceUUIDs,
                                                    appearance: profile.appearance, txPowerLevel: txPower))
    }

    /// The service UUIDs the payload lists: the profile's, less those whose service is taken out
    /// of the database (`service DEVICE UUID off`), so that a scanner filtering by service (as
    /// apps do) is not sent to a service a central would not find. A UUID the database has no
    /// service of is listed as the profile says.
    var advertisedServiceUUIDs: [BluetoothUUID] {
        guard let database, case let absent = database.absent, !absent.isEmpty else { return profile.advertisedServices }
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
    func contentChanged() -> Bool {
        guard broadcaster == nil else { return false }
        // A recorded advertisement stays as recorded; the payload built in its place follows
        // the services like any device's.
        let old = fallbackPayload ?? payload
        rebuildPayload()
        if fallbackPayload != nil { fallbackPayload = builtPayload() }
        let new = fallbackPayload ?? payload
        let advertisingData = new.advertisingData != old.advertisingData ? new.advertisingData : nil
        let scanResponseData = new.scanResponseData != old.scanResponseData ? new.scanResponseData : nil
        guard advertisingData != nil || scanResponseData != nil else { return false }
        logger.debug("advertising data now \(Hex.bytes(new.advertisingData)), scan response \(Hex.bytes(new.scanResponseData))")
        guard hci.isReady, !host.isStopping, let set, isAdvertising || requested else { return true }
        host.advertiser.update(set: set, advertisingData: advertisingData, scanResponseData: scanResponseData) { [weak self] command, result in
            // Refused: the controller keeps the old data until the next start, which sends it all.
            guard let self, !result.succeeded, result != .cancelled else { return }
            self.logger.warning("controller refused \(command.name) for the new advertising data; the next advertising start sends it",
                                metadata: [LogKey.hciStatus: .string(result.status.map(Hex.byte) ?? "timeout")])
        }
        return true
    }

    // MARK: Privacy (Vol 3, Part C, 10.7; Vol 6, Part B, 1.3.2.2)

    /// A new resolvable private address from the device's IRK, and the timer for the next one
    /// (TGAP(private_addr_int), Vol 3, Part C, Appendix A). Advertising that runs restarts with
    /// it: the controller refuses a new address while connectable advertising is on (Command
    /// Disallowed, Vol 4, Part E, 7.8.4 and 7.8.52), so the set is stopped, given the address
    /// and started again (`Advertiser.start`). A link keeps the address it was made with.
    func renewPrivateAddress() {
        if let timer = privateAddressTimer { scheduler.cancel(timer) }
        let old = address
        address = ResolvablePrivateAddress.make(irk: resolvingKey(), random: &privateAddressRandom)
        privateAddressTimer = scheduler.schedule(after: configuration.privateAddressTimeout) { [weak self] in
            guard let self else { return }
            self.privateAddressTimer = nil
            guard !self.host.isStopping else { return }
            self.renewPrivateAddress()
        }
        logger.event(.addressChanged, .debug,
                     "resolvable private address now \(address) (\(old == identityAddress ? "instead of the identity address" : "was \(old)")); the next in \(configuration.privateAddressTimeout)",
                     ["address": .string(address.description)])
        if let broadcaster {
            // Its data may be made for the address (BTHome's nonce): made anew before the
            // restart below sends it from the new one.
            broadcaster.advertisingAddressChanged()
            rebuildPayload()
        }
        if isAdvertising || requested {
            // In the fast phase, only what is left of it: a short --rpa-timeout must not keep
            // the device advertising fast for good.
            let now = scheduler.nowNanoseconds
            if phaseTimer != nil, interval == profile.advertisingTiming.fastInterval, fastPhaseEnds > now {
                start(fast: true, fastFor: .nanoseconds(Int64(fastPhaseEnds - now)))
            } else {
                start(fast: false)
            }
        }
    }
}
