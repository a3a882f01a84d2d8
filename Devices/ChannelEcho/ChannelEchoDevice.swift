import BlemuChannels
import BlemuCore
import BlemuGATT
import BlemuHost

/// `channel-echo`: a test peer for L2CAP connection-oriented channels. It publishes one channel
/// (blemu assigns the SPSM, as Core Bluetooth's `publishL2CAPChannel` does) and sends every SDU
/// back on the channel it came from; the SPSM is in the L2CAP PSM characteristic
/// `ABDD3056-28FA-441D-A470-55A75A52553A` (UInt16, little-endian) of its Channel Echo service.
/// With `encrypted` set (before a central opens a channel) the channel is encrypted-only.
public final class ChannelEchoDevice: Device, CreditBasedChannelDelegate {
    public static let deviceName = "channel-echo"
    public static let summary = "channel-echo: an L2CAP credit based channel that echoes each SDU; SPSM in ABDD3056-… of service 7d3c0400-…"
    public static let serviceUUID = BluetoothUUID("7d3c0400-9a5e-4d1a-8f6e-5c1b2d3e4f50")!

    public let profile = DeviceProfile(defaultName: "blemu Echo", advertisedServices: [ChannelEchoDevice.serviceUUID], appearance: 0x0000)
    /// The published SPSM, 0 before start.
    public private(set) var spsm: UInt16 = 0
    public let psm: Characteristic
    public private(set) var encrypted = false
    private weak var context: DeviceContext?
    /// SDUs the channels could not take back at once (queue full), sent when they say ready:
    /// bounded, since a channel whose queue is full gives the peer no credits until it drains.
    private var pending: [(CreditBasedChannel, [UInt8])] = []
    public private(set) var echoed = 0

    public init() {
        var spsmOfDevice: () -> UInt16 = { 0 }
        psm = L2CAPPSMCharacteristic.make { spsmOfDevice() }
        spsmOfDevice = { [unowned self] in self.spsm }
    }

    public var services: [Service] {
        [Service(Self.serviceUUID) { psm }]
    }

    public var settings: [DeviceSetting] {
        [.flag("encrypted", "1: the channel needs an encrypted link (refused with 0x0008 until then), 0: it does not") { [weak self] value in
            guard let self else { return }
            self.encrypted = value
            self.republish()
        }]
    }

    public func start(context: DeviceContext) {
        self.context = context
        republish()
    }

    private func republish() {
        guard let context else { return }
        if spsm != 0 { context.unpublishL2CAPChannel(spsm) }
        spsm = context.publishL2CAPChannel(security: encrypted ? .encrypted : .none,
                                           parameters: ChannelParameters(mtu: 65535), delegate: self) ?? 0
    }

    public func channelOpened(_ channel: CreditBasedChannel) {
        context?.logger.info("L2CAP channel \(Hex.word(channel.localCID)) opened on SPSM \(Hex.word(channel.spsm))")
    }

    public func channel(_ channel: CreditBasedChannel, received sdu: ArraySlice<UInt8>) {
        echoed += 1
        if pending.isEmpty, channel.send(sdu) { return }
        // The channel's queue is full: stop taking more from the peer until the echo went.
        channel.pauseReceiving(true)
        pending.append((channel, Array(sdu)))
    }

    public func channelIsReady(_ channel: CreditBasedChannel) {
        while let (waiting, sdu) = pending.first {
            guard waiting.state == .open else { pending.removeFirst(); continue }
            guard waiting.send(sdu) else { return }
            pending.removeFirst()
            if !pending.contains(where: { $0.0 === waiting }) { waiting.pauseReceiving(false) }
        }
    }

    public func channelClosed(_ channel: CreditBasedChannel, reason: ChannelCloseReason) {
        pending.removeAll { $0.0 === channel }
        context?.logger.info("L2CAP channel \(Hex.word(channel.localCID)) closed: \(reason)")
    }
}
