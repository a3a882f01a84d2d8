import BlemuCore
import DequeModule
import Logging

/// What a `ChatRoom` needs of the links its members are on: the chat device (`Devices/Chat`)
/// answers for GATT (a notification on Message or Frames) and for L2CAP chat channels (an SDU).
public protocol ChatRoomLinks: AnyObject {
    /// The most one notification may carry to a member on GATT (its ATT_MTU - 3).
    func notificationLimit(of member: ChatRoom.MemberKey) -> Int
    /// One notification on `lane`, or one SDU on the member's chat channel (whatever `lane`);
    /// false when its link or channel is full (the device then calls `flush` when it has room).
    func transmit(_ part: [UInt8], on lane: ChatRoom.Lane, to member: ChatRoom.MemberKey) -> Bool
}

/// A chat room as its host keeps it (Docs/CHAT.md), without GATT or L2CAP: who is a member
/// (plain clients on Message, blemu nodes on Frames or a chat channel), joins and leaves
/// announced within a budget a link, each member's message checked (`ChatTrust`), delivered
/// once, acknowledged and passed to every other member in the order the host took it; each
/// member's own bounded queue (lines, bytes; the oldest give way to a "you missed" note, never
/// silently), the history RESUME replays from (bounded), and whether the host's own lines
/// should wait (`isBusy`). Time is handed in (`now`, monotonic nanoseconds): the room says when
/// it next needs to look (`recheckAt`) and `advance(to:)` looks. What goes out goes through
/// `links`; before it has them (the device not started) the room says nothing.
public final class ChatRoom {
    /// Lines waiting for one member, at most...
    public static let memberQueueLimit = 256
    /// ...and bytes (what its notifications or SDUs carry, and `partOverhead` each): a member
    /// of 4 KiB lines cannot hold a megabyte, as L2CAP bounds what waits on a channel.
    public static let memberQueueByteLimit = 128 * 1024
    /// What a queued notification or SDU costs beyond its bytes, counted against the limit.
    public static let partOverhead = 32
    /// A member with this many lines (or half its bytes) waiting holds back the host's own lines (`isBusy`)...
    public static let busyThreshold = memberQueueLimit / 2
    public static let busyByteThreshold = memberQueueByteLimit / 2
    /// ...unless it took nothing for this long: then it is too slow, and the room goes on.
    public static let stallLimit: Duration = .seconds(5)
    /// Joins (and so leaves) announced for one link in `announcementWindow`, at most: a link
    /// opening and closing chat channels in a loop does not flood the room (its members
    /// past that come and go unannounced, logged).
    public static let announcedJoinsPerLink = 4
    public static let announcementWindow: Duration = .seconds(60)
    /// How many relays a message the host sends may still take (bridges count them down).
    public static let initialHops: UInt8 = 4
    /// The room's recent messages kept for members that join again (RESUME): at most...
    public static let historyLimit = 1024
    /// ...and bytes (texts, and sealed texts).
    public static let historyByteLimit = 256 * 1024
    /// Acknowledgements held while the room is busy, at most: past it, acknowledged at once.
    public static let heldAcknowledgementLimit = 1024
    /// A plain client's first line `/name NAME` names it (Docs/CHAT.md, "Plain clients").
    public static let nameCommand = "/name "
    /// What a member of a private room whose sealed lines the host cannot open is told (once).
    public static let unreadableLinesNotice = "* your lines cannot be read in this room: they are sealed with another passphrase than the host's"
    /// What a plain client that subscribes to a private room is told.
    public static let privateRoomNotice = "* this room is private: plain clients cannot join it"

    /// A member: a link's GATT member by its connection handle, a channel member by the
    /// channel's local CID too (a link may carry both).
    public typealias MemberKey = UInt32
    public static func key(link: UInt16) -> MemberKey { UInt32(link) }
    public static func key(link: UInt16, channel localCID: UInt16) -> MemberKey { UInt32(localCID) << 16 | UInt32(link) }
    public static func link(of key: MemberKey) -> UInt16 { UInt16(truncatingIfNeeded: key) }

    /// Where a member's line goes on GATT: Message (plain clients) or Frames (blemu nodes).
    public enum Lane: Sendable { case message, frames }

    /// What the room says, for the host: an announcement, or a member's message with its
    /// identity and the relays it may still take (a bridge passes it on with one fewer).
    public enum Heard: Equatable {
        case announcement(String)
        case message(ChatMessageID, text: String, hops: UInt8)
    }

    /// The members have room for the host's lines again (`isBusy` turned false).
    public var onRoom: (() -> Void)?
    /// Each announcement, and each member's message once (however often it was resent).
    public var onHeard: ((Heard) -> Void)?
    /// A member joined or left (announced or not): `memberCount` changed (systemd's STATUS= line).
    public var onMembersChanged: (() -> Void)?
    /// The host's own name in what members see.
    public var hostName = "host"
    /// Signatures and names bound to keys (Docs/CHAT.md, "Signed messages"): with it, the host
    /// signs its lines and announcements, checks every member's message before delivering or
    /// relaying it, shows unsigned ones as `~NAME` and, `signedOnly`, refuses them. Nil: the
    /// open room (any name, unchecked).
    public var trust: ChatTrust?
    /// Where what the room says goes; nil (not started): nothing goes, nothing is kept.
    public weak var links: ChatRoomLinks?
    public var logger: Logger?

    /// Members' messages with an empty sender, dropped (logged 1st, 2nd, 4th… time).
    public private(set) var forgedAnnouncements = 0
    /// Joins past a link's budget, not announced (logged 1st, 2nd, 4th… time).
    public private(set) var unannouncedJoins = 0
    /// Frames on channels that were refused (did not decode, or unsigned in a signed-only room).
    public private(set) var refusedChannelFrames = 0
    /// When the room must look again (`advance(to:)`): a member holding the host's lines back
    /// may have stalled by then (`stallLimit`). Nil: nothing to look at.
    public private(set) var recheckAt: UInt64?

    private var members: [MemberKey: ChatRoomMember] = [:]

    private struct HistoryEntry {
        let id: ChatMessageID
        let text: String
        let hops: UInt8
        var size: Int { text.utf8.count + (id.proof?.sealed?.count ?? 0) }
    }
    private var history: Deque<HistoryEntry> = []
    private var historyBytes = 0
    /// The sequence of `history.first`; entries are numbered in order from it.
    private var historyStart: UInt64 = 0
    /// RESUME points of links that have not subscribed yet (one per link; gone with the link).
    private var resumePoints: [UInt16: ChatMessageID] = [:]
    /// The host's numbers (its lines, announcements and plain clients' lines).
    private var nextNumber: UInt32
    /// Identities delivered, whichever link they came on: a member that resends on a new link
    /// what the old one carried gets it acknowledged, not delivered twice.
    private var delivered = ChatReassembly()
    /// Per link: when its window of join announcements began and how many it had.
    private var joinAnnouncements: [UInt16: (start: UInt64, count: Int)] = [:]
    /// Acknowledgements of members' messages held while the room is busy (`isBusy`): a member
    /// that sends faster than another keeping-up member takes its lines (a channel member's burst
    /// to a GATT member) runs out of its window and waits, as the host's own lines wait, instead
    /// of pushing the slow member's oldest lines out. Bounded: past the limit, acknowledged at once.
    private var heldAcknowledgements: Deque<(id: ChatMessageID, to: MemberKey)> = []
    private var isReleasingAcknowledgements = false
    private var wasBusy = false

    /// `firstNumber`: where the host's numbers start. Anywhere by default: a host that restarts
    /// must not reuse identities its members still remember (they would take new messages for resends).
    public init(firstNumber: UInt32 = .random(in: 1...(UInt32.max / 2))) {
        nextNumber = firstNumber
    }

    // MARK: Members

    /// Whether `key` is a member now.
    public func isMember(_ key: MemberKey) -> Bool { members[key] != nil }
    /// The names of the members now.
    public var memberNames: [String] { members.values.map(\.name).sorted() }
    /// How many members there are now.
    public var memberCount: Int { members.count }
    /// The most bytes waiting for one member (`memberQueueByteLimit`).
    public var queuedBytes: Int { members.values.map(\.queuedBytes).max() ?? 0 }
    /// How many of them are on a chat channel.
    public var channelMemberCount: Int { members.values.filter(\.onChannel).count }
    /// Acknowledgements held now (for tests and the curious).
    public var heldAcknowledgementCount: Int { heldAcknowledgements.count }
    /// Whether a plain client may join: not in a private room (it could read nothing and post nothing).
    public var admitsPlainClients: Bool { trust?.roomKey == nil }
    /// A signed-only room takes no unsigned message from `name` (counted by `trust`).
    public func refusesPlainWrite(from name: String) -> Bool { trust?.refusePlainWrite(from: name) == true }

    /// A central subscribed to (`notify`) or unsubscribed from Message (plain) or Frames
    /// (`framed`): it joins, announced, caught up first when it wrote RESUME before; or leaves.
    /// A plain client of a private room (`admitsPlainClients`) is the device's to refuse.
    public func subscriptionChanged(_ key: MemberKey, name: String, framed: Bool, notify: Bool, now: UInt64) {
        if notify, members[key] == nil {
            var member = ChatRoomMember(key: key, onChannel: false, name: name, framed: framed, now: now)
            if framed, let point = resumePoints.removeValue(forKey: Self.link(of: key)) { catchUp(&member, after: point) }
            admit(member, now: now)
        } else if !notify, let member = members[key], member.framed == framed {
            members[key] = nil
            left(member, now: now)
            checkRoom(now: now)
        }
    }

    private func admit(_ joining: ChatRoomMember, now: UInt64) {
        var member = joining
        member.announced = spendJoinAnnouncement(link: Self.link(of: member.key), now: now)
        members[member.key] = member
        if member.announced { announce("* \(member.announcedName) joined", except: member.key, now: now) }
        flush(now: now)
        onMembersChanged?()
    }

    /// Joining again: what the room said after the last message the member had (`point`), first.
    private func catchUp(_ member: inout ChatRoomMember, after point: ChatMessageID) {
        if let index = history.lastIndex(where: { $0.id.isNamed(number: point.number, sender: point.sender) }) {
            member.replayNext = historyStart + UInt64(index) + 1
        } else {
            member.replayNext = historyStart
            let note = "* catching up: lines said before \(history.isEmpty ? "now" : "the oldest kept here") may be missing"
            member.append(.frames, framesOf(Array(note.utf8), id: announcementID(note), hops: 0, for: member))
        }
    }

    /// A link closed: its members leave (the stack ends its subscriptions first; this is for
    /// safety), its channel members too, and what it kept (RESUME point, join budget) goes.
    public func linkClosed(_ link: UInt16, now: UInt64) {
        resumePoints[link] = nil
        for key in members.keys.sorted() where Self.link(of: key) == link {
            if let member = members.removeValue(forKey: key) { left(member, now: now) }
        }
        joinAnnouncements[link] = nil
        checkRoom(now: now)
    }

    /// A member's chat channel closed: it leaves.
    public func channelClosed(_ key: MemberKey, now: UInt64) {
        guard let member = members.removeValue(forKey: key) else { return }
        left(member, now: now)
        checkRoom(now: now)
    }

    /// The device stopped: every member is gone, unannounced.
    public func removeAllMembers() {
        let hadMembers = !members.isEmpty
        members.removeAll()
        recheckAt = nil
        if hadMembers { onMembersChanged?() }
    }

    /// Whether a new member of `link` is announced: at most `announcedJoinsPerLink` a window.
    private func spendJoinAnnouncement(link: UInt16, now: UInt64) -> Bool {
        var budget = joinAnnouncements[link] ?? (now, 0)
        if now &- budget.start >= Self.announcementWindow.nanoseconds { budget = (now, 0) }
        guard budget.count < Self.announcedJoinsPerLink else {
            unannouncedJoins += 1
            if unannouncedJoins & (unannouncedJoins - 1) == 0 {
                logger?.warning("link \(link) joined the chat room more than \(Self.announcedJoinsPerLink) times in \(Self.announcementWindow): its joins and leaves are not announced for now (\(unannouncedJoins) so far)")
            }
            return false
        }
        budget.count += 1
        joinAnnouncements[link] = budget
        return true
    }

    /// A member is gone: its leave is announced where its join was.
    private func left(_ member: ChatRoomMember, now: UInt64) {
        if member.announced { announce("* \(member.announcedName) left", except: nil, now: now) }
        onMembersChanged?()
    }

    // MARK: What members write

    /// A plain client's write (UTF-8, checked by the device): one message. `name` is what the
    /// writer goes by when it is no member.
    public func plainWrite(_ text: String, from key: MemberKey, name: String, now: UInt64) {
        guard !text.isEmpty else { return }
        if var member = members[key], !member.framed, !member.hasWritten {
            member.hasWritten = true
            // `/name NAME` as a plain client's first line: its lines go under NAME from now on
            // (unverified all the same: `~NAME` where the room has trust).
            if text.hasPrefix(Self.nameCommand), let name = Self.plainName(text.dropFirst(Self.nameCommand.count)) {
                let before = member.name
                member.name = name
                members[key] = member
                logger?.notice("\(before) is named \(name.visible) (its /name line)")
                announce("* \(before) is \(trust != nil ? ChatTrust.unverifiedMark : "")\(name)", except: nil, now: now)
                return
            }
            members[key] = member
        }
        var sender = members[key]?.name ?? name
        // A plain client cannot sign: unverified, never under a name a key holds.
        if trust != nil { sender = ChatTrust.unverified(sender) }
        let id = ChatMessageID(sender: sender, number: takeNumber())
        delivered.remember(id)
        onHeard?(.message(id, text: text, hops: Self.initialHops))
        deliver(id, text: text, hops: Self.initialHops, except: key, now: now)
    }

    /// A blemu node's frame written to Frames (the device refused what does not decode): a
    /// piece of a message, a RESUME (kept until the link subscribes), an acknowledgement
    /// (which a host has no use for).
    public func framesWrite(_ bytes: ArraySlice<UInt8>, from key: MemberKey, now: UInt64) {
        guard let frame = try? ChatFrame(decoding: bytes) else { return }
        if case let .resume(number, sender) = frame, members[key] == nil {
            // Before it subscribes (Docs/CHAT.md): kept until then.
            resumePoints[Self.link(of: key)] = ChatMessageID(sender: sender, number: number)
            return
        }
        take(frame, from: key, now: now)
    }

    /// An SDU on a chat channel (`key`: the link and the channel's CID) whose peer goes by
    /// `name` and takes SDUs of `peerMTU`: the channel's first frame (JOIN or RESUME) makes it a
    /// member. What Frames' validator refuses with ATT error 0x13 is dropped here, counted and
    /// logged. False: the channel may not be a member (a second on its link, or one that cannot
    /// take the largest frame) and is to be closed.
    public func channelReceived(_ sdu: ArraySlice<UInt8>, from key: MemberKey, name: String, peerMTU: Int, now: UInt64) -> Bool {
        let frame: ChatFrame
        do {
            frame = try ChatFrame(decoding: sdu)
        } catch {
            refusedChannelFrame(from: name, "\(error)")
            return true
        }
        if case .data = frame, refusesPlainWrite(from: name) {
            refusedChannelFrame(from: name, "an unsigned message in a signed-only room")
            return true
        }
        if members[key] == nil {
            // One channel member a link: a second channel would hear the room twice over, a
            // queue more on one link. And a channel whose MTU cannot take the largest frame
            // (a whole SEALED message) would never be sent some lines: neither is a member.
            let link = Self.link(of: key)
            let why: String? = if peerMTU < ChatFrame.largestFrame {
                "its MTU \(peerMTU) cannot take a whole frame (\(ChatFrame.largestFrame) bytes)"
            } else if members.values.contains(where: { $0.onChannel && Self.link(of: $0.key) == link }) {
                "its link has a chat channel member already"
            } else { nil }
            if let why {
                refusedChannelFrame(from: name, "\(why): the channel is closed")
                return false
            }
            var member = ChatRoomMember(key: key, onChannel: true, name: name, framed: true, now: now)
            if case let .resume(number, sender) = frame { catchUp(&member, after: ChatMessageID(sender: sender, number: number)) }
            admit(member, now: now)
            if case .resume = frame { return true }
        }
        take(frame, from: key, now: now)
        return true
    }

    private func refusedChannelFrame(from name: String, _ why: String) {
        refusedChannelFrames += 1
        if refusedChannelFrames & (refusedChannelFrames - 1) == 0 {
            logger?.warning("\(name) sent a chat frame that is refused on its channel (\(why)): dropped (\(refusedChannelFrames) so far)")
        }
    }

    /// A frame of a member (on Frames or its channel).
    private func take(_ frame: ChatFrame, from key: MemberKey, now: UInt64) {
        if case .join = frame { return }   // a channel's first frame: it joined with it
        if case let .resume(number, sender) = frame {
            let point = ChatMessageID(sender: sender, number: number)
            guard var member = members[key] else { return }
            // A bonded member's subscription is back as soon as its link is encrypted with the
            // bond (Vol 3, Part G, 3.3.3.3), before its RESUME can pass when the room needs
            // encryption (`--require-encryption`): taken while the room has sent it nothing yet.
            guard member.framed, member.replayNext == nil, !member.heardLive else { return }
            catchUp(&member, after: point)
            members[key] = member
            flush(now: now)
            return
        }
        // A node that never subscribed is not a member: it would not hear the acknowledgement.
        guard var member = members[key] else { return }
        var outcome = member.reassembly.take(frame)
        if case let .message(claimed, bytes, hops) = outcome {
            // Announcements are the host's: a member's message with no sender goes nowhere.
            guard !claimed.sender.isEmpty else {
                members[key] = member
                forgedAnnouncements += 1
                if forgedAnnouncements & (forgedAnnouncements - 1) == 0 {
                    logger?.warning("\(member.announcedName) wrote a message with an empty sender (an announcement is the host's): dropped (\(forgedAnnouncements) so far)")
                }
                return
            }
            // Checked before anything else sees it: refused (still acknowledged, so an honest
            // member does not resend it forever), or delivered under the identity trust gives it.
            if let trust {
                guard let checked = trust.check(claimed, text: bytes, from: key) else {
                    members[key] = member
                    return acknowledge(claimed, to: key, now: now)
                }
                outcome = .message(checked, text: bytes, hops: hops)
                // A private room's host that cannot open a member's sealed line: the member's
                // passphrase is another one. It is told, once (the room hears the line named).
                if trust.roomKey != nil, checked.proof?.sealed != nil, !member.toldUnreadable, trust.open(checked) == nil {
                    member.toldUnreadable = true
                    let note = Self.unreadableLinesNotice
                    member.append(.frames, framesOf(Array(note.utf8), id: announcementID(note), hops: 0, for: member))
                    logger?.notice("\(member.announcedName)'s sealed lines cannot be opened here: another passphrase, told it")
                }
            }
        }
        // A blemu node names itself in its own messages (a bridge's relayed ones have fewer hops).
        if case .message(let id, _, let hops) = outcome, hops == Self.initialHops, !id.sender.isEmpty,
           member.name.hasPrefix("central-") { member.name = id.sender }
        members[key] = member
        switch outcome {
        case .incomplete, .inconsistent:
            return
        case .duplicate(let id):
            // A resend of a message delivered before: acknowledged again, delivered no more.
            acknowledge(id, to: key, now: now)
        case let .message(id, bytes, hops):
            acknowledgeWhenRoom(id, to: key, now: now)
            guard !delivered.hasDelivered(id) else { return }
            delivered.remember(id)
            let text = String(decoding: bytes, as: UTF8.self)
            onHeard?(.message(id, text: text, hops: hops))
            deliver(id, text: text, hops: hops, except: key, now: now)
        }
    }

    // MARK: What the host says

    private func takeNumber() -> UInt32 {
        defer { nextNumber &+= 1 }
        return nextNumber
    }

    /// The host's own line, to every member.
    public func send(_ text: String, now: UInt64) {
        guard !text.isEmpty else { return }
        let plain = ChatMessageID(sender: hostName, number: takeNumber())
        let id = trust?.sign(plain, text: Array(text.utf8)) ?? plain
        delivered.remember(id)
        deliver(id, text: text, hops: Self.initialHops, except: nil, now: now)
    }

    /// A message with an identity of its own (a line of this node numbered by it, or one a
    /// bridge brings from another room), to every member; once, however often it is given.
    public func relay(_ id: ChatMessageID, text: String, hops: UInt8, now: UInt64) {
        // A sealed message's text is in its proof (`text` is empty where it cannot be read).
        guard !text.isEmpty || id.proof?.sealed != nil, !delivered.hasDelivered(id) else { return }
        delivered.remember(id)
        deliver(id, text: text, hops: hops, except: nil, now: now)
    }

    private func announce(_ text: String, except key: MemberKey?, now: UInt64) {
        onHeard?(.announcement(text))
        deliver(announcementID(text), text: text, hops: 0, except: key, now: now)
    }

    /// A new announcement's identity: no sender, the host's number, signed when it has a key.
    private func announcementID(_ text: String) -> ChatMessageID {
        let id = ChatMessageID(sender: "", number: takeNumber())
        return trust?.sign(id, text: Array(text.utf8), sealing: false) ?? id
    }

    /// A plain client's own name: 1 to `ChatFrame.maxSenderBytes` bytes once trimmed, not
    /// starting with the unverified mark; nil otherwise (the line is then an ordinary one).
    public static func plainName(_ text: Substring) -> String? {
        let name = String(text.drop { $0 == " " }.reversed().drop { $0 == " " }.reversed())
        guard !name.isEmpty, name.utf8.count <= ChatFrame.maxSenderBytes, !name.hasPrefix(ChatTrust.unverifiedMark) else { return nil }
        return name
    }

    private func acknowledge(_ id: ChatMessageID, to key: MemberKey, now: UInt64) {
        let limit = members[key].map { self.limit(for: $0) } ?? 20
        enqueue(.frames, [ChatFrame.acknowledgement(of: id, limit: limit)], to: key)
        flush(now: now)
    }

    /// A message to every member but `key`: framed members get its frames, plain ones
    /// `SENDER: text` (an announcement as it is), cut to their ATT_MTU.
    private func deliver(_ id: ChatMessageID, text: String, hops: UInt8, except key: MemberKey?, now: UInt64) {
        guard links != nil else { return }
        if !id.sender.isEmpty { remember(HistoryEntry(id: id, text: text, hops: hops)) }
        for other in members.keys.sorted() where other != key {
            guard let member = members[other], member.replayNext == nil else { continue }   // a member catching up gets it from the history
            let limit = self.limit(for: member)
            if id.proof?.sealed != nil, !member.framed { continue }   // a plain client could not read it
            if member.framed {
                if !id.sender.isEmpty { members[other]?.heardLive = true }
                enqueue(.frames, framesOf(Array(text.utf8), id: id, hops: hops, for: member), to: other)
            } else {
                // A signed line whose name could not be bound shows unverified (`~NAME`) there too.
                let sender = trust?.shownSender(id) ?? id.sender
                enqueue(.message, ChatPlainLine.parts(of: ChatPlainLine(sender: sender, text: text).text, limit: limit), to: other)
            }
        }
        flush(now: now)
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
    private func replay(to member: inout ChatRoomMember) {
        guard var next = member.replayNext else { return }
        if next < historyStart {
            // Gone from the history while it caught up: counted, never silent.
            member.missed += Int(historyStart - next)
            next = historyStart
        }
        while !member.isHalfFull, next < historyStart + UInt64(history.count) {
            let entry = history[Int(next - historyStart)]
            member.append(.frames, framesOf(Array(entry.text.utf8), id: entry.id, hops: entry.hops, for: member))
            next += 1
        }
        member.replayNext = next < historyStart + UInt64(history.count) ? next : nil
    }

    private func enqueue(_ lane: Lane, _ parts: [[UInt8]], to key: MemberKey) {
        guard var member = members[key] else { return }
        let bytes = ChatRoomMember.size(of: parts)
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
        member.append(lane, parts)
        members[key] = member
    }

    /// Sends what each member's queue holds, in order, until its link is full; a member whose
    /// link is full waits (the device calls this again when it has room) without holding up the others.
    public func flush(now: UInt64) {
        guard let links else { return }
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
                    member.prepend(member.framed ? .frames : .message, note)
                    member.noteAtFront = member.missed
                    member.missed = 0
                }
                if member.queue.isEmpty { replay(to: &member) }
                guard let line = member.queue.first else { break }
                while let part = member.queue[0].parts.first {
                    guard links.transmit(part, on: line.lane, to: key) else { break sending }
                    member.removeFirstPart()
                    member.noteAtFront = nil   // begun: it is finished, never dropped
                    member.lineStarted = !member.queue[0].parts.isEmpty
                    member.lastProgress = now
                }
                member.removeLine(at: 0)
            }
            members[key] = member
        }
        checkRoom(now: now)
    }

    /// The most a notification (ATT_MTU - 3) or a channel's frame may carry for `member`.
    private func limit(for member: ChatRoomMember) -> Int {
        member.onChannel ? ChatFrame.largestFrame : (links?.notificationLimit(of: member.key) ?? 20)
    }

    /// A message's frames for `member`: on its channel one whole frame (one SDU), on Frames
    /// DATA and MOREs cut to its ATT_MTU.
    private func framesOf(_ text: [UInt8], id: ChatMessageID, hops: UInt8, for member: ChatRoomMember) -> [[UInt8]] {
        member.onChannel ? [ChatFrame.channelFrame(of: text, id: id, hops: hops)]
            : ChatFrame.frames(of: text, id: id, hops: hops, limit: limit(for: member))
    }

    // MARK: Back-pressure

    /// Whether the host's own lines (`send`) should wait at `now`: a member that is taking its
    /// lines has `busyThreshold` of them waiting. The source of those lines (stdin) is paused
    /// rather than have the member's queue overflow; `onRoom` says when to go on. A member that
    /// took nothing for `stallLimit` does not count: it will hear that it missed lines.
    public func isBusy(at now: UInt64) -> Bool {
        guard links != nil else { return false }
        return members.values.contains { $0.isHalfFull && $0.isTaking(at: now) }
    }

    /// Whether a member that is taking its lines still has some waiting (`--exit-on-eof`
    /// waits for them); one that took nothing for `stallLimit` does not count.
    public func hasQueuedLines(at now: UInt64) -> Bool {
        guard links != nil else { return false }
        return members.values.contains { !$0.queue.isEmpty && $0.isTaking(at: now) }
    }

    /// Looks again at `now` (due at `recheckAt`): the member holding the host back may have stalled.
    public func advance(to now: UInt64) {
        guard let due = recheckAt, now >= due else { return }
        recheckAt = nil
        checkRoom(now: now)
    }

    /// Tells `onRoom` once `isBusy` is over: after a flush, or when the member holding the
    /// host back has stalled for `stallLimit` (`recheckAt`).
    private func checkRoom(now: UInt64) {
        guard links != nil else { return }
        if isBusy(at: now) {
            wasBusy = true
            if recheckAt == nil { recheckAt = now + Self.stallLimit.nanoseconds }
        } else {
            // Nothing after `onRoom` and the release reads state from before them: both may
            // send (and so check the room again) before they return.
            if wasBusy {
                wasBusy = false
                recheckAt = nil
                onRoom?()
            }
            if !isBusy(at: now) { releaseAcknowledgements(now: now) }
        }
    }

    private func acknowledgeWhenRoom(_ id: ChatMessageID, to key: MemberKey, now: UInt64) {
        guard isBusy(at: now), heldAcknowledgements.count < Self.heldAcknowledgementLimit else { return acknowledge(id, to: key, now: now) }
        heldAcknowledgements.append((id, key))
        checkRoom(now: now)
    }

    private func releaseAcknowledgements(now: UInt64) {
        guard !isReleasingAcknowledgements, !heldAcknowledgements.isEmpty else { return }
        isReleasingAcknowledgements = true
        while let (id, key) = heldAcknowledgements.popFirst() {
            let limit = members[key].map { self.limit(for: $0) } ?? 20
            enqueue(.frames, [ChatFrame.acknowledgement(of: id, limit: limit)], to: key)
        }
        flush(now: now)
        isReleasingAcknowledgements = false
    }
}
