import BlemuControl
import BlemuCore
import BlemuGATT
import BlemuHost
import BlemuScenario
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
    var runner: ScenarioRunner!
    let peer = ATTPeer(connectionHandle: 0x40, address: LEAddress(BluetoothAddress("C0:00:00:00:00:01")!, isRandom: true))

    init(_ text: String, devices: [(String, String)] = [("heart-rate", "blemu Heart Rate")], defaultDevice: Int? = nil) throws {
        let scenario = try ScenarioParser.parse(text, file: "s.yaml")
        let targets = ScenarioDevices(
            names: DeviceNames(devices.map { (device: $0.0, localName: $0.1) }),
            execute: { [unowned self] command in
                self.commands.append(command)
                return self.refuse
            },
            notify: { [unowned self] device, uuid, value in
                self.notified.append((device, uuid, value))
                return nil
            })
        runner = try ScenarioRunner(scenario: scenario, devices: targets, scheduler: scheduler,
                                    logger: Logger(label: "scenario-test") { _ in SwiftLogNoOpLogHandler() },
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
