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

/// Where a link's security falls short of what an attribute or a channel requires (Vol 3,
/// Part C, 10.2 and 10.3): the one decision, which ATT and the credit based channels each
/// answer in their own protocol's words (an ATT error, a channel's result).
public enum SecurityShortfall: Equatable, Sendable {
    /// The link is not encrypted.
    case notEncrypted
    /// Encrypted with a key from a pairing without MITM protection, and an authenticated one is required.
    case notAuthenticated
    /// Encrypted with an LE legacy key, and one from LE Secure Connections is required.
    case notSecureConnections
    /// The key is shorter than the required octets.
    case keyTooShort
}

extension LinkSecurity {
    /// What the link lacks for an access that requires encryption, with an authenticated key
    /// (`authentication`), from LE Secure Connections (`secureConnections`) and of at least
    /// `minimumKeySize` octets, checked in that order; nil when it is protected enough.
    public func shortfall(authentication: Bool, secureConnections: Bool = false, minimumKeySize: UInt8 = 7) -> SecurityShortfall? {
        guard isEncrypted else { return .notEncrypted }
        if authentication && !isAuthenticated { return .notAuthenticated }
        if secureConnections && !isSecureConnections { return .notSecureConnections }
        if encryptionKeySize < minimumKeySize { return .keyTooShort }
        return nil
    }
}

/// The one `LinkSecurity` of a link, held once and read in place by everything on the link
/// that checks it (the GATT server session of every ATT bearer, the credit based channels):
/// the security layer sets it, nobody keeps a copy.
public final class LinkSecurityState {
    public var current: LinkSecurity
    /// Whether a pairing runs on the link now, as the link's Security Manager answers it; nil
    /// where nobody pairs on the link's behalf (the central's own small server). A server that
    /// would refuse a request for want of security holds it while this answers true
    /// (`ATTServer.securitySettled`).
    public var pairingUnderWay: (() -> Bool)?

    public init(_ current: LinkSecurity = .unencrypted) {
        self.current = current
    }
}
