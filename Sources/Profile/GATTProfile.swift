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
    /// `public` or `random`: the type of `address` (`blemu gatt ... record` writes it). A
    /// replay takes a recorded static random address as its own (a public one it cannot).
    public var addressType: String?
    /// The advertising data and scan response as the scan found them (hex, at most 31 bytes
    /// each, 1650 with `extendedAdvertising`): a replay advertises them as they are.
    public var advertisingData: String?
    public var scanResponseData: String?
    /// True: the advertiser used extended PDUs (Vol 6, Part B, 2.3.4): each payload may hold up
    /// to 1650 bytes (Vol 6, Part B, 2.3.4.9), and a replay advertises from a connectable
    /// extended set what one connectable AUX_ADV_IND carries (245 bytes; more goes out as the
    /// name and services in legacy PDUs). Absent or false: legacy PDUs, at most 31 bytes each.
    public var extendedAdvertising: Bool?
    /// The notifications and indications received while recording, with their timing.
    public var recording: Recording?
    /// How a replay plays `recording`: `loop` (the default) or `once`.
    public var replay: String?

    /// The keys of the format (Docs/PROFILES.md); any other is an error (`keyProblem`).
    enum CodingKeys: String, CodingKey, CaseIterable {
        case format, version, name, address, appearance, advertisedServices, services, addressType, advertisingData
        case scanResponseData, extendedAdvertising, recording, replay
    }

    /// What `blemu gatt ... record --duration S` heard: every value notified or indicated,
    /// at its time from the start of the recording.
    public struct Recording: Codable, Equatable, Sendable {
        /// Seconds recorded (a loop starts again after this).
        public var duration: Double
        public var events: [Event]

        enum CodingKeys: String, CodingKey, CaseIterable { case duration, events }

        public init(duration: Double, events: [Event]) {
            self.duration = duration
            self.events = events
        }
    }

    public struct Event: Codable, Equatable, Sendable {
        /// Seconds from the start of the recording.
        public var at: Double
        /// The characteristic's value handle.
        public var handle: Int
        public var value: String
        /// True: an indication; absent or false: a notification.
        public var indication: Bool?

        enum CodingKeys: String, CodingKey, CaseIterable { case at, handle, value, indication }

        public init(at: Double, handle: Int, value: String, indication: Bool? = nil) {
            self.at = at
            self.handle = handle
            self.value = value
            self.indication = indication
        }
    }

    public struct Service: Codable, Equatable, Sendable {
        public var uuid: String
        /// The handle of its declaration and the last handle of its group, as recorded (both
        /// or neither; in a profile with handles every attribute has one).
        public var handle: Int?
        public var endHandle: Int?
        /// Primary unless false (a secondary service is there to be included).
        public var primary: Bool?
        /// UUIDs of services of this profile that this one includes.
        public var includes: [String]?
        public var characteristics: [Characteristic]

        enum CodingKeys: String, CodingKey, CaseIterable { case uuid, handle, endHandle, primary, includes, characteristics }

        public init(uuid: String, primary: Bool? = nil, includes: [String]? = nil, characteristics: [Characteristic]) {
            self.uuid = uuid
            self.primary = primary
            self.includes = includes
            self.characteristics = characteristics
        }
    }

    public struct Characteristic: Codable, Equatable, Sendable {
        public var uuid: String
        /// The handle of its declaration and of its value (the next one), as recorded.
        public var handle: Int?
        public var valueHandle: Int?
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
        /// Where `permissions` require encryption: the smallest encryption key size (octets,
        /// 7...16) the link's key must have, else Encryption Key Size Too Short (0x0C; Vol 3,
        /// Part C, 10.3.1). Absent: 7, any key. Its descriptors that require encryption too.
        public var minimumKeySize: Int?

        enum CodingKeys: String, CodingKey, CaseIterable {
            case uuid, handle, valueHandle, properties, value, notifications, descriptors, permissions, minimumKeySize
        }

        public init(uuid: String, properties: [String], value: String? = nil, notifications: [String]? = nil,
                    descriptors: [Descriptor]? = nil, permissions: [String]? = nil, minimumKeySize: Int? = nil) {
            self.minimumKeySize = minimumKeySize
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
        /// Its handle, as recorded (the CCCD's too: a replay puts its own CCCD there).
        public var handle: Int?
        public var value: String?
        /// What reading it needs (`GATTProfile.descriptorPermissionNames`). Absent: open.
        public var permissions: [String]?

        enum CodingKeys: String, CodingKey, CaseIterable { case uuid, handle, value, permissions }

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
        var decoded: GATTProfile?
        var decodingError: String?
        do {
            decoded = try JSONDecoder().decode(GATTProfile.self, from: data)
        } catch let error as DecodingError {
            if case .dataCorrupted(let context) = error, context.codingPath.isEmpty {
                throw ProfileError("\(name): \(describe(error))")
            }
            decodingError = describe(error)
        } catch {
            throw ProfileError("\(name): not JSON: \(error)")
        }
        // JSON it is: a key the format does not define, or one given twice, is found before what
        // the decoder said of the values (a misspelt "uuid" is named as such, not as missing).
        if let problem = keyProblem(in: Array(data)) { throw ProfileError("\(name): \(problem)") }
        guard let profile = decoded else { throw ProfileError("\(name): \(decodingError ?? "not a profile")") }
        try profile.check(name: name)
        return profile
    }

    /// The keys each object of the format may have, by where it is (array indices left out):
    /// nil for an object where the format has none (the decoder says what belongs there).
    static func allowedKeys(at path: [JSONMemberNames.PathComponent]) -> [String]? {
        let shape = path.map { step -> String in
            if case .name(let name) = step { return name }
            return "[]"
        }
        switch shape {
        case []: return CodingKeys.allCases.map(\.rawValue)
        case ["services", "[]"]: return Service.CodingKeys.allCases.map(\.rawValue)
        case ["services", "[]", "characteristics", "[]"]: return Characteristic.CodingKeys.allCases.map(\.rawValue)
        case ["services", "[]", "characteristics", "[]", "descriptors", "[]"]: return Descriptor.CodingKeys.allCases.map(\.rawValue)
        case ["recording"]: return Recording.CodingKeys.allCases.map(\.rawValue)
        case ["recording", "events", "[]"]: return Event.CodingKeys.allCases.map(\.rawValue)
        default: return nil
        }
    }

    /// The first key of `bytes` (JSON) that the format does not define where it stands, or that
    /// its object has twice (`JSONDecoder` would keep one of the two, silently), as an error
    /// naming its path; nil when every key is the format's, once. A misspelt key would
    /// otherwise be passed over: `permisions: [read-encrypted]` would serve the value unencrypted.
    static func keyProblem(in bytes: [UInt8]) -> String? {
        var problem: String?
        JSONMemberNames.forEach(in: bytes) { objectPath, name, repeated in
            // A file's key may be anything: each is shown cut short, its controls made visible.
            let shown = (objectPath + [.name(name)]).map { step -> JSONMemberNames.PathComponent in
                if case .name(let text) = step { return .name(String(text.prefix(40))) }
                return step
            }
            let at = JSONMemberNames.text(shown).visible
            if repeated {
                problem = "\(at): appears twice in one object: give each key once"
                return false
            }
            guard let allowed = allowedKeys(at: objectPath), !allowed.contains(name) else { return true }
            let near = allowed.first { editDistance($0, name) <= 2 }.map { "did you mean \($0)? " } ?? ""
            problem = "\(at): unknown key (\(near)allowed: \(allowed.joined(separator: ", ")))"
            return false
        }
        return problem
    }

    /// Levenshtein distance, for a misspelt key's suggestion (keys are short; a long one is far).
    static func editDistance(_ a: String, _ b: String) -> Int {
        let a = Array(a.utf8.prefix(64)), b = Array(b.utf8.prefix(64))
        var previous = Array(0...b.count)
        for (i, x) in a.enumerated() {
            var current = [i + 1]
            for (j, y) in b.enumerated() {
                current.append(min(previous[j + 1] + 1, current[j] + 1, previous[j] + (x == y ? 0 : 1)))
            }
            previous = current
        }
        return previous[b.count]
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
        if let addressType {
            guard ["public", "random"].contains(addressType) else { throw fail("addressType", "'\(addressType.prefix(20))' is not public or random") }
            guard let address, BluetoothAddress(address) != nil else { throw fail("address", "an address like C4:12:34:56:78:9A goes with addressType") }
        }
        for (key, text) in [("advertisingData", advertisingData), ("scanResponseData", scanResponseData)] {
            guard let text else { continue }
            guard let bytes = Self.bytes(text) else { throw fail(key, "'\(text.prefix(40))' is not hex (020106)") }
            if extendedAdvertising == true {
                guard bytes.count <= Self.maxExtendedAdvertisingBytes else {
                    throw fail(key, "\(bytes.count) bytes; extended advertising carries at most \(Self.maxExtendedAdvertisingBytes) (Vol 6, Part B, 2.3.4.9)")
                }
            } else {
                guard bytes.count <= Self.maxAdvertisingBytes else {
                    throw fail(key, "\(bytes.count) bytes; legacy advertising carries at most \(Self.maxAdvertisingBytes) (Vol 6, Part B, 2.3.1.1); set \"extendedAdvertising\": true for up to \(Self.maxExtendedAdvertisingBytes)")
                }
            }
        }
        if let replay, !["loop", "once"].contains(replay) { throw fail("replay", "'\(replay.prefix(20))' is not loop or once") }
        let uuids = Set(services.compactMap { Self.uuid($0.uuid) })
        if let cycle = Self.declarationOrder(services, of: Array(services.indices)).cycle {
            let included = services[cycle.service].includes?[cycle.include] ?? ""
            throw fail("services[\(cycle.service)].includes[\(cycle.include)]",
                       "'\(included.prefix(40))' includes services[\(cycle.service)] again (itself or through the services it includes): circular includes are not served")
        }
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
                if let size = characteristic.minimumKeySize {
                    // Vol 3, Part H, 3.5.1: a key has 7 to 16 octets.
                    guard (7...16).contains(size) else { throw fail("\(at).minimumKeySize", "\(size) is not a key size: 7 to 16 octets") }
                    let encrypting = ["read-encrypted", "write-encrypted", "read-authenticated", "write-authenticated"]
                    guard !(characteristic.permissions ?? []).allSatisfy({ !encrypting.contains($0) }) else {
                        throw fail("\(at).minimumKeySize", "goes with a permission that requires encryption (\(encrypting.joined(separator: ", ")))")
                    }
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
        try checkHandles(fail)
    }

    /// The services at `indices` in an order that declares every included service before the
    /// services that include it, the file's order otherwise: a database built in one pass needs
    /// an included service's handles for the include declaration (Vol 3, Part G, 3.2: its
    /// handle, end group handle and UUID), while the service itself may be anywhere in the
    /// database (a dump of a real device can include a later service). An include names the
    /// first service of `indices` with its UUID; one naming none is passed over. `cycle`: the
    /// service and include that lead back to a service on the way (then `order` is partial).
    /// Iterative: a chain of thousands of includes takes no stack.
    static func declarationOrder(_ services: [Service], of indices: [Int]) -> (order: [Int], cycle: (service: Int, include: Int)?) {
        var first: [BluetoothUUID: Int] = [:]
        for index in indices { if let uuid = uuid(services[index].uuid), first[uuid] == nil { first[uuid] = index } }
        var finished = Set<Int>(), onPath = Set<Int>()
        var order: [Int] = []
        for root in indices where !finished.contains(root) {
            var path = [(service: root, next: 0)]
            onPath.insert(root)
            while let (service, next) = path.last {
                let includes = services[service].includes ?? []
                guard next < includes.count else {
                    path.removeLast()
                    onPath.remove(service)
                    finished.insert(service)
                    order.append(service)
                    continue
                }
                path[path.count - 1].next += 1
                guard let included = uuid(includes[next]).flatMap({ first[$0] }), !finished.contains(included) else { continue }
                if onPath.contains(included) { return (order, (service, next)) }
                onPath.insert(included)
                path.append((included, 0))
            }
        }
        return (order, nil)
    }

    /// Legacy advertising PDUs carry at most 31 octets of each payload (Vol 6, Part B, 2.3.1.1, 2.3.2.2).
    public static let maxAdvertisingBytes = 31
    /// Extended advertising carries at most 1650 octets of host data per payload (Vol 6, Part B,
    /// 2.3.4.9; Vol 4, Part E, 7.8.54 and 7.8.57).
    public static let maxExtendedAdvertisingBytes = 1650
    /// A recording holds at most this many events (a day of 1 Hz notifications from a few characteristics).
    public static let maxEvents = 100_000
    /// A recording lasts at most a day.
    public static let maxDuration = 86_400.0

    /// The recorded address a replay takes as its own: a static random one (the two most
    /// significant bits 0b11, Vol 6, Part B, 1.3.2.1), which the host sets with LE Set Random
    /// Address. A public address is the controller's own (setting it needs a vendor command)
    /// and a private one changes anyway: nil, with `addressNote` saying why.
    public var replayAddress: BluetoothAddress? {
        guard addressType == "random", let address, let parsed = BluetoothAddress(address),
              parsed.bytes.5 & 0xC0 == 0xC0 else { return nil }
        return parsed
    }

    /// Why a recorded address is not taken (nil when it is, or none was recorded).
    public var addressNote: String? {
        guard let addressType, let address, replayAddress == nil else { return nil }
        if addressType == "public" {
            return "the recorded public address \(address) is not taken: a controller's public address changes only by a vendor command; the replay advertises from its own"
        }
        return "the recorded address \(address) is a private random one (not static): the replay advertises from its own"
    }

    /// Whether the profile places its attributes at recorded handles.
    public var hasHandles: Bool { services.contains { $0.handle != nil } }

    /// The handles of a recorded database: all or none, each in 1...0xFFFF, in strictly rising
    /// order through the file (a service's declaration, its includes right after it, each
    /// characteristic's declaration and value, its descriptors, then the service's end), as a
    /// server lays them out (Vol 3, Part G, 3.1-3.3); then the recording's events.
    func checkHandles(_ fail: (String, String) -> ProfileError) throws(ProfileError) {
        guard hasHandles else {
            if let recording, !recording.events.isEmpty {
                throw fail("recording.events", "events name value handles: the services need their handles")
            }
            return
        }
        var last = 0
        var lastWhere = "the start"
        func next(_ handle: Int?, _ at: String) throws(ProfileError) -> Int {
            guard let handle else { throw fail(at, "missing: a profile with handles needs every attribute's handle") }
            guard (1...0xFFFF).contains(handle) else { throw fail(at, "\(handle) is not a handle (1 to 65535)") }
            guard handle > last else {
                throw fail(at, "\(handle) overlaps or comes before \(last) (\(lastWhere)): handles rise through the file")
            }
            last = handle
            lastWhere = at
            return handle
        }
        var notifying: [Int: Bool] = [:]
        for (s, service) in services.enumerated() {
            let at = "services[\(s)]"
            let start = try next(service.handle, "\(at).handle")
            // Include declarations follow the service declaration (Vol 3, Part G, 3.1).
            last = start + (service.includes?.count ?? 0)
            guard last <= 0xFFFF else { throw fail("\(at).includes", "more includes than handles") }
            for (c, characteristic) in service.characteristics.enumerated() {
                let at = "\(at).characteristics[\(c)]"
                let declaration = try next(characteristic.handle, "\(at).handle")
                let value = try next(characteristic.valueHandle, "\(at).valueHandle")
                guard value == declaration + 1 else {
                    throw fail("\(at).valueHandle", "\(value) is not \(declaration + 1): the value follows its declaration (Vol 3, Part G, 3.3)")
                }
                let notifies = characteristic.properties.contains("notify") || characteristic.properties.contains("indicate")
                if notifies { notifying[value] = characteristic.properties.contains("indicate") && !characteristic.properties.contains("notify") }
                var hasCCCD = false
                for (d, descriptor) in (characteristic.descriptors ?? []).enumerated() {
                    _ = try next(descriptor.handle, "\(at).descriptors[\(d)].handle")
                    if Self.uuid(descriptor.uuid) == GATTType.clientConfiguration { hasCCCD = true }
                }
                if notifies && !hasCCCD {
                    throw fail("\(at).descriptors", "it notifies or indicates, so it needs its 2902 descriptor (the CCCD) with its handle")
                }
            }
            guard let end = service.endHandle else { throw fail("\(at).endHandle", "missing: a profile with handles needs every service's end") }
            guard (last...0xFFFF).contains(end) else {
                throw fail("\(at).endHandle", "\(end) is not from \(last) (its last attribute) to 65535")
            }
            last = end
            lastWhere = "\(at).endHandle"
        }
        guard let recording else { return }
        guard recording.duration > 0, recording.duration <= Self.maxDuration else {
            throw fail("recording.duration", "\(recording.duration) is not above 0 and at most \(Int(Self.maxDuration)) seconds")
        }
        guard recording.events.count <= Self.maxEvents else {
            throw fail("recording.events", "\(recording.events.count) events; a recording holds at most \(Self.maxEvents)")
        }
        var time = 0.0
        for (e, event) in recording.events.enumerated() {
            let at = "recording.events[\(e)]"
            guard event.at >= time, event.at <= recording.duration else {
                throw fail("\(at).at", "\(event.at) is not from \(time) (the event before) to \(recording.duration) (the duration)")
            }
            time = event.at
            guard notifying[event.handle] != nil else {
                throw fail("\(at).handle", "\(event.handle) is not the value handle of a characteristic that notifies or indicates")
            }
            try checkValue(event.value, "\(at).value", fail)
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
