import BlemuCore
import CLinux

#if canImport(Glibc)
import Glibc
#endif

/// Readiness of a file descriptor, as the run loop reports it to a handler.
public struct IOEvents: OptionSet, Sendable, CustomStringConvertible {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }

    public static let readable = IOEvents(rawValue: 1 << 0)
    public static let writable = IOEvents(rawValue: 1 << 1)
    /// Always reported, whether asked for or not (EPOLLERR).
    public static let error = IOEvents(rawValue: 1 << 2)
    /// Always reported, whether asked for or not (EPOLLHUP, or EPOLLRDHUP: the peer shut down).
    public static let hangup = IOEvents(rawValue: 1 << 3)

    var epollMask: UInt32 {
        var mask: UInt32 = 0
        if contains(.readable) { mask |= CLINUX_EPOLLIN }
        if contains(.writable) { mask |= CLINUX_EPOLLOUT }
        // EPOLLERR and EPOLLHUP are always reported; asking for them is harmless.
        return mask
    }

    init(epoll mask: UInt32) {
        var events: IOEvents = []
        if mask & CLINUX_EPOLLIN != 0 { events.insert(.readable) }
        if mask & CLINUX_EPOLLOUT != 0 { events.insert(.writable) }
        if mask & CLINUX_EPOLLERR != 0 { events.insert(.error) }
        if mask & (CLINUX_EPOLLHUP | CLINUX_EPOLLRDHUP) != 0 { events.insert(.hangup) }
        self = events
    }

    public var description: String {
        var names: [String] = []
        if contains(.readable) { names.append("readable") }
        if contains(.writable) { names.append("writable") }
        if contains(.error) { names.append("error") }
        if contains(.hangup) { names.append("hangup") }
        return "[" + names.joined(separator: ", ") + "]"
    }
}

/// A system call of the run loop failed.
public struct RunLoopError: Error, CustomStringConvertible, Equatable, Sendable {
    /// What the loop was doing, e.g. `epoll_ctl(ADD, fd 7)`.
    public var operation: String
    public var errnoCode: Int32

    public init(_ operation: String, errnoCode: Int32) {
        self.operation = operation
        self.errnoCode = errnoCode
    }

    public var description: String {
        "run loop: \(operation) failed: \(String(cString: strerror(errnoCode))) (errno \(errnoCode))"
    }
}

/// The single-threaded event loop everything runs on: file descriptors through epoll, timers
/// through one timerfd armed to the earliest deadline of a min-heap, signals through a signalfd.
///
/// Every handler runs on the thread that calls `run()`/`runOnce(timeout:)`. Handlers may
/// register, modify and unregister descriptors, schedule and cancel timers, and call `stop()`.
/// They must not call `run()` or `runOnce(timeout:)` themselves.
public final class RunLoop: TimerScheduling {
    private final class Registration {
        let fd: Int32
        let token: UInt64
        var events: IOEvents
        let handler: (IOEvents) -> Void
        init(fd: Int32, token: UInt64, events: IOEvents, handler: @escaping (IOEvents) -> Void) {
            self.fd = fd
            self.token = token
            self.events = events
            self.handler = handler
        }
    }

    // Tokens identify a registration in epoll_data, so an event queued for a descriptor that was
    // unregistered (or closed and reused for another registration) in the same batch finds no
    // handler instead of the wrong one. Small tokens are the loop's own descriptors.
    private static let timerToken: UInt64 = 1
    private static let signalToken: UInt64 = 2
    private var nextToken: UInt64 = 16

    private let epollFD: Int32
    private let timerFD: Int32
    private var signalFD: Int32 = -1

    private var registrationsByFD: [Int32: Registration] = [:]
    private var registrationsByToken: [UInt64: Registration] = [:]

    private var timerHeap = TimerHeap()
    /// A closure kept in a struct: stored in a Dictionary as it is, where a bare function type
    /// would be wrapped in a new reabstraction thunk (a heap allocation) at every schedule.
    private struct TimerAction { let run: () -> Void }
    private var timerActions: [UInt64: TimerAction] = [:]
    private var nextTimerID: UInt64 = 1
    /// The deadline the timerfd is armed to, 0 when disarmed.
    private var armedDeadline: UInt64 = 0

    private var signalHandlers: [Int32: (Int32) -> Void] = [:]
    private var stopRequested = false
    private var events = [clinux_epoll_event](repeating: clinux_epoll_event(), count: Int(CLINUX_EPOLL_MAX_EVENTS))

    public init() throws(RunLoopError) {
        let epoll = clinux_epoll_create()
        guard epoll >= 0 else { throw RunLoopError("epoll_create1", errnoCode: errno) }
        let timer = clinux_timerfd_create()
        guard timer >= 0 else {
            let code = errno
            Glibc.close(epoll)
            throw RunLoopError("timerfd_create", errnoCode: code)
        }
        guard clinux_epoll_add(epoll, timer, CLINUX_EPOLLIN, Self.timerToken) == 0 else {
            let code = errno
            Glibc.close(timer)
            Glibc.close(epoll)
            throw RunLoopError("epoll_ctl(ADD, timerfd)", errnoCode: code)
        }
        epollFD = epoll
        timerFD = timer
    }

    deinit {
        if signalFD >= 0 { Glibc.close(signalFD) }
        Glibc.close(timerFD)
        Glibc.close(epollFD)
    }

    // MARK: File descriptors

    /// Watches `fd` for `events` (`.error` and `.hangup` are always reported). The loop does not
    /// own `fd`: unregister it before closing it.
    public func register(fd: Int32, events: IOEvents, _ handler: @escaping (IOEvents) -> Void) throws(RunLoopError) {
        guard registrationsByFD[fd] == nil else {
            throw RunLoopError("register fd \(fd) (already registered)", errnoCode: EEXIST)
        }
        let token = nextToken
        nextToken &+= 1
        guard clinux_epoll_add(epollFD, fd, events.epollMask, token) == 0 else {
            throw RunLoopError("epoll_ctl(ADD, fd \(fd))", errnoCode: errno)
        }
        let registration = Registration(fd: fd, token: token, events: events, handler: handler)
        registrationsByFD[fd] = registration
        registrationsByToken[token] = registration
    }

    /// Changes the events watched on a registered `fd`.
    public func modify(fd: Int32, events: IOEvents) throws(RunLoopError) {
        guard let registration = registrationsByFD[fd] else {
            throw RunLoopError("modify fd \(fd) (not registered)", errnoCode: ENOENT)
        }
        guard registration.events != events else { return }
        guard clinux_epoll_modify(epollFD, fd, events.epollMask, registration.token) == 0 else {
            throw RunLoopError("epoll_ctl(MOD, fd \(fd))", errnoCode: errno)
        }
        registration.events = events
    }

    /// Stops watching `fd`; its handler is never called again, not even for events already
    /// collected in the batch being dispatched. Unknown descriptors are ignored.
    public func unregister(fd: Int32) {
        guard let registration = registrationsByFD.removeValue(forKey: fd) else { return }
        registrationsByToken[registration.token] = nil
        // Fails only when fd was closed already, which removed it from epoll anyway.
        _ = clinux_epoll_remove(epollFD, fd)
    }

    public func isRegistered(fd: Int32) -> Bool { registrationsByFD[fd] != nil }

    /// How many descriptors are registered (the loop's own not counted).
    public var registeredCount: Int { registrationsByFD.count }

    // MARK: Reading

    /// The buffer every descriptor of this loop reads into (Sources/Transport): reads happen one
    /// at a time on the loop's thread and what a read brought is consumed (framed, copied)
    /// before the next, so one buffer serves every controller instead of one each (16 KiB a
    /// device on a board). A reader that keeps a slice of it gets a copy on the next read
    /// (copy-on-write): nothing is ever overwritten under it.
    public final class ReadBuffer {
        public var bytes: [UInt8] = []
    }
    private let sharedReadBuffer = ReadBuffer()

    /// The loop's read buffer, grown to at least `count` bytes (it never shrinks).
    public func readBuffer(atLeast count: Int) -> ReadBuffer {
        if sharedReadBuffer.bytes.count < count {
            sharedReadBuffer.bytes = [UInt8](repeating: 0, count: count)
        }
        return sharedReadBuffer
    }

    // MARK: Timers

    public var nowNanoseconds: UInt64 { clinux_monotonic_ns() }

    @discardableResult
    public func schedule(after delay: Duration, _ action: @escaping () -> Void) -> TimerID {
        let id = nextTimerID
        nextTimerID &+= 1
        let now = nowNanoseconds
        let (sum, overflow) = now.addingReportingOverflow(delay.nanoseconds)
        timerHeap.push(TimerHeap.Entry(deadline: overflow ? UInt64.max : sum, id: id))
        timerActions[id] = TimerAction(run: action)
        return TimerID(raw: id)
    }

    /// O(1): the heap entry stays behind as a tombstone, dropped when it reaches the top or
    /// when tombstones outnumber live timers.
    public func cancel(_ id: TimerID) {
        guard timerActions.removeValue(forKey: id.raw) != nil else { return }
        if timerHeap.count > 64 && timerHeap.count > 2 * timerActions.count {
            timerHeap.removeAll { timerActions[$0.id] == nil }
        }
    }

    /// Timers scheduled and neither fired nor cancelled.
    public var pendingTimerCount: Int { timerActions.count }

    // MARK: Signals

    /// Delivers `signals` (e.g. SIGINT, SIGTERM) to `handler` on the loop instead of their
    /// default action: they are blocked for this thread and read from a signalfd. Call it
    /// before starting any thread, so that no other thread receives them.
    public func handleSignals(_ signals: [Int32], _ handler: @escaping (Int32) -> Void) throws(RunLoopError) {
        for signal in signals { signalHandlers[signal] = handler }
        let all = Array(signalHandlers.keys)
        let blocked = all.withUnsafeBufferPointer { clinux_block_signals($0.baseAddress, Int32($0.count)) }
        guard blocked == 0 else { throw RunLoopError("pthread_sigmask(SIG_BLOCK)", errnoCode: errno) }
        let fd = all.withUnsafeBufferPointer { clinux_signalfd(signalFD, $0.baseAddress, Int32($0.count)) }
        guard fd >= 0 else { throw RunLoopError("signalfd", errnoCode: errno) }
        if signalFD < 0 {
            guard clinux_epoll_add(epollFD, fd, CLINUX_EPOLLIN, Self.signalToken) == 0 else {
                let code = errno
                Glibc.close(fd)
                throw RunLoopError("epoll_ctl(ADD, signalfd)", errnoCode: code)
            }
            signalFD = fd
        }
    }

    // MARK: Running

    /// Runs until `stop()`.
    public func run() {
        stopRequested = false
        while !stopRequested {
            runOnce(timeout: nil)
        }
    }

    /// Makes `run()` return once the handler that called it returns.
    public func stop() { stopRequested = true }

    public var isStopRequested: Bool { stopRequested }

    /// Waits up to `timeout` (nil: without limit) for one batch of events and dispatches it:
    /// ready descriptors, due timers, pending signals. Returns how many handlers ran.
    @discardableResult
    public func runOnce(timeout: Duration? = nil) -> Int {
        armTimerFD()
        let timeoutMS: Int32
        if let timeout {
            // Round up, so a short timeout does not become a busy loop of zero-millisecond waits.
            let ms = (timeout.nanoseconds + 999_999) / 1_000_000
            timeoutMS = Int32(clamping: ms)
        } else {
            timeoutMS = -1
        }
        let count = events.withUnsafeMutableBufferPointer { buffer in
            clinux_epoll_wait(epollFD, buffer.baseAddress, Int32(buffer.count), timeoutMS)
        }
        guard count > 0 else { return 0 }  // 0: timed out; -1: EINTR (or EBADF, which cannot be)

        var ran = 0
        for index in 0..<Int(count) {
            let event = events[index]
            switch event.token {
            case Self.timerToken:
                ran += fireDueTimers()
            case Self.signalToken:
                ran += dispatchSignals()
            default:
                // Looked up now, not before the batch: an earlier handler may have unregistered it.
                guard let registration = registrationsByToken[event.token] else { continue }
                registration.handler(IOEvents(epoll: event.events))
                ran += 1
            }
        }
        return ran
    }

    private func armTimerFD() {
        while let top = timerHeap.peek, timerActions[top.id] == nil { _ = timerHeap.pop() }
        // 0 disarms, so a live deadline is at least 1 (CLOCK_MONOTONIC is far past 0 anyway).
        let deadline = timerHeap.peek.map { max($0.deadline, 1) } ?? 0
        guard deadline != armedDeadline else { return }
        // Cannot fail for a valid timerfd and an absolute time; if it did, the next loop turn retries.
        if clinux_timerfd_arm(timerFD, deadline) == 0 { armedDeadline = deadline }
    }

    private func fireDueTimers() -> Int {
        _ = clinux_timerfd_drain(timerFD)
        armedDeadline = 0  // a one-shot absolute timer that expired is disarmed
        let now = nowNanoseconds
        // Timers scheduled by the actions below wait for the next turn, even with a zero delay,
        // so a timer that reschedules itself cannot starve the descriptors.
        let firstLaterID = nextTimerID
        var fired = 0
        while let top = timerHeap.peek, top.deadline <= now {
            if top.id >= firstLaterID { break }
            _ = timerHeap.pop()
            guard let action = timerActions.removeValue(forKey: top.id) else { continue }
            action.run()
            fired += 1
        }
        return fired
    }

    private func dispatchSignals() -> Int {
        var ran = 0
        while true {
            let signal = clinux_signalfd_read(signalFD)
            guard signal > 0 else { return ran }
            if let handler = signalHandlers[signal] {
                handler(signal)
                ran += 1
            }
        }
    }
}

/// A binary min-heap of timer deadlines, ordered by (deadline, id) so equal deadlines fire in
/// the order they were scheduled.
struct TimerHeap {
    struct Entry {
        let deadline: UInt64
        let id: UInt64
        func precedes(_ other: Entry) -> Bool {
            deadline != other.deadline ? deadline < other.deadline : id < other.id
        }
    }

    private var entries: [Entry] = []

    var count: Int { entries.count }
    var isEmpty: Bool { entries.isEmpty }
    var peek: Entry? { entries.first }

    mutating func push(_ entry: Entry) {
        entries.append(entry)
        siftUp(entries.count - 1)
    }

    mutating func pop() -> Entry? {
        guard let first = entries.first else { return nil }
        let last = entries.removeLast()
        if !entries.isEmpty {
            entries[0] = last
            siftDown(0)
        }
        return first
    }

    mutating func removeAll(where shouldRemove: (Entry) -> Bool) {
        entries.removeAll(where: shouldRemove)
        // Floyd's heapify: O(n).
        var index = entries.count / 2
        while index > 0 {
            index -= 1
            siftDown(index)
        }
    }

    private mutating func siftUp(_ start: Int) {
        var child = start
        while child > 0 {
            let parent = (child - 1) / 2
            guard entries[child].precedes(entries[parent]) else { return }
            entries.swapAt(child, parent)
            child = parent
        }
    }

    private mutating func siftDown(_ start: Int) {
        var parent = start
        while true {
            let left = 2 * parent + 1
            guard left < entries.count else { return }
            var smallest = left
            let right = left + 1
            if right < entries.count && entries[right].precedes(entries[left]) { smallest = right }
            guard entries[smallest].precedes(entries[parent]) else { return }
            entries.swapAt(smallest, parent)
            parent = smallest
        }
    }
}
