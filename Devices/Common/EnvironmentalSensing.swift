import BlemuCore
import BlemuGATT

/// The descriptors of Environmental Sensing Service characteristics (ESS 1.0, 3.1.2) and the
/// formats of its measurements (GATT Specification Supplement), for any device with an
/// Environmental Sensing Service 0x181A.
///
/// ESS 1.0, Table 3.2 (characteristic descriptors): ES Measurement is optional with a single
/// instance of a characteristic (mandatory with several); ES Trigger Setting is mandatory when
/// the characteristic notifies, and readable; writing it requires a bond (3.1.2.3.1), which
/// blemu cannot make yet, so blemu's are read-only. ES Configuration is needed only with more
/// than one trigger setting. Valid Range is optional.
public enum EnvironmentalSensing {
    public static let service = BluetoothUUID(0x181A)
    public static let temperature = BluetoothUUID(0x2A6E)
    public static let humidity = BluetoothUUID(0x2A6F)
    public static let measurementDescriptor = BluetoothUUID(0x290C)
    public static let triggerSettingDescriptor = BluetoothUUID(0x290D)

    /// ES Measurement descriptor (ESS 1.0, 3.1.2.1), 11 octets: Flags (uint16, reserved 0),
    /// Sampling Function (uint8), Measurement Period (uint24, s, 0 = not in use), Update
    /// Interval (uint24, s, 0 = not in use), Application (uint8), Measurement Uncertainty
    /// (uint8, percent in steps of 0.5, 0xFF = not available).
    public struct Measurement: Equatable, Sendable {
        public enum SamplingFunction: UInt8, Sendable {
            case unspecified = 0x00, instantaneous = 0x01, arithmeticMean = 0x02, rms = 0x03
            case maximum = 0x04, minimum = 0x05, accumulated = 0x06, count = 0x07
        }
        /// A few of the Application values (ESS 1.0, 3.1.2.1).
        public enum Application: UInt8, Sendable {
            case unspecified = 0x00, air = 0x01, water = 0x02, outdoor = 0x13, indoor = 0x14
        }

        public var samplingFunction: SamplingFunction
        public var measurementPeriodSeconds: UInt32
        public var updateIntervalSeconds: UInt32
        public var application: Application
        /// In steps of 0.5 %: 4 is ±2 %.
        public var uncertaintyHalfPercent: UInt8

        public init(samplingFunction: SamplingFunction = .instantaneous, measurementPeriodSeconds: UInt32 = 0,
                    updateIntervalSeconds: UInt32 = 0, application: Application, uncertaintyHalfPercent: UInt8 = 0xFF) {
            self.samplingFunction = samplingFunction
            self.measurementPeriodSeconds = measurementPeriodSeconds
            self.updateIntervalSeconds = updateIntervalSeconds
            self.application = application
            self.uncertaintyHalfPercent = uncertaintyHalfPercent
        }

        public var encoded: [UInt8] {
            var out: [UInt8] = []
            out.appendLE(UInt16(0))                  // Flags: all bits reserved
            out.append(samplingFunction.rawValue)
            Self.appendUInt24(measurementPeriodSeconds, to: &out)
            Self.appendUInt24(updateIntervalSeconds, to: &out)
            out.append(application.rawValue)
            out.append(uncertaintyHalfPercent)
            return out
        }

        public var descriptor: Descriptor { Descriptor(uuid: EnvironmentalSensing.measurementDescriptor, value: encoded) }

        private static func appendUInt24(_ value: UInt32, to out: inout [UInt8]) {
            let clamped = min(value, 0xFF_FFFF)
            out += [UInt8(clamped & 0xFF), UInt8((clamped >> 8) & 0xFF), UInt8(clamped >> 16)]
        }
    }

    /// ES Trigger Setting descriptor (ESS 1.0, 3.1.2.2): a Condition octet, then an operand
    /// whose format the condition sets.
    public enum TriggerSetting: Equatable, Sendable {
        /// 0x00: no notifications.
        case inactive
        /// 0x01: at a fixed interval, seconds (uint24).
        case fixedInterval(seconds: UInt32)
        /// 0x02: no more often than every `seconds` (uint24).
        case notMoreOftenThan(seconds: UInt32)
        /// 0x03: whenever the value changes from the one last notified.
        case valueChanged

        public var encoded: [UInt8] {
            switch self {
            case .inactive: return [0x00]
            case .fixedInterval(let s): return [0x01, UInt8(s & 0xFF), UInt8((s >> 8) & 0xFF), UInt8((s >> 16) & 0xFF)]
            case .notMoreOftenThan(let s): return [0x02, UInt8(s & 0xFF), UInt8((s >> 8) & 0xFF), UInt8((s >> 16) & 0xFF)]
            case .valueChanged: return [0x03]
            }
        }

        public var descriptor: Descriptor { Descriptor(uuid: EnvironmentalSensing.triggerSettingDescriptor, value: encoded) }
    }

    /// Temperature 0x2A6E (GSS): sint16, degrees Celsius with a resolution of 0.01;
    /// 0x8000 means "value is not known".
    public static func temperatureBytes(celsius: Double) -> [UInt8] {
        let hundredths = (celsius * 100).rounded()
        let value = Int16(max(-27315, min(Double(Int16.max), hundredths)))
        var out: [UInt8] = []
        out.appendLE(UInt16(bitPattern: value))
        return out
    }

    /// Humidity 0x2A6F (GSS): uint16, percent with a resolution of 0.01, 0 to 100 %.
    public static func humidityBytes(percent: Double) -> [UInt8] {
        let value = UInt16(max(0, min(10_000, (percent * 100).rounded())))
        var out: [UInt8] = []
        out.appendLE(value)
        return out
    }

    public static func decodeTemperature(_ bytes: [UInt8]) -> Double? {
        guard bytes.count == 2 else { return nil }
        let raw = Int16(bitPattern: UInt16(bytes[0]) | UInt16(bytes[1]) << 8)
        return raw == Int16.min ? nil : Double(raw) / 100
    }

    public static func decodeHumidity(_ bytes: [UInt8]) -> Double? {
        guard bytes.count == 2 else { return nil }
        return Double(UInt16(bytes[0]) | UInt16(bytes[1]) << 8) / 100
    }
}
