import BlemuCore
import BlemuRunLoop
import CLinux
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// Why the control socket cannot be served: one line, saying what to do.
public struct ControlServerError: Error, Equatable, Sendable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// The control socket (`blemu run --control PATH`): a Unix stream socket served from the run
/// loop, any number of lines of JSON from each client, one reply line per request line
/// (Docs/CONTROL.md). Every byte from a client is bounded: a line by `maxLineLength` (past it
/// the client is told and dropped), the replies waiting for it by `outputHighWater` (past it
/// its further requests wait unread) and `outputLimit`, and a client that takes none of its
/// waiting replies for `stallTimeout` is dropped. A client cannot hold its place without using
/// it: one that sends part of a line and not the rest for `unfinishedLineTimeout` is closed,
/// and when all `maxClients` places are taken a new client takes the place of the one idle
/// longest (idle at least `idleBeforeYielding`). Drops are logged (`control-command`).
public final class ControlServer {
    public struct Limits: Sendable {
        /// Clients at once; one more takes the place of the client idle longest, or is told so
        /// and closed when every client was active within `idleBeforeYielding`.
        public var maxClients = 16
        /// The longest request line, in bytes without its newline.
        public var maxLineLength = 64 * 1024
        /// Past this many bytes of replies waiting for a client, it is not read until they go.
        public var outputHighWater = 64 * 1024
        /// A client whose waiting replies would pass this is dropped.
        public var outputLimit = 1024 * 1024
        /// A client with replies waiting that takes none of them for this long is dropped.
        public var stallTimeout: Duration = .seconds(10)
        /// A client that has sent part of a line and not its newline for this long is closed
        /// (a request is one write of one line; a client that holds one open holds a place).
        public var unfinishedLineTimeout: Duration = .seconds(10)
        /// With every place taken, a new client closes the one that has sent nothing and taken
        /// no reply for longest, if that is at least this long.
        public var idleBeforeYielding: Duration = .seconds(1)
        /// A watcher's queue (`watch`): event lines waiting for it, in bytes. An event that
        /// does not fit is counted as missed, never queued; a watcher is never dropped for
        /// not reading (it is not served requests any more, so it holds no reply back).
        public var streamQueueBytes = 64 * 1024
        public init() {}
    }

    public let path: String
    public let limits: Limits
    public private(set) var isOpen = false
    /// Clients connected now.
    public var clientCount: Int { clients.count }

    /// Pending connections the kernel holds for the socket (listen(2)).
    public static let listenBacklog: Int32 = 512

    private let loop: RunLoop
    /// The clock and timers: the run loop's, or a test's ManualScheduler.
    private let timers: any TimerScheduling
    private let logger: Logger
    private let handler: (ArraySlice<UInt8>, Int) -> String
    private var listenFD: Int32 = -1
    /// The socket file as bound, so `close` removes it only if it is still ours.
    private var fileIdentity: (device: UInt64, inode: UInt64)?
    private var clients: [Int: Client] = [:]
    private var nextClientID = 1
    private var budget = LogBudget(burst: 20, window: .seconds(10))
    private var acceptRetry: TimerID?
    private var readBuffer = [UInt8](repeating: 0, count: 16 * 1024)

    /// A streaming client (`beginStream`) took everything that waited for it.
    public var onStreamDrained: ((Int) -> Void)?
    /// A client's connection closed, for whatever reason.
    public var onClientClosed: ((Int) -> Void)?

    /// Creates the socket at `path` with permissions `mode` and serves it on `loop`. A socket
    /// file nobody listens on (left by a process that died) is replaced; a live one, or a file
    /// that is not a socket, is refused. `handler` answers one request line (without its
    /// newline) from client N with one reply line (without its newline).
    public init(path: String, mode: UInt32 = 0o600, loop: RunLoop, timers: (any TimerScheduling)? = nil, logger: Logger,
                limits: Limits = Limits(), handler: @escaping (ArraySlice<UInt8>, Int) -> String) throws(ControlServerError) {
        self.path = path
        self.loop = loop
        self.timers = timers ?? loop
        self.logger = logger
        self.limits = limits
        self.handler = handler
        guard mode & ~0o777 == 0 else { throw ControlServerError("control socket mode \(String(mode, radix: 8)) is not a permission mode (0 to 0777)") }
        var address = try Self.address(path)
        try Self.clearStaleSocket(path)

        let fd = socket(AF_UNIX, CLINUX_SOCK_STREAM_NONBLOCK, 0)
        guard fd >= 0 else { throw Self.failure("socket(AF_UNIX)", path, errno) }
        // The file gets its mode from bind itself (the socket inode's mode, set with fchmod, less
        // the umask, set to exactly the bits not asked for): never a path-based chmod after
        // bind, which would follow a symbolic link planted at the path in between, and no
        // moment with wider permissions than asked.
        guard fchmod(fd, mode_t(mode)) == 0 else {
            let code = errno
            Glibc.close(fd)
            throw Self.failure("fchmod", path, code)
        }
        let oldMask = umask(mode_t(0o777 & ~mode))
        let bound = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        let bindErrno = errno
        umask(oldMask)
        guard bound == 0 else {
            Glibc.close(fd)
            throw Self.failure("bind", path, bindErrno)
        }
        // A backlog for a burst of connects (the kernel caps it at net.core.somaxconn); those
        // beyond the client table are told so or take an idle client's place (acceptClients).
        guard listen(fd, Self.listenBacklog) == 0 else {
            let code = errno
            Glibc.close(fd)
            unlink(path)
            throw Self.failure("listen", path, code)
        }
        var status = stat()
        if lstat(path, &status) == 0 { fileIdentity = (UInt64(status.st_dev), UInt64(status.st_ino)) }
        listenFD = fd
        do throws(RunLoopError) {
            try loop.register(fd: fd, events: .readable) { [weak self] _ in self?.acceptClients() }
        } catch {
            Glibc.close(fd)
            unlink(path)
            listenFD = -1
            throw ControlServerError("control socket \(path): \(error)")
        }
        isOpen = true
    }

    deinit { close() }

    /// Stops listening, closes every client, and removes the socket file if it is still the one
    /// bound here. Idempotent.
    public func close() {
        guard isOpen else { return }
        isOpen = false
        if let acceptRetry { timers.cancel(acceptRetry) }
        acceptRetry = nil
        loop.unregister(fd: listenFD)
        Glibc.close(listenFD)
        listenFD = -1
        for client in clients.values.sorted(by: { $0.id < $1.id }) { closeClient(client) }
        var status = stat()
        if let fileIdentity, lstat(path, &status) == 0, UInt64(status.st_dev) == fileIdentity.device,
           UInt64(status.st_ino) == fileIdentity.inode {
            unlink(path)
        }
    }

    // MARK: Setting up

    private static func address(_ path: String) throws(ControlServerError) -> sockaddr_un {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        let limit = MemoryLayout.size(ofValue: address.sun_path) - 1
        guard !bytes.isEmpty else { throw ControlServerError("--control needs a path") }
        guard !bytes.contains(0) else { throw ControlServerError("control socket path holds a NUL byte") }
        guard bytes.count <= limit else {
            throw ControlServerError("control socket path \(path) is \(bytes.count) bytes long; a Unix socket path is at most \(limit): choose a shorter one")
        }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (index, byte) in bytes.enumerated() { raw[index] = byte }
        }
        return address
    }

    /// Removes a socket file nobody listens on; refuses anything else that is there.
    private static func clearStaleSocket(_ path: String) throws(ControlServerError) {
        var status = stat()
        guard lstat(path, &status) == 0 else {
            let code = errno
            if code == ENOENT { return }
            throw failure("lstat", path, code)
        }
        guard status.st_mode & 0o170000 == 0o140000 else {
            throw ControlServerError("control socket \(path): a file that is not a socket is there; refusing to replace it (remove it, or choose another path)")
        }
        switch probe(path) {
        case 0:
            throw ControlServerError("control socket \(path): another process is serving it (a connection succeeded); stop it, or choose another path")
        case ECONNREFUSED:
            // Left by a process that is gone: nobody listens, so nobody loses it.
            guard unlink(path) == 0 || errno == ENOENT else { throw failure("unlink (stale socket)", path, errno) }
        case let code:
            throw failure("connect (checking whether something serves it)", path, code)
        }
    }

    /// Connects to the socket at `path` and hangs up: 0 when something listens, else the errno
    /// (ECONNREFUSED: nobody does). A full backlog (EAGAIN) counts as listening.
    private static func probe(_ path: String) -> Int32 {
        guard var address = try? address(path) else { return ENAMETOOLONG }
        let fd = socket(AF_UNIX, CLINUX_SOCK_STREAM_NONBLOCK, 0)
        guard fd >= 0 else { return errno }
        defer { Glibc.close(fd) }
        let result = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        if result == 0 { return 0 }
        let code = errno
        return code == EAGAIN || code == EINPROGRESS ? 0 : code
    }

    private static func failure(_ operation: String, _ path: String, _ code: Int32) -> ControlServerError {
        var hint = ""
        switch code {
        case ENOENT, ENOTDIR: hint = ": does its directory exist?"
        case EACCES, EPERM, EROFS: hint = ": choose a path in a directory you may write"
        case EADDRINUSE: hint = ": something else took the path meanwhile"
        default: break
        }
        return ControlServerError("control socket \(path): \(operation) failed: \(String(cString: strerror(code))) (errno \(code))\(hint)")
    }

    // MARK: Accepting

    private func acceptClients() {
        for _ in 0..<16 {
            let fd = accept(listenFD, nil, nil)
            if fd < 0 {
                let code = errno
                switch code {
                case EAGAIN, EWOULDBLOCK: return
                case EINTR, ECONNABORTED, EPROTO: continue
                default:
                    // EMFILE and the like: the listener stays readable, so stop watching it for
                    // a while instead of spinning.
                    logBudgeted(.warning, "control socket: accept failed: \(String(cString: strerror(code))) (errno \(code)); trying again in 250 ms")
                    loop.unregister(fd: listenFD)
                    acceptRetry = timers.schedule(after: .milliseconds(250)) { [weak self] in self?.resumeAccepting() }
                    return
                }
            }
            let flags = fcntl(fd, F_GETFL)
            guard flags >= 0, fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0 else {
                Glibc.close(fd)
                continue
            }
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            let id = nextClientID
            nextClientID += 1
            if clients.count >= limits.maxClients && !makeRoom(for: id) {
                let refusal = "control socket: \(limits.maxClients) clients already, each active within \(limits.idleBeforeYielding); try again when one closes"
                let line = Array((DeviceControl.errorReply(id: nil, refusal).encoded + "\n").utf8)
                _ = line.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, CLINUX_MSG_NOSIGNAL) }
                Glibc.close(fd)
                logBudgeted(.notice, "control client \(id) refused: \(limits.maxClients) clients already, none idle for \(limits.idleBeforeYielding)")
                continue
            }
            let client = Client(id: id, fd: fd, maxLineLength: limits.maxLineLength)
            client.lastActivity = timers.nowNanoseconds
            do throws(RunLoopError) {
                try loop.register(fd: fd, events: .readable) { [weak self, weak client] events in
                    guard let self, let client else { return }
                    self.handle(client, events)
                }
            } catch {
                Glibc.close(fd)
                logBudgeted(.warning, "control client \(id) refused: \(error)")
                continue
            }
            client.watching = .readable
            clients[id] = client
            logger.debug("control client \(id) connected", metadata: .event(.controlCommand))
        }
    }

    /// With every place taken: closes the client idle longest so `newcomer` can have its place,
    /// if that one has been idle for `idleBeforeYielding`. Returns whether a place is free.
    private func makeRoom(for newcomer: Int) -> Bool {
        let now = timers.nowNanoseconds
        guard let idlest = clients.values.min(by: { ($0.lastActivity, $0.id) < ($1.lastActivity, $1.id) }) else { return true }
        let idle = now &- idlest.lastActivity
        guard idle >= limits.idleBeforeYielding.nanoseconds else { return false }
        let seconds = Self.seconds(idle)
        let unfinished = idlest.input.pendingCount > 0 && !idlest.backlog ? " (\(idlest.input.pendingCount) bytes of an unfinished line, not run)" : ""
        tell(idlest, "idle for \(seconds) with \(limits.maxClients) clients connected; closing this connection for a new client")
        drop(idlest, "idle for \(seconds) with \(limits.maxClients) clients connected\(unfinished); gave its place to client \(newcomer)")
        return clients.count < limits.maxClients
    }

    /// "1.5 s": tenths are enough for a log line.
    private static func seconds(_ nanoseconds: UInt64) -> String {
        let tenths = nanoseconds / 100_000_000
        return "\(tenths / 10).\(tenths % 10) s"
    }

    private func resumeAccepting() {
        acceptRetry = nil
        guard isOpen else { return }
        do throws(RunLoopError) {
            try loop.register(fd: listenFD, events: .readable) { [weak self] _ in self?.acceptClients() }
        } catch {
            logBudgeted(.warning, "control socket: cannot watch for clients again: \(error); trying again in 1 s")
            acceptRetry = timers.schedule(after: .seconds(1)) { [weak self] in self?.resumeAccepting() }
        }
    }

    // MARK: Clients

    private final class Client {
        let id: Int
        var fd: Int32
        var input: LineBuffer
        var output: [UInt8] = []
        var outputHead = 0
        /// The client shut down its side: answer what it sent, then close.
        var inputClosed = false
        /// Complete lines wait in `input`, unanswered because replies reached the high water mark.
        var backlog = false
        var watching: IOEvents = []
        var stallTimer: TimerID?
        /// When the client last took some of its replies (or when some began waiting).
        var lastProgress: UInt64 = 0
        /// When the client last sent bytes or took replies (or connected): who gives way first.
        var lastActivity: UInt64 = 0
        /// When the unfinished line now waiting in `input` began, and its timer.
        var lineStartedAt: UInt64?
        var lineTimer: TimerID?
        /// A watcher: its output is a stream of events (`stream`); what it sends is ignored.
        var streaming = false

        init(id: Int, fd: Int32, maxLineLength: Int) {
            self.id = id
            self.fd = fd
            input = LineBuffer(maxLineLength: maxLineLength)
        }

        var pendingOutput: Int { output.count - outputHead }
        var isOpen: Bool { fd >= 0 }
    }

    private func handle(_ client: Client, _ events: IOEvents) {
        // A watcher that shut down its sending side still watches; gone both ways, it is closed.
        if client.streaming && client.inputClosed && !events.isDisjoint(with: [.hangup, .error]) {
            drop(client, "watcher hung up", quiet: true)
            return
        }
        if events.contains(.writable) || (!events.isDisjoint(with: [.hangup, .error]) && client.pendingOutput > 0) {
            let waited = client.pendingOutput > 0
            flush(client)
            guard client.isOpen else { return }
            if waited, client.streaming, client.pendingOutput == 0 {
                onStreamDrained?(client.id)
                guard client.isOpen else { return }
            }
        }
        if client.pendingOutput >= limits.outputHighWater {
            // Not reading while replies wait: a hangup now means nobody will take them.
            if !events.isDisjoint(with: [.hangup, .error]) {
                drop(client, "hung up with \(client.pendingOutput) bytes of replies unread", quiet: true)
            }
            return
        }
        // Lines already received are answered before anything more is read, so what waits in
        // the input stays bounded however large the replies are.
        if client.backlog {
            serve(client)
            guard client.isOpen, !client.backlog else { return }
        }
        if !client.inputClosed && !events.isDisjoint(with: [.readable, .hangup, .error]) {
            read(client)
            guard client.isOpen else { return }
        }
        serve(client)
    }

    private func read(_ client: Client) {
        for _ in 0..<4 {
            let count = readBuffer.withUnsafeMutableBytes { Glibc.read(client.fd, $0.baseAddress, $0.count) }
            if count > 0 {
                client.lastActivity = timers.nowNanoseconds
                client.input.append(contentsOf: readBuffer[0..<count])
                if count < readBuffer.count { return }
                continue
            }
            if count == 0 {
                client.inputClosed = true
                return
            }
            let code = errno
            switch code {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK: return
            default:
                drop(client, "read failed: \(String(cString: strerror(code)))", quiet: code == ECONNRESET)
                return
            }
        }
    }

    /// Answers the complete lines received, while the replies waiting stay under the high
    /// water mark; then watches for what is needed next.
    private func serve(_ client: Client) {
        var exhausted = false
        var answered = false
        while client.isOpen && client.pendingOutput < limits.outputHighWater {
            guard let next = client.input.nextLine() else {
                exhausted = true
                break
            }
            switch next {
            case .tooLong:
                // Told in one best-effort write after what was already waiting, then closed.
                tell(client, "line longer than \(limits.maxLineLength) bytes without a newline; closing this connection")
                drop(client, "sent more than \(limits.maxLineLength) bytes without a newline")
                return
            case .line(let bytes):
                answered = true
                // A watcher's connection carries events only: what it sends is not run.
                if client.streaming { continue }
                guard bytes.contains(where: { $0 != UInt8(ascii: " ") && $0 != UInt8(ascii: "\t") }) else { continue }
                enqueue(client, handler(bytes, client.id))
            }
        }
        guard client.isOpen else { return }
        client.backlog = !exhausted
        watchUnfinishedLine(client, restart: answered)
        if client.inputClosed && exhausted && !client.streaming {
            noteUnfinishedLine(client)
            if client.pendingOutput == 0 {
                closeClient(client)
                logger.debug("control client \(client.id) closed", metadata: .event(.controlCommand))
                return
            }
        }
        updateInterest(client)
    }

    /// Starts the unfinished-line timer when part of a line waits for its newline (`restart`: a
    /// line ended since, so the part waiting began after it), and stops it when none does.
    private func watchUnfinishedLine(_ client: Client, restart: Bool) {
        guard client.input.pendingCount > 0, !client.backlog, !client.inputClosed else {
            client.lineStartedAt = nil
            if let timer = client.lineTimer { timers.cancel(timer) }
            client.lineTimer = nil
            return
        }
        if client.lineStartedAt == nil || restart { client.lineStartedAt = timers.nowNanoseconds }
        scheduleLineCheck(client)
    }

    private func scheduleLineCheck(_ client: Client, after delay: Duration? = nil) {
        guard client.lineTimer == nil else { return }
        client.lineTimer = timers.schedule(after: delay ?? limits.unfinishedLineTimeout) { [weak self, weak client] in
            guard let self, let client, client.isOpen else { return }
            client.lineTimer = nil
            guard let started = client.lineStartedAt else { return }
            let waited = self.timers.nowNanoseconds &- started
            let timeout = self.limits.unfinishedLineTimeout.nanoseconds
            guard waited >= timeout else {
                self.scheduleLineCheck(client, after: .nanoseconds(Int64(timeout - waited)))
                return
            }
            let pending = client.input.pendingCount
            self.tell(client, "an unfinished line (no newline) for \(self.limits.unfinishedLineTimeout); closing this connection")
            self.drop(client, "sent \(pending) bytes of a line without its newline for \(self.limits.unfinishedLineTimeout); that line is not run")
        }
    }

    /// One best-effort error line after what already waits, for a client about to be closed.
    private func tell(_ client: Client, _ message: String) {
        client.output.append(contentsOf: (DeviceControl.errorReply(id: nil, message).encoded + "\n").utf8)
        let unsent = client.output[client.outputHead...]
        _ = unsent.withUnsafeBytes { send(client.fd, $0.baseAddress, $0.count, CLINUX_MSG_NOSIGNAL) }
    }

    private func updateInterest(_ client: Client) {
        var wanted: IOEvents = []
        if !client.inputClosed && !client.backlog && client.pendingOutput < limits.outputHighWater { wanted.insert(.readable) }
        if client.pendingOutput > 0 { wanted.insert(.writable) }
        guard wanted != client.watching else { return }
        do throws(RunLoopError) {
            try loop.modify(fd: client.fd, events: wanted)
            client.watching = wanted
        } catch {
            drop(client, "cannot watch it: \(error)")
        }
    }

    // MARK: Streams (watchers)

    /// What became of a line for a streaming client.
    public enum StreamResult: Equatable {
        case queued
        /// No room in its queue (`Limits.streamQueueBytes`, less `reserve`): not queued.
        case full
        /// The client is gone.
        case gone
    }

    /// Client `id` becomes a stream: no more requests are run for it, and it is never dropped
    /// for not reading. False when it is gone.
    @discardableResult
    public func beginStream(client id: Int) -> Bool {
        guard let client = clients[id], client.isOpen else { return false }
        client.streaming = true
        if let timer = client.stallTimer { timers.cancel(timer) }
        client.stallTimer = nil
        return true
    }

    /// One line (without its newline) for streaming client `id`, when it fits in its queue
    /// with `reserve` bytes to spare; sent at once as far as the socket takes it.
    public func stream(_ line: String, to id: Int, reserve: Int) -> StreamResult {
        guard let client = clients[id], client.isOpen, client.streaming else { return .gone }
        let size = line.utf8.count + 1
        guard client.pendingOutput + size + reserve <= limits.streamQueueBytes else { return .full }
        client.output.append(contentsOf: line.utf8)
        client.output.append(UInt8(ascii: "\n"))
        flush(client)
        guard client.isOpen else { return .gone }
        updateInterest(client)
        return client.isOpen ? .queued : .gone
    }

    /// Bytes waiting for client `id` (0 when it is gone).
    public func pendingOutput(client id: Int) -> Int { clients[id]?.pendingOutput ?? 0 }

    // MARK: Output

    private func enqueue(_ client: Client, _ reply: String) {
        let size = reply.utf8.count + 1
        if client.pendingOutput + size > limits.outputLimit {
            drop(client, "\(client.pendingOutput) bytes of replies unread and \(size) more to send")
            return
        }
        if client.pendingOutput == 0 {
            client.lastProgress = timers.nowNanoseconds
            scheduleStallCheck(client)
        }
        client.output.append(contentsOf: reply.utf8)
        client.output.append(UInt8(ascii: "\n"))
        flush(client)
    }

    private func flush(_ client: Client) {
        var progressed = false
        writing: while client.isOpen && client.outputHead < client.output.count {
            let written = client.output[client.outputHead...].withUnsafeBytes { raw in
                send(client.fd, raw.baseAddress, raw.count, CLINUX_MSG_NOSIGNAL)
            }
            if written > 0 {
                client.outputHead += written
                progressed = true
                continue
            }
            if written == 0 { break writing }  // nothing taken: wait for EPOLLOUT
            let code = errno
            switch code {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK: break writing
            default:
                drop(client, "went away before reading its replies (\(String(cString: strerror(code))))",
                     quiet: code == EPIPE || code == ECONNRESET)
                return
            }
        }
        guard client.isOpen else { return }
        if progressed {
            client.lastProgress = timers.nowNanoseconds
            client.lastActivity = client.lastProgress
        }
        if client.outputHead == client.output.count {
            client.output.removeAll(keepingCapacity: client.output.capacity <= 64 * 1024)
            client.outputHead = 0
        } else if client.outputHead >= 64 * 1024 {
            client.output.removeSubrange(0..<client.outputHead)
            client.outputHead = 0
        }
    }

    private func scheduleStallCheck(_ client: Client, after delay: Duration? = nil) {
        guard client.stallTimer == nil else { return }
        client.stallTimer = timers.schedule(after: delay ?? limits.stallTimeout) { [weak self, weak client] in
            guard let self, let client, client.isOpen else { return }
            client.stallTimer = nil
            guard client.pendingOutput > 0, !client.streaming else { return }
            let idle = self.timers.nowNanoseconds &- client.lastProgress
            let timeout = self.limits.stallTimeout.nanoseconds
            if idle >= timeout {
                self.drop(client, "took none of its \(client.pendingOutput) bytes of replies for \(self.limits.stallTimeout)")
            } else {
                self.scheduleStallCheck(client, after: .nanoseconds(Int64(timeout - idle)))
            }
        }
    }

    // MARK: Closing

    /// Closes a client the server gives up on, saying why (debug only when it simply left).
    private func drop(_ client: Client, _ reason: String, quiet: Bool = false) {
        guard client.isOpen else { return }
        // Logged before the close, so the line is there by the time the client sees the end.
        if quiet {
            noteUnfinishedLine(client)
            logger.debug("control client \(client.id) closed: \(reason)", metadata: .event(.controlCommand))
        } else {
            logBudgeted(.notice, "control client \(client.id) dropped: \(reason)")
        }
        closeClient(client)
    }

    /// A client that leaves in the middle of a line: that line is not run, and the log says so.
    private func noteUnfinishedLine(_ client: Client) {
        let pending = client.input.pendingCount
        guard pending > 0, !client.input.overflowed else { return }
        if client.backlog {
            logBudgeted(.notice, "control client \(client.id) hung up with \(pending) bytes of requests not yet run; they are not run")
        } else {
            logBudgeted(.notice, "control client \(client.id) hung up in the middle of a \(pending)-byte line; that line is not run")
        }
    }

    private func closeClient(_ client: Client) {
        guard client.isOpen else { return }
        if let timer = client.stallTimer { timers.cancel(timer) }
        client.stallTimer = nil
        if let timer = client.lineTimer { timers.cancel(timer) }
        client.lineTimer = nil
        loop.unregister(fd: client.fd)
        Glibc.close(client.fd)
        client.fd = -1
        client.output = []
        client.outputHead = 0
        clients[client.id] = nil
        onClientClosed?(client.id)
    }

    private func logBudgeted(_ level: Logger.Level, _ message: String) {
        guard logger.logLevel <= level else { return }
        guard let leftOut = budget.take(now: timers.nowNanoseconds, for: logger) else { return }
        logger.event(.controlCommand, level, "\(message)\(LogBudget.note(leftOut))")
    }
}
