import BlemuCore
import BlemuHCI
import BlemuRunLoop

/// A controller connection that stays up: opens the transport for `spec`, and when it fails
/// or is lost, tries again with exponential backoff on the loop's timers. It never gives up
/// and never exits; `stop()` ends it.
///
/// The `HCITransport` the stack hands to HCI once (`ControllerHost(controller:transport:)`):
/// `onPacket` is given to each transport opened as it is, so a received packet goes from the
/// transport's framing to HCI with nothing between them; a capture (`onTraffic`, `--btsnoop`)
/// is a tap put in that place only while one is set.
public final class ControllerLink: HCITransport {
    public let spec: ControllerSpec
    /// The transport opened: the host resets its controller state and starts over.
    public var onUp: (() -> Void)?
    /// The transport that was up is gone (already closed); a reconnect is scheduled.
    public var onDown: ((TransportError) -> Void)?
    /// An open attempt failed; the next one comes after the given delay.
    public var onOpenFailed: ((TransportError, Duration) -> Void)?
    /// Each packet received (set once, by HCI); the body is valid during the call.
    public var onPacket: ((H4PacketType, ArraySlice<UInt8>) -> Void)? {
        didSet { connectReceiver() }
    }
    /// Every packet that passes, both ways, for a capture (`--btsnoop`): `received` packets
    /// before `onPacket` sees them, sent ones once the transport took them. Nil (no capture):
    /// no tap on the path.
    public var onTraffic: ((_ received: Bool, H4PacketType, ArraySlice<UInt8>) -> Void)? {
        didSet { connectReceiver() }
    }

    public private(set) var isUp = false
    /// Between `start()` and `stop()`.
    public private(set) var isRunning = false
    /// The most recent failure, cleared when the link comes up.
    public private(set) var lastError: TransportError?
    /// The delay before the next open attempt after a failure.
    public private(set) var currentBackoff: Duration

    public let initialBackoff: Duration
    public let maxBackoff: Duration
    /// How long a transport must stay up before the backoff starts over: a controller that
    /// accepts and drops the connection at once is retried ever more slowly, not 4 times a second.
    public let stableAfter: Duration
    public let connectTimeout: Duration
    public let outputCapacity: Int

    /// The open transport, while up (e.g. for `discardedBytes`).
    public private(set) var transport: (any ControllerTransport)?

    private let loop: RunLoop
    private var opening: TransportOpening?
    private var retryTimer: TimerID?
    private var upSinceNanoseconds: UInt64 = 0

    public init(spec: ControllerSpec, loop: RunLoop, initialBackoff: Duration = .milliseconds(250),
                maxBackoff: Duration = .seconds(8), stableAfter: Duration = .seconds(10),
                connectTimeout: Duration = .seconds(3),
                outputCapacity: Int = ControllerTransports.defaultOutputCapacity) {
        self.spec = spec
        self.loop = loop
        self.initialBackoff = initialBackoff
        // An adapter that comes back is found within a second: opening a user channel is a
        // local system call, cheap to try again (a USB adapter re-plugged, a driver reloaded).
        let cap: Duration = if case .hci = spec { min(maxBackoff, .seconds(1)) } else { maxBackoff }
        self.maxBackoff = max(cap, initialBackoff)
        self.stableAfter = stableAfter
        self.connectTimeout = connectTimeout
        self.outputCapacity = outputCapacity
        self.currentBackoff = initialBackoff
    }

    deinit {
        opening?.cancel()
        if let retryTimer { loop.cancel(retryTimer) }
        transport?.close()
    }

    /// Opens the transport; `onUp` or `onOpenFailed` follows on the loop.
    public func start() {
        guard !isRunning else { return }
        isRunning = true
        currentBackoff = initialBackoff
        attempt()
    }

    /// Closes the transport and cancels any reconnection. No `onDown` follows.
    public func stop() {
        isRunning = false
        opening?.cancel()
        opening = nil
        if let retryTimer {
            loop.cancel(retryTimer)
            self.retryTimer = nil
        }
        transport?.close()
        transport = nil
        isUp = false
    }

    /// Sends through the transport; false while down or when its output buffer is full.
    public func send(_ type: H4PacketType, _ body: ArraySlice<UInt8>) -> Bool {
        guard isUp, let transport else { return false }
        guard transport.send(type, body) else { return false }
        onTraffic?(false, type, body)
        return true
    }

    public func send(_ type: H4PacketType, _ body: [UInt8]) -> Bool { send(type, body[...]) }

    private func attempt() {
        retryTimer = nil
        guard isRunning, opening == nil, transport == nil else { return }
        opening = ControllerTransports.open(spec, on: loop, connectTimeout: connectTimeout,
                                            outputCapacity: outputCapacity) { [weak self] result in
            self?.opened(result)
        }
    }

    private func opened(_ result: Result<any ControllerTransport, TransportError>) {
        opening = nil
        switch result {
        case .success(let newTransport):
            guard isRunning else {
                newTransport.close()
                return
            }
            newTransport.onClosed = { [weak self, weak newTransport] error in
                guard let self, let newTransport, newTransport === self.transport else { return }
                self.lost(error)
            }
            transport = newTransport
            connectReceiver()
            isUp = true
            lastError = nil
            // The backoff starts over only once this transport has proved stable (`lost`).
            upSinceNanoseconds = loop.nowNanoseconds
            onUp?()
        case .failure(let error):
            lastError = error
            let delay = currentBackoff
            currentBackoff = min(currentBackoff * 2, maxBackoff)
            scheduleRetry(after: delay)
            onOpenFailed?(error, delay)
        }
    }

    private func lost(_ error: TransportError) {
        transport = nil
        isUp = false
        lastError = error
        if loop.nowNanoseconds &- upSinceNanoseconds >= stableAfter.nanoseconds {
            currentBackoff = initialBackoff
        }
        let delay = currentBackoff
        currentBackoff = min(currentBackoff * 2, maxBackoff)
        scheduleRetry(after: delay)
        onDown?(error)
    }

    /// The open transport hands its packets to `onPacket` itself, or, while a capture is set,
    /// to a tap that shows each to the capture first.
    private func connectReceiver() {
        guard let transport else { return }
        guard let tap = onTraffic else {
            transport.onPacket = onPacket
            return
        }
        let receiver = onPacket
        transport.onPacket = { type, body in
            tap(true, type, body)
            receiver?(type, body)
        }
    }

    private func scheduleRetry(after delay: Duration) {
        guard isRunning, retryTimer == nil else { return }
        retryTimer = loop.schedule(after: delay) { [weak self] in self?.attempt() }
    }
}
