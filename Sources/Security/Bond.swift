import BlemuCore
import BlemuCrypto
import BlemuSMP

/// What a peripheral keeps of a central it bonded with (Vol 3, Part H, 2.4.1 and 3.6): the key
/// the central names the link by on reconnection, how strong that key is, and who the central is.
///
/// `description` never shows a key: bonds appear in logs by peer alone.
public struct Bond: Equatable, Sendable, CustomStringConvertible {
    /// The address the central connected from when it bonded.
    public var peer: LEAddress
    /// The central's identity address (Identity Address Information), when it gave one.
    public var identity: LEAddress?
    /// The central's IRK (Identity Information), when it gave one.
    public var identityResolvingKey: [UInt8]?
    /// The LTK this peripheral answers LE Long Term Key Request with: EDIV and Rand zero for
    /// LE Secure Connections (2.4.1), the distributed ones for LE legacy (2.4.2).
    public var longTermKey: SMPLongTermKey
    public var encryptionKeySize: UInt8
    public var secureConnections: Bool
    /// MITM-protected pairing (Passkey Entry, Numeric Comparison).
    public var authenticated: Bool
    /// Order of creation, for the limit's oldest-out: larger is newer.
    public var sequence: UInt64
    /// The central's CSRK (Signing Information, Vol 3, Part H, 3.6.6), which its Signed Write
    /// Commands are verified with (2.4.5).
    public var signatureKey: [UInt8]?
    /// What the layer above keeps with the bond (the bonded client's GATT state), opaque here:
    /// stored with the bond and forgotten with it.
    public var attachment: BondAttachment

    public init(peer: LEAddress, identity: LEAddress? = nil, identityResolvingKey: [UInt8]? = nil,
                longTermKey: SMPLongTermKey, encryptionKeySize: UInt8, secureConnections: Bool, authenticated: Bool,
                sequence: UInt64 = 0, signatureKey: [UInt8]? = nil, attachment: BondAttachment = .empty) {
        self.peer = peer
        self.identity = identity
        self.identityResolvingKey = identityResolvingKey
        self.longTermKey = longTermKey
        self.encryptionKeySize = encryptionKeySize
        self.secureConnections = secureConnections
        self.authenticated = authenticated
        self.sequence = sequence
        self.signatureKey = signatureKey
        self.attachment = attachment
    }

    /// Whether a link from `address` belongs to this bond (the address it bonded from, or its identity).
    public func matches(_ address: LEAddress) -> Bool {
        address == peer || address == identity
    }

    /// Whether the central at `address`, of either type, made this bond: the address it bonded
    /// from or its identity address (how `bonds forget ADDRESS` names a central).
    public func isOf(_ address: BluetoothAddress) -> Bool {
        peer.address == address || identity?.address == address
    }

    /// Whether `address` is a resolvable private address made from this bond's IRK (Vol 6,
    /// Part B, 1.3.2.2: prand, the 24 most significant bits, starts 0b01; the 24 least
    /// significant are ah(IRK, prand)): the bonded central under an address of the moment.
    public func resolves(_ address: LEAddress) -> Bool {
        guard address.isRandom, let irk = identityResolvingKey, irk.count == 16, irk.contains(where: { $0 != 0 }) else { return false }
        let bytes = address.address.littleEndianBytes
        guard bytes[5] & 0xC0 == 0x40 else { return false }
        return SMPCrypto.ah(irk: irk, prand: Array(bytes[3..<6])) == Array(bytes[0..<3])
    }

    /// Whether the key of an LE Long Term Key Request is this bond's: EDIV and Rand zero for
    /// Secure Connections, the distributed EDIV and Rand for legacy (Vol 3, Part H, 2.4.1, 2.4.2).
    public func answers(encryptedDiversifier: UInt16, randomNumber: UInt64) -> Bool {
        encryptedDiversifier == longTermKey.encryptedDiversifier && randomNumber == longTermKey.randomNumber
    }

    /// "LE Secure Connections, unauthenticated, 16-octet key" (no key material).
    public var strength: String {
        "\(secureConnections ? "LE Secure Connections" : "LE legacy"), \(authenticated ? "authenticated" : "unauthenticated"), \(encryptionKeySize)-octet key"
    }

    /// The start of the line `blemu bonds list` and the control socket's `bonds` show for a bond:
    /// the central's address (and identity) and its strength, never a key. The layer that owns the
    /// attachment adds what the central kept (Host's `Bond.summary`).
    public var keySummary: String {
        let peerText = "\(peer.address) (\(peer.isRandom ? "random" : "public"))"
        let identityText = identity.map { " identity \($0.address) (\($0.isRandom ? "random" : "public"))" } ?? ""
        return "\(peerText)\(identityText): \(strength)"
    }

    public var description: String {
        "bond with \(identity?.address.description ?? peer.address.description) (\(strength))"
    }
}
