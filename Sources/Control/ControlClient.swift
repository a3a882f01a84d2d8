import BlemuCore
import CLinux
import FoundationEssentials

#if canImport(Glibc)
import Glibc
#endif

/// Why `blemu ctl` got no reply: one line, saying what to check.
public struct ControlClientError: Error, Equatable, Sendable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// The client side of the control socket, for `blemu ctl`: one request line out, one reply
/// line back, within a deadline. Blocking is fine here: this is its own short-lived process.
public enum ControlClient {
    /// The longest reply line read (a `list` of many devices is far below it).
    public static let maxReplyLength = 4 * 1024 * 1024

    /// Sends `line` (a newline is added) to the control socket at `path` and returns the first
    /// line that comes back, without its newline.
    public static func exchange(path: String, line: String, timeout: Duration) throws(ControlClientError) -> String {
        let deadline = clinux_monotonic_ns() &+ timeout.nanoseconds
        let fd = try connect(path: path, deadline: deadline)
        defer { Glibc.close(fd) }
        try send(Array((line + "\n").utf8), fd: fd, path: path, deadline: deadline, timeout: timeout)
        return try receiveLine(fd: fd, path: path, deadline: deadline, timeout: timeout)
    }

    /// Sends `line` and hands every line that comes back to `onLine` (the reply first, then,
    /// for a `watch`, the events) until `onLine` returns false (true is returned) or `wait`
    /// passes (false is returned; nil waits as long as the stream lasts). Connecting and
    /// sending have `connectTimeout`. The connection closing ends it with an error.
    public static func stream(path: String, line: String, connectTimeout: Duration, wait: Duration?,
                              onLine: (String) -> Bool) throws(ControlClientError) -> Bool {
        let start = clinux_monotonic_ns()
        let connectDeadline = start &+ connectTimeout.nanoseconds
        let fd = try connect(path: path, deadline: connectDeadline)
        defer { Glibc.close(fd) }
        try send(Array((line + "\n").utf8), fd: fd, path: path, deadline: connectDeadline, timeout: connectTimeout)
        let deadline = wait.map { start &+ $0.nanoseconds } ?? UInt64.max
        var received: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let count = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if count > 0 {
                received.append(contentsOf: chunk[0..<count])
                var start = received.startIndex
                while let newline = received[start...].firstIndex(of: UInt8(ascii: "\n")) {
                    let text = String(decoding: received[start..<newline], as: UTF8.self)
                    start = newline + 1
                    if !onLine(text) { return true }
                }
                received.removeSubrange(..<start)
                guard received.count <= maxReplyLength else {
                    throw ControlClientError("\(path): a line passed \(maxReplyLength) bytes without a newline")
                }
                continue
            }
            if count == 0 { throw ControlClientError("\(path): blemu closed the connection (it stopped?)") }
            let code = errno
            switch code {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK:
                let now = clinux_monotonic_ns()
                guard now < deadline else { return false }
                let milliseconds = deadline == UInt64.max ? -1 : Int32(clamping: (deadline - now + 999_999) / 1_000_000)
                var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                if poll(&descriptor, 1, milliseconds) < 0 && errno != EINTR {
                    throw ControlClientError("\(path): poll failed: \(String(cString: strerror(errno)))")
                }
            default: throw ControlClientError("\(path): reading failed: \(String(cString: strerror(code)))")
            }
        }
    }

    /// Whether a reply line says `"ok": true`; nil when the line is not a reply object.
    public static func isOK(_ reply: String) -> Bool? {
        guard let fields = try? JSONDecoder().decode([String: JSONField].self, from: Data(reply.utf8)),
              case .bool(let ok) = fields["ok"] else { return nil }
        return ok
    }

    private static func connect(path: String, deadline: UInt64) throws(ControlClientError) -> Int32 {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        let limit = MemoryLayout.size(ofValue: address.sun_path) - 1
        guard !bytes.isEmpty, !bytes.contains(0), bytes.count <= limit else {
            throw ControlClientError("\(path): not a Unix socket path (1 to \(limit) bytes)")
        }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (index, byte) in bytes.enumerated() { raw[index] = byte }
        }
        while true {
            let fd = socket(AF_UNIX, CLINUX_SOCK_STREAM_NONBLOCK, 0)
            guard fd >= 0 else { throw ControlClientError("\(path): socket(AF_UNIX) failed: \(String(cString: strerror(errno)))") }
            let result = withUnsafePointer(to: &address) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
                }
            }
            if result == 0 { return fd }
            let code = errno
            Glibc.close(fd)
            switch code {
            case EINTR:
                continue
            case EAGAIN:
                // The listen backlog is full: blemu is busy; try again until the deadline.
                guard clinux_monotonic_ns() < deadline else {
                    throw ControlClientError("\(path): blemu accepts no connection (its backlog is full)")
                }
                usleep(10_000)
            case ENOENT:
                throw ControlClientError("\(path): no such socket; is `blemu run --control \(path)` running?")
            case ECONNREFUSED:
                throw ControlClientError("\(path): connection refused; nothing serves this socket (blemu is not running, or it is not a control socket)")
            case EACCES, EPERM:
                throw ControlClientError("\(path): permission denied; the control socket is only for its owner (mode 0600 by default, see --control-mode)")
            default:
                throw ControlClientError("\(path): cannot connect: \(String(cString: strerror(code))) (errno \(code))")
            }
        }
    }

    private static func send(_ bytes: [UInt8], fd: Int32, path: String, deadline: UInt64, timeout: Duration) throws(ControlClientError) {
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, CLINUX_MSG_NOSIGNAL) }
            if written > 0 {
                offset += written
                continue
            }
            let code = errno
            switch code {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK: try wait(fd: fd, events: Int16(POLLOUT), deadline: deadline, path: path, timeout: timeout)
            default: throw ControlClientError("\(path): sending the request failed: \(String(cString: strerror(code)))")
            }
        }
    }

    private static func receiveLine(fd: Int32, path: String, deadline: UInt64, timeout: Duration) throws(ControlClientError) -> String {
        var received: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let count = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if count > 0 {
                let searchFrom = received.count
                received.append(contentsOf: chunk[0..<count])
                if let newline = received[searchFrom...].firstIndex(of: UInt8(ascii: "\n")) {
                    return String(decoding: received[..<newline], as: UTF8.self)
                }
                guard received.count <= maxReplyLength else {
                    throw ControlClientError("\(path): the reply passed \(maxReplyLength) bytes without a newline")
                }
                continue
            }
            if count == 0 {
                throw ControlClientError("\(path): blemu closed the connection without a reply"
                                         + (received.isEmpty ? "" : " (\(received.count) bytes of an unfinished line)"))
            }
            let code = errno
            switch code {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK: try wait(fd: fd, events: Int16(POLLIN), deadline: deadline, path: path, timeout: timeout)
            default: throw ControlClientError("\(path): reading the reply failed: \(String(cString: strerror(code)))")
            }
        }
    }

    private static func wait(fd: Int32, events: Int16, deadline: UInt64, path: String, timeout: Duration) throws(ControlClientError) {
        while true {
            let now = clinux_monotonic_ns()
            guard now < deadline else { throw ControlClientError("\(path): no reply within \(timeout)") }
            let milliseconds = Int32(clamping: (deadline - now + 999_999) / 1_000_000)
            var descriptor = pollfd(fd: fd, events: events, revents: 0)
            let ready = poll(&descriptor, 1, milliseconds)
            if ready > 0 { return }
            if ready < 0 && errno != EINTR {
                throw ControlClientError("\(path): poll failed: \(String(cString: strerror(errno)))")
            }
        }
    }
}
