import BlemuCore
import Crypto

/// AES-128 in CCM mode (RFC 3610, NIST SP 800-38C) with a 13-byte nonce (so a 2-byte length
/// field, L = 2) and no associated data: what BTHome v2's encrypted advertisements use
/// (bthome.io/encryption: a 16-byte bindkey, a 4-byte MIC). Built on the one-block AES of
/// `AES128` (swift-crypto has no CCM). Advertising payloads are short, so the cost is a few blocks.
public struct AESCCMKey: Sendable {
    public static let keyLength = 16
    public static let nonceLength = 13
    private let key: SymmetricKey

    /// nil for a key of another length than 16 bytes (a bindkey file is read from outside).
    public init?(_ bytes: some Collection<UInt8>) {
        guard bytes.count == Self.keyLength else { return nil }
        key = SymmetricKey(data: Array(bytes))
    }

    /// The ciphertext (as long as `plaintext`) and the `tagLength`-byte tag (MIC).
    /// `nonce` is 13 bytes and `tagLength` one of 4, 6, …, 16 (RFC 3610, 2: M); the caller makes
    /// both, so anything else is a programming error.
    public func seal(_ plaintext: some Collection<UInt8>, nonce: [UInt8], tagLength: Int) -> (ciphertext: [UInt8], tag: [UInt8]) {
        precondition(nonce.count == Self.nonceLength, "the CCM nonce here is 13 bytes, not \(nonce.count)")
        precondition(tagLength >= 4 && tagLength <= 16 && tagLength % 2 == 0, "CCM tags are 4, 6, …, 16 bytes")
        let message = Array(plaintext)
        precondition(message.count <= 0xFFFF, "L = 2 limits a CCM message to 65535 bytes")
        let tag = authentication(message, nonce: nonce, tagLength: tagLength)
        var ciphertext = message
        applyKeyStream(&ciphertext, nonce: nonce)
        return (ciphertext, encryptedTag(tag, nonce: nonce))
    }

    /// The plaintext of `ciphertext` when `tag` (4 to 16 bytes, even) is right under this key
    /// and nonce; nil otherwise (wrong key, altered bytes, a tag of an impossible length).
    public func open(_ ciphertext: some Collection<UInt8>, tag: some Collection<UInt8>, nonce: [UInt8]) -> [UInt8]? {
        let tagLength = tag.count
        guard nonce.count == Self.nonceLength, tagLength >= 4, tagLength <= 16, tagLength % 2 == 0,
              ciphertext.count <= 0xFFFF else { return nil }
        var message = Array(ciphertext)
        applyKeyStream(&message, nonce: nonce)
        let expected = encryptedTag(authentication(message, nonce: nonce, tagLength: tagLength), nonce: nonce)
        // Compared in full whatever differs first, so the time says nothing about where.
        var difference: UInt8 = 0
        for (a, b) in zip(expected, tag) { difference |= a ^ b }
        return difference == 0 ? message : nil
    }

    /// RFC 3610, 2.2: the CBC-MAC over B0 (flags, nonce, length) and the message padded with zeros.
    private func authentication(_ message: [UInt8], nonce: [UInt8], tagLength: Int) -> [UInt8] {
        // Flags: Adata 0, M' = (M - 2) / 2 in bits 3-5, L' = L - 1 = 1 in bits 0-2.
        var block = [UInt8(((tagLength - 2) / 2) << 3 | 0x01)] + nonce + [UInt8(message.count >> 8), UInt8(message.count & 0xFF)]
        AES128.encrypt(&block, key: key)
        var offset = 0
        while offset < message.count {
            for index in 0..<16 where offset + index < message.count { block[index] ^= message[offset + index] }
            AES128.encrypt(&block, key: key)
            offset += 16
        }
        return Array(block[..<tagLength])
    }

    /// RFC 3610, 2.3: counter blocks A_i = flags (L' = 1), nonce, i (big-endian); S_0 encrypts the tag.
    private func counterBlock(_ counter: Int, nonce: [UInt8]) -> [UInt8] {
        var block = [UInt8(0x01)] + nonce + [UInt8(counter >> 8 & 0xFF), UInt8(counter & 0xFF)]
        AES128.encrypt(&block, key: key)
        return block
    }

    private func applyKeyStream(_ bytes: inout [UInt8], nonce: [UInt8]) {
        var offset = 0
        var counter = 1
        while offset < bytes.count {
            let stream = counterBlock(counter, nonce: nonce)
            for index in 0..<16 where offset + index < bytes.count { bytes[offset + index] ^= stream[index] }
            offset += 16
            counter += 1
        }
    }

    private func encryptedTag(_ tag: [UInt8], nonce: [UInt8]) -> [UInt8] {
        let stream = counterBlock(0, nonce: nonce)
        return zip(tag, stream).map { $0 ^ $1 }
    }
}
