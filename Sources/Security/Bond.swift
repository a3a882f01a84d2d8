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
    /// The central's CCCD values (value handle's descriptor handle → value), kept across links.
    public var clientConfigurations: [UInt16: UInt16]
    /// The Database Hash of the database this central knew when its last link closed: a
    /// different one when it comes back means the database changed while it was away (Vol 3,
    /// Part G, 7.1: a bonded client then gets Service Changed).
    public var databaseHash: [UInt8]?
    /// The central's CSRK (Signing Information, Vol 3, Part H, 3.6.6), which its Signed Write
    /// Commands are verified with (2.4.5).
    public var signatureKey: [UInt8]?
    /// The SignCounter of the last signed write accepted from the central: the next must be
    /// larger (Vol 3, Part C, 10.4.2). Nil before the first.
    public var signCounter: UInt32?
    /// The central's Client Supported Features (Vol 3, Part G, 7.2), kept for a bonded client
    /// across connections (2.5.2.1).
    public var clientSupportedFeatures: UInt8
    /// False while the bonded client is change-unaware of a database change (Vol 3, Part G,
    /// 2.5.2.1): it gets Database Out Of Sync until it reads the hash or confirms Service Changed.
    public var changeAware: Bool

    public init(peer: LEAddress, identity: LEAddress? = nil, identityResolvingKey: [UInt8]? = nil,
                longTermKey: SMPLongTermKey, encryptionKeySize: UInt8, secureConnections: Bool, authenticated: Bool,
                sequence: UInt64 = 0, clientConfigurations: [UInt16: UInt16] = [:], databaseHash: [UInt8]? = nil,
                signatureKey: [UInt8]? = nil, signCounter: UInt32? = nil, clientSupportedFeatures: UInt8 = 0,
                changeAware: Bool = true) {
        self.signatureKey = signatureKey
        self.signCounter = signCounter
        self.clientSupportedFeatures = clientSupportedFeatures
        self.changeAware = changeAware
        self.databaseHash = databaseHash
        self.peer = peer
        self.identity = identity
        self.identityResolvingKey = identityResolvingKey
        self.longTermKey = longTermKey
        self.encryptionKeySize = encryptionKeySize
        self.secureConnections = secureConnections
        self.authenticated = authenticated
        self.sequence = sequence
        self.clientConfigurations = clientConfigurations
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

    /// One line as `blemu bonds list` and the control socket's `bonds` show a bond: the
    /// central's address (and identity), its strength, what it kept; never a key.
    public var summary: String {
        let peerText = "\(peer.address) (\(peer.isRandom ? "random" : "public"))"
        let identityText = identity.map { " identity \($0.address) (\($0.isRandom ? "random" : "public"))" } ?? ""
        let subscriptions = clientConfigurations.isEmpty ? "" : ", \(clientConfigurations.count) subscription(s) kept"
        // What the central gave and set, never a key.
        let signing = signatureKey == nil ? "" : ", signs writes (SignCounter \(signCounter.map(String.init) ?? "none yet"))"
        let caching = clientSupportedFeatures & 0x01 == 0 ? "" : ", robust caching\(changeAware ? "" : " (change-unaware)")"
        return "\(peerText)\(identityText): \(strength)\(subscriptions)\(signing)\(caching)"
    }

    public var description: String {
        "bond with \(identity?.address.description ?? peer.address.description) (\(strength))"
    }
}
