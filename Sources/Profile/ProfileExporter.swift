import BlemuCore
import BlemuGATT
import BlemuGATTClient

/// A discovered database and the values read from it, as a GATT profile: what
/// `blemu gatt ... dump --profile` writes and `blemu run FILE.json` serves (a clone).
extension GATTProfile {
    /// What a peripheral said of itself in its advertising (the database may say more).
    public struct Advertised: Sendable {
        public var name: String
        public var address: BluetoothAddress
        public var appearance: UInt16?
        public var services: [BluetoothUUID]

        public init(name: String, address: BluetoothAddress, appearance: UInt16?, services: [BluetoothUUID]) {
            self.name = name
            self.address = address
            self.appearance = appearance
            self.services = services
        }
    }

    /// The profile of a discovered database: values as read (hex; absent where refused), the
    /// notifications recorded (`captured`, per value handle) to replay, and each handle's read
    /// permissions as its refusals showed them (`permissions(refusals:readSecured:)`). The
    /// name and appearance are the database's (GAP), else the advertised ones.
    public init(cloning services: [RemoteService], values: [UInt16: Result<[UInt8], GATTClientError>],
                captured: [UInt16: [[UInt8]]], permissions: [UInt16: [String]], advertised: Advertised) {
        func hex(_ handle: UInt16) -> String? {
            if case .success(let bytes)? = values[handle] { return Hex.bytes(bytes) }
            return nil
        }
        var appearance = advertised.appearance.map(Int.init)
        if let handle = services.characteristic(GATTType.appearance, in: GATTType.gapService)?.valueHandle,
           case .success(let bytes)? = values[handle], bytes.count == 2 {
            appearance = Int(UInt16(bytes[0]) | UInt16(bytes[1]) << 8)
        }
        self.init(
            name: Self.deviceName(services, values) ?? advertised.name, address: advertised.address.description,
            appearance: appearance, advertisedServices: advertised.services.map(\.description),
            services: services.map { service in
                GATTProfile.Service(
                    uuid: service.uuid.description, primary: service.service.isPrimary ? nil : false,
                    includes: service.includes.isEmpty ? nil : service.includes.map(\.service.uuid.description),
                    characteristics: service.characteristics.map { characteristic in
                        GATTProfile.Characteristic(
                            uuid: characteristic.uuid.description,
                            properties: GATTProfile.propertyNames(characteristic.properties),
                            value: hex(characteristic.valueHandle),
                            notifications: captured[characteristic.valueHandle].map { $0.map { Hex.bytes($0) } },
                            descriptors: characteristic.descriptors.isEmpty ? nil : characteristic.descriptors.map {
                                GATTProfile.Descriptor(uuid: $0.uuid.description, value: hex($0.handle), permissions: permissions[$0.handle])
                            },
                            permissions: permissions[characteristic.valueHandle])
                    })
            })
    }

    /// The read permissions of every handle that was refused: `refusals` the ATT error codes
    /// each answered, `readSecured` whether the link was authenticated when a refused handle
    /// was read after securing it.
    public static func permissions(refusals: [UInt16: [UInt8]], readSecured: [UInt16: Bool]) -> [UInt16: [String]] {
        var permissions: [UInt16: [String]] = [:]
        for (handle, codes) in refusals {
            permissions[handle] = readPermissions(refusals: codes, readOnAuthenticatedLink: readSecured[handle])
        }
        return permissions
    }

    /// GAP Device Name as read (the advertised name may be shortened).
    public static func deviceName(_ services: [RemoteService], _ values: [UInt16: Result<[UInt8], GATTClientError>]) -> String? {
        guard let handle = services.characteristic(GATTType.deviceName, in: GATTType.gapService)?.valueHandle,
              case .success(let bytes)? = values[handle] else { return nil }
        return String(decoding: bytes, as: UTF8.self)
    }
}

extension GATTProfile {
    /// What `blemu gatt ... record` heard: one notification or indication, its time in seconds
    /// from the start of the recording.
    public struct HeardValue: Sendable, Equatable {
        public var at: Double
        public var handle: UInt16
        public var value: [UInt8]
        public var indication: Bool

        public init(at: Double, handle: UInt16, value: [UInt8], indication: Bool) {
            self.at = at
            self.handle = handle
            self.value = value
            self.indication = indication
        }
    }

    /// A recording (`blemu gatt ... record`): the clone (`init(cloning:...)`) with every
    /// attribute's handle, the advertiser's address and its type, its advertising data and scan
    /// response as the scan found them, and what it notified and indicated with its timing.
    public init(recording services: [RemoteService], values: [UInt16: Result<[UInt8], GATTClientError>],
                heard: [HeardValue], duration: Double, permissions: [UInt16: [String]], advertised: Advertised,
                addressIsRandom: Bool, advertisingData: [UInt8], scanResponseData: [UInt8], extendedAdvertising: Bool = false) {
        self.init(cloning: services, values: values, captured: [:], permissions: permissions, advertised: advertised)
        for (s, service) in services.enumerated() {
            self.services[s].handle = Int(service.handles.lowerBound)
            self.services[s].endHandle = Int(service.handles.upperBound)
            for (c, characteristic) in service.characteristics.enumerated() {
                self.services[s].characteristics[c].handle = Int(characteristic.characteristic.declarationHandle)
                self.services[s].characteristics[c].valueHandle = Int(characteristic.valueHandle)
                for (d, descriptor) in characteristic.descriptors.enumerated() {
                    self.services[s].characteristics[c].descriptors?[d].handle = Int(descriptor.handle)
                }
            }
        }
        addressType = addressIsRandom ? "random" : "public"
        // Extended PDUs (or a payload only they carry) are recorded whole, up to the 1650
        // octets of Vol 6, Part B, 2.3.4.9. What does not fit even them is not a payload a
        // replay can send: left out (the replay then builds its own from the name and services).
        let extended = extendedAdvertising || advertisingData.count > Self.maxAdvertisingBytes
            || scanResponseData.count > Self.maxAdvertisingBytes
        let limit = extended ? Self.maxExtendedAdvertisingBytes : Self.maxAdvertisingBytes
        if advertisingData.count <= limit && scanResponseData.count <= limit {
            self.advertisingData = Hex.bytes(advertisingData)
            self.scanResponseData = Hex.bytes(scanResponseData)
            if extended { self.extendedAdvertising = true }
        }
        recording = Recording(duration: duration, events: heard.prefix(Self.maxEvents).map {
            Event(at: min(($0.at * 1000).rounded() / 1000, duration), handle: Int($0.handle), value: Hex.bytes($0.value), indication: $0.indication ? true : nil)
        })
    }
}
