import BlemuCore
import Testing
@testable import BlemuControl

/// `list` and `watch` by a glob (`Tag 0*`): checked whole, matched without backtracking blowup.
@Suite struct DevicePatternTests {
    private func fits(_ pattern: String, _ name: String) -> Bool {
        guard case .success(let parsed) = DevicePattern.parse(pattern) else {
            Issue.record("\(pattern) was refused")
            return false
        }
        return parsed.matches(name)
    }

    private func refusal(_ pattern: String) -> String? {
        guard case .failure(let error) = DevicePattern.parse(pattern) else { return nil }
        return error.message
    }

    @Test(arguments: [
        ("Tag 0*", "Tag 0001", true), ("Tag 0*", "Tag 1000", false), ("Tag 0*", "Tag 0", true),
        ("Tag 00[1-4]?", "Tag 0017", true), ("Tag 00[1-4]?", "Tag 0057", false), ("Tag 00[1-4]?", "Tag 001", false),
        ("Tag 00[!1-4]?", "Tag 0057", true), ("Tag 00[^1-4]?", "Tag 0017", false),
        ("*", "", true), ("*", "anything", true), ("?", "", false), ("??", "ab", true), ("a*b*c", "aXbYc", true),
        ("a*b*c", "aXbY", false), ("*c", "abcabc", true), ("a**b", "ab", true),
        ("Lamp \\*1", "Lamp *1", true), ("Lamp \\*1", "Lamp 21", false), ("a\\\\b", "a\\b", true),
        ("[]]x", "]x", true), ("[a-]", "-", true), ("[\\]]", "]", true), ("[!]]", "a", true), ("[!]]", "]", false),
        ("Küche *", "Küche 3", true), ("?üche", "Küche", true),
    ])
    func patternsFitTheNamesTheySay(pattern: String, name: String, fits expected: Bool) {
        #expect(fits(pattern, name) == expected, "\(pattern) against \(name)")
    }

    @Test(arguments: [
        ("Tag [0-4", "that is not closed by ]"), ("[", "that is not closed"), ("Tag\\", "ends with a lone \\"),
        ("[z-a]", "the range z-a backwards"), ("", "is empty"), ("[a-\\", "ends with a lone \\"),
    ])
    func aBadPatternIsRefusedWithTheReason(pattern: String, reason: String) {
        let message = refusal(pattern)
        #expect(message?.contains(reason) == true, "\(pattern): \(message ?? "accepted")")
        #expect(message?.contains("a pattern takes *") == true)
    }

    @Test func aPatternLongerThanAStringFieldIsRefused() {
        let long = String(repeating: "*a", count: 129)
        #expect(refusal(long)?.contains("is 258 bytes long; at most 256") == true)
        #expect(refusal(String(repeating: "a*", count: 128)) == nil)
    }

    /// The classic blowup of a backtracking matcher: stars that each may take any run, and a
    /// name that almost fits. Matched in n × m steps here (a recursive matcher takes
    /// exponential time); the name is as long as a local name may be (248 bytes), and longer.
    @Test func aPathologicalPatternIsMatchedInLinearishTime() throws {
        let pattern = try DevicePattern.parse("*a*a*a*a*a*a*a*a*a*a*a*a*b").get()
        let name = String(repeating: "a", count: 248)
        let clock = ContinuousClock()
        let took = clock.measure {
            for _ in 0..<100 { #expect(!pattern.matches(name)) }
            #expect(pattern.matches(name + "b"))
            #expect(!pattern.matches(String(repeating: "a", count: 100_000)))
        }
        // Generous for a debug build on a busy machine; exponential would be years.
        #expect(took < .seconds(5), "took \(took)")
    }

    @Test func onlyTextWithAStarAQuestionMarkOrABracketIsAPattern() {
        #expect(DevicePattern.isPattern("Tag 0*"))
        #expect(DevicePattern.isPattern("Tag 00?"))
        #expect(DevicePattern.isPattern("Tag [1]"))
        #expect(!DevicePattern.isPattern("heart-rate#2"))
        #expect(!DevicePattern.isPattern("a\\b"))
        #expect(!DevicePattern.isPattern("fleet:thermometers"))
    }
}
