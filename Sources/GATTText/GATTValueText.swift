import BlemuAssignedNumbers
import BlemuCentral
import BlemuCore
import BlemuDevices
import BlemuGATT
import BlemuGATTClient
import BlemuHost
import BlemuProfile

/// Values as a person reads them: standard UUIDs named (the SIG's assigned numbers, then
/// blemu's own services), known characteristics decoded, values with a Characteristic
/// Presentation Format decoded by it, text shown as text, the rest hex.
public enum GATTValueText {
    /// Names for the services blemu serves (Assigned Numbers 3.4.2, and blemu's own): what
    /// `blemu devices` lists them by, and the names `gatt` gives where the SIG's tables have none.
    public static let ownServiceNames: [BluetoothUUID: String] = [
        BluetoothUUID(0x1800): "GAP", BluetoothUUID(0x1801): "GATT", BluetoothUUID(0x180A): "Device Information",
        BluetoothUUID(0x180D): "Heart Rate", BluetoothUUID(0x180F): "Battery", BluetoothUUID(0x181A): "Environmental Sensing",
        Peripheral.diagnosticsServiceUUID: "Diagnostics",
        BluetoothUUID("7d3c0100-9a5e-4d1a-8f6e-5c1b2d3e4f50")!: "Thermostat",
        BluetoothUUID("7d3c0200-9a5e-4d1a-8f6e-5c1b2d3e4f50")!: "Lock",
    ]

    /// Names for the characteristics blemu serves (Assigned Numbers 3.8.1, and blemu's own).
    public static let ownCharacteristicNames: [BluetoothUUID: String] = [
        BluetoothUUID(0x2A00): "Device Name", BluetoothUUID(0x2A01): "Appearance",
        BluetoothUUID(0x2A04): "Peripheral Preferred Connection Parameters", BluetoothUUID(0x2A05): "Service Changed",
        BluetoothUUID(0x2B29): "Client Supported Features", BluetoothUUID(0x2B2A): "Database Hash",
        BluetoothUUID(0x2B3A): "Server Supported Features",
        BluetoothUUID(0x2A19): "Battery Level",
        BluetoothUUID(0x2A24): "Model Number String", BluetoothUUID(0x2A25): "Serial Number String",
        BluetoothUUID(0x2A26): "Firmware Revision String", BluetoothUUID(0x2A27): "Hardware Revision String",
        BluetoothUUID(0x2A28): "Software Revision String", BluetoothUUID(0x2A29): "Manufacturer Name String",
        BluetoothUUID(0x2A37): "Heart Rate Measurement", BluetoothUUID(0x2A38): "Body Sensor Location",
        BluetoothUUID(0x2A39): "Heart Rate Control Point",
        BluetoothUUID(0x2A6E): "Temperature", BluetoothUUID(0x2A6F): "Humidity",
        Peripheral.diagnosticsCharacteristicUUID: "Diagnostics, JSON",
    ]

    /// A write's answer as JSON (`gatt write --json`): the characteristic, its handle, the bytes written.
    public static func writtenJSON(_ uuid: BluetoothUUID, _ handle: UInt16, _ value: [UInt8], withoutResponse: Bool) -> JSONValue {
        .object([("ok", .bool(true)), ("uuid", .string(uuid.description)), ("handle", .string(Hex.word(handle))),
                 ("written", .string(Hex.bytes(value))), ("without_response", .bool(withoutResponse))])
    }

    /// " (Heart Rate)" for 0x180D, blemu's own services by their names; "" when unknown.
    public static func serviceName(_ uuid: BluetoothUUID) -> String {
        (AssignedNumbers.serviceName(uuid) ?? ownServiceNames[uuid]).map { " (\($0))" } ?? ""
    }

    /// The characteristic's standard name, else blemu's name for it, else its own User
    /// Description (0x2901, a peer's text: control characters shown); "" when none.
    public static func characteristicName(_ uuid: BluetoothUUID, userDescription: [UInt8]? = nil) -> String {
        (nameOfCharacteristic(uuid) ?? userDescription.map { VisibleText.make(utf8: $0) }).map { " (\($0))" } ?? ""
    }

    public static func nameOfCharacteristic(_ uuid: BluetoothUUID) -> String? {
        AssignedNumbers.characteristicName(uuid) ?? ownCharacteristicNames[uuid]
    }

    public static func descriptorName(_ uuid: BluetoothUUID) -> String {
        AssignedNumbers.descriptorName(uuid).map { " (\($0))" } ?? ""
    }

    /// "0x0601 (HVAC: Thermostat)".
    public static func appearance(_ value: UInt16) -> String {
        Hex.word(value) + (AssignedNumbers.appearanceName(value).map { " (\($0))" } ?? "")
    }

    public static func properties(_ properties: CharacteristicProperties) -> String {
        let names: [(CharacteristicProperties, String)] = [
            (.broadcast, "broadcast"), (.read, "read"), (.writeWithoutResponse, "write-without-response"), (.write, "write"),
            (.notify, "notify"), (.indicate, "indicate"), (.authenticatedSignedWrites, "signed-write"),
            (.extendedProperties, "extended-properties"),
        ]
        return names.filter { properties.contains($0.0) }.map(\.1).joined(separator: " ")
    }

    public static func describe(uuid: BluetoothUUID, result: Result<[UInt8], GATTClientError>, format: PresentationFormat? = nil) -> String {
        switch result {
        case .success(let value): return describe(uuid: uuid, value: value, format: format)
        case .failure(let error): return "(\(error))"
        }
    }

    /// The value decoded when the UUID is known, else by its Presentation Format, else text
    /// when it is printable, else hex.
    public static func describe(uuid: BluetoothUUID, value: [UInt8], format: PresentationFormat? = nil) -> String {
        guard let decoded = decoded(uuid: uuid, value: value, format: format) else { return Hex.bytes(value) }
        // Text needs no hex beside it; a decoded number keeps its bytes.
        return decoded.hasPrefix("\"") ? decoded : "\(decoded)  [\(Hex.bytes(value))]"
    }

    /// What blemu knows of a value: its own decoders first (the profiles it serves, its
    /// devices' characteristics), then the characteristic's Presentation Format
    /// (Vol 3, Part G, 3.3.3.5), then UTF-8 text; nil: show the hex alone.
    public static func decoded(uuid: BluetoothUUID, value: [UInt8], format: PresentationFormat? = nil) -> String? {
        if let known = knownDecoding(uuid: uuid, value: value) { return known }
        if let format, let decoded = format.decode(value) { return decoded }
        return text(value)
    }

    /// blemu's own devices' characteristics (Devices/Thermostat, Devices/Lock), decoded as the
    /// devices encode them.
    public static func deviceDecoding(uuid: BluetoothUUID, value: [UInt8]) -> String? {
        switch uuid {
        case ThermostatDevice.targetUUID:
            guard value.count == 2 else { return nil }
            return PresentationFormat([0x0E, 0xFE, 0x2F, 0x27, 0x01, 0x00, 0x00])?.decode(value)
        case ThermostatDevice.modeUUID:
            return value.count == 1 ? ThermostatMode(rawValue: value[0])?.name : nil
        case ThermostatDevice.heatingStateUUID:
            return value.count == 1 ? HeatingState(rawValue: value[0])?.name : nil
        case LockDevice.lockStateUUID:
            return value.count == 1 ? LockState(rawValue: value[0])?.name : nil
        case LockDevice.relockDelayUUID:
            guard value.count == 2 else { return nil }
            let seconds = UInt16(value[0]) | UInt16(value[1]) << 8
            return seconds == 0 ? "off" : "\(seconds) s"
        case LockDevice.controlPointUUID:
            // The indication: [0x80, opcode, result].
            guard value.count == 3, value[0] == LockDevice.responseCode else { return nil }
            let opcode = LockDevice.Opcode(rawValue: value[1]).map { $0 == .lock ? "lock" : "unlock" } ?? "opcode \(Hex.byte(value[1]))"
            let results: [LockDevice.Result: String] = [.success: "success", .wrongPIN: "wrong PIN", .jammed: "jammed",
                                                        .lockedOut: "locked out", .unknownOpcode: "unknown opcode"]
            return "\(opcode): " + (LockDevice.Result(rawValue: value[2]).flatMap { results[$0] } ?? "result \(Hex.byte(value[2]))")
        default:
            return nil
        }
    }

    public static func knownDecoding(uuid: BluetoothUUID, value: [UInt8]) -> String? {
        if let device = deviceDecoding(uuid: uuid, value: value) { return device }
        switch uuid.uint16 {
        case 0x2A37:
            guard let m = try? HeartRateMeasurement(decoding: value[...]) else { return nil }
            var text = "\(m.heartRate) bpm"
            if m.sensorContact != .notSupported { text += ", contact \(m.sensorContact == .detected ? "detected" : "not detected")" }
            if let energy = m.energyExpended { text += ", energy \(energy) kJ" }
            if !m.rrIntervals.isEmpty { text += ", RR " + m.rrIntervals.map { "\(Int($0) * 1000 / 1024) ms" }.joined(separator: " ") }
            return text
        case 0x2A19:
            return value.count == 1 ? "\(value[0]) %" : nil
        case 0x2A6E:
            // 0x8000, "value is not known", decodes to nil too.
            guard value.count == 2 else { return nil }
            return EnvironmentalSensing.decodeTemperature(value).map { "\($0) °C" } ?? "unknown"
        case 0x2A6F:
            return EnvironmentalSensing.decodeHumidity(value).map { "\($0) %" }
        case 0x2A01:
            guard value.count == 2 else { return nil }
            return appearance(UInt16(value[0]) | UInt16(value[1]) << 8)
        case 0x2902:
            // Vol 3, Part G, 3.3.3.3: bit 0 notifications, bit 1 indications.
            guard value.count == 2 else { return nil }
            let bits = UInt16(value[0]) | UInt16(value[1]) << 8
            let on = [(0x0001, "notifications"), (0x0002, "indications")].filter { bits & $0.0 != 0 }.map(\.1)
            return Hex.word(bits) + " (" + (on.isEmpty ? "off" : on.joined(separator: ", ")) + ")"
        case 0x2904:
            guard let format = PresentationFormat(value) else { return nil }
            let unit = format.unitText
            return "format \(Hex.byte(format.format)), exponent \(format.exponent)" + (unit.isEmpty ? ", unitless" : ", unit \(unit)")
        case 0x2A38:
            let locations = ["other", "chest", "wrist", "finger", "hand", "ear lobe", "foot"]
            return value.count == 1 && Int(value[0]) < locations.count ? locations[Int(value[0])] : nil
        case 0x2A29, 0x2A24, 0x2A25, 0x2A26, 0x2A27, 0x2A28, 0x2A00:
            // Device Information strings and the Device Name (utf8s): shown as text even when
            // they hold control characters (made visible), not as hex.
            return value.isEmpty ? "\"\"" : "\"" + VisibleText.make(utf8: value) + "\""
        default:
            return nil
        }
    }

    /// A Valid Range (0x2906, GSS): the lower and the upper bound, each in its characteristic's
    /// format, decoded as a value of it: "5.00 °C to 35.00 °C".
    public static func validRange(_ value: [UInt8], of characteristic: BluetoothUUID, format: PresentationFormat?) -> String? {
        guard !value.isEmpty, value.count % 2 == 0 else { return nil }
        let half = value.count / 2
        let lower = Array(value[..<half]), upper = Array(value[half...])
        let decode = { (bytes: [UInt8]) in knownDecoding(uuid: characteristic, value: bytes) ?? format?.decode(bytes) }
        guard let low = decode(lower), let high = decode(upper) else { return nil }
        return "\(low) to \(high)"
    }

    /// UTF-8 without control characters (C0, DEL, C1, bidirectional overrides: `VisibleText`'s
    /// list, but newlines), quoted; nil otherwise (then shown as hex).
    public static func text(_ value: [UInt8]) -> String? {
        guard !value.isEmpty, let string = String(validating: value, as: UTF8.self),
              string.unicodeScalars.allSatisfy({ !VisibleText.isEscaped($0) || $0 == "\n" }) else { return nil }
        return "\"\(string.replacingNewlines)\""
    }

    /// One value as JSON: its UUID, name (as `dump` names it: the standard or blemu's name,
    /// else its User Description), handle, hex and decoding; `time` (a notification's or
    /// indication's arrival) as ISO 8601 UTC.
    public static func json(uuid: BluetoothUUID, handle: UInt16, value: [UInt8], format: PresentationFormat? = nil,
                     time: Timestamp? = nil, userDescription: [UInt8]? = nil) -> JSONValue {
        let name = nameOfCharacteristic(uuid) ?? userDescription.map { VisibleText.make(utf8: $0) }
        var fields: [(String, JSONValue)] = [
            ("uuid", .string(uuid.description)), ("name", name.map { .string($0) } ?? .null),
            ("handle", .string(Hex.word(handle))),
            ("value", .string(Hex.bytes(value))), ("decoded", decoded(uuid: uuid, value: value, format: format).map { .string($0) } ?? .null),
        ]
        if let time { fields.append(("time", .string(time.iso8601))) }
        return .object(fields)
    }

    /// The characteristic's Presentation Format (0x2904), when it has one and a dump read it.
    public static func presentationFormat(of characteristic: RemoteCharacteristic, values: [UInt16: Result<[UInt8], GATTClientError>]) -> PresentationFormat? {
        guard let handle = characteristic.descriptors.first(where: { $0.uuid == GATTType.presentationFormat })?.handle,
              case .success(let bytes)? = values[handle] else { return nil }
        return PresentationFormat(bytes)
    }

    public static func userDescription(of characteristic: RemoteCharacteristic, values: [UInt16: Result<[UInt8], GATTClientError>]) -> [UInt8]? {
        guard let handle = characteristic.descriptors.first(where: { $0.uuid == GATTType.userDescription })?.handle,
              case .success(let bytes)? = values[handle], !bytes.isEmpty else { return nil }
        return bytes
    }

    /// A descriptor's value: a Valid Range in its characteristic's format, the others by their own UUID.
    public static func describeDescriptor(_ descriptor: BluetoothUUID, value: [UInt8], of characteristic: BluetoothUUID,
                                   format: PresentationFormat?) -> String? {
        if descriptor == GATTType.validRange, let range = validRange(value, of: characteristic, format: format) { return range }
        return decoded(uuid: descriptor, value: value)
    }

    /// `blemu gatt dump`'s text: the peripheral, then each service, characteristic and
    /// descriptor with its name and value.
    public static func dumpLines(advertisement: Advertisement, mtu: Int, services: [RemoteService],
                          values: [UInt16: Result<[UInt8], GATTClientError>]) -> [String] {
        var lines = ["\(advertisement.address) \"\((GATTProfile.deviceName(services, values) ?? advertisement.name).visible)\" (ATT MTU \(mtu))"]
        func shown(_ value: [UInt8], _ decoded: String?) -> String {
            guard let decoded else { return Hex.bytes(value) }
            return decoded.hasPrefix("\"") ? decoded : "\(decoded)  [\(Hex.bytes(value))]"
        }
        for service in services {
            lines.append("\(service.service.isPrimary ? "service" : "secondary service") \(service.uuid)\(serviceName(service.uuid)) handles \(Hex.word(service.handles.lowerBound))-\(Hex.word(service.handles.upperBound))")
            for include in service.includes {
                lines.append("  includes \(include.service.uuid)\(serviceName(include.service.uuid)) handles \(Hex.word(include.service.handles.lowerBound))-\(Hex.word(include.service.handles.upperBound))")
            }
            for characteristic in service.characteristics {
                let format = presentationFormat(of: characteristic, values: values)
                var line = "  characteristic \(characteristic.uuid)\(characteristicName(characteristic.uuid, userDescription: userDescription(of: characteristic, values: values))) handle \(Hex.word(characteristic.valueHandle)) [\(properties(characteristic.properties))]"
                if let value = values[characteristic.valueHandle] { line += ": " + describe(uuid: characteristic.uuid, result: value, format: format) }
                lines.append(line)
                for descriptor in characteristic.descriptors {
                    var line = "    descriptor \(descriptor.uuid)\(descriptorName(descriptor.uuid)) handle \(Hex.word(descriptor.handle))"
                    switch values[descriptor.handle] {
                    case .success(let bytes)?:
                        line += ": " + shown(bytes, describeDescriptor(descriptor.uuid, value: bytes, of: characteristic.uuid, format: format))
                    case .failure(let error)?: line += ": (\(error))"
                    case nil: break
                    }
                    lines.append(line)
                }
            }
        }
        return lines
    }

    public static func dumpJSON(advertisement: Advertisement, services: [RemoteService],
                         values: [UInt16: Result<[UInt8], GATTClientError>]) -> JSONValue {
        func value(_ handle: UInt16, decode: ([UInt8]) -> String?) -> [(String, JSONValue)] {
            switch values[handle] {
            case nil: return []
            case .success(let bytes)?:
                return [("value", .string(Hex.bytes(bytes))), ("decoded", decode(bytes).map { .string($0) } ?? .null)]
            case .failure(let error)?:
                return [("error", .string(error.description))]
            }
        }
        func name(_ name: String?) -> JSONValue { name.map { .string($0) } ?? .null }
        return .object([
            ("address", .string(advertisement.address.description)),
            ("name", .string(GATTProfile.deviceName(services, values) ?? advertisement.name)),
            ("services", .array(services.map { service in
                .object([
                    ("uuid", .string(service.uuid.description)),
                    ("name", name(AssignedNumbers.serviceName(service.uuid) ?? ownServiceNames[service.uuid])),
                    ("primary", .bool(service.service.isPrimary)),
                    ("start", .string(Hex.word(service.handles.lowerBound))), ("end", .string(Hex.word(service.handles.upperBound))),
                    ("includes", .array(service.includes.map { .string($0.service.uuid.description) })),
                    ("characteristics", .array(service.characteristics.map { characteristic in
                        let format = presentationFormat(of: characteristic, values: values)
                        return .object([
                            ("uuid", .string(characteristic.uuid.description)),
                            ("name", name(nameOfCharacteristic(characteristic.uuid)
                                          ?? userDescription(of: characteristic, values: values).map { VisibleText.make(utf8: $0) })),
                            ("handle", .string(Hex.word(characteristic.valueHandle))),
                            ("properties", .array(properties(characteristic.properties).split(separator: " ").map { .string(String($0)) })),
                        ] + value(characteristic.valueHandle) { decoded(uuid: characteristic.uuid, value: $0, format: format) } + [
                            ("descriptors", .array(characteristic.descriptors.map { descriptor in
                                .object([("uuid", .string(descriptor.uuid.description)),
                                         ("name", name(AssignedNumbers.descriptorName(descriptor.uuid))),
                                         ("handle", .string(Hex.word(descriptor.handle)))]
                                        + value(descriptor.handle) {
                                            describeDescriptor(descriptor.uuid, value: $0, of: characteristic.uuid, format: format)
                                        })
                            })),
                        ])
                    })),
                ])
            })),
        ])
    }
}

extension String {
    var replacingNewlines: String { split(separator: "\n", omittingEmptySubsequences: false).joined(separator: "\\n") }
}
