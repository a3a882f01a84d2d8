import ArgumentParser
import BlemuBench
import BlemuCore
import BlemuStack
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// `blemu bench`: bumble-bench's throughput and latency runs, with blemu at one end (or both),
/// over any controller. It parses, assembles a `BenchSession` and prints.
struct BenchCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bench",
        abstract: "Throughput and latency over GATT or an L2CAP channel, as bumble-bench measures them (either end may be bumble-bench).",
        discussion: """
            The central connects to --peer and runs gatt-client (writes without response to the Speed service's TX,
            notifications from its RX) or l2cap-client (a credit based channel to --psm, 128 by default); the peripheral
            advertises and runs gatt-server or l2cap-server. Scenarios: send (throughput of what this end sends, until the
            receiver's ACK), receive (throughput of what arrives), ping (round trips, one packet at a time), pong (answers),
            read (gatt-client: --packets Read Requests of GAP's Device Name, one at a time, against any GATT server;
            gatt-server: serve them until the central disconnects).
            The packets, the Speed service UUIDs and the L2CAP framing are bumble-bench's: run `bumble-bench peripheral`
            or `bumble-bench central` at the other end on the same radio, or another blemu bench. Docs/REFERENCE.md "bench".
            """)

    @Option(name: .customLong("controller"), help: "Controller spec (default: $BLEMU_CONTROLLER).")
    var controller: String?

    @Option(help: "central (connects to --peer) or peripheral (advertises).")
    var role: String = "central"

    @Option(help: "gatt-client, gatt-server, l2cap-client or l2cap-server (default: gatt-client for the central, gatt-server for the peripheral).")
    var mode: String?

    @Option(help: "send, receive, ping, pong or read (default: send for the central, receive for the peripheral).")
    var scenario: String?

    @Option(help: "Packets to send or ping, or reads (default 10).")
    var packets: Int = 10

    @Option(help: "Bytes of each packet, L2CAP framing included (default 500).")
    var size: Int = 500

    @Option(help: "GATT: the ATT_MTU asked for (default 517). L2CAP: the channel MTU offered (default 1024).")
    var mtu: Int?

    @Option(name: .customLong("data-length"), help: ArgumentHelp("Central: LE Set Data Length's TX octets (27-251) once connected.", valueName: "OCTETS"))
    var dataLength: Int?

    @Option(help: "Central: the PHY asked for once connected: 1m, 2m or coded.")
    var phy: String?

    @Option(help: ArgumentHelp("Central: the peripheral's address.", valueName: "ADDRESS"))
    var peer: String?

    @Option(help: ArgumentHelp("Peripheral: its static random address (default: derived from its name).", valueName: "ADDRESS"))
    var address: String?

    @Option(help: "l2cap-client: the SPSM to connect to (default 128, bumble-bench's; a blemu peripheral publishes its channel there).")
    var psm: Int = Int(SpeedService.defaultPSM)

    @Option(help: ArgumentHelp("Seconds for the whole run before it fails (default 60).", valueName: "S"))
    var timeout: Double = 60

    @Flag(help: "The result as one JSON object.")
    var json = false

    @Option(name: .customLong("log-level"), help: "Log level for stderr (default: warning).")
    var logLevel: Logger.Level = .warning

    func plan() throws -> BenchPlan {
        guard let role = BenchPlan.Role(rawValue: role) else { throw ValidationError("--role is central or peripheral") }
        var parsedMode: BenchMode?
        if let mode {
            guard let known = BenchMode(rawValue: mode) else { throw ValidationError("--mode is gatt-client, gatt-server, l2cap-client or l2cap-server") }
            parsedMode = known
        }
        var parsedScenario: BenchScenario?
        if let scenario {
            guard let known = BenchScenario(rawValue: scenario) else { throw ValidationError("--scenario is send, receive, ping, pong or read") }
            parsedScenario = known
        }
        var plan = BenchPlan(role: role, mode: parsedMode, scenario: parsedScenario)
        plan.packets = packets
        plan.size = size
        plan.mtu = mtu
        plan.dataLength = dataLength
        if let phy {
            guard let known = BenchPlan.PHY(rawValue: phy.lowercased()) else { throw ValidationError("--phy is 1m, 2m or coded") }
            plan.phy = known
        }
        if let peer {
            guard let parsed = BluetoothAddress(peer) else { throw ValidationError("--peer '\(peer)' is not an address like F1:F1:F1:F1:F1:F1") }
            plan.peer = parsed
        }
        if let address {
            guard let parsed = BluetoothAddress(address) else { throw ValidationError("--address '\(address)' is not an address like F1:F1:F1:F1:F1:F1") }
            plan.address = parsed
        }
        guard (0...0xFFFF).contains(psm) else { throw ValidationError("--psm is 128 to 255") }
        plan.psm = UInt16(psm)
        plan.timeout = timeout
        if let problem = plan.problem() { throw ValidationError(problem) }
        return plan
    }

    func validate() throws { _ = try plan() }

    func run() throws {
        try LogSetup.bootstrap(destination: .stderr, level: logLevel)
        defer { LogSetup.finish() }
        let plan = try plan()
        let (spec, loop) = try controllerAndLoop(controller)
        let session = try BenchSession(plan: plan, spec: spec, loop: loop, logger: Logger(label: "blemu.bench"))
        let progress = BenchProgress(isTerminal: isatty(1) == 1, scheduler: loop, total: plan.role == .central && plan.scenario != .receive && plan.scenario != .pong ? plan.packets : 0)
        session.onProgress = { done, _ in progress.update(done) }
        session.onNote = { note in
            progress.clear()
            emitStderr("blemu bench: " + note)
        }
        do {
            try session.run()
        } catch {
            progress.clear()
            throw RuntimeFailure(error.description)
        }
        progress.clear()
        guard let result = session.result else { throw RuntimeFailure("no result") }
        emitLine(json ? result.json : result.text)
    }
}

/// The progress line: on a terminal one line rewritten in place (at most 10 times a second),
/// otherwise a plain line on stderr at most once a second (stdout keeps the result).
final class BenchProgress {
    let isTerminal: Bool
    let scheduler: TimerScheduling
    let total: Int
    private var shownAt: UInt64 = 0
    private var shown = false

    init(isTerminal: Bool, scheduler: TimerScheduling, total: Int) {
        self.isTerminal = isTerminal
        self.scheduler = scheduler
        self.total = total
    }

    func update(_ done: Int) {
        let now = scheduler.nowNanoseconds
        let interval: UInt64 = isTerminal ? 100_000_000 : 1_000_000_000
        guard now &- shownAt >= interval || (total > 0 && done == total) else { return }
        shownAt = now
        let text = total > 0 ? "\(done)/\(total) packets" : "\(done) packets"
        if isTerminal {
            writeRaw("\r\u{1B}[K" + text)
            shown = true
        } else {
            emitStderr("blemu bench: progress: " + text)
        }
    }

    func clear() {
        guard isTerminal, shown else { return }
        shown = false
        writeRaw("\r\u{1B}[K")
    }

    private func writeRaw(_ text: String) {
        var text = text
        text.withUTF8 { buffer in _ = write(1, buffer.baseAddress!, buffer.count) }
    }
}
