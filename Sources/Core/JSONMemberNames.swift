/// The member names of JSON objects as their text spells them, at every depth, with the path of
/// the object each is in: what a Codable decoder does not tell. `JSONDecoder` keeps the last of
/// two members with one name (RFC 8259, 4: names within an object SHOULD be unique) and passes
/// over names no `CodingKey` asks for, so a control request naming `cmd` twice, or a profile
/// with a misspelt `permisions`, would decode as something its writer did not mean. The control
/// socket refuses the first (`ControlRequest`), a GATT profile both (`GATTProfile.parse`).
public enum JSONMemberNames {
    /// One step of a path into a JSON value: a member's name or an array's index.
    public enum PathComponent: Equatable, Sendable {
        case name(String)
        case index(Int)
    }

    /// Calls `visit` for each member of each object in `bytes` (text that parsed as JSON), in
    /// the order of the text: the path of the object holding it (empty: the outermost value),
    /// its name (escapes decoded, so `"cmd"` and `"c\u006dd"` are one name, as they are to the
    /// decoder), and whether that object named it before. `visit` returns false to stop. Total
    /// on any bytes (what is not JSON gives some names, never a trap); memory grows with the
    /// nesting of the text, which the decoder that accepted it bounds.
    public static func forEach(in bytes: [UInt8],
                               _ visit: (_ objectPath: [PathComponent], _ name: String, _ repeated: Bool) -> Bool) {
        /// An object (the names it had, the member whose value is being read) or an array (the
        /// index of the element being read).
        struct Container {
            var isObject: Bool
            var names = Set<String>()
            var step: PathComponent
        }
        var open: [Container] = []
        var index = 0
        while index < bytes.count {
            switch bytes[index] {
            case UInt8(ascii: "\""):
                let (name, end) = string(in: bytes, openingAt: index)
                index = end
                guard let top = open.last, top.isObject else { continue }
                var next = index
                while next < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[next]) { next += 1 }
                // A string followed by a colon is a member's name; others are values.
                guard next < bytes.count, bytes[next] == UInt8(ascii: ":") else { continue }
                let repeated = !open[open.count - 1].names.insert(name).inserted
                open[open.count - 1].step = .name(name)
                if !visit(open.dropLast().map(\.step), name, repeated) { return }
            case UInt8(ascii: "{"):
                open.append(Container(isObject: true, step: .name("")))
                index += 1
            case UInt8(ascii: "["):
                open.append(Container(isObject: false, step: .index(0)))
                index += 1
            case UInt8(ascii: "}"), UInt8(ascii: "]"):
                if !open.isEmpty { open.removeLast() }
                index += 1
            case UInt8(ascii: ","):
                if let top = open.last, !top.isObject, case .index(let element) = top.step {
                    open[open.count - 1].step = .index(element + 1)
                }
                index += 1
            default:
                index += 1
            }
        }
    }

    /// The first name that appears twice among the members of the outermost object in `bytes`
    /// (names inside nested values are not its members).
    public static func firstDuplicateAtTopLevel(in bytes: [UInt8]) -> String? {
        var duplicate: String?
        forEach(in: bytes) { objectPath, name, repeated in
            guard objectPath.isEmpty, repeated else { return true }
            duplicate = name
            return false
        }
        return duplicate
    }

    /// "services[2].characteristics[0].uuid": a path as a person reads it (names as they are:
    /// make them visible before showing a peer's or a file's).
    public static func text(_ path: [PathComponent]) -> String {
        var text = ""
        for step in path {
            switch step {
            case .index(let index): text += "[\(index)]"
            case .name(let name): text += (text.isEmpty ? "" : ".") + name
            }
        }
        return text
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
