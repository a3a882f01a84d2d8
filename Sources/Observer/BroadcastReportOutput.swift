import BlemuAssignedNumbers
import BlemuBroadcast
import BlemuCore

/// How `blemu scan` shows a `BroadcastReport`: a line per item for people (text from the peer
/// through `VisibleText`), or JSON members for scripts.
extension BroadcastReport {
    /// One line per item, without indentation: "bthome  temperature 25.00 °C  humidity 50.55 %".
    public var textLines: [String] { items.map(\.text) }

    /// The items as a JSON array: each an object with "format" first.
    public var json: JSONValue { .array(items.map(\.json)) }
}

extension BroadcastReport.Item {
    public var text: String {
        switch self {
        case .bthome(let reading):
            var parts = ["bthome"]
            if reading.encrypted { parts.append("encrypted (counter \(reading.counter ?? 0))") }
            if reading.packet.triggerBased { parts.append("trigger-based") }
            for object in reading.packet.objects {
                let name = object.type?.name ?? Hex.byte(object.id)
                let unit = object.type?.unit ?? ""
                parts.append("\(name) \(BTHomeValueText.text(object))\(unit.isEmpty ? "" : " " + unit)")
            }
            if let stop = reading.stop { parts.append("(\(stop))") }
            return parts.joined(separator: "  ")
        case .bthomeError(let error):
            return "bthome  \(error)"
        case .iBeacon(let beacon):
            return "ibeacon  uuid \(beacon.uuidText)  major \(beacon.major)  minor \(beacon.minor)  power \(beacon.measuredPower) dBm"
        case .eddystone(.uid(let txPower, let namespace, let instance)):
            return "eddystone-uid  namespace \(Hex.bytes(namespace))  instance \(Hex.bytes(instance))  tx \(txPower) dBm"
        case .eddystone(.url(let txPower, let url)):
            return "eddystone-url  \(url.visible)  tx \(txPower) dBm"
        case .eddystone(.telemetry(let millivolts, let temperature, let count, let uptime)):
            return "eddystone-tlm  battery \(millivolts) mV  temperature \(temperature.map { "\($0) °C" } ?? "not measured")"
                + "  advertisements \(count)  uptime \(uptime / 10).\(uptime % 10) s"
        case .batteryLevel(let level):
            return "battery-service  \(level) %"
        case .serviceData(let uuid, let data):
            return "service-data \(uuid)\(AssignedNumbers.serviceName(uuid).map { " (\($0))" } ?? "")  \(Hex.bytes(data))"
        case .manufacturerData(let company, let data):
            // The company identifier's owner (Assigned Numbers 7.1), from the generated table.
            return "manufacturer-data \(Hex.word(company))\(AssignedNumbers.companyName(company).map { " (\($0))" } ?? "")  \(Hex.bytes(data))"
        case .malformed(let format, let reason):
            return "\(format)  malformed: \(reason.visible)"
        }
    }

    public var json: JSONValue {
        switch self {
        case .bthome(let reading):
            var values: [(String, JSONValue)] = []
            var seen: [String: Int] = [:]
            let objects: [JSONValue] = reading.packet.objects.map { object in
                let name = object.type?.name ?? "object \(Hex.byte(object.id))"
                // A key per object for scripts ("temperature"); a second object of one name gets "_2".
                var key = name.split(separator: " ").joined(separator: "_")
                seen[key, default: 0] += 1
                if let count = seen[key], count > 1 { key += "_\(count)" }
                let value = BTHomeValueText.json(object)
                values.append((key, value))
                return .object([("id", .integer(Int64(object.id))), ("name", .string(name)), ("value", value),
                                ("unit", .string(object.type?.unit ?? ""))])
            }
            return .object([
                ("format", "bthome"),
                ("encrypted", .bool(reading.encrypted)),
                ("counter", reading.counter.map { .integer(Int64($0)) } ?? .null),
                ("trigger_based", .bool(reading.packet.triggerBased)),
                ("packet_id", reading.packetID.map { .integer(Int64($0)) } ?? .null),
                ("values", .object(values)),
                ("objects", .array(objects)),
                ("stop", reading.stop.map { .string($0.description) } ?? .null),
            ])
        case .bthomeError(let error):
            return .object([("format", "bthome"), ("error", .string(error.code)), ("message", .string(error.description))])
        case .iBeacon(let beacon):
            return .object([("format", "ibeacon"), ("uuid", .string(beacon.uuidText)), ("major", .integer(Int64(beacon.major))),
                            ("minor", .integer(Int64(beacon.minor))), ("measured_power", .integer(Int64(beacon.measuredPower)))])
        case .eddystone(.uid(let txPower, let namespace, let instance)):
            return .object([("format", "eddystone-uid"), ("tx_power", .integer(Int64(txPower))),
                            ("namespace", .string(Hex.bytes(namespace))), ("instance", .string(Hex.bytes(instance)))])
        case .eddystone(.url(let txPower, let url)):
            return .object([("format", "eddystone-url"), ("tx_power", .integer(Int64(txPower))), ("url", .string(url))])
        case .eddystone(.telemetry(let millivolts, let temperature, let count, let uptime)):
            return .object([("format", "eddystone-tlm"), ("battery_mv", .integer(Int64(millivolts))),
                            ("temperature", temperature.map { .number($0) } ?? .null),
                            ("advertising_count", .integer(Int64(count))), ("uptime", .number(Double(uptime) / 10))])
        case .batteryLevel(let level):
            return .object([("format", "battery-service"), ("battery", .integer(Int64(level)))])
        case .serviceData(let uuid, let data):
            return .object([("format", "service-data"), ("uuid", .string(uuid.description)),
                            ("name", AssignedNumbers.serviceName(uuid).map { .string($0) } ?? .null), ("data", .string(Hex.bytes(data)))])
        case .manufacturerData(let company, let data):
            return .object([("format", "manufacturer-data"), ("company", .integer(Int64(company))),
                            ("company_name", AssignedNumbers.companyName(company).map { .string($0) } ?? .null),
                            ("data", .string(Hex.bytes(data)))])
        case .malformed(let format, let reason):
            return .object([("format", .string(format)), ("error", "malformed"), ("message", .string(reason))])
        }
    }
}

extension BTHomeDecodeError {
    /// A stable name for scripts (`--json`'s "error").
    public var code: String {
        switch self {
        case .notBTHome: return "not_bthome"
        case .empty: return "empty"
        case .unsupportedVersion: return "unsupported_version"
        case .malformedAdvertisingData: return "malformed"
        case .encryptedWithoutKey: return "encrypted_without_key"
        case .encryptedTooShort: return "encrypted_too_short"
        case .authenticationFailed: return "mic_failure"
        case .unencryptedWithKey: return "unencrypted_with_key"
        }
    }
}

/// A BTHome object's value as written: the integer on the air scaled, with as many decimals
/// as the factor has (2150 × 0.01 → "21.50"), exact (no binary fraction shown); text through
/// `VisibleText`, raw as hex.
enum BTHomeValueText {
    /// The decimals of a factor 10^-n (0.01 → 2); nil for another factor (0.35).
    static func decimals(_ scale: Double) -> Int? {
        var power = 1.0
        for decimals in 0...6 {
            if abs(scale * power - 1) < 1e-9 { return decimals }
            power *= 10
        }
        return nil
    }

    static func text(_ object: BTHomeObject) -> String {
        guard let type = object.type else { return String(object.integer) }
        switch type.encoding {
        case .text: return "\"" + VisibleText.make(utf8: object.bytes) + "\""
        case .raw: return Hex.bytes(object.bytes)
        case .signed, .unsigned:
            guard let decimals = decimals(type.scale) else { return "\(object.value)" }
            guard decimals > 0 else { return String(object.integer) }
            let magnitude = object.integer.magnitude
            var divisor: UInt64 = 1
            for _ in 0..<decimals { divisor *= 10 }
            let fraction = String(magnitude % divisor)
            return (object.integer < 0 ? "-" : "") + "\(magnitude / divisor)."
                + String(repeating: "0", count: decimals - fraction.count) + fraction
        }
    }

    static func json(_ object: BTHomeObject) -> JSONValue {
        guard let type = object.type else { return .integer(object.integer) }
        switch type.encoding {
        case .text: return .string(String(decoding: object.bytes, as: UTF8.self))
        case .raw: return .string(Hex.bytes(object.bytes))
        case .signed, .unsigned:
            if decimals(type.scale) == 0 { return .integer(object.integer) }
            // The decimal text parsed back: 2150 × 0.01 is 21.5, not 21.500000000000004.
            return .number(Double(text(object)) ?? object.value)
        }
    }
}
