import BlemuCore
import BlemuDevices
import BlemuGATT
import BlemuHCI
import BlemuHost
import BlemuSimulator
import Logging

/// Many heart-rate sensors on one controller, each with many centrals connected, in process:
/// what one blemu serving 100 devices does per request as the devices and links add up
/// (Docs/PERFORMANCE.md, "Many devices and links"). The controller has LE Extended Advertising,
/// one set per device; each link comes from its device's set (LE Connection Complete, then LE
/// Advertising Set Terminated, Vol 4, Part E, 7.7.65.18), and it answers every command and
/// completes every packet at once, like `Rig`'s (the same `SimulatedController`).
public final class ScaleRig {
    public let scheduler = ManualScheduler()
    public let controller: SimulatedController
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
        // 240 advertising sets (Vol 4, Part E, 7.8.58), 0 dBm, no LE Data Length Extension.
        let controller = SimulatedController.benchmark()
        controller.extendedAdvertisingSets = 240
        controller.advertisingTxPower = 0
        controller.supportsDataLengthExtension = false
        self.controller = controller
        host = PeripheralHost(on: ControllerHost(controller: "scale", scheduler: scheduler, logger: logger,
                                                 transmitBufferCapacity: PeripheralHost.largestPDU, output: { type, packet in
            type == 0x02 ? true : controller.output(type, packet)
        }))
        controller.host = host.hci
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
        host.controller.controllerUp()
        var links: [[UInt16]] = []
        var nextHandle: UInt16 = 0x0001
        for peripheral in peripherals {
            var handles: [UInt16] = []
            for link in 0..<linksPerDevice {
                guard let set = peripheral.advertisingSet else { break }
                let handle = nextHandle
                nextHandle += 1
                // A central's random address per link; LE Advertising Set Terminated: the link
                // came from this device's set.
                let central = try BluetoothAddress(littleEndian: [UInt8(link), UInt8(handle & 0xFF), UInt8(handle >> 8), 0xF2, 0xF1, 0xC0])
                controller.connect(handle: handle, peer: central, set: set)
                handles.append(handle)
            }
            links.append(handles)
        }
        self.links = links
    }

    /// An ACL packet carrying one ATT PDU on CID 4 of `handle`.
    public static func acl(_ att: [UInt8], handle: UInt16) -> [UInt8] { attPacket(att, handle: handle) }

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
