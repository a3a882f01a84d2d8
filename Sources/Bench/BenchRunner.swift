import BlemuBenchProtocol
import BlemuCore

/// Where a runner's packets go: a GATT characteristic or an L2CAP channel.
public protocol BenchPacketIO: AnyObject {
    /// Sends one packet. False when there is no room now: the transport then calls the
    /// runner's `ioIsReady` once there is.
    func sendPacket(_ packet: ArraySlice<UInt8>) -> Bool
    /// Bytes the transport adds to each packet (Bumble's `overhead_size`: 2 for the stream
    /// framing of L2CAP, 0 for GATT); a send packet of `--size` bytes is that much shorter.
    var overhead: Int { get }
    /// The largest packet it carries (ATT_MTU - 3, or the peer's channel MTU less the framing).
    var largestPacket: Int { get }
    /// The MTU the result names (ATT_MTU, or the peer's channel MTU).
    var mtu: Int { get }
}

/// Where a read scenario's Read Requests go: the GATT client, one characteristic.
public protocol BenchReader: AnyObject {
    /// Sends one Read Request; the transport then calls the runner's `readAnswered` with the
    /// value. False when it cannot be sent now (the runner tries again at `ioIsReady`).
    func startRead() -> Bool
}

/// One bench scenario on this end, as bumble-bench runs it (bench.py `Sender`, `Receiver`,
/// `Ping`, `Pong`), on the run loop:
///
/// - send: RESET, then `packetCount` SEQUENCE packets of `packetSize` bytes as fast as the
///   transport takes them, the last flagged LAST; done at the receiver's ACK.
/// - receive: counts what comes after a RESET; answers the LAST packet with an ACK.
/// - ping: RESET, then one SEQUENCE packet at a time, the next when its ACK came back (Bumble
///   sends them all at once unless `--pace`: one at a time measures the round trip alone).
/// - pong: answers every SEQUENCE packet with an ACK; done at the LAST.
/// - read (blemu's own, against any GATT server): `packetCount` Read Requests, one at a time,
///   the next when the answer came; each round trip recorded as a ping's is. No packets, no RESET.
///
/// The send path encodes into one buffer reused for every packet: nothing is allocated per packet.
public final class BenchRunner {
    public let scenario: BenchScenario
    public let mode: BenchMode
    public let packetCount: Int
    public let packetSize: Int
    let scheduler: TimerScheduling
    public weak var io: BenchPacketIO?
    /// The read scenario's reads (the central's GATT client).
    public weak var reader: BenchReader?
    /// Packets done so far (sent, received or answered) and of how many (0: unknown, receive and pong).
    public var onProgress: ((_ done: Int, _ of: Int) -> Void)?
    /// Once, when the run is over on this end.
    public var onFinished: ((BenchResult) -> Void)?
    /// Something the peer sent that is not a packet, or out of place: one line.
    public var onNote: ((String) -> Void)?

    public private(set) var isFinished = false
    private var started = false
    private var resetPending = false
    private var next = 0
    private var bytes = 0
    private var startedAt: UInt64 = 0
    private var lastAt: UInt64 = 0
    private var outOfOrder = 0
    private var expected: UInt32 = 0
    private var awaitingAnswer = false
    private var sentAt: UInt64 = 0
    private var latencies: LatencySamples
    private var buffer: [UInt8] = []
    /// Answers (ACKs) the transport could not take yet, oldest first, at most `maxPendingAnswers`.
    private var pendingAnswers: [BenchPacket] = []
    private var pendingAnswersStart = 0
    private var finishWhenAnswered: BenchResult?
    public private(set) var answersNotSent = 0

    /// ACKs waiting for room: a Bumble ping sends every packet at once, so a pong may owe many.
    public static let maxPendingAnswers = 65_536

    public init(scenario: BenchScenario, mode: BenchMode, packetCount: Int, packetSize: Int, scheduler: TimerScheduling) {
        self.scenario = scenario
        self.mode = mode
        self.packetCount = packetCount
        self.packetSize = packetSize
        self.scheduler = scheduler
        latencies = LatencySamples(capacity: scenario == .ping || scenario == .read ? packetCount : 0)
        buffer.reserveCapacity(max(packetSize, BenchPacket.sequenceHeaderLength) + 8)
    }

    public var isSender: Bool { scenario == .send || scenario == .ping || scenario == .read }

    /// The transport is up (subscribed, channel open) or has room again.
    public func ioIsReady() {
        guard !isFinished else { return }
        if !started && isSender {
            started = true
            if scenario == .read {
                startedAt = scheduler.nowNanoseconds
            } else {
                resetPending = true
            }
        }
        pump()
    }

    private func pump() {
        guard !isFinished else { return }
        if scenario == .read { return pumpReads() }
        guard let io else { return }
        if !sendPendingAnswers(io) { return }
        if let result = finishWhenAnswered { return finish(result) }
        guard isSender, started else { return }
        if resetPending {
            buffer.removeAll(keepingCapacity: true)
            BenchPacket.reset.encode(into: &buffer)
            guard io.sendPacket(buffer[...]) else { return }
            resetPending = false
            startedAt = scheduler.nowNanoseconds
        }
        switch scenario {
        case .send:
            while next < packetCount {
                guard send(sequence: next, payload: packetSize - BenchPacket.sequenceHeaderLength - io.overhead, io) else { return }
                bytes += buffer.count
                next += 1
                onProgress?(next, packetCount)
            }
        case .ping:
            guard !awaitingAnswer, next < packetCount else { return }
            guard send(sequence: next, payload: packetSize - BenchPacket.sequenceHeaderLength - io.overhead, io) else { return }
            bytes += buffer.count
            awaitingAnswer = true
        case .receive, .pong, .read:
            break
        }
    }

    private func pumpReads() {
        guard started, !awaitingAnswer, next < packetCount, let reader else { return }
        let now = scheduler.nowNanoseconds
        guard reader.startRead() else { return }
        sentAt = now
        awaitingAnswer = true
    }

    /// The answer to the read in flight (its value).
    public func readAnswered(_ value: ArraySlice<UInt8>) {
        guard scenario == .read, !isFinished else { return }
        guard awaitingAnswer else { onNote?("a read answer with no read in flight"); return }
        let now = scheduler.nowNanoseconds
        awaitingAnswer = false
        latencies.record(now &- sentAt)
        bytes += value.count
        next += 1
        onProgress?(next, packetCount)
        if next == packetCount {
            finish(result(seconds: Double(now &- startedAt) / 1e9))
        } else {
            pumpReads()
        }
    }

    /// The read scenario on the peripheral: nothing to count; the run is over (the central
    /// disconnected after its reads).
    public func servingEnded() {
        guard scenario == .read else { return }
        finish(result(seconds: 0))
    }

    private func send(sequence: Int, payload: Int, _ io: BenchPacketIO) -> Bool {
        let now = scheduler.nowNanoseconds
        let packet = BenchPacket(kind: .sequence, flags: sequence == packetCount - 1 ? BenchPacket.lastFlag : 0,
                                 sequence: UInt32(truncatingIfNeeded: sequence),
                                 timestamp: UInt32(truncatingIfNeeded: (now &- startedAt) / 1000), payloadLength: max(0, payload))
        buffer.removeAll(keepingCapacity: true)
        packet.encode(into: &buffer)
        guard io.sendPacket(buffer[...]) else { return false }
        sentAt = now
        return true
    }

    /// Sends the ACKs owed; false while some still wait for room.
    private func sendPendingAnswers(_ io: BenchPacketIO) -> Bool {
        while pendingAnswersStart < pendingAnswers.count {
            buffer.removeAll(keepingCapacity: true)
            pendingAnswers[pendingAnswersStart].encode(into: &buffer)
            guard io.sendPacket(buffer[...]) else { return false }
            pendingAnswersStart += 1
        }
        pendingAnswers.removeAll(keepingCapacity: true)
        pendingAnswersStart = 0
        return true
    }

    private func answer(_ packet: BenchPacket) {
        let ack = BenchPacket.ack(for: packet)
        if pendingAnswersStart == pendingAnswers.count, let io {
            buffer.removeAll(keepingCapacity: true)
            ack.encode(into: &buffer)
            if io.sendPacket(buffer[...]) { return }
        }
        guard pendingAnswers.count - pendingAnswersStart < Self.maxPendingAnswers else {
            answersNotSent += 1
            onNote?("ACK for packet \(packet.sequence) not sent: \(Self.maxPendingAnswers) ACKs wait already")
            return
        }
        pendingAnswers.append(ack)
    }

    /// One packet from the peer (the bytes without the transport's framing).
    public func received(_ bytes: ArraySlice<UInt8>) {
        guard !isFinished else { return }
        let packet: BenchPacket
        switch BenchPacket.decode(bytes) {
        case .failure(let failure): onNote?("ignored: \(failure)"); return
        case .success(let decoded): packet = decoded
        }
        let now = scheduler.nowNanoseconds
        switch (scenario, packet.kind) {
        case (.receive, .reset), (.pong, .reset):
            restartReceiving(at: now)
        case (.receive, .sequence), (.pong, .sequence):
            if next == 0 && startedAt == 0 { startedAt = now }
            if packet.sequence != expected { outOfOrder += 1 }
            expected = packet.sequence &+ 1
            next += 1
            self.bytes += bytes.count
            lastAt = now
            onProgress?(next, 0)
            if scenario == .pong || packet.isLast { answer(packet) }
            if packet.isLast {
                let result = self.result(seconds: Double(lastAt &- startedAt) / 1e9)
                if pendingAnswersStart < pendingAnswers.count { finishWhenAnswered = result } else { finish(result) }
            }
        case (.send, .ack):
            guard next == packetCount else { onNote?("ACK \(packet.sequence) before the last packet went"); return }
            finish(result(seconds: Double(now &- startedAt) / 1e9))
        case (.ping, .ack):
            guard awaitingAnswer, packet.sequence == UInt32(truncatingIfNeeded: next) else {
                outOfOrder += 1
                onNote?("ACK \(packet.sequence) while waiting for \(next)")
                return
            }
            awaitingAnswer = false
            latencies.record(now &- sentAt)
            next += 1
            onProgress?(next, packetCount)
            if next == packetCount {
                finish(result(seconds: Double(now &- startedAt) / 1e9))
            } else {
                pump()
            }
        default:
            onNote?("ignored: a \(packet.kind) packet in the \(scenario.rawValue) scenario")
        }
    }

    /// What this end was waiting for when the run ended without a result, and what the peer's
    /// scenario must be to give it: a failure (a timeout, the peer gone) says it, so a
    /// mismatched pair (a `ping` central and a `receive` peripheral: no ACK until the LAST
    /// packet, which a ping never sends before its ACKs) is told as such, not as a bare timeout.
    public var expectation: String {
        switch scenario {
        case .send:
            if !started { return "this send end never got to send (the Speed service or the channel was not ready)" }
            if next < packetCount { return "this send end sent \(next) of \(packetCount) packets (the link took no more)" }
            return "this send end sent all \(packetCount) packets, the last flagged LAST, and waited for its ACK: "
                + "the peer must run `receive` (a `pong` peer answers too; `send` and `ping` peers answer none)"
        case .ping:
            if !started { return "this ping end never got to send (the Speed service or the channel was not ready)" }
            return "this ping end sent packet \(next) of \(packetCount) and waited for its ACK: the peer must run `pong` "
                + "(a `receive` peer answers only the packet flagged LAST)"
        case .receive:
            if next == 0 { return "this receive end got no packet: the peer must run `send`" }
            return "this receive end got \(next) packet\(next == 1 ? "" : "s"), none flagged LAST, and waited for the last: "
                + "the peer must run `send` (a `ping` peer waits for an ACK of each packet: answer it with `pong`)"
        case .pong:
            if next == 0 { return "this pong end got no packet: the peer must run `ping`" }
            return "this pong end answered \(next) packet\(next == 1 ? "" : "s"), none flagged LAST: the peer must run `ping`"
        case .read:
            if !started { return "this read end never got to read" }
            return "this read end read \(next) of \(packetCount) times; the read in flight got no answer"
        }
    }

    private func restartReceiving(at now: UInt64) {
        next = 0
        bytes = 0
        outOfOrder = 0
        expected = 0
        startedAt = now
    }

    private func result(seconds: Double) -> BenchResult {
        BenchResult(scenario: scenario, mode: mode, packets: next, bytes: bytes, seconds: seconds, outOfOrder: outOfOrder,
                    latency: latencies.summary(), mtu: io?.mtu ?? 0)
    }

    private func finish(_ result: BenchResult) {
        guard !isFinished else { return }
        isFinished = true
        finishWhenAnswered = nil
        onFinished?(result)
    }
}
