import BlemuCore
import BlemuDevices
import BlemuStack
import BlemuTransport
import Testing

/// `--seed N`: each device's models draw from a seed derived from N and the device's place.
@Suite struct DeviceSeedTests {
    static func measurements(_ seed: UInt64?, index: Int = 0, count: Int = 20) throws -> [String] {
        var plan = DevicePlan(device: "heart-rate", spec: try ControllerSpec(parsing: "tcp:127.0.0.1:1"))
        plan.seed = seed.map { DevicePlanning.deviceSeed($0, index: index) }
        let device = try #require(DevicePlanning.makeDevice(plan) as? HeartRateDevice)
        return (0..<count).map { _ in String(describing: device.nextMeasurement(seconds: 1)) }
    }

    @Test func theSameSeedGivesTheSameHeartAndAnotherSeedOrPlaceAnother() throws {
        #expect(try Self.measurements(42) == Self.measurements(42))
        #expect(try Self.measurements(42) != Self.measurements(43))
        #expect(try Self.measurements(42, index: 0) != Self.measurements(42, index: 1))
        // Without --seed every start draws its own.
        #expect(try Self.measurements(nil) != Self.measurements(nil))
    }

    @Test func devicesSeedsFromOneSeedDiffer() {
        let seeds = (0..<64).map { DevicePlanning.deviceSeed(7, index: $0) }
        #expect(Set(seeds).count == 64)
        #expect(DevicePlanning.deviceSeed(7, index: 3) == DevicePlanning.deviceSeed(7, index: 3))
    }
}
