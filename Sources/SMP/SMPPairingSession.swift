import BlemuCore
import BlemuCrypto

/// What one input to `SMPInitiator` or `SMPResponder` produced: PDUs to send on the SMP channel
/// (CID 0x0006), in order; events; and what to do with the timer. One shape for both roles;
/// only the events differ.
public struct SMPOutput<Event: Equatable & Sendable>: Equatable, Sendable {
    public var pdus: [[UInt8]] = []
    public var events: [Event] = []
    public var timer: SMPTimerAction = .unchanged
    public init() {}
}

public typealias SMPInitiatorOutput = SMPOutput<SMPInitiatorEvent>
public typealias SMPResponderOutput = SMPOutput<SMPResponderEvent>

/// The failure event both roles report, so the failure bookkeeping below is written once.
protocol SMPPairingEvent: Equatable, Sendable {
    static func failed(reason: SMPPairingFailedReason?, origin: SMPFailureOrigin) -> Self
}

extension SMPInitiatorEvent: SMPPairingEvent {}
extension SMPResponderEvent: SMPPairingEvent {}

extension SMPOutput where Event: SMPPairingEvent {
    /// Pairing Failed with `reason` sent and reported; the caller forgets its pairing.
    mutating func failLocally(_ reason: SMPPairingFailedReason) {
        pdus.append(SMPPairingFailed(reason: reason).encoded)
        events.append(.failed(reason: reason, origin: .local))
        timer = .stop
    }

    /// The peer sent Pairing Failed; it is never answered.
    mutating func failedByPeer(_ reason: SMPPairingFailedReason?) {
        events.append(.failed(reason: reason, origin: .peer))
        timer = .stop
    }
}

/// A phase of either role's machine: both have an idle one and the one after the SMP timeout.
protocol SMPPairingPhase: Equatable {
    static var idle: Self { get }
    static var timedOut: Self { get }
}

/// Either role's pairing machine as the runs both share see it: its phase and its session. The
/// runs below are written once; each machine's public inputs call them.
protocol SMPPairingRole: SMPRoleMachine where Event: SMPPairingEvent {
    associatedtype Phase: SMPPairingPhase
    var phase: Phase { get set }
    var session: SMPPairingSession { get set }
    /// Whether an undecodable PDU with this code is dropped rather than failing the pairing.
    func ignoresUndecodable(_ code: SMPCode) -> Bool
}

extension SMPPairingRole {
    /// A pairing is under way (the SMP timer should be running).
    var pairingUnderWay: Bool { phase != .idle && phase != .timedOut }
    var timedOut: Bool { phase == .timedOut }
    /// What the pairing under way agreed, once the feature exchange is done.
    var summaryUnderWay: SMPPairingSummary? { pairingUnderWay ? session.summary : nil }

    func ignoresUndecodable(_ code: SMPCode) -> Bool { false }

    /// The command a PDU from the peer carries, or nil when there is nothing more to do with it:
    /// after the SMP timeout nothing is handled (3.4), a reserved code is ignored (3.3: "If a
    /// packet is received with a reserved Code it shall be ignored"), and a known code that does
    /// not decode fails the pairing as `SMPUndecodablePDU` says.
    mutating func decode(_ pdu: ArraySlice<UInt8>, _ out: inout SMPOutput<Event>) -> SMPCommand? {
        guard phase != .timedOut, let rawCode = pdu.first, let code = SMPCode(rawValue: rawCode) else { return nil }
        do {
            return try SMPCommand(pdu: pdu)
        } catch {
            if ignoresUndecodable(code) { return nil }
            switch SMPUndecodablePDU(code: code, pdu: pdu) {
            case .peerFailed: peerFailed(nil, &out)
            case .fail(let reason): fail(reason, &out)
            }
            return nil
        }
    }

    /// The owner's 30 s SMP timer expired (3.4): the pairing fails, SMP is over on this link.
    mutating func expire() -> SMPOutput<Event> {
        var out = SMPOutput<Event>()
        guard pairingUnderWay else { return out }
        session = SMPPairingSession()
        phase = .timedOut
        out.events.append(.failed(reason: nil, origin: .timeout))
        return out
    }

    /// Sends Pairing Failed with `reason` and forgets the pairing.
    mutating func fail(_ reason: SMPPairingFailedReason, _ out: inout SMPOutput<Event>) {
        out.failLocally(reason)
        endPairing()
    }

    /// The peer sent Pairing Failed: never answered; outside a pairing it means nothing.
    mutating func peerFailed(_ reason: SMPPairingFailedReason?, _ out: inout SMPOutput<Event>) {
        guard pairingUnderWay else { return }
        out.failedByPeer(reason)
        endPairing()
    }

    mutating func endPairing() {
        session = SMPPairingSession()
        phase = .idle
    }
}

/// What a known SMP code whose PDU does not decode means, for either role.
enum SMPUndecodablePDU: Equatable {
    /// A Pairing Failed of the wrong length or with a reserved reason: the peer still ended the pairing.
    case peerFailed
    case fail(SMPPairingFailedReason)

    init(code: SMPCode, pdu: ArraySlice<UInt8>) {
        switch code {
        case .pairingFailed:
            self = .peerFailed
        case .pairingPublicKey where pdu.count == 65:
            // The right length, so the point is off the curve (CVE-2018-5383): no DHKey can be
            // agreed, which the spec reports as DHKey Check Failed.
            self = .fail(.dhKeyCheckFailed)
        default:
            // Including a Pairing Request or Response whose Maximum Encryption Key Size is outside
            // 7...16 (0, 6, 17, ...): 3.5.1 says it "shall be in the range 7 to 16 octets", and
            // Table 3.7 gives Invalid Parameters (0x0A) for "a parameter ... outside of the
            // specified range". Encryption Key Size (0x06) is for a size in range that is too
            // short for this device's requirements (`SMPPairingConfiguration.negotiate`).
            self = .fail(.invalidParameters)
        }
    }
}

/// The state of one pairing, the same for both roles; reset between pairings so no secret
/// outlives one. "Local" and "peer" are this side and the other; Na/Nb, A/B are the spec's.
struct SMPPairingSession {
    var preq: [UInt8] = []
    var pres: [UInt8] = []
    var request: SMPPairingFeatures?
    var response: SMPPairingFeatures?
    var method = SMPPairingMethod.justWorks
    var secureConnections = false
    var bonded = false
    var keySize: UInt8 = 16
    /// Legacy: TK. Nil while the user has not typed the passkey.
    var temporaryKey: [UInt8]?
    /// The passkey, once known (shown or typed).
    var passkey: UInt32?
    var peerConfirm: [UInt8] = []
    /// Our random (Mrand/Srand, Na/Nb, Nai/Nbi).
    var localRandom: [UInt8] = []
    var peerRandom: [UInt8] = []
    var keyPair: SMPKeyPair?
    var peerPublicKey: SMPPublicKey?
    var dhKey: [UInt8] = []
    var macKey: [UInt8] = []
    var longTermKey: [UInt8] = []
    var encryptionKey: SMPLongTermKey?
    /// The key PDUs the peer still has to send, in order (3.6.1).
    var expectedKeys: [SMPCode] = []
    var result: SMPPairingResult?

    // The responder's only: inputs that may arrive before the user has answered.
    /// A confirm received before the passkey was typed.
    var pendingConfirm: [UInt8]?
    /// Numeric Comparison: the user's answer (true for the other methods).
    var userConfirmed = true
    /// Ea received before the user confirmed the numeric value.
    var pendingDHKeyCheck: [UInt8]?

    /// The agreed terms, once the feature exchange is done.
    var summary: SMPPairingSummary? {
        guard response != nil else { return nil }
        return SMPPairingSummary(method: method, secureConnections: secureConnections,
                                 bonded: bonded, encryptionKeySize: keySize)
    }

    // MARK: Crypto steps

    /// Mconfirm or Sconfirm = c1(TK, rand, preq, pres, iat, ia, rat, ra) (2.3.5.5).
    func legacyConfirm(tk: [UInt8], random: [UInt8], initiator: LEAddress, responder: LEAddress) -> [UInt8] {
        SMPCrypto.c1(k: tk, r: random, preq: preq, pres: pres, initiator: initiator, responder: responder)
    }

    /// 2.3.5.6.5: MacKey || LTK = f5(DHKey, Na, Nb, A, B).
    mutating func deriveKeys(na: [UInt8], nb: [UInt8], a: LEAddress, b: LEAddress) {
        (macKey, longTermKey) = SMPCrypto.f5(w: dhKey, n1: na, n2: nb, a1: a, a2: b)
    }

    /// r of the DHKey checks: the passkey for Passkey Entry, zero otherwise (2.3.5.6.5).
    var checkR: [UInt8] {
        if case .passkeyEntry = method, let passkey { return SMPCrypto.temporaryKey(passkey) }
        return [UInt8](repeating: 0, count: 16)
    }

    /// Ea = f6(MacKey, Na, Nb, rb, IOcapA, A, B) (2.3.5.6.5).
    func initiatorCheck(na: [UInt8], nb: [UInt8], a: LEAddress, b: LEAddress) -> [UInt8]? {
        guard let request else { return nil }
        return SMPCrypto.f6(w: macKey, n1: na, n2: nb, r: checkR, ioCap: request.ioCapField, a1: a, a2: b)
    }

    /// Eb = f6(MacKey, Nb, Na, ra, IOcapB, B, A) (2.3.5.6.5).
    func responderCheck(na: [UInt8], nb: [UInt8], a: LEAddress, b: LEAddress) -> [UInt8]? {
        guard let response else { return nil }
        return SMPCrypto.f6(w: macKey, n1: nb, n2: na, r: checkR, ioCap: response.ioCapField, a1: b, a2: a)
    }

    /// The public keys are exchanged (2.3.5.6.1): DHKey from ours and the peer's. False when the
    /// peer's X is our own (a reflection would let an attacker pass authentication; Zephyr
    /// refuses it with Unspecified Reason, and so do both roles here).
    mutating func agree(keyPair: SMPKeyPair, peerKey: SMPPublicKey) -> Bool {
        guard peerKey.x != keyPair.publicKey.x else { return false }
        self.keyPair = keyPair
        peerPublicKey = peerKey
        dhKey = keyPair.dhKey(with: peerKey)
        return true
    }

    /// Our commitment in Secure Connections, Ca/Cb or Cai/Cbi = f4(PKlocal.x, PKpeer.x, our
    /// random, z) (2.3.5.6.2, 2.3.5.6.3); nil before the public keys are exchanged.
    func localCommitment(z: UInt8) -> [UInt8]? {
        guard let keyPair, let peerPublicKey else { return nil }
        return SMPCrypto.f4(u: keyPair.publicKey.x, v: peerPublicKey.x, x: localRandom, z: z)
    }

    /// Whether the peer's random opens the commitment it sent: f4(PKpeer.x, PKlocal.x, random, z)
    /// == its confirm value (a mismatch is Confirm Value Failed); nil before the key exchange.
    func peerCommitmentOpens(with random: [UInt8], z: UInt8) -> Bool? {
        guard let keyPair, let peerPublicKey else { return nil }
        return SMPCrypto.f4(u: peerPublicKey.x, v: keyPair.publicKey.x, x: random, z: z) == peerConfirm
    }

    /// Numeric Comparison's six digits, g2(PKax, PKbx, Na, Nb) mod 10^6 (2.3.5.6.2), once both
    /// randoms are known; A is the initiator.
    func numericComparisonValue(localIsInitiator: Bool) -> UInt32? {
        guard let keyPair, let peerPublicKey else { return nil }
        let (pka, pkb) = localIsInitiator ? (keyPair.publicKey.x, peerPublicKey.x) : (peerPublicKey.x, keyPair.publicKey.x)
        let (na, nb) = localIsInitiator ? (localRandom, peerRandom) : (peerRandom, localRandom)
        return SMPCrypto.numericComparisonValue(u: pka, v: pkb, x: na, y: nb)
    }

    /// The negotiated key, its most significant octets zeroed beyond the key size (2.3.4).
    func shortenedKey(_ key: [UInt8]) -> SMPLongTermKey {
        SMPLongTermKey(key: SMPCrypto.shortened(key, to: keySize))
    }

    // MARK: Key distribution

    /// Once the link is encrypted: the peer's keys to wait for (`peerKeys`), and the result
    /// they complete. `longTermKey`: the key this side encrypts or answers with later, when it is
    /// known already.
    mutating func startKeyDistribution(peerKeys: SMPKeyDistribution, longTermKey: SMPLongTermKey?) {
        // 3.6.1: the keys come in this order; in Secure Connections EncKey is ignored.
        var expected: [SMPCode] = []
        if peerKeys.contains(.encryptionKey) && !secureConnections {
            expected += [.encryptionInformation, .centralIdentification]
        }
        if peerKeys.contains(.identityKey) { expected += [.identityInformation, .identityAddressInformation] }
        if peerKeys.contains(.signingKey) { expected.append(.signingInformation) }
        expectedKeys = expected
        result = SMPPairingResult(
            secureConnections: secureConnections, authenticated: method.isAuthenticated,
            bonded: bonded, encryptionKeySize: keySize, longTermKey: longTermKey,
            peerUsedDebugKey: peerPublicKey.map { $0.x == SMPPublicKey.debugKeyX } ?? false)
        result?.method = method
    }

    /// A key PDU from the peer into the result; the reason to fail when it is not acceptable.
    /// `peerAddress`: the peer's address on this link, until its identity address comes;
    /// `peerLTK`: where the peer's legacy LTK goes (the initiator encrypts with it later; the
    /// responder keeps it for links with the roles swapped).
    mutating func receiveKey(_ command: SMPCommand, peerAddress: LEAddress,
                             peerLTK: WritableKeyPath<SMPPairingResult, SMPLongTermKey?>) -> SMPPairingFailedReason? {
        // 3.6.1: the peer's keys come in a fixed order; anything else is out of sequence.
        guard expectedKeys.first == command.code, var result else { return .unspecifiedReason }
        expectedKeys.removeFirst()
        switch command {
        case .encryptionInformation(let info):
            result[keyPath: peerLTK] = SMPLongTermKey(key: info.longTermKey)
        case .centralIdentification(let identification):
            result[keyPath: peerLTK]?.encryptedDiversifier = identification.encryptedDiversifier
            result[keyPath: peerLTK]?.randomNumber = identification.randomNumber
        case .identityInformation(let info):
            // The address follows in Identity Address Information.
            result.peerIdentity = SMPIdentity(resolvingKey: info.identityResolvingKey, address: peerAddress)
        case .identityAddressInformation(let info):
            // An identity address is public or static random (two most significant bits 1), never
            // a private one (Zephyr refuses those with Invalid Parameters too).
            guard !info.address.isRandom || info.address.address.bytes.5 & 0xC0 == 0xC0 else {
                return .invalidParameters
            }
            result.peerIdentity?.address = info.address
        case .signingInformation(let info):
            result.peerSignatureKey = info.signatureKey
        default:
            break
        }
        self.result = result
        return nil
    }

    /// The result, once every key the peer owes is in.
    var completedResult: SMPPairingResult? { expectedKeys.isEmpty ? result : nil }
}

extension SMPCrypto {
    /// The passkey as a 128-bit little-endian value: TK in legacy pairing, ra/rb in Secure Connections.
    static func temporaryKey(_ passkey: UInt32) -> [UInt8] {
        var key = [UInt8](repeating: 0, count: 16)
        for index in 0..<4 { key[index] = UInt8(truncatingIfNeeded: passkey >> (8 * UInt32(index))) }
        return key
    }

    /// Z of round i in Passkey Entry: 0x80 | bit i of the passkey (2.3.5.6.3).
    static func passkeyBit(_ passkey: UInt32, _ round: Int) -> UInt8 {
        0x80 | UInt8((passkey >> UInt32(round)) & 1)
    }

    /// 2.3.4: a key shorter than 16 octets has its most significant octets set to zero.
    static func shortened(_ key: [UInt8], to size: UInt8) -> [UInt8] {
        var key = key
        for index in Int(size)..<16 { key[index] = 0 }
        return key
    }
}

extension RandomNumberGenerator {
    /// `count` random octets (nonces, distributed keys).
    mutating func bytes(_ count: Int) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(count + 7)
        while bytes.count < count {
            var word = next()
            for _ in 0..<8 {
                bytes.append(UInt8(truncatingIfNeeded: word))
                word >>= 8
            }
        }
        return Array(bytes.prefix(count))
    }

    /// A passkey to display, 0...999999.
    mutating func passkey(from source: SMPPasskeySource) -> UInt32 {
        switch source {
        case .fixed(let passkey): return passkey % 1_000_000
        case .random: return UInt32(next() % 1_000_000)
        }
    }
}
