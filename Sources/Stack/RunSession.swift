import BlemuCapture
import BlemuControl
import BlemuCore
import BlemuDevice
import BlemuHCI
import BlemuHost
import BlemuProgrammableHost
import BlemuRunLoop
import BlemuScenario
import BlemuService
import BlemuTransport
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// What `blemu run` adds around its stacks: the HCI capture, the control socket.
public struct RunSettings: Sendable {
    /// `--btsnoop`: the capture file, its size limit and how many rotated files are kept.
    public var capturePath: String?
    public var captureMaxBytes: Int?
    public var captureGenerations = 3
    /// `--control`: the control socket and its permission bits.
    public var controlPath: String?
    public var controlMode: UInt32 = 0o600

    public init() {}
}

/// `blemu run` once its stacks are assembled (`RunStack`): the capture opened before any
/// controller (so it holds the first HCI Reset), the control socket before the controllers (so
/// a script can wait on it), a clean stop on SIGINT and SIGTERM (SIGHUP ignored: no reload),
/// systemd's readiness and status, the pages of start-up given back once every device
/// advertises, `started` logged once every controller is up. Returns when the run stops;
/// throws the fatal error that stopped it.
public enum RunSession {
    /// The `started` line names this many devices at most; past it, they are counted by kind.
    static let devicesNamedAtStart = 8
    /// … and at most this many kinds are counted, the rest summed up.
    static let kindsCountedAtStart = 8
    /// systemd's STATUS= line is rebuilt at most this often.
    static let serviceStatusGap: Duration = .milliseconds(100)

    /// The devices as the `started` line shows them: their names when there are a few
    /// (`heart-rate, lock`); else each kind (and fleet) once with its count, in the order
    /// they come (`1000 × bthome-thermometer (fleet thermometers), 100 × heart-rate`), so a
    /// gateway fleet of thousands makes a line of a few hundred bytes, not 15 KB.
    /// `fleets`: each device's fleet, by index (missing: none).
    static func startedDevices(_ names: [String], fleets: [String?] = []) -> String {
        guard names.count > devicesNamedAtStart else { return names.joined(separator: ", ") }
        var order: [String] = []
        var counts: [String: Int] = [:]
        for (index, name) in names.enumerated() {
            let fleet = index < fleets.count ? fleets[index] : nil
            let group = fleet.map { "\(name) (fleet \($0))" } ?? name
            if counts[group] == nil { order.append(group) }
            counts[group, default: 0] += 1
        }
        var text = order.prefix(kindsCountedAtStart).map { "\(counts[$0] ?? 0) × \($0)" }.joined(separator: ", ")
        if order.count > kindsCountedAtStart {
            let rest = order.dropFirst(kindsCountedAtStart)
            text += ", and \(rest.reduce(0) { $0 + (counts[$1] ?? 0) }) more of \(rest.count) other kinds"
        }
        return "\(names.count) devices: " + text
    }

    /// `scenarios` (`--scenario`, a config file's `scenario:`) run against the devices once
    /// every controller is up, side by side; the run stops when one fails or all have passed
    /// (each one's `outcome` says how).
    ///
    /// `host`: the programmable host (`blemu host`), whose requests and events the control
    /// socket serves beside the devices'.
    ///
    /// `fleets`: the fleet of each of `deviceNames` (`DevicePlan.fleetReference`), for the
    /// `started` line; `fleetOf`: each running device's, for the control socket (`fleet:NAME`).
    ///
    /// `devices`: the running devices in the order the control socket, the watchers and the
    /// scenarios number them (`blemu run`'s plan order: a fleet's broadcasters share connections
    /// with its connectable members, `ControllerPlacement`, so the stacks' order mixes them);
    /// nil: the stacks' devices in their order.
    public static func run(_ stacks: [any SessionStack], devices: [Peripheral]? = nil, deviceNames: [String], fleets: [String?] = [],
                           fleetOf: [ObjectIdentifier: String] = [:], settings: RunSettings, loop: RunLoop,
                           logger: Logger, scenarios: [ScenarioRunner] = [], host: ProgrammableHost? = nil) throws(StackFailure) {
        // The capture starts before any controller opens, so it holds the first HCI Reset.
        let running = devices ?? stacks.flatMap(\.peripherals)
        var capture: BtsnoopWriter?
        if let btsnoopPath = settings.capturePath {
            do {
                capture = try BtsnoopWriter(path: btsnoopPath, maxFileBytes: settings.captureMaxBytes,
                                            generations: settings.captureGenerations, publishesCursor: true)
            } catch {
                throw StackFailure(error.reason == nil ? "\(error): is the directory there and writable?" : "\(error): give the path of a regular file")
            }
            let rotation = capture?.maxFileBytes.map { ", rotated at \($0) bytes" } ?? ""
            logger.info("capturing HCI to \(btsnoopPath) (btsnoop, H4)\(rotation)")
            if stacks.count > 1 {
                // btsnoop has no controller field: one file, the controllers' packets in the order they passed.
                logger.notice("\(stacks.count) controllers share the capture \(btsnoopPath): btsnoop cannot tell them apart, so a decoder shows one controller")
            }
        }
        defer { capture?.close() }
        let service = ServiceNotifier(logger: logger)
        var lastError: String?

        // The devices' events go to the control socket's watchers (while there are any) and to
        // the scenario (while it runs); with neither, no observer, so no event is built.
        var watchSink: ((Int, DeviceEvent) -> Void)?
        func observeEvents() {
            let watchers = watchSink
            let observing = scenarios.filter { $0.outcome == nil }
            for (index, peripheral) in running.enumerated() {
                switch (watchers, observing.isEmpty) {
                case (nil, true): peripheral.eventObserver = nil
                case (let watchers?, true): peripheral.eventObserver = { watchers(index, $0) }
                case (let watchers, false):
                    peripheral.eventObserver = { event in
                        watchers?(index, event)
                        for scenario in observing { scenario.observe(event, device: index) }
                    }
                }
            }
        }

        // The control socket comes up before the controllers, so a script can wait on it.
        var control: ControlServer?
        if let controlPath = settings.controlPath {
            let devices = DeviceControl(logger: logger, scheduler: loop) { running }
            devices.fleets = running.map { fleetOf[ObjectIdentifier($0)] }
            devices.host = host.map { HostControl(host: $0, logger: logger) }
            do {
                control = try ControlServer(path: controlPath, mode: settings.controlMode, loop: loop, logger: logger) { line, client in
                    devices.reply(to: line, client: client)
                }
            } catch {
                throw StackFailure(error.description)
            }
            if let control {
                // `watch`: the devices report their events only while someone watches.
                let names = DeviceNames(running.map { ($0.deviceName, $0.configuration.name) })
                let watchers = EventWatchers(server: control, clock: loop, deviceRefs: names.entries.map(\.ref)) { sink in
                    watchSink = sink
                    observeEvents()
                }
                devices.watchers = watchers
                host?.onEvent = { [weak watchers] event in watchers?.deliver(event) }
            }
            logger.info("control socket at \(controlPath)")
        }
        // Removed however the run ends (a fatal controller error included).
        defer { control?.close() }

        var failure: String?
        var stopping = false
        // The controllers open a few at a time and along the fleets' start spread.
        let bringUp = ControllerBringUp(scheduler: loop)
        func stopAll() {
            guard !stopping else { return }
            stopping = true
            bringUp.cancel()
            // No commands during the stop (an `advertise on` would fight it); the file goes.
            control?.close()
            stopStacks(stacks) { loop.stop() }
        }
        do {
            try loop.handleSignals([SIGINT, SIGTERM]) { signal in
                if stopping {
                    logger.warning("second signal: exiting without a clean stop")
                    control?.close()
                    Glibc.exit(130)
                }
                let name = signal == SIGINT ? "SIGINT" : "SIGTERM"
                logger.event(.stopping, .notice, "stopping on \(name)")
                service.stopping(status: "stopping on \(name)")
                stopAll()
            }
            // No reload: the devices, their databases and controllers are fixed for the run.
            // SIGHUP would otherwise end the process (its default action).
            try loop.handleSignals([SIGHUP]) { _ in
                logger.notice("SIGHUP ignored: blemu does not reload its configuration; restart it to apply changes")
            }
        } catch {
            throw StackFailure("cannot handle signals: \(error)")
        }

        // sd_notify: READY=1 once every device has advertised; STATUS= when the summary changes.
        var advertised = Set<ObjectIdentifier>()
        let allPeripherals = running
        var lastSignature: Int?
        var startupPages = StartupPages()
        var everyDeviceAdvertises = EveryItemHolds()
        func updateServiceStatus() {
            guard service.isEnabled, !stopping else { return }
            // The line is built only when something in it changed.
            var hasher = Hasher()
            for peripheral in allPeripherals {
                hasher.combine(peripheral.isAdvertising)
                hasher.combine(peripheral.connectionCount)
            }
            for stack in stacks { hasher.combine(stack.link.isUp) }
            hasher.combine(lastError)
            let signature = hasher.finalize()
            guard signature != lastSignature else { return }
            lastSignature = signature
            var devices: [ServiceStatus.Device] = []
            devices.reserveCapacity(allPeripherals.count)
            for peripheral in allPeripherals {
                if peripheral.isAdvertising { advertised.insert(ObjectIdentifier(peripheral)) }
                devices.append(.init(name: peripheral.deviceName, advertising: peripheral.isAdvertising,
                                     connections: peripheral.connectionCount))
            }
            let status = ServiceStatus(devices: devices, controllersDown: stacks.count(where: { !$0.link.isUp }),
                                       lastError: lastError).line
            if !service.isReady && advertised.count == allPeripherals.count {
                service.ready(status: status)
            } else {
                service.update(status: status)
            }
        }
        // Asked for after every HCI event, built over every device: at most every 100 ms, the
        // last change never lost (a fleet's start is thousands of events).
        let serviceStatus = SpacedAction(scheduler: loop, gap: Self.serviceStatusGap, action: updateServiceStatus)
        func refreshService() {
            // Once every device advertises, start-up is over: its code pages go back (a board's RSS).
            startupPages.release(once: everyDeviceAdvertises.check(count: allPeripherals.count) { allPeripherals[$0].isAdvertising },
                                 logger: logger)
            guard service.isEnabled, !stopping else { return }
            serviceStatus.request()
        }
        if let capture {
            // So a frame number in a log entry can be found in the rotated files.
            capture.onRotated = { [unowned capture] first, last in
                logger.info("capture rotated: \(capture.rotatedPath(1)) holds frames \(first)-\(last); \(capture.path) goes on from frame \(last + 1)")
            }
            capture.onFailure = { error in
                logger.error("\(error): the capture stops here; blemu runs on")
                lastError = "capture stopped: \(error)"
                refreshService()
            }
            for stack in stacks {
                stack.link.onTraffic = { received, type, packet in
                    capture.write(packetType: type.rawValue, packet: packet, received: received)
                }
            }
        }
        service.startWatchdog(on: loop)
        // `started` means running: logged once every device's controller has come up, so a
        // controller that cannot be opened at all ends the run without it.
        var waitingForFirstUp = stacks.count
        for stack in stacks {
            stack.onFatal = { message in
                failure = message
                lastError = message
                service.update(status: "failed: \(message)")
                stopAll()
            }
            stack.onStateMayChange = { error in
                if let error { lastError = error }
                refreshService()
            }
            stack.onFirstUp = {
                waitingForFirstUp -= 1
                guard waitingForFirstUp == 0, !stopping else { return }
                logger.event(.started, .notice, "blemu \(blemuVersion) started: \(startedDevices(deviceNames, fleets: fleets))")
                if !scenarios.isEmpty {
                    // They end the run: their outcome is the exit status.
                    for scenario in scenarios {
                        scenario.onFinished = { outcome in
                            observeEvents()
                            if case .failed = outcome {
                                stopAll()
                            } else if scenarios.allSatisfy({ $0.outcome != nil }) {
                                stopAll()
                            }
                        }
                    }
                    observeEvents()
                    for scenario in scenarios where !stopping { scenario.start() }
                }
            }
            // Its devices' earliest start: a connection whose fleet members all start late opens then.
            let notBefore = stack.peripherals.lazy.map(\.configuration.startDelay).min() ?? .zero
            let place = bringUp.add(notBefore: notBefore) { stack.start() }
            stack.controller.onReady = { [unowned bringUp] in bringUp.ready(place) }
        }
        if stacks.count > bringUp.window || bringUp.lastNotBefore > .zero {
            logger.info("opening \(stacks.count) controller connections, \(bringUp.window) at a time, the last no sooner than \(bringUp.lastNotBefore) from now")
        }
        bringUp.begin()
        loop.run()
        for scenario in scenarios { scenario.cancel() }
        if let failure { throw StackFailure(failure) }
    }

    /// Stops every stack; `completion` once the last one has (at once when there are none).
    static func stopStacks(_ stacks: [any SessionStack], completion: @escaping () -> Void) {
        guard !stacks.isEmpty else { return completion() }
        var remaining = stacks.count
        for stack in stacks {
            stack.stop {
                remaining -= 1
                if remaining == 0 { completion() }
            }
        }
    }
}

/// One controller as `RunSession` runs it: `blemu run`'s `ControllerStack` (devices) or
/// `blemu host`'s `ProgrammableHostStack` (no devices; the programmable host).
public protocol SessionStack: AnyObject {
    var link: ControllerLink { get }
    /// Its host: `onReady` tells when the controller's initialization is done.
    var controller: ControllerHost { get }
    /// The devices on the controller (none for the programmable host).
    var peripherals: [Peripheral] { get }
    var onFatal: ((String) -> Void)? { get set }
    var onFirstUp: (() -> Void)? { get set }
    var onStateMayChange: ((String?) -> Void)? { get set }
    func start()
    func stop(completion: @escaping () -> Void)
}

extension ControllerStack: SessionStack {}
