import Logging

/// Metadata keys every layer logs with. The journal backend maps each to the journal field of
/// Docs/REFERENCE.md ("Logs") by prefixing `BLEMU_` and upper-casing (`conn_handle` -> `BLEMU_CONN_HANDLE`).
public enum LogKey {
    public static let event = "event"
    public static let device = "device"
    public static let controller = "controller"
    /// The local name, which tells two copies of one device apart.
    public static let name = "name"
    public static let peer = "peer"
    public static let connHandle = "conn_handle"
    public static let attOpcode = "att_opcode"
    public static let attHandle = "att_handle"
    public static let attError = "att_error"
    public static let hciStatus = "hci_status"
    /// Why a link closed (the HCI reason of Disconnection Complete), or why pairing failed (the
    /// SMP reason), hex `0x..`.
    public static let reason = "reason"
    public static let snoopFrame = "snoop_frame"
}

/// The values of `BLEMU_EVENT` (Docs/REFERENCE.md, "Events").
public enum BlemuEvent: String, Sendable, CaseIterable {
    case started, controllerUp = "controller-up", controllerLost = "controller-lost"
    case advertisingStarted = "advertising-started", advertisingStopped = "advertising-stopped"
    case connected, disconnected, mtuChanged = "mtu-changed", subscribed, unsubscribed
    case attError = "att-error", write, stateChanged = "state-changed", faultInjected = "fault-injected"
    case controlCommand = "control-command", stopping
    case paired, pairingFailed = "pairing-failed", encryptionChanged = "encryption-changed", keyMissing = "key-missing"
    case addressChanged = "address-changed"
}

extension Logger.Metadata {
    public static func event(_ event: BlemuEvent) -> Logger.Metadata { [LogKey.event: .string(event.rawValue)] }
}

extension Logger {
    /// Logs with the `event` key set, so field engineers can filter on `BLEMU_EVENT`.
    public func event(_ event: BlemuEvent, _ level: Logger.Level = .info, _ message: @autoclosure () -> Logger.Message,
                      _ metadata: @autoclosure () -> Logger.Metadata = [:],
                      file: String = #fileID, function: String = #function, line: UInt = #line) {
        // Nothing is built for a level that is off: events sit on the request path.
        guard logLevel <= level else { return }
        var all = metadata()
        all[LogKey.event] = .string(event.rawValue)
        log(level: level, message(), metadata: all, source: nil, file: file, function: function, line: line)
    }
}

/// A readable one-line-per-entry handler for stderr; what a peer controls in it is shown
/// with `VisibleText`.
public struct StderrLogHandler: LogHandler {
    public var metadata: Logger.Metadata = [:]
    public var logLevel: Logger.Level = .info
    private let label: String

    public init(label: String) { self.label = label }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: Logging.LogEvent) {
        writeStderr(line(for: event))
    }

    /// The line written for `event`, its newline included.
    public func line(for event: Logging.LogEvent) -> String {
        var merged = metadata
        if let explicit = event.metadata { merged.merge(explicit) { _, new in new } }
        // While a --btsnoop capture is written: the frame this entry follows.
        if let frame = CaptureCursor.lastFrame { merged[LogKey.snoopFrame] = .string(String(frame)) }
        // Messages and values may carry a peer's text (names, chat lines): made visible, one entry one line.
        let fields = merged.sorted { $0.key < $1.key }.map { "\($0.key)=\(VisibleText.make($0.value.description))" }.joined(separator: " ")
        return "\(event.level.rawValue.uppercased()) \(VisibleText.make(event.message.description))" + (fields.isEmpty ? "" : "  [\(fields)]") + "\n"
    }
}

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

func writeStderr(_ text: String) {
    var text = text
    text.withUTF8 { buffer in
        var offset = 0
        while offset < buffer.count {
            let n = write(2, buffer.baseAddress! + offset, buffer.count - offset)
            if n <= 0 { break }
            offset += n
        }
    }
}

/// Where the `--btsnoop` capture stands, for log handlers: each entry logged while a capture is
/// written carries `snoop_frame` (journal field BLEMU_SNOOP_FRAME), the number of the last frame
/// written, so a log line points into the capture. Only the run loop's thread touches it.
public enum CaptureCursor {
    /// The number (1-based, counted across rotated files) of the last frame written, or nil
    /// when no capture is being written.
    nonisolated(unsafe) public static var lastFrame: UInt64?
}
