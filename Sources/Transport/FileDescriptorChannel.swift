import BlemuCore
import BlemuHCI
import BlemuRunLoop
import CLinux

#if canImport(Glibc)
import Glibc
#endif

/// What a `FileDescriptorChannel` hands to the transport that owns it. Called on the loop.
protocol FileDescriptorChannelOwner: AnyObject {
    /// EPOLLOUT: write what waits, and `watchWritable(false)` once nothing does.
    func channelIsWritable()
    /// One read's bytes, valid during the call. The owner may close the channel meanwhile.
    func channelReceived(_ bytes: ArraySlice<UInt8>)
    /// The descriptor is closed, by `close()` or a failure: drop whatever waits to be written.
    func channelDidClose()
}

/// The descriptor side that every controller transport shares: one nonblocking fd it owns,
/// registered in the loop, EPOLLOUT watched only while output waits, reads bounded per wakeup,
/// EINTR retried and EAGAIN waited out, and the end reported through `onClosed` at most once.
/// What the bytes mean (a stream to frame, one packet per datagram) and how output waits is
/// the owner's business.
final class FileDescriptorChannel {
    /// How the fd is written, and what its errors mean.
    enum Medium {
        /// A TCP or Unix stream socket: send/sendmsg with MSG_NOSIGNAL, so a closed peer gives
        /// EPIPE instead of a SIGPIPE that would end the process.
        case streamSocket
        /// A UART: write/writev (MSG_NOSIGNAL is for sockets only, and a tty raises no SIGPIPE).
        case terminal
        /// The HCI user channel: one packet per read and per write; a full kernel queue says
        /// ENOBUFS, which passes like EAGAIN.
        case hciUserChannel

        /// A short read of a stream means the kernel has nothing more; a datagram read is short anyway.
        fileprivate var shortReadDrains: Bool { self != .hciUserChannel }
    }

    enum WriteResult: Equatable {
        /// How many bytes the kernel took, possibly fewer than offered (0 included).
        case written(Int)
        /// Nothing taken: try again on EPOLLOUT.
        case wouldBlock
        case failed(errno: Int32)
    }

    let spec: ControllerSpec
    let medium: Medium
    /// Reported at most once, when the controller side goes away; never because of `close()`.
    var onClosed: ((TransportError) -> Void)?
    weak var owner: (any FileDescriptorChannelOwner)?
    private(set) var isOpen = true

    private let loop: RunLoop
    private var fd: Int32
    /// The run loop's one read buffer (`RunLoop.readBuffer`), of which a read uses `readSize` bytes.
    private let readBuffer: RunLoop.ReadBuffer
    private let readSize: Int
    private let readsPerWakeup: Int
    private var watchingWritable = false
    private var pendingFailure: TimerID?
    /// A TCP socket: quick acknowledgements are asked for again after a read once output went out.
    private let isTCP: Bool
    /// Bytes were written since quick acknowledgements were last asked for: the kernel may be
    /// delaying its ACKs again (`requestQuickAcknowledgementsIfSent`).
    private var wroteSinceQuickAcknowledgements = true
    /// How many times quick acknowledgements were asked for (a system call each).
    private(set) var quickAcknowledgementRequests = 0

    /// Takes ownership of `fd` (closed on failure too): makes it nonblocking and registers it
    /// for reading. Set `owner` before the loop next runs.
    init(adopting fd: Int32, spec: ControllerSpec, medium: Medium, loop: RunLoop, readBufferSize: Int,
         readsPerWakeup: Int) throws(TransportError) {
        self.fd = fd
        self.spec = spec
        self.medium = medium
        self.loop = loop
        self.readSize = max(readBufferSize, 1)
        self.readBuffer = loop.readBuffer(atLeast: readSize)
        self.readsPerWakeup = max(readsPerWakeup, 1)
        self.isTCP = medium == .streamSocket && Self.isTCPSocket(fd)
        let flags = fcntl(fd, F_GETFL)
        guard flags >= 0, fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0 else {
            let code = errno
            closeFD(fd)
            throw .setup(spec, "fcntl(O_NONBLOCK)", code)
        }
        do throws(RunLoopError) {
            try loop.register(fd: fd, events: .readable) { [weak self] events in self?.handle(events) }
        } catch {
            closeFD(fd)
            throw .setup(spec, "registering with the run loop", error.errnoCode)
        }
    }

    /// A transport dropped without `close()` still leaves the loop and frees its fd.
    deinit {
        if isOpen {
            loop.unregister(fd: fd)
            closeFD(fd)
        }
        if let pendingFailure { loop.cancel(pendingFailure) }
    }

    // MARK: Output

    /// One sendmsg / writev of the indicator byte and `body`, retried on EINTR.
    func write(_ type: H4PacketType, _ body: ArraySlice<UInt8>) -> WriteResult {
        var indicator = type.rawValue
        return withUnsafeMutablePointer(to: &indicator) { indicatorPointer in
            body.withUnsafeBufferPointer { bodyBuffer in
                withUnsafeTemporaryAllocation(of: iovec.self, capacity: 2) { vectors in
                    vectors[0] = iovec(iov_base: UnsafeMutableRawPointer(indicatorPointer), iov_len: 1)
                    vectors[1] = iovec(iov_base: UnsafeMutableRawPointer(mutating: bodyBuffer.baseAddress),
                                       iov_len: bodyBuffer.count)
                    return retryingInterrupts { fd in
                        switch medium {
                        case .streamSocket, .hciUserChannel:
                            var message = msghdr()
                            message.msg_iov = vectors.baseAddress
                            message.msg_iovlen = 2
                            return sendmsg(fd, &message, CLINUX_MSG_NOSIGNAL)
                        case .terminal:
                            return writev(fd, vectors.baseAddress, 2)
                        }
                    }
                }
            }
        }
    }

    /// One send / write of `bytes`, retried on EINTR.
    func write(_ bytes: ArraySlice<UInt8>) -> WriteResult {
        bytes.withUnsafeBytes { raw in
            retryingInterrupts { fd in
                switch medium {
                case .streamSocket, .hciUserChannel: Glibc.send(fd, raw.baseAddress, raw.count, CLINUX_MSG_NOSIGNAL)
                case .terminal: Glibc.write(fd, raw.baseAddress, raw.count)
                }
            }
        }
    }

    private func retryingInterrupts(_ attempt: (Int32) -> Int) -> WriteResult {
        guard isOpen else { return .failed(errno: EBADF) }
        while true {
            let written = attempt(fd)
            if written >= 0 {
                if written > 0 { wroteSinceQuickAcknowledgements = true }
                return .written(written)
            }
            let code = errno
            switch code {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK: return .wouldBlock
            case ENOBUFS where medium == .hciUserChannel: return .wouldBlock
            default: return .failed(errno: code)
            }
        }
    }

    /// Asks for EPOLLOUT while output waits, and stops asking once it is gone (level-triggered
    /// epoll would otherwise wake the loop for nothing on every turn).
    func watchWritable(_ on: Bool) {
        guard on != watchingWritable, isOpen else { return }
        do throws(RunLoopError) {
            try loop.modify(fd: fd, events: on ? [.readable, .writable] : .readable)
            watchingWritable = on
        } catch {
            fail(.setup(spec, "epoll_ctl(MOD)", error.errnoCode), deferred: true)
        }
    }

    // MARK: Input

    /// Output first, so a flush that fails ends the channel before it reads on.
    private func handle(_ events: IOEvents) {
        if events.contains(.writable) {
            owner?.channelIsWritable()
            guard isOpen else { return }
        }
        guard !events.isDisjoint(with: [.readable, .hangup, .error]) else { return }
        readAvailable(hangup: !events.isDisjoint(with: [.hangup, .error]))
    }

    private func readAvailable(hangup: Bool) {
        // A few reads per wakeup: enough to drain a burst, bounded so one busy link cannot
        // starve the rest of the loop (epoll is level-triggered; the rest comes next turn).
        for _ in 0..<readsPerWakeup {
            let count = readBuffer.bytes.withUnsafeMutableBytes { raw in read(fd, raw.baseAddress, readSize) }
            if count > 0 {
                if isTCP { requestQuickAcknowledgementsIfWritten() }
                owner?.channelReceived(readBuffer.bytes[0..<count])
                guard isOpen else { return }
                if medium.shortReadDrains && count < readSize { return }
                continue
            }
            if count == 0 {
                fail(.lost(spec, "read", errno: nil), deferred: false)
                return
            }
            let code = errno
            if code == EINTR { continue }
            if code == EAGAIN || code == EWOULDBLOCK {
                if hangup { fail(.lost(spec, "read", errno: hangupErrno()), deferred: false) }
                return
            }
            // Such as ECONNRESET, or ENETDOWN when an adapter is unplugged or reset.
            fail(.lost(spec, "read", errno: code), deferred: false)
            return
        }
    }

    /// Delayed ACKs (40 ms at least on Linux) meet Nagle on a controller that writes a packet in
    /// two sends, as rootcanal writes the H4 indicator and then the body: the body waits for
    /// our ACK of the indicator. Linux acknowledges a small segment as it is read, unless the
    /// connection is "interactive" (pingpong mode), which the kernel enters when we send data
    /// soon after receiving, as every answer does; TCP_QUICKACK (tcp(7)) leaves that mode and
    /// sends a pending ACK. So it is set after a read only when something went out since it was
    /// last set: once per request and answer, not after every read (Docs/PERFORMANCE.md,
    /// "System calls per request"). Best effort: failing it only costs latency.
    private func requestQuickAcknowledgementsIfWritten() {
        guard wroteSinceQuickAcknowledgements else { return }
        wroteSinceQuickAcknowledgements = false
        quickAcknowledgementRequests += 1
        var one: Int32 = 1
        _ = setsockopt(fd, Int32(IPPROTO_TCP), Int32(TCP_QUICKACK), &one, socklen_t(MemoryLayout<Int32>.size))
    }

    private static func isTCPSocket(_ fd: Int32) -> Bool {
        var address = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let result = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard result == 0 else { return false }
        return Int32(address.ss_family) == AF_INET || Int32(address.ss_family) == AF_INET6
    }

    /// Why the peer hung up with nothing left to read; nil means a plain close.
    private func hangupErrno() -> Int32? {
        switch medium {
        case .streamSocket:
            var status: Int32 = 0
            var length = socklen_t(MemoryLayout<Int32>.size)
            guard getsockopt(fd, SOL_SOCKET, SO_ERROR, &status, &length) == 0, status != 0 else { return nil }
            return status
        case .terminal:
            return nil
        case .hciUserChannel:
            return ENETDOWN  // the adapter went away
        }
    }

    // MARK: Closing

    /// Unregisters and closes the fd without reporting anything; cancels a failure still to be
    /// reported. Idempotent.
    func close() {
        if let pendingFailure {
            loop.cancel(pendingFailure)
            self.pendingFailure = nil
        }
        tearDown()
    }

    /// Closes now and reports `error`: at once from a loop callback, or on the next loop turn
    /// from the owner's `send`, so that a caller's send never re-enters its own `onClosed`.
    /// Nothing once closed: the first end is the one reported.
    func fail(_ error: TransportError, deferred: Bool) {
        guard isOpen else { return }
        tearDown()
        if deferred {
            pendingFailure = loop.schedule(after: .zero) { [weak self] in
                guard let self else { return }
                self.pendingFailure = nil
                self.onClosed?(error)
            }
        } else {
            onClosed?(error)
        }
    }

    private func tearDown() {
        guard isOpen else { return }
        isOpen = false
        loop.unregister(fd: fd)
        closeFD(fd)
        fd = -1
        owner?.channelDidClose()
    }
}

/// close(2), retrying nothing: on Linux the descriptor is released even when close reports EINTR.
func closeFD(_ fd: Int32) {
    _ = Glibc.close(fd)
}
