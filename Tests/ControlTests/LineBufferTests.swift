import Testing
@testable import BlemuControl

/// The per-client input: lines cut as they come, bounded whatever a client sends.
@Suite struct LineBufferTests {
    private func lines(_ buffer: inout LineBuffer) -> [String] {
        var out: [String] = []
        while let next = buffer.nextLine() {
            guard case .line(let bytes) = next else {
                out.append("<too long>")
                break
            }
            out.append(String(decoding: bytes, as: UTF8.self))
        }
        return out
    }

    @Test func severalLinesInOneRead() {
        var buffer = LineBuffer(maxLineLength: 100)
        buffer.append(contentsOf: Array("one\ntwo\r\nthree\n".utf8))
        #expect(lines(&buffer) == ["one", "two", "three"])
        #expect(buffer.pendingCount == 0)
    }

    @Test func partialLinesWaitForTheirNewline() {
        var buffer = LineBuffer(maxLineLength: 100)
        buffer.append(contentsOf: Array("{\"id\":1,".utf8))
        #expect(lines(&buffer).isEmpty)
        #expect(buffer.pendingCount == 8)
        buffer.append(contentsOf: Array("\"cmd\":\"list\"}".utf8))
        #expect(lines(&buffer).isEmpty)
        buffer.append(contentsOf: Array("\n{\"id\"".utf8))
        #expect(lines(&buffer) == ["{\"id\":1,\"cmd\":\"list\"}"])
        #expect(buffer.pendingCount == 5)
        buffer.append(contentsOf: Array(":2}\n".utf8))
        #expect(lines(&buffer) == ["{\"id\":2}"])
    }

    @Test func byteByByte() {
        var buffer = LineBuffer(maxLineLength: 100)
        var got: [String] = []
        for byte in Array("ab\ncd\n\nef".utf8) {
            buffer.append(contentsOf: [byte])
            got += lines(&buffer)
        }
        #expect(got == ["ab", "cd", ""])
        #expect(buffer.pendingCount == 2)
    }

    @Test func oneMegabyteWithoutANewlineOverflowsAtTheLimit() {
        var buffer = LineBuffer(maxLineLength: 64 * 1024)
        let chunk = [UInt8](repeating: UInt8(ascii: "x"), count: 16 * 1024)
        var appended = 0
        var overflowedAfter: Int?
        while appended < 1024 * 1024 {
            buffer.append(contentsOf: chunk)
            appended += chunk.count
            if buffer.nextLine() == .tooLong {
                overflowedAfter = appended
                break
            }
            #expect(buffer.pendingCount <= 64 * 1024 + chunk.count)
        }
        #expect(overflowedAfter == 64 * 1024 + 16 * 1024, "told as soon as the line passed the limit, not after 1 MB")
        // It stays overflowed, and holds nothing more.
        buffer.append(contentsOf: Array("{\"id\":1}\n".utf8))
        #expect(buffer.nextLine() == .tooLong)
        #expect(buffer.pendingCount == 0)
    }

    @Test func aCompleteLineLongerThanTheLimitOverflows() {
        var buffer = LineBuffer(maxLineLength: 10)
        buffer.append(contentsOf: Array("short\n0123456789A\nafter\n".utf8))
        #expect(lines(&buffer) == ["short", "<too long>"])
        var exact = LineBuffer(maxLineLength: 10)
        exact.append(contentsOf: Array("0123456789\r\n".utf8))
        #expect(lines(&exact) == ["0123456789"])
    }

    @Test func staysSmallOverManyLines() {
        var buffer = LineBuffer(maxLineLength: 1000)
        var count = 0
        for index in 0..<20_000 {
            buffer.append(contentsOf: Array("{\"id\":\(index)}\n{\"id\":".utf8))
            count += lines(&buffer).count
            buffer.append(contentsOf: Array("\(index)}\n".utf8))
            count += lines(&buffer).count
            #expect(buffer.pendingCount == 0)
        }
        #expect(count == 40_000)
    }
}
