import BlemuCore

/// Apple's iBeacon (Proximity Beacon Specification, R1): Manufacturer Specific Data with Apple's
/// company identifier 0x004C, the type 0x02 and length 0x15 (21 bytes follow), the proximity
/// UUID (16 bytes, as written), major and minor (big-endian, unlike the rest of Bluetooth), and
/// the measured power: the RSSI at 1 m, a signed byte in dBm. With the Flags AD, 30 bytes.
public struct IBeacon: Sendable, Equatable {
    public static let appleCompanyID: UInt16 = 0x004C
    static let type: UInt8 = 0x02
    static let length: UInt8 = 0x15

    /// The proximity UUID's 16 bytes, most significant first (as "E2C56DB5-…" writes it).
    public var uuid: [UInt8]
    public var major: UInt16
    public var minor: UInt16
    /// RSSI at 1 m, dBm.
    public var measuredPower: Int8

    /// nil for a UUID of another length than 16 bytes.
    public init?(uuid: [UInt8], major: UInt16, minor: UInt16, measuredPower: Int8) {
        guard uuid.count == 16 else { return nil }
        self.uuid = uuid
        self.major = major
        self.minor = minor
        self.measuredPower = measuredPower
    }

    /// The manufacturer data after the company identifier.
    public var manufacturerPayload: [UInt8] {
        [Self.type, Self.length] + uuid + [UInt8(major >> 8), UInt8(major & 0xFF), UInt8(minor >> 8), UInt8(minor & 0xFF),
                                           UInt8(bitPattern: measuredPower)]
    }

    /// Flags, then the manufacturer data (30 bytes: it fits a legacy advertisement).
    public var advertisingData: [UInt8] {
        ADStructure.generalDiscoverableFlags
            + ADStructure.encode(type: ADStructure.manufacturerData, [UInt8(Self.appleCompanyID & 0xFF), UInt8(Self.appleCompanyID >> 8)] + manufacturerPayload)
    }

    /// From the manufacturer data after Apple's company identifier. Throws for another Apple
    /// type (0x02 is the iBeacon) or a length other than 0x15.
    public init(manufacturerPayload bytes: ArraySlice<UInt8>) throws(DecodeError) {
        var reader = ByteReader(bytes)
        let type = try reader.u8()
        guard type == Self.type else { throw DecodeError(.unknownType, "Apple manufacturer data of type 0x\(String(type, radix: 16)), not an iBeacon (0x02)") }
        let length = try reader.u8()
        guard length == Self.length else { throw DecodeError(.lengthMismatch, "iBeacon length \(length), not 21") }
        guard reader.remaining == Int(Self.length) else {
            throw DecodeError(reader.remaining < Int(Self.length) ? .truncated : .trailingBytes, "iBeacon of \(reader.remaining) bytes after the length, not 21")
        }
        uuid = Array(try reader.bytes(16))
        major = UInt16(try reader.u8()) << 8 | UInt16(try reader.u8())
        minor = UInt16(try reader.u8()) << 8 | UInt16(try reader.u8())
        measuredPower = try reader.i8()
    }

    /// The iBeacon in advertising data; nil when there is none (no Apple manufacturer data, or
    /// another Apple type); throws for a malformed one.
    public static func find(in advertisingData: ArraySlice<UInt8>) throws(DecodeError) -> IBeacon? {
        let structures = try ADStructure.parse(advertisingData)
        guard let payload = ADStructure.manufacturerData(structures, company: appleCompanyID),
              payload.first == type else { return nil }
        return try IBeacon(manufacturerPayload: payload)
    }

    /// "E2C56DB5-DFFB-48D2-B060-D0F5A71096E0" (dashes optional) → 16 bytes; nil otherwise.
    public static func uuidBytes(_ text: String) -> [UInt8]? {
        let hex = Array(text.utf8.filter { $0 != UInt8(ascii: "-") })
        guard hex.count == 32 else { return nil }
        var bytes: [UInt8] = []
        for index in stride(from: 0, to: 32, by: 2) {
            guard let high = Hex.digit(hex[index]), let low = Hex.digit(hex[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
        }
        return bytes
    }

    /// The UUID as written: 8-4-4-4-12 upper-case hex digits.
    public var uuidText: String {
        let hex = uuid.map { ($0 < 16 ? "0" : "") + String($0, radix: 16, uppercase: true) }
        return [hex[0..<4], hex[4..<6], hex[6..<8], hex[8..<10], hex[10..<16]].map { $0.joined() }.joined(separator: "-")
    }
}
