import BlemuCore
import BlemuCrypto

/// What a central offers and demands when it pairs (the initiator's side of 2.3): the
/// configuration both roles share (`pairing`), and whether to ask for MITM protection
/// without demanding it.
public struct SMPInitiatorConfiguration: Equatable, Sendable {
    public var pairing: SMPPairingConfiguration
    /// Ask for MITM protection (the MITM flag) without demanding it, as phones do when they
    /// have a display or a keyboard: the method then follows the IO capabilities (2.3.5.1).
    public var requestMITM: Bool

    public init(ioCapability: SMPIOCapability = .keyboardDisplay, bondable: Bool = true, requireMITM: Bool = false,
                requestMITM: Bool = false, secureConnections: Bool = true, secureConnectionsOnly: Bool = false,
                minimumEncryptionKeySize: UInt8 = 7, maximumEncryptionKeySize: UInt8 = 16,
                passkey: SMPPasskeySource = .random, identity: SMPIdentity? = nil,
                keys: SMPKeyDistribution = [.encryptionKey, .identityKey]) {
        pairing = SMPPairingConfiguration(
            ioCapability: ioCapability, bondable: bondable, requireMITM: requireMITM, secureConnections: secureConnections,
            secureConnectionsOnly: secureConnectionsOnly, minimumEncryptionKeySize: minimumEncryptionKeySize,
            maximumEncryptionKeySize: maximumEncryptionKeySize, passkey: passkey, identity: identity, keys: keys)
        self.requestMITM = requestMITM
    }

}

/// Things the owner of an `SMPInitiator` acts on.
public enum SMPInitiatorEvent: Equatable, Sendable {
    /// Show this passkey (six digits, leading zeros); the user types it on the peripheral.
    case displayPasskey(UInt32)
    /// Ask the user for the peripheral's passkey (shown on it, or its label); answer with `passkeyEntered`.
    case passkeyRequested
    /// Show this six-digit value, ask whether the peripheral shows the same; answer with
    /// `numericComparisonConfirmed`.
    case confirmNumericComparison(UInt32)
    /// Ask the user to accept a Just Works pairing (`SMPPairingConfiguration.confirmsJustWorks`);
    /// answer with `justWorksConfirmed`.
    case confirmJustWorks
    /// Start encryption with this key (LE Enable Encryption with its EDIV and Rand, both zero
    /// for the STK and a Secure Connections LTK), then call `linkEncrypted` on Encryption Change.
    case startEncryption(SMPLongTermKey)
    /// The peripheral asked for security (Security Request, 2.4.6) while no pairing was under
    /// way: the owner encrypts with a bond that meets these requirements, or calls `start`.
    case securityRequested(SMPAuthRequirements)
    /// Pairing and key distribution are done. In the result, `longTermKey` is the key this
    /// central encrypts with on later links (the Secure Connections LTK, or in LE legacy the LTK,
    /// EDIV and Rand the peripheral distributed) and `peerIdentity` the peripheral's identity.
    case paired(SMPPairingResult)
    case failed(reason: SMPPairingFailedReason?, origin: SMPFailureOrigin)
}

/// The Security Manager of a central, the pairing initiator (Vol 3, Part H, 2.3 and 3), for one
/// link; `SMPResponder`'s counterpart with the same PDUs and toolbox. Pure: no I/O, no timers.
///
/// LE Secure Connections (Just Works, Numeric Comparison, Passkey Entry with its 20 rounds) and
/// LE legacy (Just Works, Passkey Entry), then key distribution once the link is encrypted (the
/// responder's keys first, then ours, 3.6.1). Every failure sends Pairing Failed with the
/// spec's reason; the owner runs the 30 s timer (3.4) as `timer` says.
public struct SMPInitiator: SMPPairingRole {
    public let configuration: SMPInitiatorConfiguration
    public let initiatorAddress: LEAddress
    public let responderAddress: LEAddress
    private var random: any RandomNumberGenerator
    private let fixedKeyPair: SMPKeyPair?

    enum Phase: SMPPairingPhase {
        case idle
        case awaitingResponse
        /// LE legacy: waiting for the user's passkey before Mconfirm.
        case legacyAwaitingPasskey
        /// LE legacy Just Works: waiting for the user to accept before Mconfirm.
        case legacyAwaitingConsent
        case legacyAwaitingConfirm
        case legacyAwaitingRandom
        case awaitingPublicKey
        /// Just Works / Numeric Comparison: waiting for Cb.
        case awaitingConfirm
        case awaitingRandom
        /// Numeric Comparison (or a confirmed Just Works): waiting for the user before Ea.
        case awaitingUserConfirmation
        case passkeyAwaitingPasskey
        case passkeyAwaitingConfirm(round: Int)
        case passkeyAwaitingRandom(round: Int)
        case awaitingDHKeyCheck
        case awaitingEncryption
        case awaitingKeys
        case timedOut
    }

    var phase = Phase.idle
    var session = SMPPairingSession()

    /// `initiatorAddress` is this central's address on the link, `responderAddress` the
    /// peripheral's, as LE Connection Complete reported them. `random` must be cryptographically
    /// secure except in tests.
    public init(configuration: SMPInitiatorConfiguration, initiatorAddress: LEAddress, responderAddress: LEAddress,
                random: any RandomNumberGenerator = SystemRandomNumberGenerator(), keyPair: SMPKeyPair? = nil) {
        self.configuration = configuration
        self.initiatorAddress = initiatorAddress
        self.responderAddress = responderAddress
        self.random = random
        self.fixedKeyPair = keyPair
    }

    public var isPairing: Bool { pairingUnderWay }
    public var hasTimedOut: Bool { timedOut }

    /// What the pairing under way agreed, once the Pairing Response came; nil otherwise.
    public var pairingSummary: SMPPairingSummary? { summaryUnderWay }

    // MARK: Inputs

    /// Starts a pairing: sends the Pairing Request (3.5.1). `securityRequest`: the
    /// requirements of a Security Request being answered; MITM is asked for when it asks
    /// (2.4.6: the central should honour the peripheral's requirements). Ignored during a pairing.
    public mutating func start(answering securityRequest: SMPAuthRequirements? = nil) -> SMPInitiatorOutput {
        var out = SMPInitiatorOutput()
        guard phase == .idle else { return out }
        session = SMPPairingSession()
        // Ours: only the identity (a central encrypts, it is not asked for an LTK, and has no
        // CSRK); theirs: the kinds `keys` names (by default the LTK in legacy and their identity,
        // so we can find them again).
        let asked = configuration.pairing.keys
        var ours = configuration.pairing.bondable ? asked.intersection(.identityKey) : []
        if configuration.pairing.identity == nil { ours.remove(.identityKey) }
        let features = SMPPairingFeatures(
            ioCapability: configuration.pairing.ioCapability, oobDataPresent: false,
            authRequirements: SMPAuthRequirements(
                bonding: configuration.pairing.bondable,
                mitm: configuration.pairing.requireMITM || configuration.requestMITM || (securityRequest?.mitm ?? false),
                secureConnections: configuration.pairing.secureConnections),
            maximumEncryptionKeySize: configuration.pairing.maximumEncryptionKeySize,
            initiatorKeyDistribution: ours,
            responderKeyDistribution: configuration.pairing.bondable ? asked : [])
        let pdu = SMPPairingRequest(features).encoded
        session.preq = pdu
        session.request = features
        out.pdus.append(pdu)
        out.timer = .restart
        phase = .awaitingResponse
        return out
    }

    /// An SMP PDU from the peripheral, code first.
    public mutating func receive(_ pdu: ArraySlice<UInt8>) -> SMPInitiatorOutput {
        var out = SMPInitiatorOutput()
        guard let command = decode(pdu, &out) else { return out }

        switch (command, phase) {
        case (.pairingFailed(let failed), _):
            peerFailed(failed.reason, &out)
        case (.securityRequest(let request), .idle):
            out.events.append(.securityRequested(request.authRequirements))
        case (.securityRequest, _):
            // 2.4.6: a pairing is already under way (or done on this link); nothing more to do.
            break
        case (.pairingRequest, _):
            // A command a peripheral receives: a central does not support it.
            fail(.commandNotSupported, &out)
        case (.pairingResponse(let response), .awaitingResponse):
            pairingResponse(response, raw: Array(pdu), &out)
        case (.pairingConfirm(let confirm), .legacyAwaitingConfirm):
            session.peerConfirm = confirm.value
            out.pdus.append(SMPPairingRandom(value: session.localRandom).encoded)
            out.timer = .restart
            phase = .legacyAwaitingRandom
        case (.pairingRandom(let random), .legacyAwaitingRandom):
            legacyRandom(random.value, &out)
        case (.pairingPublicKey(let key), .awaitingPublicKey):
            publicKey(key.key, &out)
        case (.pairingConfirm(let confirm), .awaitingConfirm):
            session.peerConfirm = confirm.value
            session.localRandom = random.bytes(16)
            out.pdus.append(SMPPairingRandom(value: session.localRandom).encoded)
            out.timer = .restart
            phase = .awaitingRandom
        case (.pairingRandom(let random), .awaitingRandom):
            secureConnectionsRandom(random.value, &out)
        case (.pairingConfirm(let confirm), .passkeyAwaitingConfirm(let round)):
            session.peerConfirm = confirm.value
            out.pdus.append(SMPPairingRandom(value: session.localRandom).encoded)
            out.timer = .restart
            phase = .passkeyAwaitingRandom(round: round)
        case (.pairingRandom(let random), .passkeyAwaitingRandom(let round)):
            passkeyRandom(random.value, round: round, &out)
        case (.pairingDHKeyCheck(let check), .awaitingDHKeyCheck):
            dhKeyCheck(check.value, &out)
        case (.keypressNotification, .passkeyAwaitingPasskey), (.keypressNotification, .passkeyAwaitingConfirm),
             (.keypressNotification, .legacyAwaitingPasskey), (.keypressNotification, .legacyAwaitingConfirm):
            // The user typing on the peripheral (3.5.8): nothing to do.
            break
        case (.encryptionInformation, .awaitingKeys), (.centralIdentification, .awaitingKeys),
             (.identityInformation, .awaitingKeys), (.identityAddressInformation, .awaitingKeys),
             (.signingInformation, .awaitingKeys):
            peerKey(command, &out)
        default:
            // Out of sequence: the pairing ends (as SMPResponder, Zephyr and Bumble: Unspecified Reason).
            fail(.unspecifiedReason, &out)
        }
        return out
    }

    /// The passkey the user typed (the peripheral shows it, or both type); nil: cancelled
    /// (Passkey Entry Failed).
    public mutating func passkeyEntered(_ passkey: UInt32?) -> SMPInitiatorOutput {
        var out = SMPInitiatorOutput()
        guard phase == .passkeyAwaitingPasskey || phase == .legacyAwaitingPasskey else { return out }
        guard let passkey, passkey <= 999_999 else {
            fail(.passkeyEntryFailed, &out)
            return out
        }
        session.passkey = passkey
        if phase == .legacyAwaitingPasskey {
            session.temporaryKey = SMPCrypto.temporaryKey(passkey)
            legacySendConfirm(&out)
        } else {
            passkeySendConfirm(round: 0, &out)
        }
        return out
    }

    /// The user's answer to `confirmJustWorks`; no: Unspecified Reason (0x08), as
    /// `SMPResponder.justWorksConfirmed` says why.
    public mutating func justWorksConfirmed(_ accepted: Bool) -> SMPInitiatorOutput {
        var out = SMPInitiatorOutput()
        guard session.method == .justWorks,
              phase == .legacyAwaitingConsent || phase == .awaitingUserConfirmation else { return out }
        guard accepted else {
            fail(.unspecifiedReason, &out)
            return out
        }
        if phase == .legacyAwaitingConsent {
            session.temporaryKey = [UInt8](repeating: 0, count: 16)
            legacySendConfirm(&out)
        } else {
            sendDHKeyCheck(&out)
        }
        return out
    }

    /// The user's answer to `confirmNumericComparison`; no: Numeric Comparison Failed (0x0C).
    public mutating func numericComparisonConfirmed(_ matches: Bool) -> SMPInitiatorOutput {
        var out = SMPInitiatorOutput()
        guard phase == .awaitingUserConfirmation, session.method == .numericComparison else { return out }
        guard matches else {
            fail(.numericComparisonFailed, &out)
            return out
        }
        sendDHKeyCheck(&out)
        return out
    }

    /// Encryption Change (enabled) with the key of `startEncryption`: the peripheral
    /// distributes its keys first, then we send ours (3.6.1). Ignored outside a pairing.
    public mutating func linkEncrypted() -> SMPInitiatorOutput {
        var out = SMPInitiatorOutput()
        guard phase == .awaitingEncryption, let response = session.response else { return out }
        // In LE legacy the LTK we encrypt with later is the one the peripheral distributes.
        session.startKeyDistribution(peerKeys: response.responderKeyDistribution,
                                     longTermKey: session.secureConnections ? session.encryptionKey : nil)
        phase = .awaitingKeys
        if !session.expectedKeys.isEmpty { out.timer = .restart }
        finishIfAllKeysReceived(&out)
        return out
    }

    /// The owner's 30 s SMP timer expired (3.4): the pairing fails, SMP is over on this link.
    public mutating func timerExpired() -> SMPInitiatorOutput { expire() }

    /// Ends the pairing under way with Pairing Failed and `reason`.
    public mutating func abort(_ reason: SMPPairingFailedReason) -> SMPInitiatorOutput {
        var out = SMPInitiatorOutput()
        guard isPairing else { return out }
        fail(reason, &out)
        return out
    }

    // MARK: Pairing feature exchange

    private mutating func pairingResponse(_ pairingResponse: SMPPairingResponse, raw: [UInt8], _ out: inout SMPInitiatorOutput) {
        guard let request = session.request else { return fail(.unspecifiedReason, &out) }
        let response = pairingResponse.features
        let secureConnections: Bool, keySize: UInt8
        do { (secureConnections, keySize) = try configuration.pairing.negotiate(with: response) } catch { return fail(error, &out) }
        // 3.5.2: the responder's key distribution fields are a subset of what we asked for.
        guard response.initiatorKeyDistribution.isSubset(of: request.initiatorKeyDistribution),
              response.responderKeyDistribution.isSubset(of: request.responderKeyDistribution) else {
            return fail(.invalidParameters, &out)
        }
        let method = SMPPairingMethod.select(initiator: request, responder: response, secureConnections: secureConnections)
        if let reason = configuration.pairing.refusal(of: method) { return fail(reason, &out) }
        session.pres = raw
        session.response = response
        session.method = method
        session.secureConnections = secureConnections
        session.bonded = request.authRequirements.bonding && response.authRequirements.bonding
        session.keySize = keySize

        if secureConnections {
            // 2.3.5.6.1: the initiator sends its public key first.
            let keyPair = fixedKeyPair ?? SMPKeyPair()
            session.keyPair = keyPair
            out.pdus.append(SMPPairingPublicKey(key: keyPair.publicKey).encoded)
            out.timer = .restart
            phase = .awaitingPublicKey
            return
        }
        // LE legacy (2.3.5.2-2.3.5.5): TK zero for Just Works, the passkey for Passkey Entry.
        switch method {
        case .passkeyEntry(.initiatorDisplays):
            let passkey = random.passkey(from: configuration.pairing.passkey)
            session.passkey = passkey
            session.temporaryKey = SMPCrypto.temporaryKey(passkey)
            out.events.append(.displayPasskey(passkey))
            legacySendConfirm(&out)
        case .passkeyEntry:
            phase = .legacyAwaitingPasskey
            out.events.append(.passkeyRequested)
            out.timer = .restart
        case .justWorks where configuration.pairing.confirmsJustWorks:
            phase = .legacyAwaitingConsent
            out.events.append(.confirmJustWorks)
            out.timer = .restart
        default:
            session.temporaryKey = [UInt8](repeating: 0, count: 16)
            legacySendConfirm(&out)
        }
    }

    // MARK: LE legacy

    /// Mconfirm = c1(TK, Mrand, preq, pres, iat, ia, rat, ra) (2.3.5.5).
    private mutating func legacySendConfirm(_ out: inout SMPInitiatorOutput) {
        guard let tk = session.temporaryKey else { return }
        session.localRandom = random.bytes(16)
        let confirm = session.legacyConfirm(tk: tk, random: session.localRandom,
                                            initiator: initiatorAddress, responder: responderAddress)
        out.pdus.append(SMPPairingConfirm(value: confirm).encoded)
        out.timer = .restart
        phase = .legacyAwaitingConfirm
    }

    private mutating func legacyRandom(_ srand: [UInt8], _ out: inout SMPInitiatorOutput) {
        guard let tk = session.temporaryKey else { return fail(.unspecifiedReason, &out) }
        // 2.3.5.5: "If the Sconfirm value does not match ... the pairing shall fail" (Confirm Value Failed).
        let expected = session.legacyConfirm(tk: tk, random: srand, initiator: initiatorAddress, responder: responderAddress)
        guard expected == session.peerConfirm else { return fail(.confirmValueFailed, &out) }
        // STK = s1(TK, Srand, Mrand), shortened to the negotiated size.
        let stk = session.shortenedKey(SMPCrypto.s1(k: tk, r1: srand, r2: session.localRandom))
        session.encryptionKey = stk
        out.events.append(.startEncryption(stk))
        out.timer = .restart
        phase = .awaitingEncryption
    }

    // MARK: LE Secure Connections

    private mutating func publicKey(_ peerKey: SMPPublicKey, _ out: inout SMPInitiatorOutput) {
        guard let keyPair = session.keyPair, session.agree(keyPair: keyPair, peerKey: peerKey) else {
            return fail(.unspecifiedReason, &out)
        }
        out.timer = .restart
        switch session.method {
        case .passkeyEntry(let roles):
            // 2.3.5.6.3: the passkey is shown or asked for after the public keys are exchanged.
            if roles == .initiatorDisplays {
                let passkey = random.passkey(from: configuration.pairing.passkey)
                session.passkey = passkey
                out.events.append(.displayPasskey(passkey))
                passkeySendConfirm(round: 0, &out)
            } else {
                phase = .passkeyAwaitingPasskey
                out.events.append(.passkeyRequested)
            }
        default:
            // 2.3.5.6.2: the responder commits first (Cb); we wait for it.
            phase = .awaitingConfirm
        }
    }

    private mutating func secureConnectionsRandom(_ nb: [UInt8], _ out: inout SMPInitiatorOutput) {
        // 2.3.5.6.2: Cb = f4(PKbx, PKax, Nb, 0); a mismatch fails with Confirm Value Failed.
        guard let opens = session.peerCommitmentOpens(with: nb, z: 0) else { return fail(.unspecifiedReason, &out) }
        guard opens else { return fail(.confirmValueFailed, &out) }
        session.peerRandom = nb
        deriveKeys()
        if session.method == .numericComparison, let value = session.numericComparisonValue(localIsInitiator: true) {
            // Va = g2(PKax, PKbx, Na, Nb): the user compares it with the peripheral's.
            out.events.append(.confirmNumericComparison(value))
            out.timer = .restart
            phase = .awaitingUserConfirmation
            return
        }
        if session.method == .justWorks && configuration.pairing.confirmsJustWorks {
            // Just Works confirmed at Numeric Comparison's step, without a value (2.3.5.6.2).
            out.events.append(.confirmJustWorks)
            out.timer = .restart
            phase = .awaitingUserConfirmation
            return
        }
        sendDHKeyCheck(&out)
    }

    /// Round `round` of Passkey Entry: Cai = f4(PKax, PKbx, Nai, rai) (2.3.5.6.3).
    private mutating func passkeySendConfirm(round: Int, _ out: inout SMPInitiatorOutput) {
        guard let passkey = session.passkey else { return fail(.unspecifiedReason, &out) }
        session.localRandom = random.bytes(16)
        guard let confirm = session.localCommitment(z: SMPCrypto.passkeyBit(passkey, round)) else {
            return fail(.unspecifiedReason, &out)
        }
        out.pdus.append(SMPPairingConfirm(value: confirm).encoded)
        out.timer = .restart
        phase = .passkeyAwaitingConfirm(round: round)
    }

    private mutating func passkeyRandom(_ nbi: [UInt8], round: Int, _ out: inout SMPInitiatorOutput) {
        // Cbi = f4(PKbx, PKax, Nbi, rbi); a mismatch (e.g. a passkey typed wrong) is Confirm Value Failed.
        guard let passkey = session.passkey,
              let opens = session.peerCommitmentOpens(with: nbi, z: SMPCrypto.passkeyBit(passkey, round)) else {
            return fail(.unspecifiedReason, &out)
        }
        guard opens else { return fail(.confirmValueFailed, &out) }
        session.peerRandom = nbi
        if round < 19 {
            passkeySendConfirm(round: round + 1, &out)
        } else {
            // Na and Nb of the DHKey checks are those of the 20th round.
            deriveKeys()
            sendDHKeyCheck(&out)
        }
    }

    /// 2.3.5.6.5: MacKey || LTK = f5(DHKey, Na, Nb, A, B); we are A, Na is ours.
    private mutating func deriveKeys() {
        session.deriveKeys(na: session.localRandom, nb: session.peerRandom, a: initiatorAddress, b: responderAddress)
    }

    /// Ea = f6(MacKey, Na, Nb, rb, IOcapA, A, B).
    private mutating func sendDHKeyCheck(_ out: inout SMPInitiatorOutput) {
        guard let ea = session.initiatorCheck(na: session.localRandom, nb: session.peerRandom,
                                              a: initiatorAddress, b: responderAddress) else {
            return fail(.unspecifiedReason, &out)
        }
        out.pdus.append(SMPPairingDHKeyCheck(value: ea).encoded)
        out.timer = .restart
        phase = .awaitingDHKeyCheck
    }

    /// Eb = f6(MacKey, Nb, Na, ra, IOcapB, B, A); a mismatch is DHKey Check Failed (2.3.5.6.5).
    private mutating func dhKeyCheck(_ eb: [UInt8], _ out: inout SMPInitiatorOutput) {
        guard let expected = session.responderCheck(na: session.localRandom, nb: session.peerRandom,
                                                    a: initiatorAddress, b: responderAddress) else {
            return fail(.unspecifiedReason, &out)
        }
        guard expected == eb else { return fail(.dhKeyCheckFailed, &out) }
        let key = session.shortenedKey(session.longTermKey)
        session.encryptionKey = key
        out.events.append(.startEncryption(key))
        out.timer = .restart
        phase = .awaitingEncryption
    }

    // MARK: Key distribution

    private mutating func peerKey(_ command: SMPCommand, _ out: inout SMPInitiatorOutput) {
        // The responder's LTK (legacy) is the one we encrypt with later.
        if let reason = session.receiveKey(command, peerAddress: responderAddress, peerLTK: \.longTermKey) {
            return fail(reason, &out)
        }
        finishIfAllKeysReceived(&out)
    }

    /// Once the responder's keys are in: ours, then done.
    private mutating func finishIfAllKeysReceived(_ out: inout SMPInitiatorOutput) {
        guard phase == .awaitingKeys, let result = session.completedResult, let response = session.response else { return }
        if response.initiatorKeyDistribution.contains(.identityKey), let identity = configuration.pairing.identity {
            out.pdus.append(SMPIdentityInformation(value: identity.resolvingKey).encoded)
            out.pdus.append(SMPIdentityAddressInformation(address: identity.address).encoded)
        }
        out.events.append(.paired(result))
        out.timer = .stop
        endPairing()
    }

    // MARK: Failure

    /// A malformed Security Request outside a pairing: there is nothing to fail.
    func ignoresUndecodable(_ code: SMPCode) -> Bool { code == .securityRequest && !isPairing }
}
