import BlemuATT
import BlemuCore
import BlemuCrypto

/// What the GATT server knows of one client, once per connection whatever the bearers it uses
/// (Zephyr's per-peer CCC state in gatt.c beside `struct bt_att`): its CCCDs (Vol 3, Part G,
/// 3.3.3.3: per client, persistent for a bonded one), its robust-caching state (2.5.2.1), its
/// signing key and last SignCounter (Vol 3, Part C, 10.4.2), and the link's security, read in
/// place from the link's one `LinkSecurityState`. Every bearer's `ATTServer` reads and writes
/// it here; none keeps a copy.
public final class GATTServerSession {
    /// The link's security, shared with its credit based channels.
    public let security: LinkSecurityState
    /// How the link is protected now.
    public var linkSecurity: LinkSecurity {
        get { security.current }
        set { security.current = newValue }
    }

    /// The client's CCCD values by the value handle of their characteristic.
    var clientConfigurations: [UInt16: UInt16] = [:]

    /// The client set bit 0, Robust Caching, of its Client Supported Features (Vol 3, Part G,
    /// 7.2): a database change makes it change-unaware.
    public var clientSupportsRobustCaching = false
    /// False from a database change until a robust-caching client is change-aware again.
    public private(set) var isChangeAware = true
    private var databaseHashReadWhileUnaware = false
    private var outOfSyncSent = false
    /// The connection is gone: the client's state is no more.
    private var isClosed = false
    /// The client's requests its servers answered (an Error Response, or a failed command,
    /// included), on every bearer of the connection: the device's statistics add them up when
    /// asked. Counted on the request path, read only between requests: no run-time
    /// exclusivity check.
    @exclusivity(unchecked) public internal(set) var requestsAnswered = 0

    /// The client's CSRK and last SignCounter, when it is bonded and distributed a CSRK: what
    /// its Signed Write Commands are verified with (nil: they are dropped).
    public var signing: ATTSigningState? {
        didSet {
            if signing?.signatureKey != oldValue?.signatureKey { signatureKey = signing.flatMap { ATTSignatureKey(csrk: $0.signatureKey) } }
        }
    }
    /// The CSRK of `signing`, made ready once per key.
    private var signatureKey: ATTSignatureKey?

    public init(security: LinkSecurityState = LinkSecurityState()) {
        self.security = security
    }

    // MARK: CCCDs (Vol 3, Part G, 3.3.3.3)

    public func isSubscribed(_ c: Characteristic, indications: Bool) -> Bool {
        let flags = clientConfigurations[c.valueHandle] ?? 0
        return flags & (indications ? 0x0002 : 0x0001) != 0
    }

    public func clientConfiguration(_ c: Characteristic) -> UInt16 { clientConfigurations[c.valueHandle] ?? 0 }

    /// Every CCCD value the client set that is not zero, by the value handle of its characteristic.
    public var clientConfigurationValues: [UInt16: UInt16] { clientConfigurations.filter { $0.value != 0 } }

    /// Sets a CCCD; returns the value it had.
    func configure(_ c: Characteristic, _ flags: UInt16) -> UInt16 {
        let old = clientConfigurations[c.valueHandle] ?? 0
        clientConfigurations[c.valueHandle] = flags
        return old
    }

    /// The CCCDs of `database`'s characteristics in `range`, gone with them: those that were set.
    func endConfigurations(in range: ClosedRange<UInt16>, of database: GATTDatabase) -> [(characteristic: Characteristic, configuration: UInt16)] {
        var ended: [(characteristic: Characteristic, configuration: UInt16)] = []
        for characteristic in database.characteristics where range.contains(characteristic.valueHandle) {
            if let value = clientConfigurations.removeValue(forKey: characteristic.valueHandle), value != 0 {
                ended.append((characteristic, value))
            }
        }
        return ended
    }

    // MARK: Client Supported Features (Vol 3, Part G, 7.2)

    /// The bits of Client Supported Features defined (0 Robust Caching, 1 EATT, 2 Multiple
    /// Handle Value Notifications); the rest are reserved.
    public static let definedClientFeatures: UInt8 = 0x07

    /// The Client Supported Features the client set (per client, Part G, 2.5.2.1 and 7.2,
    /// whatever bearer wrote them); a bit once set stays set.
    public private(set) var clientFeatures: UInt8 = 0

    /// The client writes its Client Supported Features (one octet at offset 0): nil when taken,
    /// else the error to answer (7.2: clearing a bit it set is Value Not Allowed). Bit 0 makes
    /// it a robust-caching client.
    public func writeClientFeatures(_ value: ValueBytes) -> ATTError? {
        guard value.count == 1 else { return .invalidAttributeValueLength }
        guard value[0] & clientFeatures == clientFeatures else { return .valueNotAllowed }
        setClientFeatures(value[0])
        return nil
    }

    /// A bonded client's Client Supported Features, kept with its bond (2.5.2.1): the bits it
    /// set before stay set, and cannot be cleared (7.2).
    public func restoreClientFeatures(_ features: UInt8) {
        setClientFeatures(features)
    }

    private func setClientFeatures(_ features: UInt8) {
        clientFeatures = features & Self.definedClientFeatures
        clientSupportsRobustCaching = clientFeatures & 0x01 != 0
    }

    // MARK: Robust caching (Vol 3, Part G, 2.5.2.1)

    /// The database changed: a robust-caching client becomes change-unaware.
    func databaseChanged() {
        guard clientSupportsRobustCaching, !isClosed else { return }
        becomeUnaware()
    }

    /// A bonded robust-caching client comes back change-unaware: the database changed while it
    /// was away, or it left before it was in sync again. For a client with a bond "the
    /// change-aware state ... shall be persistent across connections" (2.5.2.1).
    public func becomeChangeUnaware() {
        guard clientSupportsRobustCaching, !isClosed else { return }
        becomeUnaware()
    }

    private func becomeUnaware() {
        isChangeAware = false
        databaseHashReadWhileUnaware = false
        outOfSyncSent = false
    }

    /// The client confirmed a Service Changed indication: it is change-aware (2.5.2.1).
    public func serviceChangedConfirmed() {
        isChangeAware = true
    }

    /// A change-unaware client read the Database Hash.
    func databaseHashRead() {
        if !isChangeAware { databaseHashReadWhileUnaware = true }
    }

    /// What becomes of a request while the client is change-unaware.
    enum Admission {
        case admitted
        /// A command: ignored.
        case ignored
        /// Answered with Database Out Of Sync naming `handle`.
        case outOfSync(handle: UInt16)
    }

    /// 2.5.2.1: a change-unaware client's commands are ignored; a request for an attribute
    /// handle (or a Read By Type other than a discovery over the whole range) is answered with
    /// Database Out Of Sync; the client becomes change-aware with its next request after that
    /// error, or after it read the Database Hash.
    func admitWhileChangeUnaware(_ opcode: UInt8, _ pdu: ArraySlice<UInt8>, isCommand: Bool) -> Admission {
        if isCommand { return .ignored }
        if databaseHashReadWhileUnaware || outOfSyncSent {
            isChangeAware = true
            return .admitted
        }
        guard let handle = Self.outOfSyncHandle(opcode, pdu) else { return .admitted }
        outOfSyncSent = true
        return .outOfSync(handle: handle)
    }

    /// The handle a Database Out Of Sync error names for this request, or nil when a
    /// change-unaware client may make it (discovery, MTU, Execute Write).
    private static func outOfSyncHandle(_ opcode: UInt8, _ pdu: ArraySlice<UInt8>) -> UInt16? {
        let bytes = pdu.dropFirst()
        func word(_ at: Int) -> UInt16? {
            let index = bytes.startIndex + at
            guard index + 1 < bytes.endIndex else { return nil }
            return UInt16(bytes[index]) | UInt16(bytes[index + 1]) << 8
        }
        switch opcode {
        case ATTOpcode.readRequest.rawValue, ATTOpcode.readBlobRequest.rawValue, ATTOpcode.writeRequest.rawValue,
             ATTOpcode.prepareWriteRequest.rawValue, ATTOpcode.readMultipleRequest.rawValue,
             ATTOpcode.readMultipleVariableRequest.rawValue:
            return word(0)
        case ATTOpcode.readByTypeRequest.rawValue:
            guard let start = word(0), let end = word(2), let type = try? BluetoothUUID(littleEndian: bytes.dropFirst(4)) else {
                return nil
            }
            if type == GATTType.include || type == GATTType.characteristic { return nil }
            return start == 0x0001 && end == 0xFFFF ? nil : start
        default:
            return nil
        }
    }

    // MARK: Security (Vol 3, Part C, 10.3; Vol 3, Part F, 4.4)

    /// The ATT error for an attribute that requires encryption (with an authenticated key,
    /// `authentication`) on this link, or nil when the link is protected enough: which error
    /// tells the client what to do. Unencrypted, a client with a key for this side only needs
    /// to encrypt (Insufficient Encryption); one without, to pair (Insufficient Authentication).
    func securityRefusal(for c: Characteristic?, authentication: Bool) -> ATTError? {
        let link = security.current
        let permissions = c?.permissions ?? []
        guard let shortfall = link.shortfall(authentication: authentication,
                                             secureConnections: permissions.contains(.secureConnectionsRequired),
                                             minimumKeySize: c?.minimumEncryptionKeySize ?? 7) else { return nil }
        switch shortfall {
        case .notEncrypted: return link.hasLongTermKey ? .insufficientEncryption : .insufficientAuthentication
        case .notAuthenticated, .notSecureConnections: return .insufficientAuthentication
        case .keyTooShort: return .encryptionKeySizeTooShort
        }
    }

    // MARK: Signed writes (Vol 3, Part C, 10.4.2)

    /// What becomes of a Signed Write Command's signature on an unencrypted link.
    enum SignatureCheck {
        /// Verified: `counter` is the client's last SignCounter from now on.
        case accepted(counter: UInt32)
        case dropped(SignedWriteDrop)
    }

    /// Verifies a Signed Write Command (`pdu`, whose last 12 octets are `signature`) with the
    /// client's CSRK, and takes its SignCounter when it is larger than the last one accepted.
    func verifySignedWrite(_ pdu: ArraySlice<UInt8>, signature: ArraySlice<UInt8>) -> SignatureCheck {
        guard var state = signing else { return .dropped(.noKey) }
        let counter = ATTSignature.counter(of: signature) ?? 0
        if let last = state.lastCounter, counter <= last { return .dropped(.replayed(counter: counter, last: last)) }
        let message = pdu.prefix(pdu.count - ATTSignature.length)
        guard signatureKey?.verify(message, signature: signature) == true else { return .dropped(.badSignature) }
        // Verified: this counter is spent whatever the device says of the value.
        state.lastCounter = counter
        signing = state
        return .accepted(counter: counter)
    }

    // MARK: The end

    /// The connection is gone: returns the CCCDs the client held, set ones, by handle.
    func close() -> [(handle: UInt16, configuration: UInt16)] {
        guard !isClosed else { return [] }
        isClosed = true
        let held = clientConfigurations.filter { $0.value != 0 }.sorted { $0.key < $1.key }
        clientConfigurations.removeAll()
        return held.map { ($0.key, $0.value) }
    }
}
