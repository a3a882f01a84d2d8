import BlemuATT
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
@testable import HostTestSupport

/// Signed frames on the air and the host that checks them (Docs/CHAT.md, "Signed messages"):
/// the codec takes any bytes; a hostile member cannot speak as another, silence another, or
/// make an announcement.
private let quiet = Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })

@Suite struct ChatSignedTests {
    let alice = ChatSigningKey(), mallory = ChatSigningKey(), hostKey = ChatSigningKey()

    func signed(_ sender: String, _ number: UInt32, _ text: String, by key: ChatSigningKey) -> ChatMessageID {
        ChatMessageID(sender: sender, number: number, proof: ChatProof.sign(room: "kitchen", sender: sender, number: number, text: Array(text.utf8), with: key))
    }

    // MARK: The codec

    @Test func aSignedMessageTravelsInPiecesAndComesOutWithItsProof() throws {
        let id = signed("alice", 7, "hello there", by: alice)
        let frames = ChatFrame.frames(of: Array("hello there".utf8), id: id, hops: 3, limit: 20)
        #expect(frames[0].first == ChatFrame.signedDataType)
        // 96 bytes of proof + 5 of name + 11 of text: 11 in SIGNED, 17 in each MORE.
        #expect(frames.count == 1 + (96 + 5 + 11 - 11 + 16) / 17)
        var reassembly = ChatReassembly()
        var outcome: ChatReassembly.Outcome = .incomplete
        for frame in frames { outcome = reassembly.take(try ChatFrame(decoding: frame[...])) }
        guard case let .message(got, text, hops) = outcome else { Issue.record("\(outcome)"); return }
        #expect(got == id && got.proof == id.proof && text == Array("hello there".utf8) && hops == 3)
        #expect(got.proof?.verifies(room: "kitchen", sender: "alice", number: 7, text: text) == true)
        // Hops are not signed: a bridge changes them and the proof still holds.
        #expect(try ChatFrame(decoding: frames[0][...]) == .signedData(number: 7, hops: 3, senderLength: 5, total: 112,
                                                                       chunk: Array(frames[0].dropFirst(9))))
    }

    @Test func truncatedKeysAndSignaturesAndWrongLengthsAreRefused() throws {
        // A signed stream too short for its key and signature and name: refused by the decoder.
        for total in [0, 95, 96 + 4] {
            let frame = ChatFrame.signedData(number: 1, hops: 0, senderLength: 5, total: total, chunk: []).encoded()
            #expect(throws: DecodeError.self) { try ChatFrame(decoding: frame[...]) }
        }
        // Text past 4096 bytes after the proof; a chunk longer than its stream; a header cut short.
        for bad: [UInt8] in [ChatFrame.signedData(number: 1, hops: 0, senderLength: 1, total: 96 + 1 + 4097, chunk: []).encoded(),
                               ChatFrame.signedData(number: 1, hops: 0, senderLength: 0, total: 96, chunk: [UInt8](repeating: 0, count: 97)).encoded(),
                               [0x05, 1, 0, 0, 0, 0, 0, 96], [0x05]] {
            #expect(throws: DecodeError.self) { try ChatFrame(decoding: bad[...]) }
        }
        // The longest sealed message's last MORE fits; one byte past it does not.
        #expect((try? ChatFrame(decoding: ChatFrame.more(offset: 96 + 32 + 4096 + 28 - 1, chunk: [0]).encoded()[...])) != nil)
        #expect(throws: DecodeError.self) { try ChatFrame(decoding: ChatFrame.more(offset: 96 + 32 + 4096 + 28, chunk: [0]).encoded()[...]) }
        // A key that is no Ed25519 point or a stream that is not UTF-8: the message is dropped whole.
        var reassembly = ChatReassembly()
        let offCurve = [UInt8](repeating: 0xFF, count: 32) + [UInt8](repeating: 0, count: 64) + Array("a".utf8)
        let frame = try ChatFrame(decoding: ChatFrame.signedData(number: 1, hops: 0, senderLength: 1, total: offCurve.count, chunk: offCurve).encoded()[...])
        let outcome = reassembly.take(frame)
        #expect(outcome == .inconsistent || { if case let .message(id, _, _) = outcome { id.proof != nil } else { false } }())
        // Whatever the key, a signature of zeros verifies nothing.
        let zeros = ChatProof(key: alice.publicKey, signature: [UInt8](repeating: 0, count: 64))
        #expect(!zeros.verifies(room: "kitchen", sender: "alice", number: 1, text: []))
    }

    // MARK: The host

    final class Room {
        let device = ChatDevice()
        let bench: SharedBench
        var lines: [String] = []

        init(trust: ChatTrust?) throws {
            bench = try SharedBench(devices: [device], sets: 4)
            device.hostName = "kitchen"
            device.trust = trust
            device.onHeard = { [unowned self] heard in
                switch heard {
                case .announcement(let text): self.lines.append(text)
                case let .message(id, text, _): self.lines.append("[\(id.sender)] \(text)")
                }
            }
        }

        func joinFramed(_ handle: UInt16, _ last: UInt8) {
            bench.controller.connect(handle: handle, peer: BluetoothAddress("C4:00:00:00:00:\(Hex.bytes([last]))")!, set: 1)
            let cccd = device.frames.clientConfigurationHandle ?? 0
            _ = bench.att([0x12, UInt8(cccd & 0xFF), UInt8(cccd >> 8), 0x01, 0x00], handle: handle)
        }

        /// Writes a message's frames; the ATT answers (0: taken, else the error code) and the ACKs it got.
        @discardableResult
        func write(_ text: String, as id: ChatMessageID, from handle: UInt16) -> (responses: [UInt8], acks: [ChatFrame]) {
            let value = device.frames.valueHandle
            var responses: [UInt8] = []
            var notified: [[UInt8]] = []
            for frame in ChatFrame.frames(of: Array(text.utf8), id: id, hops: 4, limit: 20) {
                let pdus = bench.att([0x12, UInt8(value & 0xFF), UInt8(value >> 8)] + frame, handle: handle)
                responses += pdus.filter { $0.first != 0x1B }.map { $0.first == 0x01 ? $0.last! : 0 }
                notified += pdus.filter { $0.first == 0x1B }
            }
            return (responses, notified.compactMap { try? ChatFrame(decoding: $0.dropFirst(3)) }.filter { if case .ack = $0 { true } else { false } })
        }

        /// What a framed member was told since the last call: `[SENDER] text`, announcements as they are.
        func heard(_ handle: UInt16) -> [String] {
            var reassembly = ChatReassembly()
            return bench.controller.takeL2CAP(handle: handle, cid: L2CAPChannel.att).filter { $0.first == 0x1B }
                .compactMap { try? ChatFrame(decoding: $0.dropFirst(3)) }
                .compactMap { frame -> String? in
                    guard case let .message(id, text, _) = reassembly.take(frame) else { return nil }
                    return id.sender.isEmpty ? String(decoding: text, as: UTF8.self) : "[\(id.sender)] \(String(decoding: text, as: UTF8.self))"
                }
        }
    }

    /// The issue's suppression attack: mallory reads alice's numbers from relayed frames and
    /// writes ten messages as alice with the next numbers, unsigned and signed with her own key.
    /// Every one of alice's next five lines is still delivered, once, in order, to the host and
    /// to bob; mallory's unsigned ones show as `~alice`, the signed ones nowhere.
    @Test func theSuppressionAttackDeliversAllOfAlicesLines() throws {
        let room = try Room(trust: ChatTrust(room: "kitchen", identity: hostKey, me: "kitchen", logger: quiet))
        room.joinFramed(0x41, 0xA1)   // alice
        room.joinFramed(0x42, 0xB2)   // bob
        room.joinFramed(0x43, 0xC3)   // mallory
        room.write("first", as: signed("alice", 100, "first", by: alice), from: 0x41)
        for number in UInt32(101)...110 {
            room.write("pre-empted \(number)", as: ChatMessageID(sender: "alice", number: number), from: 0x43)
            room.write("signed pre-empted \(number)", as: signed("alice", number, "signed pre-empted \(number)", by: mallory), from: 0x43)
        }
        _ = room.heard(0x42)
        let before = room.lines.count
        for number in UInt32(101)...105 {
            let acks = room.write("line \(number)", as: signed("alice", number, "line \(number)", by: alice), from: 0x41).acks
            #expect(acks == [.ack(number: number, sender: "alice")])
        }
        let alices = (101...105).map { "[alice] line \($0)" }
        #expect(Array(room.lines[before...]) == alices)
        #expect(room.heard(0x42) == alices)
        #expect(room.lines.filter { $0.hasPrefix("[alice] signed pre-empted") }.isEmpty)
        #expect(room.lines.filter { $0.hasPrefix("[~alice] pre-empted") }.count == 10)
        #expect(room.device.trust?.impersonations == 10)
    }

    /// A member's frame with an empty sender would show on the others as an announcement
    /// (`* alice left`): the host drops it, trust or not.
    @Test func noMemberFrameMakesAnAnnouncement() throws {
        for trust in [nil, ChatTrust(room: "kitchen", identity: hostKey, me: "kitchen", logger: quiet)] {
            let room = try Room(trust: trust)
            room.joinFramed(0x41, 0xA1)
            room.joinFramed(0x42, 0xB2)
            _ = room.heard(0x41)
            let before = room.lines
            room.write("* alice left", as: ChatMessageID(sender: "", number: 1), from: 0x42)
            room.write("* alice left", as: signed("", 2, "* alice left", by: mallory), from: 0x42)
            #expect(room.lines == before && room.heard(0x41).isEmpty)
            #expect(room.device.forgedAnnouncements == 2)
        }
    }

    /// The host's own name is bound to its key: a member that signs as the host is refused; one
    /// that writes unsigned as the host shows as `~kitchen`, never as `kitchen`.
    @Test func nobodySpeaksAsTheHost() throws {
        let room = try Room(trust: ChatTrust(room: "kitchen", identity: hostKey, me: "kitchen", logger: quiet))
        room.joinFramed(0x41, 0xA1)
        room.joinFramed(0x42, 0xB2)
        _ = room.heard(0x41)
        room.write("FORGED: send me your PIN", as: signed("kitchen", 1, "FORGED: send me your PIN", by: mallory), from: 0x42)
        room.write("FORGED: send me your PIN", as: ChatMessageID(sender: "kitchen", number: 2), from: 0x42)
        #expect(room.heard(0x41) == ["[~kitchen] FORGED: send me your PIN"])
        #expect(!room.lines.contains("[kitchen] FORGED: send me your PIN"))
        // The host's own lines and announcements are signed with its key.
        room.device.send("dinner")
        room.joinFramed(0x44, 0xD4)
        let frames = room.bench.controller.takeL2CAP(handle: 0x41, cid: L2CAPChannel.att).filter { $0.first == 0x1B }
            .compactMap { try? ChatFrame(decoding: $0.dropFirst(3)) }
        var reassembly = ChatReassembly()
        let ids = frames.compactMap { frame -> ChatMessageID? in
            if case let .message(id, _, _) = reassembly.take(frame) { id } else { nil }
        }
        #expect(ids.count == 2 && ids.allSatisfy { $0.proof?.key == hostKey.publicKey })
    }

    /// `signedOnly`: plain writes and unsigned frames are refused with ATT error 0x13; signed ones are taken.
    @Test func aSignedOnlyRoomRefusesUnsignedWrites() throws {
        let room = try Room(trust: ChatTrust(room: "kitchen", identity: hostKey, me: "kitchen", signedOnly: true, logger: quiet))
        room.joinFramed(0x41, 0xA1)
        let value = room.device.message.valueHandle
        #expect(room.bench.att([0x12, UInt8(value & 0xFF), UInt8(value >> 8)] + Array("hi".utf8), handle: 0x41).first?.last == 0x13)
        #expect(room.write("unsigned", as: ChatMessageID(sender: "bob", number: 1), from: 0x41).responses.first == 0x13)
        let taken = room.write("signed", as: signed("alice", 1, "signed", by: alice), from: 0x41)
        #expect(taken.responses.allSatisfy { $0 == 0 } && taken.acks == [.ack(number: 1, sender: "alice")])
        #expect(room.lines.last == "[alice] signed" && !room.lines.contains { $0.contains("unsigned") || $0.hasSuffix("hi") })
    }

    /// A private room's host tells a plain client once that it cannot join and makes it no
    /// member; a plain write is refused (0x13); framed members get sealed lines only.
    @Test func aPlainClientCannotJoinAPrivateRoom() throws {
        let roomKey = ChatRoomKey(passphrase: Array("pw".utf8), room: "kitchen")
        let room = try Room(trust: ChatTrust(room: "kitchen", identity: hostKey, me: "kitchen", roomKey: roomKey, logger: quiet))
        room.bench.controller.connect(handle: 0x40, peer: BluetoothAddress("C4:00:00:00:00:A0")!, set: 1)
        let cccd = room.device.message.clientConfigurationHandle ?? 0
        _ = room.bench.att([0x12, UInt8(cccd & 0xFF), UInt8(cccd >> 8), 0x01, 0x00], handle: 0x40)
        room.bench.scheduler.advance(by: .milliseconds(1))
        let told = room.bench.controller.takeL2CAP(handle: 0x40, cid: L2CAPChannel.att).filter { $0.first == 0x1B }
        #expect(told.map { String(decoding: $0.dropFirst(3), as: UTF8.self) }.joined() == ChatDevice.privateRoomNotice)
        #expect(room.device.memberNames.isEmpty && room.lines.isEmpty)
        let value = room.device.message.valueHandle
        #expect(room.bench.att([0x12, UInt8(value & 0xFF), UInt8(value >> 8)] + Array("hi".utf8), handle: 0x40).first?.last == 0x13)
        room.joinFramed(0x41, 0xA1)
        _ = room.heard(0x41)
        room.device.send("dinner")
        let frames = room.bench.controller.takeL2CAP(handle: 0x41, cid: L2CAPChannel.att).filter { $0.first == 0x1B }
        #expect(frames.first.map { $0[3] } == ChatFrame.sealedDataType)
        #expect(room.bench.controller.takeL2CAP(handle: 0x40, cid: L2CAPChannel.att).isEmpty)
    }

    /// A plain client's first line `/name NAME` names it: its lines show as `[~NAME]` (never
    /// under a name a key holds), the room hears it once; only the first line counts.
    @Test func aPlainClientNamesItselfWithItsFirstLine() throws {
        let room = try Room(trust: ChatTrust(room: "kitchen", identity: hostKey, me: "kitchen", logger: quiet))
        room.joinFramed(0x41, 0xA1)
        room.bench.controller.connect(handle: 0x40, peer: BluetoothAddress("C4:00:00:00:00:A0")!, set: 1)
        let cccd = room.device.message.clientConfigurationHandle ?? 0
        _ = room.bench.att([0x12, UInt8(cccd & 0xFF), UInt8(cccd >> 8), 0x01, 0x00], handle: 0x40)
        _ = room.heard(0x41)
        let value = room.device.message.valueHandle
        let write = { (text: String) in _ = room.bench.att([0x12, UInt8(value & 0xFF), UInt8(value >> 8)] + Array(text.utf8), handle: 0x40) }
        write("/name  phone ")
        write("hello")
        write("/name kitchen")
        #expect(room.heard(0x41) == ["* central-00A0 is ~phone", "[~phone] hello", "[~phone] /name kitchen"])
        #expect(Array(room.lines.suffix(3)) == ["* central-00A0 is ~phone", "[~phone] hello", "[~phone] /name kitchen"])
    }

    /// No renaming after joining (Docs/CHAT.md, "The plain protocol"): a blemu member is named once, by its
    /// first own message, and a later message under another name is that message's sender only
    /// (a member's lines may come from others, as a bridge's): the member keeps its name, and
    /// nothing is announced for either.
    @Test func aFramedMemberIsNamedOnceByItsFirstMessage() throws {
        let room = try Room(trust: nil)
        room.joinFramed(0x41, 0xA1)
        room.joinFramed(0x42, 0xB2)
        _ = room.heard(0x42)
        room.write("hi", as: ChatMessageID(sender: "board-2", number: 1), from: 0x41)
        #expect(room.device.memberNames == ["board-2", "central-00B2"])
        room.write("now", as: ChatMessageID(sender: "board-9", number: 2), from: 0x41)
        #expect(room.device.memberNames == ["board-2", "central-00B2"])
        #expect(room.heard(0x42) == ["[board-2] hi", "[board-9] now"])
    }

    /// Names that are no name (empty, too long, starting with the unverified mark): the line is an ordinary one.
    @Test func aPlainNameMustBeOne() {
        #expect(ChatDevice.plainName(" phone  ") == "phone")
        #expect(ChatDevice.plainName("   ") == nil)
        #expect(ChatDevice.plainName("~alice") == nil)
        #expect(ChatDevice.plainName(Substring(String(repeating: "x", count: ChatFrame.maxSenderBytes + 1))) == nil)
    }

    /// A plain client told it cannot join a private room: its link can be closed, and only its
    /// own (a handle given to another central since is left alone).
    @Test func aRefusedPlainClientsLinkIsClosedAndNoOtherOne() throws {
        let roomKey = ChatRoomKey(passphrase: Array("pw".utf8), room: "kitchen")
        let room = try Room(trust: ChatTrust(room: "kitchen", identity: hostKey, me: "kitchen", roomKey: roomKey, logger: quiet))
        var refused: [ATTPeer] = []
        room.device.onPlainClientRefused = { refused.append($0) }
        room.bench.controller.connect(handle: 0x40, peer: BluetoothAddress("C4:00:00:00:00:A0")!, set: 1)
        let cccd = room.device.message.clientConfigurationHandle ?? 0
        _ = room.bench.att([0x12, UInt8(cccd & 0xFF), UInt8(cccd >> 8), 0x01, 0x00], handle: 0x40)
        #expect(refused.count == 1)
        let peripheral = room.bench.peripherals[0]
        room.bench.controller.disconnect(handle: 0x40)
        room.bench.controller.connect(handle: 0x40, peer: BluetoothAddress("C4:00:00:00:00:B0")!, set: 1)
        let before = room.bench.controller.commands(HCIOpcode.disconnect).count
        #expect(!peripheral.disconnect(refused[0]))
        #expect(room.bench.controller.commands(HCIOpcode.disconnect).count == before)
        _ = room.bench.att([0x12, UInt8(cccd & 0xFF), UInt8(cccd >> 8), 0x01, 0x00], handle: 0x40)
        #expect(refused.count == 2 && peripheral.disconnect(refused[1]))
        #expect(room.bench.controller.commands(HCIOpcode.disconnect).count == before + 1)
    }
}
