import BlemuATT
import BlemuCore

/// Why a device's declaration cannot become a database. Raised when the database is built,
/// so a mistake shows at start, not when a phone first reads.
public struct GATTDatabaseError: Error, CustomStringConvertible, Equatable {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// One attribute of the flat table the ATT server walks (Vol 3, Part F, 3.2).
public struct Attribute {
    public enum Content {
        /// A value fixed for the life of the database: declarations, cached values, descriptors.
        case fixed([UInt8])
        /// A characteristic value served by the device's handlers.
        case dynamic(Characteristic)
        /// A CCCD: its value lives per connection in the bearer (Vol 3, Part G, 3.3.3.3).
        case clientConfiguration(Characteristic)
    }

    public let handle: UInt16
    public let type: BluetoothUUID
    public let content: Content
    public let readable: Bool
    public let writable: Bool
    public let encryptionRequiredToRead: Bool
    public let encryptionRequiredToWrite: Bool
    /// For service declarations: the last handle of the service (Vol 3, Part G, 3.1).
    public let groupEnd: UInt16
    /// Fixed-length values may answer Read Blob with Attribute Not Long.
    public let isFixedLength: Bool
    /// The characteristic a value, CCCD or descriptor belongs to.
    public let characteristic: Characteristic?
    /// Reading needs a key from a MITM-protected pairing (with `encryptionRequiredToRead`).
    public var authenticationRequiredToRead = false
    /// Writing needs a key from a MITM-protected pairing (with `encryptionRequiredToWrite`).
    public var authenticationRequiredToWrite = false
}

/// A GATT database: the flat attribute table built from service declarations, with handles
/// starting at 1, so handle `h` is `attributes[h - 1]`. Services and characteristics placed at
/// given handles (a recorded device, `Service.placement`) may leave handles empty between
/// them: those are never present, as if absent.
///
/// A service can be taken out and put back at run time (`setService(_:present:)`), as a
/// firmware update would change a device: its attributes keep their handles and are absent
/// meanwhile, so the other services' handles never move and one Service Changed range
/// (Vol 3, Part G, 7.1) covers the change.
public final class GATTDatabase {
    public let services: [Service]
    /// Every attribute declared, present or not: use `attribute(_:)` to look one up.
    public private(set) var attributes: [Attribute] = []
    public private(set) var characteristics: [Characteristic] = []
    /// `presence[h - 1]`: whether handle `h` is in the database now.
    private var presence: [Bool] = []
    /// The services taken out, by identity.
    private var absentServices = Set<ObjectIdentifier>()

    public init(services: [Service]) throws(GATTDatabaseError) {
        // Services placed at recorded handles come first, in handle order; the others follow
        // them (a recorded database keeps its handles, the stack's additions go after it).
        let placed = services.filter { $0.placement != nil }.sorted { $0.placement!.lowerBound < $1.placement!.lowerBound }
        let ordered = placed.isEmpty ? services : placed + services.filter { $0.placement == nil }
        self.services = ordered
        var next: UInt32 = 1
        var gaps: [Int] = []
        func take() throws(GATTDatabaseError) -> UInt16 {
            guard next <= 0xFFFF else { throw GATTDatabaseError("the database needs more than 65535 handles") }
            defer { next += 1 }
            return UInt16(next)
        }
        /// The handle `wanted` (nil: the next one), the handles before it left empty in `into`.
        /// A placed handle at or before one already taken overlaps or is out of order.
        func take(_ wanted: UInt16?, _ what: @autoclosure () -> String, into list: inout [Attribute]) throws(GATTDatabaseError) -> UInt16 {
            guard let wanted else { return try take() }
            guard UInt32(wanted) >= next else {
                throw GATTDatabaseError("\(what()) at handle \(Hex.word(wanted)): overlaps or comes before handle \(Hex.word(UInt16(next - 1))), already taken")
            }
            while next < UInt32(wanted) {
                gaps.append(Int(next) - 1)
                list.append(Self.gap(UInt16(next)))
                next += 1
            }
            return try take()
        }
        // An include declaration holds the included service's handles (Vol 3, Part G, 3.2), so
        // an included service is declared before the services that include it, unless it is
        // placed at recorded handles: those are known now, wherever it is in the database (a
        // recorded device may include a later service).
        var declared = Set<ObjectIdentifier>()
        let inDatabase = Set(ordered.map { ObjectIdentifier($0) })
        for service in ordered {
            for included in service.includes where !declared.contains(ObjectIdentifier(included)) {
                guard included.placement != nil, inDatabase.contains(ObjectIdentifier(included)) else {
                    throw GATTDatabaseError("service \(service.uuid) includes \(included.uuid), which must be declared before it")
                }
            }
            declared.insert(ObjectIdentifier(service))
            let start = try take(service.placement?.lowerBound, "service \(service.uuid)", into: &attributes)
            service.startHandle = start
            var pending: [Attribute] = []
            var declarationValue: [UInt8] = []
            service.uuid.appendATT(to: &declarationValue)
            // The group end is known only at the end of the service; patched below.
            pending.append(Attribute(handle: start, type: service.isPrimary ? GATTType.primaryService : GATTType.secondaryService,
                                     content: .fixed(declarationValue), readable: true, writable: false,
                                     encryptionRequiredToRead: false, encryptionRequiredToWrite: false,
                                     groupEnd: start, isFixedLength: true, characteristic: nil))
            for included in service.includes {
                // Include declaration (Vol 3, Part G, 3.2): handle, end group handle, and the
                // 16-bit UUID when there is one.
                var value: [UInt8] = []
                // A placed service starts and ends where placed (its group is padded to the end).
                value.appendLE(included.placement?.lowerBound ?? included.startHandle)
                value.appendLE(included.placement?.upperBound ?? included.endHandle)
                if let short = included.uuid.uint16 { value.appendLE(short) }
                pending.append(Attribute(handle: try take(), type: GATTType.include, content: .fixed(value),
                                         readable: true, writable: false, encryptionRequiredToRead: false,
                                         encryptionRequiredToWrite: false, groupEnd: 0, isFixedLength: true,
                                         characteristic: nil))
            }
            for characteristic in service.characteristics {
                try Self.validate(characteristic, in: service)
                let placement = characteristic.placement
                // Made only for an error: formatting two UUIDs for every characteristic was most
                // of building a database of thousands.
                var name: String { "characteristic \(characteristic.uuid) of service \(service.uuid)" }
                if let placement {
                    let wanted = (placement.clientConfiguration.map { [$0] } ?? []) + placement.descriptors
                    guard placement.clientConfiguration != nil || !characteristic.notifies else {
                        throw GATTDatabaseError("\(name) notifies or indicates: its placement needs the CCCD's handle")
                    }
                    guard placement.clientConfiguration == nil || characteristic.notifies else {
                        throw GATTDatabaseError("\(name) neither notifies nor indicates: its placement has no CCCD")
                    }
                    guard placement.descriptors.count == characteristic.descriptors.count else {
                        throw GATTDatabaseError("\(name): \(characteristic.descriptors.count) descriptors, \(placement.descriptors.count) placed")
                    }
                    guard wanted.allSatisfy({ $0 > placement.declaration &+ 1 }) else {
                        throw GATTDatabaseError("\(name): a descriptor placed at or before its value (handle \(Hex.word(placement.declaration &+ 1)))")
                    }
                }
                let declarationHandle = try take(placement?.declaration, name, into: &pending)
                let valueHandle = try take()
                characteristic.declarationHandle = declarationHandle
                characteristic.valueHandle = valueHandle
                // Characteristic declaration (Vol 3, Part G, 3.3.1): properties, value handle, UUID.
                var value: [UInt8] = [characteristic.properties.rawValue]
                value.appendLE(valueHandle)
                characteristic.uuid.appendATT(to: &value)
                pending.append(Attribute(handle: declarationHandle, type: GATTType.characteristic, content: .fixed(value),
                                         readable: true, writable: false, encryptionRequiredToRead: false,
                                         encryptionRequiredToWrite: false, groupEnd: 0, isFixedLength: true,
                                         characteristic: characteristic))
                let isFixed: Bool
                if case .fixed = characteristic.length { isFixed = true } else { isFixed = false }
                pending.append(Attribute(
                    handle: valueHandle, type: characteristic.uuid,
                    content: characteristic.cachedValue.map { .fixed($0) } ?? .dynamic(characteristic),
                    readable: characteristic.permissions.allowsReading,
                    writable: characteristic.permissions.allowsWriting,
                    encryptionRequiredToRead: characteristic.permissions.readNeedsEncryption,
                    encryptionRequiredToWrite: characteristic.permissions.writeNeedsEncryption,
                    groupEnd: 0, isFixedLength: isFixed || characteristic.cachedValue != nil,
                    characteristic: characteristic,
                    authenticationRequiredToRead: characteristic.permissions.contains(.readAuthenticationRequired),
                    authenticationRequiredToWrite: characteristic.permissions.contains(.writeAuthenticationRequired)))
                // The CCCD (nil descriptor index) and the descriptors, in handle order: first the
                // CCCD as the stack lays it out, or where the placement puts it.
                var order: [(handle: UInt16?, descriptor: Int?)] = []
                if characteristic.notifies { order.append((placement?.clientConfiguration, nil)) }
                for index in characteristic.descriptors.indices { order.append((placement?.descriptors[index], index)) }
                if placement != nil { order.sort { $0.handle! < $1.handle! } }
                for (wanted, index) in order {
                    guard let index else {
                        let handle = try take(wanted, "the CCCD of \(name)", into: &pending)
                        characteristic.clientConfigurationHandle = handle
                        // Vol 3, Part G, 3.3.3.3: the CCCD's write permissions are the higher layer's;
                        // a characteristic may ask that subscribing need its value's security.
                        let permissions = characteristic.permissions
                        let guarded = characteristic.subscribingNeedsValueSecurity
                        pending.append(Attribute(handle: handle, type: GATTType.clientConfiguration,
                                                 content: .clientConfiguration(characteristic), readable: true, writable: true,
                                                 encryptionRequiredToRead: false,
                                                 encryptionRequiredToWrite: guarded && (permissions.readNeedsEncryption || permissions.writeNeedsEncryption),
                                                 groupEnd: 0, isFixedLength: true, characteristic: characteristic,
                                                 authenticationRequiredToWrite: guarded && !permissions.isDisjoint(
                                                     with: [.readAuthenticationRequired, .writeAuthenticationRequired])))
                        continue
                    }
                    let descriptor = characteristic.descriptors[index]
                    if descriptor.uuid == GATTType.clientConfiguration {
                        throw GATTDatabaseError("characteristic \(characteristic.uuid) declares a CCCD: the stack adds it for notify/indicate")
                    }
                    pending.append(Attribute(handle: try take(wanted, "descriptor \(descriptor.uuid) of \(name)", into: &pending),
                                             type: descriptor.uuid, content: .fixed(descriptor.value),
                                             readable: true, writable: false,
                                             encryptionRequiredToRead: descriptor.permissions.readNeedsEncryption,
                                             encryptionRequiredToWrite: false, groupEnd: 0, isFixedLength: true,
                                             characteristic: characteristic,
                                             authenticationRequiredToRead: descriptor.permissions.contains(.readAuthenticationRequired)))
                }
                characteristics.append(characteristic)
            }
            if let end = service.placement?.upperBound {
                guard UInt32(end) >= next - 1 else {
                    throw GATTDatabaseError("service \(service.uuid) placed to end at handle \(Hex.word(end)) but its attributes reach \(Hex.word(UInt16(next - 1)))")
                }
                // A recorded service may end after empty handles (room it kept).
                while next <= UInt32(end) {
                    gaps.append(Int(next) - 1)
                    pending.append(Self.gap(UInt16(next)))
                    next += 1
                }
            }
            service.endHandle = UInt16(next - 1)
            let head = pending[0]
            pending[0] = Attribute(handle: head.handle, type: head.type, content: head.content, readable: true,
                                   writable: false, encryptionRequiredToRead: false, encryptionRequiredToWrite: false,
                                   groupEnd: service.endHandle, isFixedLength: true, characteristic: nil)
            attributes.append(contentsOf: pending)
        }
        presence = Array(repeating: true, count: attributes.count)
        for index in gaps { presence[index] = false }
        gapIndices = Set(gaps)
    }

    /// An empty handle of a recorded database: never present, found by no request.
    private static func gap(_ handle: UInt16) -> Attribute {
        Attribute(handle: handle, type: GATTType.primaryService, content: .fixed([]), readable: false, writable: false,
                  encryptionRequiredToRead: false, encryptionRequiredToWrite: false, groupEnd: 0, isFixedLength: true,
                  characteristic: nil)
    }

    /// The indices of the empty handles (`gap(_:)`), which `setService` leaves absent.
    private var gapIndices = Set<Int>()

    /// Core Bluetooth's rule, kept here: "Characteristics with cached values must be read-only".
    /// A dynamic characteristic must have the handlers its properties promise.
    static func validate(_ c: Characteristic, in service: Service) throws(GATTDatabaseError) {
        var name: String { "characteristic \(c.uuid) of service \(service.uuid)" }   // only for an error
        // Vol 3, Part G, 3.3.1.1: the Extended Properties bit and descriptor go together.
        let declaresExtended = c.descriptors.contains { $0.uuid == GATTType.extendedProperties }
        if c.properties.contains(.extendedProperties) != declaresExtended {
            throw GATTDatabaseError("\(name): the extendedProperties property needs a Characteristic Extended Properties descriptor (0x2900), and that descriptor needs the property")
        }
        // Vol 3, Part G, 3.3.3.4: broadcasting needs a Server Characteristic Configuration
        // descriptor, which blemu does not serve.
        if c.properties.contains(.broadcast) {
            throw GATTDatabaseError("\(name): the broadcast property is not supported (no Server Characteristic Configuration descriptor)")
        }
        guard c.length.isWellFormed else {
            throw GATTDatabaseError("\(name): length \(c.length) is impossible (lengths run from 0 to \(ValueLength.attributeMaximum) bytes)")
        }
        if let cached = c.cachedValue {
            if !c.properties.isDisjoint(with: CharacteristicProperties.mutating) {
                throw GATTDatabaseError("\(name) has a cached value but is writable or notifying: characteristics with cached values must be read-only (drop the cached value and give it an onRead handler)")
            }
            if cached.count > ValueLength.attributeMaximum {
                throw GATTDatabaseError("\(name): cached value of \(cached.count) bytes exceeds the 512-byte attribute maximum")
            }
            if c.onRead != nil || c.onWrite != nil || c.validateWrite != nil {
                throw GATTDatabaseError("\(name) has both a cached value and handlers: choose one")
            }
        } else {
            if c.properties.contains(.read) && c.onRead == nil {
                throw GATTDatabaseError("\(name) is readable but has neither a cached value nor an onRead handler")
            }
            if !c.properties.isDisjoint(with: [.write, .writeWithoutResponse, .authenticatedSignedWrites]) && c.onWrite == nil {
                throw GATTDatabaseError("\(name) is writable but has no onWrite handler")
            }
            if c.validateWrite != nil && c.onWrite == nil {
                throw GATTDatabaseError("\(name) has validateWrite but no onWrite handler: validation checks the writes onWrite applies")
            }
        }
    }

    public var lastHandle: UInt16 { UInt16(attributes.count) }

    /// The attribute at `handle`, when it is in the database now.
    @inlinable public func attribute(_ handle: UInt16) -> Attribute? {
        let index = Int(handle) - 1
        return index >= 0 && index < attributes.count && isPresent(index: index) ? attributes[index] : nil
    }

    @usableFromInline func isPresent(index: Int) -> Bool { presence[index] }

    /// The key size (octets) a link needs for every value this database protects: the largest
    /// `minimumEncryptionKeySize` among the characteristics whose permissions require encryption
    /// (7, the spec's least, when none does). A device's Security Manager refuses pairings that
    /// would leave a shorter key (Encryption Key Size, Vol 3, Part H, 2.3.4), so its declared
    /// permissions decide it.
    public var requiredEncryptionKeySize: UInt8 {
        characteristics.filter { $0.permissions.readNeedsEncryption || $0.permissions.writeNeedsEncryption }
            .map { min(max($0.minimumEncryptionKeySize, 7), 16) }.max() ?? 7
    }

    public func characteristic(_ uuid: BluetoothUUID) -> Characteristic? {
        characteristics.first { $0.uuid == uuid }
    }

    /// The Database Hash (Vol 3, Part G, 7.3) of the attributes present, computed when first
    /// asked for after a change.
    public var hash: [UInt8] {
        if let cachedHash { return cachedHash }
        let hash = GATTDatabaseHash.compute(attributes.indices.filter { presence[$0] }.map { index in
            let attribute = attributes[index]
            let value: [UInt8]?
            if case .fixed(let bytes) = attribute.content { value = bytes } else { value = nil }
            return (attribute.handle, attribute.type, value)
        })
        cachedHash = hash
        return hash
    }
    private var cachedHash: [UInt8]?

    // MARK: Changes at run time

    /// Whether `service` is in the database now.
    public func isPresent(_ service: Service) -> Bool { !absentServices.contains(ObjectIdentifier(service)) }

    /// The services taken out, in handle order.
    public var absent: [Service] { services.filter { !isPresent($0) } }

    /// Takes `service` out of the database or puts it back. Returns the handle range that
    /// changed, for the Service Changed indication, or nil when it already was so. Refuses what
    /// would leave the database inconsistent: GAP and GATT stay (Vol 3, Part G, 7: the GATT
    /// service holds Service Changed itself), and an included service stays while a present
    /// service includes it (Vol 3, Part G, 3.2: an include points at a service that exists).
    public func setService(_ service: Service, present: Bool) throws(GATTDatabaseError) -> ClosedRange<UInt16>? {
        guard services.contains(where: { $0 === service }) else {
            throw GATTDatabaseError("service \(service.uuid) is not part of this database")
        }
        guard isPresent(service) != present else { return nil }
        if !present {
            if service.uuid == GATTType.gapService || service.uuid == GATTType.gattService {
                throw GATTDatabaseError("the \(service.uuid == GATTType.gapService ? "GAP" : "GATT") service \(service.uuid) cannot be taken out: every GATT server has it")
            }
            if let includer = services.first(where: { isPresent($0) && $0.includes.contains { $0 === service } }) {
                throw GATTDatabaseError("service \(service.uuid) is included by service \(includer.uuid): take that one out first")
            }
            absentServices.insert(ObjectIdentifier(service))
        } else {
            if let missing = service.includes.first(where: { !isPresent($0) }) {
                throw GATTDatabaseError("service \(service.uuid) includes service \(missing.uuid), which is out: put that one back first")
            }
            absentServices.remove(ObjectIdentifier(service))
        }
        let range = service.startHandle...service.endHandle
        for handle in range where !gapIndices.contains(Int(handle) - 1) { presence[Int(handle) - 1] = present }
        cachedHash = nil
        return range
    }
}
