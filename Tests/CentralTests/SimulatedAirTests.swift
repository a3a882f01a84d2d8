import BlemuBenchRig
import BlemuCentral
import BlemuCore
import BlemuDevices
import BlemuHCI
import BlemuHost
import BlemuSimulator
import Logging
import Testing
@testable import HostTestSupport

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
