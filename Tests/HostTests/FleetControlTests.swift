import BlemuControl
import BlemuCore
import BlemuDevices
import BlemuHost
import Logging
import Testing
@testable import HostTestSupport

/// The control socket over a fleet: `list` by a pattern or `fleet:NAME` lists those members
/// only, a `list` of more than one reply holds counts the rest, and the commands that change
/// a device refuse a pattern.
@Suite struct FleetControlTests {
    /// Twelve thermometers `Tag 0001`… of fleet `thermometers`, and a heart rate sensor.
    private static func fleet() throws -> (benches: [Bench], control: DeviceControl) {
        var benches = [try Bench(device: HeartRateDevice(seed: 1), name: "Bench HR")]
        for index in 1...12 {
            benches.append(try Bench(device: BTHomeThermometerDevice(seed: UInt64(index)), name: "Tag 00" + (index < 10 ? "0" : "") + "\(index)"))
        }
        let peripherals = benches.map(\.peripheral)
        let control = DeviceControl(logger: Logger(label: "test") { _ in SwiftLogNoOpLogHandler() }, scheduler: benches[0].scheduler) { peripherals }
        control.fleets = [nil] + Array(repeating: "thermometers", count: 12)
        return (benches, control)
    }

    private static func run(_ control: DeviceControl, _ command: ControlCommand) -> JSONValue {
        control.execute(ControlRequest(id: 1, command: command), client: 1)
    }

    private static func names(_ reply: JSONValue) -> [String] {
        guard case .object(let members) = reply, case .array(let devices)? = members.first(where: { $0.0 == "devices" })?.1 else { return [] }
        return devices.compactMap { device in
            guard case .object(let fields) = device, case .string(let name)? = fields.first(where: { $0.0 == "name" })?.1 else { return nil }
            return name
        }
    }

    /// A member of the reply: a string as it is, anything else as JSON writes it.
    private static func member(_ reply: JSONValue, _ key: String) -> String? {
        guard case .object(let members) = reply, let value = members.first(where: { $0.0 == key })?.1 else { return nil }
        if case .string(let text) = value { return text }
        return value.encoded
    }

    @Test func listByAPatternOrAFleetListsThoseMembersOnly() throws {
        let (_, control) = try Self.fleet()
        #expect(Self.names(Self.run(control, .list(device: "Tag 000*"))) == (1...9).map { "Tag 000\($0)" })
        #expect(Self.names(Self.run(control, .list(device: "Tag 00[1-4]?"))) == ["Tag 0010", "Tag 0011", "Tag 0012"])
        #expect(Self.names(Self.run(control, .list(device: "fleet:thermometers"))).count == 12)
        #expect(Self.names(Self.run(control, .list(device: "Bench HR"))) == ["Bench HR"])
        #expect(Self.names(Self.run(control, .list(device: nil))).count == 13)
        // Each member says its fleet as `fleet:` takes it.
        let listed = Self.run(control, .list(device: "Tag 0001")).encoded
        #expect(listed.contains("\"fleet\":\"fleet:thermometers\""), "\(listed)")
        #expect(Self.run(control, .list(device: "Bench HR")).encoded.contains("\"fleet\":null"))
        // Nothing fits: refused with the reason.
        #expect(Self.member(Self.run(control, .list(device: "Tag 9*")), "error") == (
            "pattern 'Tag 9*' fits no device's name; devices: heart-rate (\"Bench HR\"), bthome-thermometer#1 (\"Tag 0001\"), "
            + "bthome-thermometer#2 (\"Tag 0002\"), bthome-thermometer#3 (\"Tag 0003\"), bthome-thermometer#4 (\"Tag 0004\"), "
            + "bthome-thermometer#5 (\"Tag 0005\"), bthome-thermometer#6 (\"Tag 0006\"), bthome-thermometer#7 (\"Tag 0007\") and 5 more"))
    }

    @Test func aListLongerThanOneReplyHoldsCountsTheRest() throws {
        let (_, control) = try Self.fleet()
        let one = Self.run(control, .list(device: "Tag 0001"))
        guard case .object(let members) = one, case .array(let entries)? = members.first(where: { $0.0 == "devices" })?.1,
              let entry = entries.first else {
            Issue.record("no entry: \(one.encoded)")
            return
        }
        // Room for four entries: the other eight are counted, never cut silently.
        control.maxListBytes = 4 * (entry.encoded.utf8.count + 1) + 10
        let reply = Self.run(control, .list(device: "fleet:thermometers"))
        #expect(Self.names(reply) == ["Tag 0001", "Tag 0002", "Tag 0003", "Tag 0004"])
        #expect(Self.member(reply, "left_out") == "8")
        #expect(Self.member(reply, "ok") == "true")
        #expect(Self.member(Self.run(control, .list(device: "Tag 000[1-3]")), "left_out") == nil)
        // The default holds a thousand thermometers (the issue's gateway fleet) in one reply.
        let defaultBytes = DeviceControl(logger: Logger(label: "t"), scheduler: ManualScheduler()) { [] }.maxListBytes
        #expect((entry.encoded.utf8.count + 1) * 1000 <= defaultBytes, "\(entry.encoded.utf8.count) bytes an entry")
    }

    @Test func commandsForOneDeviceRefuseAPatternOrAFleet() throws {
        let (benches, control) = try Self.fleet()
        let reply = Self.run(control, .advertise(device: "Tag 0*", on: false))
        #expect(Self.member(reply, "error") == (
            "'Tag 0*' is a pattern: advertise acts on one device; patterns and fleets are for list and watch (a device whose name holds *, ? or [ is named by DEVICE#N)"))
        #expect(Self.member(Self.run(control, .set(device: "fleet:thermometers", key: "battery", value: "50")), "error")
            .map { $0.contains("is a fleet: set acts on one device") } == true)
        let allowed = benches.dropFirst().allSatisfy { $0.peripheral.advertisingAllowed }
        #expect(allowed)
        #expect(DeviceControl.check(.set(device: "Tag 0*", key: "battery", value: "50"), devices: benches.map(\.peripheral))?
            .contains("is a pattern") == true)
        #expect(Self.member(Self.run(control, .advertise(device: "Tag 0003", on: false)), "ok") == "true")
    }
}
