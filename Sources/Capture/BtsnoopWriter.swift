import BlemuCore

#if canImport(Glibc)
import Glibc
#endif

/// Why a capture could not be opened or written.
public struct CaptureError: Error, CustomStringConvertible, Equatable, Sendable {
    public var operation: String
    public var path: String
    public var errnoCode: Int32
    /// What is wrong when it is not an errno (a FIFO at the path).
    public var reason: String?

    public init(_ operation: String, path: String, errnoCode: Int32) {
        self.operation = operation
        self.path = path
        self.errnoCode = errnoCode
    }

    public init(_ operation: String, path: String, reason: String, errnoCode: Int32 = 0) {
        self.operation = operation
        self.path = path
        self.errnoCode = errnoCode
        self.reason = reason
    }

    public var description: String {
        if let reason { return "--btsnoop \(path): \(operation) failed: \(reason)" }
        return "--btsnoop \(path): \(operation) failed: \(String(cString: strerror(errnoCode))) (errno \(errnoCode))"
    }
}

/// Writes HCI packets to a btsnoop file (`Btsnoop`), one write(2) per record and no buffering
/// of its own, so a crash loses at most the packet being written. The file is opened
/// O_APPEND|O_CLOEXEC, mode 0600: a capture holds what centrals wrote, PINs included.
///
/// With `maxFileBytes`, a file never grows past it (unless one record alone is larger): the
/// record that would cross it first moves the file to PATH.1 (PATH.1 to PATH.2, and so on up
/// to `generations`, the oldest dropped) and starts a new PATH with a fresh header. A
/// non-empty PATH found at start is moved the same way, so a restart after a crash keeps the
/// crash's capture. Frame numbers count on across files.
///
/// A failed write truncates the file back to its last whole record, calls `onFailure` once
/// and ends the capture; the caller keeps running.
public final class BtsnoopWriter {
    public let path: String
    public let maxFileBytes: Int?
    public let generations: Int
    /// Frames written since start, across rotations: the number of the last one.
    public private(set) var framesWritten: UInt64 = 0
    /// Files started by rotation (not counting the first).
    public private(set) var rotations = 0
    /// False once closed or after a failure.
    public var isCapturing: Bool { fd >= 0 }
    /// After each rotation: the frames (first, last) of the file that became PATH.1; nil range
    /// (first > last) when it held none.
    public var onRotated: ((_ firstFrame: UInt64, _ lastFrame: UInt64) -> Void)?
    /// Called once, when writing fails; the capture has stopped by then.
    public var onFailure: ((CaptureError) -> Void)?
    /// Updates `CaptureCursor.lastFrame` after each record, so log entries point into the file.
    public let publishesCursor: Bool

    /// The smallest `maxFileBytes` accepted: the header and a few records.
    public static let minimumMaxFileBytes = 4096

    private var fd: Int32 = -1
    /// For tests that make the disk "full" underneath.
    var fileDescriptor: Int32 { fd }
    private var fileBytes = 0
    /// The number the file's first frame has (or will have).
    private var firstFrameOfFile: UInt64 = 1
    private var record: [UInt8] = []
    private let unixMicroseconds: () -> Int64

    public init(path: String, maxFileBytes: Int? = nil, generations: Int = 3, publishesCursor: Bool = false,
                unixMicroseconds: @escaping () -> Int64 = BtsnoopWriter.realtimeMicroseconds) throws(CaptureError) {
        self.path = path
        self.maxFileBytes = maxFileBytes.map { max($0, Self.minimumMaxFileBytes) }
        self.generations = max(generations, 1)
        self.publishesCursor = publishesCursor
        self.unixMicroseconds = unixMicroseconds
        record.reserveCapacity(Btsnoop.recordHeaderLength + 1 + 4 + 65535)
        var status = stat()
        if stat(path, &status) == 0, (status.st_mode & S_IFMT) == S_IFREG, status.st_size > 0 {
            try shiftGenerations()
        }
        try openFresh()
        if publishesCursor { CaptureCursor.lastFrame = 0 }
    }

    deinit { if fd >= 0 { Glibc.close(fd) } }

    /// The current time for timestamps: CLOCK_REALTIME in microseconds since 1970.
    public static func realtimeMicroseconds() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return Int64(now.tv_sec) * 1_000_000 + Int64(now.tv_nsec) / 1000
    }

    /// Writes one packet: `packetType` is its H4 indicator, `packet` the HCI packet after it;
    /// `received` is true for controller-to-host. Nothing happens once the capture has stopped.
    public func write(packetType: UInt8, packet: ArraySlice<UInt8>, received: Bool) {
        guard fd >= 0 else { return }
        record.removeAll(keepingCapacity: true)
        let length = Btsnoop.appendRecord(to: &record, packetType: packetType, packet: packet, received: received,
                                          unixMicroseconds: unixMicroseconds())
        if let maxFileBytes, fileBytes + length > maxFileBytes, fileBytes > Btsnoop.headerLength {
            do throws(CaptureError) {
                Glibc.close(fd)
                fd = -1
                try shiftGenerations()
                try openFresh()
                rotations += 1
            } catch {
                fail(error)
                return
            }
            let closedFirst = firstFrameOfFile
            firstFrameOfFile = framesWritten + 1
            onRotated?(closedFirst, framesWritten)
        }
        if let error = writeAll(record) {
            fail(error)
            return
        }
        fileBytes += length
        framesWritten += 1
        if publishesCursor { CaptureCursor.lastFrame = framesWritten }
    }

    /// Ends the capture (idempotent); what was written stays.
    public func close() {
        if fd >= 0 { Glibc.close(fd) }
        fd = -1
        if publishesCursor { CaptureCursor.lastFrame = nil }
    }

    /// The name of rotated generation `n` (1 is the newest).
    public func rotatedPath(_ generation: Int) -> String { "\(path).\(generation)" }

    /// PATH.(n-1) → PATH.n down to PATH → PATH.1; the oldest is replaced by the rename.
    private func shiftGenerations() throws(CaptureError) {
        var generation = generations
        while generation > 1 {
            if rename(rotatedPath(generation - 1), rotatedPath(generation)) != 0 && errno != ENOENT {
                throw CaptureError("rename to \(rotatedPath(generation))", path: path, errnoCode: errno)
            }
            generation -= 1
        }
        if rename(path, rotatedPath(1)) != 0 && errno != ENOENT {
            throw CaptureError("rename to \(rotatedPath(1))", path: path, errnoCode: errno)
        }
    }

    private func openFresh() throws(CaptureError) {
        // Only a regular file, opened without blocking (RegularFile): a FIFO at the path would
        // hold open(2), and with it the start, until something read it.
        let opened: Int32
        switch RegularFile.open(path, flags: O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, mode: 0o600) {
        case .success(let descriptor): opened = descriptor
        case .failure(let error): throw CaptureError("open", path: path, reason: error.description, errnoCode: error.errnoCode)
        }
        fd = opened
        fileBytes = 0
        if let error = writeAll(Btsnoop.fileHeader) {
            Glibc.close(opened)
            fd = -1
            throw error
        }
        fileBytes = Btsnoop.headerLength
    }

    /// write(2) until all is written; on failure the file is cut back to its last whole record,
    /// so it stays readable.
    private func writeAll(_ bytes: [UInt8]) -> CaptureError? {
        let failure: CaptureError? = bytes.withUnsafeBytes { buffer in
            var offset = 0
            while offset < buffer.count {
                let written = Glibc.write(fd, buffer.baseAddress! + offset, buffer.count - offset)
                if written < 0 {
                    if errno == EINTR { continue }
                    return CaptureError("write", path: path, errnoCode: errno)
                }
                if written == 0 { return CaptureError("write", path: path, errnoCode: EIO) }
                offset += written
            }
            return nil
        }
        if failure != nil { _ = ftruncate(fd, off_t(fileBytes)) }
        return failure
    }

    private func fail(_ error: CaptureError) {
        close()
        let handler = onFailure
        onFailure = nil
        handler?(error)
    }
}

/// Sizes as `--btsnoop-max` takes them: bytes, or a number with K, M or G (powers of 1024).
public enum ByteSize {
    public static func parse(_ text: String) -> Int? {
        var digits = Substring(text)
        var multiplier = 1
        switch digits.last {
        case "K", "k": multiplier = 1 << 10
        case "M", "m": multiplier = 1 << 20
        case "G", "g": multiplier = 1 << 30
        default: break
        }
        if multiplier > 1 { digits = digits.dropLast() }
        guard !digits.isEmpty, digits.count <= 18, digits.allSatisfy({ $0.isASCII && $0.isNumber }),
              let value = Int(digits) else { return nil }
        let (product, overflow) = value.multipliedReportingOverflow(by: multiplier)
        return overflow ? nil : product
    }
}
