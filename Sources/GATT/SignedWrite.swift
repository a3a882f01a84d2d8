import BlemuCore

/// Data signing (Vol 3, Part H, 2.4.5; Vol 3, Part C, 10.4): the 12-octet signature a Signed
/// Write Command ends with is SignCounter (32 bits) then MAC, the 64 most significant bits of
/// AES-CMAC with the CSRK over m || SignCounter, where m is the PDU up to the signature.
///
/// Keys and messages are little-endian on the air, as the rest of the SMP toolbox; the CMAC of
/// RFC 4493 takes them most significant octet first, so they are reversed at its edges.
public enum ATTSignature {
    public static let length = 12

    /// The signature of `message` (opcode, handle, value) with `counter`, as sent.
    public static func sign(_ message: some Collection<UInt8>, counter: UInt32, csrk: [UInt8]) -> [UInt8] {
        var signed = Array(message)
        signed.appendLE(counter)
        let t = AESCMAC.mac(key: csrk.reversed(), message: signed.reversed())
        // MSB_64(T), then little-endian like every field on the air.
        var signature: [UInt8] = []
        signature.appendLE(counter)
        signature += t.prefix(8).reversed()
        return signature
    }

    /// Whether `signature` is `message`'s with the counter it names (constant-time compare).
    public static func verify(_ message: some Collection<UInt8>, signature: some Collection<UInt8>, csrk: [UInt8]) -> Bool {
        let given = Array(signature)
        guard given.count == length, csrk.count == 16, let counter = counter(of: given) else { return false }
        let expected = sign(message, counter: counter, csrk: csrk)
        var difference: UInt8 = 0
        for (a, b) in zip(expected, given) { difference |= a ^ b }
        return difference == 0
    }

    /// The SignCounter a signature names (its first four octets, little-endian).
    public static func counter(of signature: some Collection<UInt8>) -> UInt32? {
        let bytes = Array(signature.prefix(4))
        guard bytes.count == 4 else { return nil }
        return UInt32(bytes[0]) | UInt32(bytes[1]) << 8 | UInt32(bytes[2]) << 16 | UInt32(bytes[3]) << 24
    }
}

/// What the server needs to verify a client's signed writes: the CSRK it distributed when it
/// bonded and the SignCounter of the last one accepted (nil before the first).
public struct ATTSigningState: Equatable, Sendable {
    public var signatureKey: [UInt8]
    public var lastCounter: UInt32?
    public init(signatureKey: [UInt8], lastCounter: UInt32?) {
        self.signatureKey = signatureKey
        self.lastCounter = lastCounter
    }
}

/// Why a Signed Write Command was dropped (commands have no response: the device never hears
/// of it, the stack logs it).
public enum SignedWriteDrop: Equatable, Sendable {
    /// No CSRK for this client (not bonded, or it distributed none).
    case noKey
    /// The SignCounter is not larger than the last one accepted: a replay (Vol 3, Part C, 10.4.2).
    case replayed(counter: UInt32, last: UInt32)
    /// The MAC does not match.
    case badSignature
}
