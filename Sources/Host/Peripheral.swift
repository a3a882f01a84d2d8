import BlemuATT
import BlemuCore
import BlemuCrypto
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
    public let database: GATTDatabase
    /// The identity address (static random): what centrals bond with.
    public let address: BluetoothAddress
    /// The device's advertising: payload, phases, address, set.
    let advertising: DeviceAdvertiser
    public internal(set) var statistics = PeripheralStatistics()
    /// What the control socket may do to the device, and what only it decides (authorization
    /// answers, planned faults).
    public private(set) lazy var control = PeripheralControl(of: self, faults: links.faults)
    public var logger: Logger {
        didSet {
            links.logger = logger
            bondedClients.logger = logger
            advertising.logger = logger
            watchRequests()
        }
    }

    public let scheduler: TimerScheduling
    /// Pairing, encryption and bonds of this device's links (the SMP channel, LTK requests).
    public let security: PeripheralSecurity
    let standard: StandardServices
    let diagnostics: DiagnosticsService
    /// What bonded centrals keep across links (CCCDs, caching state, SignCounter, Database Hash).
    let bondedClients: BondedClients
    /// The device's links: the open ones, making them, their parameters, disconnecting.
    let links: DeviceLinks
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

    /// A device that joins `host`'s controller, beside the devices already on it.
    public init(device: Device, configuration: PeripheralConfiguration, host: PeripheralHost,
                logger: Logger) throws(GATTDatabaseError) {
        self.device = device
        self.configuration = configuration
        self.host = host
        self.scheduler = host.scheduler
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
        let usable = profile.connectionParameters.coreViolations.isEmpty ? profile.connectionParameters : .recommended
        standard = StandardServices(name: configuration.name, appearance: profile.appearance, parameters: usable,
                                    privacy: configuration.privacy)
        let diagnostics = DiagnosticsService()
        // A device that places a service of the stack's own at recorded handles (a recorded
        // device's GAP, GATT or Diagnostics) serves it instead: the recorded one wins, so a
        // central that cached the original's handles finds them. Its Service Changed, if any,
        // is the one the stack indicates through.
        let placedByDevice = Set(device.services.filter { $0.placement != nil }.map(\.uuid))
        // GAP and GATT first, Diagnostics after the device's services: the handles every
        // built-in device has always had (a central caches them).
        let ownFirst = [standard.gap, standard.gatt].filter { !placedByDevice.contains($0.uuid) }
        let ownLast = [diagnostics.service].filter { !placedByDevice.contains($0.uuid) }
        if placedByDevice.contains(GATTType.gattService),
           let recorded = device.services.first(where: { $0.uuid == GATTType.gattService })?
               .characteristics.first(where: { $0.uuid == GATTType.serviceChanged && $0.properties.contains(.indicate) }) {
            standard.serviceChanged = recorded
        }
        database = try GATTDatabase(services: ownFirst + device.services + ownLast)
        self.diagnostics = diagnostics
        var securityConfiguration = configuration.security
        // The device's permissions say how long a key its protected values need: a pairing that
        // would leave a shorter one is refused at once (Encryption Key Size, 0x06).
        securityConfiguration.minimumEncryptionKeySize = max(securityConfiguration.minimumEncryptionKeySize,
                                                             database.requiredEncryptionKeySize)
        security = PeripheralSecurity(
            configuration: securityConfiguration,
            owner: BondOwner(device: type(of: device).deviceName, name: configuration.name, address: address),
            localAddress: LEAddress(address, isRandom: true), bondAttachment: BondedClientState.format,
            scheduler: host.scheduler, logger: logger)
        bondedClients = BondedClients(security: security, database: database, standard: standard, scheduler: host.scheduler,
                                      logger: logger)
        links = DeviceLinks(hci: host.hci, scheduler: host.scheduler, configuration: configuration, preferredParameters: usable,
                            database: database, faults: FaultPlan(), security: security, logger: logger)
        advertising = DeviceAdvertiser(host: host, configuration: configuration, profile: profile, identityAddress: address,
                                       database: database, security: security, broadcaster: device as? BroadcastingDevice,
                                       logger: logger)
        standard.database = database
        standard.session = { [weak self] handle in self?.connections[handle]?.le.session }
        standard.featuresChanged = { [weak self] handle, features in
            guard let self, let connection = self.connections[handle] else { return }
            // A bonded client's features outlive the link (2.5.2.1).
            self.bondedClients.cachingStateKnown(on: connection, features: features)
        }
        diagnostics.characteristic.onRead = { [weak self] request, value in
            guard let self else { return .unlikelyError }
            if request.offset == 0 { self.statistics.diagnosticsReads += 1 }
            value.append(contentsOf: self.diagnosticsValue())
            return nil
        }
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
        advertising.hasRoomForLink = { [weak links = self.links] in links?.hasRoom ?? false }
        advertising.advertisingChanged = { [weak self] on in
            guard let self, let observer = self.eventObserver else { return }
            observer(.advertising(on: on, address: self.advertising.address))
        }
        links.serverDelegate = self
        links.faultDelegate = self
        watchRequests()
        wireSecurity()
        if configuration.privacy { advertising.renewPrivateAddress() }
        host.join(self)
    }

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
        links.disconnectAll(reason: reason)
    }

    /// Disconnects `peer`'s link (Vol 4, Part E, 7.1.6), when it is still open: a device that
    /// has told a central it is not welcome (a plain client of a private chat room). False
    /// when the link is gone already.
    @discardableResult
    public func disconnect(_ peer: ATTPeer, reason: UInt8 = HCIStatus.remoteUserTerminated) -> Bool {
        links.disconnect(peer, reason: reason)
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

    public var connectionCount: Int { links.count }

    /// The open links, by connection handle (`DeviceLinks.connections`; a getter costs the
    /// notification path less than a `_read` accessor: scripts/perf-gate).
    var connections: HandleTable<Connection> { links.connections }

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
            links.forgetAll()
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
        logger.debug("stopping: \(connections.count) link(s) to close")
        if deviceStarted { device.stop() }
        // Bonded centrals' subscriptions waiting for the bond file are written now.
        security.flushBonds()
        advertising.stopping()
    }

    /// Advertising off, every link disconnected with Remote User Terminated (0x13).
    func closeEverything() {
        advertising.turnOff()
        links.disconnectAll(reason: HCIStatus.remoteUserTerminated)
    }
}
