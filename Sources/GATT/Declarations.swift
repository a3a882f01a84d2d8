import BlemuATT
import BlemuCore

/// Characteristic Properties bit field (Vol 3, Part G, 3.3.1.1, Table 3.5).
public struct CharacteristicProperties: OptionSet, Sendable, Hashable {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }
    public static let broadcast = CharacteristicProperties(rawValue: 0x01)
    public static let read = CharacteristicProperties(rawValue: 0x02)
    public static let writeWithoutResponse = CharacteristicProperties(rawValue: 0x04)
    public static let write = CharacteristicProperties(rawValue: 0x08)
    public static let notify = CharacteristicProperties(rawValue: 0x10)
    public static let indicate = CharacteristicProperties(rawValue: 0x20)
    public static let authenticatedSignedWrites = CharacteristicProperties(rawValue: 0x40)
    public static let extendedProperties = CharacteristicProperties(rawValue: 0x80)

    /// Properties that make a value change at run time: such a value cannot be cached.
    public static let mutating: CharacteristicProperties = [.writeWithoutResponse, .write, .notify, .indicate,
                                                            .authenticatedSignedWrites]
}

/// Who may read or write an attribute (Vol 3, Part F, 3.2.5): access, and the security the link
/// must have (Vol 3, Part C, 10.3). The server checks them before a device hears of a request:
/// an unencrypted link gets Insufficient Authentication (0x05), or Insufficient Encryption (0x0F)
/// when the device holds a key for the central; an encrypted link whose key is too weak gets
/// Insufficient Authentication (not MITM-protected, or not Secure Connections when that is
/// required) or Encryption Key Size Too Short (0x0C, `Characteristic.minimumEncryptionKeySize`).
/// Authorization comes last, on a link whose security is enough: the device (its
/// characteristic's `authorize`, else whoever drives it, the control socket's `authorize`)
/// decides per request, and a refusal is Insufficient Authorization (0x08).
public struct AttributePermissions: OptionSet, Sendable, Hashable {
    public let rawValue: UInt16
    public init(rawValue: UInt16) { self.rawValue = rawValue }
    public static let readable = AttributePermissions(rawValue: 0x01)
    public static let writeable = AttributePermissions(rawValue: 0x02)
    /// Readable on an encrypted link only (implies readable).
    public static let readEncryptionRequired = AttributePermissions(rawValue: 0x04)
    /// Writeable on an encrypted link only (implies writeable).
    public static let writeEncryptionRequired = AttributePermissions(rawValue: 0x08)
    /// Readable on a link encrypted with an authenticated (MITM-protected) key only (implies
    /// readable and encryption).
    public static let readAuthenticationRequired = AttributePermissions(rawValue: 0x10)
    /// Writeable on a link encrypted with an authenticated key only (implies writeable and encryption).
    public static let writeAuthenticationRequired = AttributePermissions(rawValue: 0x20)
    /// Where encryption is required, the key must come from LE Secure Connections pairing.
    public static let secureConnectionsRequired = AttributePermissions(rawValue: 0x40)
    /// Readable only when the device authorizes the request (Vol 3, Part F, 3.2.5 "authorization
    /// permissions"; Vol 3, Part C, 10.5), else Insufficient Authorization (0x08). Implies readable.
    public static let readAuthorizationRequired = AttributePermissions(rawValue: 0x80)
    /// Writeable only when the device authorizes the request, else 0x08. Implies writeable.
    public static let writeAuthorizationRequired = AttributePermissions(rawValue: 0x100)

    /// Whether reading needs an encrypted link.
    public var readNeedsEncryption: Bool { !isDisjoint(with: [.readEncryptionRequired, .readAuthenticationRequired]) }
    /// Whether writing needs an encrypted link.
    public var writeNeedsEncryption: Bool { !isDisjoint(with: [.writeEncryptionRequired, .writeAuthenticationRequired]) }
    /// Whether reading is allowed at all, with whatever security and authorization it needs.
    public var allowsReading: Bool {
        !isDisjoint(with: [.readable, .readEncryptionRequired, .readAuthenticationRequired, .readAuthorizationRequired])
    }
    /// Whether writing is allowed at all, with whatever security and authorization it needs.
    public var allowsWriting: Bool {
        !isDisjoint(with: [.writeable, .writeEncryptionRequired, .writeAuthenticationRequired, .writeAuthorizationRequired])
    }
}

/// What a request does to a value, as an authorization decision sees it.
public enum AttributeAccess: String, Sendable, Hashable {
    case read
    /// Write Request, Write Command, Signed Write Command, Prepare Write Request.
    case write
}

/// A device's decision on one request for a value that requires authorization (Vol 3, Part C,
/// 10.5): true lets the request go on to the handlers; false answers Insufficient Authorization
/// (0x08) and the handlers never hear of it.
public typealias AuthorizationHandler = (_ peer: ATTPeer, _ access: AttributeAccess) -> Bool

/// The connection a request comes from, as a device sees it.
public struct ATTPeer: Sendable, Hashable {
    public let connectionHandle: UInt16
    /// The peer's address with its type, as its connection event gave it (the identity address
    /// when the controller resolved a private one).
    public let leAddress: LEAddress
    /// The peer's 48-bit address, as a device shows it.
    public var address: BluetoothAddress { leAddress.address }

    public init(connectionHandle: UInt16, address: LEAddress) {
        self.connectionHandle = connectionHandle
        self.leAddress = address
    }

    /// A peer with a random address, as a phone's is: for a server or client made alone (a test,
    /// a fuzz target), where the type does not matter.
    public init(connectionHandle: UInt16, address: BluetoothAddress) {
        self.init(connectionHandle: connectionHandle, address: LEAddress(address, isRandom: true))
    }
}

/// A read of a dynamic value, like Core Bluetooth's CBATTRequest. The device writes its whole
/// value into the `ValueBuffer` it is handed; the stack keeps the bytes from `offset` on and
/// answers Invalid Offset when the value is shorter than `offset` (Vol 3, Part F, 3.4.4.6), so
/// no offset a central sends can make a handler trap. A read at offset 0 starts a long read;
/// the stack keeps that value for the Read Blob requests that continue it, so the device is
/// asked once per long read.
public struct ReadRequest: Sendable {
    public let peer: ATTPeer
    /// Where the answer starts in the value: for information only, as the stack skips it.
    public let offset: Int
    public init(peer: ATTPeer, offset: Int) {
        self.peer = peer
        self.offset = offset
    }
}

/// A value's bytes, indexed from 0, borrowed from the buffer the PDU arrived in: handing one
/// to a device copies nothing. Keep `Array(value)` if the bytes must outlive the handler (a
/// kept `ValueBytes` stays valid, but pins the receive buffer until it is dropped).
public struct ValueBytes: RandomAccessCollection, Hashable, ExpressibleByArrayLiteral, Sendable, CustomStringConvertible {
    /// The bytes as they lie in the PDU (indices are the PDU's, not from 0).
    public let slice: ArraySlice<UInt8>

    @inlinable public init(_ slice: ArraySlice<UInt8>) { self.slice = slice }
    @inlinable public init(_ bytes: [UInt8]) { slice = bytes[...] }
    public init(arrayLiteral elements: UInt8...) { slice = elements[...] }

    @inlinable public var startIndex: Int { 0 }
    @inlinable public var endIndex: Int { slice.count }
    @inlinable public subscript(position: Int) -> UInt8 {
        precondition(position >= 0 && position < slice.count, "ValueBytes index out of range")
        return slice[slice.startIndex &+ position]
    }
    @inlinable public func index(after i: Int) -> Int { i &+ 1 }
    @inlinable public func index(before i: Int) -> Int { i &- 1 }

    /// A little-endian 16-bit field at `offset` (the caller knows the value is long enough).
    @inlinable public func uint16LE(at offset: Int) -> UInt16 { UInt16(self[offset]) | UInt16(self[offset + 1]) << 8 }

    public static func == (lhs: ValueBytes, rhs: ValueBytes) -> Bool { lhs.slice.elementsEqual(rhs.slice) }
    public static func == (lhs: ValueBytes, rhs: [UInt8]) -> Bool { lhs.slice.elementsEqual(rhs) }
    public func hash(into hasher: inout Hasher) {
        for byte in slice { hasher.combine(byte) }
    }
    public var description: String { Array(slice).description }
}

/// Where a device writes a value the stack sends: an `onRead` handler's answer, or a
/// notification's value (`DeviceContext.notify(_:to:encode:)`). The stack owns one per link or
/// peripheral and reuses it, so writing a value allocates nothing.
///
/// Write the *whole* value from its first byte: for a read at an offset the buffer drops the
/// bytes before it, and it keeps no more than the 512-byte attribute maximum (Vol 3, Part F,
/// 3.2.9).
public struct ValueBuffer {
    @usableFromInline var storage: [UInt8]
    /// Bytes at the start of the value that are not kept (the read's offset).
    @usableFromInline var skipped: Int
    /// How many bytes of the whole value are kept, at most.
    @usableFromInline var limit: Int
    @usableFromInline var written: Int
    /// How many bytes the device wrote: the whole value's length, kept or not.
    public var count: Int { written }

    public init(capacity: Int = ValueLength.attributeMaximum) {
        storage = []
        storage.reserveCapacity(capacity)
        skipped = 0
        limit = capacity
        written = 0
    }

    /// Empties the buffer for a new value whose first `skipping` bytes are dropped. A buffer made
    /// with no capacity gets room for `limit` bytes the first time, and keeps it.
    public mutating func reset(skipping offset: Int = 0, limit: Int = ValueLength.attributeMaximum) {
        storage.removeAll(keepingCapacity: true)
        if storage.capacity < limit { storage.reserveCapacity(limit) }
        skipped = offset
        self.limit = limit
        written = 0
    }

    /// The bytes kept: the value from the offset on, at most the limit.
    public var bytes: ArraySlice<UInt8> { storage[...] }

    @inlinable public mutating func append(_ byte: UInt8) {
        if written >= skipped && written < limit { storage.append(byte) }
        written &+= 1
    }

    @inlinable public mutating func append(contentsOf bytes: ArraySlice<UInt8>) {
        let start = max(0, skipped - written), end = min(bytes.count, limit - written)
        if start < end { storage.append(contentsOf: bytes[(bytes.startIndex + start)..<(bytes.startIndex + end)]) }
        written &+= bytes.count
    }

    @inlinable public mutating func append(contentsOf bytes: [UInt8]) { append(contentsOf: bytes[...]) }

    @inlinable public mutating func append<S: Sequence>(contentsOf bytes: S) where S.Element == UInt8 {
        for byte in bytes { append(byte) }
    }

    /// Little-endian, as every multi-octet field on the air (Vol 3, Part F, 3.3).
    @inlinable public mutating func appendLE(_ value: UInt16) {
        append(UInt8(truncatingIfNeeded: value))
        append(UInt8(truncatingIfNeeded: value >> 8))
    }

    @inlinable public mutating func appendLE(_ value: UInt32) {
        appendLE(UInt16(truncatingIfNeeded: value))
        appendLE(UInt16(truncatingIfNeeded: value >> 16))
    }
}

/// A write to a dynamic value; `value` is the whole value for a Write Request, or the assembled
/// value of a long write starting at `offset`. The value is borrowed from the PDU (no copy).
public struct WriteRequest: Sendable {
    public let peer: ATTPeer
    public let offset: Int
    public let value: ValueBytes
    /// False for Write Command (no response will be sent, so errors are only logged).
    public let withResponse: Bool
    public init(peer: ATTPeer, offset: Int, value: ValueBytes, withResponse: Bool) {
        self.peer = peer
        self.offset = offset
        self.value = value
        self.withResponse = withResponse
    }
}

/// Writes the whole value into `value` (from its first byte: the stack skips to the request's
/// offset) and returns nil, or returns the ATT error to answer with.
public typealias ReadHandler = (_ request: ReadRequest, _ value: inout ValueBuffer) -> ATTError?
/// Applies a write; returns nil on success or the ATT error to answer with.
public typealias WriteHandler = (WriteRequest) -> ATTError?
/// Checks a write without applying it: nil to accept, or the ATT error to answer with. It must
/// have no side effects: an Execute Write asks it for every prepared value before any
/// `onWrite` runs, so a refusal leaves every attribute unchanged (Vol 3, Part F, 3.4.6.3).
public typealias WriteValidator = (WriteRequest) -> ATTError?

/// The length rule of a value: used for Invalid Attribute Value Length on writes and
/// Attribute Not Long on reads (Vol 3, Part F, 3.4.4.5).
public enum ValueLength: Sendable, Equatable {
    case fixed(Int)
    case variable(max: Int)

    /// The longest value an attribute can hold (Vol 3, Part F, 3.2.9).
    public static let attributeMaximum = 512

    public func accepts(_ count: Int) -> Bool {
        switch self {
        case .fixed(let n): return count == n
        case .variable(let max): return count <= max
        }
    }

    /// The error a write of `count` bytes at `offset` must be answered with, or nil when the
    /// value the device would receive keeps this rule. This is the device API's promise: a
    /// write handler never sees a value its declaration rules out, whatever the offsets of a
    /// long write (Vol 3, Part F, 3.4.6.3: Invalid Offset past the end, else Invalid Attribute
    /// Value Length).
    ///
    /// A fixed-length value is written whole (offset 0, exactly `n` bytes): the device keeps
    /// the value, so the stack cannot complete a partial one for it.
    public func refusal(offset: Int, count: Int) -> ATTError? {
        switch self {
        case .fixed(let n):
            if offset > n { return .invalidOffset }
            return offset == 0 && count == n ? nil : .invalidAttributeValueLength
        case .variable(let max):
            let max = Swift.min(max, Self.attributeMaximum)
            if offset > max { return .invalidOffset }
            return count <= max - offset ? nil : .invalidAttributeValueLength
        }
    }

    /// The longest value the rule allows.
    public var maximum: Int {
        switch self {
        case .fixed(let n): return n
        case .variable(let max): return Swift.min(max, Self.attributeMaximum)
        }
    }

    /// Whether the rule itself is possible: lengths from 0 to the attribute maximum.
    var isWellFormed: Bool {
        switch self {
        case .fixed(let n): return (0...Self.attributeMaximum).contains(n)
        case .variable(let max): return max >= 0
        }
    }
}

/// A characteristic descriptor other than the CCCD, which the database adds by itself for
/// notifying and indicating characteristics (Vol 3, Part G, 3.3.3).
public struct Descriptor: Sendable {
    public let uuid: BluetoothUUID
    public let value: [UInt8]
    /// What reading it needs: `.readEncryptionRequired` or `.readAuthenticationRequired` (the
    /// link's security, checked as for a value); other bits are ignored. Descriptors are never
    /// written or authorized.
    public let permissions: AttributePermissions

    public init(uuid: BluetoothUUID, value: [UInt8], permissions: AttributePermissions = []) {
        self.uuid = uuid
        self.value = value
        self.permissions = permissions
    }

    /// Characteristic User Description (Vol 3, Part G, 3.3.3.2): UTF-8 text.
    public static func userDescription(_ text: String) -> Descriptor {
        Descriptor(uuid: GATTType.userDescription, value: Array(text.utf8))
    }

    /// Characteristic Presentation Format (Vol 3, Part G, 3.3.3.5): format, exponent, unit,
    /// name space (0x01 = Bluetooth SIG), description.
    public static func presentationFormat(format: UInt8, exponent: Int8 = 0, unit: UInt16,
                                          namespace: UInt8 = 0x01, description: UInt16 = 0) -> Descriptor {
        var value: [UInt8] = [format, UInt8(bitPattern: exponent)]
        value.appendLE(unit)
        value.append(namespace)
        value.appendLE(description)
        return Descriptor(uuid: GATTType.presentationFormat, value: value)
    }

    /// Valid Range (Supplement; GSS): lower then upper inclusive bound, each in the
    /// characteristic's own format.
    public static func validRange(lower: [UInt8], upper: [UInt8]) -> Descriptor {
        Descriptor(uuid: GATTType.validRange, value: lower + upper)
    }
}

/// The handles of a characteristic placed by a recording: its declaration (the value follows at
/// once, Vol 3, Part G, 3.3: "the Characteristic Value declaration ... shall exist immediately
/// following the characteristic declaration"), its CCCD when it notifies or indicates, and its
/// other descriptors in declaration order. Handles between them stay empty (a gap).
public struct CharacteristicPlacement: Sendable, Equatable {
    public var declaration: UInt16
    public var clientConfiguration: UInt16?
    public var descriptors: [UInt16]

    public init(declaration: UInt16, clientConfiguration: UInt16? = nil, descriptors: [UInt16] = []) {
        self.declaration = declaration
        self.clientConfiguration = clientConfiguration
        self.descriptors = descriptors
    }
}

/// A characteristic as a device declares it. The object stays the device's handle for
/// notifying: the database fills in `valueHandle` when it is built.
public final class Characteristic {
    public let uuid: BluetoothUUID
    public let properties: CharacteristicProperties
    public let permissions: AttributePermissions
    /// A value served by the stack without asking the device (Core Bluetooth's cached value).
    public let cachedValue: [UInt8]?
    public let length: ValueLength
    public let descriptors: [Descriptor]
    public var onRead: ReadHandler?
    /// Checks every write before `onWrite` (see `WriteValidator`); put value checks here so
    /// long and reliable writes stay atomic.
    public var validateWrite: WriteValidator?
    public var onWrite: WriteHandler?
    /// Where the permissions require encryption: the smallest key size (octets, 7...16) the
    /// link's key must have, else Encryption Key Size Too Short (0x0C).
    public var minimumEncryptionKeySize: UInt8 = 7
    /// Where the permissions require authorization: the device's decision per request. Nil:
    /// the server asks its delegate (the control socket's `authorize`, deny until allowed).
    public var authorize: AuthorizationHandler?
    /// Whether writing the CCCD (subscribing) needs the security the value's permissions
    /// demand: encryption when reading or writing the value needs it, an authenticated key
    /// when either needs one (with the same Secure Connections and key-size rules). Vol 3,
    /// Part G, 3.3.3.3, Table 3.11: the CCCD is "Readable with no authentication or
    /// authorization. Writable with authentication and authorization defined by a higher layer
    /// specification or is implementation specific." False (the default): any link may
    /// subscribe, as before; reading the CCCD stays open either way.
    public var subscribingNeedsValueSecurity = false

    public internal(set) var declarationHandle: UInt16 = 0
    public internal(set) var valueHandle: UInt16 = 0
    public internal(set) var clientConfigurationHandle: UInt16?
    /// Where the database must put this characteristic (a recorded device's handles, which a
    /// central that cached them reads by); nil: the next free handles. See `AttributePlacement`.
    public var placement: CharacteristicPlacement?

    /// - Parameters:
    ///   - permissions: derived from `properties` when nil: readable if `.read`, writeable if any write.
    public init(_ uuid: BluetoothUUID, properties: CharacteristicProperties,
                permissions: AttributePermissions? = nil, cachedValue: [UInt8]? = nil,
                length: ValueLength = .variable(max: ValueLength.attributeMaximum),
                descriptors: [Descriptor] = [],
                onRead: ReadHandler? = nil, validateWrite: WriteValidator? = nil, onWrite: WriteHandler? = nil) {
        self.uuid = uuid
        self.properties = properties
        var derived: AttributePermissions = []
        if properties.contains(.read) { derived.insert(.readable) }
        if !properties.isDisjoint(with: [.write, .writeWithoutResponse, .authenticatedSignedWrites]) {
            derived.insert(.writeable)
        }
        self.permissions = permissions ?? derived
        self.cachedValue = cachedValue
        self.length = length
        self.descriptors = descriptors
        self.onRead = onRead
        self.validateWrite = validateWrite
        self.onWrite = onWrite
    }

    /// Convenience for a 16-bit assigned number.
    public convenience init(_ uuid16: UInt16, properties: CharacteristicProperties,
                            permissions: AttributePermissions? = nil, cachedValue: [UInt8]? = nil,
                            length: ValueLength = .variable(max: ValueLength.attributeMaximum),
                            descriptors: [Descriptor] = [],
                            onRead: ReadHandler? = nil, validateWrite: WriteValidator? = nil, onWrite: WriteHandler? = nil) {
        self.init(BluetoothUUID(uuid16), properties: properties, permissions: permissions, cachedValue: cachedValue,
                  length: length, descriptors: descriptors, onRead: onRead, validateWrite: validateWrite, onWrite: onWrite)
    }

    public var notifies: Bool { !properties.isDisjoint(with: [.notify, .indicate]) }
}

@resultBuilder
public enum CharacteristicBuilder {
    public static func buildExpression(_ c: Characteristic) -> [Characteristic] { [c] }
    public static func buildExpression(_ c: [Characteristic]) -> [Characteristic] { c }
    public static func buildBlock(_ parts: [Characteristic]...) -> [Characteristic] { parts.flatMap { $0 } }
    public static func buildOptional(_ c: [Characteristic]?) -> [Characteristic] { c ?? [] }
    public static func buildEither(first c: [Characteristic]) -> [Characteristic] { c }
    public static func buildEither(second c: [Characteristic]) -> [Characteristic] { c }
    public static func buildArray(_ c: [[Characteristic]]) -> [Characteristic] { c.flatMap { $0 } }
}

/// A service declaration, read top to bottom like Zephyr's BT_GATT_SERVICE_DEFINE:
///
///     Service(0x180D) {
///         Characteristic(0x2A37, properties: [.notify])
///         Characteristic(0x2A38, properties: [.read], cachedValue: [0x01])
///     }
public final class Service {
    public let uuid: BluetoothUUID
    public let isPrimary: Bool
    public let includes: [Service]
    public let characteristics: [Characteristic]
    public internal(set) var startHandle: UInt16 = 0
    public internal(set) var endHandle: UInt16 = 0
    /// Where the database must put this service's declaration and where its group ends (a
    /// recorded device's handles); nil: the next free handles. Its includes follow the
    /// declaration at once, as Vol 3, Part G, 3.1 lays a service out.
    public var placement: ClosedRange<UInt16>?

    public init(_ uuid: BluetoothUUID, primary: Bool = true, includes: [Service] = [],
                @CharacteristicBuilder _ characteristics: () -> [Characteristic]) {
        self.uuid = uuid
        self.isPrimary = primary
        self.includes = includes
        self.characteristics = characteristics()
    }

    public convenience init(_ uuid16: UInt16, primary: Bool = true, includes: [Service] = [],
                            @CharacteristicBuilder _ characteristics: () -> [Characteristic]) {
        self.init(BluetoothUUID(uuid16), primary: primary, includes: includes, characteristics)
    }
}
