import BlemuCore
import BlemuHCI
import BlemuL2CAP

/// How a PDU sent on a bearer may be treated by the link below it.
public enum ATTSendKind: Sendable {
    /// A response: at most one per request, and the client sends one request at a time
    /// (Vol 3, Part F, 3.3.2), so these are bounded by the protocol and must never be refused.
    case response
    /// An indication: at most one outstanding per bearer (Vol 3, Part F, 3.4.7.2).
    case indication
    /// A notification: unbounded by the protocol, so the link may refuse it when its transmit
    /// queue is full; the device then hears "ready to update" when room frees.
    case notification
    /// What a client sends: requests (one at a time, 3.3.2), commands and confirmations.
    case request

    /// What the link's transmit queue does with it: only notifications may be refused early.
    public var priority: TransmitPriority {
        switch self {
        case .notification: return .bestEffort
        case .response, .indication, .request: return .required
        }
    }
}

/// The layer below a bearer: what carries its PDUs (an L2CAP link's fixed channel 0x0004, an
/// Enhanced Credit Based channel of an enhanced bearer, or a test's fake).
public protocol ATTTransport: AnyObject {
    /// Sends one ATT PDU; false when it was not taken.
    func sendATT(_ pdu: ArraySlice<UInt8>, kind: ATTSendKind) -> Bool
}

/// One end of a bearer above it: the link's ATT server, or its GATT client.
public protocol ATTBearerEnd: AnyObject {
    /// One PDU from the peer that is this end's (`ATTOpcode.isForClient`); `opcode` is its first
    /// byte, read once by the bearer.
    func receive(_ pdu: ArraySlice<UInt8>, opcode: UInt8)
    /// A transaction of either end timed out: the bearer is dead (Vol 3, Part F, 3.3.3).
    func bearerTimedOut(_ transaction: ATTTransaction)
}

/// The two transactions a bearer may have open at once (Vol 3, Part F, 3.3): the client's
/// request awaiting its response, and the server's indication awaiting its confirmation.
public enum ATTTransaction: Sendable, Equatable {
    case request
    case indication
}

/// One ATT bearer (Vol 3, Part F, 3.2.11): the ATT_MTU and the routing of PDUs between the link
/// and the ends above it. A link has one bearer in either role, with a server and, where a client
/// is used, a client on it. What the peer sends goes to one end, decided in one place
/// (`ATTOpcode.isForClient`): requests, commands and confirmations to the server; responses,
/// notifications and indications to the client (as Bumble's `Connection` sends odd opcodes to its
/// client and even ones to its server).
public final class ATTBearer: L2CAPChannelEnd {
    /// The LE default before any exchange (Vol 3, Part G, 5.2.1).
    public static let leDefaultMTU = 23

    /// ATT_MTU. Vol 3, Part F, 3.2.8: "ATT_MTU is defined as the maximum size of any packet sent
    /// between a client and a server", and 3.4.2.2: after an MTU exchange "the server and client
    /// shall set ATT_MTU to the minimum of the Client Rx MTU and the Server Rx MTU". One per
    /// bearer, whichever end exchanged it. Read on every PDU: no dynamic exclusivity check (one
    /// thread, and never passed inout).
    @exclusivity(unchecked) public var mtu: Int
    // Read on every PDU too, unchecked for the same reason as `mtu`. The link and the ends are
    // held `unowned`, not `weak`: a weak reference moves its object's reference count to a side
    // table, which makes every retain and release of the server, client and link slow (the
    // perf gate counted it). They outlive the bearer's use: the link owner (`Connection`,
    // `CentralLink`) keeps link, server and client together, and closes the link, which lets the
    // bearer go, before they go.
    /// The link the bearer is on (its CID 0x0004), where PDUs go out.
    @exclusivity(unchecked) public private(set) unowned var link: L2CAPLink?
    /// Where PDUs go out on a bearer on no link (a test's fake, a closure); nil: nothing is sent.
    @exclusivity(unchecked) public weak var transport: ATTTransport?
    /// The server end: set by `ATTServer`, which owns its bearer.
    @exclusivity(unchecked) public unowned var server: ATTBearerEnd?
    /// The client end: set by `GATTClient`, which owns its bearer too.
    @exclusivity(unchecked) public unowned var client: ATTBearerEnd?

    /// Vol 3, Part F, 3.3.3: "A transaction not completed within 30 seconds shall time out."
    public static let transactionTimeout: Duration = .seconds(30)
    private let scheduler: TimerScheduling
    private var requestTimer: TimerID?
    private var indicationTimer: TimerID?
    /// A transaction timed out: nothing more is sent on the bearer (3.3.3: "No more attribute
    /// protocol requests, commands, indications or notifications shall be sent to the target
    /// device on this ATT bearer"), and both ends were told.
    @exclusivity(unchecked) public private(set) var isTimedOut = false
    /// Made once each, so a transaction's timer allocates no closure of its own.
    private lazy var requestExpired: () -> Void = { [unowned self] in self.expired(.request) }
    private lazy var indicationExpired: () -> Void = { [unowned self] in self.expired(.indication) }

    /// An Enhanced ATT bearer (Vol 3, Part F, 3.2.11): on an L2CAP channel in Enhanced Credit
    /// Based Flow Control Mode rather than CID 0x0004. Its ATT_MTU is the channel's (3.2.8: "the
    /// ATT_MTU value is the minimum of the MTU values of the two devices" as L2CAP configured
    /// them), never an MTU exchange's (3.4.2.1: Exchange MTU is not sent on an enhanced bearer).
    public let isEnhanced: Bool

    public init(scheduler: TimerScheduling, mtu: Int = ATTBearer.leDefaultMTU, transport: ATTTransport? = nil,
                enhanced: Bool = false) {
        self.scheduler = scheduler
        self.mtu = mtu
        self.transport = transport
        self.isEnhanced = enhanced
    }

    deinit {
        if let requestTimer { scheduler.cancel(requestTimer) }
        if let indicationTimer { scheduler.cancel(indicationTimer) }
    }

    /// A bearer on `link`'s ATT channel (CID 0x0004, Vol 3, Part A, 2.1): what arrives there comes
    /// to `receive`, what the ends send goes out there.
    public convenience init(link: L2CAPLink) {
        self.init(scheduler: link.context.scheduler)
        self.link = link
        link.register(cid: L2CAPChannel.att, self)
    }

    /// Whether the bearer is on a link (else its ends' PDUs go to `transport`, if any).
    public var isOnLink: Bool { link != nil }

    /// One ATT PDU from the peer, to the end it is for; dropped when that end is missing (a
    /// response on a link with no client answers nothing asked).
    public func receive(_ pdu: ArraySlice<UInt8>) {
        guard let opcode = pdu.first else { return }
        if ATTOpcode.isForClient(opcode) {
            client?.receive(pdu, opcode: opcode)
        } else {
            server?.receive(pdu, opcode: opcode)
        }
    }

    // MARK: Transactions (Vol 3, Part F, 3.3.3)

    /// Starts `transaction`'s 30 s timer (a request sent, an indication sent).
    public func begin(_ transaction: ATTTransaction) {
        guard !isTimedOut else { return }
        end(transaction)
        switch transaction {
        case .request: requestTimer = scheduler.schedule(after: Self.transactionTimeout, requestExpired)
        case .indication: indicationTimer = scheduler.schedule(after: Self.transactionTimeout, indicationExpired)
        }
    }

    /// Stops `transaction`'s timer (its response or confirmation came, or it was given up).
    public func end(_ transaction: ATTTransaction) {
        switch transaction {
        case .request:
            if let requestTimer { scheduler.cancel(requestTimer) }
            requestTimer = nil
        case .indication:
            if let indicationTimer { scheduler.cancel(indicationTimer) }
            indicationTimer = nil
        }
    }

    /// Whether `transaction` is open (its timer runs).
    public func isOpen(_ transaction: ATTTransaction) -> Bool {
        switch transaction {
        case .request: return requestTimer != nil
        case .indication: return indicationTimer != nil
        }
    }

    private func expired(_ transaction: ATTTransaction) {
        switch transaction {
        case .request: requestTimer = nil
        case .indication: indicationTimer = nil
        }
        guard !isTimedOut else { return }
        isTimedOut = true
        end(.request)
        end(.indication)
        server?.bearerTimedOut(transaction)
        client?.bearerTimedOut(transaction)
    }

    /// Sends one PDU of either end. False when the link did not take it, or the bearer timed out.
    public func send(_ pdu: ArraySlice<UInt8>, kind: ATTSendKind) -> Bool {
        guard !isTimedOut else { return false }
        if let link {
            // Only notifications may be refused early: nothing above bounds them.
            return link.send(cid: L2CAPChannel.att, pdu, priority: kind.priority)
        }
        return transport?.sendATT(pdu, kind: kind) ?? false
    }
}

/// A transport that hands PDUs to a closure (a test, a fuzz target, a client made alone).
public final class ATTClosureTransport: ATTTransport {
    private let send: (ArraySlice<UInt8>, ATTSendKind) -> Bool
    public init(_ send: @escaping (ArraySlice<UInt8>, ATTSendKind) -> Bool) { self.send = send }
    public func sendATT(_ pdu: ArraySlice<UInt8>, kind: ATTSendKind) -> Bool { send(pdu, kind) }
}
