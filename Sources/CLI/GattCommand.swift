import ArgumentParser
import BlemuATT
import BlemuAssignedNumbers
import BlemuCentral
import BlemuControl
import BlemuCore
import BlemuCrypto
import BlemuDevices
import BlemuGATT
import BlemuGATTClient
import BlemuGATTText
import BlemuHost
import BlemuRecording
import BlemuSMP
import BlemuSecurity
import BlemuStack
import Glibc
import Logging

/// `blemu gatt`: find one peripheral, connect, and dump its database, read, write or
/// subscribe to one characteristic, as a test script or a person at a shell needs.
struct GattCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "gatt",
        abstract: "Central: connect to a peripheral and dump its database, read, write or subscribe.",
        discussion: """
            Commands: dump [--profile] | record [--duration S] | read C... | write C HEX [C HEX...] (or --text TEXT) [--no-response] | subscribe C [--count N] | shell.
            C, a characteristic: its UUID (2A19, 0x2A19, the 128-bit form), its value handle as dump shows it (0x0014; a 16-bit
            UUID the peripheral has wins), or its name as dump shows it (battery-level, or "Battery Level").
            record writes a recording (JSON) that `blemu run FILE.json` replays at the same handles: the database with
            every handle, the advertising data and scan response, every value read, and what it notifies and
            indicates during --duration seconds (subscribed to all of it), with the timing (Docs/PROFILES.md); stderr then sums
            it up and warns of what its twin will not do as the original did (a subscription that caught nothing, security).
            shell: one connection, commands read from stdin one a line (read, write, subscribe, unsubscribe, dump, help,
            quit; a prompt on stderr when stdin is a terminal); it ends with quit or at the end of stdin (while subscribed, on Ctrl-C).
            dump --profile writes a GATT profile (JSON) that `blemu run FILE.json` serves: a clone of the peripheral,
            with the read permissions its refusals showed (0x05, 0x0F, 0x0C, 0x08); writes are not tried. With --pair
            it reads everything first as a stranger, then pairs and reads again what was refused for want of security.
            The peripheral: --address, or the one advertiser that matches --name or --service: the scan lasts at
            least 1.5 s, and when several match it ends listing them (name, address, RSSI): give --address.
            Errors name the ATT error (e.g. Write Not Permitted (0x03)); the exit status is then 1.
            A dump with a bond for the peripheral encrypts with it and reads again what was refused for want of security.
            Security, as a phone does it: a read, write or subscription refused for want of security
            (0x05, 0x0F, 0x0C) encrypts the link with the bond kept in --state-dir, or pairs, and is tried
            once more (said on stderr). --pair pairs first. A peripheral that shows a passkey (or has it
            on a label) needs --passkey; Numeric Comparison values are printed on stderr and accepted.
            Enhanced ATT (--eatt, default auto): once the link is encrypted, and when the peripheral's Server
            Supported Features say so, up to 5 enhanced bearers are opened and the reads of a dump or of
            read C C... go over all bearers at once, one request on each (with -v, lines on stderr say how many).
            off: one bearer; require: pair for it, and fail when the peripheral has no EATT.
            """)

    @Option(name: .customLong("controller"), help: "Controller spec (default: $BLEMU_CONTROLLER).")
    var controller: String?

    @Option(help: ArgumentHelp("The peripheral's address.", valueName: "A"))
    var address: String?

    @Option(help: ArgumentHelp("The advertiser whose name contains this (several: an error listing them).", valueName: "N"))
    var name: String?

    @Option(help: ArgumentHelp("The advertiser that lists this service (several: an error listing them).", valueName: "UUID"))
    var service: String?

    @Argument(help: "dump, read, write, subscribe or shell")
    var command: String

    @Argument(help: "A characteristic: UUID, value handle (0x0014) or name (battery-level) (read, write, subscribe), and HEX (write)")
    var arguments: [String] = []

    @Option(help: ArgumentHelp("write: the value as UTF-8 text instead of HEX.", valueName: "TEXT"))
    var text: String?

    @Flag(name: .customLong("no-response"), help: "write: Write Without Response.")
    var noResponse = false

    @Option(help: ArgumentHelp("subscribe: stop after N values.", valueName: "N"))
    var count: Int?

    @Flag(help: "One JSON object per line.")
    var json = false

    @Flag(name: [.customShort("v"), .customLong("verbose")],
          help: "Say more on stderr: the enhanced ATT bearers opened, and how many carried the reads or writes.")
    var verbose = false

    @Flag(help: "dump: write a GATT profile (JSON) for `blemu run FILE.json` instead.")
    var profile = false

    @Option(help: ArgumentHelp("dump --profile: also record S seconds of notifications and indications, which the clone replays.", valueName: "S"))
    var capture: Double?

    @Option(help: ArgumentHelp("record: seconds to listen to notifications and indications (default 10).", valueName: "S"))
    var duration: Double?

    @Option(help: ArgumentHelp("Seconds to find and connect to the peripheral (default 10).", valueName: "S"))
    var timeout: Double = 10

    @Option(name: .customLong("log-level"), help: "Log level for stderr (default: warning).")
    var logLevel: Logger.Level = .warning

    @Flag(help: "Pair (or encrypt with the bond) before anything else.")
    var pair = false

    @Option(help: ArgumentHelp("Enhanced ATT bearers once the link is encrypted: auto (when the peripheral has EATT), off, require.", valueName: "MODE"))
    var eatt: EATTUse = .auto

    @Option(help: ArgumentHelp("The passkey to type when the peripheral shows one or is labelled with one (Passkey Entry).", valueName: "DIGITS"))
    var passkey: String?

    @Option(name: .customLong("io-capability"),
            help: ArgumentHelp("What this central declares when it pairs: keyboard-display (default), keyboard-only, display-yes-no, display-only, no-input-no-output.", valueName: "CAP"))
    var ioCapability: String = "keyboard-display"

    @Flag(name: .customLong("reject-comparison"), help: "Numeric Comparison: reject the value (Pairing Failed 0x0C) instead of accepting it.")
    var rejectComparison = false

    @Option(name: .customLong("state-dir"),
            help: ArgumentHelp("Where this central keeps its bonds (bonds-central-blemu_central.json; default: $STATE_DIRECTORY, else ~/.local/state/blemu).", valueName: "DIR"))
    var stateDirectory: String?

    /// What to do once connected.
    enum Action: Equatable {
        case dump
        /// A recording: the dump with handles, then S seconds of notifications and indications.
        case record(Double)
        /// One or more characteristics, their reads spread over the link's bearers.
        case read([CharacteristicReference])
        case write(CharacteristicReference, [UInt8])
        /// Several characteristics, each with its value: the writes spread over the link's bearers.
        case writes([Write])
        case subscribe(CharacteristicReference)
        /// `shell` only: notifications and indications off again.
        case unsubscribe(CharacteristicReference)
        /// Commands from stdin, one connection for all of them.
        case shell
    }

    /// One value to write to a characteristic (`write UUID HEX UUID HEX...`).
    struct Write: Equatable {
        var target: CharacteristicReference
        var value: [UInt8]
    }

    func action() throws -> Action {
        if command == "shell" {
            guard arguments.isEmpty else { throw ValidationError("shell takes no arguments: its commands come from stdin") }
            return .shell
        }
        if command == "record" {
            guard arguments.isEmpty else { throw ValidationError("record takes no arguments") }
            return .record(duration ?? 10)
        }
        return try Self.action(command: command, arguments: arguments, text: text)
    }

    /// A command of the command line or of a `shell` line (`unsubscribe` only there).
    static func action(command: String, arguments: [String], text: String?, inShell: Bool = false) throws -> Action {
        func uuid(_ index: Int) throws -> CharacteristicReference {
            guard arguments.count > index else { throw ValidationError("\(command) needs a characteristic: its UUID, value handle or name") }
            guard let reference = CharacteristicReference(arguments[index]) else {
                throw ValidationError("'\(arguments[index].visible)' is not a UUID (2A37, 0x2A37 or the 128-bit form), a value handle (0x0014) or a name (battery-level)")
            }
            return reference
        }
        switch command {
        case "dump":
            guard arguments.isEmpty else { throw ValidationError("dump takes no arguments") }
            return .dump
        case "read":
            guard !arguments.isEmpty else { throw ValidationError("usage: read UUID [UUID...]") }
            return .read(try arguments.indices.map(uuid))
        case "write":
            let target = try uuid(0)
            if let text {
                guard arguments.count == 1 else { throw ValidationError("write with --text takes only the UUID") }
                return .write(target, Array(text.utf8))
            }
            let usage = "usage: write UUID HEX [UUID HEX...] (e.g. 0102ff) or write UUID --text TEXT"
            guard arguments.count >= 2, arguments.count % 2 == 0 else { throw ValidationError(usage) }
            let writes = try stride(from: 0, to: arguments.count, by: 2).map { index in
                guard let value = Hex.parse(arguments[index + 1]) else { throw ValidationError(usage) }
                return Write(target: try uuid(index), value: value)
            }
            guard writes.count > 1 else { return .write(target, writes[0].value) }
            guard Set(writes.map(\.target)).count == writes.count else {
                throw ValidationError("write: each characteristic once (one value each)")
            }
            return .writes(writes)
        case "subscribe":
            guard arguments.count == 1 else { throw ValidationError("usage: subscribe UUID [--count N]") }
            return .subscribe(try uuid(0))
        case "unsubscribe" where inShell:
            guard arguments.count == 1 else { throw ValidationError("usage: unsubscribe UUID") }
            return .unsubscribe(try uuid(0))
        default:
            throw ValidationError(inShell ? "unknown command '\(command)': dump, read, write, subscribe, unsubscribe, help or quit"
                                          : "unknown command '\(command)': dump, record, read, write, subscribe or shell")
        }
    }

    func validate() throws {
        _ = try action()
        let ways = [address != nil, name != nil, service != nil].filter { $0 }.count
        guard ways == 1 else { throw ValidationError("name the peripheral with one of --address, --name or --service") }
        if let address, BluetoothAddress(address) == nil { throw ValidationError("--address '\(address)' is not an address like C4:12:34:56:78:9A") }
        if let service, ControlRequest.parseUUID(service) == nil { throw ValidationError("--service '\(service)' is not a UUID") }
        if let count, count < 1 { throw ValidationError("--count must be at least 1") }
        if profile && command != "dump" { throw ValidationError("--profile goes with dump") }
        if let duration {
            guard command == "record" else { throw ValidationError("--duration goes with record") }
            guard duration > 0 && duration <= 3600 else { throw ValidationError("--duration must be above 0 seconds (at most an hour)") }
        }
        if command == "shell", count != nil || text != nil || noResponse {
            throw ValidationError("shell: give --count, --text and --no-response on its lines, not on the command line")
        }
        if let capture {
            guard profile else { throw ValidationError("--capture goes with dump --profile") }
            guard capture > 0 && capture <= 3600 else { throw ValidationError("--capture must be above 0 seconds (at most an hour)") }
        }
        guard timeout > 0 && timeout <= 3600 else { throw ValidationError("--timeout must be above 0 seconds") }
        _ = try parsedPasskey()
        guard SMPIOCapability(cliName: ioCapability) != nil else {
            throw ValidationError("--io-capability '\(ioCapability)': give keyboard-display, keyboard-only, display-yes-no, display-only or no-input-no-output")
        }
        if let stateDirectory, stateDirectory.isEmpty { throw ValidationError("--state-dir needs a directory") }
    }

    func parsedPasskey() throws -> UInt32? {
        guard let passkey else { return nil }
        guard let value = CentralPairingOptions.parsePasskey(passkey) else {
            throw ValidationError("--passkey '\(passkey)': give the six digits (0 to 999999)")
        }
        return value
    }

    /// How this central pairs, from the command line.
    func pairingOptions() throws -> CentralPairingOptions {
        var options = CentralPairingOptions()
        options.ioCapability = SMPIOCapability(cliName: ioCapability) ?? .keyboardDisplay
        options.passkey = try parsedPasskey()
        options.acceptNumericComparison = !rejectComparison
        options.stateDirectory = stateDirectoryPath(stateDirectory)
        return options
    }

    func run() throws {
        try LogSetup.bootstrap(destination: .stderr, level: logLevel)
        defer { LogSetup.finish() }
        let action = try action()
        let session = try CentralSession(controller: controller, logger: Logger(label: "blemu.gatt"))
        let security = session.attachSecurity(try pairingOptions())
        security.display = { emitNote($0) }
        let pairFirst = pair
        let filter = AdvertiserFilter(name: name, service: service.flatMap(ControlRequest.parseUUID),
                                      address: address.flatMap(BluetoothAddress.init))
        session.connect(to: filter, timeout: timeout) { link, advertisement in
            let run = GattRun(session: session, link: link, action: action, json: json, profile: profile, capture: capture,
                              noResponse: noResponse, count: count, advertisement: advertisement, security: security,
                              pairsAfterDump: pairFirst && (profile || command == "record"), eatt: eatt, verbose: verbose)
            // dump --profile reads first as a stranger (to learn what each value needs), then pairs.
            if pairFirst && !run.pairsAfterDump { run.secureThenStart() } else { run.start() }
        }
        try session.run()
    }
}

/// One connected run of `blemu gatt`: the workflow (`GATTWorkflow`) prepares the link, then the
/// action; this prints what comes back.
final class GattRun {
    let session: CentralSession
    let link: CentralLink
    let workflow: GATTWorkflow
    /// The command running (`shell`: the one read last from stdin).
    var action: GattCommand.Action
    let json: Bool
    let profile: Bool
    let capture: Double?
    var noResponse: Bool
    var count: Int?
    let advertisement: Advertisement
    private var received = 0
    /// `dump --profile --pair`: the first reads go over the link as it is, then the link is
    /// secured and what was refused for want of security read again.
    let pairsAfterDump: Bool
    /// `-v`: the enhanced bearers' notes and how many bearers carried a batch, on stderr.
    let verbose: Bool
    /// `shell`: where a command's end goes (the next line is read then), instead of the end of the run.
    var shell: GattShell?
    /// Who hears each value handle's notifications and indications: the subscriptions (all of
    /// them in a `shell`) and a control point's answer to a write.
    private let listeners = GATTValueListeners()

    init(session: CentralSession, link: CentralLink, action: GattCommand.Action, json: Bool, profile: Bool, capture: Double?,
         noResponse: Bool, count: Int?, advertisement: Advertisement, security: CentralSecurity, pairsAfterDump: Bool = false,
         eatt: EATTUse = .auto, verbose: Bool = false) {
        self.pairsAfterDump = pairsAfterDump
        self.verbose = verbose
        self.profile = profile
        self.capture = capture
        self.session = session
        self.link = link
        self.action = action
        self.json = json
        self.noResponse = noResponse
        self.count = count
        self.advertisement = advertisement
        workflow = GATTWorkflow(link: link, security: security, scheduler: session.loop, logger: session.logger)
        workflow.eatt = eatt
        // The enhanced bearers' notes ("eatt: ...") are for someone looking closer: with -v.
        workflow.onNote = { note in if verbose || !note.hasPrefix("eatt:") { emitNote(note) } }
        // The run lives as long as the command: the cycle through the workflow is its lifetime.
        workflow.onFailure = { [self] message in fail(message) }
    }

    var client: GATTClient { link.client }

    /// `--pair`: encrypt with the bond, or pair, then go on.
    func secureThenStart() {
        workflow.secure(because: nil) { [self] _ in start() }
    }

    func start() {
        workflow.prepare(securingLater: pairsAfterDump) { [self] services in
            listeners.install(on: client)
            if action == .shell {
                let shell = GattShell(run: self)
                self.shell = shell
                shell.start()
            } else {
                run(services)
            }
        }
    }

    /// `shell`: runs one command on the connection, with the database as it is now.
    func run(_ action: GattCommand.Action, noResponse: Bool) {
        self.action = action
        self.noResponse = noResponse
        count = nil
        run(client.services)
    }

    /// `shell`: whether values are still awaited (a subscription): then the end of stdin does not end the run.
    var isListening: Bool { listeners.isListening }

    private func fail(_ message: String) {
        if let shell { return shell.commandFailed(message) }
        link.onDisconnected = nil
        session.finish(failure: message)
    }

    private func done() {
        if let shell { return shell.commandDone() }
        link.onDisconnected = nil
        session.finish()
    }

    private func find(_ reference: CharacteristicReference, in services: [RemoteService]) -> RemoteCharacteristic? {
        switch reference.resolve(in: services) {
        case .success(let found): return found
        case .failure(let why):
            fail("\(advertisement.address) \(why)")
            return nil
        }
    }

    private func run(_ services: [RemoteService]) {
        switch action {
        case .shell:
            fail("shell inside a shell")
        case .dump:
            workflow.dump(services, secureAndRetry: pairsAfterDump) { [self] dump in
                reportBearers()
                print(dump)
            }
        case .record(let seconds):
            workflow.recordProfile(services, for: seconds, secureAndRetry: pairsAfterDump, advertisement: advertisement) { [self] recording in
                if let note = recording.lossNote { emitNote(note) }
                emitLine(recording.profile.encoded())
                // What the file holds and what its twin will not do as the original did, on stderr.
                for line in recording.summary { emitNote(line) }
                done()
            }
        case .read(let references):
            var characteristics: [RemoteCharacteristic] = []
            for reference in references {
                guard let characteristic = find(reference, in: services) else { return }
                characteristics.append(characteristic)
            }
            // The reads at once, spread over the link's bearers; printed in the order asked.
            workflow.read(characteristics.map(\.valueHandle)) { [self] results in
                reportBearers()
                func show(_ index: Int) {
                    guard index < characteristics.count else { return done() }
                    let characteristic = characteristics[index], uuid = characteristic.uuid
                    switch results[characteristic.valueHandle] ?? .failure(.notSent) {
                    case .failure(let error): fail("read \(uuid): \(error)")
                    case .success(let value):
                        client.readPresentationFormat(of: characteristic) { [self] format in
                            client.readUserDescriptionIfUnnamed(of: characteristic) { [self] description in
                                // Several values: each labelled with its characteristic, as dump names it.
                                let label = characteristics.count > 1
                                    ? "\(uuid)\(GATTValueText.characteristicName(uuid, userDescription: description)): " : ""
                                emitLine(json ? GATTValueText.json(uuid: uuid, handle: characteristic.valueHandle, value: value, format: format,
                                                                   userDescription: description).encoded
                                              : label + GATTValueText.describe(uuid: uuid, value: value, format: format))
                                show(index + 1)
                            }
                        }
                    }
                }
                show(0)
            }
        case .write(let reference, let value):
            guard let characteristic = find(reference, in: services) else { return }
            let uuid = characteristic.uuid
            if noResponse {
                switch client.writeWithoutResponse(characteristic.valueHandle, value) {
                case .failure(let error): fail("write \(uuid): \(error)")
                case .success:
                    emitLine(json ? GATTValueText.writtenJSON(uuid, characteristic.valueHandle, value, withoutResponse: true).encoded : "written (without response)")
                    done()
                }
                return
            }
            let handle = characteristic.valueHandle
            // A control point (write and indicate) answers with an indication: printed, and the
            // command ends with it (or 5 s without one).
            workflow.writeAwaitingAnswer(characteristic, value, listeners: listeners) { [self] event in
                switch event {
                case .written:
                    emitLine(json ? GATTValueText.writtenJSON(uuid, handle, value, withoutResponse: false).encoded : "written")
                case .answered(let indicated):
                    let time = Timestamp.now()
                    emitLine(json ? GATTValueText.json(uuid: uuid, handle: handle, value: Array(indicated), time: time).encoded
                                  : "\(time.clock)  indicated: " + GATTValueText.describe(uuid: uuid, value: Array(indicated)))
                case .finished:
                    done()
                case .failed(let message):
                    fail(message)
                }
            }
        case .writes(let writes):
            if noResponse { return fail("--no-response writes one value") }
            var characteristics: [RemoteCharacteristic] = []
            for write in writes {
                guard let characteristic = find(write.target, in: services) else { return }
                characteristics.append(characteristic)
            }
            guard Set(characteristics.map(\.valueHandle)).count == characteristics.count else {
                return fail("write: each characteristic once (one value each)")
            }
            // The writes at once, spread over the link's bearers; said in the order asked.
            workflow.write(zip(characteristics, writes).map { (handle: $0.valueHandle, value: $1.value) }) { [self] results in
                reportBearers("writes")
                for (characteristic, write) in zip(characteristics, writes) {
                    if case .failure(let error) = results[characteristic.valueHandle] ?? .failure(.notSent) {
                        return fail("write \(characteristic.uuid): \(error)")
                    }
                    emitLine(json ? GATTValueText.writtenJSON(characteristic.uuid, characteristic.valueHandle, write.value, withoutResponse: false).encoded : "written \(characteristic.uuid)")
                }
                done()
            }
        case .subscribe(let reference):
            guard let characteristic = find(reference, in: services) else { return }
            let uuid = characteristic.uuid
            guard !characteristic.properties.isDisjoint(with: [.notify, .indicate]) else {
                return fail("characteristic \(uuid) neither notifies nor indicates")
            }
            var format: PresentationFormat?
            let handler: (ArraySlice<UInt8>) -> Void = { [self] value in
                // When it came, as a person watching or a script timing it wants.
                let time = Timestamp.now()
                emitLine(json ? GATTValueText.json(uuid: uuid, handle: characteristic.valueHandle, value: Array(value), format: format, time: time).encoded
                              : "\(time.clock)  " + GATTValueText.describe(uuid: uuid, value: Array(value), format: format))
                received += 1
                if shell == nil, let count, received >= count { done() }
            }
            // A Service Changed is logged; the command ends if what we listen to is gone.
            workflow.watchForRemoval(of: uuid, valueHandle: characteristic.valueHandle, listeners: listeners) { [self] why in fail(why) }
            // The Presentation Format first (read before subscribing: values decoded from the first).
            client.readPresentationFormat(of: characteristic) { [self] found in
                format = found
                _ = workflow.subscribe(characteristic, listeners: listeners, listener: handler) { [self] result in
                    if case .failure(let error) = result { return fail("subscribe \(uuid): \(error)") }
                    // A shell goes on to its next command; the values keep coming.
                    if shell != nil { emitNote("subscribed to \(uuid)"); done() }
                }
            }
        case .unsubscribe(let reference):
            guard let characteristic = find(reference, in: services) else { return }
            let uuid = characteristic.uuid
            workflow.unsubscribe(characteristic, listeners: listeners) { [self] result in
                if case .failure(let error) = result { return fail("unsubscribe \(uuid): \(error)") }
                emitNote("unsubscribed from \(uuid)")
                done()
            }
        }
    }

    /// How many bearers carried the reads (or writes), on stderr (a JSON object with --json) once enhanced
    /// bearers were opened, with `-v`: what `--eatt` bought.
    private func reportBearers(_ what: String = "reads") {
        guard verbose, workflow.enhancedBearers > 0 else { return }
        let enhanced = workflow.enhancedBearers, used = workflow.bearersUsed
        emitStderr(json ? JSONValue.object([("eatt", .object([("enhanced_bearers", .integer(Int64(enhanced))),
                                                                ("bearers_used", .integer(Int64(used)))]))]).encoded
                        : "eatt: the \(what) went over \(used) bearer\(used == 1 ? "" : "s") (\(enhanced) enhanced)")
    }

    private func print(_ dump: GATTWorkflow.Dump) {
        let services = dump.services, values = dump.values
        if profile {
            return workflow.cloneProfile(dump, capture: capture, advertisement: advertisement) { [self] clone in
                emitLine(clone.encoded())
                done()
            }
        } else if json {
            emitLine(GATTValueText.dumpJSON(advertisement: advertisement, services: services, values: values).encoded)
        } else {
            for line in GATTValueText.dumpLines(advertisement: advertisement, mtu: Int(client.mtu), services: services, values: values) {
                emitLine(line)
            }
        }
        done()
    }
}

/// `blemu gatt ... shell`: commands from stdin, one at a time, on the one connection (each
/// `blemu gatt` command connects anew, 2-4 s each). The next line is read once the command
/// before it is done (`StdinLines` holds back: a script's lines wait in the pipe); values
/// subscribed to keep coming between commands. A command that fails says why on stderr and the
/// shell goes on; the run's exit status is then 1. It ends with `quit` or at the end of stdin
/// (then, while subscribed, on Ctrl-C, as `subscribe` does), or when the peripheral disconnects.
/// A characteristic is named by UUID, value handle or name (`CharacteristicReference`; a name
/// of several words in double quotes). At a terminal a prompt (`gatt> ` on stderr) says when
/// the next command is taken, and the line is edited with libedit, with a history on the up
/// and down arrows (`TerminalLines`), where the system has libedit; else the terminal's own
/// line editing applies, without a history.
final class GattShell {
    let run: GattRun
    private var lines: LineSource?
    private var busy = false
    private var failures = 0
    private var quitting = false
    /// stdin is a terminal without libedit: a person types, so a prompt says when the next line
    /// is read (with libedit, `TerminalLines` shows it).
    private var prompts = isatty(0) == 1
    /// The prompt is out and no line came since: not shown twice.
    private var promptShown = false

    static let prompt = "gatt> "

    static let help = """
        commands, one a line: read C [C...] | write C HEX [C HEX...] [--no-response] | write C --text TEXT |
        subscribe C | unsubscribe C | dump | help | quit (# starts a comment)
        C, a characteristic: its UUID (2A19, 0x2A19, the 128-bit form), its value handle (0x0014, as dump shows it)
        or its name as dump shows it ("Battery Level" in quotes, or battery-level)
        """

    init(run: GattRun) { self.run = run }

    func start() {
        let onLine: (String) -> Void = { [self] line in
            promptShown = false
            handle(line)
            if !busy { showPrompt() }
        }
        let lines: LineSource
        if let editor = TerminalLines.make(loop: run.session.loop, logger: run.session.logger, prompt: Self.prompt, onLine: onLine) {
            prompts = false
            lines = editor
        } else {
            lines = StdinLines(loop: run.session.loop, logger: run.session.logger, onLine: onLine)
        }
        lines.holdBack = { [self] in busy }
        lines.onEnd = { [self] in endOfInput() }
        self.lines = lines
        emitNote("connected to \(run.advertisement.address): commands from stdin (help lists them)")
        showPrompt()
        lines.start()
    }

    private func showPrompt() {
        guard prompts, !quitting, !promptShown else { return }
        promptShown = true
        emitPrompt(Self.prompt)
    }

    /// A line's words: split at spaces and tabs, except inside double quotes (which are taken
    /// off: `read "Battery Level"`). An unclosed quote runs to the end of the line.
    static func words(_ line: Substring) -> [String] {
        var words: [String] = []
        var word = ""
        var quoted = false
        var inWord = false
        for character in line {
            if character == "\"" {
                quoted.toggle()
                inWord = true
            } else if !quoted && (character == " " || character == "\t") {
                if inWord { words.append(word) }
                word = ""
                inWord = false
            } else {
                word.append(character)
                inWord = true
            }
        }
        if inWord { words.append(word) }
        return words
    }

    /// One line: its command run, or why it is not one.
    func handle(_ line: String) {
        let trimmed = line.drop { $0 == " " || $0 == "\t" }
        guard !trimmed.isEmpty, !trimmed.hasPrefix("#") else { return }
        var text: String?
        var commandPart = Substring(trimmed)
        if let range = trimmed.firstRange(of: " --text ") {
            text = String(trimmed[range.upperBound...])
            commandPart = trimmed[..<range.lowerBound]
        }
        var words = Self.words(commandPart)
        guard !words.isEmpty else { return }
        let command = words.removeFirst()
        switch command {
        case "quit", "exit":
            quitting = true
            lines?.stop()
            return finish()
        case "help":
            return emitStderr(Self.help)
        default:
            break
        }
        let noResponse = words.contains("--no-response")
        words.removeAll { $0 == "--no-response" }
        do {
            let action = try GattCommand.action(command: command, arguments: words, text: text, inShell: true)
            busy = true
            run.run(action, noResponse: noResponse)
        } catch {
            failures += 1
            emitStderr("blemu gatt: \(String(describing: error).visible)")
        }
    }

    func commandDone() {
        guard busy else { return }
        busy = false
        showPrompt()
        lines?.resume()
    }

    func commandFailed(_ message: String) {
        failures += 1
        emitStderr("blemu gatt: error: \(message)")
        commandDone()
    }

    private func endOfInput() {
        // Subscribed: the values go on until Ctrl-C, as `subscribe` does.
        guard !run.isListening else { return }
        finish()
    }

    private func finish() {
        run.link.onDisconnected = nil
        run.session.finish(failure: failures > 0 ? "\(failures) shell command\(failures == 1 ? "" : "s") failed" : nil)
    }
}
