/// Timers as every layer sees them. The run loop implements this with one timerfd and a heap;
/// tests implement it with a clock they move by hand. Nothing above the run loop reads a clock
/// of its own, so the whole stack runs the same under test.

public struct TimerID: Hashable, Sendable {
    public let raw: UInt64
    public init(raw: UInt64) { self.raw = raw }
}

public protocol TimerScheduling: AnyObject {
    /// Monotonic time in nanoseconds.
    var nowNanoseconds: UInt64 { get }
    /// Runs `action` once, on the run loop, after `delay`.
    @discardableResult
    func schedule(after delay: Duration, _ action: @escaping () -> Void) -> TimerID
    /// Cancels a timer; cancelling one that fired or was cancelled already does nothing.
    func cancel(_ id: TimerID)
}

extension Duration {
    public var nanoseconds: UInt64 {
        let (seconds, attoseconds) = components
        guard seconds >= 0 else { return 0 }
        return UInt64(seconds) * 1_000_000_000 + UInt64(attoseconds / 1_000_000_000)
    }
}

/// A scheduler whose clock moves only when told: for tests and benchmarks.
public final class ManualScheduler: TimerScheduling {
    private struct Entry {
        let id: TimerID
        let deadline: UInt64
        let action: () -> Void
    }
    private var entries: [Entry] = []
    private var nextID: UInt64 = 1
    public private(set) var nowNanoseconds: UInt64 = 1_000_000_000

    public init() {}

    public var pendingCount: Int { entries.count }

    @discardableResult
    public func schedule(after delay: Duration, _ action: @escaping () -> Void) -> TimerID {
        let id = TimerID(raw: nextID)
        nextID += 1
        entries.append(Entry(id: id, deadline: nowNanoseconds + delay.nanoseconds, action: action))
        return id
    }

    public func cancel(_ id: TimerID) {
        entries.removeAll { $0.id == id }
    }

    /// Moves the clock forward, firing every timer that falls due, in deadline order.
    public func advance(by delay: Duration) {
        let target = nowNanoseconds + delay.nanoseconds
        while let index = entries.indices.min(by: { entries[$0].deadline < entries[$1].deadline }),
              entries[index].deadline <= target {
            let entry = entries.remove(at: index)
            nowNanoseconds = max(nowNanoseconds, entry.deadline)
            entry.action()
        }
        nowNanoseconds = target
    }
}
