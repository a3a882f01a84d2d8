import BlemuCore

// The signature itself (Vol 3, Part H, 2.4.5) is BlemuCrypto's `ATTSignature`.

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
