import Testing
@testable import BlemuControl

/// DEVICE: the device name when one copy runs, DEVICE#N, or the local name; ambiguity names the choices.
@Suite struct DeviceNamesTests {
    private let names = DeviceNames([
        ("heart-rate", "blemu Heart Rate"), ("thermostat", "blemu Thermostat"), ("heart-rate", "blemu Heart Rate 2"),
    ])

    private func resolve(_ name: String) -> Int? { try? names.resolve(name).get() }

    @Test func refs() {
        #expect(names.entries.map(\.ref) == ["heart-rate#1", "thermostat", "heart-rate#2"])
    }

    @Test func byNameCopyOrLocalName() {
        #expect(resolve("thermostat") == 1)
        #expect(resolve("thermostat#1") == 1)
        #expect(resolve("heart-rate#1") == 0)
        #expect(resolve("heart-rate#2") == 2)
        #expect(resolve("blemu Heart Rate 2") == 2)
        #expect(resolve("blemu Thermostat") == 1)
    }

    @Test func ambiguityNamesTheChoices() throws {
        guard case .failure(let error) = names.resolve("heart-rate") else {
            Issue.record("heart-rate with two copies was not refused")
            return
        }
        #expect(error.message.contains("names 2 devices"))
        #expect(error.message.contains("heart-rate#1 (\"blemu Heart Rate\")"))
        #expect(error.message.contains("heart-rate#2 (\"blemu Heart Rate 2\")"))
    }

    @Test func unknownNamesListTheDevices() {
        guard case .failure(let error) = names.resolve("lock") else {
            Issue.record("lock was found")
            return
        }
        #expect(error.message.contains("no device 'lock'"))
        #expect(error.message.contains("thermostat (\"blemu Thermostat\")"))
        #expect(resolve("heart-rate#3") == nil)
        #expect(resolve("heart-rate#0") == nil)
        #expect(resolve("") == nil)
    }

    @Test func aLocalNameSharedByTwoIsAmbiguous() {
        let twins = DeviceNames([("heart-rate", "Same"), ("lock", "Same")])
        #expect((try? twins.resolve("Same").get()) == nil)
        #expect((try? twins.resolve("lock").get()) == 1)
        #expect((try? DeviceNames([]).resolve("x").get()) == nil)
    }
}

/// `list` and `watch` take several devices: a pattern or a fleet; the commands that change one
/// device take one, and refuse patterns and fleets with the reason.
@Suite struct DeviceSelectionTests {
    /// A bench heart rate, twelve thermometers of fleet `thermometers`, three locks of the
    /// second fleet (no name: `fleet:2`).
    private let names: DeviceNames = {
        var devices: [(device: String, localName: String)] = [("heart-rate", "Bench HR")]
        var fleets: [String?] = [nil]
        for index in 1...12 {
            devices.append(("bthome-thermometer", "Tag " + String(repeating: "0", count: 4 - String(index).count) + String(index)))
            fleets.append("thermometers")
        }
        for index in 1...3 {
            devices.append(("lock", "Door \(index)"))
            fleets.append("2")
        }
        return DeviceNames(devices, fleets: fleets)
    }()

    private func select(_ text: String) -> [Int]? { try? names.select(text).get() }
    private func refusal(_ text: String) -> String? {
        guard case .failure(let error) = names.select(text) else { return nil }
        return error.message
    }

    @Test func aPatternSelectsTheDevicesWhoseNamesItFits() {
        #expect(select("Tag 000*") == Array(1...9))
        #expect(select("Tag 00[1-4]?") == [10, 11, 12])
        #expect(select("Tag 001[!0]") == [11, 12])
        #expect(select("Door ?") == [13, 14, 15])
        // By the device name and DEVICE#N too.
        #expect(select("lock*") == [13, 14, 15])
        #expect(select("bthome-thermometer#1?") == [10, 11, 12])
        #expect(select("*") == Array(0...15))
    }

    @Test func aFleetSelectsItsMembersByNameOrNumber() {
        #expect(select("fleet:thermometers") == Array(1...12))
        #expect(select("fleet:2") == [13, 14, 15])
        #expect(names.entries[1].fleet == "thermometers")
        #expect(names.entries[0].fleet == nil)
    }

    @Test func aNameIsStillOneDevice() {
        #expect(select("Bench HR") == [0])
        #expect(select("Tag 0003") == [3])
        #expect(select("lock#2") == [14])
    }

    @Test func whatSelectsNothingIsRefusedWithTheReason() {
        #expect(refusal("Tag 9*")?.contains("pattern 'Tag 9*' fits no device's name") == true)
        #expect(refusal("Tag [9")?.contains("not closed by ]") == true)
        let noFleet = refusal("fleet:thermometrs")
        #expect(noFleet?.contains("no fleet 'thermometrs'; fleets: fleet:thermometers (12 devices), fleet:2 (3 devices)") == true,
                "\(noFleet ?? "accepted")")
        #expect(DeviceNames([("heart-rate", "HR")]).select("fleet:1").failureMessage?.contains("no fleets run") == true)
    }

    /// `set 'Tag 0*' …` on a thousand devices by a slip is not offered.
    @Test func aCommandForOneDeviceRefusesPatternsAndFleets() {
        #expect(names.resolveOne("Tag 0*", command: "set").failureMessage?
            .contains("'Tag 0*' is a pattern: set acts on one device; patterns and fleets are for list and watch") == true)
        #expect(names.resolveOne("fleet:thermometers", command: "fault").failureMessage?
            .contains("is a fleet: fault acts on one device") == true)
        #expect((try? names.resolveOne("Tag 0003", command: "set").get()) == 3)
        // A device whose own name holds a `*` is still named by it.
        let starred = DeviceNames([("heart-rate", "Lamp *1"), ("heart-rate", "Lamp 21")])
        #expect((try? starred.resolveOne("Lamp *1", command: "set").get()) == 0)
        #expect(starred.select("Lamp \\*1").successValue == [0])
    }

    /// A name that fits none, or many, of a thousand devices: the error names a few and counts the rest.
    @Test func errorsAboutAThousandDevicesStayShort() {
        let fleet = DeviceNames((1...1000).map { ("bthome-thermometer", "Tag \($0)") })
        let unknown = fleet.resolve("Tag 0").failureMessage ?? ""
        #expect(unknown.contains("and 992 more"))
        #expect(unknown.utf8.count < 600, "\(unknown.utf8.count) bytes")
        let ambiguous = fleet.resolve("bthome-thermometer").failureMessage ?? ""
        #expect(ambiguous.contains("names 1000 devices") && ambiguous.contains("and 992 more"))
        #expect(ambiguous.utf8.count < 600, "\(ambiguous.utf8.count) bytes")
    }
}

extension Result {
    var failureMessage: String? {
        guard case .failure(let error) = self else { return nil }
        return (error as? ControlRequestError)?.message ?? "\(error)"
    }
    var successValue: Success? { try? get() }
}
