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
public final class BondStore {
    public let path: String?
    public let owner: BondOwner
    public let limit: Int
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

    public init(path: String?, owner: BondOwner, limit: Int = 16, logger: Logger) {
        precondition(limit >= 1, "a bond store holds at least one bond")
        self.path = path
        self.owner = owner
        self.limit = limit
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

    /// Updates the CCCD values kept with the bond of `address` (nothing without a bond); with
    /// `write: false` the file waits for `flush()`. Returns whether anything changed.
    @discardableResult
    public func setClientConfigurations(_ values: [UInt16: UInt16], for address: LEAddress, write: Bool = true) -> Bool {
        guard let index = bonds.lastIndex(where: { $0.matches(address) || $0.resolves(address) }),
              bonds[index].clientConfigurations != values else { return false }
        bonds[index].clientConfigurations = values
        unwritten = true
        if write { flush() }
        return true
    }

    /// The Database Hash a bonded central knows now (its link closes, or it was told of a change).
    @discardableResult
    public func setDatabaseHash(_ hash: [UInt8], for address: LEAddress) -> Bool {
        guard let index = bonds.lastIndex(where: { $0.matches(address) || $0.resolves(address) }),
              bonds[index].databaseHash != hash else { return false }
        bonds[index].databaseHash = hash
        write()
        return true
    }

    /// The SignCounter of a signed write just accepted from `address` (Vol 3, Part C, 10.4.2);
    /// the file waits for `flush()` (a write per command would be an fsync per command).
    @discardableResult
    public func setSignCounter(_ counter: UInt32, for address: LEAddress) -> Bool {
        guard let index = bonds.lastIndex(where: { $0.matches(address) || $0.resolves(address) }) else { return false }
        bonds[index].signCounter = counter
        unwritten = true
        return true
    }

    /// A bonded client's Client Supported Features and change-awareness (Vol 3, Part G, 2.5.2.1, 7.2).
    @discardableResult
    public func setCachingState(features: UInt8, changeAware: Bool, for address: LEAddress) -> Bool {
        guard let index = bonds.lastIndex(where: { $0.matches(address) || $0.resolves(address) }),
              bonds[index].clientSupportedFeatures != features || bonds[index].changeAware != changeAware else { return false }
        bonds[index].clientSupportedFeatures = features
        bonds[index].changeAware = changeAware
        write()
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
        var cccds: [String: Int]?
        var databaseHash: String?
        var csrk: String?
        var signCounter: UInt32?
        var clientFeatures: Int?
        var changeAware: Bool?
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
            let (fileOwner, loaded) = try Self.parse(bytes)
            guard fileOwner.device == owner.device, fileOwner.address == owner.address else {
                throw BondFileError("it belongs to \(fileOwner.device) \(fileOwner.address), not \(owner.device) \(owner.address)")
            }
            bonds = Array(loaded.suffix(limit))
            nextSequence = (bonds.map(\.sequence).max() ?? 0) + 1
            logger.info("bond store \(path): \(bonds.count) bond(s)")
        } catch {
            let aside = moveAside(path)
            logger.error("bond store \(path) is damaged or foreign (\(error)); \(aside.map { "moved to \($0)" } ?? "could not be moved aside"), starting without its bonds")
        }
    }

    /// A bond file's owner and bonds, oldest first; what is wrong with it otherwise.
    static func parse(_ bytes: [UInt8]) throws -> (BondOwner, [Bond]) {
        let file = try JSONDecoder().decode(File.self, from: Data(bytes))
        guard file.format == Self.format, file.version == Self.version else {
            throw BondFileError("format \(file.format) version \(file.version), expected \(Self.format) version \(Self.version)")
        }
        guard let address = BluetoothAddress(file.address) else { throw BondFileError("device address \(file.address)") }
        var loaded: [Bond] = []
        for (index, entry) in file.bonds.enumerated() {
            guard let bond = Self.bond(from: entry) else { throw BondFileError("bond \(index) is malformed") }
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

    public static func inspect(path: String) -> Inspection {
        switch readFile(path) {
        case .missing: return .missing
        case .failed(let reason): return .unreadable(reason)
        case .read(let bytes):
            do {
                let (owner, bonds) = try parse(bytes)
                return .bonds(owner, bonds)
            } catch {
                return .damaged("\(error)")
            }
        }
    }

    private func moveAside(_ path: String) -> String? {
        for attempt in 1...1000 {
            let aside = "\(path).damaged-\(attempt)"
            var status = stat()
            if lstat(aside, &status) == 0 { continue }
            return rename(path, aside) == 0 ? aside : nil
        }
        return nil
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
              cccds: bond.clientConfigurations.isEmpty ? nil
                  : Dictionary(uniqueKeysWithValues: bond.clientConfigurations.map { (String($0.key), Int($0.value)) }),
              databaseHash: bond.databaseHash.map { Hex.bytes($0) },
              csrk: bond.signatureKey.map { Hex.bytes($0) }, signCounter: bond.signCounter,
              clientFeatures: bond.clientSupportedFeatures == 0 ? nil : Int(bond.clientSupportedFeatures),
              changeAware: bond.changeAware ? nil : false)
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
        var databaseHash: [UInt8]?
        if let text = entry.databaseHash {
            guard let hash = Hex.parse(text), hash.count == 16 else { return nil }
            databaseHash = hash
        }
        var csrk: [UInt8]?
        if let text = entry.csrk {
            guard let key = Hex.parse(text), key.count == 16 else { return nil }
            csrk = key
        }
        var features: UInt8 = 0
        if let value = entry.clientFeatures {
            guard let octet = UInt8(exactly: value) else { return nil }
            features = octet
        }
        var cccds: [UInt16: UInt16] = [:]
        for (handle, value) in entry.cccds ?? [:] {
            guard let handle = UInt16(handle), let value = UInt16(exactly: value) else { return nil }
            cccds[handle] = value
        }
        return Bond(peer: LEAddress(peer, isRandom: entry.peerRandom), identity: identity, identityResolvingKey: irk,
                    longTermKey: SMPLongTermKey(key: ltk, encryptedDiversifier: ediv, randomNumber: rand),
                    encryptionKeySize: keySize, secureConnections: entry.secureConnections,
                    authenticated: entry.authenticated, sequence: entry.sequence, clientConfigurations: cccds,
                    databaseHash: databaseHash, signatureKey: csrk, signCounter: entry.signCounter,
                    clientSupportedFeatures: features, changeAware: entry.changeAware ?? true)
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

    /// Writes `bytes` to `path` so that a crash leaves the old file or the new one: a temporary
    /// file beside it (0600), fsync, rename, fsync of the directory. Creates the directory (0700)
    /// when missing. Returns what failed, or nil.
    static func writeAtomically(_ bytes: [UInt8], to path: String) -> String? {
        let directory = path.lastIndex(of: "/").map { String(path[..<$0]) } ?? "."
        if let failure = makeDirectories(directory.isEmpty ? "/" : directory) { return failure }
        let temporary = "\(path).tmp-\(getpid())"
        let fd: Int32
        switch RegularFile.open(temporary, flags: O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, mode: 0o600) {
        case .success(let opened): fd = opened
        case .failure(let error): return "cannot create \(temporary): \(error)"
        }
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + offset, bytes.count - offset) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else {
                let reason = String(cString: strerror(errno))
                close(fd)
                unlink(temporary)
                return "cannot write \(temporary): \(reason)"
            }
            offset += n
        }
        // A file created earlier with a wider mode is narrowed too.
        _ = fchmod(fd, 0o600)
        guard fsync(fd) == 0 else {
            let reason = String(cString: strerror(errno))
            close(fd)
            unlink(temporary)
            return "cannot fsync \(temporary): \(reason)"
        }
        close(fd)
        guard rename(temporary, path) == 0 else {
            let reason = String(cString: strerror(errno))
            unlink(temporary)
            return "cannot rename \(temporary) to \(path): \(reason)"
        }
        let directoryFD = open(directory.isEmpty ? "/" : directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if directoryFD >= 0 {
            _ = fsync(directoryFD)
            close(directoryFD)
        }
        return nil
    }

    /// `mkdir -p` with mode 0700 for what it creates.
    static func makeDirectories(_ path: String) -> String? {
        var status = stat()
        if stat(path, &status) == 0 {
            return status.st_mode & S_IFMT == S_IFDIR ? nil : "\(path) is not a directory"
        }
        if let slash = path.lastIndex(of: "/"), slash != path.startIndex {
            if let failure = makeDirectories(String(path[..<slash])) { return failure }
        }
        if mkdir(path, 0o700) != 0 && errno != EEXIST {
            return "cannot create the directory \(path): \(String(cString: strerror(errno)))"
        }
        return nil
    }
}

struct BondFileError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
