import BlemuChatProtocol
import BlemuCore
import BlemuCrypto
import Logging
import Testing

/// The links a room's tests give it: what each member was sent, a member's link full on demand.
private final class RoomLinks: ChatRoomLinks {
    var limits: [ChatRoom.MemberKey: Int] = [:]
    var full: Set<ChatRoom.MemberKey> = []
    var sent: [ChatRoom.MemberKey: [(lane: ChatRoom.Lane, bytes: [UInt8])]] = [:]

    func notificationLimit(of member: ChatRoom.MemberKey) -> Int { limits[member] ?? 20 }

    func transmit(_ part: [UInt8], on lane: ChatRoom.Lane, to member: ChatRoom.MemberKey) -> Bool {
        guard !full.contains(member) else { return false }
        sent[member, default: []].append((lane, part))
        return true
    }

    /// What a plain client was sent, a notification a line.
    func lines(_ key: ChatRoom.MemberKey) -> [String] {
        sent[key, default: []].map { String(decoding: $0.bytes, as: UTF8.self) }
    }

    enum Item: Equatable {
        case message(sender: String, text: String)
        case ack(number: UInt32, sender: String)
    }
    /// What a blemu member was sent, its frames put together.
    func items(_ key: ChatRoom.MemberKey) -> [Item] {
        var reassembly = ChatReassembly()
        var items: [Item] = []
        for (lane, bytes) in sent[key, default: []] {
            #expect(lane == .frames)
            guard let frame = try? ChatFrame(decoding: bytes[...]) else {
                Issue.record("a frame that does not decode")
                continue
            }
            if case let .ack(number, sender) = frame {
                items.append(.ack(number: number, sender: sender))
            } else if case let .message(id, text, _) = reassembly.take(frame) {
                items.append(.message(sender: id.sender, text: String(decoding: text, as: UTF8.self)))
            }
        }
        return items
    }
}

/// The room a chat host keeps, alone: no GATT, no L2CAP, no run loop; time handed in.
@Suite struct ChatRoomTests {
    private let logger = Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })
    private let t0: UInt64 = 1_000_000_000_000
    private let stall = ChatRoom.stallLimit.nanoseconds
    private let plain = ChatRoom.key(link: 1)
    private let channelMember = ChatRoom.key(link: 2, channel: 0x40)

    private func room(_ links: RoomLinks, trust: ChatTrust? = nil) -> ChatRoom {
        let room = ChatRoom(firstNumber: 100)
        room.links = links
        room.trust = trust
        room.hostName = "host"
        return room
    }

    /// A plain client subscribes to Message.
    private func joinPlain(_ room: ChatRoom, _ key: ChatRoom.MemberKey, at now: UInt64) {
        room.subscriptionChanged(key, name: "central-\(key)", framed: false, notify: true, now: now)
    }

    /// A blemu node joins on a chat channel with JOIN (or `first`).
    @discardableResult
    private func joinChannel(_ room: ChatRoom, _ key: ChatRoom.MemberKey, first: ChatFrame = .join, mtu: Int = ChatFrame.largestFrame,
                             at now: UInt64) -> Bool {
        room.channelReceived(first.encoded()[...], from: key, name: "central-\(ChatRoom.link(of: key))", peerMTU: mtu, now: now)
    }

    private func say(_ room: ChatRoom, _ key: ChatRoom.MemberKey, _ id: ChatMessageID, _ text: String, at now: UInt64) {
        let taken = room.channelReceived(ChatFrame.channelFrame(of: Array(text.utf8), id: id, hops: ChatRoom.initialHops)[...], from: key,
                                         name: "central-\(ChatRoom.link(of: key))", peerMTU: ChatFrame.largestFrame, now: now)
        #expect(taken)
    }

    @Test func aMembersMessageIsAcknowledgedToItAndDeliveredOnceToTheOthers() {
        let links = RoomLinks()
        let room = room(links)
        var heard: [ChatRoom.Heard] = []
        room.onHeard = { heard.append($0) }
        joinPlain(room, plain, at: t0)
        joinChannel(room, channelMember, at: t0)
        #expect(room.memberNames == ["central-1", "central-2"] && room.channelMemberCount == 1)
        #expect(links.lines(plain) == ["* central-2 joined"])

        let id = ChatMessageID(sender: "alice", number: 7)
        say(room, channelMember, id, "hi", at: t0)
        #expect(links.lines(plain) == ["* central-2 joined", "alice: hi"])
        #expect(links.items(channelMember) == [.ack(number: 7, sender: "alice")])
        #expect(heard == [.announcement("* central-1 joined"), .announcement("* central-2 joined"),
                          .message(id, text: "hi", hops: ChatRoom.initialHops)])
        // It names itself in its own message (the announcements keep its address's name).
        #expect(room.memberNames == ["alice", "central-1"])

        // A resend (its ACK was lost): acknowledged again, delivered no more.
        say(room, channelMember, id, "hi", at: t0 + 1)
        #expect(links.items(channelMember) == [.ack(number: 7, sender: "alice"), .ack(number: 7, sender: "alice")])
        #expect(links.lines(plain).count == 2 && heard.count == 3)
    }

    @Test func aMemberThatTakesNothingKeepsAtMostItsQueueAndIsToldHowManyLinesItMissed() {
        let links = RoomLinks()
        let room = room(links)
        links.limits[plain] = 100
        joinPlain(room, plain, at: t0)
        links.full.insert(plain)
        let lines = ChatRoom.memberQueueLimit + 10
        for number in 1...lines { room.send("line \(number)", now: t0) }
        #expect(links.lines(plain).isEmpty)
        // Its queue: the newest lines, and the note before them (which counts every line lost so far).
        let note = "* you missed 10 line(s): too slow"
        #expect(room.queuedBytes == (11...lines).reduce(note.utf8.count + ChatRoom.partOverhead) {
            $0 + "host: line \($1)".utf8.count + ChatRoom.partOverhead
        })
        #expect(room.queuedBytes <= ChatRoom.memberQueueByteLimit)

        links.full.remove(plain)
        room.flush(now: t0 + 1)
        let received = links.lines(plain)
        // Never a silent drop: the note first, on a line of its own, then the newest lines in order.
        #expect(received.first == note)
        #expect(Array(received.dropFirst()) == (11...lines).map { "host: line \($0)" })
        #expect(room.queuedBytes == 0)
    }

    @Test func aMemberWithHalfItsQueueWaitingHoldsTheHostBackUntilItStallsForFiveSeconds() {
        let links = RoomLinks()
        let room = room(links)
        var rooms = 0
        room.onRoom = { rooms += 1 }
        joinPlain(room, plain, at: t0)
        links.full.insert(plain)
        for number in 1..<ChatRoom.busyThreshold { room.send("line \(number)", now: t0) }
        #expect(!room.isBusy(at: t0) && room.recheckAt == nil)
        room.send("one more", now: t0)
        #expect(room.isBusy(at: t0) && room.hasQueuedLines(at: t0))
        #expect(room.recheckAt == t0 + stall)

        // Taking nothing for five seconds, it no longer counts: the room says so when it looks.
        room.advance(to: t0 + stall - 1)
        #expect(rooms == 0 && room.isBusy(at: t0 + stall - 1))
        room.advance(to: t0 + stall)
        #expect(rooms == 1 && room.recheckAt == nil)
        #expect(!room.isBusy(at: t0 + stall) && !room.hasQueuedLines(at: t0 + stall))
    }

    @Test func theRoomIsFreeAgainOnceTheMemberHasTakenItsLines() {
        let links = RoomLinks()
        let room = room(links)
        var rooms = 0
        room.onRoom = { rooms += 1 }
        joinPlain(room, plain, at: t0)
        links.full.insert(plain)
        for number in 1...ChatRoom.busyThreshold { room.send("line \(number)", now: t0) }
        #expect(room.isBusy(at: t0 + 1))
        links.full.remove(plain)
        room.flush(now: t0 + 2)
        #expect(rooms == 1 && !room.isBusy(at: t0 + 2) && room.recheckAt == nil)
        #expect(links.lines(plain).count == ChatRoom.busyThreshold)
    }

    @Test func acknowledgementsWaitWhileTheRoomIsBusyAndGoOnceItIsFree() {
        let links = RoomLinks()
        let room = room(links)
        joinPlain(room, plain, at: t0)
        joinChannel(room, channelMember, at: t0)
        links.full.insert(plain)
        for number in 1...ChatRoom.busyThreshold { room.send("line \(number)", now: t0) }
        let before = links.items(channelMember).count
        say(room, channelMember, ChatMessageID(sender: "alice", number: 1), "fast", at: t0)
        // Held: the fast member waits with its window, as the host's own lines wait.
        #expect(room.heldAcknowledgementCount == 1)
        #expect(!links.items(channelMember).dropFirst(before).contains(.ack(number: 1, sender: "alice")))
        links.full.remove(plain)
        room.flush(now: t0 + 1)
        #expect(room.heldAcknowledgementCount == 0)
        #expect(links.items(channelMember).last == .ack(number: 1, sender: "alice"))
    }

    @Test func aLinksJoinsAreAnnouncedFourTimesAMinuteAtMost() {
        let links = RoomLinks()
        let room = room(links)
        joinPlain(room, plain, at: t0)
        func churn(_ cid: UInt16, at now: UInt64) {
            let key = ChatRoom.key(link: 2, channel: cid)
            joinChannel(room, key, at: now)
            room.channelClosed(key, now: now)
        }
        for cid in UInt16(0x40)..<0x45 { churn(cid, at: t0 + UInt64(cid)) }
        let announced = (0..<ChatRoom.announcedJoinsPerLink).flatMap { _ in ["* central-2 joined", "* central-2 left"] }
        #expect(links.lines(plain) == announced)
        #expect(room.unannouncedJoins == 1)
        // A minute after its window began, its joins are announced again.
        churn(0x50, at: t0 + 0x40 + ChatRoom.announcementWindow.nanoseconds)
        #expect(links.lines(plain) == announced + ["* central-2 joined", "* central-2 left"])
    }

    @Test func aMemberJoiningAgainGetsWhatCameAfterItsLastMessageFirstAndInOrder() {
        let links = RoomLinks()
        let room = room(links)
        for text in ["one", "two", "three"] { room.send(text, now: t0) }   // numbered 100, 101, 102
        // RESUME is written before it subscribes on Frames.
        let framed = ChatRoom.key(link: 3)
        links.limits[framed] = 244
        room.framesWrite(ChatFrame.resume(number: 100, sender: "host").encoded()[...], from: framed, now: t0)
        room.subscriptionChanged(framed, name: "central-3", framed: true, notify: true, now: t0)
        room.send("four", now: t0)
        #expect(links.items(framed) == ["two", "three", "four"].map { .message(sender: "host", text: $0) })
        // A RESUME after it has heard a live line comes too late: nothing is replayed.
        room.framesWrite(ChatFrame.resume(number: 100, sender: "host").encoded()[...], from: framed, now: t0)
        #expect(links.sent[framed, default: []].count == 3)   // one frame a line at this ATT_MTU
    }

    @Test func theHistoryIsBoundedAndAResumeFromBeforeItIsToldLinesMayBeMissing() {
        let links = RoomLinks()
        let room = room(links)
        for number in 0...ChatRoom.historyLimit { room.send("line \(number)", now: t0) }
        // Line 0 (number 100) gave way; the channel member resumes from it.
        joinChannel(room, channelMember, first: .resume(number: 100, sender: "host"), at: t0)
        let items = links.items(channelMember)
        #expect(items.first == .message(sender: "", text: "* catching up: lines said before the oldest kept here may be missing"))
        #expect(items.dropFirst().first == .message(sender: "host", text: "line 1"))
        #expect(items.count == ChatRoom.historyLimit + 1)
        #expect(items.last == .message(sender: "host", text: "line \(ChatRoom.historyLimit)"))
    }

    @Test func aPlainClientsFirstLineNamesItAndALaterOneIsAnOrdinaryLine() {
        let links = RoomLinks()
        let room = room(links)
        let other = ChatRoom.key(link: 4)
        joinPlain(room, plain, at: t0)
        joinPlain(room, other, at: t0)
        room.plainWrite("/name  phone ", from: plain, name: "central-1", now: t0)
        room.plainWrite("hello", from: plain, name: "central-1", now: t0)
        room.plainWrite("/name other", from: plain, name: "central-1", now: t0)
        #expect(links.lines(other) == ["* central-1 is phone", "phone: hello", "phone: /name other"])
        #expect(room.memberNames == ["central-4", "phone"])
    }

    @Test func withTrustAPlainLineIsUnverifiedAndSignedOnlyRoomsRefuseIt() {
        let open = ChatTrust(room: "kitchen", identity: ChatSigningKey(), me: "host", logger: logger)
        let links = RoomLinks()
        let room = room(links, trust: open)
        joinPlain(room, plain, at: t0)
        joinChannel(room, channelMember, at: t0)
        #expect(!room.refusesPlainWrite(from: "central-1"))
        room.plainWrite("hi", from: plain, name: "central-1", now: t0)
        #expect(links.items(channelMember).last == .message(sender: "~central-1", text: "hi"))

        let signedOnly = ChatTrust(room: "kitchen", identity: ChatSigningKey(), me: "host", signedOnly: true, logger: logger)
        #expect(ChatRoom().with(trust: signedOnly).refusesPlainWrite(from: "central-1"))
        // On a channel, an unsigned DATA of a signed-only room is dropped and counted.
        let strict = self.room(RoomLinks(), trust: signedOnly)
        joinChannel(strict, channelMember, at: t0)
        say(strict, channelMember, ChatMessageID(sender: "alice", number: 1), "unsigned", at: t0)
        #expect(strict.refusedChannelFrames == 1)
    }

    @Test func aMessageSignedAsTheHostByAnotherKeyIsAcknowledgedButGoesNowhere() {
        let host = ChatSigningKey(), mallory = ChatSigningKey(), alice = ChatSigningKey()
        let trust = ChatTrust(room: "kitchen", identity: host, me: "host", logger: logger)
        let links = RoomLinks()
        let room = room(links, trust: trust)
        var heard: [ChatRoom.Heard] = []
        room.onHeard = { heard.append($0) }
        let listener = ChatRoom.key(link: 5, channel: 0x41)
        joinChannel(room, channelMember, at: t0)
        joinChannel(room, listener, at: t0)
        func signed(_ sender: String, _ number: UInt32, _ text: String, by key: ChatSigningKey) -> ChatMessageID {
            ChatMessageID(sender: sender, number: number,
                          proof: ChatProof.sign(room: "kitchen", sender: sender, number: number, text: Array(text.utf8), with: key))
        }
        let before = links.items(listener)
        say(room, channelMember, signed("host", 9, "FORGED", by: mallory), "FORGED", at: t0)
        #expect(links.items(channelMember).last == .ack(number: 9, sender: "host"))
        #expect(links.items(listener) == before && trust.impersonations == 1)
        #expect(!heard.contains { if case .message = $0 { true } else { false } })

        say(room, channelMember, signed("alice", 1, "hi", by: alice), "hi", at: t0)
        #expect(links.items(listener).last == .message(sender: "alice", text: "hi"))
    }

    @Test func aChannelIsAMemberOnlyWhenItTakesAWholeFrameAndIsTheFirstOfItsLink() {
        let links = RoomLinks()
        let room = room(links)
        #expect(!joinChannel(room, channelMember, mtu: ChatFrame.largestFrame - 1, at: t0))
        #expect(!room.isMember(channelMember) && room.refusedChannelFrames == 1)
        #expect(joinChannel(room, channelMember, at: t0) && room.isMember(channelMember))
        let second = ChatRoom.key(link: 2, channel: 0x41)
        #expect(!joinChannel(room, second, at: t0))
        #expect(!room.isMember(second) && room.refusedChannelFrames == 2 && room.channelMemberCount == 1)
        // A frame that does not decode is dropped and counted; the channel stays.
        #expect(room.channelReceived([0xFF, 1, 2][...], from: channelMember, name: "central-2", peerMTU: ChatFrame.largestFrame, now: t0))
        #expect(room.refusedChannelFrames == 3 && room.isMember(channelMember))
        // Its link closes: it leaves.
        room.linkClosed(2, now: t0)
        #expect(!room.isMember(channelMember) && room.memberNames.isEmpty)
    }

    @Test func aMembersMessageWithNoSenderIsNoAnnouncementAndGoesNowhere() {
        let links = RoomLinks()
        let room = room(links)
        joinPlain(room, plain, at: t0)
        joinChannel(room, channelMember, at: t0)
        say(room, channelMember, ChatMessageID(sender: "", number: 1), "* everyone left", at: t0)
        #expect(room.forgedAnnouncements == 1)
        #expect(links.lines(plain) == ["* central-2 joined"])
        #expect(links.items(channelMember).isEmpty)
    }

    @Test func aPrivateRoomAdmitsNoPlainClient() {
        let trust = ChatTrust(room: "kitchen", identity: ChatSigningKey(), me: "host",
                              roomKey: ChatRoomKey(passphrase: Array("secret".utf8), room: "kitchen"), logger: logger)
        #expect(ChatRoom().with(trust: trust).admitsPlainClients == false)
        #expect(ChatRoom().admitsPlainClients)
    }

    @Test func withoutLinksTheRoomSaysNothingAndKeepsNothing() {
        let room = ChatRoom(firstNumber: 1)
        room.send("before start", now: t0)
        let links = RoomLinks()
        room.links = links
        // Nothing was kept from before: a member resuming from it is told lines may be missing.
        joinChannel(room, channelMember, first: .resume(number: 1, sender: "host"), at: t0)
        #expect(links.items(channelMember) == [.message(sender: "", text: "* catching up: lines said before now may be missing")])
        #expect(!ChatRoom().isBusy(at: t0))
    }
}

extension ChatRoom {
    fileprivate func with(trust: ChatTrust) -> ChatRoom {
        self.trust = trust
        return self
    }
}

/// The plain protocol's one format, as the host writes it and a member reads it.
@Suite struct ChatPlainLineTests {
    @Test func aPlainLineIsNameColonTextAndAnythingElseAnAnnouncement() {
        #expect(ChatPlainLine(parsing: "alice: hi: there") == .message(sender: "alice", text: "hi: there"))
        #expect(ChatPlainLine(parsing: "* alice: joined") == .announcement("* alice: joined"))
        #expect(ChatPlainLine(parsing: "no colon") == .announcement("no colon"))
        #expect(ChatPlainLine(sender: "", text: "* bob left").text == "* bob left")
        #expect(ChatPlainLine(sender: "bob", text: "hi: there").text == "bob: hi: there")
        #expect(ChatPlainLine(parsing: ChatPlainLine(sender: "bob", text: "hi: there").text) == .message(sender: "bob", text: "hi: there"))
        #expect(ChatTrust.unverified("bob") == "~bob" && ChatTrust.unverified("~bob") == "~bob")
    }
}
