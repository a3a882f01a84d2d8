import BlemuCore
import Crypto

/// A chat node's long-term identity (Docs/CHAT.md, "Signed messages"): an Ed25519 key pair
/// (RFC 8032) through swift-crypto's Curve25519.Signing. The private key is 32 bytes (the seed),
/// the public key 32, a signature 64.
public struct ChatSigningKey: Sendable {
    public static let privateKeyLength = 32
    private let key: Curve25519.Signing.PrivateKey

    /// A new key pair from the system's random source.
    public init() { key = Curve25519.Signing.PrivateKey() }

    /// The key kept in a state file: nil for bytes that are not a 32-byte Ed25519 seed.
    public init?(privateKey bytes: some Collection<UInt8>) {
        guard bytes.count == Self.privateKeyLength,
              let key = try? Curve25519.Signing.PrivateKey(rawRepresentation: Array(bytes)) else { return nil }
        self.key = key
    }

    /// What the state file keeps (secret).
    public var privateKeyBytes: [UInt8] { Array(key.rawRepresentation) }

    public var publicKey: ChatPublicKey { ChatPublicKey(validated: Array(key.publicKey.rawRepresentation)) }

    /// The 64-byte Ed25519 signature of `message`.
    public func signature(of message: [UInt8]) -> [UInt8] {
        // Only fails for a key BoringSSL would not have made: a programming error.
        guard let signature = try? key.signature(for: message) else { preconditionFailure("Ed25519 signing failed") }
        return Array(signature)
    }
}

/// An Ed25519 public key as frames carry it (32 bytes).
public struct ChatPublicKey: Hashable, Sendable, CustomStringConvertible {
    public static let length = 32
    public static let signatureLength = 64
    public let bytes: [UInt8]

    /// Throws for a key of the wrong length (or one swift-crypto refuses; it checks the length
    /// only, so 32 bytes that are no Ed25519 point pass here and fail every verification).
    public init(_ bytes: some Collection<UInt8>) throws(DecodeError) {
        guard bytes.count == Self.length else {
            throw DecodeError(.lengthMismatch, "an Ed25519 public key is 32 bytes, not \(bytes.count)")
        }
        guard (try? Curve25519.Signing.PublicKey(rawRepresentation: Array(bytes))) != nil else {
            throw DecodeError(.invalidValue, "not an Ed25519 public key (refused by swift-crypto)")
        }
        self.bytes = Array(bytes)
    }

    init(validated bytes: [UInt8]) { self.bytes = bytes }

    /// Whether `signature` is this key's over `message`: false for any signature of the wrong
    /// length, any key swift-crypto refuses, any forgery.
    public func verifies(_ signature: some Collection<UInt8>, of message: [UInt8]) -> Bool {
        guard signature.count == Self.signatureLength,
              let key = try? Curve25519.Signing.PublicKey(rawRepresentation: bytes) else { return false }
        return key.isValidSignature(Array(signature), for: message)
    }

    /// The fingerprint people compare aloud: the first 8 bytes of SHA-256 of the key, as four
    /// groups of four hex digits (`3f2a 91c0 7b4e 02d1`).
    public var fingerprint: String {
        let digest = Array(SHA256.hash(data: bytes).prefix(8))
        return stride(from: 0, to: 8, by: 2).map { Hex.bytes(Array(digest[$0..<$0 + 2])).lowercased() }.joined(separator: " ")
    }

    /// The fingerprint's first group, as a warning line names a key (`3f2a…`).
    public var shortFingerprint: String { String(fingerprint.prefix(4)) + "…" }

    public var description: String { fingerprint }
}

/// How chat messages are signed and checked (Docs/CHAT.md, "Signed messages"): Ed25519
/// (`ed25519`) for every node. `ChatTrust` and `ChatProof` take the scheme as a value so that a
/// harness testing the protocol around signatures, not the signatures themselves (the
/// `chat-frames` fuzz target, as BoringSSL's FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION does), can
/// put a cheap deterministic stand-in in its place; nothing but Ed25519 is compiled into blemu.
public struct ChatSignatureScheme: Sendable {
    /// The signature of `message` by `key`.
    public let sign: @Sendable (_ key: ChatSigningKey, _ message: [UInt8]) -> [UInt8]
    /// Whether `signature` is `key`'s over `message`.
    public let verify: @Sendable (_ key: ChatPublicKey, _ signature: [UInt8], _ message: [UInt8]) -> Bool

    public init(sign: @escaping @Sendable (_ key: ChatSigningKey, _ message: [UInt8]) -> [UInt8],
                verify: @escaping @Sendable (_ key: ChatPublicKey, _ signature: [UInt8], _ message: [UInt8]) -> Bool) {
        self.sign = sign
        self.verify = verify
    }

    /// Ed25519 (RFC 8032) through swift-crypto: what every node uses.
    public static let ed25519 = ChatSignatureScheme(sign: { key, message in key.signature(of: message) },
                                                    verify: { key, signature, message in key.verifies(signature, of: message) })
}

/// A private room's key (Docs/CHAT.md, "Private rooms"): HKDF-SHA256 (RFC 5869) of the
/// passphrase, salted with the room's name, and ChaChaPoly (RFC 8439) with a fresh 12-byte nonce
/// for each message.
public struct ChatRoomKey: Sendable {
    public static let nonceLength = 12
    public static let tagLength = 16
    private let key: SymmetricKey

    public init(passphrase: [UInt8], room: String) {
        key = HKDF<SHA256>.deriveKey(inputKeyMaterial: SymmetricKey(data: passphrase), salt: Array(room.utf8),
                                     info: Array("blemu chat room v1".utf8), outputByteCount: 32)
    }

    /// nonce | ciphertext | tag, with `authenticated` bound to it but not in it.
    public func seal(_ plaintext: [UInt8], authenticating authenticated: [UInt8]) -> [UInt8] {
        guard let box = try? ChaChaPoly.seal(plaintext, using: key, nonce: ChaChaPoly.Nonce(), authenticating: authenticated) else {
            preconditionFailure("ChaChaPoly sealing failed")
        }
        return Array(box.combined)
    }

    /// The plaintext, or nil for anything not sealed with this key and `authenticated`.
    public func open(_ sealed: some Collection<UInt8>, authenticating authenticated: [UInt8]) -> [UInt8]? {
        guard sealed.count >= Self.nonceLength + Self.tagLength,
              let box = try? ChaChaPoly.SealedBox(combined: Array(sealed)),
              let plaintext = try? ChaChaPoly.open(box, using: key, authenticating: authenticated) else { return nil }
        return Array(plaintext)
    }
}
