import BlemuCore
import FoundationEssentials

/// One value of a request object as a client sent it, before it is checked: every JSON value
/// decodes to one of these, so decoding a request never fails for a value's type, only the
/// check that follows (with a message naming the field).
public enum JSONField: Equatable, Sendable {
    case null
    case bool(Bool)
    /// A whole number that fits in 64 bits (`3`, `-1`, `3.0`, `1e2`).
    case integer(Int64)
    /// Any other number Swift can hold (`1.5`, `1e30`).
    case number(Double)
    /// A number beyond what a Double holds (`1e400`).
    case hugeNumber
    case string(String)
    case array
    case object

    /// For errors: "a string", "an array", ...
    public var kind: String {
        switch self {
        case .null: return "null"
        case .bool: return "a boolean"
        case .integer, .number: return "a number"
        case .hugeNumber: return "a number too large to hold"
        case .string: return "a string"
        case .array: return "an array"
        case .object: return "an object"
        }
    }
}

extension JSONField: Decodable {
    private struct AnyKey: CodingKey {
        var stringValue: String
        init?(stringValue: String) { self.stringValue = stringValue }
        var intValue: Int? { nil }
        init?(intValue: Int) { nil }
    }

    public init(from decoder: any Decoder) throws {
        // Nested arrays and objects are told apart but not decoded: no command takes one.
        if (try? decoder.unkeyedContainer()) != nil { self = .array; return }
        if (try? decoder.container(keyedBy: AnyKey.self)) != nil { self = .object; return }
        let value = try decoder.singleValueContainer()
        if value.decodeNil() { self = .null; return }
        if let bool = try? value.decode(Bool.self) { self = .bool(bool); return }
        if let string = try? value.decode(String.self) { self = .string(string); return }
        if let integer = try? value.decode(Int64.self) { self = .integer(integer); return }
        if let number = try? value.decode(Double.self), number.isFinite { self = .number(number); return }
        // The line parsed as JSON, so what is left is a number no Swift type holds.
        self = .hugeNumber
    }
}

/// `JSONValue` is Core's (`BlemuCore.JSONValue`): the name is kept here so that code which
/// imports only Control still finds it.
public typealias JSONValue = BlemuCore.JSONValue

/// Text from a client, made safe to echo in a log line or an error: at most `limit`
/// characters, control characters escaped as `\u` and four hex digits, a backslash doubled.
public func printable(_ text: String, limit: Int = 64) -> String {
    var out = ""
    var count = 0
    for scalar in text.unicodeScalars {
        if count == limit {
            out += "…"
            break
        }
        count += 1
        if scalar.value < 0x20 || scalar.value == 0x7F || (0x80..<0xA0).contains(scalar.value)
            || scalar.value == 0x2028 || scalar.value == 0x2029 {
            let hex = String(scalar.value, radix: 16)
            out += "\\u" + String(repeating: "0", count: max(0, 4 - hex.count)) + hex
        } else if scalar == "\\" {
            out += "\\\\"
        } else {
            out.unicodeScalars.append(scalar)
        }
    }
    return out
}

/// `printable` in single quotes, for naming a client's value in an error.
public func quoted(_ text: String, limit: Int = 64) -> String {
    "'" + printable(text, limit: limit) + "'"
}

/// The member names of a JSON object's top level, as its text spells them: the one check the
/// decoder leaves out (it keeps the last of two members with one name).
enum JSONObjectNames {
    /// The first name that appears twice among the members of the outermost object in `bytes`
    /// (text that parsed as JSON). Escapes are decoded first, so `"cmd"` and `"c\u006dd"` are
    /// one name, as they are to the decoder. Total on any bytes.
    static func firstDuplicate(in bytes: [UInt8]) -> String? {
        var seen = Set<String>()
        var depth = 0
        var index = 0
        while index < bytes.count {
            switch bytes[index] {
            case UInt8(ascii: "\""):
                let (name, end) = string(in: bytes, openingAt: index)
                index = end
                guard depth == 1 else { continue }
                var next = index
                while next < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[next]) { next += 1 }
                // A string followed by a colon is a member's name; others are values.
                if next < bytes.count, bytes[next] == UInt8(ascii: ":"), !seen.insert(name).inserted { return name }
            case UInt8(ascii: "{"), UInt8(ascii: "["):
                depth += 1
                index += 1
            case UInt8(ascii: "}"), UInt8(ascii: "]"):
                depth -= 1
                index += 1
            default:
                index += 1
            }
        }
        return nil
    }

    /// The string whose opening quote is at `start`, escapes decoded, and the index after its
    /// closing quote (or the end).
    private static func string(in bytes: [UInt8], openingAt start: Int) -> (String, Int) {
        var utf8: [UInt8] = []
        var index = start + 1
        var pendingHighSurrogate: UInt32?
        func appendScalar(_ value: UInt32) {
            let scalar = Unicode.Scalar(value) ?? "\u{FFFD}"
            utf8.append(contentsOf: Array(String(Character(scalar)).utf8))
        }
        func flushSurrogate() {
            if pendingHighSurrogate != nil { appendScalar(0xFFFD) }
            pendingHighSurrogate = nil
        }
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                flushSurrogate()
                return (String(decoding: utf8, as: UTF8.self), index + 1)
            }
            guard byte == UInt8(ascii: "\\"), index + 1 < bytes.count else {
                flushSurrogate()
                utf8.append(byte)
                index += 1
                continue
            }
            let escaped = bytes[index + 1]
            index += 2
            guard escaped == UInt8(ascii: "u") else {
                flushSurrogate()
                switch escaped {
                case UInt8(ascii: "b"): utf8.append(0x08)
                case UInt8(ascii: "f"): utf8.append(0x0C)
                case UInt8(ascii: "n"): utf8.append(0x0A)
                case UInt8(ascii: "r"): utf8.append(0x0D)
                case UInt8(ascii: "t"): utf8.append(0x09)
                default: utf8.append(escaped)  // \" \\ \/
                }
                continue
            }
            var value: UInt32 = 0
            var digits = 0
            while digits < 4, index < bytes.count, let digit = Hex.digit(bytes[index]) {
                value = value << 4 | UInt32(digit)
                digits += 1
                index += 1
            }
            switch value {
            case 0xD800...0xDBFF:
                flushSurrogate()
                pendingHighSurrogate = value
            case 0xDC00...0xDFFF:
                if let high = pendingHighSurrogate {
                    pendingHighSurrogate = nil
                    appendScalar(0x10000 + ((high - 0xD800) << 10) + (value - 0xDC00))
                } else {
                    appendScalar(0xFFFD)
                }
            default:
                flushSurrogate()
                appendScalar(value)
            }
        }
        flushSurrogate()
        return (String(decoding: utf8, as: UTF8.self), index)
    }
}
