import BlemuCore

/// The LE Security Manager's cryptographic toolbox (Vol 3, Part H, 2.2).
///
/// Byte order: every value here — keys, nonces, confirm values, public key coordinates,
/// addresses — is little-endian, least significant octet first, as it travels in SMP PDUs and in
/// HCI. The spec writes its functions and its sample data (Appendix D) most significant octet
/// first; each function reverses at its edge, so callers never do. The one exception is
/// `aesCMAC`, which keeps RFC 4493's order because that is how the spec defines it.
///
/// Keys come from this stack (derived or random), never straight from the air with an unchecked
/// length: a wrong length is a programming error and stops the program.
public enum SMPCrypto {
    /// e (2.2.1): AES-128 on one block. "The most significant octet of key corresponds to key[0],
    /// the most significant octet of plaintextData corresponds to in[0]" — so the little-endian
    /// values are reversed in and out (what the LE Encrypt HCI command does inside a controller).
    public static func e(key: [UInt8], plaintext: [UInt8]) -> [UInt8] {
        precondition(plaintext.count == 16, "e encrypts one 16-byte block")
        var block = Array(plaintext.reversed())
        AES128.encrypt(&block, key: Array(key.reversed()))
        return block.reversed()
    }

    /// AES-CMAC with AES-128 (2.2.5, RFC 4493), in RFC 4493's byte order (first byte most
    /// significant): `AESCMAC`, the one implementation.
    public static func aesCMAC(key: [UInt8], message: [UInt8]) -> [UInt8] {
        AESCMAC.mac(key: key, message: message)
    }

    /// ah (2.2.2), the random address hash: ah(k, r) = e(k, r') mod 2^24, r' = padding || r.
    /// `prand` and the result are 3 bytes.
    public static func ah(irk: [UInt8], prand: [UInt8]) -> [UInt8] {
        precondition(prand.count == 3, "ah hashes a 24-bit prand")
        return Array(e(key: irk, plaintext: prand + [UInt8](repeating: 0, count: 13)).prefix(3))
    }

    /// c1 (2.2.3), the LE legacy confirm value.
    ///
    /// p1 = pres || preq || rat' || iat' and p2 = padding || ia || ra (most significant first), so
    /// little-endian p1 is iat', rat', preq, pres and p2 is ra, ia, four zero octets.
    /// `preq` and `pres` are the 7-octet Pairing Request and Response PDUs as sent, code first.
    public static func c1(k: [UInt8], r: [UInt8], preq: [UInt8], pres: [UInt8],
                          initiator: LEAddress, responder: LEAddress) -> [UInt8] {
        precondition(preq.count == 7 && pres.count == 7, "c1 takes the 7-octet pairing PDUs")
        let p1 = [initiator.isRandom ? 1 : 0, responder.isRandom ? 1 : 0] + preq + pres
        let p2 = responder.address.littleEndianBytes + initiator.address.littleEndianBytes + [0, 0, 0, 0]
        let first = e(key: k, plaintext: xor(r, p1))
        return e(key: k, plaintext: xor(first, p2))
    }

    /// s1 (2.2.4), the LE legacy STK: e(k, r') with r' = r1' || r2', the 64 low bits of each, r1'
    /// most significant. Called as s1(TK, Srand, Mrand).
    public static func s1(k: [UInt8], r1: [UInt8], r2: [UInt8]) -> [UInt8] {
        precondition(r1.count == 16 && r2.count == 16, "s1 takes 128-bit values")
        return e(key: k, plaintext: Array(r2.prefix(8)) + Array(r1.prefix(8)))
    }

    /// f4 (2.2.6), the LE Secure Connections confirm value: AES-CMAC_X(U || V || Z).
    /// `u`, `v` are public key X coordinates (32 bytes), `x` a nonce, `z` 0 or 0x80|bit.
    public static func f4(u: [UInt8], v: [UInt8], x: [UInt8], z: UInt8) -> [UInt8] {
        precondition(u.count == 32 && v.count == 32, "f4 takes 256-bit U and V")
        return cmacLE(key: x, [u, v, [z]])
    }

    /// The salt of f5 (2.2.7), most significant octet first.
    static let f5Salt: [UInt8] = [0x6C, 0x88, 0x83, 0x91, 0xAA, 0xF5, 0xA5, 0x38,
                                  0x60, 0x37, 0x0B, 0xDB, 0x5A, 0x60, 0x83, 0xBE]

    /// f5 (2.2.7), the LE Secure Connections key generation: T = AES-CMAC_SALT(W), then
    /// AES-CMAC_T(Counter || keyID "btle" || N1 || N2 || A1 || A2 || Length 256) with Counter 0
    /// for the MacKey and 1 for the LTK. `w` is the DHKey (32 bytes).
    public static func f5(w: [UInt8], n1: [UInt8], n2: [UInt8], a1: LEAddress, a2: LEAddress)
        -> (macKey: [UInt8], ltk: [UInt8]) {
        precondition(w.count == 32, "f5 takes the 256-bit DHKey")
        let t = aesCMAC(key: f5Salt, message: w.reversed())
        func derive(_ counter: UInt8) -> [UInt8] {
            // Most significant first: Counter, keyID 0x62746c65, N1, N2, A1, A2, Length 0x0100.
            let message: [UInt8] = [counter, 0x62, 0x74, 0x6C, 0x65] + n1.reversed() + n2.reversed()
                + a1.littleEndian56.reversed() + a2.littleEndian56.reversed() + [0x01, 0x00]
            return aesCMAC(key: t, message: message).reversed()
        }
        return (derive(0), derive(1))
    }

    /// f6 (2.2.8), the DHKey check value: AES-CMAC_W(N1 || N2 || R || IOcap || A1 || A2).
    /// `ioCap` is the 3 octets IO Capability, OOB flag, AuthReq in little-endian order (AuthReq
    /// is the most significant), as `SMPPairingFeatures.ioCapField` gives them.
    public static func f6(w: [UInt8], n1: [UInt8], n2: [UInt8], r: [UInt8], ioCap: [UInt8],
                          a1: LEAddress, a2: LEAddress) -> [UInt8] {
        precondition(ioCap.count == 3, "f6 takes a 24-bit IOcap")
        return cmacLE(key: w, [n1, n2, r, ioCap, a1.littleEndian56, a2.littleEndian56])
    }

    /// g2 (2.2.9), the numeric comparison value: AES-CMAC_X(U || V || Y) mod 2^32. The six digits
    /// shown are this mod 10^6 (`numericComparisonValue`).
    public static func g2(u: [UInt8], v: [UInt8], x: [UInt8], y: [UInt8]) -> UInt32 {
        let mac = cmacLE(key: x, [u, v, y])
        return UInt32(mac[0]) | UInt32(mac[1]) << 8 | UInt32(mac[2]) << 16 | UInt32(mac[3]) << 24
    }

    /// The six-digit value both sides display in Numeric Comparison (2.3.5.6.2).
    public static func numericComparisonValue(u: [UInt8], v: [UInt8], x: [UInt8], y: [UInt8]) -> UInt32 {
        g2(u: u, v: v, x: x, y: y) % 1_000_000
    }

    /// h6 (2.2.10), link key conversion: AES-CMAC_W(keyID). `keyID` as the spec writes it
    /// (e.g. 0x6C656272, "lebr").
    public static func h6(w: [UInt8], keyID: UInt32) -> [UInt8] {
        let id: [UInt8] = [UInt8(truncatingIfNeeded: keyID >> 24), UInt8(truncatingIfNeeded: keyID >> 16),
                           UInt8(truncatingIfNeeded: keyID >> 8), UInt8(truncatingIfNeeded: keyID)]
        return aesCMAC(key: w.reversed(), message: id).reversed()
    }

    /// h7 (2.2.11), link key conversion with a salt: AES-CMAC_SALT(W).
    public static func h7(salt: [UInt8], w: [UInt8]) -> [UInt8] {
        aesCMAC(key: salt.reversed(), message: w.reversed()).reversed()
    }

    // MARK: Helpers

    /// AES-CMAC over little-endian parts that the spec concatenates most significant first:
    /// each part is reversed, key and result too.
    private static func cmacLE(key: [UInt8], _ parts: [[UInt8]]) -> [UInt8] {
        precondition(key.count == 16, "AES-CMAC keys are 128 bits")
        var message: [UInt8] = []
        for part in parts { message += part.reversed() }
        return aesCMAC(key: key.reversed(), message: message).reversed()
    }

    private static func xor(_ a: [UInt8], _ b: [UInt8]) -> [UInt8] {
        precondition(a.count == b.count)
        return zip(a, b).map { $0 ^ $1 }
    }
}

/// An address as the toolbox hashes it (the address type bit of c1, the type octet of f5 and f6).
extension LEAddress {
    /// The 56-bit A1/A2 of f5 and f6 (2.2.7): the type octet (0 public, 1 random) most
    /// significant, above the address; little-endian, so the type is the last octet.
    public var littleEndian56: [UInt8] { address.littleEndianBytes + [isRandom ? 1 : 0] }
}
