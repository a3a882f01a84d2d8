import BlemuBroadcast
import BlemuCentral
import BlemuCore
import BlemuCrypto

/// What an observer (`blemu scan`) makes of one advertiser's advertising data and scan response
/// (Core Vol 3, Part C, 11): the broadcast formats it knows, decoded by BlemuBroadcast's total
/// decoders — BTHome v2 (plain, or opened with the bindkey; a MIC failure said as such),
/// iBeacon, Eddystone UID/URL/TLM, the Battery Service's level in service data — and what it
/// does not know as raw service and manufacturer data. Nothing from the peer traps: malformed
/// AD structures and broken frames become `.malformed` items with the decoder's reason.
public struct BroadcastReport: Equatable, Sendable {
    public enum Item: Equatable, Sendable {
        case bthome(BTHomeReading)
        case bthomeError(BTHomeDecodeError)
        case iBeacon(IBeacon)
        case eddystone(EddystoneFrame)
        /// The Battery Service (0x180F) in service data: its Battery Level, in %.
        case batteryLevel(UInt8)
        /// Service data of a UUID no decoder here knows, raw.
        case serviceData(uuid: BluetoothUUID, data: [UInt8])
        /// Manufacturer data no decoder here knows (or Apple's other than the iBeacon), raw.
        case manufacturerData(company: UInt16, data: [UInt8])
        /// `format` ("ad", "ibeacon", "eddystone") did not decode: the decoder's reason.
        case malformed(format: String, reason: String)
    }

    public static let batteryServiceUUID: UInt16 = 0x180F

    public var items: [Item]

    /// What the bindkey opens: `key` for encrypted BTHome. `bound` says the key belongs to the
    /// advertiser decoded (`--watch ADDRESS`): then a plain BTHome advertisement from it is
    /// refused as bthome-ble does (anyone can clear the encryption bit); a key not bound to one
    /// advertiser only opens what is encrypted.
    public struct Keys: Sendable {
        public var bindkey: AESCCMKey?
        public var bound: Bool
        public init(bindkey: AESCCMKey? = nil, bound: Bool = false) {
            self.bindkey = bindkey
            self.bound = bound
        }
    }

    public init(items: [Item]) { self.items = items }

    /// Decodes `advertisingData` and `scanResponseData` of the advertiser at `address` (whose
    /// address is part of an encrypted BTHome nonce).
    public init(address: BluetoothAddress, advertisingData: [UInt8], scanResponseData: [UInt8] = [], keys: Keys = Keys()) {
        var items: [Item] = []
        for payload in [advertisingData, scanResponseData] where !payload.isEmpty {
            let structures: [ADStructure]
            do { structures = try ADStructure.parse(payload[...]) } catch {
                items.append(.malformed(format: "ad", reason: error.description))
                continue
            }
            for structure in structures { Self.decode(structure, address: address, keys: keys, into: &items) }
        }
        self.items = items
    }

    public init(_ advertisement: Advertisement, keys: Keys = Keys()) {
        self.init(address: advertisement.address, advertisingData: advertisement.advertisingData,
                  scanResponseData: advertisement.scanResponseData, keys: keys)
    }

    private static func decode(_ structure: ADStructure, address: BluetoothAddress, keys: Keys, into items: inout [Item]) {
        let data = structure.data
        switch structure.type {
        case ADStructure.serviceData16 where data.count >= 2:
            let uuid = UInt16(data[data.startIndex]) | UInt16(data[data.startIndex + 1]) << 8
            let payload = data.dropFirst(2)
            switch uuid {
            case BTHome.serviceUUID:
                items.append(bthome(payload, address: address, keys: keys))
            case EddystoneFrame.serviceUUID:
                do { items.append(.eddystone(try EddystoneFrame(payload: payload))) } catch {
                    items.append(.malformed(format: "eddystone", reason: error.description))
                }
            case batteryServiceUUID where payload.count == 1:
                // The Battery Level characteristic's value (BAS 1.1, 3.1): 0-100 %.
                items.append(.batteryLevel(payload[payload.startIndex]))
            default:
                items.append(.serviceData(uuid: BluetoothUUID(uuid), data: Array(payload)))
            }
        case ADStructure.manufacturerData where data.count >= 2:
            let company = UInt16(data[data.startIndex]) | UInt16(data[data.startIndex + 1]) << 8
            let payload = data.dropFirst(2)
            if company == IBeacon.appleCompanyID, payload.first == 0x02 {
                do { items.append(.iBeacon(try IBeacon(manufacturerPayload: payload))) } catch {
                    items.append(.malformed(format: "ibeacon", reason: error.description))
                }
            } else {
                items.append(.manufacturerData(company: company, data: Array(payload)))
            }
        default:
            break
        }
    }

    private static func bthome(_ payload: ArraySlice<UInt8>, address: BluetoothAddress, keys: Keys) -> Item {
        // An unbound key only opens encrypted payloads (bit 0 of the device information).
        let encrypted = (payload.first ?? 0) & 0x01 != 0
        let key = keys.bound || encrypted ? keys.bindkey : nil
        do { return .bthome(try BTHome.decode(payload: payload, key: key, address: address)) } catch {
            return .bthomeError(error)
        }
    }

    /// The BTHome reading, when there is one.
    public var bthome: BTHomeReading? {
        for case .bthome(let reading) in items { return reading }
        return nil
    }
}

extension BroadcastReport {
    /// What `blemu scan` compares to tell a new reading (`ScanLines.Reading`): one fingerprint per
    /// kind — BTHome, iBeacon, each Eddystone frame type, the battery level, the rest (raw service
    /// and manufacturer data, malformed structures) together. A BTHome reading with a packet id is
    /// its packet id (bthome.io/format: a receiver filters duplicates by it, as `--watch` does); an
    /// encrypted one's counter is left out (it changes with every advertisement). The hash is
    /// seeded per process (`Hasher`), so a peer cannot choose bytes that collide.
    public var readingFingerprints: [ScanLines.Reading] {
        var hashers: [(kind: UInt8, hasher: Hasher)] = []
        for item in Self.withoutCounters(self).items {
            let kind = item.readingKind
            let index: Int
            if let known = hashers.firstIndex(where: { $0.kind == kind }) {
                index = known
            } else {
                hashers.append((kind, Hasher()))
                index = hashers.count - 1
            }
            if case .bthome(let reading) = item, let packetID = reading.packetID {
                hashers[index].hasher.combine(packetID)
            } else {
                hashers[index].hasher.combine(item.text)
            }
        }
        return hashers.map { ScanLines.Reading(kind: $0.kind, fingerprint: $0.hasher.finalize()) }
    }

    /// The report with each BTHome counter cleared: it changes with each encrypted advertisement.
    static func withoutCounters(_ report: BroadcastReport) -> BroadcastReport {
        BroadcastReport(items: report.items.map { item in
            guard case .bthome(var reading) = item else { return item }
            reading.counter = nil
            return .bthome(reading)
        })
    }
}

extension BroadcastReport.Item {
    /// Which kind of broadcast an item is, for `readingFingerprints`.
    var readingKind: UInt8 {
        switch self {
        case .bthome, .bthomeError: return 0
        case .iBeacon: return 1
        case .eddystone(.uid): return 2
        case .eddystone(.url): return 3
        case .eddystone(.telemetry): return 4
        case .batteryLevel: return 5
        case .serviceData, .manufacturerData, .malformed: return 6
        }
    }
}
