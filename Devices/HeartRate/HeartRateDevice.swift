import BlemuATT
import BlemuCore
import BlemuGATT
import BlemuDevice
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
    /// HRS 3.1.1.1, Sensor Contact Status bits: whether the strap touches skin.
    public private(set) var sensorContact: HeartRateMeasurement.SensorContact = .detected

    private weak var context: DeviceContext?
    /// One measurement a second while a central listens (HRS 3.1.1: typically every second).
    private let ticker: TickWhileSubscribed
    private var lastTickNanoseconds: UInt64 = 0
    /// HRS 3.1.1.3: Energy Expended is sent about once every ten measurements.
    private let energyEvery = 10

    /// With `replayable` (`--seed`), the heart's time moves one second per measurement sent
    /// and stands still otherwise (no catch-up when a central subscribes, none when `bpm` is
    /// set): the values a central gets from its subscription on depend only on the seed and
    /// the settings, not on when it came or how late a timer fired.
    private let replayable: Bool

    public init(seed: UInt64 = UInt64.random(in: 1...UInt64.max), replayable: Bool = false) {
        heart = HeartModel(seed: seed)
        self.replayable = replayable
        measurement = Characteristic(0x2A37, properties: [.notify])
        bodySensorLocation = Characteristic(0x2A38, properties: [.read], cachedValue: [Self.chest])
        controlPoint = Characteristic(0x2A39, properties: [.write])
        ticker = TickWhileSubscribed(every: .seconds(1), watching: [measurement])
        // Appearance 0x0341: Heart Rate Sensor, Heart Rate Belt (Assigned Numbers 2.6.3).
        profile = DeviceProfile(defaultName: "blemu Heart Rate", advertisedServices: [BluetoothUUID(0x180D), BluetoothUUID(0x180F)],
                                appearance: 0x0341)
        controlPoint.onWrite = { [weak self] request in
            guard let self else { return .unlikelyError }
            guard request.value.count == 1, request.value[0] == Self.resetEnergyExpended else { return Self.controlPointNotSupported }
            self.heart.resetEnergy()
            self.context?.log(.stateChanged, .info, "energy expended reset by \(request.peer.address)",
                              [LogKey.peer: .string(request.peer.address.description)])
            return nil
        }
        // Catch the heart up to now, so a quiet hour does not arrive as one burst.
        ticker.onStart = { [weak self] in
            guard let self else { return }
            _ = self.heart.advance(seconds: self.elapsedSinceLastTick())
        }
        ticker.onTick = { [weak self] in self?.measure() }
    }

    public var services: [Service] {
        [
            Service(0x180D) {
                measurement
                bodySensorLocation
                controlPoint
            },
            DeviceInformation(model: "blemu HR-1", serialNumber: "HR-0001").makeService(),
            battery.service,
        ]
    }

    public func start(context: DeviceContext) {
        self.context = context
        lastTickNanoseconds = context.scheduler.nowNanoseconds
        battery.start(context: context)
        ticker.start(context: context)
    }

    public func stop() {
        ticker.stop()
        battery.stop()
    }

    public func subscriptionChanged(_ characteristic: Characteristic, peer: ATTPeer, notify: Bool, indicate: Bool) {
        battery.subscriptionChanged(characteristic)
        ticker.subscriptionChanged(characteristic)
    }

    /// `bpm` puts the heart at a rate it then wanders around; `contact` is the strap's skin
    /// contact, sent in every measurement's flags (HRS 3.1.1.1).
    public var settings: [DeviceSetting] {
        [
            .number("bpm", "heart rate, beats per minute, \(Int(heart.range.lowerBound)) to \(Int(heart.range.upperBound)); the heart then wanders around it (--exact: held there)",
                    in: heart.range, moves: true, hold: { [weak self] bpm in self?.setRate(bpm, held: true) }) { [weak self] bpm in
                self?.setRate(bpm, held: false)
            },
            .flag("contact", "sensor contact: 1 detected, 0 not detected (Sensor Contact Status in each measurement)") { [weak self] touching in
                self?.sensorContact = touching ? .detected : .notDetected
                self?.logSetting("sensor contact \(touching ? "detected" : "lost")")
            },
            battery.setting,
        ]
    }

    private func setRate(_ bpm: Double, held: Bool) {
        // The heart is caught up first, so the new rate starts now, not at the last tick.
        _ = heart.advance(seconds: elapsedSinceLastTick())
        if held { heart.hold(beatsPerMinute: bpm) } else { heart.set(beatsPerMinute: bpm) }
        logSetting("heart rate set to \(heart.beatsPerMinute) bpm\(held ? ", held there" : "")")
    }

    /// The next measurement the device would send (exposed for tests and the benchmark).
    public func nextMeasurement(seconds: Double = 1) -> HeartRateMeasurement {
        let intervals = heart.advance(seconds: seconds)
        measurementsSent += 1
        let energy = measurementsSent % energyEvery == 1 ? heart.energyKilojoules : nil
        return HeartRateMeasurement(heartRate: heart.beatsPerMinute, sensorContact: sensorContact,
                                    energyExpended: energy, rrIntervals: intervals)
    }

    private func elapsedSinceLastTick(measuring: Bool = false) -> Double {
        guard let context else { return 0 }
        if replayable { return measuring ? 1 : 0 }
        let now = context.scheduler.nowNanoseconds
        defer { lastTickNanoseconds = now }
        return Double(now &- lastTickNanoseconds) / 1e9
    }

    private func measure() {
        guard let context else { return }
        let next = nextMeasurement(seconds: elapsedSinceLastTick(measuring: true))
        // A full queue is reported through peripheralIsReady; a heart rate sensor sends the
        // freshest value on the next tick rather than a backlog of old ones.
        context.notify(measurement) { next.encode(into: &$0, maxLength: 20) }
    }

    private func logSetting(_ message: String) {
        context?.log(.stateChanged, .info, message, [:])
    }
}
