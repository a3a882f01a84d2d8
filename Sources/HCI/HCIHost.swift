import BlemuCore
import DequeModule
import Logging

/// What a controller told us about itself during initialization.
public struct ControllerInfo: Sendable, Equatable {
    public var hciVersion: UInt8 = 0
    public var manufacturer: UInt16 = 0
    public var address = BluetoothAddress(value: 0)
    /// Supported Commands bit mask (Vol 4, Part E, 6.27), 64 octets.
    public var supportedCommands = [UInt8](repeating: 0, count: 64)
    /// LE features (Vol 6, Part B, 4.6).
    public var leFeatures: UInt64 = 0
    public var aclMaxLength = 27
    public var aclTotalPackets = 1
    /// Advertising sets the controller supports (LE Read Number of Supported Advertising Sets,
    /// Vol 4, Part E, 7.8.58); 0 when it has no LE Extended Advertising.
    public var advertisingSets = 0
    /// The most advertising (or scan response) data an extended set takes (LE Read Maximum
    /// Advertising Data Length, Vol 4, Part E, 7.8.57: 31 to 1650); 1650 when not read.
    public var maximumAdvertisingDataLength = 1650

    public func supports(octet: Int, bit: Int) -> Bool {
        octet < supportedCommands.count && supportedCommands[octet] & (1 << bit) != 0
    }

    /// Vol 6, Part B, 4.6.6: LE Data Packet Length Extension.
    public var supportsDataLengthExtension: Bool { leFeatures & (1 << 5) != 0 }
    /// Vol 6, Part B, 4.6 (bit 12): LE Extended Advertising.
    public var supportsExtendedAdvertising: Bool { leFeatures & (1 << 12) != 0 }
    /// LL Privacy (Vol 6, Part B, 4.6, bit 6) with the commands that load and enable the resolving
    /// list in Supported Commands (Vol 4, Part E, 6.27): LE Add Device To Resolving List (octet 34
    /// bit 3), LE Clear Resolving List (34, 5), LE Read Resolving List Size (34, 6), LE Set Address
    /// Resolution Enable (35, 1).
    public var supportsLLPrivacy: Bool {
        leFeatures & (1 << 6) != 0 && supports(octet: 34, bit: 3) && supports(octet: 34, bit: 5)
            && supports(octet: 34, bit: 6) && supports(octet: 35, bit: 1)
    }
    /// LE Set Privacy Mode (octet 39 bit 2).
    public var supportsPrivacyMode: Bool { supports(octet: 39, bit: 2) }
    /// LE 2M PHY (Vol 6, Part B, 4.6, bit 8).
    public var supports2MPHY: Bool { leFeatures & (1 << 8) != 0 }
    /// LE Coded PHY (Vol 6, Part B, 4.6, bit 11).
    public var supportsCodedPHY: Bool { leFeatures & (1 << 11) != 0 }
    /// LE Periodic Advertising (Vol 6, Part B, 4.6, bit 13).
    public var supportsPeriodicAdvertising: Bool { leFeatures & (1 << 13) != 0 }

    /// The HCI version (Assigned Numbers 2.1: 0x06 is 4.0 ... 0x0E is 6.0) and the company
    /// identifier, for the log a field engineer reads.
    public var versionDescription: String {
        let versions = ["4.0", "4.1", "4.2", "5.0", "5.1", "5.2", "5.3", "5.4", "6.0", "6.1"]
        let index = Int(hciVersion) - 6
        let version = versions.indices.contains(index) ? "Bluetooth \(versions[index])" : "HCI version \(Hex.byte(hciVersion))"
        return "\(version), manufacturer \(Hex.word(manufacturer))"
    }
}

/// The outcome of one HCI command.
public enum CommandResult: Equatable, Sendable {
    /// Command Complete: the return parameters, status first for nearly every command.
    case complete([UInt8])
    /// Command Status: the command started (status 0) or was refused.
    case status(UInt8)
    /// No answer within the command timeout.
    case timeout
    /// The host was reset before an answer came.
    case cancelled

    /// The HCI status the result carries (0x00 success), or nil for timeout/cancel.
    public var status: UInt8? {
        switch self {
        case .complete(let p): return p.first ?? HCIStatus.success
        case .status(let s): return s
        case .timeout, .cancelled: return nil
        }
    }
    public var succeeded: Bool { status == HCIStatus.success }
}

public protocol HCIHostDelegate: AnyObject {
    /// Initialization finished: the controller is ready for advertising and connections.
    func hciHostDidBecomeReady(_ host: HCIHost)
    /// The controller was reset (hardware error, or initialization restarted): every link is gone.
    func hciHostDidReset(_ host: HCIHost, reason: String)
    /// Events other than the ones the host handles itself (command flow, ACL credits).
    func hciHost(_ host: HCIHost, didReceive event: HCIEvent)
    func hciHost(_ host: HCIHost, didReceiveACL packet: ACLPacket)
    /// A link's transmit queue has room again after refusing a notification.
    func hciHost(_ host: HCIHost, transmitQueueHasRoomFor handle: UInt16)
}

/// How an L2CAP PDU may be treated by the transmit queue.
public enum TransmitPriority: Sendable {
    /// What the protocols above bound themselves (ATT responses and indications, signalling):
    /// never refused short of the hard cap.
    case required
    /// What nothing above bounds (ATT notifications): refused once `bestEffortQueueLimit` of
    /// them wait on the link, and the delegate hears when there is room again.
    case bestEffort
}

/// The host side of HCI: command flow control, initialization, event decoding, and ACL
/// transmission against controller credits.
public final class HCIHost {
    public static let commandTimeout: Duration = .seconds(3)
    /// The initialization's commands (Reset first) may take longer, as Linux's HCI_INIT_TIMEOUT
    /// allows them (10 s, include/net/bluetooth/hci.h): a virtual controller whose radio is
    /// saturated (rootcanal under a large fleet, PERFORMANCE.md "A fleet over the air") answers a
    /// new connection's Reset seconds late, and a Reset given up at 3 s and sent again a second
    /// later only added to its load; the initialization retried for a minute.
    public static let initializationCommandTimeout: Duration = .seconds(10)
    /// Bounded, and room for a controller's worth of devices starting at once: a fleet puts up
    /// to `fleetMembersPerConnection` (32) on one connection, each asking up to 8 commands to
    /// start (LE Set Extended Advertising Parameters, Random Address, Data, Scan Response,
    /// Enable; a periodic train's three). At 64, 16 heart-rate sensors on rootcanal's 16 sets
    /// asked 96 and a quarter of them never advertised.
    public static let maxQueuedCommands = 256
    /// The most devices a fleet puts on one controller connection, whatever sets it reports.
    public static let fleetMembersPerConnection = 32
    /// Best-effort PDUs that may wait per link before one is refused.
    public static let bestEffortQueueLimit = 8
    /// Hard cap per link, whatever the kind: past it a PDU is dropped with an error log.
    public static let linkQueueLimit = 64

    public weak var delegate: HCIHostDelegate?
    /// Writes one packet to the controller: H4 packet type and the packet. False when refused.
    public var output: (UInt8, ArraySlice<UInt8>) -> Bool
    public private(set) var info = ControllerInfo()
    public private(set) var isReady = false
    public var logger: Logger

    private let scheduler: TimerScheduling

    private struct PendingCommand {
        let command: HCICommand
        let timeout: Duration
        let completion: ((CommandResult) -> Void)?
    }
    private var commandQueue: Deque<PendingCommand> = []
    private var commandInFlight: PendingCommand?
    private var commandTimer: TimerID?
    /// Num_HCI_Command_Packets from the last Command Complete/Status (Vol 4, Part E, 4.4).
    private var commandCredits = 1
    /// Runs while commands wait and the controller has given no credit: a controller that
    /// says 0 and never says more is treated like one that does not answer.
    private var creditTimer: TimerID?
    /// Lines about what the controller sends wrong: it controls their rate.
    private var malformedLog = LogBudget()
    private var transmitLog = LogBudget()
    /// Log lines left out by the budgets, for diagnostics.
    public var logLinesLeftOut: Int { malformedLog.leftOutTotal + transmitLog.leftOutTotal }
    private var generation = 0

    private struct QueuedPDU {
        var bytes: [UInt8]
        var sent: Int
        let priority: TransmitPriority
    }
    private struct LinkTransmit {
        /// Tells this link from an earlier one with the same handle, for the entries that
        /// `waiting` and `refusedLinks` may still hold for a closed link.
        let serial: UInt64
        var queue: Deque<QueuedPDU> = []
        var inFlight = 0
        var bestEffortQueued = 0
        /// In `waiting`: it has fragments to send.
        var isWaiting = false
        /// It has fragments to send but holds its fair share of the controller's buffers: out of
        /// `waiting` until enough of its packets complete.
        var isCapped = false
        /// In `cappedLinks` (an entry stays there until a link closes and the list is tidied).
        var isInCappedList = false
        /// A PDU was refused (in `refusedLinks`): the delegate hears when there is room again.
        var refused = false
    }
    /// A link's entry in `waiting` or `refusedLinks`.
    private struct LinkReference {
        let handle: UInt16
        let serial: UInt64
    }
    private var links = HandleTable<LinkTransmit>()
    /// Who takes each open link's ACL data (`openLink(_:receiver:)`).
    private let receivers = ACLReceiverTable()
    private var nextLinkSerial: UInt64 = 0
    /// The links with fragments queued, in round-robin order: each at most once, so a credit
    /// costs the same with 1 link or 3000 (no walk over idle links).
    private var waiting: Deque<LinkReference> = []
    /// The links that were capped at their fair share, each at most once, to look at again
    /// when a link closes and the share grows.
    private var cappedLinks: [LinkReference] = []
    private var cappedScratch: [LinkReference] = []
    /// The links told "refused" that wait to hear there is room again, each at most once.
    private var refusedLinks: [LinkReference] = []
    private var refusedScratch: [LinkReference] = []
    private var aclCredits = 0
    private var draining = false
    private var packetScratch: [UInt8] = []
    /// The buffers a PDU waiting for credits is copied into, shared by every link: a burst
    /// beyond the controller's credits reuses them (no allocation once warm), and the memory
    /// kept stays bounded however many links are open. A buffer has room for the largest PDU the
    /// layers above say they send (`transmitBufferCapacity`).
    private var pduBuffers: BufferPool

    /// `transmitBufferCapacity`: the largest PDU (L2CAP header included) the layers above send,
    /// so a PDU waiting for credits never grows its buffer; a larger one still goes, in a buffer
    /// grown once.
    public init(scheduler: TimerScheduling, logger: Logger, transmitBufferCapacity: Int = 4 + 251,
                output: @escaping (UInt8, ArraySlice<UInt8>) -> Bool) {
        pduBuffers = BufferPool(limit: 2 * HCIHost.bestEffortQueueLimit, bufferCapacity: transmitBufferCapacity)
        self.scheduler = scheduler
        self.logger = logger
        self.output = output
        packetScratch.reserveCapacity(4 + 251)
        // The two lists take turns (`drainACL` swaps them): both get room now, so the first
        // refusals after a swap do not allocate.
        refusedLinks.reserveCapacity(8)
        refusedScratch.reserveCapacity(8)
        cappedLinks.reserveCapacity(8)
        cappedScratch.reserveCapacity(8)
    }

    // MARK: Commands

    /// Queues a command; it goes out when the controller has room (Num_HCI_Command_Packets).
    /// Returns false, and logs, when the bounded queue is full.
    @discardableResult
    public func send(_ command: HCICommand, completion: ((CommandResult) -> Void)? = nil) -> Bool {
        send(command, timeout: Self.commandTimeout, completion: completion)
    }

    /// `send`, with how long its answer may take once it is sent.
    @discardableResult
    public func send(_ command: HCICommand, timeout: Duration, completion: ((CommandResult) -> Void)?) -> Bool {
        guard commandQueue.count < Self.maxQueuedCommands else {
            // A peer can fill it (a peripheral's Connection Parameter Update Requests, each asked
            // of the controller): the line has the budget of the other refusals.
            if let leftOut = transmitLog.take(now: scheduler.nowNanoseconds, for: logger) {
                logger.error("HCI command queue full: \(command.name) not sent\(LogBudget.note(leftOut))")
            }
            completion?(.cancelled)
            return false
        }
        commandQueue.append(PendingCommand(command: command, timeout: timeout, completion: completion))
        pumpCommands()
        return true
    }

    /// Drops every command not yet sent (their completions hear `.cancelled`); the one in
    /// flight still gets its answer. For a stop, where queued work no longer matters.
    public func cancelQueuedCommands() {
        let cancelled = commandQueue
        commandQueue.removeAll()
        stopCreditTimer()
        for pending in cancelled { pending.completion?(.cancelled) }
    }

    private func stopCreditTimer() {
        if let creditTimer { scheduler.cancel(creditTimer) }
        creditTimer = nil
    }

    private func pumpCommands() {
        // One command in flight at a time keeps answers unambiguous; credits say whether the
        // controller can take it at all.
        guard commandInFlight == nil, !commandQueue.isEmpty else {
            stopCreditTimer()
            return
        }
        guard commandCredits > 0 else {
            // Vol 4, Part E, 4.4: with Num_HCI_Command_Packets = 0 the host waits for a later
            // event to give credits. One that never comes is a controller not answering:
            // after the command timeout, take one credit back and go on.
            guard creditTimer == nil else { return }
            let expected = generation
            creditTimer = scheduler.schedule(after: Self.commandTimeout) { [weak self] in
                guard let self, self.generation == expected else { return }
                self.creditTimer = nil
                guard self.commandInFlight == nil, self.commandCredits == 0, !self.commandQueue.isEmpty else { return }
                self.logger.error("controller gave no HCI command credits for \(Self.commandTimeout) with \(self.commandQueue.count) command(s) waiting: sending anyway",
                                  metadata: [LogKey.hciStatus: "timeout"])
                self.commandCredits = 1
                self.pumpCommands()
            }
            return
        }
        stopCreditTimer()
        guard let next = commandQueue.popFirst() else { return }
        var packet: [UInt8] = []
        next.command.encode(into: &packet)
        commandInFlight = next
        commandCredits -= 1
        logger.trace("HCI command \(next.command.name)")
        // The timer goes first: a controller may answer inside `output` (in-process ones do),
        // and that answer must find the timer to cancel.
        let expected = generation
        commandTimer = scheduler.schedule(after: next.timeout) { [weak self] in
            guard let self, self.generation == expected, let inFlight = self.commandInFlight else { return }
            // Vol 4, Part E, 4.4: a controller that does not answer; log, give the credit back, go on.
            self.logger.error("HCI command \(inFlight.command.name) timed out after \(inFlight.timeout): controller not answering",
                              metadata: [LogKey.hciStatus: "timeout"])
            self.commandTimer = nil
            self.commandInFlight = nil
            self.commandCredits = max(self.commandCredits, 1)
            inFlight.completion?(.timeout)
            self.pumpCommands()
        }
        if !output(0x01, packet[...]) {
            logger.warning("controller link refused \(next.command.name)")
        }
    }

    private func finishCommand(opcode: UInt16, numPackets: UInt8, result: CommandResult) {
        commandCredits = Int(numPackets)
        guard let inFlight = commandInFlight, inFlight.command.opcode == opcode else {
            // Opcode 0 is the controller saying it can take commands (Vol 4, Part E, 7.7.14).
            if opcode != 0 { logger.debug("answer for \(HCIOpcode.name(opcode)), which is not in flight") }
            pumpCommands()
            return
        }
        if let timer = commandTimer { scheduler.cancel(timer) }
        commandTimer = nil
        commandInFlight = nil
        if let status = result.status, status != HCIStatus.success {
            // Disconnecting a link the central closed first is a race, not a failure.
            let benign = opcode == HCIOpcode.disconnect && status == HCIStatus.unknownConnectionIdentifier
            logger.log(level: benign ? .debug : .warning, "\(inFlight.command.name) failed",
                       metadata: [LogKey.hciStatus: .string(Hex.byte(status))])
        }
        inFlight.completion?(result)
        pumpCommands()
    }

    // MARK: Initialization (Vol 4, Part E, 4 and 7)

    /// Resets the controller and reads what it can do. Safe to call again (after a hardware
    /// error or a new transport): everything pending is cancelled first.
    public func start() {
        halt()
        // What the previous controller said may not hold for this one.
        info = ControllerInfo()
        initialize()
    }

    /// Forgets everything in flight (the transport is gone): pending commands are cancelled,
    /// links and credits dropped, and nothing is sent until `start()`.
    public func halt() {
        generation += 1
        isReady = false
        if let timer = commandTimer { scheduler.cancel(timer) }
        commandTimer = nil
        stopCreditTimer()
        let cancelled = (commandInFlight.map { [$0] } ?? []) + Array(commandQueue)
        commandInFlight = nil
        commandQueue.removeAll()
        commandCredits = 1
        links.removeAll()
        receivers.removeAll()
        waiting.removeAll()
        cappedLinks.removeAll(keepingCapacity: true)
        fairShare = 1
        refusedLinks.removeAll()
        aclCredits = 0
        for pending in cancelled { pending.completion?(.cancelled) }
    }

    /// Where the initialization sequence stands: the stages, what a refusal changes.
    private var initialization = ControllerInitialization()

    /// Vol 4, Part E, 7.3.1 (`ControllerInitialization.eventMask`).
    public static var eventMask: UInt64 { ControllerInitialization.eventMask }
    /// Vol 4, Part E, 7.8.1 (`ControllerInitialization.leEventMask`).
    public static var leEventMask: UInt64 { ControllerInitialization.leEventMask }

    private func initialize() { run(.reset) }

    private func run(_ stage: ControllerInitialization.Stage) {
        guard stage != .done else {
            finishInitialization()
            return
        }
        guard let (command, required) = initialization.command(for: stage, info: info) else {
            run(stage.next)
            return
        }
        let expected = generation
        send(command, timeout: Self.initializationCommandTimeout) { [weak self] result in
            guard let self, self.generation == expected else { return }
            let answer = self.initialization.take(result, of: command, required: required, at: stage, into: &self.info)
            if let warning = answer.warning {
                self.logger.warning("\(warning)", metadata: answer.namesStatus
                                        ? [LogKey.hciStatus: .string(result.status.map(Hex.byte) ?? "timeout")] : [:])
            }
            switch answer.step {
            case .ask(let stage):
                self.run(stage)
            case .restart:
                self.logger.error("controller initialization failed at \(command.name); retrying in 1 s",
                                  metadata: [LogKey.hciStatus: .string(result.status.map(Hex.byte) ?? "timeout")])
                self.scheduler.schedule(after: .seconds(1)) { [weak self] in
                    guard let self, self.generation == expected else { return }
                    self.start()
                }
            }
        }
    }

    private func finishInitialization() {
        info.aclMaxLength = max(info.aclMaxLength, 27)
        info.aclTotalPackets = max(info.aclTotalPackets, 1)
        aclCredits = info.aclTotalPackets
        updateFairShare()
        isReady = true
        logger.info("controller ready: \(info.address), \(info.versionDescription), ACL \(info.aclTotalPackets) x \(info.aclMaxLength) bytes")
        delegate?.hciHostDidBecomeReady(self)
    }

    // MARK: Incoming

    /// Handles one event packet from the controller. Malformed events are logged and dropped.
    public func receiveEvent(_ packet: ArraySlice<UInt8>) {
        // Number Of Completed Packets is the most frequent event: read it in place, without
        // building the decoded array (Vol 4, Part E, 7.7.19).
        if packet.count >= 3, packet[packet.startIndex] == 0x13 {
            let count = Int(packet[packet.startIndex + 2])
            if packet.count == 3 + 4 * count, Int(packet[packet.startIndex + 1]) == 1 + 4 * count {
                var r = ByteReader(packet.dropFirst(3))
                for _ in 0..<count {
                    guard let handle = try? r.u16(), let completed = try? r.u16() else { break }
                    packetsCompleted(handle: handle & 0x0FFF, count: completed)
                }
                drainACL()
                return
            }
        }
        let event: HCIEvent
        do {
            event = try HCIEvent(packet: packet)
        } catch {
            if let leftOut = malformedLog.take(now: scheduler.nowNanoseconds, for: logger) {
                logger.warning("dropped malformed HCI event: \(error)\(LogBudget.note(leftOut))")
            }
            return
        }
        switch event {
        case let .commandComplete(numPackets, opcode, parameters):
            finishCommand(opcode: opcode, numPackets: numPackets, result: .complete(parameters))
        case let .commandStatus(status, numPackets, opcode):
            finishCommand(opcode: opcode, numPackets: numPackets, result: .status(status))
        case .numberOfCompletedPackets(let entries):
            for entry in entries { packetsCompleted(handle: entry.handle, count: entry.count) }
            drainACL()
        case .hardwareError(let code):
            logger.error("controller hardware error \(Hex.byte(code)): resetting",
                         metadata: [LogKey.hciStatus: .string(Hex.byte(code))])
            delegate?.hciHostDidReset(self, reason: "hardware error \(Hex.byte(code))")
            start()
        case .disconnectionComplete(let status, let handle, _):
            if status == HCIStatus.success { closeLink(handle) }
            delegate?.hciHost(self, didReceive: event)
        default:
            delegate?.hciHost(self, didReceive: event)
        }
    }

    public func receiveACL(_ packet: ArraySlice<UInt8>) {
        do {
            let acl = try ACLPacket(packet: packet)
            // A set-up link's data goes straight to its L2CAP link; the roles route the rest.
            if let receiver = receivers[acl.handle] { return receiver.receive(acl) }
            delegate?.hciHost(self, didReceiveACL: acl)
        } catch {
            if let leftOut = malformedLog.take(now: scheduler.nowNanoseconds, for: logger) {
                logger.warning("dropped malformed ACL packet: \(error)\(LogBudget.note(leftOut))")
            }
        }
    }

    // MARK: ACL transmit

    /// The most packets one link may have in the controller's buffers: an equal part of them
    /// for each open link. Vol 4, Part E, 4.1.1: the buffers are shared by all links, and a
    /// packet is only freed when the peer acknowledged it, so a link that never completes
    /// (a slow or hostile peer) would otherwise end up holding every buffer, and no other link
    /// could send until the supervision timeout. Capped at its share it keeps only that, and
    /// the other links share the rest. A link that is alone may use them all. Kept current by
    /// `updateFairShare()` when links open or close or the controller says its buffer count.
    private(set) var fairShare = 1

    private func updateFairShare() {
        fairShare = max(1, info.aclTotalPackets / max(1, links.count))
    }

    private func packetsCompleted(handle: UInt16, count: UInt16) {
        let share = fairShare
        // Credits for links already gone were returned at disconnection (Vol 4, Part E, 4.3).
        guard let (returned, uncapped) = links.modify(handle, { link -> (Int, LinkReference?) in
            let returned = min(Int(count), link.inFlight)
            link.inFlight -= returned
            guard link.isCapped, link.inFlight < share else { return (returned, nil) }
            link.isCapped = false
            link.isWaiting = true
            return (returned, LinkReference(handle: handle, serial: link.serial))
        }) else { return }
        aclCredits = min(aclCredits + returned, info.aclTotalPackets)
        if let uncapped { waiting.append(uncapped) }
    }

    /// Starts accounting for a new connection handle; its ACL data goes to `receiver` (nil: to
    /// the delegate) until `closeLink`.
    public func openLink(_ handle: UInt16, receiver: ACLReceiver? = nil) {
        if let receiver { receivers.set(receiver, for: handle) } else { receivers.remove(handle) }
        if links[handle] == nil {
            nextLinkSerial += 1
            links[handle] = LinkTransmit(serial: nextLinkSerial)
            updateFairShare()
        }
    }

    /// A link is gone: its queue is dropped, and the packets the controller had not yet
    /// completed count as completed (Vol 4, Part E, 4.3).
    public func closeLink(_ handle: UInt16) {
        // Its entries in `waiting` and `refusedLinks` are dropped when they come up (the serial no
        // longer matches), so closing costs the same however many links are open.
        receivers.remove(handle)
        guard let link = links.removeValue(forKey: handle) else { return }
        updateFairShare()
        for pdu in link.queue { pduBuffers.give(pdu.bytes) }
        aclCredits = min(aclCredits + link.inFlight, info.aclTotalPackets)
        uncapBelowShare()
        drainACL()
    }

    /// One link fewer, a larger share each: the capped links below it send again. The list is
    /// tidied on the way (entries of closed links, or of links no longer capped, go).
    private func uncapBelowShare() {
        guard !cappedLinks.isEmpty else { return }
        let share = fairShare
        swap(&cappedLinks, &cappedScratch)
        for reference in cappedScratch {
            let keep = links.modify(reference.handle) { link -> Bool in
                guard link.serial == reference.serial else { return false }
                if link.isCapped, link.inFlight < share {
                    link.isCapped = false
                    link.isWaiting = true
                    waiting.append(reference)
                }
                link.isInCappedList = link.isCapped
                return link.isCapped
            }
            if keep == true { cappedLinks.append(reference) }
        }
        cappedScratch.removeAll(keepingCapacity: true)
    }

    public func queuedPDUs(_ handle: UInt16) -> Int { links[handle]?.queue.count ?? 0 }

    /// Sends an L2CAP PDU (basic header included) on a link, fragmented to the controller's
    /// ACL size, against its credits. Returns false when the PDU was refused (best-effort
    /// queue full, unknown link, or the hard cap reached). The link's entry is changed where it
    /// lies in the table (`modify`), never copied out and back.
    public func sendL2CAP(handle: UInt16, pdu: ArraySlice<UInt8>, priority: TransmitPriority) -> Bool {
        guard let idle = links.modify(handle, { link -> Bool? in
            if priority == .bestEffort && link.bestEffortQueued >= Self.bestEffortQueueLimit {
                markRefused(handle, &link)
                return nil
            }
            return link.queue.isEmpty
        }) else { return false }
        guard let idle else { return false }
        var sent = 0
        let share = fairShare
        if idle {
            // Fast path: nothing waits, so send what credits allow straight from the caller's
            // buffer, and queue only the rest. The link's state is stored before each packet goes
            // out: a controller may answer inside `output` (in-process ones do), and its Number Of
            // Completed Packets must find the count it completes.
            while sent < pdu.count, aclCredits > 0, links.modify(handle, { link -> Bool in
                guard link.inFlight < share else { return false }
                link.inFlight += 1
                return true
            }) == true {
                let chunk = min(info.aclMaxLength, pdu.count - sent)
                transmitFragment(handle: handle, first: sent == 0, pdu[(pdu.startIndex + sent)..<(pdu.startIndex + sent + chunk)])
                sent += chunk
            }
            if sent == pdu.count { return true }
        }
        let queued = links.modify(handle) { link -> Bool in
            guard idle || link.queue.count < Self.linkQueueLimit else {
                markRefused(handle, &link)
                return false
            }
            link.queue.append(QueuedPDU(bytes: pduBuffers.take(pdu), sent: sent, priority: priority))
            if priority == .bestEffort { link.bestEffortQueued += 1 }
            if !link.isWaiting && !link.isCapped {
                link.isWaiting = true
                waiting.append(LinkReference(handle: handle, serial: link.serial))
            }
            return true
        }
        // Nil: the link closed meanwhile (a controller answering inside `output`).
        guard let queued else { return false }
        if !queued, let leftOut = transmitLog.take(now: scheduler.nowNanoseconds, for: logger) {
            logger.error("link transmit queue full (\(Self.linkQueueLimit) PDUs): PDU refused\(LogBudget.note(leftOut))",
                         metadata: [LogKey.connHandle: "\(handle)"])
        }
        return queued
    }

    private func transmitFragment(handle: UInt16, first: Bool, _ data: ArraySlice<UInt8>) {
        packetScratch.removeAll(keepingCapacity: true)
        ACLPacket.appendHeader(handle: handle, boundary: first ? .firstNonFlushable : .continuing,
                               length: data.count, to: &packetScratch)
        packetScratch.append(contentsOf: data)
        aclCredits -= 1
        if !output(0x02, packetScratch[...]), let leftOut = transmitLog.take(now: scheduler.nowNanoseconds, for: logger) {
            logger.error("controller link refused an ACL packet\(LogBudget.note(leftOut))", metadata: [LogKey.connHandle: "\(handle)"])
        }
    }

    /// Sends queued fragments round-robin across links while the controller has buffers.
    private func drainACL() {
        // A controller that answers inside `output` re-enters here; the outer loop goes on with
        // whatever credits that answer returned.
        guard !draining else { return }
        draining = true
        defer { draining = false }
        // Round robin over the links that have something to send: the link served goes to the
        // back, so buffers freed one at a time take turns.
        let share = fairShare
        while aclCredits > 0, let next = waiting.popFirst() {
            guard var head = waitingHead(next, share: share) else { continue }
            let chunk = min(info.aclMaxLength, head.bytes.count - head.sent)
            let first = head.sent == 0
            let fragment = head.bytes[head.sent..<(head.sent + chunk)]
            head.sent += chunk
            let finished = head.sent >= head.bytes.count
            // Changed in place in the table (no copy of the queue), and stored before the packet
            // goes out, for the same reason as in `sendL2CAP`.
            modifyLink(next.handle) { link in
                link.inFlight += 1
                if finished {
                    link.queue.removeFirst()
                    if head.priority == .bestEffort { link.bestEffortQueued -= 1 }
                } else {
                    link.queue[0].sent = head.sent
                }
                if link.queue.isEmpty {
                    link.isWaiting = false
                } else {
                    waiting.append(next)
                }
            }
            transmitFragment(handle: next.handle, first: first, fragment)
            // Given back once sent: a PDU the delegate queues from inside `output` must not
            // get this buffer while the fragment still points into it.
            if finished { pduBuffers.give(head.bytes) }
        }
        guard !refusedLinks.isEmpty else { return }
        // The delegate may send (and be refused again) from inside its callback: the list is
        // swapped out first, and what is refused meanwhile lands in the fresh one.
        swap(&refusedLinks, &refusedScratch)
        for reference in refusedScratch {
            guard let link = links[reference.handle], link.serial == reference.serial, link.refused else { continue }
            guard link.bestEffortQueued < Self.bestEffortQueueLimit, link.queue.count < Self.linkQueueLimit else {
                refusedLinks.append(reference)
                continue
            }
            links.modify(reference.handle) { $0.refused = false }
            delegate?.hciHost(self, transmitQueueHasRoomFor: reference.handle)
        }
        refusedScratch.removeAll(keepingCapacity: true)
    }

    /// The PDU a link in `waiting` sends from next, or nil for an entry left by a closed link,
    /// a link with nothing queued, or one that holds its fair `share` of the buffers (it leaves
    /// `waiting` until its packets complete). A function of its own, so no copy of the link's
    /// entry outlives it: the queue is then changed in place, without being copied.
    private func waitingHead(_ reference: LinkReference, share: Int) -> QueuedPDU? {
        guard let link = links[reference.handle], link.serial == reference.serial, link.isWaiting else { return nil }
        if link.inFlight >= share, !link.queue.isEmpty {
            let listed = link.isInCappedList
            links.modify(reference.handle) {
                $0.isWaiting = false
                $0.isCapped = true
                $0.isInCappedList = true
            }
            if !listed { cappedLinks.append(reference) }
            return nil
        }
        if let head = link.queue.first { return head }
        links.modify(reference.handle) { $0.isWaiting = false }
        return nil
    }

    private func markRefused(_ handle: UInt16, _ link: inout LinkTransmit) {
        guard !link.refused else { return }
        link.refused = true
        refusedLinks.append(LinkReference(handle: handle, serial: link.serial))
    }

    /// Changes a link's entry where it lies in the table, so its queue is not copied.
    private func modifyLink(_ handle: UInt16, _ change: (inout LinkTransmit) -> Void) {
        links.modify(handle, change)
    }
}
