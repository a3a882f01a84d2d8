import BlemuCore

/// Data signing (Vol 3, Part H, 2.4.5; Vol 3, Part C, 10.4): the 12-octet signature a Signed
/// Write Command ends with is SignCounter (32 bits) then MAC, the 64 most significant bits of
/// AES-CMAC with the CSRK over m || SignCounter, where m is the PDU up to the signature.
///
/// Keys and messages are little-endian on the air, as the rest of the SMP toolbox; the CMAC of
/// RFC 4493 takes them most significant octet first, so they are reversed at its edges.
public enum ATTSignature {
    public static let length = 12

    /// The signature of `message` (opcode, handle, value) with `counter`, as sent. A CSRK of
    /// another length than 16 bytes is a programming error here and stops the program.
    public static func sign(_ message: some Collection<UInt8>, counter: UInt32, csrk: [UInt8]) -> [UInt8] {
        guard var key = ATTSignatureKey(csrk: csrk) else { preconditionFailure("a CSRK is 16 bytes, not \(csrk.count)") }
        return key.signature(message, counter: counter)
    }

    /// Whether `signature` is `message`'s with the counter it names (constant-time compare).
    public static func verify(_ message: some Collection<UInt8>, signature: some Collection<UInt8>, csrk: [UInt8]) -> Bool {
        guard var key = ATTSignatureKey(csrk: csrk) else { return false }
        return key.verify(message, signature: signature)
    }

    /// The SignCounter a signature names (its first four octets, little-endian).
    public static func counter(of signature: some Collection<UInt8>) -> UInt32? {
        var counter: UInt32 = 0, shift: UInt32 = 0
        for byte in signature.prefix(4) {
            counter |= UInt32(byte) << shift
            shift += 8
        }
        return shift == 32 ? counter : nil
    }
}

/// One CSRK made ready for many signatures (a link's): the MAC's key is made once and the signed
/// message built in a reused buffer, so checking a Signed Write Command allocates nothing.
public struct ATTSignatureKey {
    private var cmac: AESCMACKey
    private var message: [UInt8] = []

    /// Nil for a CSRK that is not 16 bytes (Vol 3, Part H, 3.6.6).
    public init?(csrk: [UInt8]) {
        guard csrk.count == 16 else { return nil }
        cmac = AESCMACKey(key: csrk.reversed())
        // The longest PDU (ATT_MTU 517) and its counter.
        message.reserveCapacity(517 + 4)
    }

    /// T = AES-CMAC over m || SignCounter, both reversed for the CMAC (most significant first).
    private mutating func mac(_ signed: some Collection<UInt8>, counter: UInt32) -> ArraySlice<UInt8> {
        message.removeAll(keepingCapacity: true)
        message.append(contentsOf: signed)
        message.appendLE(counter)
        message.reverse()
        return cmac.mac(message)
    }

    /// SignCounter, then MSB_64(T) little-endian like every field on the air.
    public mutating func signature(_ signed: some Collection<UInt8>, counter: UInt32) -> [UInt8] {
        let t = mac(signed, counter: counter)
        var signature: [UInt8] = []
        signature.appendLE(counter)
        signature += t.prefix(8).reversed()
        return signature
    }

    /// Whether `signature` is `signed`'s with the counter it names (constant-time compare).
    public mutating func verify(_ signed: some Collection<UInt8>, signature: some Collection<UInt8>) -> Bool {
        guard signature.count == ATTSignature.length, let counter = ATTSignature.counter(of: signature) else { return false }
        let t = mac(signed, counter: counter)
        var difference: UInt8 = 0
        for (index, byte) in signature.dropFirst(4).enumerated() { difference |= byte ^ t[t.startIndex + 7 - index] }
        return difference == 0
    }
}
