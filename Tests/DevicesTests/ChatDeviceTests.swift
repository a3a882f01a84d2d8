import BlemuATT
import BlemuChatProtocol
import BlemuCore
import BlemuDevices
import BlemuGATT
import BlemuHCI
import BlemuHost
import BlemuL2CAP
import Testing
@testable import HostTestSupport

/// The chat host over the whole stack: members are centrals subscribed to Message; what one
/// writes reaches the others, signed; a member that cannot keep up is told what it missed.
@Suite struct ChatDeviceTests {
    final class Room {
        let device = ChatDevice()
        let bench: SharedBench
        var lines: [String] = []
        let a = BluetoothAddress("C4:00:00:00:AA:01")!
        let b = BluetoothAddress("C4:00:00:00:BB:02")!

        init() throws {
            bench = try SharedBench(devices: [device], sets: 4)
            device.hostName = "Host"
            device.onHeard = { [unowned self] heard in
                switch heard {
                case .announcement(let text): self.lines.append(text)
                case let .message(id, text, _): self.lines.append("[\(id.sender)] \(text)")
                }
            }
        }

        func join(_ handle: UInt16, _ peer: BluetoothAddress) {
            bench.controller.connect(handle: handle, peer: peer, set: 1)
            _ = bench.att([0x02, 100, 0], handle: handle)   // ATT_MTU 100, as phones do
            let cccd = device.message.clientConfigurationHandle ?? 0
            _ = bench.att([0x12, UInt8(cccd & 0xFF), UInt8(cccd >> 8), 0x01, 0x00], handle: handle)
        }

        func write(_ text: String, from handle: UInt16) -> [[UInt8]] {
            let value = device.message.valueHandle
            return bench.att([0x12, UInt8(value & 0xFF), UInt8(value >> 8)] + Array(text.utf8), handle: handle)
        }

        /// The texts notified to `handle` since the last call.
        func received(_ handle: UInt16) -> [String] {
            bench.controller.takeL2CAP(handle: handle, cid: L2CAPChannel.att)
                .filter { $0.first == 0x1B }.map { String(decoding: $0.dropFirst(3), as: UTF8.self) }
        }
    }

    @Test func aMembersLineReachesTheOthersSignedAndTheHost() throws {
        let room = try Room()
        room.join(0x40, room.a)
        room.join(0x41, room.b)
        #expect(room.received(0x40) == ["* central-BB02 joined"])
        #expect(room.lines == ["* central-AA01 joined", "* central-BB02 joined"])
        #expect(room.write("hello", from: 0x41) == [[0x13]])
        #expect(room.received(0x40) == ["central-BB02: hello"])
        #expect(room.received(0x41).isEmpty)
        #expect(room.lines.last == "[central-BB02] hello")
        room.device.send("welcome")
        #expect(room.received(0x40) == ["Host: welcome"] && room.received(0x41) == ["Host: welcome"])
        // Not UTF-8: refused, and nobody hears it.
        #expect(room.bench.att([0x12, UInt8(room.device.message.valueHandle), 0x00, 0xFF, 0xFE], handle: 0x40).first?.last == 0x13)
        #expect(room.received(0x41).isEmpty)
        room.bench.controller.disconnect(handle: 0x41)
        #expect(room.received(0x40) == ["* central-BB02 left"])
    }

    /// A blemu node on Frames: its 4 KiB message at ATT_MTU 23 arrives whole, once, signed with
    /// its own name; it is acknowledged, again when resent; a plain member gets it as text.
    @Test func aFramedMembersMessageArrivesWholeOnceAndIsAcknowledged() throws {
        let room = try Room()
        room.join(0x40, room.a)                              // plain, ATT_MTU 100
        room.bench.controller.connect(handle: 0x41, peer: room.b, set: 1)   // framed, ATT_MTU 23
        let cccd = room.device.frames.clientConfigurationHandle ?? 0
        _ = room.bench.att([0x12, UInt8(cccd & 0xFF), UInt8(cccd >> 8), 0x01, 0x00], handle: 0x41)
        _ = room.received(0x40)
        _ = room.bench.controller.takeL2CAP(handle: 0x41, cid: L2CAPChannel.att)
        let text = String(repeating: "0123456789abcdef", count: 256)   // 4096 bytes
        let id = ChatMessageID(sender: "board-2", number: 1)
        let value = room.device.frames.valueHandle
        /// Writes every frame; returns the notifications the member got meanwhile.
        func send() -> [ChatFrame?] {
            var notified: [[UInt8]] = []
            let frames = ChatFrame.frames(of: Array(text.utf8), id: id, hops: 4, limit: 20)
            for frame in frames {
                let pdus = room.bench.att([0x12, UInt8(value & 0xFF), UInt8(value >> 8)] + frame, handle: 0x41)
                #expect(pdus.filter { $0 == [0x13] }.count == 1)
                notified += pdus.filter { $0.first == 0x1B }
            }
            return notified.map { try? ChatFrame(decoding: $0.dropFirst(3)) }
        }
        #expect(send() == [.ack(number: 1, sender: "board-2")])
        #expect(room.lines.last == "[board-2] \(text)")
        #expect(room.received(0x40).joined() == "board-2: \(text)")
        // Resent (the ACK was lost, say): acknowledged again, delivered no more.
        let before = room.lines.count
        #expect(send() == [.ack(number: 1, sender: "board-2")])
        #expect(room.lines.count == before && room.received(0x40).isEmpty)
        // The host's line reaches the framed member as frames it can put together.
        room.device.send("hi")
        let frames = room.bench.controller.takeL2CAP(handle: 0x41, cid: L2CAPChannel.att).filter { $0.first == 0x1B }
        var reassembly = ChatReassembly()
        let outcomes = frames.compactMap { try? ChatFrame(decoding: $0.dropFirst(3)) }.map { reassembly.take($0) }
        guard case let .message(from, text, hops)? = outcomes.last else {
            Issue.record("the framed member could not put the host's line together: \(outcomes)")
            return
        }
        #expect(from.sender == "Host" && text == Array("hi".utf8) && hops == ChatDevice.initialHops)
    }

    /// A bonded member's subscription comes back when its link is encrypted, before its RESUME
    /// can pass in a room that needs encryption: a RESUME from a member that has heard no live
    /// line yet still catches it up; one from a member that has is too late and changes nothing.
    @Test func aResumeJustAfterASubscriptionStillCatchesUp() throws {
        let room = try Room()
        let frames = room.device.frames
        func subscribe(_ handle: UInt16, _ peer: BluetoothAddress) {
            room.bench.controller.connect(handle: handle, peer: peer, set: 1)
            let cccd = frames.clientConfigurationHandle ?? 0
            _ = room.bench.att([0x12, UInt8(cccd & 0xFF), UInt8(cccd >> 8), 0x01, 0x00], handle: handle)
        }
        /// What the host answered and notified meanwhile.
        func resume(_ handle: UInt16, after id: ChatMessageID) -> [[UInt8]] {
            let value = frames.valueHandle
            return room.bench.att([0x12, UInt8(value & 0xFF), UInt8(value >> 8)] + ChatFrame.resume(number: id.number, sender: id.sender).encoded(),
                               handle: handle)
        }
        /// The messages notified in `pdus`, put together.
        func heard(_ pdus: [[UInt8]]) -> [(ChatMessageID, String)] {
            var reassembly = ChatReassembly()
            return pdus.filter { $0.first == 0x1B }
                .compactMap { try? ChatFrame(decoding: $0.dropFirst(3)) }.compactMap {
                    if case let .message(id, text, _) = reassembly.take($0), !id.sender.isEmpty { return (id, String(decoding: text, as: UTF8.self)) }
                    return nil
                }
        }
        subscribe(0x41, room.a)
        for text in ["one", "two", "three"] { room.device.send(text) }
        let live = heard(room.bench.controller.takeL2CAP(handle: 0x41, cid: L2CAPChannel.att))
        #expect(live.map(\.1) == ["one", "two", "three"])
        let one = try #require(live.first?.0)
        // Subscribed, nothing live heard yet, then RESUME: what came after "one", in order.
        subscribe(0x42, room.b)
        #expect(heard(resume(0x42, after: one)).map(\.1) == ["two", "three"])
        // A member that heard live lines: its late RESUME replays nothing.
        #expect(heard(resume(0x41, after: one)).isEmpty)
    }

    /// A blemu node joins as `central-XXXX` and then names itself in its messages: its leave
    /// is announced with the name its join was, one name for one member.
    @Test func aMemberLeavesUnderTheNameItJoinedWith() throws {
        let room = try Room()
        room.join(0x40, room.a)
        room.bench.controller.connect(handle: 0x41, peer: room.b, set: 1)
        let cccd = room.device.frames.clientConfigurationHandle ?? 0
        _ = room.bench.att([0x12, UInt8(cccd & 0xFF), UInt8(cccd >> 8), 0x01, 0x00], handle: 0x41)
        let value = room.device.frames.valueHandle
        for frame in ChatFrame.frames(of: Array("hi".utf8), id: ChatMessageID(sender: "board-2", number: 7), hops: 4, limit: 20) {
            _ = room.bench.att([0x12, UInt8(value & 0xFF), UInt8(value >> 8)] + frame, handle: 0x41)
        }
        room.bench.controller.disconnect(handle: 0x41)
        #expect(room.lines == ["* central-AA01 joined", "* central-BB02 joined", "[board-2] hi", "* central-BB02 left"])
        #expect(room.received(0x40) == ["* central-BB02 joined", "board-2: hi", "* central-BB02 left"])
    }

    /// A member that lost its link resends what was not acknowledged on a new one: the host
    /// recognises the message by its identity, acknowledges it, and delivers it no more.
    @Test func aResendOnANewLinkIsDeliveredOnce() throws {
        let room = try Room()
        func joinFramed(_ handle: UInt16) {
            room.bench.controller.connect(handle: handle, peer: room.b, set: 1)
            let cccd = room.device.frames.clientConfigurationHandle ?? 0
            _ = room.bench.att([0x12, UInt8(cccd & 0xFF), UInt8(cccd >> 8), 0x01, 0x00], handle: handle)
        }
        func send(_ text: String, number: UInt32, on handle: UInt16) -> [ChatFrame] {
            let value = room.device.frames.valueHandle
            var notified: [[UInt8]] = []
            for frame in ChatFrame.frames(of: Array(text.utf8), id: ChatMessageID(sender: "board-2", number: number), hops: 4, limit: 20) {
                notified += room.bench.att([0x12, UInt8(value & 0xFF), UInt8(value >> 8)] + frame, handle: handle).filter { $0.first == 0x1B }
            }
            return notified.compactMap { try? ChatFrame(decoding: $0.dropFirst(3)) }.filter { if case .ack = $0 { true } else { false } }
        }
        joinFramed(0x41)
        #expect(send("a line longer than one frame", number: 1, on: 0x41) == [.ack(number: 1, sender: "board-2")])
        room.bench.controller.disconnect(handle: 0x41)
        joinFramed(0x42)
        let before = room.lines.filter { $0.hasPrefix("[board-2]") }.count
        #expect(send("a line longer than one frame", number: 1, on: 0x42) == [.ack(number: 1, sender: "board-2")])
        #expect(send("and a new one", number: 2, on: 0x42) == [.ack(number: 2, sender: "board-2")])
        #expect(room.lines.filter { $0.hasPrefix("[board-2]") } .count == before + 1)
        #expect(room.lines.last == "[board-2] and a new one")
    }

    /// A line longer than ATT_MTU - 3 goes as several notifications, cut between characters.
    @Test func longLinesAreCutBetweenCharacters() {
        let parts = ChatDevice.parts(of: "aü" + String(repeating: "€", count: 12), limit: 20)
        #expect(parts.allSatisfy { $0.count <= 20 && String(validating: $0, as: UTF8.self) != nil })
        #expect(String(decoding: parts.joined(), as: UTF8.self) == "aü" + String(repeating: "€", count: 12))
        #expect(parts.count == 3)
    }

    /// A member at ATT_MTU 23 whose name takes 32 bytes: its ACK fits a notification (20 bytes),
    /// naming the start of its name, and acknowledges its message and no other (the whole
    /// 37-byte ACK was cut by the stack in the middle of a character: never acknowledged).
    @Test func anAckFitsTheMembersNotificationWhateverItsName() throws {
        let room = try Room()
        room.bench.controller.connect(handle: 0x41, peer: room.b, set: 1)   // framed, ATT_MTU 23
        let cccd = room.device.frames.clientConfigurationHandle ?? 0
        _ = room.bench.att([0x12, UInt8(cccd & 0xFF), UInt8(cccd >> 8), 0x01, 0x00], handle: 0x41)
        _ = room.bench.controller.takeL2CAP(handle: 0x41, cid: L2CAPChannel.att)
        let id = ChatMessageID(sender: String(repeating: "é", count: 16), number: 7)
        let value = room.device.frames.valueHandle
        var notified: [[UInt8]] = []
        for frame in ChatFrame.frames(of: Array("hello".utf8), id: id, hops: 4, limit: 20) {
            notified += room.bench.att([0x12, UInt8(value & 0xFF), UInt8(value >> 8)] + frame, handle: 0x41).filter { $0.first == 0x1B }
        }
        #expect(notified.count == 1 && notified.allSatisfy { $0.count <= 23 })
        guard case let .ack(number, sender)? = try? ChatFrame(decoding: notified[0].dropFirst(3)) else {
            Issue.record("no ACK that decodes: \(notified)")
            return
        }
        #expect(sender == String(repeating: "é", count: 7) && id.isAcknowledged(number: number, sender: sender))
        #expect(!ChatMessageID(sender: String(repeating: "é", count: 6) + "e", number: 7).isAcknowledged(number: number, sender: sender))
        #expect(!ChatMessageID(sender: id.sender, number: 8).isAcknowledged(number: number, sender: sender))
        #expect(!ChatMessageID(sender: "éé", number: 7).isAcknowledged(number: number, sender: "é"), "a short name is matched whole")
    }

    /// A character longer than a notification (a letter with 30 combining marks: 61 bytes) is
    /// cut between its scalars: every piece is UTF-8 a plain client can show, and nothing is
    /// lost (it was cut to its first 20 bytes, in the middle of a scalar, the rest dropped).
    @Test func aCharacterLongerThanANotificationIsCutBetweenItsScalars() {
        let text = "ab " + "e" + String(repeating: "\u{301}", count: 30) + " c"
        let parts = ChatDevice.parts(of: text, limit: 20)
        #expect(parts.allSatisfy { $0.count <= 20 && String(validating: $0, as: UTF8.self) != nil })
        #expect(parts.joined().elementsEqual(text.utf8))
    }

    /// A member whose link is full gets its lines later, in order; past its queue's bound the
    /// oldest give way to one line saying how many it missed: never a silent drop.
    @Test func aSlowMemberIsToldWhatItMissed() throws {
        let room = try Room()
        room.join(0x40, room.a)
        _ = room.received(0x40)
        room.bench.controller.autoComplete = false
        let total = ChatDevice.memberQueueLimit + 40
        for index in 0..<total { room.device.send("line \(index)") }
        var got = room.received(0x40)
        for _ in 0..<400 where got.last != "Host: line \(total - 1)" {
            room.bench.controller.completePackets()
            got += room.received(0x40)
        }
        let lines = got.filter { $0.hasPrefix("Host: line ") }.map { Int($0.dropFirst("Host: line ".count))! }
        let missed = got.first { $0.hasPrefix("* you missed ") }
        #expect(missed != nil)
        let count = missed.flatMap { Int($0.dropFirst("* you missed ".count).prefix { $0.isNumber }) } ?? 0
        // In order, none twice, and every line either received or counted as missed.
        #expect(lines == lines.sorted() && Set(lines).count == lines.count)
        #expect(lines.count + count == total && lines.last == total - 1)
    }

    /// A line cut into several notifications is never cut into: past the queue's bound the
    /// half-sent line is finished, not dropped, and the "you missed" note comes between two
    /// whole lines (it came in the middle of one, and the overflow dropped a half-sent line's
    /// rest, so a plain client showed pieces of lines run together).
    @Test func aMissedNoteNeverLandsInsideAHalfSentLine() throws {
        let room = try Room()
        room.bench.controller.connect(handle: 0x40, peer: room.a, set: 1)   // ATT_MTU 23: 20 bytes a part
        let cccd = room.device.message.clientConfigurationHandle ?? 0
        _ = room.bench.att([0x12, UInt8(cccd & 0xFF), UInt8(cccd >> 8), 0x01, 0x00], handle: 0x40)
        _ = room.received(0x40)
        room.bench.controller.autoComplete = false
        // "Host: line NNN " and padding: 50 bytes, 3 notifications each.
        func line(_ index: Int) -> String {
            let head = "line \(String(repeating: "0", count: 3 - String(index).count))\(index) "
            return head + String(repeating: "x", count: 44 - head.count)
        }
        let total = ChatDevice.memberQueueLimit + 40
        // One short line first: the controller's buffers (a multiple of 3) then fill halfway
        // through a long line.
        room.device.send("hi")
        var parts = room.received(0x40).filter { $0 != "Host: hi" }
        for index in 0..<total {
            room.device.send(line(index))
        }
        for _ in 0..<2000 where !parts.joined().hasSuffix("Host: " + line(total - 1)) {
            room.bench.controller.completePackets()
            parts += room.received(0x40)
        }
        var lines: [String] = []
        var current = ""
        var notes = 0
        for part in parts {
            if part.hasPrefix("* you missed ") {
                #expect(current.isEmpty, "the note came inside a line: \(current)")
                notes += 1
                continue
            }
            current += part
            if current.utf8.count >= 50 {
                lines.append(current)
                current = ""
            }
        }
        #expect(notes >= 1 && current.isEmpty)
        let indices = (0..<total).map { "Host: " + line($0) }
        #expect(lines.allSatisfy { indices.contains($0) }, "a line was cut into: \(lines.filter { !indices.contains($0) }.prefix(3))")
        #expect(lines.last == indices.last)
    }

    /// The host holds back its own lines (`isBusy`) while a member that is taking them has
    /// half its queue waiting, and says when there is room again (`onRoom`).
    @Test func aBusyMemberHoldsBackTheHostsLinesUntilItCatchesUp() throws {
        let room = try Room()
        room.join(0x40, room.a)
        _ = room.received(0x40)
        room.bench.controller.autoComplete = false
        var roomCalls = 0
        room.device.onRoom = { roomCalls += 1 }
        var sent = 0
        while !room.device.isBusy && sent < ChatDevice.memberQueueLimit {
            room.device.send("line \(sent)")
            sent += 1
        }
        #expect(room.device.isBusy)
        #expect(sent < ChatDevice.memberQueueLimit)   // before its queue overflows
        var got: [String] = []
        for _ in 0..<400 where roomCalls == 0 {
            room.bench.controller.completePackets()
            got += room.received(0x40)
        }
        #expect(roomCalls == 1 && !room.device.isBusy)
        #expect(!got.contains { $0.hasPrefix("* you missed") })
    }

    /// A bridge's message keeps its identity: every member gets it once however often it is
    /// given, and it does not rename the member that brought it.
    @Test func aRelayedMessageKeepsItsIdentityAndIsDeliveredOnce() throws {
        let room = try Room()
        room.join(0x40, room.a)
        room.bench.controller.connect(handle: 0x41, peer: room.b, set: 1)   // a bridge, framed
        let cccd = room.device.frames.clientConfigurationHandle ?? 0
        _ = room.bench.att([0x12, UInt8(cccd & 0xFF), UInt8(cccd >> 8), 0x01, 0x00], handle: 0x41)
        _ = room.received(0x40)
        _ = room.bench.controller.takeL2CAP(handle: 0x41, cid: L2CAPChannel.att)
        let id = ChatMessageID(sender: "far-away", number: 9)
        room.device.relay(id, text: "from the other room", hops: 2)
        room.device.relay(id, text: "from the other room", hops: 2)
        #expect(room.received(0x40) == ["far-away: from the other room"])
        // The bridge writes another's message, one hop down: acknowledged by identity, and the
        // bridge keeps its address name.
        let value = room.device.frames.valueHandle
        let other = ChatMessageID(sender: "farther", number: 3)
        var acks: [ChatFrame] = []
        for frame in ChatFrame.frames(of: Array("hi".utf8), id: other, hops: 3, limit: 20) {
            acks += room.bench.att([0x12, UInt8(value & 0xFF), UInt8(value >> 8)] + frame, handle: 0x41)
                .filter { $0.first == 0x1B }.compactMap { try? ChatFrame(decoding: $0.dropFirst(3)) }
                .filter { if case .ack = $0 { true } else { false } }
        }
        #expect(acks == [.ack(number: 3, sender: "farther")])
        #expect(room.received(0x40) == ["farther: hi"])
        #expect(room.device.memberNames.contains("central-BB02"))
        #expect(room.lines.last == "[farther] hi")
    }
}
