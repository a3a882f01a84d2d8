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
            io_capability: display-yes-no
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
        #expect(lock.ioCapability == "display-yes-no")
        #expect(lock.privacy == true && lock.privateAddressTimeout == 60)
        #expect(hr.privacy == nil && hr.privateAddressTimeout == nil)
    }

    /// Each bad value is one error naming the file, the line, the key and what is allowed.
    @Test(arguments: [
        ("devices:\n  - device: lock\n    pin: 12", "f.yaml:3: devices[0].pin: a PIN must be 4 to 8 digits, got `12`"),
        // A GATT profile has no settings of a built-in device, nor the lock's PIN.
        ("devices:\n  - device: ./scale.json\n    name: S\n    settings: { bpm: 72 }", "f.yaml:4: devices[0].settings: a GATT profile (./scale.json) has no settings: its values are the file's"),
        ("devices:\n  - device: scale.json\n    pin: \"1234\"", "f.yaml:3: devices[0].pin: a GATT profile (scale.json) has no PIN: its values are the file's"),
        ("devices:\n  - device: lock\n    passkey: 12345a", "f.yaml:3: devices[0].passkey: a passkey must be 6 digits, got `12345a`"),
        ("devices:\n  - device: x\n    colour: red", "f.yaml:3: devices[0]: unknown key `colour` (allowed: device, name, address, controller, settings, pin, passkey, io_capability, advertising, connection, privacy, rpa_timeout_s, bindkey_file, scenario)"),
        ("devices:\n  - device: x\n    io_capability: telepathy", "f.yaml:3: devices[0].io_capability: `telepathy` is not an IO capability: display-only, display-yes-no, keyboard-only, keyboard-display, no-input-no-output"),
        ("devices:\n  - device: x\n    privacy: yes please", "f.yaml:3: devices[0].privacy: takes true or false, not `yes please`"),
        ("devices:\n  - device: x\n    privacy: true\n    rpa_timeout_s: 0", "f.yaml:4: devices[0].rpa_timeout_s: takes whole seconds from 1 to 41400, not `0`"),
        ("devices:\n  - device: x\n    rpa_timeout_s: 60", "f.yaml:3: devices[0].rpa_timeout_s: needs `privacy: true`"),
        ("devices:\n  - device: x\n    scenario: \"\"", "f.yaml:3: devices[0].scenario: give the scenario file's path"),
        ("devices:\n  - device: x\n    scenario: [a.yaml]", "f.yaml:3: devices[0].scenario: expected a single value"),
        ("devices:\n  - name: A", "f.yaml:2: devices[0]: `device:` is missing (the device to run, e.g. heart-rate)"),
        ("devices:\n  - device: x\n    address: 00:11:22:33:44:55", "f.yaml:3: devices[0].address: `00:11:22:33:44:55` is not a static random address like C4:12:34:56:78:9A (first byte C0-FF)"),
        ("devices:\n  - device: x\n    advertising: { fast_interval_ms: 5 }", "f.yaml:3: devices[0].advertising.fast_interval_ms: 5 is outside 20...10240 ms"),
        ("devices:\n  - device: x\n    advertising: { fast_interval_ms: 21 }", "f.yaml:3: devices[0].advertising.fast_interval_ms: 21 ms is not a whole number of 0.625 ms units"),
        ("devices:\n  - device: x\n    connection: { interval_min_ms: 15 }", "f.yaml:3: devices[0].connection: `interval_max_ms` is missing (give all of interval_min_ms, interval_max_ms, latency, timeout_ms)"),
        ("devices:\n  - device: x\n    controller: serial:/dev/ttyS0:abc", "f.yaml:3: devices[0].controller: "),
        ("colour: red\ndevices: []", "f.yaml:1: unknown key `colour` (allowed: controller, devices, fleets, control, control_mode, log, log_level, btsnoop, btsnoop_max, state_dir)"),
        ("devices: []", "f.yaml:1: devices: the list is empty"),
        ("log: loud\ndevices: []", "f.yaml:1: log: `loud` is not one of auto, journal, stderr"),
        ("log_level: chatty\ndevices: []", "f.yaml:1: log_level: `chatty` is not one of trace, debug, info, notice, warning, error, critical"),
        ("control_mode: \"0600\"\ndevices: []", "f.yaml:1: control_mode: needs `control: PATH`"),
        ("control: c.sock\ncontrol_mode: \"0800\"\ndevices: []", "f.yaml:2: control_mode: `0800` is not an octal permission mode like 0600 or 0660"),
        ("btsnoop_max: 1M\ndevices: []", "f.yaml:1: btsnoop_max: needs `btsnoop: PATH`"),
        ("state_dir: \"\"\ndevices: []", "f.yaml:1: state_dir: is empty"),
        ("control: [a, b]\ndevices: []", "f.yaml:1: control: expected a single value"),
        ("controller: tcp:127.0.0.1:6402", "f.yaml: no `devices:` list (each entry at least `- device: NAME`)"),
        ("", "f.yaml: the file is empty; it needs a `devices:` list"),
        ("devices: [", "f.yaml: not valid YAML"),
        ("- a\n- b", "f.yaml:1: expected a mapping of `key: value` lines"),
        ("devices:\n  - device: x\n    name: A\n    name: B", "f.yaml:4: devices[0]: `name` is given twice"),
        ("devices: [\n  - device: x", "f.yaml: not valid YAML: line 2, column 3: "),
        ("devices:\n  - device: x\n---\ndevices: []", "f.yaml: not valid YAML: line 3: a second document (`---`); a configuration is one"),
        ("devices:\n  - device: x\n    name: *nothing", "f.yaml: not valid YAML: line 3: `*nothing` names no anchor before it"),
        ("defaults: &hr { bpm: 72 }\ndevices:\n  - device: x\n    settings: *hr", "f.yaml:1: unknown key `defaults` (allowed: controller, devices, fleets, control, control_mode, log, log_level, btsnoop, btsnoop_max, state_dir)"),
        ("devices:\n  - device: x\n    settings: [1, 2]", "f.yaml:3: devices[0].settings: expected a mapping of `key: value` lines"),
        ("devices:\n  - device: x\n    name: [A]", "f.yaml:3: devices[0].name: expected a single value"),
        ("devices:\n  - device: x\n    ? [a]\n    : b", "f.yaml:3: devices[0]: a key must be a plain word"),
        ("devices:\n  - device: x\n    name:", "f.yaml:3: devices[0].name: must be 1 to 248 bytes of UTF-8"),
        ("devices:\n  - device: x\n\u{7}", "f.yaml: not valid YAML: line 3, column 1: control characters are not allowed"),
        ("devices: " + String(repeating: "[", count: 100_000), "f.yaml: not valid YAML: line 1: nested deeper than 64 levels"),
    ])
    func badValuesAreNamed(_ text: String, _ expected: String) {
        do {
            _ = try ConfigurationFile.parse(text, file: "f.yaml")
            Issue.record("accepted: \(text)")
        } catch {
            #expect(error.description.hasPrefix(expected), "\(error.description)")
        }
    }

    /// The run's own settings at the top of the file (Docs/REFERENCE.md, "Configuration file"),
    /// paths relative to the file's directory as a device's files are.
    @Test func theRunsSettingsAreReadWithPathsRelativeToTheFile() throws {
        let text = """
            control: ./ctl.sock
            control_mode: "0660"
            log: journal
            log_level: debug
            btsnoop: /var/log/blemu/hci.snoop
            btsnoop_max: 10M
            state_dir: state
            devices:
              - device: heart-rate
            """
        let run = try ConfigurationFile.parse(text, file: "/etc/blemu/run.yaml").run
        #expect(run.control == "/etc/blemu/ctl.sock")
        #expect(run.controlMode == "0660")
        #expect(run.log == "journal")
        #expect(run.logLevel == "debug")
        #expect(run.btsnoop == "/var/log/blemu/hci.snoop")
        #expect(run.btsnoopMax == "10M")
        #expect(run.stateDirectory == "/etc/blemu/state")
        #expect(try ConfigurationFile.parse("devices:\n  - device: lock", file: "f.yaml").run == ConfiguredRunSettings())
    }

    /// `scenario: FILE.yaml` runs against the device: its path relative to the file's directory.
    @Test func aDevicesScenarioIsThePathOfItsFile() throws {
        let text = "devices:\n  - device: heart-rate\n    scenario: ./app.yaml\n  - device: lock\n    scenario: /srv/s.yaml\n  - device: thermostat"
        let devices = try ConfigurationFile.parse(text, file: "/etc/blemu/run.yaml").devices
        #expect(devices.map(\.scenario) == ["/etc/blemu/app.yaml", "/srv/s.yaml", nil])
    }

    /// `device: FILE.json` is a GATT profile, its path relative to the configuration file's
    /// directory, with the keys that make sense for any device.
    @Test func aProfileIsADeviceWithThePathOfTheFile() throws {
        let text = """
        devices:
          - device: ./profiles/scale.json
            name: Clone
            address: C4:12:34:56:78:9A
            controller: tcp:127.0.0.1:6402
            passkey: "123456"
            advertising: { fast_interval_ms: 20 }
            connection: { interval_min_ms: 15, interval_max_ms: 30, latency: 0, timeout_ms: 4000 }
          - device: /srv/lock.json
          - device: ../other.json
          - device: heart-rate
        """
        let devices = try ConfigurationFile.parse(text, file: "/etc/blemu/run.yaml").devices
        #expect(devices.map(\.device) == ["/etc/blemu/profiles/scale.json", "/srv/lock.json", "/etc/blemu/../other.json", "heart-rate"])
        #expect(devices.map(\.isProfile) == [true, true, true, false])
        let clone = devices[0]
        #expect(clone.name == "Clone" && clone.address?.description == "C4:12:34:56:78:9A" && clone.passkey == "123456")
        #expect(clone.controller == (try ControllerSpec(parsing: "tcp:127.0.0.1:6402")))
        #expect(clone.advertising?.fastInterval == 32 && clone.connection != nil && clone.settings.isEmpty)
        // A file named without a folder: the paths are the working directory's, as written.
        #expect(try ConfigurationFile.parse("devices:\n  - device: ./a.json", file: "run.yaml").devices[0].device == "./a.json")
    }

    @Test func anchorsAliasesTagsAndQuotesKeepTheTextAsWritten() throws {
        let text = """
        devices:
          - device: heart-rate
            name: !!str 'Bench ''HR'' 1'
            pin: "0123"
            settings: &hr { bpm: 72 }
          - device: lock
            pin: 0123
            settings: *hr
        """
        let configuration = try ConfigurationFile.parse(text, file: "f.yaml")
        #expect(configuration.devices[0].name == "Bench 'HR' 1")
        #expect(configuration.devices[0].pin == "0123")
        #expect(configuration.devices[1].pin == "0123")
        #expect(configuration.devices[0].settings.first?.location == "f.yaml:5: devices[0].settings.bpm")
        // An alias is its anchor's node, found at the alias's line.
        #expect(configuration.devices[1].settings.first?.location == "f.yaml:5: devices[1].settings.bpm")
    }

    @Test func aliasesCannotNestDeeperThanTheLimit() {
        // Each anchor holds the one before it 30 levels down: depth grows with every alias.
        let open = String(repeating: "[", count: 30), close = String(repeating: "]", count: 30)
        var text = "a0: &a0 \(open)x\(close)\n"
        for n in 1...5 { text += "a\(n): &a\(n) \(open)*a\(n - 1)\(close)\n" }
        do {
            _ = try ConfigurationFile.parse(text, file: "f.yaml")
            Issue.record("accepted")
        } catch {
            #expect(error.description.contains("nested deeper than 64 levels"), "\(error.description)")
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
