import BlemuCentral
import BlemuCore
import BlemuDevices
import BlemuHCI
import BlemuHost
import BlemuSimulator
import Logging
import Testing

/// The in-process two-controller mode: a central and a peripheral, each on its own simulated
/// controller, joined by `SimulatedAir`. Nothing is scripted: the central's host connects, its
/// GATT client reads the device's database through both stacks, and either side can end the link.
final class AirBench {
    let scheduler = ManualScheduler()
    let centralController = SimulatedController()
    let peripheralController = SimulatedController()
    let air: SimulatedAir
    let central: CentralHost
    let device = HeartRateDevice(seed: 7)
    let peripheral: Peripheral

    init() throws {
        let logger = Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })
        centralController.address = BluetoothAddress("C0:DE:00:00:00:01")!
        peripheralController.address = BluetoothAddress("C0:DE:00:00:00:02")!
        air = SimulatedAir(centralController, peripheralController)
        let a = centralController, b = peripheralController
        central = try CentralHost(on: ControllerHost(controller: "central", scheduler: scheduler, logger: logger, output: { a.output($0, $1) }))
        a.host = central.hci
        peripheral = try Peripheral(device: device, configuration: PeripheralConfiguration(name: "Air", controller: "peripheral"),
                                    scheduler: scheduler, logger: logger, output: { b.output($0, $1) })
        b.deliver = { [unowned peripheral] in peripheral.receive(packetType: $0, packet: $1) }
        central.controller.controllerUp()
        peripheral.controllerUp()
        air.run()
    }

    func connect(to address: BluetoothAddress) -> Result<CentralLink, CentralError>? {
        var result: Result<CentralLink, CentralError>?
        central.connect(to: LEAddress(address, isRandom: true)) { result = $0 }
        air.run()
        return result
    }
}

@Suite struct SimulatedAirTests {
    @Test func aCentralReadsAPeripheralThroughTwoSimulatedControllers() throws {
        let bench = try AirBench()
        #expect(bench.central.isReady && bench.peripheral.hci.isReady)
        #expect(bench.peripheralController.isAdvertising)
        let address = try #require(bench.peripheralController.randomAddress)
        let link = try #require(try bench.connect(to: address)?.get())
        #expect(link.peer == LEAddress(address, isRandom: true))
        #expect(bench.peripheral.connectionCount == 1)

        // Body Sensor Location (0x2A38): chest, through the central's GATT client, both hosts'
        // L2CAP and the device's ATT server.
        var value: [UInt8]?
        link.client.read(bench.device.bodySensorLocation.valueHandle) { value = try? $0.get() }
        bench.air.run()
        #expect(value == [HeartRateDevice.chest])

        var reason: UInt8?
        link.onDisconnected = { reason = $0 }
        link.disconnect()
        bench.air.run()
        #expect(reason == HCIStatus.localHostTerminated)
        #expect(bench.peripheral.connectionCount == 0)
    }

    /// Nobody advertises at the address: the attempt is cancelled at the timeout (LE Create
    /// Connection Cancel, Vol 4, Part E, 7.8.13) and the central reports the failure.
    @Test func aConnectionToNobodyTimesOut() throws {
        let bench = try AirBench()
        var result: Result<CentralLink, CentralError>?
        bench.central.connect(to: LEAddress(BluetoothAddress("C0:DE:00:00:00:99")!, isRandom: true)) { result = $0 }
        bench.air.run()
        #expect(result == nil)
        bench.scheduler.advance(by: CentralHost.connectTimeout)
        bench.air.run()
        guard case .failure(let error) = try #require(result) else {
            Issue.record("connected to an address nobody advertises")
            return
        }
        #expect(error == .timeout)
        #expect(bench.peripheral.connectionCount == 0)
    }
}
