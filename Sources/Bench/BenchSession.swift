import BlemuBenchProtocol
import BlemuCentral
import BlemuChannels
import BlemuCore
import BlemuDevice
import BlemuHCI
import BlemuHost
import BlemuRunLoop
import BlemuStack
import BlemuTransport
import Logging

/// What `blemu bench` runs: bumble-bench's roles, modes and scenarios, with its defaults.
public struct BenchPlan: Sendable {
    public enum Role: String, Sendable { case central, peripheral }
    public enum PHY: String, CaseIterable, Sendable {
        case oneM = "1m", twoM = "2m", coded
        /// The PHY bit of LE Set PHY's TX_PHYs and RX_PHYs (Vol 4, Part E, 7.8.49).
        var bit: UInt8 { switch self { case .oneM: 0x01; case .twoM: 0x02; case .coded: 0x04 } }
    }

    public var role: Role
    public var mode: BenchMode
    public var scenario: BenchScenario
    public var packets = 10
    /// Bytes of each packet (`--size`, bumble-bench's `--packet-size`), framing included.
    public var size = 500
    /// ATT_MTU asked for (GATT) or the channel MTU offered (L2CAP).
    public var mtu: Int?
    /// LE Set Data Length's TX octets (central).
    public var dataLength: Int?
    public var phy: PHY?
    /// The peripheral to connect to (central).
    public var peer: BluetoothAddress?
    /// The peripheral's own static random address (peripheral; default: derived from its name).
    public var address: BluetoothAddress?
    public var psm: UInt16 = SpeedService.defaultPSM
    /// Seconds for the whole run before it fails.
    public var timeout: Double = 60

    public init(role: Role, mode: BenchMode? = nil, scenario: BenchScenario? = nil) {
        self.role = role
        self.mode = mode ?? (role == .central ? .gattClient : .gattServer)
        self.scenario = scenario ?? (role == .central ? .send : .receive)
    }

    /// Bumble-bench's defaults: a GATT client asks for ATT_MTU 517, a channel offers MTU 1024.
    public var effectiveMTU: Int { mtu ?? (mode.isL2CAP ? 1024 : 517) }

    /// What does not fit: one line, or nil.
    public func problem() -> String? {
        if role == .central && !mode.isClient { return "--role central runs gatt-client or l2cap-client (its server modes are not supported)" }
        if role == .peripheral && mode.isClient { return "--role peripheral runs gatt-server or l2cap-server (its client modes are not supported)" }
        if role == .central && peer == nil { return "--role central needs --peer ADDRESS" }
        if role == .peripheral && (dataLength != nil || phy != nil) { return "--data-length and --phy go with --role central (the central asks for them)" }
        if packets < 1 { return "--packets must be at least 1" }
        if scenario == .read {
            if mode.isL2CAP { return "--scenario read goes with gatt-client (the central reads) or gatt-server (the peripheral serves)" }
            if let mtu, mtu < 23 || mtu > 517 { return "--mtu for GATT is 23 to 517" }
        } else if let problem = sizeProblem() { return problem }
        if let address, !address.isValidStaticRandom {
            return "--address \(address) is not a static random address: its two top bits must be set (first byte C0-FF) and the rest neither all 0 nor all 1"
        }
        if role == .central && address != nil { return "--address goes with --role peripheral (the central's is the controller's)" }
        if let dataLength, !(27...251).contains(dataLength) { return "--data-length is 27 to 251 octets" }
        if psm < 0x80 || psm > 0xFF { return "--psm is a dynamic SPSM, 0x80 to 0xFF (128 to 255)" }
        if !(timeout > 0) { return "--timeout must be above 0 seconds" }
        return nil
    }

    /// What does not fit in the packet size (the packet scenarios).
    private func sizeProblem() -> String? {
        let smallest = BenchPacket.sequenceHeaderLength + (mode.isL2CAP ? BenchStreamFramer.lengthFieldSize : 0)
        if size < smallest || size > 8192 { return "--size must be \(smallest) to 8192 bytes" }
        if !mode.isL2CAP {
            let mtu = effectiveMTU
            if mtu < 23 || mtu > 517 { return "--mtu for GATT is 23 to 517" }
            if size > mtu - 3 { return "--size \(size) does not fit a notification or write of ATT_MTU \(mtu) (at most \(mtu - 3))" }
        } else {
            let mtu = effectiveMTU
            if mtu < 23 || mtu > 65535 { return "--mtu for L2CAP is 23 to 65535" }
        }
        return nil
    }
}

/// One bench run on one controller: the central or the peripheral stack, the transport of the
/// mode and the scenario's runner, on the run loop. The front end prints what it hears.
public final class BenchSession {
    public let plan: BenchPlan
    public let loop: RunLoop
    public let runner: BenchRunner
    public let logger: Logger
    public var onProgress: ((_ done: Int, _ of: Int) -> Void)? {
        get { runner.onProgress }
        set { runner.onProgress = newValue }
    }
    /// A line about the connection (connected, MTU, channel opened).
    public var onNote: ((String) -> Void)?
    public private(set) var result: BenchResult?
    public private(set) var failure: String?
    private var central: CentralSession?
    private var stack: ControllerStack?
    private var device: BenchDevice?
    private var link: CentralLink?
    private var channelIO: BenchChannelIO?
    private var gattIO: BenchGATTClientIO?
    private var stopping = false
    /// The peer connected: a stall after that may be a scenario that does not fit the peer's.
    private var peerSeen = false

    /// After the result: the last ACK leaves and the peer sees the run end before the link goes.
    public static let linger: Duration = .milliseconds(500)

    public init(plan: BenchPlan, spec: ControllerSpec, loop: RunLoop, logger: Logger) throws(StackFailure) {
        if let problem = plan.problem() { throw StackFailure(problem) }
        self.plan = plan
        self.loop = loop
        self.logger = logger
        runner = BenchRunner(scenario: plan.scenario, mode: plan.mode, packetCount: plan.packets, packetSize: plan.size, scheduler: loop)
        runner.onNote = { [unowned self] in self.onNote?($0) }
        runner.onFinished = { [unowned self] in self.finished($0) }
        switch plan.role {
        case .central: try makeCentral(spec: spec)
        case .peripheral: try makePeripheral(spec: spec)
        }
    }

    /// Runs until the result (or a failure); throws the failure.
    public func run() throws(StackFailure) {
        try SignalStop.install(on: loop, isStopping: { [unowned self] in self.stopping }, stop: { [unowned self] in
            self.stop(failure: "interrupted")
        })
        let timeout = plan.timeout
        loop.schedule(after: .milliseconds(Int64(timeout * 1000))) { [weak self] in
            self?.stop(failure: "no result within \(timeout) s", stalled: true)
        }
        if let central {
            do { try central.run() } catch { if failure == nil { failure = error.description } }
        } else if let stack {
            stack.start()
            loop.run()
        }
        if let failure { throw StackFailure(failure) }
    }

    private var channelParameters: ChannelParameters {
        // Bumble-bench's channel: MTU 1024, MPS 1024, 128 credits (`DEFAULT_L2CAP_*`).
        let mtu = UInt16(clamping: plan.effectiveMTU)
        return ChannelParameters(mtu: mtu, mps: min(mtu, 1024), initialCredits: 128)
    }

    // MARK: Central

    private func makeCentral(spec: ControllerSpec) throws(StackFailure) {
        let session = try CentralSession(spec: spec, loop: loop, logger: logger)
        central = session
        session.connect(to: AdvertiserFilter(address: plan.peer), timeout: plan.timeout) { [unowned self] link, _ in
            connected(link)
        }
    }

    private func connected(_ link: CentralLink) {
        self.link = link
        link.onDisconnected = { [unowned self] reason in
            if result == nil { stop(failure: "the peripheral disconnected (reason \(Hex.byte(reason))) before the run ended", stalled: true) }
        }
        peerSeen = true
        onNote?("connected to \(link.peer.address) (handle \(Hex.word(link.handle)))")
        guard let hci = central?.host.hci else { return }
        if let dataLength = plan.dataLength {
            // Vol 6, Part B, 4.5.10: the time for TX octets on the LE 1M PHY: (octets + 14) * 8 µs.
            _ = hci.send(.leSetDataLength(handle: link.handle, txOctets: UInt16(dataLength), txTime: UInt16((dataLength + 14) * 8)))
        }
        if let phy = plan.phy {
            // LE Set PHY (Vol 4, Part E, 7.8.49): All_PHYs 0 (both given), TX and RX the one asked for, no options.
            var parameters: [UInt8] = []
            parameters.appendLE(link.handle)
            parameters += [0x00, phy.bit, phy.bit, 0x00, 0x00]
            _ = hci.send(HCICommand(opcode: HCIOpcode.leSetPHY, parameters: parameters))
        }
        switch plan.mode {
        case .gattClient:
            let io = BenchGATTClientIO(runner: runner, link: link)
            gattIO = io
            runner.io = io
            runner.reader = io
            io.onReadFailure = { [unowned self] in stop(failure: $0) }
            io.start(mtu: plan.effectiveMTU) { [unowned self] problem in
                if let problem { return stop(failure: problem) }
                if plan.scenario == .read {
                    onNote?("reading Device Name (ATT_MTU \(io.mtu))")
                    return runner.ioIsReady()
                }
                if plan.size > io.largestPacket {
                    return stop(failure: "--size \(plan.size) does not fit ATT_MTU \(io.mtu) (the peer agreed to \(io.mtu); at most \(io.largestPacket))")
                }
                onNote?("subscribed to the Speed service (ATT_MTU \(io.mtu))")
                runner.ioIsReady()
            }
        case .l2capClient:
            let io = BenchChannelIO(runner: runner)
            channelIO = io
            runner.io = io
            io.onOpened = { [unowned self] channel in
                onNote?("L2CAP channel open on SPSM \(Hex.word(channel.spsm)): peer MTU \(channel.peerMTU), MPS \(channel.peerMPS), \(channel.sendCredits) credits")
            }
            io.onClosed = { [unowned self] reason in
                if result == nil { stop(failure: "the L2CAP channel to SPSM \(Hex.word(plan.psm)) closed: \(reason)", stalled: true) }
            }
            io.onFailure = { [unowned self] in stop(failure: $0) }
            if link.openChannel(spsm: plan.psm, parameters: channelParameters, delegate: io) == nil {
                stop(failure: "cannot ask for a channel to SPSM \(Hex.word(plan.psm))")
            }
        case .gattServer, .l2capServer:
            break
        }
    }

    // MARK: Peripheral

    private func makePeripheral(spec: ControllerSpec) throws(StackFailure) {
        let stack = ControllerStack(spec: spec, loop: loop, logger: logger)
        self.stack = stack
        let device = BenchDevice(runner: runner, channelParameters: channelParameters)
        self.device = device
        if plan.mode == .gattServer { runner.io = device } else { runner.io = device.channelIO }
        device.onFailure = { [unowned self] in stop(failure: $0) }
        device.onPeerConnected = { [unowned self] peer in
            peerSeen = true
            onNote?("central \(peer.address) connected")
        }
        device.onPeerDisconnected = { [unowned self] peer in
            // After the result the central's disconnection ends the run (see `finished`); in
            // the read scenario it is the result: the peripheral only served.
            if plan.scenario == .read { runner.servingEnded() }
            stop(failure: result == nil ? "the central \(peer.address) disconnected before the run ended" : nil, stalled: true)
        }
        device.channelIO?.onOpened = { [unowned self] channel in
            onNote?("L2CAP channel open on SPSM \(Hex.word(channel.spsm)): peer MTU \(channel.peerMTU), MPS \(channel.peerMPS), \(channel.sendCredits) credits")
        }
        device.channelIO?.onClosed = { [unowned self] reason in
            if result == nil { stop(failure: "the L2CAP channel closed: \(reason)", stalled: true) }
        }
        device.channelIO?.onFailure = { [unowned self] in stop(failure: $0) }
        stack.onFatal = { [unowned self] in stop(failure: $0) }
        let configuration = PeripheralConfiguration(name: "blemu bench", address: plan.address, controller: spec.description)
        do { try stack.add(device: device, configuration: configuration) } catch { throw StackFailure("bench device: \(error)") }
        stack.onFirstUp = { [unowned self] in
            if let device = self.device, device.spsm != 0 { onNote?("L2CAP channel published on SPSM \(Hex.word(device.spsm))") }
        }
    }

    // MARK: The end

    private func finished(_ result: BenchResult) {
        self.result = result
        // The central ends the run: it disconnects once it has the result (bumble-bench's
        // central lingers a second, then disconnects, and fails when the link went first). The
        // peripheral waits for that, `peripheralWait` at most.
        loop.schedule(after: plan.role == .central ? Self.linger : Self.peripheralWait) { [weak self] in self?.stop(failure: nil) }
    }

    /// How long a peripheral with its result waits for the central to disconnect.
    public static let peripheralWait: Duration = .seconds(5)

    /// Ends the run: the link closed (central), the stack stopped, the loop left.
    /// `stalled`: the failure is a timeout or the peer leaving mid-run (the run may have been
    /// waiting for what the peer's scenario never sends).
    public func stop(failure: String?, stalled: Bool = false) {
        guard !stopping else { return }
        stopping = true
        if let failure, result == nil {
            // A run that started and then stalled or lost its peer says what this end waited
            // for: the peer's scenario may not fit this one's (ping against receive).
            self.failure = stalled && peerSeen ? "\(failure); \(runner.expectation)" : failure
        }
        if let central {
            link?.disconnect()
            central.finish(failure: result == nil ? self.failure : nil)
        } else if let stack {
            stack.stop { [loop] in loop.stop() }
        }
    }
}
