import BlemuCore
import Logging
#if canImport(Glibc)
import Glibc
#endif

/// A state directory's bond files, one per device (`BondOwner.fileName`, Docs/SECURITY.md): what
/// `blemu bonds list` and `forget` read and change, for any front end. Keys never leave the
/// `Bond`s; the files are written only by `BondStore` (atomically, in its one format).
public struct BondDirectory {
    public let path: String
    /// The layout of what the layer above keeps with each bond (Host's `BondedClientState.format`).
    public let attachmentFormat: BondAttachmentFormat

    public init(path: String, attachmentFormat: BondAttachmentFormat) {
        self.path = path
        self.attachmentFormat = attachmentFormat
    }

    /// Why the directory could not be listed, or a file in it written back.
    public struct Failure: Error, CustomStringConvertible, Equatable {
        public enum Stage: Sendable { case listing, writing }
        public let stage: Stage
        /// The directory (listing) or the file (writing).
        public let path: String
        public let reason: String
        public var description: String { "\(path): \(reason)" }

        public init(stage: Stage, path: String, reason: String) {
            self.stage = stage
            self.path = path
            self.reason = reason
        }
    }

    /// The bond files in the directory, sorted by name; none when the directory does not exist.
    public func files() throws(Failure) -> [String] {
        guard let directory = opendir(path) else {
            if errno == ENOENT { return [] }
            throw Failure(stage: .listing, path: path, reason: String(cString: strerror(errno)))
        }
        defer { closedir(directory) }
        var names: [String] = []
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            if name.hasPrefix("bonds-") && name.hasSuffix(".json") { names.append(name) }
        }
        return names.sorted().map { path + "/" + $0 }
    }

    /// Each bond file and what it holds, read without changing anything (a file gone meanwhile is left out).
    public func contents() throws(Failure) -> [(path: String, contents: BondStore.Inspection)] {
        try files().compactMap { file in
            let inspection = BondStore.inspect(path: file, attachmentFormat: attachmentFormat)
            if case .missing = inspection { return nil }
            return (file, inspection)
        }
    }

    /// Forgets the bonds of `address` (the address a central bonded from, or its identity; nil:
    /// every bond) in every bond file, rewriting each file that had one; the bonded clients' GATT
    /// state stays with the bonds that stay. `forgot` hears each device's owner and count as its
    /// file is written. Returns how many were forgotten in all; throws, after the files before
    /// it, when a file could not be written back.
    @discardableResult
    public func forget(_ address: BluetoothAddress?, forgot: (BondOwner, Int) -> Void = { _, _ in }) throws(Failure) -> Int {
        var forgotten = 0
        for file in try files() {
            guard case let .bonds(owner, bonds) = BondStore.inspect(path: file, attachmentFormat: attachmentFormat) else { continue }
            // The store rewrites the file atomically (temporary file, fsync, rename).
            let store = BondStore(path: file, owner: owner, limit: max(bonds.count, 1), attachmentFormat: attachmentFormat,
                                  logger: Logger(label: "blemu.bonds", factory: { _ in SwiftLogNoOpLogHandler() }))
            let matching = store.forget(address)
            guard !matching.isEmpty else { continue }
            guard store.bonds.count == bonds.count - matching.count,
                  case let .bonds(_, left) = BondStore.inspect(path: file, attachmentFormat: attachmentFormat),
                  left.count == store.bonds.count else {
                throw Failure(stage: .writing, path: file, reason: "the bonds could not be written back")
            }
            forgotten += matching.count
            forgot(owner, matching.count)
        }
        return forgotten
    }
}
