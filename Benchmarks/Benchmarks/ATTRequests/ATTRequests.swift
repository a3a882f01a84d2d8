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
}
