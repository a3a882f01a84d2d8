import BlemuChat
import BlemuChatProtocol
import BlemuCore
import BlemuCrypto
import BlemuDevices
import BlemuTestSupport
import Logging
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The node's key and the room's bound names in the state directory: made once, kept 0600,
/// a damaged file set aside and never trusted.
@Suite struct ChatIdentityStoreTests {
    let logger = Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })

    func mode(_ path: String) -> mode_t {
        var status = stat()
        return lstat(path, &status) == 0 ? status.st_mode & 0o777 : 0
    }

    @Test func theKeyIsMadeOnceAndKeptPrivate() throws {
        let directory = TemporaryDirectory()
        let store = ChatIdentityStore(directory: directory.file("state"), logger: logger)
        let first = try store.loadOrCreateKey()
        #expect(mode(store.keyPath) == 0o600)
        let again = try ChatIdentityStore(directory: directory.file("state"), logger: logger).loadOrCreateKey()
        #expect(again.publicKey == first.publicKey)
        #expect(ChatIdentityStore.identityLine(name: "alice", key: first.publicKey) == "alice \(first.publicKey.fingerprint)")
    }

    /// `--identity`'s second line: the whole public key, as another node's `--pin-name` takes it.
    @Test func thePinArgumentIsTheNameAndTheWholeKey() throws {
        let directory = TemporaryDirectory()
        let key = try ChatIdentityStore(directory: directory.path, logger: logger).loadOrCreateKey().publicKey
        let argument = ChatIdentityStore.pinArgument(name: "alice", key: key)
        #expect(argument.hasPrefix("alice="))
        let hex = argument.dropFirst("alice=".count)
        #expect(hex.count == 64 && hex.allSatisfy(\.isHexDigit))
        #expect(try ChatPublicKey(Hex.parse(String(hex)) ?? []) == key)
        // A name with a control character is shown escaped, as everywhere a name is printed.
        #expect(!ChatIdentityStore.pinArgument(name: "a\u{1B}b", key: key).contains("\u{1B}"))
    }

    @Test func aDamagedKeyFileIsSetAsideAndANewKeyMade() throws {
        let directory = TemporaryDirectory()
        let store = ChatIdentityStore(directory: directory.path, logger: logger)
        for damaged in ["", "blemu-chat-identity 1\nprivate 00\n", "blemu-chat-identity 2\nprivate \(String(repeating: "ab", count: 32))\n", "\u{FF}"] {
            directory.write(ChatIdentityStore.keyFileName, damaged)
            _ = try store.loadOrCreateKey()
            #expect(mode(store.keyPath) == 0o600)
        }
        #expect(mode(store.keyPath + ".damaged-1") != 0 && mode(store.keyPath + ".damaged-4") != 0)
    }

    @Test func aFIFOOrLinkAtTheKeyPathIsRefusedNotWaitedOn() throws {
        let directory = TemporaryDirectory()
        let store = ChatIdentityStore(directory: directory.path, logger: logger)
        #expect(mkfifo(store.keyPath, 0o600) == 0)
        #expect(throws: ChatIdentityError.self) { try store.loadOrCreateKey() }
        unlink(store.keyPath)
        #expect(symlink("/etc/passwd", store.keyPath) == 0)
        #expect(throws: ChatIdentityError.self) { try store.loadOrCreateKey() }
    }

    @Test func boundNamesArePersistedPerRoom() throws {
        let directory = TemporaryDirectory()
        let store = ChatIdentityStore(directory: directory.path, logger: logger)
        let trust = try store.trust(room: "kitchen", me: "me", signedOnly: false)
        let alice = ChatSigningKey()
        let id = ChatMessageID(sender: "alice", number: 1, proof: ChatProof.sign(room: "kitchen", sender: "alice", number: 1, text: [], with: alice))
        #expect(trust.check(id, text: []) == id)
        #expect(mode(store.namesPath(room: "kitchen")) == 0o600)
        let names = store.bindings(room: "kitchen")
        #expect(names["alice"] == alice.publicKey && names["me"] == trust.identity?.publicKey)
        #expect(store.bindings(room: "hall").isEmpty)
        // Forgotten and pinned while the node is not running.
        store.pin("alice", to: nil, room: "kitchen")
        #expect(store.bindings(room: "kitchen")["alice"] == nil && store.bindings(room: "kitchen")["me"] != nil)
        let pinned = ChatSigningKey().publicKey
        store.pin("bob", to: pinned, room: "kitchen")
        #expect(store.bindings(room: "kitchen")["bob"] == pinned)
        // Another room's file at this room's path is foreign: set aside.
        directory.write("chat-names-68616c6c", "blemu-chat-names 1\nroom 6b69746368656e\n")
        #expect(store.bindings(room: "hall").isEmpty)
        #expect(mode(store.namesPath(room: "hall") + ".damaged-1") != 0)
        // A damaged line: the whole file is set aside, no name trusted from it.
        directory.write("chat-names-6b69746368656e", "blemu-chat-names 1\nroom 6b69746368656e\n616c696365 00\n")
        #expect(store.bindings(room: "kitchen").isEmpty)
    }
}
