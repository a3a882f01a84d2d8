import BlemuCore
import BlemuATT
import BlemuDevices
import BlemuGATT
import BlemuHCI
@testable import BlemuHost
import BlemuSimulator
import Testing

/// The seams between a device's links (`DeviceLinks`), its advertising (`DeviceAdvertiser`) and
/// the `Peripheral` that composes them.
@Suite struct DeviceLinksTests {
    /// A link made in the central role is not the device's: disconnected with Remote User
    /// Terminated, never opened, not counted as refused for want of room.
    @Test func aLinkInTheCentralRoleIsClosedAndNotOpened() throws {
        let probe = ProbeDevice()
        let bench = try Bench(device: probe)
        bench.controller.connect(handle: 0x0040, peer: bench.central, central: true)
        #expect(bench.peripheral.connectionCount == 0 && bench.peripheral.links.connections[0x0040] == nil)
        #expect(probe.connected.isEmpty)
        #expect(bench.controller.commands(HCIOpcode.disconnect).map(\.parameters) == [[0x40, 0x00, 0x13]])
        #expect(bench.peripheral.statistics.linksRefused == 0)
    }

    /// Links beyond the limit count in the device's statistics (the Diagnostics value's `links_refused`).
    @Test func linksRefusedForWantOfRoomAreCounted() throws {
        let bench = try Bench(device: ProbeDevice(), maxConnections: 1)
        bench.controller.connect(handle: 0x0040, peer: bench.central)
        bench.controller.connect(handle: 0x0041, peer: BluetoothAddress("F0:00:00:00:00:01")!)
        #expect(bench.peripheral.connectionCount == 1)
        #expect(bench.peripheral.statistics.linksRefused == 1)
    }

    /// The advertiser asks the links whether another central may connect: a device with all
    /// its links open does not advertise, and advertises again when one closes.
    @Test func advertisingWaitsWhileTheLinksAreFull() throws {
        let bench = try Bench(device: ProbeDevice(), maxConnections: 1)
        #expect(bench.peripheral.isAdvertising)
        bench.controller.connect(handle: 0x0040, peer: bench.central)
        #expect(!bench.peripheral.isAdvertising)
        bench.controller.disconnect(handle: 0x0040)
        #expect(bench.peripheral.isAdvertising)
        #expect(bench.peripheral.advertisingInterval == AdvertisingTiming.defaultFastInterval)
    }
}

/// The control facade (`PeripheralControl`): what it plans, every link's server applies,
/// also on links opened after the plan was made.
@Suite struct PeripheralControlTests {
    @Test func aFaultPlannedThroughTheControlFacadeReachesLinksOpenedLater() throws {
        let bench = try Bench(device: HeartRateDevice(seed: 1))
        let location = BluetoothUUID(0x2A38)   // Body Sensor Location, readable
        let handle = bench.handle(of: location)
        #expect(bench.peripheral.control.injectFault(.error(.unlikelyError), characteristic: location, count: 1) == nil)
        #expect(bench.peripheral.control.faults.planned.count == 1)
        bench.controller.connect(handle: 0x0040, peer: bench.central)
        let read: [UInt8] = [0x0A, UInt8(handle & 0xFF), UInt8(handle >> 8)]
        #expect(bench.att(read).last == [0x01, 0x0A, UInt8(handle & 0xFF), UInt8(handle >> 8), 0x0E])
        #expect(bench.att(read).last?.first == 0x0B, "count 1: the next read is served")
    }
}
