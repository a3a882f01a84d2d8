import ArgumentParser
import BlemuAssignedNumbers
import BlemuBroadcast
import BlemuCentral
import BlemuControl
import BlemuCore
import BlemuGATTText
import BlemuObserver
import BlemuStack
import CLinux
import Logging

/// `blemu scan`: the advertisers nearby, one line each, again when what they say changes or what
/// the observer decodes from it is a new reading (and, with `--json`, when their RSSI moved):
/// `ScanLines` decides, with a bounded memory. With a bindkey, a replayed encrypted BTHome
/// reading is skipped (`BTHomeReplayGuard`, bthome-ble's rule) and said once per advertiser. Below each
/// line, what the observer decoded (`BroadcastReport`: BTHome, iBeacon, Eddystone, service and
/// manufacturer data); `--watch ADDRESS` prints each new reading of one advertiser once
/// (`ReadingWatch`).
struct ScanCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "scan",
        abstract: "Central: list advertisers nearby, one line each, updated as they change.",
        discussion: "Runs until Ctrl-C or --timeout. Lines: ADDRESS TYPE RSSI \"NAME\" services [UUID ...] appearance 0xNNNN, then an indented line per decoded broadcast (bthome, ibeacon, eddystone-uid/url/tlm, battery-service, service-data, manufacturer-data); --json: one object per line.")

    @Option(name: .customLong("controller"), help: "Controller spec: hciN, tcp:HOST:PORT, unix:PATH, serial:DEVICE[:BAUD]. Default: $BLEMU_CONTROLLER.")
    var controller: String?

    @Option(help: ArgumentHelp("Stop after this many seconds.", valueName: "S"))
    var timeout: Double?

    @Option(help: ArgumentHelp("Only advertisers that list this service (2A37, 0x180D or 128-bit).", valueName: "UUID"))
    var service: String?

    @Option(help: ArgumentHelp("Only advertisers whose name contains this.", valueName: "N"))
    var name: String?

    @Flag(help: "One JSON object per line.")
    var json = false

    @Flag(help: "Passive scanning: no scan requests, so no scan responses (names often live there).")
    var passive = false

    @Option(name: .customLong("bindkey-file"), help: ArgumentHelp("Open encrypted BTHome with the bindkey in this file (32 hex digits; never on the command line).", valueName: "PATH"))
    var bindkeyFile: String?

    @Option(help: ArgumentHelp("Only this advertiser, each new reading printed once (BTHome packet id de-duplicated; unchanged payloads not repeated).", valueName: "ADDRESS"))
    var watch: String?

    @Flag(help: "A table of every advertiser, by address, redrawn in place every second (a terminal's; not with --json, --watch or --periodic).")
    var table = false

    @Flag(help: "Also synchronize to periodic advertising trains (extended scanning; LE Periodic Advertising Create Sync) and print their data, decoded, when it changes.")
    var periodic = false

    @Option(name: .customLong("log-level"), help: "Log level for stderr (default: warning).")
    var logLevel: Logger.Level = .warning

    func validate() throws {
        if let timeout, !(timeout > 0 && timeout <= 86_400) {
            throw ValidationError("--timeout must be a number of seconds above 0 (at most a day), not \(timeout)")
        }
        if let service, ControlRequest.parseUUID(service) == nil {
            throw ValidationError("--service '\(service)' is not a UUID: give 180D, 0x180D or the 128-bit form")
        }
        if let watch, BluetoothAddress(watch) == nil {
            throw ValidationError("--watch '\(watch)' is not a Bluetooth address: give AA:BB:CC:DD:EE:FF")
        }
        if table, json || watch != nil || periodic {
            throw ValidationError("--table draws a table for people: not with --json, --watch or --periodic")
        }
    }

    func run() throws {
        try LogSetup.bootstrap(destination: .stderr, level: logLevel)
        defer { LogSetup.finish() }
        let watched = watch.flatMap(BluetoothAddress.init)
        var keys = BroadcastReport.Keys(bound: watched != nil)
        if let bindkeyFile {
            switch BTHomeBindkey.read(path: bindkeyFile) {
            case .success(let read):
                keys.bindkey = read.key
                if let warning = read.warning { emitStderr("blemu scan: warning: \(warning)") }
            case .failure(let error):
                throw ValidationError(error.description)
            }
        }
        let session = try CentralSession(controller: controller, logger: Logger(label: "blemu.scan"))
        let filter = AdvertiserFilter(name: name, service: service.flatMap(ControlRequest.parseUUID))
        // What was printed for each advertiser (at most 256 remembered, like the advertisers).
        var lines = ScanLines(rssiUpdates: json)
        var readings = watched.map(ReadingWatch.init)
        // The last counter the bindkey opened from each advertiser (at most 256): replays refused.
        var replays = BTHomeReplayGuard()
        /// Whether `report` is a replayed encrypted BTHome reading, to be skipped as bthome-ble skips
        /// it; the first refusal from each advertiser is said on stderr, the later ones are not.
        func refused(_ report: BroadcastReport, from address: BluetoothAddress, now: UInt64) -> Bool {
            guard keys.bindkey != nil, let refusal = replays.screen(report, from: address, now: now) else { return false }
            if refusal.isFirst {
                emitStderr("blemu scan: \(address): \(refusal) (later refusals from it are not said)")
            }
            return true
        }
        if table { drawTable(session: session, filter: filter, keys: keys, replays: { replays }) }
        session.host.onAdvertisement = { advertisement, change in
            guard filter.matches(advertisement) else { return }
            if table {
                // The table draws each advertiser's latest data: the guard learns what the key opens.
                if keys.bindkey != nil {
                    _ = replays.screen(BroadcastReport(advertisement, keys: keys), from: advertisement.address,
                                       now: advertisement.lastSeen)
                }
                return
            }
            if let watched, advertisement.address != watched { return }
            let report = BroadcastReport(advertisement, keys: keys)
            if refused(report, from: advertisement.address, now: advertisement.lastSeen) { return }
            let update: String
            if readings != nil {
                guard readings!.isNewReading(report, from: advertisement.address) else { return }
                update = "reading"
            } else {
                // A new reading (service data that decodes to something new) makes a line too.
                guard let line = lines.update(for: advertisement, change: change, readings: report.readingFingerprints) else { return }
                update = line.rawValue
            }
            for line in json ? [Self.json(advertisement, report: report, update: update).encoded] : Self.text(advertisement, report: report) {
                emitLine(line)
            }
        }
        if periodic {
            var trainLines = PeriodicTrainFilter(watching: watched)
            session.host.syncToPeriodicTrains()
            session.host.onPeriodicSync = { train, address, sid, failure in
                if let failure {
                    if let train { trainLines.syncEnded(train.syncHandle) }
                    emitStderr("blemu scan: \(address) SID \(sid): \(failure)")
                }
            }
            session.host.onPeriodicData = { train, data, rssi, truncated in
                if let watched, train.address != watched { return }
                let report = BroadcastReport(address: train.address, advertisingData: data, keys: keys)
                if refused(report, from: train.address, now: session.loop.nowNanoseconds) { return }
                guard trainLines.isNew(data, report: report, syncHandle: train.syncHandle, from: train.address) else { return }
                let lines = json ? [Self.json(train: train, data: data, rssi: rssi, truncated: truncated, report: report).encoded]
                    : Self.text(train: train, rssi: rssi, truncated: truncated, report: report)
                for line in lines { emitLine(line) }
            }
        }
        session.host.onError = { message in session.finish(failure: message) }
        session.host.onReady = {
            if periodic, !session.host.controller.usesExtendedCommands {
                emitStderr("blemu scan: --periodic: the controller scans with legacy commands (no extended advertising), so no periodic train can be found")
            }
            session.host.startScanning(active: !passive)
        }
        if let timeout { session.finish(after: timeout) }
        try session.run()
    }

    /// `--table`: the screen cleared once, then the table redrawn from the top every second:
    /// home, each line cleared to its end, the rest of the screen cleared (no flicker).
    func drawTable(session: CentralSession, filter: AdvertiserFilter, keys: BroadcastReport.Keys,
                   replays: @escaping () -> BTHomeReplayGuard) {
        emitLine("\u{1B}[2J")
        func draw() {
            var columns: Int32 = 0, rows: Int32 = 0
            let sized = clinux_terminal_size(1, &columns, &rows) == 0
            let advertisers = session.host.advertisers.entries.values.filter { filter.matches($0) }
            // A terminal's height less the header, the count and the "more" line.
            let lines = ScanTable.lines(advertisers, now: session.loop.nowNanoseconds, keys: keys, replays: replays(),
                                        width: sized ? Int(columns) : 160, rows: sized ? max(1, Int(rows) - 4) : 60)
            emitLine("\u{1B}[H" + lines.map { $0 + "\u{1B}[K" }.joined(separator: "\n") + "\u{1B}[J")
            session.loop.schedule(after: .seconds(1)) { draw() }
        }
        draw()
    }

    /// The advertiser's line, then one indented line per decoded item.
    static func text(_ advertisement: Advertisement, report: BroadcastReport) -> [String] {
        [text(advertisement)] + report.textLines.map { "    " + $0 }
    }

    /// Periodic_Advertising_Interval (1.25 ms units) in ms: "100.00".
    static func milliseconds(_ interval: UInt16) -> String {
        let hundredths = Int(interval) * 125
        let fraction = hundredths % 100
        return "\(hundredths / 100).\(fraction < 10 ? "0" : "")\(fraction)"
    }

    /// A periodic train's data: its line ("periodic"), then one indented line per decoded item.
    static func text(train: PeriodicTrain, rssi: Int8?, truncated: Bool, report: BroadcastReport) -> [String] {
        var parts = [train.address.description, Advertisement.addressTypeName(train.addressType), rssi.map { "\($0) dBm" } ?? "? dBm",
                     "periodic sid \(train.sid)", "interval \(milliseconds(train.interval)) ms"]
        if truncated { parts.append("truncated") }
        return [parts.joined(separator: "  ")] + report.textLines.map { "    " + $0 }
    }

    static func json(train: PeriodicTrain, data: [UInt8], rssi: Int8?, truncated: Bool, report: BroadcastReport) -> JSONValue {
        .object([
            ("address", .string(train.address.description)),
            ("address_type", .string(Advertisement.addressTypeName(train.addressType))),
            ("rssi", rssi.map { .integer(Int64($0)) } ?? .null),
            ("periodic", .object([("sid", .integer(Int64(train.sid))), ("interval_ms", .number(Double(train.interval) * 1.25)),
                                  ("sync_handle", .integer(Int64(train.syncHandle))), ("truncated", .bool(truncated))])),
            ("advertising_data", .string(Hex.bytes(data))),
            ("decoded", report.json),
            ("update", "periodic"),
        ])
    }

    static func text(_ advertisement: Advertisement) -> String {
        var parts = [advertisement.address.description, advertisement.addressTypeName,
                     advertisement.rssi.map { "\($0) dBm" } ?? "? dBm"]
        // The name is the advertiser's own: shown, never obeyed (`VisibleText`).
        if !advertisement.name.isEmpty { parts.append("\"\(advertisement.name.visible)\"") }
        if !advertisement.services.isEmpty {
            parts.append("services [" + advertisement.services.map { uuid in
                uuid.description + (AssignedNumbers.serviceName(uuid).map { " (\($0))" } ?? "")
            }.joined(separator: " ") + "]")
        }
        if let appearance = advertisement.appearance { parts.append("appearance \(GATTValueText.appearance(appearance))") }
        if let power = advertisement.txPower { parts.append("tx \(power) dBm") }
        if advertisement.isConnectable { parts.append("connectable") }
        return parts.joined(separator: "  ")
    }

    static func json(_ advertisement: Advertisement, report: BroadcastReport? = nil, update: String) -> JSONValue {
        .object([
            ("address", .string(advertisement.address.description)),
            ("address_type", .string(advertisement.addressTypeName)),
            ("rssi", advertisement.rssi.map { .integer(Int64($0)) } ?? .null),
            ("name", advertisement.name.isEmpty ? .null : .string(advertisement.name)),
            ("services", .array(advertisement.services.map { .string($0.description) })),
            ("appearance", advertisement.appearance.map { .integer(Int64($0)) } ?? .null),
            ("appearance_name", advertisement.appearance.flatMap(AssignedNumbers.appearanceName).map { .string($0) } ?? .null),
            ("tx_power", advertisement.txPower.map { .integer(Int64($0)) } ?? .null),
            ("connectable", .bool(advertisement.isConnectable)),
            ("manufacturer_data", advertisement.manufacturerData.map { .string(Hex.bytes($0)) } ?? .null),
            ("service_data", .object(advertisement.serviceData.map { ($0.uuid.description, .string(Hex.bytes($0.data))) })),
            ("advertising_data", .string(Hex.bytes(advertisement.advertisingData))),
            ("scan_response_data", .string(Hex.bytes(advertisement.scanResponseData))),
            ("decoded", (report ?? BroadcastReport(advertisement)).json),
            ("update", .string(update)),
        ])
    }
}
