import BlemuCore
import Testing

@Suite struct VisibleTextTests {
    /// The characters `VisibleText` must escape, by the rule of its documentation.
    static func mustEscape(_ value: UInt32) -> Bool {
        value < 0x20 || (0x7F...0x9F).contains(value) || (0x202A...0x202E).contains(value)
            || (0x2066...0x2069).contains(value) || value == 0x2028 || value == 0x2029
    }

    @Test func everyScalarAloneIsEscapedExactlyWhenItShouldBe() {
        var escaped = 0
        for value in UInt32(0)...0x10FFFF {
            guard let scalar = Unicode.Scalar(value) else { continue }   // surrogates
            let text = String(Character(scalar))
            let shown = VisibleText.make(text)
            if Self.mustEscape(value) {
                escaped += 1
                let hex = String(value, radix: 16)
                let expected = value <= 0xFF ? "\\x" + String(repeating: "0", count: 2 - hex.count) + hex : "\\u" + hex
                #expect(shown == expected, "U+\(hex)")
                #expect(VisibleText.needsEscaping(text))
                #expect(VisibleText.isEscaped(scalar))
            } else {
                if shown != text { Issue.record("U+\(String(value, radix: 16)) changed to \(shown)") }
                if VisibleText.needsEscaping(text) { Issue.record("U+\(String(value, radix: 16)) said to need escaping") }
            }
        }
        // 32 C0 + DEL + 32 C1 + 5 embeddings/overrides + 4 isolates + 2 separators.
        #expect(escaped == 32 + 1 + 32 + 5 + 4 + 2)
    }

    @Test func theAttacksOfTheIssueAreShownNotObeyed() {
        #expect(VisibleText.make("\u{1B}]0;owned\u{07}hi") == "\\x1b]0;owned\\x07hi")
        #expect(VisibleText.make("\u{1B}[2J") == "\\x1b[2J")
        #expect(VisibleText.make("ok\r[alice] fake") == "ok\\x0d[alice] fake")
        #expect(VisibleText.make("two\nlines\u{2028}three") == "two\\x0alines\\u2028three")
        #expect(VisibleText.make("abc\u{202E}fdp.exe") == "abc\\u202efdp.exe")
        #expect(VisibleText.make("\u{9B}31m") == "\\x9b31m")
        #expect(VisibleText.make("tab\there") == "tab\\x09here")
    }

    @Test func everyOtherCharacterStaysAsItIs() {
        for text in ["", "plain", "back\\slash \\x1b", "°C ✓ 日本語 👋🏽", "é\u{0301}", "\u{A0}nbsp \u{FEFF}", "\u{2027}\u{202F}\u{2065}\u{206A}"] {
            #expect(VisibleText.make(text) == text)
            #expect(text.visible == text)
        }
    }

    @Test func aShownLineIsOneLineWhateverItHeld() {
        var random = SystemRandomNumberGenerator()
        for _ in 0..<2000 {
            var text = ""
            for _ in 0..<Int.random(in: 0...40, using: &random) {
                let pick = Int.random(in: 0...3, using: &random)
                let value: UInt32 = pick == 0 ? .random(in: 0...0xA0, using: &random)
                    : pick == 1 ? .random(in: 0x2020...0x2070, using: &random) : .random(in: 0x20...0x7E, using: &random)
                text.unicodeScalars.append(Unicode.Scalar(value)!)
            }
            let shown = VisibleText.make(text)
            #expect(!shown.unicodeScalars.contains(where: VisibleText.isEscaped), "\(shown.debugDescription)")
            var appended = "> "
            VisibleText.append(text, to: &appended)
            #expect(appended == "> " + shown)
        }
    }

    @Test func bytesThatAreNotUTF8AreShownAsReplacementCharacters() {
        #expect(VisibleText.make(utf8: [0x61, 0xFF, 0x1B, 0xC2]) == "a\u{FFFD}\\x1b\u{FFFD}")
        #expect(VisibleText.make(utf8: [0xC2, 0x9B]) == "\\x9b")
    }

    @Test func jsonStringsEscapeC1AndBidirectionalControlsToo() {
        #expect(JSONString.literal("\u{85}\u{9B}\u{202E}\u{2066}") == "\"\\u0085\\u009b\\u202e\\u2066\"")
    }
}
