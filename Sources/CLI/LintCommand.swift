import ArgumentParser
import BlemuConfig
import BlemuCore
import BlemuDevices
import BlemuHCI
import BlemuLint
import BlemuStack
import BlemuTransport

/// `blemu lint`: every advertisement `blemu run` would send for the same devices and --config,
/// judged by `AdvertisingLint`'s rules (what phones drop), without opening a controller.
struct LintCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "lint",
        abstract: "Check the advertisements `blemu run` would send against what phones drop.",
        discussion: "Takes the devices and --config of `blemu run` (a FILE.json is a GATT profile) and opens no controller. "
            + "Rules: \(AdvertisingLint.rules.map(\.id).joined(separator: ", ")) (--rules lists them with their sources). "
            + "Exit status 0, or 1 with --strict when a rule fails.")

    @Argument(help: "Devices to check (or the `devices:` of --config), as `blemu run` takes them.")
    var devices: [String] = []

    @Option(name: .customLong("config"), help: ArgumentHelp("A YAML file with the devices and their options, as `blemu run` reads it.", valueName: "FILE"))
    var configPath: String?

    @Option(help: "Local name to advertise, as `blemu run --name` (default: the device's own).")
    var name: String?

    @Flag(help: "One JSON object with every device, its advertisements and the rules they fail.")
    var json = false

    @Flag(help: "Exit with status 1 when any rule fails.")
    var strict = false

    @Flag(help: "List the rules, their severity and their sources, and exit.")
    var rules = false

    func validate() throws {
        if rules, !devices.isEmpty || configPath != nil { throw ValidationError("--rules lists the rules: give no devices or --config with it") }
        if !rules { _ = try checks() }
    }

    /// The checks of the devices, each as `blemu run` would run it.
    func checks() throws -> [DeviceAdvertisingCheck] {
        var file: RunConfiguration?
        if let configPath {
            do { file = try ConfigurationFile.load(path: configPath) } catch { throw ValidationError(error.description) }
        }
        do {
            // No controller is opened: a device with none named still has its advertisements checked.
            let plans = try DevicePlanning.plans(devices: devices, specs: [], environmentSpec: { .hci(index: 0) }, file: file,
                                                 fileName: configPath, name: name, address: nil, pin: nil)
            return try AdvertisingCheck.check(plans, nameGiven: name != nil)
        } catch let error as PlanError {
            throw ValidationError(error.message)
        } catch let error as ValidationError {
            throw error
        } catch {
            throw RuntimeFailure("\(error)")
        }
    }

    func run() throws {
        if rules {
            for line in json ? [Self.json(rules: AdvertisingLint.rules).encoded] : Self.text(rules: AdvertisingLint.rules) { print(line) }
            return
        }
        let checks = try checks()
        for line in json ? [Self.json(checks).encoded] : Self.text(checks) { print(line) }
        if strict, checks.contains(where: { !$0.findings.isEmpty }) { throw ExitCode(1) }
    }

    // MARK: Output

    static func text(_ checks: [DeviceAdvertisingCheck]) -> [String] {
        var lines: [String] = []
        for check in checks {
            let failed = Set(check.findings.map(\.rule.id)).count
            lines.append("\(VisibleText.make(check.device)) \"\(VisibleText.make(check.name))\": \(check.advertisements.count) advertisement(s), "
                         + (failed == 0 ? "passes" : "\(failed) rule(s) failed"))
            for advertisement in check.advertisements { lines.append("  " + describe(advertisement)) }
            for finding in check.findings {
                lines.append("  \(finding.rule.severity.rawValue) \(finding.rule.id): \(finding.detail) (\(finding.rule.source))")
            }
        }
        let failing = checks.filter { !$0.findings.isEmpty }.count
        lines.append("\(checks.count) device(s), \(failing) with failed rules")
        return lines
    }

    static func describe(_ advertisement: LintedAdvertisement) -> String {
        var line = "\(advertisement.connectable ? "connectable" : "non-connectable"), \(advertisement.extended ? "extended" : "legacy"), "
            + interval(advertisement.interval) + ": " + (advertisement.advertisingData.isEmpty ? "(no data)" : Hex.bytes(advertisement.advertisingData, separator: " "))
        if !advertisement.scanResponseData.isEmpty { line += "; scan response " + Hex.bytes(advertisement.scanResponseData, separator: " ") }
        return line
    }

    static func interval(_ interval: LintedAdvertisement.Interval) -> String {
        switch interval {
        case .phases(let timing):
            "every \(ConnectionParameters.ms(timing.fastIntervalMs)) ms for \(ConnectionParameters.ms(Double(timing.fastDuration / .milliseconds(1)) / 1000)) s, then \(ConnectionParameters.ms(timing.slowIntervalMs)) ms"
        case .fixed(let units):
            "every \(ConnectionParameters.ms(Double(units) * AdvertisingTiming.unitMs)) ms"
        }
    }

    static func json(_ checks: [DeviceAdvertisingCheck]) -> JSONValue {
        .object([
            ("devices", .array(checks.map { check in
                .object([
                    ("device", .string(check.device)),
                    ("name", .string(check.name)),
                    ("advertisements", .array(check.advertisements.map(json))),
                    ("findings", .array(check.findings.map { finding in
                        .object([("rule", .string(finding.rule.id)), ("severity", .string(finding.rule.severity.rawValue)),
                                 ("message", .string(finding.detail)), ("source", .string(finding.rule.source))])
                    })),
                ])
            })),
            ("failed", .integer(Int64(checks.filter { !$0.findings.isEmpty }.count))),
        ])
    }

    static func json(_ advertisement: LintedAdvertisement) -> JSONValue {
        let interval: JSONValue
        switch advertisement.interval {
        case .phases(let timing):
            interval = .object([("fast_ms", .number(timing.fastIntervalMs)),
                                ("fast_seconds", .number(Double(timing.fastDuration / .milliseconds(1)) / 1000)),
                                ("slow_ms", .number(timing.slowIntervalMs))])
        case .fixed(let units):
            interval = .object([("ms", .number(Double(units) * AdvertisingTiming.unitMs))])
        }
        return .object([
            ("connectable", .bool(advertisement.connectable)),
            ("pdus", .string(advertisement.extended ? "extended" : "legacy")),
            ("interval", interval),
            ("advertising_data", .string(Hex.bytes(advertisement.advertisingData))),
            ("scan_response", .string(Hex.bytes(advertisement.scanResponseData))),
        ])
    }

    static func text(rules: [LintRule]) -> [String] {
        rules.map { "\($0.id) (\($0.severity.rawValue)): \($0.summary). Source: \($0.source)" }
    }

    static func json(rules: [LintRule]) -> JSONValue {
        .array(rules.map { rule in
            .object([("rule", .string(rule.id)), ("severity", .string(rule.severity.rawValue)),
                     ("summary", .string(rule.summary)), ("source", .string(rule.source))])
        })
    }
}
