import BlemuCore
import BlemuHCI
import BlemuRunLoop
import BlemuTransport
import CLinux
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Runs the loop until `condition` holds or `limit` passes; returns whether it held.
@discardableResult
func runUntil(_ loop: RunLoop, limit: Duration = .seconds(5), _ condition: () -> Bool) -> Bool {
    let deadline = loop.nowNanoseconds + limit.nanosecondsForTests
    while !condition() {
        if loop.nowNanoseconds >= deadline { return false }
        loop.runOnce(timeout: .milliseconds(20))
    }
    return true
}

/// Runs the loop for `duration`, whatever happens.
func run(_ loop: RunLoop, for duration: Duration) {
    let deadline = loop.nowNanoseconds + duration.nanosecondsForTests
    while loop.nowNanoseconds < deadline { loop.runOnce(timeout: .milliseconds(5)) }
}

extension Duration {
    var nanosecondsForTests: UInt64 {
        let (seconds, attoseconds) = components
        return UInt64(seconds) * 1_000_000_000 + UInt64(attoseconds / 1_000_000_000)
    }
}

/// A connected pair of Unix stream sockets (close-on-exec).
func makeSocketPair() -> (Int32, Int32) {
    var fds: [Int32] = [-1, -1]
    let result = socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &fds)
    precondition(result == 0, "socketpair failed: \(errno)")
    return (fds[0], fds[1])
}

/// A `StreamTransport` over one end of a fresh socket pair, and the other end (nonblocking) for
/// the test to write, read and close. `kernelBufferSize` shrinks the socket buffers between them.
func streamTransportOverSocketPair(on loop: RunLoop, kernelBufferSize: Int32? = nil,
                                   outputCapacity: Int = ControllerTransports.defaultOutputCapacity) throws
    -> (transport: StreamTransport, peer: Int32)
{
    let (mine, peer) = makeSocketPair()
    setNonblocking(peer)
    if let kernelBufferSize { shrinkSocketBuffers(sender: mine, receiver: peer, to: kernelBufferSize) }
    do {
        let transport = try StreamTransport(adopting: mine, spec: .unix(path: "pair"), medium: .socket, loop: loop,
                                            outputCapacity: outputCapacity)
        return (transport, peer)
    } catch {
        close(peer)
        throw error
    }
}

/// Small kernel buffers, so that a test fills them with a few packets.
func shrinkSocketBuffers(sender: Int32, receiver: Int32, to size: Int32) {
    var size = size
    setsockopt(sender, SOL_SOCKET, SO_SNDBUF, &size, socklen_t(MemoryLayout<Int32>.size))
    setsockopt(receiver, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
}

func makePipe() -> (read: Int32, write: Int32) {
    var fds: [Int32] = [-1, -1]
    precondition(pipe(&fds) == 0, "pipe failed: \(errno)")
    for fd in fds {
        setNonblocking(fd)
        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
    }
    return (fds[0], fds[1])
}

func setNonblocking(_ fd: Int32) {
    let flags = fcntl(fd, F_GETFL)
    _ = fcntl(fd, F_SETFL, flags | O_NONBLOCK)
}

/// Writes all of `bytes` to a blocking or nonblocking fd, spinning on EAGAIN (tests only).
func writeAll(_ fd: Int32, _ bytes: [UInt8]) {
    var offset = 0
    while offset < bytes.count {
        let n = bytes[offset...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        if n > 0 { offset += n } else if errno != EAGAIN && errno != EINTR { return }
    }
}

/// Whatever is readable now on a nonblocking fd.
func readAvailable(_ fd: Int32) -> [UInt8] {
    var out: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 65536)
    while true {
        let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        guard n > 0 else { return out }
        out.append(contentsOf: chunk[0..<n])
    }
}

/// A listening Unix stream socket at a fresh path under /tmp; removed on `close()`.
final class UnixServer {
    let path: String
    let fd: Int32

    init(path: String? = nil) {
        self.path = path ?? "/tmp/blemu-test-\(getpid())-\(UInt32.random(in: 0...UInt32.max)).sock"
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        self.fd = fd
        precondition(fd >= 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(self.path.utf8)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (index, byte) in bytes.enumerated() { raw[index] = byte }
        }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        precondition(bound == 0, "bind \(self.path): \(errno)")
        precondition(listen(fd, 8) == 0)
    }

    /// A pending connection, or -1.
    func accept() -> Int32 {
        acceptNonblocking(fd)
    }

    func close() {
        _ = Glibc.close(fd)
        unlink(path)
    }
}

/// A TCP listener on 127.0.0.1 at a free port.
final class TCPServer {
    let fd: Int32
    let port: UInt16

    init(backlog: Int32 = 8) {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        self.fd = fd
        precondition(fd >= 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        precondition(bound == 0)
        precondition(listen(fd, backlog) == 0)
        port = localPort(fd)
    }

    func accept() -> Int32 {
        acceptNonblocking(fd)
    }

    func close() { _ = Glibc.close(fd) }
}

func localPort(_ fd: Int32) -> UInt16 {
    var address = sockaddr_in()
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    _ = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
    }
    return UInt16(bigEndian: address.sin_port)
}

/// A port on 127.0.0.1 that nothing listens on (bound, then released).
func closedTCPPort() -> UInt16 {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    _ = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    let port = localPort(fd)
    _ = Glibc.close(fd)
    return port
}

/// Opens `spec` through `ControllerTransports.open`, running the loop until the result comes.
func openAndWait(_ spec: ControllerSpec, on loop: RunLoop, connectTimeout: Duration = .seconds(3),
                 outputCapacity: Int = ControllerTransports.defaultOutputCapacity)
    -> Result<any ControllerTransport, TransportError>?
{
    var outcome: Result<any ControllerTransport, TransportError>?
    ControllerTransports.open(spec, on: loop, connectTimeout: connectTimeout, outputCapacity: outputCapacity) {
        outcome = $0
    }
    runUntil(loop, limit: .seconds(10)) { outcome != nil }
    return outcome
}

/// Opens `spec` on a fresh loop, expecting it to fail: the error, or a recorded issue and a throw.
func openFailure(_ spec: ControllerSpec, sourceLocation: SourceLocation = #_sourceLocation) throws -> TransportError {
    let loop = try RunLoop()
    let outcome = openAndWait(spec, on: loop)
    if case .success(let transport)? = outcome { transport.close() }
    let error: TransportError? = if case .failure(let error)? = outcome { error } else { nil }
    return try #require(error, "expected \(spec) to fail, got \(String(describing: outcome))",
                        sourceLocation: sourceLocation)
}

/// The seeded generator of BlemuCore, under the name these tests use.
typealias SplitMix64 = SeededRandom

/// The H4 bytes of one packet: indicator, header with the right length field, payload.
func h4Packet(_ type: H4PacketType, payload: [UInt8], handleOrOpcode: UInt16 = 0x0040) -> [UInt8] {
    var out: [UInt8] = [type.rawValue]
    switch type {
    case .event:
        out += [0x0E, UInt8(payload.count)]
    case .command, .sco:
        out += [UInt8(truncatingIfNeeded: handleOrOpcode), UInt8(truncatingIfNeeded: handleOrOpcode >> 8), UInt8(payload.count)]
    case .acl, .iso:
        out += [UInt8(truncatingIfNeeded: handleOrOpcode), UInt8(truncatingIfNeeded: handleOrOpcode >> 8),
                UInt8(truncatingIfNeeded: payload.count), UInt8(truncatingIfNeeded: payload.count >> 8)]
    }
    return out + payload
}

/// accept(2) of a pending connection as a nonblocking, close-on-exec fd; -1 when none waits.
func acceptNonblocking(_ listener: Int32) -> Int32 {
    let fd = accept(listener, nil, nil)
    guard fd >= 0 else { return -1 }
    setNonblocking(fd)
    _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
    return fd
}
