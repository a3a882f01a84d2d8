import BlemuATT
import BlemuCore
import BlemuGATT

/// What a GATT client finds on a server: the same UUIDs and properties the server declares
/// (BlemuGATT's vocabulary), seen from the other side with the handles discovery reported.

/// A service found by Primary Service Discovery (Vol 3, Part G, 4.4) or as an included one (4.5).
public struct DiscoveredService: Equatable, Sendable {
    public var uuid: BluetoothUUID
    /// From the service declaration to the group end handle.
    public var handles: ClosedRange<UInt16>
    public var isPrimary: Bool

    public init(uuid: BluetoothUUID, handles: ClosedRange<UInt16>, isPrimary: Bool = true) {
        self.uuid = uuid
        self.handles = handles
        self.isPrimary = isPrimary
    }
}

/// An include declaration (Vol 3, Part G, 3.2) and the service it points at.
public struct DiscoveredInclude: Equatable, Sendable {
    public var declarationHandle: UInt16
    public var service: DiscoveredService
}

/// A characteristic declaration (Vol 3, Part G, 3.3.1) found by 4.6.
public struct DiscoveredCharacteristic: Equatable, Sendable {
    public var uuid: BluetoothUUID
    public var properties: CharacteristicProperties
    public var declarationHandle: UInt16
    public var valueHandle: UInt16
    /// The last handle of the characteristic: its descriptors run from `valueHandle + 1` to here.
    public var endHandle: UInt16
}

/// A characteristic descriptor found by 4.7.1.
public struct DiscoveredDescriptor: Equatable, Sendable {
    public var uuid: BluetoothUUID
    public var handle: UInt16
}

/// A characteristic with its descriptors.
public struct RemoteCharacteristic: Equatable, Sendable {
    public var characteristic: DiscoveredCharacteristic
    public var descriptors: [DiscoveredDescriptor]

    public var uuid: BluetoothUUID { characteristic.uuid }
    public var valueHandle: UInt16 { characteristic.valueHandle }
    public var properties: CharacteristicProperties { characteristic.properties }

    /// The Client Characteristic Configuration descriptor, when there is one (Vol 3, Part G, 3.3.3.3).
    public var clientConfigurationHandle: UInt16? {
        descriptors.first { $0.uuid == GATTType.clientConfiguration }?.handle
    }
}

/// A service with everything in it, as `GATTClient.discoverAll` finds it.
public struct RemoteService: Equatable, Sendable {
    public var service: DiscoveredService
    public var includes: [DiscoveredInclude]
    public var characteristics: [RemoteCharacteristic]

    public var uuid: BluetoothUUID { service.uuid }
    public var handles: ClosedRange<UInt16> { service.handles }

    public func characteristic(_ uuid: BluetoothUUID) -> RemoteCharacteristic? {
        characteristics.first { $0.uuid == uuid }
    }
}

extension Array where Element == RemoteService {
    /// The first characteristic with `uuid`, in handle order (in the service with `service`, if given).
    public func characteristic(_ uuid: BluetoothUUID, in service: BluetoothUUID? = nil) -> RemoteCharacteristic? {
        for remote in self where service == nil || remote.uuid == service {
            if let found = remote.characteristic(uuid) { return found }
        }
        return nil
    }
}

/// Why a GATT procedure did not complete. Each names what the caller can do about it.
public enum GATTClientError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The server answered with an Error Response (Vol 3, Part F, 3.4.1.1).
    case att(ATTError, handle: UInt16)
    /// No response within 30 s (Vol 3, Part F, 3.3.3): the bearer is dead; no more requests
    /// can be sent on it and the link should be disconnected.
    case timeout
    /// A response that does not decode or does not answer the request sent.
    case malformedResponse(String)
    /// Reliable Write (Vol 3, Part G, 4.9.5): the server echoed a prepared value differently;
    /// the queued writes were cancelled.
    case echoMismatch(handle: UInt16, offset: UInt16)
    /// The link closed before the procedure ended.
    case disconnected
    /// The link did not take the request (its queue was full).
    case notSent
    /// Too many procedures already waiting their turn.
    case queueFull
    /// The procedure was asked for something ATT cannot carry.
    case invalidArgument(String)
    /// The server reported more services, includes, characteristics and descriptors than the
    /// client holds (`GATTClient.attributeLimit`); the discovery ended.
    case tooManyAttributes(limit: Int)

    public var description: String {
        switch self {
        case .att(let error, let handle): return "ATT error \(error) for handle \(Hex.word(handle))"
        case .timeout: return "no response within 30 s (ATT transaction timeout): the link is unusable"
        case .malformedResponse(let what): return "malformed response: \(what)"
        case .echoMismatch(let handle, let offset):
            return "reliable write: the server echoed the value for handle \(Hex.word(handle)) at offset \(offset) differently; cancelled"
        case .disconnected: return "the link closed"
        case .notSent: return "the link's queue was full: request not sent"
        case .queueFull: return "too many GATT requests waiting"
        case .invalidArgument(let what): return what
        case .tooManyAttributes(let limit):
            return "the server reported more than \(limit) services, includes, characteristics and descriptors: discovery stopped"
        }
    }
}
