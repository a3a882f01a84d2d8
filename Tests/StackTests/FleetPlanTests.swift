import BlemuConfig
import BlemuCore
import BlemuDevice
import BlemuDevices
import BlemuHCI
import BlemuHost
import BlemuRunLoop
import BlemuStack
import BlemuTestSupport
import BlemuTransport
import Logging
import Testing

/// A fleet's members planned like any device: their drawn settings checked against the device's
/// own rules before anything starts (with the file's line), their jitter applied.
@Suite struct FleetPlanTests {
    static func plans(_ text: String) throws -> [DevicePlan] {
        let file = try ConfigurationFile.parse(text, file: "fleet.yaml")
        return try DevicePlanning.plans(devices: [], specs: [try ControllerSpec(parsing: "tcp:127.0.0.1:6402")],
                                        environmentSpec: { nil }, file: file, fileName: "fleet.yaml", name: nil, address: nil, pin: nil)
    }

    static func refusal(_ text: String) -> String? {
        do {
            try DevicePlanning.checkSettings(try plans(text))
            return nil
        } catch let error as PlanError {
            return error.message
        } catch {
            return "\(error)"
        }
    }

    @Test func aRangeReachingPastWhatTheDeviceTakesIsRefusedWithItsLineWhateverTheSeedDraws() {
        // Seed 1 may draw only values in 0...100 for a single member; the range's end is checked all the same.
        let text = "fleets:\n  - device: bthome-thermometer\n    count: 1\n    seed: 1\n    settings:\n      temperature: 20\n      battery: { min: 90, max: 120 }\n"
        #expect(Self.refusal(text) == "fleet.yaml:7: fleets[0].settings.battery (the range's high end): battery takes a whole number from 0 to 100, not '120'")
        let low = "fleets:\n  - device: bthome-thermometer\n    count: 3\n    settings:\n      temperature: { around: -39, spread: 2 }\n"
        #expect(Self.refusal(low) == "fleet.yaml:5: fleets[0].settings.temperature (the range's low end): temperature takes a number from -40 to 85, not '-41'")
    }

    @Test func aFixedValueTheDeviceRefusesIsRefusedWithItsLine() {
        let text = "fleets:\n  - device: ibeacon\n    count: 2\n    settings: { major: 70000 }\n"
        #expect(Self.refusal(text) == "fleet.yaml:4: fleets[0].settings.major: major takes a whole number from 0 to 65535, not '70000'")
        let unknown = "fleets:\n  - device: ibeacon\n    count: 2\n    settings: { bpm: 70 }\n"
        #expect(Self.refusal(unknown)?.hasPrefix("fleet.yaml:4: fleets[0].settings.bpm: ibeacon has no setting 'bpm'") == true)
    }

    @Test func anUnknownKindIsRefusedNamingTheFleetMember() {
        let text = "fleets:\n  - device: toaster\n    count: 2\n"
        #expect(Self.refusal(text)?.hasPrefix("fleet.yaml:2: fleets[0] member 1.device: unknown device 'toaster'") == true)
    }

    @Test func eachMembersDrawnValuesReachItsDevice() throws {
        let plans = try Self.plans("fleets:\n  - device: bthome-thermometer\n    count: 20\n    settings: { temperature: { min: 10, max: 30 } }\n")
        #expect(plans.count == 20)
        try DevicePlanning.checkSettings(plans)
        #expect(plans[0].settings.first?.location == "fleet.yaml:4: fleets[0].settings.temperature (member 1)")
        #expect(Set(plans.compactMap { $0.settings.first?.value }).count > 5)
        #expect(plans.allSatisfy { $0.address?.isValidStaticRandom == true && $0.name?.hasPrefix("bthome-thermometer ") == true })
    }

    @Test func aBroadcastersJitterLengthensItsIntervalSetting() throws {
        var plan = DevicePlan(device: "bthome-thermometer", spec: .hci(index: 0))
        plan.settings = [.init(key: "interval", value: "1000", location: "t")]
        let plain = try #require(DeviceRegistry.entry(named: "bthome-thermometer")?.make() as? BroadcastingDevice)
        try DevicePlanning.applySettings(plan, to: plain)
        #expect(plain.broadcastInterval == 1600)
        plan.advertisingShift = 7
        let jittered = try #require(DeviceRegistry.entry(named: "bthome-thermometer")?.make() as? BroadcastingDevice)
        try DevicePlanning.applySettings(plan, to: jittered)
        #expect(jittered.broadcastInterval == 1607)
        #expect(DevicePlanning.advertisingTiming(plan, device: jittered) == nil, "a broadcaster's timing is its interval setting")
    }

    @Test func aConnectableMembersJitterLengthensItsOwnOrTheFleetsTiming() throws {
        var plan = DevicePlan(device: "heart-rate", spec: .hci(index: 0))
        let device = try #require(DeviceRegistry.entry(named: "heart-rate")?.make())
        #expect(DevicePlanning.advertisingTiming(plan, device: device) == nil)
        plan.advertisingShift = 4
        let own = device.profile.advertisingTiming
        #expect(DevicePlanning.advertisingTiming(plan, device: device)
                == AdvertisingTiming(fastInterval: own.fastInterval + 4, fastDuration: own.fastDuration, slowInterval: own.slowInterval + 4))
        plan.advertising = AdvertisingTiming(fastInterval: 160, slowInterval: 1636)
        #expect(DevicePlanning.advertisingTiming(plan, device: device) == AdvertisingTiming(fastInterval: 164, slowInterval: 1640))
    }

    /// The members' drawn start delays and jitter reach the peripherals `blemu run` assembles.
    @Test func theAssembledMembersCarryTheirStartDelayAndJitter() throws {
        let plans = try Self.plans("fleets:\n  - device: heart-rate\n    count: 3\n    advertising: { fast_interval_ms: 100, slow_interval_ms: 1022.5, jitter_ms: 10 }\n    start_spread_s: 5\n")
        var options = RunOptions()
        options.shareController = true
        let (_, peripherals) = try RunStack.assembleInPlanOrder(plans, options: options, loop: RunLoop(),
                                                                 logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }))
        #expect(peripherals.count == 3)
        for (plan, peripheral) in zip(plans, peripherals) {
            #expect(peripheral.configuration.startDelay == plan.startDelay)
            #expect(peripheral.waitingToStart == (plan.startDelay > .zero))
            #expect(peripheral.configuration.advertisingTiming?.slowInterval == 1636 + plan.advertisingShift)
            #expect(peripheral.configuration.name == plan.name)
        }
        #expect(Set(plans.map(\.startDelay)).count > 1)
    }

    /// A fleet's broadcasters schedule their model updates on one shared `TimerWheel`: a
    /// thousand thermometers wake the run loop once per 100 ms tick that has any, not once per
    /// member. A connectable member and an ordinary broadcaster keep the loop's exact timers.
    @Test func aFleetsBroadcastersShareOneTimerWheelForTheirModels() throws {
        let text = "devices:\n  - device: bthome-thermometer\nfleets:\n  - { device: bthome-thermometer, count: 3 }\n  - { device: eddystone, count: 2, name: \"E {index}\" }\n  - { device: heart-rate, count: 2, name: \"HR {index}\" }\n"
        let plans = try Self.plans(text)
        let loop = try RunLoop()
        let (_, peripherals) = try RunStack.assembleInPlanOrder(plans, options: RunOptions(), loop: loop,
                                                                 logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }))
        #expect(peripherals.count == 8)
        #expect(peripherals[0].scheduler === loop)
        let wheel = try #require(peripherals[1].scheduler as? TimerWheel)
        #expect(wheel.base === loop)
        #expect(peripherals[1...5].allSatisfy { $0.scheduler === wheel })
        #expect(peripherals[6...7].allSatisfy { $0.scheduler === loop })
    }

    /// A fleet's members on a tcp: spec share connections as many as the controller has
    /// advertising sets, the broadcasters filling the connectable members' connections first; an
    /// ordinary device on the same spec keeps its own connection.
    @Test func fleetMembersShareConnectionsByTheControllersAdvertisingSets() throws {
        let text = "devices:\n  - device: heart-rate\nfleets:\n  - { device: ibeacon, count: 40 }\n  - { device: heart-rate, count: 2, name: \"HR {index}\" }\n"
        let plans = try Self.plans(text)
        let spec = try ControllerSpec(parsing: "tcp:127.0.0.1:6402")
        let quiet = Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })
        var options = RunOptions()
        #expect(ControllerProbe.specsToProbe(plans, options: options) == [spec])
        options.advertisingSets[spec] = 16
        let (pooled, inPlanOrder) = try RunStack.assembleInPlanOrder(plans, options: options, loop: RunLoop(), logger: quiet)
        // Each connectable member's connection takes 15 broadcasters, the last 10 share a third;
        // the ordinary device keeps its own.
        #expect(pooled.map(\.peripherals.count) == [1, 16, 16, 10])
        #expect(pooled[0].peripherals[0].deviceName == "heart-rate" && pooled[3].peripherals.allSatisfy { $0.deviceName == "ibeacon" })
        for stack in pooled[1...2] {
            #expect(stack.peripherals.filter { $0.deviceName == "heart-rate" }.count == 1)
        }
        // The run's devices stay in the file's order whatever connection each is on.
        #expect(inPlanOrder.map(\.deviceName) == ["heart-rate"] + Array(repeating: "ibeacon", count: 40) + ["heart-rate", "heart-rate"])
        #expect(ControllerPlacement.place(plans, options: options).pooled.map(\.notice)
                == ["fleet members on tcp:127.0.0.1:6402: 42 on 3 connection(s), 16 a connection (the advertising sets the controller reports); 2 connectable, one a connection"])
        // A controller reporting 240 sets: 32 a connection, so their starts fit the command queue.
        options.advertisingSets[spec] = 240
        #expect(try RunStack.assemble(plans, options: options, loop: RunLoop(), logger: quiet).map(\.peripherals.count) == [1, 32, 10])
        // A controller without LE Extended Advertising: one member a connection.
        options.advertisingSets[spec] = 1
        #expect(try RunStack.assemble(plans, options: options, loop: RunLoop(), logger: quiet).count == 43)
        // Not asked (no probe): each device its own connection, as before.
        options.advertisingSets = [:]
        #expect(try RunStack.assemble(plans, options: options, loop: RunLoop(), logger: quiet).count == 43)
        // --share-controller: every device of the spec on one, as before; nothing to ask.
        options.shareController = true
        #expect(ControllerProbe.specsToProbe(plans, options: options).isEmpty)
        options.advertisingSets[spec] = 16
        #expect(try RunStack.assemble(plans, options: options, loop: RunLoop(), logger: quiet).map(\.peripherals.count) == [43])
    }

    /// rootcanal hands a controller's incoming link data to the first of its links with the
    /// peer's address, so a gateway linked to two sensors of one controller had both links' data
    /// on one of them and its discovery on the other timed out (Tests/interop/test_fleet_gateway.py).
    @Test func connectableFleetMembersKeepAConnectionEach() throws {
        let plans = try Self.plans("fleets:\n  - { device: heart-rate, count: 20, name: \"HR {index}\" }\n")
        let spec = try ControllerSpec(parsing: "tcp:127.0.0.1:6402")
        let quiet = Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })
        var options = RunOptions()
        #expect(ControllerProbe.specsToProbe(plans, options: options).isEmpty, "nothing to pool: nothing to ask")
        options.advertisingSets[spec] = 16
        #expect(try RunStack.assemble(plans, options: options, loop: RunLoop(), logger: quiet).map(\.peripherals.count)
                == Array(repeating: 1, count: 20))
    }

    /// The gateway file (1,000 thermometers, 100 heart-rate sensors) on rootcanal's 16 sets:
    /// every sensor's connection takes 15 thermometers, so 100 connections, not 163 (63 of
    /// thermometers alone and one a sensor): rootcanal's work is packets × controllers.
    @Test func theGatewayFleetsBroadcastersShareTheSensorsConnections() throws {
        let plans = try Self.plans(GatewayFleet.configuration)
        let spec = try ControllerSpec(parsing: "tcp:127.0.0.1:6402")
        var options = RunOptions()
        options.advertisingSets[spec] = 16
        let placement = ControllerPlacement.place(plans.map { var plan = $0; plan.spec = spec; return plan }, options: options)
        #expect(placement.connectionCount == 100)
        var connectable = [Int](repeating: 0, count: placement.connectionCount)
        var members = [Int](repeating: 0, count: placement.connectionCount)
        for (plan, connection) in zip(plans, placement.connectionOfPlan) {
            members[connection] += 1
            if plan.device == "heart-rate" { connectable[connection] += 1 }
        }
        #expect(connectable.allSatisfy { $0 == 1 }, "one sensor a connection, never two")
        #expect(members.allSatisfy { $0 <= 16 })
        #expect(members.reduce(0, +) == 1100)
    }

    @Test func onlySpecsWithSeveralFleetMembersAreProbed() throws {
        let one = try Self.plans("devices:\n  - device: heart-rate\n  - device: lock\nfleets:\n  - { device: ibeacon, count: 1 }\n")
        #expect(ControllerProbe.specsToProbe(one, options: RunOptions()).isEmpty)
        var hci = try Self.plans("fleets:\n  - { device: ibeacon, count: 5 }\n")
        for index in hci.indices { hci[index].spec = .hci(index: 0) }
        #expect(ControllerProbe.specsToProbe(hci, options: RunOptions()).isEmpty, "an adapter is opened once: its devices share it anyway")
    }

    /// Docs/REFERENCE.md's example under "Fleets" is a file that plans and checks as it says.
    /// An ordinary device without a name runs under its own name and copy number, and its
    /// address comes from that name: neither may be a fleet member's, which the file alone
    /// cannot see.
    @Test func anUnnamedDevicesRunningNameOrAddressMayNotBeAFleetMembers() throws {
        let clash = Self.refusal("""
            devices:
              - device: ibeacon
              - device: ibeacon
            fleets:
              - device: ibeacon
                count: 3
                name: "blemu iBeacon {index}"
            """)
        #expect(clash == "fleet.yaml:3: devices[1]: runs as `blemu iBeacon 2` (its own name and copy number), which is also fleets[0] member 2's name; give it a `name:` (names are one device's each)",
                "\(clash ?? "accepted")")
        // Its address from that name, given to a member by the member's pattern.
        let derived = PeripheralConfiguration.identityAddress(deviceName: "ibeacon", localName: "blemu iBeacon", configured: nil)
        let addressClash = Self.refusal("""
            devices:
              - device: ibeacon
            fleets:
              - device: ibeacon
                count: 1
                name: "Tag {index}"
                address: "\(derived)"
            """)
        #expect(addressClash == "fleet.yaml:2: devices[0]: its address from its name, \(derived), is also fleets[0] member 1's address; give it an `address:` or another `name:`",
                "\(addressClash ?? "accepted")")
        // Named, or apart from the members' names: runs.
        #expect(Self.refusal("devices:\n  - device: ibeacon\n  - device: ibeacon\nfleets:\n  - { device: ibeacon, count: 3, name: \"Tag {index}\" }") == nil)
        #expect(Self.refusal("devices:\n  - device: ibeacon\n    name: Mine\n  - device: ibeacon\n    name: Other\nfleets:\n  - { device: ibeacon, count: 3, name: \"blemu iBeacon {index}\" }") == nil)
    }

    @Test func theDocumentedFleetExampleIsValid() throws {
        let root = "\(#filePath)".split(separator: "/", omittingEmptySubsequences: false).dropLast(3).joined(separator: "/")
        let reference = try ConfigurationFile.readFile(root + "/Docs/REFERENCE.md")
        let section = try #require(reference.firstRange(of: "### Fleets\n"))
        let rest = reference[section.upperBound...]
        let start = try #require(rest.firstRange(of: "```yaml\n"))
        let end = try #require(rest[start.upperBound...].firstRange(of: "```"))
        let plans = try Self.plans(String(rest[start.upperBound..<end.lowerBound]))
        #expect(plans.count == 1101)
        try DevicePlanning.checkSettings(plans)
        #expect(plans[1].name == "Tag 0001" && plans[1001].name == "Door 001")
        #expect(plans[1001].address?.description == "C0:00:00:00:00:01")
        // `fleet: thermometers` names the first for the control socket; the second is `fleet:2`.
        #expect(plans[0].fleetReference == nil && plans[1].fleetReference == "thermometers" && plans[1001].fleetReference == "2")
        #expect(plans[1001].settings.last?.key == "pin" && plans[1001].settings.last?.value.count == 6)
    }

    /// Issue 38's gateway fleet: 1,000 broadcasters and 100 sensors from one file pass the budget
    /// on this machine and every member's values pass its device's rules.
    @Test func theGatewayFleetIsPlannedAndChecked() throws {
        let text = GatewayFleet.configuration
        let plans = try Self.plans(text)
        #expect(plans.count == 1100)
        try DevicePlanning.checkSettings(plans)
        #expect(plans.filter { $0.startDelay > .zero }.count > 1000)
    }
}
