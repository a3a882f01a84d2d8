import BlemuCore
import BlemuHCI
import BlemuTransport

#if canImport(Glibc)
import Glibc
#endif

/// What a `--config` file says: the devices to run and, per device, its name, address,
/// controller, initial values, PIN, passkey, advertising and connection intervals.
///
/// ```yaml
/// controller: tcp:127.0.0.1:6402        # the default for every device
/// devices:
///   - device: heart-rate
///     name: Bench HR
///     address: C4:12:34:56:78:9A
///     settings: { bpm: 72, battery: 80 }
///     advertising: { fast_interval_ms: 20, fast_duration_s: 30, slow_interval_ms: 152.5 }
///     connection: { interval_min_ms: 15, interval_max_ms: 30, latency: 0, timeout_ms: 4000 }
///   - device: lock
///     pin: "2468"
/// ```
///
/// Every value is checked when the file is read, before anything starts; a bad one is one
/// error naming the file, the line, the key and what is allowed.
public struct RunConfiguration: Sendable, Equatable {
    public var controller: ControllerSpec?
    /// The `devices:` entries, then every fleet's members (`fleets:`), in file order.
    public var devices: [DeviceConfiguration]
    /// The `fleets:` entries (their members are in `devices`).
    public var fleets: [FleetConfiguration] = []
    /// The run's own settings (the control socket, logs, the capture, the state directory), each
    /// as its command-line option, which wins over the file.
    public var run = ConfiguredRunSettings()

    public init(controller: ControllerSpec? = nil, devices: [DeviceConfiguration] = []) {
        self.controller = controller
        self.devices = devices
    }
}

/// Top-level keys of a configuration file for what `blemu run` otherwise takes as options, so a
/// service's whole setup can live in one file. Each is checked here with the file's line; a path
/// is relative to the configuration file's directory.
public struct ConfiguredRunSettings: Sendable, Equatable {
    /// `control:` as `--control PATH`.
    public var control: String?
    /// `control_mode:` as `--control-mode MODE` (octal, at most 0777).
    public var controlMode: String?
    /// `log:` as `--log` (auto, journal or stderr).
    public var log: String?
    /// `log_level:` as `--log-level`.
    public var logLevel: String?
    /// `btsnoop:` as `--btsnoop PATH`.
    public var btsnoop: String?
    /// `btsnoop_max:` as `--btsnoop-max SIZE` (checked where the size is parsed, with the key named).
    public var btsnoopMax: String?
    /// `state_dir:` as `--state-dir DIR`.
    public var stateDirectory: String?

    public init() {}

    /// The keys, in the order errors list them.
    public static let keys = ["control", "control_mode", "log", "log_level", "btsnoop", "btsnoop_max", "state_dir"]
    public static let logDestinations = ["auto", "journal", "stderr"]
    public static let logLevels = ["trace", "debug", "info", "notice", "warning", "error", "critical"]
}

public struct DeviceConfiguration: Sendable, Equatable {
    /// A device name, or the path of a GATT profile file (`isProfile`), already made relative
    /// to the configuration file's directory.
    public var device: String
    /// Whether `device` names a GATT profile file (`device: ./scale.json`, Docs/PROFILES.md).
    public var isProfile: Bool { Self.isProfilePath(device) }
    /// A device that ends in `.json` is a GATT profile file.
    public static func isProfilePath(_ device: String) -> Bool { device.hasSuffix(".json") }
    /// Keys that only a built-in device understands: a profile is refused them.
    public static let builtInOnlyKeys = ["settings", "pin"]
    public var name: String?
    public var address: BluetoothAddress?
    public var controller: ControllerSpec?
    /// Initial values, applied through the device's settings in file order.
    public var settings: [Setting]
    /// The lock's PIN: 4 to 8 digits.
    public var pin: String?
    /// A static pairing passkey: 6 digits.
    public var passkey: String?
    /// An encrypted BTHome device's bindkey file (relative to the configuration file's directory).
    public var bindkeyFile: String?
    /// The IO capability the device declares when a central pairs (`--io-capability`'s names).
    public var ioCapability: String?
    /// `--io-capability`'s names.
    public static let ioCapabilityNames = ["display-only", "display-yes-no", "keyboard-only", "keyboard-display", "no-input-no-output"]
    /// Privacy: advertise from resolvable private addresses (Docs/SECURITY.md).
    public var privacy: Bool?
    /// Seconds one private address lasts (1...41400).
    public var privateAddressTimeout: Int?
    public var advertising: AdvertisingTiming?
    public var connection: ConnectionParameters?
    /// `scenario: FILE.yaml`: a scenario run against this device (its steps act on it unless
    /// they name another), the path relative to the configuration file's directory.
    public var scenario: String?
    /// Where the entry starts in the file, for errors found later (an unknown setting key).
    public var location: String
    /// What errors call the entry: `devices[2]`, or `fleets[0] member 17` for a fleet's member.
    public var path: String = ""
    /// The fleet (`fleets[N]`) the device is a member of; nil for a `devices:` entry.
    public var fleet: String?
    /// What the control socket calls its fleet (`FleetConfiguration.reference`); nil for a `devices:` entry.
    public var fleetReference: String?
    /// A fleet member's advertising intervals are this many 0.625 ms units longer than the
    /// fleet's (its drawn `jitter_ms`), so members started together do not advertise in step.
    public var advertisingShift: UInt16 = 0
    /// A fleet member starts this long after the run (its drawn part of `start_spread_s`).
    public var startDelay: Duration = .zero

    public struct Setting: Sendable, Equatable {
        public var key: String
        public var value: String
        /// `file:line: path` of the value, for errors.
        public var location: String

        public init(key: String, value: String, location: String) {
            self.key = key
            self.value = value
            self.location = location
        }
    }

    public init(device: String, location: String) {
        self.device = device
        self.settings = []
        self.location = location
    }
}

/// One line: `FILE:LINE: KEY: what is wrong (what is allowed)`.
public struct ConfigurationError: Error, CustomStringConvertible, Equatable {
    public let description: String
    public init(_ description: String) { self.description = description }
}

public enum ConfigurationFile {
    /// The largest file read: a configuration is a few kilobytes; more is not one.
    public static let maximumSize = 1 << 20

    /// Reads and checks `path`.
    public static func load(path: String) throws(ConfigurationError) -> RunConfiguration {
        let text: String
        do {
            text = try readFile(path)
        } catch {
            throw ConfigurationError("\(path): \(error.description)")
        }
        return try parse(text, file: path)
    }

    /// Checks a configuration given as text; `file` names it in errors.
    public static func parse(_ text: String, file: String) throws(ConfigurationError) -> RunConfiguration {
        let root: YAMLNode?
        do {
            root = try YAMLTree.compose(text)
        } catch {
            if let line = error.limitLine { throw ConfigurationError("\(file):\(line): \(error.message)") }
            throw ConfigurationError("\(file): not valid YAML: \(error.message)")
        }
        guard let root else { throw ConfigurationError("\(file): the file is empty; it needs a `devices:` list") }
        let reader = Reader(file: file)
        let top = try reader.mapping(root, at: "")
        try reader.allowOnly(["controller", "devices", "fleets"] + ConfiguredRunSettings.keys, in: top, at: "")
        var configuration = RunConfiguration()
        if let node = top["controller"] {
            configuration.controller = try reader.controller(node.value, at: "controller")
        }
        configuration.run = try reader.runSettings(top)
        guard top["devices"] != nil || top["fleets"] != nil else {
            throw ConfigurationError("\(file): no `devices:` list (each entry at least `- device: NAME`) and no `fleets:` list")
        }
        if let devices = top["devices"] {
            let entries = try reader.sequence(devices.value, at: "devices")
            guard !entries.isEmpty else { throw ConfigurationError("\(reader.at(devices.value)): devices: the list is empty") }
            // The YAML node limit keeps this list far below the ceiling; checked all the same.
            guard entries.count <= ProcessLimits.hardCeiling else {
                throw ConfigurationError("\(reader.at(entries[ProcessLimits.hardCeiling])): devices[\(ProcessLimits.hardCeiling)]: \(entries.count) devices; \(ProcessLimits.ceilingAdvice)")
            }
            for (index, entry) in entries.enumerated() {
                configuration.devices.append(try reader.device(entry, at: "devices[\(index)]"))
            }
        }
        if let fleets = top["fleets"] {
            let entries = try reader.sequence(fleets.value, at: "fleets")
            guard !entries.isEmpty else { throw ConfigurationError("\(reader.at(fleets.value)): fleets: the list is empty") }
            for (index, entry) in entries.enumerated() {
                let (fleet, members) = try reader.fleet(entry, at: "fleets[\(index)]", place: index + 1,
                                                        devicesBefore: configuration.devices.count)
                if let first = configuration.fleets.first(where: { $0.reference == fleet.reference }) {
                    throw ConfigurationError("\(fleet.location): \(fleet.path).fleet: `\(fleet.reference)` is also \(first.path)'s name (each fleet's is its own)")
                }
                configuration.fleets.append(fleet)
                configuration.devices += members
            }
        }
        try reader.checkUnique(configuration)
        return configuration
    }

    /// A small UTF-8 text file (a configuration or a scenario), read without blocking.
    public static func readFile(_ path: String) throws(ConfigurationError) -> String {
        #if canImport(Glibc)
        // Without blocking, and only a regular file: a FIFO or device node named by mistake (or
        // planted) is refused at once instead of hanging the start (RegularFile).
        let bytes: [UInt8]
        switch RegularFile.read(path, maximumBytes: maximumSize, followSymlinks: true) {
        case .success(let read): bytes = read
        case .failure(let error) where error.kind == .tooLarge:
            throw ConfigurationError("larger than \(maximumSize) bytes: not a configuration file")
        case .failure(let error): throw ConfigurationError(error.description)
        }
        guard let text = String(validating: bytes, as: UTF8.self) else { throw ConfigurationError("not UTF-8 text") }
        return text
        #else
        throw ConfigurationError("reading files is not supported on this platform")
        #endif
    }
}

/// Walks the YAML nodes with the path and line of each, so every error says where.
struct Reader {
    let file: String

    typealias Entry = (key: String, value: YAMLNode, keyNode: YAMLNode)

    func at(_ node: YAMLNode) -> String {
        "\(file):\(node.line)"
    }

    func fail(_ node: YAMLNode, _ path: String, _ message: String) -> ConfigurationError {
        ConfigurationError("\(at(node)): \(path.isEmpty ? "" : "\(path): ")\(message)")
    }

    func mapping(_ node: YAMLNode, at path: String) throws(ConfigurationError) -> [String: Entry] {
        guard case .mapping(let mapping) = node.kind else {
            throw fail(node, path, "expected a mapping of `key: value` lines")
        }
        var out: [String: Entry] = [:]
        for (key, value) in mapping {
            guard let name = key.scalar else { throw fail(key, path, "a key must be a plain word") }
            guard out[name] == nil else { throw fail(key, path, "`\(name)` is given twice") }
            out[name] = (name, value, key)
        }
        return out
    }

    func allowOnly(_ keys: [String], in entries: [String: Entry], at path: String) throws(ConfigurationError) {
        for entry in entries.values.sorted(by: { $0.key < $1.key }) where !keys.contains(entry.key) {
            throw fail(entry.keyNode, path, "unknown key `\(entry.key)` (allowed: \(keys.joined(separator: ", ")))")
        }
    }

    func sequence(_ node: YAMLNode, at path: String) throws(ConfigurationError) -> [YAMLNode] {
        guard case .sequence(let sequence) = node.kind else { throw fail(node, path, "expected a list (lines starting with `- `)") }
        return sequence
    }

    func scalar(_ node: YAMLNode, at path: String) throws(ConfigurationError) -> String {
        guard let text = node.scalar else { throw fail(node, path, "expected a single value") }
        return text
    }

    func number(_ node: YAMLNode, at path: String, _ range: ClosedRange<Double>, unit: String) throws(ConfigurationError) -> Double {
        let text = try scalar(node, at: path)
        guard let value = Double(text), value.isFinite else { throw fail(node, path, "`\(text)` is not a number (\(unit))") }
        guard range.contains(value) else {
            throw fail(node, path, "\(text) is outside \(ConnectionParameters.ms(range.lowerBound))...\(ConnectionParameters.ms(range.upperBound)) \(unit)")
        }
        return value
    }

    func digits(_ node: YAMLNode, at path: String, _ counts: ClosedRange<Int>, what: String) throws(ConfigurationError) -> String {
        let text = try scalar(node, at: path)
        guard counts.contains(text.count), text.allSatisfy({ $0.isASCII && $0.isNumber }) else {
            let count = counts.count == 1 ? "\(counts.lowerBound)" : "\(counts.lowerBound) to \(counts.upperBound)"
            throw fail(node, path, "\(what) must be \(count) digits, got `\(text)`")
        }
        return text
    }

    func controller(_ node: YAMLNode, at path: String) throws(ConfigurationError) -> ControllerSpec {
        let text = try scalar(node, at: path)
        do {
            return try ControllerSpec(parsing: text)
        } catch {
            throw fail(node, path, error.description)
        }
    }

    func device(_ node: YAMLNode, at path: String) throws(ConfigurationError) -> DeviceConfiguration {
        let keys = ["device", "name", "address", "controller", "settings", "pin", "passkey", "io_capability", "advertising", "connection",
                    "privacy", "rpa_timeout_s", "bindkey_file", "scenario"]
        let entries = try mapping(node, at: path)
        try allowOnly(keys, in: entries, at: path)
        guard let name = entries["device"] else { throw fail(node, path, "`device:` is missing (the device to run, e.g. heart-rate)") }
        var device = DeviceConfiguration(device: try scalar(name.value, at: "\(path).device"), location: at(node))
        device.path = path
        if device.isProfile {
            // A GATT profile: its path is the file's, and a built-in device's keys mean nothing to it.
            device.device = profilePath(device.device)
            for key in DeviceConfiguration.builtInOnlyKeys {
                guard let entry = entries[key] else { continue }
                throw fail(entry.keyNode, "\(path).\(key)", "a GATT profile (\(device.device)) has no \(key == "pin" ? "PIN" : "settings"): its values are the file's")
            }
        }
        if let entry = entries["name"] {
            let text = try scalar(entry.value, at: "\(path).name")
            // Vol 3, Part C, 12.1: a Device Name of at most 248 octets.
            guard (1...248).contains(text.utf8.count) else { throw fail(entry.value, "\(path).name", "must be 1 to 248 bytes of UTF-8") }
            device.name = text
        }
        if let entry = entries["address"] {
            let text = try scalar(entry.value, at: "\(path).address")
            guard let address = BluetoothAddress(text), address.isValidStaticRandom else {
                throw fail(entry.value, "\(path).address", "`\(text)` is not a static random address like C4:12:34:56:78:9A (first byte C0-FF)")
            }
            device.address = address
        }
        if let entry = entries["pin"] { device.pin = try digits(entry.value, at: "\(path).pin", 4...8, what: "a PIN") }
        try sharedKeys(entries, into: &device, at: path)
        if let entry = entries["privacy"] {
            switch try scalar(entry.value, at: "\(path).privacy") {
            case "true": device.privacy = true
            case "false": device.privacy = false
            case let text: throw fail(entry.value, "\(path).privacy", "takes true or false, not `\(text)`")
            }
        }
        if let entry = entries["rpa_timeout_s"] {
            // Vol 3, Part C, Appendix A: TGAP(private_addr_int); the range of Vol 4, Part E, 7.8.45.
            let text = try scalar(entry.value, at: "\(path).rpa_timeout_s")
            guard let seconds = Int(text), (1...41_400).contains(seconds) else {
                throw fail(entry.value, "\(path).rpa_timeout_s", "takes whole seconds from 1 to 41400, not `\(text)`")
            }
            guard device.privacy == true else { throw fail(entry.value, "\(path).rpa_timeout_s", "needs `privacy: true`") }
            device.privateAddressTimeout = seconds
        }
        if let entry = entries["scenario"] {
            let text = try scalar(entry.value, at: "\(path).scenario")
            guard !text.isEmpty else { throw fail(entry.value, "\(path).scenario", "give the scenario file's path") }
            device.scenario = profilePath(text)
        }
        if let entry = entries["settings"] {
            let settings = try mapping(entry.value, at: "\(path).settings")
            // In file order, so a later setting may build on an earlier one.
            guard case .mapping(let ordered) = entry.value.kind else { return device }
            for (key, _) in ordered {
                guard let name = key.scalar, let setting = settings[name] else { continue }
                device.settings.append(.init(key: name, value: try scalar(setting.value, at: "\(path).settings.\(name)"),
                                             location: "\(at(setting.value)): \(path).settings.\(name)"))
            }
        }
        if let entry = entries["advertising"] { device.advertising = try advertising(entry.value, at: "\(path).advertising") }
        return device
    }

    /// The keys a `devices:` entry and a `fleets:` entry read alike: `controller`, `passkey`,
    /// `bindkey_file`, `io_capability`, `connection`.
    func sharedKeys(_ entries: [String: Entry], into device: inout DeviceConfiguration, at path: String) throws(ConfigurationError) {
        if let entry = entries["controller"] { device.controller = try controller(entry.value, at: "\(path).controller") }
        if let entry = entries["passkey"] { device.passkey = try digits(entry.value, at: "\(path).passkey", 6...6, what: "a passkey") }
        if let entry = entries["bindkey_file"] {
            let text = try scalar(entry.value, at: "\(path).bindkey_file")
            guard !text.isEmpty else { throw fail(entry.value, "\(path).bindkey_file", "needs a file path") }
            device.bindkeyFile = profilePath(text)
        }
        if let entry = entries["io_capability"] {
            let text = try scalar(entry.value, at: "\(path).io_capability")
            guard DeviceConfiguration.ioCapabilityNames.contains(text) else {
                throw fail(entry.value, "\(path).io_capability", "`\(text)` is not an IO capability: \(DeviceConfiguration.ioCapabilityNames.joined(separator: ", "))")
            }
            device.ioCapability = text
        }
        if let entry = entries["connection"] { device.connection = try connection(entry.value, at: "\(path).connection") }
    }

    /// Names and addresses given in the file (a `devices:` entry's own, every fleet member's)
    /// are each one device's: a second is an error at its line, naming the first.
    func checkUnique(_ configuration: RunConfiguration) throws(ConfigurationError) {
        var names: [String: String] = [:], addresses: [BluetoothAddress: String] = [:]
        for device in configuration.devices {
            // A member's line is its fleet's; a device's own `name:`/`address:` line is not kept, its entry's is.
            if let name = device.name {
                if let first = names[name] {
                    throw ConfigurationError("\(device.location): \(device.path).name: `\(VisibleText.make(name))` is also \(first)'s name (names are one device's each)")
                }
                names[name] = device.path
            }
            if let address = device.address {
                if let first = addresses[address] {
                    let advice = device.fleet != nil && configuration.devices.contains { $0.path == first && $0.fleet != nil }
                        ? " (two fleets of one kind with one seed draw the same addresses: give each its own `seed:`)" : ""
                    throw ConfigurationError("\(device.location): \(device.path).address: \(address) is also \(first)'s address\(advice)")
                }
                addresses[address] = device.path
            }
        }
    }

    /// The top-level run settings (`ConfiguredRunSettings`), each checked with its line.
    func runSettings(_ top: [String: Entry]) throws(ConfigurationError) -> ConfiguredRunSettings {
        var settings = ConfiguredRunSettings()
        func text(_ key: String) throws(ConfigurationError) -> (String, YAMLNode)? {
            guard let entry = top[key] else { return nil }
            let value = try scalar(entry.value, at: key)
            guard !value.isEmpty else { throw fail(entry.value, key, "is empty") }
            return (value, entry.value)
        }
        settings.control = try text("control").map { profilePath($0.0) }
        if let (mode, node) = try text("control_mode") {
            guard mode.allSatisfy({ ("0"..."7").contains($0) }), let bits = UInt32(mode, radix: 8), bits <= 0o777 else {
                throw fail(node, "control_mode", "`\(mode)` is not an octal permission mode like 0600 or 0660")
            }
            guard settings.control != nil else { throw fail(node, "control_mode", "needs `control: PATH`") }
            settings.controlMode = mode
        }
        if let (log, node) = try text("log") {
            guard ConfiguredRunSettings.logDestinations.contains(log) else {
                throw fail(node, "log", "`\(log)` is not one of \(ConfiguredRunSettings.logDestinations.joined(separator: ", "))")
            }
            settings.log = log
        }
        if let (level, node) = try text("log_level") {
            guard ConfiguredRunSettings.logLevels.contains(level) else {
                throw fail(node, "log_level", "`\(level)` is not one of \(ConfiguredRunSettings.logLevels.joined(separator: ", "))")
            }
            settings.logLevel = level
        }
        settings.btsnoop = try text("btsnoop").map { profilePath($0.0) }
        if let (size, node) = try text("btsnoop_max") {
            guard settings.btsnoop != nil else { throw fail(node, "btsnoop_max", "needs `btsnoop: PATH`") }
            settings.btsnoopMax = size
        }
        settings.stateDirectory = try text("state_dir").map { profilePath($0.0) }
        return settings
    }

    /// A profile's path from the file: relative to the configuration file's directory.
    func profilePath(_ text: String) -> String {
        guard !text.hasPrefix("/"), let slash = file.lastIndex(of: "/") else { return text }
        var relative = Substring(text)
        while relative.hasPrefix("./") { relative = relative.dropFirst(2) }
        return String(file[...slash]) + relative
    }

    func advertising(_ node: YAMLNode, at path: String, alsoAllowed: [String] = []) throws(ConfigurationError) -> AdvertisingTiming {
        let entries = try mapping(node, at: path)
        try allowOnly(AdvertisingTiming.configurationKeys + alsoAllowed, in: entries, at: path)
        var timing = AdvertisingTiming()
        // Vol 4, Part E, 7.8.5: 20 ms to 10.24 s, in units of 0.625 ms.
        func interval(_ key: String) throws(ConfigurationError) -> UInt16? {
            guard let entry = entries[key] else { return nil }
            let ms = try number(entry.value, at: "\(path).\(key)", 20...10240, unit: "ms")
            let units = ms / AdvertisingTiming.unitMs
            guard units == units.rounded() else {
                throw fail(entry.value, "\(path).\(key)", "\(ConnectionParameters.ms(ms)) ms is not a whole number of 0.625 ms units")
            }
            return UInt16(units)
        }
        if let fast = try interval("fast_interval_ms") { timing.fastInterval = fast }
        if let slow = try interval("slow_interval_ms") { timing.slowInterval = slow }
        if let entry = entries["fast_duration_s"] {
            timing.fastDuration = .milliseconds(Int64(try number(entry.value, at: "\(path).fast_duration_s", 0...86_400, unit: "s") * 1000))
        }
        if timing.fastInterval > timing.slowInterval {
            throw fail(node, path, "fast_interval_ms is slower than slow_interval_ms")
        }
        return timing
    }

    func connection(_ node: YAMLNode, at path: String) throws(ConfigurationError) -> ConnectionParameters {
        let entries = try mapping(node, at: path)
        let keys = ["interval_min_ms", "interval_max_ms", "latency", "timeout_ms"]
        try allowOnly(keys, in: entries, at: path)
        for key in keys where entries[key] == nil {
            throw fail(node, path, "`\(key)` is missing (give all of \(keys.joined(separator: ", ")))")
        }
        let minimum = try number(entries["interval_min_ms"]!.value, at: "\(path).interval_min_ms", 7.5...4000, unit: "ms")
        let maximum = try number(entries["interval_max_ms"]!.value, at: "\(path).interval_max_ms", 7.5...4000, unit: "ms")
        let latency = try number(entries["latency"]!.value, at: "\(path).latency", 0...499, unit: "connection events")
        let timeout = try number(entries["timeout_ms"]!.value, at: "\(path).timeout_ms", 100...32000, unit: "ms")
        guard latency == latency.rounded() else { throw fail(entries["latency"]!.value, "\(path).latency", "must be a whole number") }
        guard let parameters = ConnectionParameters(intervalMinMs: minimum, intervalMaxMs: maximum, peripheralLatency: UInt16(latency),
                                                    supervisionTimeoutMs: timeout) else {
            throw fail(node, path, "intervals must be whole numbers of 1.25 ms and the timeout of 10 ms")
        }
        if let problem = parameters.coreViolations.first { throw fail(node, path, problem) }
        return parameters
    }
}
