/// A budget for log lines whose rate someone outside controls — a peer sending ACL data for an
/// unknown handle, a controller sending malformed events — so a hostile or broken peer cannot
/// fill the journal. At most `burst` lines go out per `window`; the rest are counted, and the
/// next line that goes out says how many were left out. It needs no timer of its own.
public struct LogBudget: Sendable {
    public let burst: Int
    public let window: UInt64
    private var windowStart: UInt64?
    private var used = 0
    private var leftOutSinceLastLine = 0
    /// Every line left out so far.
    public private(set) var leftOutTotal = 0

    public init(burst: Int = 10, window: Duration = .seconds(60)) {
        self.burst = max(1, burst)
        self.window = window.nanoseconds
    }

    /// Whether a line may go out at `now`: nil when it is left out, else how many were left
    /// out before it (for the line to say so).
    public mutating func take(now: UInt64) -> Int? {
        if let start = windowStart, now &- start < window {
            guard used < burst else {
                leftOutSinceLastLine += 1
                leftOutTotal += 1
                return nil
            }
        } else {
            windowStart = now
            used = 0
        }
        used += 1
        defer { leftOutSinceLastLine = 0 }
        return leftOutSinceLastLine
    }

    /// The suffix a line carries when others were left out before it.
    public static func note(_ leftOut: Int) -> String {
        leftOut == 0 ? "" : " (\(leftOut) similar line\(leftOut == 1 ? "" : "s") left out)"
    }
}
