import BlemuATT
import BlemuChannels
import BlemuCore

/// Enhanced ATT's numbers (Vol 3, Part G, 3.6 and 7.2-7.4; Part F, 3.2.11).
public enum EATT {
    /// The EATT PSM (Assigned Numbers, L2CAP PSM 0x0027).
    public static let psm: UInt16 = 0x0027
    /// Server Supported Features (0x2B3A), octet 0 bit 0: the server takes enhanced bearers (Part G, 7.4).
    public static let serverSupportsEATT: UInt8 = 0x01
    /// Client Supported Features (0x2B29), octet 0 (Part G, 7.2): bit 1, the client takes
    /// notifications and indications on any bearer (EATT); bit 2, Multiple Handle Value Notification.
    public static let clientSupportsEATT: UInt8 = 0x02
    public static let clientSupportsMultipleNotifications: UInt8 = 0x04
    /// One Enhanced Credit Based request opens at most five channels (Vol 3, Part A, 4.25).
    public static let maxBearersPerRequest = 5
    /// The credits each side starts a bearer's channel with: a few PDUs in flight.
    public static let initialCredits: UInt16 = 8

    /// The channel parameters of a bearer receiving PDUs of up to `mtu` bytes (one PDU, one SDU).
    public static func parameters(mtu: UInt16) -> ChannelParameters {
        ChannelParameters(mtu: mtu, mps: mtu, initialCredits: initialCredits)
    }
}

/// One Enhanced ATT bearer (Vol 3, Part F, 3.2.11; Part G, 3.6): an L2CAP channel in Enhanced
/// Credit Based Flow Control Mode on the EATT PSM and an `ATTBearer` over it with its own
/// ATT_MTU and transaction state. Whichever role uses it (a server, a client) is its `Endpoint`.
public final class EnhancedATTBearer: ATTTransport {
    public let channel: CreditBasedChannel
    public let bearer: ATTBearer

    public init(channel: CreditBasedChannel, scheduler: TimerScheduling) {
        self.channel = channel
        // Part F, 3.2.8: for an enhanced bearer ATT_MTU is the smaller of the two MTUs L2CAP
        // configured (each side's receive MTU).
        bearer = ATTBearer(scheduler: scheduler, mtu: Int(min(channel.local.mtu, channel.peerMTU)), enhanced: true)
        bearer.transport = self
    }

    /// One ATT PDU is one SDU on the channel (Part F, 3.2.11).
    public func sendATT(_ pdu: ArraySlice<UInt8>, kind: ATTSendKind) -> Bool { channel.send(pdu) }

    /// Whether a notification PDU of `bytes` may go on this bearer now (where a server sends one
    /// the unenhanced bearer's full queue refused, Vol 3, Part G, 7.2 bit 1). Never into the room
    /// a response and an indication need, each at most `maximumPDU` bytes with its 2-byte SDU
    /// length: the protocol bounds those to one each per bearer (Part F, 3.3.2), and the
    /// channel's send queue must never refuse them.
    public func hasRoomForNotification(of bytes: Int, maximumPDU: Int) -> Bool {
        channel.queuedBytes + 2 + bytes <= CreditBasedChannel.sendQueueBytes - 2 * (maximumPDU + 2)
    }
}

/// The Enhanced ATT bearers of one link, in either role: each channel on the EATT PSM made a
/// bearer as it opens, with the role's endpoint on it (`attach`: the device's server, the
/// central's client), its SDUs handed to that bearer, and the endpoint let go (`detach`) as the
/// channel closes. A client opens them (`open`); a server is handed its link's channels by the
/// `EnhancedATTService` that serves the PSM.
public final class EnhancedBearers<Endpoint: AnyObject>: CreditBasedChannelDelegate {
    /// A bearer and what the role put on it.
    public struct Entry {
        public let bearer: EnhancedATTBearer
        public let endpoint: Endpoint
    }

    public private(set) var entries: [Entry] = []
    private let scheduler: TimerScheduling
    private let attach: (EnhancedATTBearer) -> Endpoint
    private let detach: (Endpoint) -> Void
    /// The channels a client asked for and has no answer for yet, and who hears the outcome.
    private var asked: [CreditBasedChannel] = []
    private var opening: (() -> Void)?

    public init(scheduler: TimerScheduling, attach: @escaping (EnhancedATTBearer) -> Endpoint,
                detach: @escaping (Endpoint) -> Void = { _ in }) {
        self.scheduler = scheduler
        self.attach = attach
        self.detach = detach
    }

    public var isEmpty: Bool { entries.isEmpty }
    public var endpoints: [Endpoint] { entries.map(\.endpoint) }

    /// The entry whose channel is `channel`.
    public func entry(of channel: CreditBasedChannel) -> Entry? { entries.first { $0.bearer.channel === channel } }

    /// The entry whose endpoint is `endpoint`.
    public func entry(of endpoint: Endpoint) -> Entry? { entries.first { $0.endpoint === endpoint } }

    /// Client role: asks for `count` (1-5, Vol 3, Part A, 4.25) bearers in one request, each
    /// receiving PDUs of up to `mtu` bytes; `completion` with how many opened once every
    /// channel is answered (0: all refused). False, and no completion, when nothing could be
    /// asked for (an opening under way, a bad count, no CIDs left).
    public func open(on channels: CreditBasedChannels, count: Int, mtu: UInt16, completion: @escaping (Int) -> Void) -> Bool {
        guard opening == nil else { return false }
        let before = entries.count
        let requested = channels.connectEnhanced(spsm: EATT.psm, count: count, parameters: EATT.parameters(mtu: mtu), delegate: self)
        guard !requested.isEmpty else { return false }
        asked = requested
        opening = { [unowned self] in completion(max(0, entries.count - before)) }
        return true
    }

    private func settle(_ channel: CreditBasedChannel) {
        guard let index = asked.firstIndex(where: { $0 === channel }) else { return }
        asked.remove(at: index)
        guard asked.isEmpty, let opening else { return }
        self.opening = nil
        opening()
    }

    public func channelOpened(_ channel: CreditBasedChannel) {
        let bearer = EnhancedATTBearer(channel: channel, scheduler: scheduler)
        entries.append(Entry(bearer: bearer, endpoint: attach(bearer)))
        settle(channel)
    }

    public func channel(_ channel: CreditBasedChannel, received sdu: ArraySlice<UInt8>) {
        entry(of: channel)?.bearer.bearer.receive(sdu)
    }

    public func channelClosed(_ channel: CreditBasedChannel, reason: ChannelCloseReason) {
        if let index = entries.firstIndex(where: { $0.bearer.channel === channel }) {
            detach(entries.remove(at: index).endpoint)
        }
        settle(channel)
    }

    public func channelIsReady(_ channel: CreditBasedChannel) {}
}

/// Server role: the EATT PSM served on every link of a `ChannelServers` (Vol 3, Part G, 3.6:
/// "an Enhanced ATT bearer ... shall only be established on an encrypted link", so a request
/// before encryption gets Insufficient Encryption, 0x0008, as every encrypted-only SPSM's
/// does; Enhanced Credit Based Flow Control Mode only, Part F, 3.2.11). Each channel goes to
/// its link's `EnhancedBearers`, which `bearers(linkHandle)` finds; a channel of a link with
/// none is disconnected.
public final class EnhancedATTService<Endpoint: AnyObject>: CreditBasedChannelDelegate {
    private let bearers: (UInt16) -> EnhancedBearers<Endpoint>?

    /// Nil when the PSM is served already on `servers`.
    public init?(servers: ChannelServers, mtu: UInt16, bearers: @escaping (UInt16) -> EnhancedBearers<Endpoint>?) {
        self.bearers = bearers
        guard let server = servers.serve(spsm: EATT.psm, security: .encrypted, parameters: EATT.parameters(mtu: mtu), delegate: self) else {
            return nil
        }
        server.enhancedOnly = true
    }

    public func channelOpened(_ channel: CreditBasedChannel) {
        guard let link = bearers(channel.linkHandle) else { return channel.disconnect() }
        link.channelOpened(channel)
    }

    public func channel(_ channel: CreditBasedChannel, received sdu: ArraySlice<UInt8>) {
        bearers(channel.linkHandle)?.channel(channel, received: sdu)
    }

    public func channelClosed(_ channel: CreditBasedChannel, reason: ChannelCloseReason) {
        bearers(channel.linkHandle)?.channelClosed(channel, reason: reason)
    }

    public func channelIsReady(_ channel: CreditBasedChannel) {}
}
