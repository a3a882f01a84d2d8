/// The objects of BTHome v2 (bthome.io/format): each an id, then a fixed number of little-endian
/// bytes (or, for text and raw, a length byte and that many bytes), the value scaled by a factor.
/// The table is the format's; its lengths and factors were checked against the consumer's own
/// table (bthome-ble 3.25.0, `bthome_ble.const.MEAS_TYPES`), which is what Home Assistant decodes with.
public struct BTHomeObjectType: Sendable, Equatable {
    public enum Encoding: Sendable, Equatable {
        case unsigned, signed
        /// A length byte, then UTF-8 text (0x53).
        case text
        /// A length byte, then bytes (0x54).
        case raw
    }

    public let id: UInt8
    /// What the value is, as bthome.io names it ("temperature", "opening").
    public let name: String
    public let unit: String
    /// Bytes of the value; 0 for text and raw, whose first byte says how many follow.
    public let length: Int
    public let encoding: Encoding
    /// The value is the integer on the air times this (0.01 for temperature 0x02).
    public let scale: Double
    /// A binary sensor (0 off, 1 on): opening, door, motion, …
    public let binary: Bool

    init(id: UInt8, name: String, unit: String, length: Int, encoding: Encoding, scale: Double, binary: Bool = false) {
        self.id = id
        self.name = name
        self.unit = unit
        self.length = length
        self.encoding = encoding
        self.scale = scale
        self.binary = binary
    }

    /// The smallest and largest integer the value's bytes hold.
    public var integerRange: ClosedRange<Int64> {
        let bits = Int64(length * 8)
        switch encoding {
        case .signed: return -(Int64(1) << (bits - 1))...((Int64(1) << (bits - 1)) - 1)
        case .unsigned: return 0...((Int64(1) << bits) - 1)
        case .text, .raw: return 0...0
        }
    }

    /// The type of an object id, nil for one this table does not know (decoding stops there:
    /// without its length nothing after it can be found).
    public static func forID(_ id: UInt8) -> BTHomeObjectType? { byID[Int(id)] }

    public static let packetID = forID(0x00)!
    public static let battery = forID(0x01)!
    public static let temperature = forID(0x02)!
    public static let humidity = forID(0x03)!
    public static let voltage = forID(0x0C)!
    public static let opening = forID(0x11)!
    public static let button = forID(0x3A)!

    private static let byID: [BTHomeObjectType?] = {
        var table = [BTHomeObjectType?](repeating: nil, count: 256)
        for type in all { table[Int(type.id)] = type }
        return table
    }()

    /// Every object type, in ascending id order.
    public static let all: [BTHomeObjectType] = [
        BTHomeObjectType(id: 0x00, name: "packet id", unit: "", length: 1, encoding: .unsigned, scale: 1),
        BTHomeObjectType(id: 0x01, name: "battery", unit: "%", length: 1, encoding: .unsigned, scale: 1),
        BTHomeObjectType(id: 0x02, name: "temperature", unit: "°C", length: 2, encoding: .signed, scale: 0.01),
        BTHomeObjectType(id: 0x03, name: "humidity", unit: "%", length: 2, encoding: .unsigned, scale: 0.01),
        BTHomeObjectType(id: 0x04, name: "pressure", unit: "mbar", length: 3, encoding: .unsigned, scale: 0.01),
        BTHomeObjectType(id: 0x05, name: "illuminance", unit: "lx", length: 3, encoding: .unsigned, scale: 0.01),
        BTHomeObjectType(id: 0x06, name: "mass", unit: "kg", length: 2, encoding: .unsigned, scale: 0.01),
        BTHomeObjectType(id: 0x07, name: "mass", unit: "lb", length: 2, encoding: .unsigned, scale: 0.01),
        BTHomeObjectType(id: 0x08, name: "dew point", unit: "°C", length: 2, encoding: .signed, scale: 0.01),
        BTHomeObjectType(id: 0x09, name: "count", unit: "", length: 1, encoding: .unsigned, scale: 1),
        BTHomeObjectType(id: 0x0A, name: "energy", unit: "kWh", length: 3, encoding: .unsigned, scale: 0.001),
        BTHomeObjectType(id: 0x0B, name: "power", unit: "W", length: 3, encoding: .unsigned, scale: 0.01),
        BTHomeObjectType(id: 0x0C, name: "voltage", unit: "V", length: 2, encoding: .unsigned, scale: 0.001),
        BTHomeObjectType(id: 0x0D, name: "pm25", unit: "µg/m³", length: 2, encoding: .unsigned, scale: 1),
        BTHomeObjectType(id: 0x0E, name: "pm10", unit: "µg/m³", length: 2, encoding: .unsigned, scale: 1),
        BTHomeObjectType(id: 0x0F, name: "generic", unit: "", length: 1, encoding: .unsigned, scale: 1, binary: true),
        BTHomeObjectType(id: 0x10, name: "power (binary)", unit: "", length: 1, encoding: .unsigned, scale: 1, binary: true),
        BTHomeObjectType(id: 0x11, name: "opening", unit: "", length: 1, encoding: .unsigned, scale: 1, binary: true),
        BTHomeObjectType(id: 0x12, name: "carbon dioxide", unit: "ppm", length: 2, encoding: .unsigned, scale: 1),
        BTHomeObjectType(id: 0x13, name: "volatile organic compounds", unit: "µg/m³", length: 2, encoding: .unsigned, scale: 1),
        BTHomeObjectType(id: 0x14, name: "moisture", unit: "%", length: 2, encoding: .unsigned, scale: 0.01),
        BTHomeObjectType(id: 0x15, name: "battery low", unit: "", length: 1, encoding: .unsigned, scale: 1, binary: true),
        BTHomeObjectType(id: 0x16, name: "battery charging", unit: "", length: 1, encoding: .unsigned, scale: 1, binary: true),
        BTHomeObjectType(id: 0x17, name: "carbon monoxide", unit: "", length: 1, encoding: .unsigned, scale: 1, binary: true),
        BTHomeObjectType(id: 0x18, name: "cold", unit: "", length: 1, encoding: .unsigned, scale: 1, binary: true),
        BTHomeObjectType(id: 0x19, name: "connectivity", unit: "", length: 1, encoding: .unsigned, scale: 1, binary: true),
        BTHomeObjectType(id: 0x1A, name: "door", unit: "", length: 1, encoding: .unsigned, scale: 1, binary: true),
        BTHomeObjectType(id: 0x1B, name: "garage door", unit: "", length: 1, encoding: .unsigned, scale: 1, binary: true),
        BTHomeObjectType(id: 0x1C, name: "gas (binary)", unit: "", length: 1, encoding: .unsigned, scale: 1, binary: true),
        BTHomeObjectType(id: 0x1D, name: "heat", unit: "", length: 1, encoding: .unsigned, scale: 1, binary: true),
        BTHomeObjectType(id: 0x1E, name: "light (binary)", unit: "", length: 1, encoding: .unsigned, scale: 1, binary: true),
        BTHomeObjectType(id: 0x1F, name: "lock", unit: "", length: 1, encoding: .unsigned, scale: 1, binary: true),
        BTHomeObjectType(id: 0x20, name: "moisture (binary)", unit: "", length: 1, encoding: .unsigned, scale: 1, binary: true),
        BTHomeObjectType(id: 0x21, name: "motion", unit: "", length: 1, encoding: .unsigned, scale: 1, binary: true),
        BTHomeObjectType(id: 0x22, name: "moving", unit: "", length: 1, encoding: .unsigned, scale: 1, binary: true),
        BTHomeObjectType(id: 0x23, name: "occupancy", unit: "", length: 1, encoding: .unsigned, scale: 1, binary: true),
        BTHomeObjectType(id: 0x24, name: "plug", unit: "", length: 1, encoding: .unsigned, scale: 1, binary: true),
        BTHomeObjectType(id: 0x25, name: "presence", unit: "", length: 1, encoding: .unsigned, scale: 1, binary: true),
        BTHomeObjectType(id: 0x26, name: "problem", unit: "", length: 1, encoding: .unsigned, scale: 1, binary: true),
        BTHomeObjectType(id: 0x27, name: "running", unit: "", length: 1, encoding: .unsigned, scale: 1, binary: true),
        BTHomeObjectType(id: 0x28, name: "safety", unit: "", length: 1, encoding: .unsigned, scale: 1, binary: true),
        BTHomeObjectType(id: 0x29, name: "smoke", unit: "", length: 1, encoding: .unsigned, scale: 1, binary: true),
        BTHomeObjectType(id: 0x2A, name: "sound", unit: "", length: 1, encoding: .unsigned, scale: 1, binary: true),
        BTHomeObjectType(id: 0x2B, name: "tamper", unit: "", length: 1, encoding: .unsigned, scale: 1, binary: true),
        BTHomeObjectType(id: 0x2C, name: "vibration", unit: "", length: 1, encoding: .unsigned, scale: 1, binary: true),
        BTHomeObjectType(id: 0x2D, name: "window", unit: "", length: 1, encoding: .unsigned, scale: 1, binary: true),
        BTHomeObjectType(id: 0x2E, name: "humidity", unit: "%", length: 1, encoding: .unsigned, scale: 1),
        BTHomeObjectType(id: 0x2F, name: "moisture", unit: "%", length: 1, encoding: .unsigned, scale: 1),
        BTHomeObjectType(id: 0x3A, name: "button", unit: "", length: 1, encoding: .unsigned, scale: 1),
        BTHomeObjectType(id: 0x3B, name: "command", unit: "", length: 1, encoding: .unsigned, scale: 1),
        BTHomeObjectType(id: 0x3C, name: "dimmer", unit: "", length: 2, encoding: .unsigned, scale: 1),
        BTHomeObjectType(id: 0x3D, name: "count", unit: "", length: 2, encoding: .unsigned, scale: 1),
        BTHomeObjectType(id: 0x3E, name: "count", unit: "", length: 4, encoding: .unsigned, scale: 1),
        BTHomeObjectType(id: 0x3F, name: "rotation", unit: "°", length: 2, encoding: .signed, scale: 0.1),
        BTHomeObjectType(id: 0x40, name: "distance", unit: "mm", length: 2, encoding: .unsigned, scale: 1),
        BTHomeObjectType(id: 0x41, name: "distance", unit: "m", length: 2, encoding: .unsigned, scale: 0.1),
        BTHomeObjectType(id: 0x42, name: "duration", unit: "s", length: 3, encoding: .unsigned, scale: 0.001),
        BTHomeObjectType(id: 0x43, name: "current", unit: "A", length: 2, encoding: .unsigned, scale: 0.001),
        BTHomeObjectType(id: 0x44, name: "speed", unit: "m/s", length: 2, encoding: .unsigned, scale: 0.01),
        BTHomeObjectType(id: 0x45, name: "temperature", unit: "°C", length: 2, encoding: .signed, scale: 0.1),
        BTHomeObjectType(id: 0x46, name: "uv index", unit: "", length: 1, encoding: .unsigned, scale: 0.1),
        BTHomeObjectType(id: 0x47, name: "volume", unit: "L", length: 2, encoding: .unsigned, scale: 0.1),
        BTHomeObjectType(id: 0x48, name: "volume", unit: "mL", length: 2, encoding: .unsigned, scale: 1),
        BTHomeObjectType(id: 0x49, name: "volume flow rate", unit: "m³/h", length: 2, encoding: .unsigned, scale: 0.001),
        BTHomeObjectType(id: 0x4A, name: "voltage", unit: "V", length: 2, encoding: .unsigned, scale: 0.1),
        BTHomeObjectType(id: 0x4B, name: "gas", unit: "m³", length: 3, encoding: .unsigned, scale: 0.001),
        BTHomeObjectType(id: 0x4C, name: "gas", unit: "m³", length: 4, encoding: .unsigned, scale: 0.001),
        BTHomeObjectType(id: 0x4D, name: "energy", unit: "kWh", length: 4, encoding: .unsigned, scale: 0.001),
        BTHomeObjectType(id: 0x4E, name: "volume", unit: "L", length: 4, encoding: .unsigned, scale: 0.001),
        BTHomeObjectType(id: 0x4F, name: "water", unit: "L", length: 4, encoding: .unsigned, scale: 0.001),
        BTHomeObjectType(id: 0x50, name: "timestamp", unit: "s", length: 4, encoding: .unsigned, scale: 1),
        BTHomeObjectType(id: 0x51, name: "acceleration", unit: "m/s²", length: 2, encoding: .unsigned, scale: 0.001),
        BTHomeObjectType(id: 0x52, name: "gyroscope", unit: "°/s", length: 2, encoding: .unsigned, scale: 0.001),
        BTHomeObjectType(id: 0x53, name: "text", unit: "", length: 0, encoding: .text, scale: 1),
        BTHomeObjectType(id: 0x54, name: "raw", unit: "", length: 0, encoding: .raw, scale: 1),
        BTHomeObjectType(id: 0x55, name: "volume storage", unit: "L", length: 4, encoding: .unsigned, scale: 0.001),
        BTHomeObjectType(id: 0x56, name: "conductivity", unit: "µS/cm", length: 2, encoding: .unsigned, scale: 1),
        BTHomeObjectType(id: 0x57, name: "temperature", unit: "°C", length: 1, encoding: .signed, scale: 1),
        BTHomeObjectType(id: 0x58, name: "temperature", unit: "°C", length: 1, encoding: .signed, scale: 0.35),
        BTHomeObjectType(id: 0x59, name: "count", unit: "", length: 1, encoding: .signed, scale: 1),
        BTHomeObjectType(id: 0x5A, name: "count", unit: "", length: 2, encoding: .signed, scale: 1),
        BTHomeObjectType(id: 0x5B, name: "count", unit: "", length: 4, encoding: .signed, scale: 1),
        BTHomeObjectType(id: 0x5C, name: "power", unit: "W", length: 4, encoding: .signed, scale: 0.01),
        BTHomeObjectType(id: 0x5D, name: "current", unit: "A", length: 2, encoding: .signed, scale: 0.001),
        BTHomeObjectType(id: 0x5E, name: "direction", unit: "°", length: 2, encoding: .unsigned, scale: 0.01),
        BTHomeObjectType(id: 0x5F, name: "precipitation", unit: "mm", length: 2, encoding: .unsigned, scale: 0.1),
        BTHomeObjectType(id: 0x60, name: "channel", unit: "", length: 1, encoding: .unsigned, scale: 1),
        BTHomeObjectType(id: 0x61, name: "rotational speed", unit: "rpm", length: 2, encoding: .unsigned, scale: 1),
        BTHomeObjectType(id: 0x62, name: "speed", unit: "m/s", length: 4, encoding: .signed, scale: 1e-06),
        BTHomeObjectType(id: 0x63, name: "acceleration", unit: "m/s²", length: 4, encoding: .signed, scale: 1e-06),
        BTHomeObjectType(id: 0x64, name: "light level", unit: "", length: 1, encoding: .unsigned, scale: 1),
        BTHomeObjectType(id: 0x65, name: "settings revision", unit: "", length: 1, encoding: .unsigned, scale: 1),
        BTHomeObjectType(id: 0xF0, name: "device type id", unit: "", length: 2, encoding: .unsigned, scale: 1),
        BTHomeObjectType(id: 0xF1, name: "firmware version", unit: "", length: 4, encoding: .unsigned, scale: 1),
        BTHomeObjectType(id: 0xF2, name: "firmware version", unit: "", length: 3, encoding: .unsigned, scale: 1),
    ]
}

/// The events of the button object 0x3A (bthome.io/format, "Events").
public enum BTHomeButtonEvent: UInt8, Sendable, CaseIterable {
    case none = 0x00
    case press = 0x01
    case doublePress = 0x02
    case triplePress = 0x03
    case longPress = 0x04
    case longDoublePress = 0x05
    case longTriplePress = 0x06
    case hold = 0x80
}
