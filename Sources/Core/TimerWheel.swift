/// The model timers of many devices on one clock grid (issue 38, a fleet's cost that stays
/// flat): a timer of `tick` or longer falls on the nearest multiple of `tick`, and each tick
/// that has any takes one timer of the scheduler underneath, which runs them all, in the order
/// they were scheduled. A thousand thermometers each measuring every 10 s, their starts
/// spread, woke the run loop a hundred times a second; on a 100 ms grid it wakes at most ten
/// times, whatever the fleet's size. Shorter timers pass straight through, exact.
///
/// For timers whose owner reads the clock when it wakes (a model that catches up to the time
/// now): such a timer fires up to half a tick before or after its deadline. Rounding to the
/// nearest tick, not up, keeps a timer that schedules itself again from its action on the
/// grid: it does not drift by a tick each time.
public final class TimerWheel: TimerScheduling {
    public let base: TimerScheduling
    public let tick: Duration
    private let tickNanoseconds: UInt64
    /// Timers shorter than this pass straight through (ten ticks: a rounding of at most 5 %).
    private let shortestNanoseconds: UInt64

    private struct Slot {
        var ids: [UInt64] = []
        var live = 0
        var timer: TimerID?
    }
    private struct Entry {
        let tick: UInt64
        let action: () -> Void
    }
    /// The ticks that have timers, by their number since the clock's zero.
    private var slots: [UInt64: Slot] = [:]
    /// The wheel's timers not yet fired or cancelled.
    private var entries: [UInt64: Entry] = [:]
    /// The wheel's own ids have the top bit set, so they never meet the base scheduler's
    /// (passed through as they are).
    private var nextID: UInt64 = 1 << 63

    /// `tick` must be positive (a zero tick makes every timer pass through).
    public init(base: TimerScheduling, tick: Duration = .milliseconds(100)) {
        self.base = base
        self.tick = tick
        tickNanoseconds = max(1, tick.nanoseconds)
        shortestNanoseconds = tick.nanoseconds == 0 ? .max : tickNanoseconds * 10
    }

    public var nowNanoseconds: UInt64 { base.nowNanoseconds }

    /// Timers on the grid not yet fired or cancelled.
    public var pendingCount: Int { entries.count }
    /// The ticks that hold one: the base scheduler's timers the wheel has.
    public var armedTicks: Int { slots.count }

    @discardableResult
    public func schedule(after delay: Duration, _ action: @escaping () -> Void) -> TimerID {
        let nanoseconds = delay.nanoseconds
        guard nanoseconds >= shortestNanoseconds else { return base.schedule(after: delay, action) }
        let now = base.nowNanoseconds
        let (deadline, overflow) = now.addingReportingOverflow(nanoseconds)
        guard !overflow else { return base.schedule(after: delay, action) }
        let tickNumber = (deadline / tickNanoseconds) + (deadline % tickNanoseconds >= tickNanoseconds / 2 ? 1 : 0)
        let id = nextID
        nextID &+= 1
        entries[id] = Entry(tick: tickNumber, action: action)
        var slot = slots.removeValue(forKey: tickNumber) ?? Slot()
        slot.ids.append(id)
        slot.live += 1
        if slot.timer == nil {
            let at = tickNumber.multipliedReportingOverflow(by: tickNanoseconds)
            let wait = at.overflow ? nanoseconds : at.partialValue &- min(at.partialValue, now)
            slot.timer = base.schedule(after: .nanoseconds(Int64(clamping: wait))) { [weak self] in
                self?.fire(tickNumber)
            }
        }
        slots[tickNumber] = slot
        return TimerID(raw: id)
    }

    public func cancel(_ id: TimerID) {
        guard id.raw >= 1 << 63 else { return base.cancel(id) }
        guard let entry = entries.removeValue(forKey: id.raw), var slot = slots.removeValue(forKey: entry.tick) else { return }
        slot.live -= 1
        if slot.live == 0 {
            // Nothing left on this tick: the base timer goes too, so it wakes nobody.
            if let timer = slot.timer { base.cancel(timer) }
        } else {
            slots[entry.tick] = slot
        }
    }

    private func fire(_ tickNumber: UInt64) {
        guard let slot = slots.removeValue(forKey: tickNumber) else { return }
        for id in slot.ids {
            // Cancelled (perhaps by an action that ran before it): skipped.
            guard let entry = entries.removeValue(forKey: id) else { continue }
            entry.action()
        }
    }
}
