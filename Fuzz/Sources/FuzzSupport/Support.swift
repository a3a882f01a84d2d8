import BlemuCore
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// Reads a fuzz input front to back. Past the end every read gives zeros (and `isAtEnd`), so a
/// target never needs to check lengths: a short input is simply a short script.
public struct FuzzBytes {
    public let bytes: [UInt8]
    public private(set) var position = 0

    public init(_ data: UnsafePointer<UInt8>?, _ size: Int) {
        bytes = data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? []
    }

    public init(_ bytes: [UInt8]) { self.bytes = bytes }

    public var isAtEnd: Bool { position >= bytes.count }
    public var remaining: Int { max(0, bytes.count - position) }

    public mutating func u8() -> UInt8 {
        guard position < bytes.count else { return 0 }
        defer { position += 1 }
        return bytes[position]
    }

    public mutating func u16() -> UInt16 { UInt16(u8()) | UInt16(u8()) << 8 }

    /// Up to `count` bytes (fewer at the end of the input).
    public mutating func take(_ count: Int) -> [UInt8] {
        let n = max(0, min(count, remaining))
        defer { position += n }
        return Array(bytes[position..<position + n])
    }

    /// Everything left.
    public mutating func rest() -> [UInt8] { take(remaining) }
}

/// A property the stack promises did not hold: print why and abort, so libFuzzer records the
/// input as a crash (like a trap would).
public func fuzzFailure(_ message: @autoclosure () -> String, file: StaticString = #fileID, line: UInt = #line) -> Never {
    writeStandardError("blemu fuzz: property violated: \(message()) (\(file):\(line))\n")
    abort()
}

@inline(__always)
public func fuzzCheck(_ condition: @autoclosure () -> Bool, _ message: @autoclosure () -> String,
                      file: StaticString = #fileID, line: UInt = #line) {
    if !condition() { fuzzFailure(message(), file: file, line: line) }
}

/// A log handler that builds every message and its metadata (so the code that formats log
/// lines is fuzzed too) and throws them away — or prints them when `BLEMU_FUZZ_LOG=1`, which
/// helps when reading what a crashing input did.
public struct SinkLogHandler: LogHandler {
    public var metadata: Logger.Metadata = [:]
    public var logLevel: Logger.Level = .trace
    let print: Bool

    public init(print: Bool) { self.print = print }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        let message = event.message.description
        var fields = ""
        for (key, value) in (event.metadata ?? [:]).merging(metadata, uniquingKeysWith: { a, _ in a }) {
            fields += " \(key)=\(value.description)"
        }
        if print { writeStandardError("[\(event.level)] \(message)\(fields)\n") }
    }
}

public func writeStandardError(_ text: String) {
    var text = text
    text.withUTF8 { bytes in _ = write(2, bytes.baseAddress, bytes.count) }
}

/// Whether an environment variable is set to 1.
public func fuzzEnvironmentFlag(_ name: String) -> Bool {
    getenv(name).map { String(cString: $0) == "1" } ?? false
}

public let fuzzLogsPrinted = fuzzEnvironmentFlag("BLEMU_FUZZ_LOG")

/// Bytes as upper-case hex, for messages.
public func hex(_ bytes: [UInt8]) -> String {
    let digits = Array("0123456789ABCDEF")
    return String(bytes.flatMap { [digits[Int($0 >> 4)], digits[Int($0 & 0x0F)]] })
}

public func fuzzLogger() -> Logger {
    Logger(label: "fuzz", factory: { _ in SinkLogHandler(print: fuzzLogsPrinted) })
}

@_exported import CFuzzDriver

/// The signature libFuzzer calls for each input.
public typealias FuzzEntry = @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt
