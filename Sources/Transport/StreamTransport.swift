import BlemuCore
import BlemuRunLoop
import CLinux

#if canImport(Glibc)
import Glibc
#endif

/// H4 over a byte stream: a TCP or Unix socket, or a UART. Packets are framed from the stream
/// by their headers (`H4Framer`); output the kernel cannot take at once waits in one bounded
/// buffer, flushed on EPOLLOUT.
public final class StreamTransport: ControllerTransport {
    /// How to write: sockets with MSG_NOSIGNAL (a closed peer gives EPIPE, not SIGPIPE), terminals with writev.
    public enum Medium: Sendable {
        case socket
        case terminal
    }

    public let spec: ControllerSpec
    public let medium: Medium
    public let outputCapacity: Int
    public var onPacket: ((H4PacketType, ArraySlice<UInt8>) -> Void)?
    public var onClosed: ((TransportError) -> Void)?
    public private(set) var isOpen = true

    public var discardedBytes: Int { framer.discardedBytes }
    /// Bytes accepted by `send` and not yet taken by the kernel.
    public var bufferedOutputCount: Int { output.count - outputHead }

    private let loop: RunLoop
    private var fd: Int32
    private var framer = H4Framer()
    private var readBuffer = [UInt8](repeating: 0, count: 16 * 1024)
    private var output: [UInt8] = []
    private var outputHead = 0
    private var watchingWritable = false
    private var pendingFailure: TimerID?

    /// Takes ownership of `fd` (closed on failure too): makes it nonblocking and registers it.
    public init(adopting fd: Int32, spec: ControllerSpec, medium: Medium, loop: RunLoop,
                outputCapacity: Int = ControllerTransports.defaultOutputCapacity) throws(TransportError) {
        self.fd = fd
        self.spec = spec
        self.medium = medium
        self.loop = loop
        self.outputCapacity = max(outputCapacity, H4Framer.maxPacketLength)
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

    deinit {
        if fd >= 0 {
            loop.unregister(fd: fd)
            closeFD(fd)
        }
        if let pendingFailure { loop.cancel(pendingFailure) }
    }

    /// Connects to a controller listening on the Unix stream socket at `path`.
    public static func connect(unixPath path: String, loop: RunLoop,
                               outputCapacity: Int = ControllerTransports.defaultOutputCapacity) throws(TransportError)
        -> StreamTransport
    {
        let spec = ControllerSpec.unix(path: path)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let pathBytes = Array(path.utf8)
        let limit = MemoryLayout.size(ofValue: address.sun_path) - 1
        guard pathBytes.count <= limit else { throw .unixPathTooLong(spec, length: pathBytes.count, limit: limit) }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (index, byte) in pathBytes.enumerated() { raw[index] = byte }
        }
        let fd = socket(AF_UNIX, CLINUX_SOCK_STREAM_NONBLOCK, 0)
        guard fd >= 0 else { throw .setup(spec, "socket(AF_UNIX)", errno) }
        let result = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard result == 0 else {
            let code = errno
            closeFD(fd)
            throw .unixConnect(spec, path: path, code)
        }
        return try StreamTransport(adopting: fd, spec: spec, medium: .socket, loop: loop, outputCapacity: outputCapacity)
    }

    /// Opens a UART: exclusive (flock), raw 8N1, RTS/CTS, `baud` (Vol 4, Part A, 3).
    public static func openSerial(device: String, baud: Int, loop: RunLoop,
                                  outputCapacity: Int = ControllerTransports.defaultOutputCapacity) throws(TransportError)
        -> StreamTransport
    {
        let spec = ControllerSpec.serial(device: device, baud: baud)
        let fd = Glibc.open(device, O_RDWR | O_NOCTTY | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else { throw .serialOpen(spec, device: device, baud: baud, errno) }
        // Two programs reading one UART each get half the bytes: refuse to share it.
        if flock(fd, LOCK_EX | LOCK_NB) != 0 {
            let code = errno
            closeFD(fd)
            throw .serialOpen(spec, device: device, baud: baud, code)
        }
        guard clinux_serial_configure(fd, Int32(clamping: baud)) == 0 else {
            let code = errno
            closeFD(fd)
            throw .serialOpen(spec, device: device, baud: baud, code)
        }
        return try StreamTransport(adopting: fd, spec: spec, medium: .terminal, loop: loop, outputCapacity: outputCapacity)
    }

    // MARK: Output

    public func send(_ type: H4PacketType, _ body: ArraySlice<UInt8>) -> Bool {
        guard isOpen else { return false }
        let total = 1 + body.count
        // Checked before writing anything, so a refused packet is never half sent.
        guard outputCapacity - bufferedOutputCount >= total else { return false }
        if bufferedOutputCount > 0 {
            output.append(type.rawValue)
            output.append(contentsOf: body)
            return true
        }
        let written = writePacket(type, body)
        if written < 0 {
            let code = errno
            if code != EAGAIN && code != EWOULDBLOCK && code != EINTR {
                fail(.lost(spec, "write", errno: code), deferred: true)
                return false
            }
        }
        let sent = max(written, 0)
        if sent == total { return true }
        if sent == 0 {
            output.append(type.rawValue)
            output.append(contentsOf: body)
        } else {
            output.append(contentsOf: body[(body.startIndex + sent - 1)...])
        }
        watchWritable(true)
        return true
    }

    /// One writev / sendmsg of the indicator byte and the body.
    private func writePacket(_ type: H4PacketType, _ body: ArraySlice<UInt8>) -> Int {
        var indicator = type.rawValue
        return withUnsafeMutablePointer(to: &indicator) { indicatorPointer in
            body.withUnsafeBufferPointer { bodyBuffer in
                withUnsafeTemporaryAllocation(of: iovec.self, capacity: 2) { vectors in
                    vectors[0] = iovec(iov_base: UnsafeMutableRawPointer(indicatorPointer), iov_len: 1)
                    vectors[1] = iovec(iov_base: UnsafeMutableRawPointer(mutating: bodyBuffer.baseAddress),
                                       iov_len: bodyBuffer.count)
                    switch medium {
                    case .socket:
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

    private func flush() {
        while outputHead < output.count {
            let written = output[outputHead...].withUnsafeBytes { raw -> Int in
                switch medium {
                case .socket: Glibc.send(fd, raw.baseAddress, raw.count, CLINUX_MSG_NOSIGNAL)
                case .terminal: write(fd, raw.baseAddress, raw.count)
                }
            }
            if written > 0 {
                outputHead += written
                continue
            }
            let code = errno
            if written < 0 && code == EINTR { continue }
            if written < 0 && (code == EAGAIN || code == EWOULDBLOCK) { break }
            fail(.lost(spec, "write", errno: written < 0 ? code : EIO), deferred: false)
            return
        }
        if outputHead == output.count {
            output.removeAll(keepingCapacity: true)
            outputHead = 0
            watchWritable(false)
        } else if outputHead >= 64 * 1024 {
            output.removeSubrange(0..<outputHead)
            outputHead = 0
        }
    }

    private func watchWritable(_ on: Bool) {
        guard on != watchingWritable, isOpen else { return }
        do throws(RunLoopError) {
            try loop.modify(fd: fd, events: on ? [.readable, .writable] : .readable)
            watchingWritable = on
        } catch {
            fail(.setup(spec, "epoll_ctl(MOD)", error.errnoCode), deferred: true)
        }
    }

    // MARK: Input

    private func handle(_ events: IOEvents) {
        if events.contains(.writable) {
            flush()
            guard isOpen else { return }
        }
        if !events.isDisjoint(with: [.readable, .hangup, .error]) {
            readAvailable(hangup: !events.isDisjoint(with: [.hangup, .error]))
        }
    }

    private func readAvailable(hangup: Bool) {
        // A few reads per wakeup: enough to drain a burst, bounded so one busy link cannot
        // starve the rest of the loop (epoll is level-triggered; the rest comes next turn).
        for _ in 0..<4 {
            let count = readBuffer.withUnsafeMutableBytes { raw in read(fd, raw.baseAddress, raw.count) }
            if count > 0 {
                deliver(count)
                guard isOpen else { return }
                if count < readBuffer.count { return }
                continue
            }
            if count == 0 {
                fail(.lost(spec, "read", errno: nil), deferred: false)
                return
            }
            let code = errno
            if code == EINTR { continue }
            if code == EAGAIN || code == EWOULDBLOCK {
                if hangup { fail(.lost(spec, "read", errno: socketError()), deferred: false) }
                return
            }
            fail(.lost(spec, "read", errno: code), deferred: false)
            return
        }
    }

    private func deliver(_ count: Int) {
        var offset = 0
        while offset < count {
            let taken = framer.append(contentsOf: readBuffer[offset..<count])
            offset += taken
            while let packet = framer.nextPacket() {
                onPacket?(packet.type, packet.body)
                guard isOpen else { return }
            }
            if taken == 0 { framer.reset() }  // cannot happen (the framer always has room after draining)
        }
    }

    /// SO_ERROR for sockets; nil (meaning a plain close) when there is none.
    private func socketError() -> Int32? {
        guard medium == .socket else { return nil }
        var status: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        guard getsockopt(fd, SOL_SOCKET, SO_ERROR, &status, &length) == 0, status != 0 else { return nil }
        return status
    }

    // MARK: Closing

    public func close() {
        if let pendingFailure {
            loop.cancel(pendingFailure)
            self.pendingFailure = nil
        }
        tearDown()
    }

    private func tearDown() {
        guard isOpen else { return }
        isOpen = false
        loop.unregister(fd: fd)
        closeFD(fd)
        fd = -1
        output = []
        outputHead = 0
        framer.reset()
    }

    /// Closes now and reports `error`: at once from a loop callback, or on the next loop turn
    /// from `send`, so that a caller's send never re-enters its own `onClosed` handler.
    private func fail(_ error: TransportError, deferred: Bool) {
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
}

/// close(2), retrying nothing: on Linux the descriptor is released even when close reports EINTR.
func closeFD(_ fd: Int32) {
    _ = Glibc.close(fd)
}
