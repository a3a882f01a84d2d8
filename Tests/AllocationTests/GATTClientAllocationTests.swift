import BlemuATT
import BlemuCore
import BlemuGATTClient
import CAllocationCounter
import Testing

/// The GATT client's per-PDU paths, once warm: what a server sends (notifications,
/// indications and their confirmations) and what a client sends at rate (Write Command)
/// allocate nothing; a request costs only what its callback API must hold (the procedure, the
/// caller's completion, a read's value), never an array per PDU it sends.
@Suite struct GATTClientAllocationTests {
    /// The bearer's other end: counts what the client sent, by opcode, without keeping it.
    final class Recorder: ATTTransport {
        var sent = 0
        var lastOpcode: UInt8 = 0
        var lastLength = 0
        func sendATT(_ pdu: ArraySlice<UInt8>, kind: ATTSendKind) -> Bool {
            sent += 1
            lastOpcode = pdu.first ?? 0
            lastLength = pdu.count
            return true
        }
    }

    final class Fixture {
        let scheduler = ManualScheduler()
        let recorder = Recorder()
        let bearer: ATTBearer
        let client: GATTClient
        var values = 0
        var bytes = 0

        init() {
            bearer = ATTBearer(scheduler: scheduler, transport: recorder)
            client = GATTClient(scheduler: scheduler, bearer: bearer)
            client.onNotification = { [unowned self] _, value in
                values += 1
                bytes += value.count
            }
            client.onIndication = client.onNotification
        }

        /// Round trips before counting: the manual scheduler's timer list grows to its
        /// steady size over the first few dozen (each request starts the 30 s timer).
        static let warmUp = 40
        func warm(_ body: () -> Void) {
            for _ in 0..<Self.warmUp { body() }
        }
    }

    @Test func aNotificationAllocatesNothing() {
        let fixture = Fixture()
        let notification: [UInt8] = [0x1B, 0x12, 0x00, 0x06, 0x48]
        #expect(AllocationTests().allocations { fixture.client.receive(notification[...]) } == 0)
        #expect(fixture.values == AllocationTests.iterations + 1)
        #expect(fixture.bytes == 2 * (AllocationTests.iterations + 1))
    }

    @Test func aMultipleHandleValueNotificationAllocatesNothing() {
        let fixture = Fixture()
        // Vol 3, Part F, 3.4.7.4: two (handle, length, value) tuples.
        let notification: [UInt8] = [0x23, 0x12, 0x00, 0x02, 0x00, 0x06, 0x48, 0x15, 0x00, 0x01, 0x00, 0x5A]
        #expect(AllocationTests().allocations { fixture.client.receive(notification[...]) } == 0)
        #expect(fixture.values == 2 * (AllocationTests.iterations + 1))
    }

    @Test func anIndicationAndItsConfirmationAllocateNothing() {
        let fixture = Fixture()
        let indication: [UInt8] = [0x1D, 0x20, 0x00, 0x80, 0x02, 0x01]
        #expect(AllocationTests().allocations { fixture.client.receive(indication[...]) } == 0)
        #expect(fixture.values == AllocationTests.iterations + 1)
        // 3.4.7.3: each indication confirmed.
        #expect(fixture.recorder.sent == AllocationTests.iterations + 1)
        #expect(fixture.recorder.lastOpcode == 0x1E && fixture.recorder.lastLength == 1)
    }

    @Test func aWriteWithoutResponseAllocatesNothing() {
        let fixture = Fixture()
        let value = [UInt8](repeating: 0xA5, count: 20)
        var refused = 0
        #expect(AllocationTests().allocations {
            if case .failure = fixture.client.writeWithoutResponse(0x0030, value) { refused += 1 }
        } == 0)
        #expect(refused == 0)
        #expect(fixture.recorder.sent == AllocationTests.iterations + 1)
        #expect(fixture.recorder.lastOpcode == 0x52 && fixture.recorder.lastLength == 23)
    }

    /// A read's round trip: the request goes out of the client's reused buffer; what is left is
    /// the procedure object, the completion's context and the value handed back.
    @Test func aReadRoundTripAllocatesOnlyWhatItsCallbackAPIHolds() {
        let fixture = Fixture()
        let response: [UInt8] = [0x0B, 0x62, 0x6C, 0x65, 0x6D, 0x75]
        var read = 0
        let roundTrip = {
            fixture.client.read(0x0003) { result in
                if case .success(let value) = result, value.count == 5 { read += 1 }
            }
            fixture.client.receive(response[...])
        }
        fixture.warm(roundTrip)
        let count = AllocationTests().allocations(roundTrip)
        #expect(read == AllocationTests.iterations + 1 + Fixture.warmUp)
        #expect(fixture.recorder.lastOpcode == 0x0A && fixture.recorder.lastLength == 3)
        #expect(count <= 3 * AllocationTests.iterations, "\(count) allocations in \(AllocationTests.iterations) reads")
    }

    /// A long read (Read, then Read Blob while responses come full) takes no array per request.
    @Test func aLongReadTakesNoArrayPerRequest() {
        let fixture = Fixture()
        let full = [UInt8](repeating: 0x42, count: 22)   // ATT_MTU 23 - 1: full, so a Read Blob follows
        let first: [UInt8] = [0x0B] + full
        let blob: [UInt8] = [0x0D] + full
        let last: [UInt8] = [0x0D, 0x01, 0x02]
        var length = 0
        let roundTrips = {
            fixture.client.read(0x0003) { result in
                if case .success(let value) = result { length = value.count }
            }
            fixture.client.receive(first[...])
            fixture.client.receive(blob[...])
            fixture.client.receive(last[...])
        }
        fixture.warm(roundTrips)
        let count = AllocationTests().allocations(roundTrips)
        #expect(length == 46)
        #expect(fixture.recorder.lastOpcode == 0x0C && fixture.recorder.lastLength == 5)
        // Three requests each, yet no more than the single read's three: the value's room for
        // 512 bytes is taken once.
        #expect(count <= 3 * AllocationTests.iterations, "\(count) allocations in \(AllocationTests.iterations) long reads")
    }
}
