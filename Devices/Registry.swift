import BlemuDevice

/// Every device module blemu can run, by its name (Docs/REFERENCE.md, "Device names").
public enum DeviceRegistry {
    public struct Entry: Sendable {
        public let name: String
        public let summary: String
        public let make: @Sendable () -> Device
        /// The device with its models' randomness (the heart's wander, the thermal model's
        /// weather, the lock's made-up PIN) from `seed`: the same seed, the same values (`--seed`).
        public let makeSeeded: @Sendable (UInt64) -> Device

        public func make(seed: UInt64?) -> Device { seed.map(makeSeeded) ?? make() }
    }

    public static let all: [Entry] = [
        Entry(name: HeartRateDevice.deviceName, summary: HeartRateDevice.summary, make: { HeartRateDevice() },
              makeSeeded: { HeartRateDevice(seed: $0, replayable: true) }),
        Entry(name: ThermostatDevice.deviceName, summary: ThermostatDevice.summary, make: { ThermostatDevice() },
              makeSeeded: { ThermostatDevice(seed: $0) }),
        // The PIN: `LockDevice(pin:)` (check it with `LockDevice.pinRefusal`), or the `pin` setting
        // before start; with neither, the lock makes one up and logs it.
        Entry(name: LockDevice.deviceName, summary: LockDevice.summary, make: { LockDevice() },
              makeSeeded: { LockDevice(seed: $0) }),
        Entry(name: ChatDevice.deviceName, summary: ChatDevice.summary, make: { ChatDevice() },
              // Its only randomness is the first message number, not a model.
              makeSeeded: { _ in ChatDevice() }),
        // Broadcasters: never connectable (Docs/BROADCASTERS.md); the BTHome ones encrypt with --bindkey-file.
        Entry(name: BTHomeThermometerDevice.deviceName, summary: BTHomeThermometerDevice.summary, make: { BTHomeThermometerDevice() },
              makeSeeded: { BTHomeThermometerDevice(seed: $0) }),
        Entry(name: BTHomeDoorDevice.deviceName, summary: BTHomeDoorDevice.summary, make: { BTHomeDoorDevice() },
              makeSeeded: { _ in BTHomeDoorDevice() }),
        Entry(name: IBeaconDevice.deviceName, summary: IBeaconDevice.summary, make: { IBeaconDevice() },
              makeSeeded: { _ in IBeaconDevice() }),
        Entry(name: EddystoneDevice.deviceName, summary: EddystoneDevice.summary, make: { EddystoneDevice() },
              makeSeeded: { _ in EddystoneDevice() }),
        Entry(name: ChannelEchoDevice.deviceName, summary: ChannelEchoDevice.summary, make: { ChannelEchoDevice() },
              makeSeeded: { _ in ChannelEchoDevice() }),
    ]

    public static func entry(named name: String) -> Entry? { all.first { $0.name == name } }
}
