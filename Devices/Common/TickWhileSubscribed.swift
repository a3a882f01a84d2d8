import BlemuCore
import BlemuGATT
import BlemuDevice

/// The clock of a simulated world that runs only while somebody listens: a timer every
/// `period` while at least one central is subscribed (notifications or indications) to one of
/// the watched characteristics, and no timer otherwise, so an idle device makes no wakeups.
/// Between ticks a model computes its state from the time elapsed, as a read does.
///
/// The device calls `start(context:)`, `stop()` and `subscriptionChanged(_:)`, and sets
/// `onStart` (the first listener came: catch the model up, take a baseline) and `onTick`.
public final class TickWhileSubscribed {
    public let period: Duration
    public let watched: [Characteristic]
    /// Runs when the first listener subscribes, before the first tick is scheduled.
    public var onStart: () -> Void = {}
    /// Runs every `period` while anybody listens.
    public var onTick: () -> Void = {}
    private weak var context: DeviceContext?
    private var timer: TimerID?

    public init(every period: Duration, watching characteristics: [Characteristic]) {
        self.period = period
        watched = characteristics
    }

    public func start(context: DeviceContext) { self.context = context }

    public func stop() {
        if let timer { context?.scheduler.cancel(timer) }
        timer = nil
    }

    public var isTicking: Bool { timer != nil }

    /// Whether any central listens to any watched characteristic now.
    public var anyoneListens: Bool {
        guard let context else { return false }
        return watched.contains {
            context.isSubscribed($0, peer: nil, indications: false) || context.isSubscribed($0, peer: nil, indications: true)
        }
    }

    /// Starts or stops the ticks after a CCCD change; characteristics it does not watch are
    /// ignored, so a device may pass every change on.
    public func subscriptionChanged(_ characteristic: Characteristic) {
        guard watched.contains(where: { $0 === characteristic }) else { return }
        if anyoneListens {
            guard timer == nil else { return }
            onStart()
            schedule()
        } else {
            stop()
        }
    }

    private func schedule() {
        timer = context?.scheduler.schedule(after: period) { [weak self] in
            guard let self else { return }
            self.timer = nil
            self.onTick()
            // A tick may have stopped the world (or a listener may have left meanwhile).
            if self.timer == nil && self.anyoneListens { self.schedule() }
        }
    }
}
