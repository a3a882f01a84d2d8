import BlemuCore
import BlemuDevice
import BlemuDevices
import BlemuHCI
import BlemuHost
import BlemuSecurity
import BlemuSimulator
import BlemuTestSupport
import Logging
import Testing
#if canImport(Glibc)
import Glibc
@testable import HostTestSupport
#endif

/// A broadcaster's host is the lean one: advertising, logging, its settings and events, and no
/// GATT database, Security Manager, bonds or links (`Peripheral.takesConnections`); a connectable
/// device still gets all of them.
@Suite struct BroadcasterHostTests {
    static let quiet = Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })

    @Test func aBroadcastersHostHoldsNoDatabaseSecurityBondsOrLinksThroughoutItsRun() throws {
        let temporary = TemporaryDirectory(prefix: "blemu-broadcaster-host")
        defer { temporary.remove() }
        let device = IBeaconDevice()
        let security = SecurityConfiguration(bondStorePath: temporary.path + "/bonds.json",
                                             identityPath: temporary.path + "/identity.json")
        let bench = try Bench(device: device, security: security, privacy: true, rpaTimeout: .seconds(20))
        let peripheral = bench.peripheral
        #expect(!peripheral.takesConnections)
        // What the control socket and a watcher do to a broadcaster: none of it makes them.
        var events: [DeviceEvent] = []
        peripheral.eventObserver = { events.append($0) }
        #expect(peripheral.control.applySetting("major", "7") == nil)
        peripheral.setAdvertisingAllowed(false)
        peripheral.setAdvertisingAllowed(true)
        bench.run(for: .seconds(45))
        #expect(peripheral.control.linkSummaries.isEmpty)
        #expect(peripheral.control.bonds.isEmpty)
        #expect(peripheral.control.absentServices.isEmpty)
        #expect(peripheral.control.forgetBonds(nil).bonds.isEmpty)
        #expect(peripheral.control.injectFault(.drop, characteristic: BluetoothUUID(0x2A00), count: nil)
            == "ibeacon has no characteristic 2A00")
        #expect(peripheral.control.answerPairing(confirm: true) == 0)
        #expect(peripheral.peers.isEmpty)
        #expect(peripheral.connectionCount == 0)
        #expect(peripheral.characteristics.isEmpty)
        #expect(peripheral.disconnectAll() == 0)
        #expect(peripheral.isAdvertising)
        #expect(events.contains { if case .advertising(on: true, _) = $0 { true } else { false } })
        var stopped = false
        peripheral.stop { stopped = true }
        bench.run(for: .seconds(5))
        #expect(stopped)
        #expect(!peripheral.takesConnections, "nothing on the broadcaster's paths made the connection parts")
        // Privacy made the identity (its IRK), as before; no bond file was ever read or written.
        #expect(FileManagerFree.exists(temporary.path + "/identity.json"))
        #expect(!FileManagerFree.exists(temporary.path + "/bonds.json"))
    }

    @Test func aLinkAControllerReportsFromABroadcasterIsDisconnectedAndNeverBecomesTheDevices() throws {
        let bench = try Bench(device: IBeaconDevice())
        let c = bench.controller
        let before = c.commands.count
        c.connect(handle: 0x0040, peer: bench.central)
        let disconnects = c.commands[before...].filter { $0.opcode == HCIOpcode.disconnect }
        #expect(disconnects.map { Array($0.parameters) } == [[0x40, 0x00, HCIStatus.remoteUserTerminated]])
        #expect(bench.peripheral.connectionCount == 0)
        #expect(bench.peripheral.peers.isEmpty)
        #expect(!bench.peripheral.takesConnections)
    }

    @Test func aConnectableDeviceStillGetsTheWholeHost() throws {
        let bench = try Bench(device: ThermostatDevice())
        let peripheral = bench.peripheral
        #expect(peripheral.takesConnections)
        // GAP's Device Name, GATT's Service Changed and the Diagnostics characteristic beside the device's own.
        let uuids = Set(peripheral.characteristics.map(\.uuid))
        #expect(uuids.contains(BluetoothUUID(0x2A00)))
        #expect(uuids.contains(BluetoothUUID(0x2A05)))
        #expect(uuids.contains(Peripheral.diagnosticsCharacteristicUUID))
        #expect(uuids.contains(BluetoothUUID(0x2A6E)))
        bench.controller.connect(handle: 0x0040, peer: bench.central)
        #expect(peripheral.connectionCount == 1)
        #expect(peripheral.peers.count == 1)
    }
}

/// Whether a file exists, without Foundation (the package uses none).
enum FileManagerFree {
    static func exists(_ path: String) -> Bool {
        var status = stat()
        return stat(path, &status) == 0
    }
}
