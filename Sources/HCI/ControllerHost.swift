import BlemuCore
import Logging

/// The role of this side of an LE link, as LE (Enhanced) Connection Complete names it
/// (Vol 4, Part E, 7.7.65.1 and 7.7.65.10: Role 0x00 central, 0x01 peripheral). The
/// `ControllerHost` routes a link by it; an `L2CAPLink` answers signalling for it.
public enum LinkRole: UInt8, Sendable, Equatable {
    case central = 0x00
    case peripheral = 0x01

    /// The Role of an LE Connection Complete event; nil for a value the spec reserves.
    public init?(hciRole: UInt8) {
        self.init(rawValue: hciRole)
    }
}

/// One role of the host on a controller: the peripheral side (the devices that advertise and
/// serve) or the central side (scanning, initiating, the links it makes). The roles are peers
/// on one `ControllerHost`: neither owns the controller, and each hears only what is its own.
public extension ControllerRole {
    var wantsExtendedAdvertising: Bool { false }
}

public protocol ControllerRole: AnyObject {
    /// Advertising sets this role wants (0 for a role that does not advertise): the controller's
    /// choice of legacy or extended LE commands follows from it (`ControllerHost.usesExtendedCommands`).
    var advertisingSetsWanted: Int { get }
    /// Whether this role may send a periodic advertising train: on a controller with LE
    /// Periodic Advertising the extended commands are used even for one set (a train is only
    /// had on an extended set, Vol 4, Part E, 7.8.61).
    var wantsPeriodicAdvertising: Bool { get }
    /// Whether this role advertises with extended PDUs (a recorded extended advertiser's
    /// twin, a broadcaster with more than 31 bytes): the extended commands are used even for
    /// one set, as for a train.
    var wantsExtendedAdvertising: Bool { get }
    /// How many links of this role are open: a stop resets the controller once none is left.
    var openLinkCount: Int { get }
    /// The transport is up; the controller is about to be initialized.
    func controllerStarting()
    /// Initialization finished. `proceed` once this role's own setup is done: the next role
    /// starts only then.
    func controllerReady(then proceed: @escaping () -> Void)
    /// The controller was reset (a hardware error; initialization follows): every link is gone.
    func controllerWasReset(reason: String)
    /// The transport is gone: the commands waiting for answers are about to be cancelled. What
    /// their completions would start must not happen (`controllerWentAway` follows).
    func controllerWillHalt()
    /// The transport is gone, and every link with it. `stopping`: during a stop.
    func controllerWentAway(reason: String, stopping: Bool)
    /// A stop began: nothing new (advertising, scanning, attempts) should start.
    func stopBegan()
    /// The stop closes links: this role disconnects each of its own (0x13) and ends what it started.
    func closeLinksForStop()
    /// The stop finished (the controller reset, or the deadline passed): no link is left.
    func stopFinished()
    /// LE (Enhanced) Connection Complete with this role's Role (or, failed, the only role there is).
    func connectionCompleted(_ event: LEConnectionComplete)
    /// Disconnection Complete for one of this role's links.
    func disconnectionCompleted(status: UInt8, handle: UInt16, reason: UInt8)
    /// An event about one of this role's links (parameters, data length, PHY, keys, encryption),
    /// with the link's handle.
    func linkEvent(_ event: HCIEvent, handle: UInt16)
    /// An event of this role that names no link (advertising reports; advertising sets).
    func roleEvent(_ event: HCIEvent)
    /// ACL data of one of this role's links.
    func receiveACL(_ packet: ACLPacket)
    /// The transmit queue of one of this role's links has room again.
    func transmitQueueHasRoom(for handle: UInt16)
}

/// The host of one controller: its `HCIHost` (command queue, initialization, ACL credits), the
/// choice of legacy or extended LE commands, and the routing of events and links to the roles
/// on it (Vol 6, Part B, 1.1.1: a device may be central and peripheral at once). A link belongs
/// to the role its connection event names; its ACL data, disconnection, encryption and key
/// events go to that role. Advertising reports go to the central role, advertising-set events
/// to the peripheral role. A stop asks each role to close its links, then resets once.
public final class ControllerHost {
    public let hci: HCIHost
    public let scheduler: TimerScheduling
    public var logger: Logger
    /// The controller spec, for messages.
    public let name: String

    /// The roles on this controller. Each role keeps this host alive; the host only refers to them.
    public var peripheralRole: ControllerRole? { peripheral }
    public var centralRole: ControllerRole? { central }
    private weak var peripheral: ControllerRole?
    private weak var central: ControllerRole?
    /// Which role each open link is, from its connection event.
    private let linkRoles = LinkRoleTable()

    /// Whether the LE extended advertising, scanning and initiating commands are used, or the
    /// legacy ones: a controller refuses them mixed (Vol 4, Part E, 3.1.1), so this is chosen once
    /// per initialization and every role follows it. Devices that advertise decide: several need
    /// extended sets, one keeps to the legacy commands every controller has. Without any, a
    /// central uses the extended commands where the controller has them.
    public private(set) var usesExtendedCommands = false

    /// A controller that lists LE Extended Advertising must have its scanning and initiating
    /// commands (Vol 6, Part B, 4.6), yet one that answers them with Unknown HCI Command never
    /// took them, so the legacy commands are not mixed with anything it ran (Vol 4, Part E,
    /// 3.1.1). The central then takes the legacy commands, but only while no role advertises
    /// in sets: those stay on the extended commands. Returns whether the legacy ones are now used.
    public func useLegacyCommandsAfterUnknownExtendedCommand() -> Bool {
        guard usesExtendedCommands, roles.allSatisfy({ $0.advertisingSetsWanted == 0 }) else { return false }
        usesExtendedCommands = false
        return true
    }

    /// After each HCI event that may change advertising or connections (every event but
    /// Number Of Completed Packets): for a service status. Nil: nothing is called.
    public var onStateMayChange: (() -> Void)?
    /// Each time the controller's initialization is done (`HCIHost` ready), before the roles set
    /// up: how a run opens its controllers a few at a time (`ControllerBringUp`, Stack).
    public var onReady: (() -> Void)?

    private var stopCompletion: (() -> Void)?
    private var stopFinished = false
    /// The stop's HCI Reset went out (one per stop).
    private var stopResetSent = false
    private var stopTimer: TimerID?
    private var stopDeadlineTimer: TimerID?
    private var routingLog = LogBudget()

    /// How long a clean stop may take at most: links closed, then the controller reset.
    public static let stopDeadline: Duration = .seconds(3)
    /// How long the links have to close before the Reset goes out anyway.
    public static let linkCloseWait: Duration = .seconds(2)

    /// `transmitBufferCapacity`: the largest PDU (L2CAP header included) the roles send (`HCIHost`).
    public init(controller: String, scheduler: TimerScheduling, logger: Logger, transmitBufferCapacity: Int = 4 + 251,
                output: @escaping (UInt8, ArraySlice<UInt8>) -> Bool) {
        name = controller
        self.scheduler = scheduler
        var logger = logger
        logger[metadataKey: LogKey.controller] = .string(controller)
        self.logger = logger
        hci = HCIHost(scheduler: scheduler, logger: logger, transmitBufferCapacity: transmitBufferCapacity, output: output)
        hci.delegate = self
    }

    /// On `transport`, handed over once: HCI sends its packets through it, and it hands each
    /// packet it receives to HCI (`receive`) directly, with no layer above HCI between them.
    public convenience init(controller: String, scheduler: TimerScheduling, logger: Logger, transmitBufferCapacity: Int = 4 + 251,
                            transport: any HCITransport) {
        self.init(controller: controller, scheduler: scheduler, logger: logger, transmitBufferCapacity: transmitBufferCapacity) {
            type, packet in
            guard let packetType = H4PacketType(rawValue: type) else { return false }
            return transport.send(packetType, packet)
        }
        transport.onPacket = { [unowned self] type, packet in self.receive(type, packet) }
    }

    deinit { linkRoles.deallocate() }

    /// Puts `role` on this controller as its `kind`; one of each. A role that comes when the
    /// controller is ready hears so at once.
    public func register(_ role: ControllerRole, as kind: LinkRole) {
        switch kind {
        case .peripheral: peripheral = role
        case .central: central = role
        }
        if hci.isReady && !isStopping { role.controllerReady(then: {}) }
    }

    public func role(_ kind: LinkRole) -> ControllerRole? {
        switch kind {
        case .peripheral: return peripheral
        case .central: return central
        }
    }

    /// The peripheral role first: it loads the resolving list, which the controller does not
    /// change while scanning or initiating (Vol 4, Part E, 7.8.38).
    private var roles: [ControllerRole] { [peripheral, central].compactMap { $0 } }

    public var isReady: Bool { hci.isReady }
    public var isStopping: Bool { stopCompletion != nil }

    /// Lines left out by the controller-wide budgets (HCI and routing).
    public var logLinesLeftOut: Int { hci.logLinesLeftOut + routingLog.leftOutTotal }

    // MARK: Transport

    /// The controller transport is up: initialize the controller.
    public func controllerUp() {
        for role in roles { role.controllerStarting() }
        hci.start()
    }

    /// The controller transport is gone: every link with it.
    public func controllerDown(reason: String) {
        for role in roles { role.controllerWillHalt() }
        hci.halt()
        linkRoles.removeAll()
        let stopping = isStopping
        for role in roles { role.controllerWentAway(reason: reason, stopping: stopping) }
        if stopping { finishStop() }
    }

    /// One packet from the controller: H4 packet type and the packet.
    public func receive(packetType: UInt8, packet: ArraySlice<UInt8>) {
        guard let type = H4PacketType(rawValue: packetType) else {
            return logger.debug("ignored H4 packet of type \(Hex.byte(packetType))")
        }
        receive(type, packet)
    }

    /// One packet from the controller's transport.
    public func receive(_ type: H4PacketType, _ packet: ArraySlice<UInt8>) {
        switch type {
        case .event:
            hci.receiveEvent(packet)
            // Number Of Completed Packets (Vol 4, Part E, 7.7.19) only gives buffers back.
            if let onStateMayChange, packet.first != Self.numberOfCompletedPacketsCode { onStateMayChange() }
        case .acl: hci.receiveACL(packet)
        default: logger.debug("ignored H4 packet of type \(Hex.byte(type.rawValue))")
        }
    }

    private static let numberOfCompletedPacketsCode: UInt8 = 0x13

    // MARK: Stop

    private var allLinksClosed: Bool { roles.allSatisfy { $0.openLinkCount == 0 } }

    /// Clean stop of every role on this controller: each stops what it started and disconnects
    /// its links with Remote User Terminated (0x13), then one HCI Reset. Calls `completion` once,
    /// when done or after `stopDeadline` at most, whatever the controller does.
    public func stop(completion: @escaping () -> Void) {
        guard stopCompletion == nil else { return }
        stopCompletion = completion
        for role in roles { role.stopBegan() }
        guard hci.isReady else { return finishStop() }
        // Commands still queued (advertising restarts, parameter replies) no longer matter;
        // only the ones below do, and they must not wait behind the others.
        hci.cancelQueuedCommands()
        stopDeadlineTimer = scheduler.schedule(after: Self.stopDeadline) { [weak self] in
            self?.logger.warning("controller did not finish the stop within \(Self.stopDeadline); stopping anyway")
            self?.finishStop()
        }
        for role in roles { role.closeLinksForStop() }
        stopTimer = scheduler.schedule(after: Self.linkCloseWait) { [weak self] in
            self?.logger.warning("links did not close within \(Self.linkCloseWait); resetting anyway")
            self?.resetAndFinish()
        }
        linksMayHaveClosed()
    }

    /// A role closed a link: during a stop, the Reset goes out once no role has one left.
    public func linksMayHaveClosed() {
        if isStopping && allLinksClosed { resetAndFinish() }
    }

    private func resetAndFinish() {
        // Once: a role may say its links may have closed again while the Reset is in flight
        // (the peripheral role as its advertising stops), and a second Reset would go out after
        // the stop finished, into a closed link.
        guard isStopping, !stopFinished, !stopResetSent else { return }
        stopResetSent = true
        if let stopTimer { scheduler.cancel(stopTimer) }
        stopTimer = nil
        hci.send(.reset) { [weak self] _ in self?.finishStop() }
    }

    private func finishStop() {
        if let stopTimer { scheduler.cancel(stopTimer) }
        stopTimer = nil
        if let stopDeadlineTimer { scheduler.cancel(stopDeadlineTimer) }
        stopDeadlineTimer = nil
        guard let completion = stopCompletion, !stopFinished else { return }
        stopFinished = true
        linkRoles.removeAll()
        for role in roles { role.stopFinished() }
        completion()
    }

    // MARK: Routing

    /// The role of an open link.
    public func linkRole(_ handle: UInt16) -> LinkRole? { linkRoles[handle] }

    private func connectionCompleted(_ event: LEConnectionComplete) {
        let kind = LinkRole(hciRole: event.role)
        guard event.status == HCIStatus.success else {
            // Advertising Timeout (0x3C): high duty cycle directed advertising ended with no link
            // (Vol 4, Part E, 7.7.65.1, 7.8.56), the advertiser's news whatever the Role octet of a
            // failed event says (rootcanal 1.10 sends 0x00, central): a central's attempt is not it.
            if event.status == HCIStatus.advertisingTimeout, let peripheral {
                peripheral.connectionCompleted(event)
                return
            }
            // A failed attempt names no link: its role's, or the only role's there is.
            (kind.flatMap(role) ?? roles.first)?.connectionCompleted(event)
            return
        }
        guard let kind, let role = role(kind) else {
            // Vol 4, Part E, 5.3.1: the handle names the new link now, so a link of ours on it is
            // gone, whatever becomes of the new one: it is ended here (its queue, the rest of a
            // PDU too, dropped), or its data would go out on the new link.
            if let previous = linkRoles[event.handle] {
                linkRoles[event.handle] = nil
                self.role(previous)?.disconnectionCompleted(status: HCIStatus.success, handle: event.handle, reason: HCIStatus.unspecifiedError)
            }
            // A link in a role nobody here plays is not kept.
            if let leftOut = routingLog.take(now: scheduler.nowNanoseconds, for: logger) {
                logger.warning("link \(event.handle) opened in role \(Hex.byte(event.role)), which no one here plays: disconnecting\(LogBudget.note(leftOut))",
                               metadata: [LogKey.connHandle: "\(event.handle)"])
            }
            hci.send(.disconnect(handle: event.handle, reason: HCIStatus.remoteUserTerminated))
            return
        }
        if let previous = linkRoles[event.handle], previous != kind {
            // Vol 4, Part E, 5.3.1: a handle names one link at a time; the other role's link on it
            // is gone without a word from the controller (a role reusing a handle ends its own).
            self.role(previous)?.disconnectionCompleted(status: HCIStatus.success, handle: event.handle, reason: HCIStatus.unspecifiedError)
        }
        linkRoles[event.handle] = kind
        role.connectionCompleted(event)
    }
}

// MARK: - HCI events

extension ControllerHost: HCIHostDelegate {
    public func hciHostDidBecomeReady(_ host: HCIHost) {
        guard !isStopping else { return }
        onReady?()
        let wanted = roles.reduce(0) { $0 + $1.advertisingSetsWanted }
        let extended = hci.info.supportsExtendedAdvertising
        let periodic = hci.info.supportsPeriodicAdvertising && roles.contains { $0.wantsPeriodicAdvertising }
        let extendedPDUs = roles.contains { $0.wantsExtendedAdvertising }
        usesExtendedCommands = wanted == 0 ? extended : (wanted > 1 || periodic || extendedPDUs) && extended && hci.info.advertisingSets > 0
        // Each role in turn, the next once the one before is set up.
        var remaining = roles[...]
        func next() {
            guard !isStopping, let role = remaining.popFirst() else { return }
            role.controllerReady(then: next)
        }
        next()
    }

    public func hciHostDidReset(_ host: HCIHost, reason: String) {
        linkRoles.removeAll()
        for role in roles { role.controllerWasReset(reason: reason) }
    }

    public func hciHost(_ host: HCIHost, didReceive event: HCIEvent) {
        switch event {
        case .leConnectionComplete(let complete):
            connectionCompleted(complete)
        case .leAdvertisingReport, .leExtendedAdvertisingReport, .lePeriodicAdvertisingSyncEstablished,
             .lePeriodicAdvertisingReport, .lePeriodicAdvertisingSyncLost:
            central?.roleEvent(event)
        case .leAdvertisingSetTerminated:
            peripheral?.roleEvent(event)
        case let .disconnectionComplete(status, handle, reason):
            let kind = linkRoles[handle]
            if status == HCIStatus.success { linkRoles[handle] = nil }
            if let kind { role(kind)?.disconnectionCompleted(status: status, handle: handle, reason: reason) }
            linksMayHaveClosed()
        case let .leConnectionUpdateComplete(_, handle, _),
             let .leRemoteConnectionParameterRequest(handle, _, _, _, _),
             let .leDataLengthChange(handle, _, _, _, _),
             let .lePHYUpdateComplete(_, handle, _, _),
             let .leLongTermKeyRequest(handle, _, _),
             let .encryptionChange(_, handle, _),
             let .encryptionChangeV2(_, handle, _, _),
             let .encryptionKeyRefreshComplete(_, handle):
            if let kind = linkRoles[handle], let role = role(kind) {
                role.linkEvent(event, handle: handle)
            } else {
                answerUnservedLink(event, handle: handle)
            }
        case .dataBufferOverflow:
            if let leftOut = routingLog.take(now: scheduler.nowNanoseconds, for: logger) {
                logger.error("controller reports an ACL buffer overflow: it lost data\(LogBudget.note(leftOut))")
            }
        default:
            break
        }
    }

    /// A request about a link no one here serves (no role has it, or its role has no one for it
    /// yet) still gets its answer, so the peer is not left waiting: LE Long Term Key Request
    /// Negative Reply (Vol 4, Part E, 7.8.26), Remote Connection Parameter Request Negative
    /// Reply (7.8.32). Other events of such a link need none.
    public func answerUnservedLink(_ event: HCIEvent, handle: UInt16) {
        switch event {
        case .leLongTermKeyRequest: hci.send(.leLongTermKeyRequestNegativeReply(handle: handle))
        case .leRemoteConnectionParameterRequest: hci.send(.leRemoteConnectionParameterRequestNegativeReply(handle: handle))
        default: break
        }
    }

    public func hciHost(_ host: HCIHost, didReceiveACL packet: ACLPacket) {
        // The table's byte compared as it is: this runs for every packet.
        switch linkRoles.stored(packet.handle) {
        case LinkRoleTable.peripheral:
            if let peripheral { return peripheral.receiveACL(packet) }
        case LinkRoleTable.central:
            if let central { return central.receiveACL(packet) }
        default:
            break
        }
        if let leftOut = routingLog.take(now: scheduler.nowNanoseconds, for: logger) {
            logger.warning("ACL data for unknown connection handle \(packet.handle) dropped\(LogBudget.note(leftOut))")
        }
    }

    public func hciHost(_ host: HCIHost, transmitQueueHasRoomFor handle: UInt16) {
        guard let kind = linkRoles[handle] else { return }
        role(kind)?.transmitQueueHasRoom(for: handle)
    }
}

/// The role of each open link by its connection handle (12 bits, as the decoders take it; Vol 4,
/// Part E, 5.4.2): one byte a handle, read for every ACL packet, so a lookup is one load (no
/// hashing, nothing generic).
struct LinkRoleTable {
    static let handleCount = 0x1000
    /// What a handle's byte holds: 0, no link; otherwise the role's raw value plus one.
    static let central = LinkRole.central.rawValue + 1
    static let peripheral = LinkRole.peripheral.rawValue + 1
    private let roles: UnsafeMutablePointer<UInt8>

    init() {
        roles = .allocate(capacity: Self.handleCount)
        roles.initialize(repeating: 0, count: Self.handleCount)
    }

    func deallocate() { roles.deallocate() }

    /// The byte of `handle` (`central`, `peripheral` or 0).
    func stored(_ handle: UInt16) -> UInt8 {
        Int(handle) < Self.handleCount ? roles[Int(handle)] : 0
    }

    subscript(handle: UInt16) -> LinkRole? {
        get {
            guard Int(handle) < Self.handleCount else { return nil }
            let stored = roles[Int(handle)]
            return stored == 0 ? nil : LinkRole(rawValue: stored &- 1)
        }
        nonmutating set {
            guard Int(handle) < Self.handleCount else { return }
            roles[Int(handle)] = newValue.map { $0.rawValue &+ 1 } ?? 0
        }
    }

    func removeAll() {
        roles.update(repeating: 0, count: Self.handleCount)
    }
}
