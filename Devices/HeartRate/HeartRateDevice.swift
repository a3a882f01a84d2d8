import BlemuATT
import BlemuCore
import BlemuGATT
import BlemuHost
import Logging

/// `heart-rate`: a chest-strap heart rate sensor — Heart Rate Service 0x180D (HRS 1.0),
/// Device Information 0x180A, Battery 0x180F.
public final class HeartRateDevice: Device {
    public static let deviceName = "heart-rate"
    public static let summary = "heart rate sensor: Heart Rate 0x180D, Device Information 0x180A, Battery 0x180F"

    /// HRS 3.3.2: Heart Rate Control Point value 0x01 resets Energy Expended.
    public static let resetEnergyExpended: UInt8 = 0x01
    /// HRS 1.0, 3.3.2.1: "Control Point Value Not Supported".
    public static let controlPointNotSupported = ATTError.application(0x00)
    /// HRS 3.2: Body Sensor Location 0x01 = Chest.
    public static let chest: UInt8 = 0x01

    public let measurement: Characteristic
    public let bodySensorLocation: Characteristic
    public let controlPoint: Characteristic
    public let battery = BatteryService()
    public let profile: DeviceProfile
    public private(set) var heart: HeartModel
    public private(set) var measurementsSent = 0

    private weak var context: DeviceContext?
    private var tickTimer: TimerID?
    private var lastTickNanoseconds: UInt64 = 0
    /// HRS 3.1.1.3: Energy Expended is sent about once every ten measurements.
    private let energyEvery = 10

    public init(seed: UInt64 = UInt64.random(in: 1...UInt64.max)) {
        heart = HeartModel(seed: seed)
        measurement = Characteristic(0x2A37, properties: [.notify])
        bodySensorLocation = Characteristic(0x2A38, properties: [.read], cachedValue: [Self.chest])
        controlPoint = Characteristic(0x2A39, properties: [.write])
        // Appearance 0x0341: Heart Rate Sensor, Heart Rate Belt (Assigned Numbers 2.6.3).
        profile = DeviceProfile(defaultName: "blemu Heart Rate", advertisedServices: [BluetoothUUID(0x180D), BluetoothUUID(0x180F)],
                                appearance: 0x0341)
        controlPoint.onWrite = { [weak self] request in
            guard let self else { return .unlikelyError }
            guard request.value == [Self.resetEnergyExpended] else { return Self.controlPointNotSupported }
            self.heart.resetEnergy()
            self.context?.log(.stateChanged, .info, "energy expended reset by \(request.peer.address)",
                              [LogKey.peer: .string(request.peer.address.description)])
            return nil
        }
    }

    public var services: [Service] {
        [
            Service(0x180D) {
                measurement
                bodySensorLocation
                controlPoint
            },
            DeviceInformation(model: "blemu HR-1", serialNumber: "HR-0001", firmwareRevision: blemuVersion,
                              softwareRevision: blemuVersion).makeService(),
            battery.service,
        ]
    }

    public func start(context: DeviceContext) {
        self.context = context
        lastTickNanoseconds = context.scheduler.nowNanoseconds
        battery.start(context: context)
    }

    public func stop() {
        if let tickTimer { context?.scheduler.cancel(tickTimer) }
        tickTimer = nil
        battery.stop()
    }

    public func subscriptionChanged(_ characteristic: Characteristic, peer: ATTPeer, notify: Bool, indicate: Bool) {
        battery.subscriptionChanged(characteristic)
        guard characteristic === measurement, let context else { return }
        let anyone = context.isSubscribed(measurement, peer: nil, indications: false)
        if anyone && tickTimer == nil {
            // Catch the heart up to now, so a quiet hour does not arrive as one burst.
            _ = heart.advance(seconds: elapsedSinceLastTick())
            scheduleTick()
        } else if !anyone, let tickTimer {
            context.scheduler.cancel(tickTimer)
            self.tickTimer = nil
        }
    }

    /// The next measurement the device would send (exposed for tests and the benchmark).
    public func nextMeasurement(seconds: Double = 1) -> HeartRateMeasurement {
        let intervals = heart.advance(seconds: seconds)
        measurementsSent += 1
        let energy = measurementsSent % energyEvery == 1 ? heart.energyKilojoules : nil
        return HeartRateMeasurement(heartRate: heart.beatsPerMinute, sensorContact: .detected,
                                    energyExpended: energy, rrIntervals: intervals)
    }

    private func elapsedSinceLastTick() -> Double {
        guard let context else { return 0 }
        let now = context.scheduler.nowNanoseconds
        defer { lastTickNanoseconds = now }
        return Double(now &- lastTickNanoseconds) / 1e9
    }

    private func scheduleTick() {
        tickTimer = context?.scheduler.schedule(after: .seconds(1)) { [weak self] in
            guard let self, let context = self.context else { return }
            let seconds = self.elapsedSinceLastTick()
            let value = self.nextMeasurement(seconds: seconds).encode(maxLength: 20)
            // A full queue is reported through peripheralIsReady; a heart rate sensor sends
            // the freshest value on the next tick rather than a backlog of old ones.
            context.notify(self.measurement, value: value)
            self.scheduleTick()
        }
    }
}
