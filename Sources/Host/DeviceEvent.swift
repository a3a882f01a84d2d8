import BlemuCore
import BlemuGATT

/// The kinds of `DeviceEvent`, by the name a watcher filters on and sees in `"event"`.
public enum DeviceEventKind: String, CaseIterable, Sendable {
    case connected, disconnected, mtu, paired, encrypted, subscribed, unsubscribed, read, write
    case notification, indication, confirmed, advertising, service, fault
}

/// A characteristic as an event names it: its UUID (what a tester knows) and its value handle.
public struct EventCharacteristic: Equatable, Sendable {
    public let uuid: BluetoothUUID
    public let handle: UInt16
    public init(uuid: BluetoothUUID, handle: UInt16) {
        self.uuid = uuid
        self.handle = handle
    }
    public init(_ characteristic: Characteristic) {
        self.init(uuid: characteristic.uuid, handle: characteristic.valueHandle)
    }
}

/// How a pairing was made (Vol 3, Part H, 2.3.5.1), as an event names it.
public enum EventPairingMethod: String, Equatable, Sendable {
    case justWorks = "just-works"
    case numericComparison = "numeric-comparison"
    case passkeyEntry = "passkey"
    case outOfBand = "oob"
}

/// Something that happened to one device, as it happened: what its links, ATT server, security
/// and advertiser report to `Peripheral.eventObserver` (the control socket's `watch`, scenario
/// steps, test kits). Built only while an observer is set: with none, each place that would
/// report costs one check.
public enum DeviceEvent: Equatable, Sendable {
    /// A central's link opened.
    case connected(peer: ATTPeer)
    /// A link closed, with the HCI reason (Vol 1, Part F).
    case disconnected(peer: ATTPeer, reason: UInt8)
    /// The link's ATT_MTU after an Exchange MTU (Vol 3, Part F, 3.4.2).
    case mtu(peer: ATTPeer, mtu: Int)
    /// A pairing completed.
    case paired(peer: ATTPeer, method: EventPairingMethod, keySize: UInt8, secureConnections: Bool, bonded: Bool)
    /// The link became encrypted (with a pairing's key or a bond's).
    case encrypted(peer: ATTPeer, keySize: UInt8, authenticated: Bool)
    /// A CCCD write turned notifications or indications on (Vol 3, Part G, 3.3.3.3).
    case subscribed(peer: ATTPeer, characteristic: EventCharacteristic, notify: Bool, indicate: Bool)
    /// A CCCD write turned them off, or (with `cause`) the link closed or the service went.
    case unsubscribed(peer: ATTPeer, characteristic: EventCharacteristic, cause: String?)
    /// A characteristic's value read from `offset`.
    case read(peer: ATTPeer, characteristic: EventCharacteristic, offset: Int)
    /// A value written: by a Write Request (`withResponse`), a Write Command, or an Execute Write (`prepared`).
    case write(peer: ATTPeer, characteristic: EventCharacteristic, offset: Int, value: [UInt8], withResponse: Bool, prepared: Bool)
    /// A notification taken for the link (queued or sent).
    case notification(peer: ATTPeer, characteristic: EventCharacteristic, value: [UInt8])
    /// An indication taken for the link.
    case indication(peer: ATTPeer, characteristic: EventCharacteristic, value: [UInt8])
    /// How an indication ended: confirmed, or not (`IndicationOutcome`).
    case confirmed(peer: ATTPeer, characteristic: EventCharacteristic, outcome: IndicationOutcome)
    /// Advertising started or stopped (a link made stops legacy advertising; it resumes after).
    case advertising(on: Bool, address: BluetoothAddress)
    /// A service put back or taken out (`service DEVICE UUID on|off`).
    case service(uuid: BluetoothUUID, on: Bool)
    /// A planned fault applied to a client's request or an update.
    case fault(peer: ATTPeer, characteristic: EventCharacteristic?, handle: UInt16, opcode: UInt8, action: FaultPlan.Action)

    public var kind: DeviceEventKind {
        switch self {
        case .connected: .connected
        case .disconnected: .disconnected
        case .mtu: .mtu
        case .paired: .paired
        case .encrypted: .encrypted
        case .subscribed: .subscribed
        case .unsubscribed: .unsubscribed
        case .read: .read
        case .write: .write
        case .notification: .notification
        case .indication: .indication
        case .confirmed: .confirmed
        case .advertising: .advertising
        case .service: .service
        case .fault: .fault
        }
    }

    /// The central it concerns, if any.
    public var peer: ATTPeer? {
        switch self {
        case .connected(let peer), .disconnected(let peer, _), .mtu(let peer, _), .paired(let peer, _, _, _, _),
             .encrypted(let peer, _, _), .subscribed(let peer, _, _, _), .unsubscribed(let peer, _, _), .read(let peer, _, _),
             .write(let peer, _, _, _, _, _), .notification(let peer, _, _), .indication(let peer, _, _),
             .confirmed(let peer, _, _), .fault(let peer, _, _, _, _):
            return peer
        case .advertising, .service:
            return nil
        }
    }

    /// The UUID it names (a characteristic's, or a service's), if any: what a filter matches.
    public var uuid: BluetoothUUID? {
        switch self {
        case .subscribed(_, let c, _, _), .unsubscribed(_, let c, _), .read(_, let c, _), .write(_, let c, _, _, _, _),
             .notification(_, let c, _), .indication(_, let c, _), .confirmed(_, let c, _):
            return c.uuid
        case .fault(_, let c, _, _, _): return c?.uuid
        case .service(let uuid, _): return uuid
        case .connected, .disconnected, .mtu, .paired, .encrypted, .advertising: return nil
        }
    }
}
