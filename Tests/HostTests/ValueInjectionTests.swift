import BlemuControl
import BlemuCore
import BlemuDevices
import BlemuGATT
import BlemuHost
import Logging
import Testing
@testable import HostTestSupport

/// The control socket's `notify` and `set … --exact` on a running device (`DeviceControl`,
/// `ValueInjection`, the devices' held values): what a test sends is exactly what the app gets.
@Suite struct ValueInjectionTests {
    static func control(_ bench: Bench) -> DeviceControl {
        DeviceControl(logger: Logger(label: "test") { _ in SwiftLogNoOpLogHandler() }, scheduler: bench.scheduler) { [bench.peripheral] }
    }

    /// The reply's members by name: a string as it is, anything else as JSON writes it.
    static func reply(_ value: JSONValue) -> [String: String] {
        guard case .object(let members) = value else { return [:] }
        return Dictionary(members.map { member in
            if case .string(let text) = member.1 { return (member.0, text) }
            return (member.0, member.1.encoded)
        }, uniquingKeysWith: { first, _ in first })
    }

    static func run(_ control: DeviceControl, _ command: ControlCommand) -> [String: String] {
        reply(control.execute(ControlRequest(id: 1, command: command), client: 1))
    }

    @Test func notifySendsExactlyTheBytesToTheSubscribedCentralsOnlyAndSaysHowMany() throws {
        let device = HeartRateDevice(seed: 1)
        let bench = try Bench.connected(device)
        bench.controller.connect(handle: 0x0041, peer: BluetoothAddress("F0:00:00:00:00:02")!)
        bench.subscribe(device.measurement)
        _ = bench.sent()
        let control = Self.control(bench)
        let reply = Self.run(control, .notify(device: "heart-rate", characteristic: BluetoothUUID(0x2A37), value: [0x00, 0x96]))
        #expect(reply["ok"] == "true")
        #expect(reply["centrals"] == "1" && reply["notified"] == "1" && reply["indicated"] == "0")
        #expect(reply["value"] == "0096")
        #expect(bench.sent().notifications(of: device.measurement) == [[0x00, 0x96]])
        #expect(bench.sent(link: 0x0041).isEmpty, "not subscribed: nothing")
    }

    /// A notification carries at most ATT_MTU - 3 octets (Vol 3, Part F, 3.4.7.1): a longer
    /// value is refused whole, nothing sent to anyone, rather than cut.
    @Test func aValueLongerThanASubscribersATTMTUMinus3IsRefusedNotCut() throws {
        let device = HeartRateDevice(seed: 1)
        let bench = try Bench.connected(device)
        bench.subscribe(device.measurement)
        _ = bench.sent()
        let control = Self.control(bench)
        let long = [UInt8](repeating: 0x5A, count: 21)
        let refused = Self.run(control, .notify(device: "heart-rate", characteristic: BluetoothUUID(0x2A37), value: long))
        #expect(refused["ok"] == "false")
        let message = refused["error"] ?? ""
        #expect(message.contains("21 bytes") && message.contains("ATT_MTU 23: at most 20 bytes") && message.contains("nothing sent"), "\(message)")
        #expect(bench.sent().notifications(of: device.measurement).isEmpty)
        // Exchange MTU (Vol 3, Part F, 3.4.2): with ATT_MTU 256 the same value goes whole.
        #expect(bench.att([0x02, 0x00, 0x01]).first?.first == 0x03)
        _ = bench.sent()
        #expect(Self.run(control, .notify(device: "heart-rate", characteristic: BluetoothUUID(0x2A37), value: long))["ok"] == "true")
        #expect(bench.sent().notifications(of: device.measurement) == [long])
    }

    @Test func notifyRefusesACharacteristicThatCannotNotifyOrIsNotThere() throws {
        let bench = try Bench.connected(HeartRateDevice(seed: 1))
        let control = Self.control(bench)
        let location = Self.run(control, .notify(device: "heart-rate", characteristic: BluetoothUUID(0x2A38), value: [1]))
        #expect(location["error"] == "characteristic 2A38 of heart-rate neither notifies nor indicates")
        let missing = Self.run(control, .notify(device: "heart-rate", characteristic: BluetoothUUID(0x2A6E), value: [1]))
        #expect(missing["error"] == "heart-rate has no characteristic 2A6E")
        // Checked before a scenario starts the same way.
        #expect(DeviceControl.check(.notify(device: "heart-rate", characteristic: BluetoothUUID(0x2A38), value: [1]),
                                    devices: [bench.peripheral]) != nil)
        #expect(DeviceControl.check(.notify(device: "heart-rate", characteristic: BluetoothUUID(0x2A37), value: [1]),
                                    devices: [bench.peripheral]) == nil)
    }

    /// `set heart-rate bpm 150` wanders around 150; with `--exact` every measurement says 150,
    /// with RR intervals of exactly 60/150 s, until bpm is set again.
    @Test func setExactHoldsTheHeartRateUntilItIsSetAgain() throws {
        let device = HeartRateDevice(seed: 2)
        let bench = try Bench.connected(device)
        let control = Self.control(bench)
        #expect(Self.run(control, .set(device: "heart-rate", key: "bpm", value: "150", exact: true))["exact"] == "true")
        bench.subscribe(device.measurement)
        bench.run(for: .seconds(120))
        let held = try bench.sent().notifications(of: device.measurement).map { try HeartRateMeasurement(decoding: $0[...]) }
        #expect(held.count >= 119)
        #expect(held.allSatisfy { $0.heartRate == 150 }, "\(held.map(\.heartRate))")
        #expect(held.flatMap(\.rrIntervals).allSatisfy { $0 == 410 }, "60/150 s in 1/1024 s")
        // Set again without --exact: the heart wanders once more.
        #expect(Self.run(control, .set(device: "heart-rate", key: "bpm", value: "150"))["ok"] == "true")
        bench.run(for: .seconds(120))
        let wandering = try bench.sent().notifications(of: device.measurement).map { try HeartRateMeasurement(decoding: $0[...]) }
        #expect(wandering.contains { $0.heartRate != 150 })
    }

    @Test func setExactHoldsTheBatteryTheRoomAndTheHumidity() throws {
        let heart = HeartRateDevice(seed: 1)
        let bench = try Bench.connected(heart)
        let control = Self.control(bench)
        #expect(Self.run(control, .set(device: "heart-rate", key: "battery", value: "42", exact: true))["ok"] == "true")
        bench.scheduler.advance(by: .seconds(3 * 3600))
        #expect(bench.read(heart.battery.level) == [42], "held: no drain")
        #expect(Self.run(control, .set(device: "heart-rate", key: "battery", value: "42"))["ok"] == "true")
        bench.scheduler.advance(by: .seconds(3600))
        #expect(bench.read(heart.battery.level) == [40], "set again: 2 % an hour")

        var model = ThermalModel(room: 15, outside: 0, humidity: 40, target: 21, mode: .heat, seed: 7)
        model.holdRoom(15)
        model.holdHumidity(55)
        model.advance(seconds: 6 * 3600)
        #expect(model.room == 15 && model.state == .heating, "held while the heating runs")
        #expect(abs(model.humidity - 55) < 1e-9)
        model.setRoom(15)
        model.advance(seconds: 3600)
        #expect(model.room > 20, "set again: the heating warms it")
        #expect(abs(model.humidity - 55) < 1e-9, "the humidity is still held")
        model.setHumidity(55)
        model.advance(seconds: 3600)
        #expect(abs(model.humidity - 55) > 1e-3, "set again: it follows the room")
    }

    /// A scenario's `set:` is checked against the setting's range before anything starts.
    @Test func checkTellsAValueOutOfRangeWithoutApplyingIt() throws {
        let thermostat = ThermostatDevice()
        let bench = try Bench(device: thermostat)
        let devices = [bench.peripheral]
        #expect(DeviceControl.check(.set(device: "thermostat", key: "room", value: "99"), devices: devices)
                == "room takes a number from -20 to 50, not '99'")
        #expect(DeviceControl.check(.set(device: "thermostat", key: "room", value: "30", exact: true), devices: devices) == nil)
        #expect(thermostat.model.room != 30, "a check applies nothing")
        #expect(DeviceControl.check(.set(device: "thermostat", key: "speed", value: "1"), devices: devices)?.contains("has no setting 'speed'") == true)
    }
}
