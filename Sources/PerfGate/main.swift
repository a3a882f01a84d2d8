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
/// of exactly that loop, whatever start-up costs. In process, through the whole stack: an ACL
/// packet in, through HCI, L2CAP, the ATT server and the database, the answer out as an ACL
/// packet to a controller that completes every packet at once.
final class Rig {
    let scheduler = ManualScheduler()
    let peripheral: Peripheral
    let device = HeartRateDevice(seed: 42)
    /// Number Of Completed Packets for one packet on handle 0x0040.
    let completed: [UInt8] = [0x13, 0x05, 0x01, 0x40, 0x00, 0x01, 0x00]

    init() throws {
        var host: HCIHost?
        peripheral = try Peripheral(
            device: device, configuration: PeripheralConfiguration(name: "Gate", controller: "gate"),
            scheduler: scheduler, logger: Logger(label: "gate", factory: { _ in SwiftLogNoOpLogHandler() }),
            output: { type, packet in
                if type == 0x01, let event = Rig.answer(packet) { host?.receiveEvent(event[...]) }
                return true
            })
        host = peripheral.hci
        peripheral.controllerUp()
        // LE Connection Complete, handle 0x0040, peripheral role.
        peripheral.hci.receiveEvent([0x3E, 0x13, 0x01, 0x00, 0x40, 0x00, 0x01, 0x01, 0xF5, 0xF4, 0xF3, 0xF2, 0xF1, 0xF0,
                                     0x18, 0x00, 0x00, 0x00, 0x90, 0x01, 0x00][...])
    }

    /// Command Complete for every command, with what the init sequence needs.
    static func answer(_ command: ArraySlice<UInt8>) -> [UInt8]? {
        guard command.count >= 2 else { return nil }
        let opcode = UInt16(command[command.startIndex]) | UInt16(command[command.startIndex + 1]) << 8
        var parameters: [UInt8] = [0x01, UInt8(opcode & 0xFF), UInt8(opcode >> 8), 0x00]
        switch opcode {
        case HCIOpcode.readBDAddr: parameters += [1, 2, 3, 4, 5, 6]
        case HCIOpcode.leReadLocalSupportedFeatures: parameters += [0, 0, 0, 0, 0, 0, 0, 0]
        case HCIOpcode.leReadBufferSize: parameters += [251, 0, 8]
        case HCIOpcode.disconnect, HCIOpcode.leSetDataLength: return [0x0F, 0x04, 0x00, 0x01, UInt8(opcode & 0xFF), UInt8(opcode >> 8)]
        default: break
        }
        return [0x0E, UInt8(parameters.count)] + parameters
    }

    /// An ACL packet carrying one ATT PDU on CID 4 of handle 0x0040.
    static func acl(_ att: [UInt8]) -> [UInt8] {
        var frame: [UInt8] = []
        frame.appendLE(UInt16(att.count))
        frame.appendLE(UInt16(4))
        frame += att
        var packet: [UInt8] = []
        ACLPacket(handle: 0x0040, boundary: .firstFlushable, data: frame[...]).encode(into: &packet)
        return packet
    }

    static func le(_ handle: UInt16) -> [UInt8] { [UInt8(handle & 0xFF), UInt8(handle >> 8)] }

    func request(_ packet: [UInt8]) {
        peripheral.hci.receiveACL(packet[...])
        peripheral.hci.receiveEvent(completed[...])
    }
}

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
