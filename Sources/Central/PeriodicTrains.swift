import BlemuCore
import BlemuHCI

/// One periodic advertising train synchronized to (Core Vol 6, Part B, 4.4.2.12).
public struct PeriodicTrain: Equatable, Sendable {
    public var syncHandle: UInt16
    public var address: BluetoothAddress
    public var addressType: UInt8
    public var sid: UInt8
    /// 1.25 ms units.
    public var interval: UInt16
}

/// The scanner's side of periodic advertising (`blemu scan --periodic`), without I/O: which
/// train to synchronize to next, the trains synchronized, and each train's data reassembled
/// from its report fragments. Bounded whatever the air holds: at most `capacity` trains, one
/// Create Sync at a time (a controller allows one pending, Vol 4, Part E, 7.8.67), at most
/// `capacity` trains remembered as refused (forgotten all at once when full, then tried again),
/// and at most `maximumData` bytes of one train's data held while its fragments arrive.
public struct PeriodicTrains {
    public static let defaultCapacity = 8
    /// Periodic advertising data is at most 1650 octets (Vol 4, Part E, 7.8.62 and 6.36).
    public static let maximumData = 1650

    public let capacity: Int
    public private(set) var trains: [UInt16: PeriodicTrain] = [:]
    /// The train a Create Sync is pending for.
    public private(set) var pending: (address: BluetoothAddress, sid: UInt8)?
    private var refused: Set<Key> = []
    private var fragments: [UInt16: [UInt8]] = [:]
    /// Trains whose current data overflowed `maximumData`: the rest of its fragments are dropped.
    private var overflowed: Set<UInt16> = []

    private struct Key: Hashable {
        var address: BluetoothAddress
        var sid: UInt8
    }

    public init(capacity: Int = PeriodicTrains.defaultCapacity) { self.capacity = max(1, capacity) }

    /// The Create Sync for the train `report` announces (a nonzero Periodic_Advertising_Interval,
    /// 7.7.65.13), or nil: none announced, one pending already, synchronized or refused already,
    /// or `capacity` trains held. The sync timeout is six intervals, at least 1 s (10 ms units).
    public mutating func createSync(for report: ExtendedAdvertisingReport) -> HCICommand? {
        guard report.periodicInterval != 0, report.advertisingSID <= 0x0F, pending == nil, trains.count < capacity else { return nil }
        let key = Key(address: report.address, sid: report.advertisingSID)
        guard !refused.contains(key), !trains.values.contains(where: { $0.address == key.address && $0.sid == key.sid }) else { return nil }
        pending = (report.address, report.advertisingSID)
        // interval × 1.25 ms × 6 in 10 ms units = interval × 0.75; 0x000A-0x4000 allowed.
        let timeout = UInt16(min(0x4000, max(100, Int(report.periodicInterval) * 3 / 4)))
        return .lePeriodicAdvertisingCreateSync(sid: report.advertisingSID, addressType: report.addressType & 0x01,
                                                address: report.address, timeout: timeout)
    }

    /// The pending Create Sync failed (refused, or cancelled after waiting): not asked again
    /// until the refused memory is cleared.
    public mutating func createSyncFailed() {
        guard let pending else { return }
        if refused.count >= capacity { refused.removeAll() }
        refused.insert(Key(address: pending.address, sid: pending.sid))
        self.pending = nil
    }

    /// LE Periodic Advertising Sync Established: the train, or nil when it failed.
    public mutating func established(_ event: PeriodicSyncEstablished) -> PeriodicTrain? {
        guard event.status == HCIStatus.success else {
            createSyncFailed()
            return nil
        }
        pending = nil
        let train = PeriodicTrain(syncHandle: event.syncHandle, address: event.address, addressType: event.addressType,
                                  sid: event.sid, interval: event.interval)
        trains[event.syncHandle] = train
        return train
    }

    /// A report fragment: the train and its whole data once complete (status 0x00); nil while
    /// more is to come, for a train not known, or data truncated by the controller (0x02) or
    /// beyond `maximumData` (dropped, with `truncated` true so the caller can say so).
    public mutating func report(_ report: PeriodicAdvertisingReport) -> (train: PeriodicTrain, data: [UInt8], truncated: Bool)? {
        guard let train = trains[report.syncHandle] else { return nil }
        if overflowed.contains(report.syncHandle) {
            if report.dataStatus != 0x01 { overflowed.remove(report.syncHandle) }
            return nil
        }
        var data = fragments.removeValue(forKey: report.syncHandle) ?? []
        guard data.count + report.data.count <= Self.maximumData else {
            if report.dataStatus == 0x01 { overflowed.insert(report.syncHandle) }
            return (train, data, true)
        }
        data += report.data
        switch report.dataStatus {
        case 0x00: return (train, data, false)
        case 0x01:
            fragments[report.syncHandle] = data
            return nil
        case 0x02: return (train, data, true)
        default: return nil   // 0xFF: an AUX_SYNC_SUBEVENT_IND not received (PAwR): nothing to show
        }
    }

    /// LE Periodic Advertising Sync Lost: the train, forgotten (it may be synchronized again).
    public mutating func lost(_ syncHandle: UInt16) -> PeriodicTrain? {
        fragments[syncHandle] = nil
        overflowed.remove(syncHandle)
        return trains.removeValue(forKey: syncHandle)
    }

    /// The controller reset: every sync is gone.
    public mutating func reset() {
        trains.removeAll()
        fragments.removeAll()
        overflowed.removeAll()
        pending = nil
    }
}
