import BlemuCore
import BlemuCrypto
import BlemuSMP
import FoundationEssentials
import Logging
#if canImport(Glibc)
import Glibc
#endif

/// Whose bonds a store holds: a file names its device, so a file copied from another device (or
/// left over after `--address` changed) is recognised as foreign rather than trusted.
public struct BondOwner: Equatable, Sendable {
    /// The device kind (`lock`, `heart-rate`, ...).
    public var device: String
    /// The local name.
    public var name: String
    /// The device's address, which centrals bonded with.
    public var address: BluetoothAddress

    public init(device: String, name: String, address: BluetoothAddress) {
        self.device = device
        self.name = name
        self.address = address
    }

    /// The store's file name in the state directory: `bonds-DEVICE-NAME.json`, the name cut to
    /// letters, digits, `.`, `_` and `-` (anything else becomes `_`).
    public var fileName: String {
        let safe = String((device + "-" + name).unicodeScalars.map { scalar -> Character in
            let allowed = scalar.isASCII && (scalar.properties.isAlphabetic || ("0"..."9").contains(Character(scalar))
                                             || scalar == "." || scalar == "_" || scalar == "-")
            return allowed ? Character(scalar) : "_"
        }.prefix(120))
        return "bonds-\(safe).json"
    }

    /// The device's identity file (IRK) in the state directory: `identity-DEVICE-NAME.json`.
    public var identityFileName: String {
        "identity-" + fileName.dropFirst("bonds-".count)
    }
}

/// One device's bonds, in memory and (with a path) in a file that survives restarts.
///
/// The file is JSON, written whole on every change: to a temporary file in the same directory
/// (mode 0600), fsync'd, renamed over the old one, the directory fsync'd, so a crash leaves the
/// old file or the new one, never half of one. A file that cannot be read, does not parse, or
/// belongs to another device is reported with its path, renamed aside (`PATH.damaged-N`) and
/// the store starts empty. At most `limit` bonds: a new one beyond it replaces the oldest.
///
/// A bond's attachment (what the layer above keeps with it, `BondAttachment`) is written into
/// the bond's entry beside the keys, in the fields `attachmentFormat` names.
public final class BondStore {
    public let path: String?
    public let owner: BondOwner
    public let limit: Int
    public let attachmentFormat: BondAttachmentFormat
    public private(set) var bonds: [Bond] = []
    private var nextSequence: UInt64 = 1
    private var logger: Logger
    /// A change not yet in the file (`setClientConfigurations(write: false)`).
    private var unwritten = false

    /// The file format's name and version, first in every file.
    static let format = "blemu-bonds"
    static let version = 1
    /// A bond file larger than this is not a bond file.
    static let maximumFileSize = 1 << 20

    public init(path: String?, owner: BondOwner, limit: Int = 16, attachmentFormat: BondAttachmentFormat, logger: Logger) {
        precondition(limit >= 1, "a bond store holds at least one bond")
        self.path = path
        self.owner = owner
        self.limit = limit
        self.attachmentFormat = attachmentFormat
        self.logger = logger
        load()
    }

    /// The bond a link from `address` belongs to, if any.
    public func bond(for address: LEAddress) -> Bond? {
        bonds.last { $0.matches(address) } ?? bonds.last { $0.resolves(address) }
    }

    /// Keeps `bond` (replacing any bond of the same central), drops the oldest beyond the
    /// limit, and writes the file. Returns the bonds dropped to make room.
    @discardableResult
    public func save(_ bond: Bond) -> [Bond] {
        var bond = bond
        bond.sequence = nextSequence
        nextSequence += 1
        bonds.removeAll { $0.matches(bond.peer) || (bond.identity.map($0.matches) ?? false) }
        bonds.append(bond)
        var dropped: [Bond] = []
        while bonds.count > limit {
            let oldest = bonds.indices.min { bonds[$0].sequence < bonds[$1].sequence } ?? 0
            dropped.append(bonds.remove(at: oldest))
        }
        write()
        return dropped
    }

    /// Sets the attachment of the bond of `address` (nothing without a bond); with `write: false`
    /// the file waits for `flush()`. Returns whether anything changed.
    @discardableResult
    public func setAttachment(_ attachment: BondAttachment, for address: LEAddress, write: Bool = true) -> Bool {
        guard let index = bonds.lastIndex(where: { $0.matches(address) || $0.resolves(address) }),
              bonds[index].attachment != attachment else { return false }
        bonds[index].attachment = attachment
        unwritten = true
        if write { flush() }
        return true
    }

    /// Writes the file if a change waits for it.
    public func flush() {
        guard unwritten else { return }
        self.write()
    }

    /// Forgets the bond of `address`.
    public func remove(_ address: LEAddress) {
        let before = bonds.count
        bonds.removeAll { $0.matches(address) }
        if bonds.count != before { write() }
    }

    /// Forgets every bond a link from `address` would belong to (`bond(for:)`: the address it
    /// bonded from, its identity, or an address its IRK resolves), and writes the file once.
    /// Returns the bonds forgotten.
    @discardableResult
    public func forget(bondOf address: LEAddress) -> [Bond] {
        let forgotten = bonds.filter { $0.matches(address) || $0.resolves(address) }
        guard !forgotten.isEmpty else { return [] }
        bonds.removeAll { $0.matches(address) || $0.resolves(address) }
        write()
        return forgotten
    }

    /// Forgets the bonds of the central at `address` (the address it bonded from, or its
    /// identity address, of either type), or every bond (nil), and writes the file once.
    /// Returns the bonds forgotten, oldest first.
    @discardableResult
    public func forget(_ address: BluetoothAddress?) -> [Bond] {
        let forgotten = bonds.filter { bond in address.map(bond.isOf) ?? true }
        guard !forgotten.isEmpty else { return [] }
        bonds.removeAll { bond in forgotten.contains { $0.peer == bond.peer && $0.sequence == bond.sequence } }
        write()
        return forgotten
    }

    // MARK: The file

    struct File: Codable {
        var format: String
        var version: Int
        var device: String
        var name: String
        var address: String
        var bonds: [Entry]
    }

    /// One bond in the file; keys and Rand in hex, least significant octet first as on the air.
    struct Entry: Codable {
        var peer: String
        var peerRandom: Bool
        var identity: String?
        var identityRandom: Bool?
        var irk: String?
        var ltk: String
        var ediv: Int
        var rand: String
        var keySize: Int
        var secureConnections: Bool
        var authenticated: Bool
        var sequence: UInt64
        var csrk: String?
        /// The attachment's fields (`BondAttachmentFormat.fields`), beside the keys in the same object.
        var attachment: BondAttachment
    }

    func load() {
        guard let path else { return }
        let bytes: [UInt8]
        switch Self.readFile(path) {
        case .missing:
            return
        case .failed(let reason):
            // Unreadable (permissions, a directory): reported, left where it is, started without it.
            logger.error("bond store \(path) cannot be read (\(reason)); starting without its bonds")
            return
        case .read(let data):
            bytes = data
        }
        do {
            let (fileOwner, loaded) = try Self.parse(bytes, attachmentFormat: attachmentFormat)
            guard fileOwner.device == owner.device, fileOwner.address == owner.address else {
                throw BondFileError("it belongs to \(fileOwner.device) \(fileOwner.address), not \(owner.device) \(owner.address)")
            }
            bonds = Array(loaded.suffix(limit))
            nextSequence = (bonds.map(\.sequence).max() ?? 0) + 1
            logger.info("bond store \(path): \(bonds.count) bond(s)")
        } catch {
            let aside = RegularFile.moveAside(path)
            logger.error("bond store \(path) is damaged or foreign (\(error)); \(aside.map { "moved to \($0)" } ?? "could not be moved aside"), starting without its bonds")
        }
    }

    /// A bond file's owner and bonds, oldest first; what is wrong with it otherwise.
    static func parse(_ bytes: [UInt8], attachmentFormat: BondAttachmentFormat) throws -> (BondOwner, [Bond]) {
        let decoder = JSONDecoder()
        decoder.userInfo[Entry.attachmentFields] = attachmentFormat.fields
        let file = try decoder.decode(File.self, from: Data(bytes))
        guard file.format == Self.format, file.version == Self.version else {
            throw BondFileError("format \(file.format) version \(file.version), expected \(Self.format) version \(Self.version)")
        }
        guard let address = BluetoothAddress(file.address) else { throw BondFileError("device address \(file.address)") }
        var loaded: [Bond] = []
        for (index, entry) in file.bonds.enumerated() {
            guard var bond = Self.bond(from: entry), let attachment = attachmentFormat.canonical(bond.attachment) else {
                throw BondFileError("bond \(index) is malformed")
            }
            bond.attachment = attachment
            loaded.append(bond)
        }
        loaded.sort { $0.sequence < $1.sequence }
        return (BondOwner(device: file.device, name: file.name, address: address), loaded)
    }

    /// What a bond file holds, read without changing anything (`blemu bonds list`).
    public enum Inspection {
        case missing
        case unreadable(String)
        case damaged(String)
        case bonds(BondOwner, [Bond])
    }

    public static func inspect(path: String, attachmentFormat: BondAttachmentFormat) -> Inspection {
        switch readFile(path) {
        case .missing: return .missing
        case .failed(let reason): return .unreadable(reason)
        case .read(let bytes):
            do {
                let (owner, bonds) = try parse(bytes, attachmentFormat: attachmentFormat)
                return .bonds(owner, bonds)
            } catch {
                return .damaged("\(error)")
            }
        }
    }

    private func write() {
        unwritten = false
        guard let path else { return }
        let file = File(format: Self.format, version: Self.version, device: owner.device, name: owner.name,
                        address: owner.address.description, bonds: bonds.map(Self.entry(from:)))
        let data: Data
        do {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            data = try encoder.encode(file)
        } catch {
            logger.error("bond store \(path): cannot encode the bonds (\(error)); they are kept until blemu stops")
            return
        }
        if let failure = Self.writeAtomically(Array(data), to: path) {
            logger.error("bond store \(path) not written: \(failure); the bonds are kept until blemu stops")
        }
    }

    // MARK: Conversions

    static func entry(from bond: Bond) -> Entry {
        Entry(peer: bond.peer.address.description, peerRandom: bond.peer.isRandom,
              identity: bond.identity?.address.description, identityRandom: bond.identity?.isRandom,
              irk: bond.identityResolvingKey.map { Hex.bytes($0) }, ltk: Hex.bytes(bond.longTermKey.key),
              ediv: Int(bond.longTermKey.encryptedDiversifier), rand: String(bond.longTermKey.randomNumber, radix: 16),
              keySize: Int(bond.encryptionKeySize), secureConnections: bond.secureConnections,
              authenticated: bond.authenticated, sequence: bond.sequence,
              csrk: bond.signatureKey.map { Hex.bytes($0) }, attachment: bond.attachment)
    }

    /// Every value checked: a hand-edited or damaged entry is refused, never trusted.
    static func bond(from entry: Entry) -> Bond? {
        guard let peer = BluetoothAddress(entry.peer),
              let ltk = Hex.parse(entry.ltk), ltk.count == 16,
              let ediv = UInt16(exactly: entry.ediv), let rand = UInt64(entry.rand, radix: 16),
              let keySize = UInt8(exactly: entry.keySize), (7...16).contains(keySize) else { return nil }
        var identity: LEAddress?
        if let text = entry.identity {
            guard let address = BluetoothAddress(text) else { return nil }
            identity = LEAddress(address, isRandom: entry.identityRandom ?? true)
        }
        var irk: [UInt8]?
        if let text = entry.irk {
            guard let key = Hex.parse(text), key.count == 16 else { return nil }
            irk = key
        }
        var csrk: [UInt8]?
        if let text = entry.csrk {
            guard let key = Hex.parse(text), key.count == 16 else { return nil }
            csrk = key
        }
        return Bond(peer: LEAddress(peer, isRandom: entry.peerRandom), identity: identity, identityResolvingKey: irk,
                    longTermKey: SMPLongTermKey(key: ltk, encryptedDiversifier: ediv, randomNumber: rand),
                    encryptionKeySize: keySize, secureConnections: entry.secureConnections,
                    authenticated: entry.authenticated, sequence: entry.sequence, signatureKey: csrk,
                    attachment: entry.attachment)
    }
    // MARK: Files, with the C library

    enum ReadResult {
        case missing
        case failed(String)
        case read([UInt8])
    }

    /// Reads a file of the state directory: never through a symbolic link, never blocking (a
    /// FIFO or device node planted at the path is refused, not waited on: RegularFile).
    static func readFile(_ path: String) -> ReadResult {
        switch RegularFile.read(path, maximumBytes: maximumFileSize, followSymlinks: false) {
        case .success(let bytes): return .read(bytes)
        case .failure(let error) where error.kind == .missing: return .missing
        case .failure(let error) where error.kind == .tooLarge: return .read([])  // too big: damaged
        case .failure(let error): return .failed(error.description)
        }
    }

    /// Writes `bytes` to `path` so that a crash leaves the old file or the new one
    /// (`RegularFile.writeAtomically`, 0600). Returns what failed, or nil.
    static func writeAtomically(_ bytes: [UInt8], to path: String) -> String? {
        RegularFile.writeAtomically(bytes, to: path)
    }
}

/// An entry's keys by name, and the attachment's fields beside them in the same JSON object.
extension BondStore.Entry {
    /// The decoder's `userInfo` key for the attachment's field names (`[String]`).
    static let attachmentFields = CodingUserInfoKey(rawValue: "blemu.bond.attachmentFields")!

    struct Key: CodingKey {
        let stringValue: String
        var intValue: Int? { nil }
        init(_ name: String) { stringValue = name }
        init?(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }

    static let keyFields = ["peer", "peerRandom", "identity", "identityRandom", "irk", "ltk", "ediv", "rand", "keySize",
                            "secureConnections", "authenticated", "sequence", "csrk"]

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: Key.self)
        peer = try container.decode(String.self, forKey: Key("peer"))
        peerRandom = try container.decode(Bool.self, forKey: Key("peerRandom"))
        identity = try container.decodeIfPresent(String.self, forKey: Key("identity"))
        identityRandom = try container.decodeIfPresent(Bool.self, forKey: Key("identityRandom"))
        irk = try container.decodeIfPresent(String.self, forKey: Key("irk"))
        ltk = try container.decode(String.self, forKey: Key("ltk"))
        ediv = try container.decode(Int.self, forKey: Key("ediv"))
        rand = try container.decode(String.self, forKey: Key("rand"))
        keySize = try container.decode(Int.self, forKey: Key("keySize"))
        secureConnections = try container.decode(Bool.self, forKey: Key("secureConnections"))
        authenticated = try container.decode(Bool.self, forKey: Key("authenticated"))
        sequence = try container.decode(UInt64.self, forKey: Key("sequence"))
        csrk = try container.decodeIfPresent(String.self, forKey: Key("csrk"))
        // Only the fields the attachment's owner named (a field of Security's is never one);
        // other fields are ignored, as they always were.
        let names = decoder.userInfo[Self.attachmentFields] as? [String] ?? []
        var attachment = BondAttachment()
        for name in names where !Self.keyFields.contains(name) {
            let key = Key(name)
            guard container.contains(key), try !container.decodeNil(forKey: key) else { continue }
            attachment[name] = try Self.decodeValue(container, key)
        }
        self.attachment = attachment
    }

    /// A JSON value of one of the kinds an attachment holds; anything else is a malformed entry.
    private static func decodeValue(_ container: KeyedDecodingContainer<Key>, _ key: Key) throws -> BondAttachment.Value {
        if let value = try? container.decode(Bool.self, forKey: key) { return .flag(value) }
        if let value = try? container.decode(Int64.self, forKey: key) { return .integer(value) }
        if let value = try? container.decode(String.self, forKey: key) { return .text(value) }
        return .table(try container.decode([String: Int64].self, forKey: key))
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: Key.self)
        try container.encode(peer, forKey: Key("peer"))
        try container.encode(peerRandom, forKey: Key("peerRandom"))
        try container.encodeIfPresent(identity, forKey: Key("identity"))
        try container.encodeIfPresent(identityRandom, forKey: Key("identityRandom"))
        try container.encodeIfPresent(irk, forKey: Key("irk"))
        try container.encode(ltk, forKey: Key("ltk"))
        try container.encode(ediv, forKey: Key("ediv"))
        try container.encode(rand, forKey: Key("rand"))
        try container.encode(keySize, forKey: Key("keySize"))
        try container.encode(secureConnections, forKey: Key("secureConnections"))
        try container.encode(authenticated, forKey: Key("authenticated"))
        try container.encode(sequence, forKey: Key("sequence"))
        try container.encodeIfPresent(csrk, forKey: Key("csrk"))
        for (name, value) in attachment.values where !Self.keyFields.contains(name) {
            switch value {
            case .flag(let flag): try container.encode(flag, forKey: Key(name))
            case .integer(let integer): try container.encode(integer, forKey: Key(name))
            case .text(let text): try container.encode(text, forKey: Key(name))
            case .table(let table): try container.encode(table, forKey: Key(name))
            }
        }
    }
}

struct BondFileError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
