import BlemuCore
import CSystemd
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// One log entry as the handler received it, with the metadata of the logger it came from.
/// Kept by reference (no copy of its strings) when the flood budget leaves it out.
struct PendingEntry {
    var event: LogEvent
    var handlerMetadata: Logger.Metadata
}

/// The fields of one journal entry, `NAME=value` each, built in buffers kept from entry to
/// entry, then handed to sd_journal_sendv as iovecs pointing into them. sd_journal_sendv(3):
/// "Each structure should reference one field of the entry to submit" and it "passes the
/// specified data along unmodified", so a value may hold newlines or any byte.
struct JournalEntryBuilder {
    private(set) var bytes: [UInt8] = []
    /// Where each field ends in `bytes`.
    private(set) var ends: [Int] = []
    private var vectors: [iovec] = []

    init() {
        bytes.reserveCapacity(1024)
        ends.reserveCapacity(32)
        vectors.reserveCapacity(32)
    }

    mutating func reset() {
        bytes.removeAll(keepingCapacity: true)
        ends.removeAll(keepingCapacity: true)
    }

    private mutating func name(_ name: StaticString) {
        name.withUTF8Buffer { bytes.append(contentsOf: $0) }
        bytes.append(UInt8(ascii: "="))
    }

    private mutating func end() { ends.append(bytes.count) }

    mutating func field(_ name: StaticString, _ value: StaticString) {
        self.name(name)
        value.withUTF8Buffer { bytes.append(contentsOf: $0) }
        end()
    }

    mutating func field(_ name: StaticString, _ value: String) {
        self.name(name)
        append(value)
        end()
    }

    mutating func field(_ name: StaticString, decimal value: UInt64) {
        self.name(name)
        appendDecimal(value)
        end()
    }

    /// A metadata key and value: `BLEMU_<KEY>=value`.
    mutating func metadata(key: String, value: Logger.MetadataValue) {
        JournalFields.appendName(forKey: key, to: &bytes)
        bytes.append(UInt8(ascii: "="))
        append(value)
        end()
    }

    mutating func append(_ text: String) {
        var text = text
        text.withUTF8 { bytes.append(contentsOf: $0) }
    }

    mutating func append(_ value: Logger.MetadataValue) {
        switch value {
        case .string(let text): append(text)
        case .stringConvertible(let convertible): append(convertible.description)
        default: append(value.description)
        }
    }

    mutating func appendDecimal(_ value: UInt64) {
        var digits: (UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8,
                      UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8) =
            (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        var count = 0
        var rest = value
        withUnsafeMutableBytes(of: &digits) { buffer in
            repeat {
                buffer[19 - count] = UInt8(ascii: "0") + UInt8(rest % 10)
                rest /= 10
                count += 1
            } while rest > 0
            bytes.append(contentsOf: buffer[(20 - count)...])
        }
    }

    /// Calls `body` with one iovec per field, valid only during the call.
    mutating func withFields<Result>(_ body: (UnsafeBufferPointer<iovec>) -> Result) -> Result {
        vectors.removeAll(keepingCapacity: true)
        return bytes.withUnsafeMutableBufferPointer { storage in
            var start = 0
            for end in ends {
                vectors.append(iovec(iov_base: UnsafeMutableRawPointer(storage.baseAddress! + start), iov_len: end - start))
                start = end
            }
            return vectors.withUnsafeBufferPointer(body)
        }
    }

    /// The fields as `(name, value)` pairs, for tests and the stderr fallback.
    static func decode(_ fields: UnsafeBufferPointer<iovec>) -> [(name: String, value: [UInt8])] {
        fields.map { vector in
            let raw = UnsafeRawBufferPointer(start: vector.iov_base, count: vector.iov_len)
            let equals = raw.firstIndex(of: UInt8(ascii: "=")) ?? raw.count
            return (String(decoding: raw[..<equals], as: UTF8.self), Array(raw[min(equals + 1, raw.count)...]))
        }
    }
}
