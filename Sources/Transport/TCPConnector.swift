import BlemuCore
import BlemuRunLoop
import CLinux

#if canImport(Glibc)
import Glibc
#endif

/// Connects a TCP socket without blocking the loop: each resolved address in turn, nonblocking
/// connect, completion on EPOLLOUT (SO_ERROR), one deadline for the whole attempt.
final class TCPConnector {
    private struct Address {
        let family: Int32
        let bytes: [UInt8]
    }

    private let spec: ControllerSpec
    private let host: String
    private let port: UInt16
    private let loop: RunLoop
    private let timeout: Duration
    private var completion: ((Result<Int32, TransportError>) -> Void)?

    private var addresses: [Address] = []
    private var nextAddress = 0
    private var fd: Int32 = -1
    private var deadlineTimer: TimerID?
    private var lastError: TransportError?

    init(spec: ControllerSpec, host: String, port: UInt16, loop: RunLoop, timeout: Duration,
         _ completion: @escaping (Result<Int32, TransportError>) -> Void) {
        self.spec = spec
        self.host = host
        self.port = port
        self.loop = loop
        self.timeout = timeout
        self.completion = completion
    }

    /// Starts on the next loop turn, so the completion never runs inside the caller's call.
    func start() {
        loop.schedule(after: .zero) { [self] in begin() }
    }

    func cancel() {
        completion = nil
        cleanUp()
    }

    private func begin() {
        guard completion != nil else { return }
        switch resolve() {
        case .failure(let error):
            finish(.failure(error))
        case .success(let resolved):
            addresses = resolved
            deadlineTimer = loop.schedule(after: timeout) { [self] in
                deadlineTimer = nil
                finish(.failure(.tcpTimeout(spec, after: timeout)))
            }
            tryNextAddress()
        }
    }

    private func resolve() -> Result<[Address], TransportError> {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_flags = AI_NUMERICSERV
        var list: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(host, String(port), &hints, &list)
        guard status == 0 else {
            let reason = status == EAI_SYSTEM ? describe(errno: errno) : String(cString: gai_strerror(status))
            return .failure(.hostNotFound(spec, host: host, reason))
        }
        defer { freeaddrinfo(list) }
        var found: [Address] = []
        var entry = list
        while let info = entry?.pointee {
            if let address = info.ai_addr, info.ai_addrlen > 0 {
                let bytes = [UInt8](UnsafeRawBufferPointer(start: address, count: Int(info.ai_addrlen)))
                found.append(Address(family: info.ai_family, bytes: bytes))
            }
            entry = info.ai_next
        }
        guard !found.isEmpty else { return .failure(.hostNotFound(spec, host: host, "no addresses")) }
        return .success(found)
    }

    private func tryNextAddress() {
        while completion != nil && nextAddress < addresses.count {
            let address = addresses[nextAddress]
            nextAddress += 1
            let socketFD = socket(address.family, CLINUX_SOCK_STREAM_NONBLOCK, 0)
            guard socketFD >= 0 else {
                lastError = .setup(spec, "socket", errno)
                continue
            }
            var one: Int32 = 1
            // Small HCI packets must leave at once, not wait for Nagle to coalesce them.
            _ = setsockopt(socketFD, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            let result = address.bytes.withUnsafeBytes { raw -> Int32 in
                guard let base = raw.baseAddress else { return -1 }
                return connect(socketFD, base.assumingMemoryBound(to: sockaddr.self), socklen_t(raw.count))
            }
            let code = errno
            if result == 0 {
                fd = socketFD
                succeed()
                return
            }
            if code == EINPROGRESS {
                do throws(RunLoopError) {
                    try loop.register(fd: socketFD, events: .writable) { [self] _ in connectionSettled() }
                    fd = socketFD
                    return
                } catch {
                    lastError = .setup(spec, "registering the socket", error.errnoCode)
                    closeFD(socketFD)
                    continue
                }
            }
            closeFD(socketFD)
            lastError = .tcpConnect(spec, port: port, code)
        }
        guard completion != nil else { return }
        finish(.failure(lastError ?? .tcpConnect(spec, port: port, ECONNREFUSED)))
    }

    private func connectionSettled() {
        var status: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        if getsockopt(fd, SOL_SOCKET, SO_ERROR, &status, &length) != 0 { status = errno }
        if status == 0 {
            succeed()
            return
        }
        lastError = .tcpConnect(spec, port: port, status)
        loop.unregister(fd: fd)
        closeFD(fd)
        fd = -1
        tryNextAddress()
    }

    private func succeed() {
        if loop.isRegistered(fd: fd) { loop.unregister(fd: fd) }
        let connected = fd
        fd = -1  // handed over
        finish(.success(connected))
    }

    private func finish(_ result: Result<Int32, TransportError>) {
        let done = completion
        completion = nil
        cleanUp()
        if let done {
            done(result)
        } else if case .success(let connected) = result {
            closeFD(connected)
        }
    }

    private func cleanUp() {
        if let timer = deadlineTimer {
            loop.cancel(timer)
            deadlineTimer = nil
        }
        if fd >= 0 {
            loop.unregister(fd: fd)
            closeFD(fd)
            fd = -1
        }
    }
}
