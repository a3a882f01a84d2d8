import Logging

/// A budget for log lines whose rate someone outside controls — a peer sending ACL data for an
/// unknown handle, a controller sending malformed events — so a hostile or broken peer cannot
/// fill the journal. At most `burst` lines go out per `window`; the rest are counted, and the
/// next line that goes out says how many were left out. It needs no timer of its own.
///
/// One flood is counted by one budget only: a log handler that budgets floods itself (the
/// journal's, per kind of entry and peer, with a summary when a kind goes quiet) says so by
/// answering `handlerBudgetsFloods`, and `take(now:for:)` then lets every line through to it
/// uncounted, so the same lines are not left out and counted twice, by two rules.
public struct LogBudget: Sendable {
    /// The metadata key a log handler answers (without it being metadata: it never appears in
    /// an entry) when it budgets floods itself.
    public static let handlerBudgetsFloods = "blemu-handler-budgets-floods"

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

    /// `take(now:)` for a line `logger` writes: every line goes out, uncounted, when its
    /// handler budgets floods itself (`handlerBudgetsFloods`).
    public mutating func take(now: UInt64, for logger: Logger) -> Int? {
        logger[metadataKey: Self.handlerBudgetsFloods] != nil ? 0 : take(now: now)
    }

    /// The suffix a line carries when others were left out before it.
    public static func note(_ leftOut: Int) -> String {
        leftOut == 0 ? "" : " (\(leftOut) similar line\(leftOut == 1 ? "" : "s") left out)"
    }
}
