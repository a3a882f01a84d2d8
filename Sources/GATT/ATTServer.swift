import BlemuATT
import BlemuCore
import BlemuCrypto

/// What the owner of a server must always know (errors, subscriptions, MTU, signing, a dead
/// bearer), and what only it can answer (authorization); a server made alone sends through it
/// too. Nothing is told here for a request that went well: that is an `ATTServerObserver`'s,
/// installed only while someone watches (`ATTServerWatch`).
public protocol ATTServerDelegate: AnyObject {
    /// Sends one ATT PDU of a server whose bearer is on no link (a server made alone: a test or
    /// fuzz target stands in for the link here). Returns false when it was not taken. A server on
    /// a link sends on its bearer and never asks.
    func attServer(_ server: ATTServer, send pdu: ArraySlice<UInt8>, kind: ATTSendKind) -> Bool
    /// A request answered with an Error Response, or a command that failed (it has none).
    func attServer(_ server: ATTServer, refused opcode: UInt8, handle: UInt16, error: ATTError)
    func attServer(_ server: ATTServer, mtuChanged mtu: Int)
    func attServer(_ server: ATTServer, configured characteristic: Characteristic, from old: UInt16, to new: UInt16)
    /// An indication was not confirmed within 30 s: the bearer is dead (Vol 3, Part F, 3.3.3).
    func attServerTransactionTimedOut(_ server: ATTServer)
    /// An indication refused for want of room (`.queueFull`) could now be taken.
    func attServerIndicationQueueHasRoom(_ server: ATTServer)
    /// A device's `onWrite` refused a value during Execute Write after `written` values had
    /// been applied: the write was not atomic because the device checked too late.
    func attServer(_ server: ATTServer, executeWriteRefusedAfter written: Int, error: ATTError, handle: UInt16)
    /// A signed write was verified: its SignCounter is the client's last from now on (to keep
    /// with its bond, so a replay after a restart is refused too).
    func attServer(_ server: ATTServer, acceptedSignCounter counter: UInt32)
    /// A Signed Write Command was dropped before the device heard of it.
    func attServer(_ server: ATTServer, droppedSignedWrite reason: SignedWriteDrop, handle: UInt16)
    /// Whether to authorize a request for a value whose permissions require authorization and
    /// whose characteristic has no `authorize` of its own (Vol 3, Part C, 10.5).
    func attServer(_ server: ATTServer, authorize characteristic: Characteristic, access: AttributeAccess) -> Bool
}

/// What a delegate that only carries PDUs (a test, a fuzz target, the central's own small
/// server) need not hear: the informational events do nothing unless implemented.
extension ATTServerDelegate {
    public func attServer(_ server: ATTServer, send pdu: ArraySlice<UInt8>, kind: ATTSendKind) -> Bool { false }
    public func attServer(_ server: ATTServer, refused opcode: UInt8, handle: UInt16, error: ATTError) {}
    public func attServer(_ server: ATTServer, mtuChanged mtu: Int) {}
    public func attServer(_ server: ATTServer, configured characteristic: Characteristic, from old: UInt16, to new: UInt16) {}
    public func attServerIndicationQueueHasRoom(_ server: ATTServer) {}
    public func attServer(_ server: ATTServer, executeWriteRefusedAfter written: Int, error: ATTError, handle: UInt16) {}
    public func attServer(_ server: ATTServer, acceptedSignCounter counter: UInt32) {}
    public func attServer(_ server: ATTServer, droppedSignedWrite reason: SignedWriteDrop, handle: UInt16) {}
    /// Nobody to ask: a value that requires authorization is refused.
    public func attServer(_ server: ATTServer, authorize characteristic: Characteristic, access: AttributeAccess) -> Bool { false }
}

/// Why a request failed, and the handle its Error Response names.
public struct ATTFailure: Error, Equatable {
    public let error: ATTError
    public let handle: UInt16
    public init(_ error: ATTError, _ handle: UInt16) {
        self.error = error
        self.handle = handle
    }
}

public enum UpdateOutcome: Equatable, Sendable {
    /// Sent to (or queued for) this peer.
    case queued
    /// The peer has not enabled it in its CCCD.
    case notSubscribed
    /// The transmit queue is full: try again on "ready to update".
    case queueFull

    /// Sends each update with `notify`, one notification each, and sums their outcomes up:
    /// `.queueFull` if the link refused any, else `.queued` if any went, else `.notSubscribed`.
    /// The fallback of `notifyMultiple` (the server's and the fault stage's).
    static func notifyingEach(_ updates: [(characteristic: Characteristic, value: ArraySlice<UInt8>)],
                              _ notify: (Characteristic, ArraySlice<UInt8>) -> UpdateOutcome) -> UpdateOutcome {
        var outcome = UpdateOutcome.notSubscribed
        for update in updates {
            switch notify(update.characteristic, update.value) {
            case .queueFull: outcome = .queueFull
            case .queued: if outcome != .queueFull { outcome = .queued }
            case .notSubscribed: break
            }
        }
        return outcome
    }
}

/// The server side of one ATT bearer (one per connection): MTU, the long read in progress,
/// the prepare-write queue, CCCD values, and the indication in flight.
///
/// Requests go through one dispatch table of `{opcode, minimum length, handler}` (as Zephyr's
/// att.c does), so the length check and the Error Response live in one place.
public final class ATTServer {
    public static let defaultMTU = 23
    /// The largest ATT MTU we accept: 512-byte attribute + Read Blob header room (Vol 3, Part F, 3.2.9).
    public static let maximumMTU = 517
    public static let maxPreparedWrites = 64
    public static let maxPendingIndications = 8
    /// Vol 3, Part F, 3.3.3: a transaction not completed within 30 seconds has failed.
    public static let transactionTimeout: Duration = ATTBearer.transactionTimeout

    public let database: GATTDatabase
    public let peer: ATTPeer
    public weak var delegate: ATTServerDelegate?

    /// ATT_MTU now: the bearer's, shared with a GATT client on the same link.
    public var mtu: Int { bearer.mtu }
    /// The link's ATT bearer: its ATT_MTU, and where the server's PDUs go.
    public let bearer: ATTBearer
    /// The bearer is on a link (for the server's life): PDUs go to it, not to the delegate.
    private let sendsOnBearer: Bool
    private var mtuExchanged = false
    public let serverRxMTU: Int

    /// Vol 3, Part G, 4.8.3 read consistency: the handle of the long read in progress, and
    /// its value as taken at offset 0 (a buffer reused from one long read to the next).
    var longReadHandle: UInt16?
    var longReadValue: [UInt8]
    /// The bearer's writes: its prepare queue, and Execute Write's checked writes.
    var writes = AttributeWrites()
    /// What the server knows of the client, one for all the bearers of its connection (its
    /// CCCDs, robust caching, signing, the link's security): read and written in place.
    public let session: GATTServerSession
    /// Whether this server's bearer is the one the session was made with (the unenhanced
    /// bearer's): its close ends the session; an enhanced bearer's leaves it to the link.
    private let ownsSession: Bool
    /// The bearer's indications: the one in flight, those waiting, their buffers.
    var indications = IndicationQueue()
    public private(set) var isTimedOut = false
    /// The link is gone (`close()`): nothing more is sent or answered.
    public private(set) var isClosed = false
    /// Reused for every response so the request path makes no allocations of its own.
    var out: [UInt8]
    /// A request refused for want of security while the link's pairing ran, with its refusal:
    /// answered when the pairing has moved on (`securitySettled`), not at once. A client told
    /// Insufficient Authentication in the middle of a pairing reads the error against the
    /// security the link has once it reads it (BlueZ then asks for MITM protection on a link
    /// just encrypted without it, a pairing that cannot succeed, and the request is lost).
    /// One at most: a client has one request outstanding on a bearer (Vol 3, Part F, 3.3.2).
    private var held: (pdu: [UInt8], handle: UInt16, error: ATTError)?
    /// Whether a request waits for the pairing (`held`).
    public var holdsRequestForPairing: Bool { held != nil }
    /// Reused for notifications and indications: a device may notify from inside a read or
    /// write handler, while a response is being built in `out`.
    var update: [UInt8]
    /// Reused for every value a read takes from a device's `onRead` or a CCCD; its room is
    /// taken at the link's first such read (a link that never makes one costs no more).
    private var readValue = ValueBuffer(capacity: 0)
    /// Who watches this server's requests (answers, values read and written): shared by the
    /// servers of a device and read in place; nobody, unless installed.
    public let watch: ATTServerWatch

    /// `bearer`: the link's ATT bearer, which routes the client's requests to this server and
    /// times its indications (a server made alone gets a bearer of its own, on no link: its
    /// delegate stands in for the link). `session`: the connection's (nil makes one for this
    /// server). `endsSession`: whether this server's close ends the session too (the unenhanced
    /// bearer's server: the default for a session of its own), or leaves it to the link (an
    /// Enhanced ATT bearer's: the default for a session given). `watch`: the device's (nil makes
    /// one for this server, with nobody in it).
    public init(database: GATTDatabase, peer: ATTPeer, scheduler: TimerScheduling,
                serverRxMTU: Int = ATTServer.maximumMTU, bearer: ATTBearer? = nil, session: GATTServerSession? = nil,
                endsSession: Bool? = nil, watch: ATTServerWatch? = nil) {
        self.database = database
        self.watch = watch ?? ATTServerWatch()
        self.session = session ?? GATTServerSession()
        ownsSession = endsSession ?? (session == nil)
        let bearer = bearer ?? ATTBearer(scheduler: scheduler)
        self.bearer = bearer
        // An enhanced bearer's transport is its channel: the server sends on it as on a link.
        sendsOnBearer = bearer.isOnLink || bearer.isEnhanced
        self.peer = peer
        self.serverRxMTU = max(Self.defaultMTU, min(serverRxMTU, Self.maximumMTU))
        out = []
        out.reserveCapacity(Self.maximumMTU + 8)
        update = []
        update.reserveCapacity(Self.maximumMTU + 8)
        // Room is taken at the link's first long read.
        longReadValue = []
        bearer.server = self
    }

    deinit {
        if indications.isInFlight { bearer.end(.indication) }
    }

    // MARK: Incoming

    /// Handles one ATT PDU from the client.
    public func receive(_ pdu: ArraySlice<UInt8>) {
        guard let opcode = pdu.first else { return }
        receive(pdu, opcode: opcode)
    }

    /// One ATT PDU from the client whose first byte, `opcode`, the bearer read already.
    public func receive(_ pdu: ArraySlice<UInt8>, opcode: UInt8) {
        guard !isTimedOut, !isClosed else { return }
        if opcode == ATTOpcode.handleValueConfirmation.rawValue {
            confirmationReceived()
            return
        }
        handle(pdu, opcode: opcode)
    }

    /// Answers a request the server was not given with an Error Response, as though its handler
    /// had refused it (a stage in front of the server decided the answer): a long read ends
    /// unless this is a Read Blob, and a command, which has no response, just vanishes.
    public func refuse(opcode: UInt8, handle: UInt16, error: ATTError) {
        guard !isTimedOut, !isClosed else { return }
        if opcode != ATTOpcode.readBlobRequest.rawValue { longReadHandle = nil }
        if ATTOpcode.isRequestForm(opcode) { sendError(opcode, handle, error) }
    }

    func handle(_ pdu: ArraySlice<UInt8>, opcode: UInt8) {
        // A client that sends another request before the held one's answer (3.3.2 forbids it)
        // gets the held one's refusal first: answers stay in order, none is lost.
        if held != nil, ATTOpcode.isRequestForm(opcode) { answerHeld() }
        // A long read is continued only by Read Blob requests for its handle; anything else
        // ends it (the Read Blob handler checks the handle).
        if opcode != ATTOpcode.readBlobRequest.rawValue { longReadHandle = nil }

        let isCommand = ATTOpcode.isCommand(opcode)
        // Vol 3, Part F, 3.2.8: no PDU is longer than ATT_MTU. A longer request is invalid
        // (and answering it could mean a response longer than ATT_MTU, e.g. a Prepare Write echo).
        guard pdu.count <= mtu else {
            if ATTOpcode.isRequestForm(opcode) { sendError(opcode, 0, .invalidPDU) }
            return
        }
        guard let entry = Self.table[Int(opcode)] else {
            // Vol 3, Part F, 3.4.1.1: an unknown request gets Request Not Supported; an unknown
            // command, or a PDU a server does not take, is ignored.
            if ATTOpcode.isRequestForm(opcode) {
                sendError(opcode, 0, .requestNotSupported)
            }
            return
        }
        guard pdu.count >= entry.minimumLength else {
            if !isCommand { sendError(opcode, 0, .invalidPDU) }
            return
        }
        if !session.isChangeAware, !admitWhileChangeUnaware(opcode, pdu, isCommand: isCommand) { return }
        do {
            try entry.handler(self, pdu)
        } catch {
            if isCommand {
                // No response exists for a command; the failure is still counted and logged.
                answered(opcode, error.handle, error.error)
            } else if Self.isSecurityRefusal(error.error), session.security.pairingUnderWay?() == true {
                held = (Array(pdu), error.handle, error.error)
            } else {
                sendError(opcode, error.handle, error.error)
            }
        }
    }

    /// What the session says of a request from a change-unaware client (Vol 3, Part G,
    /// 2.5.2.1); true when it goes on as usual.
    private func admitWhileChangeUnaware(_ opcode: UInt8, _ pdu: ArraySlice<UInt8>, isCommand: Bool) -> Bool {
        switch session.admitWhileChangeUnaware(opcode, pdu, isCommand: isCommand) {
        case .admitted: return true
        case .ignored: return false
        case .outOfSync(let handle):
            sendError(opcode, handle, .databaseOutOfSync)
            return false
        }
    }

    private typealias Handler = @Sendable (ATTServer, ArraySlice<UInt8>) throws(ATTFailure) -> Void
    private struct Entry: Sendable {
        let minimumLength: Int
        let handler: Handler
    }

    /// Minimum lengths include the opcode (Vol 3, Part F, 3.4).
    private static let table: [Entry?] = {
        var t = [Entry?](repeating: nil, count: 256)
        func put(_ op: ATTOpcode, _ min: Int, _ h: @escaping Handler) { t[Int(op.rawValue)] = Entry(minimumLength: min, handler: h) }
        put(.exchangeMTURequest, 3, { s, p throws(ATTFailure) in try s.exchangeMTU(p) })
        put(.findInformationRequest, 5, { s, p throws(ATTFailure) in try s.findInformation(p) })
        put(.findByTypeValueRequest, 7, { s, p throws(ATTFailure) in try s.findByTypeValue(p) })
        put(.readByTypeRequest, 7, { s, p throws(ATTFailure) in try s.readByType(p) })
        put(.readRequest, 3, { s, p throws(ATTFailure) in try s.read(p) })
        put(.readBlobRequest, 5, { s, p throws(ATTFailure) in try AttributeReads.readBlob(s, p) })
        put(.readMultipleRequest, 5, { s, p throws(ATTFailure) in try AttributeReads.readMultiple(s, p, variable: false) })
        put(.readMultipleVariableRequest, 5, { s, p throws(ATTFailure) in try AttributeReads.readMultiple(s, p, variable: true) })
        put(.readByGroupTypeRequest, 7, { s, p throws(ATTFailure) in try s.readByGroupType(p) })
        put(.writeRequest, 3, { s, p throws(ATTFailure) in try AttributeWrites.writeRequest(s, p) })
        put(.writeCommand, 3, { s, p throws(ATTFailure) in try AttributeWrites.writeCommand(s, p) })
        put(.signedWriteCommand, 15, { s, p throws(ATTFailure) in try AttributeWrites.signedWriteCommand(s, p) })
        put(.prepareWriteRequest, 5, { s, p throws(ATTFailure) in try AttributeWrites.prepareWrite(s, p) })
        put(.executeWriteRequest, 2, { s, p throws(ATTFailure) in try AttributeWrites.executeWrite(s, p) })
        return t
    }()

    // MARK: Database changes (Vol 3, Part G, 2.5.2.1: robust caching)

    /// False from a database change until a robust-caching client is change-aware again.
    public var isChangeAware: Bool { session.isChangeAware }

    /// The database changed in `range`: what this bearer knew there is gone — a long read,
    /// prepared writes — and what the connection's client did: its subscriptions (returned, to
    /// be ended like a closing link's); a robust-caching client becomes change-unaware.
    public func databaseChanged(_ range: ClosedRange<UInt16>) -> [(characteristic: Characteristic, configuration: UInt16)] {
        if let handle = longReadHandle, range.contains(handle) { longReadHandle = nil }
        writes.prepareQueue.drop(in: range)
        let ended = session.endConfigurations(in: range, of: database)
        if !isClosed { session.databaseChanged() }
        return ended
    }

    // MARK: Helpers

    func decode<T: ATTPDU>(_ type: T.Type, _ pdu: ArraySlice<UInt8>) throws(ATTFailure) -> T {
        do { return try T(pdu: pdu) } catch { throw ATTFailure(.invalidPDU, 0) }
    }

    func lookup(_ handle: UInt16) throws(ATTFailure) -> Attribute {
        guard let attribute = database.attribute(handle) else { throw ATTFailure(.invalidHandle, handle) }
        return attribute
    }

    /// The value of an attribute from `offset` on. Dynamic values come from the device, which
    /// answers from the offset it is given (like CBATTRequest.offset).
    func value(of a: Attribute, offset: Int) throws(ATTFailure) -> ArraySlice<UInt8> {
        switch a.content {
        case .fixed(let bytes):
            guard offset <= bytes.count else { throw ATTFailure(.invalidOffset, a.handle) }
            if watch.reportsReads { reportRead(a, offset: offset) }
            return bytes[offset...]
        case .clientConfiguration(let c):
            guard offset <= 2 else { throw ATTFailure(.invalidOffset, a.handle) }
            readValue.reset(skipping: offset)
            readValue.appendLE(session.clientConfiguration(c))
            return readValue.bytes
        case .dynamic(let c):
            guard let onRead = c.onRead else { throw ATTFailure(.readNotPermitted, a.handle) }
            // No offset past the longest value the declaration allows reaches the device.
            guard offset <= c.length.maximum else { throw ATTFailure(.invalidOffset, a.handle) }
            // The device writes its whole value into a buffer this server reuses: the read
            // allocates nothing, and the buffer drops what lies before the offset.
            readValue.reset(skipping: offset)
            if let error = onRead(ReadRequest(peer: peer, offset: offset), &readValue) { throw ATTFailure(error, a.handle) }
            guard readValue.count >= offset else { throw ATTFailure(.invalidOffset, a.handle) }
            if watch.reportsReads { watch.observer?.attServer(self, read: c, offset: offset) }
            return readValue.bytes
        }
    }

    /// A read of a characteristic's value (not of a declaration or descriptor), for a watcher.
    func reportRead(_ a: Attribute, offset: Int) {
        guard let c = a.characteristic, c.valueHandle == a.handle else { return }
        watch.observer?.attServer(self, read: c, offset: offset)
    }

    func begin(_ opcode: ATTOpcode) {
        out.removeAll(keepingCapacity: true)
        out.append(opcode.rawValue)
    }

    /// The response in `out` to a request: sent, and counted.
    func respond(_ requestOpcode: UInt8) {
        // `send`'s bearer branch written out: on the request path a call more is a debug build's cost.
        _ = sendsOnBearer ? bearer.send(out[...], kind: .response) : send(out[...], kind: .response)
        session.requestsAnswered &+= 1
        if watch.reportsAnswers { watch.observer?.attServer(self, answered: requestOpcode, handle: 0, error: nil) }
    }

    /// The one way out of the server: every PDU goes on the bearer's link, or through the
    /// delegate when the bearer is on none (a server made alone). False when it was not taken.
    func send(_ pdu: ArraySlice<UInt8>, kind: ATTSendKind) -> Bool {
        sendsOnBearer ? bearer.send(pdu, kind: kind) : delegate?.attServer(self, send: pdu, kind: kind) ?? false
    }

    /// The errors that ask the client to pair or encrypt (Vol 3, Part F, 3.4.1.1).
    static func isSecurityRefusal(_ error: ATTError) -> Bool {
        error == .insufficientAuthentication || error == .insufficientEncryption || error == .encryptionKeySizeTooShort
    }

    /// The link's security changed or its pairing ended: a request held for the pairing is
    /// handled again against the security the link has now (answered, or held again while the
    /// pairing still runs and the link is still short of what it needs).
    public func securitySettled() {
        guard let waiting = held, !isTimedOut, !isClosed, let opcode = waiting.pdu.first else { return }
        held = nil
        handle(waiting.pdu[...], opcode: opcode)
    }

    /// Sends the held request's refusal now.
    private func answerHeld() {
        guard let waiting = held, let opcode = waiting.pdu.first else { return }
        held = nil
        sendError(opcode, waiting.handle, waiting.error)
    }

    private func sendError(_ requestOpcode: UInt8, _ handle: UInt16, _ error: ATTError) {
        out.removeAll(keepingCapacity: true)
        ATTErrorResponse(requestOpcode: requestOpcode, handle: handle, error: error).encode(into: &out)
        _ = send(out[...], kind: .response)
        answered(requestOpcode, handle, error)
    }

    /// A request refused (or a command that failed): counted, and told to the delegate (its
    /// statistics, logs and security) and to the observer, if any.
    private func answered(_ requestOpcode: UInt8, _ handle: UInt16, _ error: ATTError) {
        session.requestsAnswered &+= 1
        delegate?.attServer(self, refused: requestOpcode, handle: handle, error: error)
        if watch.reportsAnswers { watch.observer?.attServer(self, answered: requestOpcode, handle: handle, error: error) }
    }

    // MARK: MTU (Vol 3, Part F, 3.4.2)

    private func exchangeMTU(_ pdu: ArraySlice<UInt8>) throws(ATTFailure) {
        let request = try decode(ATTExchangeMTURequest.self, pdu)
        // Vol 3, Part F, 3.4.2.1: "This request shall not be sent on an Enhanced ATT bearer":
        // the MTU is the channel's, and the request is refused as one this bearer does not take.
        if bearer.isEnhanced { throw ATTFailure(.requestNotSupported, 0) }
        // A client Rx MTU below the default is taken as the default (Vol 3, Part F, 3.4.2.1).
        let client = max(Int(request.clientRxMTU), Self.defaultMTU)
        begin(.exchangeMTUResponse)
        out.appendLE(UInt16(serverRxMTU))
        // The response goes out at the old MTU; the new one applies after it (3.4.2.2).
        respond(pdu[pdu.startIndex])
        // Vol 3, Part F, 3.4.2.1: the client sends this once per connection; a repeated request
        // is answered but does not change the MTU in use.
        guard !mtuExchanged else { return }
        mtuExchanged = true
        let newMTU = min(client, serverRxMTU)
        if newMTU != mtu {
            bearer.mtu = newMTU
            delegate?.attServer(self, mtuChanged: mtu)
        }
    }

    // MARK: Reads (Vol 3, Part F, 3.4.4.3 – 3.4.4.12)

    private func read(_ pdu: ArraySlice<UInt8>) throws(ATTFailure) {
        let request = try decode(ATTReadRequest.self, pdu)
        let a = try lookup(request.handle)
        try AttributeChecks.readable(a, self)
        let value = try self.value(of: a, offset: 0)
        let limit = mtu - 1
        if value.count >= limit, case .dynamic = a.content {
            keepLongRead(request.handle, value)
        }
        begin(.readResponse)
        out.append(contentsOf: value.prefix(limit))
        respond(pdu[pdu.startIndex])
    }

    /// Keeps a dynamic value taken at offset 0 for the Read Blob requests that continue it.
    func keepLongRead(_ handle: UInt16, _ value: ArraySlice<UInt8>) {
        longReadValue.removeAll(keepingCapacity: true)
        if longReadValue.capacity < ValueLength.attributeMaximum { longReadValue.reserveCapacity(ValueLength.attributeMaximum) }
        longReadValue.append(contentsOf: value)
        longReadHandle = handle
    }

    /// The link is gone: timers stop, and every outstanding indication ends as `.disconnected`.
    /// Returns the subscriptions the link held (characteristic and CCCD value), which end with it.
    @discardableResult
    public func close() -> [(characteristic: Characteristic, configuration: UInt16)] {
        guard !isClosed else { return [] }
        isClosed = true
        if indications.isInFlight { bearer.end(.indication) }
        failIndications(.disconnected)
        longReadHandle = nil
        held = nil
        writes.clear()
        // An enhanced bearer's server leaves the client's state to the link's.
        guard ownsSession else { return [] }
        return session.close().compactMap { handle, value in
            database.attribute(handle)?.characteristic.map { ($0, value) }
        }
    }
}

/// The server end of its bearer: requests, commands and confirmations come to `receive`.
extension ATTServer: ATTBearerEnd {
    /// A transaction of the bearer timed out (this server's indication, or the client's request
    /// on the same bearer): the server sends and answers nothing more, its indications end as
    /// `.timedOut`, and the delegate hears, to close the link (Vol 3, Part F, 3.3.3).
    public func bearerTimedOut(_ transaction: ATTTransaction) {
        guard !isTimedOut else { return }
        isTimedOut = true
        failIndications(.timedOut)
        delegate?.attServerTransactionTimedOut(self)
    }
}
