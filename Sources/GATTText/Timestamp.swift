import Glibc

/// A wall-clock instant, for the time a notification came: local HH:MM:SS.mmm for people,
/// ISO 8601 UTC for scripts.
public struct Timestamp: Equatable, Sendable {
    public var seconds: Int
    public var nanoseconds: Int

    public init(seconds: Int, nanoseconds: Int) {
        self.seconds = seconds
        self.nanoseconds = nanoseconds
    }

    public static func now() -> Timestamp {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return Timestamp(seconds: now.tv_sec, nanoseconds: now.tv_nsec)
    }

    private func fields(local: Bool) -> tm {
        var time = time_t(seconds)
        var parts = tm()
        if local { localtime_r(&time, &parts) } else { gmtime_r(&time, &parts) }
        return parts
    }

    private static func pad(_ value: Int, _ width: Int) -> String {
        let digits = String(value)
        return String(repeating: "0", count: max(0, width - digits.count)) + digits
    }

    private var milliseconds: String { Self.pad(nanoseconds / 1_000_000, 3) }

    /// "15:04:05.123", local time.
    public var clock: String {
        let t = fields(local: true)
        return "\(Self.pad(Int(t.tm_hour), 2)):\(Self.pad(Int(t.tm_min), 2)):\(Self.pad(Int(t.tm_sec), 2)).\(milliseconds)"
    }

    /// "2026-11-26T15:04:05.123Z".
    public var iso8601: String {
        let t = fields(local: false)
        return "\(Self.pad(Int(t.tm_year) + 1900, 4))-\(Self.pad(Int(t.tm_mon) + 1, 2))-\(Self.pad(Int(t.tm_mday), 2))T"
            + "\(Self.pad(Int(t.tm_hour), 2)):\(Self.pad(Int(t.tm_min), 2)):\(Self.pad(Int(t.tm_sec), 2)).\(milliseconds)Z"
    }
}
