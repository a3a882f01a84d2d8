import BlemuCore
import BlemuHCI
import Logging

/// What a link needs of HCI below it: ACL data out, against the controller's credits, and the
/// one command LE signalling leads to (LE Connection Update). `HCIHost` in a stack, a recorder in
/// a test of a link alone.
public protocol L2CAPLower: AnyObject {
    func sendL2CAP(handle: UInt16, pdu: ArraySlice<UInt8>, priority: TransmitPriority) -> Bool
    @discardableResult
    func send(_ command: HCICommand, completion: ((CommandResult) -> Void)?) -> Bool
}

extension HCIHost: L2CAPLower {}

/// What the L2CAP links of one host share: the HCI they send on, the timers, the log and its
/// budget for what peers send wrong, and one buffer frames are built in (a link's own would cost
/// its room on every link of a device with thousands).
public final class L2CAPLinkContext {
    /// How long the fragments of one L2CAP PDU may take: well above the longest connection
    /// interval (4 s, Vol 6, Part B, 4.5.1), so only a peer that stopped mid-PDU hits it.
    public static let reassemblyTimeout: Duration = .seconds(10)

    public let hci: L2CAPLower
    public let scheduler: TimerScheduling
    public var logger: Logger
    /// Lines whose rate a peer controls (Docs/DIAGNOSTICS.md).
    public var peerLog = LogBudget()
    /// Where a link builds a frame (`L2CAPLink.send`). Unchecked: one thread, and no access to it
    /// is ever open while another starts (the frame is built, then handed to HCI as a slice).
    @exclusivity(unchecked) fileprivate var frame: [UInt8] = []

    public init(hci: L2CAPLower, scheduler: TimerScheduling, logger: Logger) {
        self.hci = hci
        self.scheduler = scheduler
        self.logger = logger
        frame.reserveCapacity(4 + L2CAPReassembler.defaultMaxPDU)
    }

    /// A line whose pace a peer sets (an error it made, a request of its own refused), under
    /// `peerLog`: ten a minute on stderr for all the links, then counted and said on the next
    /// line; in the journal every line reaches its flood budget, per line of code (the caller's,
    /// passed on).
    public func logPeer(_ level: Logger.Level, _ message: @autoclosure () -> String, handle: UInt16,
                        file: String = #fileID, function: String = #function, line: UInt = #line) {
        if let leftOut = peerLog.take(now: scheduler.nowNanoseconds, for: logger) {
            logger.log(level: level, "\(message())\(LogBudget.note(leftOut))", metadata: [LogKey.connHandle: "\(handle)"],
                       file: file, function: function, line: line)
        }
    }

    /// `logPeer` at warning level: what a peer sent wrong.
    public func warnPeer(_ message: @autoclosure () -> String, handle: UInt16,
                         file: String = #fileID, function: String = #function, line: UInt = #line) {
        logPeer(.warning, message(), handle: handle, file: file, function: function, line: line)
    }
}

/// What a fixed channel of a link hands its PDUs to: the ATT bearer, or a closure.
public protocol L2CAPChannelEnd: AnyObject {
    /// One PDU of the channel, its basic header removed.
    func receive(_ pdu: ArraySlice<UInt8>)
}

/// A channel end that is a closure (SMP, which the security layer takes by connection handle).
final class L2CAPClosureChannel: L2CAPChannelEnd {
    let action: (ArraySlice<UInt8>) -> Void
    init(_ action: @escaping (ArraySlice<UInt8>) -> Void) { self.action = action }
    func receive(_ pdu: ArraySlice<UInt8>) { action(pdu) }
}

/// What takes a link's credit based channels (BlemuChannels, above): their signalling and the
/// K-frames on the dynamic CIDs. Without one the link refuses every credit based request.
public protocol L2CAPDynamicChannels: AnyObject {
    /// A signalling command of the credit based modes (codes 0x06, 0x07, 0x14-0x1A), or a Command
    /// Reject that answers none of the link's own requests.
    func signaling(_ command: SignalingCommand)
    /// One PDU on a dynamic CID (0x0040-0x007F); false when no channel has that CID.
    func receive(cid: UInt16, _ pdu: ArraySlice<UInt8>) -> Bool
    /// The link's transmit queue has room again after refusing a `.bestEffort` PDU.
    func transmitQueueHasRoom()
    /// The link is gone.
    func linkClosed()
}

/// One ACL link's L2CAP (Vol 3, Part A), in either role: reassembly of what the peer sends (with
/// a timer for a PDU left half-gathered), framing of what we send, the fixed channels registered
/// by CID (ATT 0x0004 and SMP 0x0006 by the layers above, Table 2.3), and the LE signalling
/// channel (0x0005), which the link answers itself.
public final class L2CAPLink: ACLReceiver {
    public let handle: UInt16
    public let role: LinkRole
    public let context: L2CAPLinkContext
    // The state read on every PDU is marked `@exclusivity(unchecked)`: one thread, never passed
    // inout, and a debug build's dynamic check costs more than the rest of the hop (the perf gate).

    /// Closed: nothing more is received or sent.
    @exclusivity(unchecked) public private(set) var isClosed = false

    private struct FixedChannel {
        let cid: UInt16
        let end: L2CAPChannelEnd
    }
    /// The ATT channel, which carries nearly every PDU, is looked up first, without a scan.
    @exclusivity(unchecked) private var attChannel: L2CAPChannelEnd?
    /// The other fixed channels (SMP): a handful at most, so a scan beats a table.
    @exclusivity(unchecked) private var channels: [FixedChannel] = []
    private var reassembler = L2CAPReassembler()
    @exclusivity(unchecked) private var reassemblyTimer: TimerID?
    /// The reassembly timer's action, made at the link's first fragmented PDU and kept: a
    /// closure made per fragmented PDU would be an allocation per request.
    private var reassemblyExpired: (() -> Void)?
    private var nextSignalingIdentifier: UInt8 = 1
    /// The identifier of our Connection Parameter Update Request awaiting its response.
    public private(set) var pendingParameterUpdate: UInt8?
    /// The credit based channels, when a layer above serves them (`attach(dynamicChannels:)`).
    public private(set) var dynamicChannels: L2CAPDynamicChannels?

    public init(handle: UInt16, role: LinkRole, context: L2CAPLinkContext) {
        self.handle = handle
        self.role = role
        self.context = context
    }

    deinit {
        if let reassemblyTimer { context.scheduler.cancel(reassemblyTimer) }
    }

    /// Hands what arrives on fixed channel `cid` to `end` (one PDU, basic header removed), which
    /// the link keeps until it closes. The LE signalling channel is the link's own.
    public func register(cid: UInt16, _ end: L2CAPChannelEnd) {
        precondition(cid != L2CAPChannel.leSignaling, "the link answers LE signalling itself")
        if cid == L2CAPChannel.att { return attChannel = end }
        channels.removeAll { $0.cid == cid }
        channels.append(FixedChannel(cid: cid, end: end))
    }

    /// Hands what arrives on fixed channel `cid` to `receive`.
    public func register(cid: UInt16, _ receive: @escaping (ArraySlice<UInt8>) -> Void) {
        register(cid: cid, L2CAPClosureChannel(receive))
    }

    /// Hands the credit based signalling and the dynamic CIDs to `channels`, kept until the link closes.
    public func attach(dynamicChannels channels: L2CAPDynamicChannels) {
        dynamicChannels = channels
    }

    /// The HCI transmit queue of this link has room again (the host hears it from HCI).
    public func transmitQueueHasRoom() {
        dynamicChannels?.transmitQueueHasRoom()
    }

    /// The link is gone: the reassembly timer stops and the channels are let go.
    public func close() {
        guard !isClosed else { return }
        isClosed = true
        let dynamic = dynamicChannels
        dynamicChannels = nil
        dynamic?.linkClosed()
        if let reassemblyTimer { context.scheduler.cancel(reassemblyTimer) }
        reassemblyTimer = nil
        reassemblyExpired = nil
        reassembler.reset()
        attChannel = nil
        channels.removeAll()
    }

    // MARK: Receiving

    /// One ACL packet of this link from the controller.
    public func receive(_ packet: ACLPacket) {
        guard !isClosed else { return }
        do {
            try reassembler.receive(packet) { cid, payload in self.deliver(cid: cid, payload: payload) }
        } catch {
            context.warnPeer("L2CAP: \(error)", handle: handle)
        }
        // A PDU left half-gathered is dropped after a while rather than kept forever.
        if reassembler.isIncomplete {
            if reassemblyTimer == nil, !isClosed {
                reassemblyTimer = context.scheduler.schedule(after: L2CAPLinkContext.reassemblyTimeout, reassemblyAction())
            }
        } else if let timer = reassemblyTimer {
            context.scheduler.cancel(timer)
            reassemblyTimer = nil
        }
    }

    /// Whether a PDU is being gathered from its fragments.
    public var isReassembling: Bool { reassembler.isIncomplete }

    private func reassemblyAction() -> () -> Void {
        if let action = reassemblyExpired { return action }
        let action = { [weak self] in
            guard let self else { return }
            self.reassemblyTimer = nil
            guard self.reassembler.isIncomplete else { return }
            self.reassembler.reset()
            self.context.warnPeer("L2CAP: incomplete PDU dropped after \(L2CAPLinkContext.reassemblyTimeout) without its last fragment",
                                  handle: self.handle)
        }
        reassemblyExpired = action
        return action
    }

    private func deliver(cid: UInt16, payload: ArraySlice<UInt8>) {
        if cid == L2CAPChannel.att, let attChannel { return attChannel.receive(payload) }
        if cid == L2CAPChannel.leSignaling { return signaling(payload) }
        for channel in channels where channel.cid == cid {
            return channel.end.receive(payload)
        }
        if let dynamicChannels, dynamicChannels.receive(cid: cid, payload) { return }
        context.warnPeer("L2CAP frame for unknown channel \(Hex.word(cid)) dropped", handle: handle)
    }

    // MARK: Sending

    /// Sends one PDU on fixed channel `cid`. False when the link's transmit queue did not take
    /// it (a `.bestEffort` PDU past its bound, or the link gone).
    public func send(cid: UInt16, _ payload: ArraySlice<UInt8>, priority: TransmitPriority) -> Bool {
        guard !isClosed else { return false }
        // The basic frame (Vol 3, Part A, 3.1) in the context's buffer; HCI fragments it to the
        // controller's ACL size.
        let context = self.context
        context.frame.removeAll(keepingCapacity: true)
        appendL2CAPFrame(cid: cid, payload: payload, to: &context.frame)
        return context.hci.sendL2CAP(handle: handle, pdu: context.frame[...], priority: priority)
    }

    // MARK: LE signalling (Vol 3, Part A, 4)

    /// Vol 3, Part A, 4.20: the peripheral asks the central for other connection parameters;
    /// the answer is logged (the central then updates the link, or not).
    public func requestConnectionParameters(_ parameters: ConnectionParameters) {
        guard role == .peripheral else { return }
        let id = takeIdentifier()
        pendingParameterUpdate = id
        send(.connectionParameterUpdateRequest(identifier: id, intervalMin: parameters.intervalMin, intervalMax: parameters.intervalMax,
                                               latency: parameters.peripheralLatency, timeout: parameters.supervisionTimeout))
    }

    /// Vol 3, Part A, 4: identifiers 0x01–0xFF, 0x00 is never used.
    public func takeIdentifier() -> UInt8 {
        let id = nextSignalingIdentifier
        nextSignalingIdentifier = nextSignalingIdentifier == 0xFF ? 1 : nextSignalingIdentifier + 1
        return id
    }

    /// Sends one command on the LE signalling channel.
    public func sendSignaling(_ command: SignalingCommand) { send(command) }

    private func send(_ command: SignalingCommand) {
        var payload: [UInt8] = []
        command.encode(into: &payload)
        _ = send(cid: L2CAPChannel.leSignaling, payload[...], priority: .required)
    }

    private func signaling(_ payload: ArraySlice<UInt8>) {
        let command: SignalingCommand
        do {
            command = try SignalingCommand(frame: payload)
        } catch {
            context.warnPeer("malformed LE signalling command: \(error)", handle: handle)
            // Vol 3, Part A, 4.1: reject what cannot be understood, with its identifier when it has one.
            if payload.count >= 2, payload[payload.startIndex + 1] != 0 {
                send(.commandReject(identifier: payload[payload.startIndex + 1]))
            }
            return
        }
        // Vol 3, Part A, 4: identifier 0x00 is illegal; such a command is dropped.
        guard command.identifier != 0 else { return }
        if let dynamicChannels, SignalingCode.isCreditBased(command.code) {
            return dynamicChannels.signaling(command)
        }
        switch command.code {
        case SignalingCode.connectionParameterUpdateRequest where role == .central:
            parameterUpdateRequested(command)
        case SignalingCode.connectionParameterUpdateResponse:
            guard command.identifier == pendingParameterUpdate else { return }
            pendingParameterUpdate = nil
            var r = ByteReader(command.data)
            let result = (try? r.u16()) ?? 0xFFFF
            context.logger.info(result == 0 ? "central accepted the connection parameters" : "central rejected the connection parameters",
                                metadata: [LogKey.connHandle: "\(handle)"])
        case SignalingCode.commandReject:
            if command.identifier == pendingParameterUpdate {
                pendingParameterUpdate = nil
                context.logger.info("central does not support connection parameter updates")
            } else {
                dynamicChannels?.signaling(command)
            }
        case SignalingCode.leCreditBasedConnectionRequest:
            // No SPSM is served (4.23).
            send(.leCreditBasedConnectionRefused(identifier: command.identifier))
        case SignalingCode.creditBasedConnectionRequest:
            let channels = max(0, (command.data.count - 8) / 2)
            send(.creditBasedConnectionRefused(identifier: command.identifier, channels: channels))
        case SignalingCode.disconnectionRequest where command.data.count == 4:
            // No dynamic channel exists: Invalid CID in request (4.1), our endpoint (the
            // request's Destination CID, 4.6) first, then the peer's (its Source CID).
            var reader = ByteReader(command.data)
            guard let destination = try? reader.u16(), let source = try? reader.u16() else { return }
            send(.invalidCIDReject(identifier: command.identifier, localCID: destination, remoteCID: source))
        default:
            // Vol 3, Part A, 4.20: "If an LE Peripheral Host receives a Connection Parameter
            // Update Request packet it shall respond with a Command Reject packet with reason
            // 0x0000 (Command not understood)": that request lands here in the peripheral role.
            if !SignalingCode.isResponse(command.code) { send(.commandReject(identifier: command.identifier)) }
        }
    }

    /// The central's answer to the peripheral's request (4.20, 4.21): accepted when the Core's
    /// rules allow the parameters, and then asked of the controller (Vol 4, Part E, 7.8.18).
    private func parameterUpdateRequested(_ command: SignalingCommand) {
        var reader = ByteReader(command.data)
        guard command.data.count == 8, let min = try? reader.u16(), let max = try? reader.u16(),
              let latency = try? reader.u16(), let timeout = try? reader.u16() else {
            return send(.commandReject(identifier: command.identifier))
        }
        let asked = ConnectionParameters(intervalMin: min, intervalMax: max, peripheralLatency: latency, supervisionTimeout: timeout)
        let accepted = asked.coreViolations.isEmpty
        var result: [UInt8] = []
        result.appendLE(UInt16(accepted ? 0x0000 : 0x0001))
        send(SignalingCommand(code: SignalingCode.connectionParameterUpdateResponse, identifier: command.identifier, data: result[...]))
        context.logPeer(.info, "link \(handle): peripheral asked for \(asked): \(accepted ? "accepted" : "rejected (\(asked.coreViolations.joined(separator: "; ")))")",
                        handle: handle)
        if accepted {
            context.hci.send(.leConnectionUpdate(handle: handle, intervalMin: min, intervalMax: max, latency: latency, timeout: timeout),
                             completion: nil)
        }
    }
}
