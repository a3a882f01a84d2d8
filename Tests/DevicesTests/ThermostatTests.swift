import BlemuATT
import BlemuCore
import BlemuGATT
import BlemuHost
@testable import BlemuDevices
import Testing
@testable import HostTestSupport

/// The thermal model alone, over simulated days.
@Suite struct ThermalModelTests {
    /// Samples the model every `step` seconds for `hours`.
    private func run(_ model: inout ThermalModel, hours: Double, step: Double = 10,
                     _ each: (ThermalModel) -> Void = { _ in }) {
        for _ in 0..<Int(hours * 3600 / step) {
            model.advance(seconds: step)
            each(model)
        }
    }

    @Test func heatsToTheTargetAtAPlausibleRate() {
        var model = ThermalModel(room: 15, outside: 5, humidity: 45, target: 21, mode: .heat, seed: 1)
        #expect(model.state == .heating)
        var reachedAfter: Double?
        run(&model, hours: 4) { m in
            if reachedAfter == nil, m.room >= 21 { reachedAfter = m.elapsed }
        }
        let seconds = try! #require(reachedAfter)
        // 6 °C at 4 to 15 °C an hour: a furnace warming the air of a house, not a toaster.
        let rate = 6 / (seconds / 3600)
        #expect((4...15).contains(rate), "heated at \(rate) °C/h")
    }

    @Test func theControllerSwitchesWithHysteresis() {
        var model = ThermalModel(room: 20.8, outside: 5, humidity: 45, target: 21, mode: .heat, seed: 2)
        var previous = model.state
        var switchesOn = 0
        var lowest = Double.infinity, highest = -Double.infinity
        run(&model, hours: 24, step: 5) { m in
            lowest = min(lowest, m.room)
            highest = max(highest, m.room)
            if m.state != previous {
                // It switches only at the edges of its band (a 5 s sample may land just past them).
                if m.state == .heating { #expect(m.room <= 21 - 0.3 + 0.02, "heating started at \(m.room)") }
                if m.state == .idle { #expect(m.room >= 21 + 0.3 - 0.02, "heating stopped at \(m.room)") }
                if m.state == .heating { switchesOn += 1 }
                previous = m.state
            }
            #expect(m.state != .cooling)
        }
        #expect(lowest >= 21 - 0.3 - 0.02 && highest <= 21 + 0.3 + 0.02, "room went \(lowest) to \(highest)")
        // A few cycles an hour, like a furnace: never chattering, never stuck.
        #expect((12...150).contains(switchesOn), "\(switchesOn) heating cycles in a day")
    }

    @Test func offDriftsToTheOutsideTemperature() {
        var model = ThermalModel(room: 22, outside: 4, humidity: 45, target: 21, mode: .off, seed: 3)
        var previous = model.room
        run(&model, hours: 72, step: 60) { m in
            #expect(m.state == .idle)
            #expect(m.room <= previous + 1e-9, "an unheated room never warms above a colder outside")
            previous = m.room
        }
        #expect(abs(model.room - 4) < 0.1, "after three days the room is at \(model.room)")
        // The first hour loses about 1.5 °C: a house, not a tent.
        var fresh = ThermalModel(room: 22, outside: 4, humidity: 45, target: 21, mode: .off, seed: 3)
        fresh.advance(seconds: 3600)
        #expect((0.5...3).contains(22 - fresh.room))
    }

    @Test func coolAndAutoKeepTheirBands() {
        var cool = ThermalModel(room: 28, outside: 32, humidity: 50, target: 24, mode: .cool, seed: 4)
        run(&cool, hours: 3)
        run(&cool, hours: 12, step: 5) { m in
            #expect(m.room >= 24 - 0.32 && m.room <= 24 + 0.32)
            #expect(m.state != .heating)
        }
        // Auto in winter heats within its lower band and never cools.
        var auto = ThermalModel(room: 18, outside: 0, humidity: 40, target: 21, mode: .auto, seed: 5)
        run(&auto, hours: 3)
        run(&auto, hours: 12, step: 5) { m in
            #expect(m.room >= 21 - 0.8 - 0.02 && m.room <= 21 - 0.2 + 0.02, "auto held \(m.room)")
            #expect(m.state != .cooling)
        }
    }

    /// The state after a day does not depend on how often somebody looked.
    @Test func theStateIsAFunctionOfElapsedTime() {
        var once = ThermalModel(room: 16, outside: 3, humidity: 50, target: 22, mode: .heat, seed: 6)
        var often = once
        once.advance(seconds: 86_400)
        for _ in 0..<86_400 { often.advance(seconds: 1) }
        #expect(abs(once.room - often.room) < 1e-6)
        #expect(abs(once.humidity - often.humidity) < 1e-6)
        #expect(once.state == often.state)
    }

    @Test func heatingDriesTheAirAndHumidityWandersGently() {
        var model = ThermalModel(room: 17, outside: 2, humidity: 50, target: 23, mode: .heat, seed: 7)
        let before = model.humidity
        model.advance(seconds: 3600)
        #expect(model.room > 22)
        // Warmer air holds more water: the same moisture is a lower relative humidity.
        #expect(model.humidity < before - 5, "humidity \(before) -> \(model.humidity)")

        var still = ThermalModel(room: 21, outside: 21, humidity: 45, target: 21, mode: .off, seed: 8)
        var lowest = 100.0, highest = 0.0
        for _ in 0..<(24 * 60) {
            still.advance(seconds: 60)
            lowest = min(lowest, still.humidity)
            highest = max(highest, still.humidity)
        }
        #expect(lowest > 38 && highest < 52, "a day of weather moved humidity \(lowest)..\(highest)")
        #expect(highest - lowest > 0.5, "humidity never moved")
    }

    @Test func valueEncodings() {
        #expect(EnvironmentalSensing.temperatureBytes(celsius: 21.37) == [0x59, 0x08])        // 2137
        #expect(EnvironmentalSensing.temperatureBytes(celsius: -5.5) == [0xDA, 0xFD])         // -550
        #expect(EnvironmentalSensing.temperatureBytes(celsius: -400) == [0x4D, 0x95])         // clamped at -273.15
        #expect(EnvironmentalSensing.humidityBytes(percent: 45.25) == [0xAD, 0x11])           // 4525
        #expect(EnvironmentalSensing.humidityBytes(percent: 140) == [0x10, 0x27])             // 10000
        #expect(EnvironmentalSensing.decodeTemperature([0x00, 0x80]) == nil)                   // not known
        #expect(EnvironmentalSensing.decodeTemperature([0x59, 0x08]) == 21.37)
        // ESS 1.0, 3.1.2.1: 11 octets, flags first, uint24 fields little-endian.
        let measurement = EnvironmentalSensing.Measurement(samplingFunction: .arithmeticMean, measurementPeriodSeconds: 0x01_02_03,
                                                           updateIntervalSeconds: 60, application: .air, uncertaintyHalfPercent: 4)
        #expect(measurement.encoded == [0x00, 0x00, 0x02, 0x03, 0x02, 0x01, 60, 0, 0, 0x01, 4])
        #expect(EnvironmentalSensing.TriggerSetting.valueChanged.encoded == [0x03])
        #expect(EnvironmentalSensing.TriggerSetting.notMoreOftenThan(seconds: 600).encoded == [0x02, 0x58, 0x02, 0x00])
        // The thermostat reports its sensor's steps: 0.1 °C and 1 %.
        let device = ThermostatDevice(seed: 1)
        #expect(device.temperatureBytes == EnvironmentalSensing.temperatureBytes(celsius: 19.0))
    }
}

/// The thermostat through the whole stack.
@Suite struct ThermostatDeviceTests {
    private func celsius(_ bytes: [UInt8]?) -> Double? { bytes.flatMap(EnvironmentalSensing.decodeTemperature) }

    @Test func servesESSDescriptorsAsTheSpecLaysThemOut() throws {
        let device = ThermostatDevice(seed: 1)
        let bench = try Bench.connected(device)
        for characteristic in [device.temperature, device.humidity] {
            // ESS 1.0, Table 3.2: a notifying ESS characteristic has an ES Trigger Setting.
            let trigger = try #require(bench.descriptorHandle(characteristic, EnvironmentalSensing.triggerSettingDescriptor))
            #expect(bench.read(trigger) == [0x03], "notify when the value changes")
            // Read-only: writing it would need a bond (ESS 3.1.2.3.1).
            #expect(bench.write(trigger, [0x00]).last?.last == ATTError.writeNotPermitted.rawValue)
            let measurement = try #require(bench.descriptorHandle(characteristic, EnvironmentalSensing.measurementDescriptor))
            let value = try #require(bench.read(measurement))
            #expect(value.count == 11)
            #expect(Array(value[0...2]) == [0x00, 0x00, 0x01], "flags 0, instantaneous")
            #expect(value[9] == 0x14, "indoor")
            #expect(bench.descriptorHandle(characteristic, GATTType.clientConfiguration) != nil)
        }
        let range = try #require(bench.descriptorHandle(device.temperature, GATTType.validRange))
        #expect(bench.read(range) == [0x60, 0xF0, 0x34, 0x21])          // -40.00 .. 85.00 °C
        let humidityRange = try #require(bench.descriptorHandle(device.humidity, GATTType.validRange))
        #expect(bench.read(humidityRange) == [0x00, 0x00, 0x10, 0x27])  // 0.00 .. 100.00 %
        let targetRange = try #require(bench.descriptorHandle(device.target, GATTType.validRange))
        #expect(bench.read(targetRange) == [0xF4, 0x01, 0xAC, 0x0D])    // 5.00 .. 35.00 °C
        let format = try #require(bench.descriptorHandle(device.target, GATTType.presentationFormat))
        #expect(bench.read(format) == [0x0E, 0xFE, 0x2F, 0x27, 0x01, 0x00, 0x00])
    }

    @Test func readsDecodeToTheWorld() throws {
        let device = ThermostatDevice(seed: 2)
        let bench = try Bench.connected(device)
        #expect(celsius(bench.read(device.temperature)) == 19.0)
        #expect(celsius(bench.read(device.target)) == 21.0)
        #expect(bench.read(device.mode) == [ThermostatMode.heat.rawValue])
        #expect(bench.read(device.heatingState) == [HeatingState.heating.rawValue])
        let humidity = try #require(bench.read(device.humidity).flatMap(EnvironmentalSensing.decodeHumidity))
        #expect(humidity == 45)
        // Nobody listens, yet time passes: an hour later the room is at its target.
        bench.scheduler.advance(by: .seconds(3600))
        let warm = try #require(celsius(bench.read(device.temperature)))
        #expect(abs(warm - 21) <= 0.35, "room \(warm) an hour later")
        // Values move in the sensor's steps.
        #expect(Int((warm * 100).rounded()) % 10 == 0)
        #expect(try #require(bench.read(device.humidity)).count == 2)
    }

    /// The device API's write promises, through the whole stack (Vol 3, Part F, 3.4.5.1).
    @Test func writesKeepTheirLengthAndRange() throws {
        let device = ThermostatDevice(seed: 3)
        let bench = try Bench.paired(device)   // writes need an encrypted link
        // Target: exactly 2 bytes (else 0x0D), 500...3500 (else Out of Range 0xFF).
        #expect(bench.writeError(device.target, [0xC4]) == 0x0D)
        #expect(bench.writeError(device.target, [0xC4, 0x09, 0x00]) == 0x0D)
        #expect(bench.writeError(device.target, []) == 0x0D)
        #expect(bench.writeError(device.target, [0xF3, 0x01]) == 0xFF)   // 4.99 °C
        #expect(bench.writeError(device.target, [0xAD, 0x0D]) == 0xFF)   // 35.01 °C
        #expect(bench.writeError(device.target, [0x18, 0xFC]) == 0xFF)   // -10.00 °C
        #expect(celsius(bench.read(device.target)) == 21.0, "a refused write changes nothing")
        #expect(bench.writeError(device.target, [0xF4, 0x01]) == nil)    // 5.00 °C, the lower bound
        #expect(bench.writeError(device.target, [0xAC, 0x0D]) == nil)    // 35.00 °C, the upper bound
        #expect(celsius(bench.read(device.target)) == 35.0)
        // Mode: one byte, 0...3.
        #expect(bench.writeError(device.mode, [0x04]) == 0xFF)
        #expect(bench.writeError(device.mode, [0xFF]) == 0xFF)
        #expect(bench.writeError(device.mode, [0x01, 0x00]) == 0x0D)
        #expect(bench.writeError(device.mode, [0x02]) == nil)
        #expect(bench.read(device.mode) == [0x02])
        // Read-only values refuse writes (Write Not Permitted).
        #expect(bench.writeError(device.heatingState, [0x00]) == 0x03)
        #expect(bench.writeError(device.temperature, [0x00, 0x00]) == 0x03)
        // A long write is checked as a whole at Execute Write (Vol 3, Part F, 3.4.6.3).
        let handle = Bench.le(device.target.valueHandle)
        #expect(bench.att([0x16] + handle + [0x00, 0x00, 0xFF, 0x7F]).first?.first == 0x17)
        #expect(bench.att([0x18, 0x01]) == [[0x01, 0x18] + handle + [0xFF]])
        #expect(celsius(bench.read(device.target)) == 35.0)
    }

    @Test func aNewTargetStartsTheHeatingAndTheRoomNotifiesEachStep() throws {
        let device = ThermostatDevice(seed: 4)
        #expect(device.settings.first { $0.key == "mode" }?.apply("off") == nil)
        #expect(device.settings.first { $0.key == "room" }?.apply("18") == nil)
        let bench = try Bench.paired(device)   // writes need an encrypted link
        #expect(bench.read(device.heatingState) == [0])
        bench.subscribe(device.temperature)
        bench.subscribe(device.heatingState)
        bench.subscribe(device.target)
        _ = bench.sent()

        // Heat to 22 °C: the heating starts at once, and the writer hears the new target too.
        let answer = bench.write(device.mode, [0x01])
        #expect(answer.notifications(of: device.heatingState) == [[1]])
        #expect(answer.last == [0x13])
        let target = bench.write(device.target, [0x98, 0x08])              // 22.00 °C
        #expect(target.notifications(of: device.target) == [[0x98, 0x08]])

        // Then each 0.1 °C the room gains is notified, in order, a step at a time.
        bench.run(for: .seconds(1200), step: .seconds(5))
        let steps = bench.sent().notifications(of: device.temperature).compactMap(EnvironmentalSensing.decodeTemperature)
        #expect(steps.count >= 20, "\(steps.count) steps in 20 minutes of heating")
        var previous = 18.0
        for value in steps {
            #expect(abs(value - previous - 0.1) < 0.001, "went \(previous) -> \(value)")
            previous = value
        }
        #expect(device.model.state == .heating)
    }

    /// A simulated day: a few hundred notifications, each a step, and no timers once nobody listens.
    @Test func aDayOfNotificationsWithoutAFloodAndNoTimersWhenNobodyListens() throws {
        let device = ThermostatDevice(seed: 5)
        let bench = try Bench.connected(device)
        bench.subscribe(device.temperature)
        bench.subscribe(device.humidity)
        bench.subscribe(device.heatingState)
        _ = bench.sent()
        bench.run(for: .seconds(86_400), step: .seconds(60))
        let sent = bench.sent()
        let temperatures = sent.notifications(of: device.temperature).map { Int(Int16(bitPattern: UInt16($0[0]) | UInt16($0[1]) << 8)) }
        let humidities = sent.notifications(of: device.humidity).map { Int(UInt16($0[0]) | UInt16($0[1]) << 8) }
        let states = sent.notifications(of: device.heatingState)
        // 17,280 ticks in a day; a notification only when a value takes a step.
        #expect((100...2000).contains(temperatures.count), "\(temperatures.count) temperature notifications")
        #expect(humidities.count < 500, "\(humidities.count) humidity notifications")
        #expect((24...300).contains(states.count), "\(states.count) heating state changes")
        for (a, b) in zip(temperatures, temperatures.dropFirst()) { #expect(abs(b - a) == 10) }
        for (a, b) in zip(humidities, humidities.dropFirst()) { #expect(abs(b - a) == 100) }
        for (a, b) in zip(states, states.dropFirst()) { #expect(a != b) }

        // Nobody listens: after the fast advertising phase, not a single timer is left.
        bench.subscribe(device.temperature, notify: false)
        bench.subscribe(device.humidity, notify: false)
        #expect(bench.scheduler.pendingCount > 0, "still ticking for the heating state")
        bench.subscribe(device.heatingState, notify: false)
        bench.scheduler.advance(by: .seconds(31))
        #expect(bench.scheduler.pendingCount == 0)
        bench.scheduler.advance(by: .seconds(3600))
        #expect(bench.sent().isEmpty)
        // And a disconnection ends the ticks as well.
        bench.subscribe(device.temperature)
        #expect(bench.scheduler.pendingCount == 1)
        bench.controller.disconnect(handle: Bench.link)
        bench.scheduler.advance(by: .seconds(31))
        #expect(bench.scheduler.pendingCount == 0)
    }

    @Test func settingsChangeTheWorldAndRefuseWhatTheyCannotTake() throws {
        let device = ThermostatDevice(seed: 6)
        let bench = try Bench.connected(device)
        func set(_ key: String, _ value: String) -> String? {
            device.settings.first { $0.key == key }.map { $0.apply(value) } ?? "no setting \(key)"
        }
        #expect(Set(device.settings.map(\.key)) == ["room", "outside", "humidity", "target", "mode", "battery"])
        bench.subscribe(device.temperature)
        _ = bench.sent()
        #expect(set("room", "23.4") == nil)
        #expect(bench.sent().notifications(of: device.temperature) == [EnvironmentalSensing.temperatureBytes(celsius: 23.4)])
        #expect(celsius(bench.read(device.temperature)) == 23.4)
        #expect(set("humidity", "62") == nil)
        #expect(bench.read(device.humidity) == EnvironmentalSensing.humidityBytes(percent: 62))
        #expect(set("mode", "cool") == nil)
        #expect(bench.read(device.mode) == [2])
        #expect(set("mode", "3") == nil)
        #expect(bench.read(device.mode) == [3])
        #expect(set("target", "19.5") == nil)
        #expect(celsius(bench.read(device.target)) == 19.5)
        #expect(set("outside", "-12") == nil)
        #expect(device.model.outside == -12)
        #expect(set("battery", "37") == nil)
        #expect(bench.read(device.battery.level) == [37])
        // Refusals name what is allowed and change nothing.
        for (key, value) in [("room", "hot"), ("room", "51"), ("humidity", "-1"), ("target", "4"), ("mode", "fan"),
                             ("mode", "4"), ("battery", "101"), ("outside", "nan")] {
            let refusal = set(key, value)
            #expect(refusal?.contains(key) == true, "\(key)=\(value): \(refusal ?? "accepted")")
        }
        #expect(celsius(bench.read(device.temperature)) == 23.4)
        #expect(bench.read(device.mode) == [3])
    }
}
