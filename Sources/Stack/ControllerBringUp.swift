import BlemuCore

/// Opens a run's controller connections a few at a time, each no sooner than the earliest start
/// of the devices on it (issue 38, Docs/REFERENCE.md "Fleets"). A fleet of a thousand beacons and a
/// hundred sensors is about 160 connections; opened all in one instant, rootcanal answers their
/// HCI Resets late (past `HCIHost.initializationCommandTimeout`), and a controller whose initialization times out
/// starts over a second later, so the same burst came back again and again before every one was
/// up. Here at most `window` controllers are being brought up at once; the next opens when one is
/// ready (its HCI initialization done), or when one has taken `slotTimeout` (it goes on retrying
/// on its own, but no longer holds the others back). A fleet's `start_spread_s` spreads the
/// openings too: a connection whose devices all start late opens when the first of them starts.
///
/// Nothing here runs on the packet path: it only decides when each `start` is called.
public final class ControllerBringUp {
    /// How many controllers are brought up at once.
    public static let defaultWindow = 8
    /// How long one controller may hold its place in the window.
    public static let defaultSlotTimeout: Duration = .seconds(10)

    private struct Pending {
        let index: Int
        let notBefore: UInt64
        let start: () -> Void
    }

    private let scheduler: TimerScheduling
    public let window: Int
    public let slotTimeout: Duration
    /// Not yet opened, by `notBefore` (and the order they were added among equal ones).
    private var pending: [Pending] = []
    private var nextPending = 0
    /// Opened and not yet ready: each one's slot timer.
    private var opening: [Int: TimerID] = [:]
    private var count = 0
    private var beganAt: UInt64?
    private var dueTimer: TimerID?
    private var cancelled = false

    public init(scheduler: TimerScheduling, window: Int = ControllerBringUp.defaultWindow,
                slotTimeout: Duration = ControllerBringUp.defaultSlotTimeout) {
        self.scheduler = scheduler
        self.window = max(1, window)
        self.slotTimeout = slotTimeout
    }

    /// Adds a controller to open `notBefore` after `begin()` at the earliest; returns its index,
    /// the one `ready(_:)` takes. Before `begin()` only.
    @discardableResult
    public func add(notBefore: Duration = .zero, start: @escaping () -> Void) -> Int {
        let index = count
        count += 1
        pending.append(Pending(index: index, notBefore: notBefore.nanoseconds, start: start))
        return index
    }

    /// How many were added and are not yet opened.
    public var waiting: Int { pending.count - nextPending }
    /// How many are opened and not yet ready (nor past their slot timeout).
    public var inWindow: Int { opening.count }
    /// When the last one opens at the earliest, after `begin()`.
    public var lastNotBefore: Duration { .nanoseconds(Int64(pending.map(\.notBefore).max() ?? 0)) }

    /// Opens what may open now; the rest as slots free up and their times come.
    public func begin() {
        guard beganAt == nil else { return }
        beganAt = scheduler.nowNanoseconds
        // Stable: equal times keep the order they were added in.
        pending = pending.enumerated().sorted { ($0.element.notBefore, $0.offset) < ($1.element.notBefore, $1.offset) }.map(\.element)
        openWhatMay()
    }

    /// Controller `index` is ready: its place goes to the next one. Again, or for one that is not
    /// opening (a later re-initialization, one past its slot timeout), it does nothing.
    public func ready(_ index: Int) {
        guard let timer = opening.removeValue(forKey: index) else { return }
        scheduler.cancel(timer)
        openWhatMay()
    }

    /// Opens nothing more (the run is stopping).
    public func cancel() {
        cancelled = true
        for timer in opening.values { scheduler.cancel(timer) }
        opening.removeAll()
        if let dueTimer { scheduler.cancel(dueTimer) }
        dueTimer = nil
    }

    private func openWhatMay() {
        guard !cancelled, let beganAt else { return }
        let elapsed = scheduler.nowNanoseconds &- beganAt
        while opening.count < window, nextPending < pending.count, pending[nextPending].notBefore <= elapsed {
            let entry = pending[nextPending]
            nextPending += 1
            opening[entry.index] = scheduler.schedule(after: slotTimeout) { [weak self] in
                guard let self, self.opening.removeValue(forKey: entry.index) != nil else { return }
                self.openWhatMay()
            }
            entry.start()
            if cancelled { return }
        }
        // The next one waits for its time (a slot may be free before it comes).
        if let dueTimer { scheduler.cancel(dueTimer) }
        dueTimer = nil
        guard opening.count < window, nextPending < pending.count else { return }
        let wait = pending[nextPending].notBefore - elapsed
        dueTimer = scheduler.schedule(after: .nanoseconds(Int64(wait))) { [weak self] in
            self?.dueTimer = nil
            self?.openWhatMay()
        }
    }
}
