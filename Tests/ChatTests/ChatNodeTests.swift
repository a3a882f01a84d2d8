import BlemuChat
import BlemuChatProtocol
import BlemuDevices
import Testing

/// A room as the node sees it: what it was given to send, and a way to make it hear things.
final class FakeSide: ChatRoomSide {
    var isHosting = false
    var isBusy = false
    var hasUndelivered = false
    var sent: [OutgoingChatMessage] = []
    var onHeard: ((ChatDevice.Heard) -> Void)?
    var onRoom: (() -> Void)?
    var onSaidAsHost: (([OutgoingChatMessage]) -> Void)?

    func send(_ message: OutgoingChatMessage) { sent.append(message) }
    func hear(_ sender: String, _ number: UInt32, _ text: String, hops: UInt8) {
        onHeard?(.message(ChatMessageID(sender: sender, number: number), text: text, hops: hops))
    }
}

/// The chat node: each message told once, bridged to the other rooms with one hop fewer, never
/// back where it came from, nothing passed on at 0 hops; its own lines to every room.
@Suite struct ChatNodeTests {
    @Test func aBridgePassesEachMessageOnOnceWithOneHopFewer() {
        let near = FakeSide(), far = FakeSide()
        let node = ChatNode(me: "bridge", sides: [near, far])
        var shown: [String] = []
        node.onLine = { sender, text in shown.append("[\(sender ?? "*")] \(text)") }
        near.hear("left", 7, "hello", hops: 4)
        #expect(shown == ["[left] hello"])
        #expect(near.sent.isEmpty)
        #expect(far.sent == [OutgoingChatMessage(id: ChatMessageID(sender: "left", number: 7), hops: 3, text: "hello")])
        // The same identity again, from either side (a loop, a resend): told and passed on no more.
        far.hear("left", 7, "hello", hops: 2)
        near.hear("left", 7, "hello", hops: 4)
        #expect(shown.count == 1 && far.sent.count == 1 && near.sent.isEmpty)
        // No hops left: told here, passed on nowhere.
        far.hear("right", 1, "last hop", hops: 0)
        #expect(shown.last == "[right] last hop" && near.sent.isEmpty)
        // Announcements are local.
        near.onHeard?(.announcement("* central-AA01 joined"))
        #expect(shown.last == "[*] * central-AA01 joined" && far.sent.count == 1)
    }

    @Test func ownLinesGoToEveryRoomWithOneIdentityAndShowOnceWhereHosted() {
        let near = FakeSide(), far = FakeSide()
        let node = ChatNode(me: "me", sides: [near, far])
        var shown: [String] = []
        node.onLine = { sender, text in shown.append("[\(sender ?? "*")] \(text)") }
        node.say("as a member")
        #expect(shown.isEmpty)   // a member's line shows where the host prints it
        #expect(near.sent.count == 1 && near.sent == far.sent && near.sent[0].hops == ChatDevice.initialHops)
        far.isHosting = true
        node.say("as a host")
        #expect(shown == ["[me] as a host"])
        #expect(near.sent[1].id.number == near.sent[0].id.number &+ 1)
        // The same line said again by a side that took over: not shown twice.
        near.onSaidAsHost?([near.sent[1], near.sent[0]])
        #expect(shown == ["[me] as a host", "[me] as a member"])
        // Its own line, relayed back to it by a loop, is not told again.
        far.hear("me", near.sent[0].id.number, "as a member", hops: 2)
        #expect(shown.count == 2 && near.sent.count == 2)
    }

    @Test func theNodeIsBusyWhileAnyRoomIsAndSaysWhenAllHaveRoom() {
        let near = FakeSide(), far = FakeSide()
        let node = ChatNode(me: "me", sides: [near, far])
        var resumed = 0
        node.onRoom = { resumed += 1 }
        near.isBusy = true
        far.isBusy = true
        #expect(node.isBusy)
        near.isBusy = false
        near.onRoom?()
        #expect(resumed == 0)   // the far room still has no room
        far.isBusy = false
        far.onRoom?()
        #expect(resumed == 1 && !node.isBusy)
    }

    @Test func theNodeHasUndeliveredLinesWhileAnyRoomHas() {
        let near = FakeSide(), far = FakeSide()
        let node = ChatNode(me: "me", sides: [near, far])
        #expect(!node.hasUndelivered)
        far.hasUndelivered = true
        #expect(node.hasUndelivered)
    }

    @Test func peersLinesAreShownVisibleAndOneLineEach() {
        // A window retitle, a screen clear, a CR overwrite faking another sender, a bidi override.
        #expect(ChatNode.shown(sender: "mallory\u{1B}]0;x\u{07}", text: "\u{1B}[2Jhi\r[alice] give me the key\u{202E}")
                == "[mallory\\x1b]0;x\\x07] \\x1b[2Jhi\\x0d[alice] give me the key\\u202e")
        #expect(ChatNode.shown(sender: nil, text: "* evil\nname joined") == "* evil\\x0aname joined")
        #expect(ChatNode.shown(sender: "bob", text: "plain °C ✓") == "[bob] plain °C ✓")
    }
}
