import Logging

/// The lines a logger wrote, for tests that count what a peer can make blemu say (the budgets
/// of Docs/REFERENCE.md) or check a line's level.
public final class CapturedLog: @unchecked Sendable {
    public private(set) var entries: [(level: Logger.Level, message: String)] = []

    public init() {}

    /// Each line as `LEVEL MESSAGE`.
    public var lines: [String] { entries.map { "\($0.level) \($0.message)" } }
    /// Each line's message alone.
    public var messages: [String] { entries.map(\.message) }

    /// Forgets the lines so far: what comes next is counted alone.
    public func removeAll() { entries.removeAll() }

    /// A logger at trace level whose every line lands here.
    public var logger: Logger { Logger(label: "captured", factory: { _ in Handler(log: self) }) }

    struct Handler: LogHandler {
        let log: CapturedLog
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace
        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }
        func log(event: LogEvent) { log.entries.append((event.level, "\(event.message)")) }
    }
}
