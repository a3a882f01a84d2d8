import BlemuCore
import BlemuRunLoop
import CSystemd
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// Tells systemd how the service is doing, through libsystemd's sd_notify(3) on $NOTIFY_SOCKET
/// (a `Type=notify` unit): READY=1 once every device advertises, STATUS= kept current,
/// WATCHDOG=1 from the run loop when $WATCHDOG_USEC asks for it, STOPPING=1 on the way out.
///
/// Without NOTIFY_SOCKET (not started by systemd) every call returns at once and no timer runs.
/// A socket that cannot be reached is logged once; blemu runs on.
public final class ServiceNotifier {
    /// NOTIFY_SOCKET is set: there is someone to tell.
    public let isEnabled: Bool
    public private(set) var isReady = false
    /// The ping period while the watchdog runs: half of WATCHDOG_USEC, as sd_watchdog_enabled(3)
    /// recommends ("every half of the time that usec is set to").
    public private(set) var watchdogPeriod: Duration?
    /// STATUS= lines are cut to this many bytes: `systemctl status` shows one line.
    public static let statusLimit = 200
    /// The shortest ping period: a tiny WATCHDOG_USEC must not turn the loop into a busy one.
    public static let shortestWatchdogPeriod: Duration = .milliseconds(10)

    private var logger: Logger
    private var lastStatus: String?
    private var failureLogged = false
    private var watchdogTimer: TimerID?
    private weak var loop: RunLoop?

    public init(logger: Logger) {
        self.logger = logger
        let socket = getenv("NOTIFY_SOCKET").map { String(cString: $0) } ?? ""
        isEnabled = !socket.isEmpty
    }

    deinit {
        if let watchdogTimer { loop?.cancel(watchdogTimer) }
    }

    /// READY=1 with the status, once; later calls update the status only.
    public func ready(status: String) {
        guard isEnabled else { return }
        if isReady {
            update(status: status)
            return
        }
        isReady = true
        lastStatus = Self.sanitized(status)
        send("READY=1\nSTATUS=\(lastStatus!)")
    }

    /// STATUS=, only when it changed.
    public func update(status: String) {
        guard isEnabled else { return }
        let line = Self.sanitized(status)
        guard line != lastStatus else { return }
        lastStatus = line
        send("STATUS=\(line)")
    }

    /// STOPPING=1: "the service is beginning its shutdown" (sd_notify(3)).
    public func stopping(status: String) {
        guard isEnabled else { return }
        lastStatus = Self.sanitized(status)
        send("STOPPING=1\nSTATUS=\(lastStatus!)")
    }

    /// Starts WATCHDOG=1 pings on `loop` when the manager asked for them (WATCHDOG_USEC, and
    /// WATCHDOG_PID naming this process if set, as sd_watchdog_enabled(3) checks). The pings
    /// come from a loop timer, so a wedged loop stops them and systemd restarts the service.
    /// Returns the ping period, or nil when there is no watchdog.
    @discardableResult
    public func startWatchdog(on loop: RunLoop) -> Duration? {
        guard isEnabled, watchdogTimer == nil else { return watchdogPeriod }
        var microseconds: UInt64 = 0
        let enabled = sd_watchdog_enabled(0, &microseconds)
        if enabled < 0 {
            let value = getenv("WATCHDOG_USEC").map { String(cString: $0) } ?? ""
            logger.warning("WATCHDOG_USEC='\(value.prefix(40))' is not a positive number of microseconds: no watchdog pings (\(String(cString: strerror(-enabled))))")
            return nil
        }
        guard enabled > 0, microseconds > 0 else { return nil }
        var period = Duration.microseconds(Int64(clamping: microseconds / 2))
        if period < Self.shortestWatchdogPeriod {
            logger.warning("WATCHDOG_USEC=\(microseconds) is below 20 ms: pinging every \(Self.shortestWatchdogPeriod) instead")
            period = Self.shortestWatchdogPeriod
        }
        watchdogPeriod = period
        self.loop = loop
        logger.info("systemd watchdog: pinging every \(period)")
        scheduleWatchdog()
        return period
    }

    private func scheduleWatchdog() {
        guard let loop, let period = watchdogPeriod else { return }
        watchdogTimer = loop.schedule(after: period) { [weak self] in
            guard let self else { return }
            self.send("WATCHDOG=1")
            self.scheduleWatchdog()
        }
    }

    private func send(_ state: String) {
        let result = sd_notify(0, state)
        if result < 0, !failureLogged {
            failureLogged = true
            let socket = getenv("NOTIFY_SOCKET").map { String(cString: $0) } ?? ""
            logger.warning("cannot notify systemd at NOTIFY_SOCKET='\(socket.prefix(120))': \(String(cString: strerror(-result))); readiness and watchdog messages are lost")
        }
    }

    /// One line of printable text, at most `statusLimit` bytes: a newline would start another
    /// assignment of the notification ("newline-separated list of variable assignments").
    static func sanitized(_ status: String) -> String {
        var line = ""
        for scalar in status.unicodeScalars {
            let character = scalar.value < 0x20 || scalar.value == 0x7F ? " " : Character(scalar)
            if line.utf8.count + String(character).utf8.count > statusLimit { break }
            line.append(character)
        }
        return line
    }
}

/// The one-line summary STATUS= carries: each device's advertising and connections, controllers
/// down, and the last error.
public struct ServiceStatus: Equatable, Sendable {
    public struct Device: Equatable, Sendable {
        public var name: String
        public var advertising: Bool
        public var connections: Int
        public init(name: String, advertising: Bool, connections: Int) {
            self.name = name
            self.advertising = advertising
            self.connections = connections
        }
    }

    public var devices: [Device]
    public var controllersDown: Int
    public var lastError: String?

    public init(devices: [Device], controllersDown: Int = 0, lastError: String? = nil) {
        self.devices = devices
        self.controllersDown = controllersDown
        self.lastError = lastError
    }

    /// `heart-rate advertising, 0 connected; lock 1 connected; last error: …`. When naming each
    /// device would not leave the rest room in `ServiceNotifier.statusLimit` (a fleet of a thousand
    /// made a 44 KB line, cut before the controllers down and the last error), the devices are
    /// counted instead: `1100 devices: 1098 advertising, 20 connected to 20; 1 controller(s) down; …`.
    public var line: String {
        let down = controllersDown > 0 ? ["\(controllersDown) controller(s) down"] : []
        let error = lastError.map { "; last error: \($0)" } ?? ""
        if devices.count <= Self.devicesNamed {
            let named = devices.map { device in
                (device.advertising ? "\(device.name) advertising, " : "\(device.name) ") + "\(device.connections) connected"
            }
            let head = (named + down).joined(separator: "; ")
            // The error may be cut at the limit; what comes before it, never.
            let errorRoom = lastError == nil ? 0 : min(error.utf8.count, Self.errorRoom)
            if head.utf8.count + errorRoom <= ServiceNotifier.statusLimit { return head + error }
        }
        let advertising = devices.count(where: \.advertising)
        let connections = devices.reduce(0) { $0 + $1.connections }
        let connected = devices.count(where: { $0.connections > 0 })
        let counted = "\(devices.count) device\(devices.count == 1 ? "" : "s"): \(advertising) advertising, \(connections) connected"
            + (connections > 0 ? " to \(connected)" : "")
        return ([counted] + down).joined(separator: "; ") + error
    }

    /// What of the last error a line that names its devices keeps room for, at least.
    static let errorRoom = 40

    /// Past this many devices the line counts them; it names them only while it stays short.
    public static let devicesNamed = 8
}
