/// How a link is protected right now: what the ATT server checks attribute permissions against
/// (Vol 3, Part C, 10.3) and what the Security Manager of either role reports after Encryption
/// Change. One value from Security to the server: the host hands it on as it is.
public struct LinkSecurity: Equatable, Sendable {
    public var isEncrypted: Bool
    /// The key came from a MITM-protected pairing.
    public var isAuthenticated: Bool
    /// The key came from LE Secure Connections.
    public var isSecureConnections: Bool
    /// Octets of the key in use (7...16); 0 when not encrypted.
    public var encryptionKeySize: UInt8
    /// The link is encrypted with a bond's key, or its pairing ended in a bond.
    public var isBonded: Bool
    /// This side holds a key for the peer (a bond), encrypted or not yet: an unencrypted link then
    /// gets Insufficient Encryption, so the peer encrypts rather than pairs again (Vol 3, Part C,
    /// 10.3.1.1). Set by the host, which knows the bonds; the Security Manager leaves it false.
    public var hasLongTermKey: Bool

    public static let unencrypted = LinkSecurity()

    public init(isEncrypted: Bool = false, isAuthenticated: Bool = false, isSecureConnections: Bool = false,
                encryptionKeySize: UInt8 = 0, isBonded: Bool = false, hasLongTermKey: Bool = false) {
        self.isEncrypted = isEncrypted
        self.isAuthenticated = isAuthenticated
        self.isSecureConnections = isSecureConnections
        self.encryptionKeySize = encryptionKeySize
        self.isBonded = isBonded
        self.hasLongTermKey = hasLongTermKey
    }

    /// Takes the key size the controller reports (Encryption Change v2, or Read Encryption Key
    /// Size, Vol 4, Part E, 7.5.7) beside the one negotiated: the key is as strong as the smaller.
    /// A controller that reports more than was negotiated (rootcanal says 16 for a 7-octet key)
    /// still encrypts with the key the host shortened (Vol 3, Part H, 2.3.4); one that reports
    /// less shortened it itself. Returns the line to log when the two differ, else nil.
    public mutating func controllerReported(keySize reported: UInt8) -> String? {
        let negotiated = encryptionKeySize
        guard reported != negotiated else { return nil }
        encryptionKeySize = min(negotiated, reported)
        return "the controller reports a \(reported)-octet key, \(negotiated) octets were negotiated: the link counts as \(encryptionKeySize)"
    }

    /// "encrypted (LE Secure Connections, unauthenticated, 16-octet key, bonded)" or "not encrypted".
    public var summary: String {
        guard isEncrypted else { return "not encrypted" }
        return "encrypted (\(isSecureConnections ? "LE Secure Connections" : "LE legacy"), \(isAuthenticated ? "authenticated" : "unauthenticated"), \(encryptionKeySize)-octet key\(isBonded ? ", bonded" : ""))"
    }
}
