import Testing
import BlemuCore
import BlemuTestSupport
import BlemuCrypto
@testable import BlemuSMP

private let identity = SMPIdentity(resolvingKey: le("ec0234a3 57c8ad05 341010a6 0a397d9b"),
                                   address: LEAddress(BluetoothAddress("C5:00:00:00:00:01")!, isRandom: true))
private let csrk = [UInt8](0x20..<0x30)
private let centralIRK = [UInt8](0x40..<0x50)
private let centralCSRK = [UInt8](0x60..<0x70)
private let centralIdentity = LEAddress(BluetoothAddress("00:1B:DC:01:02:03")!, isRandom: false)

/// Sends the central's IRK, identity address and CSRK (its default key distribution).
private func sendCentralKeys(_ responder: inout SMPResponder) -> SMPResponderOutput {
    var out = responder.receive(SMPIdentityInformation(value: centralIRK).encoded[...])
    #expect(out.pdus.isEmpty && out.events.isEmpty)
    out = responder.receive(SMPIdentityAddressInformation(address: centralIdentity).encoded[...])
    #expect(out.pdus.isEmpty && out.events.isEmpty)
    return responder.receive(SMPSigningInformation(value: centralCSRK).encoded[...])
}

@Suite struct SMPSecureConnectionsTests {
    @Test func justWorks() throws {
        var responder = TestCentral.responder(SMPResponderConfiguration(identity: identity, signatureKey: csrk))
        var central = TestCentral()

        let (response, first) = central.requestPairing(&responder)
        let features = try #require(response).features
        #expect(first.pdus.count == 1 && first.timer == .restart && responder.isPairing)
        #expect(features.ioCapability == .noInputNoOutput && features.authRequirements.secureConnections)
        #expect(features.authRequirements.bonding && !features.authRequirements.mitm)
        // EncKey is dropped in Secure Connections; LinkKey and RFU bits are never offered.
        #expect(features.responderKeyDistribution == [.identityKey, .signingKey])
        #expect(features.initiatorKeyDistribution == [.identityKey, .signingKey])

        let keys = central.sendPublicKey(&responder)
        #expect(keys.decoded.map(\.code) == [.pairingPublicKey, .pairingConfirm])
        #expect(central.peerPublicKey != central.keyPair.publicKey)

        let nonces = central.exchangeNonces(&responder)
        #expect(nonces.decoded.map(\.code) == [.pairingRandom] && nonces.events.isEmpty)

        let (check, ltk) = central.sendDHKeyCheck(&responder)
        #expect(check.decoded.map(\.code) == [.pairingDHKeyCheck])
        #expect(check.encryptionKey == SMPLongTermKey(key: ltk))

        let distributed = responder.linkEncrypted()
        #expect(distributed.decoded == [
            .identityInformation(SMPIdentityInformation(value: identity.resolvingKey)),
            .identityAddressInformation(SMPIdentityAddressInformation(address: identity.address)),
            .signingInformation(SMPSigningInformation(value: csrk)),
        ])
        #expect(distributed.paired == nil)

        let done = sendCentralKeys(&responder)
        let result = try #require(done.paired)
        #expect(done.timer == .stop && !responder.isPairing)
        #expect(result.secureConnections && !result.authenticated && result.bonded && result.encryptionKeySize == 16)
        #expect(result.longTermKey == SMPLongTermKey(key: ltk))
        #expect(result.peerIdentity == SMPIdentity(resolvingKey: centralIRK, address: centralIdentity))
        #expect(result.peerSignatureKey == centralCSRK)
        #expect(result.peerLongTermKey == nil)
        // The test central uses Appendix D.1's key A, which is the spec's debug key.
        #expect(result.peerUsedDebugKey)
    }

    @Test func freshCentralKeyIsNotTheDebugKey() throws {
        var responder = TestCentral.responder(SMPResponderConfiguration())
        var central = TestCentral(initiatorKeys: [], responderKeys: [])
        central.keyPair = SMPKeyPair()
        _ = central.requestPairing(&responder)
        _ = central.sendPublicKey(&responder)
        _ = central.exchangeNonces(&responder)
        #expect(central.sendDHKeyCheck(&responder).0.encryptionKey != nil)
        let result = try #require(responder.linkEncrypted().paired)
        #expect(!result.peerUsedDebugKey && result.secureConnections)
    }

    /// A central's identity address must be public or static random, not a private address.
    @Test func privateIdentityAddressIsRefused() {
        var responder = TestCentral.responder(SMPResponderConfiguration())
        var central = TestCentral(initiatorKeys: [.identityKey], responderKeys: [])
        _ = central.requestPairing(&responder)
        _ = central.sendPublicKey(&responder)
        _ = central.exchangeNonces(&responder)
        _ = central.sendDHKeyCheck(&responder)
        _ = responder.linkEncrypted()
        _ = responder.receive(SMPIdentityInformation(value: centralIRK).encoded[...])
        let resolvable = LEAddress(BluetoothAddress("4A:00:00:00:00:01")!, isRandom: true)
        let out = responder.receive(SMPIdentityAddressInformation(address: resolvable).encoded[...])
        #expect(out.failure == .invalidParameters)
    }

    /// The responder derives the DHKey of Appendix D.1 when both sides use the sample keys.
    @Test func sampleKeysGiveTheSampleDHKey() throws {
        let b = try SMPKeyPair(privateKeyBigEndian: be(AppendixD.privateB))
        var responder = TestCentral.responder(SMPResponderConfiguration(), keyPair: b)
        var central = TestCentral()
        _ = central.requestPairing(&responder)
        _ = central.sendPublicKey(&responder)
        #expect(central.peerPublicKey == b.publicKey)
        #expect(central.dhKey == le(AppendixD.dhKey))
        _ = central.exchangeNonces(&responder)
        let (check, ltk) = central.sendDHKeyCheck(&responder)
        #expect(check.encryptionKey?.key == ltk)
    }

    @Test(arguments: [true, false])
    func numericComparison(confirmBeforeCheck: Bool) throws {
        var responder = TestCentral.responder(SMPResponderConfiguration(ioCapability: .displayYesNo, requireMITM: true))
        var central = TestCentral(io: .displayYesNo, mitm: true)
        _ = central.requestPairing(&responder)
        _ = central.sendPublicKey(&responder)
        let nonces = central.exchangeNonces(&responder)
        #expect(nonces.events == [.confirmNumericComparison(central.numericValue)])

        var ltk: [UInt8] = []
        var check: SMPResponderOutput
        if confirmBeforeCheck {
            #expect(responder.numericComparisonConfirmed(true).pdus.isEmpty)
            (check, ltk) = central.sendDHKeyCheck(&responder)
        } else {
            let (early, derived) = central.sendDHKeyCheck(&responder)
            #expect(early.pdus.isEmpty, "Eb waits for the user")
            ltk = derived
            check = responder.numericComparisonConfirmed(true)
        }
        #expect(check.decoded.map(\.code) == [.pairingDHKeyCheck])
        #expect(check.encryptionKey?.key == ltk)
        _ = responder.linkEncrypted()
        let result = try #require(sendCentralKeys(&responder).paired)
        #expect(result.authenticated && result.secureConnections)
    }

    @Test func numericComparisonRejectedByTheUser() {
        var responder = TestCentral.responder(SMPResponderConfiguration(ioCapability: .displayYesNo))
        var central = TestCentral(io: .keyboardDisplay, mitm: true)
        _ = central.requestPairing(&responder)
        _ = central.sendPublicKey(&responder)
        _ = central.exchangeNonces(&responder)
        let out = responder.numericComparisonConfirmed(false)
        #expect(out.failure == .numericComparisonFailed)
        #expect(out.events == [.failed(reason: .numericComparisonFailed, origin: .local)])
        #expect(out.timer == .stop && !responder.isPairing)
    }

    @Test(arguments: [SMPPasskeySource.fixed(123), .random])
    func passkeyDisplayedByThePeripheral(source: SMPPasskeySource) throws {
        var responder = TestCentral.responder(SMPResponderConfiguration(ioCapability: .displayOnly, passkey: source))
        var central = TestCentral(io: .keyboardOnly, mitm: true)
        _ = central.requestPairing(&responder)
        let keys = central.sendPublicKey(&responder)
        guard case .displayPasskey(let passkey) = try #require(keys.events.first) else {
            Issue.record("expected a passkey to display, got \(keys.events)")
            return
        }
        if case .fixed(let fixed) = source { #expect(passkey == fixed) }
        #expect(passkey <= 999_999)
        #expect(keys.decoded.map(\.code) == [.pairingPublicKey], "the initiator commits first in Passkey Entry")

        // Keypress notifications from the central's keyboard are accepted and ignored.
        #expect(responder.receive(SMPKeypressNotification(type: .digitEntered).encoded[...]) == SMPResponderOutput())

        #expect(central.passkeyRounds(&responder, passkey: passkey) == nil)
        let (check, ltk) = central.sendDHKeyCheck(&responder, passkey: passkey)
        #expect(check.encryptionKey?.key == ltk)
        _ = responder.linkEncrypted()
        let result = try #require(sendCentralKeys(&responder).paired)
        #expect(result.authenticated)
    }

    @Test func passkeyTypedOnThePeripheral() throws {
        var responder = TestCentral.responder(SMPResponderConfiguration(ioCapability: .keyboardOnly))
        var central = TestCentral(io: .displayOnly, mitm: true)
        _ = central.requestPairing(&responder)
        let keys = central.sendPublicKey(&responder)
        #expect(keys.events == [.passkeyRequested])
        let passkey: UInt32 = 987_654
        let failed = central.passkeyRounds(&responder, passkey: passkey) { responder in
            responder.passkeyEntered(passkey)
        }
        #expect(failed == nil)
        let (check, ltk) = central.sendDHKeyCheck(&responder, passkey: passkey)
        #expect(check.encryptionKey?.key == ltk)
    }

    @Test func passkeyMismatchFailsTheConfirm() {
        var responder = TestCentral.responder(SMPResponderConfiguration(ioCapability: .keyboardOnly))
        var central = TestCentral(io: .keyboardOnly, mitm: true)   // both type: .bothInput
        _ = central.requestPairing(&responder)
        _ = central.sendPublicKey(&responder)
        // The central's user typed 000001, ours 000000: bit 0 differs, so round 0 fails.
        let out = central.passkeyRounds(&responder, passkey: 1) { responder in responder.passkeyEntered(0) }
        #expect(out?.failure == .confirmValueFailed)
    }

    @Test func passkeyEntryCancelled() {
        var responder = TestCentral.responder(SMPResponderConfiguration(ioCapability: .keyboardOnly))
        var central = TestCentral(io: .displayOnly, mitm: true)
        _ = central.requestPairing(&responder)
        _ = central.sendPublicKey(&responder)
        #expect(responder.passkeyEntered(nil).failure == .passkeyEntryFailed)
    }

    @Test func wrongDHKeyCheckFails() {
        var responder = TestCentral.responder(SMPResponderConfiguration())
        var central = TestCentral()
        _ = central.requestPairing(&responder)
        _ = central.sendPublicKey(&responder)
        _ = central.exchangeNonces(&responder)
        let (out, _) = central.sendDHKeyCheck(&responder, corrupt: true)
        #expect(out.failure == .dhKeyCheckFailed && out.encryptionKey == nil)
        #expect(out.events == [.failed(reason: .dhKeyCheckFailed, origin: .local)])
    }

    /// CVE-2018-5383: a public key off the curve ends the pairing with DHKey Check Failed.
    @Test func publicKeyOffTheCurveFails() {
        var responder = TestCentral.responder(SMPResponderConfiguration())
        var central = TestCentral()
        _ = central.requestPairing(&responder)
        var pdu = SMPPairingPublicKey(key: central.keyPair.publicKey).encoded
        for index in 33..<65 { pdu[index] = 0 }
        let out = responder.receive(pdu[...])
        #expect(out.pdus == [[0x05, 0x0B]])
    }

    /// A central reflecting our own public key is refused (Unspecified Reason, as Zephyr does).
    @Test func ourOwnPublicKeyIsRefused() throws {
        let b = try SMPKeyPair(privateKeyBigEndian: be(AppendixD.privateB))
        var responder = TestCentral.responder(SMPResponderConfiguration(), keyPair: b)
        var central = TestCentral()
        central.keyPair = b
        _ = central.requestPairing(&responder)
        #expect(central.sendPublicKey(&responder).pdus == [[0x05, 0x08]])
    }

    @Test func unexpectedConfirmBeforePublicKey() {
        var responder = TestCentral.responder(SMPResponderConfiguration())
        var central = TestCentral()
        _ = central.requestPairing(&responder)
        let out = responder.receive(SMPPairingConfirm(value: [UInt8](repeating: 1, count: 16)).encoded[...])
        #expect(out.failure == .unspecifiedReason && !responder.isPairing)
    }

    @Test func outOfBandIsNotAvailable() {
        var responder = TestCentral.responder(SMPResponderConfiguration())
        var central = TestCentral(oob: true)
        #expect(central.requestPairing(&responder).1.failure == .oobNotAvailable)
    }

    /// Out-of-order key distribution ends the pairing.
    @Test func keysOutOfOrderFail() {
        var responder = TestCentral.responder(SMPResponderConfiguration())
        var central = TestCentral()
        _ = central.requestPairing(&responder)
        _ = central.sendPublicKey(&responder)
        _ = central.exchangeNonces(&responder)
        _ = central.sendDHKeyCheck(&responder)
        #expect(responder.linkEncrypted().pdus.isEmpty)   // nothing to distribute without identity or CSRK
        let out = responder.receive(SMPSigningInformation(value: centralCSRK).encoded[...])
        #expect(out.failure == .unspecifiedReason)
    }

    @Test func keySizeIsShortened() throws {
        var responder = TestCentral.responder(SMPResponderConfiguration())
        var central = TestCentral(maximumKeySize: 10)
        #expect(central.requestPairing(&responder).0?.features.maximumEncryptionKeySize == 10)
        _ = central.sendPublicKey(&responder)
        _ = central.exchangeNonces(&responder)
        let (check, ltk) = central.sendDHKeyCheck(&responder)
        let key = try #require(check.encryptionKey).key
        #expect(key.prefix(10) == ltk.prefix(10))
        #expect(key.suffix(6).allSatisfy { $0 == 0 })
    }
}

@Suite struct SMPLegacyTests {
    @Test func justWorks() throws {
        var responder = TestCentral.responder(SMPResponderConfiguration(identity: identity))
        var central = TestCentral(secureConnections: false, initiatorKeys: [.encryptionKey, .identityKey, .signingKey])
        let features = try #require(central.requestPairing(&responder).0).features
        #expect(features.responderKeyDistribution == [.encryptionKey, .identityKey])
        #expect(features.initiatorKeyDistribution == [.encryptionKey, .identityKey, .signingKey])

        let tk = [UInt8](repeating: 0, count: 16)
        let confirm = central.sendLegacyConfirm(&responder, tk: tk)
        #expect(confirm.decoded.map(\.code) == [.pairingConfirm])
        let (random, stk) = central.sendLegacyRandom(&responder, tk: tk)
        #expect(random.decoded.map(\.code) == [.pairingRandom])
        #expect(random.encryptionKey == SMPLongTermKey(key: stk))

        let distributed = responder.linkEncrypted()
        #expect(distributed.decoded.map(\.code) == [.encryptionInformation, .centralIdentification,
                                                    .identityInformation, .identityAddressInformation])
        guard case .encryptionInformation(let info) = distributed.decoded[0],
              case .centralIdentification(let ident) = distributed.decoded[1] else { return }

        var out = responder.receive(SMPEncryptionInformation(value: [UInt8](repeating: 0xAB, count: 16)).encoded[...])
        out = responder.receive(SMPCentralIdentification(encryptedDiversifier: 0xBEEF, randomNumber: 42).encoded[...])
        #expect(out.events.isEmpty)
        let result = try #require(sendCentralKeys(&responder).paired)
        #expect(!result.secureConnections && !result.authenticated && result.bonded)
        #expect(result.longTermKey == SMPLongTermKey(key: info.longTermKey, encryptedDiversifier: ident.encryptedDiversifier,
                                                     randomNumber: ident.randomNumber))
        #expect(result.peerLongTermKey == SMPLongTermKey(key: [UInt8](repeating: 0xAB, count: 16),
                                                         encryptedDiversifier: 0xBEEF, randomNumber: 42))
        #expect(result.peerIdentity?.address == centralIdentity)
    }

    @Test func passkeyDisplayedByThePeripheral() throws {
        var responder = TestCentral.responder(SMPResponderConfiguration(ioCapability: .displayOnly, secureConnections: false,
                                                                        passkey: .fixed(42)))
        var central = TestCentral(io: .keyboardDisplay, mitm: true)   // SC offered by the central, not by us
        let (response, first) = central.requestPairing(&responder)
        #expect(response?.features.authRequirements.secureConnections == false)
        #expect(first.events == [.displayPasskey(42)])
        let tk = SMPCrypto.temporaryKey(42)
        _ = central.sendLegacyConfirm(&responder, tk: tk)
        let (random, stk) = central.sendLegacyRandom(&responder, tk: tk)
        #expect(random.encryptionKey?.key == stk)
        #expect(responder.linkEncrypted().decoded.map(\.code) == [.encryptionInformation, .centralIdentification])
        let result = try #require(sendCentralKeys(&responder).paired)
        #expect(result.authenticated && !result.secureConnections)
    }

    @Test func passkeyTypedOnThePeripheralAfterMconfirm() {
        var responder = TestCentral.responder(SMPResponderConfiguration(ioCapability: .keyboardDisplay))
        var central = TestCentral(io: .displayOnly, mitm: true, secureConnections: false)
        #expect(central.requestPairing(&responder).1.events == [.passkeyRequested])
        let tk = SMPCrypto.temporaryKey(654_321)
        #expect(central.sendLegacyConfirm(&responder, tk: tk).pdus.isEmpty, "Sconfirm waits for the passkey")
        let typed = responder.passkeyEntered(654_321)
        #expect(typed.decoded.map(\.code) == [.pairingConfirm])
        if case .pairingConfirm(let confirm) = typed.decoded.first { central.peerConfirm = confirm.value }
        let (random, stk) = central.sendLegacyRandom(&responder, tk: tk)
        #expect(random.encryptionKey?.key == stk)
    }

    @Test func wrongConfirmFails() {
        var responder = TestCentral.responder(SMPResponderConfiguration(secureConnections: false))
        var central = TestCentral(secureConnections: false)
        _ = central.requestPairing(&responder)
        let tk = [UInt8](repeating: 0, count: 16)
        _ = central.sendLegacyConfirm(&responder, tk: tk)
        let (out, _) = central.sendLegacyRandom(&responder, tk: tk, random: [UInt8](repeating: 9, count: 16))
        #expect(out.pdus == [[0x05, 0x04]])
        #expect(out.events == [.failed(reason: .confirmValueFailed, origin: .local)])
    }

    @Test func stkIsShortenedToTheKeySize() throws {
        var responder = TestCentral.responder(SMPResponderConfiguration())
        var central = TestCentral(secureConnections: false, maximumKeySize: 7)
        _ = central.requestPairing(&responder)
        let tk = [UInt8](repeating: 0, count: 16)
        _ = central.sendLegacyConfirm(&responder, tk: tk)
        let (random, stk) = central.sendLegacyRandom(&responder, tk: tk)
        let key = try #require(random.encryptionKey).key
        #expect(key.prefix(7) == stk.prefix(7) && key.suffix(9).allSatisfy { $0 == 0 })
        let distributed = responder.linkEncrypted()
        if case .encryptionInformation(let info) = distributed.decoded.first {
            #expect(info.longTermKey.suffix(9).allSatisfy { $0 == 0 })
        } else {
            Issue.record("expected Encryption Information")
        }
    }

    /// Without bonding on both sides no keys are distributed; pairing ends once encrypted.
    @Test func noBondingNoKeys() throws {
        var responder = TestCentral.responder(SMPResponderConfiguration(identity: identity))
        var central = TestCentral(bonding: false, secureConnections: false)
        let features = try #require(central.requestPairing(&responder).0).features
        #expect(features.initiatorKeyDistribution.isEmpty && features.responderKeyDistribution.isEmpty)
        let tk = [UInt8](repeating: 0, count: 16)
        _ = central.sendLegacyConfirm(&responder, tk: tk)
        _ = central.sendLegacyRandom(&responder, tk: tk)
        let done = responder.linkEncrypted()
        #expect(done.pdus.isEmpty && done.timer == .stop)
        let result = try #require(done.paired)
        #expect(!result.bonded && result.longTermKey == nil)
    }
}

@Suite struct SMPResponderPolicyTests {
    @Test func keyTooSmallFails() {
        var responder = TestCentral.responder(SMPResponderConfiguration(minimumEncryptionKeySize: 16))
        var central = TestCentral(maximumKeySize: 7)
        let out = central.requestPairing(&responder).1
        #expect(out.pdus == [[0x05, 0x06]])
        #expect(out.events == [.failed(reason: .encryptionKeySize, origin: .local)])
    }

    /// Vol 3, Part H, 3.5.1: the maximum key size "shall be in the range 7 to 16 octets"; one
    /// outside it is a parameter out of range, Invalid Parameters (Table 3.7), not Encryption Key Size.
    @Test(arguments: [UInt8(0), 6, 17, 0xFF])
    func keySizeOutsideTheSpecRangeIsInvalidParameters(_ size: UInt8) {
        var responder = TestCentral.responder(SMPResponderConfiguration())
        let out = responder.receive([0x01, 0x03, 0x00, 0x09, size, 0x00, 0x00][...])
        #expect(out.pdus == [[0x05, 0x0A]])
        #expect(out.events == [.failed(reason: .invalidParameters, origin: .local)])
    }

    @Test func secureConnectionsOnlyRefusesLegacy() {
        var responder = TestCentral.responder(SMPResponderConfiguration(secureConnectionsOnly: true))
        var central = TestCentral(secureConnections: false)
        #expect(central.requestPairing(&responder).1.failure == .authenticationRequirements)
        // And 128-bit keys only.
        var shortKeys = TestCentral(maximumKeySize: 15)
        #expect(shortKeys.requestPairing(&responder).1.failure == .encryptionKeySize)
    }

    @Test func requiredMITMRefusesJustWorks() {
        var responder = TestCentral.responder(SMPResponderConfiguration(ioCapability: .displayYesNo, requireMITM: true))
        var central = TestCentral(io: .noInputNoOutput)
        #expect(central.requestPairing(&responder).1.failure == .authenticationRequirements)
    }

    @Test(arguments: [
        ("01 03 00 09 10 00", SMPPairingFailedReason.invalidParameters),         // short Pairing Request
        ("01 07 00 09 10 00 00", .invalidParameters),                            // reserved IO capability
        ("01 03 02 09 10 00 00", .invalidParameters),                            // reserved OOB flag
        ("02 03 00 09 10 00 00", .commandNotSupported),                          // Pairing Response to a responder
        ("0B 09", .commandNotSupported),                                         // Security Request to a peripheral
        ("04 000102030405060708090A0B0C0D0E0F", .unspecifiedReason),             // Pairing Random out of sequence
        ("0D 000102030405060708090A0B0C0D0E0F", .unspecifiedReason),             // DHKey Check out of sequence
        ("0E 00", .unspecifiedReason),                                           // keypress outside Passkey Entry
    ])
    func badOrUnexpectedPDUsFail(pdu: String, reason: SMPPairingFailedReason) {
        var responder = TestCentral.responder(SMPResponderConfiguration())
        let out = responder.receive(be(pdu)[...])
        #expect(out.pdus == [[0x05, reason.rawValue]])
        #expect(out.timer == .stop)
    }

    @Test func reservedCodesAreIgnored() {
        var responder = TestCentral.responder(SMPResponderConfiguration())
        for pdu in ["", "00", "0F 01", "FF"] {
            #expect(responder.receive(be(pdu)[...]) == SMPResponderOutput())
        }
    }

    @Test func pairingRequestDuringPairingIsUnexpected() {
        var responder = TestCentral.responder(SMPResponderConfiguration())
        var central = TestCentral()
        _ = central.requestPairing(&responder)
        #expect(central.requestPairing(&responder).1.failure == .unspecifiedReason)
        // After the failure a new pairing may start.
        #expect(central.requestPairing(&responder).0 != nil)
    }

    @Test func peerFailureEndsThePairingWithoutAnswer() {
        var responder = TestCentral.responder(SMPResponderConfiguration())
        var central = TestCentral()
        _ = central.requestPairing(&responder)
        let out = responder.receive(be("05 03")[...])
        #expect(out.pdus.isEmpty && out.timer == .stop)
        #expect(out.events == [.failed(reason: .authenticationRequirements, origin: .peer)])
        // A reserved reason still ends it; outside a pairing Pairing Failed is ignored.
        _ = central.requestPairing(&responder)
        #expect(responder.receive(be("05 7F")[...]).events == [.failed(reason: nil, origin: .peer)])
        #expect(responder.receive(be("05 08")[...]) == SMPResponderOutput())
    }

    @Test func timeoutEndsSMPOnTheLink() {
        var responder = TestCentral.responder(SMPResponderConfiguration())
        var central = TestCentral()
        _ = central.requestPairing(&responder)
        #expect(responder.timerExpired().events == [.failed(reason: nil, origin: .timeout)])
        #expect(responder.hasTimedOut && !responder.isPairing)
        #expect(central.requestPairing(&responder).1 == SMPResponderOutput())
        #expect(responder.abort(.unspecifiedReason) == SMPResponderOutput())
    }

    @Test func repeatedAttemptsRefusal() {
        var responder = TestCentral.responder(SMPResponderConfiguration())
        #expect(responder.abort(.repeatedAttempts).pdus == [[0x05, 0x09]])
    }

    @Test func encryptionOutsidePairingIsIgnored() {
        var responder = TestCentral.responder(SMPResponderConfiguration())
        #expect(responder.linkEncrypted() == SMPResponderOutput())
    }

    @Test func securityRequestCarriesOurRequirements() throws {
        let responder = TestCentral.responder(SMPResponderConfiguration(requireMITM: true))
        let request = try SMPSecurityRequest(pdu: responder.securityRequest[...])
        #expect(request.authRequirements.bonding && request.authRequirements.mitm && request.authRequirements.secureConnections)
    }
}

/// Vol 3, Part H, 2.3.5.1, Table 2.8: rows are the responder, columns the initiator, in the order
/// DisplayOnly, DisplayYesNo, KeyboardOnly, NoInputNoOutput, KeyboardDisplay.
/// JW Just Works, NC Numeric Comparison, RD responder displays, ID initiator displays, BI both input.
@Suite struct SMPPairingMethodTests {
    static let legacy = [
        ["JW", "JW", "RD", "JW", "RD"],
        ["JW", "JW", "RD", "JW", "RD"],
        ["ID", "ID", "BI", "JW", "ID"],
        ["JW", "JW", "JW", "JW", "JW"],
        ["ID", "ID", "RD", "JW", "RD"],
    ]
    static let secureConnections = [
        ["JW", "JW", "RD", "JW", "RD"],
        ["JW", "NC", "RD", "JW", "NC"],
        ["ID", "ID", "BI", "JW", "ID"],
        ["JW", "JW", "JW", "JW", "JW"],
        ["ID", "NC", "RD", "JW", "NC"],
    ]

    static func name(_ method: SMPPairingMethod) -> String {
        switch method {
        case .justWorks: "JW"
        case .numericComparison: "NC"
        case .passkeyEntry(.responderDisplays): "RD"
        case .passkeyEntry(.initiatorDisplays): "ID"
        case .passkeyEntry(.bothInput): "BI"
        case .outOfBand: "OOB"
        }
    }

    @Test(arguments: [false, true])
    func ioCapabilityMappingMatchesTable2_8(secureConnections: Bool) {
        let table = secureConnections ? Self.secureConnections : Self.legacy
        for (row, responder) in SMPIOCapability.allCases.enumerated() {
            for (column, initiator) in SMPIOCapability.allCases.enumerated() {
                let method = SMPPairingMethod.fromIOCapabilities(initiator: initiator, responder: responder,
                                                                 secureConnections: secureConnections)
                #expect(Self.name(method) == table[row][column], "responder \(responder), initiator \(initiator)")
            }
        }
    }

    @Test func mitmAndOOBRules() {
        func features(_ io: SMPIOCapability, mitm: Bool, oob: Bool = false) -> SMPPairingFeatures {
            SMPPairingFeatures(ioCapability: io, oobDataPresent: oob,
                               authRequirements: SMPAuthRequirements(bonding: true, mitm: mitm, secureConnections: true),
                               initiatorKeyDistribution: [], responderKeyDistribution: [])
        }
        // Neither asks for MITM: Just Works whatever the IO capabilities.
        #expect(SMPPairingMethod.select(initiator: features(.keyboardDisplay, mitm: false),
                                        responder: features(.keyboardDisplay, mitm: false), secureConnections: true) == .justWorks)
        #expect(SMPPairingMethod.select(initiator: features(.keyboardDisplay, mitm: true),
                                        responder: features(.keyboardDisplay, mitm: false), secureConnections: true) == .numericComparison)
        // OOB: either side in Secure Connections, both in legacy.
        #expect(SMPPairingMethod.select(initiator: features(.keyboardOnly, mitm: true, oob: true),
                                        responder: features(.displayOnly, mitm: false), secureConnections: true) == .outOfBand)
        #expect(SMPPairingMethod.select(initiator: features(.keyboardOnly, mitm: true, oob: true),
                                        responder: features(.displayOnly, mitm: false), secureConnections: false)
                == .passkeyEntry(.responderDisplays))
    }
}

@Suite struct SMPResponderRobustnessTests {
    /// Random and mutated PDUs, in any state, never trap, and whatever the responder sends decodes.
    @Test func randomInputNeverTraps() {
        var random = SeededRandom(seed: 0x534D_5030)
        let samples = SMPPDUTests.samples.map { be($0) }
        for run in 0..<200 {
            var responder = TestCentral.responder(SMPResponderConfiguration(ioCapability: SMPIOCapability.allCases[run % 5],
                                                                            identity: identity, signatureKey: csrk),
                                                  seed: UInt64(run))
            var central = TestCentral(io: SMPIOCapability.allCases[(run / 5) % 5], mitm: run % 2 == 0,
                                      secureConnections: run % 3 != 0)
            _ = central.requestPairing(&responder)
            if central.features.authRequirements.secureConnections { _ = central.sendPublicKey(&responder) }
            for _ in 0..<30 {
                var bytes = samples[random.below(samples.count)]
                if random.chance(50) { bytes[random.below(bytes.count)] = random.byte() }
                if random.chance(10) { bytes = random.bytes(random.below(20)) }
                let out: SMPResponderOutput
                switch random.below(10) {
                case 0: out = responder.passkeyEntered(random.chance(80) ? UInt32(random.below(1_000_000)) : nil)
                case 1: out = responder.numericComparisonConfirmed(random.chance(80))
                case 2: out = responder.linkEncrypted()
                default: out = responder.receive(bytes[...])
                }
                for pdu in out.pdus { #expect((try? SMPCommand(pdu: pdu[...])) != nil) }
            }
        }
    }
}
