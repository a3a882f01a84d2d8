import BlemuATT
import BlemuCore
import BlemuGATT
import BlemuHCI
import BlemuL2CAP
import Logging

public final class Peripheral {
    public let device: Device
    public let configuration: PeripheralConfiguration
    public let hci: HCIHost
    public let database: GATTDatabase
    public let address: BluetoothAddress
    public internal(set) var statistics = PeripheralStatistics()
    public internal(set) var isAdvertising = false
    public var logger: Logger

    public let scheduler: TimerScheduling
    let standard: StandardServices
    let diagnostics: DiagnosticsService
    var connections: [UInt16: Connection] = [:]
    var advertisingPayload: AdvertisingPayload
    var advertisingRequested = false
    var advertisingPhaseTimer: TimerID?
    var deviceStarted = false
    var deviceWaitingForRoom = false
    var stopCompletion: (() -> Void)?
    var stopTimer: TimerID?
    var stopDeadlineTimer: TimerID?
    var frame: [UInt8] = []
    /// Lines whose rate a peer or the controller controls (Docs/DIAGNOSTICS.md).
    var peerLog = LogBudget()
    var linkLog = LogBudget()
    /// `att-error` and `write` events: one a request, so a central sets their pace.
    var requestLog = LogBudget(burst: 100, window: .seconds(10))

    public init(device: Device, configuration: PeripheralConfiguration, scheduler: TimerScheduling, logger: Logger,
                output: @escaping (UInt8, ArraySlice<UInt8>) -> Bool) throws(GATTDatabaseError) {
        self.device = device
        self.configuration = configuration
        self.scheduler = scheduler
        var logger = logger
        logger[metadataKey: LogKey.device] = .string(type(of: device).deviceName)
        logger[metadataKey: LogKey.controller] = .string(configuration.controller)
        logger[metadataKey: LogKey.name] = .string(configuration.name)
        self.logger = logger
        address = configuration.address
            ?? BluetoothAddress.staticRandom(seed: "blemu/\(type(of: device).deviceName)/\(configuration.name)")
        let profile = device.profile
        let usable = profile.connectionParameters.coreViolations.isEmpty ? profile.connectionParameters : .recommended
        standard = StandardServices(name: configuration.name, appearance: profile.appearance, parameters: usable)
        let diagnostics = DiagnosticsService()
        database = try GATTDatabase(services: [standard.gap, standard.gatt] + device.services + [diagnostics.service])
        advertisingPayload = Self.payload(configuration: configuration, profile: profile, txPower: profile.txPowerLevel)
        hci = HCIHost(scheduler: scheduler, logger: logger, output: output)
        frame.reserveCapacity(ATTServer.maximumMTU + 8)
        self.diagnostics = diagnostics
        standard.database = database
        hci.delegate = self
        diagnostics.characteristic.onRead = { [weak self] request in
            guard let self else { return .failure(.unlikelyError) }
            if request.offset == 0 { self.statistics.diagnosticsReads += 1 }
            return request.answer(Array(DiagnosticsService.render(self.diagnosticsFields()).utf8))
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
    }

    static func payload(configuration: PeripheralConfiguration, profile: DeviceProfile, txPower: Int8?) -> AdvertisingPayload {
        AdvertisingPayload.build(AdvertisingContent(
            name: configuration.name, serviceUUIDs: profile.advertisedServices, appearance: profile.appearance,
            txPowerLevel: txPower))
    }

    func rebuildAdvertisingPayload(txPower: Int8) {
        advertisingPayload = Self.payload(configuration: configuration, profile: device.profile, txPower: txPower)
    }

    // MARK: Transport

    /// The controller transport is up: initialize the controller.
    public func controllerUp() {
        statistics.startedNanoseconds = statistics.startedNanoseconds == 0 ? scheduler.nowNanoseconds : statistics.startedNanoseconds
        logger.event(.controllerUp, .info, "controller \(configuration.controller) connected")
        hci.start()
    }

    /// The controller transport is gone: every link with it.
    public func controllerDown(reason: String) {
        if isStopping {
            // Nothing left to close on a controller that is gone: the stop is done.
            logger.event(.controllerLost, .warning, "controller lost while stopping: \(reason)")
            hci.halt()
            connections.removeAll()
            finishStop()
            return
        }
        logger.event(.controllerLost, .error, "controller lost: \(reason); reconnecting")
        hci.halt()
        dropAllConnections(reason: "controller lost")
        setAdvertising(false, log: false)
    }

    /// One packet from the controller: H4 packet type and the packet.
    public func receive(packetType: UInt8, packet: ArraySlice<UInt8>) {
        switch packetType {
        case 0x04: hci.receiveEvent(packet)
        case 0x02: hci.receiveACL(packet)
        default: logger.debug("ignored H4 packet of type \(Hex.byte(packetType))")
        }
    }

    public var connectionCount: Int { connections.count }

    // MARK: Stop

    /// How long a clean stop may take at most: links closed, then the controller reset.
    public static let stopDeadline: Duration = .seconds(3)
    /// How long the links have to close before the Reset goes out anyway.
    static let linkCloseWait: Duration = .seconds(2)

    /// Clean stop: advertising off, every link disconnected with Remote User Terminated
    /// (0x13), then HCI Reset. Calls `completion` once, when done or after `stopDeadline` at
    /// most, whatever the controller does.
    public func stop(completion: @escaping () -> Void) {
        guard stopCompletion == nil else { return }
        logger.debug("stopping: \(connections.count) link(s) to close")
        stopCompletion = completion
        if deviceStarted { device.stop() }
        if let timer = advertisingPhaseTimer { scheduler.cancel(timer) }
        advertisingPhaseTimer = nil
        guard hci.isReady else {
            finishStop()
            return
        }
        // Commands still queued (advertising restarts, parameter replies) no longer matter;
        // only the ones below do, and they must not wait behind the others.
        hci.cancelQueuedCommands()
        stopDeadlineTimer = scheduler.schedule(after: Self.stopDeadline) { [weak self] in
            self?.logger.warning("controller did not finish the stop within \(Self.stopDeadline); stopping anyway")
            self?.finishStop()
        }
        if isAdvertising || advertisingRequested {
            hci.send(.leSetAdvertisingEnable(false))
            setAdvertising(false, log: true)
        }
        for handle in connections.keys.sorted() {
            hci.send(.disconnect(handle: handle, reason: HCIStatus.remoteUserTerminated))
        }
        stopTimer = scheduler.schedule(after: Self.linkCloseWait) { [weak self] in
            self?.logger.warning("links did not close within \(Self.linkCloseWait); resetting anyway")
            self?.resetAndFinish()
        }
        if connections.isEmpty { resetAndFinish() }
    }

    func resetAndFinish() {
        if let stopTimer { scheduler.cancel(stopTimer) }
        stopTimer = nil
        hci.send(.reset) { [weak self] _ in self?.finishStop() }
    }

    func finishStop() {
        if let stopTimer { scheduler.cancel(stopTimer) }
        stopTimer = nil
        if let stopDeadlineTimer { scheduler.cancel(stopDeadlineTimer) }
        stopDeadlineTimer = nil
        guard let completion = stopCompletion else { return }
        stopCompletion = { }
        completion()
    }

    var isStopping: Bool { stopCompletion != nil }
}
