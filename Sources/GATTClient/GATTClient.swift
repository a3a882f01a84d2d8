import BlemuATT
import BlemuCore
import BlemuGATT
import DequeModule

/// The client side of one ATT bearer (Vol 3, Part G, 4): GATT procedures run one request at a
/// time (Vol 3, Part F, 3.3.2), the rest wait in a bounded queue. It speaks the same PDU types
/// as `ATTServer`; the link below hands it the PDUs a server sends (`receive`) and sends what
/// it asks (`send`). Every procedure ends exactly once, with its result or a
/// `GATTClientError`: an error response, a malformed or unexpected answer, the 30 s
/// transaction timeout, or the link closing.
///
/// Completions run on the run loop; one may start another procedure. A procedure asked for
/// after the bearer timed out or closed fails at once, before the call returns.
public final class GATTClient {
    public static let defaultMTU = 23
    /// The Client Rx MTU offered by `exchangeMTU()` unless told otherwise.
    public static let maximumMTU = 517
    public static let transactionTimeout: Duration = ATTBearer.transactionTimeout
    /// Procedures waiting behind the one in flight, at most.
    public static let maxQueued = 64
    /// The most services, includes, characteristics and descriptors a discovery holds from a
    /// server: as many as 16-bit handles can number (Vol 3, Part F, 3.2.2), so every database a
    /// server can have fits, while one that describes itself as more (overlapping included
    /// services, say) ends the discovery with `.tooManyAttributes` instead of growing memory.
    public static let maxAttributes = 65_535

    /// ATT_MTU now (Vol 3, Part F, 3.4.2.2): the bearer's, shared with a server on the same link.
    public var mtu: Int { bearer.mtu }
    /// The link's ATT bearer: its ATT_MTU, where the client's PDUs go, and what routes the
    /// server's responses, notifications and indications here.
    public let bearer: ATTBearer
    /// The transport of a client made with a `send` closure (its bearer holds it weakly).
    private let ownTransport: ATTTransport?
    public private(set) var isTimedOut = false
    public private(set) var isClosed = false
    /// What `discoverAll` found, kept current across Service Changed indications.
    public private(set) var services: [RemoteService] = []
    /// What `discoverAll` holds at most (`maxAttributes`, or less when told at init).
    public let attributeLimit: Int

    /// A notification (Vol 3, Part F, 3.4.7.1): handle and value.
    public var onNotification: ((UInt16, ArraySlice<UInt8>) -> Void)?
    /// An indication (3.4.7.2), after its confirmation went out.
    public var onIndication: ((UInt16, ArraySlice<UInt8>) -> Void)?
    /// The server changed its database (Vol 3, Part G, 7.1): told once the range was
    /// rediscovered (when `services` had been discovered) or at once.
    public var onServiceChanged: ((ClosedRange<UInt16>) -> Void)?
    /// PDUs that answer nothing asked, or that do not decode: for the log.
    public var onUnexpected: ((String) -> Void)?
    /// The transaction timed out: the link should be closed (3.3.3).
    public var onTimeout: (() -> Void)?

    /// Procedures not yet ended: the one in flight and those queued behind it (what spreads
    /// requests over several bearers looks at).
    public var proceduresPending: Int { (current == nil ? 0 : 1) + queue.count }

    private let scheduler: TimerScheduling
    private var current: Procedure?
    /// The opcode of the request in flight, which its response must answer.
    private var outstanding: UInt8?
    private var queue: Deque<Procedure> = []
    /// Every PDU the client sends is encoded here (`prepare`), room for the largest ATT_MTU
    /// taken once.
    private var outgoing: [UInt8] = []

    /// A client on `bearer` (shared with the link's server, which has the same ATT_MTU).
    public init(scheduler: TimerScheduling, bearer: ATTBearer, attributeLimit: Int = GATTClient.maxAttributes) {
        self.scheduler = scheduler
        self.attributeLimit = max(1, min(attributeLimit, Self.maxAttributes))
        self.bearer = bearer
        ownTransport = nil
        outgoing.reserveCapacity(Self.maximumMTU)
        bearer.client = self
    }

    /// A client on a bearer of its own, whose PDUs `send` hands to the link (a test's, a fuzz
    /// target's); false when the link did not take one.
    public init(scheduler: TimerScheduling, attributeLimit: Int = GATTClient.maxAttributes,
                send: @escaping ([UInt8]) -> Bool) {
        self.scheduler = scheduler
        self.attributeLimit = max(1, min(attributeLimit, Self.maxAttributes))
        let transport = ATTClosureTransport { pdu, _ in send(Array(pdu)) }
        ownTransport = transport
        bearer = ATTBearer(scheduler: scheduler, transport: transport)
        outgoing.reserveCapacity(Self.maximumMTU)
        bearer.client = self
    }

    deinit {
        if outstanding != nil { bearer.end(.request) }
    }

    /// Whether a PDU from the peer is for the client side of the bearer (`ATTOpcode.isForClient`).
    public static func isForClient(_ opcode: UInt8) -> Bool { ATTOpcode.isForClient(opcode) }

    // MARK: The link

    /// One ATT PDU from the server.
    public func receive(_ pdu: ArraySlice<UInt8>) {
        guard let opcode = pdu.first else { return }
        receive(pdu, opcode: opcode)
    }

    /// One ATT PDU from the server whose first byte, `opcode`, the bearer read already.
    public func receive(_ pdu: ArraySlice<UInt8>, opcode: UInt8) {
        guard !isClosed else { return }
        switch opcode {
        case ATTOpcode.handleValueNotification.rawValue:
            guard let notification = try? ATTHandleValueNotification(pdu: pdu) else {
                return unexpected("malformed notification of \(pdu.count) bytes")
            }
            onNotification?(notification.handle, notification.value)
        case ATTOpcode.handleValueIndication.rawValue:
            guard let indication = try? ATTHandleValueIndication(pdu: pdu) else {
                return unexpected("malformed indication of \(pdu.count) bytes")
            }
            // 3.4.7.3: every indication is confirmed, whatever the client makes of it.
            if !isTimedOut { _ = bearer.send(Self.confirmation[...], kind: .request) }
            indicated(indication.handle, indication.value)
        case ATTOpcode.multipleHandleValueNotification.rawValue:
            // 3.4.7.4: (handle, length, value) tuples.
            var reader = ByteReader(pdu.dropFirst())
            while !reader.isAtEnd {
                guard let handle = try? reader.u16(), let length = try? reader.u16(),
                      let value = try? reader.bytes(Int(length)) else {
                    return unexpected("malformed Multiple Handle Value Notification")
                }
                onNotification?(handle, value)
            }
        default:
            guard Self.isForClient(opcode) else {
                return unexpected("\(Hex.byte(opcode)) is not for a client")
            }
            guard let procedure = current, let request = outstanding, !isTimedOut else {
                return unexpected("response \(Hex.byte(opcode)) with no request outstanding")
            }
            let answers: Bool
            if opcode == ATTOpcode.errorResponse.rawValue {
                answers = (try? ATTErrorResponse(pdu: pdu))?.requestOpcode == request
            } else {
                answers = opcode == request &+ 1
            }
            stopTimer()
            outstanding = nil
            guard answers else {
                finish(procedure, .malformedResponse("\(Hex.byte(opcode)) does not answer request \(Hex.byte(request))"))
                return
            }
            switch procedure.handle(pdu, client: self) {
            case .send: transmit()
            case .done: finishCurrent()
            }
        }
    }

    /// The link is gone: every procedure ends with `.disconnected`.
    public func close() {
        guard !isClosed else { return }
        isClosed = true
        stopTimer()
        failAll(.disconnected)
    }

    // MARK: Running procedures

    func enqueue(_ procedure: Procedure) {
        if isClosed { return procedure.fail(.disconnected) }
        if isTimedOut { return procedure.fail(.timeout) }
        if current == nil {
            current = procedure
            start(procedure)
        } else if queue.count < Self.maxQueued {
            queue.append(procedure)
        } else {
            procedure.fail(.queueFull)
        }
    }

    private func start(_ procedure: Procedure) {
        switch procedure.start(client: self) {
        case .send: transmit()
        case .done: finishCurrent()
        }
    }

    /// Sends the request the procedure in flight prepared (`prepare`).
    private func transmit() {
        guard let procedure = current else { return }
        guard let opcode = outgoing.first, outgoing.count <= mtu else {
            return finish(procedure, .invalidArgument("a \(outgoing.count)-byte request does not fit ATT_MTU \(mtu)"))
        }
        outstanding = opcode
        bearer.begin(.request)
        guard bearer.send(outgoing[...], kind: .request) else {
            stopTimer()
            outstanding = nil
            return finish(procedure, .notSent)
        }
    }

    /// Ends the procedure in flight with `error` and moves on.
    private func finish(_ procedure: Procedure, _ error: GATTClientError) {
        procedure.fail(error)
        finishCurrent()
    }

    private func finishCurrent() {
        current = nil
        outstanding = nil
        while current == nil, !isClosed, !isTimedOut, let next = queue.popFirst() {
            current = next
            start(next)
        }
    }

    /// A transaction of the bearer timed out (this client's request, or the server's
    /// indication on the same bearer): every procedure ends with `.timeout` (3.3.3).
    public func bearerTimedOut(_ transaction: ATTTransaction) {
        guard !isTimedOut else { return }
        isTimedOut = true
        failAll(.timeout)
        onTimeout?()
    }

    private func failAll(_ error: GATTClientError) {
        let failed = (current.map { [$0] } ?? []) + Array(queue)
        current = nil
        outstanding = nil
        queue.removeAll()
        for procedure in failed { procedure.fail(error) }
    }

    private func stopTimer() {
        bearer.end(.request)
    }

    private func unexpected(_ what: String) {
        onUnexpected?(what)
    }

    func setMTU(_ value: Int) { bearer.mtu = value }
    func setServices(_ value: [RemoteService]) { services = value }
    /// A command goes out at once: it has no response to wait for (Vol 3, Part F, 3.3.1).
    /// It is encoded into the same reused buffer as requests: a request in flight was sent
    /// (or copied by the link) before.
    func sendCommand<PDU: ATTPDU>(_ pdu: PDU) -> Bool {
        _ = prepare(pdu)
        return bearer.send(outgoing[...], kind: .request)
    }

    /// Encodes a procedure's next request into the buffer the client reuses for every PDU it
    /// sends, so a request costs no array of its own; the procedure returns the `.send` this
    /// gives back, and the client sends the buffer.
    func prepare<PDU: ATTPDU>(_ pdu: PDU) -> Step {
        outgoing.removeAll(keepingCapacity: true)
        pdu.encode(into: &outgoing)
        return .send
    }

    /// Handle Value Confirmation (Vol 3, Part F, 3.4.7.3): one octet, made once.
    static let confirmation: [UInt8] = [ATTOpcode.handleValueConfirmation.rawValue]

    // MARK: Service Changed (Vol 3, Part G, 7.1)

    private func indicated(_ handle: UInt16, _ value: ArraySlice<UInt8>) {
        onIndication?(handle, value)
        guard let serviceChanged = services.characteristic(GATTType.serviceChanged, in: GATTType.gattService),
              serviceChanged.valueHandle == handle else { return }
        guard value.count == 4 else { return unexpected("Service Changed value of \(value.count) bytes") }
        let start = UInt16(value[value.startIndex]) | UInt16(value[value.startIndex + 1]) << 8
        let end = UInt16(value[value.startIndex + 2]) | UInt16(value[value.startIndex + 3]) << 8
        guard start != 0, start <= end else { return unexpected("Service Changed range \(start)-\(end)") }
        let range = start...end
        // Whatever was known in the range is stale: drop it and discover it again.
        services.removeAll { $0.handles.overlaps(range) }
        discoverAll(in: range) { [weak self] result in
            guard let self else { return }
            if case .success(let found) = result {
                // A secondary service found again (through an include in the range) replaces
                // the copy held: each service is held once, and the whole stays within the limit.
                let rediscovered = Set(found.map(\.handles.lowerBound))
                let merged = self.services.filter { !rediscovered.contains($0.handles.lowerBound) } + found
                if merged.attributeCount <= self.attributeLimit {
                    self.services = merged.sorted { $0.handles.lowerBound < $1.handles.lowerBound }
                } else {
                    self.unexpected("Service Changed: the database would hold more than \(self.attributeLimit) attributes; the range is left out")
                }
            }
            self.onServiceChanged?(range)
        }
    }
}

/// What a procedure does next.
enum Step {
    /// Send the request the procedure prepared (`GATTClient.prepare`).
    case send
    /// The procedure reported its result.
    case done
}

/// One GATT procedure: the requests it sends and what it makes of each answer. The client
/// guarantees `handle` gets only an answer to the last request (a response of the request's
/// opcode + 1, or an Error Response naming it).
///
/// Each procedure overrides `start` and `handle`; these defaults end a procedure that does
/// not, with an error rather than a trap.
class Procedure {
    func start(client: GATTClient) -> Step {
        fail(.invalidArgument("internal: \(type(of: self)) sends no request"))
        return .done
    }
    func handle(_ pdu: ArraySlice<UInt8>, client: GATTClient) -> Step {
        fail(.invalidArgument("internal: \(type(of: self)) takes no response"))
        return .done
    }
    func fail(_ error: GATTClientError) {}
}

/// A procedure with a typed result delivered once.
class TypedProcedure<Value>: Procedure {
    private var completion: ((Result<Value, GATTClientError>) -> Void)?

    init(_ completion: @escaping (Result<Value, GATTClientError>) -> Void) {
        self.completion = completion
    }

    final func complete(_ result: Result<Value, GATTClientError>) -> Step {
        let completion = self.completion
        self.completion = nil
        completion?(result)
        return .done
    }

    override final func fail(_ error: GATTClientError) { _ = complete(.failure(error)) }

    /// The Error Response in `pdu`, if it is one.
    static func errorResponse(_ pdu: ArraySlice<UInt8>) -> ATTErrorResponse? {
        pdu.first == ATTOpcode.errorResponse.rawValue ? try? ATTErrorResponse(pdu: pdu) : nil
    }

    /// Decodes a response, or ends the procedure with the error it carries or a malformed one.
    final func decode<PDU: ATTPDU>(_ type: PDU.Type, _ pdu: ArraySlice<UInt8>) -> Result<PDU, GATTClientError> {
        if let error = Self.errorResponse(pdu) { return .failure(.att(error.error, handle: error.handle)) }
        do {
            return .success(try PDU(pdu: pdu))
        } catch {
            return .failure(.malformedResponse("\(PDU.opcode): \(error)"))
        }
    }
}

/// The client end of its bearer: responses, notifications and indications come to `receive`.
extension GATTClient: ATTBearerEnd {}
