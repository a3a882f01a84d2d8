import BlemuATT
import BlemuCore
import BlemuCrypto
import BlemuGATT
import BlemuGATTClient
import BlemuHCI
import BlemuL2CAP
import BlemuSMP
import BlemuSecurity
import Logging

/// Why a central operation failed.
public enum CentralError: Error, Equatable, CustomStringConvertible {
    /// The controller is not initialized (yet, or any more).
    case notReady
    /// A connection attempt is already under way.
    case busy
    /// No connection within the time given: the attempt was cancelled.
    case timeout
    /// The controller refused or failed the operation with this HCI status.
    case controller(status: UInt8, what: String)

    public var description: String {
        switch self {
        case .notReady: return "the controller is not ready"
        case .busy: return "a connection attempt is already under way"
        case .timeout: return "no connection within the time given"
        case .controller(let status, let what): return "\(what) failed with HCI status \(Hex.byte(status))"
        }
    }
}

/// The central role on one controller (Vol 3, Part C, 9.3): scanning, initiating, and the
/// links it makes, each with a GATT client. Beside `PeripheralHost`, not inside it: it owns a
/// controller of its own (`init(controller:...)`), or shares the peripherals' one
/// (`init(sharing:...)` and `PeripheralHost.share(with:)`), getting the events and links that
/// are the central's.
public final class CentralHost: HCIHostDelegate, HCIRoleSharing, ATTServerDelegate {
    public static let connectTimeout: Duration = .seconds(10)
    /// The stop waits this long at most for links to close and the controller to reset.
    public static let stopDeadline: Duration = .seconds(3)

    public let controller: String
    public let hci: HCIHost
    /// Whether another host owns the controller (it initializes, stops and resets it).
    public let isSharing: Bool
    public let scheduler: TimerScheduling
    public var logger: Logger {
        didSet { l2cap.logger = logger }
    }
    public private(set) var advertisers = AdvertiserTable()
    public private(set) var links: [UInt16: CentralLink] = [:]

    /// The controller is initialized (after every controller (re)start).
    public var onReady: (() -> Void)?
    /// Each advertising report, merged into what is known of its advertiser.
    public var onAdvertisement: ((Advertisement, AdvertiserTable.Change) -> Void)?
    /// A controller that cannot do what was asked (e.g. the scan parameters refused).
    public var onError: ((String) -> Void)?
    /// Pairing and encryption of the links (`attach(security:)`); nil: pairing is refused.
    public private(set) var security: CentralSecurity?
    /// A static random address this central scans and connects from (set on an owned
    /// controller when it is ready), so a peripheral that bonded with it knows it next time;
    /// nil: the controller's public address.
    public var ownRandomAddress: BluetoothAddress?
    private var ownAddressType: AddressType { ownRandomAddress != nil && !isSharing ? .randomDevice : .publicDevice }

    private var scanWanted: (active: Bool, filterDuplicates: Bool)?
    /// Sharing a controller: whether its owner uses the extended commands (set when it is ready).
    private var sharedExtendedCommands = false
    /// The LE extended scanning and initiating commands, or the legacy ones: a controller's own
    /// choice when it is ours, the owner's when shared.
    private var usesExtendedCommands: Bool { isSharing ? sharedExtendedCommands : hci.info.supportsExtendedAdvertising }
    private var scanning = false
    private var connecting: (peer: BluetoothAddress, timer: TimerID?, cancelled: Bool,
                             completion: (Result<CentralLink, CentralError>) -> Void)?
    private let database: GATTDatabase
    /// What the central's links share: the HCI, the timers, the budget of lines peers cause.
    let l2cap: L2CAPLinkContext
    private var stopCompletion: (() -> Void)?
    private var stopTimer: TimerID?

    /// A central with a controller of its own.
    public convenience init(controller: String, name: String = "blemu central", scheduler: TimerScheduling, logger: Logger,
                            output: @escaping (UInt8, ArraySlice<UInt8>) -> Bool) throws(GATTDatabaseError) {
        var logger = logger
        logger[metadataKey: LogKey.controller] = .string(controller)
        try self.init(controller: controller, name: name, hci: HCIHost(scheduler: scheduler, logger: logger, transmitBufferCapacity: 4 + ATTServer.maximumMTU,
                                                                     output: output),
                      sharing: false, scheduler: scheduler, logger: logger)
        hci.delegate = self
    }

    /// A central on the controller of `hci`, which another host owns: that host must pass
    /// it what is not its own (`PeripheralHost.share(with:)`).
    public convenience init(sharing hci: HCIHost, controller: String, name: String = "blemu central",
                            scheduler: TimerScheduling, logger: Logger) throws(GATTDatabaseError) {
        var logger = logger
        logger[metadataKey: LogKey.controller] = .string(controller)
        try self.init(controller: controller, name: name, hci: hci, sharing: true, scheduler: scheduler, logger: logger)
    }

    private init(controller: String, name: String, hci: HCIHost, sharing: Bool, scheduler: TimerScheduling,
                 logger: Logger) throws(GATTDatabaseError) {
        self.controller = controller
        self.scheduler = scheduler
        self.logger = logger
        self.hci = hci
        isSharing = sharing
        l2cap = L2CAPLinkContext(hci: hci, scheduler: scheduler, logger: logger)
        let gap = Service(GATTType.gapService) {
            Characteristic(GATTType.deviceName, properties: [.read], cachedValue: Array(name.utf8.prefix(248)))
            Characteristic(GATTType.appearance, properties: [.read], cachedValue: [0x00, 0x00])
        }
        let gatt = Service(GATTType.gattService) {
            Characteristic(GATTType.serviceChanged, properties: [.indicate], length: .fixed(4))
        }
        database = try GATTDatabase(services: [gap, gatt])
    }

    // MARK: The controller

    public func controllerUp() { hci.start() }

    public func controllerDown(reason: String) {
        hci.halt()
        scanning = false
        failConnecting(.notReady)
        for handle in links.keys.sorted() { linkClosed(handle, reason: HCIStatus.hardwareFailure) }
        if stopCompletion != nil { finishStop() }
    }

    public func receive(packetType: UInt8, packet: ArraySlice<UInt8>) {
        switch packetType {
        case 0x04: hci.receiveEvent(packet)
        case 0x02: hci.receiveACL(packet)
        default: break
        }
    }

    public var isReady: Bool { hci.isReady }

    // MARK: Scanning (Vol 3, Part C, 9.2.6 and Vol 6, Part B, 4.4.3)

    /// Scans until `stopScanning`: active scanning asks each advertiser for its scan response.
    /// Extended scanning when the controller has extended advertising (its legacy commands
    /// would be refused beside extended ones), legacy otherwise.
    public func startScanning(active: Bool = true, filterDuplicates: Bool = false) {
        scanWanted = (active, filterDuplicates)
        guard hci.isReady, !scanning, connecting == nil else { return }
        scanning = true
        let extended = usesExtendedCommands
        let parameters: HCICommand = extended
            ? .leSetExtendedScanParameters(active: active, ownAddressType: ownAddressType)
            : .leSetScanParameters(active: active, ownAddressType: ownAddressType)
        hci.send(parameters) { [weak self] result in
            guard let self, !result.succeeded, result != .cancelled else { return }
            self.scanning = false
            self.onError?("the controller refused the scan parameters (HCI status \(result.status.map(Hex.byte) ?? "timeout"))")
        }
        hci.send(extended ? .leSetExtendedScanEnable(true, filterDuplicates: filterDuplicates)
                          : .leSetScanEnable(true, filterDuplicates: filterDuplicates)) { [weak self] result in
            guard let self, !result.succeeded, result != .cancelled else { return }
            self.scanning = false
            self.onError?("the controller refused to scan (HCI status \(result.status.map(Hex.byte) ?? "timeout"))")
        }
        logger.info("scanning (\(active ? "active" : "passive"), \(extended ? "extended" : "legacy") commands)")
    }

    public func stopScanning() {
        scanWanted = nil
        pauseScanning()
    }

    private func pauseScanning() {
        guard scanning, hci.isReady else { return }
        scanning = false
        hci.send(usesExtendedCommands ? .leSetExtendedScanEnable(false) : .leSetScanEnable(false))
    }

    // MARK: Connecting (Vol 3, Part C, 9.3.6 – 9.3.8)

    /// Connects to `address`; scanning pauses meanwhile and resumes after. The attempt is
    /// cancelled (LE Create Connection Cancel) after `timeout`.
    public func connect(to address: BluetoothAddress, addressType: UInt8, timeout: Duration = CentralHost.connectTimeout,
                        parameters: ConnectionRequestParameters = ConnectionRequestParameters(),
                        completion: @escaping (Result<CentralLink, CentralError>) -> Void) {
        guard hci.isReady, stopCompletion == nil else { return completion(.failure(.notReady)) }
        guard connecting == nil else { return completion(.failure(.busy)) }
        pauseScanning()
        let command: HCICommand = usesExtendedCommands
            ? .leExtendedCreateConnection(peer: LEAddress(address, peerAddressType: addressType), ownAddressType: ownAddressType,
                                          parameters: parameters)
            : .leCreateConnection(peer: LEAddress(address, peerAddressType: addressType), ownAddressType: ownAddressType,
                                  parameters: parameters)
        connecting = (address, nil, false, completion)
        logger.info("connecting to \(address)")
        hci.send(command) { [weak self] result in
            guard let self, self.connecting?.peer == address else { return }
            if case .status(let status) = result, status == HCIStatus.success { return }
            self.failConnecting(.controller(status: result.status ?? 0xFF, what: command.name))
        }
        connecting?.timer = scheduler.schedule(after: timeout) { [weak self] in
            guard let self, self.connecting?.peer == address else { return }
            self.connecting?.timer = nil
            self.connecting?.cancelled = true
            // 7.8.13: the controller then ends the attempt with LE Connection Complete, status 0x02.
            self.hci.send(.leCreateConnectionCancel)
        }
    }

    private func failConnecting(_ error: CentralError) {
        guard let attempt = connecting else { return }
        connecting = nil
        if let timer = attempt.timer { scheduler.cancel(timer) }
        attempt.completion(.failure(error))
        resumeScanning()
    }

    private func resumeScanning() {
        if let wanted = scanWanted, connecting == nil { startScanning(active: wanted.active, filterDuplicates: wanted.filterDuplicates) }
    }

    // MARK: Stopping

    /// Scanning off, every link disconnected (0x13), the controller reset; `completion` once
    /// done or after `stopDeadline`. Sharing a controller: scanning off and links asked to
    /// close, then `completion` at once (the owner's stop waits for them and resets).
    public func stop(completion: @escaping () -> Void) {
        if isSharing {
            // The controller's owner resets it; the central only lets go of what is its own.
            closeForStop()
            return completion()
        }
        guard stopCompletion == nil else { return }
        stopCompletion = completion
        scanWanted = nil
        guard hci.isReady else { return finishStop() }
        hci.cancelQueuedCommands()
        pauseScanning()
        if connecting != nil { hci.send(.leCreateConnectionCancel) }
        for handle in links.keys.sorted() { hci.send(.disconnect(handle: handle, reason: HCIStatus.remoteUserTerminated)) }
        stopTimer = scheduler.schedule(after: Self.stopDeadline) { [weak self] in self?.finishStop() }
        if links.isEmpty { resetThenFinish() }
    }

    private func resetThenFinish() {
        hci.send(.reset) { [weak self] _ in self?.finishStop() }
    }

    private func finishStop() {
        if let stopTimer { scheduler.cancel(stopTimer) }
        stopTimer = nil
        guard let completion = stopCompletion else { return }
        stopCompletion = nil
        hci.halt()
        completion()
    }

    // MARK: HCIHostDelegate

    public func hciHostDidBecomeReady(_ host: HCIHost) {
        if let ownRandomAddress, !isSharing { hci.send(.leSetRandomAddress(ownRandomAddress)) }
        security?.localAddress = ownSMPAddress
        logger.event(.controllerUp, .info, "controller \(controller) ready for the central role")
        onReady?()
        resumeScanning()
    }

    public func hciHostDidReset(_ host: HCIHost, reason: String) {
        scanning = false
        failConnecting(.notReady)
        for handle in links.keys.sorted() { linkClosed(handle, reason: HCIStatus.hardwareFailure) }
    }

    public func hciHost(_ host: HCIHost, didReceive event: HCIEvent) {
        _ = claim(event)
    }

    // MARK: HCIRoleSharing

    public func sharedControllerReady(extendedCommands: Bool) {
        sharedExtendedCommands = extendedCommands
        hciHostDidBecomeReady(hci)
    }

    public func sharedControllerReset(reason: String) { hciHostDidReset(hci, reason: reason) }

    public func ownsLink(_ handle: UInt16) -> Bool { links[handle] != nil }

    public func receiveACL(_ packet: ACLPacket) { hciHost(hci, didReceiveACL: packet) }

    public func transmitQueueHasRoom(for handle: UInt16) {}

    public var openLinkCount: Int { links.count }

    public func closeForStop() {
        scanWanted = nil
        pauseScanning()
        if connecting != nil { hci.send(.leCreateConnectionCancel) }
        for handle in links.keys.sorted() { hci.send(.disconnect(handle: handle, reason: HCIStatus.remoteUserTerminated)) }
    }

    /// Handles the event when it is the central's; false leaves it to the controller's owner.
    public func claim(_ event: HCIEvent) -> Bool {
        switch event {
        case .leAdvertisingReport(let reports):
            for report in reports {
                // 0x04 is SCAN_RSP; 0x00 ADV_IND and 0x01 ADV_DIRECT_IND are connectable.
                let (advertisement, change) = advertisers.record(
                    address: report.address, addressType: report.addressType, rssi: report.rssi == 127 ? nil : report.rssi,
                    connectable: report.eventType <= 0x01, isScanResponse: report.eventType == 0x04, data: report.data,
                    now: scheduler.nowNanoseconds)
                onAdvertisement?(advertisement, change)
            }
        case .leExtendedAdvertisingReport(let reports):
            for report in reports where report.dataStatus == 0 {
                let (advertisement, change) = advertisers.record(
                    address: report.address, addressType: report.addressType, rssi: report.rssi,
                    connectable: report.isScanResponse ? nil : report.isConnectable, isScanResponse: report.isScanResponse,
                    data: report.data, txPower: report.txPower, now: scheduler.nowNanoseconds)
                onAdvertisement?(advertisement, change)
            }
        case .leConnectionComplete(let complete):
            // 7.7.65.1: role 0x00 is the central's; a failed attempt is ours when one is under way.
            guard complete.role == 0x00, complete.status == HCIStatus.success || connecting != nil else {
                return isSharing ? false : { connectionCompleted(complete); return true }()
            }
            connectionCompleted(complete)
        case let .disconnectionComplete(status, handle, reason):
            guard links[handle] != nil else { return false }
            guard status == HCIStatus.success else { return true }
            linkClosed(handle, reason: reason)
            if stopCompletion != nil, links.isEmpty { resetThenFinish() }
        case let .leConnectionUpdateComplete(status, handle, parameters):
            guard let link = links[handle] else { return false }
            guard status == HCIStatus.success else { return true }
            link.parameters = parameters
            logger.info("link \(handle): interval \(Double(parameters.interval) * 1.25) ms, latency \(parameters.latency), timeout \(Int(parameters.supervisionTimeout) * 10) ms")
        case let .leRemoteConnectionParameterRequest(handle, intervalMin, intervalMax, latency, timeout):
            guard links[handle] != nil || !isSharing else { return false }
            // Vol 4, Part E, 7.7.65.6: the peer's controller asks; the central host decides.
            let asked = ConnectionParameters(intervalMin: intervalMin, intervalMax: intervalMax, peripheralLatency: latency,
                                             supervisionTimeout: timeout)
            if asked.coreViolations.isEmpty {
                hci.send(.leRemoteConnectionParameterRequestReply(handle: handle, intervalMin: intervalMin, intervalMax: intervalMax,
                                                                  latency: latency, timeout: timeout))
            } else {
                hci.send(.leRemoteConnectionParameterRequestNegativeReply(handle: handle))
            }
        case let .encryptionChange(status, handle, enabled):
            guard links[handle] != nil else { return false }
            security?.encryptionChanged(on: handle, status: status, enabled: enabled != 0)
        case let .encryptionChangeV2(status, handle, enabled, keySize):
            guard links[handle] != nil else { return false }
            security?.encryptionChanged(on: handle, status: status, enabled: enabled != 0, keySize: keySize)
        case let .encryptionKeyRefreshComplete(status, handle):
            guard links[handle] != nil else { return false }
            security?.encryptionChanged(on: handle, status: status, enabled: true)
        case .leLongTermKeyRequest(let handle, _, _):
            guard links[handle] != nil || !isSharing else { return false }
            // Only a peripheral is asked for a key; refuse whatever asks.
            hci.send(.leLongTermKeyRequestNegativeReply(handle: handle))
        case let .leDataLengthChange(handle, _, _, _, _), let .lePHYUpdateComplete(_, handle, _, _):
            return links[handle] != nil
        default:
            return false
        }
        return true
    }

    public func hciHost(_ host: HCIHost, didReceiveACL packet: ACLPacket) {
        links[packet.handle]?.l2cap.receive(packet)
    }

    public func hciHost(_ host: HCIHost, transmitQueueHasRoomFor handle: UInt16) {}

    // MARK: Security

    /// The address SMP hashes for this side of a link (Vol 3, Part H, 2.2.5-2.2.8: ia/iat).
    public var ownSMPAddress: LEAddress {
        if let ownRandomAddress, !isSharing { return LEAddress(ownRandomAddress, isRandom: true) }
        return LEAddress(hci.info.address, isRandom: false)
    }

    /// Pairs and encrypts this central's links with `security`: SMP on CID 0x0006 goes to it,
    /// it starts encryption through LE Enable Encryption (Vol 4, Part E, 7.8.24) and hears
    /// Encryption Change.
    public func attach(security: CentralSecurity) {
        self.security = security
        security.localAddress = ownSMPAddress
        security.sendSMP = { [weak self] handle, pdu in
            _ = self?.links[handle]?.l2cap.send(cid: L2CAPChannel.securityManager, pdu[...], priority: .required)
        }
        security.startEncryption = { [weak self] handle, key in
            guard let self else { return }
            self.hci.send(.leEnableEncryption(handle: handle, randomNumber: key.randomNumber,
                                              encryptedDiversifier: key.encryptedDiversifier, key: key.key)) { [weak self] result in
                // Command Status with an error: no Encryption Change will come.
                guard let self, !result.succeeded, result != .cancelled else { return }
                self.security?.encryptionChanged(on: handle, status: result.status ?? 0xFF, enabled: false)
            }
        }
    }

    // MARK: Links

    private func connectionCompleted(_ complete: LEConnectionComplete) {
        guard complete.role == 0x00 else {
            // A link in the peripheral role is not ours to keep.
            if complete.status == HCIStatus.success {
                hci.send(.disconnect(handle: complete.handle, reason: HCIStatus.remoteUserTerminated))
            }
            return
        }
        guard let attempt = connecting else {
            if complete.status == HCIStatus.success {
                hci.send(.disconnect(handle: complete.handle, reason: HCIStatus.remoteUserTerminated))
            }
            return
        }
        connecting = nil
        if let timer = attempt.timer { scheduler.cancel(timer) }
        guard complete.status == HCIStatus.success else {
            attempt.completion(.failure(attempt.cancelled ? .timeout : .controller(status: complete.status, what: "connecting")))
            resumeScanning()
            return
        }
        let l2capLink = L2CAPLink(handle: complete.handle, role: .central, context: l2cap)
        let link = CentralLink(l2cap: l2capLink, peer: complete.peerAddress, peerAddressType: complete.peerAddressType,
                               parameters: complete.parameters, database: database, host: self)
        l2capLink.register(cid: L2CAPChannel.securityManager) { [weak self, unowned l2capLink] payload in
            self?.securityManagerPDU(payload, on: l2capLink)
        }
        links[complete.handle] = link
        hci.openLink(complete.handle)
        security?.linkOpened(complete.handle, peer: complete.peer)
        logger.event(.connected, .notice, "connected to \(complete.peerAddress) as central", [
            LogKey.peer: .string(complete.peerAddress.description), LogKey.connHandle: .string("\(complete.handle)"),
        ])
        // Longer packets and the faster PHY where the controller has them (the peer's controller
        // may still say no; the link works either way).
        if hci.info.supportsDataLengthExtension { hci.send(.leSetDataLength(handle: complete.handle)) }
        if hci.info.supports2MPHY { hci.send(.leSetPHY2M(handle: complete.handle)) }
        attempt.completion(.success(link))
        resumeScanning()
    }

    private func linkClosed(_ handle: UInt16, reason: UInt8) {
        guard let link = links.removeValue(forKey: handle) else { return }
        hci.closeLink(handle)
        security?.linkClosed(handle)
        logger.event(.disconnected, .notice, "disconnected from \(link.peer)", [
            LogKey.peer: .string(link.peer.description), LogKey.connHandle: .string("\(handle)"),
            LogKey.reason: .string(Hex.byte(reason)),
        ])
        link.closed(reason: reason)
    }

    /// SMP (CID 0x0006) of a link: to the security layer, or, without one, pairing is refused
    /// with Pairing Failed, as the peripheral side answers.
    private func securityManagerPDU(_ payload: ArraySlice<UInt8>, on link: L2CAPLink) {
        if let security { return security.receive(payload, on: link.handle) }
        if let answer = SecurityManager.answer(to: payload) {
            _ = link.send(cid: L2CAPChannel.securityManager, answer[...], priority: .required)
        }
    }

    // MARK: ATTServerDelegate (our own small server, whose PDUs go to its bearer)

    public func attServerTransactionTimedOut(_ server: ATTServer) {}
}
