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
    /// An array's elements (a request line is at most 64 KiB, so they are bounded).
    case array([JSONField])
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
        // Arrays are decoded (a host `scan` takes a list of PHYs); objects are told apart but not
        // decoded: no command takes one.
        if var container = try? decoder.unkeyedContainer() {
            var elements: [JSONField] = []
            while !container.isAtEnd { elements.append(try container.decode(JSONField.self)) }
            self = .array(elements)
            return
        }
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
/// decoder leaves out (it keeps the last of two members with one name). Core's
/// `JSONMemberNames` scans the text (a GATT profile checks every depth with it).
enum JSONObjectNames {
    /// The first name that appears twice among the members of the outermost object in `bytes`
    /// (text that parsed as JSON). Escapes are decoded first, so `"cmd"` and `"c\u006dd"` are
    /// one name, as they are to the decoder. Total on any bytes.
    static func firstDuplicate(in bytes: [UInt8]) -> String? {
        JSONMemberNames.firstDuplicateAtTopLevel(in: bytes)
    }
}
