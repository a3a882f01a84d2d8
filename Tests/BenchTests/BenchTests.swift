import BlemuBench
import BlemuBenchProtocol
import BlemuCore
import Testing

@Suite struct BenchPacketTests {
    // The bytes bumble-bench's `Packet.__bytes__` makes (struct.pack("<BBII", ...) + payload).
    @Test func sequenceEncodesAsBumbleDoes() {
        let packet = BenchPacket(kind: .sequence, flags: BenchPacket.lastFlag, sequence: 0x0102_0304, timestamp: 0x0A0B_0C0D, payloadLength: 2)
        #expect(packet.encoded == [0x01, 0x01, 0x04, 0x03, 0x02, 0x01, 0x0D, 0x0C, 0x0B, 0x0A, 0x00, 0x00])
        #expect(packet.encodedLength == 12)
        #expect(BenchPacket.decode(packet.encoded[...]) == .success(packet))
    }

    @Test func ackAndResetEncodeAsBumbleDoes() {
        let ack = BenchPacket.ack(for: BenchPacket(kind: .sequence, flags: 1, sequence: 7))
        #expect(ack.encoded == [0x02, 0x01, 0x07, 0x00, 0x00, 0x00])
        #expect(BenchPacket.reset.encoded == [0x00])
        #expect(BenchPacket.decode(ack.encoded[...]) == .success(ack))
        // Bytes after a RESET or an ACK are ignored, as Bumble ignores them.
        #expect(BenchPacket.decode([0x00, 0xFF][...]) == .success(.reset))
    }

    @Test func decodingIsTotal() {
        #expect(BenchPacket.decode([][...]) == .failure(.empty))
        #expect(BenchPacket.decode([0x03][...]) == .failure(.unknownType(0x03)))
        #expect(BenchPacket.decode([0x02, 0x00, 0x01][...]) == .failure(.tooShort(kind: .ack, length: 3)))
        #expect(BenchPacket.decode([0x01, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00][...]) == .failure(.tooShort(kind: .sequence, length: 9)))
        // Every short prefix of a valid packet decodes to a packet or a failure, never a trap.
        let full = BenchPacket(kind: .sequence, sequence: 1, payloadLength: 4).encoded
        for end in 0...full.count { _ = BenchPacket.decode(full[0..<end]) }
        // A slice that does not start at 0.
        let offset = [0xEE] + full
        #expect(BenchPacket.decode(offset[1...]) == .success(BenchPacket(kind: .sequence, sequence: 1, payloadLength: 4)))
    }
}

@Suite struct BenchStreamFramerTests {
    @Test func packetsAreFoundAcrossAndWithinSDUs() {
        var stream: [UInt8] = []
        BenchStreamFramer.frame([1, 2, 3][...], into: &stream)
        BenchStreamFramer.frame([4][...], into: &stream)
        BenchStreamFramer.frame(Array(repeating: 9, count: 300)[...], into: &stream)
        #expect(Array(stream.prefix(2)) == [0x00, 0x03])   // the length is big-endian, as Bumble's '>H'
        for cut in [1, 2, 3, 5, 7, 100, stream.count] {
            var framer = BenchStreamFramer()
            var packets: [[UInt8]] = []
            var at = 0
            while at < stream.count {
                let end = min(stream.count, at + cut)
                framer.receive(stream[at..<end]) { packets.append(Array($0)) }
                at = end
            }
            #expect(packets == [[1, 2, 3], [4], Array(repeating: 9, count: 300)], "SDUs of \(cut) bytes")
            #expect(framer.pendingBytes == 0)
        }
    }
}

/// Two runners joined by in-memory transports that take at most `room` packets until the
/// test lets them through, as a link's queue does.
final class PipeIO: BenchPacketIO {
    var overhead: Int
    var largestPacket: Int { 512 }
    var mtu: Int { 517 }
    var room: Int
    var queue: [[UInt8]] = []
    weak var far: BenchRunner?
    weak var near: BenchRunner?
    var sent = 0
    init(overhead: Int = 0, room: Int) { self.overhead = overhead; self.room = room }

    func sendPacket(_ packet: ArraySlice<UInt8>) -> Bool {
        guard queue.count < room else { return false }
        queue.append(Array(packet))
        sent += 1
        return true
    }

    /// Delivers what waits; the sender hears it has room again.
    func flush() -> Bool {
        guard !queue.isEmpty else { return false }
        let packets = queue
        queue.removeAll()
        for packet in packets { far?.received(packet[...]) }
        near?.ioIsReady()
        return true
    }
}

@Suite struct BenchRunnerTests {
    func pair(_ a: BenchScenario, _ b: BenchScenario, packets: Int, size: Int, room: Int)
        -> (BenchRunner, BenchRunner, PipeIO, PipeIO, ManualScheduler) {
        let clock = ManualScheduler()
        let sender = BenchRunner(scenario: a, mode: .gattClient, packetCount: packets, packetSize: size, scheduler: clock)
        let receiver = BenchRunner(scenario: b, mode: .gattServer, packetCount: 0, packetSize: size, scheduler: clock)
        let forth = PipeIO(room: room), back = PipeIO(room: room)
        forth.far = receiver; forth.near = sender
        back.far = sender; back.near = receiver
        sender.io = forth
        receiver.io = back
        return (sender, receiver, forth, back, clock)
    }

    @Test func sendAndReceiveCountEveryPacketWithBackPressure() {
        let (sender, receiver, forth, back, clock) = pair(.send, .receive, packets: 25, size: 100, room: 4)
        var sent: BenchResult?, received: BenchResult?
        sender.onFinished = { sent = $0 }
        receiver.onFinished = { received = $0 }
        sender.ioIsReady()
        #expect(forth.sent == 4, "only what the transport took")
        var rounds = 0
        while forth.flush() || back.flush() { clock.advance(by: .milliseconds(10)); rounds += 1 }
        #expect(rounds > 5)
        #expect(received?.packets == 25)
        #expect(received?.bytes == 2500)
        #expect(received?.outOfOrder == 0)
        #expect(sent?.packets == 25)
        #expect(sent?.bytes == 2500)
        #expect((sent?.seconds ?? 0) > 0)
        #expect(forth.sent == 26, "RESET and 25 packets")
        #expect(back.sent == 1, "one ACK, for the LAST packet")
    }

    @Test func pingMeasuresEachRoundTrip() {
        let (ping, pong, forth, back, clock) = pair(.ping, .pong, packets: 10, size: 20, room: 8)
        var result: BenchResult?, answered: BenchResult?
        ping.onFinished = { result = $0 }
        pong.onFinished = { answered = $0 }
        ping.ioIsReady()
        #expect(forth.sent == 2, "RESET and the first packet: one in flight at a time")
        var step = 1
        while forth.flush() || back.flush() {
            clock.advance(by: .milliseconds(Int64(step)))
            step += 1
        }
        #expect(answered?.packets == 10)
        #expect(back.sent == 10)
        let latency = try? #require(result?.latency)
        #expect(result?.packets == 10)
        #expect(latency != nil)
        if let latency {
            #expect(latency.minimum > 0)
            #expect(latency.minimum <= latency.p50 && latency.p50 <= latency.p90 && latency.p90 <= latency.p99 && latency.p99 <= latency.maximum)
        }
    }

    /// A `ping` central against a `receive` peripheral stalls (no ACK until a LAST packet the
    /// ping never sends first): each end's expectation names what it waited for and the
    /// scenario the peer must run, for the failure to say instead of a bare timeout.
    @Test func aMismatchedPairSaysWhatEachEndWaitedFor() {
        let (ping, receive, forth, back, _) = pair(.ping, .receive, packets: 6, size: 20, room: 8)
        ping.onFinished = { _ in Issue.record("the ping cannot finish against receive") }
        receive.onFinished = { _ in Issue.record("the receiver cannot finish against ping") }
        ping.ioIsReady()
        while forth.flush() || back.flush() {}
        #expect(!ping.isFinished && !receive.isFinished)
        #expect(ping.expectation.contains("sent packet 0 of 6 and waited for its ACK: the peer must run `pong`"), "\(ping.expectation)")
        #expect(receive.expectation.contains("got 1 packet, none flagged LAST"), "\(receive.expectation)")
        #expect(receive.expectation.contains("the peer must run `send`"), "\(receive.expectation)")
    }

    /// A GATT server that answers each read when the test says, the value 8 bytes long.
    final class FakeReader: BenchReader {
        var inFlight = 0
        var started = 0
        var room = true
        func startRead() -> Bool {
            guard room else { return false }
            inFlight += 1
            started += 1
            return true
        }
    }

    @Test func readIssuesOneRequestAtATimeAndMeasuresEachRoundTrip() {
        let clock = ManualScheduler()
        let runner = BenchRunner(scenario: .read, mode: .gattClient, packetCount: 5, packetSize: 0, scheduler: clock)
        let reader = FakeReader()
        runner.reader = reader
        var result: BenchResult?
        runner.onFinished = { result = $0 }
        reader.room = false
        runner.ioIsReady()
        #expect(reader.started == 0, "no room: nothing sent")
        reader.room = true
        runner.ioIsReady()
        for round in 1...5 {
            #expect(reader.inFlight == 1, "one read in flight, never two")
            runner.ioIsReady()
            #expect(reader.inFlight == 1, "room again does not send a second read before the answer")
            clock.advance(by: .milliseconds(Int64(round)))
            reader.inFlight -= 1
            runner.readAnswered([UInt8](repeating: 0x41, count: 8)[...])
        }
        #expect(reader.started == 5)
        let finished = try? #require(result)
        #expect(finished?.scenario == .read && finished?.packets == 5 && finished?.bytes == 40)
        #expect(finished?.latency == LatencySummary(minimum: 1, p50: 3, p90: 5, p99: 5, maximum: 5, mean: 3))
        #expect(finished?.seconds == 0.015)
        var notes: [String] = []
        runner.onNote = { notes.append($0) }
        runner.readAnswered([][...])
        #expect(reader.started == 5 && notes.isEmpty, "after the run: ignored")
    }

    @Test func anAnswerWithNoReadInFlightIsNotedNotCounted() {
        let clock = ManualScheduler()
        let runner = BenchRunner(scenario: .read, mode: .gattClient, packetCount: 2, packetSize: 0, scheduler: clock)
        var notes: [String] = []
        runner.onNote = { notes.append($0) }
        runner.readAnswered([1][...])
        #expect(notes.count == 1)
        #expect(!runner.isFinished)
    }

    @Test func theServingPeripheralEndsWithAnEmptyResult() {
        let runner = BenchRunner(scenario: .read, mode: .gattServer, packetCount: 10, packetSize: 0, scheduler: ManualScheduler())
        var result: BenchResult?
        runner.onFinished = { result = $0 }
        runner.servingEnded()
        #expect(result?.scenario == .read && result?.packets == 0 && result?.latency == nil)
    }

    @Test func garbageFromThePeerIsNotedNotCounted() {
        let clock = ManualScheduler()
        let receiver = BenchRunner(scenario: .receive, mode: .gattServer, packetCount: 0, packetSize: 20, scheduler: clock)
        var notes: [String] = []
        receiver.onNote = { notes.append($0) }
        receiver.received([0x07][...])
        receiver.received([][...])
        receiver.received([0x01, 0x00][...])
        #expect(notes.count == 3)
        #expect(!receiver.isFinished)
    }
}

@Suite struct LatencyTests {
    @Test func percentilesAreNearestRank() {
        var samples = LatencySamples(capacity: 100)
        for ms in 1...100 { samples.record(UInt64(ms) * 1_000_000) }
        let summary = samples.summary()
        #expect(summary == LatencySummary(minimum: 1, p50: 50, p90: 90, p99: 99, maximum: 100, mean: 50.5))
        #expect(LatencySamples().summary() == nil)
    }

    @Test func resultPrintsThroughputAndJSON() {
        let result = BenchResult(scenario: .send, mode: .gattClient, packets: 10, bytes: 5000, seconds: 2, outOfOrder: 0, latency: nil, mtu: 517)
        #expect(result.throughputKBps == 2.5)
        #expect(result.text.contains("throughput  2.50 kB/s"))
        #expect(result.json.hasPrefix("{\"scenario\":\"send\",\"mode\":\"gatt-client\",\"mtu\":517,\"packets\":10,\"bytes\":5000,"))
    }
}

@Suite struct BenchPlanTests {
    @Test func defaultsAreBumbleBenchs() {
        let central = BenchPlan(role: .central)
        #expect(central.mode == .gattClient && central.scenario == .send && central.effectiveMTU == 517)
        let peripheral = BenchPlan(role: .peripheral, mode: .l2capServer)
        #expect(peripheral.scenario == .receive && peripheral.effectiveMTU == 1024)
    }

    @Test func plansThatCannotRunAreRefused() {
        var plan = BenchPlan(role: .central)
        #expect(plan.problem()?.contains("--peer") == true)
        plan.peer = BluetoothAddress("F1:F1:F1:F1:F1:F1")
        #expect(plan.problem() == nil)
        plan.size = 515
        #expect(plan.problem()?.contains("ATT_MTU 517") == true)
        plan.size = 100
        plan.mode = .gattServer
        #expect(plan.problem() != nil)
        var peripheral = BenchPlan(role: .peripheral)
        peripheral.phy = .twoM
        #expect(peripheral.problem() != nil)
        var read = BenchPlan(role: .central, scenario: .read)
        read.peer = BluetoothAddress("F1:F1:F1:F1:F1:F1")
        read.size = 5000
        #expect(read.problem() == nil, "a read has no packet size")
        read.mode = .l2capClient
        #expect(read.problem()?.contains("read goes with gatt-client") == true)
    }
}
