import BlemuCore
import BlemuCrypto

/// One BTHome object: its id and its value as the integer on the air (or the bytes of text/raw).
public struct BTHomeObject: Sendable, Equatable {
    public let id: UInt8
    /// The integer on the air (before scaling); 0 for text and raw.
    public let integer: Int64
    /// The bytes of a text or raw object; empty otherwise.
    public let bytes: [UInt8]

    /// An object of a known type from its integer; nil when the integer does not fit the type's bytes.
    public init?(_ type: BTHomeObjectType, integer: Int64) {
        guard type.encoding == .signed || type.encoding == .unsigned, type.integerRange.contains(integer) else { return nil }
        self.id = type.id
        self.integer = integer
        self.bytes = []
    }

    /// An object of a known type from its value in the type's unit (21.5 °C → 2150 for 0x02),
    /// rounded to the type's step; nil when it does not fit (or is not finite).
    public init?(_ type: BTHomeObjectType, value: Double) {
        let scaled = (value / type.scale).rounded()
        guard scaled.isFinite, scaled >= -9.2e18, scaled <= 9.2e18 else { return nil }
        self.init(type, integer: Int64(scaled))
    }

    /// A text (0x53) or raw (0x54) object; nil for another type or more than 255 bytes.
    public init?(_ type: BTHomeObjectType, bytes: [UInt8]) {
        guard type.encoding == .text || type.encoding == .raw, bytes.count <= 255 else { return nil }
        self.id = type.id
        self.integer = 0
        self.bytes = bytes
    }

    init(id: UInt8, integer: Int64, bytes: [UInt8]) {
        self.id = id
        self.integer = integer
        self.bytes = bytes
    }

    public var type: BTHomeObjectType? { BTHomeObjectType.forID(id) }

    /// The value in the type's unit (2150 → 21.5 for temperature).
    public var value: Double { Double(integer) * (type?.scale ?? 1) }

    func append(to out: inout [UInt8]) {
        out.append(id)
        guard let type else { return }
        switch type.encoding {
        case .text, .raw:
            out.append(UInt8(bytes.count))
            out += bytes
        case .signed, .unsigned:
            let pattern = UInt64(bitPattern: integer)
            for index in 0..<type.length { out.append(UInt8(truncatingIfNeeded: pattern >> (8 * UInt64(index)))) }
        }
    }
}

/// What a BTHome device broadcasts in one advertisement: its flags and objects.
public struct BTHomePacket: Sendable, Equatable {
    /// Bit 2 of the device information: the device sends when something happens (a button),
    /// not at a regular interval, so a receiver should not mark it unavailable for silence.
    public var triggerBased: Bool
    /// The objects, in the order sent: `BTHome.serviceData` sorts them by id (a stable sort, so
    /// several objects of one id keep their order), as the format asks.
    public var objects: [BTHomeObject]

    public init(triggerBased: Bool = false, objects: [BTHomeObject]) {
        self.triggerBased = triggerBased
        self.objects = objects
    }

    /// The first object with `type`'s id.
    public func first(_ type: BTHomeObjectType) -> BTHomeObject? { objects.first { $0.id == type.id } }
}

/// What encrypts a BTHome advertisement: the bindkey, the advertiser's address and the counter
/// of this advertisement (never used twice with one key: `BTHomeCounterStore`).
public struct BTHomeEncryption: Sendable {
    public let key: AESCCMKey
    public let address: BluetoothAddress
    public let counter: UInt32

    public init(key: AESCCMKey, address: BluetoothAddress, counter: UInt32) {
        self.key = key
        self.address = address
        self.counter = counter
    }
}

/// Why bytes are no BTHome v2 advertisement, or could not be opened.
public enum BTHomeDecodeError: Error, Equatable, Sendable, CustomStringConvertible {
    /// No service data with the UUID 0xFCD2 in the advertising data.
    case notBTHome
    /// Service data shorter than the device information byte.
    case empty
    /// The device information says another version than 2 (version 1 used the UUIDs 0x181C/0x181E).
    case unsupportedVersion(UInt8)
    /// The advertising data's AD structures are malformed.
    case malformedAdvertisingData(String)
    /// Encrypted, and no bindkey given.
    case encryptedWithoutKey
    /// Encrypted, and shorter than the counter and MIC.
    case encryptedTooShort(Int)
    /// The MIC did not match: a wrong bindkey, or altered bytes.
    case authenticationFailed
    /// Unencrypted, though a bindkey was given for the device: refused like bthome-ble does,
    /// since anyone can clear the encryption bit and send readings of their own.
    case unencryptedWithKey

    public var description: String {
        switch self {
        case .notBTHome: return "no BTHome service data (UUID 0xFCD2)"
        case .empty: return "BTHome service data without the device information byte"
        case .unsupportedVersion(let version): return "BTHome version \(version), not 2"
        case .malformedAdvertisingData(let reason): return "malformed advertising data: \(reason)"
        case .encryptedWithoutKey: return "encrypted BTHome, and no bindkey"
        case .encryptedTooShort(let count): return "encrypted BTHome of \(count) bytes, shorter than the counter and MIC"
        case .authenticationFailed: return "encrypted BTHome whose MIC does not match (wrong bindkey, or altered)"
        case .unencryptedWithKey: return "unencrypted BTHome from a device with a bindkey (refused: anyone can send those)"
        }
    }
}

/// Where object decoding stopped before the end of the payload; the objects before it stand.
/// `offset` counts from the first object (after the device information byte; in the plaintext
/// when encrypted).
public enum BTHomeStop: Sendable, Equatable, CustomStringConvertible {
    /// An object id the format table does not know: its length is unknown, so nothing after it
    /// can be read (bthome.io: receivers stop there too).
    case unknownObject(id: UInt8, offset: Int)
    /// An object whose bytes run past the end of the payload.
    case truncatedObject(id: UInt8, offset: Int)

    public var description: String {
        switch self {
        case .unknownObject(let id, let offset):
            return "unknown object id 0x\(String(id, radix: 16, uppercase: true)) at byte \(offset) of the objects: the rest is not decoded"
        case .truncatedObject(let id, let offset):
            return "object 0x\(String(id, radix: 16, uppercase: true)) at byte \(offset) of the objects runs past the end"
        }
    }
}

/// A decoded BTHome v2 advertisement.
public struct BTHomeReading: Sendable, Equatable {
    public var packet: BTHomePacket
    /// Whether it came encrypted (and was opened with the bindkey).
    public var encrypted: Bool
    /// The counter of an encrypted advertisement (a receiver checks it grows, against replays).
    public var counter: UInt32?
    /// Set when decoding stopped before the end of the objects.
    public var stop: BTHomeStop?

    /// The packet id (object 0x00), which a receiver uses to tell a new reading from a repeat.
    public var packetID: UInt8? { packet.first(.packetID).map { UInt8(truncatingIfNeeded: $0.integer) } }
}

/// BTHome v2 (bthome.io/format): service data with the 16-bit UUID 0xFCD2 (AD type 0x16), a
/// device information byte (bit 0 encryption, bit 2 trigger-based, bits 5-7 the version, 2),
/// then objects in ascending id order. The Flags AD (02 01 06) must come first in the
/// advertisement. Encrypted (bthome.io/encryption): the objects are AES-CCM ciphertext under the
/// 16-byte bindkey, followed by the 4-byte counter (little-endian) and the 4-byte MIC; the nonce is
/// the MAC address (6 bytes, most significant first, as written), the UUID (D2 FC), the device
/// information byte and the counter's 4 bytes.
public enum BTHome {
    public static let serviceUUID: UInt16 = 0xFCD2
    public static let version: UInt8 = 2
    public static let micLength = 4
    public static let counterLength = 4
    static let encryptionFlag: UInt8 = 0x01
    static let triggerBasedFlag: UInt8 = 0x04

    /// The device information byte.
    public static func deviceInformation(encrypted: Bool, triggerBased: Bool) -> UInt8 {
        version << 5 | (triggerBased ? triggerBasedFlag : 0) | (encrypted ? encryptionFlag : 0)
    }

    /// The service data after the UUID: device information, then the objects (sorted by id),
    /// encrypted when `encryption` is given.
    public static func payload(_ packet: BTHomePacket, encryption: BTHomeEncryption? = nil) -> [UInt8] {
        let information = deviceInformation(encrypted: encryption != nil, triggerBased: packet.triggerBased)
        var objects: [UInt8] = []
        for object in sortedObjects(packet.objects) { object.append(to: &objects) }
        guard let encryption else { return [information] + objects }
        var counter: [UInt8] = []
        counter.appendLE(encryption.counter)
        let nonce = nonce(address: encryption.address, deviceInformation: information, counter: counter)
        let sealed = encryption.key.seal(objects, nonce: nonce, tagLength: micLength)
        return [information] + sealed.ciphertext + counter + sealed.tag
    }

    /// The whole advertising data: Flags (LE General Discoverable, BR/EDR not supported: 02 01 06)
    /// and the service data AD structure. `payload` must fit one AD structure (254 bytes).
    public static func advertisingData(_ packet: BTHomePacket, encryption: BTHomeEncryption? = nil) -> [UInt8] {
        let serviceData = payload(packet, encryption: encryption)
        precondition(serviceData.count + 3 <= 255, "BTHome payload too long for one AD structure")
        return [0x02, 0x01, 0x06, UInt8(serviceData.count + 3), 0x16, UInt8(serviceUUID & 0xFF), UInt8(serviceUUID >> 8)] + serviceData
    }

    /// Decodes the service data after the UUID (device information, objects). Throws for what is
    /// no BTHome v2 or cannot be opened; an unknown or truncated object ends the objects with
    /// `stop` set. `key` and `address` open an encrypted payload; with a key, an unencrypted
    /// payload is refused (`.unencryptedWithKey`).
    public static func decode(payload: ArraySlice<UInt8>, key: AESCCMKey? = nil,
                              address: BluetoothAddress? = nil) throws(BTHomeDecodeError) -> BTHomeReading {
        guard let information = payload.first else { throw .empty }
        let version = information >> 5
        guard version == Self.version else { throw .unsupportedVersion(version) }
        let triggerBased = information & triggerBasedFlag != 0
        guard information & encryptionFlag != 0 else {
            guard key == nil else { throw .unencryptedWithKey }
            let (objects, stop) = decodeObjects(payload.dropFirst())
            return BTHomeReading(packet: BTHomePacket(triggerBased: triggerBased, objects: objects), encrypted: false, counter: nil, stop: stop)
        }
        guard let key, let address else { throw .encryptedWithoutKey }
        let body = payload.dropFirst()
        guard body.count >= counterLength + micLength else { throw .encryptedTooShort(body.count) }
        let ciphertext = body.dropLast(counterLength + micLength)
        let counterBytes = body.dropFirst(ciphertext.count).prefix(counterLength)
        let mic = body.suffix(micLength)
        let nonce = nonce(address: address, deviceInformation: information, counter: counterBytes)
        guard let plaintext = key.open(ciphertext, tag: mic, nonce: nonce) else { throw .authenticationFailed }
        var reader = ByteReader(counterBytes)
        let counter = (try? reader.u32()) ?? 0
        let (objects, stop) = decodeObjects(plaintext[...])
        return BTHomeReading(packet: BTHomePacket(triggerBased: triggerBased, objects: objects), encrypted: true, counter: counter, stop: stop)
    }

    /// Finds the BTHome service data in advertising data (AD structures) and decodes it.
    public static func decode(advertisingData: ArraySlice<UInt8>, key: AESCCMKey? = nil,
                              address: BluetoothAddress? = nil) throws(BTHomeDecodeError) -> BTHomeReading {
        let structures: [ADStructure]
        do { structures = try ADStructure.parse(advertisingData) } catch { throw .malformedAdvertisingData(error.description) }
        guard let serviceData = ADStructure.serviceData16(structures, uuid: serviceUUID) else { throw .notBTHome }
        return try decode(payload: serviceData, key: key, address: address)
    }

    /// Objects until the end, an unknown id, or a truncated object.
    static func decodeObjects(_ bytes: ArraySlice<UInt8>) -> ([BTHomeObject], BTHomeStop?) {
        var objects: [BTHomeObject] = []
        var index = bytes.startIndex
        while index < bytes.endIndex {
            let offset = index - bytes.startIndex
            let id = bytes[index]
            guard let type = BTHomeObjectType.forID(id) else { return (objects, .unknownObject(id: id, offset: offset)) }
            var valueStart = index + 1
            var length = type.length
            if type.encoding == .text || type.encoding == .raw {
                guard valueStart < bytes.endIndex else { return (objects, .truncatedObject(id: id, offset: offset)) }
                length = Int(bytes[valueStart])
                valueStart += 1
            }
            guard bytes.endIndex - valueStart >= length else { return (objects, .truncatedObject(id: id, offset: offset)) }
            let value = bytes[valueStart..<valueStart + length]
            switch type.encoding {
            case .text, .raw:
                objects.append(BTHomeObject(id: id, integer: 0, bytes: Array(value)))
            case .signed, .unsigned:
                var pattern: UInt64 = 0
                for (shift, byte) in value.enumerated() { pattern |= UInt64(byte) << (8 * UInt64(shift)) }
                var integer = Int64(bitPattern: pattern)
                if type.encoding == .signed, length < 8 {
                    let unused = UInt64(64 - 8 * length)
                    integer = Int64(bitPattern: pattern << unused) >> Int64(unused)
                }
                objects.append(BTHomeObject(id: id, integer: integer, bytes: []))
            }
            index = valueStart + length
        }
        return (objects, nil)
    }

    static func sortedObjects(_ objects: [BTHomeObject]) -> [BTHomeObject] {
        // enumerated + sort by (id, position): a stable sort.
        objects.enumerated().sorted { ($0.element.id, $0.offset) < ($1.element.id, $1.offset) }.map(\.element)
    }

    static func nonce(address: BluetoothAddress, deviceInformation: UInt8, counter: some Collection<UInt8>) -> [UInt8] {
        // The MAC as written (most significant byte first): the reverse of the air's order.
        Array(address.littleEndianBytes.reversed()) + [UInt8(serviceUUID & 0xFF), UInt8(serviceUUID >> 8), deviceInformation] + counter
    }
}
