/// Text a peer controls (a name, a chat line, a value shown as text), made safe to show on a
/// terminal or in a line-oriented log: every character that a terminal would act on instead of
/// showing is written as a visible escape, so a peer can neither steer the terminal (ESC
/// sequences retitle windows or clear the screen, BEL rings) nor make one of its lines look
/// like two, or like someone else's (CR, LF, the Unicode line separators, bidirectional
/// overrides that reorder what follows them).
///
/// | characters | shown as |
/// |---|---|
/// | C0 controls U+0000–U+001F (TAB, LF and CR too), DEL U+007F, C1 controls U+0080–U+009F | `\x1b`, `\x0a`, `\x7f`, `\x9b` |
/// | bidirectional embeddings and overrides U+202A–U+202E, isolates U+2066–U+2069 | `\u202e`, `\u2066` |
/// | line and paragraph separators U+2028, U+2029 | `\u2028`, `\u2029` |
///
/// Everything else, the backslash included, stays as it is: the result is for people, not
/// to be parsed back. Text with nothing to escape is returned as it came, without a copy.
public enum VisibleText {
    /// `text` with every character of the table above escaped.
    public static func make(_ text: String) -> String {
        guard needsEscaping(text) else { return text }
        var out = ""
        out.reserveCapacity(text.utf8.count + 16)
        appendEscaping(text, to: &out)
        return out
    }

    /// UTF-8 from a peer, possibly not valid: bad sequences become U+FFFD, then as `make`.
    public static func make(utf8 bytes: some Collection<UInt8>) -> String {
        make(String(decoding: bytes, as: UTF8.self))
    }

    /// Appends `text` to `out` with the characters of the table above escaped.
    public static func append(_ text: String, to out: inout String) {
        if needsEscaping(text) { appendEscaping(text, to: &out) } else { out += text }
    }

    /// Whether a character is one `make` escapes.
    @inline(__always)
    public static func isEscaped(_ scalar: Unicode.Scalar) -> Bool {
        let value = scalar.value
        return value < 0x20 || (0x7F...0x9F).contains(value) || (0x202A...0x202E).contains(value)
            || (0x2066...0x2069).contains(value) || value == 0x2028 || value == 0x2029
    }

    /// Whether `text` has anything to escape, from its UTF-8 alone: C0 and DEL are single
    /// bytes, C1 is 0xC2 0x80–0x9F, and the others start with 0xE2 (then checked exactly).
    public static func needsEscaping(_ text: String) -> Bool {
        var utf8 = text.utf8.makeIterator()
        while let byte = utf8.next() {
            if byte < 0x20 || byte == 0x7F { return true }
            if byte == 0xC2 || byte == 0xE2 {
                // A lead byte of a possible escape: decide on the scalars (rare).
                return text.unicodeScalars.contains(where: isEscaped)
            }
        }
        return false
    }

    private static func appendEscaping(_ text: String, to out: inout String) {
        for scalar in text.unicodeScalars {
            guard isEscaped(scalar) else {
                out.unicodeScalars.append(scalar)
                continue
            }
            let value = scalar.value
            if value <= 0xFF {
                out += "\\x"
                out.unicodeScalars.append(hexDigit(value >> 4))
                out.unicodeScalars.append(hexDigit(value & 0xF))
            } else {
                out += "\\u"
                for shift in stride(from: 12, through: 0, by: -4) { out.unicodeScalars.append(hexDigit(value >> UInt32(shift) & 0xF)) }
            }
        }
    }

    @inline(__always)
    private static func hexDigit(_ nibble: UInt32) -> Unicode.Scalar {
        Unicode.Scalar(UInt8(nibble < 10 ? 0x30 + nibble : 0x57 + nibble))
    }
}

extension String {
    /// This text as `VisibleText` shows it: safe on a terminal, one line.
    public var visible: String { VisibleText.make(self) }
}
