import BlemuCentral
import BlemuControl
import BlemuCore
import BlemuDevices
import BlemuGATT
import BlemuGATTClient
import BlemuProfile

/// Values as a person reads them: known characteristics decoded, text shown as text, the rest hex.
enum GATTValueText {
    static func serviceName(_ uuid: BluetoothUUID) -> String {
        DevicesCommand.serviceNames[uuid].map { " (\($0))" } ?? ""
    }

    static func characteristicName(_ uuid: BluetoothUUID) -> String {
        DevicesCommand.characteristicNames[uuid].map { " (\($0))" } ?? ""
    }

    static func properties(_ properties: CharacteristicProperties) -> String {
        let names: [(CharacteristicProperties, String)] = [
            (.broadcast, "broadcast"), (.read, "read"), (.writeWithoutResponse, "write-without-response"), (.write, "write"),
            (.notify, "notify"), (.indicate, "indicate"), (.authenticatedSignedWrites, "signed-write"),
            (.extendedProperties, "extended-properties"),
        ]
        return names.filter { properties.contains($0.0) }.map(\.1).joined(separator: " ")
    }

    static func describe(uuid: BluetoothUUID, result: Result<[UInt8], GATTClientError>) -> String {
        switch result {
        case .success(let value): return describe(uuid: uuid, value: value)
        case .failure(let error): return "(\(error))"
        }
    }

    /// The value decoded when the UUID is known, else text when it is printable, else hex.
    static func describe(uuid: BluetoothUUID, value: [UInt8]) -> String {
        guard let decoded = decoded(uuid: uuid, value: value) else { return Hex.bytes(value) }
        // Text needs no hex beside it; a decoded number keeps its bytes.
        return decoded.hasPrefix("\"") ? decoded : "\(decoded)  [\(Hex.bytes(value))]"
    }

    static func decoded(uuid: BluetoothUUID, value: [UInt8]) -> String? {
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
        case 0x2A01, 0x2902:
            guard value.count == 2 else { return nil }
            return Hex.word(UInt16(value[0]) | UInt16(value[1]) << 8)
        case 0x2A38:
            let locations = ["other", "chest", "wrist", "finger", "hand", "ear lobe", "foot"]
            return value.count == 1 && Int(value[0]) < locations.count ? locations[Int(value[0])] : nil
        default:
            return text(value)
        }
    }

    /// UTF-8 without control characters (C0, DEL, C1, bidirectional overrides: `VisibleText`'s
    /// list, but newlines), quoted; nil otherwise (then shown as hex).
    static func text(_ value: [UInt8]) -> String? {
        guard !value.isEmpty, let string = String(validating: value, as: UTF8.self),
              string.unicodeScalars.allSatisfy({ !VisibleText.isEscaped($0) || $0 == "\n" }) else { return nil }
        return "\"\(string.replacingNewlines)\""
    }

    static func json(uuid: BluetoothUUID, handle: UInt16, value: [UInt8]) -> JSONValue {
        .object([("uuid", .string(uuid.description)), ("handle", .string(Hex.word(handle))),
                 ("value", .string(Hex.bytes(value))), ("decoded", decoded(uuid: uuid, value: value).map { .string($0) } ?? .null)])
    }

    static func dumpJSON(advertisement: Advertisement, services: [RemoteService],
                         values: [UInt16: Result<[UInt8], GATTClientError>]) -> JSONValue {
        func value(_ uuid: BluetoothUUID, _ handle: UInt16) -> [(String, JSONValue)] {
            switch values[handle] {
            case nil: return []
            case .success(let bytes)?:
                return [("value", .string(Hex.bytes(bytes))), ("decoded", decoded(uuid: uuid, value: bytes).map { .string($0) } ?? .null)]
            case .failure(let error)?:
                return [("error", .string(error.description))]
            }
        }
        return .object([
            ("address", .string(advertisement.address.description)),
            ("name", .string(GATTProfile.deviceName(services, values) ?? advertisement.name)),
            ("services", .array(services.map { service in
                .object([
                    ("uuid", .string(service.uuid.description)),
                    ("primary", .bool(service.service.isPrimary)),
                    ("start", .string(Hex.word(service.handles.lowerBound))), ("end", .string(Hex.word(service.handles.upperBound))),
                    ("includes", .array(service.includes.map { .string($0.service.uuid.description) })),
                    ("characteristics", .array(service.characteristics.map { characteristic in
                        .object([
                            ("uuid", .string(characteristic.uuid.description)),
                            ("handle", .string(Hex.word(characteristic.valueHandle))),
                            ("properties", .array(properties(characteristic.properties).split(separator: " ").map { .string(String($0)) })),
                        ] + value(characteristic.uuid, characteristic.valueHandle) + [
                            ("descriptors", .array(characteristic.descriptors.map { descriptor in
                                .object([("uuid", .string(descriptor.uuid.description)), ("handle", .string(Hex.word(descriptor.handle)))]
                                        + value(descriptor.uuid, descriptor.handle))
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
