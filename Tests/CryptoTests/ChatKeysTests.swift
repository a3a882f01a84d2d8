import BlemuCore
import BlemuCrypto
import Testing

/// The chat's keys: Ed25519 as RFC 8032 gives it, fingerprints, the private room's sealing.
@Suite struct ChatKeysTests {
    // RFC 8032, 7.1, TEST 1: the empty message.
    let seed = Hex.parse("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")!
    let publicKey = Hex.parse("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")!
    let signature = Hex.parse("e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b")!

    @Test func theRFC8032VectorSignsAndVerifies() throws {
        let key = try #require(ChatSigningKey(privateKey: seed))
        #expect(key.publicKey.bytes == publicKey)
        #expect(key.privateKeyBytes == seed)
        let verifier = try ChatPublicKey(publicKey)
        #expect(verifier.verifies(signature, of: []))
        #expect(verifier.verifies(key.signature(of: []), of: []))
        #expect(verifier.verifies(key.signature(of: Array("hello".utf8)), of: Array("hello".utf8)))
    }

    @Test func anythingButTheSignedMessageAndAWholeSignatureFails() throws {
        let verifier = try ChatPublicKey(publicKey)
        #expect(!verifier.verifies(signature, of: [0]))                      // another message
        #expect(!verifier.verifies(signature.dropLast(), of: []))             // truncated
        #expect(!verifier.verifies(signature + [0], of: []))                  // too long
        var flipped = signature
        flipped[10] ^= 1
        #expect(!verifier.verifies(flipped, of: []))
        #expect(!verifier.verifies([UInt8](repeating: 0, count: 64), of: []))
        #expect(!ChatSigningKey().publicKey.verifies(signature, of: []))      // another key
    }

    @Test func keysOfTheWrongLengthAreRefused() {
        #expect(throws: DecodeError.self) { try ChatPublicKey(publicKey.dropLast()) }
        #expect(throws: DecodeError.self) { try ChatPublicKey(publicKey + [0]) }
        #expect(throws: DecodeError.self) { try ChatPublicKey([UInt8]()) }
        #expect(ChatSigningKey(privateKey: seed.dropLast()) == nil)
        #expect(ChatSigningKey(privateKey: seed + [1]) == nil)
    }

    @Test func theFingerprintIsFourGroupsOfFourHexDigits() throws {
        let key = try ChatPublicKey(publicKey)
        let fingerprint = key.fingerprint
        #expect(fingerprint.count == 19)
        #expect(fingerprint.split(separator: " ").map(\.count) == [4, 4, 4, 4])
        #expect(fingerprint.allSatisfy { $0 == " " || $0.isHexDigit && !$0.isUppercase })
        #expect(key.shortFingerprint == String(fingerprint.prefix(4)) + "…")
        #expect(ChatSigningKey().publicKey.fingerprint != fingerprint)
    }

    @Test func aRoomKeyOpensOnlyWhatItSealedForTheSameBinding() {
        let key = ChatRoomKey(passphrase: Array("correct horse".utf8), room: "kitchen")
        let sealed = key.seal(Array("secret".utf8), authenticating: [1, 2, 3])
        #expect(sealed.count == 6 + ChatRoomKey.nonceLength + ChatRoomKey.tagLength)
        #expect(key.open(sealed, authenticating: [1, 2, 3]) == Array("secret".utf8))
        // A fresh nonce each time: the same text seals differently.
        #expect(key.seal(Array("secret".utf8), authenticating: [1, 2, 3]) != sealed)
        #expect(key.open(sealed, authenticating: [1, 2, 4]) == nil)
        #expect(ChatRoomKey(passphrase: Array("wrong".utf8), room: "kitchen").open(sealed, authenticating: [1, 2, 3]) == nil)
        #expect(ChatRoomKey(passphrase: Array("correct horse".utf8), room: "hall").open(sealed, authenticating: [1, 2, 3]) == nil)
        var tampered = sealed
        tampered[ChatRoomKey.nonceLength] ^= 1
        #expect(key.open(tampered, authenticating: [1, 2, 3]) == nil)
        #expect(key.open(sealed.prefix(27), authenticating: [1, 2, 3]) == nil)
        #expect(key.open([], authenticating: []) == nil)
    }
}
