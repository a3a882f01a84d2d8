import BlemuCore

/// Which advertising reports `blemu scan` prints a line for: an advertiser heard for the first
/// time, one whose advertising changed (name, services, appearance, manufacturer data), one with
/// a new reading (what the observer decoded from its service or manufacturer data changed: a
/// BTHome reading, an Eddystone frame; given as `Reading` fingerprints, since `AdvertiserTable`
/// counts service data alone as no change), and — only when asked (`--json`) — one whose RSSI
/// moved by `rssiStep` dB or more, at most once per `rssiInterval`. RSSI alone moves with every
/// packet: in text mode it never makes a line.
///
/// It remembers what it printed for at most `capacity` advertisers, like `AdvertiserTable`:
/// when full, the one heard longest ago makes room (it is printed as new if heard again), so
/// a scan that runs for days next to busy or address-changing advertisers stays flat.
public struct ScanLines {
    public enum Update: String, Sendable {
        case new, changed, rssi, reading
    }

    /// What the observer decoded from one kind of broadcast in an advertisement (`kind`: a BTHome
    /// reading, one Eddystone frame type, ...), as a fingerprint. Each kind is compared with the
    /// last one heard of that kind, so frames that take turns (Eddystone UID, URL, TLM) are not
    /// news each time, and a value that comes back (21.5, 22.0, 21.5 °C) is.
    public struct Reading: Equatable, Sendable {
        public var kind: UInt8
        public var fingerprint: Int
        public init(kind: UInt8, fingerprint: Int) {
            self.kind = kind
            self.fingerprint = fingerprint
        }
    }

    /// The kinds remembered per advertiser (the observer gives fewer): the bound of `Reading`s.
    public static let maximumReadingKinds = 8

    public static let defaultCapacity = AdvertiserTable.defaultCapacity
    /// An RSSI change this large makes a line (when `rssiUpdates`)...
    public static let rssiStep = 3
    /// ...at most this often per advertiser.
    public static let rssiInterval: UInt64 = 1_000_000_000

    public let capacity: Int
    public let rssiUpdates: Bool
    private struct Printed {
        var rssi: Int8?
        var printedAt: UInt64
        var heardAt: UInt64
        /// The last fingerprint heard of each kind.
        var readings: [Reading] = []

        /// Remembers `heard`; whether one of them is a kind not heard before or a new fingerprint.
        mutating func remember(_ heard: [Reading]) -> Bool {
            var news = false
            for reading in heard {
                if let index = readings.firstIndex(where: { $0.kind == reading.kind }) {
                    if readings[index].fingerprint != reading.fingerprint { news = true }
                    readings[index] = reading
                } else {
                    news = true
                    if readings.count >= ScanLines.maximumReadingKinds { readings.removeFirst() }
                    readings.append(reading)
                }
            }
            return news
        }
    }
    private var printed: [BluetoothAddress: Printed] = [:]

    public init(rssiUpdates: Bool, capacity: Int = ScanLines.defaultCapacity) {
        self.rssiUpdates = rssiUpdates
        self.capacity = max(1, capacity)
    }

    /// How many advertisers are remembered.
    public var count: Int { printed.count }

    /// How many kinds of reading are remembered for `address`.
    func readingKinds(of address: BluetoothAddress) -> Int { printed[address]?.readings.count ?? 0 }

    /// The line `advertisement` (as `change` left it, with what the observer decoded from it as
    /// `readings`) makes, or nil for none.
    public mutating func update(for advertisement: Advertisement, change: AdvertiserTable.Change,
                                readings: [Reading] = []) -> Update? {
        let now = advertisement.lastSeen
        guard var previous = printed[advertisement.address] else {
            if printed.count >= capacity, let oldest = printed.min(by: { $0.value.heardAt < $1.value.heardAt })?.key {
                printed[oldest] = nil
            }
            var first = Printed(rssi: advertisement.rssi, printedAt: now, heardAt: now)
            _ = first.remember(readings)
            printed[advertisement.address] = first
            return .new
        }
        previous.heardAt = now
        defer { printed[advertisement.address] = previous }
        let newReading = previous.remember(readings)
        if change == .rssi, !newReading {
            guard rssiUpdates, let rssi = advertisement.rssi else { return nil }
            // Unknown before: a first measurement is worth a line; else only a real move.
            let moved = previous.rssi.map { abs(Int(rssi) - Int($0)) } ?? Int.max
            guard moved >= Self.rssiStep, now &- previous.printedAt >= Self.rssiInterval else { return nil }
            previous.rssi = rssi
            previous.printedAt = now
            return .rssi
        }
        previous.rssi = advertisement.rssi ?? previous.rssi
        previous.printedAt = now
        return change == .rssi ? .reading : .changed
    }
}
