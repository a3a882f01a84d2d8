import BlemuCore
import BlemuCrypto
import BlemuSMP
import BlemuSecurity

/// What a bonded client's GATT server remembers of it across links (Vol 3, Part G): its CCCD
/// values (3.3.3.3), its Client Supported Features and whether it is change-aware (robust
/// caching, 2.5.2.1, 7.2), the Database Hash it knew when it left (7.3), and the SignCounter of
/// its last signed write (Vol 3, Part C, 10.4.2). Kept with the bond (`Bond.attachment`), not
/// inside its keys: Security stores it in the bond file and never looks into it.
public struct BondedClientState: Equatable, Sendable {
    /// CCCD values by descriptor handle.
    public var clientConfigurations: [UInt16: UInt16]
    /// The Database Hash of the database the client knew when its last link closed: a different
    /// one when it comes back means the database changed while it was away (Vol 3, Part G, 7.1:
    /// a bonded client then gets Service Changed).
    public var databaseHash: [UInt8]?
    /// The SignCounter of the last signed write accepted from the client: the next must be
    /// larger (Vol 3, Part C, 10.4.2). Nil before the first.
    public var signCounter: UInt32?
    /// The client's Client Supported Features (Vol 3, Part G, 7.2).
    public var clientSupportedFeatures: UInt8
    /// False while the client is change-unaware of a database change (2.5.2.1): it gets Database
    /// Out Of Sync until it reads the hash or confirms Service Changed.
    public var changeAware: Bool

    public init(clientConfigurations: [UInt16: UInt16] = [:], databaseHash: [UInt8]? = nil, signCounter: UInt32? = nil,
                clientSupportedFeatures: UInt8 = 0, changeAware: Bool = true) {
        self.clientConfigurations = clientConfigurations
        self.databaseHash = databaseHash
        self.signCounter = signCounter
        self.clientSupportedFeatures = clientSupportedFeatures
        self.changeAware = changeAware
    }

    // MARK: In the bond file

    /// The fields of the bond's entry in the bond file: the names and encodings they always had
    /// (CCCDs by decimal handle, the hash in hex, a field at its default left out).
    enum Field {
        static let clientConfigurations = "cccds"
        static let databaseHash = "databaseHash"
        static let signCounter = "signCounter"
        static let clientSupportedFeatures = "clientFeatures"
        static let changeAware = "changeAware"
    }

    /// How the state sits in a bond file's entries.
    public static let format = BondAttachmentFormat(
        fields: [Field.clientConfigurations, Field.databaseHash, Field.signCounter, Field.clientSupportedFeatures, Field.changeAware],
        canonical: { attachment in BondedClientState(attachment)?.attachment })

    /// The state an attachment holds; nil when a field is malformed (every value from a file is
    /// checked, never trusted): CCCD handles and values of 16 bits, a 16-octet hash, a 32-bit
    /// counter, an octet of features.
    public init?(_ attachment: BondAttachment) {
        self.init()
        if let value = attachment[Field.clientConfigurations] {
            guard case .table(let table) = value else { return nil }
            for (handle, configuration) in table {
                guard let handle = UInt16(handle), let configuration = UInt16(exactly: configuration) else { return nil }
                clientConfigurations[handle] = configuration
            }
        }
        if let value = attachment[Field.databaseHash] {
            guard case .text(let text) = value, let hash = Hex.parse(text), hash.count == 16 else { return nil }
            databaseHash = hash
        }
        if let value = attachment[Field.signCounter] {
            guard case .integer(let integer) = value, let counter = UInt32(exactly: integer) else { return nil }
            signCounter = counter
        }
        if let value = attachment[Field.clientSupportedFeatures] {
            guard case .integer(let integer) = value, let features = UInt8(exactly: integer) else { return nil }
            clientSupportedFeatures = features
        }
        if let value = attachment[Field.changeAware] {
            guard case .flag(let flag) = value else { return nil }
            changeAware = flag
        }
    }

    public var attachment: BondAttachment {
        var attachment = BondAttachment()
        if !clientConfigurations.isEmpty {
            attachment[Field.clientConfigurations] = .table(Dictionary(uniqueKeysWithValues: clientConfigurations.map {
                (String($0.key), Int64($0.value))
            }))
        }
        if let databaseHash { attachment[Field.databaseHash] = .text(Hex.bytes(databaseHash)) }
        if let signCounter { attachment[Field.signCounter] = .integer(Int64(signCounter)) }
        if clientSupportedFeatures != 0 { attachment[Field.clientSupportedFeatures] = .integer(Int64(clientSupportedFeatures)) }
        if !changeAware { attachment[Field.changeAware] = .flag(false) }
        return attachment
    }
}

extension Bond {
    /// A bond with the client's GATT state attached.
    public init(peer: LEAddress, identity: LEAddress? = nil, identityResolvingKey: [UInt8]? = nil,
                longTermKey: SMPLongTermKey, encryptionKeySize: UInt8, secureConnections: Bool, authenticated: Bool,
                sequence: UInt64 = 0, signatureKey: [UInt8]? = nil, client: BondedClientState) {
        self.init(peer: peer, identity: identity, identityResolvingKey: identityResolvingKey, longTermKey: longTermKey,
                  encryptionKeySize: encryptionKeySize, secureConnections: secureConnections, authenticated: authenticated,
                  sequence: sequence, signatureKey: signatureKey, attachment: client.attachment)
    }

    /// The client's GATT state kept with this bond (none kept: the defaults).
    public var client: BondedClientState {
        BondedClientState(attachment) ?? BondedClientState()
    }

    /// One line as `blemu bonds list` and the control socket's `bonds` show a bond: the
    /// central's address (and identity), its strength, what it kept; never a key.
    public var summary: String {
        let client = self.client
        let subscriptions = client.clientConfigurations.isEmpty ? "" : ", \(client.clientConfigurations.count) subscription(s) kept"
        // What the central gave and set, never a key.
        let signing = signatureKey == nil ? "" : ", signs writes (SignCounter \(client.signCounter.map(String.init) ?? "none yet"))"
        let caching = client.clientSupportedFeatures & 0x01 == 0 ? "" : ", robust caching\(client.changeAware ? "" : " (change-unaware)")"
        return "\(keySummary)\(subscriptions)\(signing)\(caching)"
    }
}
