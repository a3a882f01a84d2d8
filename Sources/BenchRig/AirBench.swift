import BlemuCentral
import BlemuCore
import BlemuDevices
import BlemuHCI
import BlemuHost
import BlemuSimulator
import Logging

/// The in-process two-controller mode: a central and a peripheral (a heart-rate sensor), each on
/// its own simulated controller, joined by `SimulatedAir`. Nothing is scripted: the central's
/// host connects, its GATT client reads the device's database through both stacks, and either
/// side can end the link. `centralOutput`, when set, takes what the central's host sends
/// instead of its controller (a test that counts the host's own work alone).
public final class AirBench {
    public let scheduler = ManualScheduler()
    public let centralController = SimulatedController()
    public let peripheralController = SimulatedController()
    public let air: SimulatedAir
    public let central: CentralHost
    public let device = HeartRateDevice(seed: 7)
    public let peripheral: Peripheral
    public var centralOutput: ((UInt8, ArraySlice<UInt8>) -> Bool)?

    public init() throws {
        let logger = Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })
        centralController.address = BluetoothAddress("C0:DE:00:00:00:01")!
        peripheralController.address = BluetoothAddress("C0:DE:00:00:00:02")!
        air = SimulatedAir(centralController, peripheralController)
        let a = centralController, b = peripheralController
        weak var weakSelf: AirBench?
        central = try CentralHost(on: ControllerHost(controller: "central", scheduler: scheduler, logger: logger, output: {
            if let sink = weakSelf?.centralOutput { return sink($0, $1) }
            return a.output($0, $1)
        }))
        a.host = central.hci
        peripheral = try Peripheral(device: device, configuration: PeripheralConfiguration(name: "Air", controller: "peripheral"),
                                    scheduler: scheduler, logger: logger, output: { b.output($0, $1) })
        b.deliver = { [unowned peripheral] in peripheral.receive(packetType: $0, packet: $1) }
        weakSelf = self
        central.controller.controllerUp()
        peripheral.controllerUp()
        air.run()
    }

    public func connect(to address: BluetoothAddress) -> Result<CentralLink, CentralError>? {
        var result: Result<CentralLink, CentralError>?
        central.connect(to: LEAddress(address, isRandom: true)) { result = $0 }
        air.run()
        return result
    }
}
