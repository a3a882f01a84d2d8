import BlemuCore
import BlemuGATT
import BlemuDevice

/// Battery Service 0x180F (BAS 1.0): Battery Level 0x2A19, uint8 percent, read and notify.
/// The level is a function of time (a slow linear drain), so reading it needs no timer; a
/// timer runs only while a central is subscribed, to notify each change.
public final class BatteryService {
    public let level: Characteristic
    public let service: Service
    /// Percent lost per hour.
    public let drainPerHour: Double
    /// The `battery` setting every battery-powered device offers.
    public var setting: DeviceSetting {
        .integer("battery", "battery level, %, 0 to 100 (then draining \(Self.format(drainPerHour)) % an hour; --exact: held there)",
                 in: 0...100, moves: true, hold: { [weak self] percent in self?.setLevel(Double(percent), held: true) }) {
            [weak self] percent in self?.setLevel(Double(percent))
        }
    }

    private var startLevel: Double
    /// Set with `--exact`: the level does not drain until it is set again.
    public private(set) var isHeld = false
    private weak var context: DeviceContext?
    private var startNanoseconds: UInt64 = 0
    private let ticker: TickWhileSubscribed
    private let notified: SteppedValue

    public init(startLevel: Double = 100, drainPerHour: Double = 2) {
        self.startLevel = startLevel
        self.drainPerHour = drainPerHour
        // Characteristic Presentation Format: uint8 (0x04), unit percentage (0x27AD).
        let level = Characteristic(0x2A19, properties: [.read, .notify], length: .fixed(1),
                                   descriptors: [.presentationFormat(format: 0x04, unit: 0x27AD)])
        self.level = level
        service = Service(0x180F) { level }
        ticker = TickWhileSubscribed(every: .seconds(60), watching: [level])
        notified = SteppedValue(level, step: 1) { [UInt8($0)] }
        level.onRead = { [weak self] _, value in
            guard let self else { return .unlikelyError }
            value.append(self.currentLevel)
            return nil
        }
        // A new listener hears the level at once, then each whole percent it loses.
        ticker.onStart = { [weak self] in
            self?.notified.notified.baseline(nil)
            self?.publish()
        }
        ticker.onTick = { [weak self] in self?.publish() }
    }

    public func start(context: DeviceContext) {
        self.context = context
        startNanoseconds = context.scheduler.nowNanoseconds
        ticker.start(context: context)
    }

    public func stop() { ticker.stop() }

    public var currentLevel: UInt8 {
        guard let context, !isHeld else { return UInt8(startLevel) }
        let hours = Double(context.scheduler.nowNanoseconds &- startNanoseconds) / 3.6e12
        // It drains to 1 % and stays there; a battery set to 0 % stays at 0. A level is shown
        // until it is wholly drained (rounded up), so a level just set reads back as set, and
        // 1 % goes every 1 / drainPerHour hours.
        let floor = min(1, startLevel)
        return UInt8(max(floor, min(100, (startLevel - hours * drainPerHour).rounded(.up))))
    }

    /// Sets the level now; it drains from there, or with `held` stays there until set again.
    /// Subscribers hear the new level.
    public func setLevel(_ percent: Double, held: Bool = false) {
        startLevel = max(0, min(100, percent))
        isHeld = held
        if let context {
            startNanoseconds = context.scheduler.nowNanoseconds
            context.log(.stateChanged, .info, "battery set to \(currentLevel) %\(held ? ", held there" : "")", [:])
        }
        publish()
    }

    public func subscriptionChanged(_ characteristic: Characteristic) {
        ticker.subscriptionChanged(characteristic)
    }

    private func publish() {
        notified.update(Double(currentLevel), context: context)
    }

    private static func format(_ value: Double) -> String {
        value == value.rounded() ? String(Int(value)) : String(value)
    }
}
