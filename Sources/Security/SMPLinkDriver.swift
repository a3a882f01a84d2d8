import BlemuCore
import BlemuSMP
import Logging

/// One link's pairing machine, of either role, with its SMP timer: what `PeripheralSecurity`
/// (an `SMPResponder` per link) and `CentralSecurity` (an `SMPInitiator` per link) share.
///
/// Each input's output is carried out in one order: its PDUs go to the SMP channel, the timer
/// follows `output.timer` (Vol 3, Part H, 3.4: 30 s, restarted whenever an SMP command is queued
/// for transmission, stopped when the procedure ends; on expiry the machine's `timerExpired`
/// ends SMP on the link), then its events go to the owner, whose answer may feed the machine again.
final class SMPLinkDriver<Machine: SMPRoleMachine> {
    /// The SMP timer's length (3.4).
    static var timeout: Duration { .seconds(30) }

    var machine: Machine
    /// The owner's handling of the machine's events (set once the owner's link exists).
    var onEvent: (Machine.Event) -> Void = { _ in }
    private let scheduler: TimerScheduling
    private let send: ([UInt8]) -> Void
    private var timer: TimerID?

    /// `send` puts one SMP PDU on the link's SMP channel (CID 0x0006).
    init(_ machine: Machine, scheduler: TimerScheduling, send: @escaping ([UInt8]) -> Void) {
        self.machine = machine
        self.scheduler = scheduler
        self.send = send
    }

    /// Feeds the machine one input (`{ $0.receive(pdu) }`) and carries out what it returned.
    func run(_ input: (inout Machine) -> SMPOutput<Machine.Event>) {
        let output = input(&machine)
        for pdu in output.pdus { send(pdu) }
        switch output.timer {
        case .unchanged:
            break
        case .restart:
            stopTimer()
            timer = scheduler.schedule(after: Self.timeout) { [weak self] in
                guard let self else { return }
                self.timer = nil
                self.run { $0.timerExpired() }
            }
        case .stop:
            stopTimer()
        }
        for event in output.events { onEvent(event) }
    }

    /// The link closed (or its handle was reused): no timer fires and no event reaches the owner.
    func close() {
        stopTimer()
        onEvent = { _ in }
    }

    private func stopTimer() {
        if let timer { scheduler.cancel(timer) }
        timer = nil
    }
}

extension Logger.Metadata {
    /// A link's log metadata in either role's Security Manager: the peer, the connection handle
    /// and, when pairing failed, the reason.
    static func pairing(peer: LEAddress, handle: UInt16, reason: SMPPairingFailedReason?) -> Logger.Metadata {
        var metadata: Logger.Metadata = [LogKey.peer: .string(peer.address.description), LogKey.connHandle: .string("\(handle)")]
        if let reason { metadata[LogKey.reason] = .string(Hex.byte(reason.rawValue)) }
        return metadata
    }
}
