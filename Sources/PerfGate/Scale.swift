import BlemuBenchRig
import BlemuCore
import BlemuDevices
import BlemuGATT
import BlemuHCI
import BlemuHost
import CLinux
import CLinux

#if canImport(Glibc)
import Glibc
#endif

/// `blemu-perf-gate scale [REQUESTS]`: the cost of one request in ns (wall clock, best of 5 runs) and
/// the heap each device and each link holds, at 1 and 100 devices by 1 and 32 links, in process
/// (`ScaleRig`). Requests are spread over every link of every device in turn, so a walk over
/// devices or links per request would show as a slope. Measure a release build.
func runScaleMeasurements(_ arguments: [String]) {
    let requests = arguments.first.flatMap { Int($0) } ?? 200_000
    print("| devices × links | cached read, one link | cached read, every link in turn | dynamic read, every link | write, every link | heap KiB/device | heap KiB/link |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for (devices, links) in [(1, 1), (1, 32), (100, 1), (100, 32)] {
        // One link each first, then the rig measured: the heap a device holds (with one
        // link), and what each further link adds.
        let before = heapInUse()
        guard let single = try? ScaleRig(devices: devices, linksPerDevice: 1) else { fatalError("rig") }
        let withOne = heapInUse()
        guard let full = links == 1 ? single : try? ScaleRig(devices: devices, linksPerDevice: links) else { fatalError("rig") }
        let withAll = heapInUse()
        let perDevice = Double(withOne - before) / Double(devices) / 1024
        let perLink = links == 1 ? nil : Double(withAll - withOne - (withOne - before)) / Double(devices * (links - 1)) / 1024
        func cost(oneLink: Bool = false, _ packetFor: (HeartRateDevice) -> [UInt8]) -> Double {
            var targets: [(packet: [UInt8], handle: UInt16)] = []
            for (device, handles) in zip(full.devices, full.links) {
                for handle in handles {
                    var packet = packetFor(device)
                    // The ATT PDU is the same; only the ACL header's handle differs.
                    packet[0] = UInt8(handle & 0xFF)
                    packet[1] = UInt8(handle >> 8) | (packet[1] & 0xF0)
                    targets.append((packet, handle))
                }
            }
            if oneLink { targets = [targets[targets.count - 1]] }
            for target in targets { full.request(target.packet, handle: target.handle) }
            var best = Double.infinity
            for _ in 0..<5 {
                let start = nanoseconds()
                var index = 0
                for _ in 0..<requests {
                    let target = targets[index]
                    full.request(target.packet, handle: target.handle)
                    index += 1
                    if index == targets.count { index = 0 }
                }
                best = min(best, Double(nanoseconds() - start) / Double(requests))
            }
            return best
        }
        let one = cost(oneLink: true) { ScaleRig.acl([0x0A] + Rig.le($0.bodySensorLocation.valueHandle), handle: 0) }
        let cached = cost { ScaleRig.acl([0x0A] + Rig.le($0.bodySensorLocation.valueHandle), handle: 0) }
        let dynamic = cost { ScaleRig.acl([0x0A] + Rig.le($0.battery.level.valueHandle), handle: 0) }
        let write = cost { ScaleRig.acl([0x12] + Rig.le($0.controlPoint.valueHandle) + [0x01], handle: 0) }
        print("| \(devices) × \(links) | \(format(one)) | \(format(cached)) | \(format(dynamic)) | \(format(write)) | \(format(perDevice)) | \(perLink.map(format) ?? "") |")
        withExtendedLifetime(single) {}
    }
}

private func nanoseconds() -> UInt64 {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
}

private func heapInUse() -> Int { Int(clinux_heap_in_use()) }

/// One decimal.
private func format(_ value: Double) -> String {
    let tenths = Int((value * 10).rounded())
    return "\(tenths / 10).\(abs(tenths % 10))"
}
