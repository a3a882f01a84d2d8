/// The bytes a client sent, cut into lines: bounded, so a client that never sends a newline
/// costs at most `maxLineLength` bytes (plus one read) before it is told and dropped.
public struct LineBuffer {
    public enum Line: Equatable {
        /// A complete line without its `\n` (nor a `\r` before it).
        case line(ArraySlice<UInt8>)
        /// A line grew past `maxLineLength`: the buffer is emptied and stays overflowed.
        case tooLong
    }

    public let maxLineLength: Int
    private var bytes: [UInt8] = []
    /// The first byte not yet handed out.
    private var start = 0
    /// Bytes before this index (from `start`) are known to hold no newline.
    private var scanned = 0
    public private(set) var overflowed = false

    public init(maxLineLength: Int) {
        self.maxLineLength = max(1, maxLineLength)
    }

    /// Bytes received and not yet handed out as lines: at most one unfinished line once
    /// `nextLine()` returned nil.
    public var pendingCount: Int { bytes.count - start }

    /// Adds what one read returned. Once overflowed, bytes are ignored.
    public mutating func append<Bytes: Collection>(contentsOf new: Bytes) where Bytes.Element == UInt8 {
        guard !overflowed else { return }
        // Make room by dropping what was handed out, so the array does not grow without end.
        if start > 0 && (start == bytes.count || start >= 4096) {
            bytes.removeSubrange(0..<start)
            scanned -= start
            start = 0
        }
        bytes.append(contentsOf: new)
    }

    /// The next complete line, `.tooLong` once a line (complete or not) passes
    /// `maxLineLength`, or nil when only an unfinished line (or nothing) is left.
    public mutating func nextLine() -> Line? {
        if overflowed { return .tooLong }
        guard let newline = bytes[scanned...].firstIndex(of: UInt8(ascii: "\n")) else {
            scanned = bytes.count
            if bytes.count - start > maxLineLength { return overflow() }
            return nil
        }
        var end = newline
        if end > start && bytes[end - 1] == UInt8(ascii: "\r") { end -= 1 }
        if end - start > maxLineLength { return overflow() }
        let line = bytes[start..<end]
        start = newline + 1
        scanned = start
        return .line(line)
    }

    private mutating func overflow() -> Line {
        overflowed = true
        bytes = []
        start = 0
        scanned = 0
        return .tooLong
    }
}
