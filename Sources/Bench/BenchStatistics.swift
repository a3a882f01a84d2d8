import BlemuCore

/// What a bench run measures: send and receive count packets and bytes over time
/// (throughput), ping measures each packet's round trip (latency percentiles), read measures
/// each Read Request's round trip to any GATT server (the central reads GAP's Device Name; the
/// peripheral's read only serves, and ends when the central disconnects).
public enum BenchScenario: String, CaseIterable, Sendable {
    case send, receive, ping, pong, read
}

/// Where the packets go: GATT (write without response one way, notifications the other) or
/// an LE credit based L2CAP channel (Vol 3, Part A, 4.22).
public enum BenchMode: String, CaseIterable, Sendable {
    case gattClient = "gatt-client", gattServer = "gatt-server", l2capClient = "l2cap-client", l2capServer = "l2cap-server"

    public var isClient: Bool { self == .gattClient || self == .l2capClient }
    public var isL2CAP: Bool { self == .l2capClient || self == .l2capServer }
}

/// Round trips in nanoseconds, kept for the percentiles: the buffer is reserved once for the
/// run's packet count, so recording allocates nothing.
public struct LatencySamples {
    public private(set) var samples: [UInt64] = []

    public init(capacity: Int = 0) { samples.reserveCapacity(capacity) }

    public mutating func record(_ nanoseconds: UInt64) { samples.append(nanoseconds) }
    public mutating func removeAll() { samples.removeAll(keepingCapacity: true) }
    public var count: Int { samples.count }

    /// Nearest-rank percentiles (p in 0...100) of what was recorded, in milliseconds.
    public func summary() -> LatencySummary? {
        guard !samples.isEmpty else { return nil }
        let sorted = samples.sorted()
        func rank(_ p: Double) -> Double {
            let index = max(0, min(sorted.count - 1, Int((p / 100 * Double(sorted.count)).rounded(.up)) - 1))
            return Double(sorted[index]) / 1e6
        }
        let mean = Double(sorted.reduce(0, &+)) / Double(sorted.count) / 1e6
        return LatencySummary(minimum: Double(sorted[0]) / 1e6, p50: rank(50), p90: rank(90), p99: rank(99),
                              maximum: Double(sorted[sorted.count - 1]) / 1e6, mean: mean)
    }
}

/// Round-trip latency in milliseconds.
public struct LatencySummary: Equatable, Sendable {
    public var minimum, p50, p90, p99, maximum, mean: Double

    public init(minimum: Double, p50: Double, p90: Double, p99: Double, maximum: Double, mean: Double) {
        self.minimum = minimum
        self.p50 = p50
        self.p90 = p90
        self.p99 = p99
        self.maximum = maximum
        self.mean = mean
    }
}

/// The outcome of one run on this end.
public struct BenchResult: Equatable, Sendable {
    public var scenario: BenchScenario
    public var mode: BenchMode
    /// SEQUENCE packets sent (send, ping) or received (receive, pong), or reads answered (read).
    public var packets: Int
    /// Their bytes as the protocol carries them (Bumble's count: the packet, without framing);
    /// for read, the bytes of the values read.
    public var bytes: Int
    /// From the first packet to the ACK (send), the first to the last (receive), the first
    /// ping to the last answer (ping).
    public var seconds: Double
    /// Packets received out of order or with a gap (receive, pong), or answers that did not
    /// match the packet waited for (ping).
    public var outOfOrder: Int
    public var latency: LatencySummary?
    /// What the link was: the ATT_MTU (GATT) or the peer's channel MTU (L2CAP).
    public var mtu: Int

    public init(scenario: BenchScenario, mode: BenchMode, packets: Int, bytes: Int, seconds: Double, outOfOrder: Int,
                latency: LatencySummary?, mtu: Int) {
        self.scenario = scenario
        self.mode = mode
        self.packets = packets
        self.bytes = bytes
        self.seconds = seconds
        self.outOfOrder = outOfOrder
        self.latency = latency
        self.mtu = mtu
    }

    /// Kilobytes (1000 bytes) a second.
    public var throughputKBps: Double { seconds > 0 ? Double(bytes) / 1000 / seconds : 0 }
    public var packetsPerSecond: Double { seconds > 0 ? Double(packets) / seconds : 0 }

    /// The result block printed at the end.
    public var text: String {
        var lines = [
            "scenario    \(scenario.rawValue) (\(mode.rawValue), MTU \(mtu))",
            "packets     \(packets)",
            "bytes       \(bytes)",
            "time        \(format(seconds, 3)) s",
            "throughput  \(format(throughputKBps, 2)) kB/s (\(format(packetsPerSecond, 1)) packets/s)",
        ]
        if outOfOrder > 0 { lines.append("out of order \(outOfOrder)") }
        if let latency {
            lines.append("latency     min \(format(latency.minimum, 2)) / p50 \(format(latency.p50, 2)) / p90 \(format(latency.p90, 2))"
                         + " / p99 \(format(latency.p99, 2)) / max \(format(latency.maximum, 2)) ms (mean \(format(latency.mean, 2)))")
        }
        return lines.joined(separator: "\n")
    }

    /// One JSON object (`--json`).
    public var json: String {
        var fields = [
            "\"scenario\":\"\(scenario.rawValue)\"", "\"mode\":\"\(mode.rawValue)\"", "\"mtu\":\(mtu)",
            "\"packets\":\(packets)", "\"bytes\":\(bytes)", "\"seconds\":\(format(seconds, 6))",
            "\"throughput_kBps\":\(format(throughputKBps, 3))", "\"packets_per_second\":\(format(packetsPerSecond, 2))",
            "\"out_of_order\":\(outOfOrder)",
        ]
        if let latency {
            fields.append("\"latency_ms\":{\"min\":\(format(latency.minimum, 3)),\"p50\":\(format(latency.p50, 3)),"
                          + "\"p90\":\(format(latency.p90, 3)),\"p99\":\(format(latency.p99, 3)),"
                          + "\"max\":\(format(latency.maximum, 3)),\"mean\":\(format(latency.mean, 3))}")
        }
        return "{" + fields.joined(separator: ",") + "}"
    }
}

/// A fixed-point decimal without Foundation: `digits` places, rounded.
func format(_ value: Double, _ digits: Int) -> String {
    guard value.isFinite else { return "0" }
    var scale = 1.0
    for _ in 0..<digits { scale *= 10 }
    let scaled = (abs(value) * scale).rounded()
    guard scaled < 9e15 else { return String(Int(value)) }
    let whole = UInt64(scaled)
    let unit = UInt64(scale)
    var text = (value < 0 && whole != 0 ? "-" : "") + String(whole / unit)
    if digits > 0 {
        let fraction = String(whole % unit)
        text += "." + String(repeating: "0", count: digits - fraction.count) + fraction
    }
    return text
}
