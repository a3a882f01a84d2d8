import BlemuCore
import BlemuSMP

/// What a pairing asks of its user (Vol 3, Part H, 2.3.5.1, Table 2.8 gives which one).
public enum PairingPromptKind: Equatable, Sendable {
    /// Accept a Just Works pairing or not (2.3.5.6.2: "the application may simply ask the user
    /// to accept the connection"). Answer: `confirm`.
    case justWorks
    /// Both devices show these six digits; do they match (2.3.5.6.2)? Answer: `confirm`.
    case numericComparison(UInt32)
    /// The peer shows a passkey; type it (2.3.5.6.3, 2.3.5.3). Answer: `passkey`.
    case passkeyEntry
    /// Show this passkey, made for this pairing, for the peer's user to type. No answer is
    /// needed; a rejection cancels the pairing (Passkey Entry Failed).
    case passkeyDisplay(UInt32)

    /// The six digits shown (Numeric Comparison, passkey display), if any.
    public var shownValue: UInt32? {
        switch self {
        case .numericComparison(let value), .passkeyDisplay(let value): value
        case .justWorks, .passkeyEntry: nil
        }
    }
}

/// One question a pairing put to its owner: asked with an id no other prompt of this registry
/// has had, answered (or dropped) once.
public struct PairingPrompt: Equatable, Sendable {
    public let id: UInt64
    /// The link's connection handle.
    public let handle: UInt16
    /// The peer's address on the link.
    public let peer: LEAddress
    /// Which side of the pairing asks: the central (initiator) or the peripheral (responder).
    public let isCentral: Bool
    public let kind: PairingPromptKind
}

/// The owner's answer to a prompt.
public enum PairingAnswer: Equatable, Sendable {
    /// Yes / no to Just Works or a Numeric Comparison (no to a passkey display cancels it).
    case confirm(Bool)
    /// The passkey typed (0...999999) for Passkey Entry.
    case passkey(UInt32)
    /// No: the pairing fails with the reason for the prompt's kind (Vol 3, Part H, 3.5.5):
    /// Numeric Comparison Failed (0x0C), Passkey Entry Failed (0x01), Unspecified Reason (0x08)
    /// for Just Works (`SMPResponder.justWorksConfirmed` says why).
    case reject
}

/// Why an answer was not taken (nothing changed).
public enum PairingAnswerError: Error, Equatable, Sendable, CustomStringConvertible {
    /// No open prompt has this id (never asked, answered already, or its pairing ended).
    case unknownPairing
    /// The answer does not fit the prompt: a passkey to a confirmation, a confirmation to a
    /// passkey entry, a passkey beyond 999999.
    case doesNotFit(String)

    public var description: String {
        switch self {
        case .unknownPairing: "no pairing waits for an answer with this id"
        case .doesNotFit(let why): why
        }
    }
}

/// The open prompts of the pairings of both roles on one controller, by id: what the owner
/// (the programmable host's control socket) sees as `pairing-request` events and answers with
/// `pairing-answer`. One registry for `PeripheralSecurity` and `CentralSecurity`, so ids are
/// unique across both. At most one prompt is open per link (a pairing stops at one question at a
/// time), so the registry is bounded by the links. A prompt leaves when it is answered, when its
/// pairing ends (failure, the SMP timeout of Vol 3, Part H, 3.4) or when its link closes.
public final class PairingPrompts {
    /// A pairing asks a question (an event for the owner).
    public var prompted: (PairingPrompt) -> Void = { _ in }
    /// A prompt left without an answer (its pairing ended, or the link closed).
    public var dropped: (_ id: UInt64) -> Void = { _ in }

    private struct Entry {
        let prompt: PairingPrompt
        /// Feeds the answer to the pairing; returns why it does not fit, or nil when taken.
        let answer: (PairingAnswer) -> PairingAnswerError?
    }
    private var open: [UInt64: Entry] = [:]
    private var nextID: UInt64 = 1

    public init() {}

    /// The prompts waiting, oldest first.
    public var waiting: [PairingPrompt] { open.values.map(\.prompt).sorted { $0.id < $1.id } }

    /// Answers prompt `id`. Throws when no prompt has the id or the answer does not fit it (the
    /// prompt then stays open).
    public func answer(_ id: UInt64, _ answer: PairingAnswer) throws(PairingAnswerError) {
        guard let entry = open[id] else { throw .unknownPairing }
        if let refusal = Self.misfit(answer, for: entry.prompt.kind) { throw refusal }
        open.removeValue(forKey: id)
        if let refusal = entry.answer(answer) { throw refusal }
    }

    /// Opens a prompt: `opened` learns its id before the owner hears of it (the owner may
    /// answer at once); `answer` runs once with an answer that fits.
    @discardableResult
    func ask(handle: UInt16, peer: LEAddress, isCentral: Bool, kind: PairingPromptKind,
             opened: (UInt64) -> Void, answer: @escaping (PairingAnswer) -> PairingAnswerError?) -> UInt64 {
        let id = nextID
        nextID += 1
        let prompt = PairingPrompt(id: id, handle: handle, peer: peer, isCentral: isCentral, kind: kind)
        open[id] = Entry(prompt: prompt, answer: answer)
        opened(id)
        prompted(prompt)
        return id
    }

    /// The prompt's pairing ended or its link closed: it can no longer be answered.
    func drop(_ id: UInt64) {
        guard open.removeValue(forKey: id) != nil else { return }
        dropped(id)
    }

    private static func misfit(_ answer: PairingAnswer, for kind: PairingPromptKind) -> PairingAnswerError? {
        switch (answer, kind) {
        case (.reject, _):
            return nil
        case (.passkey(let passkey), .passkeyEntry):
            return passkey <= 999_999 ? nil : .doesNotFit("a passkey is six digits, 0 to 999999")
        case (.passkey, _):
            return .doesNotFit("this pairing asks for a confirmation, not a passkey")
        case (.confirm, .passkeyEntry):
            return .doesNotFit("this pairing asks for the passkey the peer shows")
        case (.confirm, _):
            return nil
        }
    }
}

/// A pairing input from an answer that fits its prompt: what either role's machine is fed.
extension PairingAnswer {
    /// Feeds `self` to a machine paused at a prompt of `kind`; `run` carries out the input.
    func feed<Machine: SMPRoleMachine>(to driver: SMPLinkDriver<Machine>, for kind: PairingPromptKind) {
        switch (kind, self) {
        case (.justWorks, .confirm(let yes)): driver.run { $0.justWorksConfirmed(yes) }
        case (.justWorks, _): driver.run { $0.justWorksConfirmed(false) }
        case (.numericComparison, .confirm(let yes)): driver.run { $0.numericComparisonConfirmed(yes) }
        case (.numericComparison, _): driver.run { $0.numericComparisonConfirmed(false) }
        case (.passkeyEntry, .passkey(let passkey)): driver.run { $0.passkeyEntered(passkey) }
        case (.passkeyEntry, _): driver.run { $0.passkeyEntered(nil) }
        case (.passkeyDisplay, .confirm(true)): break
        case (.passkeyDisplay, _): driver.run { $0.abort(.passkeyEntryFailed) }
        }
    }
}

extension PairingPromptKind {
    /// The question a responder's event asks, if it asks one.
    init?(_ event: SMPResponderEvent) {
        switch event {
        case .confirmJustWorks: self = .justWorks
        case .confirmNumericComparison(let value): self = .numericComparison(value)
        case .passkeyRequested: self = .passkeyEntry
        case .displayPasskey(let passkey): self = .passkeyDisplay(passkey)
        case .encryptionKeyReady, .paired, .failed: return nil
        }
    }

    /// The question an initiator's event asks, if it asks one.
    init?(_ event: SMPInitiatorEvent) {
        switch event {
        case .confirmJustWorks: self = .justWorks
        case .confirmNumericComparison(let value): self = .numericComparison(value)
        case .passkeyRequested: self = .passkeyEntry
        case .displayPasskey(let passkey): self = .passkeyDisplay(passkey)
        case .startEncryption, .securityRequested, .paired, .failed: return nil
        }
    }

    /// How the log names the question.
    var logName: String {
        switch self {
        case .justWorks: "Just Works, accept?"
        case .numericComparison(let value): "Numeric Comparison \(PasskeyLabel.sixDigits(value))"
        case .passkeyEntry: "Passkey Entry, the passkey the peer shows?"
        case .passkeyDisplay(let passkey): "Passkey Entry, the peer types \(PasskeyLabel.sixDigits(passkey))"
        }
    }
}

extension PairingAnswer {
    /// How the log names the answer (a typed passkey is not repeated).
    var logName: String {
        switch self {
        case .confirm(let yes): yes ? "yes" : "no"
        case .passkey: "with a passkey"
        case .reject: "no"
        }
    }
}
