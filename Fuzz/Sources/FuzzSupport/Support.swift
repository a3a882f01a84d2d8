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

/// A log handler for the fuzz targets. Off by default: the level is `.critical`, so the stack
/// builds no message or metadata for its trace, debug, info and warning lines (`Logger` asks the
/// handler's level before it evaluates anything) — formatting every line cost the whole-stack
/// targets most of their time. `BLEMU_FUZZ_LOG=1` turns every level on and prints the lines,
/// which helps when reading what a crashing input did; the formatting code itself is covered by
/// the unit tests of `StderrLogHandler` and the journal.
public struct SinkLogHandler: LogHandler {
    public var metadata: Logger.Metadata = [:]
    public var logLevel: Logger.Level
    let print: Bool

    public init(print: Bool) {
        self.print = print
        logLevel = print ? .trace : .critical
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        guard print else { return }
        var fields = ""
        for (key, value) in (event.metadata ?? [:]).merging(metadata, uniquingKeysWith: { a, _ in a }) {
            fields += " \(key)=\(value.description)"
        }
        writeStandardError("[\(event.level)] \(event.message.description)\(fields)\n")
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

/// The one logger of a process: made once, handed to every stack the target builds.
public let fuzzSharedLogger = Logger(label: "fuzz", factory: { _ in SinkLogHandler(print: fuzzLogsPrinted) })

public func fuzzLogger() -> Logger { fuzzSharedLogger }

/// Bytes the process has allocated and not freed (AddressSanitizer's count).
public func fuzzAllocatedBytes() -> Int { Int(blemu_fuzz_allocated_bytes()) }

/// Oracle: what one input makes the stack hold stays under `bound` bytes. Created when the
/// input starts (after the stack is built); `check()` after each operation fails the run when
/// the process holds more than `bound` beyond what it held then — a peer that can grow memory
/// without bound is a bug (Docs/TESTING.md, oracles).
public struct MemoryBound {
    public let start: Int
    public let bound: Int
    public init(bound: Int) {
        self.bound = bound
        start = fuzzAllocatedBytes()
    }

    @inline(__always)
    public func check(_ what: @autoclosure () -> String, file: StaticString = #fileID, line: UInt = #line) {
        let held = fuzzAllocatedBytes() - start
        if held > bound { fuzzFailure("the stack holds \(held) bytes more than at the start (bound \(bound)) after \(what())", file: file, line: line) }
    }
}

@_exported import CFuzzDriver

/// The signature libFuzzer calls for each input.
public typealias FuzzEntry = @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt
