import BlemuCore
import Logging
#if canImport(Glibc)
import Glibc
#endif

/// Log entries captured for checks (message and metadata), on the test's thread only.
final class LogRecorder: @unchecked Sendable {
    struct Entry {
        var level: Logger.Level
        var message: String
        var metadata: Logger.Metadata
        var event: String? { metadata[LogKey.event].map { "\($0)" } }
    }
    var entries: [Entry] = []

    func events(_ event: BlemuEvent) -> [Entry] { entries.filter { $0.event == event.rawValue } }

    var logger: Logger {
        var logger = Logger(label: "test") { _ in RecordingHandler(recorder: self) }
        logger.logLevel = .trace
        return logger
    }
}

struct RecordingHandler: LogHandler {
    let recorder: LogRecorder
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .trace
    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }
    func log(event: LogEvent) {
        var all = metadata
        if let explicit = event.metadata { all.merge(explicit) { $1 } }
        recorder.entries.append(.init(level: event.level, message: "\(event.message)", metadata: all))
    }
}

/// A fresh directory under /tmp, removed by `remove()`.
struct TemporaryDirectory {
    let path: String
    init() {
        var template = Array("/tmp/blemu-security-test-XXXXXX".utf8CString)
        let made = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
        path = made.map { String(cString: $0) } ?? "/tmp/blemu-security-test-fallback"
    }
    func remove() {
        if let dir = opendir(path) {
            while let entry = readdir(dir) {
                let name = withUnsafeBytes(of: entry.pointee.d_name) { String(cString: $0.bindMemory(to: CChar.self).baseAddress!) }
                if name != "." && name != ".." { unlink(path + "/" + name) }
            }
            closedir(dir)
        }
        rmdir(path)
    }
    func files() -> [String] {
        var names: [String] = []
        if let dir = opendir(path) {
            while let entry = readdir(dir) {
                let name = withUnsafeBytes(of: entry.pointee.d_name) { String(cString: $0.bindMemory(to: CChar.self).baseAddress!) }
                if name != "." && name != ".." { names.append(name) }
            }
            closedir(dir)
        }
        return names.sorted()
    }
    func write(_ name: String, _ text: String) {
        let fd = open(path + "/" + name, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        guard fd >= 0 else { return }
        _ = Array(text.utf8).withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
        close(fd)
    }
    func read(_ name: String) -> String? {
        let fd = open(path + "/" + name, O_RDONLY)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n <= 0 { break }
            bytes += buffer[0..<n]
        }
        return String(decoding: bytes, as: UTF8.self)
    }
    func mode(_ name: String) -> UInt32? {
        var status = stat()
        guard stat(path + "/" + name, &status) == 0 else { return nil }
        return UInt32(status.st_mode & 0o777)
    }
}
