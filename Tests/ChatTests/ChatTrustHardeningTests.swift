import BlemuChat
import BlemuChatProtocol
import BlemuCore
import BlemuCrypto
import BlemuDevices
import BlemuTestSupport
import Logging
import Testing

/// Names bound to keys and the marks that refuse replayed lines, against identity churn and
/// restarts (issue 34, round 3), and what a private room's node says of a line it cannot open.
@Suite struct ChatTrustHardeningTests {
    let logger = Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })
    let alice = ChatSigningKey(), mallory = ChatSigningKey()

    func signed(_ sender: String, _ number: UInt32, by key: ChatSigningKey, _ text: String = "x") -> ChatMessageID {
        ChatMessageID(sender: sender, number: number,
                      proof: ChatProof.sign(room: "kitchen", sender: sender, number: number, text: Array(text.utf8), with: key))
    }

    /// A trust on a clock the test moves.
    func trust(_ me: String? = nil, identity: ChatSigningKey? = nil, roomKey: ChatRoomKey? = nil) -> (ChatTrust, Clock) {
        let clock = Clock()
        let trust = ChatTrust(room: "kitchen", identity: identity, me: me, roomKey: roomKey, logger: logger)
        trust.clock = { clock.now }
        return (trust, clock)
    }
    final class Clock { var now: UInt64 = 1_000_000_000 }

    // MARK: Marks (item 2)

    @Test func aSignedLineAtOrBelowItsNamesMarkIsNotDeliveredAgain() {
        let (trust, _) = trust()
        let five = signed("alice", 5, by: alice)
        #expect(trust.check(five, text: Array("x".utf8)) == five)
        #expect(trust.check(five, text: Array("x".utf8)) == nil)
        #expect(trust.check(signed("alice", 4, by: alice), text: Array("x".utf8)) == nil)
        #expect(trust.replays == 2)
        let six = signed("alice", 6, by: alice)
        #expect(trust.check(six, text: Array("x".utf8)) == six)
        #expect(trust.marks["alice"]?.number == 6 && trust.marks["alice"]?.key == alice.publicKey)
        // This node's own lines move its own mark: a replay of them is not taken for the room's.
        let (own, _) = self.trust("me", identity: alice)
        let mine = own.sign(ChatMessageID(sender: "me", number: 40), text: Array("x".utf8))
        #expect(own.check(mine, text: Array("x".utf8)) == nil)
    }

    /// The marks and the node's numbers are kept in the state directory: a restarted node
    /// still refuses a captured line, and its own numbers go on above those it used.
    @Test func marksAndNumbersOutliveARestart() throws {
        let directory = TemporaryDirectory()
        let store = ChatIdentityStore(directory: directory.path, logger: logger)
        let first = try store.trust(room: "kitchen", me: "host", signedOnly: false)
        let captured = signed("alice", 9, by: alice)
        #expect(first.check(captured, text: Array("x".utf8)) == captured)
        #expect(first.marksChanged)
        let used = (0..<3).map { _ in first.takeNumber() }
        store.saveMarks()
        #expect(!first.marksChanged)

        let again = try ChatIdentityStore(directory: directory.path, logger: logger).trust(room: "kitchen", me: "host", signedOnly: false)
        #expect(again.check(captured, text: Array("x".utf8)) == nil)
        #expect(again.takeNumber() > used.max()!)
        // A crash: what the block reserved is skipped, nothing reused.
        let crashed = try ChatIdentityStore(directory: directory.path, logger: logger).trust(room: "kitchen", me: "host", signedOnly: false)
        #expect(crashed.takeNumber() >= used.max()! + ChatTrust.numberBlock)
    }

    /// A mark moves a disk write at most `marksSaveDelay` later, not one a line.
    @Test func marksAreSavedOnATimerNotOnEveryLine() throws {
        let directory = TemporaryDirectory()
        let scheduler = ManualScheduler()
        let store = ChatIdentityStore(directory: directory.path, logger: logger)
        let trust = try store.trust(room: "kitchen", me: "host", signedOnly: false, scheduler: scheduler)
        for number in UInt32(1)...50 { _ = trust.check(signed("alice", number, by: alice), text: Array("x".utf8)) }
        #expect(RegularFile.read(store.marksPath(room: "kitchen"), maximumBytes: 4096, followSymlinks: false).isMissing)
        scheduler.advance(by: ChatIdentityStore.marksSaveDelay)
        let saved = ChatIdentityStore(directory: directory.path, logger: logger).marks(room: "kitchen")
        #expect(saved["alice"]?.number == 50)
    }

    /// A names file of blemu before marks and pins loads as it is; a damaged marks file is set
    /// aside and the names stay.
    @Test func oldNamesFilesLoadAndADamagedMarksFileIsSetAside() throws {
        let directory = TemporaryDirectory()
        let store = ChatIdentityStore(directory: directory.path, logger: logger)
        let old = "blemu-chat-names 1\nroom \(Hex.bytes(Array("kitchen".utf8)).lowercased())\n"
            + "\(Hex.bytes(Array("alice".utf8)).lowercased()) \(Hex.bytes(alice.publicKey.bytes).lowercased())\n"
        #expect(RegularFile.writeAtomically(Array(old.utf8), to: store.namesPath(room: "kitchen")) == nil)
        #expect(RegularFile.writeAtomically(Array("blemu-chat-marks 1\nroom zz\n".utf8), to: store.marksPath(room: "kitchen")) == nil)
        let trust = try store.trust(room: "kitchen", me: "host", signedOnly: false)
        #expect(trust.bindings["alice"] == alice.publicKey && !trust.pinnedNames.contains("alice"))
        #expect(RegularFile.read(store.marksPath(room: "kitchen"), maximumBytes: 4096, followSymlinks: false).isMissing)
        #expect(RegularFile.read(store.marksPath(room: "kitchen") + ".damaged-1", maximumBytes: 4096, followSymlinks: false).isSuccess)
        // Pins are written as such and read back so.
        store.pin("bob", to: mallory.publicKey, room: "kitchen")
        #expect(store.names(room: "kitchen").pinned == ["bob", "host"])   // and the node's own name
    }

    // MARK: Identity churn (item 3)

    /// One link makes 1,100 keys and names in 13 s: it binds its share of new names a minute,
    /// the rest show unverified, and the room's names are not pushed out.
    @Test func oneLinkBindsAtMostItsShareOfNewNamesAMinute() {
        let (trust, clock) = trust()
        for index in 0..<1100 {
            clock.now += 12_000_000   // 13 s in all
            let id = signed("churn\(index)", 1, by: ChatSigningKey())
            #expect(trust.check(id, text: Array("x".utf8), from: 7) == id)
            if index >= ChatTrust.newNamesPerLink { #expect(trust.shownSender(id) == "~churn\(index)") }
        }
        #expect(trust.bindings.count == ChatTrust.newNamesPerLink)
        #expect(trust.unbound == 1100 - ChatTrust.newNamesPerLink)
        // Another link still binds its own.
        let bob = signed("bob", 1, by: ChatSigningKey())
        #expect(trust.check(bob, text: Array("x".utf8), from: 8) == bob && trust.shownSender(bob) == "bob")
    }

    /// The table full (1,024 names, over many minutes and links): a new name pushes out the
    /// one seen least recently, never a pinned one; so `victim` is bound, and another key
    /// speaking as it is refused with the warning.
    @Test func aFullTableOfNamesStillBindsNewNamesPushingOutTheLeastRecentlySeen() {
        let (trust, clock) = trust("host", identity: ChatSigningKey())
        trust.pin("pinned", to: alice.publicKey)
        let regular = ChatSigningKey()
        _ = trust.check(signed("regular", 1, by: regular), text: Array("x".utf8), from: 1)
        for index in 0..<1100 {
            if index % ChatTrust.newNamesPerWindow == 0 { clock.now += 61_000_000_000 }
            _ = trust.check(signed("churn\(index)", 1, by: ChatSigningKey()), text: Array("x".utf8), from: UInt32(100 + index))
            // `regular` keeps talking: it is seen recently, never the one pushed out.
            if index % 100 == 0 { _ = trust.check(signed("regular", UInt32(2 + index), by: regular), text: Array("x".utf8), from: 1) }
        }
        #expect(trust.bindings.count == ChatTrust.bindingLimit)
        #expect(trust.bindings["pinned"] == alice.publicKey && trust.bindings["host"] != nil && trust.bindings["regular"] == regular.publicKey)
        clock.now += 61_000_000_000
        var warnings: [String] = []
        trust.onWarning = { warnings.append($0) }
        let victim = ChatSigningKey()
        let real = signed("victim", 1, by: victim)
        #expect(trust.check(real, text: Array("x".utf8), from: 2) == real && trust.shownSender(real) == "victim")
        #expect(trust.check(signed("victim", 2, by: mallory), text: Array("x".utf8), from: 3) == nil)
        #expect(warnings == ["* someone tried to speak as victim: key \(mallory.publicKey.shortFingerprint) is not victim's"])
    }

    /// A node shows a signed line whose name could not be bound as unverified, `[~NAME]`.
    @Test func aLineWhoseNameCouldNotBeBoundShowsUnverified() {
        let (trust, _) = trust("me", identity: ChatSigningKey())
        let side = FakeSide()
        let node = ChatNode(me: "me", sides: [side], trust: trust)
        var shown: [String] = []
        node.onLine = { sender, text in shown.append("[\(sender ?? "*")] \(text)") }
        for index in 0...ChatTrust.newNamesPerLink {
            let id = signed("n\(index)", 1, by: ChatSigningKey())
            if let checked = trust.check(id, text: Array("x".utf8), from: 9) { side.onHeard?(.message(checked, text: "x", hops: 0)) }
        }
        #expect(shown.first == "[n0] x")
        #expect(shown.last == "[~n\(ChatTrust.newNamesPerLink)] x")
    }

    // MARK: Private rooms (item 20)

    /// A node with the passphrase hears a line sealed with another one: it names the sender
    /// (once), and does not say that it cannot read the room.
    @Test func aNodeWithThePassphraseNamesTheSenderOfALineSealedWithAnother() {
        let roomKey = ChatRoomKey(passphrase: Array("right".utf8), room: "kitchen")
        let (trust, _) = trust("bob", identity: ChatSigningKey(), roomKey: roomKey)
        let side = FakeSide()
        let node = ChatNode(me: "bob", sides: [side], trust: trust)
        var shown: [String] = []
        node.onLine = { sender, text in shown.append("[\(sender ?? "*")] \(text)") }
        let wrong = ChatRoomKey(passphrase: Array("wrong".utf8), room: "kitchen")
        let eve = ChatSigningKey()
        for number in UInt32(1)...2 {
            let id = ChatMessageID(sender: "eve", number: number,
                                   proof: ChatProof.seal(room: "kitchen", sender: "eve", number: number, text: Array("hi".utf8), with: eve, roomKey: wrong))
            // As a side does: checked, then heard.
            if let checked = trust.check(id, text: []) { side.onHeard?(.message(checked, text: "", hops: 0)) }
        }
        let right = ChatMessageID(sender: "alice", number: 1,
                                  proof: ChatProof.seal(room: "kitchen", sender: "alice", number: 1, text: Array("hello".utf8), with: alice, roomKey: roomKey))
        if let checked = trust.check(right, text: []) { side.onHeard?(.message(checked, text: "", hops: 0)) }
        #expect(shown == ["[*] \(ChatNode.unreadableNotice("eve"))", "[alice] hello"])
        #expect(!shown.contains("[*] \(ChatNode.cannotReadNotice)"))
    }
}

extension Result where Failure == RegularFileError {
    var isMissing: Bool {
        if case .failure(let error) = self { return error.kind == .missing }
        return false
    }
    var isSuccess: Bool { if case .success = self { true } else { false } }
}
