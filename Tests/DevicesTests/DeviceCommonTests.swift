import BlemuATT
import BlemuCore
import BlemuDevice
import BlemuGATT
import BlemuHost
import BlemuDevices
import Testing
@testable import HostTestSupport

/// The shared pieces of Devices/Common, and the heart-rate settings.
@Suite struct DeviceCommonTests {
    @Test func recentLinesKeepWholeNewestLinesWithinTheLimit() {
        let log = RecentLines(maxBytes: 40)
        log.append("one")
        log.append("two")
        #expect(log.text == "one\ntwo\n")
        log.append(String(repeating: "x", count: 30))
        // 4 + 4 + 31 = 39 bytes: all fit. One more line pushes the oldest out.
        #expect(log.lineCount == 3)
        log.append("four")
        #expect(log.text == "two\n" + String(repeating: "x", count: 30) + "\nfour\n")
        #expect(log.bytes.count <= 40)
        // A line longer than the whole log is cut between characters, never inside one.
        log.append(String(repeating: "é", count: 30))
        #expect(log.bytes.count <= 40)
        #expect(String(validating: log.bytes, as: UTF8.self) != nil)
    }

    @Test func aSteppedValueNotifiesOnlyOnANewStep() throws {
        let characteristic = Characteristic(0x2A6E, properties: [.read, .notify], onRead: { _, _ in nil })
        let stepped = SteppedValue(characteristic, step: 0.1, encode: EnvironmentalSensing.temperatureBytes)
        #expect(stepped.bytes(21.04) == EnvironmentalSensing.temperatureBytes(celsius: 21.0))
        #expect(stepped.bytes(21.06) == EnvironmentalSensing.temperatureBytes(celsius: 21.1))
        stepped.baseline(21.0)
        // Without a context nothing is sent, but what would be sent is remembered.
        #expect(!stepped.update(21.04, context: nil))
        #expect(stepped.notified.lastSent == EnvironmentalSensing.temperatureBytes(celsius: 21.0))
        stepped.update(21.06, context: nil)
        #expect(stepped.notified.lastSent == EnvironmentalSensing.temperatureBytes(celsius: 21.1))
    }

    @Test func settingsParseOneWay() {
        var number: Double?
        let room = DeviceSetting.number("room", "room temperature", in: -20...50) { number = $0 }
        #expect(room.apply(" 21.5 ") == nil && number == 21.5)
        #expect(room.apply("50.1") == "room takes a number from -20 to 50, not '50.1'")
        #expect(room.apply("inf") != nil && room.apply("") != nil && number == 21.5)
        var flag: Bool?
        let jammed = DeviceSetting.flag("jammed", "") { flag = $0 }
        #expect(jammed.apply("1") == nil && flag == true)
        #expect(jammed.apply("off") == nil && flag == false)
        #expect(jammed.apply("2") == "jammed takes 0 or 1, not '2'")
        var index: Int?
        let mode = DeviceSetting.choice("mode", "", names: ["off", "heat"]) { index = $0 }
        #expect(mode.apply("HEAT") == nil && index == 1)
        #expect(mode.apply("0") == nil && index == 0)
        #expect(mode.apply("2") == "mode takes one of off (0), heat (1), not '2'")
    }

    @Test func theBatterySettingSetsTheLevelAndItDrainsFromThere() throws {
        let device = HeartRateDevice(seed: 1)
        let bench = try Bench.connected(device)
        let battery = try #require(device.settings.first { $0.key == "battery" })
        // A new listener hears the level at once (before the Write Response).
        #expect(bench.subscribe(device.battery.level).notifications(of: device.battery.level) == [[100]])
        #expect(battery.apply("42") == nil)
        #expect(bench.sent().notifications(of: device.battery.level) == [[42]])
        #expect(bench.read(device.battery.level) == [42])
        bench.scheduler.advance(by: .seconds(3600))
        #expect(bench.read(device.battery.level) == [40], "2 % an hour")
        #expect(battery.apply("0") == nil)
        bench.scheduler.advance(by: .seconds(3600))
        #expect(bench.read(device.battery.level) == [0])
        #expect(battery.apply("-1") != nil && battery.apply("half") != nil)
    }

    @Test func heartRateSettings() throws {
        let device = HeartRateDevice(seed: 2)
        let bench = try Bench.connected(device)
        #expect(Set(device.settings.map(\.key)) == ["bpm", "contact", "battery"])
        let bpm = try #require(device.settings.first { $0.key == "bpm" })
        let contact = try #require(device.settings.first { $0.key == "contact" })
        #expect(bpm.apply("150") == nil)
        #expect(contact.apply("0") == nil)
        bench.subscribe(device.measurement)
        bench.run(for: .seconds(60))
        let measurements = try bench.sent().notifications(of: device.measurement).map { try HeartRateMeasurement(decoding: $0[...]) }
        #expect(measurements.count == 60)
        // The heart wanders around the rate it was set to, and the strap reports no skin contact.
        for m in measurements {
            #expect((130...170).contains(m.heartRate), "\(m.heartRate) bpm")
            #expect(m.sensorContact == .notDetected)
            for rr in m.rrIntervals { #expect(abs(Double(rr) / 1024 - 60 / Double(m.heartRate)) < 0.15) }
        }
        #expect(contact.apply("1") == nil)
        bench.run(for: .seconds(1))
        #expect(try HeartRateMeasurement(decoding: bench.sent().notifications(of: device.measurement)[0][...]).sensorContact == .detected)
        #expect(bpm.apply("10") != nil && bpm.apply("300") != nil && bpm.apply("fast") != nil)
    }
}
