import ArgumentParser
import BlemuCore
import BlemuHost
import BlemuSecurity

/// The state directory: --state-dir, else $STATE_DIRECTORY's first entry, else ~/.local/state/blemu.
func stateDirectoryPath(_ given: String?) -> String? { StateDirectory.path(given: given) }

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

        func bondDirectory() throws -> BondDirectory {
            BondDirectory(path: try directory(), attachmentFormat: BondedClientState.format)
        }
    }

    /// The CLI's words for what the bond directory could not do.
    static func failure(_ failure: BondDirectory.Failure) -> RuntimeFailure {
        switch failure.stage {
        case .listing: RuntimeFailure("\(failure): check --state-dir")
        case .writing: RuntimeFailure("\(failure): check the directory's permissions")
        }
    }

    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Each device's bonds, oldest first: the central and how strong the bond is.")
        @OptionGroup var location: Location

        func run() throws {
            let contents: [(path: String, contents: BondStore.Inspection)]
            do { contents = try location.bondDirectory().contents() } catch let failure as BondDirectory.Failure { throw BondsCommand.failure(failure) }
            if contents.isEmpty { print("no bonds in \(try location.directory())") }
            for (path, inspection) in contents {
                switch inspection {
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
            let forgotten: Int
            do {
                forgotten = try location.bondDirectory().forget(address.flatMap(BluetoothAddress.init)) { owner, count in
                    print("\(owner.device.visible) \"\(owner.name.visible)\": forgot \(count) bond(s)")
                }
            } catch let failure as BondDirectory.Failure {
                throw BondsCommand.failure(failure)
            }
            if forgotten == 0 { print(address.map { "no bond with \($0)" } ?? "no bonds") }
        }
    }
}
