import BlemuCore

/// Advertising Data (AD) types this stack writes or reads
/// (Core Specification Supplement, Part A, Section 1; numbers from Assigned Numbers, 2.3).
public enum ADType {
    public static let flags: UInt8 = 0x01
    public static let incompleteServiceUUIDs16: UInt8 = 0x02
    public static let completeServiceUUIDs16: UInt8 = 0x03
    public static let incompleteServiceUUIDs32: UInt8 = 0x04
    public static let completeServiceUUIDs32: UInt8 = 0x05
    public static let incompleteServiceUUIDs128: UInt8 = 0x06
    public static let completeServiceUUIDs128: UInt8 = 0x07
    public static let shortenedLocalName: UInt8 = 0x08
    public static let completeLocalName: UInt8 = 0x09
    public static let txPowerLevel: UInt8 = 0x0A
    public static let appearance: UInt8 = 0x19
    public static let manufacturerSpecificData: UInt8 = 0xFF
}

/// What a peripheral wants to say about itself before anyone connects.
public struct AdvertisingContent: Sendable, Equatable {
    /// LE General Discoverable Mode | BR/EDR Not Supported (Core Supplement, Part A, 1.3).
    public static let defaultFlags: UInt8 = 0x06

    /// The local name; empty for none.
    public var name: String
    /// Service UUIDs, 16-bit and 128-bit mixed; the order is the priority when room runs out.
    public var serviceUUIDs: [BluetoothUUID]
    /// GAP Appearance (Assigned Numbers, 2.6), e.g. 0x0340 for a generic heart rate sensor.
    public var appearance: UInt16?
    /// Transmit power in dBm (Core Supplement, Part A, 1.5).
    public var txPowerLevel: Int8?
    /// The Flags AD value; 0 leaves the Flags structure out (allowed only when not discoverable).
    public var flags: UInt8
    /// Manufacturer Specific Data, starting with the 2-byte little-endian company identifier.
    public var manufacturerData: [UInt8]?

    public init(name: String = "", serviceUUIDs: [BluetoothUUID] = [], appearance: UInt16? = nil,
                txPowerLevel: Int8? = nil, flags: UInt8 = AdvertisingContent.defaultFlags,
                manufacturerData: [UInt8]? = nil) {
        self.name = name
        self.serviceUUIDs = serviceUUIDs
        self.appearance = appearance
        self.txPowerLevel = txPowerLevel
        self.flags = flags
        self.manufacturerData = manufacturerData
    }
}

/// The bytes for LE Set Advertising Data and LE Set Scan Response Data (Vol 4, Part E, 7.8.7 and
/// 7.8.8), each a sequence of AD structures `[length][AD type][data]` (Vol 3, Part C, 11).
public struct AdvertisingPayload: Sendable, Equatable {
    /// Legacy advertising PDUs carry at most 31 octets of AdvData / ScanRspData
    /// (Vol 6, Part B, 2.3.1.1 ADV_IND and 2.3.2.2 SCAN_RSP).
    public static let maximumLength = 31
    /// Extended advertising carries at most 1650 octets of host advertising data (Vol 6,
    /// Part B, 2.3.4.9; Vol 4, Part E, 7.8.57: Max_Advertising_Data_Length 31 to 1650).
    public static let extendedMaximumLength = 1650
    /// A connectable extended set's data goes out in its AUX_ADV_IND alone: that PDU has no
    /// AuxPtr when connectable, so no AUX_CHAIN_IND can carry the rest (Vol 6, Part B, 2.3.4).
    /// Its payload holds at most 255 octets (2.3.4), less 1 for the extended header's length
    /// and AdvMode, 1 for its flags, 6 for AdvA and 2 for ADI: 245. A controller that adds an
    /// optional field (TxPower) has less room, and refuses more (7.8.54: Packet Too Long).
    public static let connectableExtendedMaximumLength = 245

    public var advertisingData: [UInt8]
    public var scanResponseData: [UInt8]
    /// What fit in neither payload, one human-readable line each, for the caller to log as a warning.
    public var omitted: [String]

    public init(advertisingData: [UInt8], scanResponseData: [UInt8], omitted: [String]) {
        self.advertisingData = advertisingData
        self.scanResponseData = scanResponseData
        self.omitted = omitted
    }

    /// Lays `content` out into an advertisement and a scan response of at most 31 bytes each.
    ///
    /// The rule, chosen so that a phone app sees what it filters and lists on first:
    ///
    /// Advertising data, in this order, each only if it fits in what is left of the 31 bytes:
    /// 1. Flags (`02 01 xx`), unless `flags` is 0. The Flags structure is never put in the scan
    ///    response (Core Supplement, Part A, 1.3.2).
    /// 2. Service UUIDs, taken in `serviceUUIDs` order (duplicates dropped): each goes in if it fits,
    ///    counting 2 bytes for the header of its list when it is the first of its size; one that does
    ///    not fit waits for the scan response, and later, smaller ones may still go in. They are
    ///    written as one 16-bit list, then one 128-bit list (32-bit UUIDs travel in 128-bit form).
    ///    A list is "Complete" (0x03 / 0x07) only when it holds every UUID of its size, else
    ///    "Incomplete" (0x02 / 0x06) (Core Supplement, Part A, 1.1).
    /// 3. Appearance (4 bytes), then TX Power Level (3 bytes).
    /// 4. The local name: Complete (0x09) if it fits, else Shortened (0x08) to the room left, cut
    ///    between whole characters (grapheme clusters, so never inside a UTF-8 sequence), at least
    ///    one character, or left out when not even one fits.
    /// 5. Manufacturer Specific Data, if it still fits.
    ///
    /// Scan response, in this order, each only if it fits:
    /// 1. The Complete Local Name, when the advertisement carries only a shortened name or none.
    ///    A name longer than 29 bytes fits nowhere complete: the scan response then carries the longest
    ///    shortened form (if longer than the advertisement's) and the complete name is reported omitted.
    /// 2. The service UUIDs that did not fit in the advertisement, same rule as above.
    /// 3. Appearance, TX Power Level, Manufacturer Specific Data, if they did not fit in the advertisement.
    ///
    /// Whatever fits in neither is listed in `omitted`. Manufacturer data shorter than its 2-byte
    /// company identifier is malformed and is omitted too.
    public static func build(_ content: AdvertisingContent) -> AdvertisingPayload {
        var advertisement = ADBlock()
        var scanResponse = ADBlock()
        var omitted: [String] = []

        if content.flags != 0 {
            advertisement.append(ADType.flags, [content.flags])
        }

        var seen = Set<BluetoothUUID>()
        let uuids = content.serviceUUIDs.filter { seen.insert($0).inserted }
        let total16 = uuids.count(where: { $0.uint16 != nil })
        let total128 = uuids.count - total16

        let (advertised, waiting) = placeUUIDs(uuids, room: advertisement.room)
        advertisement.appendUUIDLists(advertised, total16: total16, total128: total128)

        var pending: [(type: UInt8, data: [UInt8], label: String)] = []
        func place(_ type: UInt8, _ data: [UInt8], _ label: String) {
            if advertisement.fits(data.count) {
                advertisement.append(type, data)
            } else {
                pending.append((type, data, label))
            }
        }
        if let appearance = content.appearance {
            var data: [UInt8] = []
            data.appendLE(appearance)
            place(ADType.appearance, data, "appearance \(Hex.word(appearance))")
        }
        if let power = content.txPowerLevel {
            place(ADType.txPowerLevel, [UInt8(bitPattern: power)], "TX power level \(power) dBm")
        }

        // The name: complete in the advertisement, or shortened there and complete in the scan response.
        let nameBytes = Array(content.name.utf8)
        var advertisedNameLength = 0
        var nameNeedsScanResponse = false
        if !nameBytes.isEmpty {
            if advertisement.fits(nameBytes.count) {
                advertisement.append(ADType.completeLocalName, nameBytes)
                advertisedNameLength = nameBytes.count
            } else {
                nameNeedsScanResponse = true
                let short = namePrefix(content.name, maxBytes: advertisement.room - 2)
                if !short.isEmpty {
                    advertisement.append(ADType.shortenedLocalName, short)
                    advertisedNameLength = short.count
                }
            }
        }

        if let manufacturer = content.manufacturerData {
            if manufacturer.count < 2 {
                omitted.append("manufacturer data (\(manufacturer.count) bytes): shorter than its 2-byte company identifier")
            } else {
                place(ADType.manufacturerSpecificData, manufacturer, "manufacturer data (\(manufacturer.count) bytes)")
            }
        }

        if nameNeedsScanResponse {
            if scanResponse.fits(nameBytes.count) {
                scanResponse.append(ADType.completeLocalName, nameBytes)
            } else {
                let short = namePrefix(content.name, maxBytes: scanResponse.room - 2)
                if short.count > advertisedNameLength {
                    scanResponse.append(ADType.shortenedLocalName, short)
                }
                omitted.append("complete local name \"\(content.name)\" (\(nameBytes.count) bytes UTF-8): "
                               + "one AD structure holds at most \(maximumLength - 2); "
                               + (max(short.count, advertisedNameLength) > 0
                                  ? "sent shortened to \(max(short.count, advertisedNameLength)) bytes"
                                  : "not even its first character fits"))
            }
        }

        let (scanned, leftOver) = placeUUIDs(waiting, room: scanResponse.room)
        scanResponse.appendUUIDLists(scanned, total16: total16, total128: total128)
        for uuid in leftOver {
            omitted.append("\(uuid.uint16 != nil ? 16 : 128)-bit service UUID \(uuid): "
                           + "no room in advertising data or scan response")
        }

        for item in pending {
            if scanResponse.fits(item.data.count) {
                scanResponse.append(item.type, item.data)
            } else {
                omitted.append("\(item.label): no room in advertising data or scan response")
            }
        }

        return AdvertisingPayload(advertisingData: advertisement.bytes, scanResponseData: scanResponse.bytes,
                                  omitted: omitted)
    }

    /// Splits AD bytes into structures (Vol 3, Part C, 11): `[length][type][length - 1 data bytes]`.
    /// A length of 0 ends the significant part (what follows is zero padding). A structure whose
    /// length runs past the end throws `.lengthMismatch`.
    public static func parseADStructures(_ bytes: ArraySlice<UInt8>) throws(DecodeError)
        -> [(type: UInt8, data: ArraySlice<UInt8>)] {
        var reader = ByteReader(bytes)
        var structures: [(type: UInt8, data: ArraySlice<UInt8>)] = []
        while !reader.isAtEnd {
            let length = Int(try reader.u8())
            if length == 0 { break }
            guard reader.remaining >= length else {
                throw DecodeError(.lengthMismatch, "AD structure of length \(length) with \(reader.remaining) bytes left")
            }
            let type = try reader.u8()
            let data = try reader.bytes(length - 1)
            structures.append((type, data))
        }
        return structures
    }

    /// Greedy placement in priority order; returns what went in and what did not.
    private static func placeUUIDs(_ uuids: [BluetoothUUID], room: Int)
        -> (placed: [BluetoothUUID], rest: [BluetoothUUID]) {
        var room = room
        var placed: [BluetoothUUID] = []
        var rest: [BluetoothUUID] = []
        var has16 = false
        var has128 = false
        for uuid in uuids {
            let is16 = uuid.uint16 != nil
            let header = (is16 ? has16 : has128) ? 0 : 2
            let cost = header + (is16 ? 2 : 16)
            if cost <= room {
                room -= cost
                placed.append(uuid)
                if is16 { has16 = true } else { has128 = true }
            } else {
                rest.append(uuid)
            }
        }
        return (placed, rest)
    }

    /// The UTF-8 bytes of the longest prefix of whole characters of `name` within `maxBytes`.
    private static func namePrefix(_ name: String, maxBytes: Int) -> [UInt8] {
        var out: [UInt8] = []
        for character in name {
            let bytes = Array(String(character).utf8)
            guard out.count + bytes.count <= maxBytes else { break }
            out += bytes
        }
        return out
    }
}

/// One advertising or scan response payload being filled, never past 31 bytes.
private struct ADBlock {
    private(set) var bytes: [UInt8] = []

    var room: Int { AdvertisingPayload.maximumLength - bytes.count }

    /// Whether a structure with `dataCount` data bytes (plus length and type) still fits.
    func fits(_ dataCount: Int) -> Bool { 2 + dataCount <= room }

    mutating func append(_ type: UInt8, _ data: [UInt8]) {
        precondition(fits(data.count) && data.count <= 254, "AD structure does not fit")
        bytes.append(UInt8(data.count + 1))
        bytes.append(type)
        bytes += data
    }

    /// Writes the 16-bit list, then the 128-bit list, each Complete only when it holds all of its size.
    mutating func appendUUIDLists(_ uuids: [BluetoothUUID], total16: Int, total128: Int) {
        var list16: [UInt8] = []
        var list128: [UInt8] = []
        var count16 = 0
        for uuid in uuids {
            if let short = uuid.uint16 {
                list16.appendLE(short)
                count16 += 1
            } else {
                uuid.append128(to: &list128)
            }
        }
        if count16 > 0 {
            append(count16 == total16 ? ADType.completeServiceUUIDs16 : ADType.incompleteServiceUUIDs16, list16)
        }
        let count128 = uuids.count - count16
        if count128 > 0 {
            append(count128 == total128 ? ADType.completeServiceUUIDs128 : ADType.incompleteServiceUUIDs128, list128)
        }
    }
}

extension AdvertisingContent {
    /// What a scanner learns from an advertiser's advertising data and scan response (for scan mode).
    ///
    /// The name is the Complete Local Name if either payload has one, else the longest Shortened one.
    /// UUIDs come in the order met (16-, 32-, 128-bit lists), without duplicates. `flags` is 0 when
    /// no Flags structure is present. Unknown AD types are skipped. Malformed known structures
    /// (a UUID list whose length is not a multiple of the UUID size, a 3-byte appearance, ...) throw
    /// `.invalidValue`.
    public init(decodingAdvertisingData advertisingData: ArraySlice<UInt8>,
                scanResponseData: ArraySlice<UInt8> = []) throws(DecodeError) {
        let structures = try AdvertisingPayload.parseADStructures(advertisingData)
            + AdvertisingPayload.parseADStructures(scanResponseData)
        self.init(flags: 0)
        var completeName: String?
        var shortenedName = ""
        var seen = Set<BluetoothUUID>()
        for (type, data) in structures {
            switch type {
            case ADType.flags:
                flags = data.first ?? 0
            case ADType.incompleteServiceUUIDs16, ADType.completeServiceUUIDs16,
                 ADType.incompleteServiceUUIDs32, ADType.completeServiceUUIDs32,
                 ADType.incompleteServiceUUIDs128, ADType.completeServiceUUIDs128:
                let size = type <= ADType.completeServiceUUIDs16 ? 2 : type <= ADType.completeServiceUUIDs32 ? 4 : 16
                guard data.count % size == 0 else {
                    throw DecodeError(.invalidValue, "service UUID list of \(data.count) bytes for \(size)-byte UUIDs")
                }
                var index = data.startIndex
                while index < data.endIndex {
                    let uuid = try BluetoothUUID(littleEndian: data[index..<index + size])
                    if seen.insert(uuid).inserted { serviceUUIDs.append(uuid) }
                    index += size
                }
            case ADType.completeLocalName:
                completeName = String(decoding: data, as: UTF8.self)
            case ADType.shortenedLocalName:
                let name = String(decoding: data, as: UTF8.self)
                if name.utf8.count > shortenedName.utf8.count { shortenedName = name }
            case ADType.txPowerLevel:
                guard data.count == 1, let byte = data.first else {
                    throw DecodeError(.invalidValue, "TX power level of \(data.count) bytes")
                }
                txPowerLevel = Int8(bitPattern: byte)
            case ADType.appearance:
                var reader = ByteReader(data)
                appearance = try reader.u16()
                try reader.expectEnd("appearance")
            case ADType.manufacturerSpecificData:
                guard data.count >= 2 else {
                    throw DecodeError(.invalidValue, "manufacturer data of \(data.count) bytes, no company identifier")
                }
                if manufacturerData == nil { manufacturerData = Array(data) }
            default:
                continue
            }
        }
        name = completeName ?? shortenedName
    }
}
