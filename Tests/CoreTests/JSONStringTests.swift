import BlemuCore
import Testing

@Suite struct JSONStringTests {
    @Test func escapesWhatJSONAndLineProtocolsNeed() {
        #expect(JSONString.literal("plain") == "\"plain\"")
        #expect(JSONString.literal("a\"b\\c") == "\"a\\\"b\\\\c\"")
        #expect(JSONString.literal("l1\nl2\r\t") == "\"l1\\nl2\\r\\t\"")
        #expect(JSONString.literal("\u{01}\u{7F}\u{2028}") == "\"\\u0001\\u007f\\u2028\"")
        #expect(JSONString.literal("°C ✓") == "\"°C ✓\"")
    }
}
