import BlemuCore

/// Which advertising reports `blemu scan` prints a line for: an advertiser heard for the first
/// time, one whose advertising changed (name, services, data), and — only when asked
/// (`--json`) — one whose RSSI moved by `rssiStep` dB or more, at most once per `rssiInterval`.
/// RSSI alone moves with every packet: in text mode it never makes a line.
///
/// It remembers what it printed for at most `capacity` advertisers, like `AdvertiserTable`:
/// when full, the one heard longest ago makes room (it is printed as new if heard again), so
/// a scan that runs for days next to busy or address-changing advertisers stays flat.
public struct ScanLines {
    public enum Update: String, Sendable {
        case new, changed, rssi
    }

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
    }
    private var printed: [BluetoothAddress: Printed] = [:]

    public init(rssiUpdates: Bool, capacity: Int = ScanLines.defaultCapacity) {
        self.rssiUpdates = rssiUpdates
        self.capacity = max(1, capacity)
    }

    /// How many advertisers are remembered.
    public var count: Int { printed.count }

    /// The line `advertisement` (as `change` left it) makes, or nil for none.
    public mutating func update(for advertisement: Advertisement, change: AdvertiserTable.Change) -> Update? {
        let now = advertisement.lastSeen
        guard var previous = printed[advertisement.address] else {
            if printed.count >= capacity, let oldest = printed.min(by: { $0.value.heardAt < $1.value.heardAt })?.key {
                printed[oldest] = nil
            }
            printed[advertisement.address] = Printed(rssi: advertisement.rssi, printedAt: now, heardAt: now)
            return .new
        }
        previous.heardAt = now
        defer { printed[advertisement.address] = previous }
        if change == .rssi {
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
        return .changed
    }
}
