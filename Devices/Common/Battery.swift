import BlemuCore
import BlemuGATT
import BlemuHost

/// Battery Service 0x180F (BAS 1.0): Battery Level 0x2A19, uint8 percent, read and notify.
/// The level is a function of time (a slow linear drain), so reading it needs no timer; a
/// timer runs only while a central is subscribed, to notify each change.
public final class BatteryService {
    public let level: Characteristic
    public let service: Service
    /// Percent lost per hour.
    public let drainPerHour: Double
    private let startLevel: Double
    private weak var context: DeviceContext?
    private var startNanoseconds: UInt64 = 0
    private var timer: TimerID?
    private var lastNotified: UInt8?

    public init(startLevel: Double = 100, drainPerHour: Double = 2) {
        self.startLevel = startLevel
        self.drainPerHour = drainPerHour
        // Characteristic Presentation Format: uint8 (0x04), unit percentage (0x27AD).
        let level = Characteristic(0x2A19, properties: [.read, .notify], length: .fixed(1),
                                   descriptors: [.presentationFormat(format: 0x04, unit: 0x27AD)])
        self.level = level
        service = Service(0x180F) { level }
        level.onRead = { [weak self] request in
            guard let self else { return .failure(.unlikelyError) }
            return request.answer([self.currentLevel])
        }
    }

    public func start(context: DeviceContext) {
        self.context = context
        startNanoseconds = context.scheduler.nowNanoseconds
    }

    public func stop() {
        if let timer { context?.scheduler.cancel(timer) }
        timer = nil
    }

    public var currentLevel: UInt8 {
        guard let context else { return UInt8(startLevel) }
        let hours = Double(context.scheduler.nowNanoseconds &- startNanoseconds) / 3.6e12
        return UInt8(max(1, min(100, (startLevel - hours * drainPerHour).rounded(.down))))
    }

    public func subscriptionChanged(_ characteristic: Characteristic) {
        guard characteristic === level, let context else { return }
        let anyone = context.isSubscribed(level, peer: nil, indications: false)
        if anyone && timer == nil {
            lastNotified = nil
            tick()
        } else if !anyone, let timer {
            context.scheduler.cancel(timer)
            self.timer = nil
        }
    }

    private func tick() {
        guard let context else { return }
        let now = currentLevel
        if now != lastNotified {
            context.notify(level, value: [now])
            lastNotified = now
        }
        timer = context.scheduler.schedule(after: .seconds(60)) { [weak self] in self?.tick() }
    }
}
