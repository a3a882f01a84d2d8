import ArgumentParser
import BlemuCentral
import BlemuCore
import BlemuJournal
import Logging

enum LogDestination: String, ExpressibleByArgument, CaseIterable {
    case auto, journal, stderr

    /// For --help: "auto, journal or stderr".
    static var offeredList: String {
        let names = allValueStrings
        return names.dropLast().joined(separator: ", ") + " or " + names.last!
    }

    /// What `auto` becomes: the journal when systemd started blemu (its stderr is the journal
    /// stream, or it runs in a unit), readable stderr lines otherwise.
    static func resolvedAuto(environment: (String) -> String? = JournalDetection.processEnvironment,
                             stderr: JournalDetection.StreamIdentity? = JournalDetection.stderrIdentity()) -> LogDestination {
        JournalDetection.startedBySystemd(environment: environment, stderr: stderr) ? .journal : .stderr
    }
}

extension Logger.Level: @retroactive ExpressibleByArgument {}
/// `blemu gatt --eatt auto|off|require`.
extension EATTUse: ExpressibleByArgument {}

enum LogSetup {
    /// The journal writer, when logs go there: flushed at the end of a run, so counts the
    /// flood budget still holds are written.
    nonisolated(unsafe) private(set) static var journal: JournalSink?

    /// Installs the log handler once for the process.
    static func bootstrap(destination: LogDestination, level: Logger.Level) throws {
        switch destination == .auto ? LogDestination.resolvedAuto() : destination {
        case .journal:
            // An unreachable journal (no journald, or it goes away during the run) is said once
            // on stderr, which takes every entry from then on.
            let sink = JournalSink()
            let reachable = JournalSink.probeSystemJournal()
            if reachable < 0 { sink.fallBack(reachable) }
            journal = sink
            LoggingSystem.bootstrap { _ in JournalLogHandler(sink: sink, level: level) }
        case .auto, .stderr:
            LoggingSystem.bootstrap { label in
                var handler = StderrLogHandler(label: label)
                handler.logLevel = level
                return handler
            }
        }
    }

    /// Writes what the journal's flood budget still holds (the end of a run).
    static func finish() {
        journal?.flush()
    }
}
