/// A Bluetooth UUID: 16-, 32- or 128-bit, all of them points in one 128-bit space
/// built on the Bluetooth Base UUID 00000000-0000-1000-8000-00805F9B34FB (Vol 3, Part B, 2.5.1).
public struct BluetoothUUID: Hashable, Sendable, CustomStringConvertible {
    /// Most and least significant 64 bits of the 128-bit value.
    public let high: UInt64
    public let low: UInt64

    static let baseHighMask: UInt64 = 0x0000_0000_FFFF_FFFF
    static let baseHigh: UInt64 = 0x0000_0000_0000_1000
    static let baseLow: UInt64 = 0x8000_0080_5F9B_34FB

    public init(high: UInt64, low: UInt64) {
        self.high = high
        self.low = low
    }

    /// A 16-bit assigned number, e.g. `0x180D` for the Heart Rate service.
    public init(_ short: UInt16) {
        self.init(high: UInt64(short) << 32 | Self.baseHigh, low: Self.baseLow)
    }

    public init(uint32 value: UInt32) {
        self.init(high: UInt64(value) << 32 | Self.baseHigh, low: Self.baseLow)
    }

    /// Parses `180D`, `0x180D`, `0000180d` or the 36-character form; nil otherwise.
    public init?(_ text: String) {
        var t = text
        if t.hasPrefix("0x") || t.hasPrefix("0X") { t.removeFirst(2) }
        if t.count == 4, let v = UInt16(t, radix: 16) { self.init(v); return }
        if t.count == 8, let v = UInt32(t, radix: 16) { self.init(uint32: v); return }
        let groups = t.split(separator: "-", omittingEmptySubsequences: false)
        guard t.count == 36, groups.map(\.count) == [8, 4, 4, 4, 12] else { return nil }
        let hex = groups.joined()
        guard let high = UInt64(hex.prefix(16), radix: 16), let low = UInt64(hex.suffix(16), radix: 16) else {
            return nil
        }
        self.init(high: high, low: low)
    }

    /// Decodes the little-endian wire form: 2, 4 or 16 bytes.
    public init(littleEndian bytes: ArraySlice<UInt8>) throws(DecodeError) {
        var reader = ByteReader(bytes)
        switch bytes.count {
        case 2: self.init(try reader.u16())
        case 4: self.init(uint32: try reader.u32())
        case 16:
            let low = try reader.u64()
            let high = try reader.u64()
            self.init(high: high, low: low)
        default: throw DecodeError(.invalidValue, "UUID of \(bytes.count) bytes")
        }
    }

    public var isBased: Bool { high & Self.baseHighMask == Self.baseHigh && low == Self.baseLow }

    /// The 16-bit form, when this UUID has one.
    public var uint16: UInt16? {
        guard isBased, high >> 48 == 0 else { return nil }
        return UInt16(truncatingIfNeeded: high >> 32)
    }

    /// Bytes in ATT's wire form: 2 for a 16-bit UUID, else 16 (ATT has no 32-bit form,
    /// Vol 3, Part F, 3.2.1).
    public var attBytes: [UInt8] {
        var out: [UInt8] = []
        appendATT(to: &out)
        return out
    }

    public var attByteCount: Int { uint16 != nil ? 2 : 16 }

    public func appendATT(to out: inout [UInt8]) {
        if let short = uint16 { out.appendLE(short) } else { append128(to: &out) }
    }

    public func append128(to out: inout [UInt8]) {
        out.appendLE(low)
        out.appendLE(high)
    }

    public var description: String {
        if let short = uint16 {
            let s = String(short, radix: 16, uppercase: true)
            return String(repeating: "0", count: 4 - s.count) + s
        }
        func hex(_ v: UInt64, _ digits: Int) -> String {
            let s = String(v, radix: 16)
            return String(repeating: "0", count: digits - s.count) + s
        }
        return "\(hex(high >> 32, 8))-\(hex(high >> 16 & 0xFFFF, 4))-\(hex(high & 0xFFFF, 4))-"
            + "\(hex(low >> 48, 4))-\(hex(low & 0xFFFF_FFFF_FFFF, 12))"
    }
}
