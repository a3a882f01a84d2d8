import BlemuATT
import BlemuCore
import Testing
@testable import BlemuGATT

@Suite struct ATTServerReadTests {
    /// Vol 3, Part F, 3.4.4.3.
    @Test func readValues() throws {
        let f = try Fixture()
        #expect(f.request("0A 0600") == [bytes("0B 64")])
        #expect(f.request("0A 1E00") == [bytes("0B") + Array("blemu".utf8)])
        #expect(f.request("0A 0A00") == [bytes("0B 01")])
        #expect(f.log.dynamicReads == 1)
        #expect(f.request("0A 0100") == [bytes("0B 0018")])
        #expect(f.request("0A 0800") == [bytes("0B 0400 0600 0F18")])
        #expect(f.request("0A 1100") == [bytes("0B 3412")])
        #expect(f.request("0A 1600") == [bytes("0B 04 00 AD27 01 0000")])
    }

    /// 3.4.4.3: handle 0 and handles past the end are Invalid Handle, naming the handle.
    @Test func invalidHandle() throws {
        let f = try Fixture()
        #expect(f.request("0A 0000") == errorResponse(0x0A, 0x0000, .invalidHandle))
        #expect(f.request("0A 1F00") == errorResponse(0x0A, 0x001F, .invalidHandle))
        #expect(f.request("0A FFFF") == errorResponse(0x0A, 0xFFFF, .invalidHandle))
    }

    /// A characteristic without the Read property: Read Not Permitted.
    @Test func readNotPermitted() throws {
        let f = try Fixture()
        #expect(f.request("0A 1300") == errorResponse(0x0A, 0x0013, .readNotPermitted))
        #expect(f.request("0A 0C00") == errorResponse(0x0A, 0x000C, .readNotPermitted))
        #expect(f.request("0A 0F00") == errorResponse(0x0A, 0x000F, .readNotPermitted))
    }

    /// 3.4.4.4: a value longer than ATT_MTU - 1 is cut to ATT_MTU - 1.
    @Test func longValueIsTruncatedToMTUMinusOne() throws {
        let f = try Fixture()
        #expect(f.request("0A 0300") == [bytes("0B") + deviceName.prefix(22)])
        f.exchangeMTU(30)
        #expect(f.request("0A 0300") == [bytes("0B") + deviceName.prefix(29)])
        let g = try Fixture()
        g.exchangeMTU(100)
        #expect(g.request("0A 0300") == [bytes("0B") + deviceName])
    }

    /// 3.4.2.1: Exchange MTU happens once per connection; a repeated request is answered but
    /// leaves the MTU in use alone.
    @Test func secondMTUExchangeDoesNotChangeTheMTU() throws {
        let f = try Fixture()
        f.exchangeMTU(100)
        #expect(f.request("02 1700") == [bytes("03 0502")])
        #expect(f.server.mtu == 100)
        #expect(f.request("02 F401") == [bytes("03 0502")])
        #expect(f.server.mtu == 100)
    }

    @Test func applicationErrorFromOnReadIsPassedThrough() throws {
        let failing = Characteristic(0x2A19, properties: [.read], onRead: { _, _ in .application(0x01) })
        let database = try GATTDatabase(services: [Service(0x180F) { failing }])
        let delegate = RecordingDelegate()
        let server = ATTServer(database: database, peer: ATTPeer(connectionHandle: 1, address: BluetoothAddress(value: 1)),
                               scheduler: ManualScheduler())
        server.record(by: delegate)
        server.receive(bytes("0A 0300")[...])
        #expect(delegate.sent.map(\.pdu) == errorResponse(0x0A, 0x0003, .application(0x01)))
        #expect(delegate.answered.last?.error == .application(0x01))
        #expect(delegate.answered.last?.handle == 3)
    }

    @Test func encryptionRequiredIsInsufficientAuthentication() throws {
        let secret = Characteristic(0x2A19, properties: [.read], permissions: [.readEncryptionRequired],
                                    onRead: { _, value in value.append(1); return nil })
        let database = try GATTDatabase(services: [Service(0x180F) { secret }])
        let delegate = RecordingDelegate()
        let server = ATTServer(database: database, peer: ATTPeer(connectionHandle: 1, address: BluetoothAddress(value: 1)),
                               scheduler: ManualScheduler())
        server.record(by: delegate)
        server.receive(bytes("0A 0300")[...])
        #expect(delegate.sent.map(\.pdu) == errorResponse(0x0A, 0x0003, .insufficientAuthentication))
    }

    @Test func truncatedReadIsInvalidPDU() throws {
        let f = try Fixture()
        #expect(f.request("0A 03") == errorResponse(0x0A, 0, .invalidPDU))
        #expect(f.request("0A") == errorResponse(0x0A, 0, .invalidPDU))
        #expect(f.request("0A 0300 00") == errorResponse(0x0A, 0, .invalidPDU))
    }
}

@Suite struct ATTServerLongReadTests {
    /// Vol 3, Part G, 4.8.3 Read Long Characteristic Values: a Read, then Read Blobs at each
    /// offset, reassemble ONE value, even though the device's value changes on every call —
    /// because the device is asked once, at the Read.
    @Test func longReadIsOneConsistentValue() throws {
        let f = try Fixture()
        let first = DeviceLog.longValue(version: 1)
        #expect(f.request("0A 1900") == [bytes("0B") + first[0..<22]])
        #expect(f.request("0C 1900 1600") == [bytes("0D") + first[22..<44]])
        #expect(f.request("0C 1900 2C00") == [bytes("0D") + first[44..<66]])
        #expect(f.request("0C 1900 4200") == [bytes("0D") + first[66..<88]])
        #expect(f.request("0C 1900 5800") == [bytes("0D") + first[88..<100]])
        // The device saw one read, at offset 0, for the whole long read.
        #expect(f.log.longReadOffsets == [0])
        // The value really does change between calls: a fresh read sees another one.
        #expect(DeviceLog.longValue(version: 2) != first)
    }

    /// 3.4.4.5: an offset equal to the length gives an empty part; past it, Invalid Offset.
    @Test func offsetAtAndPastTheEnd() throws {
        let f = try Fixture()
        _ = f.request("0A 1900")
        #expect(f.request("0C 1900 6400") == [bytes("0D")])
        #expect(f.request("0C 1900 6500") == errorResponse(0x0C, 0x0019, .invalidOffset))
        #expect(f.log.longReadOffsets == [0])
    }

    /// Any other request between blobs drops the kept value: the next blob asks the device
    /// again, at that offset.
    @Test func otherRequestDropsTheKeptValue() throws {
        let f = try Fixture()
        _ = f.request("0A 1900")
        #expect(f.request("0C 1900 1600") == [bytes("0D") + DeviceLog.longValue(version: 1)[22..<44]])
        #expect(f.request("0A 0600") == [bytes("0B 64")])
        #expect(f.request("0C 1900 2C00") == [bytes("0D") + DeviceLog.longValue(version: 2)[44..<66]])
        #expect(f.log.longReadOffsets == [0, 44])
    }

    @Test func writeCommandAlsoDropsTheKeptValue() throws {
        let f = try Fixture()
        _ = f.request("0A 1900")
        #expect(f.request("52 0F00 01") == [])
        #expect(f.request("0C 1900 1600") == [bytes("0D") + DeviceLog.longValue(version: 2)[22..<44]])
        #expect(f.log.longReadOffsets == [0, 22])
    }

    @Test func readBlobForAnotherHandleDropsTheKeptValue() throws {
        let f = try Fixture()
        _ = f.request("0A 1900")
        #expect(f.request("0C 0300 1600") == [bytes("0D") + deviceName[22...]])
        #expect(f.request("0C 1900 1600") == [bytes("0D") + DeviceLog.longValue(version: 2)[22..<44]])
        #expect(f.log.longReadOffsets == [0, 22])
    }

    /// A second long read of the same value starts over and sees the device's new value.
    @Test func newReadStartsANewLongRead() throws {
        let f = try Fixture()
        _ = f.request("0A 1900")
        _ = f.request("0C 1900 1600")
        let second = DeviceLog.longValue(version: 2)
        #expect(f.request("0A 1900") == [bytes("0B") + second[0..<22]])
        #expect(f.request("0C 1900 1600") == [bytes("0D") + second[22..<44]])
        #expect(f.log.longReadOffsets == [0, 0])
    }

    /// Vol 3, Part G, 4.8.3: a client keeps reading blobs while each part is exactly ATT_MTU - 1
    /// octets, so a value of exactly ATT_MTU - 1 octets is a long read too: its closing Read Blob
    /// at offset ATT_MTU - 1 must continue the same value (an empty part), not ask the device again.
    @Test func valueOfExactlyMTUMinusOneIsOneLongRead() throws {
        var calls = 0
        let c = Characteristic(0x2A3D, properties: [.read], onRead: { _, value in
            calls += 1
            // The device's value grows between calls: 22 octets, then 30.
            value.append(contentsOf: [UInt8](repeating: calls == 1 ? 0xA1 : 0xB2, count: calls == 1 ? 22 : 30))
            return nil
        })
        let database = try GATTDatabase(services: [Service(0x1800) { c }])
        let delegate = RecordingDelegate()
        let server = ATTServer(database: database, peer: ATTPeer(connectionHandle: 1, address: BluetoothAddress(value: 1)),
                               scheduler: ManualScheduler())
        server.record(by: delegate)
        server.receive(bytes("0A 0300")[...])
        server.receive(bytes("0C 0300 1600")[...])
        #expect(delegate.sent.map(\.pdu) == [bytes("0B") + [UInt8](repeating: 0xA1, count: 22), bytes("0D")])
        #expect(calls == 1)
    }

    /// A long read may also begin with Read Blob at offset 0.
    @Test func longReadStartingWithReadBlob() throws {
        let f = try Fixture()
        let first = DeviceLog.longValue(version: 1)
        #expect(f.request("0C 1900 0000") == [bytes("0D") + first[0..<22]])
        #expect(f.request("0C 1900 1600") == [bytes("0D") + first[22..<44]])
        #expect(f.log.longReadOffsets == [0])
    }

    /// Read Using Characteristic UUID may be continued with Read Blob (Vol 3, Part G, 4.8.2).
    @Test func readByTypeContinuedWithReadBlob() throws {
        let f = try Fixture()
        let first = DeviceLog.longValue(version: 1)
        #expect(f.request(bytes("08 0100 FFFF") + longCharacteristicWire) == [bytes("09 15 1900") + first[0..<19]])
        #expect(f.request("0C 1900 1300") == [bytes("0D") + first[19..<41]])
        #expect(f.log.longReadOffsets == [0])
    }

    /// A cached value longer than one response reads the same way.
    @Test func longCachedValue() throws {
        let f = try Fixture()
        #expect(f.request("0A 0300") == [bytes("0B") + deviceName[0..<22]])
        #expect(f.request("0C 0300 1600") == [bytes("0D") + deviceName[22...]])
        #expect(f.request("0C 0300 2200") == [bytes("0D")])
        #expect(f.request("0C 0300 2300") == errorResponse(0x0C, 0x0003, .invalidOffset))
    }

    /// 3.4.4.5: a fixed-length value that fits in one Read Response is not long.
    @Test func attributeNotLong() throws {
        let f = try Fixture()
        #expect(f.request("0C 1100 0000") == errorResponse(0x0C, 0x0011, .attributeNotLong))
        #expect(f.request("0C 0600 0000") == errorResponse(0x0C, 0x0006, .attributeNotLong))
        #expect(f.request("0C 0200 0100") == errorResponse(0x0C, 0x0002, .attributeNotLong))
    }

    @Test func readBlobErrors() throws {
        let f = try Fixture()
        #expect(f.request("0C 0000 0000") == errorResponse(0x0C, 0x0000, .invalidHandle))
        #expect(f.request("0C 1F00 0000") == errorResponse(0x0C, 0x001F, .invalidHandle))
        #expect(f.request("0C 1300 0000") == errorResponse(0x0C, 0x0013, .readNotPermitted))
        #expect(f.request("0C 1300 00") == errorResponse(0x0C, 0, .invalidPDU))
    }
}

@Suite struct ATTServerReadMultipleTests {
    /// Vol 3, Part F, 3.4.4.7 / 3.4.4.8: the values concatenated.
    @Test func readMultiple() throws {
        let f = try Fixture()
        #expect(f.request("0E 0600 0A00") == [bytes("0F 64 01")])
        #expect(f.request("0E 0600 1100 0A00") == [bytes("0F 64 3412 01")])
    }

    /// 3.4.4.8: a Set Of Values longer than ATT_MTU - 1 is cut to ATT_MTU - 1.
    @Test func readMultipleTruncatesAtMTUMinusOne() throws {
        let f = try Fixture()
        #expect(f.request("0E 0600 0A00 0300") == [bytes("0F 64 01") + deviceName.prefix(20)])
        #expect(f.request("0E 0300 0600") == [bytes("0F") + deviceName.prefix(22)])
    }

    /// 3.4.4.7: any invalid or unreadable handle is the answer, naming the first such handle.
    @Test func readMultipleErrors() throws {
        let f = try Fixture()
        #expect(f.request("0E 0600 FF0F 0300") == errorResponse(0x0E, 0x0FFF, .invalidHandle))
        #expect(f.request("0E 0000 0600") == errorResponse(0x0E, 0x0000, .invalidHandle))
        #expect(f.request("0E 0600 1300") == errorResponse(0x0E, 0x0013, .readNotPermitted))
        #expect(f.request("0E 0600") == errorResponse(0x0E, 0, .invalidPDU))
        #expect(f.request("0E 0600 0A") == errorResponse(0x0E, 0, .invalidPDU))
    }

    /// Vol 3, Part F, 3.4.4.12: (Value Length, Value) tuples; the length is the attribute's.
    @Test func readMultipleVariable() throws {
        let f = try Fixture()
        #expect(f.request("20 0600 0A00") == [bytes("21 0100 64 0100 01")])
        #expect(f.request("20 0600 1E00 1100") == [bytes("21 0100 64 0500") + Array("blemu".utf8) + bytes("0200 3412")])
    }

    /// 3.4.4.12: the tuple list is cut at ATT_MTU - 1 octets, even inside a tuple.
    @Test func readMultipleVariableTruncation() throws {
        let f = try Fixture()
        #expect(f.request("20 0600 0300") == [bytes("21 0100 64 2200") + deviceName.prefix(17)])
        // 1 + 3 + 3 + 2 = 9, so the name gets 14 octets and the last tuple nothing.
        #expect(f.request("20 0600 0A00 0300 1100") == [bytes("21 0100 64 0100 01 2200") + deviceName.prefix(14)])
        // 1 + 3 × 7 = 22: the fourth tuple gets only the first octet of its length.
        let blemu = bytes("0500") + Array("blemu".utf8)
        let cut = f.request("20 1E00 1E00 1E00 0600")
        #expect(cut == [bytes("21") + blemu + blemu + blemu + bytes("01")])
        #expect(cut.first?.count == 23)
    }

    @Test func readMultipleVariableErrors() throws {
        let f = try Fixture()
        #expect(f.request("20 0600 2000") == errorResponse(0x20, 0x0020, .invalidHandle))
        #expect(f.request("20 0C00 0600") == errorResponse(0x20, 0x000C, .readNotPermitted))
        #expect(f.request("20 0600") == errorResponse(0x20, 0, .invalidPDU))
    }
}

/// No offset a central sends can make a read handler trap: past the declared maximum the
/// stack answers itself, and the `ValueBuffer` a device writes its whole value into keeps the
/// part from the offset on, or says Invalid Offset.
@Suite struct ReadPromiseTests {
    @Test func offsetsPastTheDeclaredMaximumNeverReachTheDevice() throws {
        var offsets: [Int] = []
        let value: [UInt8] = Array(repeating: 0x41, count: 30)
        let c = Characteristic(0xFF10, properties: [.read], length: .variable(max: 40), onRead: { request, buffer in
            offsets.append(request.offset)
            buffer.append(contentsOf: value)
            return nil
        })
        let database = try GATTDatabase(services: [Service(0xFFF0) { c }])
        let server = ATTServer(database: database, peer: ATTPeer(connectionHandle: 1, address: BluetoothAddress(value: 1)),
                               scheduler: ManualScheduler())
        let delegate = RecordingDelegate()
        server.record(by: delegate)
        let h = c.valueHandle
        func blob(_ offset: UInt16) -> [UInt8]? {
            server.receive(ATTReadBlobRequest(handle: h, offset: offset).encoded[...])
            return delegate.sent.last?.pdu
        }
        #expect(blob(41) == errorResponse(0x0C, h, .invalidOffset).first)
        #expect(blob(0xFFFF) == errorResponse(0x0C, h, .invalidOffset).first)
        #expect(offsets.isEmpty)
        // Within the maximum the device answers; past its own value, the stack says Invalid Offset.
        #expect(blob(35) == errorResponse(0x0C, h, .invalidOffset).first)
        #expect(blob(30) == [0x0D])
        #expect(blob(25) == [0x0D] + Array(repeating: 0x41, count: 5))
        #expect(offsets == [35, 30, 25])
    }

    @Test func valueBufferKeepsTheValueFromTheOffsetOn() {
        func kept(skipping offset: Int, limit: Int = 512, _ write: (inout ValueBuffer) -> Void) -> ([UInt8], Int) {
            var buffer = ValueBuffer()
            buffer.reset(skipping: offset, limit: limit)
            write(&buffer)
            return (Array(buffer.bytes), buffer.count)
        }
        #expect(kept(skipping: 0) { $0.append(contentsOf: [1, 2, 3]) } == ([1, 2, 3], 3))
        #expect(kept(skipping: 2) { $0.append(contentsOf: [1, 2, 3]) } == ([3], 3))
        #expect(kept(skipping: 3) { $0.append(contentsOf: [1, 2, 3]) } == ([], 3))
        #expect(kept(skipping: 4) { $0.append(contentsOf: [1, 2, 3]) } == ([], 3))
        // Byte by byte, in pieces, as sequences: the same rule.
        #expect(kept(skipping: 1) { $0.append(1); $0.appendLE(UInt16(0x0302)); $0.append(contentsOf: [4, 5][...]) } == ([2, 3, 4, 5], 5))
        #expect(kept(skipping: 3) { $0.append(contentsOf: "abcdef".utf8) } == (Array("def".utf8), 6))
        // Never more than the limit of the whole value.
        #expect(kept(skipping: 1, limit: 3) { $0.append(contentsOf: [1, 2, 3, 4, 5]) } == ([2, 3], 5))
        #expect(kept(skipping: 0, limit: 2) { $0.appendLE(UInt32(0x04030201)) } == ([1, 2], 4))
    }

    @Test func aValueLongerThanTheAttributeMaximumIsCut() throws {
        let c = Characteristic(0xFF11, properties: [.read], onRead: { _, value in
            value.append(contentsOf: [UInt8](repeating: 0x42, count: 600))
            return nil
        })
        let database = try GATTDatabase(services: [Service(0xFFF0) { c }])
        let server = ATTServer(database: database, peer: ATTPeer(connectionHandle: 1, address: BluetoothAddress(value: 1)),
                               scheduler: ManualScheduler())
        let delegate = RecordingDelegate()
        server.record(by: delegate)
        server.receive(ATTReadBlobRequest(handle: c.valueHandle, offset: 500).encoded[...])
        #expect(delegate.sent.last?.pdu == [0x0D] + Array(repeating: 0x42, count: 12))
    }
}
