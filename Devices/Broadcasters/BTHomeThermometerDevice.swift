import BlemuBroadcast
import BlemuCore
import BlemuDevice

/// A BTHome v2 thermometer and hygrometer (bthome.io), the kind Home Assistant picks up by
/// itself: temperature (0x02, s16 × 0.01 °C), humidity (0x03, u16 × 0.01 %) and battery (0x01,
/// %) in its advertising data, encrypted with the bindkey of `--bindkey-file`. It never takes a
/// connection. The room is the thermostat's `ThermalModel` (heated to 21 °C, the moisture
/// wandering with the weather), measured every `readingPeriod`; a reading that differs from the
/// one advertised gets the next packet id, the same one changes nothing. A measurement that
/// would find the same reading is not taken at all: the model is solved exactly, so the device
/// looks ahead for the first measurement whose reading differs and wakes only for it.
public final class BTHomeThermometerDevice: BroadcastingDevice {
    public static let deviceName = "bthome-thermometer"
    public static let summary = "BTHome v2 thermometer (temperature, humidity, battery), broadcast only; encrypted with --bindkey-file"
    /// How often the sensor measures (a BTHome thermometer's usual pace).
    public static let readingPeriod: Duration = .seconds(10)
    /// How far ahead a measurement looks for the next reading that differs, in reading
    /// periods (an hour): a room that stays the same wakes the device once an hour at most.
    public static let lookAheadPeriods = 360
    /// The range a `temperature` setting takes: what a room thermometer measures (the s16
    /// object holds -327.68 to 327.67).
    public static let temperatureRange: ClosedRange<Double> = -40...85

    public let broadcast = BTHomeBroadcast(triggerBased: false)
    public private(set) var model: ThermalModel
    public private(set) var battery: Int = 100
    public private(set) var broadcastInterval: UInt16 = 1600  // 1 s
    public private(set) var periodicInterval: UInt16?
    public var offersPeriodicAdvertising: Bool { true }
    private weak var context: BroadcastContext?
    private var modelNanoseconds: UInt64 = 0
    private var timer: TimerID?

    public init(seed: UInt64 = 0x4254) {
        model = ThermalModel(room: 21, outside: 8, humidity: 50, target: 21, mode: .heat, seed: seed)
    }

    public var profile: DeviceProfile {
        // Generic Thermometer (Assigned Numbers 2.6.3: 0x0300); no TX power in the data.
        DeviceProfile(defaultName: "blemu BTHome TH", advertisedServices: [], appearance: 0x0300, txPowerLevel: nil)
    }

    public var advertisingData: [UInt8] { broadcast.advertisingData }

    public func advertisingAddressChanged() { broadcast.advertisingAddressChanged() }

    public func start(broadcasting context: BroadcastContext) {
        self.context = context
        broadcast.context = context
        modelNanoseconds = context.scheduler.nowNanoseconds
        measure()
    }

    public func stop() {
        if let timer { context?.scheduler.cancel(timer) }
        timer = nil
    }

    public var settings: [DeviceSetting] {
        [
            .number("temperature", "room temperature, °C, -40 to 85 (then heated towards 21; --exact: held there)", in: Self.temperatureRange,
                    moves: true, hold: { [weak self] celsius in
                        self?.change("temperature set to \(celsius) °C, held there") { $0.holdRoom(celsius) }
                    }) { [weak self] celsius in
                self?.change("temperature set to \(celsius) °C") { $0.setRoom(celsius) }
            },
            .number("humidity", "relative humidity, %, 0 to 100 (then following the weather and the temperature; --exact: held there)",
                    in: 0...100, moves: true, hold: { [weak self] percent in
                        self?.change("humidity set to \(percent) %, held there") { $0.holdHumidity(percent) }
                    }) { [weak self] percent in
                self?.change("humidity set to \(percent) %") { $0.setHumidity(percent) }
            },
            .integer("battery", "battery level, %, 0 to 100", in: 0...100) { [weak self] percent in
                self?.battery = percent
                self?.change("battery set to \(percent) %") { _ in }
            },
            .broadcastInterval { [weak self] units in
                self?.broadcastInterval = units
                self?.context?.broadcastChanged()
            },
            .periodicInterval(context: { [weak self] in self?.context }) { [weak self] units in
                self?.periodicInterval = units
                self?.context?.broadcastChanged()
            },
        ]
    }

    /// The objects of a reading now (the packet id is added when it is advertised).
    public var reading: [BTHomeObject] { Self.reading(of: model, battery: battery) }

    static func reading(of model: ThermalModel, battery: Int) -> [BTHomeObject] {
        [BTHomeObject(.battery, integer: Int64(battery)),
         BTHomeObject(.temperature, value: model.room),
         BTHomeObject(.humidity, value: model.humidity)].compactMap { $0 }
    }

    private func catchUp() {
        guard let context else { return }
        let now = context.scheduler.nowNanoseconds
        model.advance(seconds: Double(now &- modelNanoseconds) / 1e9)
        modelNanoseconds = now
    }

    /// Applies a setting now (before the start: to the initial state) and advertises the result;
    /// the room changed, so the next measurement is looked for anew.
    private func change(_ message: String, _ apply: (inout ThermalModel) -> Void) {
        catchUp()
        apply(&model)
        context?.log(.stateChanged, .info, message, [:])
        if context != nil { measure() }
    }

    /// One measurement, then the timer for the next one whose reading differs.
    private func measure() {
        catchUp()
        broadcast.publish(reading)
        scheduleNextReading()
    }

    /// The sensor measures every `readingPeriod`; the periods whose measurement would find the
    /// reading advertised now are skipped (a wakeup that sends nothing is only a cost), up to
    /// `lookAheadPeriods`.
    private func scheduleNextReading() {
        guard let context else { return }
        if let timer { context.scheduler.cancel(timer) }
        let now = Self.reading(of: model, battery: battery)
        let period = Double(Self.readingPeriod.components.seconds)
        var future = model
        var periods = 1
        while periods < Self.lookAheadPeriods {
            future.advance(seconds: period)
            if Self.reading(of: future, battery: battery) != now { break }
            periods += 1
        }
        timer = context.scheduler.schedule(after: Self.readingPeriod * periods) { [weak self] in
            self?.timer = nil
            self?.measure()
        }
    }
}
