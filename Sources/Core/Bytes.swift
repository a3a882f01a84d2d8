/// Little-endian byte reading and writing, shared by every codec.
///
/// Everything on the air in Bluetooth is little-endian (Vol 3, Part F, 3.3: "multi-octet fields
/// are transmitted with the least significant octet first"). Readers work on slices of the
/// buffer they came from, so decoding copies nothing.

/// Why bytes from outside could not be decoded. Decoders never trap: they throw this.
public struct DecodeError: Error, Equatable, CustomStringConvertible, Sendable {
    public enum Kind: Equatable, Sendable {
        /// Fewer bytes than the format needs.
        case truncated
        /// More bytes than the format allows.
        case trailingBytes
        /// A field holds a value the format forbids.
        case invalidValue
        /// A length field disagrees with the bytes present.
        case lengthMismatch
        /// A type or opcode this decoder does not know.
        case unknownType
    }
    public var kind: Kind
    public var context: String

    public init(_ kind: Kind, _ context: String = "") {
        self.kind = kind
        self.context = context
    }

    public var description: String {
        context.isEmpty ? "\(kind)" : "\(kind): \(context)"
    }
}

public struct ByteReader {
    public let bytes: ArraySlice<UInt8>
    /// Absolute index into `bytes` of the next byte to read.
    public var position: Int

    @inlinable public init(_ bytes: ArraySlice<UInt8>) {
        self.bytes = bytes
        self.position = bytes.startIndex
    }

    @inlinable public init(_ bytes: [UInt8]) {
        self.init(bytes[...])
    }

    @inlinable public var remaining: Int { bytes.endIndex - position }
    @inlinable public var isAtEnd: Bool { position >= bytes.endIndex }

    @inlinable public mutating func u8() throws(DecodeError) -> UInt8 {
        guard position < bytes.endIndex else { throw DecodeError(.truncated) }
        defer { position += 1 }
        return bytes[position]
    }

    @inlinable public mutating func u16() throws(DecodeError) -> UInt16 {
        guard remaining >= 2 else { throw DecodeError(.truncated) }
        defer { position += 2 }
        return UInt16(bytes[position]) | UInt16(bytes[position + 1]) << 8
    }

    @inlinable public mutating func u24() throws(DecodeError) -> UInt32 {
        guard remaining >= 3 else { throw DecodeError(.truncated) }
        defer { position += 3 }
        return UInt32(bytes[position]) | UInt32(bytes[position + 1]) << 8 | UInt32(bytes[position + 2]) << 16
    }

    @inlinable public mutating func u32() throws(DecodeError) -> UInt32 {
        guard remaining >= 4 else { throw DecodeError(.truncated) }
        var value: UInt32 = 0
        for i in 0..<4 { value |= UInt32(bytes[position + i]) << (8 * UInt32(i)) }
        position += 4
        return value
    }

    @inlinable public mutating func u64() throws(DecodeError) -> UInt64 {
        guard remaining >= 8 else { throw DecodeError(.truncated) }
        var value: UInt64 = 0
        for i in 0..<8 { value |= UInt64(bytes[position + i]) << (8 * UInt64(i)) }
        position += 8
        return value
    }

    @inlinable public mutating func i8() throws(DecodeError) -> Int8 { Int8(bitPattern: try u8()) }

    /// The next `count` bytes, as a slice of the input (no copy).
    @inlinable public mutating func bytes(_ count: Int) throws(DecodeError) -> ArraySlice<UInt8> {
        guard count >= 0, remaining >= count else { throw DecodeError(.truncated) }
        defer { position += count }
        return bytes[position..<position + count]
    }

    @inlinable public mutating func skip(_ count: Int) throws(DecodeError) {
        guard count >= 0, remaining >= count else { throw DecodeError(.truncated) }
        position += count
    }

    /// Everything not yet read.
    @inlinable public mutating func rest() -> ArraySlice<UInt8> {
        defer { position = bytes.endIndex }
        return bytes[position...]
    }

    /// Throws unless every byte has been read.
    @inlinable public func expectEnd(_ context: String = "") throws(DecodeError) {
        guard isAtEnd else { throw DecodeError(.trailingBytes, context) }
    }
}

extension Array where Element == UInt8 {
    @inlinable public mutating func appendLE(_ value: UInt8) { append(value) }
    @inlinable public mutating func appendLE(_ value: UInt16) {
        append(UInt8(truncatingIfNeeded: value))
        append(UInt8(truncatingIfNeeded: value >> 8))
    }
    @inlinable public mutating func appendLE24(_ value: UInt32) {
        append(UInt8(truncatingIfNeeded: value))
        append(UInt8(truncatingIfNeeded: value >> 8))
        append(UInt8(truncatingIfNeeded: value >> 16))
    }
    @inlinable public mutating func appendLE(_ value: UInt32) {
        for i in 0..<4 { append(UInt8(truncatingIfNeeded: value >> (8 * UInt32(i)))) }
    }
    @inlinable public mutating func appendLE(_ value: UInt64) {
        for i in 0..<8 { append(UInt8(truncatingIfNeeded: value >> (8 * UInt64(i)))) }
    }
    @inlinable public mutating func appendLE(_ value: Int16) { appendLE(UInt16(bitPattern: value)) }

    /// Overwrites two bytes at `index` (used to patch lengths after a body is written).
    @inlinable public mutating func setLE(_ value: UInt16, at index: Int) {
        self[index] = UInt8(truncatingIfNeeded: value)
        self[index + 1] = UInt8(truncatingIfNeeded: value >> 8)
    }
}

/// Hex formatting as the journal fields want it (`0x0a`, `0x002a`).
public enum Hex {
    public static func byte(_ value: UInt8) -> String { "0x" + pad(String(value, radix: 16), 2) }
    public static func word(_ value: UInt16) -> String { "0x" + pad(String(value, radix: 16), 4) }
    public static func bytes<C: Collection>(_ bytes: C, separator: String = "") -> String where C.Element == UInt8 {
        bytes.map { pad(String($0, radix: 16), 2) }.joined(separator: separator)
    }
    /// Parses `"0a1b"`, `"0a 1b"` or `"0x0a1b"`; nil when the text is not whole bytes of hex.
    public static func parse(_ text: String) -> [UInt8]? {
        var digits = text.filter { !$0.isWhitespace && $0 != ":" && $0 != "-" }
        if digits.hasPrefix("0x") || digits.hasPrefix("0X") { digits.removeFirst(2) }
        guard digits.count % 2 == 0 else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(digits.count / 2)
        var index = digits.startIndex
        while index < digits.endIndex {
            let next = digits.index(index, offsetBy: 2)
            guard let byte = UInt8(digits[index..<next], radix: 16) else { return nil }
            out.append(byte)
            index = next
        }
        return out
    }
    /// The value of one ASCII hex digit (`0-9`, `a-f`, `A-F`); nil for any other byte.
    @inlinable public static func digit(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
    private static func pad(_ s: String, _ width: Int) -> String {
        s.count >= width ? s : String(repeating: "0", count: width - s.count) + s
    }
}
