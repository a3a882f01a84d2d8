import BlemuCore
import BlemuSMP

/// What the key a link is encrypted with brings, the same for both roles' Security Managers.
extension LinkSecurity {
    /// Encrypted with the STK or LTK of the pairing under way (its terms in `summary`).
    init(pairing summary: SMPPairingSummary) {
        self.init(isEncrypted: true, isAuthenticated: summary.authenticated, isSecureConnections: summary.secureConnections,
                  encryptionKeySize: summary.encryptionKeySize, isBonded: false)
    }

    /// Encrypted with a bond's LTK.
    init(bond: Bond) {
        self.init(isEncrypted: true, isAuthenticated: bond.authenticated, isSecureConnections: bond.secureConnections,
                  encryptionKeySize: bond.encryptionKeySize, isBonded: true)
    }

    /// The link's security once Encryption Change says it is on: that of `keyInUse`, the key this
    /// side gave the controller (nil: none known, counted as an unauthenticated legacy 16-octet
    /// key), as strong as the smaller of its size and `controllerKeySize` (the controller's, when
    /// it said). `difference`: the line to log when the two sizes differ.
    static func encrypted(with keyInUse: LinkSecurity?, controllerKeySize: UInt8?) -> (security: LinkSecurity, difference: String?) {
        var security = keyInUse ?? LinkSecurity(isEncrypted: true, encryptionKeySize: 16)
        guard let controllerKeySize else { return (security, nil) }
        let difference = security.controllerReported(keySize: controllerKeySize)
        return (security, difference)
    }
}
