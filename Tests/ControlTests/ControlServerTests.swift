import BlemuCore
import BlemuRunLoop
import CLinux
import Logging
import Testing
@testable import BlemuControl

#if canImport(Glibc)
import Glibc
#endif

/// The control socket on a real run loop: clients that misbehave are told or dropped, the others
/// go on being served, and the socket file is handled with care.
@Suite(.serialized) struct ControlServerTests {
    // MARK: Rig

    final class LogCapture: @unchecked Sendable {
        var lines: [String] = []
        func matching(_ text: String) -> [String] { lines.filter { $0.contains(text) } }
    }

    struct CapturingHandler: LogHandler {
        let capture: LogCapture
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace
        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }
        func log(event: LogEvent) {
            capture.lines.append("\(event.level) \(event.message) \(event.metadata ?? [:])")
        }
    }

    final class Rig {
        let loop: RunLoop
        let path: String
        let log = LogCapture()
        var server: ControlServer!
        var requests: [String] = []

        init(limits: ControlServer.Limits = ControlServer.Limits(), mode: UInt32 = 0o600, replyPadding: Int = 0,
             timers: ManualScheduler? = nil) throws {
            loop = try RunLoop()
            path = Self.freshPath()
            let capture = log
            let logger = Logger(label: "control-test") { _ in CapturingHandler(capture: capture) }
            server = try ControlServer(path: path, mode: mode, loop: loop, timers: timers, logger: logger, limits: limits) { [unowned self] line, client in
                let text = String(decoding: line, as: UTF8.self)
                self.requests.append(text)
                let padding = replyPadding > 0 ? #","pad":""# + String(repeating: "p", count: replyPadding) + "\"" : ""
                return #"{"client":\#(client),"echo":\#(text.utf8.count)\#(padding)}"#
            }
        }

        deinit {
            server?.close()
            unlink(path)
        }

        static func freshPath() -> String {
            "/tmp/blemu-ctl-test-\(getpid())-\(UInt32.random(in: 0...UInt32.max)).sock"
        }

        /// Runs the loop until `condition` holds or `limit` passes; returns whether it held.
        @discardableResult
        func run(until condition: () -> Bool, limit: Duration = .seconds(5)) -> Bool {
            let deadline = loop.nowNanoseconds + limit.nanoseconds
            while !condition() {
                if loop.nowNanoseconds >= deadline { return false }
                loop.runOnce(timeout: .milliseconds(10))
            }
            return true
        }

        func run(for duration: Duration) {
            let deadline = loop.nowNanoseconds + duration.nanoseconds
            while loop.nowNanoseconds < deadline { loop.runOnce(timeout: .milliseconds(5)) }
        }
    }

    /// A nonblocking client socket connected to `path`.
    final class TestClient {
        let fd: Int32
        var received: [UInt8] = []
        var closedByServer = false

        init(path: String) throws {
            fd = socket(AF_UNIX, CLINUX_SOCK_STREAM_NONBLOCK, 0)
            var address = sockaddr_un()
            address.sun_family = sa_family_t(AF_UNIX)
            let bytes = Array(path.utf8)
            withUnsafeMutableBytes(of: &address.sun_path) { raw in
                for (index, byte) in bytes.enumerated() { raw[index] = byte }
            }
            let result = withUnsafePointer(to: &address) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
                }
            }
            if result != 0 {
                let code = errno
                close(fd)
                throw POSIXFailure(code: code)
            }
        }

        deinit { close(fd) }

        /// Writes what the socket takes now; returns how many bytes.
        @discardableResult
        func send(_ text: String) -> Int { send(Array(text.utf8)) }

        @discardableResult
        func send(_ bytes: [UInt8]) -> Int {
            var offset = 0
            while offset < bytes.count {
                let written = bytes[offset...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, CLINUX_MSG_NOSIGNAL) }
                if written <= 0 { break }
                offset += written
            }
            return offset
        }

        /// Reads what is there; notes an end of stream or a reset.
        func poll() {
            var chunk = [UInt8](repeating: 0, count: 64 * 1024)
            while true {
                let count = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                if count > 0 {
                    received.append(contentsOf: chunk[0..<count])
                    continue
                }
                if count == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) { closedByServer = true }
                return
            }
        }

        var lines: [String] {
            String(decoding: received, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false).dropLast().map(String.init)
        }
    }

    struct POSIXFailure: Error { let code: Int32 }

    private func fileMode(_ path: String) -> mode_t? {
        var status = stat()
        guard lstat(path, &status) == 0 else { return nil }
        return status.st_mode
    }

    // MARK: Tests

    @Test func servesOneReplyPerLineInOrderAcrossReads() throws {
        let rig = try Rig()
        let client = try TestClient(path: rig.path)
        client.send("{\"id\":1}\n{\"id\":2}\n{\"id")
        #expect(rig.run(until: { client.poll(); return client.lines.count == 2 }))
        client.send("\":3}\r\n   \n\n")
        #expect(rig.run(until: { client.poll(); return client.lines.count == 3 }))
        #expect(rig.requests == ["{\"id\":1}", "{\"id\":2}", "{\"id\":3}"], "blank lines are no requests")
        #expect(client.lines[2] == #"{"client":1,"echo":8}"#)
    }

    @Test func severalClientsAtOnce() throws {
        let rig = try Rig()
        let clients = try (0..<5).map { _ in try TestClient(path: rig.path) }
        for (index, client) in clients.enumerated() { client.send("{\"n\":\(index)}\n") }
        #expect(rig.run(until: {
            clients.forEach { $0.poll() }
            return clients.allSatisfy { $0.lines.count == 1 }
        }))
        #expect(rig.server.clientCount == 5)
        let ids = Set(clients.compactMap { $0.lines.first })
        #expect(ids.count == 5, "each client hears its own reply")
    }

    @Test func aMegabyteWithoutANewlineIsToldAndDroppedWhileOthersGoOn() throws {
        let rig = try Rig()
        let hostile = try TestClient(path: rig.path)
        let good = try TestClient(path: rig.path)
        let junk = [UInt8](repeating: UInt8(ascii: "a"), count: 1024 * 1024)
        var sent = 0
        #expect(rig.run(until: {
            if sent < junk.count { sent += hostile.send(Array(junk[sent...])) }
            hostile.poll()
            return hostile.closedByServer
        }, limit: .seconds(10)))
        #expect(sent < junk.count, "dropped before the whole megabyte was taken")
        #expect(hostile.lines.first?.contains("line longer than 65536 bytes") == true, "told why: \(hostile.lines)")
        #expect(!rig.log.matching("dropped: sent more than 65536 bytes without a newline").isEmpty, "\(rig.log.lines)")
        good.send("{\"still\":\"here\"}\n")
        #expect(rig.run(until: { good.poll(); return good.lines.count == 1 }))
        #expect(rig.server.clientCount == 1)
    }

    @Test func aClientThatHangsUpMidLineIsClosedAndItsLineNotRun() throws {
        let rig = try Rig()
        do {
            let client = try TestClient(path: rig.path)
            client.send("{\"id\":1}\n{\"id\":2,\"cmd\":")
            #expect(rig.run(until: { rig.requests.count == 1 }))
        }
        #expect(rig.run(until: { rig.server.clientCount == 0 }))
        #expect(rig.requests == ["{\"id\":1}"])
        #expect(!rig.log.matching("hung up in the middle of a 14-byte line").isEmpty, "\(rig.log.lines)")
    }

    @Test func aClientThatShutsDownItsSideStillGetsItsReplies() throws {
        let rig = try Rig()
        let client = try TestClient(path: rig.path)
        client.send("{\"id\":1}\n{\"id\":2}\n")
        shutdown(client.fd, Int32(SHUT_WR))
        #expect(rig.run(until: { client.poll(); return client.closedByServer }))
        #expect(client.lines.count == 2)
    }

    @Test func aClientThatNeverReadsIsDroppedOthersAreNot() throws {
        var limits = ControlServer.Limits()
        limits.outputHighWater = 4 * 1024
        limits.stallTimeout = .milliseconds(300)
        let rig = try Rig(limits: limits, replyPadding: 1000)
        let deaf = try TestClient(path: rig.path)
        var shrink: Int32 = 4096
        setsockopt(deaf.fd, SOL_SOCKET, SO_RCVBUF, &shrink, socklen_t(MemoryLayout<Int32>.size))
        let good = try TestClient(path: rig.path)
        let request = Array(String(repeating: "{\"id\":1}\n", count: 2000).utf8)
        var sent = 0
        #expect(rig.run(until: {
            if sent < request.count { sent += deaf.send(Array(request[sent...])) }
            return rig.server.clientCount == 1
        }, limit: .seconds(10)))
        #expect(!rig.log.matching("took none of its").isEmpty, "\(rig.log.lines)")
        #expect(rig.requests.count < 2000, "requests past the high water mark waited unread")
        good.send("{\"id\":2}\n")
        #expect(rig.run(until: { good.poll(); return good.lines.count == 1 }))
    }

    @Test func tooManyClientsAreToldSo() throws {
        var limits = ControlServer.Limits()
        limits.maxClients = 2
        let rig = try Rig(limits: limits)
        let first = try TestClient(path: rig.path)
        let second = try TestClient(path: rig.path)
        #expect(rig.run(until: { rig.server.clientCount == 2 }))
        let third = try TestClient(path: rig.path)
        #expect(rig.run(until: { third.poll(); return third.closedByServer }))
        #expect(third.lines.first?.contains("2 clients already") == true)
        _ = (first, second)
    }

    @Test func theSocketIsTheOwnersAloneAndGoesOnClose() throws {
        let rig = try Rig()
        let mode = try #require(fileMode(rig.path))
        #expect(mode & 0o170000 == 0o140000, "a socket")
        #expect(mode & 0o777 == 0o600)
        rig.server.close()
        #expect(fileMode(rig.path) == nil, "removed on close")
        rig.server.close()  // idempotent

        let shared = try Rig(mode: 0o660)
        #expect(fileMode(shared.path).map { $0 & 0o777 } == 0o660)
    }

    @Test func aStaleSocketIsReplacedALiveOneAndOtherFilesAreNot() throws {
        let loop = try RunLoop()
        let logger = Logger(label: "control-test") { _ in SwiftLogNoOpLogHandler() }
        let path = Rig.freshPath()
        defer { unlink(path) }

        // Stale: bound, never listened on or closed since.
        let stale = socket(AF_UNIX, CLINUX_SOCK_STREAM_NONBLOCK, 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (index, byte) in path.utf8.enumerated() { raw[index] = byte }
        }
        let bound = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(stale, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        #expect(bound == 0)
        close(stale)
        let server = try ControlServer(path: path, loop: loop, logger: logger) { _, _ in "{}" }

        // Live: refused, and the live one keeps its file.
        #expect(throws: ControlServerError.self) {
            _ = try ControlServer(path: path, loop: loop, logger: logger) { _, _ in "{}" }
        }
        #expect(fileMode(path) != nil)
        server.close()

        // Not a socket: refused and left alone.
        let fd = open(path, O_CREAT | O_WRONLY, 0o644)
        close(fd)
        do {
            _ = try ControlServer(path: path, loop: loop, logger: logger) { _, _ in "{}" }
            Issue.record("a regular file was replaced")
        } catch {
            #expect(error.description.contains("not a socket"))
        }
        #expect(fileMode(path).map { $0 & 0o170000 } == 0o100000)

        // A path too long for a Unix socket, and one in no directory.
        #expect(throws: ControlServerError.self) {
            _ = try ControlServer(path: "/tmp/" + String(repeating: "x", count: 200), loop: loop, logger: logger) { _, _ in "{}" }
        }
        #expect(throws: ControlServerError.self) {
            _ = try ControlServer(path: "/nonexistent-dir-blemu/control.sock", loop: loop, logger: logger) { _, _ in "{}" }
        }
    }

    @Test func closeDoesNotRemoveAFileThatIsNoLongerItsOwn() throws {
        let rig = try Rig()
        unlink(rig.path)
        let fd = open(rig.path, O_CREAT | O_WRONLY, 0o644)
        close(fd)
        rig.server.close()
        #expect(fileMode(rig.path) != nil, "someone else's file stays")
    }

    @Test func garbageBytesGetRepliesNotACrash() throws {
        let rig = try Rig()
        let client = try TestClient(path: rig.path)
        var random = SystemRandomNumberGenerator()
        var bytes = (0..<20_000).map { _ in UInt8.random(in: 0...255, using: &random) }
        bytes.append(UInt8(ascii: "\n"))
        client.send(bytes)
        let newlines = bytes.filter { $0 == UInt8(ascii: "\n") }.count
        #expect(rig.run(until: { client.poll(); return rig.requests.count > 0 && client.lines.count == rig.requests.count }))
        #expect(rig.requests.count <= newlines)
        #expect(rig.server.clientCount == 1)
    }

    // MARK: Clients that hold a place without using it

    @Test func anUnfinishedLineIsClosedAfterTenSecondsWithAReason() throws {
        let timers = ManualScheduler()
        let rig = try Rig(timers: timers)
        let holder = try TestClient(path: rig.path)
        let good = try TestClient(path: rig.path)
        holder.send("{\"id\":1}\n{\"id\":2,\"cmd\":")
        #expect(rig.run(until: { rig.requests.count == 1 && rig.server.clientCount == 2 }))
        timers.advance(by: .seconds(9))
        rig.run(for: .milliseconds(50))
        #expect(rig.server.clientCount == 2, "not before 10 s")
        timers.advance(by: .seconds(1))
        #expect(rig.run(until: { holder.poll(); return holder.closedByServer }))
        #expect(holder.lines.last?.contains("an unfinished line (no newline) for 10.0 seconds; closing this connection") == true, "\(holder.lines)")
        #expect(!rig.log.matching("dropped: sent 14 bytes of a line without its newline for 10.0 seconds; that line is not run").isEmpty,
                "\(rig.log.lines)")
        #expect(rig.requests == ["{\"id\":1}"], "the unfinished line is not run")
        #expect(rig.server.clientCount == 1)
        good.send("{\"id\":3}\n")
        #expect(rig.run(until: { good.poll(); return good.lines.count == 1 }))
    }

    @Test func aLineFinishedInTimeStartsTheClockAgain() throws {
        let timers = ManualScheduler()
        let rig = try Rig(timers: timers)
        let slow = try TestClient(path: rig.path)
        slow.send("{\"id\":")
        #expect(rig.run(until: { rig.server.clientCount == 1 }))
        rig.run(for: .milliseconds(50))
        timers.advance(by: .seconds(9))
        slow.send("1}\n{\"id\"")
        #expect(rig.run(until: { slow.poll(); return slow.lines.count == 1 }))
        timers.advance(by: .seconds(9))
        rig.run(for: .milliseconds(50))
        slow.poll()
        #expect(!slow.closedByServer, "the second line began 9 s ago, not 18")
        timers.advance(by: .seconds(1))
        #expect(rig.run(until: { slow.poll(); return slow.closedByServer }))
        // A client that sends nothing is not closed by this timer: it has no line to finish.
        let quiet = try TestClient(path: rig.path)
        #expect(rig.run(until: { rig.server.clientCount == 1 }))
        timers.advance(by: .seconds(60))
        rig.run(for: .milliseconds(50))
        quiet.poll()
        #expect(!quiet.closedByServer)
    }

    @Test func withEveryPlaceTakenTheLongestIdleClientGivesWay() throws {
        let timers = ManualScheduler()
        var limits = ControlServer.Limits()
        limits.maxClients = 2
        let rig = try Rig(limits: limits, timers: timers)
        let idle = try TestClient(path: rig.path)
        #expect(rig.run(until: { rig.server.clientCount == 1 }))
        idle.send("{\"id\":")
        rig.run(for: .milliseconds(50))
        timers.advance(by: .seconds(2))
        let busy = try TestClient(path: rig.path)
        #expect(rig.run(until: { rig.server.clientCount == 2 }))
        busy.send("{\"id\":1}\n")
        #expect(rig.run(until: { busy.poll(); return busy.lines.count == 1 }))

        // A third: the idle one (2 s) gives way, told why; the newcomer is served.
        let newcomer = try TestClient(path: rig.path)
        #expect(rig.run(until: { idle.poll(); return idle.closedByServer }))
        #expect(idle.lines.last?.contains("idle for 2.0 s with 2 clients connected; closing this connection for a new client") == true, "\(idle.lines)")
        #expect(!rig.log.matching("dropped: idle for 2.0 s with 2 clients connected (6 bytes of an unfinished line, not run); gave its place to client 3").isEmpty,
                "\(rig.log.lines)")
        newcomer.send("{\"id\":2}\n")
        #expect(rig.run(until: { newcomer.poll(); return newcomer.lines.count == 1 }))
        #expect(rig.server.clientCount == 2)

        // A fourth, while both were active within the last second: refused, the others stay.
        let late = try TestClient(path: rig.path)
        #expect(rig.run(until: { late.poll(); return late.closedByServer }))
        #expect(late.lines.first?.contains("2 clients already, each active within 1.0 seconds") == true, "\(late.lines)")
        busy.send("{\"id\":3}\n")
        #expect(rig.run(until: { busy.poll(); return busy.lines.count == 2 }))
        #expect(rig.server.clientCount == 2)
    }

    @Test func aBurstOfConnectsWaitsInTheBacklogAndEachIsServedOrTold() throws {
        // The clock stands still: nobody is idle, so beyond the 16 places each is told.
        let rig = try Rig(timers: ManualScheduler())
        // All connect before the server accepts any: with a backlog of 16 the 18th failed (EAGAIN).
        let clients = try (0..<300).map { _ in try TestClient(path: rig.path) }
        #expect(rig.run(until: {
            clients.forEach { $0.poll() }
            return rig.server.clientCount == 16 && clients.filter(\.closedByServer).count == 284
        }, limit: .seconds(10)))
        let refused = clients.filter(\.closedByServer)
        #expect(refused.allSatisfy { $0.lines.first?.contains("16 clients already") == true })
    }
}
