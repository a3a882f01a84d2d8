import BlemuATT
import BlemuChat
import BlemuChatProtocol
import BlemuCore
import BlemuCrypto
import BlemuDevices
import BlemuGATT
import BlemuHCI
import BlemuHost
import BlemuL2CAP
import Logging
import Testing
#if canImport(Glibc)
import Glibc
@testable import HostTestSupport
#endif

private let quiet = Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })

/// The chat host against hostile members (issue 34, round 3): captured lines written again,
/// channels opened and closed in a loop or several on one link, a channel that never takes a
/// frame, queues of long lines, and a member of a private room with another passphrase.
@Suite struct ChatHardeningTests {
    typealias Room = ChatSignedTests.Room
    let alice = ChatSigningKey(), hostKey = ChatSigningKey()

    func signed(_ sender: String, _ number: UInt32, _ text: String, by key: ChatSigningKey) -> ChatMessageID {
        ChatMessageID(sender: sender, number: number, proof: ChatProof.sign(room: "kitchen", sender: sender, number: number, text: Array(text.utf8), with: key))
    }

    // MARK: Replays (item 2)

    /// Alice's signed line, captured on the air, is written again by another link after the
    /// room said more than the 1024 identities the host remembers: her mark refuses it.
    @Test func aCapturedSignedLineIsNotDeliveredAgainAfterTheHostForgotItsIdentity() throws {
        let room = try Room(trust: ChatTrust(room: "kitchen", identity: hostKey, me: "kitchen", logger: quiet))
        room.joinFramed(0x40, 0x01)   // alice
        room.joinFramed(0x42, 0x03)   // the replayer
        let captured = signed("alice", 5, "open the door", by: alice)
        room.write("open the door", as: captured, from: 0x40)
        #expect(room.lines.filter { $0 == "[alice] open the door" }.count == 1)
        for index in 0..<(ChatReassembly.rememberedLimit + 10) { room.device.send("line \(index)") }
        let (responses, acks) = room.write("open the door", as: captured, from: 0x42)
        #expect(responses.allSatisfy { $0 == 0 } && acks.count == 1)   // acknowledged, as a resend is
        #expect(room.lines.filter { $0 == "[alice] open the door" }.count == 1)
        #expect(room.device.trust?.replays == 1)
        // Alice's next line is hers as ever.
        room.write("and close it", as: signed("alice", 6, "and close it", by: alice), from: 0x40)
        #expect(room.lines.last == "[alice] and close it")
    }

    /// The host restarts (a clean stop saves the marks with the names): the captured line is
    /// still refused; one written before a crash's last seconds is what the delay may lose.
    @Test func aCapturedSignedLineIsNotDeliveredAgainAfterTheHostRestarts() throws {
        var template = Array("/tmp/blemu-chat-marks-XXXXXX".utf8CString)
        let directory = try #require(mkdtemp(&template).map { String(cString: $0) })
        defer { _ = system("rm -rf '\(directory)'") }
        let store = ChatIdentityStore(directory: directory, logger: quiet)
        let first = try Room(trust: store.trust(room: "kitchen", me: "kitchen", signedOnly: false))
        first.joinFramed(0x40, 0x01)
        let captured = signed("alice", 5, "open the door", by: alice)
        first.write("open the door", as: captured, from: 0x40)
        #expect(first.lines.last == "[alice] open the door")
        store.saveMarks()   // the clean stop

        let restarted = ChatIdentityStore(directory: directory, logger: quiet)
        let second = try Room(trust: restarted.trust(room: "kitchen", me: "kitchen", signedOnly: false))
        second.joinFramed(0x42, 0x03)
        second.write("open the door", as: captured, from: 0x42)
        #expect(!second.lines.contains("[alice] open the door"))
        second.write("hello", as: signed("alice", 6, "hello", by: alice), from: 0x42)
        #expect(second.lines.last == "[alice] hello")
    }

    // MARK: Private rooms (item 20)

    /// Eve's passphrase is another: the host cannot open her sealed line. She is told her lines
    /// cannot be read; the room's members are not told that they cannot read the room.
    @Test func aMemberWithAnotherPassphraseIsToldItsLinesCannotBeRead() throws {
        let roomKey = ChatRoomKey(passphrase: Array("right".utf8), room: "kitchen")
        let room = try Room(trust: ChatTrust(room: "kitchen", identity: hostKey, me: "kitchen", roomKey: roomKey, logger: quiet))
        room.joinFramed(0x40, 0x01)   // eve
        room.joinFramed(0x41, 0x02)   // bob
        _ = room.heard(0x40)
        _ = room.heard(0x41)
        let eve = ChatSigningKey()
        let wrong = ChatRoomKey(passphrase: Array("wrong".utf8), room: "kitchen")
        func sealed(_ number: UInt32) -> ChatMessageID {
            ChatMessageID(sender: "eve", number: number,
                          proof: ChatProof.seal(room: "kitchen", sender: "eve", number: number, text: Array("hi".utf8), with: eve, roomKey: wrong))
        }
        // Eve's frames, and what she is notified meanwhile (her ACKs, and any note).
        var told: [String] = []
        var reassembly = ChatReassembly()
        for number in UInt32(1)...2 {
            let value = room.device.frames.valueHandle
            for frame in ChatFrame.frames(of: [], id: sealed(number), hops: 4, limit: 20) {
                for pdu in room.bench.att([0x12, UInt8(value & 0xFF), UInt8(value >> 8)] + frame, handle: 0x40) where pdu.first == 0x1B {
                    guard let frame = try? ChatFrame(decoding: pdu.dropFirst(3)),
                          case let .message(id, text, _) = reassembly.take(frame), id.sender.isEmpty else { continue }
                    told.append(String(decoding: text, as: UTF8.self))
                }
            }
        }
        told += room.heard(0x40)
        #expect(told == [ChatDevice.unreadableLinesNotice])   // once
        #expect(room.heard(0x41) == ["[eve] ", "[eve] "])   // bob gets eve's sealed lines (their text is sealed) and no notice
    }

    // MARK: Channels (items 7 and 8, and one stalled channel)

    func plainMember(_ room: Room, _ handle: UInt16) {
        room.bench.controller.connect(handle: handle, peer: BluetoothAddress("C4:00:00:00:AA:01")!, set: 1)
        _ = room.bench.att([0x02, 100, 0], handle: handle)
        let cccd = room.device.message.clientConfigurationHandle ?? 0
        _ = room.bench.att([0x12, UInt8(cccd & 0xFF), UInt8(cccd >> 8), 0x01, 0x00], handle: handle)
    }

    func plainReceived(_ room: Room, _ handle: UInt16) -> [String] {
        room.bench.controller.takeL2CAP(handle: handle, cid: L2CAPChannel.att).filter { $0.first == 0x1B }
            .map { String(decoding: $0.dropFirst(3), as: UTF8.self) }
    }

    /// One link opens a channel, joins and closes it, twenty times in a row: the room hears
    /// four joins and four leaves, not forty lines.
    @Test func aLinkOpeningAndClosingChannelsInALoopDoesNotFloodTheRoom() throws {
        let room = try Room(trust: nil)
        plainMember(room, 0x40)
        room.bench.controller.connect(handle: 0x41, peer: BluetoothAddress("C4:00:00:00:CC:03")!, set: 1)
        _ = plainReceived(room, 0x40)
        room.lines.removeAll()
        var channel = ChannelPeer(bench: room.bench, handle: 0x41)
        for _ in 0..<20 {
            #expect(channel.open(spsm: room.device.spsm, mps: 23) == 0)
            channel.send(ChatFrame.join.encoded())
            channel.close()
        }
        let announced = plainReceived(room, 0x40)
        #expect(announced.filter { $0.hasSuffix(" joined") }.count == ChatDevice.announcedJoinsPerLink)
        #expect(announced.filter { $0.hasSuffix(" left") }.count == ChatDevice.announcedJoinsPerLink)
        #expect(room.device.unannouncedJoins == 20 - ChatDevice.announcedJoinsPerLink)
        #expect(room.device.channelMemberCount == 0)
        // A minute later the link's joins are announced again.
        room.bench.scheduler.advance(by: .seconds(61))
        #expect(channel.open(spsm: room.device.spsm, mps: 23) == 0)
        channel.send(ChatFrame.join.encoded())
        #expect(plainReceived(room, 0x40) == ["* central-CC03 joined"])
    }

    /// A second channel on a link that has a channel member, and a channel whose MTU cannot
    /// take the largest frame (it would never be sent a sealed 4 KiB line, and its queue would
    /// hold its lines for ever): neither becomes a member; the room goes on.
    @Test func aSecondChannelOnALinkAndAChannelTooSmallForAFrameAreNoMembers() throws {
        let room = try Room(trust: nil)
        room.bench.controller.connect(handle: 0x41, peer: BluetoothAddress("C4:00:00:00:CC:03")!, set: 1)
        var first = ChannelPeer(bench: room.bench, handle: 0x41)
        #expect(first.open(spsm: room.device.spsm, mps: 23) == 0)
        first.send(ChatFrame.join.encoded())
        var second = ChannelPeer(bench: room.bench, handle: 0x41, ourCID: 0x0042)
        #expect(second.open(spsm: room.device.spsm, mps: 23) == 0)
        second.send(ChatFrame.join.encoded())
        #expect(room.device.channelMemberCount == 1)
        room.bench.controller.connect(handle: 0x42, peer: BluetoothAddress("C4:00:00:00:DD:04")!, set: 1)
        var small = ChannelPeer(bench: room.bench, handle: 0x42)
        #expect(small.open(spsm: room.device.spsm, mtu: 64, mps: 23) == 0)
        small.send(ChatFrame.join.encoded())
        #expect(room.device.channelMemberCount == 1)
        #expect(room.device.refusedChannelFrames == 2)
        room.device.send("still one room")
        #expect(first.received().contains { (try? ChatFrame(decoding: $0[...])).map { if case .data = $0 { true } else { false } } ?? false })
    }

    /// A channel member that gives no credits: 4 KiB lines wait for it, bounded in bytes (not
    /// 256 lines of 4 KiB, a megabyte); given credits, it hears how many it missed, first.
    @Test func aMembersQueueIsBoundedInBytes() throws {
        let room = try Room(trust: nil)
        room.bench.controller.connect(handle: 0x41, peer: BluetoothAddress("C4:00:00:00:CC:03")!, set: 1)
        var channel = ChannelPeer(bench: room.bench, handle: 0x41)
        #expect(channel.open(spsm: room.device.spsm, mps: 23, credits: 0) == 0)
        channel.send(ChatFrame.join.encoded())
        let long = String(repeating: "x", count: 4000)
        for _ in 0..<100 { room.device.send(long) }
        #expect(room.device.queuedBytes <= ChatDevice.memberQueueByteLimit)
        channel.credit(60000)
        var notes: [String] = []
        var messages = 0
        var reassembly = ChatReassembly()
        for sdu in channel.received() {
            guard let frame = try? ChatFrame(decoding: sdu[...]), case let .message(id, text, _) = reassembly.take(frame) else { continue }
            if id.sender.isEmpty { notes.append(String(decoding: text, as: UTF8.self)) } else { messages += 1 }
        }
        // Every line is delivered or counted in a note (a note goes as soon as the channel takes
        // one: several may, each counting the lines since the one before).
        let missed = 100 - messages
        let counted = notes.compactMap { note -> Int? in
            guard note.hasPrefix("* you missed "), note.hasSuffix(" line(s): too slow") else { return nil }
            return Int(note.dropFirst("* you missed ".count).prefix { $0.isNumber })
        }
        #expect(missed > 50 && counted.reduce(0, +) == missed && counted.count == notes.count)
    }
}
