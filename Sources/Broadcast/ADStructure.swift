import BlemuCore

/// One AD structure of advertising data (Core Vol 3, Part C, 11: `[length][AD type][length - 1
/// data bytes]`), as the broadcast formats need them: service data and manufacturer data.
public struct ADStructure: Sendable, Equatable {
    public static let flags: UInt8 = 0x01
    public static let completeServiceUUIDs16: UInt8 = 0x03
    /// Service Data - 16-bit UUID (Core Supplement, Part A, 1.11): the UUID, then the data.
    public static let serviceData16: UInt8 = 0x16
    /// Manufacturer Specific Data (Core Supplement, Part A, 1.4): the company identifier, then the data.
    public static let manufacturerData: UInt8 = 0xFF
    /// LE General Discoverable, BR/EDR not supported: what BTHome asks for and beacons send.
    public static let generalDiscoverableFlags: [UInt8] = [0x02, flags, 0x06]

    public let type: UInt8
    public let data: ArraySlice<UInt8>

    /// Splits advertising data into structures. A length of 0 ends the significant part (Vol 3,
    /// Part C, 11: the rest is zero padding); a structure running past the end throws.
    public static func parse(_ bytes: ArraySlice<UInt8>) throws(DecodeError) -> [ADStructure] {
        var structures: [ADStructure] = []
        var index = bytes.startIndex
        while index < bytes.endIndex {
            let length = Int(bytes[index])
            if length == 0 { break }
            guard bytes.endIndex - index - 1 >= length else {
                throw DecodeError(.lengthMismatch, "AD structure of length \(length) with \(bytes.endIndex - index - 1) bytes left")
            }
            structures.append(ADStructure(type: bytes[index + 1], data: bytes[(index + 2)..<(index + 1 + length)]))
            index += 1 + length
        }
        return structures
    }

    /// The data after the UUID of the first Service Data - 16-bit UUID structure for `uuid`.
    public static func serviceData16(_ structures: [ADStructure], uuid: UInt16) -> ArraySlice<UInt8>? {
        for structure in structures where structure.type == serviceData16 && structure.data.count >= 2 {
            let start = structure.data.startIndex
            if UInt16(structure.data[start]) | UInt16(structure.data[start + 1]) << 8 == uuid { return structure.data.dropFirst(2) }
        }
        return nil
    }

    /// The data after the company identifier of the first Manufacturer Specific Data for `company`.
    public static func manufacturerData(_ structures: [ADStructure], company: UInt16) -> ArraySlice<UInt8>? {
        for structure in structures where structure.type == manufacturerData && structure.data.count >= 2 {
            let start = structure.data.startIndex
            if UInt16(structure.data[start]) | UInt16(structure.data[start + 1]) << 8 == company { return structure.data.dropFirst(2) }
        }
        return nil
    }

    /// `[length][type][data]`; `data` at most 254 bytes (the caller's formats are far shorter).
    static func encode(type: UInt8, _ data: [UInt8]) -> [UInt8] {
        precondition(data.count <= 254, "an AD structure holds at most 254 data bytes")
        return [UInt8(data.count + 1), type] + data
    }
}
