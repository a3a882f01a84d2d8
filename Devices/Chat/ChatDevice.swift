import BlemuATT
import BlemuChannels
import BlemuChatProtocol
import BlemuCore
import BlemuGATT
import BlemuDevice
import DequeModule
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
public final class ChatDevice: Device, CreditBasedChannelDelegate {
    public static let deviceName = "chat"
    public static let summary = "chat room host: Chat 9f37e282-…, the seed app's plain protocol (one write or notification of UTF-8 text is one message), and framed messages between blemu nodes"

    public static let serviceUUID = BluetoothUUID("9f37e282-60b6-42b1-a02f-7341da5e2eba")!
    public static let messageUUID = BluetoothUUID("890aa912-c414-440d-88a2-c7f66179589b")!
    /// The framed chat between blemu nodes (`ChatFrame`, Docs/CHAT.md "Frames").
    public static let framesUUID = BluetoothUUID("7d3c0301-9a5e-4d1a-8f6e-5c1b2d3e4f50")!
    /// Lines waiting for one member, at most...
    public static let memberQueueLimit = 256
    /// ...and bytes (what its notifications or SDUs carry, and `partOverhead` each): a member
    /// of 4 KiB lines cannot hold a megabyte, as L2CAP bounds what waits on a channel.
    public static let memberQueueByteLimit = 128 * 1024
    /// What a queued notification or SDU costs beyond its bytes, counted against the limit.
    static let partOverhead = 32
    /// A member with this many lines (or half its bytes) waiting holds back the host's own lines (`isBusy`)...
    public static let busyThreshold = memberQueueLimit / 2
    public static let busyByteThreshold = memberQueueByteLimit / 2
    /// Joins (and so leaves) announced for one link in `announcementWindow`, at most: a link
    /// opening and closing chat channels in a loop does not flood the room (its members
    /// past that come and go unannounced, logged).
    public static let announcedJoinsPerLink = 4
    public static let announcementWindow: Duration = .seconds(60)
    /// ...unless it took nothing for this long: then it is too slow, and the room goes on.
    public static let stallLimit: Duration = .seconds(5)
    /// How many relays a message the host sends may still take (bridges count them down).
    public static let initialHops: UInt8 = 4

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

    /// The members have room for the host's lines again (`isBusy` turned false).
    public var onRoom: (() -> Void)?
    /// What the room says, for the host: an announcement, or a member's message with its
    /// identity and the relays it may still take (a bridge passes it on with one fewer).
    public enum Heard: Equatable {
        case announcement(String)
        case message(ChatMessageID, text: String, hops: UInt8)
    }
    /// Each announcement, and each member's message once (however often it was resent).
    public var onHeard: ((Heard) -> Void)?
    /// The host's own name in what members see.
    public var hostName = "host"
    /// Signatures and names bound to keys (Docs/CHAT.md, "Signed messages"): with it, the host
    /// signs its lines and announcements, checks every member's message before delivering or
    /// relaying it, shows unsigned ones as `~NAME` and, `signedOnly`, refuses them. Nil: the
    /// open room as before (any name, unchecked).
    public var trust: ChatTrust?

    private weak var context: DeviceContext?
    private struct Member {
        let peer: ATTPeer
        /// A blemu node on the chat channel: its frames are SDUs of it, one frame each.
        var channel: CreditBasedChannel?
        /// `central-` and the end of its address (`central-AA01`) until a framed message names it.
        var name: String
        /// The name its join was announced with, which its leave says too: one name for one
        /// member in the room's announcements (its messages carry the name they were sent with).
        let announcedName: String
        /// A blemu node, on the frames characteristic; else a plain client on Message.
        var framed: Bool
        /// A plain client wrote a line already: `/name NAME` counts only as its first.
        var hasWritten = false
        /// Lines waiting, each as the notifications it takes (cut to the member's ATT_MTU),
        /// with the characteristic they go on.
        private(set) var queue: Deque<(characteristic: Characteristic, parts: Deque<[UInt8]>)> = []
        /// What `queue` holds, in bytes (each part with `partOverhead`).
        private(set) var queuedBytes = 0
        var missed = 0
        /// The "you missed" note at the front of `queue`, not begun yet: how many lines it
        /// counts. Should it give way in turn, its count goes back to `missed` (it is no line).
        var noteAtFront: Int?
        /// Its join was announced, so its leave is (`announcedJoinsPerLink`).
        var announced = true
        /// Told that its sealed lines cannot be read here (a private room, another passphrase).
        var toldUnreadable = false
        /// Part of `queue.first` has gone out: the rest of it goes next, whole, before any
        /// "you missed" note, and it is never the line an overflow drops (either would cut
        /// into a line the member has half received: a plain client shows the note inside
        /// the line, a framed one's MOREs would follow the wrong DATA).
        var lineStarted = false
        var reassembly = ChatReassembly()
        /// When a notification last left for it (monotonic ns): a member that takes nothing
        /// for `stallLimit` no longer holds back the host's own lines.
        var lastProgress: UInt64 = 0
        /// Catching up after a RESUME: the sequence of the next history entry it gets. Live
        /// messages wait in the history meanwhile, so everything comes in order.
        var replayNext: UInt64?
        /// A live message (not an announcement) was queued for it: a RESUME from now on comes
        /// too late (it would replay older lines after newer ones).
        var heardLive = false

        static func size(of parts: some Sequence<[UInt8]>) -> Int {
            parts.reduce(0) { $0 + $1.count + ChatDevice.partOverhead }
        }
        mutating func append(_ characteristic: Characteristic, _ parts: [[UInt8]]) {
            queue.append((characteristic, Deque(parts)))
            queuedBytes += Self.size(of: parts)
        }
        mutating func prepend(_ characteristic: Characteristic, _ parts: [[UInt8]]) {
            queue.prepend((characteristic, Deque(parts)))
            queuedBytes += Self.size(of: parts)
        }
        mutating func removeLine(at index: Int) {
            queuedBytes -= Self.size(of: queue.remove(at: index).parts)
        }
        /// The first line's first part went out.
        mutating func removeFirstPart() {
            guard let part = queue[0].parts.popFirst() else { return }
            queuedBytes -= part.count + ChatDevice.partOverhead
        }
        /// Over the line or byte limit with `adding` bytes more.
        func isFull(adding bytes: Int) -> Bool {
            queue.count >= ChatDevice.memberQueueLimit || (!queue.isEmpty && queuedBytes + bytes > ChatDevice.memberQueueByteLimit)
        }
        /// Has as much waiting as it should (`busyThreshold`, `busyByteThreshold`).
        var isHalfFull: Bool { queue.count >= ChatDevice.busyThreshold || queuedBytes >= ChatDevice.busyByteThreshold }
    }
    /// The room's recent messages, for members that join again (RESUME): bounded in count and bytes.
    private struct HistoryEntry {
        let id: ChatMessageID
        let text: String
        let hops: UInt8
        var size: Int { text.utf8.count + (id.proof?.sealed?.count ?? 0) }
    }
    public static let historyLimit = 1024
    public static let historyByteLimit = 256 * 1024
    private var history: Deque<HistoryEntry> = []
    private var historyBytes = 0
    /// The sequence of `history.first`; entries are numbered in order from it.
    private var historyStart: UInt64 = 0
    /// RESUME points of links that have not subscribed yet (one per link; gone with the link).
    private var resumePoints: [UInt16: ChatMessageID] = [:]
    /// Keyed by `key(_:)`: a link's GATT member by its connection handle, a channel member by
    /// the channel's CID too (a link may carry both).
    private var members: [UInt32: Member] = [:]
    private static func key(_ handle: UInt16) -> UInt32 { UInt32(handle) }
    private static func key(of channel: CreditBasedChannel) -> UInt32 { UInt32(channel.localCID) << 16 | UInt32(channel.linkHandle) }
    /// Numbers start anywhere: a host that restarts must not reuse identities its members
    /// still remember (they would take new messages for resends).
    private var nextNumber = UInt32.random(in: 1...(UInt32.max / 2))
    /// Identities delivered, whichever link they came on: a member that resends on a new link
    /// what the old one carried gets it acknowledged, not delivered twice.
    private var delivered = ChatReassembly()

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
                                               box.value?.trust?.refusePlainWrite(from: Self.name(of: request.peer)) != true else {
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
                                        if case .data = frame, box.value?.trust?.refusePlainWrite(from: Self.name(of: request.peer)) == true {
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
        if psm != nil, spsm == 0 {
            spsm = context.publishL2CAPChannel(security: channelSecurity, parameters: ChannelParameters(mtu: Self.channelMTU),
                                               delegate: self) ?? 0
        }
    }

    public func stop() {
        if spsm != 0 { context?.unpublishL2CAPChannel(spsm) }
        spsm = 0
        for member in members.values { member.channel?.disconnect() }
        members.removeAll()
        if let busyCheck { context?.scheduler.cancel(busyCheck) }
        busyCheck = nil
    }

    // MARK: Members

    /// The name a central goes by: the last two octets of its address.
    static func name(of peer: ATTPeer) -> String {
        let text = peer.address.description
        return "central-" + text.suffix(5).replacingColons
    }

    public func subscriptionChanged(_ characteristic: Characteristic, peer: ATTPeer, notify: Bool, indicate: Bool) {
        guard characteristic === message || characteristic === frames else { return }
        let handle = Self.key(peer.connectionHandle)
        let framed = characteristic === frames
        if notify, !framed, trust?.roomKey != nil {
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
        if notify, members[handle] == nil {
            var member = Member(peer: peer, name: Self.name(of: peer), announcedName: Self.name(of: peer), framed: framed)
            member.lastProgress = context?.scheduler.nowNanoseconds ?? 0
            if framed, let point = resumePoints.removeValue(forKey: peer.connectionHandle) { catchUp(&member, after: point) }
            member.announced = spendJoinAnnouncement(link: peer.connectionHandle)
            members[handle] = member
            if member.announced { announce("* \(member.announcedName) joined", except: handle) }
            flush()
        } else if !notify, let member = members[handle], member.framed == framed {
            members[handle] = nil
            left(member)
            checkRoom()
        }
    }

    /// Joining again: what the room said after the last message the member had (`point`), first.
    private func catchUp(_ member: inout Member, after point: ChatMessageID) {
        if let index = history.lastIndex(where: { $0.id.isNamed(number: point.number, sender: point.sender) }) {
            member.replayNext = historyStart + UInt64(index) + 1
        } else {
            member.replayNext = historyStart
            let note = "* catching up: lines said before \(history.isEmpty ? "now" : "the oldest kept here") may be missing"
            member.append(frames, framesOf(Array(note.utf8), id: announcementID(note), hops: 0, for: member))
        }
    }

    public func peerDisconnected(_ peer: ATTPeer) {
        resumePoints[peer.connectionHandle] = nil
        // The stack ends the link's subscriptions first (subscriptionChanged); this is for safety.
        // Its channel members too (their channels end with the link).
        for key in members.keys.sorted() where UInt16(truncatingIfNeeded: key) == peer.connectionHandle {
            if let member = members.removeValue(forKey: key) { left(member) }
        }
        joinAnnouncements[peer.connectionHandle] = nil
        checkRoom()
    }

    /// Whether the host's own lines (`send`) should wait: a member that is taking its lines
    /// has `busyThreshold` of them waiting. The source of those lines (stdin) is paused rather
    /// than have the member's queue overflow; `onRoom` says when to go on. A member that took
    /// nothing for `stallLimit` does not count: it will hear that it missed lines.
    public var isBusy: Bool {
        guard let context else { return false }
        let now = context.scheduler.nowNanoseconds
        let stall = UInt64(Self.stallLimit.components.seconds) * 1_000_000_000
        return members.values.contains { $0.isHalfFull && now &- $0.lastProgress < stall }
    }
    private var wasBusy = false
    private var busyCheck: TimerID?

    /// Whether a member that is taking its lines still has some waiting (`--exit-on-eof`
    /// waits for them); one that took nothing for `stallLimit` does not count.
    public var hasQueuedLines: Bool {
        guard let context else { return false }
        let now = context.scheduler.nowNanoseconds
        let stall = UInt64(Self.stallLimit.components.seconds) * 1_000_000_000
        return members.values.contains { !$0.queue.isEmpty && now &- $0.lastProgress < stall }
    }

    /// Tells `onRoom` once `isBusy` is over: after a flush, or when the member holding the
    /// host back has stalled for `stallLimit`.
    private func checkRoom() {
        guard let context else { return }
        if isBusy {
            wasBusy = true
            if busyCheck == nil {
                busyCheck = context.scheduler.schedule(after: Self.stallLimit) { [weak self] in
                    self?.busyCheck = nil
                    self?.checkRoom()
                }
            }
        } else {
            // Nothing after `onRoom` and the release reads state from before them: both may
            // send (and so check the room again) before they return.
            if wasBusy {
                wasBusy = false
                if let busyCheck { context.scheduler.cancel(busyCheck) }
                busyCheck = nil
                onRoom?()
            }
            if !isBusy { releaseAcknowledgements() }
        }
    }

    /// Acknowledgements of members' messages held while the room is busy (`isBusy`): a member
    /// that sends faster than another keeping-up member takes its lines (a channel member's burst
    /// to a GATT member) runs out of its window and waits, as the host's own lines wait, instead
    /// of pushing the slow member's oldest lines out. Bounded: past the limit, acknowledged at once.
    private var heldAcknowledgements: Deque<(id: ChatMessageID, to: UInt32)> = []
    public static let heldAcknowledgementLimit = 1024
    /// Acknowledgements held now (for tests and the curious).
    public var heldAcknowledgementCount: Int { heldAcknowledgements.count }
    private var isReleasingAcknowledgements = false

    private func acknowledgeWhenRoom(_ id: ChatMessageID, to handle: UInt32) {
        guard isBusy, heldAcknowledgements.count < Self.heldAcknowledgementLimit else { return acknowledge(id, to: handle) }
        heldAcknowledgements.append((id, handle))
        checkRoom()
    }

    private func releaseAcknowledgements() {
        guard !isReleasingAcknowledgements, !heldAcknowledgements.isEmpty else { return }
        isReleasingAcknowledgements = true
        while let (id, handle) = heldAcknowledgements.popFirst() {
            let limit = members[handle].map { self.limit(for: $0) } ?? 20
            enqueue(frames, [ChatFrame.acknowledgement(of: id, limit: limit)], to: handle)
        }
        flush()
        isReleasingAcknowledgements = false
    }

    /// The names of the members now.
    public var memberNames: [String] { members.values.map(\.name).sorted() }
    /// The most bytes waiting for one member (`memberQueueByteLimit`).
    public var queuedBytes: Int { members.values.map(\.queuedBytes).max() ?? 0 }
    /// How many of them are on the chat channel.
    public var channelMemberCount: Int { members.values.filter { $0.channel != nil }.count }

    // MARK: Messages

    /// A plain client's write: one message.
    private func received(_ request: WriteRequest) {
        // The validator let only UTF-8 through.
        let text = String(decoding: request.value, as: UTF8.self)
        guard !text.isEmpty else { return }
        let handle = Self.key(request.peer.connectionHandle)
        if var member = members[handle], !member.framed, !member.hasWritten {
            member.hasWritten = true
            // `/name NAME` as a plain client's first line: its lines go under NAME from now on
            // (unverified all the same: `~NAME` where the room has trust).
            if text.hasPrefix(Self.nameCommand), let name = Self.plainName(text.dropFirst(Self.nameCommand.count)) {
                let before = member.name
                member.name = name
                members[handle] = member
                context?.logger.notice("\(before) is named \(name.visible) (its /name line)")
                announce("* \(before) is \(trust != nil ? ChatTrust.unverifiedMark : "")\(name)", except: nil)
                return
            }
            members[handle] = member
        }
        var sender = members[handle]?.name ?? Self.name(of: request.peer)
        // A plain client cannot sign: unverified, never under a name a key holds.
        if trust != nil, !sender.hasPrefix(ChatTrust.unverifiedMark) { sender = ChatTrust.unverifiedMark + sender }
        let id = ChatMessageID(sender: sender, number: takeNumber())
        delivered.remember(id)
        onHeard?(.message(id, text: text, hops: Self.initialHops))
        deliver(id, text: text, hops: Self.initialHops, except: handle)
    }

    /// A blemu node's frame: a piece of a message, or an acknowledgement (which a host has no use for).
    private func receivedFrame(_ request: WriteRequest) {
        guard let frame = try? ChatFrame(decoding: request.value.slice) else { return }
        let handle = Self.key(request.peer.connectionHandle)
        if case let .resume(number, sender) = frame, members[handle] == nil {
            // Before it subscribes (Docs/CHAT.md): kept until then.
            resumePoints[request.peer.connectionHandle] = ChatMessageID(sender: sender, number: number)
            return
        }
        take(frame, from: handle)
    }

    /// A frame of a member (on Frames or its channel).
    private func take(_ frame: ChatFrame, from handle: UInt32) {
        if case .join = frame { return }   // a channel's first frame: it joined with it
        if case let .resume(number, sender) = frame {
            let point = ChatMessageID(sender: sender, number: number)
            guard var member = members[handle] else { return }
            // A bonded member's subscription is back as soon as its link is encrypted with the
            // bond (Vol 3, Part G, 3.3.3.3), before its RESUME can pass when the room needs
            // encryption (`--require-encryption`): taken while the room has sent it nothing yet.
            guard member.framed, member.replayNext == nil, !member.heardLive else { return }
            catchUp(&member, after: point)
            members[handle] = member
            flush()
            return
        }
        // A node that never subscribed is not a member: it would not hear the acknowledgement.
        guard var member = members[handle] else { return }
        var outcome = member.reassembly.take(frame)
        if case let .message(claimed, bytes, hops) = outcome {
            // Announcements are the host's: a member's message with no sender goes nowhere.
            guard !claimed.sender.isEmpty else {
                members[handle] = member
                forgedAnnouncements += 1
                if forgedAnnouncements & (forgedAnnouncements - 1) == 0 {
                    context?.logger.warning("\(member.announcedName) wrote a message with an empty sender (an announcement is the host's): dropped (\(forgedAnnouncements) so far)")
                }
                return
            }
            // Checked before anything else sees it: refused (still acknowledged, so an honest
            // member does not resend it forever), or delivered under the identity trust gives it.
            if let trust {
                guard let checked = trust.check(claimed, text: bytes, from: handle) else {
                    members[handle] = member
                    return acknowledge(claimed, to: handle)
                }
                outcome = .message(checked, text: bytes, hops: hops)
                // A private room's host that cannot open a member's sealed line: the member's
                // passphrase is another one. It is told, once (the room hears the line named).
                if trust.roomKey != nil, checked.proof?.sealed != nil, !member.toldUnreadable, trust.open(checked) == nil {
                    member.toldUnreadable = true
                    let note = Self.unreadableLinesNotice
                    member.append(frames, framesOf(Array(note.utf8), id: announcementID(note), hops: 0, for: member))
                    context?.logger.notice("\(member.announcedName)'s sealed lines cannot be opened here: another passphrase, told it")
                }
            }
        }
        // A blemu node names itself in its own messages (a bridge's relayed ones have fewer hops).
        if case .message(let id, _, let hops) = outcome, hops == Self.initialHops, !id.sender.isEmpty,
           member.name.hasPrefix("central-") { member.name = id.sender }
        members[handle] = member
        switch outcome {
        case .incomplete, .inconsistent:
            return
        case .duplicate(let id):
            // A resend of a message delivered before: acknowledged again, delivered no more.
            acknowledge(id, to: handle)
        case let .message(id, bytes, hops):
            acknowledgeWhenRoom(id, to: handle)
            guard !delivered.hasDelivered(id) else { return }
            delivered.remember(id)
            let text = String(decoding: bytes, as: UTF8.self)
            onHeard?(.message(id, text: text, hops: hops))
            deliver(id, text: text, hops: hops, except: handle)
        }
    }

    private func takeNumber() -> UInt32 {
        defer { nextNumber &+= 1 }
        return nextNumber
    }

    /// The host's own line, to every member.
    public func send(_ text: String) {
        guard !text.isEmpty else { return }
        let plain = ChatMessageID(sender: hostName, number: takeNumber())
        let id = trust?.sign(plain, text: Array(text.utf8)) ?? plain
        delivered.remember(id)
        deliver(id, text: text, hops: Self.initialHops, except: nil)
    }

    /// A message with an identity of its own (a line of this node numbered by it, or one a
    /// bridge brings from another room), to every member; once, however often it is given.
    public func relay(_ id: ChatMessageID, text: String, hops: UInt8) {
        // A sealed message's text is in its proof (`text` is empty where it cannot be read).
        guard !text.isEmpty || id.proof?.sealed != nil, !delivered.hasDelivered(id) else { return }
        delivered.remember(id)
        deliver(id, text: text, hops: hops, except: nil)
    }

    private func announce(_ text: String, except handle: UInt32?) {
        onHeard?(.announcement(text))
        deliver(announcementID(text), text: text, hops: 0, except: handle)
    }

    /// A new announcement's identity: no sender, the host's number, signed when it has a key.
    private func announcementID(_ text: String) -> ChatMessageID {
        let id = ChatMessageID(sender: "", number: takeNumber())
        return trust?.sign(id, text: Array(text.utf8), sealing: false) ?? id
    }
    /// A plain client's first line `/name NAME` names it (Docs/CHAT.md, "Plain clients").
    public static let nameCommand = "/name "

    /// A plain client's own name: 1 to `ChatFrame.maxSenderBytes` bytes once trimmed, not
    /// starting with the unverified mark; nil otherwise (the line is then an ordinary one).
    public static func plainName(_ text: Substring) -> String? {
        let name = String(text.drop { $0 == " " }.reversed().drop { $0 == " " }.reversed())
        guard !name.isEmpty, name.utf8.count <= ChatFrame.maxSenderBytes, !name.hasPrefix(ChatTrust.unverifiedMark) else { return nil }
        return name
    }

    /// What a member of a private room whose sealed lines the host cannot open is told (once).
    public static let unreadableLinesNotice = "* your lines cannot be read in this room: they are sealed with another passphrase than the host's"
    /// What a plain client that subscribes to a private room is told.
    public static let privateRoomNotice = "* this room is private: plain clients cannot join it"
    /// A plain client subscribed to a private room and was told so: its link may be closed.
    public var onPlainClientRefused: ((ATTPeer) -> Void)?
    /// Members' messages with an empty sender, dropped (logged 1st, 2nd, 4th… time).
    public private(set) var forgedAnnouncements = 0

    private func acknowledge(_ id: ChatMessageID, to handle: UInt32) {
        let limit = members[handle].map { self.limit(for: $0) } ?? 20
        enqueue(frames, [ChatFrame.acknowledgement(of: id, limit: limit)], to: handle)
        flush()
    }

    /// A message to every member but `handle`: framed members get its frames, plain ones
    /// `SENDER: text` (an announcement as it is), cut to their ATT_MTU.
    private func deliver(_ id: ChatMessageID, text: String, hops: UInt8, except handle: UInt32?) {
        guard context != nil else { return }
        if !id.sender.isEmpty { remember(HistoryEntry(id: id, text: text, hops: hops)) }
        for key in members.keys.sorted() where key != handle {
            guard let member = members[key], member.replayNext == nil else { continue }   // a member catching up gets it from the history
            let limit = self.limit(for: member)
            if id.proof?.sealed != nil, !member.framed { continue }   // a plain client could not read it
            if member.framed {
                if !id.sender.isEmpty { members[key]?.heardLive = true }
                enqueue(frames, framesOf(Array(text.utf8), id: id, hops: hops, for: member), to: key)
            } else {
                // A signed line whose name could not be bound shows unverified (`~NAME`) there too.
                let sender = trust?.shownSender(id) ?? id.sender
                enqueue(message, Self.parts(of: sender.isEmpty ? text : "\(sender): \(text)", limit: limit), to: key)
            }
        }
        flush()
    }

    private func remember(_ entry: HistoryEntry) {
        history.append(entry)
        historyBytes += entry.size
        while history.count > Self.historyLimit || historyBytes > Self.historyByteLimit, let oldest = history.first {
            history.removeFirst()
            historyBytes -= oldest.size
            historyStart += 1
        }
    }

    /// Tops up a catching-up member's queue from the history, as far as `busyThreshold`.
    private func replay(to member: inout Member) {
        guard var next = member.replayNext else { return }
        if next < historyStart {
            // Gone from the history while it caught up: counted, never silent.
            member.missed += Int(historyStart - next)
            next = historyStart
        }
        while !member.isHalfFull, next < historyStart + UInt64(history.count) {
            let entry = history[Int(next - historyStart)]
            member.append(frames, framesOf(Array(entry.text.utf8), id: entry.id, hops: entry.hops, for: member))
            next += 1
        }
        member.replayNext = next < historyStart + UInt64(history.count) ? next : nil
    }

    private func enqueue(_ characteristic: Characteristic, _ parts: [[UInt8]], to handle: UInt32) {
        guard var member = members[handle] else { return }
        let bytes = Member.size(of: parts)
        while member.isFull(adding: bytes), member.queue.count > (member.lineStarted ? 1 : 0) {
            // Never a silent drop: the member is told how many lines it missed. The oldest
            // lines not yet begun give way (a half-sent one is finished).
            let index = member.lineStarted ? 1 : 0
            member.removeLine(at: index)
            if index == 0, let counted = member.noteAtFront {
                member.missed += counted
                member.noteAtFront = nil
            } else {
                member.missed += 1
            }
        }
        member.append(characteristic, parts)
        members[handle] = member
    }

    /// Sends what each member's queue holds, in order, until its link is full; a member whose
    /// link is full waits for `peripheralIsReady` without holding up the others.
    private func flush() {
        guard let context else { return }
        for key in members.keys.sorted() {
            guard var member = members[key] else { continue }
            replay(to: &member)
            sending: while true {
                if member.missed > 0, !member.lineStarted {
                    // On a line of its own, between two whole lines: queued first, so a link
                    // that fills halfway through the note finishes it before anything else.
                    let text = "* you missed \(member.missed) line(s): too slow"
                    let note = member.framed
                        ? framesOf(Array(text.utf8), id: announcementID(text), hops: 0, for: member)
                        : [Array(text.utf8.prefix(limit(for: member)))]
                    member.prepend(member.framed ? frames : message, note)
                    member.noteAtFront = member.missed
                    member.missed = 0
                }
                if member.queue.isEmpty { replay(to: &member) }
                guard let line = member.queue.first else { break }
                while let part = member.queue[0].parts.first {
                    guard transmit(part, on: line.characteristic, to: member) else { break sending }
                    member.removeFirstPart()
                    member.noteAtFront = nil   // begun: it is finished, never dropped
                    member.lineStarted = !member.queue[0].parts.isEmpty
                    member.lastProgress = context.scheduler.nowNanoseconds
                }
                member.removeLine(at: 0)
            }
            members[key] = member
        }
        checkRoom()
    }

    /// UTF-8 pieces of at most `limit` bytes (20 at least, ATT's default; 512 at most, the
    /// longest attribute value), never cutting a character — but one longer than `limit` (a
    /// letter with many combining marks), which is cut between its scalars, never inside one:
    /// every piece is UTF-8 and nothing is lost.
    public static func parts(of text: String, limit: Int) -> [[UInt8]] {
        let limit = min(512, max(20, limit))
        var parts: [[UInt8]] = []
        var current: [UInt8] = []
        func add(_ bytes: some Collection<UInt8>) {
            if current.count + bytes.count > limit, !current.isEmpty {
                parts.append(current)
                current = []
            }
            current += bytes
        }
        for character in text {
            let bytes = String(character).utf8
            if bytes.count <= limit {
                add(bytes)
            } else {
                // A scalar is at most 4 bytes, and `limit` at least 20.
                for scalar in character.unicodeScalars { add(String(scalar).utf8) }
            }
        }
        if !current.isEmpty { parts.append(current) }
        return parts
    }

    public func peripheralIsReady() { flush() }

    // MARK: The chat channel

    /// The most a notification (ATT_MTU - 3) or a channel's frame may carry for `member`.
    private func limit(for member: Member) -> Int {
        member.channel != nil ? ChatFrame.largestFrame : (context?.attMTU(of: member.peer) ?? 23) - 3
    }

    /// A message's frames for `member`: on its channel one whole frame (one SDU), on Frames
    /// DATA and MOREs cut to its ATT_MTU.
    private func framesOf(_ text: [UInt8], id: ChatMessageID, hops: UInt8, for member: Member) -> [[UInt8]] {
        member.channel != nil ? [ChatFrame.channelFrame(of: text, id: id, hops: hops)]
            : ChatFrame.frames(of: text, id: id, hops: hops, limit: limit(for: member))
    }

    /// One notification, or one SDU on the member's channel; false when its link or channel is
    /// full (`peripheralIsReady` or `channelIsReady` follows).
    private func transmit(_ part: [UInt8], on characteristic: Characteristic, to member: Member) -> Bool {
        guard let context else { return false }
        if let channel = member.channel { return channel.send(part) }
        return context.notify(characteristic, value: part, to: member.peer)
    }

    /// Per link: when its window of join announcements began and how many it had.
    private var joinAnnouncements: [UInt16: (start: UInt64, count: Int)] = [:]
    /// Joins past a link's budget, not announced (logged 1st, 2nd, 4th… time).
    public private(set) var unannouncedJoins = 0

    /// Whether a new member of `link` is announced: at most `announcedJoinsPerLink` a window.
    private func spendJoinAnnouncement(link: UInt16) -> Bool {
        let now = context?.scheduler.nowNanoseconds ?? 0
        let window = UInt64(Self.announcementWindow.components.seconds) * 1_000_000_000
        var budget = joinAnnouncements[link] ?? (now, 0)
        if now &- budget.start >= window { budget = (now, 0) }
        guard budget.count < Self.announcedJoinsPerLink else {
            unannouncedJoins += 1
            if unannouncedJoins & (unannouncedJoins - 1) == 0 {
                context?.logger.warning("link \(link) joined the chat room more than \(Self.announcedJoinsPerLink) times in \(Self.announcementWindow): its joins and leaves are not announced for now (\(unannouncedJoins) so far)")
            }
            return false
        }
        budget.count += 1
        joinAnnouncements[link] = budget
        return true
    }

    /// A member is gone: its leave is announced where its join was.
    private func left(_ member: Member) {
        if member.announced { announce("* \(member.announcedName) left", except: nil) }
    }

    /// Frames on channels that were refused (did not decode, or unsigned in a signed-only room).
    public private(set) var refusedChannelFrames = 0

    public func channelOpened(_ channel: CreditBasedChannel) {
        // Not a member yet: its first frame (JOIN, or RESUME) makes it one, as subscribing does on Frames.
        context?.logger.notice("chat channel \(Hex.word(channel.localCID)) opened on link \(channel.linkHandle) (SPSM \(Hex.word(channel.spsm)))")
    }

    public func channel(_ channel: CreditBasedChannel, received sdu: ArraySlice<UInt8>) {
        let key = Self.key(of: channel)
        guard let context, let peer = context.peers.first(where: { $0.connectionHandle == channel.linkHandle }) else { return }
        // What Frames' validator refuses with ATT error 0x13 is dropped here, counted and logged.
        let frame: ChatFrame
        do {
            frame = try ChatFrame(decoding: sdu)
        } catch {
            return refusedChannelFrame(from: peer, "\(error)")
        }
        if case .data = frame, trust?.refusePlainWrite(from: Self.name(of: peer)) == true {
            return refusedChannelFrame(from: peer, "an unsigned message in a signed-only room")
        }
        if members[key] == nil {
            // One channel member a link: a second channel would hear the room twice over, a
            // queue more on one link. And a channel whose MTU cannot take the largest frame
            // (a whole SEALED message) would never be sent some lines: neither is a member.
            let why: String? = if Int(channel.peerMTU) < ChatFrame.largestFrame {
                "its MTU \(channel.peerMTU) cannot take a whole frame (\(ChatFrame.largestFrame) bytes)"
            } else if members.values.contains(where: { $0.channel != nil && $0.peer.connectionHandle == channel.linkHandle }) {
                "its link has a chat channel member already"
            } else { nil }
            if let why {
                refusedChannelFrame(from: peer, "\(why): the channel is closed")
                channel.disconnect()
                return
            }
            var member = Member(peer: peer, name: Self.name(of: peer), announcedName: Self.name(of: peer), framed: true)
            member.channel = channel
            member.lastProgress = context.scheduler.nowNanoseconds
            if case let .resume(number, sender) = frame { catchUp(&member, after: ChatMessageID(sender: sender, number: number)) }
            member.announced = spendJoinAnnouncement(link: channel.linkHandle)
            members[key] = member
            if member.announced { announce("* \(member.announcedName) joined", except: key) }
            flush()
            if case .resume = frame { return }
        }
        take(frame, from: key)
    }

    private func refusedChannelFrame(from peer: ATTPeer, _ why: String) {
        refusedChannelFrames += 1
        if refusedChannelFrames & (refusedChannelFrames - 1) == 0 {
            context?.logger.warning("\(Self.name(of: peer)) sent a chat frame that is refused on its channel (\(why)): dropped (\(refusedChannelFrames) so far)")
        }
    }

    public func channelIsReady(_ channel: CreditBasedChannel) { flush() }

    public func channelClosed(_ channel: CreditBasedChannel, reason: ChannelCloseReason) {
        guard let member = members.removeValue(forKey: Self.key(of: channel)) else { return }
        left(member)
        checkRoom()
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
