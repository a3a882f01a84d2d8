import BlemuBenchRig
import BlemuDevices
import BlemuGATT
import BlemuHost
import CAllocationCounter
import Testing

/// The request path allocates nothing (Docs/PERFORMANCE.md, "Allocations"): each ATT request
/// through the whole in-process stack (HCI, L2CAP, the ATT server, the database, the device's
/// handlers) and each notification a device sends, counted with a malloc interposer on this
/// thread after a warm-up. An allocation that comes back fails here.
@Suite struct AllocationTests {
    static let iterations = 200

    /// Heap allocations of `iterations` runs of `body` after one warm-up run.
    func allocations(_ body: () -> Void) -> Int {
        body()
        blemu_allocation_counting_start()
        for _ in 0..<Self.iterations { body() }
        return blemu_allocation_counting_stop()
    }

    @Test func theCounterCountsAllocations() {
        var kept: [[UInt8]] = []
        let count = allocations { kept.append([UInt8](repeating: 1, count: 64 + kept.count)) }
        #expect(count >= Self.iterations)
        #expect(kept.count == Self.iterations + 1)
    }

    @Test func cachedRead() throws {
        let rig = try Rig()
        let packet = Rig.acl([0x0A] + Rig.le(rig.device.bodySensorLocation.valueHandle))
        #expect(allocations { rig.request(packet) } == 0)
    }

    @Test func dynamicRead() throws {
        let rig = try Rig()
        let packet = Rig.acl([0x0A] + Rig.le(rig.device.battery.level.valueHandle))
        #expect(allocations { rig.request(packet) } == 0)
    }

    @Test func clientConfigurationRead() throws {
        let rig = try Rig()
        let packet = Rig.acl([0x0A] + Rig.le(rig.device.measurement.clientConfigurationHandle ?? 0))
        #expect(allocations { rig.request(packet) } == 0)
    }

    @Test func writeRequest() throws {
        let rig = try Rig()
        let packet = Rig.acl([0x12] + Rig.le(rig.device.controlPoint.valueHandle) + [HeartRateDevice.resetEnergyExpended])
        #expect(allocations { rig.request(packet) } == 0)
    }

    @Test func refusedWriteAndErrorResponse() throws {
        let rig = try Rig()
        // The device refuses 0x02 (Control Point Value Not Supported); 0xFFF0 is no handle.
        let refused = Rig.acl([0x12] + Rig.le(rig.device.controlPoint.valueHandle) + [0x02])
        let missing = Rig.acl([0x0A, 0xF0, 0xFF])
        #expect(allocations { rig.request(refused) } == 0)
        #expect(allocations { rig.request(missing) } == 0)
    }

    @Test func discovery() throws {
        let rig = try Rig()
        let services = Rig.acl([0x10, 0x01, 0x00, 0xFF, 0xFF, 0x00, 0x28])
        let characteristics = Rig.acl([0x08, 0x01, 0x00, 0xFF, 0xFF, 0x03, 0x28])
        let descriptors = Rig.acl([0x04, 0x01, 0x00, 0xFF, 0xFF])
        #expect(allocations { rig.request(services) } == 0)
        #expect(allocations { rig.request(characteristics) } == 0)
        #expect(allocations { rig.request(descriptors) } == 0)
    }

    @Test func deviceNotification() throws {
        let rig = try Rig()
        let cccd = rig.device.measurement.clientConfigurationHandle ?? 0
        rig.request(Rig.acl([0x12] + Rig.le(cccd) + [0x01, 0x00]))
        let measurement = HeartRateMeasurement(heartRate: 72, energyExpended: 10, rrIntervals: [800, 810])
        var sent = 0
        let count = allocations {
            if rig.peripheral.notify(rig.device.measurement, encode: { measurement.encode(into: &$0) }) { sent += 1 }
            rig.peripheral.hci.receiveEvent(rig.completed[...])
        }
        #expect(count == 0)
        #expect(sent == Self.iterations + 1)
    }
}
