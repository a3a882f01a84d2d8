import BlemuCore
import BlemuDevices
import BlemuProfile
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

    /// `--seed N` on a run's plans: each by its place, as `deviceSeed` says.
    @Test func everyPlanIsSeededByItsPlace() throws {
        let spec = try ControllerSpec(parsing: "tcp:127.0.0.1:1")
        var plans = [DevicePlan(device: "heart-rate", spec: spec), DevicePlan(device: "thermostat", spec: spec)]
        DevicePlanning.seed(&plans, with: 7)
        #expect(plans.map(\.seed) == [DevicePlanning.deviceSeed(7, index: 0), DevicePlanning.deviceSeed(7, index: 1)])
    }

    /// `--replay`: loop or once, and only where a plan is a recording.
    @Test func replayIsLoopOrOnceAndOnlyForARecording() throws {
        let spec = try ControllerSpec(parsing: "tcp:127.0.0.1:1")
        var plans = [DevicePlan(device: "heart-rate", spec: spec)]
        #expect(throws: PlanError.self) { try DevicePlanning.replay(&plans, mode: "once") }
        var recorded = DevicePlan(device: "recorded", spec: spec)
        recorded.profile = GATTProfile(name: "R", services: [])
        plans.append(recorded)
        #expect(throws: PlanError.self) { try DevicePlanning.replay(&plans, mode: "twice") }
        try DevicePlanning.replay(&plans, mode: "once")
        #expect(plans.map(\.profile?.replay) == [nil, "once"])
    }
}
