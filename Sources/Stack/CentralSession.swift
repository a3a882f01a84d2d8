import BlemuCentral
import BlemuCore
import BlemuHCI
import BlemuRunLoop
import BlemuTransport
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// One controller in the central role for a command that runs until it is done or
/// interrupted (`blemu scan`, `blemu gatt`): the run loop, the transport and a `CentralHost`.
public final class CentralSession {
    public let loop: RunLoop
    public let link: ControllerLink
    /// The controller's host, with the central role alone on it.
    public let controller: ControllerHost
    public let host: CentralHost
    public let logger: Logger
    /// Why the session failed: the first failure reported before it began to finish. What
    /// happens during the stop (its own disconnections, reason 0x16) is the stop, not a
    /// failure: a Ctrl-C ends with exit status 0.
    public private(set) var failure: String?
    public private(set) var finishing = false
    private var wasUp = false

    public init(spec: ControllerSpec, loop: RunLoop, logger: Logger) throws(StackFailure) {
        self.loop = loop
        self.logger = logger
        let link = ControllerLink(spec: spec, loop: loop)
        self.link = link
        // The link handed to HCI once: packets pass between them directly, both ways.
        let controller = ControllerHost(controller: spec.description, scheduler: loop, logger: logger,
                                        transmitBufferCapacity: CentralHost.largestPDU, transport: link)
        self.controller = controller
        do {
            host = try CentralHost(on: controller)
        } catch {
            throw StackFailure("the central's own GATT database: \(error)")
        }
        link.onUp = { [unowned self] in
            self.wasUp = true
            self.controller.controllerUp()
        }
        link.onDown = { [unowned self] error in
            self.controller.controllerDown(reason: error.description)
            self.finish(failure: "controller lost: \(error)")
        }
        link.onOpenFailed = { [unowned self] error, _ in
            if !self.wasUp { self.finish(failure: error.description) }
        }
    }

    /// Runs until `finish`; throws the failure it was given, if any.
    public func run() throws(StackFailure) {
        try SignalStop.install(on: loop, isStopping: { [unowned self] in self.finishing }, stop: { [unowned self] in self.finish() })
        link.start()
        loop.run()
        if let failure { throw StackFailure(failure) }
    }

    /// Ends the session: links closed, the controller reset, the loop stopped.
    public func finish(failure: String? = nil) {
        guard !finishing else { return }
        if let failure { self.failure = failure }
        finishing = true
        controller.stop { [link, loop] in
            link.stop()
            loop.stop()
        }
    }

    /// Ends the session after `seconds`.
    public func finish(after seconds: Double, failure: String? = nil) {
        loop.schedule(after: .milliseconds(Int64(seconds * 1000))) { [weak self] in self?.finish(failure: failure) }
    }
}

/// SIGINT and SIGTERM begin a clean stop; a second one exits at once (130).
public enum SignalStop {
    public static func install(on loop: RunLoop, isStopping: @escaping () -> Bool, stop: @escaping () -> Void) throws(StackFailure) {
        do {
            try loop.handleSignals([SIGINT, SIGTERM]) { _ in
                if isStopping() { Glibc.exit(130) }
                stop()
            }
        } catch {
            throw StackFailure("cannot handle signals: \(error)")
        }
    }
}
