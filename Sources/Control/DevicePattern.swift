/// A glob naming several devices for `list` and `watch` (Docs/CONTROL.md, "Naming several
/// devices"): `*` any run of characters (none included), `?` any one character, `[...]` one
/// of a set (`[0-4]`, `[abc]`, `[!0-4]` or `[^0-4]` for any other; a `]` first in the set is
/// one of it), `\` before any character that character itself (`\*`, `\[`, `\\`).
///
/// The text comes from a control client, so it is checked whole before use (at most
/// `maxLength` bytes, every `[` closed, no range backwards, no `\` at the end), and matching is
/// iterative: one pass that goes back only to the last `*` seen, so a pattern of n pieces
/// against a name of m characters costs at most n × m steps (`*a*a*a*a*b` against a long name
/// included), never the exponential backtracking of a recursive or regex matcher.
public struct DevicePattern: Equatable, Sendable, CustomStringConvertible {
    enum Piece: Equatable, Sendable {
        case character(Unicode.Scalar)
        case anyOne
        case anyRun
        case set(ranges: [ClosedRange<Unicode.Scalar>], negated: Bool)
    }

    let pieces: [Piece]
    /// The pattern as given.
    public let description: String

    /// The longest pattern, in UTF-8 bytes: a request's string bound.
    public static let maxLength = ControlRequest.maxStringLength

    /// Whether `text` is a pattern rather than one device's name: it holds `*`, `?` or `[`. A
    /// name without them is taken exactly, as every command takes it.
    public static func isPattern(_ text: String) -> Bool {
        text.unicodeScalars.contains { $0 == "*" || $0 == "?" || $0 == "[" }
    }

    /// Parses `text`, or says what is wrong with it.
    public static func parse(_ text: String) -> Result<DevicePattern, ControlRequestError> {
        func refuse(_ why: String) -> Result<DevicePattern, ControlRequestError> {
            .failure(ControlRequestError(id: nil, "pattern \(quoted(text, limit: 64)) \(why); \(syntax)"))
        }
        guard !text.isEmpty else { return refuse("is empty") }
        guard text.utf8.count <= maxLength else { return refuse("is \(text.utf8.count) bytes long; at most \(maxLength)") }
        let scalars = Array(text.unicodeScalars)
        var pieces: [Piece] = []
        var index = 0
        while index < scalars.count {
            let scalar = scalars[index]
            index += 1
            switch scalar {
            case "*":
                // `**` matches what `*` does: kept as one, so the matcher has fewer pieces.
                if pieces.last != .anyRun { pieces.append(.anyRun) }
            case "?":
                pieces.append(.anyOne)
            case "\\":
                guard index < scalars.count else { return refuse("ends with a lone \\ (write \\\\ for a backslash)") }
                pieces.append(.character(scalars[index]))
                index += 1
            case "[":
                let start = index - 1
                var negated = false
                if index < scalars.count, scalars[index] == "!" || scalars[index] == "^" {
                    negated = true
                    index += 1
                }
                var ranges: [ClosedRange<Unicode.Scalar>] = []
                var first = true
                var closed = false
                while index < scalars.count {
                    var low = scalars[index]
                    index += 1
                    if low == "]" && !first {
                        closed = true
                        break
                    }
                    first = false
                    if low == "\\" {
                        guard index < scalars.count else { return refuse("ends with a lone \\ (write \\\\ for a backslash)") }
                        low = scalars[index]
                        index += 1
                    }
                    var high = low
                    // `a-z`; a `-` last in the set (`[a-]`) is itself.
                    if index + 1 < scalars.count, scalars[index] == "-", scalars[index + 1] != "]" {
                        high = scalars[index + 1]
                        index += 2
                        if high == "\\" {
                            guard index < scalars.count else { return refuse("ends with a lone \\ (write \\\\ for a backslash)") }
                            high = scalars[index]
                            index += 1
                        }
                        guard low <= high else {
                            return refuse("has the range \(Character(low))-\(Character(high)) backwards")
                        }
                    }
                    ranges.append(low...high)
                }
                guard closed else {
                    return refuse("has a [ at character \(start + 1) that is not closed by ] (write \\[ for a bracket)")
                }
                pieces.append(.set(ranges: ranges, negated: negated))
            default:
                pieces.append(.character(scalar))
            }
        }
        return .success(DevicePattern(pieces: pieces, description: text))
    }

    /// The syntax, as errors end with it.
    static let syntax = "a pattern takes * (any characters), ? (any one), [0-4] or [!0-4] (one of a set, or not), \\ before a character for itself"

    /// Whether the whole of `name` fits the pattern.
    public func matches(_ name: String) -> Bool {
        let text = Array(name.unicodeScalars)
        var piece = 0, position = 0
        // The last `*` seen and where in the name it would next resume: a mismatch after it
        // lets that `*` take one more character and tries again from there. Going back to an
        // earlier `*` would never match anything the last one cannot, so that is the only
        // backtrack: each (piece, position) pair is visited a bounded number of times.
        var lastRun: Int?
        var resume = 0
        while position < text.count {
            if piece < pieces.count {
                switch pieces[piece] {
                case .anyRun:
                    lastRun = piece
                    resume = position
                    piece += 1
                    continue
                case .anyOne:
                    piece += 1
                    position += 1
                    continue
                case .character(let scalar) where scalar == text[position]:
                    piece += 1
                    position += 1
                    continue
                case .set(let ranges, let negated) where ranges.contains(where: { $0.contains(text[position]) }) != negated:
                    piece += 1
                    position += 1
                    continue
                default:
                    break
                }
            }
            guard let run = lastRun else { return false }
            resume += 1
            piece = run + 1
            position = resume
        }
        while piece < pieces.count, pieces[piece] == .anyRun { piece += 1 }
        return piece == pieces.count
    }
}
