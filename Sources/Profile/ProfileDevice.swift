import BlemuCore
import BlemuDevice
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
    /// A recording's events (time from its start, characteristic, value, indication), in order.
    private var timeline: [(at: Duration, characteristic: Characteristic, value: [UInt8], indication: Bool)] = []
    private var timelineLength: Duration = .zero
    private var loops = true
    /// The next event of the timeline, and when the timeline (this pass) started; nil: not started.
    private var nextEvent = 0
    private var passStarted: UInt64?
    private var timelineTimer: TimerID?
    /// The value each recorded characteristic notified last: what a read of it answers.
    private var latest: [ObjectIdentifier: ValueBox] = [:]

    /// The services the stack adds itself, left out of a clone.
    static let stackServices: Set<BluetoothUUID> = [GATTType.gapService, GATTType.gattService, Peripheral.diagnosticsServiceUUID]

    /// `profile` must have passed `GATTProfile.check` (`load` and `parse` do that).
    public init(_ profile: GATTProfile) {
        source = profile
        var adjustments: [String] = []
        var streams: [(characteristic: Characteristic, values: [[UInt8]], next: Int)] = []
        var built: [Int: Service] = [:]
        var recorded: [Int: Characteristic] = [:]
        var boxes: [ObjectIdentifier: ValueBox] = [:]
        var order: [Service] = []
        // A recorded database keeps every service at its handles, the stack's own among them
        // (the recorded ones win); a clone by UUIDs leaves those to the stack.
        let placed = profile.hasHandles
        let kept = profile.services.indices.filter { index in
            placed || GATTProfile.uuid(profile.services[index].uuid).map { !Self.stackServices.contains($0) } ?? false
        }
        var first: [BluetoothUUID: Int] = [:]
        for index in kept { if let uuid = GATTProfile.uuid(profile.services[index].uuid), first[uuid] == nil { first[uuid] = index } }
        // Included services are built before the services that include them, wherever the file
        // has them (a dump of a device may include a later service; `check` refused circles).
        // A clone is declared in that order; a recording's database puts each at its handles,
        // where an include of a later service points (Vol 3, Part G, 3.2).
        for index in GATTProfile.declarationOrder(profile.services, of: kept).order {
            let entry = profile.services[index]
            guard let uuid = GATTProfile.uuid(entry.uuid) else { continue }
            var includes: [Service] = []
            for name in entry.includes ?? [] {
                guard let included = GATTProfile.uuid(name) else { continue }
                if let service = first[included].flatMap({ built[$0] }) {
                    includes.append(service)
                } else if Self.stackServices.contains(included) {
                    adjustments.append("\(uuid): its include of \(included) left out (the stack serves its own \(included), which a clone does not include)")
                }
            }
            let characteristics = entry.characteristics.compactMap { spec -> Characteristic? in
                Self.characteristic(spec, in: uuid, adjustments: &adjustments, boxes: &boxes, streams: &streams)
            }
            let service = Service(uuid, primary: entry.primary ?? true, includes: includes) { characteristics }
            if let start = entry.handle, let end = entry.endHandle { service.placement = UInt16(start)...UInt16(end) }
            for characteristic in characteristics {
                if let placement = characteristic.placement { recorded[Int(placement.declaration) + 1] = characteristic }
            }
            built[index] = service
            order.append(service)
        }
        services = order
        let advertised = (profile.advertisedServices ?? []).compactMap(GATTProfile.uuid)
        var deviceProfile = DeviceProfile(defaultName: profile.name, advertisedServices: advertised,
                                          appearance: UInt16(clamping: profile.appearance ?? 0))
        if profile.advertisingData != nil || profile.scanResponseData != nil {
            deviceProfile.recordedAdvertising = (profile.advertisingData.flatMap(GATTProfile.bytes) ?? [],
                                                 profile.scanResponseData.flatMap(GATTProfile.bytes) ?? [])
            if profile.extendedAdvertising == true {
                deviceProfile.recordedAdvertisingIsExtended = true
                if !(deviceProfile.recordedAdvertising?.scanResponseData.isEmpty ?? true) {
                    // Vol 4, Part E, 7.8.53: connectable extended advertising is not scannable.
                    adjustments.append("scanResponseData is not sent: the replay advertises from a connectable extended set, which is not scannable")
                }
            }
        }
        self.profile = deviceProfile
        if let note = profile.addressNote { adjustments.append(note) }
        self.adjustments = adjustments
        // A recording replaces the once-a-second values: its events, at their times.
        if let recording = profile.recording, !recording.events.isEmpty {
            timeline = recording.events.compactMap { event in
                guard let characteristic = recorded[event.handle], let value = GATTProfile.bytes(event.value) else { return nil }
                return (Duration.nanoseconds(Int64(event.at * 1e9)), characteristic, value, event.indication ?? false)
            }
            timelineLength = .nanoseconds(Int64(recording.duration * 1e9))
            loops = profile.replay != "once"
            streams = []
        }
        self.streams = streams
        latest = boxes
        ticker = TickWhileSubscribed(every: Self.notificationPeriod, watching: streams.map(\.characteristic))
        ticker.onTick = { [weak self] in self?.tick() }
    }

    private static func characteristic(_ spec: GATTProfile.Characteristic, in service: BluetoothUUID, adjustments: inout [String],
                                       boxes: inout [ObjectIdentifier: ValueBox],
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
        var descriptorHandles: [UInt16] = []
        var cccdHandle: UInt16?
        for descriptor in spec.descriptors ?? [] {
            guard let duuid = GATTProfile.uuid(descriptor.uuid) else { continue }
            // The CCCD is the stack's (at the recorded handle); Extended Properties goes with its property bit.
            if duuid == GATTType.clientConfiguration { cccdHandle = cccdHandle ?? descriptor.handle.map(UInt16.init); continue }
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
            if let handle = descriptor.handle { descriptorHandles.append(UInt16(handle)) }
        }
        if properties.contains(.extendedProperties) && !descriptors.contains(where: { $0.uuid == GATTType.extendedProperties }) {
            properties.remove(.extendedProperties)
            adjustments.append("\(service)/\(uuid): extended-properties without its 0x2900 descriptor left out")
        }
        // At the recorded handles: what the stack leaves out stays an empty handle.
        let placement = spec.handle.map {
            CharacteristicPlacement(declaration: UInt16($0),
                                    clientConfiguration: properties.isDisjoint(with: [.notify, .indicate]) ? nil : cccdHandle,
                                    descriptors: descriptorHandles)
        }
        let value = spec.value.flatMap(GATTProfile.bytes)
        // Access follows the properties; what the profile adds is the security it asks for.
        var permissions = AttributePermissions()
        if properties.contains(.read) { permissions.insert(.readable) }
        if !properties.isDisjoint(with: [.write, .writeWithoutResponse, .authenticatedSignedWrites]) { permissions.insert(.writeable) }
        for name in spec.permissions ?? [] {
            if let bit = GATTProfile.permissionNames.first(where: { $0.0 == name })?.1 { permissions.insert(bit) }
        }
        // The key size the profile asks for (Vol 3, Part C, 10.3.1; checked 7...16 when parsed):
        // the ATT server answers 0x0C to a shorter key, and the device's pairing asks for it.
        let keySize = UInt8(clamping: min(max(spec.minimumKeySize ?? 7, 7), 16))
        let mutating = !properties.isDisjoint(with: CharacteristicProperties.mutating)
        if !mutating, properties.contains(.read), let value {
            let characteristic = Characteristic(uuid, properties: properties, permissions: permissions, cachedValue: value, descriptors: descriptors)
            characteristic.placement = placement
            characteristic.minimumEncryptionKeySize = keySize
            return characteristic
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
        characteristic.placement = placement
        characteristic.minimumEncryptionKeySize = keySize
        boxes[ObjectIdentifier(characteristic)] = box
        if characteristic.notifies {
            let values = (spec.notifications ?? []).compactMap(GATTProfile.bytes)
            streams.append((characteristic, values.isEmpty ? [value ?? []] : values, 0))
        }
        return characteristic
    }

    public func start(context: DeviceContext) {
        self.context = context
        if !timeline.isEmpty { context.logger.notice("profile: replaying \(timeline.count) recorded events over \(timelineLength) (\(loops ? "looping" : "once")) from the first subscription") }
        ticker.start(context: context)
        for line in adjustments { context.logger.notice("profile: \(line)") }
    }

    public func stop() {
        ticker.stop()
        if let timelineTimer { context?.scheduler.cancel(timelineTimer) }
        timelineTimer = nil
    }

    public func subscriptionChanged(_ characteristic: Characteristic, peer: ATTPeer, notify: Bool, indicate: Bool) {
        ticker.subscriptionChanged(characteristic)
        // The recorded timeline starts with the first subscription, as the recording did
        // (`record` subscribes, then listens), so an app sees the recorded sequence and gaps.
        if (notify || indicate), passStarted == nil, !timeline.isEmpty, let context {
            passStarted = context.scheduler.nowNanoseconds
            nextEvent = 0
            scheduleNextEvent()
        }
    }

    /// Arms the timer for the next event of the timeline; at its end, a loop starts again
    /// (after the recording's whole duration), `once` stops.
    private func scheduleNextEvent() {
        guard let context, let started = passStarted else { return }
        let due: UInt64
        if nextEvent < timeline.count {
            due = started &+ UInt64(max(timeline[nextEvent].at.nanoseconds, 0))
        } else {
            guard loops else { return }
            // An empty pass still takes a millisecond: a zero-length recording never spins.
            due = started &+ UInt64(max(timelineLength.nanoseconds, 1_000_000))
        }
        let now = context.scheduler.nowNanoseconds
        timelineTimer = context.scheduler.schedule(after: .nanoseconds(Int64(due > now ? due - now : 0))) { [weak self] in
            self?.playDueEvents()
        }
    }

    private func playDueEvents() {
        guard let context, let started = passStarted else { return }
        if nextEvent >= timeline.count {
            passStarted = started &+ UInt64(max(timelineLength.nanoseconds, 1_000_000))
            nextEvent = 0
            return scheduleNextEvent()
        }
        let now = context.scheduler.nowNanoseconds
        while nextEvent < timeline.count, started &+ UInt64(max(timeline[nextEvent].at.nanoseconds, 0)) <= now {
            let event = timeline[nextEvent]
            nextEvent += 1
            latest[ObjectIdentifier(event.characteristic)]?.bytes = event.value
            // Sent to whoever is subscribed now; a queue that is full drops none silently (the
            // stack logs it) and the timeline goes on, as the original did not wait either.
            if event.indication, event.characteristic.properties.contains(.indicate) {
                context.indicate(event.characteristic, value: event.value)
            } else if event.characteristic.properties.contains(.notify) {
                context.notify(event.characteristic, value: event.value)
            } else {
                context.indicate(event.characteristic, value: event.value)
            }
        }
        scheduleNextEvent()
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
