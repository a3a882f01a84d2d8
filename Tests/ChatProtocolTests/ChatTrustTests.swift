import BlemuChatProtocol
import BlemuCore
import BlemuCrypto
import Logging
import Testing

/// Signed messages and names bound to keys: what a host, member or bridge delivers, and what it
/// refuses (Docs/CHAT.md, "Signed messages").
@Suite struct ChatTrustTests {
    let alice = ChatSigningKey(), mallory = ChatSigningKey()
    let logger = Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })

    func signed(_ sender: String, _ number: UInt32, _ text: String, by key: ChatSigningKey, room: String = "kitchen") -> ChatMessageID {
        ChatMessageID(sender: sender, number: number,
                      proof: ChatProof.sign(room: room, sender: sender, number: number, text: Array(text.utf8), with: key))
    }

    @Test func theFirstKeyOfANameIsRememberedAndAnotherRefusedWithOneWarningLine() {
        let trust = ChatTrust(room: "kitchen", identity: nil, me: nil, logger: logger)
        var warnings: [String] = []
        var saved: [[String: ChatPublicKey]] = []
        trust.onWarning = { warnings.append($0) }
        trust.onBindingsChanged = { saved.append($0) }
        let first = signed("alice", 1, "hi", by: alice)
        #expect(trust.check(first, text: Array("hi".utf8)) == first)
        #expect(trust.bindings["alice"] == alice.publicKey && saved.count == 1)
        // Mallory signs correctly, with her own key, as alice: refused, one warning line.
        let forged = signed("alice", 2, "FORGED", by: mallory)
        #expect(trust.check(forged, text: Array("FORGED".utf8)) == nil)
        #expect(trust.check(signed("alice", 3, "again", by: mallory), text: Array("again".utf8)) == nil)
        #expect(warnings == ["* someone tried to speak as alice: key \(mallory.publicKey.shortFingerprint) is not alice's"])
        #expect(trust.impersonations == 2)
        // Alice goes on.
        let next = signed("alice", 2, "still me", by: alice)
        #expect(trust.check(next, text: Array("still me".utf8)) == next)
        // Forgotten, the name goes to the next key that speaks.
        trust.pin("alice", to: nil)
        #expect(trust.check(forged, text: Array("FORGED".utf8)) == forged)
    }

    /// The scheme a trust signs and checks with: Ed25519 by default (what the host's lines carry
    /// verifies with the key alone), a stand-in only where one is given (the fuzz target's), and
    /// then for signing, checking and announcements alike.
    @Test func aTrustSignsAndChecksWithEd25519UnlessGivenAnotherScheme() {
        let text = Array("hi".utf8)
        let real = ChatTrust(room: "kitchen", identity: alice, me: "alice", logger: logger)
        let signedByReal = real.sign(ChatMessageID(sender: "alice", number: 1), text: text)
        let message = ChatProof.signedBytes(room: "kitchen", sender: "alice", number: 1, text: text)
        #expect(alice.publicKey.verifies(signedByReal.proof!.signature, of: message))

        // A stand-in: the message's bytes reversed, padded to 64 (not a secure scheme: a test's).
        let standIn = ChatSignatureScheme(
            sign: { _, message in Array((message.reversed() + [UInt8](repeating: 0, count: 64)).prefix(64)) },
            verify: { _, signature, message in signature == Array((message.reversed() + [UInt8](repeating: 0, count: 64)).prefix(64)) })
        let stood = ChatTrust(room: "kitchen", identity: alice, me: "alice", signatures: standIn, logger: logger)
        let signedByStandIn = stood.sign(ChatMessageID(sender: "alice", number: 1), text: text)
        #expect(signedByStandIn.proof!.signature == standIn.sign(alice, message))
        #expect(!alice.publicKey.verifies(signedByStandIn.proof!.signature, of: message))
        // Each trust takes only its own scheme's signatures, on messages and announcements.
        let bob = ChatTrust(room: "kitchen", identity: nil, me: nil, logger: logger)
        let bobStood = ChatTrust(room: "kitchen", identity: nil, me: nil, signatures: standIn, logger: logger)
        #expect(bob.check(signedByReal, text: text) == signedByReal)
        #expect(bob.check(signedByStandIn, text: text) == nil)
        #expect(bobStood.check(signedByStandIn, text: text) == signedByStandIn)
        #expect(bobStood.check(signedByReal, text: text) == nil)
        #expect(bobStood.check(ChatMessageID(sender: "alice", number: 1, proof: signedByStandIn.proof), text: Array("ho".utf8)) == nil)
        let announcement = stood.sign(ChatMessageID(sender: "", number: 2), text: text, sealing: false)
        #expect(bobStood.checkAnnouncement(announcement, text: text))
        #expect(!bob.checkAnnouncement(announcement, text: text))
        // Sealed (a private room): the signature over the sealed text is the scheme's too.
        let roomKey = ChatRoomKey(passphrase: Array("secret".utf8), room: "kitchen")
        let sealer = ChatTrust(room: "kitchen", identity: alice, me: "alice", roomKey: roomKey, signatures: standIn, logger: logger)
        let sealed = sealer.sign(ChatMessageID(sender: "alice", number: 3), text: text)
        let reader = ChatTrust(room: "kitchen", identity: nil, me: nil, roomKey: roomKey, signatures: standIn, logger: logger)
        #expect(reader.check(sealed, text: []) == sealed && reader.open(sealed) == "hi")
        #expect(ChatTrust(room: "kitchen", identity: nil, me: nil, roomKey: roomKey, logger: logger).check(sealed, text: []) == nil)
    }

    @Test func aChangedTextNumberSenderOrRoomFailsTheSignature() {
        let trust = ChatTrust(room: "kitchen", identity: nil, me: nil, logger: logger)
        let id = signed("alice", 5, "pay bob", by: alice)
        #expect(trust.check(id, text: Array("pay mallory".utf8)) == nil)
        #expect(trust.check(ChatMessageID(sender: "alice", number: 6, proof: id.proof), text: Array("pay bob".utf8)) == nil)
        #expect(trust.check(ChatMessageID(sender: "alicf", number: 5, proof: id.proof), text: Array("pay bob".utf8)) == nil)
        #expect(trust.check(signed("alice", 5, "pay bob", by: alice, room: "hall"), text: Array("pay bob".utf8)) == nil)
        let truncated = ChatMessageID(sender: "alice", number: 5, proof: ChatProof(key: alice.publicKey, signature: Array(id.proof!.signature.dropLast())))
        #expect(trust.check(truncated, text: Array("pay bob".utf8)) == nil)
        #expect(trust.badSignatures == 5)
        #expect(trust.bindings.isEmpty)   // nothing bound by a bad frame
        #expect(trust.check(id, text: Array("pay bob".utf8)) == id)
    }

    @Test func unsignedMessagesAreUnverifiedNeverUnderANameAKeyHolds() {
        let trust = ChatTrust(room: "kitchen", identity: alice, me: "alice", logger: logger)
        let plain = ChatMessageID(sender: "alice", number: 9)
        #expect(trust.check(plain, text: Array("hi".utf8)) == ChatMessageID(sender: "~alice", number: 9))
        #expect(trust.check(ChatMessageID(sender: "~bob", number: 1), text: [])?.sender == "~bob")   // once marked, as it is
        // A signed name cannot be an unverified one.
        #expect(trust.check(signed("~bob", 1, "x", by: mallory), text: Array("x".utf8)) == nil)
        // Announcements are the host's.
        #expect(trust.check(ChatMessageID(sender: "", number: 1), text: []) == nil)
        #expect(trust.check(signed("", 1, "* alice left", by: mallory), text: Array("* alice left".utf8)) == nil)
        // Its own name is bound to its own key from the start.
        #expect(trust.check(signed("alice", 1, "x", by: mallory), text: Array("x".utf8)) == nil)
        let signedOnly = ChatTrust(room: "kitchen", identity: nil, me: nil, signedOnly: true, logger: logger)
        #expect(signedOnly.check(plain, text: Array("hi".utf8)) == nil)
        #expect(signedOnly.refusePlainWrite(from: "central-AA01") && signedOnly.refusedUnsigned == 2)
        #expect(!trust.refusePlainWrite(from: "central-AA01"))
    }

    @Test func signedIdentitiesAreKeyedByTheKey() {
        let mine = signed("alice", 1, "x", by: alice), theirs = signed("alice", 1, "x", by: mallory)
        #expect(mine != theirs && mine != ChatMessageID(sender: "alice", number: 1))
        #expect(mine == ChatMessageID(sender: "alice", number: 1, proof: ChatProof(key: alice.publicKey, signature: [])))
        #expect(mine.isNamed(number: 1, sender: "alice"))
        var seen = ChatReassembly()
        seen.remember(theirs)
        #expect(!seen.hasDelivered(mine) && seen.hasDelivered(theirs))
    }

    @Test func boundNamesAreBounded() throws {
        let trust = ChatTrust(room: "r", identity: nil, me: nil, logger: logger)
        for index in 0..<ChatTrust.bindingLimit { trust.pin("n\(index)", to: alice.publicKey) }
        let late = signed("late", 1, "x", by: mallory, room: "r")
        #expect(trust.check(late, text: Array("x".utf8)) == late)   // taken, not remembered
        #expect(trust.bindings.count == ChatTrust.bindingLimit && trust.bindings["late"] == nil)
    }
}
