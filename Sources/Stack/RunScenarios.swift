import BlemuCore
import BlemuHost
import BlemuScenario
import Logging

/// The scenarios of a run (`blemu run --scenario FILE`, and each device's `scenario:` in
/// --config): read, put on the running devices, and their outcome told, for any front end.
public enum RunScenarios {
    /// A scenario file read, with the plan (an index of the plans) whose `scenario:` it is, or
    /// nil for the run's own (--scenario).
    public typealias Loaded = (scenario: Scenario, plan: Int?)

    /// The run's scenario (`path`, when given), then each plan's `scenario:`, in plan order. Every
    /// mistake is told with FILE:LINE; a step's mistakes are kept for the runner, which tells
    /// them all at once with its checks against the devices.
    public static func load(path: String?, plans: [DevicePlan]) throws(ScenarioError) -> [Loaded] {
        var loaded: [Loaded] = []
        if let path { loaded.append((try ScenarioParser.load(path: path, keepingStepMistakes: true), nil)) }
        for (index, plan) in plans.enumerated() {
            guard let path = plan.scenario else { continue }
            loaded.append((try ScenarioParser.load(path: path, keepingStepMistakes: true), index))
        }
        return loaded
    }

    /// A runner for each scenario, acting on the running devices (`planPeripherals`, in plan
    /// order, as `RunSession` numbers them): a plan's scenario acts on that plan's device unless
    /// a step names another. A device the steps name that does not run is told (FILE:LINE)
    /// before any controller opens. `describe` decodes written values in a failure.
    public static func runners(_ scenarios: [Loaded], planPeripherals: [Peripheral],
                               scheduler: TimerScheduling, logger: Logger,
                               describe: ((BluetoothUUID, [UInt8]) -> String)? = nil) throws(ScenarioError) -> [(file: String, runner: ScenarioRunner)] {
        let running = planPeripherals
        var targets = ScenarioTargets.devices(running, scheduler: scheduler, logger: logger)
        if let describe { targets.describe = describe }
        var runners: [(file: String, runner: ScenarioRunner)] = []
        for (scenario, plan) in scenarios {
            // The plan's device by its place among the running ones.
            let device = plan.flatMap { index in running.firstIndex { $0 === planPeripherals[index] } }
            runners.append((scenario.file, try ScenarioRunner(scenario: scenario, devices: targets, scheduler: scheduler,
                                                              logger: logger, defaultDevice: device)))
        }
        return runners
    }

    /// What the run's scenarios came to, once it ended: a line for each (`passed` on stdout, the
    /// others on stderr), and whether all passed.
    public struct Verdict: Equatable, Sendable {
        public enum Line: Equatable, Sendable {
            case passed(String)
            case failed(String)
        }
        public let lines: [Line]
        /// Every scenario passed (one stopped by another's failure did not, though it has no line).
        public let passed: Bool
    }

    public static func verdict(_ runners: [(file: String, outcome: ScenarioOutcome?)]) -> Verdict {
        let failed = runners.contains { if case .failed = $0.outcome { true } else { false } }
        var lines: [Verdict.Line] = []
        var passed = true
        for (file, outcome) in runners {
            switch outcome {
            case .passed(let steps)?:
                lines.append(.passed("scenario \(file): passed (\(steps) step(s))"))
            case .failed(let failure)?:
                lines.append(.failed(failure.description))
                passed = false
            case nil:
                // Stopped by another's failure (told by it), or by a signal or a lost controller.
                if !failed { lines.append(.failed("scenario \(file): stopped before it ended")) }
                passed = false
            }
        }
        return Verdict(lines: lines, passed: passed)
    }
}
