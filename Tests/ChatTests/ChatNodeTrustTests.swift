import BlemuChat
import BlemuChatProtocol
import BlemuCrypto
import BlemuDevices
import Logging
import Testing

/// A node that only joins learns its room's name from the host it joins (signatures cover the
/// name): its lines wait, unsigned and unsent, until the trust of that room is adopted.
@Suite struct ChatNodeTrustTests {
    let quiet = Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })

    @Test func linesWaitForTheRoomsNameAndAreSignedInIt() {
        let side = FakeSide()
        let node = ChatNode(me: "alice", sides: [side], awaitingTrust: true)
        var roomAgain = 0
        node.onRoom = { roomAgain += 1 }
        node.say("before the host")
        // Held: nothing sent, the node busy (stdin waits) and the line undelivered.
        #expect(side.sent.isEmpty && node.isBusy && node.hasUndelivered)
        let key = ChatSigningKey()
        node.adopt(ChatTrust(room: "kitchen", identity: key, me: "alice", logger: quiet))
        #expect(side.sent.count == 1 && !node.isBusy && roomAgain == 1)
        let sent = side.sent[0]
        #expect(sent.text == "before the host" && sent.id.proof?.key == key.publicKey)
        #expect(sent.id.proof?.verifies(room: "kitchen", sender: "alice", number: sent.id.number, text: Array("before the host".utf8)) == true)
        #expect(sent.id.proof?.verifies(room: "blemu Chat", sender: "alice", number: sent.id.number, text: Array("before the host".utf8)) == false)
        // Adopted once: a second trust (another host's name) changes nothing.
        node.adopt(ChatTrust(room: "other", identity: key, me: "alice", logger: quiet))
        node.say("after")
        #expect(side.sent[1].id.proof?.verifies(room: "kitchen", sender: "alice", number: side.sent[1].id.number, text: Array("after".utf8)) == true)
    }

    @Test func aNodeWithItsTrustOrNoneSendsAtOnce() {
        let side = FakeSide()
        let node = ChatNode(me: "alice", sides: [side], trust: ChatTrust(room: "kitchen", identity: ChatSigningKey(), me: "alice", logger: quiet),
                            awaitingTrust: true)
        node.say("now")
        #expect(side.sent.count == 1 && !node.awaitingTrust)
        let open = FakeSide()
        ChatNode(me: "bob", sides: [open]).say("open")
        #expect(open.sent.count == 1 && open.sent[0].id.proof == nil)
    }
}

/// A node signs what it says with its identity, and shows its trust's warnings as lines.
@Suite struct ChatNodeSigningTests {
    let alice = ChatSigningKey(), mallory = ChatSigningKey()
    let logger = Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })

    func signed(_ sender: String, _ number: UInt32, _ text: String, by key: ChatSigningKey, room: String = "kitchen") -> ChatMessageID {
        ChatMessageID(sender: sender, number: number,
                      proof: ChatProof.sign(room: room, sender: sender, number: number, text: Array(text.utf8), with: key))
    }

    @Test func aNodeSignsItsLinesAndShowsTheWarnings() {
        let trust = ChatTrust(room: "kitchen", identity: alice, me: "alice", logger: logger)
        let side = FakeSide()
        let node = ChatNode(me: "alice", sides: [side], trust: trust)
        var shown: [String] = []
        node.onLine = { sender, text in shown.append("[\(sender ?? "*")] \(text)") }
        node.say("hello")
        let sent = side.sent[0]
        #expect(sent.id.proof?.key == alice.publicKey)
        #expect(sent.id.proof?.verifies(room: "kitchen", sender: "alice", number: sent.id.number, text: Array("hello".utf8)) == true)
        _ = trust.check(signed("alice", 7, "x", by: mallory), text: Array("x".utf8))
        #expect(shown == ["[*] * someone tried to speak as alice: key \(mallory.publicKey.shortFingerprint) is not alice's"])
    }
}
