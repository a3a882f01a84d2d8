import BlemuCore
import BlemuDevice
import BlemuDevices
import BlemuGATT
import BlemuHCI
import BlemuHost
import BlemuSimulator
import Logging

/// One heart-rate sensor connected on handle 0x0040, in process, for the benchmarks
/// (Benchmarks/) and the performance gate (Sources/PerfGate).
public typealias Rig = DeviceRig<HeartRateDevice>

extension DeviceRig where D == HeartRateDevice {
    public convenience init() throws { try self.init(device: HeartRateDevice(seed: 42)) }
}

/// One device connected on handle 0x0040, in process: an ACL packet in, through HCI, L2CAP,
/// the ATT server and the database, the answer out as an ACL packet to the simulated controller,
/// which answers every command at once. Nothing is mocked above the controller. The request
/// path bypasses the controller: what the peripheral sends is only counted (`output`) and the
/// completion comes back from `request`, so the gate measures the host alone.
public final class DeviceRig<D: Device> {
    public let scheduler = ManualScheduler()
    public let controller: SimulatedController
    public let peripheral: Peripheral
    /// The peripheral's HCI host, held here so a request does not fetch it through the peripheral.
    private let hci: HCIHost
    public let device: D
    /// Number Of Completed Packets for one packet on handle 0x0040.
    public let completed: [UInt8] = [0x13, 0x05, 0x01, 0x40, 0x00, 0x01, 0x00]

    /// What the peripheral sent, when asked for (`recordsOutput`).
    public let output: OutputRecorder?

    public init(device: D, recordsOutput: Bool = false) throws {
        self.device = device
        let recorder = recordsOutput ? OutputRecorder() : nil
        output = recorder
        let controller = SimulatedController.benchmark()
        controller.supportsDataLengthExtension = false
        self.controller = controller
        peripheral = try Peripheral(
            device: device, configuration: PeripheralConfiguration(name: "Gate", controller: "gate"),
            scheduler: scheduler, logger: Logger(label: "gate", factory: { _ in SwiftLogNoOpLogHandler() }),
            output: { type, packet in
                if type == 0x02 {
                    recorder?.record(packet)
                    return true
                }
                return controller.output(type, packet)
            })
        controller.host = peripheral.hci
        hci = peripheral.hci
        peripheral.controllerUp()
        // Handle 0x0040, peripheral role, from F0:F1:F2:F3:F4:F5.
        controller.connect(handle: 0x0040, peer: BluetoothAddress("F0:F1:F2:F3:F4:F5")!)
    }

    /// An ACL packet carrying one ATT PDU on CID 4 of handle 0x0040.
    public static func acl(_ att: [UInt8]) -> [UInt8] { attPacket(att, handle: 0x0040) }

    public static func le(_ handle: UInt16) -> [UInt8] { [UInt8(handle & 0xFF), UInt8(handle >> 8)] }

    /// One request in, its answer out, and the controller's credit back.
    public func request(_ packet: [UInt8]) {
        hci.receiveACL(packet[...])
        hci.receiveEvent(completed[...])
    }
}

/// The ACL packets a rig's peripheral sent, kept without allocating: how many, how many began
/// an ATT PDU of each opcode, and the last one's bytes.
public final class OutputRecorder {
    public private(set) var packets = 0
    private var opcodes = [Int](repeating: 0, count: 256)
    public private(set) var last: [UInt8] = []

    init() { last.reserveCapacity(4 + 251) }

    /// First fragments on the ATT channel (CID 4) that began with `opcode`.
    public func count(_ opcode: UInt8) -> Int { opcodes[Int(opcode)] }

    func record(_ packet: ArraySlice<UInt8>) {
        packets += 1
        last.removeAll(keepingCapacity: true)
        last.append(contentsOf: packet)
        // ACL header (4), then on a first fragment the L2CAP header (length, CID 4) and the PDU.
        guard last.count > 8, last[1] & 0x30 != 0x10, last[6] == 0x04, last[7] == 0x00 else { return }
        opcodes[Int(last[8])] += 1
    }
}

/// An ACL packet from the central carrying one ATT PDU on CID 4 of `handle`.
func attPacket(_ att: [UInt8], handle: UInt16) -> [UInt8] {
    var frame: [UInt8] = []
    frame.appendLE(UInt16(att.count))
    frame.appendLE(UInt16(4))
    frame += att
    var packet: [UInt8] = []
    ACLPacket(handle: handle, boundary: .firstFlushable, data: frame[...]).encode(into: &packet)
    return packet
}

extension SimulatedController {
    /// The benchmarks' controller: 8 ACL buffers of 251 bytes, answers at once, nothing
    /// recorded, and no completions of its own (the rigs send them, outside the measured path).
    static func benchmark() -> SimulatedController {
        let controller = SimulatedController()
        controller.aclBufferSize = 251
        controller.aclBufferCount = 8
        controller.recordsTraffic = false
        controller.autoComplete = false
        return controller
    }
}
