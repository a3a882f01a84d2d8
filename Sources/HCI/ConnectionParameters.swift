import BlemuCore

/// LE connection parameters as a peripheral requests them: with the L2CAP Connection Parameter
/// Update Request (Vol 3, Part A, 4.20), in the Peripheral Preferred Connection Parameters
/// characteristic (Vol 3, Part C, 12.3), or with HCI LE Connection Update (Vol 4, Part E, 7.8.18).
public struct ConnectionParameters: Sendable, Equatable, CustomStringConvertible {
    /// Connection interval unit: 1.25 ms. Supervision timeout unit: 10 ms.
    public static let intervalUnitMs = 1.25
    public static let timeoutUnitMs = 10.0

    /// Minimum connection interval, units of 1.25 ms.
    public var intervalMin: UInt16
    /// Maximum connection interval, units of 1.25 ms.
    public var intervalMax: UInt16
    /// Connection events the peripheral may skip when it has nothing to send.
    public var peripheralLatency: UInt16
    /// Supervision timeout, units of 10 ms.
    public var supervisionTimeout: UInt16

    public init(intervalMin: UInt16, intervalMax: UInt16, peripheralLatency: UInt16, supervisionTimeout: UInt16) {
        self.intervalMin = intervalMin
        self.intervalMax = intervalMax
        self.peripheralLatency = peripheralLatency
        self.supervisionTimeout = supervisionTimeout
    }

    /// From milliseconds; nil unless each value is a finite, whole number of its unit (1.25 ms for
    /// intervals, 10 ms for the timeout) that fits 16 bits. No silent rounding: a config that asks
    /// for 16 ms gets told, not 16.25 ms.
    public init?(intervalMinMs: Double, intervalMaxMs: Double, peripheralLatency: UInt16 = 0,
                 supervisionTimeoutMs: Double) {
        guard let min = Self.units(intervalMinMs, of: Self.intervalUnitMs),
              let max = Self.units(intervalMaxMs, of: Self.intervalUnitMs),
              let timeout = Self.units(supervisionTimeoutMs, of: Self.timeoutUnitMs) else { return nil }
        self.init(intervalMin: min, intervalMax: max, peripheralLatency: peripheralLatency,
                  supervisionTimeout: timeout)
    }

    public var intervalMinMs: Double { Double(intervalMin) * Self.intervalUnitMs }
    public var intervalMaxMs: Double { Double(intervalMax) * Self.intervalUnitMs }
    public var supervisionTimeoutMs: Double { Double(supervisionTimeout) * Self.timeoutUnitMs }

    /// Defaults that pass both the Core rules and Apple's guidelines, for a sensor-like device:
    /// - interval 30–50 ms: the minimum is a multiple of 15 ms and the maximum 20 ms above it, so a
    ///   phone may pick 30 or 45 ms; fast enough that a write feels instant, slow enough to save power;
    /// - peripheral latency 2: an idle sensor may sleep through two events (at most 150 ms added to
    ///   a central's request at the 50 ms maximum);
    /// - supervision timeout 4 s: inside Apple's 2–6 s, and far above 3 × 50 ms × (2 + 1) = 450 ms,
    ///   so a few lost packets do not drop the link.
    public static let recommended = ConnectionParameters(intervalMin: 24, intervalMax: 40,
                                                         peripheralLatency: 2, supervisionTimeout: 400)

    // MARK: - Core rules

    /// A rule of Vol 4, Part E, 7.8.18 (LE Connection Update) and Vol 3, Part A, 4.20
    /// (L2CAP Connection Parameter Update Request).
    public enum CoreRule: Sendable, Equatable, CaseIterable {
        /// Connection_Interval_Min in 0x0006...0x0C80 (7.5 ms to 4 s).
        case intervalMinRange
        /// Connection_Interval_Max in 0x0006...0x0C80.
        case intervalMaxRange
        /// Connection_Interval_Min <= Connection_Interval_Max.
        case intervalMinNotAboveMax
        /// Max_Latency in 0x0000...0x01F3.
        case latencyRange
        /// Supervision_Timeout in 0x000A...0x0C80 (100 ms to 32 s).
        case supervisionTimeoutRange
        /// Supervision_Timeout (ms) > (1 + Max_Latency) * Connection_Interval_Max (ms) * 2.
        case supervisionTimeoutLongEnough
    }

    public var violatedCoreRules: [CoreRule] {
        var rules: [CoreRule] = []
        if !(0x0006...0x0C80).contains(intervalMin) { rules.append(.intervalMinRange) }
        if !(0x0006...0x0C80).contains(intervalMax) { rules.append(.intervalMaxRange) }
        if intervalMin > intervalMax { rules.append(.intervalMinNotAboveMax) }
        if peripheralLatency > 0x01F3 { rules.append(.latencyRange) }
        if !(0x000A...0x0C80).contains(supervisionTimeout) { rules.append(.supervisionTimeoutRange) }
        // 10 ms * T > 2 * 1.25 ms * Imax * (1 + L)  <=>  4 * T > Imax * (1 + L); in Int, no overflow.
        if 4 * Int(supervisionTimeout) <= Int(intervalMax) * (1 + Int(peripheralLatency)) {
            rules.append(.supervisionTimeoutLongEnough)
        }
        return rules
    }

    /// Broken Core rules, one human-readable line each; empty when the parameters are legal.
    public var coreViolations: [String] { violatedCoreRules.map(message(for:)) }

    public func message(for rule: CoreRule) -> String {
        switch rule {
        case .intervalMinRange:
            return "Interval Min \(Self.ms(intervalMinMs)) ms is outside 7.5 ms...4000 ms (Vol 4, Part E, 7.8.18)"
        case .intervalMaxRange:
            return "Interval Max \(Self.ms(intervalMaxMs)) ms is outside 7.5 ms...4000 ms (Vol 4, Part E, 7.8.18)"
        case .intervalMinNotAboveMax:
            return "Interval Min \(Self.ms(intervalMinMs)) ms is above Interval Max \(Self.ms(intervalMaxMs)) ms "
                + "(Vol 4, Part E, 7.8.18)"
        case .latencyRange:
            return "Peripheral Latency \(peripheralLatency) is above 499 (Vol 4, Part E, 7.8.18)"
        case .supervisionTimeoutRange:
            return "Supervision Timeout \(Self.ms(supervisionTimeoutMs)) ms is outside 100 ms...32000 ms "
                + "(Vol 4, Part E, 7.8.18)"
        case .supervisionTimeoutLongEnough:
            return "Supervision Timeout \(Self.ms(supervisionTimeoutMs)) ms must be above (1 + Peripheral Latency) "
                + "× Interval Max × 2 = \(Self.ms(Double(1 + Int(peripheralLatency)) * intervalMaxMs * 2)) ms "
                + "(Vol 4, Part E, 7.8.18)"
        }
    }

    // MARK: - Apple's guidelines

    /// A rule of Apple's Accessory Design Guidelines for Bluetooth LE connection parameters. iOS
    /// rejects a Connection Parameter Update Request that breaks one.
    public enum AppleRule: Sendable, Equatable, CaseIterable {
        /// Interval Min >= 15 ms.
        case intervalMinAtLeast15ms
        /// Interval Min is a multiple of 15 ms.
        case intervalMinMultipleOf15ms
        /// Interval Max >= Interval Min + 15 ms.
        case intervalMaxAtLeastMinPlus15ms
        /// Peripheral Latency <= 30.
        case latencyAtMost30
        /// 2 s <= Supervision Timeout <= 6 s.
        case supervisionTimeout2To6s
        /// Interval Max * (Peripheral Latency + 1) <= 2 s.
        case latencyWindowAtMost2s
        /// Interval Max * (Peripheral Latency + 1) * 3 < Supervision Timeout.
        case supervisionTimeoutAboveThreeLatencyWindows
    }

    public var violatedAppleRules: [AppleRule] {
        var rules: [AppleRule] = []
        let min = Int(intervalMin), max = Int(intervalMax), timeout = Int(supervisionTimeout)
        let latencyWindow = max * (Int(peripheralLatency) + 1)   // units of 1.25 ms
        // 15 ms = 12 units of 1.25 ms; 2 s = 200 and 6 s = 600 units of 10 ms.
        if min < 12 { rules.append(.intervalMinAtLeast15ms) }
        if min % 12 != 0 { rules.append(.intervalMinMultipleOf15ms) }
        if max < min + 12 { rules.append(.intervalMaxAtLeastMinPlus15ms) }
        if peripheralLatency > 30 { rules.append(.latencyAtMost30) }
        if !(200...600).contains(timeout) { rules.append(.supervisionTimeout2To6s) }
        // 1.25 ms * W <= 2000 ms  <=>  W <= 1600.
        if latencyWindow > 1600 { rules.append(.latencyWindowAtMost2s) }
        // 3 * 1.25 ms * W < 10 ms * T  <=>  3 * W < 8 * T.
        if 3 * latencyWindow >= 8 * timeout { rules.append(.supervisionTimeoutAboveThreeLatencyWindows) }
        return rules
    }

    /// Broken Apple guideline rules, one human-readable line each; empty when iOS will accept them.
    public var appleGuidelineViolations: [String] { violatedAppleRules.map(message(for:)) }

    public func message(for rule: AppleRule) -> String {
        let window = intervalMaxMs * Double(Int(peripheralLatency) + 1)
        let suffix = " (Apple Accessory Design Guidelines)"
        switch rule {
        case .intervalMinAtLeast15ms:
            return "Interval Min \(Self.ms(intervalMinMs)) ms is below 15 ms" + suffix
        case .intervalMinMultipleOf15ms:
            return "Interval Min \(Self.ms(intervalMinMs)) ms is not a multiple of 15 ms" + suffix
        case .intervalMaxAtLeastMinPlus15ms:
            return "Interval Max \(Self.ms(intervalMaxMs)) ms is below Interval Min + 15 ms = "
                + "\(Self.ms(intervalMinMs + 15)) ms" + suffix
        case .latencyAtMost30:
            return "Peripheral Latency \(peripheralLatency) is above 30" + suffix
        case .supervisionTimeout2To6s:
            return "Supervision Timeout \(Self.ms(supervisionTimeoutMs)) ms is outside 2000 ms...6000 ms" + suffix
        case .latencyWindowAtMost2s:
            return "Interval Max × (Peripheral Latency + 1) = \(Self.ms(window)) ms is above 2000 ms" + suffix
        case .supervisionTimeoutAboveThreeLatencyWindows:
            return "Supervision Timeout \(Self.ms(supervisionTimeoutMs)) ms is not above Interval Max × "
                + "(Peripheral Latency + 1) × 3 = \(Self.ms(window * 3)) ms" + suffix
        }
    }

    // MARK: - Wire form

    /// The 8 bytes shared by the L2CAP Connection Parameter Update Request (Vol 3, Part A, 4.20) and
    /// the Peripheral Preferred Connection Parameters value (Vol 3, Part C, 12.3): interval min,
    /// interval max, latency, timeout, each uint16 little-endian.
    public var encoded: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(8)
        out.appendLE(intervalMin)
        out.appendLE(intervalMax)
        out.appendLE(peripheralLatency)
        out.appendLE(supervisionTimeout)
        return out
    }

    /// Decodes the 8-byte form of `encoded`; the values are not validated (see the rule lists).
    public init(decoding bytes: ArraySlice<UInt8>) throws(DecodeError) {
        var reader = ByteReader(bytes)
        self.init(intervalMin: try reader.u16(), intervalMax: try reader.u16(),
                  peripheralLatency: try reader.u16(), supervisionTimeout: try reader.u16())
        try reader.expectEnd("connection parameters")
    }

    public var description: String {
        "interval \(Self.ms(intervalMinMs))–\(Self.ms(intervalMaxMs)) ms, latency \(peripheralLatency), "
            + "timeout \(Self.ms(supervisionTimeoutMs)) ms"
    }

    // MARK: - Helpers

    /// `value` / `unit` when that is a whole number fitting 16 bits.
    static func units(_ value: Double, of unit: Double) -> UInt16? {
        guard value.isFinite, value >= 0 else { return nil }
        let quotient = value / unit
        guard quotient == quotient.rounded(), quotient <= Double(UInt16.max) else { return nil }
        return UInt16(quotient)
    }

    /// "15", "7.5", "18.75": milliseconds without a trailing ".0".
    public static func ms(_ value: Double) -> String {
        if value == value.rounded(), abs(value) < 1e15 { return String(Int64(value)) }
        return String(value)
    }
}

/// When and how often to advertise (legacy advertising, LE Set Advertising Parameters,
/// Vol 4, Part E, 7.8.5), following Apple's Accessory Design Guidelines: advertise every 20 ms
/// for the first 30 s after advertising starts or a connection ends, then at one of Apple's
/// longer intervals, which were chosen to be found quickly by iOS's scan windows.
///
/// The host restarts the fast phase itself (on start and on disconnect); this type only holds the
/// values and says which interval applies.
public struct AdvertisingTiming: Sendable, Equatable {
    /// Advertising interval unit: 0.625 ms.
    public static let unitMs = 0.625
    /// 20 ms, Apple's recommended fast interval.
    public static let defaultFastInterval: UInt16 = 32
    public static let defaultFastDuration: Duration = .seconds(30)
    /// 152.5 ms.
    public static let defaultSlowInterval: UInt16 = 244
    /// Apple's longer intervals: 152.5, 211.25, 318.75, 417.5, 546.25, 760, 852.5, 1022.5, 1285 ms,
    /// in units of 0.625 ms. A slow interval must be one of them.
    public static let appleSlowIntervals: [UInt16] = [244, 338, 510, 668, 874, 1216, 1364, 1636, 2056]
    /// Advertising_Interval range (Vol 4, Part E, 7.8.5): 0x0020...0x4000, 20 ms to 10.24 s.
    public static let hciIntervalRange: ClosedRange<UInt16> = 0x0020...0x4000

    /// Units of 0.625 ms.
    public var fastInterval: UInt16
    public var fastDuration: Duration
    /// Units of 0.625 ms.
    public var slowInterval: UInt16

    public init(fastInterval: UInt16 = AdvertisingTiming.defaultFastInterval,
                fastDuration: Duration = AdvertisingTiming.defaultFastDuration,
                slowInterval: UInt16 = AdvertisingTiming.defaultSlowInterval) {
        self.fastInterval = fastInterval
        self.fastDuration = fastDuration
        self.slowInterval = slowInterval
    }

    /// The defaults with the slow interval given in milliseconds; nil unless it is one of Apple's
    /// longer intervals (e.g. 211.25).
    public init?(slowIntervalMs: Double) {
        guard let units = Self.units(milliseconds: slowIntervalMs), Self.appleSlowIntervals.contains(units) else {
            return nil
        }
        self.init(slowInterval: units)
    }

    /// Milliseconds to units of 0.625 ms; nil unless a whole number of units fitting 16 bits.
    public static func units(milliseconds: Double) -> UInt16? {
        ConnectionParameters.units(milliseconds, of: unitMs)
    }

    public var fastIntervalMs: Double { Double(fastInterval) * Self.unitMs }
    public var slowIntervalMs: Double { Double(slowInterval) * Self.unitMs }

    /// The interval to advertise at, `elapsed` after advertising started or the last disconnect.
    public func interval(after elapsed: Duration) -> UInt16 {
        elapsed < fastDuration ? fastInterval : slowInterval
    }

    /// Why an override cannot be used, one human-readable line each; empty when it can.
    public var violations: [String] {
        var out: [String] = []
        if !Self.hciIntervalRange.contains(fastInterval) {
            out.append("fast advertising interval \(ConnectionParameters.ms(fastIntervalMs)) ms is outside "
                       + "20 ms...10240 ms (Vol 4, Part E, 7.8.5)")
        }
        if !Self.appleSlowIntervals.contains(slowInterval) {
            let allowed = Self.appleSlowIntervals.map { ConnectionParameters.ms(Double($0) * Self.unitMs) }
            out.append("slow advertising interval \(ConnectionParameters.ms(slowIntervalMs)) ms is not one of "
                       + "Apple's: \(allowed.joined(separator: ", ")) ms")
        }
        if fastInterval > slowInterval {
            out.append("fast advertising interval \(ConnectionParameters.ms(fastIntervalMs)) ms is slower than "
                       + "the slow one, \(ConnectionParameters.ms(slowIntervalMs)) ms")
        }
        if fastDuration < Self.defaultFastDuration {
            out.append("fast advertising lasts \(fastDuration); Apple asks for at least 30 seconds")
        }
        return out
    }
}
