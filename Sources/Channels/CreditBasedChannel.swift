import BlemuCore
import BlemuHCI
import BlemuL2CAP

/// What the receiving side of a channel offers its peer (Vol 3, Part A, 4.22 and 4.25): the
/// largest SDU, the largest K-frame payload, and the credits (K-frames) it may send at once.
public struct ChannelParameters: Equatable, Sendable {
    public var mtu: UInt16
    public var mps: UInt16
    /// The receive window in K-frames: given at the start, and topped up as frames are taken.
    public var initialCredits: UInt16

    /// The largest MPS a link takes: a K-frame is one L2CAP PDU, which the link's reassembler
    /// bounds (its 4-byte header included).
    public static let largestMPS = UInt16(L2CAPReassembler.defaultMaxPDU - 4)

    public init(mtu: UInt16 = 2048, mps: UInt16 = ChannelParameters.largestMPS, initialCredits: UInt16 = 16) {
        self.mtu = mtu
        self.mps = min(mps, Self.largestMPS)
        self.initialCredits = initialCredits
    }
}

/// Why a channel closed (or never opened).
public enum ChannelCloseReason: Equatable, Sendable, CustomStringConvertible {
    /// The peer refused the connection with this Result (4.23, 4.26).
    case refused(UInt16)
    /// The peer answered the request with a Command Reject.
    case rejected
    /// We disconnected it (`CreditBasedChannel.disconnect`).
    case disconnected
    /// The peer sent a Disconnection Request.
    case disconnectedByPeer
    /// The peer broke a rule of the mode (credits, MPS, MTU, SDU length): we disconnected.
    case protocolViolation(String)
    /// The ACL link went away.
    case linkClosed
    /// The peer did not answer our request within the RTX time (Vol 3, Part A, 6.2.1).
    case timedOut

    public var description: String {
        switch self {
        case .refused(let result):
            "refused: " + (CreditBasedResult(rawValue: result)?.description ?? "result \(Hex.word(result))")
        case .rejected: "rejected (command not understood)"
        case .disconnected: "disconnected"
        case .disconnectedByPeer: "disconnected by the peer"
        case .protocolViolation(let why): "disconnected: \(why)"
        case .linkClosed: "link closed"
        case .timedOut: "no answer from the peer"
        }
    }
}

/// What hears a channel's events: a device (through the host) or a test.
public protocol CreditBasedChannelDelegate: AnyObject {
    func channelOpened(_ channel: CreditBasedChannel)
    /// One whole SDU; the bytes are only valid during the call.
    func channel(_ channel: CreditBasedChannel, received sdu: ArraySlice<UInt8>)
    /// Once per channel, whether it opened or not.
    func channelClosed(_ channel: CreditBasedChannel, reason: ChannelCloseReason)
    /// `send` refused an SDU earlier and there is room again.
    func channelIsReady(_ channel: CreditBasedChannel)
}

/// One connection-oriented channel in LE Credit Based or Enhanced Credit Based Flow Control
/// Mode (Vol 3, Part A, 3.4.3, 10.1): SDUs cut into K-frames of at most the peer's MPS (the first
/// carrying the SDU length), sent only against the peer's credits; K-frames received counted
/// against the credits given, gathered into SDUs of at most our MTU, credits given back as they
/// are taken.
public final class CreditBasedChannel {
    public enum Mode: Sendable { case le, enhanced }
    public enum State: Sendable { case connecting, open, disconnecting, closed }

    public let mode: Mode
    public let spsm: UInt16
    /// Our endpoint (the peer's destination CID).
    public let localCID: UInt16
    /// The peer's endpoint, known once the channel opens.
    public internal(set) var remoteCID: UInt16 = 0
    public internal(set) var state: State = .connecting
    /// What we receive: our MTU and MPS.
    public internal(set) var local: ChannelParameters
    /// What we may send: the peer's MTU and MPS.
    public internal(set) var peerMTU: UInt16 = 0
    public internal(set) var peerMPS: UInt16 = 0
    /// K-frames we may still send (the peer's credits).
    public internal(set) var sendCredits = 0
    /// K-frames the peer may still send (the credits we gave and it has not used).
    public internal(set) var receiveCredits = 0
    /// While true no credits go back: the peer runs dry once it used what it has.
    public private(set) var isReceivingPaused = false
    public weak var delegate: CreditBasedChannelDelegate?
    unowned let owner: CreditBasedChannels
    /// The connection handle of the link the channel is on.
    public var linkHandle: UInt16 { owner.link.handle }

    /// Counters for the control socket and tests.
    public private(set) var sdusSent = 0
    public private(set) var sdusReceived = 0
    public private(set) var framesSent = 0
    public private(set) var framesReceived = 0

    // Receiving: the SDU being gathered (never past our MTU), and its announced length.
    private var sdu: [UInt8] = []
    private var sduLength: Int?

    // Sending: SDUs waiting, each as its 2-byte length and its bytes, from `queueStart` on; one
    // buffer reused, so a steady stream allocates nothing.
    private var queue: [UInt8] = []
    private var queueStart = 0
    /// Bytes of the SDU at the head still to cut into K-frames (nil between SDUs).
    private var segmentLeft: Int?
    /// Where the head SDU's next bytes are in `queue`.
    private var segmentAt = 0
    private var frame: [UInt8] = []
    /// `send` refused an SDU: tell the delegate when there is room.
    private var owesReady = false
    /// The link's HCI queue refused a K-frame: wait for it to have room.
    private var waitingForLink = false
    private var isPumping = false
    /// Runs while our connection or disconnection request for this channel awaits its answer.
    var responseTimer: TimerID?

    init(mode: Mode, spsm: UInt16, localCID: UInt16, local: ChannelParameters, owner: CreditBasedChannels,
         delegate: CreditBasedChannelDelegate?) {
        self.mode = mode
        self.spsm = spsm
        self.localCID = localCID
        self.local = local
        self.owner = owner
        self.delegate = delegate
    }

    /// Bytes an SDU may wait in the send queue, beyond the one SDU always taken when it is empty.
    public static let sendQueueBytes = 16 * 1024

    /// Bytes waiting to be sent.
    public var queuedBytes: Int { queue.count - queueStart }

    // MARK: Sending

    /// Queues one SDU (at most the peer's MTU). False when the channel is not open, the SDU is
    /// too long, or the queue is full: then `channelIsReady` follows once there is room.
    @discardableResult
    public func send(_ bytes: ArraySlice<UInt8>) -> Bool {
        guard state == .open, bytes.count <= Int(peerMTU) else { return false }
        if queuedBytes > 0, queuedBytes + 2 + bytes.count > max(Self.sendQueueBytes, Int(peerMTU) + 2) {
            owesReady = true
            return false
        }
        if queueStart > 0, queue.count + 2 + bytes.count > queue.capacity {
            // Move what waits to the front rather than grow the buffer.
            queue.removeSubrange(0..<queueStart)
            segmentAt -= queueStart
            queueStart = 0
        }
        queue.appendLE(UInt16(bytes.count))
        queue.append(contentsOf: bytes)
        pump()
        return true
    }

    public func send(_ bytes: [UInt8]) -> Bool { send(bytes[...]) }

    /// Sends K-frames while credits, queued bytes and the link allow (Vol 3, Part A, 3.4.3: "the
    /// first K-frame of an SDU carries the L2CAP SDU Length field"; every K-frame's information
    /// payload, that field included, is at most the peer's MPS).
    func pump() {
        // A K-frame handed to an in-process link may come back as credits before `send` returns:
        // the loop already running sees them.
        guard !isPumping else { return }
        isPumping = true
        while state == .open, sendCredits > 0, !waitingForLink, queueStart < queue.count {
            let first = segmentLeft == nil
            if first {
                segmentLeft = Int(queue[queueStart]) | Int(queue[queueStart + 1]) << 8
                segmentAt = queueStart + 2
            }
            let left = segmentLeft!
            frame.removeAll(keepingCapacity: true)
            if first { frame.appendLE(UInt16(left)) }
            // The peer's MPS is the most it takes (up to 65533); we send at most our own
            // largest, so a K-frame fits the host's transmit buffers instead of growing them
            // (4.22: an MPS bounds the receiver, a sender may send smaller frames).
            let take = min(left, Int(min(peerMPS, ChannelParameters.largestMPS)) - frame.count)
            frame.append(contentsOf: queue[segmentAt..<(segmentAt + take)])
            guard owner.link.send(cid: remoteCID, frame[...], priority: .bestEffort) else {
                // The link's queue is full: the same frame goes again when it has room.
                if first { segmentLeft = nil }
                waitingForLink = true
                break
            }
            sendCredits -= 1
            framesSent += 1
            segmentAt += take
            segmentLeft = left - take
            if segmentLeft == 0 {
                segmentLeft = nil
                queueStart = segmentAt
                sdusSent += 1
                if queueStart == queue.count {
                    queue.removeAll(keepingCapacity: true)
                    queueStart = 0
                    segmentAt = 0
                }
            }
        }
        isPumping = false
        if owesReady, state == .open, !waitingForLink, queuedBytes == 0 || queuedBytes <= Self.sendQueueBytes / 2 {
            owesReady = false
            delegate?.channelIsReady(self)
        }
    }

    func transmitQueueHasRoom() {
        guard waitingForLink else { return }
        waitingForLink = false
        pump()
    }

    /// Credits from the peer (4.24). Past 65535 the channel is disconnected (4.24: "the device
    /// shall disconnect the L2CAP channel" when the credit count would exceed 65535).
    func creditsReceived(_ credits: UInt16) {
        guard state == .open else { return }
        let total = sendCredits + Int(credits)
        guard total <= CreditBasedLimits.maximumCredits else {
            return owner.violation(self, "credit count past 65535")
        }
        sendCredits = total
        pump()
    }

    // MARK: Receiving

    /// Stops giving credits back (the peer stalls once it used what it has), or gives them again.
    public func pauseReceiving(_ paused: Bool) {
        isReceivingPaused = paused
        if !paused { topUpCredits() }
    }

    /// A test's fault (the control socket's `fault DEVICE channel CID stall`): no credits go
    /// back to the peer whatever the device does, so the peer's sender stops at zero credits
    /// (Vol 3, Part A, 10.1) until the stall ends and the window is given back at once.
    public var creditsStalled = false {
        didSet { if !creditsStalled { topUpCredits() } }
    }

    /// Bytes of an SDU gathered so far from its K-frames (at most our MTU).
    public var reassemblingBytes: Int { sdu.count }

    /// One K-frame from the peer (Vol 3, Part A, 3.4.3). Each rule it breaks disconnects the
    /// channel, as 3.4.3 and 10.1 require: a frame without a credit, a payload past our MPS, an
    /// SDU length past our MTU, or more payload than the SDU length.
    func receive(_ payload: ArraySlice<UInt8>) {
        guard state == .open else { return }
        guard receiveCredits > 0 else { return owner.violation(self, "K-frame received without a credit") }
        receiveCredits -= 1
        framesReceived += 1
        guard payload.count <= Int(local.mps) else {
            return owner.violation(self, "K-frame of \(payload.count) bytes past our MPS \(local.mps)")
        }
        var data = payload
        if sduLength == nil {
            guard payload.count >= 2 else { return owner.violation(self, "first K-frame without the SDU length") }
            let length = Int(payload[payload.startIndex]) | Int(payload[payload.startIndex + 1]) << 8
            guard length <= Int(local.mtu) else {
                return owner.violation(self, "SDU of \(length) bytes past our MTU \(local.mtu)")
            }
            sduLength = length
            data = payload.dropFirst(2)
        }
        guard let length = sduLength, sdu.count + data.count <= length else {
            return owner.violation(self, "K-frames longer than their SDU")
        }
        if sdu.isEmpty, data.count == length {
            // A whole SDU in one frame: handed on without a copy.
            sduLength = nil
            deliver(data)
        } else {
            sdu.append(contentsOf: data)
            if sdu.count == length {
                sduLength = nil
                deliver(sdu[...])
                sdu.removeAll(keepingCapacity: true)
            }
        }
        topUpCredits()
    }

    private func deliver(_ bytes: ArraySlice<UInt8>) {
        sdusReceived += 1
        delegate?.channel(self, received: bytes)
    }

    /// Gives the peer credits back once half the window is used: the frame was taken (into the
    /// SDU being gathered, or to the delegate), so its room is free again.
    func topUpCredits() {
        guard state == .open, !isReceivingPaused, !creditsStalled else { return }
        let window = Int(local.initialCredits)
        guard receiveCredits <= window / 2, receiveCredits < window else { return }
        let credits = window - receiveCredits
        receiveCredits = window
        owner.sendCredits(UInt16(credits), for: self)
    }

    // MARK: Lifecycle

    func opened(remoteCID: UInt16, peerMTU: UInt16, peerMPS: UInt16, credits: UInt16) {
        self.remoteCID = remoteCID
        self.peerMTU = peerMTU
        self.peerMPS = peerMPS
        sendCredits = Int(credits)
        receiveCredits = Int(local.initialCredits)
        state = .open
        delegate?.channelOpened(self)
        pump()
    }

    /// Ends the channel here: no more frames either way, the delegate told once.
    func ended(_ reason: ChannelCloseReason, state newState: State = .closed) {
        let wasOpen = state == .open || state == .connecting
        state = newState
        queue = []
        queueStart = 0
        segmentLeft = nil
        sdu = []
        sduLength = nil
        if wasOpen { delegate?.channelClosed(self, reason: reason) }
    }

    /// Disconnects the channel (Vol 3, Part A, 4.6); the delegate hears `channelClosed` at once.
    public func disconnect() {
        owner.disconnect(self, reason: .disconnected)
    }

    /// Vol 3, Part A, 4.27 for this channel alone (enhanced mode): our MTU may only grow.
    @discardableResult
    public func reconfigure(mtu: UInt16, mps: UInt16) -> Bool {
        owner.reconfigure([self], mtu: mtu, mps: mps)
    }

    func applyLocal(mtu: UInt16, mps: UInt16) {
        local.mtu = mtu
        local.mps = mps
    }

    func applyPeer(mtu: UInt16, mps: UInt16) {
        peerMTU = mtu
        peerMPS = mps
    }
}
