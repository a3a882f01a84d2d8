import Foundation
import BlemuControl
import BlemuCore
import BlemuScenario
import Testing

@Suite struct ScenarioParserTests {
    @Test func aFileWithEveryStepIsRead() throws {
        let text = """
            device: heart-rate
            timeout: 5
            steps:
              - log: waiting for the app
              - wait: connected
              - wait: subscribed 2a37
                timeout: 10
              - set: bpm 120
              - notify: 2a37 0078
              - sleep: 500ms
              - expect: write 2a39 equals 01
              - wait: read 2a38
              - fault: 2a37 error 0x0e --count 2
              - fault: clear
              - disconnect:
              - disconnect: 0x13
              - service: 180d off
              - advertise: on
              - repeat: 3
                steps:
                  - sleep: 1
                  - expect: read 2a38
                    device: heart-rate#1
            """
        let scenario = try ScenarioParser.parse(text, file: "s.yaml")
        #expect(scenario.device == "heart-rate")
        let steps = scenario.steps
        #expect(steps.count == 15)
        #expect(steps[0] == ScenarioStep(line: 4, device: "heart-rate", action: .log("waiting for the app"), text: "log: waiting for the app"))
        #expect(steps[1].action == .wait(try EventWait(arguments: ["connected"]), timeout: .seconds(5)))
        #expect(steps[2].action == .wait(try EventWait(arguments: ["subscribed", "2a37"]), timeout: .seconds(10)))
        #expect(steps[2].line == 6)
        #expect(steps[3].action == .control(ScenarioControl(verb: "set", words: ["bpm", "120"])))
        #expect(steps[4].action == .notify(BluetoothUUID("2a37")!, [0x00, 0x78]))
        #expect(steps[5].action == .sleep(.milliseconds(500)))
        #expect(steps[6].action == .expect(try EventWait(arguments: ["write", "2a39", "equals", "01"])))
        #expect(steps[8].action == .control(ScenarioControl(verb: "fault", words: ["2a37", "error", "0x0e", "--count", "2"])))
        #expect(try ScenarioControl(verb: "fault", words: ["clear"]).command(device: "lock") == .clearFaults(device: "lock"))
        #expect(try ScenarioControl(verb: "disconnect", words: ["--reason", "0x13"]).command(device: "lock") == .disconnect(device: "lock", reason: 0x13))
        #expect(steps[10].action == .control(ScenarioControl(verb: "disconnect", words: [])))
        #expect(steps[11].action == .control(ScenarioControl(verb: "disconnect", words: ["--reason", "0x13"])))
        guard case .repeatSteps(let count, let body) = steps[14].action else {
            Issue.record("not a repeat: \(steps[14])")
            return
        }
        #expect(count == 3 && body.count == 2 && steps[14].line == 19)
        #expect(body[1].device == "heart-rate#1" && body[1].line == 22)
        #expect(body[0].device == "heart-rate")
    }

    /// Every mistake is told with the file and the line it is on, before anything starts.
    @Test(arguments: [
        ("", "s.yaml: the file is empty"),
        ("steps: [", "s.yaml: not valid YAML"),
        ("- wait: connected", "s.yaml:1: expected a mapping"),
        ("device: lock", "s.yaml:1: no `steps:` list"),
        ("steps:\n  - wait: connected\nspeed: 3", "s.yaml:3: unknown key `speed`"),
        ("steps: []", "s.yaml:1: steps: the list is empty"),
        ("steps: nope", "s.yaml:1: steps: expected a list"),
        ("steps:\n  - wait: connected\n  - jump: 3", "s.yaml:3: a step needs one of"),
        ("steps:\n  - wait: connected\n    sleep: 2", "s.yaml:3: one action per step"),
        ("steps:\n  - set: bpm 120\n    timeout: 3", "s.yaml:3: unknown key `timeout` (allowed: set, device)"),
        ("steps:\n  - wait: connected\n    timeout: soon", "s.yaml:3: timeout: 'soon' is not a time"),
        ("steps:\n  - wait: connected\n    timeout: 0", "s.yaml:3: timeout: '0' is not a time"),
        ("steps:\n  - sleep: -1", "s.yaml:2: sleep: '-1' is not a time"),
        ("steps:\n  - sleep: 100000", "s.yaml:2: sleep: '100000' is not a time"),
        ("steps:\n\n  - wait: bonded", "s.yaml:3: wait: cannot wait for 'bonded'"),
        ("steps:\n  - wait: subscribed", "s.yaml:2: wait: usage: wait subscribed UUID"),
        ("steps:\n  - expect: write 2a39 equals zz", "s.yaml:2: expect: 'zz' is not hex bytes"),
        ("steps:\n  - wait: connected --device lock", "s.yaml:2: wait: name the device with a `device:` key"),
        ("steps:\n  - notify: 2a37", "s.yaml:2: notify: give the characteristic's UUID and the value"),
        ("steps:\n  - notify: 2x37 00", "s.yaml:2: notify: '2x37' is not a UUID"),
        ("steps:\n  - notify: 2a37 0", "s.yaml:2: notify: the value '0' is not hex bytes"),
        ("steps:\n  - notify: 2a37 " + String(repeating: "00", count: 513),
         "s.yaml:2: notify: the value is 513 bytes long; an attribute value is at most 512 bytes (Vol 3, Part F, 3.2.9)"),
        ("steps:\n  - set: bpm", "s.yaml:2: set: usage: set: KEY VALUE [--exact]"),
        ("steps:\n  - set: bpm 1 2", "s.yaml:2: set: usage: set: KEY VALUE [--exact]"),
        ("steps:\n  - advertise: on --count 2", "s.yaml:2: advertise: advertise takes no --count; usage: advertise: on|off"),
        ("steps:\n  - advertise: maybe", "s.yaml:2: advertise: advertise takes on or off"),
        ("steps:\n  - service: 180d gone", "s.yaml:2: service: service takes on or off"),
        ("steps:\n  - fault: 2a37 explode", "s.yaml:2: fault: unknown fault 'explode'"),
        ("steps:\n  - disconnect: 0x99", "s.yaml:2: disconnect:"),
        ("steps:\n  - repeat: 0\n    steps:\n      - sleep: 1", "s.yaml:2: repeat: '0' is not a count"),
        ("steps:\n  - repeat: 2", "s.yaml:2: repeat: give its `steps:` list"),
        ("steps:\n  - repeat: 2\n    steps:\n      - sleep: 1\n      - wait: nothing", "s.yaml:5: wait: cannot wait for 'nothing'"),
        ("steps:\n  - log: [a, b]", "s.yaml:2: log: expected a single value"),
        ("steps:\n  - wait: connected\n    device: [a]", "s.yaml:3: device: expected a single value"),
        ("steps:\n  - wait: connected\n    wait: connected", "s.yaml:3: `wait` is given twice"),
    ])
    func mistakesAreToldWithFileAndLine(text: String, message: String) {
        #expect(throws: ScenarioError.self) { try ScenarioParser.parse(text, file: "s.yaml") }
        do {
            _ = try ScenarioParser.parse(text, file: "s.yaml")
        } catch {
            #expect(error.description.hasPrefix(message), "\(error.description)")
        }
    }

    /// A file is told every mistake in one run, each at its line, not only the first.
    @Test func everyMistakeIsToldInOneRun() {
        let text = "steps:\n  - jump: 1\n  - sleep: soon\n  - log: fine\n  - repeat: 2\n    steps:\n      - set: bpm\n  - notify: 2a37 zz\n"
        do {
            _ = try ScenarioParser.parse(text, file: "s.yaml")
            Issue.record("taken")
        } catch {
            let lines = error.description.split(separator: "\n").map { String($0.prefix(10)) }
            #expect(lines == ["s.yaml:2: ", "s.yaml:3: ", "s.yaml:7: ", "s.yaml:8: "], "\(error.description)")
        }
    }

    /// A value of 512 bytes, the attribute value maximum (Vol 3, Part F, 3.2.9), is taken;
    /// `set` takes `--exact`.
    @Test func notifyTakes512BytesAndSetTakesExact() throws {
        let text = "steps:\n  - notify: 2a37 " + String(repeating: "ab", count: 512) + "\n  - set: bpm 150 --exact\n"
        let steps = try ScenarioParser.parse(text, file: "s.yaml").steps
        #expect(steps[0].action == .notify(BluetoothUUID("2a37")!, [UInt8](repeating: 0xAB, count: 512)))
        guard case .control(let control) = steps[1].action else { Issue.record("not a control step"); return }
        #expect(try control.command(device: "heart-rate") == .set(device: "heart-rate", key: "bpm", value: "150", exact: true))
    }

    @Test func tooManyStepsAreRefusedAtTheStepThatPassesTheLimit() {
        let text = "steps:\n" + String(repeating: "  - sleep: 1\n", count: ScenarioParser.maximumSteps + 1)
        #expect(throws: ScenarioError("s.yaml:\(ScenarioParser.maximumSteps + 2): more than \(ScenarioParser.maximumSteps) steps: use `repeat` for a long run")) {
            try ScenarioParser.parse(text, file: "s.yaml")
        }
    }

    @Test func aFileThatIsNotThereIsNamed() {
        #expect(throws: ScenarioError.self) { try ScenarioParser.load(path: "/nonexistent/s.yaml") }
    }
}

/// The complete example of Docs/CONTROL.md, "Scenario files", is a scenario the parser takes.
@Suite struct DocumentedScenarioTests {
    @Test func theDocumentedExampleIsRead() throws {
        let root = "\(#filePath)".split(separator: "/", omittingEmptySubsequences: false).dropLast(3).joined(separator: "/")
        let bytes = try #require(FileManager.default.contents(atPath: root + "/Docs/CONTROL.md"))
        let text = String(decoding: bytes, as: UTF8.self)
        let start = try #require(text.range(of: "```yaml\n# heart-rate-app.yaml\n"))
        let end = try #require(text.range(of: "```", range: start.upperBound..<text.endIndex))
        let scenario = try ScenarioParser.parse(String(text[start.upperBound..<end.lowerBound]), file: "heart-rate-app.yaml")
        #expect(scenario.device == "heart-rate")
        #expect(scenario.steps.count == 15)
    }
}
