import BlemuATT
import BlemuCore
import DequeModule

/// The server's own updates (Vol 3, Part F, 3.4.7): notifications, and the indications of its
/// bearer, one in flight and the rest waiting their turn (3.3.2), each value in a buffer reused.
extension ATTServer {
    public func isSubscribed(_ c: Characteristic, indications: Bool) -> Bool { session.isSubscribed(c, indications: indications) }

    /// Restores the CCCD values a bonded client set on an earlier link (Vol 3, Part G, 3.3.3.3:
    /// they persist across connections for bonded devices). Values for handles that are not a
    /// notifying characteristic now, or flags its properties do not allow, are left out; the
    /// delegate hears of each value that changes, as after a write.
    public func restoreClientConfigurations(_ values: [UInt16: UInt16]) {
        guard !isClosed else { return }
        AttributeWrites.restoreClientConfigurations(values, self)
    }

    /// Sends a notification if this peer enabled it; the value is cut to ATT_MTU - 3.
    public func notify(_ c: Characteristic, value: [UInt8]) -> UpdateOutcome { notify(c, value: value[...]) }

    /// Sends a notification if this peer enabled it; the value is cut to ATT_MTU - 3. The
    /// bytes are copied into a buffer this server reuses: nothing is allocated.
    public func notify(_ c: Characteristic, value: ArraySlice<UInt8>) -> UpdateOutcome {
        guard !isTimedOut, !isClosed, isSubscribed(c, indications: false) else { return .notSubscribed }
        update.removeAll(keepingCapacity: true)
        update.append(ATTOpcode.handleValueNotification.rawValue)
        update.appendLE(c.valueHandle)
        update.append(contentsOf: value.prefix(mtu - 3))
        return send(update[...], kind: .notification) ? .queued : .queueFull
    }

    /// Several values in one Multiple Handle Value Notification (Vol 3, Part F, 3.4.7.4), for a
    /// client that set bit 2 of Client Supported Features (Vol 3, Part G, 7.2; the caller
    /// checks). Only the values whose notifications the client enabled go; fewer than two go as
    /// a plain notification, and a list longer than ATT_MTU as one notification each (a tuple's
    /// value is never cut). `.queueFull` when the link refused any.
    public func notifyMultiple(_ updates: [(characteristic: Characteristic, value: ArraySlice<UInt8>)]) -> UpdateOutcome {
        guard !isTimedOut, !isClosed else { return .notSubscribed }
        var count = 0
        var size = 1
        for update in updates where isSubscribed(update.characteristic, indications: false) {
            count += 1
            size += 4 + update.value.count
        }
        guard count >= 2, size <= mtu else {
            return .notifyingEach(updates) { notify($0, value: $1) }
        }
        update.removeAll(keepingCapacity: true)
        update.append(ATTOpcode.multipleHandleValueNotification.rawValue)
        for (characteristic, value) in updates where isSubscribed(characteristic, indications: false) {
            update.appendLE(characteristic.valueHandle)
            update.appendLE(UInt16(value.count))
            update.append(contentsOf: value)
        }
        return send(update[...], kind: .notification) ? .queued : .queueFull
    }

    /// Sends an indication if this peer enabled it. One is in flight at a time; later ones
    /// wait in a small bounded queue. `completion` hears, once, how an indication that was
    /// taken (`.queued`) ended: confirmed, timed out, or its link closed first (Zephyr's
    /// `bt_gatt_indicate_params.func`).
    public func indicate(_ c: Characteristic, value: [UInt8], completion: IndicationCompletion? = nil) -> UpdateOutcome {
        indicate(c, value: value[...], completion: completion)
    }

    /// The same with bytes in any buffer: they are copied into one this server reuses until
    /// the confirmation, so nothing is allocated once the link has indicated before.
    public func indicate(_ c: Characteristic, value: ArraySlice<UInt8>, completion: IndicationCompletion? = nil) -> UpdateOutcome {
        indicate(c, completion: completion) { $0.append(contentsOf: value.prefix(Self.maximumMTU - 3)) }
    }

    /// Service Changed for `range` (Vol 3, Part G, 7.1): the Affected Attribute Handle Range.
    /// A client that confirms it is change-aware (2.5.2.1).
    public func indicateServiceChanged(_ c: Characteristic, range: ClosedRange<UInt16>) -> UpdateOutcome {
        indicate(c, completion: nil) {
            $0.appendLE(range.lowerBound)
            $0.appendLE(range.upperBound)
        }
    }

    func indicate(_ c: Characteristic, completion: IndicationCompletion?, value fill: (inout [UInt8]) -> Void) -> UpdateOutcome {
        guard !isTimedOut, !isClosed, isSubscribed(c, indications: true) else { return .notSubscribed }
        switch indications.admit(handle: c.valueHandle, isServiceChanged: c.uuid == GATTType.serviceChanged,
                                 completion: completion, value: fill) {
        case .full: return .queueFull
        case .waiting: return .queued
        case .ready(let indication):
            guard sendIndication(indication) else {
                indications.notSent(indication, refusedForRoom: true)
                return .queueFull
            }
            return .queued
        }
    }

    public var indicationsWaiting: Int { indications.count }

    /// Sends an indication and starts its 30 s transaction; false when the link refused it.
    private func sendIndication(_ indication: PendingIndication) -> Bool {
        update.removeAll(keepingCapacity: true)
        update.append(ATTOpcode.handleValueIndication.rawValue)
        update.appendLE(indication.handle)
        update.append(contentsOf: indication.value.prefix(mtu - 3))
        guard send(update[...], kind: .indication) else { return false }
        indications.sent(indication)
        bearer.begin(.indication)
        return true
    }

    func confirmationReceived() {
        // A confirmation with no indication outstanding is ignored.
        guard indications.isInFlight, bearer.isOpen(.indication), let confirmed = indications.confirmed() else { return }
        bearer.end(.indication)
        // Vol 3, Part G, 2.5.2.1: a client that confirms Service Changed is change-aware.
        if confirmed.isServiceChanged { session.serviceChangedConfirmed() }
        confirmed.completion?(peer, .confirmed)
        // The next waiting indication goes out; one the link refuses ends as not sent.
        while let next = indications.nextWaiting() {
            if sendIndication(next) { break }
            indications.notSent(next, refusedForRoom: false)
            next.completion?(peer, .notSent)
        }
        if indications.roomAgain() { delegate?.attServerIndicationQueueHasRoom(self) }
    }

    /// Ends every indication in flight or waiting with `outcome`.
    func failIndications(_ outcome: IndicationOutcome) {
        for indication in indications.removeAll() { indication.completion?(peer, outcome) }
    }
}

/// The indications of one bearer (Vol 3, Part F, 3.4.7.2): one in flight until its confirmation,
/// the rest waiting their turn in order (3.3.2), at most `capacity` of them, each value in a
/// buffer reused from one indication to the next (a value longer than the largest ATT_MTU
/// carries is cut). It sends nothing: the server sends what is ready, through its one way out.
struct IndicationQueue {
    static let capacity = ATTServer.maxPendingIndications
    /// The indication sent and not yet confirmed.
    private var inFlight: PendingIndication?
    private var waiting: Deque<PendingIndication> = []
    private var buffers = BufferPool(limit: IndicationQueue.capacity + 1, bufferCapacity: ATTServer.maximumMTU - 3)
    /// An indication was refused for want of room: the owner hears when there is room again.
    private var refusedForRoom = false

    /// The indications in flight and waiting.
    var count: Int { waiting.count + (inFlight == nil ? 0 : 1) }
    var isInFlight: Bool { inFlight != nil }

    /// What becomes of a new indication.
    enum Admission {
        /// No room: refused (the owner hears when there is room again).
        case full
        /// Behind the one in flight.
        case waiting
        /// Nothing before it: to be sent now (then `sent`, or `notSent`).
        case ready(PendingIndication)
    }

    /// A new indication of the value `fill` writes into a buffer of the queue's.
    mutating func admit(handle: UInt16, isServiceChanged: Bool, completion: IndicationCompletion?,
                        value fill: (inout [UInt8]) -> Void) -> Admission {
        let waits = inFlight != nil || !waiting.isEmpty
        if waits && waiting.count >= Self.capacity {
            refusedForRoom = true
            return .full
        }
        var value = buffers.take()
        fill(&value)
        let indication = PendingIndication(handle: handle, value: value, completion: completion, isServiceChanged: isServiceChanged)
        if waits {
            waiting.append(indication)
            return .waiting
        }
        return .ready(indication)
    }

    /// The indication went out: in flight until its confirmation.
    mutating func sent(_ indication: PendingIndication) { inFlight = indication }

    /// The link did not take the indication: its buffer comes back. `refusedForRoom`: a new one
    /// refused, whose owner is told when there is room again.
    mutating func notSent(_ indication: PendingIndication, refusedForRoom: Bool) {
        buffers.give(indication.value)
        if refusedForRoom { self.refusedForRoom = true }
    }

    /// The confirmation came: the indication in flight ends, its buffer back.
    mutating func confirmed() -> PendingIndication? {
        guard let confirmed = inFlight else { return nil }
        inFlight = nil
        buffers.give(confirmed.value)
        return confirmed
    }

    /// The next waiting indication, taken out to be sent.
    mutating func nextWaiting() -> PendingIndication? { waiting.popFirst() }

    /// True, once, when there is room again after an indication was refused for want of it.
    mutating func roomAgain() -> Bool {
        guard refusedForRoom, waiting.count < Self.capacity else { return false }
        refusedForRoom = false
        return true
    }

    /// Every indication, in flight and waiting, taken out to be ended.
    mutating func removeAll() -> [PendingIndication] {
        let all = (inFlight.map { [$0] } ?? []) + Array(waiting)
        inFlight = nil
        waiting.removeAll()
        return all
    }
}

/// How an indication ended (Vol 3, Part F, 3.4.7.2).
public enum IndicationOutcome: Sendable, Equatable {
    /// The client sent its Handle Value Confirmation.
    case confirmed
    /// No confirmation within 30 s: the bearer is dead and the link is being closed (3.3.3).
    case timedOut
    /// The link closed before the confirmation came.
    case disconnected
    /// It waited its turn, then the link refused to take it.
    case notSent
}

public typealias IndicationCompletion = (ATTPeer, IndicationOutcome) -> Void

struct PendingIndication {
    let handle: UInt16
    /// A buffer of its `IndicationQueue`'s, given back when the indication ends.
    let value: [UInt8]
    let completion: IndicationCompletion?
    let isServiceChanged: Bool
}
