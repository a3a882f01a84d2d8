import BlemuControl
import BlemuCore
import BlemuHost
import Logging

/// What a scenario's steps act on: the running devices by name, through the control API the
/// control socket uses (`DeviceControl`, `PeripheralControl`; a `notify:` step is the control
/// socket's `notify`, `ValueInjection`).
public struct ScenarioDevices {
    public var names: DeviceNames
    /// Runs a control command: nil when it was taken, else why it was refused.
    public var execute: (ControlCommand) -> String?
    /// Whether the device would take a command, without running it (a setting's range, a
    /// characteristic that can notify): nil, or why not. Called before the scenario starts.
    public var check: (ControlCommand) -> String?
    /// How many centrals are connected to a device (its index in `names`) now.
    public var links: (Int) -> Int
    /// A value as a person reads it (`150 bpm, contact  [1696]`), for a failure; hex by default.
    public var describe: (BluetoothUUID, [UInt8]) -> String
    /// The steps' log lines the log budget has left out so far (`DeviceControl.logLinesLeftOut`).
    public var logLinesLeftOut: () -> Int = { 0 }

    public init(names: DeviceNames, execute: @escaping (ControlCommand) -> String?,
                check: @escaping (ControlCommand) -> String? = { _ in nil },
                links: @escaping (Int) -> Int = { _ in 1 },
                describe: @escaping (BluetoothUUID, [UInt8]) -> String = { Hex.bytes($1) }) {
        self.names = names
        self.execute = execute
        self.check = check
        self.links = links
        self.describe = describe
    }
}

/// Why a scenario failed: the step, what it expected, what happened instead, and the last
/// events before it.
public struct ScenarioFailure: Equatable, Sendable, CustomStringConvertible {
    /// `FILE:LINE` of the failing step.
    public var location: String
    public var step: String
    public var expected: String
    public var happened: String
    /// The events just before the failure, as `watch` lines (`t` in seconds since the start).
    public var events: [String]

    public var description: String {
        var text = "\(location): \(step): failed\n  expected: \(expected)\n  instead: \(happened)"
        text += events.isEmpty ? "\n  events: none" : "\n  events before it (t: seconds since the scenario started):"
        for event in events { text += "\n    \(event)" }
        return text
    }
}

public enum ScenarioOutcome: Equatable, Sendable {
    /// Every wait and expectation held; `steps` ran (a `repeat` block's once per time).
    case passed(steps: Int)
    case failed(ScenarioFailure)
}

/// Runs a scenario on the run loop's scheduler: instant steps one after another, `sleep` and
/// `wait` on timers, events taken from the devices' `DeviceEvent` stream (`observe`). Ends
/// with `onFinished`, once, with the outcome. Single-threaded like the rest of the core.
///
/// - `wait` holds with the first matching event after the one that held the previous `wait`
///   (or after the start), including events that came while the steps between ran; else with
///   the first to come within its timeout.
/// - `expect` holds when a matching event came since the last step that was not an `expect`
///   began (so several `expect`s after a step all look at what happened since it began).
public final class ScenarioRunner {
    /// Events kept for `wait` and `expect`: beyond this the oldest are left out (and counted),
    /// so a notification flood cannot grow memory.
    public static let historyLimit = 4096
    /// Events shown with a failure.
    public static let eventsShown = 12
    /// Instant steps run in one turn of the run loop before the loop gets its turn back.
    static let instantStepsPerTurn = 1000

    private enum Instruction {
        case step(ScenarioStep, device: Int)
        case repeatBegin(count: Int, end: Int)
        case repeatEnd(begin: Int)
    }

    private struct Seen {
        let seq: UInt64
        let nanoseconds: UInt64
        let device: Int
        let event: DeviceEvent
    }

    private let scenario: Scenario
    private let defaultDevice: Int?
    private let devices: ScenarioDevices
    private let scheduler: TimerScheduling
    private let logger: Logger
    /// Called once, with the outcome, when the last step held or one failed.
    public var onFinished: ((ScenarioOutcome) -> Void)?
    private var program: [Instruction] = []
    private var pc = 0
    private var loops: [(begin: Int, remaining: Int)] = []
    private var startNanoseconds: UInt64 = 0
    private var stepsRun = 0
    private var timer: TimerID?
    private var waiting: (condition: EventWait, device: Int, step: ScenarioStep, since: UInt64)?
    private var history: [Seen] = []
    private var historyLeftOut = 0
    private var recent: [Seen] = []
    private var nextSeq: UInt64 = 1
    /// `wait` looks at events from this one on.
    private var waitCursor: UInt64 = 1
    /// `expect` looks at events from this one on: the first after the last non-`expect` step began.
    private var expectWindow: UInt64 = 1
    private var expectWindowLine = 0
    /// Devices whose links a `disconnect:` step closed, until the next connection: a wait on them
    /// is not stopped by those disconnections.
    private var disconnectedByScenario: Set<Int> = []
    public private(set) var outcome: ScenarioOutcome?
    public private(set) var isRunning = false

    /// Checks that every device the steps name runs; throws `FILE:LINE` for one that does not.
    /// `defaultDevice`: the device (an index of `devices.names`) a step without `device:`
    /// acts on (a config file's per-device `scenario:`); else the file's `device:`, else the
    /// only device running.
    public init(scenario: Scenario, devices: ScenarioDevices, scheduler: TimerScheduling, logger: Logger,
                defaultDevice: Int? = nil) throws(ScenarioError) {
        self.scenario = scenario
        self.defaultDevice = defaultDevice
        self.devices = devices
        self.scheduler = scheduler
        self.logger = logger
        var mistakes = scenario.mistakes
        compile(scenario.steps, mistakes: &mistakes)
        // Every step is checked, so the file is told all its mistakes at once.
        guard mistakes.isEmpty else { throw ScenarioParser.combined(mistakes) }
    }

    /// Compiles the steps, each checked against its device as it runs now (the device's name,
    /// a `set:` value against the setting's range, a `notify:` characteristic that can notify),
    /// so a mistake is told before anything starts rather than when the step comes.
    private func compile(_ steps: [ScenarioStep], mistakes: inout [ScenarioError]) {
        for step in steps {
            if case .repeatSteps(let count, let body) = step.action {
                let begin = program.count
                program.append(.repeatBegin(count: count, end: 0))
                compile(body, mistakes: &mistakes)
                program.append(.repeatEnd(begin: begin))
                program[begin] = .repeatBegin(count: count, end: program.count - 1)
                continue
            }
            func mistake(_ message: String) { mistakes.append(ScenarioError("\(scenario.file):\(step.line): \(message)")) }
            let index: Int
            if let name = step.device {
                switch devices.names.resolve(name) {
                case .success(let found): index = found
                case .failure(let error):
                    mistake(error.message)
                    continue
                }
            } else if let defaultDevice {
                index = defaultDevice
            } else {
                guard devices.names.entries.count == 1 else {
                    let refs = devices.names.entries.map(\.ref).joined(separator: ", ")
                    mistake("\(devices.names.entries.count) devices run (\(refs)): say which with `device:` at the top of the file or in the step")
                    continue
                }
                index = 0
            }
            if let command = try? command(step, device: index), let refusal = devices.check(command) {
                mistake("\(step.text): \(refusal)")
            }
            program.append(.step(step, device: index))
        }
    }

    /// The control command a step runs on device `device`, if it is one.
    private func command(_ step: ScenarioStep, device: Int) throws(ControlUsageError) -> ControlCommand? {
        let ref = devices.names.entries[device].ref
        switch step.action {
        case .control(let control): return try control.command(device: ref)
        case .notify(let uuid, let value): return .notify(device: ref, characteristic: uuid, value: value)
        default: return nil
        }
    }

    /// Starts the first step (the devices' controllers are up).
    public func start() {
        guard !isRunning, outcome == nil else { return }
        isRunning = true
        startNanoseconds = scheduler.nowNanoseconds
        logger.notice("scenario \(scenario.file): started")
        advance()
    }

    /// Stops without an outcome (the run is ending for another reason).
    public func cancel() {
        if let timer { scheduler.cancel(timer) }
        timer = nil
        isRunning = false
    }

    /// One event of device `device` (its index in `devices.names`), as it happens.
    public func observe(_ event: DeviceEvent, device: Int) {
        guard isRunning else { return }
        let seen = Seen(seq: nextSeq, nanoseconds: scheduler.nowNanoseconds, device: device, event: event)
        nextSeq += 1
        if history.count == Self.historyLimit {
            history.removeFirst(history.count / 4)
            historyLeftOut += Self.historyLimit / 4
        }
        history.append(seen)
        if case .connected = event { disconnectedByScenario.remove(device) }
        if recent.count == Self.eventsShown { recent.removeFirst() }
        recent.append(seen)
        guard let wait = waiting, wait.device == device else { return }
        guard wait.condition.matches(event) else {
            // A wait for what a central does on a link stops when the device's last link is
            // gone: nothing can hold it until a central connects again, which is a step of its own.
            // Links the scenario closed itself (`disconnect:`) do not count: the app is expected to come back.
            if case .disconnected(_, let reason) = event, wait.condition.kind.needsLink, devices.links(device) == 0,
               !disconnectedByScenario.contains(device) {
                waiting = nil
                if let timer { scheduler.cancel(timer) }
                timer = nil
                fail(wait.step, expected: "a \(wait.condition) on \(devices.names.entries[device].ref)",
                     happened: "the central disconnected (reason \(Hex.byte(reason))) after \(Self.seconds(seen.nanoseconds - wait.since)) "
                               + "with none left connected; the wait stopped there")
            }
            return
        }
        waiting = nil
        if let timer { scheduler.cancel(timer) }
        waitCursor = seen.seq + 1
        logger.debug("scenario \(location(wait.step)): held after \(Self.seconds(seen.nanoseconds - wait.since))")
        pc += 1
        // On the next turn: the step after may act on the device whose event is being reported.
        timer = scheduler.schedule(after: .zero) { [weak self] in
            self?.timer = nil
            self?.advance()
        }
    }

    private func location(_ step: ScenarioStep) -> String { "\(scenario.file):\(step.line)" }

    private func advance() {
        var instant = 0
        while isRunning {
            guard pc < program.count else {
                finish(.passed(steps: stepsRun))
                return
            }
            switch program[pc] {
            case .repeatBegin(let count, _):
                loops.append((pc, count))
                pc += 1
                continue
            case .repeatEnd(let begin):
                loops[loops.count - 1].remaining -= 1
                if loops[loops.count - 1].remaining > 0 {
                    pc = begin + 1
                } else {
                    loops.removeLast()
                    pc += 1
                }
                continue
            case .step(let step, let device):
                instant += 1
                if instant > Self.instantStepsPerTurn {
                    timer = scheduler.schedule(after: .zero) { [weak self] in
                        self?.timer = nil
                        self?.advance()
                    }
                    return
                }
                stepsRun += 1
                // At debug: a `repeat` runs steps as fast as the loop turns. The control
                // commands the steps run are logged, within the control log budget, by
                // `DeviceControl`; a failure is logged at notice, always.
                logger.debug("scenario \(location(step)): \(step.text)")
                if case .expect = step.action {} else {
                    expectWindow = nextSeq
                    expectWindowLine = step.line
                    trimHistory()
                }
                if !run(step, device: device) { return }
            }
        }
    }

    /// Runs one step; true when the next may follow at once.
    private func run(_ step: ScenarioStep, device: Int) -> Bool {
        let ref = devices.names.entries[device].ref
        switch step.action {
        case .control(let control):
            let refusal: String?
            do {
                refusal = devices.execute(try control.command(device: ref))
            } catch {
                refusal = error.message
            }
            if let refusal {
                fail(step, expected: "the command to be taken by \(ref)", happened: "refused: \(refusal)")
                return false
            }
            if control.verb == "disconnect" { disconnectedByScenario.insert(device) }
        case .notify(let uuid, let value):
            // The control socket's `notify`: the bytes exactly, or refused whole (never cut).
            if let refusal = devices.execute(.notify(device: ref, characteristic: uuid, value: value)) {
                fail(step, expected: "\(Hex.bytes(value)) sent as \(uuid) by \(ref)", happened: "refused: \(refusal)")
                return false
            }
        case .log(let text):
            logger.notice("scenario \(location(step)): log: \(text)")
        case .sleep(let duration):
            pc += 1
            timer = scheduler.schedule(after: duration) { [weak self] in
                self?.timer = nil
                self?.advance()
            }
            return false
        case .expect(let condition):
            if history.first(where: { $0.seq >= expectWindow && $0.device == device && condition.matches($0.event) }) == nil {
                let since = expectWindowLine == 0 ? "since the scenario started" : "since line \(expectWindowLine) began"
                fail(step, expected: "a \(condition) on \(ref) \(since)",
                     happened: instead(condition, device: device, from: expectWindow, what: "none"))
                return false
            }
        case .wait(let condition, let timeout):
            if let found = history.first(where: { $0.seq >= waitCursor && $0.device == device && condition.matches($0.event) }) {
                waitCursor = found.seq + 1
                logger.debug("scenario \(location(step)): held (it had happened at t=\(Self.seconds(found.nanoseconds - startNanoseconds)))")
                break
            }
            waiting = (condition, device, step, scheduler.nowNanoseconds)
            let from = waitCursor
            timer = scheduler.schedule(after: timeout) { [weak self] in
                guard let self else { return }
                self.timer = nil
                self.waiting = nil
                self.fail(step, expected: "a \(condition) on \(ref) within \(Self.seconds(timeout.nanoseconds))",
                          happened: self.instead(condition, device: device, from: from, what: "none came"))
            }
            return false
        case .repeatSteps:
            break  // compiled into repeatBegin and repeatEnd
        }
        pc += 1
        return true
    }

    /// What came instead of a matching event: the events of the same kind (and UUID, if the
    /// condition has one) on the device, else how many others came.
    private func instead(_ condition: EventWait, device: Int, from seq: UInt64, what none: String) -> String {
        let window = history.filter { $0.seq >= seq && $0.device == device }
        let near = window.filter { $0.event.kind == condition.kind && (condition.uuid == nil || $0.event.uuid == condition.uuid) }
        let leftOut = historyLeftOut > 0 ? " (\(historyLeftOut) older events left out)" : ""
        if near.isEmpty {
            return "\(none): \(window.count) other event(s) on the device\(leftOut)"
        }
        let shown = near.suffix(5).map { seen -> String in
            let at = "t=\(Self.seconds(seen.nanoseconds - startNanoseconds))"
            if case .write(_, let characteristic, _, let value, _, _) = seen.event {
                return "a write of \(devices.describe(characteristic.uuid, value)) at \(at)"
            }
            return "a \(seen.event.kind.rawValue) at \(at)"
        }
        return shown.joined(separator: ", ") + (near.count > 5 ? " (the last 5 of \(near.count))" : "") + leftOut
    }

    /// Keeps what a later `wait` or `expect` may still look at.
    private func trimHistory() {
        let keepFrom = min(waitCursor, expectWindow)
        if let first = history.first, first.seq < keepFrom {
            history.removeAll { $0.seq < keepFrom }
        }
    }

    private func fail(_ step: ScenarioStep, expected: String, happened: String) {
        let events = recent.map { seen in
            EventEncoding.line(seq: seen.seq, nanoseconds: seen.nanoseconds - startNanoseconds,
                               EventEncoding.members(seen.event, device: devices.names.entries[seen.device].ref))
        }
        let failure = ScenarioFailure(location: location(step), step: step.text, expected: expected, happened: happened, events: events)
        // One short line in the log; the failure itself is printed once, by whoever runs the
        // scenario (`blemu run` on stderr), with the events before it.
        logger.notice("scenario \(failure.location): \(step.text): failed")
        finish(.failed(failure))
    }

    private func finish(_ result: ScenarioOutcome) {
        guard outcome == nil else { return }
        cancel()
        outcome = result
        if case .passed(let steps) = result {
            let leftOut = devices.logLinesLeftOut()
            let note = leftOut > 0 ? "; \(leftOut) log line(s) of its commands left out by the log budget" : ""
            logger.notice("scenario \(scenario.file): passed (\(steps) step(s) in \(Self.seconds(scheduler.nowNanoseconds - startNanoseconds)))\(note)")
        }
        onFinished?(result)
    }

    /// `1.5 s`, `0.001 s`.
    public static func seconds(_ nanoseconds: UInt64) -> String {
        let millis = nanoseconds / 1_000_000
        let whole = millis / 1000, fraction = millis % 1000
        if fraction == 0 { return "\(whole) s" }
        var digits = String(fraction)
        digits = String(repeating: "0", count: 3 - digits.count) + digits
        while digits.hasSuffix("0") { digits.removeLast() }
        return "\(whole).\(digits) s"
    }
}

extension DeviceEventKind {
    /// Whether the event can only come on a link (a central's subscription, read or write).
    var needsLink: Bool {
        switch self {
        case .subscribed, .unsubscribed, .read, .write, .mtu, .paired, .encrypted, .notification, .indication, .confirmed: return true
        case .connected, .disconnected, .advertising, .service, .fault: return false
        }
    }
}
