import BlemuATT
import BlemuChannels
import BlemuChatProtocol
import BlemuCore
import BlemuGATT
import BlemuDevice
import Logging

/// `chat`: a chat room's host, in the plain protocol of the Core Bluetooth chat app it comes
/// from — one service with one message characteristic (write, notify); one write, or one
/// notification, of UTF-8 text is one message — and, on a second characteristic, in frames
/// between blemu nodes (`ChatFrame`): messages up to 4 KiB with an identity, delivered once
/// and acknowledged.
///
/// | characteristic | format | access |
/// |---|---|---|
/// | Message `890aa912-…` | UTF-8 text, at most ATT_MTU - 3 bytes a write or notification | write, notify |
/// | Frames `7d3c0301-…` | `ChatFrame`s: DATA pieces of messages, ACKs | write, notify |
///
/// Members are the centrals subscribed to Message (plain clients) or Frames (blemu nodes, which
/// name themselves in their frames). What one writes goes to every other member, to a plain one
/// as `NAME: text` (its name: `central-` and the last four hex digits of its address, e.g.
/// `central-AA01`) and to the host's own `onHeard` (printed by `blemu chat`); the host's
/// lines (`send`) go to every member; joins and leaves are announced (`* NAME joined`). A text longer than a member's ATT_MTU - 3 goes
/// as several notifications, cut between characters. Each member has its own bounded queue:
/// one that cannot keep up waits for "ready to update subscribers" without slowing the others,
/// and if its queue overflows, the oldest lines give way to one line saying how many it missed.
///
/// All of that is the room's (`ChatRoom`, in `BlemuChatProtocol`, with time handed in); this
/// class wires it to the characteristics, the chat channel, the links' peers and a timer.
public final class ChatDevice: Device, CreditBasedChannelDelegate {
    public static let deviceName = "chat"
    public static let summary = "chat room host: Chat 9f37e282-…, the seed app's plain protocol (one write or notification of UTF-8 text is one message), and framed messages between blemu nodes"

    public static let serviceUUID = BluetoothUUID("9f37e282-60b6-42b1-a02f-7341da5e2eba")!
    public static let messageUUID = BluetoothUUID("890aa912-c414-440d-88a2-c7f66179589b")!
    /// The framed chat between blemu nodes (`ChatFrame`, Docs/CHAT.md "Frames").
    public static let framesUUID = BluetoothUUID("7d3c0301-9a5e-4d1a-8f6e-5c1b2d3e4f50")!
    /// The room's limits and numbers used beside the device (`ChatRoom` has them all, explained).
    public static let memberQueueLimit = ChatRoom.memberQueueLimit
    public static let memberQueueByteLimit = ChatRoom.memberQueueByteLimit
    public static let busyThreshold = ChatRoom.busyThreshold
    public static let busyByteThreshold = ChatRoom.busyByteThreshold
    public static let announcedJoinsPerLink = ChatRoom.announcedJoinsPerLink
    public static let initialHops = ChatRoom.initialHops
    public static let unreadableLinesNotice = ChatRoom.unreadableLinesNotice
    public static let privateRoomNotice = ChatRoom.privateRoomNotice
    public typealias Heard = ChatRoom.Heard

    public let message: Characteristic
    public let frames: Characteristic
    /// The chat channel's SPSM (`L2CAPPSMCharacteristic`, a little-endian UInt16) in the chat
    /// service; nil when the room has no channel (`ChatTransport.gatt`).
    public let psm: Characteristic?
    /// The SPSM blemu assigned the chat channel, 0 before start or without one.
    public private(set) var spsm: UInt16 = 0
    /// A chat channel's MTU: the longest frame, a whole SEALED message, is one SDU.
    public static let channelMTU = UInt16(ChatFrame.largestFrame)
    public let linkRequirement: LinkRequirement
    public let services: [Service]
    public var profile: DeviceProfile {
        DeviceProfile(defaultName: "blemu Chat", advertisedServices: [Self.serviceUUID], appearance: 0x0080)   // generic computer
    }

    /// The room itself (members, their queues, history, acknowledgements, trust decisions):
    /// this device is its wiring to Message, Frames, the chat channel and the run loop.
    private let room = ChatRoom()
    /// The members have room for the host's lines again (`isBusy` turned false).
    public var onRoom: (() -> Void)? {
        get { room.onRoom }
        set { room.onRoom = newValue }
    }
    /// Each announcement, and each member's message once (however often it was resent).
    public var onHeard: ((Heard) -> Void)? {
        get { room.onHeard }
        set { room.onHeard = newValue }
    }
    /// A member joined or left (`memberCount` changed).
    public var onMembersChanged: (() -> Void)? {
        get { room.onMembersChanged }
        set { room.onMembersChanged = newValue }
    }
    /// The host's own name in what members see.
    public var hostName: String {
        get { room.hostName }
        set { room.hostName = newValue }
    }
    /// Signatures and names bound to keys (`ChatRoom.trust`, Docs/CHAT.md "Signed messages").
    public var trust: ChatTrust? {
        get { room.trust }
        set { room.trust = newValue }
    }

    private weak var context: DeviceContext?
    /// What each member is on: its link's peer, and its chat channel if it has one (by `ChatRoom.MemberKey`).
    private var endpoints: [ChatRoom.MemberKey: (peer: ATTPeer, channel: CreditBasedChannel?)] = [:]
    /// The timer that wakes the room at `ChatRoom.recheckAt`, and when it is set for.
    private var recheck: (id: TimerID, at: UInt64)?

    /// What a link needs before it may write or subscribe to the chat characteristics
    /// (`blemu chat --require-encryption`): nothing (the default), an encrypted link (Just Works
    /// is enough), or one encrypted with an authenticated key (a passkey pairing).
    public enum LinkRequirement: String, Sendable {
        case none, encrypted, authenticated

        /// The characteristics' write permissions; nil: derived from their properties (open).
        var permissions: AttributePermissions? {
            switch self {
            case .none: nil
            case .encrypted: [.writeEncryptionRequired]
            case .authenticated: [.writeAuthenticationRequired]
            }
        }
    }

    /// `linkRequirement`: what a link needs to write or subscribe to Message and Frames; a link
    /// without it is refused with the spec's error (Insufficient Authentication 0x05 without a
    /// key, Insufficient Encryption 0x0F with one: Vol 3, Part C, 10.3.1), so a phone pairs and
    /// a blemu member pairs on its own.
    /// `transport`: `.gatt` publishes no chat channel; otherwise one is published, needing what
    /// `linkRequirement` asks of a link (refused with the Core's result, Vol 3, Part A, 4.23).
    public init(linkRequirement: LinkRequirement = .none, transport: ChatTransport = .auto) {
        let box = WeakBox<ChatDevice>()
        let message = Characteristic(Self.messageUUID, properties: [.write, .notify], permissions: linkRequirement.permissions,
                                     validateWrite: { request in
                                         // Vol 3, Part G, 4.9.3: a value the device cannot take is refused.
                                         guard String(validating: request.value, as: UTF8.self) != nil,
                                               box.value?.room.refusesPlainWrite(from: Self.name(of: request.peer)) != true else {
                                             return .valueNotAllowed
                                         }
                                         return nil
                                     },
                                     onWrite: { request in
                                         box.value?.received(request)
                                         return nil
                                     })
        let frames = Characteristic(Self.framesUUID, properties: [.write, .notify], permissions: linkRequirement.permissions,
                                    validateWrite: { request in
                                        guard let frame = try? ChatFrame(decoding: request.value.slice) else { return .valueNotAllowed }
                                        // A signed-only room takes no unsigned message: its first piece is refused.
                                        if case .data = frame, box.value?.room.refusesPlainWrite(from: Self.name(of: request.peer)) == true {
                                            return .valueNotAllowed
                                        }
                                        return nil
                                    },
                                    onWrite: { request in
                                        box.value?.receivedFrame(request)
                                        return nil
                                    })
        // Subscribing needs the same (Vol 3, Part G, 3.3.3.3): else a stranger would hear the room.
        message.subscribingNeedsValueSecurity = linkRequirement != .none
        frames.subscribingNeedsValueSecurity = linkRequirement != .none
        self.linkRequirement = linkRequirement
        self.message = message
        self.frames = frames
        // After Message and Frames, so their handles are the same with or without it.
        let psm = transport == .gatt ? nil : L2CAPPSMCharacteristic.make { box.value?.spsm ?? 0 }
        self.psm = psm
        services = [Service(Self.serviceUUID) {
            message
            frames
            if let psm { psm }
        }]
        box.value = self
    }

    /// What a chat channel needs of its link: what Message and Frames need (Vol 3, Part A,
    /// 4.23: refused with Insufficient Encryption 0x0008, or Insufficient Authentication 0x0005
    /// where a passkey's key is needed, until the link has it).
    public var channelSecurity: ChannelSecurity {
        switch linkRequirement {
        case .none: .none
        case .encrypted: .encrypted
        case .authenticated: .authenticated
        }
    }


    public func start(context: DeviceContext) {
        self.context = context
        room.logger = context.logger
        room.links = self
        if psm != nil, spsm == 0 {
            spsm = context.publishL2CAPChannel(security: channelSecurity, parameters: ChannelParameters(mtu: Self.channelMTU),
                                               delegate: self) ?? 0
        }
    }

    public func stop() {
        if spsm != 0 { context?.unpublishL2CAPChannel(spsm) }
        spsm = 0
        for (key, endpoint) in endpoints where room.isMember(key) { endpoint.channel?.disconnect() }
        endpoints.removeAll()
        room.removeAllMembers()
        rearm()
    }

    /// Monotonic time for the room; 0 before start (as the room then says nothing).
    private var now: UInt64 { context?.scheduler.nowNanoseconds ?? 0 }

    /// After the room was told something: its endpoints kept only for its members, and its
    /// recheck timer set for `ChatRoom.recheckAt`.
    private func settle(_ keys: some Sequence<ChatRoom.MemberKey>) {
        for key in keys where !room.isMember(key) { endpoints[key] = nil }
        rearm()
    }

    private func rearm() {
        guard recheck?.at != room.recheckAt else { return }
        if let recheck { context?.scheduler.cancel(recheck.id) }
        recheck = nil
        guard let context, let at = room.recheckAt else { return }
        let delay = Duration.nanoseconds(Int64(clamping: at &- min(at, context.scheduler.nowNanoseconds)))
        let id = context.scheduler.schedule(after: delay) { [weak self] in
            guard let self, let context = self.context else { return }
            self.recheck = nil
            self.room.advance(to: context.scheduler.nowNanoseconds)
            self.rearm()
        }
        recheck = (id, at)
    }

    // MARK: Members

    /// The name a central goes by: the last two octets of its address.
    static func name(of peer: ATTPeer) -> String {
        let text = peer.address.description
        return "central-" + text.suffix(5).replacingColons
    }

    public func subscriptionChanged(_ characteristic: Characteristic, peer: ATTPeer, notify: Bool, indicate: Bool) {
        guard characteristic === message || characteristic === frames else { return }
        let key = ChatRoom.key(link: peer.connectionHandle)
        let framed = characteristic === frames
        if notify, !framed, !room.admitsPlainClients {
            // A private room: a plain client could read nothing and post nothing. Told once (after
            // this write, once its notifications are on), not a member.
            context?.scheduler.schedule(after: .zero) { [weak self] in
                guard let self, let context = self.context else { return }
                for part in Self.parts(of: Self.privateRoomNotice, limit: context.attMTU(of: peer) - 3) {
                    context.notify(self.message, value: part, to: peer)
                }
            }
            context?.logger.notice("\(Self.name(of: peer)) subscribed as a plain client to the private room: told it cannot join")
            onPlainClientRefused?(peer)
            return
        }
        if notify, !room.isMember(key) { endpoints[key] = (peer, nil) }
        room.subscriptionChanged(key, name: Self.name(of: peer), framed: framed, notify: notify, now: now)
        settle([key])
    }

    public func peerDisconnected(_ peer: ATTPeer) {
        let keys = endpoints.keys.filter { ChatRoom.link(of: $0) == peer.connectionHandle }
        room.linkClosed(peer.connectionHandle, now: now)
        settle(keys)
    }

    /// Whether the host's own lines (`send`) should wait (`ChatRoom.isBusy`); `onRoom` says when to go on.
    public var isBusy: Bool { room.isBusy(at: now) }
    /// Whether a member that is taking its lines still has some waiting (`--exit-on-eof` waits for them).
    public var hasQueuedLines: Bool { room.hasQueuedLines(at: now) }
    /// Acknowledgements held now (for tests and the curious).
    public var heldAcknowledgementCount: Int { room.heldAcknowledgementCount }
    /// The names of the members now.
    public var memberNames: [String] { room.memberNames }
    /// How many members there are now.
    public var memberCount: Int { room.memberCount }
    /// The most bytes waiting for one member (`memberQueueByteLimit`).
    public var queuedBytes: Int { room.queuedBytes }
    /// How many of them are on the chat channel.
    public var channelMemberCount: Int { room.channelMemberCount }
    /// Members' messages with an empty sender, dropped (logged 1st, 2nd, 4th… time).
    public var forgedAnnouncements: Int { room.forgedAnnouncements }
    /// Joins past a link's budget, not announced (logged 1st, 2nd, 4th… time).
    public var unannouncedJoins: Int { room.unannouncedJoins }
    /// Frames on channels that were refused (did not decode, or unsigned in a signed-only room).
    public var refusedChannelFrames: Int { room.refusedChannelFrames }
    /// A plain client subscribed to a private room and was told so: its link may be closed.
    public var onPlainClientRefused: ((ATTPeer) -> Void)?

    // MARK: Messages

    /// A plain client's write: one message (the validator let only UTF-8 through).
    private func received(_ request: WriteRequest) {
        let key = ChatRoom.key(link: request.peer.connectionHandle)
        room.plainWrite(String(decoding: request.value, as: UTF8.self), from: key, name: Self.name(of: request.peer), now: now)
        rearm()
    }

    /// A blemu node's frame on Frames.
    private func receivedFrame(_ request: WriteRequest) {
        room.framesWrite(request.value.slice, from: ChatRoom.key(link: request.peer.connectionHandle), now: now)
        rearm()
    }

    /// The host's own line, to every member.
    public func send(_ text: String) {
        room.send(text, now: now)
        rearm()
    }

    /// A message with an identity of its own (a line of this node numbered by it, or one a
    /// bridge brings from another room), to every member; once, however often it is given.
    public func relay(_ id: ChatMessageID, text: String, hops: UInt8) {
        room.relay(id, text: text, hops: hops, now: now)
        rearm()
    }

    /// A plain client's own name (`ChatRoom.plainName`).
    public static func plainName(_ text: Substring) -> String? { ChatRoom.plainName(text) }
    /// UTF-8 pieces of at most `limit` bytes, never cutting a character (`ChatPlainLine.parts`).
    public static func parts(of text: String, limit: Int) -> [[UInt8]] { ChatPlainLine.parts(of: text, limit: limit) }

    public func peripheralIsReady() {
        room.flush(now: now)
        rearm()
    }

    // MARK: The chat channel

    public func channelOpened(_ channel: CreditBasedChannel) {
        // Not a member yet: its first frame (JOIN, or RESUME) makes it one, as subscribing does on Frames.
        context?.logger.notice("chat channel \(Hex.word(channel.localCID)) opened on link \(channel.linkHandle) (SPSM \(Hex.word(channel.spsm)))")
    }

    public func channel(_ channel: CreditBasedChannel, received sdu: ArraySlice<UInt8>) {
        let key = ChatRoom.key(link: channel.linkHandle, channel: channel.localCID)
        guard let context, let peer = context.peers.first(where: { $0.connectionHandle == channel.linkHandle }) else { return }
        if !room.isMember(key) { endpoints[key] = (peer, channel) }
        let keep = room.channelReceived(sdu, from: key, name: Self.name(of: peer), peerMTU: Int(channel.peerMTU), now: now)
        settle([key])
        if !keep { channel.disconnect() }
    }

    public func channelIsReady(_ channel: CreditBasedChannel) { peripheralIsReady() }

    public func channelClosed(_ channel: CreditBasedChannel, reason: ChannelCloseReason) {
        let key = ChatRoom.key(link: channel.linkHandle, channel: channel.localCID)
        room.channelClosed(key, now: now)
        settle([key])
    }
}

extension ChatDevice: ChatRoomLinks {
    public func notificationLimit(of member: ChatRoom.MemberKey) -> Int {
        guard let context, let endpoint = endpoints[member] else { return 20 }
        return context.attMTU(of: endpoint.peer) - 3
    }

    /// One notification on Message or Frames, or one SDU on the member's chat channel.
    public func transmit(_ part: [UInt8], on lane: ChatRoom.Lane, to member: ChatRoom.MemberKey) -> Bool {
        guard let context, let endpoint = endpoints[member] else { return false }
        if let channel = endpoint.channel { return channel.send(part) }
        return context.notify(lane == .message ? message : frames, value: part, to: endpoint.peer)
    }
}

/// How blemu members reach a chat host (`blemu chat --transport`): its L2CAP chat channel when
/// it has one (auto), only that (channel), or only GATT's Frames characteristic (gatt). A host
/// with `gatt` publishes no channel.
public enum ChatTransport: String, Sendable, CaseIterable {
    case auto, channel, gatt
}

/// A weak reference a characteristic's handler can hold before the device exists.
final class WeakBox<T: AnyObject> {
    weak var value: T?
}

extension Substring {
    var replacingColons: String { String(filter { $0 != ":" }) }
}
