import Testing
@testable import BlemuStack

/// The `started` line names a few devices, and counts a fleet's thousands by kind.
@Suite struct StartedNoticeTests {
    @Test func aFewDevicesAreNamedAsBefore() {
        #expect(RunSession.startedDevices(["heart-rate", "lock"]) == "heart-rate, lock")
        #expect(RunSession.startedDevices(Array(repeating: "ibeacon", count: 8)) == Array(repeating: "ibeacon", count: 8).joined(separator: ", "))
    }

    /// Issue 38's gateway: 1,000 thermometers of a fleet and 100 heart-rate sensors made a
    /// line of about 15 KB, one name a device.
    @Test func aGatewayFleetIsCountedByKindAndFleet() {
        let names = ["heart-rate"] + Array(repeating: "bthome-thermometer", count: 1000) + Array(repeating: "heart-rate", count: 100)
        let fleets: [String?] = [nil] + Array(repeating: "thermometers", count: 1000) + Array(repeating: "2", count: 100)
        #expect(RunSession.startedDevices(names, fleets: fleets)
            == "1101 devices: 1 × heart-rate, 1000 × bthome-thermometer (fleet thermometers), 100 × heart-rate (fleet 2)")
        #expect(RunSession.startedDevices(Array(names.dropFirst())) == "1100 devices: 1000 × bthome-thermometer, 100 × heart-rate")
    }

    /// Ten thousand devices each of its own kind (profiles by path) still make a short line.
    @Test func manyKindsAreSummedUpPastTheFirstFew() {
        let names = (1...10_000).map { "./profiles/p\($0).json" }
        let line = RunSession.startedDevices(names)
        #expect(line.hasPrefix("10000 devices: 1 × ./profiles/p1.json, 1 × ./profiles/p2.json"))
        #expect(line.hasSuffix(", and 9992 more of 9992 other kinds"))
        #expect(line.utf8.count < 400, "\(line.utf8.count) bytes")
    }
}
