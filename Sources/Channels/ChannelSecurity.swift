import BlemuCore

/// What a served SPSM demands of its link before it accepts a channel (Vol 3, Part A, 4.23
/// results 0x0005-0x0008; Vol 3, Part C, 10.2 security mode 1 levels).
public struct ChannelSecurity: Equatable, Sendable {
    public var requiresEncryption: Bool
    /// A key from a MITM-protected pairing (level 3).
    public var requiresAuthentication: Bool
    /// Octets of key at least (7...16).
    public var minimumKeySize: UInt8

    public init(requiresEncryption: Bool = false, requiresAuthentication: Bool = false, minimumKeySize: UInt8 = 7) {
        self.requiresEncryption = requiresEncryption || requiresAuthentication
        self.requiresAuthentication = requiresAuthentication
        self.minimumKeySize = minimumKeySize
    }

    public static let none = ChannelSecurity()
    /// Core Bluetooth's `publishL2CAPChannel(withEncryption: true)`.
    public static let encrypted = ChannelSecurity(requiresEncryption: true)
    public static let authenticated = ChannelSecurity(requiresAuthentication: true)

    /// The refusal a request on a link protected as `link` gets, or nil when it may open.
    /// An encrypted-only channel refuses an unencrypted link with Insufficient Encryption
    /// (0x0008), which a central answers by encrypting (or pairing first); one that needs a
    /// MITM-protected key refuses a link without one with Insufficient Authentication (0x0005);
    /// a key shorter than asked gets 0x0007.
    public func refusal(for link: LinkSecurity) -> CreditBasedResult? {
        guard requiresEncryption, let shortfall = link.shortfall(authentication: requiresAuthentication, minimumKeySize: minimumKeySize) else {
            return nil
        }
        switch shortfall {
        case .notEncrypted: return requiresAuthentication ? .insufficientAuthentication : .insufficientEncryption
        case .notAuthenticated, .notSecureConnections: return .insufficientAuthentication
        case .keyTooShort: return .insufficientEncryptionKeySize
        }
    }
}
