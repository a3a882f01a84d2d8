import BlemuConfig
import BlemuCore
import BlemuHCI
import BlemuTestSupport
import Testing

/// `fleets:` entries: N devices of a kind from one entry, their names and addresses from
/// patterns, their settings drawn from ranges by a seeded generator, the same on every machine.
@Suite struct FleetTests {
    private func parse(_ text: String) throws -> RunConfiguration {
        try ConfigurationFile.parse(text, file: "fleet.yaml")
    }

    private func refusal(_ text: String) -> String? {
        do {
            _ = try parse(text)
            return nil
        } catch {
            return "\(error)"
        }
    }

    private let thermometers = """
    fleets:
      - device: bthome-thermometer
        count: 50
        seed: 7
        name: "Tag {index:04}"
        settings:
          temperature: { around: 21.5, spread: 2 }
          battery: { min: 60, max: 100 }
          humidity: 40
        advertising: { jitter_ms: 10 }
        start_spread_s: 5
    """

    @Test func aFleetExpandsIntoItsMembersWithNamesFromThePatternAndStaticRandomAddresses() throws {
        let configuration = try parse(thermometers)
        #expect(configuration.devices.count == 50)
        #expect(configuration.fleets.count == 1)
        let first = configuration.devices[0], last = configuration.devices[49]
        #expect(first.device == "bthome-thermometer")
        #expect(first.name == "Tag 0001" && last.name == "Tag 0050")
        #expect(first.path == "fleets[0] member 1" && last.path == "fleets[0] member 50")
        #expect(first.fleet == "fleets[0]")
        #expect(first.location == "fleet.yaml:2")
        // Vol 6, Part B, 1.3.2.1: the two top bits set, the random part neither all 0 nor all 1.
        #expect(configuration.devices.allSatisfy { $0.address?.isValidStaticRandom == true })
        #expect(Set(configuration.devices.compactMap(\.address)).count == 50)
        #expect(first.settings.map(\.key) == ["temperature", "battery", "humidity"])
        #expect(first.settings[0].location == "fleet.yaml:7: fleets[0].settings.temperature (member 1)")
        #expect(first.settings[2].value == "40")
    }

    @Test func everyDrawnValueIsInItsRangeOnTheGridOfItsDecimalsAndTheDrawsDiffer() throws {
        let configuration = try parse(thermometers)
        var temperatures: Set<String> = [], batteries: Set<String> = []
        for device in configuration.devices {
            let temperature = device.settings[0].value, battery = device.settings[1].value
            // One decimal, as 21.5 is written; 19.5 to 23.5 both included.
            #expect(temperature.split(separator: ".").last?.count == 1, "\(temperature)")
            #expect(Double(temperature).map { (19.5...23.5).contains($0) } == true, "\(temperature)")
            #expect(!battery.contains(".") && Int(battery).map { (60...100).contains($0) } == true, "\(battery)")
            temperatures.insert(temperature)
            batteries.insert(battery)
            #expect(device.advertisingShift <= 16, "10 ms is 16 units of 0.625 ms")
            #expect(device.startDelay >= .zero && device.startDelay < .seconds(5))
        }
        // 50 draws of 41 values: a sanity check, not statistics (fixed seed: always the same).
        #expect(temperatures.count > 10 && batteries.count > 10)
        #expect(Set(configuration.devices.map(\.startDelay)).count > 10)
        #expect(Set(configuration.devices.map(\.advertisingShift)).count > 3)
    }

    @Test func theSameSeedGivesTheSameFleetAndAnotherSeedAnotherOne() throws {
        let once = try parse(thermometers), again = try parse(thermometers)
        #expect(once == again)
        let reseeded = try parse(thermometers.replacingOccurrences("seed: 7", with: "seed: 8"))
        #expect(reseeded.devices.map(\.name) == once.devices.map(\.name))
        #expect(reseeded.devices.map(\.address) != once.devices.map(\.address))
        #expect(reseeded.devices.map { $0.settings.map(\.value) } != once.devices.map { $0.settings.map(\.value) })
        #expect(reseeded.devices.map(\.startDelay) != once.devices.map(\.startDelay))
    }

    /// The generator is part of the file format: these values are what seed 7 gives on every
    /// machine (SplitMix64 and FNV-1a, no platform's random or hash). If this fails, every
    /// fleet's addresses and settings changed. (Checked against a separate Python rendering of
    /// the algorithm in Docs/REFERENCE.md, "Fleets".)
    @Test func seedSevenGivesTheseValuesOnEveryMachine() throws {
        let first = try parse(thermometers).devices[0]
        #expect(first.address?.description == "E3:AE:48:65:60:25")
        #expect(first.settings.map(\.value) == ["20.8", "84", "40"])
    }

    @Test func aValuesStreamDoesNotMoveWhenAnotherSettingOrMemberIsAdded() throws {
        let base = try parse(thermometers)
        let more = try parse(thermometers.replacingOccurrences("count: 50", with: "count: 60")
            .replacingOccurrences("      humidity: 40", with: "      humidity: { min: 30, max: 50 }"))
        for index in 0..<50 {
            #expect(more.devices[index].address == base.devices[index].address)
            #expect(more.devices[index].settings[0].value == base.devices[index].settings[0].value)
            #expect(more.devices[index].settings[1].value == base.devices[index].settings[1].value)
        }
    }

    @Test func twoFleetsOfDifferentKindsWithOneSeedDrawDifferentAddresses() throws {
        let configuration = try parse("""
        fleets:
          - { device: ibeacon, count: 100, name: "Beacon {index}" }
          - { device: eddystone, count: 100, name: "Eddy {index}" }
        """)
        #expect(configuration.devices.count == 200)
        #expect(Set(configuration.devices.compactMap(\.address)).count == 200)
    }

    @Test(arguments: [
        ("Tag {index}", 7, "Tag 7"),
        ("Tag {index:04}", 7, "Tag 0007"),
        ("Tag {index:04}", 12345, "Tag 12345"),
        ("{index:X}", 255, "FF"),
        ("{index:x}", 255, "ff"),
        ("{index:04X}", 255, "00FF"),
        ("{index:d}", 9, "9"),
        ("{{{index}}}", 3, "{3}"),
        ("Sensor", 3, "Sensor"),
        ("Tür {index:02}", 4, "Tür 04"),
    ])
    func patternsRenderTheIndex(pattern: String, index: Int, expected: String) throws {
        #expect(try FleetPattern(pattern).render(index) == expected)
    }

    @Test func anAddressPatternTakesColonsAnywhereAndMustGiveAStaticRandomAddress() {
        #expect(FleetPattern.address("C0:00:00:00:00:01")?.description == "C0:00:00:00:00:01")
        #expect(FleetPattern.address("C0:00:00:0000:2A")?.description == "C0:00:00:00:00:2A")
        #expect(FleetPattern.address("C0:00:00:00:00:00") == nil)  // the random part all zeros
        #expect(FleetPattern.address("FF:FF:FF:FF:FF:FF") == nil)  // all ones
        #expect(FleetPattern.address("40:00:00:00:00:01") == nil)  // not 0b11 on top
        #expect(FleetPattern.address("C0:00:00:00:00:001") == nil)  // 13 digits
    }

    @Test func anExplicitAddressPatternGivesEachMemberItsAddress() throws {
        let configuration = try parse("""
        fleets:
          - { device: ibeacon, count: 3, address: "C0:00:00:00:{index:04X}" }
        """)
        #expect(configuration.devices.map { $0.address?.description } == ["C0:00:00:00:00:01", "C0:00:00:00:00:02", "C0:00:00:00:00:03"])
        // The default name: the kind and the index.
        #expect(configuration.devices.map(\.name) == ["ibeacon 1", "ibeacon 2", "ibeacon 3"])
    }

    @Test func fleetsAndOrdinaryDevicesShareOneFile() throws {
        let configuration = try parse("""
        controller: tcp:127.0.0.1:6402
        devices:
          - device: heart-rate
            name: Bench HR
        fleets:
          - device: heart-rate
            count: 2
            name: "HR {index}"
            pin: { digits: 6 }
            passkey: "123456"
            advertising: { fast_interval_ms: 100, slow_interval_ms: 1022.5, jitter_ms: 5 }
          - device: lock
            count: 2
            seed: 3
            name: "Door {index}"
            pin: "2468"
        """)
        #expect(configuration.devices.map(\.name) == ["Bench HR", "HR 1", "HR 2", "Door 1", "Door 2"])
        #expect(configuration.devices[0].path == "devices[0]" && configuration.devices[0].fleet == nil)
        #expect(configuration.devices[1].pin?.count == 6 && configuration.devices[1].pin?.allSatisfy(\.isNumber) == true)
        #expect(configuration.devices[1].passkey == "123456")
        #expect(configuration.devices[1].advertising == AdvertisingTiming(fastInterval: 160, fastDuration: .seconds(30), slowInterval: 1636))
        #expect(configuration.devices[3].pin == "2468" && configuration.devices[4].pin == "2468")
    }

    @Test func jitterLengthensAMembersIntervalsWithinTheCoresRange() {
        let timing = AdvertisingTiming(fastInterval: 32, slowInterval: 0x4000 - 4)
        #expect(timing.lengthened(by: 8) == AdvertisingTiming(fastInterval: 40, slowInterval: 0x4000))
    }

    @Test func theLargeFleetOfAThousandBroadcastersAndAHundredSensorsExpands() throws {
        let text = GatewayFleet.configuration
        let configuration = try parse(text)
        #expect(configuration.devices.count == 1100)
        #expect(Set(configuration.devices.compactMap(\.name)).count == 1100)
        #expect(Set(configuration.devices.compactMap(\.address)).count == 1100)
    }

    /// Each bad fleet is one error naming the file, the line, the key and what is allowed.
    @Test(arguments: [
        ("fleets:\n  - device: ibeacon\n    count: 2\n    colour: red",
         "fleet.yaml:4: fleets[0]: unknown key `colour` (allowed: device, count, seed, name, address, controller, settings, pin, passkey, io_capability, bindkey_file, advertising, connection, start_spread_s, fleet)"),
        ("fleets:\n  - device: ibeacon", "fleet.yaml:2: fleets[0]: `count:` is missing (how many devices, 1 to 10000)"),
        ("fleets:\n  - count: 3", "fleet.yaml:2: fleets[0]: `device:` is missing (the kind of device, e.g. bthome-thermometer)"),
        ("fleets:\n  - device: ibeacon\n    count: 0", "fleet.yaml:3: fleets[0].count: takes a whole number from 1 to 10000, not `0`"),
        ("fleets:\n  - device: ibeacon\n    count: 10001", "fleet.yaml:3: fleets[0].count: takes a whole number from 1 to 10000, not `10001`"),
        ("fleets:\n  - device: ibeacon\n    count: many", "fleet.yaml:3: fleets[0].count: takes a whole number from 1 to 10000, not `many`"),
        ("fleets:\n  - { device: ibeacon, count: 6000 }\n  - { device: eddystone, count: 5000 }",
         "fleet.yaml:3: fleets[1].count: 11000 devices in the file; one blemu runs at most 10000 devices (run several processes for more)"),
        ("fleets:\n  - device: ibeacon\n    count: 2\n    seed: -1", "fleet.yaml:4: fleets[0].seed: takes a whole number from 0 to 18446744073709551615, not `-1`"),
        ("fleets:\n  - device: ibeacon\n    count: 2\n    name: \"Tag {idx}\"",
         "fleet.yaml:4: fleets[0].name: `{idx}` is not a placeholder (placeholders: {index}, {index:04} (zero-padded), {index:X} or {index:04X} (hexadecimal); {{ and }} for a brace)"),
        ("fleets:\n  - device: ibeacon\n    count: 2\n    name: \"Tag {index\"",
         "fleet.yaml:4: fleets[0].name: a `{` that is never closed (placeholders: {index}, {index:04} (zero-padded), {index:X} or {index:04X} (hexadecimal); {{ and }} for a brace)"),
        ("fleets:\n  - device: ibeacon\n    count: 2\n    name: \"Tag }\"",
         "fleet.yaml:4: fleets[0].name: a `}` that closes nothing (write `}}` for one; placeholders: {index}, {index:04} (zero-padded), {index:X} or {index:04X} (hexadecimal); {{ and }} for a brace)"),
        ("fleets:\n  - device: ibeacon\n    count: 2\n    name: \"Tag {index:4}\"",
         "fleet.yaml:4: fleets[0].name: `{index:4}` is not a placeholder (placeholders: {index}, {index:04} (zero-padded), {index:X} or {index:04X} (hexadecimal); {{ and }} for a brace)"),
        ("fleets:\n  - device: ibeacon\n    count: 2\n    address: \"40:00:00:00:00:{index:02X}\"",
         "fleet.yaml:4: fleets[0].address: member 1's address `40:00:00:00:00:01` is not a static random address (12 hex digits, the first C0-FF, the rest neither all 0 nor all 1)"),
        ("fleets:\n  - device: ibeacon\n    count: 300\n    address: \"C0:00:00:00:00:{index:02X}\"",
         "fleet.yaml:4: fleets[0].address: member 256's address `C0:00:00:00:00:100` is not a static random address (12 hex digits, the first C0-FF, the rest neither all 0 nor all 1)"),
        ("fleets:\n  - device: ibeacon\n    count: 2\n    settings:\n      power: { min: -50, max: -60 }",
         "fleet.yaml:5: fleets[0].settings.power: min -50 is above max -60"),
        ("fleets:\n  - device: ibeacon\n    count: 2\n    settings:\n      power: { min: -50 }",
         "fleet.yaml:5: fleets[0].settings.power: `max` is missing (a range is `{ min: A, max: B }` or `{ around: C, spread: D }`)"),
        ("fleets:\n  - device: ibeacon\n    count: 2\n    settings:\n      power: { around: -50, max: -40 }",
         "fleet.yaml:5: fleets[0].settings.power: unknown key `max` (allowed: around, spread)"),
        ("fleets:\n  - device: ibeacon\n    count: 2\n    settings:\n      power: { around: -50, spread: -4 }",
         "fleet.yaml:5: fleets[0].settings.power.spread: must not be negative"),
        ("fleets:\n  - device: ibeacon\n    count: 2\n    settings:\n      power: { min: 1e3, max: 2 }",
         "fleet.yaml:5: fleets[0].settings.power.min: `1e3` is not a plain decimal number (at most 12 digits and 6 decimals)"),
        ("fleets:\n  - device: ibeacon\n    count: 2\n    settings:\n      power: [1, 2]",
         "fleet.yaml:5: fleets[0].settings.power: expected a single value"),
        ("fleets:\n  - device: lock\n    count: 2\n    pin: { digits: 3 }", "fleet.yaml:4: fleets[0].pin.digits: a PIN has 4 to 8 digits"),
        ("fleets:\n  - device: lock\n    count: 2\n    pin: \"12\"", "fleet.yaml:4: fleets[0].pin: a PIN must be 4 to 8 digits, got `12`"),
        ("fleets:\n  - device: ibeacon\n    count: 2\n    advertising: { jitter_ms: 2000 }", "fleet.yaml:4: fleets[0].advertising.jitter_ms: 2000 is outside 0...1000 ms"),
        ("fleets:\n  - device: ibeacon\n    count: 2\n    advertising: { slow_interval_ms: 10240, jitter_ms: 10 }",
         "fleet.yaml:4: fleets[0].advertising.jitter_ms: the slow interval 10240 ms lengthened by 10 ms passes 10240 ms"),
        ("fleets:\n  - device: ibeacon\n    count: 2\n    advertising: { jitter: 10 }",
         "fleet.yaml:4: fleets[0].advertising: unknown key `jitter` (allowed: fast_interval_ms, fast_duration_s, slow_interval_ms, jitter_ms)"),
        ("fleets:\n  - device: ibeacon\n    count: 2\n    start_spread_s: -1", "fleet.yaml:4: fleets[0].start_spread_s: -1 is outside 0...3600 s"),
        ("fleets:\n  - device: ./scale.json\n    count: 2\n    settings: { bpm: 72 }",
         "fleet.yaml:4: fleets[0].settings: a GATT profile (./scale.json) has no settings: its values are the file's"),
        ("fleets: []", "fleet.yaml:1: fleets: the list is empty"),
        ("fleets:\n  - device: ibeacon\n    count: 2\n    settings: { " + (1...17).map { "s\($0): 1" }.joined(separator: ", ") + " }",
         "fleet.yaml:4: fleets[0].settings: 17 settings; a fleet gives at most 16"),
        // Names and addresses: one device's each, across devices and fleets.
        ("fleets:\n  - device: ibeacon\n    count: 2\n    name: Beacon",
         "fleet.yaml:2: fleets[0] member 2.name: `Beacon` is also fleets[0] member 1's name (names are one device's each)"),
        ("devices:\n  - device: heart-rate\n    name: Tag 3\nfleets:\n  - device: ibeacon\n    count: 5\n    name: \"Tag {index}\"",
         "fleet.yaml:5: fleets[0] member 3.name: `Tag 3` is also devices[0]'s name (names are one device's each)"),
        ("devices:\n  - device: heart-rate\n    address: C0:00:00:00:00:02\nfleets:\n  - device: ibeacon\n    count: 5\n    address: \"C0:00:00:00:00:{index:02X}\"",
         "fleet.yaml:5: fleets[0] member 2.address: C0:00:00:00:00:02 is also devices[0]'s address"),
        ("fleets:\n  - { device: ibeacon, count: 2, name: \"A {index}\" }\n  - { device: ibeacon, count: 2, name: \"B {index}\" }",
         "fleet.yaml:3: fleets[1] member 1.address: "),
        // A fleet's own name (`fleet:`, for the control socket): a word, one fleet's.
        ("fleets:\n  - device: ibeacon\n    count: 2\n    fleet: \"2\"",
         "fleet.yaml:4: fleets[0].fleet: `2` is not a fleet name: 1 to 64 letters, digits, `-`, `_` or `.`, the first a letter"),
        ("fleets:\n  - device: ibeacon\n    count: 2\n    fleet: \"Tag 0*\"",
         "fleet.yaml:4: fleets[0].fleet: `Tag 0*` is not a fleet name: 1 to 64 letters, digits, `-`, `_` or `.`, the first a letter"),
        ("fleets:\n  - { device: ibeacon, count: 2, seed: 1, fleet: beacons }\n  - { device: ibeacon, count: 2, seed: 2, fleet: beacons, name: \"B {index}\" }",
         "fleet.yaml:3: fleets[1].fleet: `beacons` is also fleets[0]'s name (each fleet's is its own)"),
    ])
    func aBadFleetIsOneErrorWithItsLine(text: String, expected: String) {
        let message = refusal(text)
        #expect(message?.hasPrefix(expected) == true, "\(String(describing: message))")
    }

    @Test func twoFleetsOfOneKindWithOneSeedAreToldToTakeTheirOwnSeeds() {
        let message = refusal("fleets:\n  - { device: ibeacon, count: 2, name: \"A {index}\" }\n  - { device: ibeacon, count: 2, name: \"B {index}\" }")
        #expect(message?.hasSuffix("is also fleets[0] member 1's address (two fleets of one kind with one seed draw the same addresses: give each its own `seed:`)") == true,
                "\(String(describing: message))")
    }

    @Test func decimalsAreKeptExact() {
        #expect(FleetDecimal("21.5") == FleetDecimal(scaled: 215, decimals: 1))
        #expect(FleetDecimal("-0.25")?.text == "-0.25")
        #expect(FleetDecimal("+7")?.text == "7")
        #expect(FleetDecimal("007.50")?.text == "7.50")
        for bad in ["", "-", "1.", ".5", "1e3", "0x10", "1.2.3", "nan", "1234567890123", "1.1234567", "１"] {
            #expect(FleetDecimal(bad) == nil, "\(bad)")
        }
    }
}

private extension String {
    func replacingOccurrences(_ target: String, with replacement: String) -> String {
        var out = "", rest = Substring(self)
        while let range = rest.firstRange(of: target) {
            out += rest[..<range.lowerBound] + replacement
            rest = rest[range.upperBound...]
        }
        return out + rest
    }
}
