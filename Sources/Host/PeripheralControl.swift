import BlemuATT
import BlemuChannels
import BlemuConnection
import BlemuCore
import BlemuDevice
import BlemuGATT
import BlemuHCI
import BlemuSecurity
import Logging

/// A link as a listing shows it.
public struct LinkSummary: Sendable, Equatable {
    public let handle: UInt16
    /// The peer's address with its type (random for Peer_Address_Type 0x01 or 0x03).
    public let peer: LEAddress
    public let mtu: Int
    /// Whether the link is encrypted (Encryption Change, Docs/SECURITY.md).
    public let encrypted: Bool
    /// The pairing under way shows this passkey (made for it only) for the central's user to type.
    public let pairingPasskey: UInt32?
    /// The pairing under way waits for the answer to this Numeric Comparison value.
    public let pairingComparison: UInt32?
    /// The link's credit based channels, by local CID.
    public var channels: [ChannelSummary] = []
}

/// A credit based channel as a listing shows it (Vol 3, Part A, 3.4.3, 10.1): its CIDs, both
/// sides' MTU/MPS, the credits each side holds, and the bytes waiting in it.
public struct ChannelSummary: Sendable, Equatable {
    public let spsm: UInt16
    public let enhanced: Bool
    public let localCID: UInt16
    public let remoteCID: UInt16
    public let mtu: UInt16
    public let mps: UInt16
    public let peerMTU: UInt16
    public let peerMPS: UInt16
    /// K-frames we may still send (credits the peer gave us).
    public let sendCredits: Int
    /// K-frames the peer may still send (credits we gave it).
    public let receiveCredits: Int
    /// SDU bytes waiting to be sent, and bytes of an SDU gathered so far.
    public let queuedBytes: Int
    public let reassemblingBytes: Int
    /// `fault DEVICE channel CID stall` holds its credits back.
    public let creditsStalled: Bool

    init(_ channel: CreditBasedChannel) {
        spsm = channel.spsm
        enhanced = channel.mode == .enhanced
        localCID = channel.localCID
        remoteCID = channel.remoteCID
        mtu = channel.local.mtu
        mps = channel.local.mps
        peerMTU = channel.peerMTU
        peerMPS = channel.peerMPS
        sendCredits = channel.sendCredits
        receiveCredits = channel.receiveCredits
        queuedBytes = channel.queuedBytes
        reassemblingBytes = channel.reassemblingBytes
        creditsStalled = channel.creditsStalled
    }
}

/// A fault on a credit based channel (the control socket's `fault DEVICE channel CID …`).
/// One of a device's links, as the control socket names it (`list` shows both): its connection
/// handle, or its central's address (the address bits; a link's `peer`).
public enum LinkName: Equatable, Sendable, CustomStringConvertible {
    case handle(UInt16)
    case peer(BluetoothAddress)

    public var description: String {
        switch self {
        case .handle(let handle): "handle \(handle)"
        case .peer(let address): "peer \(address)"
        }
    }
}

public enum ChannelFault: String, Sendable, Equatable {
    /// No credits given back to the peer until `fault clear`.
    case stallCredits = "stall-credits"
    /// The channel disconnected (Vol 3, Part A, 4.6), as an app whose peer closes it sees.
    case dropChannel = "drop-channel"
}

/// The control socket's answer for one characteristic and one central: its link's address or
/// its bonded identity address, with the address's type — a public and a random address with
/// the same 48 bits are different devices (Vol 6, Part B, 1.3).
public struct PeerAuthorization: Sendable, Equatable {
    public let valueHandle: UInt16
    public let characteristic: BluetoothUUID
    public let peer: LEAddress
    public let allowed: Bool
}

/// What a test script may do to a running device from outside (the control socket,
/// `Peripheral.control`): set its simulated world, break it on purpose, and drive its links and
/// advertising. Each call returns nil, or one line saying why it was refused; nothing is
/// changed when it refuses. What only the control socket decides is kept here, not in the
/// device's other parts: the answers for values that require authorization (every link's
/// server asks `authorization(of:on:peer:)`) and the faults planned (every link's server
/// applies `faults`).
public final class PeripheralControl {
    unowned let peripheral: Peripheral
    /// Faults a test asked for, applied by every link's ATT server.
    public let faults: FaultPlan
    /// The control socket's answers for values that require authorization and whose device
    /// does not decide itself, by value handle: absent or false refuses (0x08), true allows.
    public private(set) var authorizations: [UInt16: Bool] = [:]
    /// The control socket's answers for one central (`authorize DEVICE UUID allow|deny PEER`),
    /// oldest first, overriding `authorizations` for that central; at most
    /// `maximumPeerAuthorizations`, the oldest forgotten first. Kept while blemu runs.
    public private(set) var peerAuthorizations: [PeerAuthorization] = []

    init(of peripheral: Peripheral, faults: FaultPlan) {
        self.peripheral = peripheral
        self.faults = faults
    }

    // The device's parts the control API works on.
    private var deviceName: String { peripheral.deviceName }
    private var device: Device { peripheral.device }
    /// A broadcaster has none of these (`Peripheral.takesConnections`): what the control API
    /// does with them answers from nothing there (no characteristic, no link, no bond).
    private var parts: ConnectionParts? { peripheral.madeConnectionParts }
    private var characteristics: [Characteristic] { parts?.database.characteristics ?? [] }
    private var advertising: DeviceAdvertiser { peripheral.advertising }
    private var host: PeripheralHost { peripheral.host }
    private var logger: Logger { peripheral.logger }
    private var connections: HandleTable<LEConnection> { parts?.links.connections ?? HandleTable() }

    public var linkSummaries: [LinkSummary] {
        guard let security = parts?.security else { return [] }
        return connections.values.sorted { $0.handle < $1.handle }.map {
            let display = security.pairingDisplay(on: $0.handle)
            return LinkSummary(handle: $0.handle, peer: $0.peer.leAddress, mtu: $0.bearer.mtu, encrypted: $0.session.linkSecurity.isEncrypted,
                               pairingPasskey: display.passkey, pairingComparison: display.comparison,
                               channels: $0.channels.channels.filter { $0.state == .open }.sorted { $0.localCID < $1.localCID }
                                   .map(ChannelSummary.init))
        }
    }

    /// Sets a value of the device's world by its key (`DeviceSetting`); with `exact`, holds a
    /// value that moves by itself where it is set (`DeviceSetting.hold`).
    public func applySetting(_ key: String, _ value: String, exact: Bool = false) -> String? {
        switch setting(key, exact: exact) {
        case .failure(let refusal): return refusal.message
        case .success(let setting): return exact ? (setting.hold ?? setting.apply)(value) : setting.apply(value)
        }
    }

    /// Whether `applySetting` would take the value, without applying it: nil, or why not.
    /// A setting without a check (`DeviceSetting.check`) is taken here and checked when applied.
    public func checkSetting(_ key: String, _ value: String, exact: Bool = false) -> String? {
        switch setting(key, exact: exact) {
        case .failure(let refusal): return refusal.message
        case .success(let setting): return setting.check?(value)
        }
    }

    private struct SettingRefusal: Error { let message: String }

    private func setting(_ key: String, exact: Bool) -> Result<DeviceSetting, SettingRefusal> {
        let settings = device.settings
        guard let setting = settings.first(where: { $0.key == key }) else {
            let known = settings.map(\.key).joined(separator: ", ")
            return .failure(SettingRefusal(message: "\(deviceName) has no setting '\(key)'" + (known.isEmpty ? "" : "; settings: \(known)")))
        }
        if exact, setting.moves, setting.hold == nil {
            return .failure(SettingRefusal(message: "\(key) of \(deviceName) moves by itself and cannot be held: set it without --exact"))
        }
        return .success(setting)
    }

    /// Plans a fault for the characteristic with `uuid` (see `FaultPlan`).
    public func injectFault(_ action: FaultPlan.Action, characteristic uuid: BluetoothUUID, count: Int?) -> String? {
        guard let characteristic = characteristics.first(where: { $0.uuid == uuid }) else {
            return "\(deviceName) has no characteristic \(uuid)"
        }
        if case .drop = action, !characteristic.notifies {
            return "characteristic \(uuid) neither notifies nor indicates: there is nothing to drop"
        }
        if let count, count < 1 { return "--count must be at least 1" }
        faults.add(action, valueHandle: characteristic.valueHandle, count: count)
        logger.event(.faultInjected, .notice, "fault planned: \(action) for \(uuid)\(count.map { ", \($0) time(s)" } ?? ", until cleared")",
                     [LogKey.attHandle: .string(Hex.word(characteristic.valueHandle))])
        return nil
    }

    /// The answer to requests for the value of the characteristic with `uuid` when it requires
    /// authorization (`AttributePermissions.readAuthorizationRequired`, `.writeAuthorizationRequired`)
    /// and the device does not decide itself: allowed from now on, or refused with Insufficient
    /// Authorization (0x08) as before. Every link, until changed or blemu stops; with `peer`, only
    /// the central with that address and address type (a link's peer address or a bond's
    /// identity address, public or random), overriding the answer for every
    /// link. An answer for every central leaves the per-central answers in place
    /// (`peerAuthorizations(of:)` lists them).
    public func setAuthorization(_ allowed: Bool, characteristic uuid: BluetoothUUID, peer: LEAddress? = nil) -> String? {
        let matching = characteristics.filter { $0.uuid == uuid }
        guard !matching.isEmpty else { return "\(deviceName) has no characteristic \(uuid)" }
        let asking = matching.filter {
            $0.authorize == nil && !$0.permissions.isDisjoint(with: [.readAuthorizationRequired, .writeAuthorizationRequired])
        }
        guard !asking.isEmpty else {
            return matching.contains(where: { $0.authorize != nil })
                ? "\(deviceName) decides the authorization of \(uuid) itself"
                : "characteristic \(uuid) requires no authorization (its permissions: read-authorized or write-authorized)"
        }
        guard let peer else {
            for characteristic in asking { authorizations[characteristic.valueHandle] = allowed }
            return nil
        }
        for characteristic in asking {
            peerAuthorizations.removeAll {
                $0.valueHandle == characteristic.valueHandle && $0.peer == peer
            }
            peerAuthorizations.append(PeerAuthorization(valueHandle: characteristic.valueHandle, characteristic: uuid,
                                                        peer: peer, allowed: allowed))
        }
        let excess = peerAuthorizations.count - Self.maximumPeerAuthorizations
        if excess > 0 {
            let forgotten = peerAuthorizations.prefix(excess)
            peerAuthorizations.removeFirst(excess)
            for old in forgotten {
                logger.notice("authorization of \(old.characteristic) for \(old.peer.address) forgotten: at most \(Self.maximumPeerAuthorizations) per-central answers per device are kept")
            }
        }
        return nil
    }

    /// How many per-central authorization answers a device keeps (every input is hostile).
    public static let maximumPeerAuthorizations = 64

    /// The per-central answers kept for the characteristics with `uuid`, oldest first.
    public func peerAuthorizations(of uuid: BluetoothUUID) -> [PeerAuthorization] {
        peerAuthorizations.filter { $0.characteristic == uuid }
    }

    /// The control socket's answer for a request on `handle`'s link: the newest per-central
    /// answer for its address or its bond's identity, each with its address type, else the
    /// answer for every central.
    func authorization(of valueHandle: UInt16, on handle: UInt16, peer: LEAddress) -> Bool {
        let identity = parts?.security.bond(on: handle)?.identity
        if let answer = peerAuthorizations.last(where: {
            $0.valueHandle == valueHandle && ($0.peer == peer || $0.peer == identity)
        }) {
            return answer.allowed
        }
        return authorizations[valueHandle] ?? false
    }

    /// Applies `fault` to the open channel with local CID `cid` on one of the device's links:
    /// the one `link` names (its connection handle or its central's address, as `list` shows
    /// them), or, without `link`, the only link that has such a channel. CIDs are per link
    /// (Vol 3, Part A, 2.1), so with several centrals the same CID may be open on several links:
    /// then the fault is refused until the link is named. Nil, or why it was refused.
    public func injectChannelFault(_ fault: ChannelFault, cid: UInt16, link: LinkName? = nil) -> String? {
        let links = connections.values.sorted { $0.handle < $1.handle }.filter { connection in
            switch link {
            case nil: true
            case .handle(let handle)?: connection.handle == handle
            case .peer(let address)?: connection.peer.address == address
            }
        }
        if let link, links.isEmpty { return "\(deviceName) has no link with \(link)" }
        let matching = links.compactMap { connection in
            connection.channels.channel(localCID: cid).flatMap { $0.state == .open ? (connection.handle, $0) : nil }
        }
        guard let (handle, channel) = matching.first else {
            return "\(deviceName) has no open L2CAP channel with CID \(Hex.word(cid))" + (link.map { " on the link with \($0)" } ?? "")
        }
        guard matching.count == 1 else {
            let handles = matching.map { "\($0.0)" }.joined(separator: ", ")
            return "\(deviceName) has an open L2CAP channel with CID \(Hex.word(cid)) on \(matching.count) links (handles \(handles)): "
                + "name the link with its handle or its central's address, as `list` shows them"
        }
        switch fault {
        case .stallCredits: channel.creditsStalled = true
        case .dropChannel: channel.disconnect()
        }
        logger.event(.faultInjected, .notice, "fault: \(fault.rawValue) on L2CAP channel \(Hex.word(cid)) (SPSM \(Hex.word(channel.spsm)))",
                     [LogKey.connHandle: "\(handle)"])
        return nil
    }

    public func clearFaults() {
        faults.clear()
        // Stalled channels get their credits back (the window, at once).
        for connection in connections.values {
            for channel in connection.channels.channels where channel.creditsStalled { channel.creditsStalled = false }
        }
        logger.event(.faultInjected, .notice, "faults cleared")
    }

    /// The answer to the Numeric Comparisons this device waits for (`--numeric-comparison ask`):
    /// how many were answered (0: none was waiting).
    public func answerPairing(confirm: Bool) -> Int {
        parts?.security.answerNumericComparison(confirm) ?? 0
    }

    /// Turns advertising on or off; off stays off, also after disconnections, until on.
    public func setAdvertisingAllowed(_ allowed: Bool) { peripheral.setAdvertisingAllowed(allowed) }

    /// Disconnects every link of the device with `reason` (`Peripheral.disconnectReasons`);
    /// returns how many links were asked to close.
    @discardableResult
    public func disconnectAll(reason: UInt8 = HCIStatus.remoteUserTerminated) -> Int {
        peripheral.disconnectAll(reason: reason)
    }
}

/// What forgetting bonds in the running device did (`PeripheralControl.forgetBonds`).
public struct BondsForgotten {
    /// The bonds forgotten, oldest first (empty: no bond matched).
    public let bonds: [Bond]
    /// Links still encrypted with a forgotten key: they keep their encryption until they close;
    /// the central's next connection finds no bond.
    public let linksKept: Int
    /// Entries taken out of the controller's resolving list (the controller answers later).
    public let resolvingListEntries: Int
}

extension PeripheralControl {
    /// The device's bonds, oldest first.
    public var bonds: [Bond] { parts?.security.bonds.bonds ?? [] }

    /// Forgets the bonds of the central at `address` (the address it bonded from, or its
    /// identity address), or every bond (nil), as a device's "clear pairings" button does: the
    /// bond file is rewritten, the central's kept CCCDs and robust-caching state go with the bond,
    /// and its entry leaves the controller's resolving list when no other device on the
    /// controller is bonded with it. Its next LE Long Term Key Request gets the negative reply.
    public func forgetBonds(_ address: BluetoothAddress?) -> BondsForgotten {
        guard let security = parts?.security else { return BondsForgotten(bonds: [], linksKept: 0, resolvingListEntries: 0) }
        let bonded = connections.keys.compactMap { handle in security.bond(on: handle).map { (handle, $0) } }
        let forgotten = security.bonds.forget(address)
        guard !forgotten.isEmpty else { return BondsForgotten(bonds: [], linksKept: 0, resolvingListEntries: 0) }
        let kept = bonded.filter { handle, bond in
            security.security(of: handle).isEncrypted && forgotten.contains { $0.peer == bond.peer && $0.sequence == bond.sequence }
        }
        let entries = host.bondsForgotten(all: address == nil, by: peripheral)
        return BondsForgotten(bonds: forgotten, linksKept: kept.count, resolvingListEntries: entries)
    }
}

/// Why the control API refused a change; nothing was changed.
public struct ControlRefusal: Error, Equatable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// What taking a service out of a running device's database, or putting it back, did.
public struct DatabaseChange: Equatable {
    public let service: BluetoothUUID
    public let present: Bool
    /// The handles that changed, as the Service Changed indication carries them; nil when the
    /// service already was so (nothing changed, nothing was sent).
    public let range: ClosedRange<UInt16>?
    /// The Database Hash now (Vol 3, Part G, 7.3).
    public let hash: [UInt8]
    /// Links sent a Service Changed indication: those whose client enabled it.
    public let indicated: Int
    /// Links whose robust-caching client is now change-unaware (Vol 3, Part G, 2.5.2.1).
    public let changeUnaware: Int
    /// Whether the advertising data or scan response changed: the service's UUID is one the
    /// device advertises (`DeviceAdvertiser.advertisedServiceUUIDs`).
    public let advertisingChanged: Bool
}

extension PeripheralControl {
    /// The services of the database taken out at run time.
    public var absentServices: [BluetoothUUID] { parts?.database.absent.map(\.uuid) ?? [] }

    /// Takes the service with `uuid` out of the database, or puts it back, as a firmware update
    /// would: every link forgets what it knew in the service's handles (subscriptions end as if
    /// the client had unsubscribed), a robust-caching client becomes change-unaware, and a
    /// client that enabled Service Changed gets the changed range by indication (Vol 3,
    /// Part G, 7.1), after which the Database Hash characteristic reads the new hash.
    public func setService(_ uuid: BluetoothUUID, present: Bool) throws(ControlRefusal) -> DatabaseChange {
        guard let parts else {
            throw ControlRefusal("\(deviceName) has no service \(uuid): it is a broadcaster, which serves no GATT database")
        }
        let database = parts.database, standard = parts.standard
        let matching = database.services.filter { $0.uuid == uuid }
        guard let service = matching.first else {
            let known = database.services.map(\.uuid.description).joined(separator: ", ")
            throw ControlRefusal("\(deviceName) has no service \(uuid); its services: \(known)")
        }
        guard matching.count == 1 else {
            throw ControlRefusal("\(deviceName) has \(matching.count) services \(uuid): which one to change is ambiguous")
        }
        let range: ClosedRange<UInt16>?
        do {
            range = try database.setService(service, present: present)
        } catch {
            throw ControlRefusal(error.description)
        }
        guard let range else {
            return DatabaseChange(service: uuid, present: present, range: nil, hash: database.hash, indicated: 0, changeUnaware: 0,
                                  advertisingChanged: false)
        }
        // What a scanner sees follows the database: a service taken out leaves the advertised
        // service UUIDs, put back it returns. Links are not touched by it.
        let advertisingChanged = advertising.contentChanged()
        var indicated = 0
        var changeUnaware = 0
        // Told before the subscriptions it ends.
        peripheral.eventObserver?(.service(uuid: uuid, on: present))
        for handle in connections.keys.sorted() {
            guard let connection = connections[handle], let server = connection.server, let stage = connection.stage else { continue }
            let ended = server.databaseChanged(range)
            peripheral.subscriptionsEnded(ended, peer: connection.peer, because: "service \(uuid) changed")
            if !server.isChangeAware { changeUnaware += 1 }
            guard server.isSubscribed(standard.serviceChanged, indications: true) else { continue }
            // Vol 3, Part G, 2.5.2.1: the server makes a client that confirms it change-aware.
            let outcome = stage.indicateServiceChanged(standard.serviceChanged, range: range)
            if outcome == .queued {
                indicated += 1
            } else {
                logger.warning("Service Changed could not be indicated on link \(handle) (\(outcome)); a robust-caching client will get Database Out Of Sync",
                               metadata: [LogKey.connHandle: "\(handle)"])
            }
        }
        let hash = database.hash
        logger.event(.stateChanged, .notice,
                     "database changed: service \(uuid) \(present ? "put back" : "taken out") (handles \(Hex.word(range.lowerBound))-\(Hex.word(range.upperBound))); Database Hash now \(Hex.bytes(hash)); Service Changed indicated on \(indicated) link(s)\(advertisingChanged ? "; advertising data updated" : "")")
        return DatabaseChange(service: uuid, present: present, range: range, hash: hash, indicated: indicated,
                              changeUnaware: changeUnaware, advertisingChanged: advertisingChanged)
    }
}
