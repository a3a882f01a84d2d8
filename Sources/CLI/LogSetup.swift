import ArgumentParser
import BlemuCore
import Logging

enum LogDestination: String, ExpressibleByArgument, CaseIterable {
    case auto, journal, stderr

    /// Whether this build writes to the systemd journal. Until it does, `journal` is left out
    /// of --help, shell completion and the list of values a mistyped --log is told; typing it
    /// still gets the reason (`bootstrap`).
    static let journalInBuild = false

    /// The destinations this build offers.
    static var offered: [LogDestination] { allCases.filter { $0 != .journal || journalInBuild } }
    static var allValueStrings: [String] { offered.map(\.rawValue) }
    static var defaultCompletionKind: CompletionKind { .list(allValueStrings) }

    /// For --help: "auto or stderr".
    static var offeredList: String {
        let names = allValueStrings
        return names.count < 2 ? names.joined() : names.dropLast().joined(separator: ", ") + " or " + names.last!
    }
}

extension Logger.Level: @retroactive ExpressibleByArgument {}

enum LogSetup {
    static let journalMissing = "--log journal: the journal backend is not part of this build yet; use --log stderr (or auto)"

    /// Installs the log handler once for the process.
    static func bootstrap(destination: LogDestination, level: Logger.Level) throws {
        switch destination {
        case .journal:
            throw ValidationError(journalMissing)
        case .auto, .stderr:
            LoggingSystem.bootstrap { label in
                var handler = StderrLogHandler(label: label)
                handler.logLevel = level
                return handler
            }
        }
    }
}
