import BlemuATT
import BlemuCore
import BlemuGATT
@testable import BlemuGATTClient
import Testing
import BlemuProfile

/// The profile exporter (`GATTProfile(cloning:...)`, `blemu gatt ... dump --profile`): what a
/// client discovered and read becomes a profile `blemu run FILE.json` serves.
@Suite struct ProfileExporterTests {
    static let gap = RemoteService(
        service: DiscoveredService(uuid: GATTType.gapService, handles: 0x0001...0x0005), includes: [],
        characteristics: [
            RemoteCharacteristic(characteristic: DiscoveredCharacteristic(uuid: GATTType.deviceName, properties: [.read],
                                                                          declarationHandle: 0x0002, valueHandle: 0x0003, endHandle: 0x0003),
                                 descriptors: []),
            RemoteCharacteristic(characteristic: DiscoveredCharacteristic(uuid: GATTType.appearance, properties: [.read],
                                                                          declarationHandle: 0x0004, valueHandle: 0x0005, endHandle: 0x0005),
                                 descriptors: []),
        ])
    static let battery = RemoteService(
        service: DiscoveredService(uuid: BluetoothUUID(0x180F), handles: 0x0010...0x0013, isPrimary: false), includes: [],
        characteristics: [
            RemoteCharacteristic(characteristic: DiscoveredCharacteristic(uuid: BluetoothUUID(0x2A19), properties: [.read, .notify],
                                                                          declarationHandle: 0x0010, valueHandle: 0x0011, endHandle: 0x0013),
                                 descriptors: [DiscoveredDescriptor(uuid: GATTType.clientConfiguration, handle: 0x0012),
                                               DiscoveredDescriptor(uuid: BluetoothUUID(0x2901), handle: 0x0013)]),
        ])
    static let advertised = GATTProfile.Advertised(name: "Adv", address: BluetoothAddress("C4:11:22:33:44:55")!,
                                                   appearance: 0x0340, services: [BluetoothUUID(0x180F)])

    @Test func theDatabaseNameAndAppearanceWinOverTheAdvertisedOnes() {
        let values: [UInt16: Result<[UInt8], GATTClientError>] = [
            0x0003: .success(Array("Full Name".utf8)), 0x0005: .success([0xC1, 0x03]),
            0x0011: .success([0x64]), 0x0012: .success([0x00, 0x00]),
            0x0013: .failure(.att(.insufficientEncryption, handle: 0x0013)),
        ]
        let permissions = GATTProfile.permissions(refusals: [0x0013: [ATTError.insufficientEncryption.rawValue]], readSecured: [:])
        let profile = GATTProfile(cloning: [Self.gap, Self.battery], values: values, captured: [0x0011: [[0x63], [0x62]]],
                                  permissions: permissions, advertised: Self.advertised)
        #expect(profile.name == "Full Name" && profile.appearance == 0x03C1)
        #expect(profile.address == "C4:11:22:33:44:55" && profile.advertisedServices == ["180F"])
        let battery = profile.services[1]
        #expect(battery.uuid == "180F" && battery.primary == false && profile.services[0].primary == nil)
        let level = battery.characteristics[0]
        #expect(level.properties == ["read", "notify"] && level.value == "64" && level.notifications == ["63", "62"])
        #expect(level.permissions == nil)
        #expect(level.descriptors?.map(\.value) == ["0000", nil], "a refused value is absent")
        #expect(level.descriptors?[1].permissions == GATTProfile.readPermissions(refusals: [0x0F], readOnAuthenticatedLink: nil))
        #expect(level.descriptors?[1].permissions != nil)
    }

    @Test func withoutGAPValuesTheAdvertisedOnesStay() {
        let profile = GATTProfile(cloning: [Self.gap], values: [0x0003: .failure(.att(.readNotPermitted, handle: 0x0003))],
                                  captured: [:], permissions: [:], advertised: Self.advertised)
        #expect(profile.name == "Adv" && profile.appearance == 0x0340)
        #expect(GATTProfile.deviceName([Self.gap], [:]) == nil)
    }
}
