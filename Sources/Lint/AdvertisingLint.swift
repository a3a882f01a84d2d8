import BlemuBroadcast
import BlemuCore
import BlemuHCI

/// One advertisement as blemu will send it: its bytes and the settings phones judge it by.
/// Everything here comes from a plan, none of it from a peer; the rules still read the bytes
/// with the total decoders, so a recorded profile's data that is malformed is a finding, never a trap.
public struct LintedAdvertisement: Sendable, Equatable {
    /// How often it goes out.
    public enum Interval: Sendable, Equatable {
        /// A connectable device's phases: fast, then slow (`AdvertisingTiming`, Apple's rule).
        case phases(AdvertisingTiming)
        /// A broadcaster's one interval, units of 0.625 ms.
        case fixed(UInt16)
    }

    public var advertisingData: [UInt8]
    public var scanResponseData: [UInt8]
    /// ADV_IND (or a connectable extended set) rather than ADV_NONCONN_IND.
    public var connectable: Bool
    /// Extended advertising PDUs (Vol 6, Part B, 2.3.4) rather than legacy ones (2.3.1).
    public var extended: Bool
    public var interval: Interval
    /// The service the device is for, the first it lists (`DeviceProfile.advertisedServices`), nil for none.
    public var primaryService: BluetoothUUID?

    public init(advertisingData: [UInt8], scanResponseData: [UInt8] = [], connectable: Bool, extended: Bool = false,
                interval: Interval, primaryService: BluetoothUUID? = nil) {
        self.advertisingData = advertisingData
        self.scanResponseData = scanResponseData
        self.connectable = connectable
        self.extended = extended
        self.interval = interval
        self.primaryService = primaryService
    }
}

/// How much a failed rule costs: `error`, a phone drops or misreads the advertisement; `warning`,
/// it is found later, less often, or not listed.
public enum LintSeverity: String, Sendable, Equatable {
    case error, warning
}

/// One named rule: a pure function of an advertisement, with the document it comes from.
public struct LintRule: Sendable {
    /// Stable, for `--json` and for scripts: `flags`, `local-name`, …
    public let id: String
    /// What the rule asks, one line.
    public let summary: String
    /// Where the rule comes from: the spec and its section, or the vendor's document.
    public let source: String
    public let severity: LintSeverity
    /// What is wrong with `advertisement`, one line each; empty when it passes or the rule
    /// does not apply to it.
    public let check: @Sendable (LintedAdvertisement) -> [String]
}

/// A rule an advertisement failed, and why.
public struct LintFinding: Sendable {
    public let rule: LintRule
    public let detail: String

    /// `flags: no Flags AD structure in the advertising data`, one line.
    public var line: String { "\(rule.id): \(detail)" }
}

/// What phones drop (issue 37, item 4): each rule says what an advertisement must be for an
/// Android or iOS phone to take it, and where that is written.
public enum AdvertisingLint {
    public static let rules: [LintRule] = [adStructures, dataLength, flags, localName, primaryService, advertisingInterval,
                                           iBeaconFrame, eddystoneFrame]

    /// Every rule's findings for `advertisement`, in the order of `rules`.
    public static func check(_ advertisement: LintedAdvertisement) -> [LintFinding] {
        rules.flatMap { rule in rule.check(advertisement).map { LintFinding(rule: rule, detail: $0) } }
    }

    public static func rule(_ id: String) -> LintRule? { rules.first { $0.id == id } }

    // MARK: The rules

    /// Scanners parse AD structures by their length bytes; one that runs past the end makes the
    /// rest unreadable (Android's ScanRecord gives up on the whole record).
    static let adStructures = LintRule(
        id: "ad-structures", summary: "advertising data and scan response are whole AD structures, each known one well formed",
        source: "Core Vol 3, Part C, 11 (AD structure: length, AD type, data); Core Supplement, Part A, 1", severity: .error
    ) { advertisement in
        var problems: [String] = []
        for (label, bytes) in payloads(advertisement) {
            // Whole structures (Broadcast's parser), then the known types' contents (HCI's decoder).
            do throws(DecodeError) {
                _ = try ADStructure.parse(bytes[...])
                _ = try AdvertisingContent(decodingAdvertisingData: bytes[...])
            } catch {
                problems.append("\(label): \(error.context.isEmpty ? "\(error.kind)" : error.context)")
            }
        }
        return problems
    }

    static let dataLength = LintRule(
        id: "data-length", summary: "legacy advertising data and scan response within 31 bytes each",
        source: "Core Vol 6, Part B, 2.3.1.1 and 2.3.2.2 (AdvData, ScanRspData: 0 to 31 octets); extended: Vol 4, Part E, 7.8.57",
        severity: .error
    ) { advertisement in
        let limit = !advertisement.extended ? AdvertisingPayload.maximumLength
            : advertisement.connectable ? AdvertisingPayload.connectableExtendedMaximumLength : AdvertisingPayload.extendedMaximumLength
        let kind = advertisement.extended ? (advertisement.connectable ? "a connectable extended set" : "extended advertising") : "a legacy PDU"
        return payloads(advertisement).compactMap { label, bytes in
            bytes.count > limit ? "\(label) is \(bytes.count) bytes; \(kind) carries at most \(limit)" : nil
        }
    }

    /// Connectable: the Supplement's "shall". Beacons: iBeacon, Eddystone and BTHome lay Flags
    /// out first, and iOS does not report an iBeacon without them.
    static let flags = LintRule(
        id: "flags", summary: "Flags in the advertising data of connectable and beacon advertisements, never in the scan response",
        source: "Core Supplement, Part A, 1.3 (1.3.2: in connectable advertising, never in a scan response); Core Vol 3, Part C, 9.2.4 to 9.2.6; Apple Proximity Beacon Specification R1; Eddystone protocol specification",
        severity: .error
    ) { advertisement in
        guard let inAdvertisement = structures(advertisement.advertisingData),
              let inScanResponse = structures(advertisement.scanResponseData) else { return [] }
        var problems: [String] = []
        let advertised = inAdvertisement.filter { $0.type == ADStructure.flags }
        if advertised.isEmpty {
            problems.append("no Flags AD structure (01) in the advertising data")
        } else if advertised.count > 1 {
            problems.append("\(advertised.count) Flags AD structures in the advertising data; one at most")
        } else if advertisement.connectable, let value = advertised[0].data.first, value & 0x03 == 0 {
            problems.append("Flags \(Hex.byte(value)) say neither LE General nor LE Limited Discoverable Mode (bit 1 or 0): the GAP discovery procedures pass over it (Core Vol 3, Part C, 9.2.5, 9.2.6)")
        } else if advertisement.connectable, advertised[0].data.isEmpty {
            problems.append("Flags AD structure without its flags byte")
        }
        if inScanResponse.contains(where: { $0.type == ADStructure.flags }) {
            problems.append("Flags in the scan response")
        }
        return problems
    }

    static let localName = LintRule(
        id: "local-name", summary: "a connectable advertisement names the device (Complete or Shortened Local Name) in its advertising data or scan response",
        source: "Core Supplement, Part A, 1.2; Apple Accessory Design Guidelines (2022), 40.4 Advertising Data; Android's Bluetooth settings list devices by name",
        severity: .warning
    ) { advertisement in
        guard advertisement.connectable else { return [] }
        // Malformed data is `ad-structures`' to tell.
        guard let content = try? AdvertisingContent(decodingAdvertisingData: advertisement.advertisingData[...],
                                                    scanResponseData: advertisement.scanResponseData[...]) else { return [] }
        return content.name.isEmpty ? ["no Local Name in the advertising data or the scan response: phones list it unnamed or not at all"] : []
    }

    /// iOS scanning in the background (`scanForPeripherals(withServices:)`) matches service
    /// UUIDs of the advertising PDU; Apple asks for the primary services there.
    static let primaryService = LintRule(
        id: "primary-service", summary: "a connectable advertisement lists its primary service's UUID in the advertising data itself",
        source: "Apple Accessory Design Guidelines (2022), 40.4 Advertising Data (primary services in the advertising PDU); Core Supplement, Part A, 1.1",
        severity: .warning
    ) { advertisement in
        guard advertisement.connectable else { return [] }
        guard let primary = advertisement.primaryService else {
            return ["the device lists no service to advertise: an app scanning for its service in the background never finds it"]
        }
        guard let advertised = serviceUUIDs(in: advertisement.advertisingData),
              let scanned = serviceUUIDs(in: advertisement.scanResponseData) else { return [] }
        if advertised.contains(primary) { return [] }
        let place = scanned.contains(primary) ? "only in the scan response" : "in neither payload"
        return ["primary service \(primary) is \(place): iOS scanning in the background looks for it in the advertising data"]
    }

    public static let advertisingInterval = LintRule(
        id: "advertising-interval",
        summary: "a connectable device advertises every 20 ms for at least 30 s, then at one of Apple's longer intervals",
        source: "Apple Accessory Design Guidelines (2022), 40.5 Advertising Interval", severity: .warning
    ) { advertisement in
        guard advertisement.connectable, case .phases(let timing) = advertisement.interval else { return [] }
        var problems: [String] = []
        if timing.fastInterval != AdvertisingTiming.defaultFastInterval {
            problems.append("fast interval \(ms(timing.fastInterval)) ms, not 20 ms")
        }
        if timing.fastDuration < AdvertisingTiming.defaultFastDuration {
            problems.append("fast advertising lasts \(timing.fastDuration), not at least 30 seconds")
        }
        if !AdvertisingTiming.appleSlowIntervals.contains(timing.slowInterval) {
            let allowed = AdvertisingTiming.appleSlowIntervals.map(ms).joined(separator: ", ")
            problems.append("slow interval \(ms(timing.slowInterval)) ms is not one of \(allowed) ms")
        }
        return problems
    }

    /// The iBeacon is read by Core Location only as Apple lays it out: Flags, then the 26-byte
    /// manufacturer data, 30 bytes in all, every 100 ms.
    static let iBeaconFrame = LintRule(
        id: "ibeacon-frame",
        summary: "an iBeacon is Flags then Apple's manufacturer data 4C 00 02 15 with UUID, major, minor and power (30 bytes), every 100 ms",
        source: "Apple Proximity Beacon Specification R1 (advertising data layout; advertising interval 100 ms)", severity: .error
    ) { advertisement in
        guard let all = structures(advertisement.advertisingData),
              let payload = ADStructure.manufacturerData(all, company: IBeacon.appleCompanyID), payload.first == 0x02 else { return [] }
        var problems: [String] = []
        do throws(DecodeError) { _ = try IBeacon(manufacturerPayload: payload) } catch { problems.append("iBeacon: \(error.context)") }
        let types = all.map(\.type)
        if types != [ADStructure.flags, ADStructure.manufacturerData] {
            // A recorded profile's extended data may hold hundreds: the first few say enough.
            let shown = types.prefix(8).map(Hex.byte).joined(separator: ", ") + (types.count > 8 ? ", …" : "")
            problems.append("iBeacon advertising data holds AD types \(shown), not Flags then the manufacturer data alone")
        }
        if case .fixed(let units) = advertisement.interval, units != iBeaconInterval {
            problems.append("iBeacon every \(ms(units)) ms, not 100 ms")
        }
        return problems
    }

    /// 100 ms in units of 0.625 ms.
    static let iBeaconInterval: UInt16 = 160

    /// Eddystone's frame types (protocol-specification.md): UID, URL, TLM, EID.
    static let eddystoneFrameTypes: Set<UInt8> = [0x00, 0x10, 0x20, 0x30]

    static let eddystoneFrame = LintRule(
        id: "eddystone-frame",
        summary: "an Eddystone frame is service data for 0xFEAA with the Complete List of 16-bit Service UUIDs holding 0xFEAA, each frame at its length",
        source: "Google Eddystone protocol specification (protocol-specification.md, eddystone-uid, eddystone-url, eddystone-tlm)", severity: .error
    ) { advertisement in
        guard let all = structures(advertisement.advertisingData),
              let payload = ADStructure.serviceData16(all, uuid: EddystoneFrame.serviceUUID) else { return [] }
        var problems: [String] = []
        let listed = all.contains { structure in
            structure.type == ADStructure.completeServiceUUIDs16 && uuid16s(structure.data).contains(EddystoneFrame.serviceUUID)
        }
        if !listed { problems.append("no Complete List of 16-bit Service UUIDs (03) holding 0xFEAA: scanners filtering for Eddystone pass over it") }
        guard let type = payload.first else { return problems + ["Eddystone service data without a frame type"] }
        guard eddystoneFrameTypes.contains(type) else { return problems + ["Eddystone frame type \(Hex.byte(type)) is none of the specification's"] }
        // EID and encrypted TLM carry what only their owner's key opens: their layout is not checked here.
        let sealed = type == 0x30 || (type == 0x20 && payload.dropFirst().first != 0x00)
        guard !sealed else { return problems }
        do throws(DecodeError) { _ = try EddystoneFrame(payload: payload) } catch { problems.append("Eddystone: \(error.context)") }
        // The decoder accepts a UID without its 2 reserved bytes (some beacons leave them out); the specification has 20 bytes.
        if type == 0x00, payload.count == 18 { problems.append("Eddystone-UID of 18 bytes: the specification's frame ends with 2 reserved bytes (20)") }
        if type == 0x00, payload.count == 20, payload.suffix(2).contains(where: { $0 != 0 }) {
            problems.append("Eddystone-UID's reserved bytes are not 0x00")
        }
        return problems
    }

    // MARK: Reading the bytes

    static func payloads(_ advertisement: LintedAdvertisement) -> [(String, [UInt8])] {
        [("advertising data", advertisement.advertisingData), ("scan response", advertisement.scanResponseData)]
    }

    /// The structures of `bytes`; nil when they are not whole (`ad-structures` tells that).
    static func structures(_ bytes: [UInt8]) -> [ADStructure]? {
        try? ADStructure.parse(bytes[...])
    }

    /// The service UUIDs of `bytes`' 16-, 32- and 128-bit lists; nil when malformed (`ad-structures` tells that).
    static func serviceUUIDs(in bytes: [UInt8]) -> [BluetoothUUID]? {
        (try? AdvertisingContent(decodingAdvertisingData: bytes[...]))?.serviceUUIDs
    }

    static func uuid16s(_ data: ArraySlice<UInt8>) -> [UInt16] {
        stride(from: data.startIndex, to: data.endIndex - 1, by: 2).map { UInt16(data[$0]) | UInt16(data[$0 + 1]) << 8 }
    }

    static func ms(_ units: UInt16) -> String { ConnectionParameters.ms(Double(units) * AdvertisingTiming.unitMs) }
}
