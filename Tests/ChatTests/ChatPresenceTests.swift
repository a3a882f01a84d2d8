import BlemuChat
import BlemuChatProtocol
import BlemuCore
import Testing

/// What systemd's STATUS= line of `blemu chat` is built from: the host's members and the
/// member's place in the host's room, each told when it changes — they change on ATT writes and
/// channel frames, which are no HCI events, so the stack would not notice them otherwise.
@Suite struct ChatPresenceTests {
    @Test func theHostTellsEachJoinAndLeaveAndTheMemberEachJoinAndLostLink() throws {
        let room = try ChatAir(host: .auto, member: .auto)
        var membersChanged = 0, inRoomChanged = 0
        room.device.onMembersChanged = { membersChanged += 1 }
        room.member.onInRoomChanged = { inRoomChanged += 1 }
        #expect(room.device.memberCount == 0 && !room.member.isInRoom && room.member.hostAddress == nil)
        try room.join()
        #expect(room.device.memberCount == 1 && membersChanged == 1)
        #expect(room.member.isInRoom && inRoomChanged == 1)
        #expect(room.member.hostAddress == room.peripheralController.randomAddress)
        #expect(room.member.hostName == "Room")

        // The link drops: the host's member leaves, the member is out of the room (and looks again).
        #expect(room.peripheral.disconnectAll() == 1)
        room.run()
        #expect(room.device.memberCount == 0 && membersChanged == 2)
        #expect(!room.member.isInRoom && inRoomChanged == 2)
        // It joins again when it hears the host: told once more.
        try room.advertise()
        #expect(room.member.isInRoom && inRoomChanged == 3 && room.device.memberCount == 1 && membersChanged == 3)
    }

    /// A member on GATT (Frames subscribed to, no channel) is counted the same way.
    @Test func aGATTMemberIsCountedToo() throws {
        let room = try ChatAir(host: .gatt, member: .auto)
        var membersChanged = 0
        room.device.onMembersChanged = { membersChanged += 1 }
        try room.join()
        #expect(room.member.channel == nil && room.member.isInRoom)
        #expect(room.device.memberCount == 1 && membersChanged == 1)
    }
}
