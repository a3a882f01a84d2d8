import BlemuChatProtocol
import BlemuCore
import Testing

/// The framed chat: frames survive encoding, hostile bytes get errors, and a message comes out
/// of its pieces once, whole, whatever is repeated.
@Suite struct ChatFrameTests {
    let id = ChatMessageID(sender: "board-2", number: 7)

    func deliver(_ frames: [[UInt8]], into reassembly: inout ChatReassembly) throws -> ChatReassembly.Outcome {
        var outcome: ChatReassembly.Outcome = .incomplete
        for frame in frames {
            let decoded = try ChatFrame(decoding: frame[...])
            #expect(decoded.encoded() == frame)
            outcome = reassembly.take(decoded)
        }
        return outcome
    }

    @Test func framesRoundTripAndFitTheirLimit() throws {
        let text = Array(String(repeating: "é", count: 2048).utf8)   // 4096 bytes
        let frames = ChatFrame.frames(of: text, id: id, hops: 3, limit: 20)
        #expect(frames.allSatisfy { $0.count <= 20 })
        // The stream is the name (7 bytes) and the text: 11 bytes in the DATA, 17 in each MORE.
        #expect(frames.count == 1 + (4096 + 7 - 11 + 16) / 17)
        var reassembly = ChatReassembly()
        #expect(try deliver(frames, into: &reassembly) == .message(id, text: text, hops: 3))
        #expect(try ChatFrame(decoding: ChatFrame.ack(number: 7).encoded()[...]) == .ack(number: 7))
        // An ACK names the sender it acknowledges (a bridge writes the messages of others).
        #expect(ChatFrame.ack(number: 7, sender: "bé").encoded() == [0x02, 7, 0, 0, 0, 0x62, 0xC3, 0xA9])
        #expect(try ChatFrame(decoding: ChatFrame.ack(number: 7, sender: "bé").encoded()[...]) == .ack(number: 7, sender: "bé"))
        // An empty message is one frame, and it is a message.
        let empty = ChatFrame.frames(of: [], id: ChatMessageID(sender: "e", number: 1), hops: 0, limit: 23)
        #expect(empty.count == 1)
        #expect(try deliver(empty, into: &reassembly) == .message(ChatMessageID(sender: "e", number: 1), text: [], hops: 0))
    }

    @Test func hostileBytesAreRefused() {
        for bad: [UInt8] in [[], [0x04], [0x01, 1, 0, 0], [0x02, 1, 0, 0], ChatFrame.ack(number: 1).encoded() + [0xFF],
                             ChatFrame.ack(number: 1).encoded() + [UInt8](repeating: 0x41, count: 33),
                             [0x01, 1, 0, 0, 0, 0, 40, 40, 0], [0x01, 1, 0, 0, 0, 0, 5, 2, 0], [0x03, 0xFF, 0x1F, 1, 2]] {
            #expect(throws: DecodeError.self) { try ChatFrame(decoding: bad[...]) }
        }
        // A text past 4096 bytes, and a first chunk longer than its stream.
        let big = ChatFrame.data(number: 1, hops: 0, senderLength: 1, total: 4098, chunk: [1]).encoded()
        #expect(throws: DecodeError.self) { try ChatFrame(decoding: big[...]) }
        let long = ChatFrame.data(number: 1, hops: 0, senderLength: 0, total: 1, chunk: [1, 2]).encoded()
        #expect(throws: DecodeError.self) { try ChatFrame(decoding: long[...]) }
        // A name that is not UTF-8 does not make a message.
        var reassembly = ChatReassembly()
        #expect(reassembly.take(.data(number: 1, hops: 0, senderLength: 1, total: 2, chunk: [0xFF, 0x41])) == .inconsistent)
    }

    @Test func aResentMessageIsDeliveredOnce() throws {
        var reassembly = ChatReassembly()
        let frames = ChatFrame.frames(of: Array("hello, world".utf8), id: id, hops: 1, limit: 20)
        #expect(frames.count == 2)
        #expect(try deliver(frames, into: &reassembly) == .message(id, text: Array("hello, world".utf8), hops: 1))
        #expect(try deliver(frames, into: &reassembly) == .duplicate(id))
        // A MORE that does not follow is dropped, and the message in pieces with it; a new DATA starts over.
        let other = ChatMessageID(sender: "x", number: 1)
        let pieces = ChatFrame.frames(of: Array("0123456789abcdefghijklmnopqrstuvwxyz0123456789".utf8), id: other, hops: 0, limit: 20)
        #expect(pieces.count >= 3)
        #expect(reassembly.take(try ChatFrame(decoding: pieces[0][...])) == .incomplete)
        #expect(reassembly.take(try ChatFrame(decoding: pieces[2][...])) == .inconsistent)
        #expect(!reassembly.isPending)
        #expect(try deliver(pieces, into: &reassembly) == .message(other, text: Array("0123456789abcdefghijklmnopqrstuvwxyz0123456789".utf8), hops: 0))
    }

    @Test func rememberedIdentitiesAreBounded() throws {
        var reassembly = ChatReassembly()
        for number in 0..<UInt32(ChatReassembly.rememberedLimit + 10) { reassembly.remember(ChatMessageID(sender: "r", number: number)) }
        // The oldest identities are forgotten; the newest still count as delivered.
        let oldest = ChatMessageID(sender: "r", number: 0)
        #expect(try deliver(ChatFrame.frames(of: [1], id: oldest, hops: 0, limit: 23), into: &reassembly) == .message(oldest, text: [1], hops: 0))
        let newest = ChatMessageID(sender: "r", number: UInt32(ChatReassembly.rememberedLimit + 9))
        #expect(try deliver(ChatFrame.frames(of: [1], id: newest, hops: 0, limit: 23), into: &reassembly) == .duplicate(newest))
    }

    @Test func senderNamesAreCutBetweenCharacters() {
        let long = ChatMessageID(sender: String(repeating: "ü", count: 20), number: 1)
        #expect(long.sender == String(repeating: "ü", count: 16))
    }
}
