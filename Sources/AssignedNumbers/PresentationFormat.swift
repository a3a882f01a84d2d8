import BlemuCore

/// A Characteristic Presentation Format descriptor (0x2904; Vol 3, Part G, 3.3.3.5): how the
/// characteristic's value is to be read — its Format, Exponent, Unit, Name Space and Description
/// — and the value decoded with it ("22.50 °C" from `ca08`, sint16, exponent -2, 0x272F).
public struct PresentationFormat: Equatable, Sendable {
    public var format: UInt8
    /// "The exponent field is used with integer data types to determine how the value is further
    /// formatted: actual value = Characteristic Value * 10^Exponent" (3.3.3.5.2).
    public var exponent: Int8
    public var unit: UInt16
    public var namespace: UInt8
    public var description: UInt16

    /// "The Characteristic Presentation Format declaration shall be 7 octets" (Table 3.16):
    /// anything else is not one (a peer's bytes: nil, never a trap).
    public init?(_ bytes: [UInt8]) {
        guard bytes.count == 7 else { return nil }
        format = bytes[0]
        exponent = Int8(bitPattern: bytes[1])
        unit = UInt16(bytes[2]) | UInt16(bytes[3]) << 8
        namespace = bytes[4]
        description = UInt16(bytes[5]) | UInt16(bytes[6]) << 8
    }

    /// The value as the descriptor says to read it, with its unit; nil when the format is one
    /// this does not decode (nibbles, 12-bit, 128-bit, SFLOAT/FLOAT, struct) or the value's
    /// length is not the format's.
    public func decode(_ value: [UInt8]) -> String? {
        guard let number = number(value) else { return nil }
        let unit = unitText
        return unit.isEmpty ? number : number + " " + unit
    }

    /// Format Types (Assigned Numbers 2.4.1) → (octets, signed); nil for those not decoded.
    static func integerLayout(_ format: UInt8) -> (count: Int, signed: Bool)? {
        switch format {
        case 0x04: (1, false)
        case 0x06: (2, false)
        case 0x07: (3, false)
        case 0x08: (4, false)
        case 0x09: (6, false)
        case 0x0A: (8, false)
        case 0x0C: (1, true)
        case 0x0E: (2, true)
        case 0x0F: (3, true)
        case 0x10: (4, true)
        case 0x11: (6, true)
        case 0x12: (8, true)
        default: nil
        }
    }

    func number(_ value: [UInt8]) -> String? {
        switch format {
        case 0x01:  // boolean
            guard value.count == 1, value[0] <= 1 else { return nil }
            return value[0] == 1 ? "true" : "false"
        case 0x14:  // IEEE-754 32-bit
            guard value.count == 4 else { return nil }
            return scaled(Double(Float(bitPattern: UInt32(littleEndian: value))))
        case 0x15:
            guard value.count == 8 else { return nil }
            return scaled(Double(bitPattern: UInt64(littleEndian: value)))
        case 0x19:  // utf8s: a peer's text, its control characters shown
            return "\"" + VisibleText.make(utf8: value) + "\""
        default:
            guard let layout = Self.integerLayout(format), value.count == layout.count else { return nil }
            let raw = UInt64(littleEndian: value)
            let bits = layout.count * 8
            var negative = false
            var magnitude = raw
            if layout.signed, (raw >> (bits - 1)) & 1 == 1 {
                negative = true
                // Two's complement of a `bits`-wide number: its magnitude.
                magnitude = bits < 64 ? (1 << bits) - raw : 0 &- raw
            }
            return (negative ? "-" : "") + Self.decimal(magnitude, exponent: Int(exponent))
        }
    }

    /// magnitude × 10^exponent, written exactly: "22.50", "0.05", "1200".
    static func decimal(_ magnitude: UInt64, exponent: Int) -> String {
        let digits = String(magnitude)
        // Far exponents (a peer's byte) would make long strings: scientific notation.
        guard (-20...20).contains(exponent) else { return digits + "e" + String(exponent) }
        if exponent >= 0 { return magnitude == 0 ? "0" : digits + String(repeating: "0", count: exponent) }
        let places = -exponent
        let padded = String(repeating: "0", count: max(0, places + 1 - digits.count)) + digits
        return padded.dropLast(places) + "." + padded.suffix(places)
    }

    private func scaled(_ value: Double) -> String {
        exponent == 0 ? "\(value)" : "\(value)e\(exponent)"
    }

    /// The unit as people write it: a symbol for the common ones, else the name in the
    /// table's parentheses ("Celsius temperature (degree Celsius)" → "degree Celsius"), else
    /// the name, else the number; unitless (0x2700) is nothing.
    public var unitText: String {
        switch unit {
        case 0x2700: return ""
        case 0x272F: return "°C"
        case 0x27AD: return "%"
        case 0x2703: return "s"
        case 0x2701: return "m"
        case 0x2702: return "kg"
        case 0x2728: return "V"
        case 0x2724: return "Pa"
        case 0x2725: return "J"
        case 0x27A8: return "rpm"
        default:
            guard let name = AssignedNumbers.unitName(unit) else { return "(unit \(Hex.word(unit)))" }
            if let open = name.lastIndex(of: "("), name.hasSuffix(")") {
                return String(name[name.index(after: open)..<name.index(before: name.endIndex)])
            }
            return name
        }
    }
}

extension UInt32 {
    init(littleEndian bytes: [UInt8]) {
        self = bytes.reversed().reduce(0) { $0 << 8 | UInt32($1) }
    }
}

extension UInt64 {
    /// At most 8 bytes, little-endian.
    init(littleEndian bytes: [UInt8]) {
        self = bytes.prefix(8).reversed().reduce(0) { $0 << 8 | UInt64($1) }
    }
}
