import BlemuCore
import BlemuDevice
import BlemuDevices
import BlemuHCI
import BlemuHost
import Testing
@testable import HostTestSupport

/// A fleet member's part of its fleet's start spread (`start_spread_s`, PeripheralConfiguration's
/// `startDelay`): the device advertises only once it has passed, so a thousand members do not
/// all begin in one instant.
@Suite struct StartDelayTests {
    static func enables(_ bench: Bench) -> Int {
        bench.controller.commands(HCIOpcode.leSetAdvertisingEnable).filter { $0.parameters == [1] }.count
            + bench.controller.commands(HCIOpcode.leSetExtendedAdvertisingEnable).filter { $0.parameters.first == 1 }.count
    }

    @Test(arguments: [false, true])
    func aDeviceWithAStartDelayAdvertisesOnlyOnceItHasPassed(broadcaster: Bool) throws {
        let device: Device = broadcaster ? IBeaconDevice() : HeartRateDevice(seed: 1)
        let bench = try Bench(device: device, startDelay: .milliseconds(1500))
        #expect(!bench.peripheral.isAdvertising && bench.peripheral.waitingToStart)
        #expect(Self.enables(bench) == 0)
        bench.scheduler.advance(by: .milliseconds(1499))
        #expect(!bench.peripheral.isAdvertising && Self.enables(bench) == 0)
        bench.scheduler.advance(by: .milliseconds(1))
        #expect(bench.peripheral.isAdvertising && !bench.peripheral.waitingToStart)
        #expect(Self.enables(bench) == 1)
    }

    @Test func withoutAStartDelayADeviceAdvertisesAtOnce() throws {
        let bench = try Bench(device: HeartRateDevice(seed: 1))
        #expect(bench.peripheral.isAdvertising && !bench.peripheral.waitingToStart)
    }

    /// `advertise off` during the delay stays off when it ends.
    @Test func advertisingTurnedOffDuringTheDelayStaysOff() throws {
        let bench = try Bench(device: IBeaconDevice(), startDelay: .seconds(1))
        bench.peripheral.setAdvertisingAllowed(false)
        bench.scheduler.advance(by: .seconds(2))
        #expect(!bench.peripheral.isAdvertising && Self.enables(bench) == 0)
        bench.peripheral.setAdvertisingAllowed(true)
        #expect(bench.peripheral.isAdvertising)
    }

    /// `advertise on` during the delay does not cut it short: the spread is the fleet's plan.
    @Test func advertisingTurnedOnDuringTheDelayWaitsForIt() throws {
        let bench = try Bench(device: IBeaconDevice(), startDelay: .seconds(1))
        bench.peripheral.setAdvertisingAllowed(true)
        #expect(!bench.peripheral.isAdvertising)
        bench.scheduler.advance(by: .seconds(1))
        #expect(bench.peripheral.isAdvertising)
    }
}
