import BlemuConfig
import BlemuCore
import BlemuHCI
import BlemuTransport
import Testing

@Suite struct ConfigurationFileTests {
    @Test func aFullFileIsRead() throws {
        let text = """
        # the bench
        controller: tcp:127.0.0.1:6402
        devices:
          - device: heart-rate
            name: Bench HR
            address: C4:12:34:56:78:9A
            settings: { bpm: 72, battery: 80 }
            advertising: { fast_interval_ms: 20, fast_duration_s: 45, slow_interval_ms: 211.25 }
            connection: { interval_min_ms: 15, interval_max_ms: 30, latency: 0, timeout_ms: 4000 }
          - device: lock
            controller: hci1
            pin: 0123
            passkey: "004321"
            privacy: true
            rpa_timeout_s: 60
        """
        let configuration = try ConfigurationFile.parse(text, file: "bench.yaml")
        #expect(configuration.controller == .tcp(host: "127.0.0.1", port: 6402))
        #expect(configuration.devices.count == 2)
        let hr = configuration.devices[0]
        #expect(hr.device == "heart-rate")
        #expect(hr.name == "Bench HR")
        #expect(hr.address == BluetoothAddress("C4:12:34:56:78:9A"))
        #expect(hr.settings.map(\.key) == ["bpm", "battery"])
        #expect(hr.settings.map(\.value) == ["72", "80"])
        #expect(hr.settings.first?.location == "bench.yaml:7: devices[0].settings.bpm")
        #expect(hr.advertising == AdvertisingTiming(fastInterval: 32, fastDuration: .seconds(45), slowInterval: 338))
        #expect(hr.connection == ConnectionParameters(intervalMin: 12, intervalMax: 24, peripheralLatency: 0, supervisionTimeout: 400))
        let lock = configuration.devices[1]
        #expect(lock.controller == .hci(index: 1))
        // An unquoted PIN keeps its leading zero: the text is read, not a number.
        #expect(lock.pin == "0123")
        #expect(lock.passkey == "004321")
        #expect(lock.privacy == true && lock.privateAddressTimeout == 60)
        #expect(hr.privacy == nil && hr.privateAddressTimeout == nil)
    }

    /// Each bad value is one error naming the file, the line, the key and what is allowed.
    @Test(arguments: [
        ("devices:\n  - device: lock\n    pin: 12", "f.yaml:3: devices[0].pin: a PIN must be 4 to 8 digits, got `12`"),
        ("devices:\n  - device: lock\n    passkey: 12345a", "f.yaml:3: devices[0].passkey: a passkey must be 6 digits, got `12345a`"),
        ("devices:\n  - device: x\n    colour: red", "f.yaml:3: devices[0]: unknown key `colour` (allowed: device, name, address, controller, settings, pin, passkey, advertising, connection, privacy, rpa_timeout_s)"),
        ("devices:\n  - device: x\n    privacy: yes please", "f.yaml:3: devices[0].privacy: takes true or false, not `yes please`"),
        ("devices:\n  - device: x\n    privacy: true\n    rpa_timeout_s: 0", "f.yaml:4: devices[0].rpa_timeout_s: takes whole seconds from 1 to 41400, not `0`"),
        ("devices:\n  - device: x\n    rpa_timeout_s: 60", "f.yaml:3: devices[0].rpa_timeout_s: needs `privacy: true`"),
        ("devices:\n  - name: A", "f.yaml:2: devices[0]: `device:` is missing (the device to run, e.g. heart-rate)"),
        ("devices:\n  - device: x\n    address: 00:11:22:33:44:55", "f.yaml:3: devices[0].address: `00:11:22:33:44:55` is not a static random address like C4:12:34:56:78:9A (first byte C0-FF)"),
        ("devices:\n  - device: x\n    advertising: { fast_interval_ms: 5 }", "f.yaml:3: devices[0].advertising.fast_interval_ms: 5 is outside 20...10240 ms"),
        ("devices:\n  - device: x\n    advertising: { fast_interval_ms: 21 }", "f.yaml:3: devices[0].advertising.fast_interval_ms: 21 ms is not a whole number of 0.625 ms units"),
        ("devices:\n  - device: x\n    connection: { interval_min_ms: 15 }", "f.yaml:3: devices[0].connection: `interval_max_ms` is missing (give all of interval_min_ms, interval_max_ms, latency, timeout_ms)"),
        ("devices:\n  - device: x\n    controller: serial:/dev/ttyS0:abc", "f.yaml:3: devices[0].controller: "),
        ("colour: red\ndevices: []", "f.yaml:1: unknown key `colour` (allowed: controller, devices)"),
        ("devices: []", "f.yaml:1: devices: the list is empty"),
        ("controller: tcp:127.0.0.1:6402", "f.yaml: no `devices:` list (each entry at least `- device: NAME`)"),
        ("", "f.yaml: the file is empty; it needs a `devices:` list"),
        ("devices: [", "f.yaml: not valid YAML"),
        ("- a\n- b", "f.yaml:1: expected a mapping of `key: value` lines"),
        ("devices:\n  - device: x\n    name: A\n    name: B", "f.yaml: not valid YAML: Parser: expected all keys to be unique"),
    ])
    func badValuesAreNamed(_ text: String, _ expected: String) {
        do {
            _ = try ConfigurationFile.parse(text, file: "f.yaml")
            Issue.record("accepted: \(text)")
        } catch {
            #expect(error.description.hasPrefix(expected), "\(error.description)")
        }
    }

    @Test func connectionRulesOfTheCoreAreChecked() {
        let text = "devices:\n  - device: x\n    connection: { interval_min_ms: 30, interval_max_ms: 15, latency: 0, timeout_ms: 4000 }"
        #expect(throws: ConfigurationError.self) { try ConfigurationFile.parse(text, file: "f.yaml") }
    }

    @Test func aMissingFileSaysSo() {
        do {
            _ = try ConfigurationFile.load(path: "/nonexistent/blemu.yaml")
            Issue.record("loaded a missing file")
        } catch {
            #expect(error.description == "/nonexistent/blemu.yaml: No such file or directory")
        }
    }
}
