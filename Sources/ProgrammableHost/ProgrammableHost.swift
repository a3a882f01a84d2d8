// The programmable host (issue 36): both roles on one controller, driven by requests over the
// control socket (Docs/CONTROL.md, "The programmable host").
import BlemuCentral
import BlemuConnection
import BlemuCore
import BlemuDevice
import BlemuHCI
import BlemuHost
import BlemuSecurity
import Logging

/// A scan as a program asks for it (`scan`).
public struct HostScanRequest: Equatable, Sendable {
    /// Only legacy PDUs are reported (false: legacy and extended).
    public var legacyOnly = false
    /// Passive: no scan requests, so no scan responses (Vol 6, Part B, 4.4.3.1).
    public var passive = false
    /// nil: the host's identity type (public when the controller has a public address).
    public var ownAddressType: AddressType?
    public var phys: ScanningPHYs = .oneM
    /// Scan interval and window in milliseconds (the window at most the interval).
    public var intervalMilliseconds = 60
    public var windowMilliseconds = 30

    /// The bounds a request is checked against: LE Set (Extended) Scan Parameters take 0x0004 to
    /// 0x4000 units of 0.625 ms in their common range (7.8.10): 3 ms to 10.24 s in whole ms.
    public static let millisecondRange = 3...10_240

    public init() {}
}

/// A connection as a program asks for it (`connect`).
public struct HostConnectRequest: Equatable, Sendable {
    public var peer: BluetoothAddress
    /// The peer's Peer_Address_Type (7.8.12): public, random, or an identity (0x02, 0x03) the
    /// controller resolves.
    public var peerAddressType: AddressType
    /// nil: the host's identity type.
    public var ownAddressType: AddressType?
    public var timeout: Duration

    public static let defaultTimeoutMilliseconds = 10_000
    public static let timeoutRange = 100...60_000

    public init(peer: BluetoothAddress, peerAddressType: AddressType, ownAddressType: AddressType? = nil,
                timeout: Duration = .milliseconds(HostConnectRequest.defaultTimeoutMilliseconds)) {
        self.peer = peer
        self.peerAddressType = peerAddressType
        self.ownAddressType = ownAddressType
        self.timeout = timeout
    }
}

/// The host a program drives, one per controller (`blemu host`): the central role through its
/// `CentralHost` (scan, connect), the links of both roles in one `HostLinks` table, the host's
/// static random address, and `reset` to factory state. What it does over time comes out as
/// `HostEvent`s (`onEvent`). Everything on the run loop; every request checked before anything
/// changes (a refusal is a `HostError`, nothing done).
///
/// The peripheral side (`advertising`, Sources/ProgrammableHost/ProgrammedAdvertising*, wired in
/// ProgrammableHost+Advertising.swift) registers its accepted links with
/// `peripheralLinkOpened`/`peripheralLinkClosed` and its part of a reset with `addResetStep`.
public final class ProgrammableHost {
    public let controller: ControllerHost
    public let central: CentralHost
    /// The peripheral side: programmed advertisements and the links they accept (their
    /// `PeripheralSecurity` is `advertising.peripheral`'s).
    public let advertising: ProgrammedAdvertising
    public let links = HostLinks()
    /// The L2CAP credit based channels on the links (HostChannels.swift).
    public private(set) lazy var channels = HostChannels(host: self)
    /// Pairing, `secure`, bonds of both roles (HostSecurity.swift).
    public let security: HostSecurity
    public var logger: Logger
    /// Each event, as it happens.
    public var onEvent: ((HostEvent) -> Void)?

    public private(set) var randomAddress: HostRandomAddress
    /// The scan running now: its id and what was asked.
    public private(set) var scan: (id: Int, request: HostScanRequest)?
    /// The connection attempt under way, by id.
    public private(set) var attempt: Int?
    /// A reset waits for its links to close.
    public private(set) var isResetting = false
    private var resetDeadline: TimerID?
    private var resetSteps: [() -> Void] = []
    private var nextScanID = 1
    private var nextAttemptID = 1

    /// How long a reset waits for its links to close before it is told done anyway.
    public static let resetPatience: Duration = .seconds(5)

    /// `name`: the GAP Device Name of the central's own small database.
    /// `serving`: the device (or profile) the host's advertised links are served; nil: GAP and
    /// GATT alone (`ProgrammedHostDevice`).
    public init(on controller: ControllerHost, stateDirectory: String?, name: String = "blemu host", serving device: Device? = nil,
                logger: Logger) throws(HostError) {
        self.controller = controller
        self.logger = logger
        do {
            central = try CentralHost(on: controller, name: name)
        } catch {
            throw HostError(nil, "the host's own GATT database: \(error)")
        }
        randomAddress = HostRandomAddress(stateDirectory: stateDirectory, logger: logger)
        do {
            // Made before the controller comes up: the choice of legacy or extended commands counts it.
            // The peripheral side's bonds and identity beside the central's in the state directory
            // (nothing written without one), so `bonded`, `forget` and `reset` reach both roles.
            let directory = stateDirectory.map { $0.hasSuffix("/") ? $0 : $0 + "/" }
            let security = SecurityConfiguration(bondStorePath: directory.map { $0 + "bonds-host-peripheral.json" },
                                                 identityPath: directory.map { $0 + "identity-host-peripheral.json" })
            advertising = try ProgrammedAdvertising(controller: controller,
                                                    configuration: PeripheralConfiguration(name: name, controller: controller.name,
                                                                                           security: security),
                                                    randomAddress: randomAddress.address, device: device ?? ProgrammedHostDevice(),
                                                    logger: logger)
        } catch {
            throw HostError(nil, "the host's peripheral GATT database: \(error)")
        }
        security = HostSecurity(central: central, stateDirectory: stateDirectory, name: name, scheduler: controller.scheduler, logger: logger)
        security.linkOfHandle = { [unowned links] handle in links.entry(handle: handle)?.id }
        security.onEvent = { [weak self] event in self?.onEvent?(event) }
        resetSteps.append { [unowned security] in security.reset() }
        // One set of prompts and settings for both roles: the advertised links pair through it too.
        security.attach(peripheral: advertising.peripheral.security)
        central.onReady = { [weak self] in self?.controllerReady() }
        central.onReport = { [weak self] report in self?.reported(report) }
        central.onError = { [weak self] message in self?.scanFailed(message) }
        wireAdvertising()
        channels.onEvent = { [weak self] in self?.onEvent?($0) }
        addResetStep { [weak self] in self?.channels.reset() }
    }

    public var isReady: Bool { controller.isReady && !controller.isStopping }

    // MARK: Addresses

    /// The controller has a public address (Read BD_ADDR gave one that is not all zero).
    public var hasPublicAddress: Bool { controller.hci.info.address.value != 0 }

    /// The host's identity: the controller's public address, or the static random one when the
    /// controller has none.
    public var identity: LEAddress {
        hasPublicAddress ? LEAddress(controller.hci.info.address, isRandom: false) : LEAddress(randomAddress.address, isRandom: true)
    }

    /// The own address type used when a request names none: the identity's.
    public var defaultOwnAddressType: AddressType { hasPublicAddress ? .publicDevice : .randomDevice }

    /// The address a link or a scan uses for an own address type (a resolvable one falls back
    /// to the identity it names: the central side loads no local IRK into the controller's
    /// resolving list; advertisements make their private addresses themselves, ProgrammedAdvertising).
    public func ownAddress(for type: AddressType) -> LEAddress {
        switch type {
        case .publicDevice, .publicIdentity: return LEAddress(controller.hci.info.address, isRandom: false)
        case .randomDevice, .randomIdentity: return LEAddress(randomAddress.address, isRandom: true)
        }
    }

    private func controllerReady() {
        // Vol 4, Part E, 7.8.4: the controller's random address, set before anything uses it.
        controller.hci.send(.leSetRandomAddress(randomAddress.address))
        security.identityIs(identity)
        logger.info("programmable host ready: identity \(identity.address) (\(identity.isRandom ? "random" : "public")), random address \(randomAddress.address)")
    }

    // MARK: Scanning

    /// Starts a scan; a running one is replaced (`scan-stopped` with `replaced`). Returns its id.
    public func startScan(_ request: HostScanRequest) throws(HostError) -> Int {
        try checkReady()
        if request.phys.contains(.coded) {
            guard controller.usesExtendedCommands else {
                throw HostError(nil, "scanning on the LE Coded PHY needs LE Set Extended Scan Parameters (Vol 4, Part E, 7.8.64), and this controller scans with the legacy commands")
            }
            guard controller.hci.info.supportsCodedPHY else {
                throw HostError(nil, "the controller does not support the LE Coded PHY (LE feature bit 11)")
            }
        }
        guard request.windowMilliseconds <= request.intervalMilliseconds else {
            throw HostError(nil, "the scan window (\(request.windowMilliseconds) ms) is longer than the interval (\(request.intervalMilliseconds) ms) (Vol 4, Part E, 7.8.10)")
        }
        if let old = scan {
            scan = nil
            central.stopScanning()
            onEvent?(.scanStopped(scan: old.id, reason: .replaced))
        }
        let id = nextScanID
        nextScanID += 1
        scan = (id, request)
        central.startScanning(ScanSettings(active: !request.passive, filterDuplicates: false, phys: request.phys,
                                           interval: Self.units(milliseconds: request.intervalMilliseconds),
                                           window: Self.units(milliseconds: request.windowMilliseconds),
                                           ownAddressType: request.ownAddressType ?? defaultOwnAddressType))
        return id
    }

    /// Ends scan `id`.
    public func stopScan(_ id: Int) throws(HostError) {
        guard let running = scan, running.id == id else {
            throw HostError(.unknownScan, "no scan \(id) is running" + (scan.map { "; the running scan is \($0.id)" } ?? ""))
        }
        endScan(running.id, reason: .requested)
    }

    private func endScan(_ id: Int, reason: ScanStopReason) {
        scan = nil
        central.stopScanning()
        onEvent?(.scanStopped(scan: id, reason: reason))
    }

    /// 0.625 ms units (7.8.10), rounded to the nearest.
    static func units(milliseconds: Int) -> UInt16 {
        UInt16(clamping: (milliseconds * 1000 + 312) / 625)
    }

    private func reported(_ report: AdvertisingReportDetails) {
        guard let scan else { return }
        if scan.request.legacyOnly && !report.isLegacy { return }
        // A report from a primary PHY the scan is not on is not the scan's: rootcanal 1.10 hands
        // legacy PDUs (always LE 1M) to a scanner on LE Coded alone, which a controller scanning
        // only the PHYs it was given (Vol 4, Part E, 7.8.64) never does.
        let phy: ScanningPHYs = report.primaryPHY == 0x03 ? .coded : .oneM
        guard scan.request.phys.contains(phy) else { return }
        onEvent?(.advertisement(scan: scan.id, report))
    }

    private func scanFailed(_ message: String) {
        logger.warning("\(message)")
        if let scan { endScan(scan.id, reason: .controller) }
    }

    // MARK: Connecting

    /// Starts a connection attempt; its outcome comes as `connected` or `connect-failed`.
    public func connect(_ request: HostConnectRequest) throws(HostError) -> Int {
        try checkReady()
        if let attempt { throw HostError(.busy, "connection attempt \(attempt) is under way") }
        if links.isConnected(to: request.peer) {
            throw HostError(.alreadyConnected, "a link to \(request.peer) is open already")
        }
        let own = request.ownAddressType ?? defaultOwnAddressType
        if own == .randomDevice || own == .randomIdentity, advertising.controllerRandomAddressIsPrivate {
            // The link would be made from the private address while SMP hashed the static one.
            throw HostError(nil, "the controller is driven with the legacy commands, whose one random address (LE Set Random Address, Vol 4, Part E, 7.8.4) is a resolvable private address an advertisement uses now: connect from the public address, or stop that advertisement first")
        }
        let id = nextAttemptID
        nextAttemptID += 1
        attempt = id
        let peer = LEAddress(request.peer, isRandom: request.peerAddressType.rawValue & 0x01 != 0)
        logger.info("attempt \(id): connecting to \(request.peer) from our \(own == .randomDevice ? "random" : "public") address")
        // SMP hashes the address the link is made from (Vol 3, Part H, 2.2.6: ia/iat).
        central.connect(to: peer, peerAddressType: request.peerAddressType.rawValue, ownAddressType: own,
                        ownAddress: ownAddress(for: own), timeout: request.timeout) { [weak self] result in
            self?.attemptEnded(id, own: own, result)
        }
        return id
    }

    private func attemptEnded(_ id: Int, own: AddressType, _ result: Result<CentralLink, CentralError>) {
        if attempt == id { attempt = nil }
        switch result {
        case .success(let link):
            let entry = links.add(role: .central, connection: link.connection, central: link, ownAddress: ownAddress(for: own), attempt: id)
            link.onDisconnected = { [weak self] reason in self?.linkClosed(handle: entry.handle, reason: reason) }
            channels.linkOpened(link.connection)
            onEvent?(.connected(entry.summary))
            // A connection made while a reset called the attempt off is closed at once.
            if isResetting { controller.hci.send(.disconnect(handle: entry.handle, reason: HCIStatus.remoteUserTerminated)) }
        case .failure(let error):
            switch error {
            case .timeout: onEvent?(.connectFailed(attempt: id, reason: .timeout, status: nil))
            case .controller(let status, _): onEvent?(.connectFailed(attempt: id, reason: .controller, status: status))
            case .cancelled, .notReady, .busy: onEvent?(.connectFailed(attempt: id, reason: .stopped, status: nil))
            }
        }
        finishResetIfDone()
    }

    // MARK: Links

    /// Asks the controller to close link `id` with `reason` (one HCI Disconnect allows, 7.1.6,
    /// checked by the caller); `disconnected` tells when it is gone.
    public func disconnect(link id: Int, reason: UInt8) throws(HostError) {
        guard let entry = links.entry(id: id) else { throw HostError(.unknownLink, "no link \(id) is open") }
        controller.hci.send(.disconnect(handle: entry.handle, reason: reason))
    }

    /// The peripheral side's seam: a link an advertisement accepted. Returns its link id; the
    /// `connected` event goes out.
    @discardableResult
    public func peripheralLinkOpened(_ connection: LEConnection, advertisement: Int, ownAddress: LEAddress) -> Int {
        let entry = links.add(role: .peripheral, connection: connection, ownAddress: ownAddress, advertisement: advertisement)
        channels.linkOpened(connection)
        onEvent?(.connected(entry.summary))
        if isResetting { controller.hci.send(.disconnect(handle: entry.handle, reason: HCIStatus.remoteUserTerminated)) }
        return entry.id
    }

    /// The peripheral side's seam: a link it registered closed.
    public func peripheralLinkClosed(handle: UInt16, reason: UInt8) { linkClosed(handle: handle, reason: reason) }

    private func linkClosed(handle: UInt16, reason: UInt8) {
        guard let entry = links.remove(handle: handle) else { return }
        security.linkClosed(handle: handle)
        onEvent?(.disconnected(link: entry.id, reason: reason))
        finishResetIfDone()
    }

    // MARK: Security

    /// The peripheral side's Security Manager (its accepted links pair through it): handed over
    /// by whoever makes the peripheral side, once.
    public func attachPeripheralSecurity(_ peripheralSecurity: PeripheralSecurity) {
        security.attach(peripheral: peripheralSecurity)
    }

    /// `secure`: brings link `id` to `level`. Returns true when it had the level already.
    public func secure(link id: Int, level: LESecurityLevel) throws(HostError) -> Bool {
        guard let entry = links.entry(id: id) else { throw HostError(.unknownLink, "no link \(id) is open") }
        return try security.secure(link: id, handle: entry.handle, role: entry.role, level: level)
    }

    // MARK: Reset

    /// A step of every reset, run when it begins, after the scan, the attempt and the links are
    /// told to end: the peripheral side stops its advertising, the security side forgets bonds
    /// and keys and puts its pairing settings back.
    public func addResetStep(_ step: @escaping () -> Void) { resetSteps.append(step) }

    /// Back to factory state: the scan stopped, the attempt called off, every link closed, the
    /// reset steps run, then a new random address; `reset` is told once every link is gone
    /// (or after `resetPatience`).
    public func reset() throws(HostError) {
        guard !isResetting else { throw HostError(.busy, "a reset is under way") }
        try checkReady()
        isResetting = true
        logger.notice("reset: closing \(links.count) link(s), stopping scanning and attempts")
        if let scan { endScan(scan.id, reason: .reset) }
        central.cancelConnecting()
        for entry in links.entries { controller.hci.send(.disconnect(handle: entry.handle, reason: HCIStatus.remoteUserTerminated)) }
        for step in resetSteps { step() }
        resetDeadline = controller.scheduler.schedule(after: Self.resetPatience) { [weak self] in
            guard let self, self.isResetting else { return }
            self.resetDeadline = nil
            self.logger.warning("reset: \(self.links.count) link(s) still open after \(Self.resetPatience); the reset is told done")
            self.finishReset()
        }
        finishResetIfDone()
    }

    private func finishResetIfDone() {
        guard isResetting, links.count == 0, attempt == nil else { return }
        finishReset()
    }

    private func finishReset() {
        isResetting = false
        if let resetDeadline { controller.scheduler.cancel(resetDeadline) }
        resetDeadline = nil
        randomAddress.renew(logger: logger)
        advertising.randomAddress = randomAddress.address
        if controller.isReady { controller.hci.send(.leSetRandomAddress(randomAddress.address)) }
        security.identityIs(identity)
        logger.notice("reset done: random address \(randomAddress.address)")
        onEvent?(.reset)
    }

    // MARK: Checks

    func checkReady() throws(HostError) {
        guard isReady else { throw HostError(.notReady, "the controller is not ready") }
        guard !isResetting else { throw HostError(.notReady, "a reset is under way; wait for its reset event") }
    }
}
