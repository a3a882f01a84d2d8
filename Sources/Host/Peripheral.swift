import BlemuATT
import BlemuCore
import BlemuGATT
import BlemuHCI
import BlemuL2CAP
import Logging

public struct PeripheralConfiguration: Sendable {
    /// The local name, advertised and in GAP Device Name.
    public var name: String
    /// A static random address; nil derives one from the device and name, stable across runs.
    public var address: BluetoothAddress?
    /// The controller spec, for logs and diagnostics.
    public var controller: String
    public var firmware: String
    /// Links this device takes at once; advertising stops at this many. The controller usually
    /// says no sooner (advertising then resumes at the next disconnection).
    public var maxConnections: Int
    /// Delay after connecting before asking the central for the device's preferred parameters.
    public var parameterUpdateDelay: Duration

    public init(name: String, address: BluetoothAddress? = nil, controller: String, firmware: String = blemuVersion,
                maxConnections: Int = 32, parameterUpdateDelay: Duration = .seconds(1)) {
        self.name = name
        self.address = address
        self.controller = controller
        self.firmware = firmware
        self.maxConnections = maxConnections
        self.parameterUpdateDelay = parameterUpdateDelay
    }
}

public let blemuVersion = "0.1.0"

/// One link to a central: its ATT bearer, L2CAP reassembly and signalling state.
final class Connection {
    let handle: UInt16
    let peer: ATTPeer
    let server: ATTServer
    var reassembler = L2CAPReassembler()
    var parameters: LinkParameters
    var nextSignalingIdentifier: UInt8 = 1
    var pendingParameterUpdate: UInt8?
    var parameterTimer: TimerID?
    var reassemblyTimer: TimerID?

    init(handle: UInt16, peer: ATTPeer, server: ATTServer, parameters: LinkParameters) {
        self.handle = handle
        self.peer = peer
        self.server = server
        self.parameters = parameters
    }

    /// Vol 3, Part A, 4: identifiers 0x01–0xFF, 0x00 is never used.
    func takeIdentifier() -> UInt8 {
        let id = nextSignalingIdentifier
        nextSignalingIdentifier = nextSignalingIdentifier == 0xFF ? 1 : nextSignalingIdentifier + 1
        return id
    }
}

/// An emulated peripheral on one controller: HCI host, advertising, links, L2CAP fixed
/// channels, an ATT server per link, and the device behind the GATT database.
public final class Peripheral {
    public let device: Device
    public let configuration: PeripheralConfiguration
    public let hci: HCIHost
    public let database: GATTDatabase
    public let address: BluetoothAddress
    public private(set) var statistics = PeripheralStatistics()
    public private(set) var isAdvertising = false
    public var logger: Logger

    public let scheduler: TimerScheduling
    private let standard: StandardServices
    private let diagnostics: DiagnosticsService
    private var connections: [UInt16: Connection] = [:]
    private var advertisingPayload: AdvertisingPayload
    private var advertisingRequested = false
    private var advertisingPhaseTimer: TimerID?
    private var deviceStarted = false
    private var deviceWaitingForRoom = false
    private var stopCompletion: (() -> Void)?
    private var stopTimer: TimerID?
    private var frame: [UInt8] = []

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
            let bytes = Array(DiagnosticsService.render(self.diagnosticsFields()).utf8)
            guard request.offset <= bytes.count else { return .failure(.invalidOffset) }
            return .success(Array(bytes[request.offset...]))
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

    private static func payload(configuration: PeripheralConfiguration, profile: DeviceProfile, txPower: Int8?) -> AdvertisingPayload {
        AdvertisingPayload.build(AdvertisingContent(
            name: configuration.name, serviceUUIDs: profile.advertisedServices, appearance: profile.appearance,
            txPowerLevel: txPower))
    }

    private func rebuildAdvertisingPayload(txPower: Int8) {
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

    /// Clean stop: advertising off, every link disconnected with Remote User Terminated
    /// (0x13), then HCI Reset. Calls `completion` once, when done or after 3 s at most.
    public func stop(completion: @escaping () -> Void) {
        guard stopCompletion == nil else { return }
        logger.debug("stopping: \(connections.count) link(s) to close")
        stopCompletion = completion
        if deviceStarted { device.stop() }
        if let timer = advertisingPhaseTimer { scheduler.cancel(timer) }
        guard hci.isReady else {
            finishStop()
            return
        }
        if isAdvertising || advertisingRequested {
            hci.send(.leSetAdvertisingEnable(false))
            setAdvertising(false, log: true)
        }
        for handle in connections.keys.sorted() {
            hci.send(.disconnect(handle: handle, reason: HCIStatus.remoteUserTerminated))
        }
        stopTimer = scheduler.schedule(after: .seconds(3)) { [weak self] in
            self?.logger.warning("links did not close within 3 s; resetting anyway")
            self?.resetAndFinish()
        }
        if connections.isEmpty { resetAndFinish() }
    }

    private func resetAndFinish() {
        if let stopTimer { scheduler.cancel(stopTimer) }
        stopTimer = nil
        hci.send(.reset) { [weak self] _ in self?.finishStop() }
    }

    private func finishStop() {
        guard let completion = stopCompletion else { return }
        stopCompletion = { }
        completion()
    }

    private var isStopping: Bool { stopCompletion != nil }

    // MARK: Advertising (Vol 6, Part B, 4.4.2; Apple Accessory Design Guidelines)

    private func setAdvertising(_ on: Bool, log: Bool) {
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

    // MARK: Links

    private func connectionOpened(_ event: LEConnectionComplete) {
        guard event.status == HCIStatus.success else {
            logger.warning("connection attempt failed", metadata: [LogKey.hciStatus: .string(Hex.byte(event.status))])
            return
        }
        // Legacy advertising ends when a connection is made (Vol 6, Part B, 4.4.2.4).
        if let timer = advertisingPhaseTimer { scheduler.cancel(timer) }
        advertisingPhaseTimer = nil
        isAdvertising = false
        advertisingRequested = false
        guard event.role == 0x01 else {
            logger.warning("link \(event.handle) opened in the central role; disconnecting")
            hci.send(.disconnect(handle: event.handle, reason: HCIStatus.remoteUserTerminated))
            return
        }
        let peer = ATTPeer(connectionHandle: event.handle, address: event.peerAddress)
        let server = ATTServer(database: database, peer: peer, scheduler: scheduler)
        server.delegate = self
        let connection = Connection(handle: event.handle, peer: peer, server: server, parameters: event.parameters)
        connections[event.handle] = connection
        hci.openLink(event.handle)
        statistics.connectionsTotal += 1
        logger.event(.connected, .notice, "connected to \(event.peerAddress)", [
            LogKey.peer: .string(event.peerAddress.description), LogKey.connHandle: .string("\(event.handle)"),
        ])
        if hci.info.supportsDataLengthExtension {
            hci.send(.leSetDataLength(handle: event.handle))
        }
        connection.parameterTimer = scheduler.schedule(after: configuration.parameterUpdateDelay) { [weak self, weak connection] in
            guard let self, let connection else { return }
            connection.parameterTimer = nil
            self.requestPreferredParameters(connection)
        }
        if deviceStarted { device.peerConnected(peer) }
        // Keep advertising while another central may connect.
        startAdvertising(fast: true)
    }

    private func connectionClosed(handle: UInt16, reason: UInt8) {
        guard let connection = connections.removeValue(forKey: handle) else { return }
        if let timer = connection.parameterTimer { scheduler.cancel(timer) }
        if let timer = connection.reassemblyTimer { scheduler.cancel(timer) }
        standard.connectionClosed(handle)
        logger.event(.disconnected, .notice, "disconnected from \(connection.peer.address)", [
            LogKey.peer: .string(connection.peer.address.description), LogKey.connHandle: .string("\(handle)"),
            LogKey.hciStatus: .string(Hex.byte(reason)),
        ])
        if deviceStarted { device.peerDisconnected(connection.peer) }
        if isStopping {
            if connections.isEmpty { resetAndFinish() }
            return
        }
        // Apple's guidelines: fast advertising for 30 s after every disconnection, even when
        // a slow phase was running for another central.
        startAdvertising(fast: true)
    }

    private func dropAllConnections(reason: String) {
        for handle in connections.keys.sorted() {
            connectionClosed(handle: handle, reason: HCIStatus.hardwareFailure)
        }
    }

    /// Vol 3, Part A, 4.20: the peripheral asks for its preferred parameters when the link's
    /// do not match them.
    /// The device's preferred parameters, or the recommended ones when the device's break the Core rules.
    private var preferredParameters: ConnectionParameters {
        let asked = device.profile.connectionParameters
        return asked.coreViolations.isEmpty ? asked : .recommended
    }

    private func requestPreferredParameters(_ connection: Connection) {
        let preferred = preferredParameters
        let current = connection.parameters
        if (preferred.intervalMin...preferred.intervalMax).contains(current.interval),
           current.latency == preferred.peripheralLatency, current.supervisionTimeout == preferred.supervisionTimeout {
            return
        }
        let id = connection.takeIdentifier()
        connection.pendingParameterUpdate = id
        let request = SignalingCommand.connectionParameterUpdateRequest(
            identifier: id, intervalMin: preferred.intervalMin, intervalMax: preferred.intervalMax,
            latency: preferred.peripheralLatency, timeout: preferred.supervisionTimeout)
        logger.info("asking for connection parameters \(preferred)", metadata: [LogKey.connHandle: "\(connection.handle)"])
        sendSignaling(request, on: connection)
    }

    // MARK: L2CAP

    /// How long the fragments of one L2CAP PDU may take: well above the longest connection
    /// interval (4 s, Vol 6, Part B, 4.5.1), so only a central that stopped mid-PDU hits it.
    static let reassemblyTimeout: Duration = .seconds(10)

    private func sendFrame(cid: UInt16, payload: ArraySlice<UInt8>, on handle: UInt16, priority: TransmitPriority) -> Bool {
        frame.removeAll(keepingCapacity: true)
        appendL2CAPFrame(cid: cid, payload: payload, to: &frame)
        return hci.sendL2CAP(handle: handle, pdu: frame[...], priority: priority)
    }

    private func sendSignaling(_ command: SignalingCommand, on connection: Connection) {
        var payload: [UInt8] = []
        command.encode(into: &payload)
        _ = sendFrame(cid: L2CAPChannel.leSignaling, payload: payload[...], on: connection.handle, priority: .required)
    }

    private func receiveACL(_ packet: ACLPacket) {
        guard let connection = connections[packet.handle] else {
            logger.warning("ACL data for unknown connection handle \(packet.handle) dropped")
            return
        }
        do {
            try connection.reassembler.receive(packet) { cid, payload in
                self.deliver(cid: cid, payload: payload, on: connection)
            }
        } catch {
            logger.warning("L2CAP: \(error)", metadata: [LogKey.connHandle: "\(packet.handle)"])
        }
        // A PDU left half-gathered is dropped after a while rather than kept forever.
        if connection.reassembler.isIncomplete {
            if connection.reassemblyTimer == nil {
                connection.reassemblyTimer = scheduler.schedule(after: Self.reassemblyTimeout) { [weak self, weak connection] in
                    guard let self, let connection else { return }
                    connection.reassemblyTimer = nil
                    guard connection.reassembler.isIncomplete else { return }
                    connection.reassembler.reset()
                    self.logger.warning("L2CAP: incomplete PDU dropped after \(Self.reassemblyTimeout) without its last fragment",
                                        metadata: [LogKey.connHandle: "\(connection.handle)"])
                }
            }
        } else if let timer = connection.reassemblyTimer {
            scheduler.cancel(timer)
            connection.reassemblyTimer = nil
        }
    }

    private func deliver(cid: UInt16, payload: ArraySlice<UInt8>, on connection: Connection) {
        switch cid {
        case L2CAPChannel.att:
            connection.server.receive(payload)
        case L2CAPChannel.leSignaling:
            handleSignaling(payload, on: connection)
        case L2CAPChannel.securityManager:
            if let answer = SecurityManager.answer(to: payload) {
                logger.info("pairing requested: not supported yet, answered Pairing Failed",
                            metadata: [LogKey.connHandle: "\(connection.handle)"])
                _ = sendFrame(cid: L2CAPChannel.securityManager, payload: answer[...], on: connection.handle, priority: .required)
            }
        default:
            logger.warning("L2CAP frame for unknown channel \(Hex.word(cid)) dropped",
                           metadata: [LogKey.connHandle: "\(connection.handle)"])
        }
    }

    private func handleSignaling(_ payload: ArraySlice<UInt8>, on connection: Connection) {
        let command: SignalingCommand
        do {
            command = try SignalingCommand(frame: payload)
        } catch {
            logger.warning("malformed LE signalling command: \(error)", metadata: [LogKey.connHandle: "\(connection.handle)"])
            // Vol 3, Part A, 4.1: reject what cannot be understood, with its identifier when it has one.
            if payload.count >= 2, payload[payload.startIndex + 1] != 0 {
                sendSignaling(.commandReject(identifier: payload[payload.startIndex + 1]), on: connection)
            }
            return
        }
        // Vol 3, Part A, 4: identifier 0x00 is illegal; such a command is dropped.
        guard command.identifier != 0 else { return }
        switch command.code {
        case SignalingCode.connectionParameterUpdateResponse:
            guard command.identifier == connection.pendingParameterUpdate else { return }
            connection.pendingParameterUpdate = nil
            var r = ByteReader(command.data)
            let result = (try? r.u16()) ?? 0xFFFF
            logger.info(result == 0 ? "central accepted the connection parameters" : "central rejected the connection parameters",
                        metadata: [LogKey.connHandle: "\(connection.handle)"])
        case SignalingCode.commandReject:
            if command.identifier == connection.pendingParameterUpdate {
                connection.pendingParameterUpdate = nil
                logger.info("central does not support connection parameter updates")
            }
        case SignalingCode.leCreditBasedConnectionRequest:
            sendSignaling(.leCreditBasedConnectionRefused(identifier: command.identifier), on: connection)
        case SignalingCode.creditBasedConnectionRequest:
            let channels = max(0, (command.data.count - 8) / 2)
            sendSignaling(.creditBasedConnectionRefused(identifier: command.identifier, channels: channels), on: connection)
        case SignalingCode.disconnectionRequest where command.data.count == 4:
            // No dynamic channel exists: Invalid CID in request, echoing the two CIDs (4.1).
            let cids = Array(command.data)
            sendSignaling(.commandReject(identifier: command.identifier, reason: 0x0002,
                                         data: [cids[2], cids[3], cids[0], cids[1]]), on: connection)
        default:
            if !SignalingCode.isResponse(command.code) {
                sendSignaling(.commandReject(identifier: command.identifier), on: connection)
            }
        }
    }

    private func disconnect(_ connection: Connection, reason: UInt8) {
        hci.send(.disconnect(handle: connection.handle, reason: reason))
    }

    // MARK: Diagnostics

    func diagnosticsFields() -> [(String, String)] {
        let now = scheduler.nowNanoseconds
        let uptime = statistics.startedNanoseconds == 0 ? 0 : (now &- statistics.startedNanoseconds) / 1_000_000
        let links = connections.values.sorted { $0.handle < $1.handle }.map { c in
            JSON.object([("handle", "\(c.handle)"), ("peer", JSON.string(c.peer.address.description)),
                         ("mtu", "\(c.server.mtu)"), ("interval_ms", "\(Double(c.parameters.interval) * 1.25)")])
        }
        return [
            ("device", JSON.string(type(of: device).deviceName)),
            ("name", JSON.string(configuration.name)),
            ("firmware", JSON.string("blemu \(configuration.firmware)")),
            ("address", JSON.string(address.description)),
            ("controller", JSON.string(configuration.controller)),
            ("uptime_ms", "\(uptime)"),
            ("connections", "\(connections.count)"),
            ("connections_total", "\(statistics.connectionsTotal)"),
            ("att_requests", "\(statistics.attRequests)"),
            ("att_errors", "\(statistics.attErrors)"),
            ("last_error", JSON.optionalString(statistics.lastError.map { opcode, handle, error in
                "\(error) for opcode \(Hex.byte(opcode)) on handle \(Hex.word(handle))"
            })),
            ("reads", "\(statistics.diagnosticsReads)"),
            ("links", JSON.array(links)),
        ]
    }
}

// MARK: - HCI events

extension Peripheral: HCIHostDelegate {
    public func hciHostDidBecomeReady(_ host: HCIHost) {
        guard !isStopping else { return }
        if !deviceStarted {
            deviceStarted = true
            device.start(context: self)
        }
        hci.send(.leSetRandomAddress(address)) { [weak self] result in
            guard let self, !result.succeeded else { return }
            self.logger.error("controller refused the random address \(self.address)",
                              metadata: [LogKey.hciStatus: .string(result.status.map(Hex.byte) ?? "timeout")])
        }
        // TX Power Level in the advertisement is the controller's advertising power
        // (Vol 4, Part E, 7.8.6), so a phone can estimate path loss from RSSI.
        if device.profile.txPowerLevel != nil {
            hci.send(.leReadAdvertisingChannelTxPower) { [weak self] result in
                guard let self else { return }
                if case .complete(let p) = result, p.count >= 2, p[0] == HCIStatus.success {
                    self.rebuildAdvertisingPayload(txPower: Int8(bitPattern: p[1]))
                }
                self.startAdvertising(fast: true)
            }
        } else {
            startAdvertising(fast: true)
        }
    }

    public func hciHostDidReset(_ host: HCIHost, reason: String) {
        dropAllConnections(reason: reason)
        isAdvertising = false
        advertisingRequested = false
    }

    public func hciHost(_ host: HCIHost, didReceive event: HCIEvent) {
        switch event {
        case .leConnectionComplete(let complete):
            connectionOpened(complete)
        case let .disconnectionComplete(status, handle, reason):
            guard status == HCIStatus.success else {
                logger.warning("disconnection failed", metadata: [LogKey.connHandle: "\(handle)", LogKey.hciStatus: .string(Hex.byte(status))])
                return
            }
            connectionClosed(handle: handle, reason: reason)
        case let .leConnectionUpdateComplete(status, handle, parameters):
            guard status == HCIStatus.success, let connection = connections[handle] else { return }
            connection.parameters = parameters
            logger.info("connection parameters now interval \(Double(parameters.interval) * 1.25) ms, latency \(parameters.latency), timeout \(Int(parameters.supervisionTimeout) * 10) ms",
                        metadata: [LogKey.connHandle: "\(handle)"])
        case let .leRemoteConnectionParameterRequest(handle, intervalMin, intervalMax, latency, timeout):
            // Vol 6, Part B, 5.1.7: accept what the Core allows, refuse the rest with 0x3B.
            let asked = ConnectionParameters(intervalMin: intervalMin, intervalMax: intervalMax,
                                             peripheralLatency: latency, supervisionTimeout: timeout)
            if asked.coreViolations.isEmpty {
                hci.send(.leRemoteConnectionParameterRequestReply(handle: handle, intervalMin: intervalMin,
                                                                  intervalMax: intervalMax, latency: latency, timeout: timeout))
            } else {
                logger.info("refused connection parameters: \(asked.coreViolations.joined(separator: "; "))",
                            metadata: [LogKey.connHandle: "\(handle)"])
                hci.send(.leRemoteConnectionParameterRequestNegativeReply(handle: handle))
            }
        case let .leDataLengthChange(handle, maxTx, _, maxRx, _):
            logger.debug("data length now \(maxTx) out, \(maxRx) in", metadata: [LogKey.connHandle: "\(handle)"])
        case let .lePHYUpdateComplete(status, handle, tx, rx):
            logger.debug("PHY update: status \(Hex.byte(status)), tx \(tx), rx \(rx)", metadata: [LogKey.connHandle: "\(handle)"])
        case .dataBufferOverflow:
            logger.error("controller reports an ACL buffer overflow: it lost data")
        default:
            break
        }
    }

    public func hciHost(_ host: HCIHost, didReceiveACL packet: ACLPacket) {
        receiveACL(packet)
    }

    public func hciHost(_ host: HCIHost, transmitQueueHasRoomFor handle: UInt16) {
        guard deviceWaitingForRoom else { return }
        deviceWaitingForRoom = false
        device.peripheralIsReady()
    }
}

// MARK: - ATT server events

extension Peripheral: ATTServerDelegate {
    public func attServer(_ server: ATTServer, send pdu: ArraySlice<UInt8>, kind: ATTSendKind) -> Bool {
        sendFrame(cid: L2CAPChannel.att, payload: pdu, on: server.peer.connectionHandle,
                  priority: kind == .notification ? .bestEffort : .required)
    }

    public func attServer(_ server: ATTServer, answered opcode: UInt8, handle: UInt16, error: ATTError?) {
        statistics.attRequests += 1
        guard let error else { return }
        statistics.attErrors += 1
        // Kept as values and formatted only when the Diagnostics value is read.
        statistics.lastError = (opcode, handle, error)
        // Attribute Not Found ends every discovery: normal, so it stays at debug level.
        let level: Logger.Level = error == .attributeNotFound ? .debug : .info
        logger.event(.attError, level, "ATT \(error) for opcode \(Hex.byte(opcode)), handle \(Hex.word(handle))", [
            LogKey.peer: .string(server.peer.address.description),
            LogKey.connHandle: .string("\(server.peer.connectionHandle)"),
            LogKey.attOpcode: .string(Hex.byte(opcode)), LogKey.attHandle: .string(Hex.word(handle)),
            LogKey.attError: .string(Hex.byte(error.rawValue)),
        ])
    }

    public func attServer(_ server: ATTServer, mtuChanged mtu: Int) {
        logger.event(.mtuChanged, .info, "ATT MTU now \(mtu)", [
            LogKey.peer: .string(server.peer.address.description),
            LogKey.connHandle: .string("\(server.peer.connectionHandle)"),
        ])
    }

    public func attServer(_ server: ATTServer, configured characteristic: Characteristic, from old: UInt16, to new: UInt16) {
        let event: BlemuEvent = new == 0 ? .unsubscribed : .subscribed
        let what = new & 0x0002 != 0 ? "indications" : "notifications"
        logger.event(event, .info, new == 0 ? "unsubscribed from \(characteristic.uuid)" : "subscribed to \(what) of \(characteristic.uuid)", [
            LogKey.peer: .string(server.peer.address.description),
            LogKey.connHandle: .string("\(server.peer.connectionHandle)"),
            LogKey.attHandle: .string(Hex.word(characteristic.valueHandle)),
        ])
        if deviceStarted {
            device.subscriptionChanged(characteristic, peer: server.peer, notify: new & 0x0001 != 0, indicate: new & 0x0002 != 0)
        }
    }

    public func attServer(_ server: ATTServer, wrote characteristic: Characteristic, count: Int, withResponse: Bool) {
        logger.event(.write, .info, "\(withResponse ? "write" : "write command") of \(count) bytes to \(characteristic.uuid)", [
            LogKey.peer: .string(server.peer.address.description),
            LogKey.connHandle: .string("\(server.peer.connectionHandle)"),
            LogKey.attHandle: .string(Hex.word(characteristic.valueHandle)),
        ])
    }

    public func attServerTransactionTimedOut(_ server: ATTServer) {
        logger.error("indication not confirmed within 30 s: the ATT bearer is dead, disconnecting (Vol 3, Part F, 3.3.3)",
                     metadata: [LogKey.connHandle: "\(server.peer.connectionHandle)"])
        if let connection = connections[server.peer.connectionHandle] {
            disconnect(connection, reason: HCIStatus.remoteUserTerminated)
        }
    }
}

// MARK: - The device's view

extension Peripheral: DeviceContext {
    public var peers: [ATTPeer] { connections.values.map(\.peer).sorted { $0.connectionHandle < $1.connectionHandle } }

    @discardableResult
    public func notify(_ characteristic: Characteristic, value: [UInt8]) -> Bool {
        var all = true
        for connection in connections.values where connection.server.notify(characteristic, value: value) == .queueFull {
            all = false
        }
        if !all { deviceWaitingForRoom = true }
        return all
    }

    @discardableResult
    public func indicate(_ characteristic: Characteristic, value: [UInt8], to peer: ATTPeer?) -> Bool {
        var all = true
        for connection in connections.values where peer == nil || connection.peer == peer {
            if connection.server.indicate(characteristic, value: value) == .queueFull { all = false }
        }
        return all
    }

    public func isSubscribed(_ characteristic: Characteristic, peer: ATTPeer?, indications: Bool) -> Bool {
        connections.values.contains { connection in
            (peer == nil || connection.peer == peer) && connection.server.isSubscribed(characteristic, indications: indications)
        }
    }

    public func log(_ event: BlemuEvent, _ level: Logger.Level, _ message: @autoclosure () -> String,
                    _ metadata: @autoclosure () -> Logger.Metadata) {
        logger.event(event, level, "\(message())", metadata())
    }
}
