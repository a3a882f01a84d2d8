import BlemuControl
import BlemuCore

/// A scenario file (`blemu run --scenario FILE.yaml`, Docs/CONTROL.md, "Scenario files"): a timeline of
/// steps run against the devices while an app uses them, each step with the line it is on.
public struct Scenario: Equatable, Sendable {
    /// The file's name as given, for `FILE:LINE` in every message.
    public var file: String
    /// The top-level `device:`: the device every step acts on unless it names its own.
    public var device: String?
    public var steps: [ScenarioStep]
    /// The steps' mistakes, kept (`ScenarioParser.load(path:keepingStepMistakes:)`) so that the
    /// runner tells them with its own checks against the devices, all in one run; the steps
    /// with a mistake are left out of `steps`.
    public var mistakes: [ScenarioError]

    public init(file: String, device: String? = nil, steps: [ScenarioStep], mistakes: [ScenarioError] = []) {
        self.file = file
        self.device = device
        self.steps = steps
        self.mistakes = mistakes
    }
}

/// One step: what it does, on which device, and where it is written.
public struct ScenarioStep: Equatable, Sendable {
    public enum Action: Equatable, Sendable {
        /// A control command (`set`, `fault`, `disconnect`, `service`, `advertise`): the
        /// `blemu ctl` words with `DEVICE` left out, put in when the step runs.
        case control(ScenarioControl)
        /// A value sent now to every subscribed central (a notification, or an indication
        /// when the characteristic only indicates).
        case notify(BluetoothUUID, [UInt8])
        case sleep(Duration)
        /// Waits, at most `timeout`, for an event (`EventWait`: connected, subscribed UUID, …).
        case wait(EventWait, timeout: Duration)
        /// Asserts the event happened since the last step that was not an `expect` began.
        case expect(EventWait)
        /// A line for the log.
        case log(String)
        /// The steps, `count` times over.
        case repeatSteps(count: Int, steps: [ScenarioStep])
    }

    public var line: Int
    /// The step's own `device:`, else the scenario's.
    public var device: String?
    public var action: Action
    /// The step as written (`wait: subscribed 2a37`), for the log and a failure.
    public var text: String

    public init(line: Int, device: String? = nil, action: Action, text: String) {
        self.line = line
        self.device = device
        self.action = action
        self.text = text
    }
}

/// A control command of a step: `set bpm 120` keeps `set` and `bpm 120`; the device comes
/// second (`set DEVICE bpm 120`) except in `fault clear DEVICE`.
public struct ScenarioControl: Equatable, Sendable {
    public var verb: String
    public var words: [String]

    public init(verb: String, words: [String]) {
        self.verb = verb
        self.words = words
    }

    /// The `blemu ctl` arguments for `device`.
    public func arguments(device: String) -> [String] {
        if verb == "fault", words == ["clear"] { return ["fault", "clear", device] }
        return [verb, device] + words
    }

    /// The command for `device`, checked as `blemu ctl` checks it.
    public func command(device: String) throws(ControlUsageError) -> ControlCommand {
        try ControlCommand(arguments: arguments(device: device))
    }
}

/// `FILE:LINE: what is wrong`, for the file before anything starts.
public struct ScenarioError: Error, Equatable, Sendable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
