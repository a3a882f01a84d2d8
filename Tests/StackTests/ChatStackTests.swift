import BlemuChat
import BlemuCore
import BlemuRunLoop
import BlemuStack
import BlemuTransport
import Logging
import Testing

/// `blemu chat`'s assembly (`ChatStack`): a room on each controller, named and addressed so
/// that the nodes of one room stay apart.
@Suite struct ChatStackTests {
    static let quiet = Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })

    static func spec(_ port: Int) throws -> ControllerSpec { try ControllerSpec(parsing: "tcp:127.0.0.1:\(port)") }

    /// A node that only hosts is the room: its name is the room's and it signs with it; the
    /// host advertises from the address derived from the device and that name.
    @Test func aHostOnlyNodeIsItsRoom() throws {
        let chat = try ChatStack(plan: ChatPlan(controllers: [(try Self.spec(1), .host)], room: nil, name: "Kitchen", memberName: "box"),
                                 loop: RunLoop(), logger: Self.quiet)
        #expect(chat.node.me == "Kitchen")
        #expect(chat.sides.map(\.room) == ["Kitchen"] && chat.sides.map(\.role) == [.host])
        let peripheral = try #require(chat.stacks.first?.peripherals.first)
        #expect(peripheral.configuration.name == "Kitchen")
        #expect(peripheral.address == BluetoothAddress.staticRandom(seed: "blemu/chat/Kitchen"))
    }

    /// A node that may join signs with its own name, and each of its sides that may host gets an
    /// address of its own (room and member), so two nodes hosting one room do not share one.
    @Test func aBridgingNodeSignsWithItsNameAndAddressesEachSide() throws {
        let plan = ChatPlan(controllers: [(try Self.spec(1), .host), (try Self.spec(2), .auto)], room: "Lab", name: nil, memberName: "box")
        let chat = try ChatStack(plan: plan, loop: RunLoop(), logger: Self.quiet)
        #expect(chat.node.me == "box")
        #expect(chat.stacks.count == 2 && chat.sides.map(\.room) == ["Lab", "Lab"])
        let auto = try #require(chat.stacks.last?.peripherals.first)
        #expect(auto.address == BluetoothAddress.staticRandom(seed: "blemu/chat/Lab/box"))
        #expect(chat.stacks.first?.peripherals.first?.address == BluetoothAddress.staticRandom(seed: "blemu/chat/Lab"))
        chat.fail("first")
        chat.fail("second")
        #expect(chat.failure == "first" && chat.isStopping)
    }
}
