import BlemuConfig
import BlemuCore
@testable import BlemuScenario
import BlemuStack
import BlemuTestSupport
import BlemuTransport
import Testing

/// `blemu run`'s scenarios (`RunScenarios`): which files are read in which order, and what their
/// outcomes come to.
@Suite struct RunScenariosTests {
    private func plan(_ device: String, scenario: String? = nil) throws -> DevicePlan {
        var plan = DevicePlan(device: device, spec: try ControllerSpec(parsing: "tcp:127.0.0.1:1"))
        plan.scenario = scenario
        return plan
    }

    @Test func theRunsScenarioComesFirstThenEachPlansInPlanOrder() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        dir.write("run.yaml", "steps:\n  - log: the run's\n")
        dir.write("lock.yaml", "steps:\n  - log: the lock's\n")
        dir.write("heart.yaml", "steps:\n  - log: the heart's\n")
        let plans = [try plan("heart-rate", scenario: dir.file("heart.yaml")), try plan("thermostat"),
                     try plan("lock", scenario: dir.file("lock.yaml"))]
        let loaded = try RunScenarios.load(path: dir.file("run.yaml"), plans: plans)
        #expect(loaded.map(\.scenario.file) == [dir.file("run.yaml"), dir.file("heart.yaml"), dir.file("lock.yaml")])
        #expect(loaded.map(\.plan) == [nil, 0, 2])
        #expect(try RunScenarios.load(path: nil, plans: [try plan("thermostat")]).isEmpty)
    }

    @Test func aMistakeInAnyFileIsToldWithItsFileAndLine() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        dir.write("bad.yaml", "steps:\n  - log: fine\n  nonsense\n")
        #expect(throws: ScenarioError.self) {
            _ = try RunScenarios.load(path: nil, plans: [try plan("lock", scenario: dir.file("bad.yaml"))])
        }
        do {
            _ = try RunScenarios.load(path: dir.file("missing.yaml"), plans: [])
            Issue.record("a missing file was read")
        } catch {
            #expect(error.description.contains("missing.yaml"))
        }
    }

    @Test func theVerdictTellsEachScenarioAndPassesOnlyWhenAllPassed() {
        let failure = ScenarioFailure(location: "b.yaml:3", step: "wait: connected", expected: "connected", happened: "nothing", events: [])
        let passed = RunScenarios.verdict([("a.yaml", .passed(steps: 2)), ("c.yaml", .passed(steps: 1))])
        #expect(passed.passed && passed.lines == [.passed("scenario a.yaml: passed (2 step(s))"), .passed("scenario c.yaml: passed (1 step(s))")])
        // One failed: the others it stopped are not told again, but did not pass.
        let failed = RunScenarios.verdict([("a.yaml", .passed(steps: 2)), ("b.yaml", .failed(failure)), ("c.yaml", nil)])
        #expect(!failed.passed && failed.lines == [.passed("scenario a.yaml: passed (2 step(s))"), .failed(failure.description)])
        // Stopped with no failure (a signal, a lost controller): said.
        let stopped = RunScenarios.verdict([("a.yaml", nil)])
        #expect(!stopped.passed && stopped.lines == [.failed("scenario a.yaml: stopped before it ended")])
    }
}
