import BlemuATT
import BlemuCore
import Testing
@testable import BlemuGATT

@Suite struct ATTServerWriteTests {
    /// Vol 3, Part F, 3.4.5.1 / 3.4.5.2.
    @Test func writeRequestCallsOnWrite() throws {
        let f = try Fixture()
        #expect(f.request("12 0F00 AABB") == [bytes("13")])
        #expect(f.log.writes.count == 1)
        let write = try #require(f.log.writes.first)
        #expect(write.handle == 0x0F)
        #expect(write.request.value == [0xAA, 0xBB])
        #expect(write.request.offset == 0)
        #expect(write.request.withResponse)
        #expect(write.request.peer == f.peer)
        #expect(f.delegate.wrote.count == 1)
        #expect(f.delegate.wrote.first?.characteristic === f.writable)
        #expect(f.delegate.wrote.first?.count == 2)
        #expect(f.delegate.wrote.first?.withResponse == true)
    }

    @Test func emptyWriteIsAValue() throws {
        let f = try Fixture()
        #expect(f.request("12 0F00") == [bytes("13")])
        #expect(f.log.writes.map(\.request.value) == [[]])
    }

    /// A read-only attribute answers Write Not Permitted, naming its handle.
    @Test func writeNotPermitted() throws {
        let f = try Fixture()
        #expect(f.request("12 0300 41") == errorResponse(0x12, 0x0003, .writeNotPermitted))  // cached value
        #expect(f.request("12 0A00 01") == errorResponse(0x12, 0x000A, .writeNotPermitted))  // dynamic, read only
        #expect(f.request("12 0200 01") == errorResponse(0x12, 0x0002, .writeNotPermitted))  // declaration
        #expect(f.request("12 0100 0D18") == errorResponse(0x12, 0x0001, .writeNotPermitted))  // service
        #expect(f.request("12 1500 41") == errorResponse(0x12, 0x0015, .writeNotPermitted))  // descriptor
        #expect(f.request("12 0C00 01") == errorResponse(0x12, 0x000C, .writeNotPermitted))  // notify value
        #expect(f.log.writes.isEmpty)
    }

    @Test func invalidHandle() throws {
        let f = try Fixture()
        #expect(f.request("12 0000 01") == errorResponse(0x12, 0x0000, .invalidHandle))
        #expect(f.request("12 1F00 01") == errorResponse(0x12, 0x001F, .invalidHandle))
        #expect(f.request("12 0F") == errorResponse(0x12, 0, .invalidPDU))
    }

    /// Vol 3, Part F, 3.2.9: no attribute value is longer than 512 octets.
    @Test func valueOver512IsInvalidAttributeValueLength() throws {
        let f = try Fixture()
        f.exchangeMTU(517)
        #expect(f.request(bytes("12 0F00") + [UInt8](repeating: 0x5A, count: 513))
                == errorResponse(0x12, 0x000F, .invalidAttributeValueLength))
        #expect(f.log.writes.isEmpty)
        #expect(f.request(bytes("12 0F00") + [UInt8](repeating: 0x5A, count: 512)) == [bytes("13")])
        #expect(f.log.writes.first?.request.value.count == 512)
    }

    /// A fixed-length characteristic takes exactly its length.
    @Test func fixedLengthWrongSize() throws {
        let f = try Fixture()
        #expect(f.request("12 1100 010203") == errorResponse(0x12, 0x0011, .invalidAttributeValueLength))
        #expect(f.request("12 1100 01") == errorResponse(0x12, 0x0011, .invalidAttributeValueLength))
        #expect(f.log.writes.isEmpty)
        #expect(f.request("12 1100 0102") == [bytes("13")])
        #expect(f.log.writes.map(\.request.value) == [[1, 2]])
    }

    /// 3.4.1.1: Application Errors 0x80–0x9F come from the device and go out unchanged.
    @Test func applicationErrorFromOnWrite() throws {
        let f = try Fixture()
        f.log.writeError = .application(0x00)
        #expect(f.request("12 0F00 EE") == errorResponse(0x12, 0x000F, ATTError(rawValue: 0x80)))
        f.log.writeError = .outOfRange
        #expect(f.request("12 0F00 EE") == errorResponse(0x12, 0x000F, .outOfRange))
        #expect(f.delegate.wrote.isEmpty)
        #expect(f.delegate.answered.map(\.error) == [ATTError(rawValue: 0x80), .outOfRange])
    }

    /// 3.4.5.3: a command gets no response, not even on error.
    @Test func writeCommandNeverAnswers() throws {
        let f = try Fixture()
        #expect(f.request("52 0F00 AABB") == [])
        #expect(f.log.writes.map(\.request.value) == [[0xAA, 0xBB]])
        #expect(f.log.writes.first?.request.withResponse == false)
        #expect(f.delegate.wrote.first?.withResponse == false)
        f.log.writeError = .application(0x01)
        #expect(f.request("52 0F00 01") == [])
        #expect(f.request("52 0300 01") == [])        // read-only
        #expect(f.request("52 1F00 01") == [])        // invalid handle
        #expect(f.request("52 0000 01") == [])
        #expect(f.request("52 0F") == [])             // truncated
        #expect(f.request(bytes("52 0F00") + [UInt8](repeating: 0, count: 513)) == [])  // too long
        #expect(f.request("52 1100 010203") == [])    // wrong fixed length
        #expect(f.delegate.sent.isEmpty)
    }

    /// Vol 3, Part G, 4.9.1: Write Without Response needs the Write Without Response property;
    /// Write Request needs Write.
    @Test func propertiesGateTheWriteKind() throws {
        let f = try Fixture()
        // 0x2A6E has [read, write]: a Write Command to it is not performed.
        #expect(f.request("52 1100 0102") == [])
        #expect(f.log.writes.isEmpty)

        let commandOnly = Characteristic(0x2A39, properties: [.writeWithoutResponse], onWrite: { _ in nil })
        let database = try GATTDatabase(services: [Service(0x180D) { commandOnly }])
        let delegate = RecordingDelegate()
        let server = ATTServer(database: database, peer: f.peer, scheduler: f.scheduler)
        server.record(by: delegate)
        server.receive(bytes("12 0300 01")[...])
        #expect(delegate.sent.map(\.pdu) == errorResponse(0x12, 0x0003, .writeNotPermitted))
    }

    /// Signing needs a CSRK from pairing: without one the command is ignored (3.4.5.4).
    @Test func signedWriteCommandIgnored() throws {
        let f = try Fixture()
        #expect(f.request(bytes("D2 0F00 AABB 000102030405060708090A0B")) == [])
        #expect(f.request(bytes("D2 0F00 AA")) == [])
        #expect(f.log.writes.isEmpty)
        #expect(f.delegate.sent.isEmpty)
    }
}

@Suite struct ATTServerCCCDTests {
    /// Vol 3, Part G, 3.3.3.3: bit 0 enables notifications, bit 1 indications.
    @Test func enableNotifications() throws {
        let f = try Fixture()
        #expect(!f.server.isSubscribed(f.notifyOnly, indications: false))
        f.configure(20, 0x0001)
        #expect(f.server.isSubscribed(f.notifyOnly, indications: false))
        #expect(!f.server.isSubscribed(f.notifyOnly, indications: true))
        #expect(f.server.session.clientConfiguration(f.notifyOnly) == 0x0001)
        #expect(f.delegate.configured.count == 1)
        #expect(f.delegate.configured.first?.characteristic === f.notifyOnly)
        #expect(f.delegate.configured.first?.old == 0)
        #expect(f.delegate.configured.first?.new == 1)
        // Writing the same value again changes nothing.
        f.configure(20, 0x0001)
        #expect(f.delegate.configured.count == 1)
        f.configure(20, 0x0000)
        #expect(!f.server.isSubscribed(f.notifyOnly, indications: false))
        #expect(f.delegate.configured.last?.new == 0)
    }

    @Test func enableBoth() throws {
        let f = try Fixture()
        f.configure(13, 0x0003)
        #expect(f.server.isSubscribed(f.notifyIndicate, indications: false))
        #expect(f.server.isSubscribed(f.notifyIndicate, indications: true))
        #expect(f.request("0A 0D00") == [bytes("0B 0300")])
    }

    /// Supplement, Part B, 1.2: enabling what the characteristic cannot do is 0xFD.
    @Test func improperlyConfigured() throws {
        let f = try Fixture()
        #expect(f.request("12 1400 0200") == errorResponse(0x12, 0x0014, .cccdImproperlyConfigured))
        #expect(f.request("12 1400 0300") == errorResponse(0x12, 0x0014, .cccdImproperlyConfigured))
        #expect(f.server.session.clientConfiguration(f.notifyOnly) == 0)
        #expect(f.delegate.configured.isEmpty)
    }

    /// The CCCD value is two octets.
    @Test func wrongLength() throws {
        let f = try Fixture()
        #expect(f.request("12 1400 01") == errorResponse(0x12, 0x0014, .invalidAttributeValueLength))
        #expect(f.request("12 1400 010000") == errorResponse(0x12, 0x0014, .invalidAttributeValueLength))
        #expect(f.request("12 1400") == errorResponse(0x12, 0x0014, .invalidAttributeValueLength))
        #expect(f.server.session.clientConfiguration(f.notifyOnly) == 0)
    }

    /// The CCCD value is per client (Vol 3, Part G, 3.3.3.3): each bearer reads its own.
    @Test func valueIsPerServer() throws {
        let f = try Fixture()
        #expect(f.request("0A 1400") == [bytes("0B 0000")])
        f.configure(20, 0x0001)
        #expect(f.request("0A 1400") == [bytes("0B 0100")])
        let otherPeer = ATTPeer(connectionHandle: 0x41, address: BluetoothAddress(value: 0xC0_0000_0001))
        let other = ATTServer(database: f.database, peer: otherPeer, scheduler: f.scheduler)
        let otherDelegate = RecordingDelegate()
        other.record(by: otherDelegate)
        other.receive(bytes("0A 1400")[...])
        #expect(otherDelegate.sent.map(\.pdu) == [bytes("0B 0000")])
        #expect(!other.isSubscribed(f.notifyOnly, indications: false))
    }

    @Test func writeCommandToCCCD() throws {
        let f = try Fixture()
        #expect(f.request("52 1400 0100") == [])
        #expect(f.server.isSubscribed(f.notifyOnly, indications: false))
    }
}

@Suite struct ATTServerPreparedWriteTests {
    static func prepare(_ handle: UInt16, _ offset: UInt16, _ value: [UInt8]) -> [UInt8] {
        ATTPrepareWriteRequest(handle: handle, offset: offset, value: value[...]).encoded
    }

    /// Vol 3, Part G, 4.9.4 Write Long Characteristic Values: three prepares, each echoed
    /// (Vol 3, Part F, 3.4.6.2), then one write of the whole value at execute.
    @Test func longWrite() throws {
        let f = try Fixture()
        let value = (0..<46).map { UInt8($0) }
        for (offset, part) in [(0, value[0..<18]), (18, value[18..<36]), (36, value[36..<46])] {
            let request = Self.prepare(0x0F, UInt16(offset), Array(part))
            #expect(f.request(request) == [[0x17] + request.dropFirst()])
        }
        #expect(f.log.writes.isEmpty)
        #expect(f.request("18 01") == [bytes("19")])
        #expect(f.log.writes.count == 1)
        #expect(f.log.writes.first.map { Array($0.request.value) } == value)
        #expect(f.log.writes.first?.request.offset == 0)
        #expect(f.log.writes.first?.request.withResponse == true)
        // The queue is empty afterwards.
        #expect(f.request("18 01") == [bytes("19")])
        #expect(f.log.writes.count == 1)
    }

    @Test func prepareResponseEchoesExactly() throws {
        let f = try Fixture()
        #expect(f.request("16 0F00 0500 DEADBEEF") == [bytes("17 0F00 0500 DEADBEEF")])
        #expect(f.request("16 0F00 0000") == [bytes("17 0F00 0000")])
    }

    /// 3.4.6.1: the server's queue is finite; past it, Prepare Queue Full.
    @Test func prepareQueueFull() throws {
        let f = try Fixture()
        for i in 0..<ATTServer.maxPreparedWrites {
            let request = Self.prepare(0x0F, UInt16(i), [UInt8(truncatingIfNeeded: i)])
            #expect(f.request(request) == [[0x17] + request.dropFirst()])
        }
        #expect(f.request(Self.prepare(0x0F, UInt16(ATTServer.maxPreparedWrites), [0]))
                == errorResponse(0x16, 0x000F, .prepareQueueFull))
        // Cancelling empties the queue; then it takes writes again.
        #expect(f.request("18 00") == [bytes("19")])
        #expect(f.log.writes.isEmpty)
        #expect(f.request(Self.prepare(0x0F, 0, [1])) == [bytes("17 0F00 0000 01")])
    }

    /// 3.4.6.3: flags 0x00 cancel every prepared write; nothing is written.
    @Test func executeCancel() throws {
        let f = try Fixture()
        _ = f.request(Self.prepare(0x0F, 0, [1, 2, 3]))
        #expect(f.request("18 00") == [bytes("19")])
        #expect(f.log.writes.isEmpty)
        #expect(f.request("18 01") == [bytes("19")])
        #expect(f.log.writes.isEmpty)
    }

    /// Offsets are checked at execute (3.4.6.3): a gap in a long write is Invalid Offset.
    @Test func gapIsInvalidOffsetAtExecute() throws {
        let f = try Fixture()
        #expect(f.request(Self.prepare(0x0F, 0, [1, 2, 3, 4, 5])).first?.first == 0x17)
        #expect(f.request(Self.prepare(0x0F, 10, [6, 7, 8, 9, 10])).first?.first == 0x17)
        #expect(f.request("18 01") == errorResponse(0x18, 0x000F, .invalidOffset))
        #expect(f.log.writes.isEmpty)
        // The failed execute cleared the queue.
        #expect(f.request("18 01") == [bytes("19")])
        #expect(f.log.writes.isEmpty)
    }

    /// Vol 3, Part F, 3.2.9: the assembled value may not pass 512 octets.
    @Test func assembledValueOver512IsInvalidLengthAtExecute() throws {
        let f = try Fixture()
        var offset = 0
        while offset < 513 {
            let part = [UInt8](repeating: 0x33, count: min(18, 513 - offset))
            #expect(f.request(Self.prepare(0x0F, UInt16(offset), part)).first?.first == 0x17)
            offset += part.count
        }
        #expect(f.request("18 01") == errorResponse(0x18, 0x000F, .invalidAttributeValueLength))
        #expect(f.log.writes.isEmpty)
    }

    @Test func fixedLengthCheckedAtExecute() throws {
        let f = try Fixture()
        _ = f.request(Self.prepare(0x11, 0, [1, 2, 3]))
        #expect(f.request("18 01") == errorResponse(0x18, 0x0011, .invalidAttributeValueLength))
        _ = f.request(Self.prepare(0x11, 0, [1]))
        _ = f.request(Self.prepare(0x11, 1, [2]))
        #expect(f.request("18 01") == [bytes("19")])
        #expect(f.log.writes.map(\.request.value) == [[1, 2]])
    }

    /// Reserved Execute Write flags are an Invalid PDU.
    @Test func invalidFlags() throws {
        let f = try Fixture()
        #expect(f.request("18 02") == errorResponse(0x18, 0x0000, .invalidPDU))
        #expect(f.request("18") == errorResponse(0x18, 0x0000, .invalidPDU))
        #expect(f.log.writes.isEmpty)
    }

    @Test func prepareChecksPermissionsAtOnce() throws {
        let f = try Fixture()
        #expect(f.request(Self.prepare(0x03, 0, [1])) == errorResponse(0x16, 0x0003, .writeNotPermitted))
        #expect(f.request(Self.prepare(0x1F, 0, [1])) == errorResponse(0x16, 0x001F, .invalidHandle))
        #expect(f.request("16 0F00 00") == errorResponse(0x16, 0, .invalidPDU))
    }

    @Test func applicationErrorAtExecute() throws {
        let f = try Fixture()
        _ = f.request(Self.prepare(0x0F, 0, [1]))
        f.log.writeError = .application(0x02)
        #expect(f.request("18 01") == errorResponse(0x18, 0x000F, .application(0x02)))
    }
}

@Suite struct OversizedPDUTests {
    /// Vol 3, Part F, 3.2.8: nothing longer than ATT_MTU; such a request is an Invalid PDU
    /// (answering a Prepare Write echo of it would itself break the MTU).
    @Test func requestLongerThanTheMTUIsInvalid() throws {
        let f = try Fixture()
        let prepare: [UInt8] = [0x16, 0x03, 0x00, 0x00, 0x00] + [UInt8](repeating: 0x41, count: 19)
        #expect(prepare.count == 24)
        #expect(f.request(prepare) == errorResponse(0x16, 0x0000, .invalidPDU))
        // One byte shorter fits the default MTU of 23 and is handled as usual.
        #expect(f.request(Array(prepare.dropLast())) != errorResponse(0x16, 0x0000, .invalidPDU))
        // Commands that are too long are dropped without an answer.
        #expect(f.request([0x52, 0x03, 0x00] + [UInt8](repeating: 0, count: 21)).isEmpty)
    }
}

/// The device API's promise for writes: a handler never sees a value its declaration rules
/// out, whatever the offsets of a long write, and Execute Write is all or nothing
/// (Vol 3, Part F, 3.4.6.3).
@Suite struct WritePromiseTests {
    /// A device written as the docs say: its handlers index their value as declared.
    final class StrictDevice {
        var applied: [(uuid: UInt16, value: [UInt8], offset: Int)] = []
        var validated: [UInt16] = []
        /// What the validator of `limited` refuses.
        var refuseLimitedOver: UInt8 = 0xFF
        var onWriteError: ATTError?
        let oneByte: Characteristic
        let fourBytes: Characteristic
        let upToFour: Characteristic
        let limited: Characteristic
        let database: GATTDatabase

        init() throws {
            var me: StrictDevice?
            oneByte = Characteristic(0xFF01, properties: [.write], length: .fixed(1), onWrite: { request in
                me?.applied.append((0xFF01, [request.value[0]], request.offset))  // traps on an empty value
                return nil
            })
            fourBytes = Characteristic(0xFF02, properties: [.write], length: .fixed(4), onWrite: { request in
                me?.applied.append((0xFF02, [request.value[0], request.value[3]], request.offset))
                return nil
            })
            upToFour = Characteristic(0xFF03, properties: [.write], length: .variable(max: 4), onWrite: { request in
                precondition(request.offset + request.value.count <= 4)
                me?.applied.append((0xFF03, Array(request.value), request.offset))
                return nil
            })
            limited = Characteristic(0xFF04, properties: [.write], length: .fixed(1),
                                     validateWrite: { request in
                                         me?.validated.append(0xFF04)
                                         return request.value[0] > (me?.refuseLimitedOver ?? 0xFF) ? .outOfRange : nil
                                     },
                                     onWrite: { request in
                                         me?.applied.append((0xFF04, Array(request.value), request.offset))
                                         return me?.onWriteError
                                     })
            let (a, b, c, d) = (oneByte, fourBytes, upToFour, limited)
            database = try GATTDatabase(services: [Service(0xFFF0) { a; b; c; d }])
            me = self
        }
    }

    private func rig() throws -> (StrictDevice, ATTServer, RecordingDelegate) {
        let device = try StrictDevice()
        let server = ATTServer(database: device.database, peer: ATTPeer(connectionHandle: 1, address: BluetoothAddress(value: 1)),
                               scheduler: ManualScheduler())
        let delegate = RecordingDelegate()
        server.record(by: delegate)
        return (device, server, delegate)
    }

    private func send(_ server: ATTServer, _ delegate: RecordingDelegate, _ pdu: [UInt8]) -> [UInt8]? {
        delegate.sent.removeAll()
        server.receive(pdu[...])
        return delegate.sent.last?.pdu
    }

    /// The defect found: Prepare Write at offset 1 with no bytes, then Execute Write, used to
    /// hand a `.fixed(1)` handler an empty value (and trap in `value[0]`).
    @Test func emptyTailOfAFixedValueNeverReachesTheHandler() throws {
        let (device, server, delegate) = try rig()
        let h = device.oneByte.valueHandle
        // 3.4.6.1: nothing is checked at prepare time; the response echoes the request.
        #expect(send(server, delegate, ATTServerPreparedWriteTests.prepare(h, 1, [])) == [0x17] + ATTServerPreparedWriteTests.prepare(h, 1, []).dropFirst())
        #expect(send(server, delegate, [0x18, 0x01]) == errorResponse(0x18, h, .invalidAttributeValueLength).first)
        // Past the end is Invalid Offset.
        _ = send(server, delegate, ATTServerPreparedWriteTests.prepare(h, 2, []))
        #expect(send(server, delegate, [0x18, 0x01]) == errorResponse(0x18, h, .invalidOffset).first)
        // A part of a fixed value is refused too: the handler only ever gets the whole value.
        let h4 = device.fourBytes.valueHandle
        _ = send(server, delegate, ATTServerPreparedWriteTests.prepare(h4, 2, [1, 2]))
        #expect(send(server, delegate, [0x18, 0x01]) == errorResponse(0x18, h4, .invalidAttributeValueLength).first)
        #expect(device.applied.isEmpty)
        // The whole value, in two parts, is written once.
        _ = send(server, delegate, ATTServerPreparedWriteTests.prepare(h4, 0, [1, 2]))
        _ = send(server, delegate, ATTServerPreparedWriteTests.prepare(h4, 2, [3, 4]))
        #expect(send(server, delegate, [0x18, 0x01]) == [0x19])
        #expect(device.applied.map(\.value) == [[1, 4]])
    }

    /// A maximum length holds for the value at its offset: offset + length ≤ maximum.
    @Test func variableMaximumHoldsAtEveryOffset() throws {
        let (device, server, delegate) = try rig()
        let h = device.upToFour.valueHandle
        _ = send(server, delegate, ATTServerPreparedWriteTests.prepare(h, 2, [1, 2, 3]))
        #expect(send(server, delegate, [0x18, 0x01]) == errorResponse(0x18, h, .invalidAttributeValueLength).first)
        _ = send(server, delegate, ATTServerPreparedWriteTests.prepare(h, 5, []))
        #expect(send(server, delegate, [0x18, 0x01]) == errorResponse(0x18, h, .invalidOffset).first)
        _ = send(server, delegate, ATTServerPreparedWriteTests.prepare(h, 2, [1, 2]))
        #expect(send(server, delegate, [0x18, 0x01]) == [0x19])
        #expect(device.applied.map(\.offset) == [2])
        #expect(device.applied.map(\.value) == [[1, 2]])
    }

    /// 3.4.6.3: every prepared value is checked — by the stack and by the device's
    /// validateWrite — before any is written; one refusal leaves every attribute unchanged.
    @Test func executeWriteIsAllOrNothing() throws {
        let (device, server, delegate) = try rig()
        device.refuseLimitedOver = 9
        let a = device.upToFour.valueHandle, b = device.limited.valueHandle
        _ = send(server, delegate, ATTServerPreparedWriteTests.prepare(a, 0, [7, 7]))
        _ = send(server, delegate, ATTServerPreparedWriteTests.prepare(b, 0, [10]))
        #expect(send(server, delegate, [0x18, 0x01]) == errorResponse(0x18, b, .outOfRange).first)
        #expect(device.validated == [0xFF04])
        #expect(device.applied.isEmpty, "A must not be written when B is refused")
        #expect(delegate.wrote.isEmpty)

        // A stack check late in the queue also stops everything: a CCCD-less fixed value, wrong size.
        let one = device.oneByte.valueHandle
        _ = send(server, delegate, ATTServerPreparedWriteTests.prepare(a, 0, [1]))
        _ = send(server, delegate, ATTServerPreparedWriteTests.prepare(one, 0, [1, 2]))
        #expect(send(server, delegate, [0x18, 0x01]) == errorResponse(0x18, one, .invalidAttributeValueLength).first)
        #expect(device.applied.isEmpty)

        // Accepted by every check: all are written, in the order they were prepared.
        _ = send(server, delegate, ATTServerPreparedWriteTests.prepare(a, 0, [1]))
        _ = send(server, delegate, ATTServerPreparedWriteTests.prepare(b, 0, [9]))
        #expect(send(server, delegate, [0x18, 0x01]) == [0x19])
        #expect(device.applied.map(\.uuid) == [0xFF03, 0xFF04])
    }

    /// A single write is checked by validateWrite before onWrite too.
    @Test func validateWriteGuardsSingleWrites() throws {
        let (device, server, delegate) = try rig()
        device.refuseLimitedOver = 5
        let b = device.limited.valueHandle
        #expect(send(server, delegate, [0x12, UInt8(b), 0, 6]) == errorResponse(0x12, b, .outOfRange).first)
        #expect(device.applied.isEmpty)
        #expect(send(server, delegate, [0x12, UInt8(b), 0, 5]) == [0x13])
        #expect(device.applied.map(\.value) == [[5]])
    }

    /// An onWrite that refuses what its validator accepted breaks atomicity; the server says so.
    @Test func lateRefusalIsReported() throws {
        let (device, server, delegate) = try rig()
        device.onWriteError = .application(0x01)
        let a = device.upToFour.valueHandle, b = device.limited.valueHandle
        _ = send(server, delegate, ATTServerPreparedWriteTests.prepare(a, 0, [1]))
        _ = send(server, delegate, ATTServerPreparedWriteTests.prepare(b, 0, [1]))
        #expect(send(server, delegate, [0x18, 0x01]) == errorResponse(0x18, b, .application(0x01)).first)
        #expect(delegate.nonAtomicExecutes.count == 1)
        #expect(delegate.nonAtomicExecutes.first?.written == 1)
        #expect(delegate.nonAtomicExecutes.first?.handle == b)
    }

    /// Lengths a database cannot keep are refused when it is built.
    @Test func impossibleLengthRulesAreRefused() {
        let negative = Characteristic(0xFF09, properties: [.write], length: .fixed(-1), onWrite: { _ in nil })
        #expect(throws: GATTDatabaseError.self) { try GATTDatabase(services: [Service(0xFFF0) { negative }]) }
        let huge = Characteristic(0xFF09, properties: [.write], length: .fixed(513), onWrite: { _ in nil })
        #expect(throws: GATTDatabaseError.self) { try GATTDatabase(services: [Service(0xFFF0) { huge }]) }
        let validatorOnly = Characteristic(0xFF09, properties: [.read], onRead: { _, _ in nil },
                                           validateWrite: { _ in nil })
        #expect(throws: GATTDatabaseError.self) { try GATTDatabase(services: [Service(0xFFF0) { validatorOnly }]) }
    }
}
