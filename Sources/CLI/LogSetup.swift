import ArgumentParser
import BlemuCore
import Logging

enum LogDestination: String, ExpressibleByArgument, CaseIterable {
    case auto, journal, stderr
}

extension Logger.Level: @retroactive ExpressibleByArgument {}

enum LogSetup {
    /// Installs the log handler once for the process.
    static func bootstrap(destination: LogDestination, level: Logger.Level) throws {
        switch destination {
        case .journal:
            throw ValidationError("--log journal: the journal backend is not part of this build yet; use --log stderr (or auto)")
        case .auto, .stderr:
            LoggingSystem.bootstrap { label in
                var handler = StderrLogHandler(label: label)
                handler.logLevel = level
                return handler
            }
        }
    }
}
