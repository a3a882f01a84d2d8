import BlemuChat
import BlemuCore
import BlemuRunLoop
import BlemuStack
import Testing

/// systemd's STATUS= line of `blemu chat` (`systemctl status blemu-chat@NAME`) and when READY=1 is
/// due: every side in its room.
@Suite struct ChatServiceStatusTests {
    static let host = BluetoothAddress("C4:12:34:56:78:9A")!

    @Test func aHostCountsItsMembers() {
        func line(_ members: Int, advertising: Bool = true) -> String {
            ChatServiceStatus(rooms: [.init(name: "kitchen", controller: "hci0", presence: .hosting(members: members, advertising: advertising))]).line
        }
        #expect(line(0) == "room kitchen: hosting, 0 members")
        #expect(line(1) == "room kitchen: hosting, 1 member")
        #expect(line(2) == "room kitchen: hosting, 2 members")
        #expect(line(3, advertising: false) == "room kitchen: hosting, 3 members, not advertising")
    }

    @Test func aMemberNamesItsHostAndALookingNodeItsRoom() {
        let member = ChatServiceStatus(rooms: [.init(name: "kitchen", controller: "hci0", presence: .member(host: "kitchen", address: Self.host))])
        #expect(member.line == "member of kitchen via C4:12:34:56:78:9A")
        let looking = ChatServiceStatus(rooms: [.init(name: "kitchen", controller: "hci0", presence: .looking(again: false))])
        #expect(looking.line == "looking for room kitchen")
        let anyRoom = ChatServiceStatus(rooms: [.init(name: nil, controller: "hci0", presence: .looking(again: false))])
        #expect(anyRoom.line == "looking for a chat room")
        let again = ChatServiceStatus(rooms: [.init(name: "kitchen", controller: "hci0", presence: .looking(again: true))])
        #expect(again.line == "looking for room kitchen again: the link to its host was lost")
    }

    /// The host's name is the peer's to choose: shown visible (one line, no terminal controls)
    /// and cut, so it cannot crowd the rest out of systemd's 200 bytes.
    @Test func aHostsNameIsShownVisibleAndCut() {
        let hostile = "evil\nREADY=1\u{1B}[2J" + String(repeating: "x", count: 100)
        let line = ChatServiceStatus(rooms: [.init(name: hostile, controller: "hci0", presence: .member(host: hostile, address: Self.host))],
                                     lastError: "controller lost: connection reset").line
        #expect(line.hasPrefix("member of evil\\x0aREADY=1\\x1b[2Jxxxx"))
        #expect(!line.contains("\n") && !line.contains("\u{1B}"))
        #expect(line.contains("… via C4:12:34:56:78:9A; last error: controller lost: connection reset"))
        #expect(line.utf8.count <= 200)
    }

    /// A bridge names each room's controller; controllers down and the last error close the line.
    @Test func aBridgeNamesEachControllerAndTheTroubleComesLast() {
        let status = ChatServiceStatus(rooms: [
            .init(name: "kitchen", controller: "hci0", presence: .hosting(members: 2, advertising: true)),
            .init(name: "kitchen", controller: "tcp:10.0.2.2:6402", presence: .member(host: "kitchen", address: Self.host)),
            .init(name: "kitchen", controller: "hci1", presence: .looking(again: false), controllerUp: false),
        ], lastError: "controller lost: hci1: no such Bluetooth adapter (ENODEV)")
        #expect(status.line == "room kitchen on hci0: hosting, 2 members; member of kitchen on tcp:10.0.2.2:6402 via C4:12:34:56:78:9A; "
                + "looking for room kitchen on hci1; 1 controller(s) down; last error: controller lost: hci1: no such Bluetooth adapter (ENODEV)")
    }

    /// READY=1 once every side is in its room: hosting and advertising, or a member of a host's room.
    @Test func readyOnceEverySideIsInItsRoom() {
        func ready(_ presences: [ChatSide.Presence]) -> Bool {
            ChatServiceStatus(rooms: presences.map { .init(name: "kitchen", controller: "hci0", presence: $0) }).isReady
        }
        #expect(ready([.hosting(members: 0, advertising: true)]))
        #expect(!ready([.hosting(members: 0, advertising: false)]))
        #expect(ready([.member(host: "kitchen", address: Self.host)]))
        #expect(!ready([.looking(again: false)]))
        #expect(!ready([.hosting(members: 0, advertising: true), .looking(again: false)]))
        #expect(ready([.hosting(members: 1, advertising: true), .member(host: "kitchen", address: Self.host)]))
        #expect(!ready([]))
    }

    /// Equal statuses are equal, so the stack builds and sends a line only when something in it changed.
    @Test func theStatusIsAValue() {
        let one = ChatServiceStatus(rooms: [.init(name: "kitchen", controller: "hci0", presence: .hosting(members: 1, advertising: true))])
        var two = one
        #expect(one == two)
        two.rooms[0].presence = .hosting(members: 2, advertising: true)
        #expect(one != two)
    }

    /// A stack not started: a host side hosts (its device not advertising yet), a member looks
    /// for the room it was given (any without one); their controllers not up.
    @Test func aStackSaysWhereEachSideIs() throws {
        let hosting = try ChatStack(plan: ChatPlan(controllers: [(try ChatStackTests.spec(1), .host)], room: nil, name: "Kitchen", memberName: "box"),
                                    loop: RunLoop(), logger: ChatStackTests.quiet)
        #expect(hosting.serviceStatus.rooms == [.init(name: "Kitchen", controller: "tcp:127.0.0.1:1", presence: .hosting(members: 0, advertising: false),
                                                      controllerUp: false)])
        #expect(!hosting.serviceStatus.isReady)
        let joining = try ChatStack(plan: ChatPlan(controllers: [(try ChatStackTests.spec(1), .member), (try ChatStackTests.spec(2), .member)],
                                                   room: nil, name: nil, memberName: "box"),
                                    loop: RunLoop(), logger: ChatStackTests.quiet)
        #expect(joining.serviceStatus.line == "looking for a chat room on tcp:127.0.0.1:1; looking for a chat room on tcp:127.0.0.1:2; 2 controller(s) down")
    }
}
