import BlemuATT
import BlemuCore
import BlemuDevice
import BlemuGATT
import BlemuHCI
import BlemuL2CAP
import Logging

/// The peripheral role of one controller: the devices that share it, their advertising sets,
/// and the routing of each of the role's links to its device. On a controller with LE Extended
/// Advertising each device advertises in its own set, and a new link is routed by the set it was
/// made from (LE Advertising Set Terminated, Vol 4, Part E, 7.7.65.18); a legacy-only controller
/// takes one device. A central connected to one device never reaches another's database. The
/// controller is the `ControllerHost`'s: this role is registered on it, beside a central role
/// when there is one.
public final class PeripheralHost {
    /// The host of the controller this role is on.
    public let controller: ControllerHost
    public var hci: HCIHost { controller.hci }
    public let advertiser: Advertiser
    public let scheduler: TimerScheduling
    public var logger: Logger
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

    /// Advertising programmed beside the devices' (the programmable host's): its sets' links go
    /// to its device, and it hears the controller's ends and ready.
    public weak var programmedAdvertising: ProgrammedAdvertisingRoute?

    /// The controller's resolving list, as the host loaded it (ResolvingList.swift).
    var resolvingList = ResolvingListState()

    var routingLog = LogBudget()

    /// The largest PDU the devices send, L2CAP header included: an ATT PDU at the largest ATT_MTU
    /// (the `ControllerHost`'s `transmitBufferCapacity`).
    public static let largestPDU = 4 + ATTServer.maximumMTU

    /// The peripheral role on `controller`.
    public init(on controller: ControllerHost) {
        self.controller = controller
        scheduler = controller.scheduler
        logger = controller.logger
        advertiser = Advertiser(hci: controller.hci)
        controller.register(self, as: .peripheral)
    }

    public var peripherals: [Peripheral] { members.map(\.peripheral) }

    func join(_ peripheral: Peripheral) {
        members.append(Member(peripheral: peripheral))
    }

    // MARK: Links

    private func owner(of handle: UInt16) -> Peripheral? { linkOwners[handle] }

    public func connectionCompleted(_ event: LEConnectionComplete) {
        guard event.status == HCIStatus.success else {
            // A failed attempt belongs to no link; a legacy set stays on, an extended set
            // reports its own end. High duty cycle directed advertising that timed out ends
            // with this event (Advertising Timeout, 0x3C, 7.7.65.1), also for an extended set
            // (7.8.56), which may report its end too.
            if event.status == HCIStatus.advertisingTimeout, let program = programmedAdvertising {
                program.advertisingEnded(set: event.advertisingHandle.flatMap { $0 == 0xFF ? nil : $0 }, status: event.status)
            }
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
            // One device advertises on a legacy controller: the link is its, or the program's
            // when the program advertises.
            if let program = programmedAdvertising, let local = program.advertisedAddress(ofSet: nil),
               let peripheral = program.acceptingPeripheral {
                let connection = peripheral.connectionOpened(event, fromAdvertising: true, localAddress: local,
                                                             identityAddress: program.identityAddress(ofSet: nil))
                program.linkMade(connection, event: event, set: nil)
                return
            }
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
        if let program = programmedAdvertising, let local = program.advertisedAddress(ofSet: set) {
            programmedSetTerminated(program, local: local, status: status, set: set, connectionHandle: connectionHandle)
            return
        }
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

    /// A programmed set ended: with a link (`status` success), which its device takes, or
    /// without (the program hears why).
    private func programmedSetTerminated(_ program: ProgrammedAdvertisingRoute, local: LEAddress, status: UInt8, set: UInt8,
                                         connectionHandle: UInt16) {
        guard status == HCIStatus.success else {
            program.advertisingEnded(set: set, status: status)
            return
        }
        guard var pending = pendingLinks.removeValue(forKey: connectionHandle), let peripheral = program.acceptingPeripheral else {
            if let leftOut = routingLog.take(now: scheduler.nowNanoseconds, for: logger) {
                logger.warning("advertising set \(set) names link \(connectionHandle), which is not open\(LogBudget.note(leftOut))")
            }
            // The set ended all the same: the program's advertising goes on.
            program.linkMade(nil, event: nil, set: set)
            return
        }
        if let timer = pending.timer { scheduler.cancel(timer) }
        let connection = peripheral.connectionOpened(pending.event, fromAdvertising: true, localAddress: local,
                                                     identityAddress: program.identityAddress(ofSet: set))
        program.linkMade(connection, event: pending.event, set: set)
        guard connection != nil else { return }
        let packets = pending.packets
        pending.packets.removeAll()
        if linkOwners[connectionHandle] === peripheral {
            for packet in packets { peripheral.receiveACL(packet) }
        }
    }

    func linkOpened(_ handle: UInt16, by peripheral: Peripheral) {
        linkOwners[handle] = peripheral
    }

    func linkClosed(_ handle: UInt16, reason: UInt8) {
        let owner = linkOwners[handle]
        linkOwners[handle] = nil
        controller.linksMayHaveClosed()
        if let program = programmedAdvertising {
            program.linkClosed(handle, reason: reason, ofAcceptingPeripheral: owner != nil && owner === program.acceptingPeripheral)
        }
    }

    private func dropPendingLinks() {
        for pending in pendingLinks.values {
            if let timer = pending.timer { scheduler.cancel(timer) }
        }
        pendingLinks.removeAll()
    }

    public var connectionCount: Int { linkOwners.count }

    /// Lines left out by the controller-wide budgets (HCI and routing).
    public var logLinesLeftOut: Int { controller.logLinesLeftOut + routingLog.leftOutTotal }

    var isStopping: Bool { controller.isStopping }
}

// MARK: - The peripheral role

extension PeripheralHost: ControllerRole {
    /// The devices that advertise by themselves, a set each, and the program's.
    public var advertisingSetsWanted: Int {
        members.count { !$0.peripheral.configuration.programmedAdvertising } + (programmedAdvertising?.advertisingSetsWanted ?? 0)
    }
    /// A broadcaster that can send a periodic train (`BroadcastingDevice.offersPeriodicAdvertising`).
    public var wantsPeriodicAdvertising: Bool {
        members.contains { $0.peripheral.advertising.broadcaster?.offersPeriodicAdvertising == true }
    }
    /// A twin of a recorded extended advertiser (`DeviceProfile.recordedAdvertisingIsExtended`),
    /// or a broadcaster whose data does not fit a legacy PDU's 31 octets (Vol 6, Part B,
    /// 2.3.1.3): alone on its controller it still needs an extended set.
    public var wantsExtendedAdvertising: Bool {
        if programmedAdvertising?.wantsExtendedAdvertising == true { return true }
        return members.contains { member in
            let advertising = member.peripheral.advertising
            if let broadcaster = advertising.broadcaster { return broadcaster.advertisingData.count > AdvertisingPayload.maximumLength }
            return advertising.profile.recordedAdvertisingIsExtended && advertising.profile.recordedAdvertising != nil
        }
    }
    public var openLinkCount: Int { linkOwners.count }

    public func controllerStarting() {
        for member in members { member.peripheral.controllerCameUp() }
    }

    public func controllerReady(then proceed: @escaping () -> Void) {
        advertiser.configure(extendedCommands: controller.usesExtendedCommands)
        let advertisingMembers = members.count { !$0.peripheral.configuration.programmedAdvertising }
        if advertisingMembers > advertiser.capacity {
            let name = controller.name
            let why = hci.info.supportsExtendedAdvertising
                ? "controller \(name) can advertise \(advertiser.capacity) sets at once, not \(members.count)"
                : "controller \(name) has no LE Extended Advertising, so it can advertise for one device only"
            logger.error("\(why); give the other devices their own --controller")
            onFatal?("\(members.count) devices on one controller: \(why); give each device its own --controller (e.g. one tcp: connection each)")
        }
        // The resolving list is loaded before anything advertises: the controller refuses
        // changes to it while advertising with address resolution on (Vol 4, Part E, 7.8.38).
        loadResolvingList(startingUp: true) { [weak self] in
            guard let self, !self.isStopping else { return }
            for member in self.members {
                // A device whose advertising is programmed takes none: the program takes its own.
                let set = member.peripheral.configuration.programmedAdvertising ? nil : self.advertiser.takeSet()
                member.peripheral.hostReady(advertisingSet: set)
            }
            self.programmedAdvertising?.controllerReady()
            proceed()
        }
    }

    public func controllerWasReset(reason: String) {
        resolvingListReset()
        dropPendingLinks()
        programmedAdvertising?.controllerGone(reset: true, reason: reason)
        for member in members { member.peripheral.hostReset(reason: reason) }
        linkOwners.removeAll()
    }

    public func controllerWillHalt() {
        // First: the completions the halt cancels must find their generation gone.
        resolvingListReset()
    }

    public func controllerWentAway(reason: String, stopping: Bool) {
        dropPendingLinks()
        programmedAdvertising?.controllerGone(reset: false, reason: reason)
        for member in members { member.peripheral.controllerWentAway(reason: reason, stopping: stopping) }
        linkOwners.removeAll()
    }

    public func stopBegan() {
        programmedAdvertising?.stopBegan()
        for member in members { member.peripheral.deviceStopping() }
    }

    public func closeLinksForStop() {
        dropPendingLinks()
        programmedAdvertising?.closeForStop()
        for member in members { member.peripheral.closeEverything() }
    }

    public func stopFinished() {
        // After the Reset (or a controller gone or silent past the deadline) no link is left:
        // each device forgets the ones that never reported closing, so nothing of them (timers,
        // the host's hold on their device) outlives the stop.
        for member in members { member.peripheral.dropAllConnections(reason: "stopped") }
        linkOwners.removeAll()
        dropPendingLinks()
    }

    public func roleEvent(_ event: HCIEvent) {
        guard case let .leAdvertisingSetTerminated(status, set, connectionHandle, _) = event else { return }
        advertisingSetTerminated(status: status, set: set, connectionHandle: connectionHandle)
    }

    public func disconnectionCompleted(status: UInt8, handle: UInt16, reason: UInt8) {
        if status == HCIStatus.success, let pending = pendingLinks.removeValue(forKey: handle) {
            if let timer = pending.timer { scheduler.cancel(timer) }
            return
        }
        owner(of: handle)?.disconnectionCompleted(status: status, handle: handle, reason: reason)
    }

    public func linkEvent(_ event: HCIEvent, handle: UInt16) {
        if let peripheral = owner(of: handle) {
            peripheral.linkEvent(event)
        } else {
            // A link with no device yet still gets its answer.
            controller.answerUnservedLink(event, handle: handle)
        }
    }

    public func receiveACL(_ packet: ACLPacket) {
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

    public func transmitQueueHasRoom(for handle: UInt16) {
        owner(of: handle)?.transmitQueueHasRoom(on: handle)
    }
}
