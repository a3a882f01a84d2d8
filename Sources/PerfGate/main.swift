import BlemuBenchRig
import BlemuCore
import BlemuDevices
import BlemuGATT
import BlemuHCI
import BlemuHost
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// The hot paths the performance gate counts (scripts/perf-gate, Docs/PERFORMANCE.md): each
/// runs `iterations` times in a function of its own, so callgrind can count the instructions
/// of exactly that loop, whatever start-up costs.
@inline(never) func gateCachedRead(_ rig: Rig, _ iterations: Int) {
    let packet = Rig.acl([0x0A] + Rig.le(rig.device.bodySensorLocation.valueHandle))
    for _ in 0..<iterations { rig.request(packet) }
}

@inline(never) func gateDynamicRead(_ rig: Rig, _ iterations: Int) {
    let packet = Rig.acl([0x0A] + Rig.le(rig.device.battery.level.valueHandle))
    for _ in 0..<iterations { rig.request(packet) }
}

@inline(never) func gateWrite(_ rig: Rig, _ iterations: Int) {
    let packet = Rig.acl([0x12] + Rig.le(rig.device.controlPoint.valueHandle) + [0x01])
    for _ in 0..<iterations { rig.request(packet) }
}

@inline(never) func gateDiscovery(_ rig: Rig, _ iterations: Int) {
    let packet = Rig.acl([0x10, 0x01, 0x00, 0xFF, 0xFF, 0x00, 0x28])
    for _ in 0..<iterations { rig.request(packet) }
}

@inline(never) func gateNotification(_ rig: Rig, _ iterations: Int) {
    let value: [UInt8] = [0x16, 72, 0x00, 0x04]
    for _ in 0..<iterations {
        rig.peripheral.notify(rig.device.measurement, value: value)
        rig.peripheral.hci.receiveEvent(rig.completed[...])
    }
}

let operations: [(name: String, run: (Rig, Int) -> Void)] = [
    ("cached-read", gateCachedRead), ("dynamic-read", gateDynamicRead), ("write", gateWrite),
    ("discovery", gateDiscovery), ("notification", gateNotification),
]

let arguments = CommandLine.arguments.dropFirst()
let iterations = arguments.first.flatMap { Int($0) } ?? 1000
guard iterations > 0 else {
    print("usage: blemu-perf-gate [ITERATIONS]")
    exit(64)
}
do {
    for operation in operations {
        // A rig per operation, warmed once: caches and buffers settle before the counted loop.
        let rig = try Rig()
        if operation.name == "notification" {
            let cccd = rig.device.measurement.clientConfigurationHandle ?? 0
            rig.request(Rig.acl([0x12] + Rig.le(cccd) + [0x01, 0x00]))
        }
        operation.run(rig, 1)
        operation.run(rig, iterations)
        print("\(operation.name) done")
    }
} catch {
    print("blemu-perf-gate: \(error)")
    exit(1)
}
