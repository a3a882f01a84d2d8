import BlemuControl
import BlemuCore
import BlemuGATT
import BlemuHost
import BlemuScenario
import BlemuTestSupport
import Logging
import Testing

/// The runner on the manual scheduler: time moves only when the test says, events come when
/// the test reports them, so every outcome is exact.
@MainActor
final class RunnerRig {
    let scheduler = ManualScheduler()
    var commands: [ControlCommand] = []
    var notified: [(Int, BluetoothUUID, [UInt8])] = []
    var outcomes: [ScenarioOutcome] = []
    var refuse: String?
    /// Centrals connected to each device, as `ScenarioDevices.links` tells the runner.
    var links = 1
    var runner: ScenarioRunner!
    let peer = ATTPeer(connectionHandle: 0x40, address: LEAddress(BluetoothAddress("C0:00:00:00:00:01")!, isRandom: true))

    init(_ text: String, devices: [(String, String)] = [("heart-rate", "blemu Heart Rate")], defaultDevice: Int? = nil,
         check: @escaping (ControlCommand) -> String? = { _ in nil }, logger: Logger? = nil,
         describe: @escaping (BluetoothUUID, [UInt8]) -> String = { Hex.bytes($1) }, keepingStepMistakes: Bool = false) throws {
        let scenario = try ScenarioParser.parse(text, file: "s.yaml", keepingStepMistakes: keepingStepMistakes)
        let names = DeviceNames(devices.map { (device: $0.0, localName: $0.1) })
        let targets = ScenarioDevices(
            names: names,
            execute: { [unowned self] command in
                // `notify:` steps are the control socket's `notify`: kept apart for the tests.
                if case .notify(let device, let uuid, let value) = command {
                    let index = (try? names.resolve(device).get()) ?? -1
                    self.notified.append((index, uuid, value))
                } else {
                    self.commands.append(command)
                }
                return self.refuse
            },
            check: check,
            links: { [unowned self] _ in self.links },
            describe: describe)
        runner = try ScenarioRunner(scenario: scenario, devices: targets, scheduler: scheduler,
                                    logger: logger ?? Logger(label: "scenario-test") { _ in SwiftLogNoOpLogHandler() },
                                    defaultDevice: defaultDevice)
        runner.onFinished = { [unowned self] outcome in self.outcomes.append(outcome) }
    }

    func characteristic(_ uuid: String) -> EventCharacteristic {
        EventCharacteristic(uuid: BluetoothUUID(uuid)!, handle: 0x0010)
    }
    func connected(device: Int = 0) { runner.observe(.connected(peer: peer), device: device) }
    func subscribed(_ uuid: String, device: Int = 0) {
        runner.observe(.subscribed(peer: peer, characteristic: characteristic(uuid), notify: true, indicate: false), device: device)
    }
    func write(_ uuid: String, _ value: [UInt8]) {
        runner.observe(.write(peer: peer, characteristic: characteristic(uuid), offset: 0, value: value, withResponse: true, prepared: false), device: 0)
    }
    func read(_ uuid: String) {
        runner.observe(.read(peer: peer, characteristic: characteristic(uuid), offset: 0), device: 0)
    }
    var failure: ScenarioFailure? {
        if case .failed(let failure)? = outcomes.first { return failure }
        return nil
    }
}

@MainActor
@Suite struct ScenarioRunnerTests {
    @Test func waitsHeldByTheAppsEventsPassAndActionsGoThroughTheControlAPI() throws {
        let rig = try RunnerRig("""
            steps:
              - wait: connected
                timeout: 10
              - wait: subscribed 2a37
              - set: bpm 120
              - notify: 2a37 0078
              - wait: write 2a39 equals 01
                timeout: 5
              - advertise: off
            """)
        rig.runner.start()
        #expect(rig.outcomes.isEmpty)
        rig.scheduler.advance(by: .seconds(3))
        rig.connected()
        rig.scheduler.advance(by: .zero)
        rig.subscribed("2a37")
        rig.scheduler.advance(by: .zero)
        #expect(rig.commands == [.set(device: "heart-rate", key: "bpm", value: "120")])
        #expect(rig.notified.count == 1 && rig.notified[0].2 == [0x00, 0x78])
        rig.write("2a39", [0x02])  // not the value waited for
        rig.scheduler.advance(by: .seconds(4))
        #expect(rig.outcomes.isEmpty)
        rig.write("2a39", [0x01])
        rig.scheduler.advance(by: .zero)
        #expect(rig.commands.last == .advertise(device: "heart-rate", on: false))
        #expect(rig.outcomes == [.passed(steps: 6)])
    }

    @Test func aWaitThatTimesOutFailsAtItsStepWithWhatCameInstead() throws {
        let rig = try RunnerRig("""
            steps:
              - wait: connected
              - wait: write 2a39 equals 01
                timeout: 5
              - log: never reached
            """)
        rig.runner.start()
        rig.connected()
        rig.scheduler.advance(by: .seconds(1))
        rig.write("2a39", [0x02])
        rig.scheduler.advance(by: .milliseconds(3999))  // the wait began at 0 s
        #expect(rig.outcomes.isEmpty)
        rig.scheduler.advance(by: .milliseconds(1))
        let failure = try #require(rig.failure)
        #expect(failure.location == "s.yaml:3")
        #expect(failure.step == "wait: write 2a39 equals 01 (timeout 5 s)")
        #expect(failure.expected == "a write to 2A39 of 01 on heart-rate within 5 s")
        #expect(failure.happened.hasPrefix("a write of 02 at t=1 s"), "\(failure.happened)")
        #expect(failure.events.count == 2 && failure.events[1].contains("\"value\":\"02\""), "\(failure.events)")
        #expect(failure.description.hasPrefix("s.yaml:3: wait: write 2a39 equals 01"))
        #expect(rig.outcomes.count == 1)
        #expect(rig.scheduler.pendingCount == 0)
    }

    @Test func aWaitIsHeldByAnEventThatCameWhileEarlierStepsRanButNotByOneAnEarlierWaitTook() throws {
        let rig = try RunnerRig("""
            steps:
              - wait: write 2a39
              - sleep: 2
              - wait: write 2a39
                timeout: 1
              - wait: write 2a39
                timeout: 1
            """)
        rig.runner.start()
        rig.write("2a39", [0x01])
        rig.scheduler.advance(by: .seconds(1))
        rig.write("2a39", [0x02])  // during the sleep: holds the second wait
        rig.scheduler.advance(by: .seconds(1))
        #expect(rig.outcomes.isEmpty)
        rig.scheduler.advance(by: .seconds(1))  // the third has nothing left
        #expect(rig.failure?.location == "s.yaml:6")
    }

    @Test func expectLooksAtWhatHappenedSinceTheLastStepThatWasNotAnExpect() throws {
        let text = """
            steps:
              - wait: connected
              - sleep: 2
              - expect: subscribed 2a37
              - expect: read 2a38
            """
        // Both happen during the sleep: both expectations hold.
        let good = try RunnerRig(text)
        good.runner.start()
        good.connected()
        good.scheduler.advance(by: .seconds(1))
        good.subscribed("2a37")
        good.read("2a38")
        good.scheduler.advance(by: .seconds(1))
        #expect(good.outcomes == [.passed(steps: 4)])

        // The read came before the sleep began: the second expectation fails, at its line.
        let early = try RunnerRig(text)
        early.runner.start()
        early.read("2a38")
        early.connected()
        early.scheduler.advance(by: .zero)
        early.subscribed("2a37")
        early.scheduler.advance(by: .seconds(2))
        let failure = try #require(early.failure)
        #expect(failure.location == "s.yaml:5")
        #expect(failure.expected == "a read of 2A38 on heart-rate since line 3 began")
        #expect(failure.happened.hasPrefix("none: 1 other event(s)"), "\(failure.happened)")
    }

    @Test func repeatRunsItsStepsThatManyTimes() throws {
        let rig = try RunnerRig("""
            steps:
              - repeat: 3
                steps:
                  - set: bpm 100
                  - sleep: 1
                  - repeat: 2
                    steps:
                      - notify: 2a37 0064
              - log: done
            """)
        rig.runner.start()
        #expect(rig.commands.count == 1)
        rig.scheduler.advance(by: .seconds(1))
        #expect(rig.commands.count == 2 && rig.notified.count == 2)
        rig.scheduler.advance(by: .seconds(2))
        #expect(rig.commands.count == 3 && rig.notified.count == 6)
        #expect(rig.outcomes == [.passed(steps: 3 * (2 + 2) + 1)])
    }

    @Test func aLongRepeatOfInstantStepsGivesTheRunLoopItsTurns() throws {
        let rig = try RunnerRig("""
            steps:
              - repeat: 2500
                steps:
                  - set: bpm 100
            """)
        rig.runner.start()
        #expect(rig.commands.count == 1000 && rig.outcomes.isEmpty)
        rig.scheduler.advance(by: .zero)
        #expect(rig.commands.count == 2500 && rig.outcomes == [.passed(steps: 2500)])
    }

    @Test func aRefusedCommandFailsItsStep() throws {
        let rig = try RunnerRig("steps:\n  - log: first\n  - set: speed 3\n")
        rig.refuse = "heart-rate has no setting 'speed'; settings: bpm"
        rig.runner.start()
        let failure = try #require(rig.failure)
        #expect(failure.location == "s.yaml:3")
        #expect(failure.happened == "refused: heart-rate has no setting 'speed'; settings: bpm")
    }

    @Test func eventsOfAnotherDeviceDoNotHoldAWait() throws {
        let rig = try RunnerRig("""
            device: lock
            steps:
              - wait: connected
                timeout: 1
            """, devices: [("heart-rate", "blemu Heart Rate"), ("lock", "blemu Lock")])
        rig.runner.start()
        rig.connected(device: 0)
        rig.scheduler.advance(by: .seconds(1))
        #expect(rig.failure?.location == "s.yaml:3")
    }

    /// A config file's per-device `scenario:`: steps without `device:` act on that device.
    @Test func aDevicesOwnScenarioActsOnItUnlessAStepNamesAnother() throws {
        let rig = try RunnerRig("""
            steps:
              - set: locked 1
              - set: bpm 90
                device: heart-rate
              - wait: connected
                timeout: 1
            """, devices: [("heart-rate", "a"), ("lock", "b")], defaultDevice: 1)
        rig.runner.start()
        #expect(rig.commands == [.set(device: "lock", key: "locked", value: "1"), .set(device: "heart-rate", key: "bpm", value: "90")])
        rig.connected(device: 1)
        rig.scheduler.advance(by: .zero)
        #expect(rig.outcomes == [.passed(steps: 3)])
    }

    @Test func devicesThatDoNotRunAreToldWithTheirLineBeforeAnythingStarts() {
        #expect(throws: ScenarioError.self) {
            try RunnerRig("steps:\n  - wait: connected\n    device: thermostat\n")
        }
        do {
            _ = try RunnerRig("steps:\n  - log: hi\n  - wait: connected\n", devices: [("heart-rate", "a"), ("lock", "b")])
            Issue.record("two devices and no device: taken")
        } catch {
            #expect("\(error)".hasPrefix("s.yaml:2: 2 devices run (heart-rate, lock): say which"), "\(error)")
        }
    }

    /// `set: room 99` is refused before anything starts (not when the step comes, maybe after
    /// a long wait), with every other mistake of the file, each at its line.
    @Test func valuesAreCheckedAgainstTheDeviceBeforeAnythingStarts() {
        let check: (ControlCommand) -> String? = { command in
            switch command {
            case .set(_, "room", "99", _): return "room takes a number from -20 to 50, not '99'"
            case .notify(_, let uuid, _) where uuid == BluetoothUUID(0x2A38): return "characteristic 2A38 of heart-rate neither notifies nor indicates"
            default: return nil
            }
        }
        do {
            _ = try RunnerRig("steps:\n  - wait: connected\n    timeout: 60\n  - set: room 99\n  - set: room 20\n  - notify: 2a38 01\n",
                              check: check)
            Issue.record("taken")
        } catch {
            #expect("\(error)" == "s.yaml:4: set: room 99: room takes a number from -20 to 50, not '99'\n"
                               + "s.yaml:6: notify: 2a38 01: characteristic 2A38 of heart-rate neither notifies nor indicates", "\(error)")
        }
    }

    /// As `blemu run` reads a file: the steps' own mistakes and the checks against the devices
    /// are told together, in one run.
    @Test func theFilesMistakesAndTheDeviceChecksAreToldTogether() {
        let check: (ControlCommand) -> String? = { command in
            if case .set(_, "room", "99", _) = command { return "room takes a number from -20 to 50, not '99'" }
            return nil
        }
        do {
            _ = try RunnerRig("steps:\n  - jump: 1\n  - set: room 99\n  - notify: 2a37 zz\n", check: check, keepingStepMistakes: true)
            Issue.record("taken")
        } catch {
            let lines = "\(error)".split(separator: "\n").map { String($0.prefix(10)) }
            #expect(Set(lines) == ["s.yaml:2: ", "s.yaml:3: ", "s.yaml:4: "], "\(error)")
        }
    }

    /// A wait for what a central does stops, failed, when the device's last link closes: no
    /// central is left to do it.
    @Test func aWaitStopsEarlyWhenTheLinkItWaitsOnIsGone() throws {
        let rig = try RunnerRig("steps:\n  - wait: write 2a39 equals 01\n    timeout: 60\n")
        rig.runner.start()
        rig.scheduler.advance(by: .seconds(2))
        rig.links = 0
        rig.runner.observe(.disconnected(peer: rig.peer, reason: 0x13), device: 0)
        let failure = try #require(rig.failure, "failed at once, not after 60 s")
        #expect(failure.location == "s.yaml:2")
        #expect(failure.happened == "the central disconnected (reason 0x13) after 2 s with none left connected; the wait stopped there")

        // With another central still connected the wait goes on; `wait: disconnected` holds.
        let other = try RunnerRig("steps:\n  - wait: read 2a38\n    timeout: 60\n  - wait: disconnected\n")
        other.runner.start()
        other.runner.observe(.disconnected(peer: other.peer, reason: 0x13), device: 0)
        other.scheduler.advance(by: .zero)
        #expect(other.outcomes.isEmpty)
        other.read("2a38")
        other.scheduler.advance(by: .zero)
        other.links = 0
        other.runner.observe(.disconnected(peer: other.peer, reason: 0x13), device: 0)
        other.scheduler.advance(by: .zero)
        #expect(other.outcomes == [.passed(steps: 2)])

        // A link the scenario closed itself: the app is expected back, the wait goes on.
        let reconnecting = try RunnerRig("steps:\n  - disconnect: 0x13\n  - wait: read 2a38\n    timeout: 60\n")
        reconnecting.runner.start()
        reconnecting.links = 0
        reconnecting.runner.observe(.disconnected(peer: reconnecting.peer, reason: 0x16), device: 0)
        reconnecting.scheduler.advance(by: .seconds(5))
        #expect(reconnecting.outcomes.isEmpty)
        reconnecting.connected()
        reconnecting.read("2a38")
        reconnecting.scheduler.advance(by: .zero)
        #expect(reconnecting.outcomes == [.passed(steps: 2)])
    }

    /// Steps are logged at debug: a `repeat` of a million steps writes no line per step at
    /// notice; the failure is logged once, shortly (it is printed whole by `blemu run`).
    @Test func stepsAreLoggedAtDebugAndAFailureOnce() throws {
        let capture = CapturedLog()
        let logger = capture.logger
        let rig = try RunnerRig("steps:\n  - repeat: 3000\n    steps:\n      - set: bpm 100\n      - log: lap\n  - wait: connected\n    timeout: 1\n",
                                logger: logger)
        rig.runner.start()
        for _ in 0..<10 { rig.scheduler.advance(by: .zero) }
        rig.scheduler.advance(by: .seconds(1))
        #expect(rig.failure?.location == "s.yaml:6")
        let notices = capture.entries.filter { $0.level >= .notice }
        // `log:` steps are the scenario's own words, at notice: 3000 of them, and nothing per step besides.
        #expect(notices.filter { !$0.message.hasSuffix("log: lap") }.map(\.message)
                == ["scenario s.yaml: started", "scenario s.yaml:6: wait: connected (timeout 1 s): failed"])
        #expect(capture.entries.filter { $0.level == .debug }.count >= 6000)
    }

    /// A written value is shown decoded where blemu can decode it.
    @Test func aFailureShowsWrittenValuesDecoded() throws {
        let rig = try RunnerRig("steps:\n  - wait: write 2a39 equals 02\n    timeout: 5\n",
                                describe: { uuid, value in "\(Hex.bytes(value)) (decoded for \(uuid))" })
        rig.runner.start()
        rig.write("2a39", [0x01])
        rig.scheduler.advance(by: .seconds(5))
        #expect(rig.failure?.happened == "a write of 01 (decoded for 2A39) at t=0 s", "\(String(describing: rig.failure))")
    }

    @Test func theHistoryIsBoundedUnderAFlood() throws {
        let rig = try RunnerRig("steps:\n  - wait: read 2a38\n    timeout: 10\n")
        rig.runner.start()
        for _ in 0..<(ScenarioRunner.historyLimit * 3) { rig.write("2a39", [0x01]) }
        rig.scheduler.advance(by: .seconds(10))
        let failure = try #require(rig.failure)
        #expect(failure.happened.contains("older events left out"), "\(failure.happened)")
        #expect(failure.events.count == ScenarioRunner.eventsShown)
    }
}
