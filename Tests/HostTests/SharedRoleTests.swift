import BlemuATT
import BlemuCentral
import BlemuCore
import BlemuDevices
import BlemuGATTClient
import BlemuHCI
import BlemuHost
import BlemuL2CAP
import BlemuSecurity
import Logging
import Testing
@testable import HostTestSupport

/// One controller, two roles: a heart-rate peripheral and a central, peers on the controller's
/// `ControllerHost`, as on a board with one radio. Each gets its own events and links, and a
/// stop closes both.
@Suite struct SharedRoleTests {
    final class Bench {
        let bench: SharedBench
        let central: CentralHost
        var reports = 0

        init(extended: Bool) throws {
            // Two devices make the advertiser use extended sets; one, legacy advertising.
            bench = try SharedBench(devices: extended ? [HeartRateDevice(), ThermostatDevice()] : [HeartRateDevice()],
                                    sets: extended ? 4 : 0)
            central = try CentralHost(on: bench.host.controller)
            central.onAdvertisement = { [unowned self] _, _ in self.reports += 1 }
        }
    }

    @Test func eachRoleGetsItsOwnLinks() throws {
        let b = try Bench(extended: true)
        #expect(b.central.isReady)
        b.central.startScanning()
        #expect(b.bench.controller.commands(HCIOpcode.leSetExtendedScanEnable).last?.parameters.first == 1)
        // A central link: not a pending peripheral link waiting for its advertising set.
        var link: CentralLink?
        b.central.connect(to: LEAddress(BluetoothAddress("C4:11:22:33:44:55")!, isRandom: true)) { link = try? $0.get() }
        b.bench.controller.centralConnected(handle: 0x0050, peer: BluetoothAddress("C4:11:22:33:44:55")!)
        let central = try #require(link)
        #expect(b.central.links.count == 1 && b.bench.host.connectionCount == 0)
        // A peripheral link from advertising set 1 goes to its device.
        b.bench.controller.connect(handle: 0x0040, peer: BluetoothAddress("D0:11:22:33:44:55")!, set: 1)
        #expect(b.bench.host.connectionCount == 1 && b.central.links.count == 1)
        // ATT on each link reaches its own side: the peripheral's server answers its central...
        #expect(b.bench.deviceName(on: 0x0040) == "Shared 1")
        // ...and the central's client gets its response.
        var value: [UInt8]?
        central.client.read(0x0003) { value = try? $0.get() }
        #expect(b.bench.controller.takeL2CAP(handle: 0x0050, cid: L2CAPChannel.att) == [[0x0A, 0x03, 0x00]])
        b.bench.controller.sendL2CAP(handle: 0x0050, cid: L2CAPChannel.att, [0x0B, 0x01])
        #expect(value == [0x01])
        // Disconnections go to their own side.
        b.bench.controller.disconnect(handle: 0x0050)
        #expect(b.central.links.isEmpty && b.bench.host.connectionCount == 1)
    }

    /// Vol 4, Part E, 3.1.1: a controller takes legacy or extended commands, not both; the
    /// central follows the peripherals' choice.
    @Test func theCentralUsesTheCommandsTheAdvertiserUses() throws {
        let legacy = try Bench(extended: false)
        legacy.central.startScanning()
        #expect(legacy.bench.controller.commands(HCIOpcode.leSetScanEnable).last?.parameters.first == 1)
        #expect(legacy.bench.controller.commands(HCIOpcode.leSetExtendedScanEnable).isEmpty)
        let extended = try Bench(extended: true)
        extended.central.startScanning()
        #expect(extended.bench.controller.commands(HCIOpcode.leSetScanEnable).isEmpty)
        #expect(!extended.bench.controller.commands(HCIOpcode.leSetExtendedScanEnable).isEmpty)
    }

    /// One device keeps a controller that has extended advertising on the legacy commands, and
    /// the central beside it follows (a central alone would use the extended ones).
    @Test func oneDeviceKeepsTheCentralOnLegacyCommandsToo() throws {
        let bench = try SharedBench(devices: [HeartRateDevice()], sets: 4)
        let central = try CentralHost(on: bench.host.controller)
        central.startScanning()
        #expect(bench.controller.commands(HCIOpcode.leSetScanEnable).last?.parameters.first == 1)
        #expect(bench.controller.commands(HCIOpcode.leSetExtendedScanEnable).isEmpty)
    }

    /// Beside a device the central connects from the controller's public address, which it
    /// distributes as its identity (Vol 3, Part H, 3.6.5); a controller that reports
    /// 00:00:00:00:00:00 (Read BD_ADDR, Vol 4, Part E, 7.4.6: virtual or unprogrammed ones) has
    /// none, so the central connects from, and names, its static random address (the device's,
    /// the controller's one random address under legacy advertising, 7.8.4) instead of sending
    /// that all-zero identity.
    @Test func withoutAPublicAddressTheCentralUsesItsStaticRandomOne() throws {
        let quiet = Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })
        for (publicAddress, random) in [(BluetoothAddress("06:05:04:03:02:01")!, false), (BluetoothAddress(value: 0), true)] {
            let bench = try SharedBench(devices: [HeartRateDevice()], sets: 0, publicAddress: publicAddress)
            let central = try CentralHost(on: bench.host.controller)
            let deviceAddress = bench.peripherals[0].address
            central.ownRandomAddress = deviceAddress
            let owner = BondOwner(device: "test", name: "central", address: deviceAddress)
            let security = CentralSecurity(configuration: CentralSecurityConfiguration(), owner: owner,
                                           localAddress: LEAddress(BluetoothAddress(value: 1), isRandom: false),
                                           scheduler: bench.scheduler, logger: quiet)
            central.attach(security: security)
            let expected = random ? LEAddress(deviceAddress, isRandom: true) : LEAddress(publicAddress, isRandom: false)
            #expect(security.identity.address == expected)
            #expect(security.identity.address.address.value != 0)
            central.startScanning()
            // LE Set Scan Parameters: type, interval, window, then Own_Address_Type (7.8.10).
            let scan = try #require(bench.controller.commands(HCIOpcode.leSetScanParameters).last)
            #expect(scan.parameters[5] == (random ? AddressType.randomDevice : .publicDevice).rawValue)
            // The controller's random address stays the device's: nothing else was set.
            #expect(bench.controller.commands(HCIOpcode.leSetRandomAddress).allSatisfy { $0.parameters == deviceAddress.littleEndianBytes })
        }
    }

    @Test func aStopClosesBothRolesLinksBeforeTheReset() throws {
        let b = try Bench(extended: true)
        var link: CentralLink?
        b.central.connect(to: LEAddress(BluetoothAddress("C4:11:22:33:44:55")!, isRandom: true)) { link = try? $0.get() }
        b.bench.controller.centralConnected(handle: 0x0050, peer: BluetoothAddress("C4:11:22:33:44:55")!)
        #expect(link != nil)
        var stopped = false
        b.bench.host.controller.stop { stopped = true }
        #expect(b.bench.controller.commands(HCIOpcode.disconnect).map { $0.parameters.prefix(2) } == [[0x50, 0x00]])
        #expect(b.bench.controller.commands(HCIOpcode.reset).count == 1)   // the initialization's only
        b.bench.controller.disconnect(handle: 0x0050)
        #expect(b.bench.controller.commands(HCIOpcode.reset).count == 2 && stopped)
        #expect(link?.isOpen == false)
    }
}
