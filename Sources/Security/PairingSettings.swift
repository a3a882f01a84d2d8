import BlemuCore
import BlemuSMP

/// How either role pairs when its owner programs it at run time (the programmable host's
/// `pairing-config`): taken by the next pairing of every link, a pairing under way keeps the
/// terms it started with.
public struct PairingSettings: Equatable, Sendable {
    /// The IO capability declared (Vol 3, Part H, 3.5.1, Table 3.4).
    public var ioCapability: SMPIOCapability
    /// Bonding_Flags: keys are distributed and kept (3.5.1).
    public var bondable: Bool
    /// The MITM flag of AuthReq (3.5.1): the IO capabilities then choose the method (2.3.5.1).
    /// Asked for, not demanded: a Just Works pairing still completes, unauthenticated (`secure`
    /// to level 3 or 4 then reports an authentication failure).
    public var mitm: Bool
    /// Secure Connections Only mode (Vol 3, Part C, 10.2.4): LE legacy pairing and keys shorter
    /// than 128 bits are refused (Authentication Requirements, Encryption Key Size).
    public var secureConnectionsOnly: Bool
    /// The kinds of keys this side distributes and asks for (Vol 3, Part H, 3.6.1), of
    /// `.encryptionKey`, `.identityKey`, `.signingKey`. A side distributes only what it has: a
    /// peripheral its LTK (legacy) and identity, a central its identity.
    public var keys: SMPKeyDistribution

    public init(ioCapability: SMPIOCapability = .keyboardDisplay, bondable: Bool = true, mitm: Bool = true,
                secureConnectionsOnly: Bool = false,
                keys: SMPKeyDistribution = [.encryptionKey, .identityKey, .signingKey]) {
        self.ioCapability = ioCapability
        self.bondable = bondable
        self.mitm = mitm
        self.secureConnectionsOnly = secureConnectionsOnly
        self.keys = keys.intersection([.encryptionKey, .identityKey, .signingKey])
    }

    /// The shared part of either role's SMP configuration. `confirmsJustWorks`: whether the
    /// owner answers prompts (it is then asked to accept Just Works too).
    func pairingConfiguration(identity: SMPIdentity?, minimumEncryptionKeySize: UInt8 = 7,
                              confirmsJustWorks: Bool) -> SMPPairingConfiguration {
        var configuration = SMPPairingConfiguration(
            ioCapability: ioCapability, bondable: bondable, requireMITM: false, secureConnections: true,
            secureConnectionsOnly: secureConnectionsOnly, minimumEncryptionKeySize: min(max(minimumEncryptionKeySize, 7), 16),
            passkey: .random, identity: identity, keys: keys)
        configuration.confirmsJustWorks = confirmsJustWorks
        return configuration
    }
}

/// LE security mode 1's levels (Vol 3, Part C, 10.2.1): what `secure` is asked to reach and
/// what a link has.
public enum LESecurityLevel: Int, Comparable, Sendable, CaseIterable {
    /// Level 1: no security (no authentication, no encryption).
    case none = 1
    /// Level 2: unauthenticated pairing with encryption.
    case encrypted = 2
    /// Level 3: authenticated (MITM-protected) pairing with encryption.
    case authenticated = 3
    /// Level 4: authenticated LE Secure Connections pairing with encryption, a 128-bit key.
    case authenticatedSecureConnections = 4

    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.rawValue < rhs.rawValue }

    /// The Security Request's (or a central's Pairing Request's) MITM flag for this level.
    var needsMITM: Bool { self >= .authenticated }
}

extension LinkSecurity {
    /// The link's LE security level (Vol 3, Part C, 10.2.1).
    public var level: LESecurityLevel {
        guard isEncrypted else { return .none }
        guard isAuthenticated else { return .encrypted }
        return isSecureConnections && encryptionKeySize == 16 ? .authenticatedSecureConnections : .authenticated
    }
}

/// Why `secure` did not reach its level (the programmable host's `security-failed` reasons).
public enum SecureFailure: String, Equatable, Sendable {
    /// The pairing failed (Pairing Failed either way, the SMP timeout, no answer to a Security Request).
    case pairingFailure = "pairing-failure"
    /// Security came, but not enough: no MITM protection, not Secure Connections or a key too
    /// short for the level, or the peer's or our Authentication Requirements / Encryption Key
    /// Size failure (Vol 3, Part H, 3.5.5).
    case authenticationFailure = "authentication-failure"
    /// The controller could not encrypt (Encryption Change with an error status).
    case encryptionFailure = "encryption-failure"
    /// The link closed first.
    case connectionDied = "connection-died"
}

/// What `secure` ended with.
public enum SecureOutcome: Equatable, Sendable {
    /// The link has the level. `already`: it had it when asked; nothing was done.
    case reached(LinkSecurity, already: Bool)
    case failed(SecureFailure, detail: String)

    /// The outcome once `security` came while `level` was wanted: reached, or an authentication failure.
    static func judge(_ security: LinkSecurity, wanted level: LESecurityLevel) -> SecureOutcome {
        if security.level >= level { return .reached(security, already: false) }
        return .failed(.authenticationFailure,
                       detail: "the link is at level \(security.level.rawValue) (\(security.summary)), level \(level.rawValue) was wanted")
    }

    /// A failed pairing's class: the requirements not met (Authentication Requirements, 0x03;
    /// Encryption Key Size, 0x06) are authentication failures, the rest pairing failures.
    static func pairingFailed(_ reason: SMPPairingFailedReason?, _ detail: String) -> SecureOutcome {
        switch reason {
        case .authenticationRequirements?, .encryptionKeySize?: .failed(.authenticationFailure, detail: detail)
        default: .failed(.pairingFailure, detail: detail)
        }
    }
}

/// Bond queries across both roles' bond stores, by the peer's address and type (the
/// programmable host's `bonded` and `forget`): a bond made from this address, with it as its
/// identity address, or one whose IRK resolves it.
public enum BondQueries {
    public static func isBonded(_ address: LEAddress, in stores: [BondStore]) -> Bool {
        stores.contains { $0.bond(for: address) != nil }
    }

    /// Forgets every bond of `address` in `stores`; whether there was one.
    @discardableResult
    public static func forget(_ address: LEAddress, in stores: [BondStore]) -> Bool {
        var forgotten = false
        for store in stores where !store.forget(bondOf: address).isEmpty { forgotten = true }
        return forgotten
    }
}
