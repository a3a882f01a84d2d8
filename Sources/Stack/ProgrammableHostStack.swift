import BlemuCore
import BlemuDevice
import BlemuHCI
import BlemuHost
import BlemuProgrammableHost
import BlemuRunLoop
import BlemuTransport
import Logging

/// What `blemu host` runs: one controller and the programmable host on it (Docs/CONTROL.md, "The
/// programmable host"), no devices, idle until a program asks over the control socket. Beside
/// `ControllerStack` (`blemu run`'s devices on a controller); `RunSession` runs either, with the
/// control socket, signals, capture and logs.
public final class ProgrammableHostStack: SessionStack {
    public let link: ControllerLink
    public let controller: ControllerHost
    public let host: ProgrammableHost
    public let logger: Logger
    public var peripherals: [Peripheral] { [] }
    public var onFatal: ((String) -> Void)?
    public var onFirstUp: (() -> Void)?
    public var onStateMayChange: ((String?) -> Void)? {
        didSet {
            controller.onStateMayChange = onStateMayChange == nil ? nil : { [unowned self] in self.onStateMayChange?(nil) }
        }
    }
    private var wasUp = false

    /// `stateDirectory`: where the host keeps its random address (and, later, its bonds).
    /// `serving`: the device the host's advertised links are served (`blemu host --serve`), nil for
    /// GAP and GATT alone.
    public init(spec: ControllerSpec, stateDirectory: String?, name: String, serving: Device? = nil, loop: RunLoop,
                logger: Logger) throws(StackFailure) {
        let link = ControllerLink(spec: spec, loop: loop)
        self.link = link
        self.logger = logger
        // The largest PDU either role sends: an ATT PDU at the largest ATT_MTU, as for both roles.
        controller = ControllerHost(controller: spec.description, scheduler: loop, logger: logger,
                                    transmitBufferCapacity: PeripheralHost.largestPDU, transport: link)
        do {
            host = try ProgrammableHost(on: controller, stateDirectory: stateDirectory, name: name, serving: serving, logger: logger)
        } catch {
            throw StackFailure(error.message)
        }
        link.onUp = { [unowned self] in
            let first = !self.wasUp
            self.wasUp = true
            self.controller.controllerUp()
            if first { self.onFirstUp?() }
            self.onStateMayChange?(nil)
        }
        link.onDown = { [unowned self] error in
            self.controller.controllerDown(reason: error.description)
            self.onStateMayChange?("controller lost: \(error)")
        }
        link.onOpenFailed = { [unowned self] error, retryIn in
            if !self.wasUp {
                // The first open decides whether the spec is usable at all: say why and stop.
                self.link.stop()
                self.onFatal?(error.description)
            } else {
                self.logger.warning("controller still unreachable (\(error)); retrying in \(retryIn)")
                self.onStateMayChange?("controller unreachable: \(error)")
            }
        }
    }

    public func start() { link.start() }

    public func stop(completion: @escaping () -> Void) {
        controller.stop { [link] in
            link.stop()
            completion()
        }
    }
}
