import BlemuCore
import BlemuCrypto

/// What a peripheral offers and demands when a central pairs with it (the responder's side
/// of 2.3): the configuration both roles share (`pairing`), and the CSRK it distributes.
public struct SMPResponderConfiguration: Equatable, Sendable {
    public var pairing: SMPPairingConfiguration
    /// CSRK, distributed when the central asks (SignKey); nil: not distributed.
    public var signatureKey: [UInt8]?
    /// Set the MITM flag in the Pairing Response and Security Request without demanding MITM
    /// protection: the IO capabilities then choose the method (2.3.5.1), and a Just Works
    /// pairing is still accepted (`pairing.requireMITM` refuses it).
    public var requestMITM = false

    public init(ioCapability: SMPIOCapability = .noInputNoOutput, bondable: Bool = true, requireMITM: Bool = false,
                secureConnections: Bool = true, secureConnectionsOnly: Bool = false,
                minimumEncryptionKeySize: UInt8 = 7, maximumEncryptionKeySize: UInt8 = 16,
                passkey: SMPPasskeySource = .random, identity: SMPIdentity? = nil, signatureKey: [UInt8]? = nil,
                requestMITM: Bool = false, keys: SMPKeyDistribution = [.encryptionKey, .identityKey, .signingKey]) {
        pairing = SMPPairingConfiguration(
            ioCapability: ioCapability, bondable: bondable, requireMITM: requireMITM, secureConnections: secureConnections,
            secureConnectionsOnly: secureConnectionsOnly, minimumEncryptionKeySize: minimumEncryptionKeySize,
            maximumEncryptionKeySize: maximumEncryptionKeySize, passkey: passkey, identity: identity, keys: keys)
        self.signatureKey = signatureKey
        self.requestMITM = requestMITM
    }

    /// The MITM flag this side sends (Pairing Response, Security Request).
    var mitmFlag: Bool { pairing.requireMITM || requestMITM }

}

/// Where a displayed passkey comes from.
public enum SMPPasskeySource: Equatable, Sendable {
    /// A new random passkey per pairing (what the spec expects, 2.3.5.6.3).
    case random
    /// A fixed passkey 0...999999 (a device with a printed label; weaker: it can be learnt).
    case fixed(UInt32)
}

/// An identity: the IRK and the public or static random address it resolves to.
public struct SMPIdentity: Equatable, Sendable {
    public var resolvingKey: [UInt8]
    public var address: LEAddress
    public init(resolvingKey: [UInt8], address: LEAddress) {
        self.resolvingKey = resolvingKey
        self.address = address
    }
}

/// A key the controller encrypts with, and the EDIV and Rand the central names it by in
/// LE Long Term Key Request (both zero for the STK and for a Secure Connections LTK).
public struct SMPLongTermKey: Equatable, Sendable {
    public var key: [UInt8]
    public var encryptedDiversifier: UInt16
    public var randomNumber: UInt64
    public init(key: [UInt8], encryptedDiversifier: UInt16 = 0, randomNumber: UInt64 = 0) {
        self.key = key
        self.encryptedDiversifier = encryptedDiversifier
        self.randomNumber = randomNumber
    }
}

/// What a finished pairing leaves to store (when bonded) and to tell the user.
public struct SMPPairingResult: Equatable, Sendable {
    public var secureConnections: Bool
    /// MITM-protected (Numeric Comparison or Passkey Entry), not Just Works.
    public var authenticated: Bool
    /// Both sides asked for bonding: the keys are meant to be kept.
    public var bonded: Bool
    public var encryptionKeySize: UInt8
    /// The key this peripheral answers a later LE Long Term Key Request with: the Secure
    /// Connections LTK, or the LTK it distributed in LE legacy pairing. Nil when none outlives
    /// the link (legacy without EncKey distribution).
    public var longTermKey: SMPLongTermKey?
    /// The central's identity (IRK and identity address), when it distributed one.
    public var peerIdentity: SMPIdentity?
    /// The central's CSRK, when it distributed one.
    public var peerSignatureKey: [UInt8]?
    /// The central's own LTK, EDIV and Rand (LE legacy), for links where the roles are swapped.
    public var peerLongTermKey: SMPLongTermKey?
    /// The central used the Secure Connections debug key (2.3.5.6.1): the link can be decrypted
    /// by anyone who sniffed the pairing, so the keys should not be trusted for a bond.
    public var peerUsedDebugKey = false
    /// How the pairing was made (Vol 3, Part H, 2.3.5.1).
    public var method = SMPPairingMethod.justWorks
}

/// The terms of a pairing under way (`SMPResponder.pairingSummary`).
public struct SMPPairingSummary: Equatable, Sendable {
    public var method: SMPPairingMethod
    public var secureConnections: Bool
    public var bonded: Bool
    public var encryptionKeySize: UInt8
    /// MITM-protected (Numeric Comparison or Passkey Entry), not Just Works.
    public var authenticated: Bool { method.isAuthenticated }
}

/// Who ended a pairing that failed.
public enum SMPFailureOrigin: Equatable, Sendable {
    /// This peripheral sent Pairing Failed with the reason.
    case local
    /// The central sent Pairing Failed (the reason is nil when it was a reserved value).
    case peer
    /// The 30 s SMP timer expired (Vol 3, Part H, 3.4): no more SMP on this link.
    case timeout
}

/// Things the caller acts on.
public enum SMPResponderEvent: Equatable, Sendable {
    /// Show this passkey (six digits, leading zeros) to the user, who types it on the central.
    case displayPasskey(UInt32)
    /// Ask the user for the passkey shown on the central; answer with `passkeyEntered`.
    case passkeyRequested
    /// Show this six-digit value and ask whether the central shows the same; answer with
    /// `numericComparisonConfirmed`.
    case confirmNumericComparison(UInt32)
    /// Ask the user to accept a Just Works pairing (`SMPPairingConfiguration.confirmsJustWorks`);
    /// answer with `justWorksConfirmed`.
    case confirmJustWorks
    /// Encryption may start: answer the central's LE Long Term Key Request (EDIV 0, Rand 0) with
    /// this key (the STK in legacy pairing, the LTK in Secure Connections), then call `linkEncrypted`.
    case encryptionKeyReady(SMPLongTermKey)
    /// Pairing and key distribution are done.
    case paired(SMPPairingResult)
    case failed(reason: SMPPairingFailedReason?, origin: SMPFailureOrigin)
}

/// The SMP timer (Vol 3, Part H, 3.4) is the caller's: 30 s, reset whenever an SMP command is
/// queued for transmission, stopped when the procedure ends.
public enum SMPTimerAction: Equatable, Sendable {
    case unchanged
    /// (Re)start the 30 s timer.
    case restart
    case stop
}

/// The Security Manager of a peripheral, the pairing responder (Vol 3, Part H, 2.3 and 3),
/// for one link. Pure: no I/O and no timers; every input returns what to send and what happened.
///
/// Supports LE Secure Connections (Just Works, Numeric Comparison, Passkey Entry with its 20
/// rounds) and LE legacy pairing (Just Works, Passkey Entry), then the key distribution once the
/// link is encrypted. Repeated-attempts bookkeeping is the caller's: it can refuse with
/// `abort(.repeatedAttempts)`.
public struct SMPResponder: SMPPairingRole {
    public let configuration: SMPResponderConfiguration
    public let initiatorAddress: LEAddress
    public let responderAddress: LEAddress
    private var random: any RandomNumberGenerator
    /// For tests: the key pair to use instead of a fresh one per pairing.
    private let fixedKeyPair: SMPKeyPair?

    enum Phase: SMPPairingPhase {
        case idle
        case legacyAwaitingConfirm
        case legacyAwaitingRandom
        case awaitingPublicKey
        /// Just Works / Numeric Comparison: Cb sent, waiting for Na.
        case awaitingRandom
        case passkeyAwaitingConfirm(round: Int)
        case passkeyAwaitingRandom(round: Int)
        case awaitingDHKeyCheck
        case awaitingEncryption
        case awaitingKeys
        /// The SMP timer expired: nothing more on this link (3.4).
        case timedOut
    }

    var phase = Phase.idle
    /// The state of one pairing; reset between pairings so no secret outlives one.
    var session = SMPPairingSession()

    /// `initiatorAddress`/`responderAddress`: the addresses of this link as the controller
    /// reported them (LE Connection Complete), which the confirm and check values hash.
    /// `random` makes nonces, passkeys and distributed keys: it must be a cryptographically secure
    /// generator (the system's, on Linux getrandom(2)) except in tests, which seed their own.
    public init(configuration: SMPResponderConfiguration, initiatorAddress: LEAddress, responderAddress: LEAddress,
                random: any RandomNumberGenerator = SystemRandomNumberGenerator(), keyPair: SMPKeyPair? = nil) {
        self.configuration = configuration
        self.initiatorAddress = initiatorAddress
        self.responderAddress = responderAddress
        self.random = random
        self.fixedKeyPair = keyPair
    }

    /// Whether a pairing is under way (the SMP timer should be running).
    public var isPairing: Bool { pairingUnderWay }
    /// Whether the SMP timer expired on this link: SMP is over until a new link (3.4).
    public var hasTimedOut: Bool { timedOut }

    /// What the pairing under way agreed (after the Pairing Response), for the caller's view of
    /// the link once it is encrypted with the STK or LTK; nil outside a pairing.
    public var pairingSummary: SMPPairingSummary? { summaryUnderWay }

    /// A Security Request (3.6.7) asking the central to pair with our requirements.
    public var securityRequest: [UInt8] {
        SMPSecurityRequest(authRequirements: SMPAuthRequirements(
            bonding: configuration.pairing.bondable, mitm: configuration.mitmFlag,
            secureConnections: configuration.pairing.secureConnections)).encoded
    }

    /// A Security Request asking for `requirements` of our own (a level the owner wants to reach,
    /// Vol 3, Part C, 10.2.1) rather than the configuration's.
    public func securityRequest(mitm: Bool) -> [UInt8] {
        SMPSecurityRequest(authRequirements: SMPAuthRequirements(
            bonding: configuration.pairing.bondable, mitm: mitm || configuration.mitmFlag,
            secureConnections: configuration.pairing.secureConnections)).encoded
    }

    // MARK: Inputs

    /// An SMP PDU from the central, code first.
    public mutating func receive(_ pdu: ArraySlice<UInt8>) -> SMPResponderOutput {
        var out = SMPResponderOutput()
        // 3.4: after a timeout no SMP command is sent or handled on this link.
        guard let command = decode(pdu, &out) else { return out }

        switch (command, phase) {
        case (.pairingFailed(let failed), _):
            peerFailed(failed.reason, &out)
        case (.pairingResponse, _), (.securityRequest, _):
            // Commands a central receives: a peripheral does not support them.
            fail(.commandNotSupported, &out)
        case (.pairingRequest(let request), .idle):
            pairingRequest(request, raw: Array(pdu), &out)
        case (.pairingConfirm(let confirm), .legacyAwaitingConfirm):
            session.pendingConfirm = confirm.value
            legacySendConfirmIfReady(&out)
        case (.pairingRandom(let random), .legacyAwaitingRandom):
            legacyRandom(random.value, &out)
        case (.pairingPublicKey(let key), .awaitingPublicKey):
            publicKey(key.key, &out)
        case (.pairingRandom(let random), .awaitingRandom):
            secureConnectionsRandom(random.value, &out)
        case (.pairingConfirm(let confirm), .passkeyAwaitingConfirm):
            session.pendingConfirm = confirm.value
            passkeySendConfirmIfReady(&out)
        case (.pairingRandom(let random), .passkeyAwaitingRandom(let round)):
            passkeyRandom(random.value, round: round, &out)
        case (.pairingDHKeyCheck(let check), .awaitingDHKeyCheck):
            session.pendingDHKeyCheck = check.value
            checkDHKeyIfReady(&out)
        case (.keypressNotification, .passkeyAwaitingConfirm), (.keypressNotification, .legacyAwaitingConfirm):
            // Progress of the user typing on the central (3.5.8): nothing to do.
            break
        case (.encryptionInformation, .awaitingKeys), (.centralIdentification, .awaitingKeys),
             (.identityInformation, .awaitingKeys), (.identityAddressInformation, .awaitingKeys),
             (.signingInformation, .awaitingKeys):
            peerKey(command, &out)
        default:
            // An SMP command out of sequence ends the pairing (Zephyr and Bumble answer Unspecified Reason).
            fail(.unspecifiedReason, &out)
        }
        return out
    }

    /// The passkey the user typed (Passkey Entry where the central displays, or both type);
    /// nil when the user cancelled (Passkey Entry Failed).
    public mutating func passkeyEntered(_ passkey: UInt32?) -> SMPResponderOutput {
        var out = SMPResponderOutput()
        guard isPairing, case .passkeyEntry(let roles) = session.method, !roles.responderDisplays,
              session.passkey == nil else { return out }
        guard let passkey, passkey <= 999_999 else {
            fail(.passkeyEntryFailed, &out)
            return out
        }
        session.passkey = passkey
        if session.secureConnections {
            passkeySendConfirmIfReady(&out)
        } else {
            session.temporaryKey = SMPCrypto.temporaryKey(passkey)
            legacySendConfirmIfReady(&out)
        }
        return out
    }

    /// The user's answer to `confirmJustWorks`. A refusal fails the pairing with Unspecified
    /// Reason (0x08): Vol 3, Part H, 3.5.5, Table 3.7 has no reason for a user who declines a
    /// Just Works pairing; Numeric Comparison Failed (0x0C) says two values differ, which were
    /// never shown, and Pairing Not Supported (0x05) says this device cannot pair at all.
    public mutating func justWorksConfirmed(_ accepted: Bool) -> SMPResponderOutput {
        var out = SMPResponderOutput()
        guard isPairing, session.method == .justWorks, !session.userConfirmed else { return out }
        guard accepted else {
            fail(.unspecifiedReason, &out)
            return out
        }
        session.userConfirmed = true
        if session.secureConnections {
            checkDHKeyIfReady(&out)
        } else {
            session.temporaryKey = [UInt8](repeating: 0, count: 16)
            legacySendConfirmIfReady(&out)
        }
        return out
    }

    /// The user's answer to `confirmNumericComparison`.
    public mutating func numericComparisonConfirmed(_ matches: Bool) -> SMPResponderOutput {
        var out = SMPResponderOutput()
        guard isPairing, session.method == .numericComparison, !session.userConfirmed,
              phase == .awaitingDHKeyCheck else { return out }
        guard matches else {
            fail(.numericComparisonFailed, &out)
            return out
        }
        session.userConfirmed = true
        checkDHKeyIfReady(&out)
        return out
    }

    /// The link is now encrypted (Encryption Change, enabled) with the key of `encryptionKeyReady`:
    /// the responder distributes its keys first (3.6.1), then waits for the central's.
    /// Ignored outside a pairing (a reconnection encrypted with a stored key).
    public mutating func linkEncrypted() -> SMPResponderOutput {
        var out = SMPResponderOutput()
        guard phase == .awaitingEncryption, let response = session.response else { return out }
        let send = response.responderKeyDistribution
        var distributedLongTermKey: SMPLongTermKey?
        if send.contains(.encryptionKey) && !session.secureConnections {
            var key = session.shortenedKey(random.bytes(16))
            key.encryptedDiversifier = UInt16(truncatingIfNeeded: random.next())
            key.randomNumber = random.next()
            distributedLongTermKey = key
            out.pdus.append(SMPEncryptionInformation(value: key.key).encoded)
            out.pdus.append(SMPCentralIdentification(encryptedDiversifier: key.encryptedDiversifier,
                                                     randomNumber: key.randomNumber).encoded)
        }
        if send.contains(.identityKey), let identity = configuration.pairing.identity {
            out.pdus.append(SMPIdentityInformation(value: identity.resolvingKey).encoded)
            out.pdus.append(SMPIdentityAddressInformation(address: identity.address).encoded)
        }
        if send.contains(.signingKey), let csrk = configuration.signatureKey {
            out.pdus.append(SMPSigningInformation(value: csrk).encoded)
        }
        if !out.pdus.isEmpty { out.timer = .restart }

        session.startKeyDistribution(peerKeys: response.initiatorKeyDistribution,
                                     longTermKey: session.secureConnections ? session.encryptionKey : distributedLongTermKey)
        phase = .awaitingKeys
        finishIfAllKeysReceived(&out)
        return out
    }

    /// The caller's 30 s SMP timer expired (3.4): the pairing fails and SMP is over on this link.
    public mutating func timerExpired() -> SMPResponderOutput { expire() }

    /// Ends the pairing under way with Pairing Failed and `reason`, or refuses the next one
    /// before it starts (e.g. Repeated Attempts, 2.3.6): Pairing Failed is sent either way.
    public mutating func abort(_ reason: SMPPairingFailedReason) -> SMPResponderOutput {
        var out = SMPResponderOutput()
        guard phase != .timedOut else { return out }
        fail(reason, &out)
        return out
    }

    // MARK: Pairing feature exchange

    private mutating func pairingRequest(_ request: SMPPairingRequest, raw: [UInt8], _ out: inout SMPResponderOutput) {
        session = SMPPairingSession()
        let features = request.features
        let secureConnections: Bool, keySize: UInt8
        do { (secureConnections, keySize) = try configuration.pairing.negotiate(with: features) } catch { return fail(error, &out) }

        let bonded = configuration.pairing.bondable && features.authRequirements.bonding
        // Keys only when both bond. LinkKey (cross-transport derivation) is not offered; in Secure
        // Connections EncKey "shall be ignored" (3.6.1), so it is cleared; RFU bits are dropped.
        var offered = configuration.pairing.keys
        if secureConnections { offered.remove(.encryptionKey) }
        var responderKeys = bonded ? features.responderKeyDistribution.intersection(offered) : []
        if configuration.pairing.identity == nil { responderKeys.remove(.identityKey) }
        if configuration.signatureKey == nil { responderKeys.remove(.signingKey) }
        let initiatorKeys = bonded ? features.initiatorKeyDistribution.intersection(offered) : []
        let response = SMPPairingFeatures(
            ioCapability: configuration.pairing.ioCapability, oobDataPresent: false,
            authRequirements: SMPAuthRequirements(bonding: configuration.pairing.bondable, mitm: configuration.mitmFlag,
                                                  secureConnections: configuration.pairing.secureConnections),
            maximumEncryptionKeySize: keySize,
            initiatorKeyDistribution: initiatorKeys, responderKeyDistribution: responderKeys)

        let method = SMPPairingMethod.select(initiator: features, responder: response, secureConnections: secureConnections)
        if let reason = configuration.pairing.refusal(of: method) { return fail(reason, &out) }

        let responsePDU = SMPPairingResponse(response).encoded
        session.preq = raw
        session.pres = responsePDU
        session.request = features
        session.response = response
        session.method = method
        session.secureConnections = secureConnections
        session.bonded = bonded
        session.keySize = keySize
        out.pdus.append(responsePDU)
        out.timer = .restart

        if secureConnections {
            phase = .awaitingPublicKey
            return
        }
        // LE legacy (2.3.5.2-2.3.5.5): TK is zero for Just Works, the passkey for Passkey Entry.
        phase = .legacyAwaitingConfirm
        session.localRandom = random.bytes(16)
        switch method {
        case .passkeyEntry(let roles) where roles.responderDisplays:
            let passkey = random.passkey(from: configuration.pairing.passkey)
            session.passkey = passkey
            session.temporaryKey = SMPCrypto.temporaryKey(passkey)
            out.events.append(.displayPasskey(passkey))
        case .passkeyEntry:
            out.events.append(.passkeyRequested)
        case .justWorks where configuration.pairing.confirmsJustWorks:
            // TK (zero) only once the user accepts; Mconfirm waits as it does for a passkey.
            session.userConfirmed = false
            out.events.append(.confirmJustWorks)
        default:
            session.temporaryKey = [UInt8](repeating: 0, count: 16)
        }
    }

    // MARK: LE legacy

    /// Sconfirm once both Mconfirm and TK are known (the user may still be typing).
    private mutating func legacySendConfirmIfReady(_ out: inout SMPResponderOutput) {
        guard phase == .legacyAwaitingConfirm, let tk = session.temporaryKey, let confirm = session.pendingConfirm else { return }
        session.peerConfirm = confirm
        session.pendingConfirm = nil
        let ours = session.legacyConfirm(tk: tk, random: session.localRandom,
                                         initiator: initiatorAddress, responder: responderAddress)
        out.pdus.append(SMPPairingConfirm(value: ours).encoded)
        out.timer = .restart
        phase = .legacyAwaitingRandom
    }

    private mutating func legacyRandom(_ mrand: [UInt8], _ out: inout SMPResponderOutput) {
        guard let tk = session.temporaryKey else { return fail(.unspecifiedReason, &out) }
        let expected = session.legacyConfirm(tk: tk, random: mrand, initiator: initiatorAddress, responder: responderAddress)
        guard expected == session.peerConfirm else { return fail(.confirmValueFailed, &out) }
        out.pdus.append(SMPPairingRandom(value: session.localRandom).encoded)
        out.timer = .restart
        // 2.3.5.5: STK = s1(TK, Srand, Mrand), shortened to the negotiated key size.
        let stk = session.shortenedKey(SMPCrypto.s1(k: tk, r1: session.localRandom, r2: mrand))
        session.encryptionKey = stk
        out.events.append(.encryptionKeyReady(stk))
        phase = .awaitingEncryption
    }

    // MARK: LE Secure Connections

    private mutating func publicKey(_ peerKey: SMPPublicKey, _ out: inout SMPResponderOutput) {
        let keyPair = fixedKeyPair ?? SMPKeyPair()
        guard session.agree(keyPair: keyPair, peerKey: peerKey) else { return fail(.unspecifiedReason, &out) }
        out.pdus.append(SMPPairingPublicKey(key: keyPair.publicKey).encoded)
        out.timer = .restart

        switch session.method {
        case .passkeyEntry(let roles):
            // 2.3.5.6.3: the passkey is shown or asked for after the public keys are exchanged.
            phase = .passkeyAwaitingConfirm(round: 0)
            if roles.responderDisplays {
                let passkey = random.passkey(from: configuration.pairing.passkey)
                session.passkey = passkey
                out.events.append(.displayPasskey(passkey))
            } else {
                out.events.append(.passkeyRequested)
            }
        default:
            // 2.3.5.6.2: the responder commits first: Cb = f4(PKbx, PKax, Nb, 0).
            session.localRandom = random.bytes(16)
            guard let cb = session.localCommitment(z: 0) else { return fail(.unspecifiedReason, &out) }
            out.pdus.append(SMPPairingConfirm(value: cb).encoded)
            session.userConfirmed = !asksUserBeforeDHKeyCheck
            phase = .awaitingRandom
        }
    }

    private mutating func secureConnectionsRandom(_ na: [UInt8], _ out: inout SMPResponderOutput) {
        guard session.keyPair != nil, session.peerPublicKey != nil else { return fail(.unspecifiedReason, &out) }
        session.peerRandom = na
        out.pdus.append(SMPPairingRandom(value: session.localRandom).encoded)
        out.timer = .restart
        if session.method == .numericComparison, let value = session.numericComparisonValue(localIsInitiator: false) {
            // Vb = g2(PKax, PKbx, Na, Nb); the initiator checked Cb, the users compare the values.
            out.events.append(.confirmNumericComparison(value))
        } else if asksUserBeforeDHKeyCheck {
            out.events.append(.confirmJustWorks)
        }
        deriveKeys()
        phase = .awaitingDHKeyCheck
    }

    /// Secure Connections: whether Eb waits for the user (Numeric Comparison; Just Works when
    /// it is confirmed, at the same step, 2.3.5.6.2).
    private var asksUserBeforeDHKeyCheck: Bool {
        session.method == .numericComparison || (session.method == .justWorks && configuration.pairing.confirmsJustWorks)
    }

    /// Cbi for round i once both Cai and the passkey are known (2.3.5.6.3).
    private mutating func passkeySendConfirmIfReady(_ out: inout SMPResponderOutput) {
        guard case .passkeyAwaitingConfirm(let round) = phase, let passkey = session.passkey,
              let confirm = session.pendingConfirm, session.keyPair != nil, session.peerPublicKey != nil
        else { return }
        session.peerConfirm = confirm
        session.pendingConfirm = nil
        session.localRandom = random.bytes(16)
        guard let cb = session.localCommitment(z: SMPCrypto.passkeyBit(passkey, round)) else { return }
        out.pdus.append(SMPPairingConfirm(value: cb).encoded)
        out.timer = .restart
        phase = .passkeyAwaitingRandom(round: round)
    }

    private mutating func passkeyRandom(_ nai: [UInt8], round: Int, _ out: inout SMPResponderOutput) {
        // Cai = f4(PKax, PKbx, Nai, rai); a mismatch (a passkey typed wrong) is Confirm Value Failed.
        guard let passkey = session.passkey,
              let opens = session.peerCommitmentOpens(with: nai, z: SMPCrypto.passkeyBit(passkey, round)) else {
            return fail(.unspecifiedReason, &out)
        }
        guard opens else { return fail(.confirmValueFailed, &out) }
        session.peerRandom = nai
        out.pdus.append(SMPPairingRandom(value: session.localRandom).encoded)
        out.timer = .restart
        if round < 19 {
            phase = .passkeyAwaitingConfirm(round: round + 1)
        } else {
            // Na and Nb of the DHKey checks are those of the 20th round.
            deriveKeys()
            phase = .awaitingDHKeyCheck
        }
    }

    /// 2.3.5.6.5: MacKey || LTK = f5(DHKey, Na, Nb, A, B); we are B, Nb is ours.
    private mutating func deriveKeys() {
        session.deriveKeys(na: session.peerRandom, nb: session.localRandom, a: initiatorAddress, b: responderAddress)
    }

    /// Checks Ea = f6(MacKey, Na, Nb, rb, IOcapA, A, B) and answers Eb = f6(MacKey, Nb, Na, ra,
    /// IOcapB, B, A), once Ea is here and (Numeric Comparison) the user said the values match.
    private mutating func checkDHKeyIfReady(_ out: inout SMPResponderOutput) {
        guard session.userConfirmed, let ea = session.pendingDHKeyCheck,
              let expected = session.initiatorCheck(na: session.peerRandom, nb: session.localRandom,
                                                    a: initiatorAddress, b: responderAddress),
              let eb = session.responderCheck(na: session.peerRandom, nb: session.localRandom,
                                              a: initiatorAddress, b: responderAddress) else { return }
        session.pendingDHKeyCheck = nil
        guard expected == ea else { return fail(.dhKeyCheckFailed, &out) }
        out.pdus.append(SMPPairingDHKeyCheck(value: eb).encoded)
        out.timer = .restart
        let key = session.shortenedKey(session.longTermKey)
        session.encryptionKey = key
        out.events.append(.encryptionKeyReady(key))
        phase = .awaitingEncryption
    }

    // MARK: Key distribution

    private mutating func peerKey(_ command: SMPCommand, _ out: inout SMPResponderOutput) {
        // The central's own LTK (legacy) is kept for links where the roles are swapped.
        if let reason = session.receiveKey(command, peerAddress: initiatorAddress, peerLTK: \.peerLongTermKey) {
            return fail(reason, &out)
        }
        finishIfAllKeysReceived(&out)
    }

    private mutating func finishIfAllKeysReceived(_ out: inout SMPResponderOutput) {
        guard phase == .awaitingKeys, let result = session.completedResult else { return }
        out.events.append(.paired(result))
        out.timer = .stop
        endPairing()
    }
}
