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
    /// The attempt was called off (`cancelConnecting`) before a connection was made.
    case cancelled

    public var description: String {
        switch self {
        case .notReady: return "the controller is not ready"
        case .busy: return "a connection attempt is already under way"
        case .timeout: return "no connection within the time given"
        case .controller(let status, let what): return "\(what) failed with HCI status \(Hex.byte(status))"
        case .cancelled: return "the connection attempt was called off"
        }
    }
}

/// How to scan (Vol 4, Part E, 7.8.10 and 7.8.64): active or passive, duplicates filtered or
/// not, on which PHYs (LE Coded only with the extended commands), the interval and window (0.625 ms
/// units, 0x0004-0xFFFF, window ≤ interval), and from which own address type (nil: the central's).
public struct ScanSettings: Equatable, Sendable {
    public var active: Bool
    public var filterDuplicates: Bool
    public var phys: ScanningPHYs
    public var interval: UInt16
    public var window: UInt16
    public var ownAddressType: AddressType?

    public init(active: Bool = true, filterDuplicates: Bool = false, phys: ScanningPHYs = .oneM,
                interval: UInt16 = 0x0060, window: UInt16 = 0x0030, ownAddressType: AddressType? = nil) {
        self.active = active
        self.filterDuplicates = filterDuplicates
        self.phys = phys
        self.interval = interval
        self.window = window
        self.ownAddressType = ownAddressType
    }
}

/// The central role on one controller (Vol 3, Part C, 9.3): scanning, initiating, and the
/// links it makes, each with a GATT client. A peer of `PeripheralHost` on the controller's
/// `ControllerHost`, which owns the controller and gives this role its own: the links made in the
/// central role, their events and data, the advertising reports.
public final class CentralHost: ATTServerDelegate {
    public static let connectTimeout: Duration = .seconds(10)
    /// The largest PDU the central's links send, L2CAP header included: an ATT PDU at the largest
    /// ATT_MTU (the `ControllerHost`'s `transmitBufferCapacity`).
    public static let largestPDU = 4 + ATTServer.maximumMTU

    /// The host of the controller this role is on.
    public let controller: ControllerHost
    public var hci: HCIHost { controller.hci }
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
    /// Each advertising report on its own (a truncated one too, which `onAdvertisement` does
    /// not see), after it was merged: for a program that reports every one.
    public var onReport: ((AdvertisingReportDetails) -> Void)?
    /// A controller that cannot do what was asked (e.g. the scan parameters refused).
    public var onError: ((String) -> Void)?
    /// The data of a periodic advertising train synchronized to (`syncToPeriodicTrains`), whole
    /// (its fragments reassembled); `truncated` when the controller or the 1650-byte bound cut it.
    public var onPeriodicData: ((PeriodicTrain, [UInt8], _ rssi: Int8?, _ truncated: Bool) -> Void)?
    /// A train synchronized to (`failure` nil), lost (the train and why), or not synchronized
    /// to (no train, and why).
    public var onPeriodicSync: ((PeriodicTrain?, _ address: BluetoothAddress, _ sid: UInt8, _ failure: String?) -> Void)?
    /// The periodic trains (Vol 6, Part B, 4.4.2.12): synchronized to while `periodicSyncWanted`.
    public private(set) var periodic = PeriodicTrains()
    public private(set) var periodicSyncWanted = false
    private var createSyncTimer: TimerID?
    /// How long a Create Sync may wait for its train before it is cancelled (7.8.68).
    public static let createSyncPatience: Duration = .seconds(5)
    /// Pairing and encryption of the links (`attach(security:)`); nil: pairing is refused.
    public private(set) var security: CentralSecurity?
    /// A static random address this central scans and connects from (set when the controller is
    /// ready), so a peripheral that bonded with it knows it next time; nil: the controller's public
    /// address. Used where no device advertises on the controller, or where the controller has no
    /// public address: LE Set Random Address sets the one random address of a controller (Vol 4,
    /// Part E, 7.8.4), which legacy advertising uses, so beside a device it must be the device's.
    public var ownRandomAddress: BluetoothAddress?
    private var usedRandomAddress: BluetoothAddress? {
        controller.peripheralRole == nil || !hasPublicAddress ? ownRandomAddress : nil
    }
    /// Some virtual or unprogrammed controllers answer Read BD_ADDR (Vol 4, Part E, 7.4.6) with
    /// 00:00:00:00:00:00: no address to connect from, nor to distribute as an identity (Vol 3,
    /// Part H, 3.6.5 allows a static random one instead).
    private var hasPublicAddress: Bool { hci.info.address.value != 0 }
    private var ownAddressType: AddressType { usedRandomAddress != nil ? .randomDevice : .publicDevice }

    private var scanWanted: ScanSettings?
    /// The LE extended scanning and initiating commands, or the legacy ones: the controller's
    /// one choice for every role on it.
    private var usesExtendedCommands: Bool { controller.usesExtendedCommands }
    /// Whether the controller took LE Set Extended Scan Parameters: from then on it refuses the
    /// legacy scanning and initiating commands (Vol 4, Part E, 3.1.1), so no fallback to them.
    private var tookExtendedScanning = false
    private var scanning = false
    private var connecting: (peer: LEAddress, timer: TimerID?, cancelled: Bool, calledOff: Bool, ownAddress: LEAddress?,
                             completion: (Result<CentralLink, CentralError>) -> Void)?
    private let database: GATTDatabase
    /// What the central's links share: the HCI, the timers, the budget of lines peers cause.
    let l2cap: L2CAPLinkContext

    /// The central role on `controller`, beside the peripheral role when there is one.
    public init(on controller: ControllerHost, name: String = "blemu central") throws(GATTDatabaseError) {
        self.controller = controller
        scheduler = controller.scheduler
        logger = controller.logger
        l2cap = L2CAPLinkContext(hci: controller.hci, scheduler: controller.scheduler, logger: controller.logger)
        let gap = Service(GATTType.gapService) {
            Characteristic(GATTType.deviceName, properties: [.read], cachedValue: Array(name.utf8.prefix(248)))
            Characteristic(GATTType.appearance, properties: [.read], cachedValue: [0x00, 0x00])
        }
        let gatt = Service(GATTType.gattService) {
            Characteristic(GATTType.serviceChanged, properties: [.indicate], length: .fixed(4))
        }
        database = try GATTDatabase(services: [gap, gatt])
        controller.register(self, as: .central)
    }

    public var isReady: Bool { hci.isReady }

    // MARK: Scanning (Vol 3, Part C, 9.2.6 and Vol 6, Part B, 4.4.3)

    /// Scans until `stopScanning`: active scanning asks each advertiser for its scan response.
    /// Extended scanning when the controller has extended advertising (its legacy commands
    /// would be refused beside extended ones), legacy otherwise.
    public func startScanning(active: Bool = true, filterDuplicates: Bool = false) {
        startScanning(ScanSettings(active: active, filterDuplicates: filterDuplicates))
    }

    /// Scans with `settings` until `stopScanning`. LE Coded among the PHYs needs the extended
    /// commands (only LE Set Extended Scan Parameters names PHYs, 7.8.64): with the legacy ones
    /// the scan is on LE 1M.
    public func startScanning(_ settings: ScanSettings) {
        scanWanted = settings
        guard hci.isReady, !scanning, connecting == nil else { return }
        scanning = true
        let extended = usesExtendedCommands
        let active = settings.active, filterDuplicates = settings.filterDuplicates
        let own = settings.ownAddressType ?? ownAddressType
        let parameters: HCICommand = extended
            ? .leSetExtendedScanParameters(active: active, interval: settings.interval, window: settings.window,
                                           ownAddressType: own, phys: settings.phys)
            : .leSetScanParameters(active: active, interval: settings.interval, window: settings.window, ownAddressType: own)
        // The enable goes once the parameters are taken: behind parameters the controller did
        // not know, an enable would start extended scanning before the legacy commands take over.
        hci.send(parameters) { [weak self] result in
            guard let self, result != .cancelled else { return }
            guard result.succeeded else {
                self.scanning = false
                if extended, self.takeLegacyCommands(refused: parameters, result: result) {
                    self.startScanning(settings)
                    return
                }
                self.onError?("the controller refused the scan parameters (HCI status \(result.status.map(Hex.byte) ?? "timeout"))")
                return
            }
            if extended { self.tookExtendedScanning = true }
            guard self.scanning else { return }
            let enable: HCICommand = extended ? .leSetExtendedScanEnable(true, filterDuplicates: filterDuplicates)
                                              : .leSetScanEnable(true, filterDuplicates: filterDuplicates)
            self.hci.send(enable) { [weak self] result in
                guard let self, !result.succeeded, result != .cancelled else { return }
                self.scanning = false
                if extended, result.status == HCIStatus.unknownCommand { self.explainUnknownExtendedCommand(enable) }
                self.onError?("the controller refused to scan (HCI status \(result.status.map(Hex.byte) ?? "timeout"))")
            }
        }
        logger.info("scanning (\(active ? "active" : "passive"), \(extended ? "extended" : "legacy") commands)")
    }

    /// While scanning (extended), synchronizes to each periodic train an extended advertising
    /// report announces (LE Periodic Advertising Create Sync, Vol 4, Part E, 7.8.67), one at a
    /// time, at most `PeriodicTrains.defaultCapacity`; their data comes to `onPeriodicData`.
    public func syncToPeriodicTrains() { periodicSyncWanted = true }

    private func offerPeriodicTrain(_ report: ExtendedAdvertisingReport) {
        guard periodicSyncWanted, hci.isReady, let command = periodic.createSync(for: report) else { return }
        let address = report.address
        let sid = report.advertisingSID
        logger.info("synchronizing to the periodic train of \(address) SID \(sid)")
        hci.send(command) { [weak self] result in
            guard let self, !result.succeeded, result != .cancelled else { return }
            self.cancelCreateSyncTimer()
            self.periodic.createSyncFailed()
            self.onPeriodicSync?(nil, address, sid, "the controller refused LE Periodic Advertising Create Sync (HCI status \(result.status.map(Hex.byte) ?? "timeout"))")
        }
        // A train that is not heard leaves the Create Sync pending for ever: cancelled after a
        // while, which ends it with Sync Established status 0x44 (7.8.68).
        createSyncTimer = scheduler.schedule(after: Self.createSyncPatience) { [weak self] in
            guard let self, self.periodic.pending != nil else { return }
            self.createSyncTimer = nil
            self.hci.send(.lePeriodicAdvertisingCreateSyncCancel)
        }
    }

    private func cancelCreateSyncTimer() {
        if let timer = createSyncTimer { scheduler.cancel(timer) }
        createSyncTimer = nil
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

    /// Connects to `peer` (its address and type, as the advertiser's reports give them); scanning
    /// pauses meanwhile and resumes after. The attempt is cancelled (LE Create Connection
    /// Cancel) after `timeout`.
    /// `peerAddressType` nil: the peer's own type; 0x02 or 0x03 names an identity the controller
    /// resolves (7.8.12). `ownAddressType` nil: the central's own. `ownAddress`: the address that
    /// own type stands for on the link, which SMP hashes as the initiator's (ia/iat, Vol 3, Part H,
    /// 2.2.6 and 2.2.7) — the owner knows it when it sets the random address itself; nil: `ownSMPAddress`.
    public func connect(to peer: LEAddress, peerAddressType: UInt8? = nil, ownAddressType: AddressType? = nil,
                        ownAddress: LEAddress? = nil, timeout: Duration = CentralHost.connectTimeout,
                        parameters: ConnectionRequestParameters = ConnectionRequestParameters(),
                        completion: @escaping (Result<CentralLink, CentralError>) -> Void) {
        guard hci.isReady, !controller.isStopping else { return completion(.failure(.notReady)) }
        guard connecting == nil else { return completion(.failure(.busy)) }
        pauseScanning()
        let own = ownAddressType ?? self.ownAddressType
        let command: HCICommand = usesExtendedCommands
            ? .leExtendedCreateConnection(peer: peer, peerAddressType: peerAddressType, ownAddressType: own, parameters: parameters)
            : .leCreateConnection(peer: peer, peerAddressType: peerAddressType, ownAddressType: own, parameters: parameters)
        connecting = (peer, nil, false, false, ownAddress, completion)
        logger.info("connecting to \(peer.address)")
        hci.send(command) { [weak self] result in
            guard let self, self.connecting?.peer == peer else { return }
            if case .status(let status) = result, status == HCIStatus.success { return }
            if command.opcode == HCIOpcode.leExtendedCreateConnection, self.takeLegacyCommands(refused: command, result: result) {
                // Connect again, legacy: the attempt's timer and completion start afresh.
                let attempt = self.connecting
                self.connecting = nil
                if let timer = attempt?.timer { self.scheduler.cancel(timer) }
                if let completion = attempt?.completion {
                    self.connect(to: peer, peerAddressType: peerAddressType, ownAddressType: ownAddressType,
                                 ownAddress: attempt?.ownAddress, timeout: timeout,
                                 parameters: parameters, completion: completion)
                }
                return
            }
            self.failConnecting(.controller(status: result.status ?? 0xFF, what: command.name))
        }
        connecting?.timer = scheduler.schedule(after: timeout) { [weak self] in
            guard let self, self.connecting?.peer == peer else { return }
            self.connecting?.timer = nil
            self.connecting?.cancelled = true
            // 7.8.13: the controller then ends the attempt with LE Connection Complete, status 0x02.
            self.hci.send(.leCreateConnectionCancel)
        }
    }

    /// Whether a connection attempt is under way.
    public var isConnecting: Bool { connecting != nil }

    /// Calls off the attempt under way (LE Create Connection Cancel, 7.8.13): it ends with
    /// `CentralError.cancelled`, or with its link when the connection was made meanwhile.
    public func cancelConnecting() {
        guard connecting != nil, !(connecting?.calledOff ?? true) else { return }
        connecting?.calledOff = true
        if let timer = connecting?.timer { scheduler.cancel(timer) }
        connecting?.timer = nil
        if hci.isReady { hci.send(.leCreateConnectionCancel) } else { failConnecting(.cancelled) }
    }

    /// An extended scanning or initiating command answered with Unknown HCI Command though the
    /// controller lists LE Extended Advertising (Vol 6, Part B, 4.6 makes them part of it): the
    /// controller never ran it, so the central goes on with the legacy commands where the
    /// controller lets it (`ControllerHost.useLegacyCommandsAfterUnknownExtendedCommand`), said
    /// once. Not after the controller took an extended scanning command: then it refuses the
    /// legacy ones beside it (Vol 4, Part E, 3.1.1), and what is off, and why, is said instead.
    private func takeLegacyCommands(refused command: HCICommand, result: CommandResult) -> Bool {
        guard result.status == HCIStatus.unknownCommand else { return false }
        guard !tookExtendedScanning, controller.useLegacyCommandsAfterUnknownExtendedCommand() else {
            explainUnknownExtendedCommand(command)
            return false
        }
        logger.warning("the controller refused \(command.name) (Unknown HCI Command) although it lists LE Extended Advertising: the central uses the legacy scanning and connecting commands")
        return true
    }

    /// What is off when an extended command is unknown and the legacy ones cannot serve.
    private func explainUnknownExtendedCommand(_ command: HCICommand) {
        let off = command.opcode == HCIOpcode.leExtendedCreateConnection ? "connecting" : "scanning"
        logger.error("the controller refused \(command.name) (Unknown HCI Command) although it lists LE Extended Advertising, whose commands it must have (Vol 6, Part B, 4.6); it took extended commands before, so it refuses the legacy ones beside them (Vol 4, Part E, 3.1.1): \(off) is off")
    }

    private func failConnecting(_ error: CentralError) {
        guard let attempt = connecting else { return }
        connecting = nil
        if let timer = attempt.timer { scheduler.cancel(timer) }
        attempt.completion(.failure(error))
        resumeScanning()
    }

    private func resumeScanning() {
        if let wanted = scanWanted, connecting == nil { startScanning(wanted) }
    }

    private func dropLinks() {
        scanning = false
        failConnecting(.notReady)
        for handle in links.keys.sorted() { linkClosed(handle, reason: HCIStatus.hardwareFailure) }
    }

    private func linkParametersUpdated(status: UInt8, handle: UInt16, parameters: LinkParameters) {
        guard status == HCIStatus.success, let link = links[handle] else { return }
        link.parameters = parameters
        logger.info("link \(handle): interval \(Double(parameters.interval) * 1.25) ms, latency \(parameters.latency), timeout \(Int(parameters.supervisionTimeout) * 10) ms")
    }

    // MARK: Security

    /// The address SMP hashes for this side of a link (Vol 3, Part H, 2.2.5-2.2.8: ia/iat).
    public var ownSMPAddress: LEAddress {
        if let usedRandomAddress { return LEAddress(usedRandomAddress, isRandom: true) }
        return LEAddress(hci.info.address, isRandom: false)
    }

    /// Pairs and encrypts this central's links with `security`: SMP on CID 0x0006 goes to it,
    /// it starts encryption through LE Enable Encryption (Vol 4, Part E, 7.8.24) and hears
    /// Encryption Change.
    public func attach(security: CentralSecurity) {
        self.security = security
        security.localAddress = ownSMPAddress
        // The link's one security value, set where its GATT session and channels read it in
        // place (as the peripheral's is).
        security.securityChanged = { [weak self] handle, state in
            self?.links[handle]?.connection.security.current = state
        }
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

    public func connectionCompleted(_ complete: LEConnectionComplete) {
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
            let error: CentralError = attempt.calledOff ? .cancelled
                : attempt.cancelled ? .timeout : .controller(status: complete.status, what: "connecting")
            attempt.completion(.failure(error))
            resumeScanning()
            return
        }
        let l2capLink = L2CAPLink(handle: complete.handle, role: .central, context: l2cap)
        let link = CentralLink(l2cap: l2capLink, peer: complete.peer,
                               parameters: complete.parameters, database: database, host: self)
        link.connection.receiveSecurityManager { [weak self, unowned l2capLink] payload in
            self?.securityManagerPDU(payload, on: l2capLink)
        }
        links[complete.handle] = link
        hci.openLink(complete.handle, receiver: l2capLink)
        security?.linkOpened(complete.handle, peer: complete.peer, local: attempt.ownAddress)
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
        logger.event(.disconnected, .notice, "disconnected from \(link.peer.address)", [
            LogKey.peer: .string(link.peer.address.description), LogKey.connHandle: .string("\(handle)"),
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

// MARK: - The central role

extension CentralHost: ControllerRole {
    public var advertisingSetsWanted: Int { 0 }
    public var wantsPeriodicAdvertising: Bool { false }
    public var openLinkCount: Int { links.count }

    public func controllerStarting() {}

    public func controllerReady(then proceed: @escaping () -> Void) {
        tookExtendedScanning = false   // a reset (Vol 4, Part E, 7.3.2) ends what the controller took
        if let usedRandomAddress { hci.send(.leSetRandomAddress(usedRandomAddress)) }
        security?.localAddress = ownSMPAddress
        logger.event(.controllerUp, .info, "controller \(controller.name) ready for the central role")
        onReady?()
        resumeScanning()
        proceed()
    }

    public func controllerWasReset(reason: String) {
        cancelCreateSyncTimer()
        periodic.reset()
        dropLinks()
    }

    public func controllerWillHalt() {}

    public func controllerWentAway(reason: String, stopping: Bool) {
        cancelCreateSyncTimer()
        periodic.reset()
        dropLinks()
    }

    public func stopBegan() { scanWanted = nil }

    public func closeLinksForStop() {
        pauseScanning()
        if connecting != nil { hci.send(.leCreateConnectionCancel) }
        for handle in links.keys.sorted() { hci.send(.disconnect(handle: handle, reason: HCIStatus.remoteUserTerminated)) }
    }

    public func stopFinished() { dropLinks() }

    /// Advertising reports (Vol 4, Part E, 7.7.65.2 and 7.7.65.13), merged per advertiser.
    public func roleEvent(_ event: HCIEvent) {
        switch event {
        case .leAdvertisingReport(let reports):
            for report in reports {
                // 0x04 is SCAN_RSP; 0x00 ADV_IND and 0x01 ADV_DIRECT_IND are connectable.
                let (advertisement, change) = advertisers.record(
                    address: report.address, addressType: report.addressType, rssi: report.rssi == 127 ? nil : report.rssi,
                    connectable: report.eventType <= 0x01, isScanResponse: report.eventType == 0x04, data: report.data,
                    now: scheduler.nowNanoseconds)
                onAdvertisement?(advertisement, change)
                onReport?(AdvertisingReportDetails(legacy: report))
            }
        case .leExtendedAdvertisingReport(let reports):
            for report in reports {
                // Data beyond one event comes in fragments (7.7.65.13): recorded once whole.
                guard let (data, truncated) = advertisers.reassembleReport(address: report.address, isScanResponse: report.isScanResponse,
                                                                           dataStatus: report.dataStatus, data: report.data) else { continue }
                guard !truncated else {
                    // Not recorded (the previous payload is kept), but a program seeing every report sees it.
                    onReport?(AdvertisingReportDetails(extended: report, data: data, truncated: true))
                    continue
                }
                let (advertisement, change) = advertisers.record(
                    address: report.address, addressType: report.addressType, rssi: report.rssi,
                    connectable: report.isScanResponse ? nil : report.isConnectable, isScanResponse: report.isScanResponse,
                    data: data, txPower: report.txPower, extendedPDUs: report.eventType & 0x0010 == 0, now: scheduler.nowNanoseconds)
                onAdvertisement?(advertisement, change)
                onReport?(AdvertisingReportDetails(extended: report, data: data, truncated: false))
                offerPeriodicTrain(report)
            }
        case .lePeriodicAdvertisingSyncEstablished(let established):
            cancelCreateSyncTimer()
            if let train = periodic.established(established) {
                logger.info("synchronized to the periodic train of \(train.address) SID \(train.sid), handle \(train.syncHandle)")
                onPeriodicSync?(train, train.address, train.sid, nil)
            } else {
                onPeriodicSync?(nil, established.address, established.sid,
                                "no sync to the periodic train (HCI status \(Hex.byte(established.status)))")
            }
        case .lePeriodicAdvertisingReport(let report):
            if let whole = periodic.report(report) { onPeriodicData?(whole.train, whole.data, report.rssi, whole.truncated) }
        case .lePeriodicAdvertisingSyncLost(let handle):
            if let train = periodic.lost(handle) { onPeriodicSync?(train, train.address, train.sid, "periodic train lost (sync timeout)") }
        default:
            break
        }
    }

    public func disconnectionCompleted(status: UInt8, handle: UInt16, reason: UInt8) {
        guard status == HCIStatus.success else { return }
        linkClosed(handle, reason: reason)
    }

    public func linkEvent(_ event: HCIEvent, handle: UInt16) {
        switch event {
        case let .leConnectionUpdateComplete(status, handle, parameters):
            linkParametersUpdated(status: status, handle: handle, parameters: parameters)
        case let .leRemoteConnectionParameterRequest(handle, intervalMin, intervalMax, latency, timeout):
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
            security?.encryptionChanged(on: handle, status: status, enabled: enabled != 0)
        case let .encryptionChangeV2(status, handle, enabled, keySize):
            security?.encryptionChanged(on: handle, status: status, enabled: enabled != 0, keySize: keySize)
        case let .encryptionKeyRefreshComplete(status, handle):
            security?.encryptionChanged(on: handle, status: status, enabled: true)
        case .leLongTermKeyRequest(let handle, _, _):
            // Only a peripheral is asked for a key; refuse whatever asks.
            hci.send(.leLongTermKeyRequestNegativeReply(handle: handle))
        default:
            break
        }
    }

    public func receiveACL(_ packet: ACLPacket) {
        links[packet.handle]?.l2cap.receive(packet)
    }

    /// Credit based channels a layer above attached to the link send what waited.
    public func transmitQueueHasRoom(for handle: UInt16) {
        guard let link = links[handle] else { return }
        link.l2cap.transmitQueueHasRoom()
        link.onTransmitQueueRoom?()
    }
}
