import BlemuCore
import BlemuHCI

/// One advertiser as a scanner knows it: its latest advertising data and scan response
/// merged, decoded by `AdvertisingContent` (Core Supplement, Part A, 1).
public struct Advertisement: Equatable, Sendable {
    /// The advertiser's address with its type, as a connection to it names it.
    public var advertiser: LEAddress
    /// The Address_Type of the latest report as the controller gave it (Vol 4, Part E, 7.7.65.2
    /// and 7.7.65.13): 0x00 public, 0x01 random, 0x02 and 0x03 an identity the controller
    /// resolved a private address to; what a scan shows (`addressTypeName`).
    public var reportedAddressType: UInt8
    /// dBm, of the latest report; nil when the controller did not measure it.
    public var rssi: Int8?
    public var isConnectable: Bool
    public var advertisingData: [UInt8] = []
    public var scanResponseData: [UInt8] = []
    /// What the two payloads say; nil while they do not decode (the raw bytes are kept).
    public var content: AdvertisingContent?
    /// The TX power the controller reported with an extended report (else the AD's).
    public var reportedTxPower: Int8?
    /// Its latest advertising report came in extended PDUs (an extended report without the
    /// legacy bit, Vol 4, Part E, 7.7.65.13), so its data may pass 31 octets.
    public var usesExtendedPDUs = false
    /// Monotonic nanoseconds of the latest report.
    public var lastSeen: UInt64

    /// `reportedAddressType` nil: the advertiser's type as a report says it (public or random).
    public init(advertiser: LEAddress, reportedAddressType: UInt8? = nil, rssi: Int8?, isConnectable: Bool,
                advertisingData: [UInt8] = [], scanResponseData: [UInt8] = [], content: AdvertisingContent? = nil,
                reportedTxPower: Int8? = nil, lastSeen: UInt64) {
        self.advertiser = advertiser
        self.reportedAddressType = reportedAddressType ?? advertiser.peerAddressType
        self.rssi = rssi
        self.isConnectable = isConnectable
        self.advertisingData = advertisingData
        self.scanResponseData = scanResponseData
        self.content = content
        self.reportedTxPower = reportedTxPower
        self.lastSeen = lastSeen
    }

    /// The advertiser's 48-bit address, as a scan shows it.
    public var address: BluetoothAddress { advertiser.address }

    public var name: String { content?.name ?? "" }
    public var services: [BluetoothUUID] { content?.serviceUUIDs ?? [] }
    public var appearance: UInt16? { content?.appearance }
    /// dBm; nil when unknown. 127 is "not available" in reports (Vol 4, Part E, 7.7.65.13)
    /// and more than any radio sends, so an AD TX Power Level of 127 counts as unknown too.
    public var txPower: Int8? {
        let power = reportedTxPower ?? content?.txPowerLevel
        return power == 127 ? nil : power
    }
    public var manufacturerData: [UInt8]? { content?.manufacturerData }

    /// Service Data (Core Supplement, Part A, 1.11): each service UUID (16-, 32- or 128-bit)
    /// with its data, from both payloads, in the order met. Malformed structures are skipped.
    public var serviceData: [(uuid: BluetoothUUID, data: [UInt8])] {
        var out: [(uuid: BluetoothUUID, data: [UInt8])] = []
        for payload in [advertisingData, scanResponseData] {
            guard let structures = try? AdvertisingPayload.parseADStructures(payload[...]) else { continue }
            for (type, data) in structures {
                let size: Int
                switch type {
                case 0x16: size = 2
                case 0x20: size = 4
                case 0x21: size = 16
                default: continue
                }
                guard data.count >= size, let uuid = try? BluetoothUUID(littleEndian: data.prefix(size)) else { continue }
                out.append((uuid, Array(data.dropFirst(size))))
            }
        }
        return out
    }

    /// "public" or "random" (resolved identities say so).
    public var addressTypeName: String { Self.addressTypeName(reportedAddressType) }

    /// The name of a report's Address_Type (7.7.65.13, 7.7.65.14).
    public static func addressTypeName(_ type: UInt8) -> String {
        switch type {
        case 0x00: return "public"
        case 0x01: return "random"
        case 0x02: return "public-identity"
        case 0x03: return "random-identity"
        default: return "type-\(type)"
        }
    }
}

/// The advertisers heard, keyed by address, at most `capacity` of them: when full, the one
/// heard longest ago makes room, so a crowded room cannot make a long scan grow without bound.
public struct AdvertiserTable {
    public static let defaultCapacity = 256
    public let capacity: Int
    public private(set) var entries: [BluetoothAddress: Advertisement] = [:]

    public init(capacity: Int = AdvertiserTable.defaultCapacity) {
        self.capacity = max(1, capacity)
    }

    /// What a report changed, for a scanner that prints updates.
    public enum Change: Equatable, Sendable {
        case new
        /// Name, services, appearance or other data changed.
        case content
        /// Only the RSSI (or nothing) changed.
        case rssi
    }

    /// Merges one report (`addressType` is its Address_Type): `isScanResponse` tells which
    /// payload `data` replaces.
    @discardableResult
    public mutating func record(address: BluetoothAddress, addressType: UInt8, rssi: Int8?, connectable: Bool?,
                                isScanResponse: Bool, data: [UInt8], txPower: Int8? = nil, extendedPDUs: Bool = false,
                                now: UInt64) -> (Advertisement, Change) {
        var entry: Advertisement
        let change: Change
        if let known = entries[address] {
            entry = known
            let before = known.content
            entry.rssi = rssi ?? entry.rssi
            if isScanResponse { entry.scanResponseData = data } else { entry.advertisingData = data }
            if let connectable, !isScanResponse { entry.isConnectable = connectable }
            entry.reportedTxPower = txPower ?? entry.reportedTxPower
            entry.lastSeen = now
            entry.content = Self.decode(entry)
            change = entry.content == before && entry.reportedAddressType == addressType ? .rssi : .content
            entry.advertiser = LEAddress(address, peerAddressType: addressType)
            entry.reportedAddressType = addressType
        } else {
            if entries.count >= capacity, let oldest = entries.min(by: { $0.value.lastSeen < $1.value.lastSeen })?.key {
                entries[oldest] = nil
            }
            entry = Advertisement(advertiser: LEAddress(address, peerAddressType: addressType), reportedAddressType: addressType,
                                  rssi: rssi, isConnectable: connectable ?? false,
                                  advertisingData: isScanResponse ? [] : data, scanResponseData: isScanResponse ? data : [],
                                  content: nil, reportedTxPower: txPower, lastSeen: now)
            entry.content = Self.decode(entry)
            change = .new
        }
        if !isScanResponse { entry.usesExtendedPDUs = extendedPDUs }
        entries[address] = entry
        return (entry, change)
    }

    /// Fragments of extended reports still coming (Data_Status 0x01, Vol 4, Part E, 7.7.65.13),
    /// by advertiser and payload; at most `capacity` advertisers, 1650 octets each.
    private var fragments: [FragmentKey: [UInt8]] = [:]
    private struct FragmentKey: Hashable {
        var address: BluetoothAddress
        var isScanResponse: Bool
    }

    /// One extended report's data joined to the fragments before it: the whole payload when the
    /// report completes it (Data_Status 0x00), nil while more is to come (0x01) or when the
    /// controller truncated it (0x02: what came is dropped, the previous payload is kept).
    public mutating func reassemble(address: BluetoothAddress, isScanResponse: Bool, dataStatus: UInt16, data: [UInt8]) -> [UInt8]? {
        guard let (whole, truncated) = reassembleReport(address: address, isScanResponse: isScanResponse,
                                                        dataStatus: dataStatus, data: data), !truncated else { return nil }
        return whole
    }

    /// `reassemble`, with what a truncated report (Data_Status 0x02) brought: the fragments
    /// and its own data (at most 1650 octets), marked truncated; nil while more is to come.
    public mutating func reassembleReport(address: BluetoothAddress, isScanResponse: Bool, dataStatus: UInt16,
                                          data: [UInt8]) -> (data: [UInt8], truncated: Bool)? {
        let key = FragmentKey(address: address, isScanResponse: isScanResponse)
        switch dataStatus {
        case 0x00:
            guard let head = fragments.removeValue(forKey: key) else { return (data, false) }
            return (head + data, false)
        case 0x01:
            var head = fragments.removeValue(forKey: key) ?? []
            guard head.count + data.count <= AdvertisingPayload.extendedMaximumLength else { return nil }
            head += data
            if fragments.count >= capacity, let any = fragments.keys.first { fragments[any] = nil }
            fragments[key] = head
            return nil
        default:
            let head = fragments.removeValue(forKey: key) ?? []
            return (Array((head + data).prefix(AdvertisingPayload.extendedMaximumLength)), true)
        }
    }

    private static func decode(_ entry: Advertisement) -> AdvertisingContent? {
        try? AdvertisingContent(decodingAdvertisingData: entry.advertisingData[...], scanResponseData: entry.scanResponseData[...])
    }
}
