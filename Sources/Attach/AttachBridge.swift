import BlemuCore
import BlemuHCI
import BlemuRunLoop
import BlemuTransport

/// What `AttachBridge` reports, for the front end to print.
public enum AttachEvent: Equatable, Sendable {
    /// The kernel registered the adapter (`hciN`), bridged to a new controller on the radio.
    case adapterUp(name: String)
    /// The adapter is gone (its /dev/vhci closed) for `reason`.
    case adapterRemoved(name: String, reason: String)
    /// The controller is unreachable after having been up; the bridge retries with backoff, and
    /// a new adapter comes when it is back. Said once per outage.
    case waitingForController(reason: String)
    /// The bridge answered a command for the controller (`ControllerStandIn`): said once per command.
    case answeredForController(opcode: UInt16, name: String, why: String)
}

/// `blemu attach`: a Linux virtual adapter (`/dev/vhci`, `VirtualHCIDevice`) whose controller is
/// a new controller on another radio (rootcanal or netsim over TCP, a Unix socket, a UART), on
/// the run loop. Packets pass both ways unchanged, but for the commands `ControllerStandIn`
/// answers itself.
///
/// The controller first: the bridge connects (`ControllerLink`), checks that the controller
/// answers HCI_Reset (Vol 4, Part E, 7.3.2) within `probeTimeout`, and only then opens
/// /dev/vhci, so the kernel never gets an adapter whose controller is mute. A controller that
/// goes away takes the adapter with it (the file is closed: the kernel unregisters `hciN`, as
/// when a USB adapter is pulled out); the link reconnects with backoff and a new adapter comes
/// up on the new connection (a new controller: the kernel sets it up from scratch).
///
/// It ends (`onEnded` with the reason) when it cannot go on: the controller cannot be reached
/// on the first attempt, does not answer the reset, /dev/vhci cannot be opened or fails, or
/// either side stops taking packets. `stop()` removes the adapter and ends nothing else.
public final class AttachBridge {
    public let controller: ControllerSpec
    public let probeTimeout: Duration
    public var onEvent: ((AttachEvent) -> Void)?
    /// The bridge has stopped (adapter removed, link closed) for this reason.
    public var onEnded: ((String) -> Void)?

    /// The adapter's name while it is up.
    public var adapterName: String? { adapterIndex.map { "hci\($0)" } }
    /// Packets from the controller that came while there was no adapter to give them to.
    public private(set) var droppedBeforeAdapter = 0

    private enum Phase {
        case idle
        /// Connecting, or reconnecting after the controller went away.
        case connecting
        /// HCI_Reset sent, its Command Complete awaited.
        case probing(TimerID)
        /// /dev/vhci opened; the kernel's answer with the index awaited.
        case creating
        case bridging
    }

    private let loop: RunLoop
    private let link: ControllerLink
    private let openDevice: () throws(TransportError) -> VirtualHCIDevice
    private var phase = Phase.idle
    private var device: VirtualHCIDevice?
    private var adapterIndex: UInt16?
    private var wasUp = false
    private var waitingSaid = false
    private var answeredSaid: Set<UInt16> = []

    /// `openDevice` opens /dev/vhci (`VirtualHCIDevice.open`); tests give a socket pair.
    public init(controller: ControllerSpec, loop: RunLoop, probeTimeout: Duration = .seconds(5),
                initialBackoff: Duration = .milliseconds(250), maxBackoff: Duration = .seconds(8),
                connectTimeout: Duration = .seconds(3),
                openDevice: @escaping () throws(TransportError) -> VirtualHCIDevice) {
        self.controller = controller
        self.loop = loop
        self.probeTimeout = probeTimeout
        self.openDevice = openDevice
        link = ControllerLink(spec: controller, loop: loop, initialBackoff: initialBackoff, maxBackoff: maxBackoff,
                              connectTimeout: connectTimeout)
        link.onUp = { [weak self] in self?.controllerUp() }
        link.onDown = { [weak self] error in self?.controllerDown(error) }
        link.onOpenFailed = { [weak self] error, _ in self?.controllerUnreachable(error) }
        link.onPacket = { [weak self] type, body in self?.fromController(type, body) }
    }

    deinit {
        if case .probing(let timer) = phase { loop.cancel(timer) }
    }

    public func start() {
        guard case .idle = phase else { return }
        phase = .connecting
        link.start()
    }

    /// Removes the adapter (closes /dev/vhci) and closes the controller's link.
    public func stop() {
        removeAdapter(reason: "stopped")
        if case .probing(let timer) = phase { loop.cancel(timer) }
        phase = .idle
        link.stop()
    }

    // MARK: The controller

    private func controllerUp() {
        waitingSaid = false
        _ = link.send(.command, [0x03, 0x0C, 0x00])  // HCI_Reset: a controller answers it at once
        let timer = loop.schedule(after: probeTimeout) { [weak self] in self?.probeTimedOut() }
        phase = .probing(timer)
    }

    private func probeTimedOut() {
        end("\(controller) accepted the connection but did not answer HCI_Reset within \(probeTimeout.seconds) s: "
            + "is it a controller's HCI port (rootcanal's --hci-port, netsim's 6402), not another service?")
    }

    private func controllerDown(_ error: TransportError) {
        if case .probing(let timer) = phase { loop.cancel(timer) }
        phase = .connecting
        removeAdapter(reason: "the controller went away (\(error.description)); a new adapter comes when it is back")
    }

    private func controllerUnreachable(_ error: TransportError) {
        guard wasUp else {
            end(error.description)
            return
        }
        guard !waitingSaid else { return }
        waitingSaid = true
        onEvent?(.waitingForController(reason: error.description))
    }

    private func fromController(_ type: H4PacketType, _ body: ArraySlice<UInt8>) {
        switch phase {
        case .probing(let timer):
            // Command Complete (0x0E) for HCI_Reset (0x0C03): the controller answers.
            let start = body.startIndex
            if type == .event, body.count >= 5, body[start] == 0x0E, body[start + 3] == 0x03, body[start + 4] == 0x0C {
                loop.cancel(timer)
                openAdapter()
            }
        case .bridging:
            guard let device else { return }
            if !device.send(type, body) {
                end("the kernel does not read \(device.path) (\(device.queuedBytes) bytes wait): the adapter is removed")
            }
        case .idle, .connecting, .creating:
            droppedBeforeAdapter += 1
        }
    }

    // MARK: The adapter

    private func openAdapter() {
        let opened: VirtualHCIDevice
        do throws(TransportError) {
            opened = try openDevice()
        } catch {
            end(error.description)
            return
        }
        opened.onCreated = { [weak self] index in self?.adapterCreated(index) }
        opened.onPacket = { [weak self] type, body in self?.fromKernel(type, body) }
        opened.onClosed = { [weak self] error in
            guard let self else { return }
            self.device = nil
            self.end(error.description)
        }
        device = opened
        phase = .creating
    }

    private func adapterCreated(_ index: UInt16) {
        adapterIndex = index
        wasUp = true
        phase = .bridging
        onEvent?(.adapterUp(name: "hci\(index)"))
    }

    private func fromKernel(_ type: H4PacketType, _ body: ArraySlice<UInt8>) {
        guard case .bridging = phase, let device else { return }
        if type == .command, let answer = ControllerStandIn.answer(body) {
            let start = body.startIndex
            let opcode = UInt16(body[start]) | UInt16(body[start + 1]) << 8
            if answeredSaid.insert(opcode).inserted, let what = ControllerStandIn.answered[opcode] {
                onEvent?(.answeredForController(opcode: opcode, name: what.name, why: what.why))
            }
            if !device.send(.event, answer) {
                end("the kernel does not read \(device.path) (\(device.queuedBytes) bytes wait): the adapter is removed")
            }
            return
        }
        if !link.send(type, body) {
            // The controller stopped reading (its buffer of a few hundred KiB is full): a packet
            // lost would leave the kernel's state and the controller's apart, so end instead.
            end("\(controller) does not take packets (its output buffer is full): the adapter is removed")
        }
    }

    private func removeAdapter(reason: String) {
        guard let device else { return }
        device.onClosed = nil
        device.close()
        self.device = nil
        if let name = adapterName {
            onEvent?(.adapterRemoved(name: name, reason: reason))
        }
        adapterIndex = nil
    }

    private func end(_ reason: String) {
        guard !isEnded else { return }
        isEnded = true
        removeAdapter(reason: reason)
        stop()
        onEnded?(reason)
    }

    private var isEnded = false
}

extension Duration {
    /// Whole seconds, for messages.
    fileprivate var seconds: Int64 { components.seconds }
}
