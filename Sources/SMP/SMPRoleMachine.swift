/// Either role's pairing machine (`SMPInitiator`, `SMPResponder`) as the link that drives it sees
/// it: the inputs both take and what they report, so the driver (BlemuSecurity's
/// `SMPLinkDriver`: PDUs out, the 30 s SMP timer, events) is written once for both roles.
public protocol SMPRoleMachine {
    associatedtype Event: Equatable & Sendable
    /// A pairing is under way (the SMP timer should be running).
    var isPairing: Bool { get }
    /// The SMP timer expired on this link: SMP is over until a new link (Vol 3, Part H, 3.4).
    var hasTimedOut: Bool { get }
    /// What the pairing under way agreed, once the feature exchange is done.
    var pairingSummary: SMPPairingSummary? { get }
    /// An SMP PDU from the peer, code first.
    mutating func receive(_ pdu: ArraySlice<UInt8>) -> SMPOutput<Event>
    /// The passkey the user typed; nil: cancelled.
    mutating func passkeyEntered(_ passkey: UInt32?) -> SMPOutput<Event>
    /// The user's answer to a Numeric Comparison.
    mutating func numericComparisonConfirmed(_ matches: Bool) -> SMPOutput<Event>
    /// The user's answer to a Just Works confirmation (`confirmsJustWorks`).
    mutating func justWorksConfirmed(_ accepted: Bool) -> SMPOutput<Event>
    /// Encryption Change (enabled) with the pairing's key: key distribution starts.
    mutating func linkEncrypted() -> SMPOutput<Event>
    /// The owner's 30 s SMP timer expired (3.4).
    mutating func timerExpired() -> SMPOutput<Event>
    /// Ends the pairing under way with Pairing Failed and `reason`.
    mutating func abort(_ reason: SMPPairingFailedReason) -> SMPOutput<Event>
}

extension SMPInitiator: SMPRoleMachine {}
extension SMPResponder: SMPRoleMachine {}
