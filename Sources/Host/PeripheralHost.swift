import BlemuATT
import BlemuCore
import BlemuGATT
import BlemuHCI
import BlemuL2CAP
import Logging

/// One controller and the devices that share it: the HCI host, the advertising sets, and the
/// routing of every link to its device. On a controller with LE Extended Advertising each
/// device advertises in its own set, and a new link is routed by the set it was made from
/// (LE Advertising Set Terminated, Vol 4, Part E, 7.7.65.18); a legacy-only controller takes
/// one device. A central connected to one device never reaches another's database.
public final class PeripheralHost {
    public let hci: HCIHost
    public let advertiser: Advertiser
    public let scheduler: TimerScheduling
    public var logger: Logger
    /// The controller spec, for messages.
    public let controller: String
    /// A condition the host cannot recover from (more devices than the controller can
    /// advertise): the caller should stop and say why.
    public var onFatal: ((String) -> Void)?

    /// The devices on this controller, in the order they joined. Each `Peripheral` keeps its
    /// host alive; the host only refers to them.
    private var members: [Member] = []
    private struct Member {
        unowned let peripheral: Peripheral
    }
    /// Which device each open link belongs to.
    var linkOwners = HandleTable<Peripheral>()
    /// Links whose LE Connection Complete came but whose advertising set is not known yet.
    private var pendingLinks: [UInt16: PendingLink] = [:]
    private struct PendingLink {
        let event: LEConnectionComplete
        var packets: [ACLPacket] = []
        var timer: TimerID?
    }
    /// How long a link may wait for its LE Advertising Set Terminated; the event follows the
    /// connection's at once in practice (7.7.65.18), so only a broken controller hits this.
    static let setTerminatedWait: Duration = .seconds(2)
    /// ACL packets kept for a link while it waits for its device.
    static let pendingPacketLimit = 8

    /// The controller's resolving list, as the host loaded it (ResolvingList.swift).
    var resolvingList = ResolvingListState()

    var stopCompletion: (() -> Void)?
    private var stopFinished = false
    var stopTimer: TimerID?
    var stopDeadlineTimer: TimerID?
    var routingLog = LogBudget()

    public init(controller: String, scheduler: TimerScheduling, logger: Logger,
                output: @escaping (UInt8, ArraySlice<UInt8>) -> Bool) {
        self.controller = controller
        self.scheduler = scheduler
        var logger = logger
        logger[metadataKey: LogKey.controller] = .string(controller)
        self.logger = logger
        // Room for the largest PDU the devices send: an ATT PDU at the largest ATT_MTU, framed.
        hci = HCIHost(scheduler: scheduler, logger: logger, transmitBufferCapacity: 4 + ATTServer.maximumMTU, output: output)
        advertiser = Advertiser(hci: hci)
        hci.delegate = self
    }

    public var peripherals: [Peripheral] { members.map(\.peripheral) }

    /// The central role on this same controller, when one shares it (`CentralHost(sharing:)`):
    /// it gets the events and links that are not the peripherals'.
    public private(set) weak var sharedRole: HCIRoleSharing?

    /// Lets `role` share this controller; it hears of readiness at once when the controller is ready.
    public func share(with role: HCIRoleSharing) {
        sharedRole = role
        if hci.isReady && !isStopping { role.sharedControllerReady(extendedCommands: advertiser.mode != .legacy) }
    }

    func join(_ peripheral: Peripheral) {
        members.append(Member(peripheral: peripheral))
    }

    // MARK: Transport

    /// The controller transport is up: initialize the controller.
    public func controllerUp() {
        for member in members { member.peripheral.controllerCameUp() }
        hci.start()
    }

    /// The controller transport is gone: every link with it.
    public func controllerDown(reason: String) {
        // First: the completions `halt` cancels must find their generation gone.
        resolvingListReset()
        hci.halt()
        dropPendingLinks()
        sharedRole?.sharedControllerReset(reason: reason)
        if isStopping {
            for member in members { member.peripheral.controllerWentAway(reason: reason, stopping: true) }
            linkOwners.removeAll()
            finishStop()
            return
        }
        for member in members { member.peripheral.controllerWentAway(reason: reason, stopping: false) }
        linkOwners.removeAll()
    }

    /// One packet from the controller: H4 packet type and the packet.
    public func receive(packetType: UInt8, packet: ArraySlice<UInt8>) {
        switch packetType {
        case 0x04: hci.receiveEvent(packet)
        case 0x02: hci.receiveACL(packet)
        default: logger.debug("ignored H4 packet of type \(Hex.byte(packetType))")
        }
    }

    // MARK: Links

    private func owner(of handle: UInt16) -> Peripheral? { linkOwners[handle] }

    private func connectionCompleted(_ event: LEConnectionComplete) {
        guard event.status == HCIStatus.success else {
            // A failed attempt belongs to no link; a legacy set stays on, an extended set
            // reports its own end.
            members.first?.peripheral.connectionAttemptFailed(status: event.status)
            return
        }
        if let previous = linkOwners[event.handle] {
            // Vol 4, Part E, 5.3.1: a handle names one link at a time. A controller that reports
            // a new link on a handle in use lost the old one without telling us: close it here,
            // so its state, timers and subscriptions end and its device hears of it.
            previous.logger.warning("controller reported a new link on handle \(event.handle), which was in use: the old link is gone",
                                    metadata: [LogKey.connHandle: "\(event.handle)"])
            previous.connectionClosed(handle: event.handle, reason: HCIStatus.unspecifiedError, restartAdvertising: false)
        }
        switch advertiser.mode {
        case .legacy:
            // One device advertises on a legacy controller: the link is its.
            guard let peripheral = members.first?.peripheral else { return }
            peripheral.connectionOpened(event, fromAdvertising: true)
        case .extended:
            // Its device is named by the LE Advertising Set Terminated that follows.
            if let stale = pendingLinks.removeValue(forKey: event.handle), let timer = stale.timer { scheduler.cancel(timer) }
            var pending = PendingLink(event: event)
            pending.timer = scheduler.schedule(after: Self.setTerminatedWait) { [weak self] in
                guard let self, self.pendingLinks.removeValue(forKey: event.handle) != nil else { return }
                self.logger.warning("link \(event.handle) from \(event.peerAddress) names no advertising set within \(Self.setTerminatedWait): disconnecting",
                                    metadata: [LogKey.connHandle: "\(event.handle)"])
                self.hci.send(.disconnect(handle: event.handle, reason: HCIStatus.remoteUserTerminated))
            }
            pendingLinks[event.handle] = pending
        }
    }

    private func advertisingSetTerminated(status: UInt8, set: UInt8, connectionHandle: UInt16) {
        guard let peripheral = members.first(where: { $0.peripheral.advertisingSet == set })?.peripheral else {
            if let leftOut = routingLog.take(now: scheduler.nowNanoseconds, for: logger) {
                logger.warning("advertising set \(set) ended, but no device has it\(LogBudget.note(leftOut))")
            }
            return
        }
        peripheral.advertisingSetEnded()
        guard status == HCIStatus.success else {
            peripheral.logger.event(.advertisingStopped, .warning, "advertising ended by the controller",
                                    [LogKey.hciStatus: .string(Hex.byte(status))])
            return
        }
        guard var pending = pendingLinks.removeValue(forKey: connectionHandle) else {
            if let leftOut = routingLog.take(now: scheduler.nowNanoseconds, for: logger) {
                logger.warning("advertising set \(set) names link \(connectionHandle), which is not open\(LogBudget.note(leftOut))")
            }
            return
        }
        if let timer = pending.timer { scheduler.cancel(timer) }
        peripheral.connectionOpened(pending.event, fromAdvertising: true)
        // What the central sent before its device was known goes to it now, in order.
        let packets = pending.packets
        pending.packets.removeAll()
        if linkOwners[connectionHandle] === peripheral {
            for packet in packets { peripheral.receiveACL(packet) }
        }
    }

    func linkOpened(_ handle: UInt16, by peripheral: Peripheral) {
        linkOwners[handle] = peripheral
    }

    func linkClosed(_ handle: UInt16) {
        linkOwners[handle] = nil
        if isStopping && allLinksClosed { resetAndFinish() }
    }

    /// The peripherals' links and the shared role's.
    private var allLinksClosed: Bool { linkOwners.isEmpty && (sharedRole?.openLinkCount ?? 0) == 0 }

    private func dropPendingLinks() {
        for pending in pendingLinks.values {
            if let timer = pending.timer { scheduler.cancel(timer) }
        }
        pendingLinks.removeAll()
    }

    public var connectionCount: Int { linkOwners.count }

    /// Lines left out by the controller-wide budgets (HCI and routing).
    public var logLinesLeftOut: Int { hci.logLinesLeftOut + routingLog.leftOutTotal }

    // MARK: Stop

    /// How long a clean stop may take at most: links closed, then the controller reset.
    public static let stopDeadline: Duration = .seconds(3)
    /// How long the links have to close before the Reset goes out anyway.
    static let linkCloseWait: Duration = .seconds(2)

    var isStopping: Bool { stopCompletion != nil }

    /// Clean stop of every device on this controller: advertising off, every link
    /// disconnected with Remote User Terminated (0x13), then one HCI Reset. Calls `completion`
    /// once, when done or after `stopDeadline` at most, whatever the controller does.
    public func stop(completion: @escaping () -> Void) {
        guard stopCompletion == nil else { return }
        stopCompletion = completion
        for member in members { member.peripheral.deviceStopping() }
        guard hci.isReady else {
            finishStop()
            return
        }
        // Commands still queued (advertising restarts, parameter replies) no longer matter;
        // only the ones below do, and they must not wait behind the others.
        hci.cancelQueuedCommands()
        dropPendingLinks()
        stopDeadlineTimer = scheduler.schedule(after: Self.stopDeadline) { [weak self] in
            self?.logger.warning("controller did not finish the stop within \(Self.stopDeadline); stopping anyway")
            self?.finishStop()
        }
        for member in members { member.peripheral.closeEverything() }
        sharedRole?.closeForStop()
        stopTimer = scheduler.schedule(after: Self.linkCloseWait) { [weak self] in
            self?.logger.warning("links did not close within \(Self.linkCloseWait); resetting anyway")
            self?.resetAndFinish()
        }
        if allLinksClosed { resetAndFinish() }
    }

    func resetAndFinish() {
        guard isStopping, !stopFinished else { return }
        if let stopTimer { scheduler.cancel(stopTimer) }
        stopTimer = nil
        hci.send(.reset) { [weak self] _ in self?.finishStop() }
    }

    func finishStop() {
        if let stopTimer { scheduler.cancel(stopTimer) }
        stopTimer = nil
        if let stopDeadlineTimer { scheduler.cancel(stopDeadlineTimer) }
        stopDeadlineTimer = nil
        guard let completion = stopCompletion, !stopFinished else { return }
        stopFinished = true
        // After the Reset (or a controller gone or silent past the deadline) no link is left:
        // each device forgets the ones that never reported closing, so nothing of them (timers,
        // the host's hold on their device) outlives the stop.
        for member in members { member.peripheral.dropAllConnections(reason: "stopped") }
        linkOwners.removeAll()
        dropPendingLinks()
        sharedRole?.sharedControllerReset(reason: "stopped")
        completion()
    }
}

// MARK: - HCI events

extension PeripheralHost: HCIHostDelegate {
    public func hciHostDidBecomeReady(_ host: HCIHost) {
        guard !isStopping else { return }
        advertiser.configure(setsWanted: members.count)
        if members.count > advertiser.capacity {
            let why = hci.info.supportsExtendedAdvertising
                ? "controller \(controller) can advertise \(advertiser.capacity) sets at once, not \(members.count)"
                : "controller \(controller) has no LE Extended Advertising, so it can advertise for one device only"
            logger.error("\(why); give the other devices their own --controller")
            onFatal?("\(members.count) devices on one controller: \(why); give each device its own --controller (e.g. one tcp: connection each)")
        }
        // The resolving list is loaded before anything advertises: the controller refuses
        // changes to it while advertising with address resolution on (Vol 4, Part E, 7.8.38).
        loadResolvingList(startingUp: true) { [weak self] in
            guard let self, !self.isStopping else { return }
            for member in self.members {
                let set = self.advertiser.takeSet()
                member.peripheral.hostReady(advertisingSet: set)
            }
            self.sharedRole?.sharedControllerReady(extendedCommands: self.advertiser.mode != .legacy)
        }
    }

    public func hciHostDidReset(_ host: HCIHost, reason: String) {
        resolvingListReset()
        dropPendingLinks()
        for member in members { member.peripheral.hostReset(reason: reason) }
        linkOwners.removeAll()
        sharedRole?.sharedControllerReset(reason: reason)
    }

    public func hciHost(_ host: HCIHost, didReceive event: HCIEvent) {
        // The central role's links, scanning and attempts are its own (it claims them first:
        // an LE Connection Complete in the central role is not a peripheral's).
        if let shared = sharedRole, shared.claim(event) {
            if case .disconnectionComplete = event, isStopping, allLinksClosed { resetAndFinish() }
            return
        }
        switch event {
        case .leConnectionComplete(let complete):
            connectionCompleted(complete)
        case let .leAdvertisingSetTerminated(status, set, connectionHandle, _):
            advertisingSetTerminated(status: status, set: set, connectionHandle: connectionHandle)
        case let .disconnectionComplete(status, handle, reason):
            if status == HCIStatus.success, let pending = pendingLinks.removeValue(forKey: handle) {
                if let timer = pending.timer { scheduler.cancel(timer) }
                return
            }
            owner(of: handle)?.disconnectionCompleted(status: status, handle: handle, reason: reason)
        case let .leConnectionUpdateComplete(_, handle, _),
             let .leRemoteConnectionParameterRequest(handle, _, _, _, _),
             let .leDataLengthChange(handle, _, _, _, _),
             let .lePHYUpdateComplete(_, handle, _, _),
             let .leLongTermKeyRequest(handle, _, _),
             let .encryptionChange(_, handle, _),
             let .encryptionChangeV2(_, handle, _, _),
             let .encryptionKeyRefreshComplete(_, handle):
            if let peripheral = owner(of: handle) {
                peripheral.linkEvent(event)
            } else if case .leLongTermKeyRequest = event {
                // A link we do not know still gets its answer, so the central is not left waiting.
                hci.send(.leLongTermKeyRequestNegativeReply(handle: handle))
            } else if case .leRemoteConnectionParameterRequest = event {
                hci.send(.leRemoteConnectionParameterRequestNegativeReply(handle: handle))
            }
        case .dataBufferOverflow:
            if let leftOut = routingLog.take(now: scheduler.nowNanoseconds, for: logger) {
                logger.error("controller reports an ACL buffer overflow: it lost data\(LogBudget.note(leftOut))")
            }
        default:
            break
        }
    }

    public func hciHost(_ host: HCIHost, didReceiveACL packet: ACLPacket) {
        if let shared = sharedRole, shared.ownsLink(packet.handle) {
            shared.receiveACL(packet)
            return
        }
        if let peripheral = linkOwners[packet.handle] {
            peripheral.receiveACL(packet)
            return
        }
        if var pending = pendingLinks[packet.handle] {
            // Bounded: a central cannot make a link that has no device yet hold much.
            if pending.packets.count < Self.pendingPacketLimit {
                pending.packets.append(ACLPacket(handle: packet.handle, boundary: packet.boundary, data: Array(packet.data)[...]))
                pendingLinks[packet.handle] = pending
            } else if let leftOut = routingLog.take(now: scheduler.nowNanoseconds, for: logger) {
                logger.warning("ACL data for link \(packet.handle), which has no device yet, dropped\(LogBudget.note(leftOut))")
            }
            return
        }
        if let leftOut = routingLog.take(now: scheduler.nowNanoseconds, for: logger) {
            logger.warning("ACL data for unknown connection handle \(packet.handle) dropped\(LogBudget.note(leftOut))")
        }
    }

    public func hciHost(_ host: HCIHost, transmitQueueHasRoomFor handle: UInt16) {
        if let shared = sharedRole, shared.ownsLink(handle) {
            shared.transmitQueueHasRoom(for: handle)
            return
        }
        owner(of: handle)?.deviceMayProceed()
    }
}
