import BlemuCore

/// What either role offers and demands when it pairs (Vol 3, Part H, 2.3): the Pairing
/// Request's or Response's fields (3.5.1, 3.5.2) and the rules a pairing must meet.
public struct SMPPairingConfiguration: Equatable, Sendable {
    public var ioCapability: SMPIOCapability
    /// Whether keys may be distributed and kept (Bonding_Flags). Without bonding on both sides
    /// no keys are distributed: the pairing only encrypts this link.
    public var bondable: Bool
    /// Demand MITM protection: a pairing that would be Just Works fails (Authentication Requirements).
    public var requireMITM: Bool
    /// Offer LE Secure Connections (used when the peer offers it too).
    public var secureConnections: Bool
    /// Secure Connections Only mode (Vol 3, Part C, 10.2.4): refuse LE legacy pairing
    /// (Authentication Requirements) and keys shorter than 128 bits.
    public var secureConnectionsOnly: Bool
    /// The smallest key size accepted (7...16); less fails with Encryption Key Size.
    public var minimumEncryptionKeySize: UInt8
    /// The largest key size offered (7...16).
    public var maximumEncryptionKeySize: UInt8
    /// The passkey shown when this side displays one.
    public var passkey: SMPPasskeySource
    /// IRK and identity address, distributed when bonding and the peer asks (IdKey); nil: not
    /// distributed.
    public var identity: SMPIdentity?
    /// Ask the user to accept a Just Works pairing (`confirmJustWorks`, answered with
    /// `justWorksConfirmed`) instead of going on unasked. Vol 3, Part H, 2.3.5.6.2: Just Works
    /// uses the Numeric Comparison protocol without showing a number, "the application may
    /// simply ask the user to accept the connection".
    public var confirmsJustWorks = false
    /// The kinds of keys this side distributes and asks the peer for (3.6.1): of EncKey, IdKey
    /// and SignKey. A kind is distributed only when this side has such a key; LinkKey is never
    /// offered.
    public var keys: SMPKeyDistribution

    public init(ioCapability: SMPIOCapability, bondable: Bool = true, requireMITM: Bool = false,
                secureConnections: Bool = true, secureConnectionsOnly: Bool = false,
                minimumEncryptionKeySize: UInt8 = 7, maximumEncryptionKeySize: UInt8 = 16,
                passkey: SMPPasskeySource = .random, identity: SMPIdentity? = nil,
                keys: SMPKeyDistribution = [.encryptionKey, .identityKey, .signingKey]) {
        precondition(SMPPairingFeatures.encryptionKeySizes.contains(minimumEncryptionKeySize)
                     && SMPPairingFeatures.encryptionKeySizes.contains(maximumEncryptionKeySize)
                     && minimumEncryptionKeySize <= maximumEncryptionKeySize, "key sizes are 7...16, minimum <= maximum")
        self.ioCapability = ioCapability
        self.bondable = bondable
        self.requireMITM = requireMITM
        self.secureConnections = secureConnections || secureConnectionsOnly
        self.secureConnectionsOnly = secureConnectionsOnly
        self.minimumEncryptionKeySize = minimumEncryptionKeySize
        self.maximumEncryptionKeySize = maximumEncryptionKeySize
        self.passkey = passkey
        self.identity = identity
        self.keys = keys.intersection([.encryptionKey, .identityKey, .signingKey])
    }
}

/// The demands both roles' configurations make of a pairing.
extension SMPPairingConfiguration {
    /// Whether LE Secure Connections is used with a peer offering `peer`, and the key size; or
    /// the reason to refuse.
    func negotiate(with peer: SMPPairingFeatures) throws(SMPPairingFailedReason)
        -> (secureConnections: Bool, keySize: UInt8) {
        let secureConnections = self.secureConnections && peer.authRequirements.secureConnections
        if secureConnectionsOnly && !secureConnections { throw .authenticationRequirements }
        // 2.3.4: the smaller of the two maxima; below our minimum fails with Encryption Key Size.
        let keySize = min(peer.maximumEncryptionKeySize, maximumEncryptionKeySize)
        let minimum = secureConnectionsOnly ? 16 : minimumEncryptionKeySize
        guard keySize >= minimum else { throw .encryptionKeySize }
        return (secureConnections, keySize)
    }

    /// Why the selected method is refused, or nil: no OOB data here, and MITM when demanded.
    func refusal(of method: SMPPairingMethod) -> SMPPairingFailedReason? {
        if method == .outOfBand { return .oobNotAvailable }
        if requireMITM && !method.isAuthenticated { return .authenticationRequirements }
        return nil
    }
}
