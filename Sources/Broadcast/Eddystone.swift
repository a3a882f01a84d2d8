import BlemuCore

/// Google's Eddystone (github.com/google/eddystone, protocol-specification.md): the Complete
/// List of 16-bit Service UUIDs with 0xFEAA, then Service Data for 0xFEAA whose first byte is the
/// frame type. Multi-byte fields are big-endian (unlike the rest of Bluetooth).
public enum EddystoneFrame: Sendable, Equatable {
    public static let serviceUUID: UInt16 = 0xFEAA

    /// Eddystone-UID (0x00): TX power at 0 m (dBm), a 10-byte namespace and a 6-byte instance,
    /// then 2 reserved bytes (0x00).
    case uid(txPower: Int8, namespace: [UInt8], instance: [UInt8])
    /// Eddystone-URL (0x10): TX power at 0 m, and the URL (encoded with its scheme prefix and
    /// expansion codes, at most 17 bytes after the scheme).
    case url(txPower: Int8, url: String)
    /// Eddystone-TLM, unencrypted (0x20, version 0x00): battery voltage in mV (0: not measured),
    /// temperature in °C as signed 8.8 fixed point (nil: not measured, sent as 0x8000), the
    /// advertising PDUs sent since power-up, and the time since power-up in 0.1 s.
    case telemetry(batteryMillivolts: UInt16, temperature: Double?, advertisingCount: UInt32, uptimeTenths: UInt32)

    static let uidType: UInt8 = 0x00
    static let urlType: UInt8 = 0x10
    static let tlmType: UInt8 = 0x20
    static let eidType: UInt8 = 0x30

    /// eddystone-url: the scheme prefixes, codes 0x00-0x03.
    public static let schemes = ["http://www.", "https://www.", "http://", "https://"]
    /// eddystone-url: the expansions, codes 0x00-0x0D; 0x0E-0x20 and 0x7F-0xFF are reserved.
    public static let expansions = [".com/", ".org/", ".edu/", ".net/", ".info/", ".biz/", ".gov/",
                                    ".com", ".org", ".edu", ".net", ".info", ".biz", ".gov"]
    public static let maximumEncodedURLLength = 17

    /// Why a frame could not be encoded.
    public enum EncodeError: Error, Equatable, Sendable {
        case namespaceOrInstanceLength
        /// No scheme the format has ("http://", "https://", with or without "www.").
        case unsupportedScheme
        /// A character outside 0x21-0x7E: the URL must be written percent-encoded.
        case unencodableCharacter(UInt8)
        /// More than 17 bytes after the scheme, once expanded.
        case urlTooLong(Int)
        /// A temperature 8.8 fixed point cannot hold (below -128 or from 128 °C).
        case temperatureOutOfRange
    }

    /// The service data after the UUID: the frame type and its fields.
    public func payload() throws(EncodeError) -> [UInt8] {
        switch self {
        case .uid(let txPower, let namespace, let instance):
            guard namespace.count == 10, instance.count == 6 else { throw .namespaceOrInstanceLength }
            return [Self.uidType, UInt8(bitPattern: txPower)] + namespace + instance + [0x00, 0x00]
        case .url(let txPower, let url):
            return [Self.urlType, UInt8(bitPattern: txPower)] + (try Self.encodeURL(url))
        case .telemetry(let millivolts, let temperature, let count, let uptime):
            var fixed: UInt16 = 0x8000
            if let temperature {
                let scaled = (temperature * 256).rounded()
                guard scaled >= -32768, scaled <= 32767 else { throw .temperatureOutOfRange }
                fixed = UInt16(bitPattern: Int16(scaled))
            }
            return [Self.tlmType, 0x00] + bigEndian(UInt32(millivolts), 2) + bigEndian(UInt32(fixed), 2)
                + bigEndian(count, 4) + bigEndian(uptime, 4)
        }
    }

    /// Flags, the 16-bit service UUID list with 0xFEAA, and the frame's service data.
    public func advertisingData() throws(EncodeError) -> [UInt8] {
        let uuid = [UInt8(Self.serviceUUID & 0xFF), UInt8(Self.serviceUUID >> 8)]
        return ADStructure.generalDiscoverableFlags
            + ADStructure.encode(type: ADStructure.completeServiceUUIDs16, uuid)
            + ADStructure.encode(type: ADStructure.serviceData16, uuid + (try payload()))
    }

    /// Decodes the service data after the UUID. Throws for an unknown or unsupported frame
    /// (EID 0x30 and encrypted TLM are `.unknownType`), a wrong length, or a reserved URL byte.
    public init(payload bytes: ArraySlice<UInt8>) throws(DecodeError) {
        var reader = ByteReader(bytes)
        let type = try reader.u8()
        switch type {
        case Self.uidType:
            let txPower = try reader.i8()
            let namespace = Array(try reader.bytes(10))
            let instance = Array(try reader.bytes(6))
            // The two reserved bytes are left out by some beacons; anything else is refused.
            guard reader.remaining == 0 || reader.remaining == 2 else {
                throw DecodeError(.lengthMismatch, "Eddystone-UID with \(reader.remaining) bytes after the instance, not 2")
            }
            self = .uid(txPower: txPower, namespace: namespace, instance: instance)
        case Self.urlType:
            let txPower = try reader.i8()
            let scheme = Int(try reader.u8())
            guard scheme < Self.schemes.count else { throw DecodeError(.invalidValue, "Eddystone-URL scheme code 0x\(String(scheme, radix: 16))") }
            guard reader.remaining <= Self.maximumEncodedURLLength else {
                throw DecodeError(.trailingBytes, "Eddystone-URL of \(reader.remaining) bytes after the scheme, more than 17")
            }
            var url = Self.schemes[scheme]
            while !reader.isAtEnd {
                let byte = try reader.u8()
                if Int(byte) < Self.expansions.count {
                    url += Self.expansions[Int(byte)]
                } else if byte >= 0x21 && byte <= 0x7E {
                    url.unicodeScalars.append(Unicode.Scalar(byte))
                } else {
                    throw DecodeError(.invalidValue, "Eddystone-URL reserved byte 0x\(String(byte, radix: 16))")
                }
            }
            self = .url(txPower: txPower, url: url)
        case Self.tlmType:
            let version = try reader.u8()
            guard version == 0x00 else { throw DecodeError(.unknownType, "Eddystone-TLM version 0x\(String(version, radix: 16)) (encrypted TLM is not decoded)") }
            let millivolts = try Self.readBigEndian(&reader, 2)
            let fixed = UInt16(try Self.readBigEndian(&reader, 2))
            let count = try Self.readBigEndian(&reader, 4)
            let uptime = try Self.readBigEndian(&reader, 4)
            guard reader.isAtEnd else { throw DecodeError(.trailingBytes, "Eddystone-TLM longer than 14 bytes") }
            self = .telemetry(batteryMillivolts: UInt16(millivolts), temperature: fixed == 0x8000 ? nil : Double(Int16(bitPattern: fixed)) / 256,
                              advertisingCount: count, uptimeTenths: uptime)
        default:
            throw DecodeError(.unknownType, "Eddystone frame type 0x\(String(type, radix: 16))\(type == Self.eidType ? " (EID, not decoded)" : "")")
        }
    }

    /// The Eddystone frame in advertising data; nil when there is no service data for 0xFEAA.
    public static func find(in advertisingData: ArraySlice<UInt8>) throws(DecodeError) -> EddystoneFrame? {
        let structures = try ADStructure.parse(advertisingData)
        guard let payload = ADStructure.serviceData16(structures, uuid: serviceUUID) else { return nil }
        return try EddystoneFrame(payload: payload)
    }

    /// The scheme code and the URL's bytes after it, expansions taken greedily, longest first.
    public static func encodeURL(_ url: String) throws(EncodeError) -> [UInt8] {
        let text = Array(url.utf8)
        // Longest scheme first, so "https://www." wins over "https://".
        let byLength = schemes.indices.sorted { schemes[$0].utf8.count > schemes[$1].utf8.count }
        guard let scheme = byLength.first(where: { text.starts(with: Array(schemes[$0].utf8)) }) else { throw .unsupportedScheme }
        var out = [UInt8(scheme)]
        var index = schemes[scheme].utf8.count
        let expansionBytes = expansions.map { Array($0.utf8) }
        let expansionOrder = expansionBytes.indices.sorted { expansionBytes[$0].count > expansionBytes[$1].count }
        while index < text.count {
            if let code = expansionOrder.first(where: { text[index...].starts(with: expansionBytes[$0]) }) {
                out.append(UInt8(code))
                index += expansionBytes[code].count
                continue
            }
            let byte = text[index]
            guard byte >= 0x21 && byte <= 0x7E else { throw .unencodableCharacter(byte) }
            out.append(byte)
            index += 1
        }
        guard out.count - 1 <= maximumEncodedURLLength else { throw .urlTooLong(out.count - 1) }
        return out
    }

    private func bigEndian(_ value: UInt32, _ count: Int) -> [UInt8] {
        (0..<count).reversed().map { UInt8(truncatingIfNeeded: value >> (8 * UInt32($0))) }
    }

    private static func readBigEndian(_ reader: inout ByteReader, _ count: Int) throws(DecodeError) -> UInt32 {
        var value: UInt32 = 0
        for _ in 0..<count { value = value << 8 | UInt32(try reader.u8()) }
        return value
    }
}
