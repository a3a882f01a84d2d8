import BlemuBroadcast
import BlemuCentral
import BlemuCore

/// Refuses replayed encrypted BTHome readings. bthome.io/encryption leaves replay protection to
/// the receiver: the counter in the nonce grows with each reading, and anyone who recorded an
/// advertisement can send it again, MIC and all. Per advertiser, the counter of the last reading
/// the bindkey opened is kept; a later reading whose counter is smaller is refused. An equal
/// counter passes: a broadcaster sends one reading in every advertising event until it has a
/// new one.
///
/// Stricter than Home Assistant's bthome-ble (3.25, parser.py `_check_encryption_counter`),
/// which accepts a smaller counter when it is below 100, taking it for a device that started
/// counting again from 0: a replay of any recording from a device's first hundred readings
/// passes there. A scan cannot tell such a restart from a replay, so it refuses both and says
/// so; a sensor that really counts again from 0 is shown again by a new scan (the memory is
/// the scan's own). blemu's own BTHome devices never count again (their counter is kept in the
/// state directory).
///
/// Only readings the bindkey opened count (their MIC matched, so the advertiser had the key): a
/// MIC failure or an unencrypted advertisement changes nothing. Unlike bthome-ble, two MIC
/// failures in a row do not make it forget the counter (bthome-ble then accepts any counter once).
///
/// It remembers at most `capacity` advertisers, the bound of `AdvertiserTable`; when full, the
/// one heard longest ago makes room. Only an advertiser that sent a reading the key opens gets
/// an entry, so a stranger without the key cannot push a real one out.
public struct BTHomeReplayGuard {
    public static let defaultCapacity = AdvertiserTable.defaultCapacity
    /// A reading refused: its counter, and the last one opened from the same advertiser.
    public struct Refusal: Equatable, Sendable, CustomStringConvertible {
        public var counter: UInt32
        public var lastCounter: UInt32
        /// The first refusal from this advertiser: the one a scan says (later ones are not).
        public var isFirst: Bool

        public var description: String {
            "encrypted BTHome counter \(counter) after \(lastCounter): refused as a replay"
        }
    }

    public let capacity: Int
    private struct Entry {
        var lastCounter: UInt32
        var refusalSaid = false
        var heardAt: UInt64
    }
    private var entries: [BluetoothAddress: Entry] = [:]

    public init(capacity: Int = BTHomeReplayGuard.defaultCapacity) {
        self.capacity = max(1, capacity)
    }

    /// How many advertisers are remembered.
    public var count: Int { entries.count }

    /// Whether `report`'s reading from `address` would be refused now (nothing remembered): for a
    /// view drawn from the latest data of each advertiser (`blemu scan --table`).
    public func refusal(of report: BroadcastReport, from address: BluetoothAddress) -> Refusal? {
        guard let counter = Self.openedCounter(report), let entry = entries[address],
              Self.isReplay(counter, after: entry.lastCounter) else { return nil }
        return Refusal(counter: counter, lastCounter: entry.lastCounter, isFirst: !entry.refusalSaid)
    }

    /// `report` heard from `address` at `now` (monotonic nanoseconds): nil when it passes (an
    /// opened reading's counter is then remembered), else the refusal, `isFirst` the first time
    /// for this advertiser.
    public mutating func screen(_ report: BroadcastReport, from address: BluetoothAddress, now: UInt64) -> Refusal? {
        guard let counter = Self.openedCounter(report) else { return nil }
        guard var entry = entries[address] else {
            if entries.count >= capacity, let oldest = entries.min(by: { $0.value.heardAt < $1.value.heardAt })?.key {
                entries[oldest] = nil
            }
            entries[address] = Entry(lastCounter: counter, heardAt: now)
            return nil
        }
        entry.heardAt = now
        defer { entries[address] = entry }
        guard Self.isReplay(counter, after: entry.lastCounter) else {
            entry.lastCounter = counter
            return nil
        }
        let refusal = Refusal(counter: counter, lastCounter: entry.lastCounter, isFirst: !entry.refusalSaid)
        entry.refusalSaid = true
        return refusal
    }

    static func isReplay(_ counter: UInt32, after last: UInt32) -> Bool {
        counter < last
    }

    /// The counter of the encrypted reading the bindkey opened in `report`, if there is one.
    static func openedCounter(_ report: BroadcastReport) -> UInt32? {
        guard let reading = report.bthome, reading.encrypted else { return nil }
        return reading.counter
    }
}
