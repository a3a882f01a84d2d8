import Testing
import BlemuCore
import BlemuCrypto

private func hex(_ text: String) -> [UInt8] { Hex.parse(text) ?? [] }

@Suite struct AESCCMTests {
    // Key 40..4F, nonce 10..1C, message 20..47 (40 bytes: three blocks, the last partial); the
    // expected bytes are Python cryptography's AESCCM (OpenSSL) for tag lengths 4 and 16.
    static let key = AESCCMKey(Array(0x40...0x4F))!
    static let nonce: [UInt8] = Array(0x10...0x1C)
    static let message: [UInt8] = Array(0x20...0x47)
    static let ciphertext = hex("69915dad1e84c6376a68c2967e4dab615ae0fd1faec44cc484828529463ccf7232ec7cb9e03353c5")

    @Test func multiBlockMatchesOpenSSL() {
        let short = Self.key.seal(Self.message, nonce: Self.nonce, tagLength: 4)
        #expect(short.ciphertext == Self.ciphertext && short.tag == hex("e6ff6cbb"))
        let long = Self.key.seal(Self.message, nonce: Self.nonce, tagLength: 16)
        #expect(long.ciphertext == Self.ciphertext && long.tag == hex("c2404085c1574dea54d0b80dcd421fcb"))
        #expect(Self.key.open(Self.ciphertext, tag: hex("c2404085c1574dea54d0b80dcd421fcb"), nonce: Self.nonce) == Self.message)
    }

    @Test func emptyMessageHasATag() {
        let sealed = Self.key.seal([], nonce: Self.nonce, tagLength: 4)
        #expect(sealed.ciphertext.isEmpty && sealed.tag == hex("2a0b1a47"))
        #expect(Self.key.open([], tag: hex("2a0b1a47"), nonce: Self.nonce) == [])
    }

    @Test func openRefusesBadTagsAndNonces() {
        #expect(Self.key.open(Self.ciphertext, tag: hex("e6ff6cba"), nonce: Self.nonce) == nil)
        #expect(Self.key.open(Self.ciphertext, tag: hex("e6ff6c"), nonce: Self.nonce) == nil)
        #expect(Self.key.open(Self.ciphertext, tag: hex("e6ff6cbb"), nonce: Array(Self.nonce.dropLast())) == nil)
        #expect(Self.key.open(Self.ciphertext, tag: [], nonce: Self.nonce) == nil)
    }
}
