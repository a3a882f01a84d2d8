import BlemuControl
import BlemuCore
import BlemuDevices
import BlemuHost
import Logging
import Testing
@testable import HostTestSupport

/// The control socket on a broadcaster, whose host has no GATT database, Security Manager,
/// bonds or links (`Peripheral.takesConnections`): `list` shows it as before, its settings and
/// advertising are driven as before, and what needs a database, a link or a bond answers from
/// none, without making any.
@Suite struct BroadcasterControlTests {
    @Test func everyControlCommandOnABroadcasterAnswersWithoutGivingItAConnectableHost() throws {
        let bench = try Bench(device: IBeaconDevice(), name: "Beacon")
        let control = ValueInjectionTests.control(bench)
        func run(_ command: ControlCommand) -> [String: String] { ValueInjectionTests.run(control, command) }

        let listed = run(.list(device: nil))
        #expect(listed["ok"] == "true")
        let devices = listed["devices"] ?? ""
        #expect(devices.contains("\"device\":\"ibeacon\"") && devices.contains("\"broadcast\":\"")
                && devices.contains("\"connections\":[]") && devices.contains("\"faults\":[]")
                && devices.contains("\"services_out\":[]") && devices.contains("\"authorized\":[]"), "\(devices)")
        #expect(run(.set(device: "ibeacon", key: "major", value: "9"))["ok"] == "true")
        #expect(run(.advertise(device: "ibeacon", on: false))["ok"] == "true")
        #expect(!bench.peripheral.isAdvertising)
        #expect(run(.advertise(device: "ibeacon", on: true))["ok"] == "true")
        #expect(bench.peripheral.isAdvertising)
        #expect(run(.notify(device: "ibeacon", characteristic: BluetoothUUID(0x2A00), value: [0x01]))["error"]
            == "ibeacon has no characteristic 2A00")
        #expect(run(.fault(device: "ibeacon", characteristic: BluetoothUUID(0x2A00), action: .drop, count: nil))["error"]
            == "ibeacon has no characteristic 2A00")
        #expect(run(.service(device: "ibeacon", service: BluetoothUUID(0x1800), present: false))["ok"] == "false")
        #expect(run(.bonds(device: "ibeacon"))["ok"] == "true")
        #expect(run(.forgetBonds(device: "ibeacon", address: nil))["ok"] == "true")
        #expect(run(.disconnect(device: "ibeacon", reason: 0x13))["ok"] == "true")
        #expect(run(.clearFaults(device: "ibeacon"))["ok"] == "true")
        #expect(DeviceControl.check(.fault(device: "ibeacon", characteristic: BluetoothUUID(0x2A00), action: .drop, count: nil),
                                    devices: [bench.peripheral]) == "ibeacon has no characteristic 2A00")
        #expect(!bench.peripheral.takesConnections, "no command made a GATT database, security or links for it")
    }
}
