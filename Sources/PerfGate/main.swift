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

/// A cached read on the last link of the last device, with 100 devices of 32 links each on the
/// controller: it must cost what `gateCachedRead` costs with one (nothing per request walks the
/// devices or the links).
@inline(never) func gateScaledRead(_ rig: ScaleRig, _ iterations: Int) {
    let handle = rig.links.last?.last ?? 0
    let packet = ScaleRig.acl([0x0A] + Rig.le(rig.devices[rig.devices.count - 1].bodySensorLocation.valueHandle), handle: handle)
    for _ in 0..<iterations { rig.request(packet, handle: handle) }
}

let operations: [(name: String, run: (Rig, Int) -> Void)] = [
    ("cached-read", gateCachedRead), ("dynamic-read", gateDynamicRead), ("write", gateWrite),
    ("discovery", gateDiscovery), ("notification", gateNotification),
]

let arguments = CommandLine.arguments.dropFirst()
if arguments.first == "scale" {
    // Not for the gate: wall-clock figures of a release build (Docs/PERFORMANCE.md).
    runScaleMeasurements(Array(arguments.dropFirst()))
    exit(0)
}
let iterations = arguments.first.flatMap { Int($0) } ?? 1000
guard iterations > 0 else {
    print("usage: blemu-perf-gate [ITERATIONS] | blemu-perf-gate scale [REQUESTS]")
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
    let scaled = try ScaleRig(devices: 100, linksPerDevice: 32)
    guard scaled.linkCount == 3200 else {
        print("blemu-perf-gate: the scaled rig has \(scaled.linkCount) links, not 3200")
        exit(1)
    }
    gateScaledRead(scaled, 1)
    gateScaledRead(scaled, iterations)
    print("scaled-read done")
} catch {
    print("blemu-perf-gate: \(error)")
    exit(1)
}
