import BlemuCore
import Logging
import Testing
@testable import BlemuJournal

#if canImport(Glibc)
import Glibc
#endif

/// A journal of the test's own: the entries the sink sent, decoded; `failWith` makes the
/// sender answer like sd_journal_sendv with no journal to reach.
final class RecordingJournal: @unchecked Sendable {
    var entries: [[String: String]] = []
    var fieldNames: [[String]] = []
    var failWith: Int32 = 0
    var now: UInt64 = 1_000_000_000
    var announced: [String] = []

    func sink(burst: Int = 20, perSecond: Int = 2) -> JournalSink {
        JournalSink(send: { [self] fields in
            if failWith != 0 { return -failWith }
            let decoded = JournalEntryBuilder.decode(fields)
            fieldNames.append(decoded.map(\.name))
            entries.append(Dictionary(decoded.map { ($0.name, String(decoding: $0.value, as: UTF8.self)) }) { first, _ in first })
            return 0
        }, now: { [self] in now }, burst: burst, perSecond: perSecond, announce: { [self] in announced.append($0) })
    }

    func logger(_ sink: JournalSink, level: Logger.Level = .info, device: String? = "lock") -> Logger {
        var logger = Logger(label: "blemu") { _ in JournalLogHandler(sink: sink, level: level) }
        if let device { logger[metadataKey: LogKey.device] = .string(device) }
        return logger
    }
}

@Suite struct JournalFieldTests {
    @Test func metadataKeysBecomeBlemuFieldsInCapitals() {
        #expect(JournalFields.name(forKey: LogKey.connHandle) == "BLEMU_CONN_HANDLE")
        #expect(JournalFields.name(forKey: LogKey.event) == "BLEMU_EVENT")
        #expect(JournalFields.name(forKey: LogKey.reason) == "BLEMU_REASON")
        // Only [A-Z0-9_] reach the journal, and at most 64 characters (journald drops longer names).
        #expect(JournalFields.name(forKey: "a-b.c é") == "BLEMU_A_B_C___")
        #expect(JournalFields.name(forKey: String(repeating: "x", count: 100)).count == 64)
    }

    @Test func prioritiesAreSyslogNumbers() {
        let expected: [(Logger.Level, UInt8)] = [(.trace, 7), (.debug, 7), (.info, 6), (.notice, 5), (.warning, 4), (.error, 3), (.critical, 2)]
        for (level, priority) in expected { #expect(JournalFields.priority(level) == priority, "\(level)") }
    }

    @Test func everyEventKindHasItsOwnMessageID() {
        let ids = BlemuEvent.allCases.map { "\(JournalFields.messageID($0))" }
        #expect(Set(ids).count == BlemuEvent.allCases.count)
        for id in ids {
            #expect(id.count == 32 && id.allSatisfy { $0.isHexDigit && !$0.isUppercase }, "\(id)")
        }
    }

    @Test func anEventEntryCarriesEveryField() throws {
        let journal = RecordingJournal()
        let logger = journal.logger(journal.sink())
        logger.event(.disconnected, .notice, "disconnected from F0:F1:F2:F3:F4:F5\nsecond line", [
            LogKey.peer: "F0:F1:F2:F3:F4:F5", LogKey.connHandle: "64", LogKey.reason: "0x13",
        ], file: "BlemuHost/Links.swift", function: "connectionClosed(handle:)", line: 77)
        let entry = try #require(journal.entries.first)
        #expect(journal.entries.count == 1)
        // MESSAGE is shown on terminals: one line, the newline made visible.
        #expect(entry["MESSAGE"] == "disconnected from F0:F1:F2:F3:F4:F5\\x0asecond line")
        #expect(entry["PRIORITY"] == "5")
        #expect(entry["SYSLOG_IDENTIFIER"] == "blemu")
        #expect(entry["CODE_FILE"] == "BlemuHost/Links.swift")
        #expect(entry["CODE_LINE"] == "77")
        #expect(entry["CODE_FUNC"] == "connectionClosed(handle:)")
        #expect(entry["MESSAGE_ID"] == "\(JournalFields.messageID(.disconnected))")
        #expect(entry["BLEMU_EVENT"] == "disconnected")
        #expect(entry["BLEMU_DEVICE"] == "lock")
        #expect(entry["BLEMU_PEER"] == "F0:F1:F2:F3:F4:F5")
        #expect(entry["BLEMU_CONN_HANDLE"] == "64")
        #expect(entry["BLEMU_REASON"] == "0x13")
        #expect(entry["BLEMU_SUPPRESSED"] == nil && entry["BLEMU_SNOOP_FRAME"] == nil)
        // One value per field: the entry's metadata replaces its logger's.
        #expect(journal.fieldNames[0].count == Set(journal.fieldNames[0]).count)
    }

    @Test func aPeersTextIsVisibleInMessageAndRawInItsField() throws {
        let journal = RecordingJournal()
        let name = "evil\u{1B}]0;pwned\u{07}\r\u{202E}"
        journal.logger(journal.sink()).notice("joined chat room '\(name)'", metadata: [LogKey.name: .string(name)])
        let entry = try #require(journal.entries.first)
        #expect(entry["MESSAGE"] == "joined chat room 'evil\\x1b]0;pwned\\x07\\x0d\\u202e'")
        #expect(entry["BLEMU_NAME"] == name)
    }

    @Test func stderrLinesShowAPeersTextVisibleInMessageAndFields() {
        var handler = StderrLogHandler(label: "blemu")
        handler.metadata = [LogKey.name: "a\nb\u{9B}"]
        let event = LogEvent(level: .notice, message: "heard \u{1B}[2J\r[bob] hi", metadata: nil, source: "blemu",
                             file: #fileID, function: #function, line: #line)
        #expect(handler.line(for: event) == "NOTICE heard \\x1b[2J\\x0d[bob] hi  [name=a\\x0ab\\x9b]\n")
    }

    @Test func anEntryWithoutAnEventHasNoMessageID() throws {
        let journal = RecordingJournal()
        journal.logger(journal.sink()).warning("controller still unreachable")
        let entry = try #require(journal.entries.first)
        #expect(entry["MESSAGE_ID"] == nil && entry["BLEMU_EVENT"] == nil)
        #expect(entry["PRIORITY"] == "4" && entry["BLEMU_DEVICE"] == "lock")
    }

    @Test func theEntrysOwnMetadataWinsOverItsLoggers() throws {
        let journal = RecordingJournal()
        journal.logger(journal.sink()).info("x", metadata: [LogKey.device: "thermostat"])
        #expect(journal.entries.first?["BLEMU_DEVICE"] == "thermostat")
        #expect(journal.fieldNames[0].filter { $0 == "BLEMU_DEVICE" }.count == 1)
    }

    @Test func entriesWrittenDuringACaptureNameItsFrame() throws {
        let journal = RecordingJournal()
        let logger = journal.logger(journal.sink())
        CaptureCursor.lastFrame = 42
        defer { CaptureCursor.lastFrame = nil }
        logger.event(.write, .info, "write", [LogKey.peer: "A"])
        #expect(journal.entries.first?["BLEMU_SNOOP_FRAME"] == "42")
    }

    @Test func levelsThatAreOffWriteNothing() {
        let journal = RecordingJournal()
        let logger = journal.logger(journal.sink(), level: .info)
        var built = false
        logger.event(.attError, .debug, "not found", { built = true; return [:] }())
        logger.debug("detail")
        #expect(journal.entries.isEmpty)
        #expect(!built, "metadata was built for a level that is off")
    }
}

@Suite struct JournalFallbackTests {
    @Test func anUnreachableJournalIsAnnouncedOnceAndStderrTakesOver() {
        let journal = RecordingJournal()
        journal.failWith = ENOENT
        let sink = journal.sink()
        let logger = journal.logger(sink)
        logger.event(.started, .notice, "started")
        logger.event(.connected, .notice, "connected", [LogKey.peer: "A"])
        #expect(sink.fellBack)
        #expect(journal.announced.count == 1)
        #expect(journal.announced.first?.contains("cannot write to the systemd journal") == true)
        #expect(journal.announced.first?.contains("No such file or directory") == true)
        #expect(journal.entries.isEmpty)
        // The journal is not tried again once it failed.
        journal.failWith = 0
        logger.event(.stopping, .notice, "stopping")
        #expect(journal.entries.isEmpty)
        #expect(journal.announced.count == 1)
    }

    @Test func aJournalFoundUnreachableAtStartIsNeverTried() {
        let journal = RecordingJournal()
        let sink = journal.sink()
        sink.fallBack(-ECONNREFUSED)
        sink.fallBack(-ECONNREFUSED)
        journal.logger(sink).event(.started, .notice, "started")
        #expect(journal.entries.isEmpty && sink.fellBack)
        #expect(journal.announced == ["blemu: cannot write to the systemd journal (Connection refused); logging to stderr from now on\n"])
    }

    @Test func theProbeFindsTheSystemJournalOrSaysWhyNot() {
        // Whatever this machine runs: 0 exactly when journald's socket answers a connect.
        let probe = JournalSink.probeSystemJournal()
        var status = stat()
        if stat(JournalSink.systemJournalSocket, &status) != 0 { #expect(probe == -ENOENT) } else { #expect(probe == 0 || probe == -ECONNREFUSED) }
    }

    @Test func aWorkingJournalAnnouncesNothing() {
        let journal = RecordingJournal()
        let sink = journal.sink()
        journal.logger(sink).event(.started, .notice, "started")
        #expect(!sink.fellBack && journal.announced.isEmpty && journal.entries.count == 1)
    }
}

@Suite struct FloodBudgetTests {
    @Test func aFloodCostsABurstThenTheRateAndTheCountIsReported() {
        let journal = RecordingJournal()
        let sink = journal.sink(burst: 5, perSecond: 2)
        let logger = journal.logger(sink)
        // 1000 errors in one second from one central.
        for index in 0..<1000 {
            journal.now = 1_000_000_000 + UInt64(index) * 1_000_000
            logger.event(.attError, .info, "ATT error \(index)", [LogKey.peer: "P1", LogKey.attHandle: "0x0010"])
        }
        let written = journal.entries.filter { $0["BLEMU_EVENT"] == "att-error" }
        // The burst at once, then 2 a second: one more at 1.5 s, the next would be at 2.0 s.
        #expect(written.count == 6)
        let suppressedSoFar = written.compactMap { $0["BLEMU_SUPPRESSED"].flatMap(Int.init) }.reduce(0, +)
        journal.now += 5_000_000_000
        sink.flush()
        let all = journal.entries.filter { $0["BLEMU_EVENT"] == "att-error" }
        let summaries = all.filter { $0["MESSAGE"]?.contains("similar entries suppressed; the last: ATT error 999") == true }
        #expect(summaries.count == 1)
        let suppressed = all.compactMap { $0["BLEMU_SUPPRESSED"].flatMap(Int.init) }.reduce(0, +)
        // Every entry is accounted for: written, or counted in a BLEMU_SUPPRESSED.
        #expect(written.count + suppressed == 1000)
        #expect(suppressed > suppressedSoFar)
        #expect(sink.suppressedTotal == suppressed)
        // The summary repeats the last entry's fields, so it is found by the same filters.
        #expect(summaries.first?["BLEMU_PEER"] == "P1" && summaries.first?["BLEMU_DEVICE"] == "lock")
        #expect(summaries.first?["MESSAGE_ID"] == "\(JournalFields.messageID(.attError))")
    }

    @Test func eachKindAndPeerHasItsOwnBudget() {
        let journal = RecordingJournal()
        let logger = journal.logger(journal.sink(burst: 3, perSecond: 1))
        for _ in 0..<10 {
            logger.event(.attError, .info, "e", [LogKey.peer: "P1"])
            logger.event(.attError, .info, "e", [LogKey.peer: "P2"])
            logger.event(.write, .info, "w", [LogKey.peer: "P1"])
            logger.warning("no event")
        }
        let count = { (event: String?, peer: String?) in
            journal.entries.filter { $0["BLEMU_EVENT"] == event && $0["BLEMU_PEER"] == peer }.count
        }
        #expect(count("att-error", "P1") == 3 && count("att-error", "P2") == 3 && count("write", "P1") == 3)
        // Entries without an event are budgeted by their line of code.
        #expect(count(nil, nil) == 3)
    }

    @Test func aQuietKeyReportsItsCountWithTheNextEntryOfAnyKind() throws {
        let journal = RecordingJournal()
        let logger = journal.logger(journal.sink(burst: 2, perSecond: 1))
        for _ in 0..<5 { logger.event(.write, .info, "w", [LogKey.peer: "P1"]) }
        #expect(journal.entries.count == 2)
        journal.now += 2_000_000_000
        logger.event(.disconnected, .notice, "gone", [LogKey.peer: "P1"])
        #expect(journal.entries.count == 4)
        #expect(journal.entries[2]["BLEMU_EVENT"] == "write" && journal.entries[2]["BLEMU_SUPPRESSED"] == "3")
        #expect(journal.entries[3]["BLEMU_EVENT"] == "disconnected")
    }

    @Test func theRateRefillsOverTime() {
        var budget = FloodBudget(burst: 2, perSecond: 10)
        var decisions: [FloodBudget.Decision] = []
        let entry = PendingEntry(event: LogEvent(level: .info, message: "m", metadata: nil, source: nil, file: "f", function: "g", line: 1),
                                 handlerMetadata: [:])
        for time in [0, 1, 2, 100_000_000, 100_000_001, 300_000_000] as [UInt64] {
            decisions.append(budget.take(kind: "write", line: 0, peer: "P", now: time, entry: entry) { _ in })
        }
        #expect(decisions == [.write(leftOutBefore: 0), .write(leftOutBefore: 0), .leave,
                              .write(leftOutBefore: 1), .leave, .write(leftOutBefore: 1)])
    }

    @Test func aFullTableReportsTheKeyItEvicts() {
        var budget = FloodBudget(burst: 1, perSecond: 1, capacity: 2)
        let entry = PendingEntry(event: LogEvent(level: .info, message: "m", metadata: nil, source: nil, file: "f", function: "g", line: 1),
                                 handlerMetadata: [:])
        var evicted: [String?] = []
        for peer in ["A", "A", "B", "C"] {
            _ = budget.take(kind: "att-error", line: 0, peer: peer, now: 0, entry: entry) { evicted.append($0.key.peer) }
        }
        #expect(evicted == ["A"])
        #expect(budget.slots.count == 2 && budget.pending == 0)
    }
}

@Suite struct JournalDetectionTests {
    let stderr = JournalDetection.StreamIdentity(device: 25, inode: 31337)

    @Test func journalStreamMatchingStderrMeansTheJournal() {
        let environment = ["JOURNAL_STREAM": "25:31337"]
        #expect(JournalDetection.startedBySystemd(environment: { environment[$0] }, stderr: stderr))
    }

    @Test func anInheritedJournalStreamForAnotherStderrDoesNot() {
        for value in ["25:31338", "26:31337", "garbage", "25:", ":31337", "25:31337:1", ""] {
            let environment = ["JOURNAL_STREAM": value]
            #expect(!JournalDetection.startedBySystemd(environment: { environment[$0] }, stderr: stderr), "\(value)")
        }
        let environment = ["JOURNAL_STREAM": "25:31337"]
        #expect(!JournalDetection.startedBySystemd(environment: { environment[$0] }, stderr: nil))
    }

    @Test func anInvocationIDMeansAUnit() {
        let environment = ["INVOCATION_ID": "0123456789abcdef0123456789abcdef"]
        #expect(JournalDetection.startedBySystemd(environment: { environment[$0] }, stderr: stderr))
        let empty = ["INVOCATION_ID": ""]
        #expect(!JournalDetection.startedBySystemd(environment: { empty[$0] }, stderr: stderr))
    }

    @Test func nothingMeansStderr() {
        #expect(!JournalDetection.startedBySystemd(environment: { _ in nil }, stderr: stderr))
    }

    @Test func thisProcessStderrHasAnIdentity() throws {
        var status = stat()
        try #require(fstat(2, &status) == 0)
        #expect(JournalDetection.stderrIdentity() == .init(device: UInt64(status.st_dev), inode: UInt64(status.st_ino)))
    }
}

@Suite struct JournalCatalogTests {
    /// Docs/blemu.catalog, found from this file's path (Tests/JournalTests/ → the repository).
    static func catalog() throws -> String {
        var path = "\(#filePath)".split(separator: "/", omittingEmptySubsequences: false).dropLast(3).joined(separator: "/")
        path += "/Docs/blemu.catalog"
        guard let file = fopen(path, "r") else { throw CatalogMissing(path: path) }
        defer { fclose(file) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = fread(&chunk, 1, chunk.count, file)
            if count <= 0 { break }
            bytes += chunk[..<count]
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    struct CatalogMissing: Error { let path: String }

    /// The catalog's entries: id and header lines, as systemd's catalog parser reads them
    /// ("-- " + 32 hex digits starts an entry; headers until the first empty line).
    static func entries() throws -> [(id: String, headers: [String: String], body: String)] {
        var result: [(String, [String: String], String)] = []
        var inHeaders = false
        for line in try catalog().split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("-- ") {
                result.append((String(line.dropFirst(3)), [:], ""))
                inHeaders = true
            } else if result.isEmpty || line.hasPrefix("#") && !inHeaders && result.last!.2.isEmpty {
                continue
            } else if inHeaders {
                if line.isEmpty { inHeaders = false; continue }
                let parts = line.split(separator: ":", maxSplits: 1)
                result[result.count - 1].1[String(parts[0])] = parts.count > 1 ? String(parts[1].drop { $0 == " " }) : ""
            } else {
                result[result.count - 1].2 += line + "\n"
            }
        }
        return result
    }

    @Test func theCatalogHasOneEntryPerEventWithTheCodesIDs() throws {
        let entries = try Self.entries()
        let codeIDs = Set(BlemuEvent.allCases.map { "\(JournalFields.messageID($0))" })
        #expect(entries.count == BlemuEvent.allCases.count)
        #expect(Set(entries.map(\.id)) == codeIDs)
        for entry in entries {
            #expect(entry.headers["Subject"]?.isEmpty == false, "\(entry.id) has no Subject")
            #expect(entry.headers["Defined-By"] == "blemu", "\(entry.id)")
            #expect(entry.headers["Support"] != nil, "\(entry.id) has no Support")
            #expect(entry.body.contains { $0.isLetter }, "\(entry.id) has no text")
        }
    }
}

/// One flood is counted by one budget: lines the stack budgets (`LogBudget`) reach the journal
/// uncounted, and the journal's flood budget alone leaves out and counts.
@Suite struct OneBudgetPerFloodTests {
    @Test func theStacksBudgetStepsAsideForTheJournal() {
        let journal = RecordingJournal()
        let logger = journal.logger(journal.sink())
        var budget = LogBudget(burst: 2, window: .seconds(60))
        var passed = 0
        for _ in 0..<150 {
            guard let leftOut = budget.take(now: journal.now, for: logger) else { continue }
            passed += 1
            logger.event(.attError, .info, "ATT error\(LogBudget.note(leftOut))", [LogKey.peer: "AA:BB:CC:DD:EE:FF"])
        }
        #expect(passed == 150 && budget.leftOutTotal == 0, "the stack's budget left lines out before the journal's")
        journal.now += 10_000_000_000
        logger.info("quiet now")
        // The journal's budget: its burst, then one count for the rest, and nothing counted twice.
        let errors = journal.entries.filter { $0["BLEMU_EVENT"] == "att-error" }
        let suppressed = errors.compactMap { $0["BLEMU_SUPPRESSED"].flatMap(Int.init) }.reduce(0, +)
        let summaries = errors.filter { $0["MESSAGE"]?.contains("suppressed; the last:") == true }.count
        #expect(errors.count - summaries + suppressed == 150)
        #expect(!errors.contains { $0["MESSAGE"]?.contains("similar line") == true })
        // The answer is never an entry's field.
        #expect(!journal.fieldNames.joined().contains { $0.contains("BUDGETS_FLOODS") })
    }

    @Test func otherHandlersKeepTheStacksBudget() {
        let logger = Logger(label: "test") { _ in SwiftLogNoOpLogHandler() }
        var budget = LogBudget(burst: 2, window: .seconds(60))
        #expect(budget.take(now: 0, for: logger) == 0 && budget.take(now: 0, for: logger) == 0)
        #expect(budget.take(now: 0, for: logger) == nil && budget.leftOutTotal == 1)
    }

    @Test func theAnswerCannotBeOverwrittenOrRemoved() {
        let journal = RecordingJournal()
        var logger = journal.logger(journal.sink())
        logger[metadataKey: LogBudget.handlerBudgetsFloods] = nil
        #expect(logger[metadataKey: LogBudget.handlerBudgetsFloods] != nil)
    }
}
