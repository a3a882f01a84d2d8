import BlemuATT
import BlemuCore
import DequeModule

/// Hears each fault a `FaultStage` applied.
public protocol FaultStageDelegate: AnyObject {
    /// A fault of the plan was applied to a request or an update on `handle`.
    func faultStage(_ stage: FaultStage, injected fault: FaultPlan.Action, handle: UInt16, opcode: UInt8)
}

/// A link's faults, as a stage in front of its ATT server: the bearer hands the client's PDUs
/// to the stage, which answers a faulted request itself or holds it back, and passes the rest on;
/// the device's notifications and indications reach the server through it, and a faulted one is
/// dropped there. The server knows nothing of faults. The stage is on the request path only
/// while its plan has faults (or it holds a delayed request): it puts itself between the
/// bearer and the server when the plan becomes active and takes itself out when it is empty
/// again, so a link whose device has none planned goes from the bearer straight to the server;
/// the device's updates pass it with one check.
///
/// Updates are faulted where the device asks for them, not on their way to the bearer: a dropped
/// indication ends at once as `.notSent` and never goes in flight (on the way out the server would
/// wait 30 s for a confirmation that never comes, Vol 3, Part F, 3.3.3), and the fault is taken
/// by the indication asked for next, not by one waiting behind it.
public final class FaultStage: ATTBearerEnd {
    /// The server behind the stage (owned: the bearer holds its ends unowned).
    public let server: ATTServer
    /// The device's plan, shared by its links.
    public let plan: FaultPlan
    public weak var delegate: FaultStageDelegate?
    private let scheduler: TimerScheduling
    /// A request held back by a delay fault, and requests a misbehaving client sent after it.
    private var heldRequests: Deque<[UInt8]> = []
    /// Read on every request (unchecked: one thread, never passed inout).
    @exclusivity(unchecked) private var heldTimer: TimerID?
    static let maxHeldRequests = 4

    /// A stage for `server` and `plan`: while the plan has faults, what the peer sends for the
    /// server comes here first.
    public init(server: ATTServer, plan: FaultPlan, scheduler: TimerScheduling) {
        self.server = server
        self.plan = plan
        self.scheduler = scheduler
        plan.register(self)
        planChanged()
    }

    deinit {
        if let heldTimer { scheduler.cancel(heldTimer) }
    }

    /// Whether the stage is between the bearer and the server now.
    public var isOnRequestPath: Bool { server.bearer.server === self }

    /// The plan became active or empty: the stage goes in front of the server, or, with nothing
    /// planned and nothing held, out of the way.
    func planChanged() {
        if !plan.isEmpty || heldTimer != nil {
            if !isOnRequestPath { server.bearer.server = self }
        } else if isOnRequestPath {
            server.bearer.server = server
        }
    }

    // MARK: Requests (from the bearer)

    /// One PDU for the server. With nothing held and nothing planned it goes straight on.
    public func receive(_ pdu: ArraySlice<UInt8>, opcode: UInt8) {
        guard heldTimer != nil || !plan.isEmpty else { return server.receive(pdu, opcode: opcode) }
        // A dead or closed server answers nothing, and takes no fault.
        guard !server.isTimedOut, !server.isClosed else { return }
        if heldTimer != nil, ATTOpcode.isRequestForm(opcode) {
            // A request answered late by a delay fault is still outstanding (Vol 3, Part F,
            // 3.3.2): a client that sends another anyway waits its turn, in order.
            if heldRequests.count < Self.maxHeldRequests { heldRequests.append(Array(pdu)) }
            return
        }
        // Confirmations, and PDUs that name no handle a fault could apply to, go straight on.
        if applyFault(opcode: opcode, pdu: pdu) { return }
        server.receive(pdu, opcode: opcode)
    }

    public func bearerTimedOut(_ transaction: ATTTransaction) {
        server.bearerTimedOut(transaction)
    }

    /// The opcodes whose first parameter is the attribute handle a fault may name.
    static func targetHandle(_ opcode: UInt8, _ pdu: ArraySlice<UInt8>) -> UInt16? {
        switch opcode {
        case ATTOpcode.readRequest.rawValue, ATTOpcode.readBlobRequest.rawValue, ATTOpcode.writeRequest.rawValue,
             ATTOpcode.writeCommand.rawValue, ATTOpcode.prepareWriteRequest.rawValue:
            guard pdu.count >= 3 else { return nil }
            return UInt16(pdu[pdu.startIndex + 1]) | UInt16(pdu[pdu.startIndex + 2]) << 8
        default:
            return nil
        }
    }

    /// Applies a planned fault to this PDU; true when the PDU was taken by it.
    private func applyFault(opcode: UInt8, pdu: ArraySlice<UInt8>) -> Bool {
        guard let handle = Self.targetHandle(opcode, pdu), let action = plan.takeForRequest(handle) else { return false }
        delegate?.faultStage(self, injected: action, handle: handle, opcode: opcode)
        switch action {
        case .error(let error):
            server.refuse(opcode: opcode, handle: handle, error: error)
        case .delay(let duration):
            heldRequests.append(Array(pdu))
            heldTimer = scheduler.schedule(after: duration) { [weak self] in self?.releaseHeld() }
            // The plan may be empty now: the stage stays in front until the request is answered.
            planChanged()
        case .drop:
            return false
        }
        return true
    }

    /// The delay is over: the held request goes to the server, then any that queued behind it
    /// (until one of them is delayed in turn).
    private func releaseHeld() {
        heldTimer = nil
        while heldTimer == nil, let next = heldRequests.popFirst() {
            guard !server.isTimedOut, !server.isClosed, let opcode = next.first else { break }
            server.receive(next[...], opcode: opcode)
        }
        planChanged()
    }

    /// The link is gone: a held request is never answered, and the plan forgets the stage.
    public func close() {
        if let heldTimer { scheduler.cancel(heldTimer) }
        heldTimer = nil
        heldRequests.removeAll()
        plan.unregister(self)
    }

    // MARK: Updates (from the device)

    /// The server's `notify`, unless a drop is planned for `c`: then nothing is sent and the
    /// device hears `.queued`, as from a link that lost it.
    public func notify(_ c: Characteristic, value: ArraySlice<UInt8>) -> UpdateOutcome {
        if !plan.isEmpty, dropsUpdate(c, indications: false) { return .queued }
        return server.notify(c, value: value)
    }

    /// The server's `notifyMultiple`; with faults planned, each value as a notification of its
    /// own, so a drop planned for one characteristic drops only its value.
    public func notifyMultiple(_ updates: [(characteristic: Characteristic, value: ArraySlice<UInt8>)]) -> UpdateOutcome {
        guard !plan.isEmpty else { return server.notifyMultiple(updates) }
        return .notifyingEach(updates) { notify($0, value: $1) }
    }

    /// The server's `indicate`, unless a drop is planned for `c`: then nothing is sent and the
    /// indication ends at once as `.notSent`.
    public func indicate(_ c: Characteristic, value: ArraySlice<UInt8>, completion: IndicationCompletion? = nil) -> UpdateOutcome {
        if !plan.isEmpty, dropsUpdate(c, indications: true) {
            completion?(server.peer, .notSent)
            return .queued
        }
        return server.indicate(c, value: value, completion: completion)
    }

    /// The server's `indicateServiceChanged`, unless a drop is planned for Service Changed.
    public func indicateServiceChanged(_ c: Characteristic, range: ClosedRange<UInt16>) -> UpdateOutcome {
        if !plan.isEmpty, dropsUpdate(c, indications: true) { return .queued }
        return server.indicateServiceChanged(c, range: range)
    }

    /// Whether this update is dropped, taking the fault: only one the server would send (the
    /// peer subscribed, the bearer alive) uses a drop up.
    private func dropsUpdate(_ c: Characteristic, indications: Bool) -> Bool {
        guard !server.isTimedOut, !server.isClosed, server.isSubscribed(c, indications: indications),
              plan.takeDrop(c.valueHandle) else { return false }
        let opcode = indications ? ATTOpcode.handleValueIndication : ATTOpcode.handleValueNotification
        delegate?.faultStage(self, injected: .drop, handle: c.valueHandle, opcode: opcode.rawValue)
        return true
    }
}
