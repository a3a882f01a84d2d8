import BlemuATT
import BlemuCore
import BlemuDevice
import BlemuDevices
import BlemuGATT
import BlemuHCI
import BlemuSimulator
import BlemuHost
import BlemuL2CAP
import Logging
import Testing

/// Several devices on one controller's `PeripheralHost`, driven by hand through the simulated controller.
final class SharedBench {
    let scheduler = ManualScheduler()
    let controller = SimulatedController()
    let host: PeripheralHost
    let peripherals: [Peripheral]
    var fatal: [String] = []

    /// `queued`: the controller answers when `controller.flush()` is called, as a real one
    /// answers later, so what the host sends meanwhile waits in its command queue.
    init(devices: [Device], sets: UInt8 = 16, privacy: Bool = false, publicAddress: BluetoothAddress? = nil, queued: Bool = false) throws {
        if queued { controller.delivery = .queued }
        controller.extendedAdvertisingSets = sets
        if let publicAddress { controller.address = publicAddress }
        let controller = self.controller
        host = PeripheralHost(on: ControllerHost(controller: "scripted", scheduler: scheduler,
                                                 logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }),
                                                 output: { controller.output($0, $1) }))
        var made: [Peripheral] = []
        for (index, device) in devices.enumerated() {
            made.append(try Peripheral(device: device, configuration: PeripheralConfiguration(name: "Shared \(index)", controller: "scripted",
                                                                                             privacy: privacy, privateAddressTimeout: .seconds(60)),
                                       host: host, logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })))
        }
        peripherals = made
        host.onFatal = { [unowned self] in self.fatal.append($0) }
        controller.host = host.hci
        host.controller.controllerUp()
    }

    func att(_ pdu: [UInt8], handle: UInt16) -> [[UInt8]] {
        controller.sendL2CAP(handle: handle, cid: L2CAPChannel.att, pdu)
        return controller.takeL2CAP(handle: handle, cid: L2CAPChannel.att)
    }

    /// The GAP Device Name a central reads on `link`.
    func deviceName(on link: UInt16) -> String? {
        let response = att([0x08, 0x01, 0x00, 0xFF, 0xFF, 0x00, 0x2A], handle: link)   // Read By Type 0x2A00
        guard let pdu = response.first, pdu.first == 0x09, pdu.count > 4 else { return nil }
        return String(decoding: pdu[4...], as: UTF8.self)
    }
}

