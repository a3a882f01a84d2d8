import BlemuCore
import Crypto
import _CryptoExtras

/// AES-CMAC with AES-128 (RFC 4493), the MAC of the Bluetooth crypto toolbox (Vol 3, Part H, 2.2.5):
/// the one implementation behind the SMP toolbox (`SMPCrypto`), data signing (`ATTSignature`) and
/// the GATT Database Hash (Vol 3, Part G, 7.3.1).
///
/// Bytes are in the order RFC 4493 uses: the first byte is the most significant. Bluetooth's
/// little-endian values must be reversed by the caller where the spec says so.
public enum AESCMAC {
    public static let blockSize = 16

    /// The 16-byte MAC of `message` under the 16-byte `key`.
    ///
    /// `key` comes from this program (a constant, or a key the stack derived), never straight from
    /// the air; a key of another length is a programming error and stops the program.
    public static func mac(key: [UInt8], message: [UInt8]) -> [UInt8] {
        var keyed = AESCMACKey(key: key)
        return Array(keyed.mac(message))
    }

    /// The subkeys K1 and K2 of RFC 4493, 2.3 (exposed for the RFC's test vectors).
    public static func subkeys(key: [UInt8]) -> (k1: [UInt8], k2: [UInt8]) {
        let keyed = AESCMACKey(key: key)
        return (keyed.k1, keyed.k2)
    }
}

/// AES-CMAC under one key for many messages: the key and subkeys are made once and the blocks
/// reused, so a MAC allocates nothing (a signed write's check, once per PDU).
public struct AESCMACKey {
    private let key: SymmetricKey
    fileprivate let k1: [UInt8]
    fileprivate let k2: [UInt8]
    private var x = [UInt8](repeating: 0, count: AESCMAC.blockSize)
    private var last = [UInt8](repeating: 0, count: AESCMAC.blockSize)

    /// A key of another length than 16 bytes stops the program (see `AESCMAC.mac`).
    public init(key: [UInt8]) {
        precondition(key.count == 16, "AES-CMAC here is AES-128: the key must be 16 bytes, not \(key.count)")
        self.key = SymmetricKey(data: key)
        // RFC 4493, 2.3: L = AES(K, 0), K1 = L·x, K2 = K1·x.
        var l = [UInt8](repeating: 0, count: AESCMAC.blockSize)
        Self.encrypt(&l, self.key)
        k1 = Self.doubled(l)
        k2 = Self.doubled(k1)
    }

    /// The MAC of `message`, valid until the next call.
    public mutating func mac(_ message: [UInt8]) -> ArraySlice<UInt8> {
        let blockSize = AESCMAC.blockSize
        // RFC 4493, 2.4: n blocks; the last is complete (xor K1) or padded with 10...0 (xor K2).
        let blockCount = max(1, (message.count + blockSize - 1) / blockSize)
        let lastIsComplete = !message.isEmpty && message.count % blockSize == 0
        let lastStart = (blockCount - 1) * blockSize

        for offset in 0..<blockSize { last[offset] = 0 }
        let tail = message[lastStart...]
        for (offset, byte) in tail.enumerated() { last[offset] = byte }
        if lastIsComplete {
            Self.xor(&last, k1)
        } else {
            last[tail.count] = 0x80
            Self.xor(&last, k2)
        }

        for offset in 0..<blockSize { x[offset] = 0 }
        var blockStart = 0
        while blockStart < lastStart {
            for offset in 0..<blockSize { x[offset] ^= message[blockStart + offset] }
            Self.encrypt(&x, key)
            blockStart += blockSize
        }
        Self.xor(&x, last)
        Self.encrypt(&x, key)
        return x[...]
    }

    /// Multiplication by x in GF(2^128): shift left one bit, and xor R_b = 0x87 into the last byte
    /// when the bit shifted out was 1.
    private static func doubled(_ block: [UInt8]) -> [UInt8] {
        let blockSize = AESCMAC.blockSize
        var out = [UInt8](repeating: 0, count: blockSize)
        for index in 0..<blockSize {
            let carry: UInt8 = index + 1 < blockSize ? block[index + 1] >> 7 : 0
            out[index] = block[index] << 1 | carry
        }
        if block[0] & 0x80 != 0 { out[blockSize - 1] ^= 0x87 }
        return out
    }

    private static func xor(_ block: inout [UInt8], _ other: [UInt8]) {
        for index in 0..<AESCMAC.blockSize { block[index] ^= other[index] }
    }

    private static func encrypt(_ block: inout [UInt8], _ key: SymmetricKey) {
        AES128.encrypt(&block, key: key)
    }
}

/// AES-128 on one block (ECB on one block): the cipher under CMAC and the toolbox's e (Vol 3,
/// Part H, 2.2.1), in the caller's byte order (the first byte is the most significant).
enum AES128 {
    static func encrypt(_ block: inout [UInt8], key: SymmetricKey) {
        precondition(block.count == AESCMAC.blockSize, "AES encrypts one 16-byte block, not \(block.count)")
        do {
            try AES.permute(&block, key: key)
        } catch {
            // Only thrown for a block or key of the wrong size, which the callers rule out.
            preconditionFailure("AES block encryption failed: \(error)")
        }
    }

    static func encrypt(_ block: inout [UInt8], key: [UInt8]) {
        precondition(key.count == 16, "AES-128 keys are 16 bytes, not \(key.count)")
        encrypt(&block, key: SymmetricKey(data: key))
    }
}
