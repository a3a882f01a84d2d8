import BlemuCore
import Testing

/// The member names of JSON text at every depth, with the path of their object: what the
/// decoder passes over (names it does not know, a name given twice).
@Suite struct JSONMemberNamesTests {
    typealias Step = JSONMemberNames.PathComponent

    func members(_ text: String) -> [(String, String, Bool)] {
        var seen: [(String, String, Bool)] = []
        JSONMemberNames.forEach(in: Array(text.utf8)) { path, name, repeated in
            seen.append((JSONMemberNames.text(path), name, repeated))
            return true
        }
        return seen
    }

    @Test func everyMemberComesWithItsObjectsPathAndWhetherItWasNamedBefore() {
        let seen = members(#"{"a": [{"b": "x:"}, {"c": {"d": 2, "d": [1, {"e": 3}]}}], "f\u0061": 1, "fa": 2}"#)
        #expect(seen.map(\.0) == ["", "a[0]", "a[1]", "a[1].c", "a[1].c", "a[1].c.d[1]", "", ""])
        #expect(seen.map(\.1) == ["a", "b", "c", "d", "d", "e", "fa", "fa"])
        #expect(seen.map(\.2) == [false, false, false, false, true, false, false, true])
        // Only the outermost object's members count for the top level.
        #expect(JSONMemberNames.firstDuplicateAtTopLevel(in: Array(#"{"x": {"a": 1, "a": 2}, "y": 1}"#.utf8)) == nil)
        #expect(JSONMemberNames.firstDuplicateAtTopLevel(in: Array(#"{"x": {"a": 1}, "x": 2}"#.utf8)) == "x")
    }

    @Test func theScanIsTotalOnAnyBytes() {
        var random = SeededRandom(seed: 34)
        let alphabet = Array(#"{}[]":,\\u0dD8Ffx "#.utf8) + [0xC3, 0xA9, 0xFF, 0x00]
        for _ in 0..<5000 {
            let bytes = (0..<Int(random.next() % 60)).map { _ in alphabet[Int(random.next() % UInt64(alphabet.count))] }
            JSONMemberNames.forEach(in: bytes) { _, _, _ in true }
        }
        #expect(members(#"]]}{"a":1,"a""#).map(\.2) == [false], "a name without its colon is no member")
    }
}
