import BlemuChatProtocol
import BlemuCore
import BlemuCrypto
import BlemuDevices
import Logging
#if canImport(Glibc)
import Glibc
#endif

/// A chat node's keys and the names it bound to keys, in its state directory (Docs/CHAT.md,
/// "Identity"): `chat-identity` holds the node's Ed25519 private key (created on first use),
/// `chat-numbers` where its message numbers go on (reserved a block at a time, so they only go
/// up across restarts), `chat-names-HEX` the names of one room (HEX: the room's name in UTF-8,
/// hex) and the key each spoke with first (`pinned` where an operator pinned it), and
/// `chat-marks-HEX` the highest number delivered from each (saved a few seconds after it
/// moves, and at a clean stop). Files are 0600, written atomically; one that does not parse is
/// moved aside (`.damaged-N`) and reported, never trusted; a symbolic link, FIFO or device at
/// the path is refused (RegularFile).
///
///     blemu-chat-identity 1     blemu-chat-names 1                      blemu-chat-marks 1
///     private HEX64             room HEX                                room HEX
///                               NAME-HEX KEY-HEX64 [pinned]  (a name)   NAME-HEX KEY-HEX64 NUMBER
///     blemu-chat-numbers 1
///     next NUMBER
public final class ChatIdentityStore {
    public static let keyFileName = "chat-identity"
    static let keyFormat = "blemu-chat-identity 1"
    static let namesFormat = "blemu-chat-names 1"
    static let marksFormat = "blemu-chat-marks 1"
    static let numbersFormat = "blemu-chat-numbers 1"
    public static let numbersFileName = "chat-numbers"
    /// How long after a mark moves the marks are saved: a disk write a few seconds at most,
    /// not one a line. A crash loses the marks of these last seconds (the clean stop saves them).
    public static let marksSaveDelay: Duration = .seconds(5)
    /// A file larger than this is not one of these files.
    static let maximumFileSize = 256 * 1024

    public let directory: String
    private let logger: Logger
    /// The trusts made here, with their rooms, whose marks `saveMarks()` writes.
    private var trusts: [(trust: ChatTrust, room: String)] = []
    private var marksTimer: TimerID?
    private weak var scheduler: TimerScheduling?

    public init(directory: String, logger: Logger) {
        self.directory = directory
        self.logger = logger
    }

    public func marksPath(room: String) -> String {
        "\(directory)/chat-marks-\(Hex.bytes(Array(room.utf8.prefix(100))).lowercased())"
    }

    public var numbersPath: String { "\(directory)/\(Self.numbersFileName)" }

    public var keyPath: String { "\(directory)/\(Self.keyFileName)" }

    public func namesPath(room: String) -> String {
        "\(directory)/chat-names-\(Hex.bytes(Array(room.utf8.prefix(100))).lowercased())"
    }

    /// The node's key: read, or made and written on first use. A damaged file is moved aside
    /// (reported) and a new key made; an unreadable or unwritable one is an error (a node that
    /// cannot keep its key would be another node after each restart).
    public func loadOrCreateKey() throws(ChatIdentityError) -> ChatSigningKey {
        switch RegularFile.read(keyPath, maximumBytes: Self.maximumFileSize, followSymlinks: false) {
        case .success(let bytes):
            if let key = Self.parseKey(bytes) { return key }
            let aside = RegularFile.moveAside(keyPath)
            logger.error("chat identity \(keyPath) is damaged; \(aside.map { "moved to \($0)" } ?? "could not be moved aside"), making a new key: members that knew this node's name will refuse it until they forget it")
        case .failure(let error) where error.kind == .missing:
            break
        case .failure(let error) where error.kind == .tooLarge:
            let aside = RegularFile.moveAside(keyPath)
            logger.error("chat identity \(keyPath) is too large (\(error)); \(aside.map { "moved to \($0)" } ?? "could not be moved aside"), making a new key")
        case .failure(let error):
            throw ChatIdentityError("chat identity \(keyPath) cannot be read: \(error)")
        }
        let key = ChatSigningKey()
        if let failure = RegularFile.writeAtomically(Array(Self.keyFile(key).utf8), to: keyPath) {
            throw ChatIdentityError("chat identity \(keyPath) cannot be written: \(failure)")
        }
        logger.notice("chat identity: a new key \(key.publicKey.fingerprint) in \(keyPath)")
        return key
    }

    /// The names of `room` bound to keys; none when there is no file (a damaged one is moved
    /// aside and reported).
    public func bindings(room: String) -> [String: ChatPublicKey] { names(room: room).bindings }

    /// The names of `room` bound to keys and those of them pinned; none when there is no file
    /// (a damaged one is moved aside and reported).
    public func names(room: String) -> (bindings: [String: ChatPublicKey], pinned: Set<String>) {
        readState(namesPath(room: room), what: "chat names", damaged: "are damaged or another room's",
                  otherwise: "starting with no names bound") { Self.parseNames($0, room: room) } ?? ([:], [])
    }

    /// Writes `room`'s names (sorted, so the file changes only when they do).
    public func save(_ bindings: [String: ChatPublicKey], pinned: Set<String> = [], room: String) {
        let path = namesPath(room: room)
        if let failure = RegularFile.writeAtomically(Array(Self.namesFile(bindings, pinned: pinned, room: room).utf8), to: path) {
            logger.error("chat names \(path) not written: \(failure); they are kept until blemu stops")
        }
    }

    /// Pins `name` in `room` to `key`, or forgets it (`key` nil: the next key it speaks with is
    /// taken), in the file, for a node that is not running (`blemu chat` options). A running
    /// node pins through its `ChatTrust.pin`, which writes the file too.
    public func pin(_ name: String, to key: ChatPublicKey?, room: String) {
        var (names, pinned) = names(room: room)
        names[name] = key
        if key != nil { pinned.insert(name) } else { pinned.remove(name) }
        save(names, pinned: pinned, room: room)
    }

    /// The marks of `room` (each name's highest number delivered, with its key); none when there
    /// is no file (a damaged one is moved aside and reported: replays of lines said before it
    /// are then caught only by the memory of the last identities).
    public func marks(room: String) -> [String: (key: ChatPublicKey, number: UInt32)] {
        readState(marksPath(room: room), what: "chat marks", damaged: "are damaged or another room's",
                  otherwise: "starting with no marks") { Self.parseMarks($0, room: room) } ?? [:]
    }

    /// Writes the marks of every trust made here that moved since they were last written (a
    /// clean stop calls it; otherwise `marksSaveDelay` after a mark moves).
    public func saveMarks() {
        if let marksTimer { scheduler?.cancel(marksTimer) }
        marksTimer = nil
        for (trust, room) in trusts where trust.marksChanged {
            trust.marksSaved()
            let path = marksPath(room: room)
            if let failure = RegularFile.writeAtomically(Array(Self.marksFile(trust.marks, room: room).utf8), to: path) {
                logger.error("chat marks \(path) not written: \(failure)")
            }
        }
    }

    /// Where this node's numbers go on: the reservation in `chat-numbers`, or anywhere (random)
    /// when there is none (a damaged one is moved aside and reported).
    func firstNumber() -> UInt32 {
        readState(numbersPath, what: "chat numbers", damaged: "are damaged",
                  otherwise: "numbering from anywhere: nodes that heard this one may refuse its lines until its numbers pass theirs",
                  parse: Self.parseNumbers) ?? UInt32.random(in: 1...(UInt32.max / 2))
    }

    /// A state file read and parsed; nil when there is none, or when it cannot be read or parsed
    /// (then said, and a damaged one moved aside so the next write starts it anew).
    private func readState<Value>(_ path: String, what: String, damaged: String, otherwise: String,
                                  parse: ([UInt8]) -> Value?) -> Value? {
        switch RegularFile.read(path, maximumBytes: Self.maximumFileSize, followSymlinks: false) {
        case .success(let bytes):
            if let value = parse(bytes) { return value }
            let aside = RegularFile.moveAside(path)
            logger.error("\(what) \(path) \(damaged); \(aside.map { "moved to \($0)" } ?? "could not be moved aside"), \(otherwise)")
        case .failure(let error) where error.kind == .missing:
            break
        case .failure(let error):
            logger.error("\(what) \(path) cannot be read (\(error)); \(otherwise)")
        }
        return nil
    }

    func saveNumbers(upTo next: UInt32) {
        if let failure = RegularFile.writeAtomically(Array("\(Self.numbersFormat)\nnext \(next)\n".utf8), to: numbersPath) {
            logger.error("chat numbers \(numbersPath) not written: \(failure); after a restart this node's lines may be refused as replays")
        }
    }

    /// The node's trust in `room`: its key (made on first use), the names bound so far, and
    /// every new binding written back here.
    /// `passphrase`: a private room's (`--passphrase-file`), its key derived with the room's name.
    /// `scheduler`: the marks are saved `marksSaveDelay` after one moves (without it, only by
    /// `saveMarks()`).
    public func trust(room: String, me: String, signedOnly: Bool, passphrase: [UInt8]? = nil,
                      scheduler: TimerScheduling? = nil) throws(ChatIdentityError) -> ChatTrust {
        let key = try loadOrCreateKey()
        let (names, pinned) = names(room: room)
        let trust = ChatTrust(room: room, identity: key, me: me, signedOnly: signedOnly, bindings: names, pinned: pinned,
                              marks: marks(room: room), firstNumber: firstNumber(),
                              roomKey: passphrase.map { ChatRoomKey(passphrase: $0, room: room) }, logger: logger)
        save(trust.bindings, pinned: trust.pinnedNames, room: room)
        trust.onBindingsChanged = { [self, unowned trust] bindings in save(bindings, pinned: trust.pinnedNames, room: room) }
        trust.onNumbersReserved = { [self] next in saveNumbers(upTo: next) }
        if let scheduler { self.scheduler = scheduler }
        trust.onMarksChanged = { [weak self] in
            guard let self, let scheduler = self.scheduler, self.marksTimer == nil else { return }
            self.marksTimer = scheduler.schedule(after: Self.marksSaveDelay) { [weak self] in
                self?.marksTimer = nil
                self?.saveMarks()
            }
        }
        trusts.append((trust, room))
        return trust
    }

    /// What `blemu chat --identity` prints: the name, and the key's fingerprint to compare aloud.
    public static func identityLine(name: String, key: ChatPublicKey) -> String {
        "\(name.visible) \(key.fingerprint)"
    }

    /// The name and the whole public key (64 hex digits), as `--pin-name NAME=KEY` takes them
    /// on another node.
    public static func pinArgument(name: String, key: ChatPublicKey) -> String {
        "\(name.visible)=\(Hex.bytes(key.bytes).lowercased())"
    }

    // MARK: Formats

    static func keyFile(_ key: ChatSigningKey) -> String {
        "\(keyFormat)\nprivate \(Hex.bytes(key.privateKeyBytes).lowercased())\n"
    }

    static func parseKey(_ bytes: [UInt8]) -> ChatSigningKey? {
        guard let text = String(validating: bytes, as: UTF8.self) else { return nil }
        let lines = text.split(separator: "\n", omittingEmptySubsequences: true)
        guard lines.count == 2, lines[0] == keyFormat, lines[1].hasPrefix("private "),
              let seed = Hex.parse(String(lines[1].dropFirst("private ".count))) else { return nil }
        return ChatSigningKey(privateKey: seed)
    }

    /// A pinned name's line ends in ` pinned` (files of blemu before it had none: their names load unpinned).
    static func namesFile(_ bindings: [String: ChatPublicKey], pinned: Set<String> = [], room: String) -> String {
        var text = "\(namesFormat)\nroom \(Hex.bytes(Array(room.utf8)).lowercased())\n"
        for (name, key) in bindings.sorted(by: { $0.key < $1.key }) {
            text += "\(Hex.bytes(Array(name.utf8)).lowercased()) \(Hex.bytes(key.bytes).lowercased())\(pinned.contains(name) ? " pinned" : "")\n"
        }
        return text
    }

    /// Nil for anything but a names file of `room` with every line well formed.
    static func parseNames(_ bytes: [UInt8], room: String) -> (bindings: [String: ChatPublicKey], pinned: Set<String>)? {
        guard let lines = bodyLines(of: bytes, format: namesFormat, room: room) else { return nil }
        var names: [String: ChatPublicKey] = [:]
        var pinned: Set<String> = []
        for line in lines {
            let fields = line.split(separator: " ")
            guard fields.count == 2 || (fields.count == 3 && fields[2] == "pinned"),
                  let (name, key) = nameAndKey(fields), names.count < ChatTrust.bindingLimit else { return nil }
            names[name] = key
            if fields.count == 3 { pinned.insert(name) }
        }
        return (names, pinned)
    }

    static func marksFile(_ marks: [String: (key: ChatPublicKey, number: UInt32)], room: String) -> String {
        var text = "\(marksFormat)\nroom \(Hex.bytes(Array(room.utf8)).lowercased())\n"
        for (name, mark) in marks.sorted(by: { $0.key < $1.key }) {
            text += "\(Hex.bytes(Array(name.utf8)).lowercased()) \(Hex.bytes(mark.key.bytes).lowercased()) \(mark.number)\n"
        }
        return text
    }

    /// Nil for anything but a marks file of `room` with every line well formed.
    static func parseMarks(_ bytes: [UInt8], room: String) -> [String: (key: ChatPublicKey, number: UInt32)]? {
        guard let lines = bodyLines(of: bytes, format: marksFormat, room: room) else { return nil }
        var marks: [String: (key: ChatPublicKey, number: UInt32)] = [:]
        for line in lines {
            let fields = line.split(separator: " ")
            guard fields.count == 3, let (name, key) = nameAndKey(fields), let number = UInt32(fields[2]),
                  marks.count < ChatTrust.bindingLimit else { return nil }
            marks[name] = (key, number)
        }
        return marks
    }

    static func parseNumbers(_ bytes: [UInt8]) -> UInt32? {
        guard let text = String(validating: bytes, as: UTF8.self) else { return nil }
        let lines = text.split(separator: "\n", omittingEmptySubsequences: true)
        guard lines.count == 2, lines[0] == numbersFormat, lines[1].hasPrefix("next "),
              let next = UInt32(lines[1].dropFirst("next ".count)) else { return nil }
        return next
    }

    /// The lines after the format and the room's, or nil when those are not `format` and `room`.
    private static func bodyLines(of bytes: [UInt8], format: String, room: String) -> ArraySlice<Substring>? {
        guard let text = String(validating: bytes, as: UTF8.self) else { return nil }
        let lines = text.split(separator: "\n", omittingEmptySubsequences: true)
        guard lines.count >= 2, lines[0] == format,
              lines[1] == "room \(Hex.bytes(Array(room.utf8)).lowercased())" else { return nil }
        return lines.dropFirst(2)
    }

    /// A name (UTF-8 in hex, 1 to 32 bytes) and a key (64 hex digits), the first two fields.
    private static func nameAndKey(_ fields: [Substring]) -> (String, ChatPublicKey)? {
        guard let nameBytes = Hex.parse(String(fields[0])), !nameBytes.isEmpty, nameBytes.count <= ChatFrame.maxSenderBytes,
              let name = String(validating: nameBytes, as: UTF8.self),
              let keyBytes = Hex.parse(String(fields[1])), let key = try? ChatPublicKey(keyBytes) else { return nil }
        return (name, key)
    }
}

public struct ChatIdentityError: Error, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}
