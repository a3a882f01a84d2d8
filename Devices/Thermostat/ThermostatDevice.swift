import BlemuATT
import BlemuCore
import BlemuGATT
import BlemuDevice
import Logging

/// `thermostat`: a wall thermostat with a temperature and humidity sensor — Environmental
/// Sensing 0x181A (ESS 1.0), blemu's Thermostat service, Device Information 0x180A, Battery 0x180F.
///
/// | characteristic | format | access |
/// |---|---|---|
/// | Temperature 0x2A6E | sint16, 0.01 °C, in steps of 0.1 °C | read, notify |
/// | Humidity 0x2A6F | uint16, 0.01 %, in steps of 1 % | read, notify |
/// | Target Temperature `7d3c0101-…` | sint16, 0.01 °C, 5.00 to 35.00 | read, write, notify |
/// | Mode `7d3c0102-…` | uint8: 0 off, 1 heat, 2 cool, 3 auto | read, write, notify |
/// | Heating State `7d3c0103-…` | uint8: 0 idle, 1 heating, 2 cooling | read, notify |
///
/// Writes out of range are refused with Out of Range (0xFF, Supplement Part B, 1.2); a value
/// of the wrong length with Invalid Attribute Value Length (0x0D), by the stack.
public final class ThermostatDevice: Device {
    public static let deviceName = "thermostat"
    public static let summary = "thermostat: Environmental Sensing 0x181A, Thermostat 7d3c0100-…, Device Information 0x180A, Battery 0x180F"

    public static let serviceUUID = BluetoothUUID("7d3c0100-9a5e-4d1a-8f6e-5c1b2d3e4f50")!
    public static let targetUUID = BluetoothUUID("7d3c0101-9a5e-4d1a-8f6e-5c1b2d3e4f50")!
    public static let modeUUID = BluetoothUUID("7d3c0102-9a5e-4d1a-8f6e-5c1b2d3e4f50")!
    public static let heatingStateUUID = BluetoothUUID("7d3c0103-9a5e-4d1a-8f6e-5c1b2d3e4f50")!
    /// Target Temperature accepts 5.00 to 35.00 °C, in hundredths.
    public static let targetRange: ClosedRange<Int16> = 500...3500
    /// The sensor's resolution: what a central reads moves in these steps, and each step is
    /// notified (ES Trigger Setting "value changed", ESS 1.0, 3.1.2.2).
    public static let temperatureStep = 0.1
    public static let humidityStep = 1.0
    /// How often the model is checked for steps while a central listens.
    public static let tickPeriod: Duration = .seconds(5)

    public let temperature: Characteristic
    public let humidity: Characteristic
    public let target: Characteristic
    public let mode: Characteristic
    public let heatingState: Characteristic
    public let battery = BatteryService(startLevel: 95, drainPerHour: 0.05)
    public let profile: DeviceProfile
    public private(set) var model: ThermalModel

    private weak var context: DeviceContext?
    private var modelNanoseconds: UInt64 = 0
    private let ticker: TickWhileSubscribed
    private let temperatureValue: SteppedValue
    private let humidityValue: SteppedValue
    private let targetValue: NotifiedValue
    private let modeValue: NotifiedValue
    private let heatingStateValue: NotifiedValue

    public init(seed: UInt64 = UInt64.random(in: 1...UInt64.max)) {
        model = ThermalModel(seed: seed)
        // ESS 1.0, 3.1.2: each measurement carries its ES Measurement descriptor (indoor air,
        // sampled when read; uncertainty ±1 % of a room temperature, ±4.5 % of a humidity),
        // its ES Trigger Setting (notify each change) and a Valid Range (the sensor's span,
        // in the characteristic's own format, GSS "Valid Range").
        temperature = Characteristic(EnvironmentalSensing.temperature, properties: [.read, .notify], length: .fixed(2),
                                     descriptors: [
                                         EnvironmentalSensing.Measurement(application: .indoor, uncertaintyHalfPercent: 2).descriptor,
                                         EnvironmentalSensing.TriggerSetting.valueChanged.descriptor,
                                         .validRange(lower: EnvironmentalSensing.temperatureBytes(celsius: -40),
                                                     upper: EnvironmentalSensing.temperatureBytes(celsius: 85)),
                                     ])
        humidity = Characteristic(EnvironmentalSensing.humidity, properties: [.read, .notify], length: .fixed(2),
                                  descriptors: [
                                      EnvironmentalSensing.Measurement(application: .indoor, uncertaintyHalfPercent: 9).descriptor,
                                      EnvironmentalSensing.TriggerSetting.valueChanged.descriptor,
                                      .validRange(lower: EnvironmentalSensing.humidityBytes(percent: 0),
                                                  upper: EnvironmentalSensing.humidityBytes(percent: 100)),
                                  ])
        // Presentation Format (Vol 3, Part G, 3.3.3.5): sint16 (0x0E), exponent -2, degrees Celsius (0x272F).
        target = Characteristic(Self.targetUUID, properties: [.read, .write, .notify], permissions: Self.settingPermissions, length: .fixed(2),
                                descriptors: [
                                    .userDescription("Target temperature"),
                                    .presentationFormat(format: 0x0E, exponent: -2, unit: 0x272F),
                                    .validRange(lower: Self.int16Bytes(Self.targetRange.lowerBound),
                                                upper: Self.int16Bytes(Self.targetRange.upperBound)),
                                ])
        // uint8 (0x04), unitless (0x2700).
        mode = Characteristic(Self.modeUUID, properties: [.read, .write, .notify], permissions: Self.settingPermissions, length: .fixed(1),
                              descriptors: [.userDescription("Mode: 0 off, 1 heat, 2 cool, 3 auto"),
                                            .presentationFormat(format: 0x04, unit: 0x2700)])
        target.minimumEncryptionKeySize = Self.requiredKeySize
        mode.minimumEncryptionKeySize = Self.requiredKeySize
        heatingState = Characteristic(Self.heatingStateUUID, properties: [.read, .notify], length: .fixed(1),
                                      descriptors: [.userDescription("Heating state: 0 idle, 1 heating, 2 cooling"),
                                                    .presentationFormat(format: 0x04, unit: 0x2700)])
        temperatureValue = SteppedValue(temperature, step: Self.temperatureStep, encode: EnvironmentalSensing.temperatureBytes)
        humidityValue = SteppedValue(humidity, step: Self.humidityStep, encode: EnvironmentalSensing.humidityBytes)
        targetValue = NotifiedValue(target)
        modeValue = NotifiedValue(mode)
        heatingStateValue = NotifiedValue(heatingState)
        ticker = TickWhileSubscribed(every: Self.tickPeriod, watching: [temperature, humidity, heatingState])
        // Appearance 0x0601: HVAC, Thermostat (Assigned Numbers 2.6.3).
        profile = DeviceProfile(defaultName: "blemu Thermostat",
                                advertisedServices: [EnvironmentalSensing.service, Self.serviceUUID, BluetoothUUID(0x180F)],
                                appearance: 0x0601)
        wireHandlers()
        // Nothing has changed yet: the first notification is the first step a value takes.
        temperatureValue.baseline(model.room)
        humidityValue.baseline(model.humidity)
        targetValue.baseline(targetBytes)
        modeValue.baseline([model.mode.rawValue])
        heatingStateValue.baseline([model.state.rawValue])
    }

    public var services: [Service] {
        [
            Service(EnvironmentalSensing.service) {
                temperature
                humidity
            },
            Service(Self.serviceUUID) {
                target
                mode
                heatingState
            },
            DeviceInformation(model: "blemu TH-1", serialNumber: "TH-0001").makeService(),
            battery.service,
        ]
    }

    public func start(context: DeviceContext) {
        self.context = context
        modelNanoseconds = context.scheduler.nowNanoseconds
        battery.start(context: context)
        ticker.start(context: context)
        context.log(.stateChanged, .info, "room \(Self.celsius(model.room)), target \(Self.celsius(model.target)), mode \(model.mode.name), \(model.state.name)", [:])
    }

    public func stop() {
        ticker.stop()
        battery.stop()
    }

    public func subscriptionChanged(_ characteristic: Characteristic, peer: ATTPeer, notify: Bool, indicate: Bool) {
        battery.subscriptionChanged(characteristic)
        ticker.subscriptionChanged(characteristic)
    }

    /// `room`, `outside`, `humidity` set the simulated world now; `target` and `mode` act like a
    /// central's write (subscribers are notified); `battery` sets the level.
    public var settings: [DeviceSetting] {
        [
            .number("room", "room temperature, °C, -20 to 50; then heated, cooled and losing heat outside (--exact: held there)",
                    in: -20...50, moves: true, hold: { [weak self] celsius in
                        self?.change("room set to \(Self.celsius(celsius)), held there") { $0.holdRoom(celsius) }
                    }) { [weak self] celsius in
                self?.change("room set to \(Self.celsius(celsius))") { $0.setRoom(celsius) }
            },
            .number("outside", "outside temperature, °C, -40 to 50 (stays as set)", in: -40...50) { [weak self] celsius in
                self?.change("outside set to \(Self.celsius(celsius))") { $0.outside = celsius }
            },
            .number("humidity", "relative humidity, %, 0 to 100; then following the weather and the room temperature (--exact: held there)",
                    in: 0...100, moves: true, hold: { [weak self] percent in
                        self?.change("humidity set to \(Int(percent.rounded())) %, held there") { $0.holdHumidity(percent) }
                    }) { [weak self] percent in
                self?.change("humidity set to \(Int(percent.rounded())) %") { $0.setHumidity(percent) }
            },
            .number("target", "target temperature, °C, 5 to 35", in: 5...35) { [weak self] celsius in
                self?.change("target set to \(Self.celsius(celsius))") { $0.setTarget((celsius * 100).rounded() / 100) }
            },
            .choice("mode", "mode: off, heat, cool or auto", names: ThermostatMode.allCases.map(\.name)) { [weak self] index in
                guard let mode = ThermostatMode(rawValue: UInt8(index)) else { return }
                self?.change("mode set to \(mode.name)") { $0.setMode(mode) }
            },
            battery.setting,
        ]
    }

    // MARK: Values

    /// Brings the model to now: the world moves only when somebody looks.
    public func catchUp() {
        guard let context else { return }
        let now = context.scheduler.nowNanoseconds
        model.advance(seconds: Double(now &- modelNanoseconds) / 1e9)
        modelNanoseconds = now
    }

    public var temperatureBytes: [UInt8] { temperatureValue.bytes(model.room) }
    public var humidityBytes: [UInt8] { humidityValue.bytes(model.humidity) }
    public var targetBytes: [UInt8] { EnvironmentalSensing.temperatureBytes(celsius: model.target) }

    private func wireHandlers() {
        func reader(_ bytes: @escaping (ThermostatDevice) -> [UInt8]) -> ReadHandler {
            { [weak self] _, value in
                guard let self else { return .unlikelyError }
                self.catchUp()
                value.append(contentsOf: bytes(self))
                return nil
            }
        }
        temperature.onRead = reader(\.temperatureBytes)
        humidity.onRead = reader(\.humidityBytes)
        target.onRead = reader(\.targetBytes)
        mode.onRead = reader { [$0.model.mode.rawValue] }
        heatingState.onRead = reader { [$0.model.state.rawValue] }

        // The stack has checked the link (settingPermissions) and the length (exactly 2 bytes,
        // else 0x0D); the range is checked here.
        target.validateWrite = { request in
            Self.targetRange.contains(Self.int16(request.value)) ? nil : .outOfRange
        }
        target.onWrite = { [weak self] request in
            guard let self else { return .unlikelyError }
            let celsius = Double(Self.int16(request.value)) / 100
            self.change("target set to \(Self.celsius(celsius)) by \(request.peer.address)", peer: request.peer) { $0.setTarget(celsius) }
            return nil
        }
        mode.validateWrite = { request in
            ThermostatMode(rawValue: request.value[0]) == nil ? .outOfRange : nil
        }
        mode.onWrite = { [weak self] request in
            guard let self, let mode = ThermostatMode(rawValue: request.value[0]) else { return .unlikelyError }
            self.change("mode set to \(mode.name) by \(request.peer.address)", peer: request.peer) { $0.setMode(mode) }
            return nil
        }

        ticker.onStart = { [weak self] in self?.takeBaseline() }
        ticker.onTick = { [weak self] in self?.publish() }
    }

    /// Who may change the target and the mode: only a central on an encrypted link (Security
    /// Mode 1 Level 2, Vol 3, Part C, 10.2.1: Just Works is enough, and any key size the Core
    /// allows, 7 octets and up). Declared as permissions, so the ATT server checks them before
    /// the device hears of a write: 0x05, or 0x0F for a bonded central not yet encrypted (10.3).
    static let settingPermissions: AttributePermissions = [.readable, .writeEncryptionRequired]
    public static let requiredKeySize: UInt8 = 7

    /// A new listener reads first: what it could read now is the baseline, not news.
    private func takeBaseline() {
        catchUp()
        temperatureValue.baseline(model.room)
        humidityValue.baseline(model.humidity)
        heatingStateValue.baseline([model.state.rawValue])
    }

    /// Applies a change to the world at the present moment, logs it, and notifies what it moved.
    private func change(_ message: String, peer: ATTPeer? = nil, _ apply: (inout ThermalModel) -> Void) {
        catchUp()
        let stateBefore = model.state
        apply(&model)
        var metadata: Logger.Metadata = [:]
        if let peer { metadata[LogKey.peer] = .string(peer.address.description) }
        let switched = model.state != stateBefore ? " (now \(model.state.name))" : ""
        context?.log(.stateChanged, .info, message + switched, metadata)
        publish()
    }

    /// Notifies every value that moved to another step since it was last sent.
    private func publish() {
        catchUp()
        temperatureValue.update(model.room, context: context)
        humidityValue.update(model.humidity, context: context)
        targetValue.update(targetBytes, context: context)
        modeValue.update([model.mode.rawValue], context: context)
        heatingStateValue.update([model.state.rawValue], context: context)
    }

    // MARK: Formats

    static func int16(_ bytes: ValueBytes) -> Int16 { Int16(bitPattern: bytes.uint16LE(at: 0)) }

    static func int16Bytes(_ value: Int16) -> [UInt8] {
        var out: [UInt8] = []
        out.appendLE(UInt16(bitPattern: value))
        return out
    }

    static func celsius(_ value: Double) -> String {
        let tenths = (value * 10).rounded() / 10
        return "\(tenths) °C"
    }
}
