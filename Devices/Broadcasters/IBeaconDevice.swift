import BlemuBroadcast
import BlemuCore
import BlemuDevice

/// An iBeacon (Apple's Proximity Beacon Specification): the proximity UUID, major, minor and
/// measured power in Apple's manufacturer data, non-connectable, every 100 ms as Apple asks of
/// a beacon. Each setting changes the advertisement at once.
public final class IBeaconDevice: BroadcastingDevice {
    public static let deviceName = "ibeacon"
    public static let summary = "iBeacon (proximity UUID, major, minor, measured power), broadcast only"
    /// Apple's AirLocate sample UUID, E2C56DB5-DFFB-48D2-B060-D0F5A71096E0.
    public static let defaultUUID: [UInt8] = [0xE2, 0xC5, 0x6D, 0xB5, 0xDF, 0xFB, 0x48, 0xD2,
                                              0xB0, 0x60, 0xD0, 0xF5, 0xA7, 0x10, 0x96, 0xE0]

    public private(set) var beacon = IBeacon(uuid: IBeaconDevice.defaultUUID, major: 1, minor: 1, measuredPower: -59)!
    public private(set) var broadcastInterval: UInt16 = 160  // 100 ms
    private weak var context: BroadcastContext?

    public init() {}

    public var profile: DeviceProfile {
        DeviceProfile(defaultName: "blemu iBeacon", advertisedServices: [], appearance: 0x0000, txPowerLevel: nil)
    }

    /// Flags and the manufacturer data: 30 bytes, a legacy advertisement.
    public var advertisingData: [UInt8] { beacon.advertisingData }

    public func start(broadcasting context: BroadcastContext) {
        self.context = context
    }

    public var settings: [DeviceSetting] {
        [
            .hex("uuid", "proximity UUID, 32 hex digits (dashes allowed)", bytes: 16) { [weak self] uuid in
                self?.change("uuid") { $0.uuid = uuid }
            },
            .integer("major", "major, 0 to 65535", in: 0...65535) { [weak self] value in
                self?.change("major") { $0.major = UInt16(value) }
            },
            .integer("minor", "minor, 0 to 65535", in: 0...65535) { [weak self] value in
                self?.change("minor") { $0.minor = UInt16(value) }
            },
            .integer("power", "measured power: RSSI at 1 m, dBm, -128 to 127", in: -128...127) { [weak self] value in
                self?.change("power") { $0.measuredPower = Int8(value) }
            },
            .broadcastInterval { [weak self] units in
                self?.broadcastInterval = units
                self?.context?.broadcastChanged()
            },
        ]
    }

    private func change(_ what: String, _ apply: (inout IBeacon) -> Void) {
        apply(&beacon)
        context?.log(.stateChanged, .info, "\(what) set: \(beacon.uuidText) major \(beacon.major) minor \(beacon.minor) power \(beacon.measuredPower) dBm", [:])
        context?.broadcastChanged()
    }
}
