import BlemuCore
import Testing
@testable import BlemuCrypto

private func bytes(_ text: String) -> [UInt8] { Hex.parse(text) ?? [] }

/// Data signing (Vol 3, Part H, 2.4.5; Vol 3, Part C, 10.4): the signature a Signed Write
/// Command ends with. The server's use of it is in GATTTests' SignedWriteTests.
@Suite struct DataSigningTests {
    /// Vol 3, Part H, Appendix D.1 (RFC 4493, Example 2): K = 2b7e1516 28aed2a6 abf71588
    /// 09cf4f3c, M = 6bc1bee2 2e409f96 e93d7e11 7393172a, T = 070a16b4 6b4d4144 f79bdd9d
    /// d04a287c. As a signature on the air, little-endian: the CSRK is K reversed, m || SignCounter
    /// is M reversed (so the counter is 0x6bc1bee2), and MAC is MSB_64(T) reversed.
    static let csrk = bytes("3c4fcf098815f7aba6d2ae2816157e2b")
    static let message = bytes("2a179373117e3de9969f402e")
    static let signature = bytes("e2bec16b 44414d6bb4160a07")

    @Test func theSignatureOfTheSpecsSample() {
        #expect(ATTSignature.sign(Self.message, counter: 0x6bc1_bee2, csrk: Self.csrk) == Self.signature)
        #expect(ATTSignature.verify(Self.message, signature: Self.signature, csrk: Self.csrk))
        var flipped = Self.signature
        flipped[11] ^= 0x01
        #expect(!ATTSignature.verify(Self.message, signature: flipped, csrk: Self.csrk))
        #expect(!ATTSignature.verify(Self.message, signature: Self.signature.dropLast(), csrk: Self.csrk))
        #expect(!ATTSignature.verify(Self.message, signature: Self.signature, csrk: []))
    }
}
