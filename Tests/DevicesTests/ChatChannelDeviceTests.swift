import BlemuATT
import BlemuChatProtocol
import BlemuCore
import BlemuDevice
import BlemuDevices
import BlemuGATT
import BlemuHCI
import BlemuHost
import BlemuL2CAP
import Testing
@testable import HostTestSupport

/// The chat host's L2CAP chat channel, driven by raw L2CAP from a scripted central: the SPSM in
/// the chat service's ABDD3056 characteristic, a member that joins with its first frame, one
/// frame a SDU both ways, plain and channel members in one room, the channel's security.
@Suite struct ChatChannelDeviceTests {
    /// JOIN is one byte, nothing after it; a channel frame is a whole message in one frame.
    @Test func joinAndTheChannelFrameCodec() throws {
        #expect(ChatFrame.join.encoded() == [0x07])
        #expect(try ChatFrame(decoding: [0x07][...]) == .join)
        #expect(throws: DecodeError.self) { try ChatFrame(decoding: [0x07, 0x00][...]) }
        var reassembly = ChatReassembly()
        #expect(reassembly.take(.join) == .incomplete)
        let text = Array(String(repeating: "é", count: 2048).utf8)   // 4096 bytes
        let id = ChatMessageID(sender: String(repeating: "n", count: 32), number: 7)
        let frame = ChatFrame.channelFrame(of: text, id: id, hops: 3)
        guard case let .data(number, hops, senderLength, total, chunk) = try ChatFrame(decoding: frame[...]) else {
            Issue.record("not a DATA")
            return
        }
        #expect(number == 7 && hops == 3 && senderLength == 32 && total == chunk.count && frame.count == 9 + 32 + 4096)
        #expect(frame.count <= ChatFrame.largestFrame && Int(ChatDevice.channelMTU) == ChatFrame.largestFrame)
        #expect(reassembly.take(try ChatFrame(decoding: frame[...])) == .message(id, text: text, hops: 3))
    }

    static func psm(of device: ChatDevice, on bench: SharedBench, handle: UInt16) -> UInt16? {
        guard let value = device.psm?.valueHandle,
              let answer = bench.att([0x0A, UInt8(value & 0xFF), UInt8(value >> 8)], handle: handle).first,
              answer.first == 0x0B, answer.count == 3 else { return nil }
        return UInt16(answer[1]) | UInt16(answer[2]) << 8
    }

    @Test func aChannelMemberJoinsWithItsFirstFrameAndChatsOneFrameASDUWithAPlainMember() throws {
        let device = ChatDevice()
        let bench = try SharedBench(devices: [device], sets: 4)
        device.hostName = "Host"
        var lines: [String] = []
        device.onHeard = { heard in
            switch heard {
            case .announcement(let text): lines.append(text)
            case let .message(id, text, _): lines.append("[\(id.sender)] \(text)")
            }
        }
        // A plain member on link 0x40.
        bench.controller.connect(handle: 0x40, peer: BluetoothAddress("C4:00:00:00:AA:01")!, set: 1)
        _ = bench.att([0x02, 100, 0], handle: 0x40)   // ATT_MTU 100: a line in one notification
        let cccd = device.message.clientConfigurationHandle ?? 0
        _ = bench.att([0x12, UInt8(cccd & 0xFF), UInt8(cccd >> 8), 0x01, 0x00], handle: 0x40)
        lines.removeAll()
        func plainReceived() -> [String] {
            bench.controller.takeL2CAP(handle: 0x40, cid: L2CAPChannel.att).filter { $0.first == 0x1B }
                .map { String(decoding: $0.dropFirst(3), as: UTF8.self) }
        }
        // The channel member on link 0x41 reads the SPSM from the chat service and opens it.
        bench.controller.connect(handle: 0x41, peer: BluetoothAddress("C4:00:00:00:CC:03")!, set: 1)
        let spsm = try #require(Self.psm(of: device, on: bench, handle: 0x41))
        #expect(spsm == device.spsm && (0x0080...0x00FF).contains(spsm))
        var peer = ChannelPeer(bench: bench, handle: 0x41)
        #expect(peer.open(spsm: spsm) == 0x0000)
        // Open but no member until its first frame: it hears nothing of the room meanwhile.
        device.send("before it joined")
        #expect(peer.received().isEmpty && lines.isEmpty)
        peer.send(ChatFrame.join.encoded())
        #expect(lines == ["* central-CC03 joined"])
        #expect(plainReceived().contains("* central-CC03 joined"))
        #expect(device.memberNames == ["central-AA01", "central-CC03"])

        // A 4 KiB message as one SDU (DATA, no MORE), K-framed by L2CAP: delivered once, acknowledged on the channel.
        let text = String(repeating: "0123456789abcdef", count: 256)
        let id = ChatMessageID(sender: "board-3", number: 9)
        let frame = ChatFrame.channelFrame(of: Array(text.utf8), id: id, hops: 4)
        #expect(ChatFrame.frames(of: Array(text.utf8), id: id, hops: 4, limit: 20).count > 1 && frame.count == 9 + 7 + 4096)
        peer.send(frame)
        #expect(lines.last == "[board-3] \(text)")
        #expect(peer.frames() == [.ack(number: 9, sender: "board-3")])
        #expect(plainReceived().joined() == "board-3: \(text)")
        // The host's line and the plain member's reach it as one whole frame each.
        device.send("hi")
        let value = device.message.valueHandle
        _ = bench.att([0x12, UInt8(value & 0xFF), UInt8(value >> 8)] + Array("plain".utf8), handle: 0x40)
        let got = peer.received()
        #expect(got.count == 2)
        var reassembly = ChatReassembly()
        let outcomes = got.compactMap { try? ChatFrame(decoding: $0[...]) }.map { reassembly.take($0) }
        #expect(outcomes.count == 2)
        for (outcome, (sender, said)) in zip(outcomes, [("Host", "hi"), ("central-AA01", "plain")]) {
            guard case let .message(from, bytes, _) = outcome else {
                Issue.record("not one whole frame: \(outcome)")
                continue
            }
            #expect(from.sender == sender && bytes == Array(said.utf8))
        }
        // A frame that does not decode is dropped and counted; the member stays.
        peer.send([0x7F, 0x00])
        #expect(device.refusedChannelFrames == 1 && device.memberNames.count == 2)
        // Its link goes: it leaves.
        bench.controller.disconnect(handle: 0x41)
        #expect(lines.last == "* central-CC03 left" && device.memberNames == ["central-AA01"])
    }

    /// A channel member faster than a plain member: its acknowledgements are held while the
    /// plain member (keeping up, its link full) has half its queue waiting, so a sender that
    /// keeps to its window waits; the plain member gets every line, none missed, and every ACK
    /// goes once there is room.
    @Test func aFastMembersAcknowledgementsWaitForASlowMember() throws {
        let device = ChatDevice()
        let bench = try SharedBench(devices: [device], sets: 4)
        bench.controller.connect(handle: 0x40, peer: BluetoothAddress("C4:00:00:00:AA:01")!, set: 1)
        _ = bench.att([0x02, 100, 0], handle: 0x40)
        let cccd = device.message.clientConfigurationHandle ?? 0
        _ = bench.att([0x12, UInt8(cccd & 0xFF), UInt8(cccd >> 8), 0x01, 0x00], handle: 0x40)
        bench.controller.connect(handle: 0x41, peer: BluetoothAddress("C4:00:00:00:CC:03")!, set: 1)
        var peer = ChannelPeer(bench: bench, handle: 0x41)
        #expect(peer.open(spsm: device.spsm) == 0x0000)
        peer.send(ChatFrame.join.encoded())
        bench.controller.completePackets()
        _ = bench.controller.takeL2CAP(handle: 0x40, cid: L2CAPChannel.att)
        _ = peer.received()
        bench.controller.autoComplete = false
        let count = 200
        for number in 1...count {
            peer.send(ChatFrame.channelFrame(of: Array("line \(number)".utf8), id: ChatMessageID(sender: "fast", number: UInt32(number)), hops: 4))
        }
        #expect(device.isBusy && device.heldAcknowledgementCount > 0)
        var plain: [String] = []
        var acks = 0
        for _ in 0..<1000 where plain.count < count || acks < count {
            bench.controller.completePackets()
            plain += bench.controller.takeL2CAP(handle: 0x40, cid: L2CAPChannel.att).filter { $0.first == 0x1B }
                .map { String(decoding: $0.dropFirst(3), as: UTF8.self) }
            acks += peer.frames().filter { if case .ack = $0 { true } else { false } }.count
        }
        #expect(plain == (1...count).map { "fast: line \($0)" })
        #expect(acks == count && device.heldAcknowledgementCount == 0)
    }

    /// The host's own source (stdin) that refills the room from `onRoom` while acknowledgements
    /// are held: each time the room is busy again, `onRoom` comes again once it drains, every
    /// line arrives and the held ACK goes. (The lost `onRoom` of a re-entrant release, which
    /// left `blemu chat`'s stdin paused with both ways bursting, shows only over rootcanal:
    /// test_chat.py's burst each way.)
    @Test func onRoomComesAgainAfterASourceRefillsTheRoomFromIt() throws {
        let device = ChatDevice()
        let bench = try SharedBench(devices: [device], sets: 4)
        device.hostName = "Host"
        bench.controller.connect(handle: 0x40, peer: BluetoothAddress("C4:00:00:00:AA:01")!, set: 1)
        _ = bench.att([0x02, 100, 0], handle: 0x40)
        let cccd = device.message.clientConfigurationHandle ?? 0
        _ = bench.att([0x12, UInt8(cccd & 0xFF), UInt8(cccd >> 8), 0x01, 0x00], handle: 0x40)
        bench.controller.connect(handle: 0x41, peer: BluetoothAddress("C4:00:00:00:CC:03")!, set: 1)
        var peer = ChannelPeer(bench: bench, handle: 0x41)
        #expect(peer.open(spsm: device.spsm) == 0x0000)
        peer.send(ChatFrame.join.encoded())
        bench.controller.completePackets()
        _ = bench.controller.takeL2CAP(handle: 0x40, cid: L2CAPChannel.att)
        _ = peer.received()
        bench.controller.autoComplete = false
        var said = 0
        var rooms = 0
        func fill() {
            while !device.isBusy, said < 600 {
                said += 1
                device.send("down \(said)")
            }
        }
        device.onRoom = {
            rooms += 1
            fill()
        }
        fill()
        #expect(device.isBusy)
        // The channel member's line while the room is busy: its ACK is held.
        peer.send(ChatFrame.channelFrame(of: Array("up".utf8), id: ChatMessageID(sender: "m", number: 1), hops: 4))
        #expect(device.heldAcknowledgementCount == 1)
        var plain: [String] = []
        for _ in 0..<3000 where said < 600 || plain.count < 601 {
            bench.controller.completePackets()
            plain += bench.controller.takeL2CAP(handle: 0x40, cid: L2CAPChannel.att).filter { $0.first == 0x1B }
                .map { String(decoding: $0.dropFirst(3), as: UTF8.self) }
        }
        #expect(said == 600 && rooms >= 2)
        #expect(plain.filter { $0.hasPrefix("Host: ") } == (1...600).map { "Host: down \($0)" })
        #expect(device.heldAcknowledgementCount == 0 && peer.frames().contains(.ack(number: 1, sender: "m")))
    }

    /// A member joining again on the channel resumes with RESUME as its first frame: what the
    /// room said after its last message comes first, in order.
    @Test func aResumeAsTheFirstFrameCatchesTheMemberUp() throws {
        let device = ChatDevice()
        let bench = try SharedBench(devices: [device], sets: 4)
        device.hostName = "Host"
        device.send("one")
        device.send("two")
        device.send("three")
        bench.controller.connect(handle: 0x41, peer: BluetoothAddress("C4:00:00:00:CC:03")!, set: 1)
        var peer = ChannelPeer(bench: bench, handle: 0x41)
        #expect(peer.open(spsm: device.spsm) == 0x0000)
        // It had "one" (the host numbers its lines from a random start: learn it from a replay).
        peer.send(ChatFrame.resume(number: 0, sender: "nobody").encoded())
        var reassembly = ChatReassembly()
        let all = peer.frames().compactMap { $0 }.map { reassembly.take($0) }.compactMap { outcome -> (ChatMessageID, String)? in
            guard case let .message(id, bytes, _) = outcome else { return nil }
            return (id, String(decoding: bytes, as: UTF8.self))
        }
        #expect(all.map(\.1).suffix(3) == ["one", "two", "three"])
        let first = try #require(all.first { $0.1 == "one" }?.0)
        bench.controller.disconnect(handle: 0x41)
        bench.controller.connect(handle: 0x42, peer: BluetoothAddress("C4:00:00:00:CC:03")!, set: 1)
        var again = ChannelPeer(bench: bench, handle: 0x42)
        #expect(again.open(spsm: device.spsm) == 0x0000)
        again.send(ChatFrame.resume(number: first.number, sender: first.sender).encoded())
        var second = ChatReassembly()
        let caught = again.frames().compactMap { $0 }.map { second.take($0) }.compactMap { outcome -> String? in
            guard case let .message(id, bytes, _) = outcome, !id.sender.isEmpty else { return nil }
            return String(decoding: bytes, as: UTF8.self)
        }
        #expect(caught == ["two", "three"])
    }

    /// The channel needs what Message and Frames need: an unencrypted link is refused with
    /// Insufficient Encryption (0x0008), one without a passkey's key with Insufficient
    /// Authentication (0x0005), Vol 3, Part A, 4.23. `--transport gatt` publishes none.
    @Test func theChannelHasTheRoomsSecurityAndGATTOnlyHasNone() throws {
        for (requirement, refusal) in [(ChatDevice.LinkRequirement.encrypted, UInt16(0x0008)), (.authenticated, 0x0005)] {
            let device = ChatDevice(linkRequirement: requirement)
            let bench = try SharedBench(devices: [device], sets: 4)
            bench.controller.connect(handle: 0x41, peer: BluetoothAddress("C4:00:00:00:CC:03")!, set: 1)
            var peer = ChannelPeer(bench: bench, handle: 0x41)
            #expect(peer.open(spsm: device.spsm) == refusal)
        }
        let open = ChatDevice()
        _ = try SharedBench(devices: [open], sets: 4)
        #expect(open.channelSecurity == .none && open.spsm != 0)
        let gattOnly = ChatDevice(transport: .gatt)
        _ = try SharedBench(devices: [gattOnly], sets: 4)
        #expect(gattOnly.psm == nil && gattOnly.spsm == 0)
        #expect(!gattOnly.services[0].characteristics.contains { $0.uuid == L2CAPPSMCharacteristic.uuid })
    }
}
