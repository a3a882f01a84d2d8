import BlemuATT
import BlemuCore
import BlemuDevices
import BlemuGATT
import BlemuHCI
import BlemuSimulator
import BlemuHost
import BlemuL2CAP
import Logging
import Testing
@testable import HostTestSupport

/// Several devices on one controller (Vol 4, Part E, 7.8.53 – 7.8.56, 7.7.65.18): each in its
/// own advertising set with its own address, each link routed to the device whose set it came
/// from, and nothing of one device reachable from another's link.
@Suite struct SharedControllerTests {
    /// As many connectable devices as the controller has sets (a fleet's connection: 16 on
    /// rootcanal) all advertise once it is up: starting each takes six commands (Parameters,
    /// Random Address, Data, Scan Response, Enable, and more), 96 in all, beyond what the
    /// command queue held (64), and a quarter of a 100-member fleet never advertised.
    @Test func sixteenConnectableDevicesOnOneControllerAllAdvertise() throws {
        let bench = try SharedBench(devices: (1...16).map { HeartRateDevice(seed: UInt64($0)) }, queued: true)
        bench.controller.flush()
        #expect(bench.peripherals.filter(\.isAdvertising).count == 16)
        #expect(bench.controller.enabledSets == Set(0..<16))
    }

    @Test func eachDeviceAdvertisesInItsOwnSetWithItsOwnAddress() throws {
        let bench = try SharedBench(devices: [HeartRateDevice(seed: 1), HeartRateDevice(seed: 2), ProbeDevice()])
        let c = bench.controller
        #expect(c.enabledSets == [0, 1, 2])
        let addresses = c.setAddresses()
        #expect(addresses.count == 3)
        for peripheral in bench.peripherals {
            let set = try #require(peripheral.advertisingSet)
            #expect(addresses[set] == peripheral.address.littleEndianBytes)
            #expect(peripheral.isAdvertising)
        }
        #expect(Set(bench.peripherals.map(\.address)).count == 3)
        // Legacy and extended commands never mix on one controller (Vol 4, Part E, 3.1.1).
        #expect(c.commands(HCIOpcode.leSetAdvertisingEnable).isEmpty)
        #expect(c.commands(HCIOpcode.leSetAdvertisingParameters).isEmpty)
        #expect(c.commands(HCIOpcode.leReadAdvertisingChannelTxPower).isEmpty)
        #expect(c.commands(HCIOpcode.leSetRandomAddress).isEmpty)
        // Each set's own payload: its own name in its scan response or advertising data.
        let data = c.commands(HCIOpcode.leSetExtendedScanResponseData) + c.commands(HCIOpcode.leSetExtendedAdvertisingData)
        for (index, peripheral) in bench.peripherals.enumerated() {
            let set = try #require(peripheral.advertisingSet)
            let mine = data.filter { $0.parameters.first == set }.flatMap { Array($0.parameters.dropFirst(4)) }
            #expect(String(decoding: mine, as: UTF8.self).contains("Shared \(index)"))
        }
        #expect(bench.fatal.isEmpty)
    }

    @Test func aLinkReachesTheDeviceWhoseSetItCameFrom() throws {
        let bench = try SharedBench(devices: [HeartRateDevice(seed: 1), HeartRateDevice(seed: 2), HeartRateDevice(seed: 3)])
        let second = bench.peripherals[1]
        let set = try #require(second.advertisingSet)
        bench.controller.connect(handle: 0x0041, peer: BluetoothAddress("F0:00:00:00:00:01")!, set: set)
        #expect(bench.peripherals.map(\.connectionCount) == [0, 1, 0])
        #expect(bench.deviceName(on: 0x0041) == "Shared 1")
        // Its set was ended by the connection; the device advertises again for the next central,
        // and the other sets never stopped.
        #expect(bench.controller.enabledSets == [0, 1, 2])
        bench.controller.connect(handle: 0x0042, peer: BluetoothAddress("F0:00:00:00:00:02")!, set: try #require(bench.peripherals[2].advertisingSet))
        #expect(bench.deviceName(on: 0x0042) == "Shared 2")
        #expect(bench.peripherals.map(\.connectionCount) == [0, 1, 1])
        #expect(bench.peripherals[1].peers.map(\.connectionHandle) == [0x0041])
        #expect(bench.peripherals[2].peers.map(\.connectionHandle) == [0x0042])
    }

    @Test func notificationsGoOnlyToTheDevicesOwnLinks() throws {
        let a = HeartRateDevice(seed: 1), b = HeartRateDevice(seed: 2)
        let bench = try SharedBench(devices: [a, b])
        bench.controller.connect(handle: 0x0040, peer: BluetoothAddress("F0:00:00:00:00:01")!, set: try #require(bench.peripherals[0].advertisingSet))
        bench.controller.connect(handle: 0x0041, peer: BluetoothAddress("F0:00:00:00:00:02")!, set: try #require(bench.peripherals[1].advertisingSet))
        // Only the central on device A subscribes; B's central must get nothing.
        let cccd = try #require(a.measurement.clientConfigurationHandle)
        #expect(bench.att([0x12, UInt8(cccd & 0xFF), UInt8(cccd >> 8), 0x01, 0x00], handle: 0x0040) == [[0x13]])
        bench.scheduler.advance(by: .seconds(5))
        #expect(bench.controller.takeL2CAP(handle: 0x0040, cid: L2CAPChannel.att).count >= 4)
        #expect(bench.controller.takeL2CAP(handle: 0x0041, cid: L2CAPChannel.att).isEmpty)
        // B's own database answers on B's link, with B's handles.
        #expect(bench.deviceName(on: 0x0041) == "Shared 1")
    }

    /// ACL data that arrives between LE Connection Complete and LE Advertising Set Terminated
    /// waits for its device and is then delivered in order.
    @Test func dataBeforeTheSetIsKnownIsKept() throws {
        let bench = try SharedBench(devices: [ProbeDevice(), ProbeDevice()])
        let set = try #require(bench.peripherals[1].advertisingSet)
        bench.controller.connect(handle: 0x0050, peer: BluetoothAddress("F0:00:00:00:00:05")!, set: set, announceSet: false)
        bench.controller.sendL2CAP(handle: 0x0050, cid: L2CAPChannel.att, [0x02, 0x00, 0x02])   // Exchange MTU 512
        #expect(bench.controller.takeL2CAP(handle: 0x0050, cid: L2CAPChannel.att).isEmpty)
        bench.controller.setTerminated(set: set, handle: 0x0050)
        let answered = bench.controller.takeL2CAP(handle: 0x0050, cid: L2CAPChannel.att)
        #expect(answered.first?.first == 0x03, "the Exchange MTU Response, once the link has its device")
        #expect(bench.peripherals[1].connectionCount == 1)
    }

    /// A controller that never names the set: the link is closed rather than kept with no device.
    @Test func aLinkThatNamesNoSetIsClosed() throws {
        let bench = try SharedBench(devices: [ProbeDevice(), ProbeDevice()])
        bench.controller.connect(handle: 0x0060, peer: BluetoothAddress("F0:00:00:00:00:06")!, set: 0, announceSet: false)
        bench.scheduler.advance(by: .seconds(3))
        #expect(bench.controller.commands(HCIOpcode.disconnect).map(\.parameters) == [[0x60, 0x00, 0x13]])
        #expect(bench.peripherals.map(\.connectionCount) == [0, 0])
    }

    /// A legacy-only controller takes one device; more is an error that names what to do.
    @Test func aLegacyControllerTakesOneDevice() throws {
        let bench = try SharedBench(devices: [ProbeDevice(), ProbeDevice()], sets: 0)
        #expect(bench.fatal.count == 1)
        #expect(bench.fatal.first?.contains("--controller") == true)
        #expect(bench.fatal.first?.contains("no LE Extended Advertising") == true)
    }

    @Test func moreDevicesThanSetsIsAnError() throws {
        let bench = try SharedBench(devices: [ProbeDevice(), ProbeDevice(), ProbeDevice()], sets: 2)
        #expect(bench.fatal.first?.contains("can advertise 2 sets at once, not 3") == true)
    }

    /// One stop for the controller: every device's links closed, then one Reset.
    @Test func stopClosesEveryDevicesLinksThenResetsOnce() throws {
        let bench = try SharedBench(devices: [ProbeDevice(), ProbeDevice()])
        bench.controller.connect(handle: 0x0040, peer: BluetoothAddress("F0:00:00:00:00:01")!, set: 0)
        bench.controller.connect(handle: 0x0041, peer: BluetoothAddress("F0:00:00:00:00:02")!, set: 1)
        let resetsBefore = bench.controller.commands(HCIOpcode.reset).count
        var stopped = false
        bench.host.controller.stop { stopped = true }
        #expect(bench.controller.commands(HCIOpcode.disconnect).map(\.parameters) == [[0x40, 0x00, 0x13], [0x41, 0x00, 0x13]])
        #expect(Set(bench.controller.enabledSets).isEmpty, "every set off")
        bench.controller.disconnect(handle: 0x0040)
        #expect(!stopped)
        bench.controller.disconnect(handle: 0x0041)
        #expect(stopped)
        #expect(bench.controller.commands(HCIOpcode.reset).count == resetsBefore + 1)
    }
}
