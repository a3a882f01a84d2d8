import Testing
@testable import BlemuCapture
import BlemuCore
import BlemuTestSupport

#if canImport(Glibc)
import Glibc
#endif

private func readFile(_ path: String) -> [UInt8]? {
    let fd = open(path, O_RDONLY)
    guard fd >= 0 else { return nil }
    defer { close(fd) }
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 65536)
    while true {
        let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        if n <= 0 { return bytes }
        bytes.append(contentsOf: chunk[0..<n])
    }
}

private func bigEndian(_ bytes: ArraySlice<UInt8>) -> UInt64 {
    bytes.reduce(0) { $0 << 8 | UInt64($1) }
}

/// One decoded record: flags, timestamp, data (H4 indicator first).
private struct DecodedRecord {
    var flags: UInt32
    var timestamp: Int64
    var data: [UInt8]
}

/// Decodes a whole btsnoop file as a reader would, failing on anything out of place.
private func decode(_ bytes: [UInt8]) -> [DecodedRecord]? {
    guard bytes.count >= 16, Array(bytes[0..<8]) == Array("btsnoop".utf8) + [0],
          bigEndian(bytes[8..<12]) == 1, bigEndian(bytes[12..<16]) == 1002 else { return nil }
    var records: [DecodedRecord] = []
    var index = 16
    while index < bytes.count {
        guard bytes.count - index >= 24 else { return nil }
        let original = Int(bigEndian(bytes[index..<index + 4]))
        let included = Int(bigEndian(bytes[index + 4..<index + 8]))
        guard original == included, bigEndian(bytes[index + 12..<index + 16]) == 0,
              bytes.count - index - 24 >= included else { return nil }
        records.append(DecodedRecord(flags: UInt32(bigEndian(bytes[index + 8..<index + 12])),
                                     timestamp: Int64(bitPattern: bigEndian(bytes[index + 16..<index + 24])),
                                     data: Array(bytes[index + 24..<index + 24 + included])))
        index += 24 + included
    }
    return records
}

@Suite(.serialized) struct BtsnoopFormatTests {
    @Test func headerIsBtsnoopVersion1H4() {
        #expect(Btsnoop.fileHeader == [0x62, 0x74, 0x73, 0x6E, 0x6F, 0x6F, 0x70, 0x00,
                                       0, 0, 0, 1, 0, 0, 0x03, 0xEA])
    }

    @Test func recordLayout() {
        // HCI Reset, host to controller, at the Unix epoch plus 1 µs.
        var buffer: [UInt8] = [0xAA]
        let length = Btsnoop.appendRecord(to: &buffer, packetType: 0x01, packet: [0x03, 0x0C, 0x00][...],
                                          received: false, unixMicroseconds: 1)
        #expect(length == 24 + 4)
        #expect(Array(buffer.dropFirst()) == [0, 0, 0, 4,  0, 0, 0, 4,  0, 0, 0, 2,  0, 0, 0, 0,
                                               0x00, 0xDC, 0xDD, 0xB3, 0x0F, 0x2F, 0x80, 0x01,
                                               0x01, 0x03, 0x0C, 0x00])
    }

    @Test func flagsByTypeAndDirection() {
        #expect(Btsnoop.Flags(packetType: 0x01, received: false).rawValue == 2)  // command sent
        #expect(Btsnoop.Flags(packetType: 0x04, received: true).rawValue == 3)   // event received
        #expect(Btsnoop.Flags(packetType: 0x02, received: false).rawValue == 0)  // ACL sent
        #expect(Btsnoop.Flags(packetType: 0x02, received: true).rawValue == 1)   // ACL received
        #expect(Btsnoop.Flags(packetType: 0x05, received: true).rawValue == 1)   // ISO received
    }

    @Test func timestampsCountFromYearZero() {
        // 2026-01-01T00:00:00Z: 1767225600 s after 1970; btsnoop counts from 0000-01-01.
        var buffer: [UInt8] = []
        Btsnoop.appendRecord(to: &buffer, packetType: 0x04, packet: [0x0E, 0x00][...], received: true,
                             unixMicroseconds: 1_767_225_600_000_000)
        let timestamp = Int64(bitPattern: bigEndian(buffer[16..<24]))
        #expect(timestamp == 1_767_225_600_000_000 + 0x00dc_ddb3_0f2f_8000)
    }

    @Test func sizes() {
        #expect(ByteSize.parse("4096") == 4096)
        #expect(ByteSize.parse("10M") == 10 << 20)
        #expect(ByteSize.parse("64k") == 64 << 10)
        #expect(ByteSize.parse("2G") == 2 << 30)
        for bad in ["", "M", "10MB", "1.5M", "-1", "10 M", "99999999999999999999", "9999999999999999G"] {
            #expect(ByteSize.parse(bad) == nil, "\(bad)")
        }
    }
}

@Suite(.serialized) struct BtsnoopWriterTests {
    @Test func writesEveryPacketAndCountsFrames() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        var now: Int64 = 1_000_000
        let writer = try BtsnoopWriter(path: directory.file("c.btsnoop"), unixMicroseconds: { now += 5; return now })
        writer.write(packetType: 0x01, packet: [0x03, 0x0C, 0x00][...], received: false)
        writer.write(packetType: 0x04, packet: [0x0E, 0x04, 0x01, 0x03, 0x0C, 0x00][...], received: true)
        writer.write(packetType: 0x02, packet: [0x40, 0x00, 0x01, 0x00, 0xAB][...], received: true)
        #expect(writer.framesWritten == 3)
        // Each record is on disk as soon as write returns: no buffering to flush.
        let written = try records(directory.file("c.btsnoop"))
        #expect(written.map(\.flags) == [2, 3, 1])
        #expect(written.map(\.data) == [[0x01, 0x03, 0x0C, 0x00], [0x04, 0x0E, 0x04, 0x01, 0x03, 0x0C, 0x00],
                                        [0x02, 0x40, 0x00, 0x01, 0x00, 0xAB]])
        #expect(written.map(\.timestamp) == [1_000_005, 1_000_010, 1_000_015].map { $0 + Btsnoop.unixEpochOffsetMicroseconds })
        writer.close()
    }

    @Test func publishesTheCursor() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let writer = try BtsnoopWriter(path: directory.file("c.btsnoop"), publishesCursor: true)
        #expect(CaptureCursor.lastFrame == 0)
        writer.write(packetType: 0x01, packet: [0x03, 0x0C, 0x00][...], received: false)
        writer.write(packetType: 0x01, packet: [0x03, 0x0C, 0x00][...], received: false)
        #expect(CaptureCursor.lastFrame == 2)
        writer.close()
        #expect(CaptureCursor.lastFrame == nil)
    }

    @Test func rotatesWithinTheLimitAndKeepsThreeGenerations() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.file("c.btsnoop")
        let limit = 4096
        let writer = try BtsnoopWriter(path: path, maxFileBytes: limit, generations: 3)
        var ranges: [ClosedRange<UInt64>] = []
        writer.onRotated = { first, last in ranges.append(first...last) }
        let packet = [UInt8](repeating: 0x5A, count: 200)  // ACL of 204 octets: a record of 229
        let count = 100
        for index in 0..<count {
            var acl: [UInt8] = [0x40, 0x00, 196, 0]
            acl += packet[4...]
            acl[4] = UInt8(index)
            writer.write(packetType: 0x02, packet: acl[...], received: index % 2 == 0)
        }
        #expect(writer.framesWritten == UInt64(count))
        #expect(writer.rotations > 3)
        // The closed files' frames follow one another from frame 1.
        #expect(ranges.count == writer.rotations && ranges.first?.lowerBound == 1)
        #expect(zip(ranges, ranges.dropFirst()).allSatisfy { $0.upperBound + 1 == $1.lowerBound })
        var frames: [UInt8] = []
        for name in [path + ".3", path + ".2", path + ".1", path] {
            let bytes = try #require(readFile(name), "\(name)")
            #expect(bytes.count <= limit, "\(name): \(bytes.count) bytes")
            let records = try #require(decode(bytes), "\(name) does not decode")
            #expect(!records.isEmpty)
            frames += records.map { $0.data[5] }
        }
        #expect(readFile(path + ".4") == nil)
        // The newest frames, in order, none lost between the files kept.
        #expect(frames == (count - frames.count..<count).map { UInt8($0) })
        writer.close()
    }

    @Test func aRestartKeepsThePreviousCapture() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.file("c.btsnoop")
        let first = try BtsnoopWriter(path: path)
        first.write(packetType: 0x01, packet: [0x03, 0x0C, 0x00][...], received: false)
        first.close()
        let second = try BtsnoopWriter(path: path)
        second.close()
        #expect(try records(path + ".1").count == 1)
        #expect(try records(path).isEmpty)
    }

    @Test func aPacketLargerThanTheLimitStillGoesIntoAFileOfItsOwn() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.file("c.btsnoop")
        let writer = try BtsnoopWriter(path: path, maxFileBytes: 4096)
        writer.write(packetType: 0x01, packet: [0x03, 0x0C, 0x00][...], received: false)
        let big = [UInt8](repeating: 0, count: 8000)
        writer.write(packetType: 0x02, packet: big[...], received: true)
        writer.write(packetType: 0x01, packet: [0x03, 0x0C, 0x00][...], received: false)
        #expect(try records(path + ".2").count == 1)
        #expect(try records(path + ".1").map(\.data.count) == [8001])
        #expect(try records(path).count == 1)
        #expect(writer.framesWritten == 3)
        writer.close()
    }

    @Test func aFailedWriteStopsTheCaptureOnceAndKeepsTheFileReadable() throws {
        // /dev/full: every write fails with ENOSPC, as on a full disk. Given as the path, it is
        // refused before anything is written (a device node, not a regular file).
        guard access("/dev/full", W_OK) == 0 else { return }
        var failures: [CaptureError] = []
        do {
            let writer = try BtsnoopWriter(path: "/dev/full")
            Issue.record("opening /dev/full wrote a header: \(writer.framesWritten)")
        } catch {
            failures.append(error)
        }
        #expect(failures.first?.reason == "a character device, not a regular file")
        failures.removeAll()

        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let writer = try BtsnoopWriter(path: directory.file("c.btsnoop"), publishesCursor: true)
        writer.onFailure = { failures.append($0) }
        writer.write(packetType: 0x01, packet: [0x03, 0x0C, 0x00][...], received: false)
        // Make the next writes fail: the directory gone does not stop an open fd, so swap the fd
        // for /dev/full's by closing and reopening underneath.
        let full = open("/dev/full", O_WRONLY)
        #expect(full >= 0)
        defer { close(full) }
        #expect(dup2(full, writerFD(writer)) >= 0)
        writer.write(packetType: 0x01, packet: [0x03, 0x0C, 0x00][...], received: false)
        writer.write(packetType: 0x01, packet: [0x03, 0x0C, 0x00][...], received: false)
        #expect(failures.count == 1)
        #expect(failures.first?.errnoCode == ENOSPC)
        #expect(!writer.isCapturing)
        #expect(writer.framesWritten == 1)
        #expect(CaptureCursor.lastFrame == nil)
        #expect(try records(directory.file("c.btsnoop")).count == 1)
    }
}

private struct CaptureFileUnreadable: Error { let path: String }

/// The records of the btsnoop file at `path`; throws when it is missing or does not decode.
private func records(_ path: String) throws -> [DecodedRecord] {
    guard let bytes = readFile(path), let records = decode(bytes) else { throw CaptureFileUnreadable(path: path) }
    return records
}

private func writerFD(_ writer: BtsnoopWriter) -> Int32 { writer.fileDescriptor }

/// Something other than a regular file at the capture's path: refused at once, never waited on.
@Suite struct BtsnoopPathTests {
    @Test func aFIFOAtThePathIsRefusedWithoutBlockingWithAndWithoutAReader() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.file("hci.btsnoop")
        #expect(mkfifo(path, 0o600) == 0)
        let clock = ContinuousClock()
        // No reader: the old open(O_WRONLY | O_CREAT | O_TRUNC) blocked here until one came.
        let alone = clock.measure {
            do {
                _ = try BtsnoopWriter(path: path)
                Issue.record("a capture was started on a FIFO")
            } catch {
                #expect("\(error)" == "--btsnoop \(path): open failed: a FIFO, not a regular file")
            }
        }
        #expect(alone < .seconds(1))
        // With a reader: the old writer opened it and wrote into the pipe.
        let reader = open(path, O_RDONLY | O_NONBLOCK)
        defer { close(reader) }
        #expect(throws: CaptureError.self) { _ = try BtsnoopWriter(path: path) }
        var byte: UInt8 = 0
        #expect(read(reader, &byte, 1) <= 0, "nothing written into the FIFO")
    }
}
