import BlemuCentral
import BlemuChat
import BlemuCore
import BlemuRunLoop
import BlemuStack
import BlemuTestSupport
import BlemuTransport
import Glibc
import Logging
import Testing

/// `blemu chat`'s assembly (`ChatStack`): a room on each controller, named and addressed so
/// that the nodes of one room stay apart.
@Suite struct ChatStackTests {

    /// `--pin-name`/`--forget-name` bind names in the room a run signs in; a node that only
    /// joins has none yet, so the room as given.
    @Test func namesAreBoundInTheRoomARunSignsIn() throws {
        let spec = try Self.spec(1)
        #expect(ChatPlan(controllers: [(spec, .host)], room: nil, name: "Kitchen", memberName: "box").namingRoom == "Kitchen")
        #expect(ChatPlan(controllers: [(spec, .member)], room: "Kitchen hub", name: nil, memberName: "box").namingRoom == "Kitchen hub")
        #expect(ChatPlan(controllers: [(spec, .member)], room: nil, name: nil, memberName: "box").namingRoom == "")
    }

    /// `--passphrase-file`: the file's bytes without its one trailing newline; an empty one (a
    /// private room anyone could read) and a FIFO (never waited on) refused before any radio opens.
    @Test func aPassphraseFileLosesItsNewlineAndIsNeverEmpty() throws {
        let directory = TemporaryDirectory()
        directory.write("pass", "open sesame\n")
        #expect(try ChatPlan.readPassphrase(directory.file("pass")) == Array("open sesame".utf8))
        directory.write("empty", "\n")
        #expect(throws: StackFailure.self) { try ChatPlan.readPassphrase(directory.file("empty")) }
        #expect(throws: StackFailure.self) { try ChatPlan.readPassphrase(directory.file("absent")) }
        #expect(mkfifo(directory.file("fifo"), 0o600) == 0)
        #expect(throws: StackFailure.self) { try ChatPlan.readPassphrase(directory.file("fifo")) }
    }

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
        // The side that may join connects from that address too where its controller has no
        // public one (Vol 3, Part H, 3.6.5: a static random identity, not 00:00:00:00:00:00).
        let member = try #require(chat.stacks.last?.controller.centralRole as? CentralHost)
        #expect(member.ownRandomAddress == auto.address)
        chat.fail("first")
        chat.fail("second")
        #expect(chat.failure == "first" && chat.isStopping)
    }

    static func temporaryDirectory() -> String {
        "/tmp/blemu-chatstack-\(UInt64.random(in: 0...UInt64.max))"
    }

    /// With a state directory every node signs: a host in its room's name, with its key made
    /// there on first use and its own name bound to it; the same key on the next start.
    @Test func aNodeWithAStateDirectorySignsInItsRoom() throws {
        var plan = ChatPlan(controllers: [(try Self.spec(1), .host)], room: nil, name: "Kitchen", memberName: "box")
        plan.stateDirectory = Self.temporaryDirectory()
        plan.signedOnly = true
        let chat = try ChatStack(plan: plan, loop: RunLoop(), logger: Self.quiet)
        let trust = try #require(chat.node.trust)
        #expect(trust.room == "Kitchen" && trust.signedOnly && trust.roomKey == nil && !chat.node.awaitingTrust)
        #expect(trust.bindings["Kitchen"] == trust.identity?.publicKey)
        let again = try ChatStack(plan: plan, loop: RunLoop(), logger: Self.quiet)
        #expect(again.node.trust?.identity?.publicKey == trust.identity?.publicKey)
        // Without one: the open room of old, nothing signed.
        plan.stateDirectory = nil
        #expect(try ChatStack(plan: plan, loop: RunLoop(), logger: Self.quiet).node.trust == nil)
    }

    /// The room's name must agree on every node: a member-only node waits for its host's name;
    /// auto and bridging nodes sign in the room they may host; a passphrase makes a room key.
    @Test func theRoomsNameIsTheHostsOnEveryNode() throws {
        var member = ChatPlan(controllers: [(try Self.spec(1), .member)], room: "Kit", name: nil, memberName: "box")
        member.stateDirectory = Self.temporaryDirectory()
        #expect(member.signedRoom == nil)
        let joining = try ChatStack(plan: member, loop: RunLoop(), logger: Self.quiet)
        #expect(joining.node.trust == nil && joining.node.awaitingTrust)
        var auto = ChatPlan(controllers: [(try Self.spec(1), .auto)], room: nil, name: "box", memberName: "box")
        #expect(auto.signedRoom == "blemu Chat")
        auto.room = "Lab"
        auto.stateDirectory = Self.temporaryDirectory()
        auto.passphrase = Array("secret".utf8)
        let autoStack = try ChatStack(plan: auto, loop: RunLoop(), logger: Self.quiet)
        #expect(autoStack.node.trust?.room == "Lab" && autoStack.node.trust?.roomKey != nil)
        let bridge = ChatPlan(controllers: [(try Self.spec(1), .member), (try Self.spec(2), .host)], room: nil, name: "Hall", memberName: "box")
        #expect(bridge.signedRoom == "Hall" && bridge.me == "box")
    }

    /// A state directory that cannot be made is the run's failure, said, not a crash.
    @Test func anUnusableStateDirectoryFailsTheStack() throws {
        var plan = ChatPlan(controllers: [(try Self.spec(1), .host)], room: nil, name: "Kitchen", memberName: "box")
        plan.stateDirectory = "/proc/blemu-cannot-be-here"
        #expect(throws: StackFailure.self) { try ChatStack(plan: plan, loop: RunLoop(), logger: Self.quiet) }
    }
}
