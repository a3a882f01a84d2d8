import BlemuATT
import BlemuConnection
import BlemuCore
import BlemuCrypto
import BlemuDevice
import BlemuGATT
import BlemuHCI
import BlemuL2CAP
import BlemuSMP
import BlemuSecurity
import Logging

/// One emulated device on a controller: its database, its links, its advertising, and the
/// device's view of the stack (`DeviceContext`). Several share one controller through their
/// `PeripheralHost`.
public final class Peripheral {
    public let device: Device
    public let configuration: PeripheralConfiguration
    /// The device's profile with the configuration's overrides.
    public let profile: DeviceProfile
    /// The controller this device is on, shared with the other devices on it.
    public let host: PeripheralHost
    public let hci: HCIHost
    /// The identity address (static random): what centrals bond with.
    public let address: BluetoothAddress
    /// The device's advertising: payload, phases, address, set.
    let advertising: DeviceAdvertiser
    public internal(set) var statistics = PeripheralStatistics()
    /// What the control socket may do to the device, and what only it decides (authorization
    /// answers, planned faults).
    public private(set) lazy var control = PeripheralControl(of: self, faults: faults)
    /// Faults the control socket planned, applied by every link's fault stage.
    let faults = FaultPlan()
    public var logger: Logger {
        didSet {
            guard let parts = madeConnectionParts else { advertising.logger = logger; return }
            parts.links.logger = logger
            parts.bondedClients.logger = logger
            advertising.logger = logger
            watchRequests()
        }
    }

    /// The device's clock and timers (`DeviceContext`): the host's, or a fleet's `TimerWheel`
    /// for its model updates. The host's own timers (advertising, links, security) use
    /// `host.scheduler`, always exact.
    public let scheduler: TimerScheduling
    /// What only a device that takes connections has (its GATT database, Security Manager and
    /// bonds, links): made here for a connectable device; nil for a broadcaster, whose paths
    /// (advertising and its timers, the control socket's `list`, `set`, `advertise`, `watch`,
    /// the stop) never reach them. `connectionParts` reads them.
    @exclusivity(unchecked) private(set) var madeConnectionParts: ConnectionParts?
    /// The key of a broadcaster's resolvable private addresses (`--privacy`), from the identity
    /// file as a connectable device's Security Manager has it; nil for a connectable device.
    private let broadcasterIdentity: BroadcasterIdentity?
    var deviceStarted = false
    var deviceWaitingForRoom = false
    /// What a device's `notify` encodes into, reused for every notification.
    var notificationValue = ValueBuffer()
    /// `att-error` and `write` events: one a request, so a central sets their pace.
    var requestLog = LogBudget(burst: 100, window: .seconds(10))
    /// Hears every `DeviceEvent` of this device, as it happens (the control socket's `watch`).
    /// Nil while nobody watches: then no event is built, and the links' servers do not report
    /// reads and writes at all.
    public var eventObserver: ((DeviceEvent) -> Void)? {
        didSet {
            isObserved = eventObserver != nil
            watchRequests()
        }
    }
    /// `eventObserver != nil`, as the notification path checks it: a Bool costs no retain, and
    /// (changed only as watchers come and go, never while read) no run-time exclusivity check.
    @exclusivity(unchecked) private(set) var isObserved = false

    /// A device alone on its controller (`output` writes to it).
    public convenience init(device: Device, configuration: PeripheralConfiguration, scheduler: TimerScheduling,
                            logger: Logger, output: @escaping (UInt8, ArraySlice<UInt8>) -> Bool) throws(GATTDatabaseError) {
        let controller = ControllerHost(controller: configuration.controller, scheduler: scheduler, logger: logger,
                                        transmitBufferCapacity: PeripheralHost.largestPDU, output: output)
        try self.init(device: device, configuration: configuration, host: PeripheralHost(on: controller), logger: logger)
    }

    /// A device that joins `host`'s controller, beside the devices already on it. A broadcaster
    /// (`BroadcastingDevice`) gets the lean host: advertising, logging, its settings and events,
    /// and no GATT database, Security Manager, bonds or links (`takesConnections` false).
    /// `deviceScheduler` is what the device schedules its own timers on (nil: the host's).
    public init(device: Device, configuration: PeripheralConfiguration, host: PeripheralHost,
                logger: Logger, deviceScheduler: TimerScheduling? = nil) throws(GATTDatabaseError) {
        self.device = device
        self.configuration = configuration
        self.host = host
        self.scheduler = deviceScheduler ?? host.scheduler
        hci = host.hci
        var logger = logger
        logger[metadataKey: LogKey.device] = .string(type(of: device).deviceName)
        logger[metadataKey: LogKey.controller] = .string(configuration.controller)
        logger[metadataKey: LogKey.name] = .string(configuration.name)
        self.logger = logger
        address = PeripheralConfiguration.identityAddress(deviceName: type(of: device).deviceName, localName: configuration.name,
                                                          configured: configuration.address)
        var profile = device.profile
        if let timing = configuration.advertisingTiming { profile.advertisingTiming = timing }
        if let parameters = configuration.connectionParameters { profile.connectionParameters = parameters }
        self.profile = profile
        let broadcaster = device as? BroadcastingDevice
        let parts = broadcaster == nil
            ? try ConnectionParts(device: device, services: device.services, configuration: configuration, profile: profile,
                                  address: address, host: host, faults: faults, logger: logger)
            : nil
        madeConnectionParts = parts
        let resolvingKey: () -> [UInt8]
        if let security = parts?.security {
            broadcasterIdentity = nil
            resolvingKey = { security.identity.resolvingKey }
        } else {
            let identity = BroadcasterIdentity(path: configuration.security.identityPath,
                                               owner: BondOwner(device: type(of: device).deviceName, name: configuration.name, address: address),
                                               logger: logger)
            broadcasterIdentity = identity
            resolvingKey = { identity.resolvingKey }
        }
        advertising = DeviceAdvertiser(host: host, configuration: configuration, profile: profile, identityAddress: address,
                                       database: parts?.database, resolvingKey: resolvingKey, broadcaster: broadcaster,
                                       logger: logger)
        if let parts { wire(parts) }
        // A device may misbehave on purpose, so Apple's rules only warn; the Core's rules are
        // what a controller accepts at all, so parameters that break them are replaced.
        let parameters = profile.connectionParameters
        for line in parameters.appleGuidelineViolations {
            logger.warning("connection parameters \(parameters) break Apple's guidelines: \(line)")
        }
        if !parameters.coreViolations.isEmpty {
            logger.error("connection parameters \(parameters) break the Core spec (\(parameters.coreViolations.joined(separator: "; "))); using \(ConnectionParameters.recommended) instead")
        }
        advertising.warnAboutConfiguration()
        if let links = parts?.links {
            advertising.hasRoomForLink = { [weak links] in links?.hasRoom ?? false }
        }
        advertising.advertisingChanged = { [weak self] on in
            guard let self, let observer = self.eventObserver else { return }
            observer(.advertising(on: on, address: self.advertising.address))
        }
        if let parts {
            parts.links.serverDelegate = self
            parts.links.faultDelegate = self
            watchRequests()
            wireSecurity()
        }
        if configuration.privacy { advertising.renewPrivateAddress() }
        host.join(self)
    }

    /// The stack's services' handlers, which read this device's links and counters.
    private func wire(_ parts: ConnectionParts) {
        parts.standard.database = parts.database
        parts.standard.session = { [weak self] handle in self?.connections[handle]?.session }
        parts.standard.featuresChanged = { [weak self] handle, features in
            guard let self, let connection = self.connections[handle] else { return }
            // A bonded client's features outlive the link (2.5.2.1).
            self.bondedClients.cachingStateKnown(on: connection, features: features)
        }
        parts.diagnostics.characteristic.onRead = { [weak self] request, value in
            guard let self else { return .unlikelyError }
            if request.offset == 0 { self.statistics.diagnosticsReads += 1 }
            value.append(contentsOf: self.diagnosticsValue())
            return nil
        }
    }

    // MARK: The parts of a device that takes connections

    /// Whether this device takes connections: it holds a GATT database, a Security Manager with
    /// its bonds, and links. False for a broadcaster, which holds none of them.
    public var takesConnections: Bool { madeConnectionParts != nil }

    /// The connection parts. Only a link, its servers and the Security Manager's callbacks
    /// read them, and a broadcaster has none of those; should anything else ever ask for a
    /// broadcaster's, they are made then, as a connectable device has them, serving no services
    /// of the device's (a broadcaster serves none), rather than failing.
    var connectionParts: ConnectionParts {
        if let madeConnectionParts { return madeConnectionParts }
        return makeConnectionPartsLate()
    }

    private func makeConnectionPartsLate() -> ConnectionParts {
        let parts: ConnectionParts
        do {
            parts = try ConnectionParts(device: device, services: [], configuration: configuration, profile: profile,
                                        address: address, host: host, faults: faults, logger: logger)
        } catch {
            // GAP, GATT and Diagnostics alone: the stack's own fixed declarations.
            preconditionFailure("the stack's own services do not build a database: \(error)")
        }
        logger.debug("connection parts made for a device that takes no connections")
        madeConnectionParts = parts
        wire(parts)
        parts.links.serverDelegate = self
        parts.links.faultDelegate = self
        watchRequests()
        wireSecurity()
        return parts
    }

    /// The device's GATT database: its services with the stack's GAP, GATT and Diagnostics.
    public var database: GATTDatabase { connectionParts.database }
    /// Pairing, encryption and bonds of this device's links (the SMP channel, LTK requests).
    public var security: PeripheralSecurity { connectionParts.security }
    var standard: StandardServices { connectionParts.standard }
    var diagnostics: DiagnosticsService { connectionParts.diagnostics }
    /// What bonded centrals keep across links (CCCDs, caching state, SignCounter, Database Hash).
    var bondedClients: BondedClients { connectionParts.bondedClients }
    /// The device's links: the open ones, making them, their parameters, disconnecting.
    var links: DeviceLinks { connectionParts.links }
    /// The characteristics of the device's database (none for a broadcaster, which has none).
    public var characteristics: [Characteristic] { madeConnectionParts?.database.characteristics ?? [] }

    // MARK: Advertising, as the host, the front ends and tests see it

    /// This device's advertising set on the controller (nil until the controller is ready, or
    /// when it had none left).
    public var advertisingSet: UInt8? { advertising.set }
    /// The address advertising uses: the identity address, or with privacy the resolvable
    /// private address of the moment (Vol 6, Part B, 1.3.2.2).
    public var advertisingAddress: BluetoothAddress { advertising.address }
    public var isAdvertising: Bool { advertising.isAdvertising }
    /// False after `advertise off` from the control socket: advertising stays off, also after
    /// disconnections, until turned on again.
    public var advertisingAllowed: Bool { advertising.allowed }
    /// True until the configuration's `startDelay` (a fleet member's part of its start spread) has passed.
    public var waitingToStart: Bool { advertising.waitingToStart }
    /// The interval advertising runs at, while it runs (units of 0.625 ms).
    public var advertisingInterval: UInt16? { advertising.interval }
    var advertisingRequested: Bool { advertising.requested }
    func startAdvertising(fast: Bool) { advertising.start(fast: fast) }
    func setAdvertising(_ on: Bool, log: Bool) { advertising.setAdvertising(on, log: log) }
    /// An extended set stops by itself when a link is made from it (Vol 4, Part E, 7.8.56).
    func advertisingSetEnded() { advertising.setEnded() }

    /// Turns advertising on or off; off stays off, also after disconnections, until on.
    public func setAdvertisingAllowed(_ allowed: Bool) { advertising.setAllowed(allowed) }

    public var deviceName: String { type(of: device).deviceName }

    /// Disconnects every link of this device with `reason` (Vol 4, Part E, 7.1.6 allows 0x05,
    /// 0x13 – 0x15, 0x1A, 0x29, 0x3B); returns how many links were asked to close.
    @discardableResult
    public func disconnectAll(reason: UInt8 = HCIStatus.remoteUserTerminated) -> Int {
        madeConnectionParts?.links.disconnectAll(reason: reason) ?? 0
    }

    /// Disconnects `peer`'s link (Vol 4, Part E, 7.1.6), when it is still open: a device that
    /// has told a central it is not welcome (a plain client of a private chat room). False
    /// when the link is gone already.
    @discardableResult
    public func disconnect(_ peer: ATTPeer, reason: UInt8 = HCIStatus.remoteUserTerminated) -> Bool {
        madeConnectionParts?.links.disconnect(peer, reason: reason) ?? false
    }

    /// The reasons HCI Disconnect accepts (Vol 4, Part E, 7.1.6).
    public static let disconnectReasons: Set<UInt8> = [0x05, 0x13, 0x14, 0x15, 0x1A, 0x29, 0x3B]

    // MARK: The controller, through its host (`ControllerHost`, for every role on it)

    /// The controller transport is up (for every device on it): initialize the controller.
    public func controllerUp() { host.controller.controllerUp() }

    /// The controller transport is gone (for every device on it).
    public func controllerDown(reason: String) { host.controller.controllerDown(reason: reason) }

    /// One packet from the controller, for whichever device or role it concerns.
    public func receive(packetType: UInt8, packet: ArraySlice<UInt8>) {
        host.controller.receive(packetType: packetType, packet: packet)
    }

    /// Stops every role on this controller (`ControllerHost.stop`).
    public func stop(completion: @escaping () -> Void) { host.controller.stop(completion: completion) }

    /// How long a clean stop may take at most.
    public static var stopDeadline: Duration { ControllerHost.stopDeadline }

    public var connectionCount: Int { madeConnectionParts?.links.count ?? 0 }

    /// The open link on connection handle `handle`, nil when none is.
    public func connection(on handle: UInt16) -> LEConnection? { madeConnectionParts?.links.connections[handle] }

    /// The open links, by connection handle (`DeviceLinks.connections`; a getter costs the
    /// notification path less than a `_read` accessor: scripts/perf-gate).
    var connections: HandleTable<LEConnection> { connectionParts.links.connections }

    var isStopping: Bool { host.isStopping }

    // MARK: What the host tells this device

    /// ACL data of one of this device's links (the host routes only those here).
    func receiveACL(_ packet: ACLPacket) { links.receiveACL(packet) }

    func controllerCameUp() {
        statistics.startedNanoseconds = statistics.startedNanoseconds == 0 ? scheduler.nowNanoseconds : statistics.startedNanoseconds
        logger.event(.controllerUp, .info, "controller \(configuration.controller) connected")
    }

    func controllerWentAway(reason: String, stopping: Bool) {
        if stopping {
            // Nothing left to close on a controller that is gone: the stop is done.
            logger.event(.controllerLost, .warning, "controller lost while stopping: \(reason)")
            madeConnectionParts?.links.forgetAll()
            return
        }
        logger.event(.controllerLost, .error, "controller lost: \(reason); reconnecting")
        dropAllConnections(reason: "controller lost")
        advertising.controllerWentAway()
    }

    func hostReset(reason: String) {
        // The controller lost every link and its state: for the journal, the controller was lost
        // and comes back through initialization.
        logger.event(.controllerLost, .error, "controller reset: \(reason); links dropped, initializing again")
        dropAllConnections(reason: reason)
        advertising.controllerReset()
    }

    /// The stop begins: the simulated world stops first.
    func deviceStopping() {
        logger.debug("stopping: \(connectionCount) link(s) to close")
        if deviceStarted { device.stop() }
        // Bonded centrals' subscriptions waiting for the bond file are written now.
        madeConnectionParts?.security.flushBonds()
        advertising.stopping()
    }

    /// Advertising off, every link disconnected with Remote User Terminated (0x13).
    func closeEverything() {
        advertising.turnOff()
        madeConnectionParts?.links.disconnectAll(reason: HCIStatus.remoteUserTerminated)
    }
}
