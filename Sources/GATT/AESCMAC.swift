import BlemuCore
import Crypto
import _CryptoExtras

/// AES-CMAC with AES-128 (RFC 4493), the MAC of the Bluetooth crypto toolbox (Vol 3, Part H, 2.2.5)
/// and of the GATT Database Hash (Vol 3, Part G, 7.3.1).
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

    /// AES-128 on one block (ECB on one block, which is all CMAC needs).
    private static func encrypt(_ block: inout [UInt8], _ key: SymmetricKey) {
        do {
            try AES.permute(&block, key: key)
        } catch {
            // Only thrown for a block or key of the wrong size, which the callers rule out.
            preconditionFailure("AES block encryption failed: \(error)")
        }
    }
}

/// The Database Hash characteristic value (Vol 3, Part G, 7.3): AES-CMAC with an all-zero key over
/// the attributes that shape the database, so a client can tell whether its cache is still valid.
public enum GATTDatabaseHash {
    /// Attribute types hashed as handle || type || value (Vol 3, Part G, 7.3.1): Primary Service,
    /// Secondary Service, Include, Characteristic declarations and Characteristic Extended Properties.
    public static let typesHashedWithValue: Set<UInt16> = [0x2800, 0x2801, 0x2802, 0x2803, 0x2900]
    /// Attribute types hashed as handle || type only: Characteristic User Description, Client and
    /// Server Characteristic Configuration, Presentation Format and Aggregate Format.
    public static let typesHashedWithoutValue: Set<UInt16> = [0x2901, 0x2902, 0x2903, 0x2904, 0x2905]

    /// The hash, in the byte order it is sent in the Database Hash characteristic value: least
    /// significant octet first, i.e. the AES-CMAC output of RFC 4493 reversed. The Core spec does
    /// not say so in 7.3.1, but ATT values are little-endian unless defined otherwise (Vol 3,
    /// Part F, 3.3.1), and both anchors send it so: Zephyr's `db_hash_gen` (subsys/bluetooth/host/
    /// gatt.c: "PTS expects hash to be in little endianness", then `sys_mem_swap`) and Bumble 0.0.236
    /// `GenericAttributeProfileService.get_database_hash` (bumble/profiles/gatt_service.py,
    /// `aes_cmac(m, bytes(16))[::-1]`).
    ///
    /// `attributes` may come in any order; they are hashed in handle order. A nil value hashes as empty.
    public static func compute(_ attributes: [(handle: UInt16, type: BluetoothUUID, value: [UInt8]?)]) -> [UInt8] {
        let key = [UInt8](repeating: 0, count: 16)
        return AESCMAC.mac(key: key, message: message(attributes)).reversed()
    }

    /// The message M the hash is computed over (Vol 3, Part G, 7.3.1), for tests and diagnostics.
    public static func message(_ attributes: [(handle: UInt16, type: BluetoothUUID, value: [UInt8]?)]) -> [UInt8] {
        // A stable sort keeps the caller's order for equal handles (which a valid database has not).
        let ordered = attributes.enumerated().sorted {
            ($0.element.handle, $0.offset) < ($1.element.handle, $1.offset)
        }.map(\.element)
        var out: [UInt8] = []
        for attribute in ordered {
            guard let type = attribute.type.uint16 else { continue }
            if typesHashedWithValue.contains(type) {
                out.appendLE(attribute.handle)
                attribute.type.appendATT(to: &out)
                out += attribute.value ?? []
            } else if typesHashedWithoutValue.contains(type) {
                out.appendLE(attribute.handle)
                attribute.type.appendATT(to: &out)
            }
        }
        return out
    }
}
