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
        ControllerLinkFollowing.follow(link, controller: controller, logger: logger,
                                       firstUp: { [unowned self] in self.onFirstUp?() },
                                       stateMayChange: { [unowned self] in self.onStateMayChange?($0) },
                                       fatal: { [unowned self] in self.onFatal?($0) })
    }

    public func start() { link.start() }

    public func stop(completion: @escaping () -> Void) {
        controller.stop { [link] in
            link.stop()
            completion()
        }
    }
}
