import BlemuCore
import BlemuGATT
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// A peripheral's GATT database with its values, as `blemu gatt ... dump --profile` captures it
/// and `blemu run PROFILE.json` serves it (Docs/PROFILES.md). UUIDs are text (`2A37`, or the
/// 128-bit form), values hex; everything read from a file is checked by `GATTProfile.load`.
public struct GATTProfile: Codable, Equatable, Sendable {
    public static let formatName = "blemu-gatt-profile"
    public static let currentVersion = 1

    public var format: String = GATTProfile.formatName
    public var version: Int = GATTProfile.currentVersion
    /// The local name it advertised and its GAP Device Name.
    public var name: String
    /// The original's address, for the record (the clone has its own).
    public var address: String?
    /// GAP Appearance.
    public var appearance: Int?
    /// Services listed in its advertising, most important first.
    public var advertisedServices: [String]?
    public var services: [Service]

    public struct Service: Codable, Equatable, Sendable {
        public var uuid: String
        /// Primary unless false (a secondary service is there to be included).
        public var primary: Bool?
        /// UUIDs of services of this profile that this one includes.
        public var includes: [String]?
        public var characteristics: [Characteristic]

        public init(uuid: String, primary: Bool? = nil, includes: [String]? = nil, characteristics: [Characteristic]) {
            self.uuid = uuid
            self.primary = primary
            self.includes = includes
            self.characteristics = characteristics
        }
    }

    public struct Characteristic: Codable, Equatable, Sendable {
        public var uuid: String
        /// `read`, `write`, `write-without-response`, `notify`, `indicate` (others are kept but
        /// not served: `broadcast`, `signed-write`, `extended-properties`).
        public var properties: [String]
        /// The value read, hex; absent when it could not be read.
        public var value: String?
        /// Values to notify or indicate in turn, once a second while subscribed (default: `value`).
        public var notifications: [String]?
        public var descriptors: [Descriptor]?
        /// What the value needs beyond its properties (`GATTProfile.permissionNames`): encryption,
        /// authentication, Secure Connections, authorization. Absent: open.
        public var permissions: [String]?

        public init(uuid: String, properties: [String], value: String? = nil, notifications: [String]? = nil,
                    descriptors: [Descriptor]? = nil, permissions: [String]? = nil) {
            self.uuid = uuid
            self.properties = properties
            self.value = value
            self.notifications = notifications
            self.descriptors = descriptors
            self.permissions = permissions
        }
    }

    public struct Descriptor: Codable, Equatable, Sendable {
        public var uuid: String
        public var value: String?
        /// What reading it needs (`GATTProfile.descriptorPermissionNames`). Absent: open.
        public var permissions: [String]?

        public init(uuid: String, value: String? = nil, permissions: [String]? = nil) {
            self.uuid = uuid
            self.value = value
            self.permissions = permissions
        }
    }

    public init(name: String, address: String? = nil, appearance: Int? = nil, advertisedServices: [String]? = nil,
                services: [Service]) {
        self.name = name
        self.address = address
        self.appearance = appearance
        self.advertisedServices = advertisedServices
        self.services = services
    }

    /// The property names and their bits (Vol 3, Part G, 3.3.1.1).
    public static let propertyNames: [(String, CharacteristicProperties)] = [
        ("broadcast", .broadcast), ("read", .read), ("write-without-response", .writeWithoutResponse), ("write", .write),
        ("notify", .notify), ("indicate", .indicate), ("signed-write", .authenticatedSignedWrites),
        ("extended-properties", .extendedProperties),
    ]

    /// The permission names a profile may give a characteristic, and their bits (Vol 3, Part F,
    /// 3.2.5; Vol 3, Part C, 10.3, 10.5). Access itself follows the properties.
    public static let permissionNames: [(String, AttributePermissions)] = [
        ("read-encrypted", .readEncryptionRequired), ("write-encrypted", .writeEncryptionRequired),
        ("read-authenticated", .readAuthenticationRequired), ("write-authenticated", .writeAuthenticationRequired),
        ("secure-connections", .secureConnectionsRequired),
        ("read-authorized", .readAuthorizationRequired), ("write-authorized", .writeAuthorizationRequired),
    ]

    /// The permission names a descriptor may have: descriptors are only read.
    public static let descriptorPermissionNames = ["read-encrypted", "read-authenticated", "read-authorized"]

    /// The read permission a peripheral's refusal of a read shows (ATT error codes, Vol 3,
    /// Part F, 3.4.1.1): Insufficient Encryption (0x0F) and Insufficient Encryption Key Size
    /// (0x0C) `read-encrypted` (the key size is not kept: the clone takes what its stack
    /// takes), Insufficient Authentication (0x05) `read-authenticated`, Insufficient
    /// Authorization (0x08) `read-authorized`. Any other error (Read Not Permitted, 0x02, among
    /// them) shows nothing a permission says.
    public static func readPermission(refusedWith code: UInt8) -> String? {
        switch code {
        case 0x0F, 0x0C: return "read-encrypted"
        case 0x05: return "read-authenticated"
        case 0x08: return "read-authorized"
        default: return nil
        }
    }

    /// What reading an attribute needs, from the reads `blemu gatt dump --profile` made of it:
    /// every refusal, before the link was secured and after, and — when a read worked after
    /// securing — whether that link's key was authenticated. A server without a key for the
    /// central answers Insufficient Authentication (0x05) for encryption too (Vol 3, Part C,
    /// 10.3.2: pairing is what the central must do), so a value then read on an
    /// unauthenticated (Just Works) link needed encryption only. Names in `permissionNames`
    /// order; nil when nothing is needed.
    public static func readPermissions(refusals: [UInt8], readOnAuthenticatedLink: Bool?) -> [String]? {
        var names = Set(refusals.compactMap(readPermission(refusedWith:)))
        if readOnAuthenticatedLink == false, names.remove("read-authenticated") != nil { names.insert("read-encrypted") }
        // Authentication implies encryption.
        if names.contains("read-authenticated") { names.remove("read-encrypted") }
        let ordered = permissionNames.map(\.0).filter(names.contains)
        return ordered.isEmpty ? nil : ordered
    }

    public static func propertyNames(_ properties: CharacteristicProperties) -> [String] {
        propertyNames.filter { properties.contains($0.1) }.map(\.0)
    }

    // MARK: Reading and writing files

    /// The profile as pretty-printed JSON, keys sorted, for a tester to edit.
    public func encoded() -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        guard let data = try? encoder.encode(self) else { return "{}" }
        let json = String(decoding: data, as: UTF8.self)
        // The encoder escapes C0 only; a cloned peer's names and values may hold C1 controls or
        // bidirectional overrides, which only strings can (so a `\u` escape of four hex digits keeps the JSON the same).
        guard json.unicodeScalars.contains(where: { $0.value >= 0x7F && VisibleText.isEscaped($0) }) else { return json }
        var out = ""
        for scalar in json.unicodeScalars {
            if scalar.value >= 0x7F && VisibleText.isEscaped(scalar) {
                let hex = String(scalar.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            } else {
                out.unicodeScalars.append(scalar)
            }
        }
        return out
    }

    /// Reads and checks a profile file; a mistake is one error naming the file and the path in
    /// it (`services[2].characteristics[0].uuid`) and what is allowed.
    public static func load(path: String) throws(ProfileError) -> GATTProfile {
        // Kind and size first, on what was opened (RegularFile): a wrong path (a huge file,
        // /dev/zero, a FIFO that would block open(2)) is refused, never read whole or waited on.
        let bytes: [UInt8]
        switch RegularFile.read(path, maximumBytes: maxFileBytes, followSymlinks: true) {
        case .success(let read): bytes = read
        case .failure(let error) where error.kind == .tooLarge:
            throw ProfileError("\(path): \(error.description); a profile is at most \(maxFileBytes) bytes")
        case .failure(let error) where error.kind == .notRegular:
            throw ProfileError("\(path): \(error.description)")
        case .failure(let error):
            throw ProfileError("\(path): cannot read the profile: \(error.description)")
        }
        let data = Data(bytes)
        return try parse(data, name: path)
    }

    /// A profile is a database of at most 65535 handles of at most 512 bytes each; 8 MiB is
    /// more than any real one needs and keeps a wrong file from eating memory.
    public static let maxFileBytes = 8 << 20

    public static func parse(_ data: Data, name: String) throws(ProfileError) -> GATTProfile {
        let profile: GATTProfile
        do {
            profile = try JSONDecoder().decode(GATTProfile.self, from: data)
        } catch let error as DecodingError {
            throw ProfileError("\(name): \(describe(error))")
        } catch {
            throw ProfileError("\(name): not JSON: \(error)")
        }
        try profile.check(name: name)
        return profile
    }

    private static func path(_ codingPath: [any CodingKey]) -> String {
        var text = ""
        for key in codingPath {
            if let index = key.intValue {
                text += "[\(index)]"
            } else {
                text += (text.isEmpty ? "" : ".") + key.stringValue
            }
        }
        return text.isEmpty ? "the top level" : text
    }

    private static func describe(_ error: DecodingError) -> String {
        switch error {
        case .keyNotFound(let key, let context):
            return context.codingPath.isEmpty ? "missing \"\(key.stringValue)\""
                : "\(path(context.codingPath)): missing \"\(key.stringValue)\""
        case .typeMismatch(let type, let context):
            return "\(path(context.codingPath)): expected \(typeName(type))"
        case .valueNotFound(let type, let context):
            return "\(path(context.codingPath)): expected \(typeName(type)), not null"
        case .dataCorrupted(let context):
            return context.codingPath.isEmpty ? "not JSON (\(context.debugDescription))" : "\(path(context.codingPath)): \(context.debugDescription)"
        @unknown default:
            return "\(error)"
        }
    }

    private static func typeName(_ type: Any.Type) -> String {
        switch type {
        case is String.Type: return "a string"
        case is Int.Type: return "a whole number"
        case is Bool.Type: return "true or false"
        default:
            let name = String(describing: type)
            return name.hasPrefix("Array") || name.hasPrefix("[") && !name.contains(":") ? "a list" : "an object"
        }
    }

    /// Every value's meaning, beyond the JSON shape.
    func check(name file: String) throws(ProfileError) {
        func fail(_ where: String, _ what: String) -> ProfileError { ProfileError("\(file): \(`where`): \(what)") }
        guard format == Self.formatName else {
            throw fail("format", "\"\(format)\" is not \"\(Self.formatName)\"")
        }
        guard version == Self.currentVersion else { throw fail("version", "\(version) is not \(Self.currentVersion), the version this blemu reads") }
        guard !name.isEmpty, name.utf8.count <= 248 else { throw fail("name", "1 to 248 bytes of UTF-8") }
        if let appearance, !(0...0xFFFF).contains(appearance) { throw fail("appearance", "\(appearance) is not 0 to 65535") }
        for (index, uuid) in (advertisedServices ?? []).enumerated() where Self.uuid(uuid) == nil {
            throw fail("advertisedServices[\(index)]", "'\(uuid)' is not a UUID (2A37 or the 128-bit form)")
        }
        let uuids = Set(services.compactMap { Self.uuid($0.uuid) })
        for (s, service) in services.enumerated() {
            let at = "services[\(s)]"
            guard Self.uuid(service.uuid) != nil else { throw fail("\(at).uuid", "'\(service.uuid)' is not a UUID (180D or the 128-bit form)") }
            for (i, included) in (service.includes ?? []).enumerated() {
                guard let uuid = Self.uuid(included), uuids.contains(uuid) else {
                    throw fail("\(at).includes[\(i)]", "'\(included)' is not the UUID of a service of this profile")
                }
            }
            for (c, characteristic) in service.characteristics.enumerated() {
                let at = "\(at).characteristics[\(c)]"
                guard Self.uuid(characteristic.uuid) != nil else {
                    throw fail("\(at).uuid", "'\(characteristic.uuid)' is not a UUID (2A37 or the 128-bit form)")
                }
                for (p, property) in characteristic.properties.enumerated() where !Self.propertyNames.contains(where: { $0.0 == property }) {
                    throw fail("\(at).properties[\(p)]", "'\(property)' is not one of \(Self.propertyNames.map(\.0).joined(separator: ", "))")
                }
                for (p, permission) in (characteristic.permissions ?? []).enumerated()
                    where !Self.permissionNames.contains(where: { $0.0 == permission }) {
                    throw fail("\(at).permissions[\(p)]", "'\(permission)' is not one of \(Self.permissionNames.map(\.0).joined(separator: ", "))")
                }
                if let value = characteristic.value { try checkValue(value, "\(at).value", fail) }
                for (n, value) in (characteristic.notifications ?? []).enumerated() { try checkValue(value, "\(at).notifications[\(n)]", fail) }
                for (d, descriptor) in (characteristic.descriptors ?? []).enumerated() {
                    guard Self.uuid(descriptor.uuid) != nil else {
                        throw fail("\(at).descriptors[\(d)].uuid", "'\(descriptor.uuid)' is not a UUID (2901 or the 128-bit form)")
                    }
                    if let value = descriptor.value { try checkValue(value, "\(at).descriptors[\(d)].value", fail) }
                    for (p, permission) in (descriptor.permissions ?? []).enumerated() where !Self.descriptorPermissionNames.contains(permission) {
                        throw fail("\(at).descriptors[\(d)].permissions[\(p)]",
                                   "'\(permission)' is not one of \(Self.descriptorPermissionNames.joined(separator: ", "))")
                    }
                }
            }
        }
    }

    private func checkValue(_ text: String, _ at: String, _ fail: (String, String) -> ProfileError) throws(ProfileError) {
        guard let bytes = Self.bytes(text) else { throw fail(at, "'\(text.prefix(40))' is not hex (0102ff)") }
        guard bytes.count <= ValueLength.attributeMaximum else {
            throw fail(at, "\(bytes.count) bytes; an attribute value holds at most \(ValueLength.attributeMaximum)")
        }
    }

    /// `2A37`, `0x2A37` or the 36-character form.
    public static func uuid(_ text: String) -> BluetoothUUID? {
        var body = Substring(text)
        if body.hasPrefix("0x") || body.hasPrefix("0X") { body = body.dropFirst(2) }
        guard body.utf8.count == 4 || body.utf8.count == 36,
              body.utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 | 0x20 >= 0x61 && $0 | 0x20 <= 0x66) || $0 == 0x2D }) else { return nil }
        return BluetoothUUID(String(body))
    }

    /// Hex, even length, no separators; "" is the empty value.
    public static func bytes(_ text: String) -> [UInt8]? {
        text.isEmpty ? [] : Hex.parse(text)
    }
}

public struct ProfileError: Error, Equatable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
