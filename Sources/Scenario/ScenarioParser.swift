import BlemuConfig
import BlemuControl
import BlemuCore

/// Reads a scenario file (Docs/CONTROL.md, "Scenario files") with the project's YAML reader: every error
/// names `FILE:LINE`, and is told before any controller opens, as `--config`'s are.
public enum ScenarioParser {
    /// Steps, `repeat` blocks' steps counted each once: a scenario is a few dozen (and the
    /// YAML reader's node limit comes soon after).
    public static let maximumSteps = 5_000
    public static let maximumRepeat = 1_000_000
    /// The longest `sleep` or `timeout`: a day.
    public static let maximumSeconds: Double = 86_400
    /// A `wait` without its own `timeout:` (nor the file's).
    public static let defaultTimeout: Duration = .seconds(30)
    /// The action keys, in the order the usage lists them.
    public static let actions = ["set", "notify", "sleep", "wait", "expect", "fault", "disconnect", "service", "advertise", "repeat", "log"]
    /// Mistakes told at once: a file with more is told this many and how many more.
    public static let mistakesShown = 50

    /// The forms of the steps that are control commands, as a scenario writes them (no DEVICE).
    public static let forms = [
        "set": "set: KEY VALUE [--exact]",
        "fault": "fault: UUID error HEX|delay MS|drop [--count N], or fault: clear",
        "disconnect": "disconnect: [HEX]",
        "service": "service: UUID on|off",
        "advertise": "advertise: on|off",
    ]

    /// A control command's usage error as the step's: `usage: set DEVICE KEY VALUE` names a
    /// form the step does not have, so the step's own form is given instead.
    static func stepMessage(_ message: String, key: String) -> String {
        guard let form = forms[key] else { return message }
        var index = message.startIndex
        while index < message.endIndex {
            if message[index...].hasPrefix("usage: ") { return String(message[..<index]) + "usage: " + form }
            index = message.index(after: index)
        }
        return message
    }

    /// Several mistakes, each `FILE:LINE: …` on its line; at most `mistakesShown`.
    static func combined(_ errors: [ScenarioError]) -> ScenarioError {
        var lines = errors.prefix(mistakesShown).map(\.description)
        if errors.count > mistakesShown { lines.append("(\(errors.count - mistakesShown) more mistakes not shown)") }
        return ScenarioError(lines.joined(separator: "\n"))
    }

    /// With `keepingStepMistakes`, a mistake in a step does not throw: it is kept in
    /// `Scenario.mistakes` for the runner, which tells it with its checks against the devices.
    public static func load(path: String, keepingStepMistakes: Bool = false) throws(ScenarioError) -> Scenario {
        let text: String
        do {
            text = try ConfigurationFile.readFile(path)
        } catch {
            throw ScenarioError("\(path): \(error.description)")
        }
        return try parse(text, file: path, keepingStepMistakes: keepingStepMistakes)
    }

    public static func parse(_ text: String, file: String, keepingStepMistakes: Bool = false) throws(ScenarioError) -> Scenario {
        let root: YAMLNode?
        do {
            root = try YAMLTree.compose(text)
        } catch {
            if let line = error.limitLine { throw ScenarioError("\(file):\(line): \(error.message)") }
            throw ScenarioError("\(file): not valid YAML: \(error.message)")
        }
        guard let root else { throw ScenarioError("\(file): the file is empty; it needs a `steps:` list") }
        var reader = Reader(file: file)
        let top = try reader.mapping(root)
        try reader.allowOnly(["device", "timeout", "steps"], in: top)
        let device = try top["device"].map { entry throws(ScenarioError) in try reader.word(entry.value, "device") }
        if let node = top["timeout"] { reader.defaultTimeout = try reader.duration(node.value, "timeout", allowZero: false) }
        guard let steps = top["steps"] else { throw reader.fail(root, "no `steps:` list (each entry one step, like `- wait: connected`)") }
        let list = try reader.steps(steps.value, device: device)
        // Every step is read, so a file is told all its mistakes at once, not one per run.
        guard reader.mistakes.isEmpty || keepingStepMistakes else { throw combined(reader.mistakes) }
        return Scenario(file: file, device: device, steps: list, mistakes: reader.mistakes)
    }

    private struct Reader {
        let file: String
        var defaultTimeout = ScenarioParser.defaultTimeout
        var count = 0
        /// The steps' mistakes, in file order (a step with one is left out and reading goes on).
        var mistakes: [ScenarioError] = []

        typealias Entry = (key: String, value: YAMLNode, keyNode: YAMLNode)

        init(file: String) { self.file = file }

        func fail(_ node: YAMLNode, _ message: String) -> ScenarioError {
            ScenarioError("\(file):\(node.line): \(message)")
        }

        func mapping(_ node: YAMLNode) throws(ScenarioError) -> [String: Entry] {
            guard case .mapping(let mapping) = node.kind else { throw fail(node, "expected a mapping of `key: value` lines") }
            var out: [String: Entry] = [:]
            for (key, value) in mapping {
                guard let name = key.scalar else { throw fail(key, "a key must be a plain word") }
                guard out[name] == nil else { throw fail(key, "`\(printable(name, limit: 40))` is given twice") }
                out[name] = (name, value, key)
            }
            return out
        }

        func allowOnly(_ keys: [String], in entries: [String: Entry]) throws(ScenarioError) {
            for entry in entries.values.sorted(by: { $0.keyNode.line < $1.keyNode.line }) where !keys.contains(entry.key) {
                throw fail(entry.keyNode, "unknown key `\(printable(entry.key, limit: 40))` (allowed: \(keys.joined(separator: ", ")))")
            }
        }

        func scalar(_ node: YAMLNode, _ key: String) throws(ScenarioError) -> String {
            guard let text = node.scalar else { throw fail(node, "\(key): expected a single value") }
            return text
        }

        func word(_ node: YAMLNode, _ key: String) throws(ScenarioError) -> String {
            let text = try scalar(node, key)
            guard !text.isEmpty else { throw fail(node, "\(key): give a value") }
            return text
        }

        /// `2`, `0.5`, `2s`, `500ms`.
        func duration(_ node: YAMLNode, _ key: String, allowZero: Bool) throws(ScenarioError) -> Duration {
            let text = try scalar(node, key)
            var number = Substring(text), scale = 1.0
            if number.hasSuffix("ms") {
                number = number.dropLast(2)
                scale = 0.001
            } else if number.hasSuffix("s") {
                number = number.dropLast()
            }
            guard let value = Double(number), value.isFinite, value >= 0, allowZero || value > 0,
                  value * scale <= ScenarioParser.maximumSeconds else {
                throw fail(node, "\(key): \(quoted(text)) is not a time: give seconds (2, 0.5, 2s) or milliseconds (500ms), "
                                 + "\(allowZero ? "0" : "more than 0") to \(Int(ScenarioParser.maximumSeconds)) s")
            }
            return .nanoseconds(Int64((value * scale * 1e9).rounded()))
        }

        mutating func steps(_ node: YAMLNode, device: String?) throws(ScenarioError) -> [ScenarioStep] {
            guard case .sequence(let items) = node.kind else { throw fail(node, "steps: expected a list (lines starting with `- `)") }
            guard !items.isEmpty else { throw fail(node, "steps: the list is empty") }
            var out: [ScenarioStep] = []
            for item in items {
                do {
                    out.append(try step(item, device: device))
                } catch {
                    mistakes.append(error)
                    // Past the step limit every later step is the same mistake: told once.
                    if count > ScenarioParser.maximumSteps { break }
                }
            }
            return out
        }

        mutating func step(_ node: YAMLNode, device inherited: String?) throws(ScenarioError) -> ScenarioStep {
            count += 1
            guard count <= ScenarioParser.maximumSteps else {
                throw fail(node, "more than \(ScenarioParser.maximumSteps) steps: use `repeat` for a long run")
            }
            let entries = try mapping(node)
            let named = entries.values.filter { ScenarioParser.actions.contains($0.key) }.sorted { $0.keyNode.line < $1.keyNode.line }
            guard let action = named.first else {
                let first = entries.values.min { $0.keyNode.line < $1.keyNode.line }
                throw fail(first?.keyNode ?? node, "a step needs one of: \(ScenarioParser.actions.joined(separator: ", "))"
                           + (first.map { "; `\(printable($0.key, limit: 40))` is not one" } ?? ""))
            }
            guard named.count == 1 else {
                throw fail(named[1].keyNode, "one action per step: `\(action.key)` and `\(named[1].key)` (make them two steps)")
            }
            var allowed = [action.key]
            switch action.key {
            case "wait": allowed += ["timeout", "device"]
            case "repeat": allowed += ["steps"]
            case "sleep", "log": break
            default: allowed += ["device"]
            }
            try allowOnly(allowed, in: entries)
            let device = try entries["device"].map { entry throws(ScenarioError) in try word(entry.value, "device") } ?? inherited
            let value = action.value
            let key = action.key
            func words() throws(ScenarioError) -> [String] {
                try scalar(value, key).split(whereSeparator: { $0 == " " || $0 == "\t" }).map(String.init)
            }
            var text = "\(key): \(value.scalar ?? "")"
            let made: ScenarioStep.Action
            switch key {
            case "sleep":
                made = .sleep(try duration(value, key, allowZero: true))
            case "log":
                made = .log(try scalar(value, key))
            case "wait", "expect":
                let condition: EventWait
                let arguments = try words()
                do {
                    condition = try EventWait(arguments: arguments)
                } catch {
                    throw fail(value, "\(key): \(error.message)")
                }
                guard condition.device == nil else { throw fail(value, "\(key): name the device with a `device:` key, not --device") }
                if key == "expect" {
                    made = .expect(condition)
                } else {
                    let timeout = try entries["timeout"].map { entry throws(ScenarioError) in
                        try duration(entry.value, "timeout", allowZero: false)
                    } ?? defaultTimeout
                    made = .wait(condition, timeout: timeout)
                    text += " (timeout \(ScenarioRunner.seconds(timeout.nanoseconds)))"
                }
            case "notify":
                let parts = try words()
                guard parts.count == 2 else { throw fail(value, "notify: give the characteristic's UUID and the value in hex: notify: 2a37 0078") }
                guard let uuid = ControlRequest.parseUUID(parts[0]) else {
                    throw fail(value, "notify: \(quoted(parts[0])) is not a UUID: give 2A37, 0x2A37 or the 128-bit form")
                }
                // At most 512 bytes, what any attribute value may be (Vol 3, Part F, 3.2.9).
                switch ControlRequest.parseValue(parts[1]) {
                case .failure(let refusal): throw fail(value, "notify: the value \(refusal.message)")
                case .success(let bytes): made = .notify(uuid, bytes)
                }
            case "repeat":
                let countText = try scalar(value, key)
                guard let times = Int(countText), (1...ScenarioParser.maximumRepeat).contains(times) else {
                    throw fail(value, "repeat: \(quoted(countText)) is not a count from 1 to \(ScenarioParser.maximumRepeat)")
                }
                guard let body = entries["steps"] else { throw fail(action.keyNode, "repeat: give its `steps:` list, indented under it") }
                made = .repeatSteps(count: times, steps: try steps(body.value, device: device))
            default:
                // set, fault, disconnect, service, advertise: checked as `blemu ctl` checks them.
                var arguments = try words()
                if key == "disconnect", arguments.count == 1 { arguments = ["--reason", arguments[0]] }
                let control = ScenarioControl(verb: key, words: arguments)
                do {
                    _ = try control.command(device: device ?? "DEVICE")
                } catch {
                    throw fail(value, "\(key): \(ScenarioParser.stepMessage(error.message, key: key))")
                }
                made = .control(control)
            }
            if case .repeatSteps(let times, _) = made { text = "repeat: \(times)" }
            return ScenarioStep(line: action.keyNode.line, device: device, action: made, text: printable(text, limit: 200))
        }
    }
}
