/// A JSON value to send, with object members in the order given (so every reply starts with
/// `id` and `ok`, and the documentation's examples are what a client sees). In Core, beside
/// `JSONString`, because the control socket's replies, `blemu scan`'s JSON (Observer) and the
/// CLI all write it, and Observer sits beside Control, not above it.
public indirect enum JSONValue: Sendable, ExpressibleByStringLiteral, ExpressibleByIntegerLiteral,
    ExpressibleByBooleanLiteral
{
    case null
    case bool(Bool)
    case integer(Int64)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([(String, JSONValue)])

    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int64) { self = .integer(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }

    /// Compact JSON on one line: no newline can appear in it, whatever the strings hold.
    public var encoded: String {
        var out = ""
        write(into: &out)
        return out
    }

    public func write(into out: inout String) {
        switch self {
        case .null: out += "null"
        case .bool(let value): out += value ? "true" : "false"
        case .integer(let value): out += String(value)
        case .number(let value):
            // JSON has no NaN or infinity; nothing here makes one, but the writer stays total.
            out += value.isFinite ? (value == value.rounded() && abs(value) < 1e15 ? String(Int64(value)) : String(value)) : "null"
        case .string(let value): Self.writeString(value, into: &out)
        case .array(let values):
            out += "["
            for (index, value) in values.enumerated() {
                if index > 0 { out += "," }
                value.write(into: &out)
            }
            out += "]"
        case .object(let members):
            out += "{"
            for (index, member) in members.enumerated() {
                if index > 0 { out += "," }
                Self.writeString(member.0, into: &out)
                out += ":"
                member.1.write(into: &out)
            }
            out += "}"
        }
    }

    private static func writeString(_ string: String, into out: inout String) {
        JSONString.append(string, to: &out)
    }

    /// The member `key` of an object.
    public subscript(key: String) -> JSONValue? {
        guard case .object(let members) = self else { return nil }
        return members.first { $0.0 == key }?.1
    }
}
