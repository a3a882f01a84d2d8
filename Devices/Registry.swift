import BlemuHost

/// Every device module blemu can run, by its name (Docs/REFERENCE.md, "Device names").
public enum DeviceRegistry {
    public struct Entry: Sendable {
        public let name: String
        public let summary: String
        public let make: @Sendable () -> Device
    }

    public static let all: [Entry] = [
        Entry(name: HeartRateDevice.deviceName, summary: HeartRateDevice.summary, make: { HeartRateDevice() }),
        Entry(name: ThermostatDevice.deviceName, summary: ThermostatDevice.summary, make: { ThermostatDevice() }),
        // The PIN: `LockDevice(pin:)` (check it with `LockDevice.pinRefusal`), or the `pin` setting
        // before start; with neither, the lock makes one up and logs it.
        Entry(name: LockDevice.deviceName, summary: LockDevice.summary, make: { LockDevice() }),
        Entry(name: ChatDevice.deviceName, summary: ChatDevice.summary, make: { ChatDevice() }),
        // Broadcasters: never connectable (Docs/BROADCASTERS.md); the BTHome ones encrypt with --bindkey-file.
        Entry(name: BTHomeThermometerDevice.deviceName, summary: BTHomeThermometerDevice.summary, make: { BTHomeThermometerDevice() }),
        Entry(name: BTHomeDoorDevice.deviceName, summary: BTHomeDoorDevice.summary, make: { BTHomeDoorDevice() }),
        Entry(name: IBeaconDevice.deviceName, summary: IBeaconDevice.summary, make: { IBeaconDevice() }),
        Entry(name: EddystoneDevice.deviceName, summary: EddystoneDevice.summary, make: { EddystoneDevice() }),
        Entry(name: ChannelEchoDevice.deviceName, summary: ChannelEchoDevice.summary, make: { ChannelEchoDevice() }),
    ]

    public static func entry(named name: String) -> Entry? { all.first { $0.name == name } }
}
