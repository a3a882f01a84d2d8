import BlemuATT
import BlemuChannels
import BlemuConnection
import BlemuCore
import BlemuEATT
import BlemuGATT
import BlemuHCI
import BlemuL2CAP
import BlemuSecurity
import Logging

/// One device's links to centrals: the open links by connection handle (each the link's one
/// `LEConnection`, with the device's endpoints attached to it, nothing beside it), making a link
/// (an `L2CAPLink` in the peripheral role, its `ATTBearer` with the device's server behind its
/// fault stage, SMP on CID 0x0006, FixedChannels.swift), the parameters the device prefers, and HCI Disconnect.
/// What a link opening or closing means to the rest of the device (security, the bonded
/// client's state, the device, advertising) is `Peripheral`'s (Links.swift).
final class DeviceLinks {
    let hci: HCIHost
    let scheduler: TimerScheduling
    let configuration: PeripheralConfiguration
    /// The device's preferred connection parameters: its profile's, or the recommended ones
    /// when the profile's break the Core rules.
    let preferredParameters: ConnectionParameters
    let database: GATTDatabase
    /// Faults the control socket planned (`PeripheralControl.faults`), applied by every link's fault stage, in front of its ATT server.
    let faults: FaultPlan
    /// SMP on CID 0x0006 goes to it.
    let security: PeripheralSecurity
    /// Every link's ATT server reports to it (the `Peripheral`).
    weak var serverDelegate: ATTServerDelegate?
    /// Hears of the faults each link's stage applies (the device logs them).
    weak var faultDelegate: FaultStageDelegate?
    var logger: Logger {
        didSet { l2cap.logger = logger }
    }
    /// What this device's links share: the HCI, the timers, the budget of lines peers cause.
    let l2cap: L2CAPLinkContext
    /// The open links, by connection handle (a `HandleTable`, not a Dictionary). Read for every
    /// update the device sends, changed only as links open and close, never while read: no
    /// exclusivity check at run time.
    @exclusivity(unchecked) private(set) var connections = HandleTable<LEConnection>()
    /// Lines about links the controller or a central causes (attempts, refusals, failed disconnections).
    var linkLog = LogBudget()
    /// Who watches the requests of every server of every link (`Peripheral.watchRequests`):
    /// one box, read in place by each server, those of links made later too.
    let requestWatch = ATTServerWatch()
    /// The requests the servers of links now closed answered (`requestsAnswered`).
    private var requestsAnsweredOnClosedLinks = 0
    /// The SPSMs the device published (`DeviceContext.publishL2CAPChannel`), served on each link.
    let channelServers = ChannelServers()
    /// The EATT PSM served on every link (BlemuEATT; the device's part in EnhancedATT.swift).
    private var enhancedATT: EnhancedATTService<EnhancedEndpoint>?

    init(hci: HCIHost, scheduler: TimerScheduling, configuration: PeripheralConfiguration, preferredParameters: ConnectionParameters,
         database: GATTDatabase, faults: FaultPlan, security: PeripheralSecurity, logger: Logger) {
        self.hci = hci
        self.scheduler = scheduler
        self.configuration = configuration
        self.preferredParameters = preferredParameters
        self.database = database
        self.faults = faults
        self.security = security
        self.logger = logger
        l2cap = L2CAPLinkContext(hci: hci, scheduler: scheduler, logger: logger)
        enhancedATT = serveEnhancedATT()
    }

    var count: Int { connections.count }

    /// The requests every link's servers answered, the closed links' too: counted per
    /// connection by its GATT server session and added up only when asked.
    var requestsAnswered: Int {
        connections.values.reduce(requestsAnsweredOnClosedLinks) { $0 + $1.session.requestsAnswered }
    }

    /// Whether the device can take another link (`--max-connections`).
    var hasRoom: Bool { connections.count < configuration.maxConnections }

    /// Lines left out by the links' budgets.
    var logLinesLeftOut: Int { l2cap.peerLog.leftOutTotal + linkLog.leftOutTotal }

    // MARK: Opening and closing

    /// Why a link the controller made was not taken.
    enum Refusal: Error {
        /// Made in the central role: not this device's to serve.
        case centralRole
        /// The device has `maxConnections` links already.
        case full
    }

    /// Takes the link of `event` (made from this device's advertising): a link with its server
    /// and SMP, open in HCI. A link the device cannot serve is disconnected at once and refused.
    func open(_ event: LEConnectionComplete) -> Result<LEConnection, Refusal> {
        guard event.role == 0x01 else {
            if let leftOut = linkLog.take(now: scheduler.nowNanoseconds, for: logger) {
                logger.warning("link \(event.handle) opened in the central role; disconnecting\(LogBudget.note(leftOut))")
            }
            hci.send(.disconnect(handle: event.handle, reason: HCIStatus.remoteUserTerminated))
            return .failure(.centralRole)
        }
        guard hasRoom else {
            // A controller that takes more links than the device allows cannot make memory grow:
            // the extra link is closed at once with Remote Device Terminated due to Low Resources.
            if let leftOut = linkLog.take(now: scheduler.nowNanoseconds, for: logger) {
                logger.warning("link \(event.handle) from \(event.peerAddress) refused: \(connections.count) links open, the limit is \(configuration.maxConnections)\(LogBudget.note(leftOut))",
                               metadata: [LogKey.connHandle: "\(event.handle)", LogKey.peer: .string(event.peerAddress.description)])
            }
            hci.send(.disconnect(handle: event.handle, reason: HCIStatus.remoteDeviceTerminatedLowResources))
            return .failure(.full)
        }
        let peer = ATTPeer(connectionHandle: event.handle, address: event.peer)
        let connection = makeLink(event, peer: peer)
        connections[event.handle] = connection
        hci.openLink(event.handle, receiver: connection.link)
        return .success(connection)
    }

    /// The link is set up for the device: the controller is asked for the longest packets, and
    /// after `parameterUpdateDelay` the central for the device's preferred parameters.
    func linkReady(_ connection: LEConnection) {
        if hci.info.supportsDataLengthExtension {
            hci.send(.leSetDataLength(handle: connection.handle))
        }
        connection.parameterRequest = scheduler.schedule(after: configuration.parameterUpdateDelay) { [weak self, weak connection] in
            guard let self, let connection else { return }
            connection.parameterRequest = nil
            self.requestPreferredParameters(connection)
        }
    }

    /// Takes the link off HCI and closes it (its reassembly, its channels); nil when `handle`
    /// is not one of this device's links.
    func close(_ handle: UInt16) -> LEConnection? {
        guard let connection = connections.removeValue(forKey: handle) else { return nil }
        requestsAnsweredOnClosedLinks += connection.session.requestsAnswered
        hci.closeLink(handle)
        if let timer = connection.parameterRequest { scheduler.cancel(timer) }
        connection.link.close()
        return connection
    }

    /// The controller is gone while stopping: nothing is left to close.
    func forgetAll() {
        requestsAnsweredOnClosedLinks = requestsAnswered
        connections.removeAll()
    }

    /// Asks the controller to disconnect every link with `reason`; returns how many.
    @discardableResult
    func disconnectAll(reason: UInt8) -> Int {
        for handle in connections.keys.sorted() {
            hci.send(.disconnect(handle: handle, reason: reason))
        }
        return connections.count
    }

    /// Asks the controller to close `peer`'s link, when it is still open (its handle not given
    /// to another central since); false when it is not.
    func disconnect(_ peer: ATTPeer, reason: UInt8) -> Bool {
        guard let connection = connections[peer.connectionHandle], connection.peer == peer else { return false }
        hci.send(.disconnect(handle: peer.connectionHandle, reason: reason))
        return true
    }

    func attemptFailed(status: UInt8) {
        if let leftOut = linkLog.take(now: scheduler.nowNanoseconds, for: logger) {
            logger.warning("connection attempt failed\(LogBudget.note(leftOut))", metadata: [LogKey.hciStatus: .string(Hex.byte(status))])
        }
    }

    func disconnectionFailed(status: UInt8, handle: UInt16) {
        if let leftOut = linkLog.take(now: scheduler.nowNanoseconds, for: logger) {
            logger.warning("disconnection failed\(LogBudget.note(leftOut))",
                           metadata: [LogKey.connHandle: "\(handle)", LogKey.hciStatus: .string(Hex.byte(status))])
        }
    }

    // MARK: Parameters

    /// "interval 30.0 ms, latency 0, timeout 720 ms": units of 1.25 ms and 10 ms (Vol 4, Part E, 7.7.65.1).
    static func describe(_ parameters: LinkParameters) -> String {
        "interval \(Double(parameters.interval) * 1.25) ms, latency \(parameters.latency), timeout \(Int(parameters.supervisionTimeout) * 10) ms"
    }

    /// Vol 3, Part A, 4.20: the peripheral asks for its preferred parameters when the link's
    /// do not match them.
    func requestPreferredParameters(_ connection: LEConnection) {
        let preferred = preferredParameters
        let current = connection.parameters
        if (preferred.intervalMin...preferred.intervalMax).contains(current.interval),
           current.latency == preferred.peripheralLatency, current.supervisionTimeout == preferred.supervisionTimeout {
            return
        }
        logger.info("asking for connection parameters \(preferred)", metadata: [LogKey.connHandle: "\(connection.handle)"])
        connection.link.requestConnectionParameters(preferred)
    }

    /// An event about a link's parameters, data length or PHY.
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
                // The central sets the pace of its requests (Vol 6, Part B, 5.1.7): a budget.
                if let leftOut = linkLog.take(now: scheduler.nowNanoseconds, for: logger) {
                    logger.info("refused connection parameters: \(asked.coreViolations.joined(separator: "; "))\(LogBudget.note(leftOut))",
                                metadata: [LogKey.connHandle: "\(handle)"])
                }
                hci.send(.leRemoteConnectionParameterRequestNegativeReply(handle: handle))
            }
        case let .leDataLengthChange(handle, maxTx, _, maxRx, _):
            logger.debug("data length now \(maxTx) out, \(maxRx) in", metadata: [LogKey.connHandle: "\(handle)"])
        case let .lePHYUpdateComplete(status, handle, tx, rx):
            logger.debug("PHY update: status \(Hex.byte(status)), tx \(tx), rx \(rx)", metadata: [LogKey.connHandle: "\(handle)"])
        default:
            break
        }
    }
}
