import BlemuCore
import BlemuDevice
import BlemuDevices
import BlemuHCI
import BlemuHost
import BlemuRunLoop
import BlemuTransport
import Logging

/// One controller and the devices on it: the transport link, the controller's host, its
/// peripheral role and a peripheral stack per device (`blemu run`, and each controller of
/// `blemu chat`, where a central role may join the peripheral one on `controller`).
public final class ControllerStack {
    public let link: ControllerLink
    /// The controller's host: its HCI and the roles on it.
    public let controller: ControllerHost
    /// The peripheral role: the devices.
    public let host: PeripheralHost
    public private(set) var peripherals: [Peripheral] = []
    public let logger: Logger
    public var onFatal: ((String) -> Void)?
    /// The controller came up for the first time (after `controller-up` is logged).
    public var onFirstUp: (() -> Void)?
    /// After each HCI event that may change something (all but Number Of Completed Packets)
    /// and each controller up or down (with the error when it went down): advertising or
    /// connections may have changed (for the service status). Set, it is HCI's observer too.
    public var onStateMayChange: ((String?) -> Void)? {
        didSet {
            controller.onStateMayChange = onStateMayChange == nil ? nil : { [unowned self] in self.onStateMayChange?(nil) }
        }
    }

    public init(spec: ControllerSpec, loop: RunLoop, logger: Logger) {
        let link = ControllerLink(spec: spec, loop: loop)
        self.link = link
        self.logger = logger
        // The link handed to HCI once: packets pass between them directly, both ways.
        controller = ControllerHost(controller: spec.description, scheduler: loop, logger: logger,
                                    transmitBufferCapacity: PeripheralHost.largestPDU, transport: link)
        host = PeripheralHost(on: controller)
        host.onFatal = { [unowned self] message in self.onFatal?(message) }
        ControllerLinkFollowing.follow(link, controller: controller, logger: logger,
                                       firstUp: { [unowned self] in self.onFirstUp?() },
                                       stateMayChange: { [unowned self] in self.onStateMayChange?($0) },
                                       fatal: { [unowned self] in self.onFatal?($0) })
    }

    /// `deviceScheduler`: what the device's own timers run on (nil: the loop; a fleet's
    /// broadcasters share a `TimerWheel`).
    public func add(device: Device, configuration: PeripheralConfiguration, deviceScheduler: TimerScheduling? = nil) throws {
        peripherals.append(try Peripheral(device: device, configuration: configuration, host: host, logger: logger,
                                          deviceScheduler: deviceScheduler))
    }

    public func start() { link.start() }

    public func stop(completion: @escaping () -> Void) {
        controller.stop { [link] in
            link.stop()
            completion()
        }
    }

    /// Stops every stack; `completion` once the last one has (at once when there are none).
    public static func stopAll(_ stacks: [ControllerStack], completion: @escaping () -> Void) {
        RunSession.stopStacks(stacks, completion: completion)
    }
}

/// How a stack follows its controller link, the same for `blemu run`'s and `blemu host`'s: up
/// (the controller's host told, `firstUp` the first time), down (told, with the reason for the
/// service status), and an open that failed: the first open decides whether the spec is usable
/// at all (say why and stop), a later one is retried by the link and only reported.
enum ControllerLinkFollowing {
    static func follow(_ link: ControllerLink, controller: ControllerHost, logger: Logger,
                       firstUp: @escaping () -> Void, stateMayChange: @escaping (String?) -> Void,
                       fatal: @escaping (String) -> Void) {
        var wasUp = false
        link.onUp = { [unowned controller] in
            let first = !wasUp
            wasUp = true
            controller.controllerUp()
            if first { firstUp() }
            stateMayChange(nil)
        }
        link.onDown = { [unowned controller] error in
            controller.controllerDown(reason: error.description)
            stateMayChange("controller lost: \(error)")
        }
        link.onOpenFailed = { [unowned link] error, retryIn in
            if !wasUp {
                link.stop()
                fatal(error.description)
            } else {
                logger.warning("controller still unreachable (\(error)); retrying in \(retryIn)")
                stateMayChange("controller unreachable: \(error)")
            }
        }
    }
}

/// The pages only start-up used go back to the kernel once the process has settled
/// (`ProcessMemory.releaseStartupCode`, Docs/PERFORMANCE.md "Footprint"): once, on the first
/// call where `settled` holds. No timer: an idle process still makes no wakeups. `settled` is
/// asked only until then: it is called after every HCI event, and a question over a thousand
/// devices asked at each of them was most of a fleet's CPU (PERFORMANCE.md, "What a fleet costs").
public struct StartupPages {
    public private(set) var released = false

    public init() {}

    public mutating func release(once settled: @autoclosure () -> Bool, logger: Logger) {
        guard !released, settled() else { return }
        released = true
        let release = ProcessMemory.releaseStartupCode()
        logger.debug("start-up over: \(release.advised / 1024) KiB of code and data given back, \(release.singlePageFaults / 1024) KiB of it faults back a page at a time")
    }
}

/// Whether every one of a list's items holds now (every device advertises), asked after every
/// event of a run: it looks on from the first item that did not hold the last time, so while
/// items come to hold one by one the questions cost each item a few looks in all, not the whole
/// list at every event. When the look reaches the end, the list is read once more whole (an
/// item before the mark may have stopped holding); if one no longer holds, the look starts over.
public struct EveryItemHolds {
    /// The items before it held when last looked at.
    private var mark = 0

    public init() {}

    public mutating func check(count: Int, _ holds: (Int) -> Bool) -> Bool {
        while mark < count, holds(mark) { mark += 1 }
        guard mark >= count else { return false }
        if (0..<count).allSatisfy(holds) { return true }
        mark = 0
        return false
    }
}
