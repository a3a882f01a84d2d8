import Testing
import BlemuCore
import BlemuTestSupport
@testable import BlemuCrypto

@Suite struct SMPCryptoTests {
    @Test func aesCMACMatchesRFC4493() {
        let key = be("2b7e1516 28aed2a6 abf71588 09cf4f3c")
        let message = be("6bc1bee2 2e409f96 e93d7e11 7393172a ae2d8a57 1e03ac9c 9eb76fac 45af8e51 30c81c46 a35ce411")
        #expect(SMPCrypto.aesCMAC(key: key, message: []) == be("bb1d6929 e9593728 7fa37d12 9b756746"))
        #expect(SMPCrypto.aesCMAC(key: key, message: Array(message.prefix(16))) == be("070a16b4 6b4d4144 f79bdd9d d04a287c"))
        #expect(SMPCrypto.aesCMAC(key: key, message: message) == be("dfa66747 de9ae630 30ca3261 1497c827"))
    }

    /// e (2.2.1) is AES-128 with the most significant octet first: FIPS-197 C.1 reversed both ways.
    @Test func eIsAES128WithMostSignificantOctetFirst() {
        let key = le("000102030405060708090a0b0c0d0e0f")
        let plaintext = le("00112233445566778899aabbccddeeff")
        #expect(SMPCrypto.e(key: key, plaintext: plaintext) == le("69c4e0d86a7b0430d8cdb78070b4c55a"))
    }

    /// D.1: DHKey from each side's private key and the other's public key.
    @Test func p256SampleKeysGiveTheSampleDHKey() throws {
        let a = try SMPKeyPair(privateKeyBigEndian: be(AppendixD.privateA))
        let b = try SMPKeyPair(privateKeyBigEndian: be(AppendixD.privateB))
        #expect(a.publicKey.x == le(AppendixD.publicAX))
        #expect(a.publicKey.y == le(AppendixD.publicAY))
        #expect(b.publicKey.x == le(AppendixD.publicBX))
        #expect(b.publicKey.y == le(AppendixD.publicBY))
        #expect(a.dhKey(with: b.publicKey) == le(AppendixD.dhKey))
        #expect(b.dhKey(with: a.publicKey) == le(AppendixD.dhKey))
    }

    @Test func generatedKeyPairsAgree() {
        let a = SMPKeyPair(), b = SMPKeyPair()
        #expect(a.dhKey(with: b.publicKey) == b.dhKey(with: a.publicKey))
        #expect(a.publicKey != b.publicKey)
    }

    /// CVE-2018-5383: a point off the curve (here the sample X with Y = 0, and Y + 1) is refused.
    @Test func publicKeyOffTheCurveIsRefused() throws {
        #expect(throws: DecodeError.self) {
            try SMPPublicKey(x: le(AppendixD.publicAX), y: [UInt8](repeating: 0, count: 32))
        }
        var y = le(AppendixD.publicAY)
        y[0] ^= 0x01
        #expect(throws: DecodeError.self) { try SMPPublicKey(x: le(AppendixD.publicAX), y: y) }
        #expect(throws: DecodeError.self) { try SMPPublicKey(x: [UInt8](repeating: 0, count: 32), y: [UInt8](repeating: 0, count: 32)) }
        #expect(throws: DecodeError.self) { try SMPPublicKey(x: le(AppendixD.publicAX), y: le(AppendixD.publicAY).dropLast()) }
        _ = try SMPPublicKey(x: le(AppendixD.publicAX), y: le(AppendixD.publicAY))
    }

    /// D.2.
    @Test func f4MatchesAppendixD() {
        // The spec's V here is the private key B's value (sic), as printed in D.2.
        let value = SMPCrypto.f4(u: le(AppendixD.publicAX), v: le(AppendixD.privateB), x: le(AppendixD.n1), z: 0x00)
        #expect(value == le("f2c916f1 07a9bd1c f1eda1be a974872d"))
    }

    /// D.3.
    @Test func f5MatchesAppendixD() {
        let (macKey, ltk) = SMPCrypto.f5(w: le(AppendixD.dhKey), n1: le(AppendixD.n1), n2: le(AppendixD.n2),
                                         a1: AppendixD.a1, a2: AppendixD.a2)
        #expect(macKey == le("2965f176 a1084a02 fd3f6a20 ce636e20"))
        #expect(ltk == le("69867911 69d7cd23 980522b5 94750a38"))
    }

    /// D.4: IOcap 0x010102 (AuthReq 0x01, OOB 0x01, IO capability 0x02).
    @Test func f6MatchesAppendixD() {
        let value = SMPCrypto.f6(w: le("2965f176 a1084a02 fd3f6a20 ce636e20"), n1: le(AppendixD.n1), n2: le(AppendixD.n2),
                                 r: le("12a3343b b453bb54 08da42d2 0c2d0fc8"), ioCap: le("010102"),
                                 a1: AppendixD.a1, a2: AppendixD.a2)
        #expect(value == le("e3c47398 9cd0e8c5 d26c0b09 da958f61"))
    }

    /// D.5.
    @Test func g2MatchesAppendixD() {
        let value = SMPCrypto.g2(u: le(AppendixD.publicAX), v: le(AppendixD.privateB), x: le(AppendixD.n1), y: le(AppendixD.n2))
        #expect(value == 0x2f9e_d5ba)
        #expect(SMPCrypto.numericComparisonValue(u: le(AppendixD.publicAX), v: le(AppendixD.privateB),
                                                 x: le(AppendixD.n1), y: le(AppendixD.n2)) == 0x2f9e_d5ba % 1_000_000)
    }

    /// Appendix D, h6 (keyID "lebr").
    @Test func h6MatchesAppendixD() {
        let value = SMPCrypto.h6(w: le("ec0234a3 57c8ad05 341010a6 0a397d9b"), keyID: 0x6c65_6272)
        #expect(value == le("2d9ae102 e76dc91c e8d3a9e2 80b16399"))
    }

    /// Appendix D, ah.
    @Test func ahMatchesAppendixD() {
        #expect(SMPCrypto.ah(irk: le("ec0234a3 57c8ad05 341010a6 0a397d9b"), prand: le("708194")) == le("0dfbaa"))
    }

    /// Appendix D, h7 (SALT "tmp1", the LTK-to-link-key conversion).
    @Test func h7MatchesAppendixD() {
        let value = SMPCrypto.h7(salt: le("00000000 00000000 00000000 746D7031"), w: le("ec0234a3 57c8ad05 341010a6 0a397d9b"))
        #expect(value == le("fb173597 c6a3c0ec d2998c2a 75a57011"))
    }

    /// c1's example in 2.2.3: k = 0, iat 1 (random) with ia A1:A2:A3:A4:A5:A6, rat 0 with ra B1:…:B6.
    @Test func c1MatchesTheSpecExample() {
        let value = SMPCrypto.c1(k: [UInt8](repeating: 0, count: 16), r: le("5783D52156AD6F0E6388274EC6702EE0"),
                                 preq: le("07071000000101"), pres: le("05000800000302"),
                                 initiator: LEAddress(BluetoothAddress("A1:A2:A3:A4:A5:A6")!, isRandom: true),
                                 responder: LEAddress(BluetoothAddress("B1:B2:B3:B4:B5:B6")!, isRandom: false))
        #expect(value == le("1e1e3fef878988ead2a74dc5bef13b86"))
    }

    /// s1's example in 2.2.4.
    @Test func s1MatchesTheSpecExample() {
        let value = SMPCrypto.s1(k: [UInt8](repeating: 0, count: 16), r1: le("000F0E0D0C0B0A091122334455667788"),
                                 r2: le("010203040506070899AABBCCDDEEFF00"))
        #expect(value == le("9a1fe1f0e8b0f49b5b4216ae796da062"))
    }
}
