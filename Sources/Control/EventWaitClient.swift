import BlemuCore

/// `blemu ctl PATH wait`'s end of the stream, for any client of the control socket: its
/// `watch` request, then the reply to it (a refusal ends the wait), then the events until one
/// is the one waited for. Pure: the socket is `ControlClient.wait`'s.
public struct EventWaitProgress: Sendable {
    public enum State: Equatable, Sendable {
        /// The `watch` is sent; its reply is the next line.
        case awaitingReply
        /// The reply said ok: each event is tested.
        case watching
        /// The reply refused the `watch` (this line).
        case refused(String)
        /// This event line is the one waited for.
        case happened(String)
    }

    public let wait: EventWait
    public private(set) var state: State = .awaitingReply

    public init(_ wait: EventWait) { self.wait = wait }

    /// The request that starts it: a `watch` with the wait's filter.
    public var request: String { ControlRequest(id: 1, command: .watch(wait.filter)).json.encoded }

    /// Takes one line from the socket; false once the wait is over (refused, or happened).
    public mutating func take(_ line: String) -> Bool {
        switch state {
        case .awaitingReply:
            guard ControlClient.isOK(line) == true else {
                state = .refused(line)
                return false
            }
            state = .watching
            return true
        case .watching:
            guard wait.matches(line: line) else { return true }
            state = .happened(line)
            return false
        case .refused, .happened:
            return false
        }
    }
}

extension ControlClient {
    /// How a wait ended.
    public enum WaitOutcome: Equatable, Sendable {
        /// The event came: its line.
        case happened(String)
        /// The socket refused the `watch`: its reply.
        case refused(String)
        /// `timeout` passed first.
        case timedOut
    }

    /// Waits on the control socket at `path` for the event `wait` describes, at most `timeout`
    /// (connecting and sending: at most 5 s of it).
    public static func wait(for wait: EventWait, path: String, timeout: Duration) throws(ControlClientError) -> WaitOutcome {
        var progress = EventWaitProgress(wait)
        let ended = try stream(path: path, line: progress.request, connectTimeout: min(timeout, .seconds(5)), wait: timeout) {
            progress.take($0)
        }
        switch progress.state {
        case .refused(let reply): return .refused(reply)
        case .happened(let line) where ended: return .happened(line)
        case .awaitingReply, .watching, .happened: return .timedOut
        }
    }
}
