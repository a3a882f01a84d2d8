import Testing
import BlemuCore
import BlemuCrypto
@testable import BlemuSMP

/// `SMPInitiator` against `SMPResponder`: two state machines written from the spec's two sides,
/// over a simulated link that carries PDUs both ways and plays each side's user.
private struct PairingBench {
    var initiator: SMPInitiator
    var responder: SMPResponder
    /// What the initiator's user types when asked (nil: the passkey the responder shows).
    var initiatorTypes: UInt32?
    /// What the responder's user types when asked (nil: the passkey the initiator shows).
    var responderTypes: UInt32?
    var initiatorAccepts = true
    var responderAccepts = true

    var initiatorEvents: [SMPInitiatorEvent] = []
    var responderEvents: [SMPResponderEvent] = []
    /// Every PDU, as (from the initiator?, PDU).
    var trace: [(Bool, [UInt8])] = []
    var initiatorKey: SMPLongTermKey?
    var responderKey: SMPLongTermKey?
    /// The passkeys each side showed so far (a user reads the other side's screen at any time).
    var shownByInitiator: UInt32? {
        initiatorEvents.lazy.compactMap { if case .displayPasskey(let p) = $0 { p } else { nil } }.last
    }
    var shownByResponder: UInt32? {
        responderEvents.lazy.compactMap { if case .displayPasskey(let p) = $0 { p } else { nil } }.last
    }
    var comparedByInitiator: UInt32?
    var comparedByResponder: UInt32?

    init(_ initiatorConfiguration: SMPInitiatorConfiguration, _ responderConfiguration: SMPResponderConfiguration,
         seed: UInt64 = 1) {
        initiator = SMPInitiator(configuration: initiatorConfiguration, initiatorAddress: TestCentral.centralAddress,
                                 responderAddress: TestCentral.peripheralAddress, random: SeededRandom(seed: seed))
        responder = TestCentral.responder(responderConfiguration, seed: seed &+ 100)
    }

    var initiatorPaired: SMPPairingResult? {
        initiatorEvents.lazy.compactMap { if case .paired(let r) = $0 { r } else { nil } }.first
    }
    var responderPaired: SMPPairingResult? {
        responderEvents.lazy.compactMap { if case .paired(let r) = $0 { r } else { nil } }.first
    }
    var initiatorFailure: (SMPPairingFailedReason?, SMPFailureOrigin)? {
        initiatorEvents.lazy.compactMap { if case .failed(let r, let o) = $0 { (r, o) } else { nil } }.first
    }
    var responderFailure: (SMPPairingFailedReason?, SMPFailureOrigin)? {
        responderEvents.lazy.compactMap { if case .failed(let r, let o) = $0 { (r, o) } else { nil } }.first
    }

    /// Runs a whole pairing from `start`, both users answering, the link encrypting when both
    /// sides have a key; `tamper` may change a PDU on its way (nil drops it).
    mutating func run(tamper: (Bool, [UInt8]) -> [UInt8]? = { $1 }) {
        var toResponder: [[UInt8]] = []
        var toInitiator: [[UInt8]] = []
        func take(_ out: SMPInitiatorOutput) {
            toResponder += out.pdus
            initiatorEvents += out.events
        }
        take(initiator.start())
        var steps = 0
        while steps < 500 {
            steps += 1
            if !toResponder.isEmpty {
                let pdu = toResponder.removeFirst()
                trace.append((true, pdu))
                guard let delivered = tamper(true, pdu) else { continue }
                let out = responder.receive(delivered[...])
                toInitiator += out.pdus
                responderEvents += out.events
                continue
            }
            if !toInitiator.isEmpty {
                let pdu = toInitiator.removeFirst()
                trace.append((false, pdu))
                guard let delivered = tamper(false, pdu) else { continue }
                take(initiator.receive(delivered[...]))
                continue
            }
            // Nothing in flight: the users and the controller act.
            if let action = nextUserAction() {
                let (i, r) = action(&self)
                take(i)
                toInitiator += r.pdus
                responderEvents += r.events
                continue
            }
            break
        }
    }

    private var handled = 0
    private var handledResponder = 0
    private var encrypted = false

    /// The first event not yet acted on, as what it makes the users or the controller do.
    private mutating func nextUserAction() -> ((inout PairingBench) -> (SMPInitiatorOutput, SMPResponderOutput))? {
        while handled < initiatorEvents.count {
            let event = initiatorEvents[handled]
            handled += 1
            switch event {
            case .passkeyRequested:
                return { bench in
                    let typed = bench.initiatorTypes ?? bench.shownByResponder
                    return (bench.initiator.passkeyEntered(typed), SMPResponderOutput())
                }
            case .confirmNumericComparison(let value):
                comparedByInitiator = value
                return { bench in (bench.initiator.numericComparisonConfirmed(bench.initiatorAccepts), SMPResponderOutput()) }
            case .confirmJustWorks:
                return { bench in (bench.initiator.justWorksConfirmed(bench.initiatorAccepts), SMPResponderOutput()) }
            case .startEncryption(let key): initiatorKey = key
            default: break
            }
        }
        while handledResponder < responderEvents.count {
            let event = responderEvents[handledResponder]
            handledResponder += 1
            switch event {
            case .passkeyRequested:
                return { bench in
                    let typed = bench.responderTypes ?? bench.shownByInitiator
                    return (SMPInitiatorOutput(), bench.responder.passkeyEntered(typed))
                }
            case .confirmNumericComparison(let value):
                comparedByResponder = value
                return { bench in (SMPInitiatorOutput(), bench.responder.numericComparisonConfirmed(bench.responderAccepts)) }
            case .confirmJustWorks:
                return { bench in (SMPInitiatorOutput(), bench.responder.justWorksConfirmed(bench.responderAccepts)) }
            case .encryptionKeyReady(let key): responderKey = key
            default: break
            }
        }
        // The controller encrypts once the central starts with the key the peripheral holds too.
        if !encrypted, let initiatorKey, let responderKey, initiatorKey.key == responderKey.key {
            encrypted = true
            return { bench in
                let r = bench.responder.linkEncrypted()
                let i = bench.initiator.linkEncrypted()
                return (i, r)
            }
        }
        return nil
    }

    var codesFromInitiator: [SMPCode] { trace.filter(\.0).compactMap { $0.1.first.flatMap(SMPCode.init) } }
    var codesFromResponder: [SMPCode] { trace.filter { !$0.0 }.compactMap { $0.1.first.flatMap(SMPCode.init) } }
}

private let peripheralIdentity = SMPIdentity(resolvingKey: [UInt8](0x30..<0x40),
                                             address: LEAddress(BluetoothAddress("D4:AA:BB:CC:DD:EE")!, isRandom: true))
private let centralIdentity = SMPIdentity(resolvingKey: [UInt8](0x50..<0x60),
                                          address: LEAddress(BluetoothAddress("C1:22:33:44:55:66")!, isRandom: true))

@Suite struct SMPInitiatorPairingTests {
    @Test func secureConnectionsJustWorks() throws {
        var bench = PairingBench(SMPInitiatorConfiguration(ioCapability: .noInputNoOutput, identity: centralIdentity),
                                 SMPResponderConfiguration(identity: peripheralIdentity))
        bench.run()
        let central = try #require(bench.initiatorPaired)
        let peripheral = try #require(bench.responderPaired)
        #expect(central.secureConnections && !central.authenticated && central.bonded)
        #expect(central.longTermKey == peripheral.longTermKey && central.longTermKey?.key.count == 16)
        #expect(central.longTermKey?.encryptedDiversifier == 0 && central.longTermKey?.randomNumber == 0)
        #expect(central.peerIdentity == peripheralIdentity)
        #expect(peripheral.peerIdentity == centralIdentity)
        #expect(!bench.initiator.isPairing && !bench.responder.isPairing)
        #expect(bench.codesFromInitiator == [.pairingRequest, .pairingPublicKey, .pairingRandom, .pairingDHKeyCheck,
                                             .identityInformation, .identityAddressInformation])
    }

    @Test func secureConnectionsNumericComparisonBothSeeTheSameValue() throws {
        var bench = PairingBench(SMPInitiatorConfiguration(ioCapability: .displayYesNo, requireMITM: true),
                                 SMPResponderConfiguration(ioCapability: .displayYesNo, requireMITM: true))
        bench.run()
        let value = try #require(bench.comparedByInitiator)
        #expect(value == bench.comparedByResponder && value <= 999_999)
        let central = try #require(bench.initiatorPaired)
        #expect(central.authenticated && central.secureConnections)
        #expect(central.longTermKey == bench.responderPaired?.longTermKey)
    }

    @Test func askingForMITMWithoutDemandingItGivesNumericComparisonOrJustWorks() throws {
        // Both display: the MITM flag alone selects Numeric Comparison (Table 2.8).
        var both = PairingBench(SMPInitiatorConfiguration(ioCapability: .keyboardDisplay, requestMITM: true),
                                SMPResponderConfiguration(ioCapability: .displayYesNo))
        both.run()
        #expect(both.comparedByInitiator != nil && both.comparedByInitiator == both.comparedByResponder)
        #expect(try #require(both.initiatorPaired).authenticated)
        // A peripheral without IO: Just Works, and that is accepted (only asked for).
        var plain = PairingBench(SMPInitiatorConfiguration(ioCapability: .keyboardDisplay, requestMITM: true),
                                 SMPResponderConfiguration())
        plain.run()
        #expect(try #require(plain.initiatorPaired).authenticated == false)
    }

    @Test(arguments: [true, false])
    func numericComparisonRejectedFailsWith0x0C(rejectedByCentral: Bool) throws {
        var bench = PairingBench(SMPInitiatorConfiguration(ioCapability: .displayYesNo),
                                 SMPResponderConfiguration(ioCapability: .displayYesNo, requireMITM: true))
        if rejectedByCentral { bench.initiatorAccepts = false } else { bench.responderAccepts = false }
        bench.run()
        #expect(bench.initiatorPaired == nil && bench.responderPaired == nil)
        let (rejecter, other) = rejectedByCentral
            ? (bench.initiatorFailure, bench.responderFailure) : (bench.responderFailure, bench.initiatorFailure)
        #expect(rejecter?.0 == .numericComparisonFailed && rejecter?.1 == .local)
        #expect(other?.0 == .numericComparisonFailed && other?.1 == .peer)
        #expect((rejectedByCentral ? bench.codesFromInitiator : bench.codesFromResponder).last == .pairingFailed)
    }

    @Test func secureConnectionsPasskeyTheCentralTypes() throws {
        // The lock: DisplayOnly with a label, MITM required; the central has a keyboard.
        var bench = PairingBench(SMPInitiatorConfiguration(ioCapability: .keyboardDisplay),
                                 SMPResponderConfiguration(ioCapability: .displayOnly, requireMITM: true, passkey: .fixed(4321)))
        bench.run()
        #expect(bench.shownByResponder == 4321)
        let central = try #require(bench.initiatorPaired)
        #expect(central.authenticated && central.secureConnections)
        #expect(central.longTermKey == bench.responderPaired?.longTermKey)
        // 20 rounds of confirm and random each way.
        #expect(bench.codesFromInitiator.filter { $0 == .pairingConfirm }.count == 20)
    }

    @Test func secureConnectionsPasskeyTheCentralDisplays() throws {
        var bench = PairingBench(SMPInitiatorConfiguration(ioCapability: .displayOnly, passkey: .fixed(987_654)),
                                 SMPResponderConfiguration(ioCapability: .keyboardOnly, requireMITM: true))
        bench.run()
        #expect(bench.shownByInitiator == 987_654)
        let central = try #require(bench.initiatorPaired)
        #expect(central.authenticated && central.longTermKey == bench.responderPaired?.longTermKey)
    }

    @Test func wrongPasskeyFailsWithConfirmValueFailed() throws {
        var bench = PairingBench(SMPInitiatorConfiguration(ioCapability: .keyboardDisplay),
                                 SMPResponderConfiguration(ioCapability: .displayOnly, requireMITM: true, passkey: .fixed(4321)))
        bench.initiatorTypes = 4320
        bench.run()
        #expect(bench.initiatorPaired == nil && bench.responderPaired == nil)
        // Whoever sees a confirm that does not match first says 0x04; the other hears it.
        let failures = [bench.initiatorFailure, bench.responderFailure].compactMap { $0 }
        #expect(failures.count == 2 && failures.allSatisfy { $0.0 == .confirmValueFailed })
        #expect(failures.contains { $0.1 == .local } && failures.contains { $0.1 == .peer })
        #expect(!bench.initiator.isPairing && !bench.responder.isPairing)
    }

    @Test func passkeyCancelledFailsWithPasskeyEntryFailed() {
        var lone = SMPInitiator(configuration: SMPInitiatorConfiguration(ioCapability: .keyboardOnly),
                                initiatorAddress: TestCentral.centralAddress, responderAddress: TestCentral.peripheralAddress,
                                random: SeededRandom(seed: 3))
        var peer = TestCentral.responder(SMPResponderConfiguration(ioCapability: .displayOnly, requireMITM: true))
        var out = lone.start()
        var events: [SMPInitiatorEvent] = []
        while !out.pdus.isEmpty {
            var next = SMPInitiatorOutput()
            for pdu in out.pdus {
                for reply in peer.receive(pdu[...]).pdus {
                    let o = lone.receive(reply[...])
                    next.pdus += o.pdus
                    events += o.events
                }
            }
            out = next
        }
        #expect(events.contains(.passkeyRequested))
        let cancelled = lone.passkeyEntered(nil)
        #expect(cancelled.events == [.failed(reason: .passkeyEntryFailed, origin: .local)])
        #expect(cancelled.pdus == [SMPPairingFailed(reason: .passkeyEntryFailed).encoded])
        #expect(peer.receive(cancelled.pdus[0][...]).events == [.failed(reason: .passkeyEntryFailed, origin: .peer)])
    }

    @Test(arguments: [true, false])
    func justWorksConfirmedByBothUsersPairsAsUnasked(secureConnections: Bool) throws {
        var initiatorConfiguration = SMPInitiatorConfiguration(ioCapability: .noInputNoOutput, secureConnections: secureConnections)
        initiatorConfiguration.pairing.confirmsJustWorks = true
        var responderConfiguration = SMPResponderConfiguration(secureConnections: secureConnections)
        responderConfiguration.pairing.confirmsJustWorks = true
        var bench = PairingBench(initiatorConfiguration, responderConfiguration)
        bench.run()
        #expect(bench.initiatorEvents.filter { $0 == .confirmJustWorks }.count == 1)
        #expect(bench.responderEvents.filter { $0 == .confirmJustWorks }.count == 1)
        let central = try #require(bench.initiatorPaired)
        #expect(central.secureConnections == secureConnections && !central.authenticated)
        #expect(central.longTermKey == bench.responderPaired?.longTermKey)

        // Unasked (the default), the same pairing never stops for the user.
        var unasked = PairingBench(SMPInitiatorConfiguration(ioCapability: .noInputNoOutput, secureConnections: secureConnections),
                                   SMPResponderConfiguration(secureConnections: secureConnections))
        unasked.run()
        #expect(!unasked.initiatorEvents.contains(.confirmJustWorks) && !unasked.responderEvents.contains(.confirmJustWorks))
        #expect(unasked.initiatorPaired != nil)
    }

    @Test(arguments: [(true, true), (true, false), (false, true), (false, false)])
    func justWorksRefusedFailsWithUnspecifiedReason(secureConnections: Bool, refusedByCentral: Bool) {
        var initiatorConfiguration = SMPInitiatorConfiguration(ioCapability: .noInputNoOutput, secureConnections: secureConnections)
        initiatorConfiguration.pairing.confirmsJustWorks = true
        var responderConfiguration = SMPResponderConfiguration(secureConnections: secureConnections)
        responderConfiguration.pairing.confirmsJustWorks = true
        var bench = PairingBench(initiatorConfiguration, responderConfiguration)
        if refusedByCentral { bench.initiatorAccepts = false } else { bench.responderAccepts = false }
        bench.run()
        #expect(bench.initiatorPaired == nil && bench.responderPaired == nil)
        let (refuser, other) = refusedByCentral ? (bench.initiatorFailure, bench.responderFailure)
                                                : (bench.responderFailure, bench.initiatorFailure)
        #expect(refuser?.0 == .unspecifiedReason && refuser?.1 == .local)
        #expect(other?.0 == .unspecifiedReason && other?.1 == .peer)
        #expect(!bench.initiator.isPairing && !bench.responder.isPairing)
        // Nothing was encrypted: the refusal comes before any key.
        #expect(bench.initiatorKey == nil)
    }

    @Test func theKeysSettingNamesWhatEachSideDistributesAndAsksFor() throws {
        // The central asks for the identity only; the peripheral would give its LTK and identity.
        var bench = PairingBench(SMPInitiatorConfiguration(ioCapability: .noInputNoOutput, secureConnections: false,
                                                           identity: centralIdentity, keys: [.identityKey]),
                                 SMPResponderConfiguration(secureConnections: false, identity: peripheralIdentity))
        bench.run()
        let central = try #require(bench.initiatorPaired)
        #expect(central.peerIdentity == peripheralIdentity && central.longTermKey == nil)
        #expect(!bench.codesFromResponder.contains(.encryptionInformation))
        // A peripheral that distributes and asks for nothing: no key PDU either way.
        var none = PairingBench(SMPInitiatorConfiguration(ioCapability: .noInputNoOutput, identity: centralIdentity),
                                SMPResponderConfiguration(identity: peripheralIdentity, keys: []))
        none.run()
        let paired = try #require(none.responderPaired)
        #expect(paired.peerIdentity == nil && none.initiatorPaired?.peerIdentity == nil)
        #expect(!none.codesFromInitiator.contains(.identityInformation) && !none.codesFromResponder.contains(.identityInformation))
    }

    @Test func aResponderAskingForMITMWithoutDemandingItSetsTheFlagAndStillTakesJustWorks() throws {
        var bench = PairingBench(SMPInitiatorConfiguration(ioCapability: .noInputNoOutput),
                                 SMPResponderConfiguration(ioCapability: .displayYesNo, requestMITM: true))
        bench.run()
        let response = try #require(bench.trace.first { !$0.0 && $0.1.first == SMPCode.pairingResponse.rawValue })
        #expect(SMPAuthRequirements(rawValue: response.1[3]).mitm)
        #expect(try #require(bench.initiatorPaired).authenticated == false)
        #expect(SMPAuthRequirements(rawValue: bench.responder.securityRequest[1]).mitm)
    }

    @Test func legacyJustWorksTakesThePeripheralsDistributedKey() throws {
        var bench = PairingBench(SMPInitiatorConfiguration(ioCapability: .noInputNoOutput, secureConnections: false),
                                 SMPResponderConfiguration(secureConnections: false, identity: peripheralIdentity))
        bench.run()
        let central = try #require(bench.initiatorPaired)
        let peripheral = try #require(bench.responderPaired)
        #expect(!central.secureConnections && !central.authenticated)
        // The key a later link encrypts with is the one the peripheral distributed, named by EDIV and Rand.
        let key = try #require(central.longTermKey)
        #expect(key == peripheral.longTermKey && (key.encryptedDiversifier != 0 || key.randomNumber != 0))
        #expect(central.peerIdentity == peripheralIdentity)
        // The STK the link first encrypted with is not that key.
        #expect(bench.initiatorKey != key)
    }

    @Test func legacyPasskeyEntry() throws {
        var bench = PairingBench(SMPInitiatorConfiguration(ioCapability: .keyboardDisplay, secureConnections: false),
                                 SMPResponderConfiguration(ioCapability: .displayOnly, requireMITM: true,
                                                           secureConnections: false, passkey: .fixed(123_456)))
        bench.run()
        let central = try #require(bench.initiatorPaired)
        #expect(central.authenticated && !central.secureConnections)
        #expect(central.longTermKey == bench.responderPaired?.longTermKey)
    }

    @Test func legacyWrongPasskeyFailsWithConfirmValueFailed() {
        var bench = PairingBench(SMPInitiatorConfiguration(ioCapability: .keyboardDisplay, secureConnections: false),
                                 SMPResponderConfiguration(ioCapability: .displayOnly, requireMITM: true,
                                                           secureConnections: false, passkey: .fixed(123_456)))
        bench.initiatorTypes = 654_321
        bench.run()
        #expect(bench.initiatorPaired == nil)
        // The responder checks Mconfirm first (it gets Mrand first): 0x04, and the central hears it.
        #expect(bench.responderFailure?.0 == .confirmValueFailed && bench.responderFailure?.1 == .local)
        #expect(bench.initiatorFailure?.0 == .confirmValueFailed && bench.initiatorFailure?.1 == .peer)
    }

    @Test func aTamperedConfirmFailsWithConfirmValueFailed() {
        var bench = PairingBench(SMPInitiatorConfiguration(ioCapability: .noInputNoOutput), SMPResponderConfiguration())
        bench.run { fromInitiator, pdu in
            guard !fromInitiator, pdu.first == SMPCode.pairingConfirm.rawValue else { return pdu }
            var changed = pdu
            changed[5] ^= 0x01
            return changed
        }
        #expect(bench.initiatorFailure?.0 == .confirmValueFailed && bench.initiatorFailure?.1 == .local)
        #expect(bench.responderFailure?.0 == .confirmValueFailed && bench.responderFailure?.1 == .peer)
        #expect(bench.codesFromInitiator.last == .pairingFailed)
    }

    @Test func aTamperedDHKeyCheckFailsWithDHKeyCheckFailed() {
        var bench = PairingBench(SMPInitiatorConfiguration(ioCapability: .noInputNoOutput), SMPResponderConfiguration())
        bench.run { fromInitiator, pdu in
            guard !fromInitiator, pdu.first == SMPCode.pairingDHKeyCheck.rawValue else { return pdu }
            var changed = pdu
            changed[16] ^= 0x80
            return changed
        }
        #expect(bench.initiatorFailure?.0 == .dhKeyCheckFailed && bench.initiatorFailure?.1 == .local)
        #expect(bench.initiatorKey == nil && bench.initiatorPaired == nil)
    }

    @Test func anOffCurvePublicKeyFailsWithDHKeyCheckFailed() {
        var bench = PairingBench(SMPInitiatorConfiguration(ioCapability: .noInputNoOutput), SMPResponderConfiguration())
        bench.run { fromInitiator, pdu in
            guard !fromInitiator, pdu.first == SMPCode.pairingPublicKey.rawValue else { return pdu }
            var changed = pdu
            changed[40] ^= 0x01   // Y changed: the point leaves the curve
            return changed
        }
        #expect(bench.initiatorFailure?.0 == .dhKeyCheckFailed && bench.initiatorFailure?.1 == .local)
        #expect(bench.responderFailure?.0 == .dhKeyCheckFailed && bench.responderFailure?.1 == .peer)
    }

    @Test func aKeySizeBelowTheMinimumFailsWithEncryptionKeySize() {
        var bench = PairingBench(SMPInitiatorConfiguration(ioCapability: .noInputNoOutput, minimumEncryptionKeySize: 16),
                                 SMPResponderConfiguration(maximumEncryptionKeySize: 10))
        bench.run()
        #expect(bench.initiatorFailure?.0 == .encryptionKeySize && bench.initiatorFailure?.1 == .local)
        #expect(bench.codesFromInitiator == [.pairingRequest, .pairingFailed])
        #expect(bench.responderFailure?.0 == .encryptionKeySize && bench.responderFailure?.1 == .peer)
    }

    /// 3.5.2 (as 3.5.1): a maximum key size outside 7...16 is a parameter out of range,
    /// Invalid Parameters (Table 3.7).
    @Test(arguments: [UInt8(0), 6, 17])
    func aPairingResponseWithAKeySizeOutOfRangeFailsWithInvalidParameters(_ size: UInt8) {
        var initiator = SMPInitiator(configuration: SMPInitiatorConfiguration(), initiatorAddress: TestCentral.centralAddress,
                                     responderAddress: TestCentral.peripheralAddress, random: SeededRandom(seed: 1))
        _ = initiator.start()
        let out = initiator.receive([0x02, 0x03, 0x00, 0x09, size, 0x00, 0x01][...])
        #expect(out.pdus == [SMPPairingFailed(reason: .invalidParameters).encoded])
        #expect(out.events == [.failed(reason: .invalidParameters, origin: .local)] && out.timer == .stop)
    }

    @Test func outOfOrderPDUsFailWithUnspecifiedReason() {
        var bench = PairingBench(SMPInitiatorConfiguration(ioCapability: .noInputNoOutput), SMPResponderConfiguration())
        // The peripheral's random arrives before its confirm (a confirm turned into a random).
        bench.run { fromInitiator, pdu in
            guard !fromInitiator, pdu.first == SMPCode.pairingConfirm.rawValue else { return pdu }
            var changed = pdu
            changed[0] = SMPCode.pairingRandom.rawValue
            return changed
        }
        #expect(bench.initiatorFailure?.0 == .unspecifiedReason && bench.initiatorFailure?.1 == .local)

        var initiator = SMPInitiator(configuration: SMPInitiatorConfiguration(), initiatorAddress: TestCentral.centralAddress,
                                     responderAddress: TestCentral.peripheralAddress, random: SeededRandom(seed: 1))
        _ = initiator.start()
        let early = initiator.receive(SMPPairingDHKeyCheck(value: [UInt8](repeating: 1, count: 16)).encoded[...])
        #expect(early.pdus == [SMPPairingFailed(reason: .unspecifiedReason).encoded])
        // A Pairing Request is a peripheral's command: Command Not Supported.
        _ = initiator.start()
        let request = initiator.receive(SMPPairingRequest(SMPPairingFeatures(
            ioCapability: .noInputNoOutput, authRequirements: SMPAuthRequirements(rawValue: 0),
            maximumEncryptionKeySize: 16, initiatorKeyDistribution: [], responderKeyDistribution: [])).encoded[...])
        #expect(request.pdus == [SMPPairingFailed(reason: .commandNotSupported).encoded])
    }

    @Test func securityRequestIsHandedToTheOwnerOnlyWhenIdle() {
        var initiator = SMPInitiator(configuration: SMPInitiatorConfiguration(), initiatorAddress: TestCentral.centralAddress,
                                     responderAddress: TestCentral.peripheralAddress, random: SeededRandom(seed: 1))
        let asks = SMPAuthRequirements(bonding: true, mitm: true, secureConnections: true)
        let idle = initiator.receive(SMPSecurityRequest(authRequirements: asks).encoded[...])
        #expect(idle.events == [.securityRequested(asks)] && idle.pdus.isEmpty)
        // Answering it asks for MITM as the peripheral does.
        let started = initiator.start(answering: asks)
        let request = try? SMPPairingRequest(pdu: started.pdus[0][...])
        #expect(request?.features.authRequirements.mitm == true && started.timer == .restart)
        let during = initiator.receive(SMPSecurityRequest(authRequirements: asks).encoded[...])
        #expect(during.events.isEmpty && during.pdus.isEmpty && initiator.isPairing)
    }

    /// A bonding central asks for the peripheral's IdKey (Vol 3, Part H, 3.6.1): with its IRK and
    /// identity address it recognises the peripheral under its next resolvable private address.
    /// Without bonding it asks for no keys.
    @Test func aBondingPairingRequestAsksForThePeripheralsIdentity() throws {
        for bondable in [true, false] {
            var initiator = SMPInitiator(configuration: SMPInitiatorConfiguration(bondable: bondable),
                                         initiatorAddress: TestCentral.centralAddress,
                                         responderAddress: TestCentral.peripheralAddress, random: SeededRandom(seed: 1))
            let request = try SMPPairingRequest(pdu: initiator.start().pdus[0][...])
            #expect(request.features.responderKeyDistribution == (bondable ? [.encryptionKey, .identityKey] : []))
        }
    }

    @Test func timerExpiryEndsSMPOnTheLink() {
        var initiator = SMPInitiator(configuration: SMPInitiatorConfiguration(), initiatorAddress: TestCentral.centralAddress,
                                     responderAddress: TestCentral.peripheralAddress, random: SeededRandom(seed: 1))
        _ = initiator.start()
        let expired = initiator.timerExpired()
        #expect(expired.events == [.failed(reason: nil, origin: .timeout)] && expired.pdus.isEmpty)
        #expect(initiator.hasTimedOut && initiator.start().pdus.isEmpty)
        #expect(initiator.receive(SMPPairingFailed(reason: .unspecifiedReason).encoded[...]).events.isEmpty)
    }

    @Test func randomInputNeverTraps() {
        var random = SeededRandom(seed: 42)
        for _ in 0..<300 {
            var initiator = SMPInitiator(configuration: SMPInitiatorConfiguration(), initiatorAddress: TestCentral.centralAddress,
                                         responderAddress: TestCentral.peripheralAddress, random: SeededRandom(seed: random.next()))
            _ = initiator.start()
            for _ in 0..<8 {
                var pdu = random.bytes(random.below(70))
                if !pdu.isEmpty && random.chance(70) { pdu[0] = UInt8(1 + random.below(14)) }
                let out = initiator.receive(pdu[...])
                #expect(out.pdus.allSatisfy { (try? SMPCommand(pdu: $0[...])) != nil })
                switch random.below(4) {
                case 0: _ = initiator.passkeyEntered(UInt32(random.below(2_000_000)))
                case 1: _ = initiator.numericComparisonConfirmed(random.chance(50))
                case 2: _ = initiator.linkEncrypted()
                default: break
                }
            }
        }
    }
}
