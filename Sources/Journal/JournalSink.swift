import BlemuCore
import CSystemd
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// Where every `JournalLogHandler` of a process writes: the entry buffers, the flood budget and
/// the fallback to stderr, shared by the handlers (one per logger). blemu logs from its run
/// loop's one thread only; so does anything else that logs through it.
public final class JournalSink: @unchecked Sendable {
    /// Sends one entry: sd_journal_sendv's contract (0, or a negative errno).
    public typealias Sender = (UnsafeBufferPointer<iovec>) -> Int32

    /// The system journal, through libsystemd.
    public static func systemJournal(_ fields: UnsafeBufferPointer<iovec>) -> Int32 {
        sd_journal_sendv(fields.baseAddress, Int32(fields.count))
    }

    /// journald's native socket (systemd-journald.socket: ListenDatagram=/run/systemd/journal/socket),
    /// where sd_journal_sendv writes.
    public static let systemJournalSocket = "/run/systemd/journal/socket"

    /// Whether the system journal can be reached: 0, or a negative errno. Asked once at start
    /// because sd_journal_sendv hides a missing socket ("Fail silently if the journal is not
    /// available": ENOENT is reported as success, systemd's journal-send.c); a journald that
    /// dies later leaves its socket behind, and sending to it fails with ECONNREFUSED.
    public static func probeSystemJournal() -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return -errno }
        defer { close(fd) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { path in
            for (index, byte) in systemJournalSocket.utf8.enumerated() where index < path.count - 1 { path[index] = byte }
        }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        return connected == 0 ? 0 : -errno
    }

    /// CLOCK_MONOTONIC in nanoseconds: the flood budget's clock, unaffected by wall-clock steps.
    public static func monotonicClock() -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
    }

    private let send: Sender
    private let now: () -> UInt64
    private let announce: (String) -> Void
    private var builder = JournalEntryBuilder()
    var budget: FloodBudget
    /// Set once the journal refused an entry: everything goes to stderr from then on.
    public private(set) var fellBack = false
    /// Every entry the flood budget left out so far.
    public private(set) var suppressedTotal = 0

    /// `send` writes an entry (the journal; tests inject their own), `now` is the budget's
    /// clock, `announce` tells the operator once that the journal cannot be reached (stderr).
    public init(send: @escaping Sender = JournalSink.systemJournal,
                now: @escaping () -> UInt64 = JournalSink.monotonicClock,
                burst: Int = 20, perSecond: Int = 2,
                announce: @escaping (String) -> Void = JournalSink.writeToStderr) {
        self.send = send
        self.now = now
        self.announce = announce
        budget = FloodBudget(burst: burst, perSecond: perSecond)
    }

    func write(_ event: LogEvent, handlerMetadata: Logger.Metadata) {
        let time = now()
        // Keys that went quiet report what was left out of them before anything else goes out.
        if budget.pending > 0 {
            budget.quietEntries(now: time) { slot in writeSummary(slot) }
        }
        let kind: String, line: UInt
        if let name = Self.string(LogKey.event, event.metadata, handlerMetadata) {
            (kind, line) = (name, 0)
        } else {
            (kind, line) = (event.file, event.line)
        }
        let peer = Self.string(LogKey.peer, event.metadata, handlerMetadata)
        let decision = budget.take(kind: kind, line: line, peer: peer, now: time,
                                   entry: PendingEntry(event: event, handlerMetadata: handlerMetadata)) { slot in
            writeSummary(slot)
        }
        guard case .write(let leftOut) = decision else {
            suppressedTotal += 1
            return
        }
        emit(event, handlerMetadata: handlerMetadata, suppressed: leftOut, summary: false)
    }

    /// Reports every count not yet reported: at the end of a run.
    public func flush() {
        budget.quietEntries(now: now(), all: true) { slot in writeSummary(slot) }
    }

    private func writeSummary(_ slot: FloodBudget.Slot) {
        guard let last = slot.last else { return }
        emit(last.event, handlerMetadata: last.handlerMetadata, suppressed: slot.leftOut, summary: true)
    }

    /// A metadata string value, the entry's own first.
    private static func string(_ key: String, _ explicit: Logger.Metadata?, _ handler: Logger.Metadata) -> String? {
        guard let value = explicit?[key] ?? handler[key] else { return nil }
        if case .string(let text) = value { return text }
        return value.description
    }

    /// The journal cannot be reached (`error`, a negative errno): says so once, and writes
    /// every entry to stderr from now on.
    public func fallBack(_ error: Int32) {
        guard !fellBack else { return }
        fellBack = true
        announce("blemu: cannot write to the systemd journal (\(String(cString: strerror(-error)))); "
                 + "logging to stderr from now on\n")
    }

    private func emit(_ event: LogEvent, handlerMetadata: Logger.Metadata, suppressed: Int, summary: Bool) {
        if fellBack {
            writeFallback(event, handlerMetadata: handlerMetadata, suppressed: suppressed, summary: summary)
            return
        }
        build(event, handlerMetadata: handlerMetadata, suppressed: suppressed, summary: summary)
        let result = builder.withFields(send)
        guard result < 0 else { return }
        fallBack(result)
        writeFallback(event, handlerMetadata: handlerMetadata, suppressed: suppressed, summary: summary)
    }

    /// The fields of one entry: MESSAGE, PRIORITY, SYSLOG_IDENTIFIER, CODE_*, MESSAGE_ID for an
    /// event, a BLEMU_ field per metadata key (the entry's own over its logger's), and the
    /// flood budget's and the capture's fields when they apply.
    func build(_ event: LogEvent, handlerMetadata: Logger.Metadata, suppressed: Int, summary: Bool) {
        builder.reset()
        // MESSAGE is what journalctl shows on a terminal: peer text in it made visible
        // (`VisibleText`); the BLEMU_ fields keep the raw bytes (the journal is binary-safe).
        builder.field("MESSAGE", VisibleText.make(Self.message(event.message.description, suppressed: suppressed, summary: summary)))
        builder.field("PRIORITY", decimal: UInt64(JournalFields.priority(event.level)))
        builder.field("SYSLOG_IDENTIFIER", "blemu")
        builder.field("CODE_FILE", event.file)
        builder.field("CODE_LINE", decimal: UInt64(event.line))
        builder.field("CODE_FUNC", event.function)
        if let name = Self.string(LogKey.event, event.metadata, handlerMetadata), let kind = BlemuEvent(rawValue: name) {
            builder.field("MESSAGE_ID", JournalFields.messageID(kind))
        }
        for (key, value) in handlerMetadata where event.metadata?[key] == nil {
            builder.metadata(key: key, value: value)
        }
        if let explicit = event.metadata {
            for (key, value) in explicit { builder.metadata(key: key, value: value) }
        }
        if suppressed > 0 { builder.field(JournalFields.suppressed, decimal: UInt64(suppressed)) }
        if let frame = CaptureCursor.lastFrame { builder.field(JournalFields.snoopFrame, decimal: frame) }
    }

    static func message(_ text: String, suppressed: Int, summary: Bool) -> String {
        if summary { return "\(suppressed) similar \(suppressed == 1 ? "entry" : "entries") suppressed; the last: \(text)" }
        if suppressed == 0 { return text }
        return "\(text) (\(suppressed) similar \(suppressed == 1 ? "entry" : "entries") suppressed before it)"
    }

    private func writeFallback(_ event: LogEvent, handlerMetadata: Logger.Metadata, suppressed: Int, summary: Bool) {
        var handler = StderrLogHandler(label: JournalFields.identifier)
        handler.metadata = handlerMetadata
        var event = event
        event.message = "\(Self.message(event.message.description, suppressed: suppressed, summary: summary))"
        handler.log(event: event)
    }

    public static func writeToStderr(_ text: String) {
        var text = text
        text.withUTF8 { buffer in
            var offset = 0
            while offset < buffer.count {
                let written = Glibc.write(2, buffer.baseAddress! + offset, buffer.count - offset)
                if written <= 0 { break }
                offset += written
            }
        }
    }
}

/// A swift-log handler that writes each entry to the systemd journal through a `JournalSink`.
public struct JournalLogHandler: LogHandler {
    public var metadata: Logger.Metadata = [:]
    public var logLevel: Logger.Level = .info
    public let sink: JournalSink

    public init(sink: JournalSink, level: Logger.Level = .info) {
        self.sink = sink
        logLevel = level
    }

    /// `LogBudget.handlerBudgetsFloods` is answered, never stored: the sink's flood budget is
    /// the one budget of lines that reach the journal, so the stack's own budgets step aside.
    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { key == LogBudget.handlerBudgetsFloods ? .string("journal") : metadata[key] }
        set { if key != LogBudget.handlerBudgetsFloods { metadata[key] = newValue } }
    }

    public func log(event: LogEvent) {
        sink.write(event, handlerMetadata: metadata)
    }
}
