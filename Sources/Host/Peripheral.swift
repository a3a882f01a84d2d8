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
    /// This device's advertising set on the controller (nil until the controller is ready, or
    /// when it had none left).
    public internal(set) var advertisingSet: UInt8?
    public let database: GATTDatabase
    /// The identity address (static random): what centrals bond with.
    public let address: BluetoothAddress
    /// The address advertising uses: the identity address, or with privacy the resolvable
    /// private address of the moment (Vol 6, Part B, 1.3.2.2).
    public internal(set) var advertisingAddress: BluetoothAddress
    /// The address the last successful advertising start used (a changed one needs a restart).
    var advertisedAddress: BluetoothAddress?
    var privateAddressTimer: TimerID?
    var privateAddressRandom = SystemRandomNumberGenerator()
    public internal(set) var statistics = PeripheralStatistics()
    public internal(set) var isAdvertising = false
    /// Faults a test asked for, applied by every link's ATT server.
    public let faults = FaultPlan()
    /// The control socket's answers for values that require authorization and whose device
    /// does not decide itself, by value handle: absent or false refuses (0x08), true allows.
    public internal(set) var authorizations: [UInt16: Bool] = [:]
    /// The control socket's answers for one central (`authorize DEVICE UUID allow|deny PEER`),
    /// oldest first, overriding `authorizations` for that central; at most
    /// `maximumPeerAuthorizations`, the oldest forgotten first. Kept while blemu runs.
    public internal(set) var peerAuthorizations: [PeerAuthorization] = []
    /// False after `advertise off` from the control socket: advertising stays off, also after
    /// disconnections, until turned on again.
    public internal(set) var advertisingAllowed = true
    /// The interval advertising runs at, while it runs (units of 0.625 ms).
    public internal(set) var advertisingInterval: UInt16?
    public var logger: Logger {
        didSet { l2cap.logger = logger }
    }

    public let scheduler: TimerScheduling
    /// Pairing, encryption and bonds of this device's links (the SMP channel, LTK requests).
    public let security: PeripheralSecurity
    let standard: StandardServices
    let diagnostics: DiagnosticsService
    /// The open links, by connection handle (looked up on every packet: a `HandleTable`, not a Dictionary).
    var connections = HandleTable<Connection>()
    var advertisingPayload: AdvertisingPayload
    /// The TX Power Level the payload carries: the profile's, then the controller's once read.
    var advertisedTxPower: Int8?
    var advertisingRequested = false
    var advertisingPhaseTimer: TimerID?
    /// When the fast phase under way ends (the run loop's clock, nanoseconds).
    var fastPhaseEnds: UInt64 = 0
    var deviceStarted = false
    var deviceWaitingForRoom = false
    /// What this device's links share: the HCI, the timers, the budget of lines peers cause.
    let l2cap: L2CAPLinkContext
    /// What a device's `notify` encodes into, reused for every notification.
    var notificationValue = ValueBuffer()
    /// Lines whose rate a peer or the controller controls (Docs/DIAGNOSTICS.md): one budget
    /// with the links' own lines.
    var peerLog: LogBudget {
        get { l2cap.peerLog }
        set { l2cap.peerLog = newValue }
    }
    var linkLog = LogBudget()
    /// `att-error` and `write` events: one a request, so a central sets their pace.
    var requestLog = LogBudget(burst: 100, window: .seconds(10))

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
        l2cap = L2CAPLinkContext(hci: host.hci, scheduler: host.scheduler, logger: logger)
        address = PeripheralConfiguration.identityAddress(deviceName: type(of: device).deviceName, localName: configuration.name,
                                                          configured: configuration.address)
        advertisingAddress = address
        var profile = device.profile
        if let timing = configuration.advertisingTiming { profile.advertisingTiming = timing }
        if let parameters = configuration.connectionParameters { profile.connectionParameters = parameters }
        self.profile = profile
        let usable = profile.connectionParameters.coreViolations.isEmpty ? profile.connectionParameters : .recommended
        standard = StandardServices(name: configuration.name, appearance: profile.appearance, parameters: usable,
                                    privacy: configuration.privacy)
        let diagnostics = DiagnosticsService()
        database = try GATTDatabase(services: [standard.gap, standard.gatt] + device.services + [diagnostics.service])
        advertisedTxPower = profile.txPowerLevel
        advertisingPayload = Self.payload(configuration: configuration, profile: profile,
                                          serviceUUIDs: profile.advertisedServices, txPower: profile.txPowerLevel)
        self.diagnostics = diagnostics
        var securityConfiguration = configuration.security
        // The device's permissions say how long a key its protected values need: a pairing that
        // would leave a shorter one is refused at once (Encryption Key Size, 0x06).
        securityConfiguration.minimumEncryptionKeySize = max(securityConfiguration.minimumEncryptionKeySize,
                                                             database.requiredEncryptionKeySize)
        security = PeripheralSecurity(
            configuration: securityConfiguration,
            owner: BondOwner(device: type(of: device).deviceName, name: configuration.name, address: address),
            localAddress: SMPAddress(address, isRandom: true), scheduler: host.scheduler, logger: logger)
        standard.database = database
        standard.featuresChanged = { [weak self] handle, features in
            guard let self, let server = self.connections[handle]?.server else { return }
            // Vol 3, Part G, 7.2: bit 0 is Robust Caching.
            server.clientSupportsRobustCaching = features & 0x01 != 0
            // A bonded client's features outlive the link (2.5.2.1).
            self.security.cachingStateKnown(features: features, changeAware: server.isChangeAware, on: handle)
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
        for line in profile.advertisingTiming.violations {
            logger.warning("advertising timing: \(line)")
        }
        for line in advertisingPayload.omitted {
            logger.warning("advertising: \(line) does not fit in 31 + 31 bytes and is left out")
        }
        wireSecurity()
        if configuration.privacy { renewPrivateAddress() }
        host.join(self)
    }

    static func payload(configuration: PeripheralConfiguration, profile: DeviceProfile, serviceUUIDs: [BluetoothUUID],
                        txPower: Int8?) -> AdvertisingPayload {
        AdvertisingPayload.build(AdvertisingContent(
            name: configuration.name, serviceUUIDs: serviceUUIDs, appearance: profile.appearance,
            txPowerLevel: txPower))
    }

    /// Lays the advertising data and scan response out again from what is true now: the TX
    /// power (the controller's, once read) and the services the database serves
    /// (`advertisedServiceUUIDs`). The one builder decides what fits.
    func rebuildAdvertisingPayload() {
        advertisingPayload = Self.payload(configuration: configuration, profile: profile,
                                          serviceUUIDs: advertisedServiceUUIDs, txPower: advertisedTxPower)
    }

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

    public var connectionCount: Int { connections.count }

    var isStopping: Bool { host.isStopping }

    // MARK: What the host tells this device

    func controllerCameUp() {
        statistics.startedNanoseconds = statistics.startedNanoseconds == 0 ? scheduler.nowNanoseconds : statistics.startedNanoseconds
        logger.event(.controllerUp, .info, "controller \(configuration.controller) connected")
    }

    func controllerWentAway(reason: String, stopping: Bool) {
        if stopping {
            // Nothing left to close on a controller that is gone: the stop is done.
            logger.event(.controllerLost, .warning, "controller lost while stopping: \(reason)")
            connections.removeAll()
            return
        }
        logger.event(.controllerLost, .error, "controller lost: \(reason); reconnecting")
        dropAllConnections(reason: "controller lost")
        setAdvertising(false, log: false)
        advertisingSet = nil
    }

    func hostReset(reason: String) {
        // The controller lost every link and its state: for the journal, the controller was lost
        // and comes back through initialization.
        logger.event(.controllerLost, .error, "controller reset: \(reason); links dropped, initializing again")
        dropAllConnections(reason: reason)
        isAdvertising = false
        advertisingRequested = false
        advertisingSet = nil
    }

    /// The stop begins: the simulated world stops first.
    func deviceStopping() {
        logger.debug("stopping: \(connections.count) link(s) to close")
        if deviceStarted { device.stop() }
        // Bonded centrals' subscriptions waiting for the bond file are written now.
        security.flushBonds()
        if let timer = advertisingPhaseTimer { scheduler.cancel(timer) }
        advertisingPhaseTimer = nil
        if let timer = privateAddressTimer { scheduler.cancel(timer) }
        privateAddressTimer = nil
    }

    /// Advertising off, every link disconnected with Remote User Terminated (0x13).
    func closeEverything() {
        if let set = advertisingSet, isAdvertising || advertisingRequested {
            host.advertiser.stop(set: set)
            setAdvertising(false, log: true)
        }
        for handle in connections.keys.sorted() {
            hci.send(.disconnect(handle: handle, reason: HCIStatus.remoteUserTerminated))
        }
    }
}
