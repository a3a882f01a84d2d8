import Benchmark
import BlemuBenchRig
import BlemuATT
import BlemuCore
import BlemuDevices
import BlemuGATT
import BlemuHCI
import BlemuHost
import Logging

// In-process ATT request handling through the whole stack, on BlemuBenchRig's `Rig` (shared
// with the performance gate, Sources/PerfGate).

let benchmarks: @Sendable () -> Void = {
    Benchmark.defaultConfiguration = .init(metrics: [.throughput, .wallClock, .mallocCountTotal, .instructions],
                                           scalingFactor: .kilo, maxDuration: .seconds(3), maxIterations: 1_000_000)

    Benchmark("Read Request, cached value (Body Sensor Location)") { benchmark in
        let rig = try! Rig()
        let handle = rig.device.bodySensorLocation.valueHandle
        let packet = Rig.acl([0x0A, UInt8(handle & 0xFF), UInt8(handle >> 8)])
        benchmark.startMeasurement()
        for _ in benchmark.scaledIterations { rig.request(packet) }
    }

    Benchmark("Read By Group Type (primary service discovery)") { benchmark in
        let rig = try! Rig()
        let packet = Rig.acl([0x10, 0x01, 0x00, 0xFF, 0xFF, 0x00, 0x28])
        benchmark.startMeasurement()
        for _ in benchmark.scaledIterations { rig.request(packet) }
    }

    Benchmark("Read Request, dynamic value (Battery Level)") { benchmark in
        let rig = try! Rig()
        let handle = rig.device.battery.level.valueHandle
        let packet = Rig.acl([0x0A, UInt8(handle & 0xFF), UInt8(handle >> 8)])
        benchmark.startMeasurement()
        for _ in benchmark.scaledIterations { rig.request(packet) }
    }

    Benchmark("Write Request (Heart Rate Control Point)") { benchmark in
        let rig = try! Rig()
        let handle = rig.device.controlPoint.valueHandle
        let packet = Rig.acl([0x12, UInt8(handle & 0xFF), UInt8(handle >> 8), 0x01])
        benchmark.startMeasurement()
        for _ in benchmark.scaledIterations { rig.request(packet) }
    }

    Benchmark("Error Response (Read of an invalid handle)") { benchmark in
        let rig = try! Rig()
        let packet = Rig.acl([0x0A, 0xFF, 0xFF])
        benchmark.startMeasurement()
        for _ in benchmark.scaledIterations { rig.request(packet) }
    }

    Benchmark("Notification (Heart Rate Measurement)") { benchmark in
        let rig = try! Rig()
        let cccd = rig.device.measurement.clientConfigurationHandle ?? 0
        rig.request(Rig.acl([0x12, UInt8(cccd & 0xFF), UInt8(cccd >> 8), 0x01, 0x00]))
        let value: [UInt8] = [0x16, 72, 0x00, 0x04]
        benchmark.startMeasurement()
        for _ in benchmark.scaledIterations {
            rig.peripheral.notify(rig.device.measurement, value: value)
            rig.peripheral.hci.receiveEvent(rig.completed[...])
        }
    }

    Benchmark("Notification, encoded by the device into the stack's buffer (Heart Rate Measurement)") { benchmark in
        let rig = try! Rig()
        let cccd = rig.device.measurement.clientConfigurationHandle ?? 0
        rig.request(Rig.acl([0x12, UInt8(cccd & 0xFF), UInt8(cccd >> 8), 0x01, 0x00]))
        let measurement = HeartRateMeasurement(heartRate: 72, energyExpended: 10, rrIntervals: [800, 810])
        benchmark.startMeasurement()
        for _ in benchmark.scaledIterations {
            rig.peripheral.notify(rig.device.measurement, encode: { measurement.encode(into: &$0) })
            rig.peripheral.hci.receiveEvent(rig.completed[...])
        }
    }

    // Many devices and links (Docs/PERFORMANCE.md, "Many devices and links"): the same cached
    // read with 1 device of 1 link and 100 devices of 32 links on the controller, on one link
    // and spread over all 3200 in turn.
    for (devices, links) in [(1, 1), (100, 32)] {
        Benchmark("Read Request, cached value, \(devices) device(s) × \(links) link(s), one link") { benchmark in
            let rig = try! ScaleRig(devices: devices, linksPerDevice: links)
            let handle = rig.links.last?.last ?? 0
            let value = rig.devices[rig.devices.count - 1].bodySensorLocation.valueHandle
            let packet = ScaleRig.acl([0x0A, UInt8(value & 0xFF), UInt8(value >> 8)], handle: handle)
            benchmark.startMeasurement()
            for _ in benchmark.scaledIterations { rig.request(packet, handle: handle) }
        }
        Benchmark("Read Request, cached value, \(devices) device(s) × \(links) link(s), every link in turn") { benchmark in
            let rig = try! ScaleRig(devices: devices, linksPerDevice: links)
            var targets: [(packet: [UInt8], handle: UInt16)] = []
            for (device, handles) in zip(rig.devices, rig.links) {
                let value = device.bodySensorLocation.valueHandle
                for handle in handles {
                    targets.append((ScaleRig.acl([0x0A, UInt8(value & 0xFF), UInt8(value >> 8)], handle: handle), handle))
                }
            }
            var index = 0
            benchmark.startMeasurement()
            for _ in benchmark.scaledIterations {
                rig.request(targets[index].packet, handle: targets[index].handle)
                index = index + 1 == targets.count ? 0 : index + 1
            }
        }
    }
}
