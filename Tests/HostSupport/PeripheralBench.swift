import BlemuATT
import BlemuCore
import BlemuDevice
import BlemuDevices
import BlemuGATT
import BlemuHCI
import BlemuSimulator
import BlemuHost
import BlemuL2CAP
import BlemuSecurity
import Foundation
import Logging
import Testing

/// A device small enough to see every callback.
final class ProbeDevice: Device {
    static let deviceName = "probe"
    static let summary = "test device"
    let value = Characteristic(BluetoothUUID("11111111-2222-3333-4444-555555555555")!, properties: [.notify, .indicate])
    var profile = DeviceProfile(defaultName: "Probe", advertisedServices: [BluetoothUUID(0x180D)], appearance: 0)
    var context: DeviceContext?
    var readyCalls = 0
    var connected: [ATTPeer] = []
    var disconnected: [ATTPeer] = []
    var subscriptions: [(notify: Bool, indicate: Bool)] = []
    var services: [Service] { [Service(BluetoothUUID("11111111-2222-3333-4444-000000000000")!) { value }] }
    func start(context: DeviceContext) { self.context = context }
    func peripheralIsReady() { readyCalls += 1 }
    func peerConnected(_ peer: ATTPeer) { connected.append(peer) }
    func peerDisconnected(_ peer: ATTPeer) { disconnected.append(peer) }
    func subscriptionChanged(_ characteristic: Characteristic, peer: ATTPeer, notify: Bool, indicate: Bool) {
        subscriptions.append((notify, indicate))
    }
}

/// The whole stack — HCI host, L2CAP, ATT server, GATT database, device — in process,
/// against a scripted controller and a clock moved by hand.
final class Bench {
    let scheduler = ManualScheduler()
    let controller = SimulatedController()
    let peripheral: Peripheral
    let central = BluetoothAddress("F0:F1:F2:F3:F4:F5")!

    init(device: Device, name: String = "Test HR", maxConnections: Int = 32,
         logger: Logger = Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }),
         security: SecurityConfiguration = SecurityConfiguration(), privacy: Bool = false, rpaTimeout: Duration = .seconds(60),
         startDelay: Duration = .zero, configure: (SimulatedController) -> Void = { _ in }) throws {
        configure(controller)
        let controller = self.controller
        var configuration = PeripheralConfiguration(name: name, controller: "scripted", maxConnections: maxConnections, security: security,
                                                    privacy: privacy, privateAddressTimeout: rpaTimeout)
        configuration.startDelay = startDelay
        peripheral = try Peripheral(device: device, configuration: configuration,
                                    scheduler: scheduler, logger: logger,
                                    output: { controller.output($0, $1) })
        controller.host = peripheral.hci
        peripheral.controllerUp()
    }

    /// Sends an ATT PDU from the central and returns what the peripheral answered on ATT.
    @discardableResult
    func att(_ pdu: [UInt8], handle: UInt16 = 0x0040) -> [[UInt8]] {
        controller.sendL2CAP(handle: handle, cid: L2CAPChannel.att, pdu)
        return controller.takeL2CAP(handle: handle, cid: L2CAPChannel.att)
    }

    func handle(of uuid: BluetoothUUID) -> UInt16 { peripheral.database.characteristic(uuid)?.valueHandle ?? 0 }

    /// A long read as a GATT client does it (Vol 3, Part G, 4.8.3): Read, then Read Blob until short.
    func longRead(_ handle: UInt16, mtu: Int = 23, link: UInt16 = 0x0040) -> [UInt8] {
        var value: [UInt8] = []
        var response = att([0x0A, UInt8(handle & 0xFF), UInt8(handle >> 8)], handle: link)
        while let pdu = response.first, pdu.first == 0x0B || pdu.first == 0x0D {
            value += pdu.dropFirst()
            guard pdu.count - 1 == mtu - 1 else { break }
            let offset = UInt16(value.count)
            response = att([0x0C, UInt8(handle & 0xFF), UInt8(handle >> 8), UInt8(offset & 0xFF), UInt8(offset >> 8)], handle: link)
        }
        return value
    }
}

