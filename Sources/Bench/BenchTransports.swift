import BlemuATT
import BlemuBenchProtocol
import BlemuCentral
import BlemuChannels
import BlemuCore
import BlemuDevice
import BlemuGATT
import BlemuGATTClient
import BlemuHost

/// Bumble-bench's Speed service (bench.py): the client writes packets to TX (Write Without
/// Response) and the server notifies packets on RX.
public enum SpeedService {
    public static let service = BluetoothUUID("50DB505C-8AC4-4738-8448-3B1D9CC09CC5")!
    public static let tx = BluetoothUUID("E789C754-41A1-45F4-A948-A0A1A90DBA53")!
    public static let rx = BluetoothUUID("016A2CC7-E14B-4819-935F-1F56EAE4098D")!
    /// Bumble-bench's L2CAP PSM (`DEFAULT_L2CAP_PSM`): the first dynamic SPSM, which blemu
    /// assigns a device's first published channel (Vol 3, Part A, 4.22).
    public static let defaultPSM: UInt16 = 0x0080
}

/// Packets over an L2CAP credit based channel, each after its 2-byte big-endian length (Bumble's
/// `StreamedPacketIO`), on either end.
public final class BenchChannelIO: BenchPacketIO, CreditBasedChannelDelegate {
    public let runner: BenchRunner
    public private(set) var channel: CreditBasedChannel?
    private var framer = BenchStreamFramer()
    private var frame: [UInt8] = []
    public var onOpened: ((CreditBasedChannel) -> Void)?
    public var onClosed: ((ChannelCloseReason) -> Void)?
    /// The channel opened but the run cannot go on it: the packets are longer than the peer's MTU.
    public var onFailure: ((String) -> Void)?

    public init(runner: BenchRunner) {
        self.runner = runner
        frame.reserveCapacity(runner.packetSize + BenchStreamFramer.lengthFieldSize)
    }

    public var overhead: Int { BenchStreamFramer.lengthFieldSize }
    public var mtu: Int { Int(channel?.peerMTU ?? 0) }
    /// A packet goes in one SDU; the receiving side reads the SDUs as a stream in any case.
    public var largestPacket: Int { min(mtu - BenchStreamFramer.lengthFieldSize, Int(UInt16.max)) }

    public func sendPacket(_ packet: ArraySlice<UInt8>) -> Bool {
        guard let channel, channel.state == .open else { return false }
        frame.removeAll(keepingCapacity: true)
        BenchStreamFramer.frame(packet, into: &frame)
        return channel.send(frame[...])
    }

    public func channelOpened(_ channel: CreditBasedChannel) {
        guard self.channel == nil else { return channel.disconnect() }  // one channel per run
        self.channel = channel
        onOpened?(channel)
        // Each packet is one SDU, which the peer's MTU bounds (Vol 3, Part A, 3.4.3): a sender
        // whose packets are longer could never send one, and would wait for room that never comes.
        if runner.isSender, runner.packetSize > Int(channel.peerMTU) {
            return (onFailure ?? { _ in channel.disconnect() })(
                "--size \(runner.packetSize) does not fit the peer's L2CAP MTU \(channel.peerMTU): each packet is one SDU")
        }
        runner.ioIsReady()
    }

    public func channel(_ channel: CreditBasedChannel, received sdu: ArraySlice<UInt8>) {
        guard channel === self.channel else { return }
        let runner = runner
        framer.receive(sdu) { runner.received($0) }
    }

    public func channelClosed(_ channel: CreditBasedChannel, reason: ChannelCloseReason) {
        guard self.channel == nil || channel === self.channel else { return }
        onClosed?(reason)
    }

    public func channelIsReady(_ channel: CreditBasedChannel) {
        guard channel === self.channel else { return }
        runner.ioIsReady()
    }
}

/// The central's end of the GATT modes: the peer's Speed service found, RX subscribed, packets
/// written to TX as Write Commands (Vol 3, Part F, 3.4.5.3), packets notified on RX received;
/// or, for the read scenario, GAP's Device Name read again and again.
public final class BenchGATTClientIO: BenchPacketIO, BenchReader {
    public let runner: BenchRunner
    public let link: CentralLink
    private var txHandle: UInt16 = 0
    private var rxHandle: UInt16 = 0
    private var readHandle: UInt16 = 0
    private var reading = false
    private var pdu: [UInt8] = []
    public private(set) var mtu = 23

    public init(runner: BenchRunner, link: CentralLink) {
        self.runner = runner
        self.link = link
        pdu.reserveCapacity(runner.packetSize + 3)
    }

    public var overhead: Int { 0 }
    public var largestPacket: Int { mtu - 3 }

    /// MTU exchange, discovery, subscription; `then` with nil once ready, or why not.
    public func start(mtu wanted: Int, then: @escaping (String?) -> Void) {
        let client = link.client
        client.exchangeMTU(wanted) { [self] result in
            if case .success(let agreed) = result { mtu = agreed }
            client.discoverAll { [self] result in
                let services: [RemoteService]
                switch result {
                case .failure(let error): return then("discovery: \(error)")
                case .success(let found): services = found
                }
                if runner.scenario == .read { return findReadTarget(in: services, then: then) }
                guard let speed = services.first(where: { $0.uuid == SpeedService.service }) else {
                    return then("the peer has no Speed service (\(SpeedService.service)): is it a bench peripheral in gatt-server mode?")
                }
                guard let tx = speed.characteristics.first(where: { $0.uuid == SpeedService.tx }),
                      let rx = speed.characteristics.first(where: { $0.uuid == SpeedService.rx }) else {
                    return then("the Speed service lacks its TX or RX characteristic")
                }
                txHandle = tx.valueHandle
                rxHandle = rx.valueHandle
                client.onNotification = { [weak self] handle, value in
                    guard let self, handle == self.rxHandle else { return }
                    self.runner.received(value)
                }
                link.onTransmitQueueRoom = { [weak self] in self?.runner.ioIsReady() }
                client.configure(rx, notify: true, indicate: false) { [self] result in
                    if case .failure(let error) = result { return then("subscribing to RX: \(error)") }
                    mtu = client.mtu
                    then(nil)
                }
            }
        }
    }

    /// The read scenario's characteristic: GAP's Device Name (0x2A00), which every GATT server
    /// has (Vol 3, Part C, 12.1: the Device Name characteristic is mandatory in the GAP service).
    public static let readTarget = BluetoothUUID(0x2A00)

    /// The read scenario: the value handle of `readTarget`, no subscription.
    private func findReadTarget(in services: [RemoteService], then: (String?) -> Void) {
        let characteristics = services.flatMap(\.characteristics)
        guard let target = characteristics.first(where: { $0.uuid == Self.readTarget && $0.properties.contains(.read) }) else {
            return then("the peer has no readable Device Name characteristic (\(Self.readTarget))")
        }
        readHandle = target.valueHandle
        mtu = link.client.mtu
        then(nil)
    }

    /// Why a read failed, once (the run cannot go on).
    public var onReadFailure: ((String) -> Void)?

    public func startRead() -> Bool {
        guard link.isOpen, readHandle != 0, !reading else { return false }
        reading = true
        // ATT_READ_REQ (Vol 3, Part F, 3.4.4.3): one at a time, as a client must (3.3.2: one
        // request outstanding on a bearer), so each answer's wait is the round trip alone.
        link.client.read(readHandle) { [weak self] result in
            guard let self else { return }
            reading = false
            switch result {
            case .success(let value): runner.readAnswered(value[...])
            case .failure(let error): onReadFailure?("reading handle \(Hex.word(readHandle)): \(error)")
            }
        }
        return true
    }

    public func sendPacket(_ packet: ArraySlice<UInt8>) -> Bool {
        guard link.isOpen, txHandle != 0 else { return false }
        // ATT_WRITE_CMD (Vol 3, Part F, 3.4.5.3): opcode 0x52, handle, value. Unbounded by the
        // protocol like notifications, so sent best effort: the link refuses it when its queue
        // is full and `onTransmitQueueRoom` says when there is room.
        pdu.removeAll(keepingCapacity: true)
        pdu.append(0x52)
        pdu.appendLE(txHandle)
        pdu.append(contentsOf: packet)
        return link.bearer.send(pdu[...], kind: .notification)
    }
}

/// The peripheral's end: the Speed service (TX written by the central, RX notified to it),
/// and for the L2CAP server mode one published channel (the first dynamic SPSM, 0x0080, which
/// bumble-bench opens by default).
public final class BenchDevice: Device, BenchPacketIO {
    public static let deviceName = "bench"
    public static let summary = "bench: bumble-bench's Speed service and L2CAP channel (blemu bench)"

    public let profile = DeviceProfile(defaultName: "blemu bench", advertisedServices: [SpeedService.service], appearance: 0x0000)
    public let runner: BenchRunner
    public let tx: Characteristic
    public let rx: Characteristic
    public let channelIO: BenchChannelIO?
    let channelParameters: ChannelParameters
    private weak var context: DeviceContext?
    private var peer: ATTPeer?
    public private(set) var spsm: UInt16 = 0
    public var onPeerConnected: ((ATTPeer) -> Void)?
    public var onPeerDisconnected: ((ATTPeer) -> Void)?
    /// The channel could not be published (every SPSM taken).
    public var onFailure: ((String) -> Void)?

    public init(runner: BenchRunner, channelParameters: ChannelParameters) {
        self.runner = runner
        self.channelParameters = channelParameters
        tx = Characteristic(SpeedService.tx, properties: [.write, .writeWithoutResponse])
        rx = Characteristic(SpeedService.rx, properties: [.notify])
        channelIO = runner.mode == .l2capServer ? BenchChannelIO(runner: runner) : nil
        tx.onWrite = { [weak self] request in
            guard let self, self.runner.mode == .gattServer else { return nil }
            self.runner.received(request.value.slice)
            return nil
        }
    }

    public var services: [Service] { [Service(SpeedService.service) { tx; rx }] }

    public func start(context: DeviceContext) {
        self.context = context
        guard let channelIO else { return }
        guard let spsm = context.publishL2CAPChannel(security: .none, parameters: channelParameters, delegate: channelIO) else {
            onFailure?("no dynamic SPSM free for the bench channel")
            return
        }
        self.spsm = spsm
    }

    public func peerConnected(_ peer: ATTPeer) {
        if self.peer == nil { self.peer = peer }
        onPeerConnected?(peer)
    }

    public func peerDisconnected(_ peer: ATTPeer) {
        if self.peer == peer { self.peer = nil }
        onPeerDisconnected?(peer)
    }

    public func subscriptionChanged(_ characteristic: Characteristic, peer: ATTPeer, notify: Bool, indicate: Bool) {
        guard characteristic === rx, notify, runner.mode == .gattServer else { return }
        self.peer = peer
        runner.ioIsReady()
    }

    public func peripheralIsReady() {
        if runner.mode == .gattServer { runner.ioIsReady() }
    }

    // BenchPacketIO for the GATT server mode: packets notified on RX.
    public var overhead: Int { 0 }
    public var mtu: Int { peer.flatMap { context?.attMTU(of: $0) } ?? 23 }
    public var largestPacket: Int { mtu - 3 }

    public func sendPacket(_ packet: ArraySlice<UInt8>) -> Bool {
        guard let context, let peer else { return false }
        return context.notify(rx, to: peer) { $0.append(contentsOf: packet) }
    }
}
