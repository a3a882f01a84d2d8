import ArgumentParser
import BlemuCapture
import BlemuConfig
import BlemuControl
import BlemuCore
import BlemuDevices
import BlemuGATT
import BlemuGATTText
import BlemuHost
import BlemuProfile
import BlemuRunLoop
import BlemuScenario
import BlemuSecurity
import BlemuSMP
import BlemuService
import BlemuStack
import BlemuTransport
import Logging

#if canImport(Glibc)
import Glibc
#endif

struct RunCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run",
        abstract: "Emulate devices until SIGINT or SIGTERM.",
        discussion: "Devices: \(DeviceRegistry.all.map(\.name).joined(separator: ", ")). Give one --controller per device, "
            + "or fewer: the last one is shared by the devices after it. Devices that share an hciN or serial: controller "
            + "run on that one controller, each in its own advertising set (LE Extended Advertising); devices that share a "
            + "tcp: or unix: spec get a connection each (to rootcanal, a controller each) unless --share-controller.")

    @Argument(help: "Devices to emulate (or the `devices:` of --config); a FILE.json is a GATT profile (`blemu gatt ... dump --profile`).")
    var devices: [String] = []

    @Option(name: .customLong("config"), help: ArgumentHelp("A YAML file with the devices and their options (Docs/REFERENCE.md, \"Configuration file\").", valueName: "FILE"))
    var configPath: String?

    @Option(help: ArgumentHelp("The lock's PIN, 4 to 8 digits (default: the config file's, else one made up and logged once).", valueName: "DIGITS"))
    var pin: String?

    @Option(help: ArgumentHelp("A 6-digit static pairing passkey, like a label on the box: centrals pair with Passkey Entry and must type it. DEVICE=DIGITS gives it to one device (`--passkey lock=123456`, repeatable); bare DIGITS to every device (with several, the start-up log names those it moves from Just Works to Passkey Entry). The lock always pairs so (without one it makes one on its first start, keeps it in --state-dir and logs it); other devices use Just Works without it.", valueName: "[DEVICE=]DIGITS"))
    var passkey: [String] = []

    @Option(name: .customLong("bindkey-file"),
            help: ArgumentHelp("Encrypt the BTHome devices' broadcasts (bthome-thermometer, bthome-door) with the bindkey in FILE: 32 hex digits, as Home Assistant asks for it (never on the command line). The counter is kept in --state-dir.", valueName: "FILE"))
    var bindkeyFile: String?

    @Option(name: .customLong("io-capability"),
            help: ArgumentHelp("The IO capability the devices declare when a central pairs: display-only, display-yes-no, keyboard-only, keyboard-display, no-input-no-output (default: display-only with a passkey, else no-input-no-output). With a display, Numeric Comparison values and per-pairing passkeys are shown in the log.", valueName: "CAP"))
    var ioCapability: String?

    @Option(name: .customLong("numeric-comparison"),
            help: ArgumentHelp("The devices' answer to Numeric Comparison: accept (default), reject (Pairing Failed 0x0C), or ask: wait for `blemu ctl PATH pairing DEVICE confirm|reject` (within the 30 s SMP timer).", valueName: "accept|reject|ask"))
    var numericComparison: String = "accept"

    @Option(name: .customLong("state-dir"),
            help: ArgumentHelp("Where bonds are kept across restarts, one file per device (default: $STATE_DIRECTORY, else ~/.local/state/blemu).",
                               valueName: "DIR"))
    var stateDirectory: String?

    @Flag(help: "Privacy: advertise from a resolvable private address made from the device's IRK (kept in --state-dir), a new one every --rpa-timeout; bonded centrals resolve it (Docs/SECURITY.md). Default: the static identity address.")
    var privacy = false

    @Option(name: .customLong("rpa-timeout"),
            help: ArgumentHelp("With --privacy, seconds one private address lasts (default 900, 15 minutes; at least 1).", valueName: "SECONDS"))
    var rpaTimeout: Int?

    @Option(name: .customLong("controller"), help: "Controller spec: hciN, tcp:HOST:PORT, unix:PATH, serial:DEVICE[:BAUD]. Default: $BLEMU_CONTROLLER.")
    var controllers: [String] = []

    @Flag(name: .customLong("share-controller"),
          help: "Devices that name the same tcp: or unix: spec share one connection, so one controller, as they must on hciN and serial.")
    var shareController = false

    @Option(help: "Local name to advertise (default: the device's own).")
    var name: String?

    @Option(help: "Static random address AA:BB:CC:DD:EE:FF (two top bits set). Default: derived from the device and name, stable across runs.")
    var address: String?

    @Option(help: ArgumentHelp("Where logs go: \(LogDestination.offeredList)."
        + " auto is the systemd journal when systemd started blemu (JOURNAL_STREAM or INVOCATION_ID), else stderr;"
        + " an unreachable journal falls back to stderr. Default: --config's `log:`, else auto."))
    var log: LogDestination?

    @Option(name: .customLong("log-level"), help: "trace, debug, info, notice, warning, error or critical. Default: --config's `log_level:`, else info.")
    var logLevel: Logger.Level?

    @Option(name: .customLong("control"),
            help: ArgumentHelp("Serve a control socket at PATH: `blemu ctl PATH COMMAND...` sets values, injects faults, disconnects (Docs/CONTROL.md).",
                               valueName: "PATH"))
    var controlPath: String?

    @Option(name: .customLong("control-mode"), help: ArgumentHelp("Permissions of the control socket, octal. Default: --config's `control_mode:`, else 0600.", valueName: "MODE"))
    var controlMode: String?

    @Option(name: .customLong("btsnoop"),
            help: ArgumentHelp("Write every HCI packet, both ways, to a btsnoop capture at PATH (btmon -r, Wireshark). A non-empty PATH is moved to PATH.1 first.",
                               valueName: "PATH"))
    var btsnoopPath: String?

    @Option(name: .customLong("btsnoop-max"),
            help: ArgumentHelp("Rotate the capture when it would pass SIZE (bytes, or K, M, G; at least 4K): PATH moves to PATH.1, up to PATH.\(CaptureSettings.generations).",
                               valueName: "SIZE"))
    var btsnoopMax: String?

    @Option(name: .customLong("scenario"),
            help: ArgumentHelp("Run the steps of a scenario file against the devices (Docs/CONTROL.md, Scenario files); blemu exits when it ends: 0 when every wait and expect held, 1 with the failing step's FILE:LINE.",
                               valueName: "FILE"))
    var scenarioPath: String?

    @Option(help: ArgumentHelp("How a recorded device (`blemu run FILE.json` from `blemu gatt ... record`) plays its recorded notifications: loop or once. Default: the file's `replay`, else loop.",
                               valueName: "loop|once"))
    var replay: String?

    @Option(help: ArgumentHelp("Seed every device model's randomness (the heart's wander, the thermal model's weather, the lock's made-up PIN): the same seed gives the same values on every run. Default: a new seed each start.",
                               valueName: "N"))
    var seed: UInt64?

    mutating func validate() throws {
        try adoptConfigurationFileSettings()
        if let pin, pin.count < 4 || pin.count > 8 || !pin.allSatisfy({ $0.isASCII && $0.isNumber }) {
            throw ValidationError("--pin must be 4 to 8 digits, not '\(pin)'")
        }
        _ = try parsedPasskeys()
        if let address {
            guard let parsed = BluetoothAddress(address) else {
                throw ValidationError("--address '\(address)' is not an address like C4:12:34:56:78:9A")
            }
            guard parsed.isValidStaticRandom else {
                throw ValidationError("--address \(address) is not a static random address: its two top bits must be set (first byte C0-FF) and the rest neither all 0 nor all 1")
            }
        }
        if controlPath != nil || controlMode != nil {
            guard controlPath.map({ !$0.isEmpty }) ?? false else { throw ValidationError("--control-mode needs --control PATH") }
            _ = try parsedControlMode()
        }
        if let btsnoopPath, btsnoopPath.isEmpty { throw ValidationError("--btsnoop needs a file path") }
        if let rpaTimeout {
            guard privacy else { throw ValidationError("--rpa-timeout needs --privacy") }
            // Vol 3, Part C, Appendix A: TGAP(private_addr_int), 15 minutes recommended; the
            // controller's own timeout accepts 1 s to about 11.5 hours (Vol 4, Part E, 7.8.45).
            guard (1...41_400).contains(rpaTimeout) else { throw ValidationError("--rpa-timeout must be 1 to 41400 seconds, not \(rpaTimeout)") }
        }
        if let stateDirectory, stateDirectory.isEmpty { throw ValidationError("--state-dir needs a directory") }
        if let bindkeyFile, bindkeyFile.isEmpty { throw ValidationError("--bindkey-file needs a file path") }
        if let ioCapability, SMPIOCapability(cliName: ioCapability) == nil {
            throw ValidationError("--io-capability '\(ioCapability)': give display-only, display-yes-no, keyboard-only, keyboard-display or no-input-no-output")
        }
        guard ["accept", "reject", "ask"].contains(numericComparison) else {
            throw ValidationError("--numeric-comparison is accept, reject or ask, not '\(numericComparison)'")
        }
        if numericComparison == "ask" && controlPath == nil {
            throw ValidationError("--numeric-comparison ask needs --control PATH: the answer comes from `blemu ctl PATH pairing DEVICE confirm|reject`")
        }
        if btsnoopMax != nil {
            guard btsnoopPath != nil else { throw ValidationError("--btsnoop-max needs --btsnoop PATH") }
            _ = try parsedBtsnoopMax()
        }
        let plans = try devicePlans()
        _ = try loadedScenarios(plans)
        // Every initial value and PIN is tried on a throwaway device here, before run() writes
        // anything (a passkey file, the capture, the socket): a refusal is a bad command line.
        do {
            try DevicePlanning.checkSettings(plans)
            _ = try DevicePlanning.checkBindkeys(plans)
        } catch let error as PlanError { throw ValidationError(error.message) }
        guard controllers.count <= plans.count else {
            throw ValidationError("\(controllers.count) controllers for \(plans.count) device(s): give at most one --controller per device")
        }
    }

    /// The devices to run with their options, from the command line and --config.
    func devicePlans() throws -> [DevicePlan] {
        var file: RunConfiguration?
        if let configPath {
            do { file = try ConfigurationFile.load(path: configPath) } catch { throw ValidationError(error.description) }
        }
        var specs: [ControllerSpec] = []
        for text in controllers {
            do { specs.append(try ControllerSpec(parsing: text)) } catch { throw ValidationError(error.description) }
        }
        // $BLEMU_CONTROLLER is read only where it is used: --controller overrides it whole.
        let environmentSpec = { () throws -> ControllerSpec? in
            guard let text = getenv("BLEMU_CONTROLLER").map({ String(cString: $0) }), !text.isEmpty else { return nil }
            do { return try ControllerSpec(parsing: text) } catch {
                throw ValidationError("BLEMU_CONTROLLER: \(error)")
            }
        }
        do {
            var plans = try DevicePlanning.plans(devices: devices, specs: specs, environmentSpec: environmentSpec, file: file,
                                                 fileName: configPath, name: name, address: address.flatMap(BluetoothAddress.init),
                                                 pin: pin, passkeys: try parsedPasskeys(), bindkeyFile: bindkeyFile)
            if let seed { DevicePlanning.seed(&plans, with: seed) }
            if let replay { try DevicePlanning.replay(&plans, mode: replay) }
            return plans
        } catch let error as PlanError {
            throw ValidationError(error.message)
        }
    }

    /// --passkey's values: DIGITS for every device, DEVICE=DIGITS for one.
    func parsedPasskeys() throws -> PasskeyOptions {
        do { return try PasskeyOptions.parse(passkey) } catch let error as PlanError { throw ValidationError(error.message) }
    }

    /// --scenario's steps, then each plan's `scenario:` (from --config), every mistake told with
    /// FILE:LINE (exit status 64, as --config's).
    private func loadedScenarios(_ plans: [DevicePlan]) throws -> [RunScenarios.Loaded] {
        do { return try RunScenarios.load(path: scenarioPath, plans: plans) } catch { throw ValidationError(error.description) }
    }

    /// The run settings a --config file holds (`control:`, `log:`, `btsnoop:`, `state_dir:`, …:
    /// Docs/REFERENCE.md, "Configuration file"), taken where the command line gave none: an
    /// option always wins over the file.
    private mutating func adoptConfigurationFileSettings() throws {
        guard let configPath else { return }
        let run: ConfiguredRunSettings
        do { run = try ConfigurationFile.load(path: configPath).run } catch { throw ValidationError(error.description) }
        if controlPath == nil { controlPath = run.control }
        if controlMode == nil { controlMode = run.controlMode }
        if log == nil { log = run.log.flatMap(LogDestination.init(rawValue:)) }
        if logLevel == nil { logLevel = run.logLevel.flatMap(Logger.Level.init(rawValue:)) }
        if btsnoopPath == nil { btsnoopPath = run.btsnoop }
        if btsnoopMax == nil { btsnoopMax = run.btsnoopMax }
        if stateDirectory == nil { stateDirectory = run.stateDirectory }
    }

    /// --control-mode as permission bits: octal, 0 to 0777.
    private func parsedControlMode() throws -> UInt32 {
        let controlMode = self.controlMode ?? "0600"
        guard !controlMode.isEmpty, controlMode.allSatisfy({ ("0"..."7").contains($0) }),
              let mode = UInt32(controlMode, radix: 8), mode <= 0o777 else {
            throw ValidationError("--control-mode '\(controlMode)' is not an octal permission mode like 0600 or 0660")
        }
        return mode
    }

    /// --btsnoop-max in bytes.
    private func parsedBtsnoopMax() throws -> Int? {
        guard let btsnoopMax else { return nil }
        guard let bytes = ByteSize.parse(btsnoopMax), bytes >= BtsnoopWriter.minimumMaxFileBytes else {
            throw ValidationError("--btsnoop-max (or btsnoop_max in --config) '\(btsnoopMax)' is not a size of at least 4K: bytes, or a number with K, M or G (10M)")
        }
        return bytes
    }

    func run() throws {
        try LogSetup.bootstrap(destination: log ?? .auto, level: logLevel ?? .info)
        // Counts the journal's flood budget still holds are written however the run ends.
        defer { LogSetup.finish() }
        let logger = Logger(label: "blemu")

        let plans = try devicePlans()
        if let notice = DevicePlanning.passkeyNotice(plans, passkeys: try parsedPasskeys()) { logger.notice("\(notice)") }

        let loop: RunLoop
        do { loop = try RunLoop() } catch { throw RuntimeFailure("cannot start the run loop: \(error)") }

        var options = RunOptions()
        options.privacy = privacy
        options.privateAddressTimeout = rpaTimeout
        options.ioCapability = ioCapability.flatMap(SMPIOCapability.init(cliName:))
        options.numericComparison = NumericComparisonAnswer(rawValue: numericComparison) ?? .accept
        options.stateDirectory = stateDirectoryPath(stateDirectory)
        options.shareController = shareController
        options.nameGiven = name != nil
        // A broadcasting fleet's members on a tcp: or unix: spec share connections as many as the
        // controller has advertising sets: asked of it first (Docs/REFERENCE.md, "Fleets").
        for spec in ControllerProbe.specsToProbe(plans, options: options) {
            options.advertisingSets[spec] = try ControllerProbe.advertisingSets(spec, loop: loop, logger: logger)
        }
        // A connectable member has a connection of its own, which broadcasting members share (ControllerPlacement).
        for pooled in ControllerPlacement.place(plans, options: options).pooled { logger.notice("\(pooled.notice)") }
        let (stacks, planPeripherals) = try RunStack.assembleInPlanOrder(plans, options: options, loop: loop, logger: logger)

        var settings = RunSettings()
        settings.capturePath = btsnoopPath
        settings.captureMaxBytes = try parsedBtsnoopMax()
        settings.captureGenerations = CaptureSettings.generations
        settings.controlPath = controlPath
        if controlPath != nil { settings.controlMode = try parsedControlMode() }
        // --scenario, then each device's `scenario:` of --config (its steps act on that device).
        // A device the steps name that does not run is told before any controller opens.
        // A failure shows written values decoded where blemu can (`150 bpm`, a control point's opcode).
        let scenarios = try loadedScenarios(plans)
        let runners: [(file: String, runner: ScenarioRunner)]
        do {
            runners = try RunScenarios.runners(scenarios, planPeripherals: planPeripherals,
                                               scheduler: loop, logger: logger,
                                               describe: { uuid, value in GATTValueText.describe(uuid: uuid, value: value) })
        } catch {
            throw ValidationError(error.description)
        }
        // The fleet each device is a member of, for `started` and the control socket's `fleet:NAME`.
        var fleetOf: [ObjectIdentifier: String] = [:]
        // (A plan whose device could not be made has no peripheral: then none are paired up wrongly.)
        if plans.count == planPeripherals.count {
            for (plan, peripheral) in zip(plans, planPeripherals) { fleetOf[ObjectIdentifier(peripheral)] = plan.fleetReference }
        }
        try RunSession.run(stacks, devices: planPeripherals, deviceNames: plans.map(\.device), fleets: plans.map(\.fleetReference), fleetOf: fleetOf,
                           settings: settings, loop: loop, logger: logger,
                           scenarios: runners.map(\.runner))
        guard !runners.isEmpty else { return }
        let verdict = RunScenarios.verdict(runners.map { ($0.file, $0.runner.outcome) })
        for line in verdict.lines {
            switch line {
            case .passed(let text): print(text)
            case .failed(let text): printError(text)
            }
        }
        if !verdict.passed { throw ExitCode(1) }
    }
}

/// A one-line reason, printed by the argument parser as `Error: <reason>`, with exit status 1.
typealias RuntimeFailure = StackFailure

/// The --btsnoop rotation's fixed part.
enum CaptureSettings {
    /// Rotated files kept: PATH.1 (the newest) to PATH.3.
    static let generations = 3
}

/// One message on stderr, whatever --log says: a scenario's failure is for the person running it.
func printError(_ text: String) {
    var line = text + "\n"
    line.withUTF8 { bytes in _ = write(2, bytes.baseAddress, bytes.count) }
}
