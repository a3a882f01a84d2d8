import BlemuCore
import BlemuDevices
import BlemuGATT
import BlemuHCI
import BlemuHost
import Logging

/// Many heart-rate sensors on one controller, each with many centrals connected, in process:
/// what one blemu serving 100 devices does per request as the devices and links add up
/// (Docs/PERFORMANCE.md, "Many devices and links"). The controller has LE Extended Advertising,
/// one set per device; each link comes from its device's set (LE Connection Complete, then LE
/// Advertising Set Terminated, Vol 4, Part E, 7.7.65.18), and it answers every command and
/// completes every packet at once, like `Rig`'s.
public final class ScaleRig {
    public let scheduler = ManualScheduler()
    public let host: PeripheralHost
    public let devices: [HeartRateDevice]
    public let peripherals: [Peripheral]
    /// The connection handles of each device's links, by device.
    public let links: [[UInt16]]
    private var completedEvent: [UInt8] = [0x13, 0x05, 0x01, 0x00, 0x00, 0x01, 0x00]

    /// - Parameters:
    ///   - deviceCount: devices on the controller (at most 240 sets, Vol 4, Part E, 7.8.58).
    ///   - linksPerDevice: centrals connected to each (at most 32, a device's default limit).
    public init(devices deviceCount: Int, linksPerDevice: Int) throws {
        precondition((1...240).contains(deviceCount) && (1...32).contains(linksPerDevice))
        let logger = Logger(label: "scale", factory: { _ in SwiftLogNoOpLogHandler() })
        var hci: HCIHost?
        host = PeripheralHost(controller: "scale", scheduler: scheduler, logger: logger, output: { type, packet in
            if type == 0x01, let event = ScaleRig.answer(packet) { hci?.receiveEvent(event[...]) }
            return true
        })
        hci = host.hci
        var devices: [HeartRateDevice] = []
        var peripherals: [Peripheral] = []
        for index in 0..<deviceCount {
            let device = HeartRateDevice(seed: UInt64(index + 1))
            devices.append(device)
            peripherals.append(try Peripheral(
                device: device, configuration: PeripheralConfiguration(name: "Scale \(index)", controller: "scale"),
                host: host, logger: logger))
        }
        self.devices = devices
        self.peripherals = peripherals
        host.controllerUp()
        var links: [[UInt16]] = []
        var nextHandle: UInt16 = 0x0001
        for peripheral in peripherals {
            var handles: [UInt16] = []
            for link in 0..<linksPerDevice {
                guard let set = peripheral.advertisingSet else { break }
                let handle = nextHandle
                nextHandle += 1
                // LE Connection Complete, peripheral role, a central's random address per link.
                var connected: [UInt8] = [0x3E, 0x13, 0x01, 0x00, UInt8(handle & 0xFF), UInt8(handle >> 8), 0x01, 0x01,
                                          UInt8(link), UInt8(handle & 0xFF), UInt8(handle >> 8), 0xF2, 0xF1, 0xC0]
                connected += [0x18, 0x00, 0x00, 0x00, 0x90, 0x01, 0x00]
                host.hci.receiveEvent(connected[...])
                // LE Advertising Set Terminated: the link came from this device's set.
                host.hci.receiveEvent([0x3E, 0x06, 0x12, 0x00, set, UInt8(handle & 0xFF), UInt8(handle >> 8), 0x00][...])
                handles.append(handle)
            }
            links.append(handles)
        }
        self.links = links
    }

    /// Command Complete (or Status) for every command, with what initialization and extended
    /// advertising need: 240 advertising sets, 8 ACL buffers of 251 bytes.
    public static func answer(_ command: ArraySlice<UInt8>) -> [UInt8]? {
        guard command.count >= 2 else { return nil }
        let opcode = UInt16(command[command.startIndex]) | UInt16(command[command.startIndex + 1]) << 8
        var parameters: [UInt8] = [0x01, UInt8(opcode & 0xFF), UInt8(opcode >> 8), 0x00]
        switch opcode {
        case HCIOpcode.readBDAddr: parameters += [1, 2, 3, 4, 5, 6]
        case HCIOpcode.readLocalSupportedCommands:
            var bits = [UInt8](repeating: 0xFF, count: 64)
            bits[41] = 0   // no LE Read Buffer Size v2
            parameters += bits
        case HCIOpcode.leReadLocalSupportedFeatures: parameters += [0, 0x10, 0, 0, 0, 0, 0, 0]   // bit 12: extended advertising
        case HCIOpcode.leReadNumberOfSupportedAdvertisingSets: parameters.append(240)
        case HCIOpcode.leSetExtendedAdvertisingParameters: parameters.append(0)   // selected TX power, 0 dBm
        case HCIOpcode.leReadBufferSize: parameters += [251, 0, 8]
        case HCIOpcode.disconnect, HCIOpcode.leSetDataLength, HCIOpcode.leConnectionUpdate:
            return [0x0F, 0x04, 0x00, 0x01, UInt8(opcode & 0xFF), UInt8(opcode >> 8)]
        default: break
        }
        return [0x0E, UInt8(parameters.count)] + parameters
    }

    /// An ACL packet carrying one ATT PDU on CID 4 of `handle`.
    public static func acl(_ att: [UInt8], handle: UInt16) -> [UInt8] {
        var frame: [UInt8] = []
        frame.appendLE(UInt16(att.count))
        frame.appendLE(UInt16(4))
        frame += att
        var packet: [UInt8] = []
        ACLPacket(handle: handle, boundary: .firstFlushable, data: frame[...]).encode(into: &packet)
        return packet
    }

    /// One request in on `handle`, its answer out, and the controller's credit back.
    public func request(_ packet: [UInt8], handle: UInt16) {
        host.hci.receiveACL(packet[...])
        completedEvent[3] = UInt8(handle & 0xFF)
        completedEvent[4] = UInt8(handle >> 8)
        host.hci.receiveEvent(completedEvent[...])
    }

    /// Links open across every device.
    public var linkCount: Int { peripherals.reduce(0) { $0 + $1.connectionCount } }
}
