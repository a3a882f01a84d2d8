/// A string as a JSON string literal (RFC 8259, 7): quotes and backslashes escaped, control
/// characters as `\u` and four hex digits, and what else `VisibleText` escapes (DEL, C1,
/// the bidirectional overrides, U+2028 and U+2029) escaped too, so the text is safe in a
/// line-oriented log or protocol and on a terminal. Shared by the Diagnostics value and the
/// control socket's replies.
public enum JSONString {
    public static func append(_ string: String, to out: inout String) {
        out += "\""
        for scalar in string.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where VisibleText.isEscaped(scalar):
                let hex = String(scalar.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: out.unicodeScalars.append(scalar)
            }
        }
        out += "\""
    }

    public static func literal(_ string: String) -> String {
        var out = ""
        append(string, to: &out)
        return out
    }
}
