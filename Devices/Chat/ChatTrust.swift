import BlemuCore
import BlemuCrypto
import Logging

/// What a chat node trusts in one room (Docs/CHAT.md, "Signed messages" and "Names bound to
/// keys"): its own key, which signs its lines; the key each name spoke with first (trust on
/// first use), which every later signed line of that name must have; and whether plain
/// (unsigned) lines are taken at all. Shared by the node's host device, member and bridge: each
/// checks a message (`check`) before delivering or relaying it.
///
/// - A signed message is delivered only when its signature over room, sender, number and text
///   verifies and its key is the one its name is bound to; a bad signature is dropped, counted and
///   logged (rate-limited); another key for a bound name is refused with one local warning line.
/// - An unsigned message is unverified: it is delivered under `~NAME` (never under a name a key
///   can hold: signed names cannot start with `~`), unless `signedOnly` refuses it.
/// - A message with an empty sender (an announcement) is the host's alone: no member's is taken.
public final class ChatTrust {
    /// Names remembered per room, at most: past this, new names are taken but not remembered
    /// (a peer cannot grow memory or the file without bound, nor push out a bound name).
    public static let bindingLimit = 1024
    /// Warning lines for (name, key) pairs, at most one each; past this many pairs, only logs.
    public static let warnedLimit = 256
    /// What marks an unverified name.
    public static let unverifiedMark = "~"

    public let room: String
    public let identity: ChatSigningKey?
    /// Refuse unsigned lines (plain writes with ATT error 0x13, unsigned frames dropped).
    public let signedOnly: Bool
    public private(set) var bindings: [String: ChatPublicKey]
    /// A private room's key (from `--passphrase-file`): this node's lines are sealed with it
    /// and only sealed lines are taken. Without it a node still checks and relays sealed lines
    /// (a host or bridge between radios) but cannot read them.
    public let roomKey: ChatRoomKey?
    /// How lines are signed and checked: Ed25519 (`.ed25519`) unless a harness gives a stand-in.
    public let signatures: ChatSignatureScheme
    /// Messages refused in a private room because they were not sealed.
    public private(set) var refusedUnsealed = 0
    public private(set) var badSignatures = 0
    public private(set) var impersonations = 0
    public private(set) var refusedUnsigned = 0
    public private(set) var forgedAnnouncements = 0
    /// A name was bound to a key (or forgotten: nil), for the state directory.
    public var onBindingsChanged: (([String: ChatPublicKey]) -> Void)?
    /// A line to show on this node (`* someone tried to speak as NAME: key 3f2a… is not NAME's`).
    public var onWarning: ((String) -> Void)?
    private let logger: Logger
    private var warned: Set<[UInt8]> = []

    /// `me`: this node's name, bound to its own key from the start (nobody else speaks as it).
    public init(room: String, identity: ChatSigningKey?, me: String?, signedOnly: Bool = false,
                bindings: [String: ChatPublicKey] = [:], roomKey: ChatRoomKey? = nil,
                signatures: ChatSignatureScheme = .ed25519, logger: Logger) {
        self.room = room
        self.signatures = signatures
        self.roomKey = roomKey
        self.identity = identity
        self.signedOnly = signedOnly
        self.bindings = Dictionary(uniqueKeysWithValues: bindings.prefix(Self.bindingLimit).map { ($0.key, $0.value) })
        self.logger = logger
        if let me, !me.isEmpty, let identity, self.bindings[me] == nil, self.bindings.count < Self.bindingLimit {
            self.bindings[me] = identity.publicKey
        }
    }

    /// `id` with this node's proof of `text`, when it has a key (sealed in a private room,
    /// unless `sealing` is false: announcements); as it is otherwise.
    public func sign(_ id: ChatMessageID, text: some Collection<UInt8>, sealing: Bool = true) -> ChatMessageID {
        guard let identity else { return id }
        if sealing, let roomKey {
            return id.with(proof: ChatProof.seal(room: room, sender: id.sender, number: id.number, text: text, with: identity, roomKey: roomKey, scheme: signatures))
        }
        return id.with(proof: ChatProof.sign(room: room, sender: id.sender, number: id.number, text: text, with: identity, scheme: signatures))
    }

    /// A sealed message's text, for this node to show: nil when it is not sealed or this node
    /// cannot open it (no passphrase, or another one).
    public func open(_ id: ChatMessageID) -> String? {
        guard let roomKey, let proof = id.proof,
              let text = proof.open(room: room, sender: id.sender, number: id.number, with: roomKey) else { return nil }
        return String(validating: text, as: UTF8.self)
    }

    /// The identity a member's message is delivered and relayed under, or nil: refused.
    public func check(_ id: ChatMessageID, text: some Collection<UInt8>) -> ChatMessageID? {
        guard !id.sender.isEmpty else {
            forgedAnnouncements += 1
            logRateLimited(forgedAnnouncements, "a member's message with an empty sender (an announcement is the host's) was dropped")
            return nil
        }
        guard let proof = id.proof else {
            guard !signedOnly, roomKey == nil else {
                refusedUnsigned += 1
                logRateLimited(refusedUnsigned, "an unsigned message from '\(id.sender.visible)' was refused: the room is signed-only")
                return nil
            }
            return id.sender.hasPrefix(Self.unverifiedMark) ? id : ChatMessageID(sender: Self.unverifiedMark + id.sender, number: id.number)
        }
        guard !id.sender.hasPrefix(Self.unverifiedMark), proof.verifies(room: room, sender: id.sender, number: id.number, text: text, scheme: signatures) else {
            badSignatures += 1
            logRateLimited(badSignatures, "a message signed as '\(id.sender.visible)' with a bad signature was dropped")
            return nil
        }
        // A private room's members seal every line: one in the clear is no member's.
        guard roomKey == nil || proof.sealed != nil else {
            refusedUnsealed += 1
            logRateLimited(refusedUnsealed, "a message from '\(id.sender.visible)' that was not sealed was refused: the room is private")
            return nil
        }
        switch bindings[id.sender] {
        case proof.key?:
            return id
        case let bound?:
            impersonations += 1
            warn(id.sender, claimed: proof.key, bound: bound)
            return nil
        case nil:
            guard bindings.count < Self.bindingLimit else {
                logRateLimited(bindings.count, "'\(id.sender.visible)' spoke with key \(proof.key.fingerprint): not remembered, \(Self.bindingLimit) names are")
                return id
            }
            bindings[id.sender] = proof.key
            logger.info("'\(id.sender.visible)' in chat room '\(room.visible)' speaks with key \(proof.key.fingerprint)")
            onBindingsChanged?(bindings)
            return id
        }
    }

    /// Whether an announcement (empty sender) from the host of this link may be shown: unsigned
    /// (a host without a key), or signed with a signature that verifies.
    public func checkAnnouncement(_ id: ChatMessageID, text: some Collection<UInt8>) -> Bool {
        guard let proof = id.proof else { return !signedOnly }
        guard proof.verifies(room: room, sender: "", number: id.number, text: text, scheme: signatures) else {
            badSignatures += 1
            logRateLimited(badSignatures, "an announcement with a bad signature was dropped")
            return false
        }
        return true
    }

    /// `name` speaks with `key` from now on (an operator's pin), or with whichever key it uses
    /// first again (`key` nil: forgotten).
    public func pin(_ name: String, to key: ChatPublicKey?) {
        if let key {
            guard bindings[name] != nil || bindings.count < Self.bindingLimit else { return }
            bindings[name] = key
        } else {
            bindings[name] = nil
        }
        onBindingsChanged?(bindings)
    }

    /// Whether plain writes are refused here, said in the log (rate-limited).
    public func refusePlainWrite(from name: String) -> Bool {
        guard signedOnly || roomKey != nil else { return false }
        refusedUnsigned += 1
        logRateLimited(refusedUnsigned, "a plain write from \(name.visible) was refused (ATT error 0x13): the room is signed-only")
        return true
    }

    private func warn(_ name: String, claimed: ChatPublicKey, bound: ChatPublicKey) {
        let line = "* someone tried to speak as \(name.visible): key \(claimed.shortFingerprint) is not \(name.visible)'s"
        logger.warning("\(line) (\(name.visible) speaks with \(bound.fingerprint))")
        let pair = Array(name.utf8) + claimed.bytes
        guard !warned.contains(pair), warned.count < Self.warnedLimit else { return }
        warned.insert(pair)
        onWarning?(line)
    }

    /// The 1st, 2nd, 4th, 8th… of a kind: a flood of bad frames cannot flood the log.
    private func logRateLimited(_ count: Int, _ message: String) {
        guard count & (count - 1) == 0 else { return }
        logger.warning("\(message) (\(count) so far)")
    }
}
