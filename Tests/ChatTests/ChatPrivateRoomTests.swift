import BlemuChat
import BlemuChatProtocol
import BlemuCore
import BlemuCrypto
import BlemuDevices
import Logging
import Testing

/// Private rooms (Docs/CHAT.md, "Private rooms"): lines sealed with a key from the passphrase
/// and the room's name, signed as sealed; relayed unchanged by nodes that cannot read them.
@Suite struct ChatPrivateRoomTests {
    let logger = Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })
    let alice = ChatSigningKey()
    let roomKey = ChatRoomKey(passphrase: Array("correct horse".utf8), room: "kitchen")

    func sealed(_ text: String, _ number: UInt32 = 1, key: ChatRoomKey? = nil) -> ChatMessageID {
        ChatMessageID(sender: "alice", number: number,
                      proof: ChatProof.seal(room: "kitchen", sender: "alice", number: number, text: Array(text.utf8), with: alice, roomKey: key ?? roomKey))
    }

    @Test func aSealedMessageTravelsInFramesWithoutItsTextInTheClear() throws {
        let id = sealed("the door code is 1234")
        let frames = ChatFrame.frames(of: Array("ignored: a relay does not know it".utf8), id: id, hops: 2, limit: 20)
        #expect(frames[0].first == ChatFrame.sealedDataType)
        #expect(!frames.joined().map { $0 }.containsSubsequence(Array("1234".utf8)))
        var reassembly = ChatReassembly()
        var outcome: ChatReassembly.Outcome = .incomplete
        for frame in frames { outcome = reassembly.take(try ChatFrame(decoding: frame[...])) }
        guard case let .message(got, text, hops) = outcome else { Issue.record("\(outcome)"); return }
        #expect(text.isEmpty && hops == 2 && got == id && got.proof?.sealed == id.proof?.sealed)
        let reader = ChatTrust(room: "kitchen", identity: nil, me: nil, roomKey: roomKey, logger: logger)
        #expect(reader.check(got, text: text) == got)
        #expect(reader.open(got) == "the door code is 1234")
    }

    @Test func aRelayWithoutThePassphraseChecksButCannotReadAndAWrongOneCannotRead() {
        let id = sealed("secret")
        let relay = ChatTrust(room: "kitchen", identity: ChatSigningKey(), me: "middle", logger: logger)
        #expect(relay.check(id, text: []) == id)       // signature and binding checked
        #expect(relay.open(id) == nil)
        let wrong = ChatTrust(room: "kitchen", identity: nil, me: nil,
                              roomKey: ChatRoomKey(passphrase: Array("wrong".utf8), room: "kitchen"), logger: logger)
        #expect(wrong.check(id, text: []) == id && wrong.open(id) == nil)
        // The sealed bytes changed: the signature fails. The identity changed: the seal fails too.
        let reader = ChatTrust(room: "kitchen", identity: nil, me: nil, roomKey: roomKey, logger: logger)
        var bytes = id.proof!.sealed!
        bytes[bytes.count - 1] ^= 1
        #expect(reader.check(id.with(proof: ChatProof(key: alice.publicKey, signature: id.proof!.signature, sealed: bytes)), text: []) == nil)
        #expect(ChatProof(key: alice.publicKey, signature: [], sealed: id.proof!.sealed).open(room: "kitchen", sender: "alice", number: 2, with: roomKey) == nil)
    }

    @Test func aPrivateRoomTakesOnlySealedLinesAndSealsItsOwn() {
        let reader = ChatTrust(room: "kitchen", identity: alice, me: "alice", roomKey: roomKey, logger: logger)
        #expect(reader.check(ChatMessageID(sender: "bob", number: 1), text: Array("plain".utf8)) == nil)
        let bob = ChatSigningKey()
        let clear = ChatMessageID(sender: "bob", number: 2, proof: ChatProof.sign(room: "kitchen", sender: "bob", number: 2, text: Array("x".utf8), with: bob))
        #expect(reader.check(clear, text: Array("x".utf8)) == nil && reader.refusedUnsealed == 1)
        #expect(reader.refusePlainWrite(from: "central-AA01"))
        let own = reader.sign(ChatMessageID(sender: "alice", number: 3), text: Array("hi".utf8))
        #expect(own.proof?.sealed != nil && reader.open(own) == "hi")
        #expect(reader.sign(ChatMessageID(sender: "", number: 4), text: Array("* a joined".utf8), sealing: false).proof?.sealed == nil)
    }

    @Test func aBridgeWithoutThePassphraseRelaysUnchangedAndSaysOnceItCannotRead() {
        let near = FakeSide(), far = FakeSide()
        let node = ChatNode(me: "middle", sides: [near, far], trust: ChatTrust(room: "kitchen", identity: ChatSigningKey(), me: "middle", logger: logger))
        var shown: [String] = []
        node.onLine = { sender, text in shown.append("[\(sender ?? "*")] \(text)") }
        let first = sealed("one", 1), second = sealed("two", 2)
        near.onHeard?(.message(first, text: "", hops: 4))
        near.onHeard?(.message(second, text: "", hops: 4))
        #expect(far.sent.map(\.id) == [first, second] && far.sent.map(\.id.proof) == [first.proof, second.proof])
        #expect(far.sent.allSatisfy { $0.hops == 3 })
        #expect(shown == ["[*] \(ChatNode.cannotReadNotice)"])
        // With the passphrase: the lines.
        let readerTrust = ChatTrust(room: "kitchen", identity: nil, me: nil, roomKey: roomKey, logger: logger)
        let reader = ChatNode(me: "right", sides: [FakeSide()], trust: readerTrust)
        var read: [String] = []
        reader.onLine = { sender, text in read.append("[\(sender ?? "*")] \(text)") }
        // As its side does: checked (alice's name bound to her key), then heard.
        #expect(readerTrust.check(first, text: []) == first)
        (reader.sides[0] as! FakeSide).onHeard?(.message(first, text: "", hops: 3))
        #expect(read == ["[alice] one"])
    }
}

extension Array where Element == UInt8 {
    func containsSubsequence(_ needle: [UInt8]) -> Bool {
        guard needle.count <= count else { return false }
        return (0...(count - needle.count)).contains { Array(self[$0..<$0 + needle.count]) == needle }
    }
}
