import BlemuChannels
import BlemuCore
import BlemuGATT
import BlemuDevice
import Logging

/// `channel-echo`: a test peer for L2CAP connection-oriented channels. It publishes one channel
/// (blemu assigns the SPSM, as Core Bluetooth's `publishL2CAPChannel` does) and sends every SDU
/// back on the channel it came from; the SPSM is in the L2CAP PSM characteristic
/// `ABDD3056-28FA-441D-A470-55A75A52553A` (UInt16, little-endian) of its Channel Echo service.
/// With `encrypted` set (before a central opens a channel) the channel is encrypted-only.
///
/// Each channel has its own echoes waiting, so one channel (or one central) that cannot take
/// them never holds up another's. An SDU longer than the peer's MTU can never go back on its
/// channel (Vol 3, Part A, 3.4.3: an SDU is at most the receiver's MTU): it is dropped, counted in
/// `dropped`, and logged under the budget of lines peers set the pace of.
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
    /// Per channel, the SDUs it could not take back at once (its send queue full), oldest first,
    /// sent when it says ready. Bounded: a channel with echoes waiting gives its peer no credits
    /// back, so the peer adds at most what the credits it holds carry; a closed channel's go.
    private var waiting: [(channel: CreditBasedChannel, sdus: [[UInt8]])] = []
    /// Lines whose pace a central sets (channels opened and closed, SDUs dropped): a budget, as
    /// for the stack's (Docs/REFERENCE.md, Budgets).
    private var peerLog = LogBudget()
    /// SDUs received (echoed, waiting, or dropped).
    public private(set) var echoed = 0
    /// SDUs dropped because they were longer than the peer's MTU.
    public private(set) var dropped = 0

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
        logPeerPaced("L2CAP channel \(Hex.word(channel.localCID)) opened on SPSM \(Hex.word(channel.spsm))")
    }

    public func channel(_ channel: CreditBasedChannel, received sdu: ArraySlice<UInt8>) {
        echoed += 1
        guard sdu.count <= Int(channel.peerMTU) else {
            // The peer's MTU bounds what we may send it (3.4.3): this echo can never go.
            dropped += 1
            return logPeerPaced("L2CAP channel \(Hex.word(channel.localCID)): SDU of \(sdu.count) bytes dropped, longer than the peer's MTU \(channel.peerMTU)",
                                level: .notice)
        }
        if let index = waiting.firstIndex(where: { $0.channel === channel }) {
            return waiting[index].sdus.append(Array(sdu))
        }
        if channel.send(sdu) { return }
        // The channel's queue is full: stop taking more from its peer until its echoes went.
        channel.pauseReceiving(true)
        waiting.append((channel, [Array(sdu)]))
    }

    public func channelIsReady(_ channel: CreditBasedChannel) {
        guard let first = waiting.firstIndex(where: { $0.channel === channel }) else { return }
        var sent = 0
        for sdu in waiting[first].sdus {
            guard channel.send(sdu) else { break }
            sent += 1
        }
        // Found again: a send may have closed a channel (this one or another) on the way.
        guard let index = waiting.firstIndex(where: { $0.channel === channel }) else { return }
        waiting[index].sdus.removeFirst(sent)
        guard waiting[index].sdus.isEmpty else { return }
        waiting.remove(at: index)
        channel.pauseReceiving(false)
    }

    public func channelClosed(_ channel: CreditBasedChannel, reason: ChannelCloseReason) {
        waiting.removeAll { $0.channel === channel }
        logPeerPaced("L2CAP channel \(Hex.word(channel.localCID)) closed: \(reason)")
    }

    private func logPeerPaced(_ message: @autoclosure () -> String, level: Logger.Level = .info) {
        guard let context, let leftOut = peerLog.take(now: context.scheduler.nowNanoseconds, for: context.logger) else { return }
        context.logger.log(level: level, "\(message())\(LogBudget.note(leftOut))")
    }
}
