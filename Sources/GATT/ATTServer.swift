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
    private var longReadHandle: UInt16?
    private var longReadValue: [UInt8]
    /// The prepare queue (at most `maxPreparedWrites` parts of at most ATT_MTU - 5 bytes each)
    /// and, reused too, the writes Execute Write checked before any applies.
    private var prepareQueue = PrepareQueue()
    private var checkedWrites: [CheckedWrite] = []
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
        put(.readBlobRequest, 5, { s, p throws(ATTFailure) in try s.readBlob(p) })
        put(.readMultipleRequest, 5, { s, p throws(ATTFailure) in try s.readMultiple(p, variable: false) })
        put(.readMultipleVariableRequest, 5, { s, p throws(ATTFailure) in try s.readMultiple(p, variable: true) })
        put(.readByGroupTypeRequest, 7, { s, p throws(ATTFailure) in try s.readByGroupType(p) })
        put(.writeRequest, 3, { s, p throws(ATTFailure) in try s.writeRequest(p) })
        put(.writeCommand, 3, { s, p throws(ATTFailure) in try s.writeCommand(p) })
        put(.signedWriteCommand, 15, { s, p throws(ATTFailure) in try s.signedWriteCommand(p) })
        put(.prepareWriteRequest, 5, { s, p throws(ATTFailure) in try s.prepareWrite(p) })
        put(.executeWriteRequest, 2, { s, p throws(ATTFailure) in try s.executeWrite(p) })
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
        prepareQueue.drop(in: range)
        let ended = session.endConfigurations(in: range, of: database)
        if !isClosed { session.databaseChanged() }
        return ended
    }

    // MARK: Helpers

    func decode<T: ATTPDU>(_ type: T.Type, _ pdu: ArraySlice<UInt8>) throws(ATTFailure) -> T {
        do { return try T(pdu: pdu) } catch { throw ATTFailure(.invalidPDU, 0) }
    }

    private func lookup(_ handle: UInt16) throws(ATTFailure) -> Attribute {
        guard let attribute = database.attribute(handle) else { throw ATTFailure(.invalidHandle, handle) }
        return attribute
    }

    func checkReadable(_ a: Attribute) throws(ATTFailure) {
        guard a.readable else { throw ATTFailure(.readNotPermitted, a.handle) }
        if a.encryptionRequiredToRead {
            try checkSecurity(a, authentication: a.authenticationRequiredToRead)
        }
        try checkAuthorization(a, .read)
    }

    private func checkWritable(_ a: Attribute) throws(ATTFailure) {
        guard a.writable else { throw ATTFailure(.writeNotPermitted, a.handle) }
        if a.encryptionRequiredToWrite {
            try checkSecurity(a, authentication: a.authenticationRequiredToWrite)
        }
        // Authorization comes after each write's own Write Not Permitted checks (the property
        // its opcode needs): the writes call `checkAuthorization` themselves.
    }

    /// Authorization (Vol 3, Part C, 10.5; Vol 3, Part F, 3.2.5: "Authorization permissions
    /// determine whether a client needs to be authorized before an attribute can be accessed").
    /// It is asked last, once the link's security is enough, so a client is told first what it
    /// can fix itself (pair, encrypt: 0x05, 0x0F, 0x0C) and the device is only asked about a
    /// request it would otherwise serve; a refusal is Insufficient Authorization (0x08, Vol 3,
    /// Part F, 3.4.1.1 Table 3.4). Only the value attribute carries the characteristic's
    /// permissions: its CCCD and descriptors are not authorized.
    private func checkAuthorization(_ a: Attribute, _ access: AttributeAccess) throws(ATTFailure) {
        guard let c = a.characteristic, a.handle == c.valueHandle else { return }
        let required: AttributePermissions = access == .read ? .readAuthorizationRequired : .writeAuthorizationRequired
        guard c.permissions.contains(required) else { return }
        let authorized = c.authorize.map { $0(peer, access) } ?? (delegate?.attServer(self, authorize: c, access: access) ?? false)
        guard authorized else { throw ATTFailure(.insufficientAuthorization, a.handle) }
    }

    /// The link's security against an attribute that requires encryption (Vol 3, Part C,
    /// 10.3.1 and 10.3.2; Vol 3, Part F, 4.4), decided by the session.
    private func checkSecurity(_ a: Attribute, authentication: Bool) throws(ATTFailure) {
        if let error = session.securityRefusal(for: a.characteristic, authentication: authentication) { throw ATTFailure(error, a.handle) }
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
    private func reportRead(_ a: Attribute, offset: Int) {
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
        try checkReadable(a)
        let value = try self.value(of: a, offset: 0)
        let limit = mtu - 1
        if value.count >= limit, case .dynamic = a.content {
            keepLongRead(request.handle, value)
        }
        begin(.readResponse)
        out.append(contentsOf: value.prefix(limit))
        respond(pdu[pdu.startIndex])
    }

    private func readBlob(_ pdu: ArraySlice<UInt8>) throws(ATTFailure) {
        let request = try decode(ATTReadBlobRequest.self, pdu)
        let a = try lookup(request.handle)
        try checkReadable(a)
        let offset = Int(request.offset)
        let limit = mtu - 1
        let tail: ArraySlice<UInt8>
        if longReadHandle == request.handle {
            guard offset <= longReadValue.count else { throw ATTFailure(.invalidOffset, a.handle) }
            tail = longReadValue[offset...]
            if watch.reportsReads { reportRead(a, offset: offset) }
        } else {
            longReadHandle = nil
            if a.isFixedLength {
                let length: Int
                switch a.content {
                case .fixed(let bytes): length = bytes.count
                case .clientConfiguration: length = 2
                case .dynamic(let c):
                    if case .fixed(let n) = c.length { length = n } else { length = Int.max }
                }
                guard offset <= length else { throw ATTFailure(.invalidOffset, a.handle) }
                // 3.4.4.5: a fixed-length value that fits one Read Response is not long.
                if length <= limit { throw ATTFailure(.attributeNotLong, a.handle) }
            }
            tail = try value(of: a, offset: offset)
            if offset == 0, tail.count >= limit, case .dynamic = a.content {
                keepLongRead(request.handle, tail)
            }
        }
        begin(.readBlobResponse)
        out.append(contentsOf: tail.prefix(limit))
        respond(pdu[pdu.startIndex])
    }

    /// Keeps a dynamic value taken at offset 0 for the Read Blob requests that continue it.
    func keepLongRead(_ handle: UInt16, _ value: ArraySlice<UInt8>) {
        longReadValue.removeAll(keepingCapacity: true)
        if longReadValue.capacity < ValueLength.attributeMaximum { longReadValue.reserveCapacity(ValueLength.attributeMaximum) }
        longReadValue.append(contentsOf: value)
        longReadHandle = handle
    }

    private func readMultiple(_ pdu: ArraySlice<UInt8>, variable: Bool) throws(ATTFailure) {
        // Both are one list of handles (3.4.4.7, 3.4.4.11), read here as the first: a method
        // taken as a closure (`request.handle(at:)`) would allocate its context per request.
        let request = variable ? ATTReadMultipleRequest(checkedHandles: try decode(ATTReadMultipleVariableRequest.self, pdu).handles)
                               : try decode(ATTReadMultipleRequest.self, pdu)
        begin(variable ? .readMultipleVariableResponse : .readMultipleResponse)
        let limit = mtu
        for index in 0..<request.handleCount {
            let handle = request.handle(at: index)
            let a = try lookup(handle)
            try checkReadable(a)
            let value = try self.value(of: a, offset: 0)
            if variable {
                // 3.4.4.12: each value with its length; the whole list is cut at ATT_MTU - 1.
                appendTruncated(UInt16(value.count), limit: limit)
            }
            out.append(contentsOf: value.prefix(max(0, limit - out.count)))
        }
        respond(pdu[pdu.startIndex])
    }

    private func appendTruncated(_ length: UInt16, limit: Int) {
        if out.count < limit { out.append(UInt8(truncatingIfNeeded: length)) }
        if out.count < limit { out.append(UInt8(truncatingIfNeeded: length >> 8)) }
    }

    // MARK: Writes (Vol 3, Part F, 3.4.5 and 3.4.6)

    /// A write that passed every check and only waits to be applied.
    private enum CheckedWrite {
        case clientConfiguration(Characteristic, flags: UInt16)
        case device(Characteristic, WriteRequest)
    }

    /// Everything that can refuse a write, with no side effects, so Execute Write can check
    /// every prepared value before it applies any (Vol 3, Part F, 3.4.6.3).
    private func check(_ a: Attribute, offset: Int, value: ArraySlice<UInt8>, withResponse: Bool) throws(ATTFailure) -> CheckedWrite {
        switch a.content {
        case .clientConfiguration(let c):
            // Vol 3, Part G, 3.3.3.3: two octets, written whole.
            if let error = ValueLength.fixed(2).refusal(offset: offset, count: value.count) { throw ATTFailure(error, a.handle) }
            let flags = UInt16(value[value.startIndex]) | UInt16(value[value.startIndex + 1]) << 8
            // Enabling what the characteristic does not do is a misconfiguration of the CCCD.
            if (flags & 0x0001 != 0 && !c.properties.contains(.notify))
                || (flags & 0x0002 != 0 && !c.properties.contains(.indicate)) {
                throw ATTFailure(.cccdImproperlyConfigured, a.handle)
            }
            return .clientConfiguration(c, flags: flags & 0x0003)
        case .fixed:
            throw ATTFailure(.writeNotPermitted, a.handle)
        case .dynamic(let c):
            // A pattern, not `!= nil`: comparing a closure through the generic operator wraps it
            // in a thunk, an allocation per write in a debug build.
            guard case .some = c.onWrite else { throw ATTFailure(.writeNotPermitted, a.handle) }
            // The device's length rule holds whatever the offsets: its handler never sees a
            // value its declaration rules out.
            if let error = c.length.refusal(offset: offset, count: value.count) { throw ATTFailure(error, a.handle) }
            let request = WriteRequest(peer: peer, offset: offset, value: ValueBytes(value), withResponse: withResponse)
            if let error = c.validateWrite?(request) { throw ATTFailure(error, a.handle) }
            return .device(c, request)
        }
    }

    /// Applies a checked write. Only the device's `onWrite` can still refuse here.
    private func apply(_ write: CheckedWrite, prepared: Bool = false) throws(ATTFailure) {
        switch write {
        case .clientConfiguration(let c, let flags):
            let old = session.configure(c, flags)
            if old != flags {
                delegate?.attServer(self, configured: c, from: old, to: flags)
            }
        case .device(let c, let request):
            if let error = c.onWrite?(request) { throw ATTFailure(error, c.valueHandle) }
            if watch.reportsWrites { watch.observer?.attServer(self, wrote: c, request: request, prepared: prepared) }
        }
    }

    func write(_ a: Attribute, value: ArraySlice<UInt8>, withResponse: Bool) throws(ATTFailure) {
        try apply(check(a, offset: 0, value: value, withResponse: withResponse))
    }

    private func writeRequest(_ pdu: ArraySlice<UInt8>) throws(ATTFailure) {
        let request = try decode(ATTWriteRequest.self, pdu)
        let a = try lookup(request.handle)
        try checkWritable(a)
        if let c = a.characteristic, case .dynamic = a.content, !c.properties.contains(.write) {
            throw ATTFailure(.writeNotPermitted, a.handle)
        }
        try checkAuthorization(a, .write)
        try write(a, value: request.value, withResponse: true)
        begin(.writeResponse)
        respond(pdu[pdu.startIndex])
    }

    private func writeCommand(_ pdu: ArraySlice<UInt8>) throws(ATTFailure) {
        let command = try decode(ATTWriteCommand.self, pdu)
        let a = try lookup(command.handle)
        try checkWritable(a)
        if let c = a.characteristic, case .dynamic = a.content, !c.properties.contains(.writeWithoutResponse) {
            throw ATTFailure(.writeNotPermitted, a.handle)
        }
        try checkAuthorization(a, .write)
        try write(a, value: command.value, withResponse: false)
    }

    /// Signed Write Command (Vol 3, Part F, 3.4.5.4; Part G, 4.9.2). On an unencrypted link the
    /// signature is what authenticates the value: it must verify with the CSRK of the client's
    /// bond and name a SignCounter larger than the last one accepted (Vol 3, Part C, 10.4.2),
    /// else the command is ignored (3.4.5.4: a failed verification is ignored, no response
    /// exists) and the delegate hears why. On an encrypted link the encryption already gives
    /// the data signing's protection (Vol 3, Part C, 10.2.3, mixed security modes; a client
    /// "shall" use Write Without Response there, Part G, 4.9.2), so the value is taken as a
    /// Write Command would be, signature unchecked. Either way the characteristic must have the
    /// Authenticated Signed Writes property, and its own permissions still apply.
    private func signedWriteCommand(_ pdu: ArraySlice<UInt8>) throws(ATTFailure) {
        let command = try decode(ATTSignedWriteCommand.self, pdu)
        let a = try lookup(command.handle)
        guard a.writable, let c = a.characteristic, c.properties.contains(.authenticatedSignedWrites),
              case .dynamic = a.content else {
            throw ATTFailure(.writeNotPermitted, a.handle)
        }
        if !session.linkSecurity.isEncrypted {
            switch session.verifySignedWrite(pdu, signature: command.signature) {
            case .dropped(let reason):
                delegate?.attServer(self, droppedSignedWrite: reason, handle: command.handle)
                return
            case .accepted(let counter):
                delegate?.attServer(self, acceptedSignCounter: counter)
            }
        }
        try checkWritable(a)
        try checkAuthorization(a, .write)
        try write(a, value: command.value, withResponse: false)
    }

    private func prepareWrite(_ pdu: ArraySlice<UInt8>) throws(ATTFailure) {
        let request = try decode(ATTPrepareWriteRequest.self, pdu)
        let a = try lookup(request.handle)
        // 3.4.6.1: permissions are checked on the Prepare Write Request itself — write access,
        // encryption, authentication, key size and authorization — so a refused part never
        // enters the queue and the Execute Write Request only checks offsets and values.
        try checkWritable(a)
        if let c = a.characteristic, case .dynamic = a.content, !c.properties.contains(.write) {
            throw ATTFailure(.writeNotPermitted, a.handle)
        }
        try checkAuthorization(a, .write)
        guard !prepareQueue.isFull else { throw ATTFailure(.prepareQueueFull, a.handle) }
        if !prepareQueue.hasRoom {
            prepareQueue.reserve()
            checkedWrites.reserveCapacity(Self.maxPreparedWrites)
        }
        // 3.4.6.1: offsets and lengths are not checked now but at Execute Write.
        prepareQueue.append(handle: request.handle, offset: Int(request.offset), value: request.value)
        // 3.4.6.2: the response echoes the request, so the client can check it (reliable writes).
        out.removeAll(keepingCapacity: true)
        out.append(ATTOpcode.prepareWriteResponse.rawValue)
        out.append(contentsOf: pdu.dropFirst())
        respond(pdu[pdu.startIndex])
    }

    private func executeWrite(_ pdu: ArraySlice<UInt8>) throws(ATTFailure) {
        let request = try decode(ATTExecuteWriteRequest.self, pdu)
        // 3.4.6.3: whatever happens next, the queue is cleared.
        defer { clearPreparedWrites() }
        if request.flags == .write {
            try prepareQueue.assemble(in: database)
            // 3.4.6.3: every value is checked — offsets, lengths, the device's own rules — before
            // any is written, so a refusal leaves every attribute unchanged.
            // Iterated through references of their own (no copy): a device's handler that ends
            // the link, and so empties them, cannot pull the ground from under these loops.
            let bytes = prepareQueue.assembledBytes
            for entry in prepareQueue.assembled {
                let value = bytes[entry.start..<(entry.start + entry.count)]
                checkedWrites.append(try check(lookup(entry.handle), offset: entry.offset, value: value, withResponse: true))
            }
            for (index, write) in checkedWrites.enumerated() {
                do {
                    try apply(write, prepared: true)
                } catch {
                    // Only an onWrite that refuses what its validateWrite accepted gets here:
                    // the values before it are written already.
                    delegate?.attServer(self, executeWriteRefusedAfter: index, error: error.error, handle: error.handle)
                    throw error
                }
            }
        }
        begin(.executeWriteResponse)
        respond(pdu[pdu.startIndex])
    }

    /// Empties the prepare queue and Execute Write's working space, keeping their room.
    private func clearPreparedWrites() {
        // The checked writes hold views of the assembled bytes: they go first, so those are emptied in place.
        checkedWrites.removeAll(keepingCapacity: true)
        prepareQueue.clear()
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
        clearPreparedWrites()
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
