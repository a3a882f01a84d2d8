/// An action run at most once per `gap`, for work asked for far more often than its result can
/// change anything (systemd's STATUS= line, asked for after every HCI event: a fleet's start is
/// thousands of events, and each line is built over every device). A request within `gap` of the
/// last run is put off to the end of the gap, once however many requests come, so the last
/// request is never lost; a request after a quiet gap runs at once. Nothing is scheduled while no
/// request comes: an idle process makes no wakeups for it.
public final class SpacedAction {
    private let scheduler: TimerScheduling
    public let gap: Duration
    private let action: () -> Void
    private var lastRun: UInt64?
    private var pending: TimerID?

    public init(scheduler: TimerScheduling, gap: Duration, action: @escaping () -> Void) {
        self.scheduler = scheduler
        self.gap = gap
        self.action = action
    }

    /// Runs the action now, or at the end of the gap since its last run.
    public func request() {
        guard pending == nil else { return }
        let now = scheduler.nowNanoseconds
        if let lastRun, now &- lastRun < gap.nanoseconds {
            pending = scheduler.schedule(after: .nanoseconds(Int64(gap.nanoseconds - (now &- lastRun)))) { [weak self] in
                guard let self else { return }
                self.pending = nil
                self.run()
            }
            return
        }
        run()
    }

    /// Forgets a put-off request.
    public func cancel() {
        if let pending { scheduler.cancel(pending) }
        pending = nil
    }

    private func run() {
        lastRun = scheduler.nowNanoseconds
        action()
    }
}
