#if canImport(Glibc)
import Glibc
import BlemuCore

/// The counter of an encrypted BTHome device, kept in the state directory so that a counter, and
/// with it an AES-CCM nonce, is never used twice under one bindkey, across restarts too (a
/// repeated CCM nonce gives away the XOR of two readings). Counters are reserved in blocks: the
/// file holds the first counter not yet reserved, written (atomically, 0600) before any counter
/// of a new block is handed out, so a reading costs no write and a crash skips at most the rest
/// of a block.
///
/// A file that cannot be read as one is moved aside (`PATH.damaged-N`) and reported; counting
/// then restarts from the wall clock's seconds (`clock`), above what earlier runs will have used
/// unless they handed out more than one counter a second on average.
public final class BTHomeCounterStore {
    public static let defaultBlockSize: UInt32 = 256
    static let header = "blemu-bthome-counter 1 next "

    public let path: String
    public let blockSize: UInt32
    private var next: UInt32
    private var reservedUntil: UInt32
    private var exhausted = false
    /// What was wrong with the file found at start, and where it was moved; nil when it was fine
    /// or missing. For the caller's log.
    public private(set) var damage: String?

    /// Why no counter could be given.
    public enum Failure: Error, Equatable, Sendable, CustomStringConvertible {
        /// The reservation could not be written: no counter is handed out unreserved.
        case cannotWrite(String)
        /// Every 32-bit counter was used: the device needs a new bindkey.
        case exhausted

        public var description: String {
            switch self {
            case .cannotWrite(let reason): return "cannot reserve BTHome counters: \(reason)"
            case .exhausted: return "every BTHome counter of this bindkey was used: give the device a new bindkey (and remove the counter file)"
            }
        }
    }

    /// Opens (or starts) the counter at `path`. A missing file starts at 0. `clock` gives the
    /// wall clock's seconds, used only after damage.
    public init(path: String, blockSize: UInt32 = defaultBlockSize, clock: () -> UInt32 = { UInt32(truncatingIfNeeded: time(nil)) }) {
        precondition(blockSize > 0, "a block holds at least one counter")
        self.path = path
        self.blockSize = blockSize
        var start: UInt32 = 0
        switch RegularFile.read(path, maximumBytes: 256, followSymlinks: false) {
        case .success(let bytes):
            if let stored = Self.parse(bytes) {
                start = stored
            } else {
                let aside = RegularFile.moveAside(path)
                damage = "the BTHome counter file \(path) is damaged; moved to \(aside ?? "(could not move it)"), counting from the clock"
                start = clock()
            }
        case .failure(let error) where error.kind == .missing:
            start = 0
        case .failure(let error):
            let aside = error.kind == .notRegular ? nil : RegularFile.moveAside(path)
            damage = "the BTHome counter file \(path) cannot be read (\(error.description))\(aside.map { "; moved to \($0)" } ?? ""), counting from the clock"
            start = clock()
        }
        next = start
        reservedUntil = start
    }

    /// The next counter, never one handed out before (by this or an earlier run with this file).
    public func take() throws(Failure) -> UInt32 {
        guard !exhausted else { throw .exhausted }
        if next == reservedUntil {
            let (end, overflow) = next.addingReportingOverflow(blockSize)
            let until = overflow ? UInt32.max : end
            guard until > next else { throw .exhausted }
            if let failure = RegularFile.writeAtomically(Array((Self.header + "\(until)\n").utf8), to: path) {
                throw .cannotWrite(failure)
            }
            reservedUntil = until
        }
        let counter = next
        // UInt32.max itself is never handed out: the file's "next" could not say past it.
        if next == UInt32.max - 1 { exhausted = true }
        next += 1
        return counter
    }

    /// "blemu-bthome-counter 1 next N\n" with N a decimal UInt32; nil for anything else.
    static func parse(_ bytes: [UInt8]) -> UInt32? {
        let text = String(decoding: bytes, as: UTF8.self)
        guard text.hasPrefix(header), text.hasSuffix("\n") else { return nil }
        let digits = text.dropFirst(header.count).dropLast()
        guard !digits.isEmpty, digits.count <= 10, digits.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
        return UInt32(digits)
    }
}
#endif
