import Benchmark
import BlemuATT
import BlemuCore
import BlemuDevices
import BlemuGATT
import BlemuHCI
import BlemuHost
import Logging

/// In-process ATT request handling through the whole stack: an ACL packet from the central
/// goes through HCI, L2CAP, the ATT server and the GATT database, and the response goes back
/// out as an ACL packet to a controller that completes every packet at once.
final class Rig {
    let scheduler = ManualScheduler()
    let peripheral: Peripheral
    let device = HeartRateDevice(seed: 42)
    var packetsOut = 0
    /// Number Of Completed Packets for one packet on handle 0x0040, prebuilt.
    let completed: [UInt8] = [0x13, 0x05, 0x01, 0x40, 0x00, 0x01, 0x00]

    init() {
        var out = 0
        let answers = Rig.answers
        var host: HCIHost?
        peripheral = try! Peripheral(
            device: device, configuration: PeripheralConfiguration(name: "Bench", controller: "bench"),
            scheduler: scheduler, logger: Logger(label: "bench", factory: { _ in SwiftLogNoOpLogHandler() }),
            output: { type, packet in
                if type == 0x01, let event = answers(packet) { host?.receiveEvent(event[...]) }
                if type == 0x02 { out += 1 }
                return true
            })
        host = peripheral.hci
        peripheral.controllerUp()
        // LE Connection Complete, handle 0x0040, peripheral role.
        peripheral.hci.receiveEvent([0x3E, 0x13, 0x01, 0x00, 0x40, 0x00, 0x01, 0x01, 0xF5, 0xF4, 0xF3, 0xF2, 0xF1, 0xF0,
                                     0x18, 0x00, 0x00, 0x00, 0x90, 0x01, 0x00][...])
        packetsOut = out
    }

    /// Command Complete for every command, with what the init sequence needs.
    static func answers(_ command: ArraySlice<UInt8>) -> [UInt8]? {
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

    @inline(__always)
    func request(_ packet: [UInt8]) {
        peripheral.hci.receiveACL(packet[...])
        peripheral.hci.receiveEvent(completed[...])
    }
}

let benchmarks: @Sendable () -> Void = {
    Benchmark.defaultConfiguration = .init(metrics: [.throughput, .wallClock, .mallocCountTotal, .instructions],
                                           scalingFactor: .kilo, maxDuration: .seconds(3), maxIterations: 1_000_000)

    Benchmark("Read Request, cached value (Body Sensor Location)") { benchmark in
        let rig = Rig()
        let handle = rig.device.bodySensorLocation.valueHandle
        let packet = Rig.acl([0x0A, UInt8(handle & 0xFF), UInt8(handle >> 8)])
        benchmark.startMeasurement()
        for _ in benchmark.scaledIterations { rig.request(packet) }
    }

    Benchmark("Read By Group Type (primary service discovery)") { benchmark in
        let rig = Rig()
        let packet = Rig.acl([0x10, 0x01, 0x00, 0xFF, 0xFF, 0x00, 0x28])
        benchmark.startMeasurement()
        for _ in benchmark.scaledIterations { rig.request(packet) }
    }

    Benchmark("Read Request, dynamic value (Battery Level)") { benchmark in
        let rig = Rig()
        let handle = rig.device.battery.level.valueHandle
        let packet = Rig.acl([0x0A, UInt8(handle & 0xFF), UInt8(handle >> 8)])
        benchmark.startMeasurement()
        for _ in benchmark.scaledIterations { rig.request(packet) }
    }

    Benchmark("Write Request (Heart Rate Control Point)") { benchmark in
        let rig = Rig()
        let handle = rig.device.controlPoint.valueHandle
        let packet = Rig.acl([0x12, UInt8(handle & 0xFF), UInt8(handle >> 8), 0x01])
        benchmark.startMeasurement()
        for _ in benchmark.scaledIterations { rig.request(packet) }
    }

    Benchmark("Error Response (Read of an invalid handle)") { benchmark in
        let rig = Rig()
        let packet = Rig.acl([0x0A, 0xFF, 0xFF])
        benchmark.startMeasurement()
        for _ in benchmark.scaledIterations { rig.request(packet) }
    }

    Benchmark("Notification (Heart Rate Measurement)") { benchmark in
        let rig = Rig()
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
