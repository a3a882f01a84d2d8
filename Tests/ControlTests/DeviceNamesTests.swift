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
