import BlemuCore
import BlemuCrypto
import BlemuDevices
import Logging
#if canImport(Glibc)
import Glibc
#endif

/// A chat node's keys and the names it bound to keys, in its state directory (Docs/CHAT.md,
/// "Identity"): `chat-identity` holds the node's Ed25519 private key (created on first use),
/// `chat-names-HEX` the names of one room (HEX: the room's name in UTF-8, hex) and the key each
/// spoke with first. Files are 0600, written atomically; one that does not parse is moved
/// aside (`.damaged-N`) and reported, never trusted; a symbolic link, FIFO or device at the
/// path is refused (RegularFile).
///
///     blemu-chat-identity 1          blemu-chat-names 1
///     private HEX64                  room HEX
///                                    NAME-HEX KEY-HEX64   (one line per name)
public final class ChatIdentityStore {
    public static let keyFileName = "chat-identity"
    static let keyFormat = "blemu-chat-identity 1"
    static let namesFormat = "blemu-chat-names 1"
    /// A file larger than this is not one of these files.
    static let maximumFileSize = 256 * 1024

    public let directory: String
    private let logger: Logger

    public init(directory: String, logger: Logger) {
        self.directory = directory
        self.logger = logger
    }

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
    public func bindings(room: String) -> [String: ChatPublicKey] {
        let path = namesPath(room: room)
        switch RegularFile.read(path, maximumBytes: Self.maximumFileSize, followSymlinks: false) {
        case .success(let bytes):
            if let names = Self.parseNames(bytes, room: room) { return names }
            let aside = RegularFile.moveAside(path)
            logger.error("chat names \(path) are damaged or another room's; \(aside.map { "moved to \($0)" } ?? "could not be moved aside"), starting with no names bound")
        case .failure(let error) where error.kind == .missing:
            break
        case .failure(let error):
            logger.error("chat names \(path) cannot be read (\(error)); starting with no names bound")
        }
        return [:]
    }

    /// Writes `room`'s names (sorted, so the file changes only when they do).
    public func save(_ bindings: [String: ChatPublicKey], room: String) {
        let path = namesPath(room: room)
        if let failure = RegularFile.writeAtomically(Array(Self.namesFile(bindings, room: room).utf8), to: path) {
            logger.error("chat names \(path) not written: \(failure); they are kept until blemu stops")
        }
    }

    /// Pins `name` in `room` to `key`, or forgets it (`key` nil: the next key it speaks with is
    /// taken), in the file, for a node that is not running (`blemu chat` options). A running
    /// node pins through its `ChatTrust.pin`, which writes the file too.
    public func pin(_ name: String, to key: ChatPublicKey?, room: String) {
        var names = bindings(room: room)
        names[name] = key
        save(names, room: room)
    }

    /// The node's trust in `room`: its key (made on first use), the names bound so far, and
    /// every new binding written back here.
    /// `passphrase`: a private room's (`--passphrase-file`), its key derived with the room's name.
    public func trust(room: String, me: String, signedOnly: Bool, passphrase: [UInt8]? = nil) throws(ChatIdentityError) -> ChatTrust {
        let key = try loadOrCreateKey()
        let trust = ChatTrust(room: room, identity: key, me: me, signedOnly: signedOnly, bindings: bindings(room: room),
                              roomKey: passphrase.map { ChatRoomKey(passphrase: $0, room: room) }, logger: logger)
        save(trust.bindings, room: room)
        trust.onBindingsChanged = { [self] bindings in save(bindings, room: room) }
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

    static func namesFile(_ bindings: [String: ChatPublicKey], room: String) -> String {
        var text = "\(namesFormat)\nroom \(Hex.bytes(Array(room.utf8)).lowercased())\n"
        for (name, key) in bindings.sorted(by: { $0.key < $1.key }) {
            text += "\(Hex.bytes(Array(name.utf8)).lowercased()) \(Hex.bytes(key.bytes).lowercased())\n"
        }
        return text
    }

    /// Nil for anything but a names file of `room` with every line well formed.
    static func parseNames(_ bytes: [UInt8], room: String) -> [String: ChatPublicKey]? {
        guard let text = String(validating: bytes, as: UTF8.self) else { return nil }
        let lines = text.split(separator: "\n", omittingEmptySubsequences: true)
        guard lines.count >= 2, lines[0] == namesFormat,
              lines[1] == "room \(Hex.bytes(Array(room.utf8)).lowercased())" else { return nil }
        var names: [String: ChatPublicKey] = [:]
        for line in lines.dropFirst(2) {
            let fields = line.split(separator: " ")
            guard fields.count == 2, let nameBytes = Hex.parse(String(fields[0])), !nameBytes.isEmpty,
                  nameBytes.count <= ChatFrame.maxSenderBytes,
                  let name = String(validating: nameBytes, as: UTF8.self),
                  let keyBytes = Hex.parse(String(fields[1])), let key = try? ChatPublicKey(keyBytes),
                  names.count < ChatTrust.bindingLimit else { return nil }
            names[name] = key
        }
        return names
    }
}

public struct ChatIdentityError: Error, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}
