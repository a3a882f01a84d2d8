import BlemuCore
import BlemuDevices
import BlemuGATT
import BlemuHost
import Logging

/// A device made from a `GATTProfile`: a clone of the peripheral it was dumped from. Read-only
/// values are cached, as the original showed them; writable values live in memory (what a
/// central writes is what it reads next); notifying values are sent in turn, once a second,
/// while someone is subscribed. GAP, GATT and Diagnostics are the stack's, as for every device.
public final class ProfileDevice: Device {
    public static let deviceName = "profile"
    public static let summary = "a GATT profile file (blemu gatt ... dump --profile): a clone of a real device"
    /// How often subscribed values are sent.
    public static let notificationPeriod: Duration = .seconds(1)

    public let source: GATTProfile
    public let profile: DeviceProfile
    public let services: [Service]
    /// What the stack cannot serve as the profile says, one line each (logged at start).
    public private(set) var adjustments: [String] = []
    private var ticker: TickWhileSubscribed
    private weak var context: DeviceContext?
    private var streams: [(characteristic: Characteristic, values: [[UInt8]], next: Int)] = []

    /// The services the stack adds itself, left out of a clone.
    static let stackServices: Set<BluetoothUUID> = [GATTType.gapService, GATTType.gattService, Peripheral.diagnosticsServiceUUID]

    /// `profile` must have passed `GATTProfile.check` (`load` and `parse` do that).
    public init(_ profile: GATTProfile) {
        source = profile
        var adjustments: [String] = []
        var streams: [(characteristic: Characteristic, values: [[UInt8]], next: Int)] = []
        var built: [BluetoothUUID: Service] = [:]
        var order: [Service] = []
        let kept = profile.services.filter { GATTProfile.uuid($0.uuid).map { !Self.stackServices.contains($0) } ?? false }
        // Included services first: a database declares them before the services that include them.
        let includedUUIDs = Set(kept.flatMap { $0.includes ?? [] }.compactMap(GATTProfile.uuid))
        let sorted = kept.filter { GATTProfile.uuid($0.uuid).map(includedUUIDs.contains) ?? false }
            + kept.filter { !(GATTProfile.uuid($0.uuid).map(includedUUIDs.contains) ?? false) }
        for entry in sorted {
            guard let uuid = GATTProfile.uuid(entry.uuid) else { continue }
            let includes = (entry.includes ?? []).compactMap { GATTProfile.uuid($0).flatMap { built[$0] } }
            let characteristics = entry.characteristics.compactMap { spec -> Characteristic? in
                Self.characteristic(spec, in: uuid, adjustments: &adjustments, streams: &streams)
            }
            let service = Service(uuid, primary: entry.primary ?? true, includes: includes) { characteristics }
            built[uuid] = built[uuid] ?? service
            order.append(service)
        }
        services = order
        let advertised = (profile.advertisedServices ?? []).compactMap(GATTProfile.uuid)
        self.profile = DeviceProfile(defaultName: profile.name, advertisedServices: advertised,
                                     appearance: UInt16(clamping: profile.appearance ?? 0))
        self.adjustments = adjustments
        self.streams = streams
        ticker = TickWhileSubscribed(every: Self.notificationPeriod, watching: streams.map(\.characteristic))
        ticker.onTick = { [weak self] in self?.tick() }
    }

    private static func characteristic(_ spec: GATTProfile.Characteristic, in service: BluetoothUUID, adjustments: inout [String],
                                       streams: inout [(characteristic: Characteristic, values: [[UInt8]], next: Int)]) -> Characteristic? {
        guard let uuid = GATTProfile.uuid(spec.uuid) else { return nil }
        var properties = CharacteristicProperties()
        for name in spec.properties {
            if let bit = GATTProfile.propertyNames.first(where: { $0.0 == name })?.1 { properties.insert(bit) }
        }
        // What the stack does not serve is dropped, and said so.
        // Signed writes are served: verified with a bonded client's CSRK (Docs/SECURITY.md).
        for (bit, why) in [(CharacteristicProperties.broadcast, "broadcast (no Server Characteristic Configuration descriptor)")]
            where properties.contains(bit) {
            properties.remove(bit)
            adjustments.append("\(service)/\(uuid): \(why) left out")
        }
        var descriptors: [Descriptor] = []
        for descriptor in spec.descriptors ?? [] {
            guard let duuid = GATTProfile.uuid(descriptor.uuid) else { continue }
            // The CCCD is the stack's; Extended Properties goes with its property bit.
            if duuid == GATTType.clientConfiguration { continue }
            if duuid == GATTType.extendedProperties && !properties.contains(.extendedProperties) { continue }
            var security = AttributePermissions()
            for name in descriptor.permissions ?? [] {
                switch name {
                case "read-encrypted": security.insert(.readEncryptionRequired)
                case "read-authenticated": security.insert(.readAuthenticationRequired)
                default: adjustments.append("\(service)/\(uuid): descriptor \(duuid): \(name) left out (the stack authorizes values, not descriptors)")
                }
            }
            descriptors.append(Descriptor(uuid: duuid, value: descriptor.value.flatMap(GATTProfile.bytes) ?? [], permissions: security))
        }
        if properties.contains(.extendedProperties) && !descriptors.contains(where: { $0.uuid == GATTType.extendedProperties }) {
            properties.remove(.extendedProperties)
            adjustments.append("\(service)/\(uuid): extended-properties without its 0x2900 descriptor left out")
        }
        let value = spec.value.flatMap(GATTProfile.bytes)
        // Access follows the properties; what the profile adds is the security it asks for.
        var permissions = AttributePermissions()
        if properties.contains(.read) { permissions.insert(.readable) }
        if !properties.isDisjoint(with: [.write, .writeWithoutResponse, .authenticatedSignedWrites]) { permissions.insert(.writeable) }
        for name in spec.permissions ?? [] {
            if let bit = GATTProfile.permissionNames.first(where: { $0.0 == name })?.1 { permissions.insert(bit) }
        }
        let mutating = !properties.isDisjoint(with: CharacteristicProperties.mutating)
        if !mutating, properties.contains(.read), let value {
            return Characteristic(uuid, properties: properties, permissions: permissions, cachedValue: value, descriptors: descriptors)
        }
        // A value that changes lives here, as long as the attribute allows.
        let box = ValueBox(value ?? [])
        let writable = !properties.isDisjoint(with: [.write, .writeWithoutResponse, .authenticatedSignedWrites])
        let characteristic = Characteristic(
            uuid, properties: properties, permissions: permissions, descriptors: descriptors,
            onRead: properties.contains(.read) ? { _, value in value.append(contentsOf: box.bytes); return nil } : nil,
            onWrite: writable ? { request in
                // Prepared writes come with offsets; the value grows to hold them.
                if request.offset == 0 { box.bytes = Array(request.value) } else {
                    if box.bytes.count < request.offset { box.bytes += [UInt8](repeating: 0, count: request.offset - box.bytes.count) }
                    box.bytes = Array(box.bytes.prefix(request.offset)) + request.value
                }
                return nil
            } : nil)
        if characteristic.notifies {
            let values = (spec.notifications ?? []).compactMap(GATTProfile.bytes)
            streams.append((characteristic, values.isEmpty ? [value ?? []] : values, 0))
        }
        return characteristic
    }

    public func start(context: DeviceContext) {
        self.context = context
        ticker.start(context: context)
        for line in adjustments { context.logger.notice("profile: \(line)") }
    }

    public func stop() { ticker.stop() }

    public func subscriptionChanged(_ characteristic: Characteristic, peer: ATTPeer, notify: Bool, indicate: Bool) {
        ticker.subscriptionChanged(characteristic)
    }

    private func tick() {
        guard let context else { return }
        for index in streams.indices {
            let (characteristic, values, next) = streams[index]
            let value = values[next % values.count]
            streams[index].next = (next + 1) % values.count
            if characteristic.properties.contains(.notify) { context.notify(characteristic, value: value) }
            if characteristic.properties.contains(.indicate) { context.indicate(characteristic, value: value) }
        }
    }
}

/// A value that changes, shared by a characteristic's handlers.
final class ValueBox {
    var bytes: [UInt8]
    init(_ bytes: [UInt8]) { self.bytes = bytes }
}
