import ArgumentParser
import BlemuCore
import BlemuHost
import BlemuSecurity
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// The state directory: --state-dir, else systemd's $STATE_DIRECTORY (its first entry: it may
/// list several, colon-separated), else ~/.local/state/blemu (XDG_STATE_HOME's default).
func stateDirectoryPath(_ given: String?) -> String? {
    if let given { return given }
    if let text = getenv("STATE_DIRECTORY").map({ String(cString: $0) }),
       let first = text.split(separator: ":").first, !first.isEmpty {
        return String(first)
    }
    if let home = getenv("HOME").map({ String(cString: $0) }), !home.isEmpty {
        return home + "/.local/state/blemu"
    }
    return nil
}

/// `blemu bonds list|forget [ADDRESS]`: the bonds `blemu run` keeps in its state directory, one
/// file per device (Docs/SECURITY.md). Keys are never printed.
struct BondsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bonds",
        abstract: "List or forget the bonds kept in the state directory (keys are never shown).",
        subcommands: [List.self, Forget.self])

    struct Location: ParsableArguments {
        @Option(name: .customLong("state-dir"),
                help: ArgumentHelp("The state directory (default: $STATE_DIRECTORY, else ~/.local/state/blemu).", valueName: "DIR"))
        var stateDirectory: String?

        func directory() throws -> String {
            guard let path = stateDirectoryPath(stateDirectory) else {
                throw ValidationError("no state directory: give --state-dir DIR (or set STATE_DIRECTORY or HOME)")
            }
            return path
        }

        /// The bond files in the directory, by name.
        func files() throws -> [String] {
            let path = try directory()
            guard let directory = opendir(path) else {
                if errno == ENOENT { return [] }
                throw RuntimeFailure("\(path): \(String(cString: strerror(errno))): check --state-dir")
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
    }

    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Each device's bonds, oldest first: the central and how strong the bond is.")
        @OptionGroup var location: Location

        func run() throws {
            let files = try location.files()
            if files.isEmpty { print("no bonds in \(try location.directory())") }
            for path in files {
                switch BondStore.inspect(path: path, attachmentFormat: BondedClientState.format) {
                case .missing: continue
                case .unreadable(let reason): print("\(path.visible): cannot be read (\(reason.visible))")
                case .damaged(let reason): print("\(path.visible): damaged or not a bond file (\(reason.visible)); blemu sets it aside when it starts")
                case let .bonds(owner, bonds):
                    print("\(owner.device.visible) \"\(owner.name.visible)\" (\(owner.address)): \(bonds.count) bond(s)")
                    for bond in bonds { print("  " + bond.summary) }
                }
            }
        }
    }

    struct Forget: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Forget the bonds of ADDRESS (the address a central bonded from, or its identity), or every bond.",
            discussion: "Stop the blemu that uses the state directory first (a running blemu keeps its bonds in memory and writes them back), or forget them in the running blemu: blemu ctl PATH bonds DEVICE forget [ADDRESS].")
        @OptionGroup var location: Location
        @Argument(help: ArgumentHelp("The central's address; none: every bond.", valueName: "ADDRESS"))
        var address: String?

        func validate() throws {
            if let address, BluetoothAddress(address) == nil {
                throw ValidationError("\(address) is not an address (AA:BB:CC:DD:EE:FF)")
            }
        }

        func run() throws {
            let target = address.flatMap(BluetoothAddress.init)
            var forgotten = 0
            for path in try location.files() {
                guard case let .bonds(owner, bonds) = BondStore.inspect(path: path, attachmentFormat: BondedClientState.format) else { continue }
                // The store rewrites the file atomically (temporary file, fsync, rename).
                // The bonded clients' GATT state is kept with the bonds that stay.
                let store = BondStore(path: path, owner: owner, limit: max(bonds.count, 1), attachmentFormat: BondedClientState.format,
                                      logger: Logger(label: "blemu.bonds", factory: { _ in SwiftLogNoOpLogHandler() }))
                let matching = store.forget(target)
                guard !matching.isEmpty else { continue }
                guard store.bonds.count == bonds.count - matching.count,
                      case let .bonds(_, left) = BondStore.inspect(path: path, attachmentFormat: BondedClientState.format), left.count == store.bonds.count else {
                    throw RuntimeFailure("\(path): the bonds could not be written back: check the directory's permissions")
                }
                forgotten += matching.count
                print("\(owner.device.visible) \"\(owner.name.visible)\": forgot \(matching.count) bond(s)")
            }
            if forgotten == 0 { print(address.map { "no bond with \($0)" } ?? "no bonds") }
        }
    }
}
