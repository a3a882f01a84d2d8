import Testing
import BlemuCore
@testable import BlemuCrypto

private func hex(_ text: String) -> [UInt8] {
    Hex.parse(text) ?? []
}

@Suite struct AESCMACTests {
    // RFC 4493, section 4 (the same key and messages are NIST SP 800-38B's AES-128 examples).
    static let key = hex("2b7e1516 28aed2a6 abf71588 09cf4f3c")
    static let message64 = hex("""
        6bc1bee2 2e409f96 e93d7e11 7393172a ae2d8a57 1e03ac9c 9eb76fac 45af8e51
        30c81c46 a35ce411 e5fbc119 1a0a52ef f69f2445 df4f9b17 ad2b417b e66c3710
        """)

    @Test func subkeysMatchRFC4493() {
        let (k1, k2) = AESCMAC.subkeys(key: Self.key)
        #expect(k1 == hex("fbeed618 35713366 7c85e08f 7236a8de"))
        #expect(k2 == hex("f7ddac30 6ae266cc f90bc11e e46d513b"))
    }

    @Test(arguments: [
        (0, "bb1d6929 e9593728 7fa37d12 9b756746"),    // Example 1: empty message (padded, K2)
        (16, "070a16b4 6b4d4144 f79bdd9d d04a287c"),   // Example 2: one whole block (K1)
        (40, "dfa66747 de9ae630 30ca3261 1497c827"),   // Example 3: 2.5 blocks (padded, K2)
        (64, "51f0bebf 7e3b9d92 fc497417 79363cfe"),   // Example 4: four whole blocks (K1)
    ])
    func macMatchesRFC4493(length: Int, expected: String) {
        let message = Array(Self.message64.prefix(length))
        #expect(AESCMAC.mac(key: Self.key, message: message) == hex(expected))
    }

    @Test func anyChangeToMessageOrKeyChangesTheMAC() {
        let base = AESCMAC.mac(key: Self.key, message: Self.message64)
        var message = Self.message64
        message[63] ^= 0x01
        #expect(AESCMAC.mac(key: Self.key, message: message) != base)
        var key = Self.key
        key[0] ^= 0x80
        #expect(AESCMAC.mac(key: key, message: Self.message64) != base)
        // Padding must not make a short message equal to its zero-extended form.
        #expect(AESCMAC.mac(key: Self.key, message: [0x01]) != AESCMAC.mac(key: Self.key, message: [0x01, 0x00]))
    }
}
