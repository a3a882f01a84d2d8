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
        for characteristic in database.characteristics where characteristic.notifies {
            guard let stored = values[characteristic.valueHandle], database.attribute(characteristic.valueHandle) != nil else { continue }
            var flags = stored & 0x0003
            if !characteristic.properties.contains(.notify) { flags &= ~0x0001 }
            if !characteristic.properties.contains(.indicate) { flags &= ~0x0002 }
            guard flags != 0, flags != session.clientConfiguration(characteristic) else { continue }
            let old = session.configure(characteristic, flags)
            delegate?.attServer(self, configured: characteristic, from: old, to: flags)
        }
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
        let waits = inFlight != nil || !pendingIndications.isEmpty
        if waits && pendingIndications.count >= Self.maxPendingIndications {
            refusedIndication = true
            return .queueFull
        }
        var value = indicationBuffers.take()
        fill(&value)
        let indication = PendingIndication(handle: c.valueHandle, value: value, completion: completion,
                                           isServiceChanged: c.uuid == GATTType.serviceChanged)
        if waits {
            pendingIndications.append(indication)
            return .queued
        }
        guard sendIndication(indication) else {
            indicationBuffers.give(indication.value)
            refusedIndication = true
            return .queueFull
        }
        return .queued
    }

    public var indicationsWaiting: Int { pendingIndications.count + (inFlight == nil ? 0 : 1) }

    /// Sends an indication and starts its 30 s transaction; false when the link refused it.
    private func sendIndication(_ indication: PendingIndication) -> Bool {
        update.removeAll(keepingCapacity: true)
        update.append(ATTOpcode.handleValueIndication.rawValue)
        update.appendLE(indication.handle)
        update.append(contentsOf: indication.value.prefix(mtu - 3))
        guard send(update[...], kind: .indication) else { return false }
        inFlight = indication
        bearer.begin(.indication)
        return true
    }

    func confirmationReceived() {
        // A confirmation with no indication outstanding is ignored.
        guard let confirmed = inFlight, bearer.isOpen(.indication) else { return }
        bearer.end(.indication)
        inFlight = nil
        indicationBuffers.give(confirmed.value)
        // Vol 3, Part G, 2.5.2.1: a client that confirms Service Changed is change-aware.
        if confirmed.isServiceChanged { session.serviceChangedConfirmed() }
        confirmed.completion?(peer, .confirmed)
        // The next waiting indication goes out; one the link refuses ends as not sent.
        while let next = pendingIndications.popFirst() {
            if sendIndication(next) { break }
            indicationBuffers.give(next.value)
            next.completion?(peer, .notSent)
        }
        if refusedIndication && pendingIndications.count < Self.maxPendingIndications {
            refusedIndication = false
            delegate?.attServerIndicationQueueHasRoom(self)
        }
    }

    /// Ends every indication in flight or waiting with `outcome`.
    func failIndications(_ outcome: IndicationOutcome) {
        let failed = (inFlight.map { [$0] } ?? []) + Array(pendingIndications)
        inFlight = nil
        pendingIndications.removeAll()
        for indication in failed { indication.completion?(peer, outcome) }
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
    /// A buffer of the server's `indicationBuffers`, given back when the indication ends.
    let value: [UInt8]
    let completion: IndicationCompletion?
    let isServiceChanged: Bool
}
