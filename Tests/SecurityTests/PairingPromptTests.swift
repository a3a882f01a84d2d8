import Testing
import BlemuCore
import BlemuCrypto
import BlemuSMP
@testable import BlemuSecurity

private let peripheralOwner = BondOwner(device: "host", name: "host peripheral", address: BluetoothAddress("C4:11:22:33:44:55")!)
private let centralOwner = BondOwner(device: "central", name: "host central", address: BluetoothAddress("D1:22:33:44:55:66")!)
private let peripheralAddress = LEAddress(peripheralOwner.address, isRandom: true)
private let centralAddress = LEAddress(centralOwner.address, isRandom: true)
private let handle: UInt16 = 0x0041

/// A programmed central (`CentralSecurity`) and a programmed peripheral (`PeripheralSecurity`)
/// on one simulated link, both asking their questions through one `PairingPrompts`, as the
/// programmable host has them: SMP PDUs queued both ways, LE Enable Encryption answered through
/// the peripheral's LE Long Term Key Request, Encryption Change to both when the keys match.
private final class Bench {
    let scheduler = ManualScheduler()
    let recorder = LogRecorder()
    let prompts = PairingPrompts()
    let central: CentralSecurity
    let peripheral: PeripheralSecurity
    var pending: [() -> Void] = []
    /// Every SMP PDU, as (sent by the central?, PDU).
    var trace: [(Bool, [UInt8])] = []
    var asked: [PairingPrompt] = []
    var dropped: [UInt64] = []
    var centralRose: [LESecurityLevel] = []
    var peripheralRose: [LESecurityLevel] = []
    var centralFailed: [SecureFailure] = []
    var peripheralFailed: [SecureFailure] = []
    /// Drops what the central sends (a central that never answers).
    var centralMuted = false
    /// How many of the peripheral's first Security Requests never reach the central (a central
    /// that listens for them only from some moment on).
    var securityRequestsLost = 0
    /// The controller fails every encryption with this HCI status.
    var encryptionFails: UInt8?

    /// `centralLocal`: the address the central's link was made from, told to the central
    /// (`linkOpened(local:)`) when `tellCentral`, and always the peer the peripheral sees.
    init(central centralSettings: PairingSettings, peripheral peripheralSettings: PairingSettings,
         peripheralConfiguration: SecurityConfiguration = SecurityConfiguration(),
         centralLocal: LEAddress? = nil, tellCentral: Bool = true) {
        var seed: UInt64 = 10
        central = CentralSecurity(configuration: CentralSecurityConfiguration(), owner: centralOwner, localAddress: centralAddress,
                                  scheduler: scheduler, logger: recorder.logger) {
            seed += 1
            return SeededRandom(seed: seed)
        }
        var peripheralSeed: UInt64 = 100
        peripheral = PeripheralSecurity(configuration: peripheralConfiguration, owner: peripheralOwner, localAddress: peripheralAddress,
                                        scheduler: scheduler, logger: recorder.logger) {
            peripheralSeed += 1
            return SeededRandom(seed: peripheralSeed)
        }
        central.pairingSettings = centralSettings
        peripheral.pairingSettings = peripheralSettings
        central.prompts = prompts
        peripheral.prompts = prompts
        prompts.prompted = { [unowned self] in asked.append($0) }
        prompts.dropped = { [unowned self] in dropped.append($0) }
        central.securityRose = { [unowned self] _, security in centralRose.append(security.level) }
        peripheral.securityRose = { [unowned self] _, security in peripheralRose.append(security.level) }
        central.securityFailed = { [unowned self] _, failure, _ in centralFailed.append(failure) }
        peripheral.securityFailed = { [unowned self] _, failure, _ in peripheralFailed.append(failure) }
        central.sendSMP = { [unowned self] _, pdu in
            trace.append((true, pdu))
            guard !centralMuted else { return }
            pending.append { [unowned self] in peripheral.receive(pdu[...], on: handle) }
        }
        peripheral.sendSMP = { [unowned self] _, pdu in
            trace.append((false, pdu))
            if pdu.first == SMPCode.securityRequest.rawValue, securityRequestsLost > 0 {
                securityRequestsLost -= 1
                return
            }
            pending.append { [unowned self] in central.receive(pdu[...], on: handle) }
        }
        central.startEncryption = { [unowned self] _, key in
            if let status = encryptionFails {
                pending.append { [unowned self] in
                    peripheral.encryptionChanged(on: handle, status: status, enabled: false)
                    central.encryptionChanged(on: handle, status: status, enabled: false)
                }
                return
            }
            pending.append { [unowned self] in
                peripheral.answerKeyRequest = { [unowned self] _, answer in
                    pending.append { [unowned self] in
                        if answer == key.key {
                            peripheral.encryptionChanged(on: handle, status: 0, enabled: true)
                            central.encryptionChanged(on: handle, status: 0, enabled: true)
                        } else {
                            central.encryptionChanged(on: handle, status: 0x06, enabled: false)
                        }
                    }
                }
                peripheral.longTermKeyRequested(on: handle, randomNumber: key.randomNumber,
                                                encryptedDiversifier: key.encryptedDiversifier)
            }
        }
        central.linkOpened(handle, peer: peripheralAddress, local: tellCentral ? centralLocal : nil)
        peripheral.linkOpened(handle, peer: centralLocal ?? centralAddress)
    }

    func pump() {
        var steps = 0
        while !pending.isEmpty && steps < 2000 {
            steps += 1
            pending.removeFirst()()
        }
    }

    /// The central secures the link to `level`; runs until quiet.
    func secure(_ level: LESecurityLevel) -> SecureOutcomeBox {
        let box = SecureOutcomeBox()
        central.secure(handle, level: level) { box.outcome = $0 }
        pump()
        return box
    }

    func prompt(central: Bool) -> PairingPrompt? {
        asked.last { $0.isCentral == central && !dropped.contains($0.id) }
    }

    func answer(_ prompt: PairingPrompt?, _ answer: PairingAnswer) throws {
        let prompt = try #require(prompt)
        try prompts.answer(prompt.id, answer)
        pump()
    }

    /// Both users answer what they were asked as a user reading both screens would: yes to a
    /// confirmation, the passkey the other side shows.
    func answerEverything() throws {
        var rounds = 0
        while let open = prompts.waiting.first(where: { if case .passkeyDisplay = $0.kind { false } else { true } }), rounds < 4 {
            rounds += 1
            switch open.kind {
            case .passkeyEntry:
                let shown = try #require(asked.compactMap { if case .passkeyDisplay(let p) = $0.kind, $0.isCentral != open.isCentral { p } else { nil } }.last)
                try answer(open, .passkey(shown))
            default:
                try answer(open, .confirm(true))
            }
        }
    }

    /// The Security Requests the peripheral sent (lost or not).
    var securityRequests: Int { trace.filter { !$0.0 && $0.1.first == SMPCode.securityRequest.rawValue }.count }

    /// The reason of the Pairing Failed the central (or the peripheral) sent, if one was sent.
    func failure(sentByCentral: Bool) -> UInt8? {
        trace.first { $0.0 == sentByCentral && $0.1.first == SMPCode.pairingFailed.rawValue }.flatMap { $0.1.count == 2 ? $0.1[1] : nil }
    }
}

private final class SecureOutcomeBox {
    var outcome: SecureOutcome?
    var failure: SecureFailure? { if case .failed(let failure, _)? = outcome { failure } else { nil } }
    var reachedLevel: LESecurityLevel? { if case .reached(let security, _)? = outcome { security.level } else { nil } }
}

private func settings(_ io: SMPIOCapability, mitm: Bool = true) -> PairingSettings {
    PairingSettings(ioCapability: io, mitm: mitm)
}

@Suite struct PairingPromptTests {
    // MARK: Every prompt kind, answered yes

    @Test func justWorksIsAskedOfBothSidesAndYesPairsAtLevelTwo() throws {
        let bench = Bench(central: settings(.noInputNoOutput), peripheral: settings(.noInputNoOutput))
        let outcome = bench.secure(.encrypted)
        #expect(bench.prompt(central: true)?.kind == .justWorks)
        #expect(bench.prompt(central: false)?.kind == .justWorks)
        #expect(outcome.outcome == nil, "the pairing waits for both answers")
        try bench.answer(bench.prompt(central: false), .confirm(true))
        try bench.answer(bench.prompt(central: true), .confirm(true))
        #expect(outcome.reachedLevel == .encrypted)
        #expect(bench.peripheral.security(of: handle).level == .encrypted)
        #expect(bench.prompts.waiting.isEmpty)
    }

    @Test func numericComparisonShowsBothSidesTheSameValueAndYesReachesLevelFour() throws {
        let bench = Bench(central: settings(.displayYesNo), peripheral: settings(.displayYesNo))
        let outcome = bench.secure(.authenticatedSecureConnections)
        let centralValue = try #require(bench.prompt(central: true)?.kind.shownValue)
        #expect(bench.prompt(central: true)?.kind == .numericComparison(centralValue))
        #expect(bench.prompt(central: false)?.kind == .numericComparison(centralValue))
        try bench.answer(bench.prompt(central: true), .confirm(true))
        try bench.answer(bench.prompt(central: false), .confirm(true))
        #expect(outcome.reachedLevel == .authenticatedSecureConnections)
        #expect(bench.centralRose == [.authenticatedSecureConnections])
        #expect(bench.peripheralRose == [.authenticatedSecureConnections])
    }

    @Test(arguments: [true, false])
    func passkeyEntryTypedFromTheOtherSidesDisplayReachesLevelFour(centralTypes: Bool) throws {
        let bench = Bench(central: settings(centralTypes ? .keyboardOnly : .displayOnly),
                          peripheral: settings(centralTypes ? .displayOnly : .keyboardOnly))
        let outcome = bench.secure(.authenticated)
        let typing = try #require(bench.prompt(central: centralTypes))
        let showing = try #require(bench.prompt(central: !centralTypes))
        #expect(typing.kind == .passkeyEntry)
        let shown = try #require(showing.kind.shownValue)
        #expect(showing.kind == .passkeyDisplay(shown) && shown <= 999_999)
        try bench.answer(typing, .passkey(shown))
        #expect(outcome.reachedLevel == .authenticatedSecureConnections)
        // The display needed no answer; it closed with its pairing.
        #expect(bench.prompts.waiting.isEmpty && bench.dropped.contains(showing.id))
    }

    /// A central that connects from another address than its `localAddress` (the programmable
    /// host, from its public or its static random address): SMP hashes the link's own address
    /// (Vol 3, Part H, 2.2.6 – 2.2.8: ia/iat), else the peer's DHKey check fails (0x0B), and
    /// the identity it distributes (3.6.5) is that address, which the peer keeps the bond under.
    @Test(arguments: [true, false])
    func aCentralLinkMadeFromAnotherAddressPairsWithThatAddress(told: Bool) throws {
        let local = LEAddress(BluetoothAddress("C7:00:00:00:00:42")!, isRandom: true)
        let bench = Bench(central: settings(.noInputNoOutput), peripheral: settings(.noInputNoOutput), centralLocal: local, tellCentral: told)
        let outcome = bench.secure(.encrypted)
        try bench.answerEverything()
        if told {
            #expect(outcome.reachedLevel == .encrypted)
            let bond = try #require(bench.peripheral.bonds.bonds.last)
            #expect(bond.identity == local)
        } else {
            #expect(bench.failure(sentByCentral: false) == SMPPairingFailedReason.dhKeyCheckFailed.rawValue)
        }
    }

    // MARK: Answered no: the reason of Vol 3, Part H, 3.5.5

    @Test(arguments: [true, false])
    func numericComparisonRefusedSendsNumericComparisonFailed(byCentral: Bool) throws {
        let bench = Bench(central: settings(.displayYesNo), peripheral: settings(.displayYesNo))
        let outcome = bench.secure(.authenticated)
        try bench.answer(bench.prompt(central: byCentral), .confirm(false))
        #expect(bench.failure(sentByCentral: byCentral) == 0x0C)
        #expect(outcome.failure == .pairingFailure)
        #expect(bench.prompts.waiting.isEmpty, "the other side's question went with the pairing")
        #expect(bench.peripheral.security(of: handle).level == .none)
    }

    @Test(arguments: [true, false])
    func justWorksRefusedSendsUnspecifiedReason(byCentral: Bool) throws {
        let bench = Bench(central: settings(.noInputNoOutput), peripheral: settings(.noInputNoOutput))
        let outcome = bench.secure(.encrypted)
        try bench.answer(bench.prompt(central: byCentral), .reject)
        #expect(bench.failure(sentByCentral: byCentral) == 0x08)
        #expect(outcome.failure == .pairingFailure)
    }

    @Test(arguments: [true, false])
    func passkeyEntryRefusedSendsPasskeyEntryFailed(byTheTypingSide: Bool) throws {
        let bench = Bench(central: settings(.keyboardOnly), peripheral: settings(.displayOnly))
        let outcome = bench.secure(.authenticated)
        // The central types; the peripheral shows (and may cancel).
        try bench.answer(bench.prompt(central: byTheTypingSide), .reject)
        #expect(bench.failure(sentByCentral: byTheTypingSide) == 0x01)
        #expect(outcome.failure == .pairingFailure)
        #expect(bench.prompts.waiting.isEmpty)
    }

    // MARK: Not answered

    @Test func anUnansweredPromptEndsWithTheSMPTimeoutAndCannotBeAnsweredAfter() throws {
        let bench = Bench(central: settings(.displayYesNo), peripheral: settings(.displayYesNo))
        let outcome = bench.secure(.authenticated)
        let centralPrompt = try #require(bench.prompt(central: true))
        let peripheralPrompt = try #require(bench.prompt(central: false))
        bench.scheduler.advance(by: .seconds(29))
        #expect(outcome.outcome == nil && bench.prompts.waiting.count == 2)
        bench.scheduler.advance(by: .seconds(1))
        bench.pump()
        #expect(outcome.failure == .pairingFailure)
        #expect(bench.dropped.contains(centralPrompt.id) && bench.dropped.contains(peripheralPrompt.id))
        #expect(throws: PairingAnswerError.unknownPairing) { try bench.prompts.answer(centralPrompt.id, .confirm(true)) }
        #expect(bench.central.security(of: handle).level == .none)
    }

    @Test func theLinkClosingDropsThePromptAndSecureReportsTheConnectionDied() throws {
        let bench = Bench(central: settings(.noInputNoOutput), peripheral: settings(.noInputNoOutput))
        let outcome = bench.secure(.encrypted)
        let prompt = try #require(bench.prompt(central: false))
        bench.central.linkClosed(handle)
        bench.peripheral.linkClosed(handle)
        #expect(outcome.failure == .connectionDied)
        #expect(bench.prompts.waiting.isEmpty && bench.dropped.contains(prompt.id))
        #expect(throws: PairingAnswerError.unknownPairing) { try bench.prompts.answer(prompt.id, .confirm(true)) }
    }

    @Test func anAnswerThatDoesNotFitIsRefusedAndThePromptStaysOpen() throws {
        let bench = Bench(central: settings(.keyboardOnly), peripheral: settings(.displayOnly))
        let outcome = bench.secure(.authenticated)
        let typing = try #require(bench.prompt(central: true))
        #expect(throws: PairingAnswerError.self) { try bench.prompts.answer(typing.id, .confirm(true)) }
        #expect(throws: PairingAnswerError.self) { try bench.prompts.answer(typing.id, .passkey(1_000_000)) }
        #expect(throws: PairingAnswerError.unknownPairing) { try bench.prompts.answer(typing.id + 100, .reject) }
        #expect(bench.prompts.waiting.map(\.id).contains(typing.id) && outcome.outcome == nil)
        try bench.answerEverything()
        #expect(outcome.reachedLevel == .authenticatedSecureConnections)
    }

    // MARK: The method each IO capability pairing takes (Vol 3, Part H, 2.3.5.1, Table 2.8)

    @Test(arguments: SMPIOCapability.allCases)
    func eachIOCapabilityPairingAsksWhatTable2_8Says(centralIO: SMPIOCapability) throws {
        for peripheralIO in SMPIOCapability.allCases {
            let bench = Bench(central: settings(centralIO), peripheral: settings(peripheralIO))
            let outcome = bench.secure(.encrypted)
            let method = SMPPairingMethod.fromIOCapabilities(initiator: centralIO, responder: peripheralIO, secureConnections: true)
            let centralKinds = bench.asked.filter(\.isCentral).map(\.kind)
            let peripheralKinds = bench.asked.filter { !$0.isCentral }.map(\.kind)
            switch method {
            case .justWorks:
                #expect(centralKinds == [.justWorks] && peripheralKinds == [.justWorks], "\(centralIO) / \(peripheralIO)")
            case .numericComparison:
                #expect(centralKinds.count == 1 && centralKinds == peripheralKinds, "\(centralIO) / \(peripheralIO)")
                #expect(centralKinds.first?.shownValue != nil)
            case .passkeyEntry(let roles):
                let centralShows = roles == .initiatorDisplays
                let bothType = roles == .bothInput
                #expect(centralKinds.count == 1 && peripheralKinds.count == 1, "\(centralIO) / \(peripheralIO)")
                #expect((centralKinds.first == .passkeyEntry) == (!centralShows || bothType), "\(centralIO) / \(peripheralIO)")
                #expect((peripheralKinds.first == .passkeyEntry) == (centralShows || bothType), "\(centralIO) / \(peripheralIO)")
                if bothType {
                    try bench.answer(bench.prompt(central: true), .passkey(123_456))
                    try bench.answer(bench.prompt(central: false), .passkey(123_456))
                }
            case .outOfBand:
                Issue.record("no OOB data is ever offered")
            }
            try bench.answerEverything()
            let level: LESecurityLevel = method == .justWorks ? .encrypted : .authenticatedSecureConnections
            #expect(outcome.reachedLevel == level, "\(centralIO) / \(peripheralIO)")
            #expect(bench.peripheral.security(of: handle).level == level, "\(centralIO) / \(peripheralIO)")
        }
    }

    // MARK: Levels (Vol 3, Part C, 10.2.1)

    @Test func aLevelJustWorksCannotGiveIsAnAuthenticationFailure() throws {
        let bench = Bench(central: settings(.keyboardDisplay), peripheral: settings(.noInputNoOutput))
        let outcome = bench.secure(.authenticated)
        // MITM was asked for (level 3), the peripheral has no IO: Just Works, unauthenticated.
        let request = try #require(bench.trace.first { $0.0 && $0.1.first == SMPCode.pairingRequest.rawValue })
        #expect(SMPAuthRequirements(rawValue: request.1[3]).mitm)
        try bench.answerEverything()
        #expect(outcome.failure == .authenticationFailure)
        #expect(bench.central.security(of: handle).level == .encrypted)
        #expect(bench.centralRose == [.encrypted])
    }

    @Test func aLinkAtTheLevelAlreadyAnswersAtOnce() throws {
        let bench = Bench(central: settings(.displayYesNo), peripheral: settings(.displayYesNo))
        let first = bench.secure(.authenticated)
        try bench.answerEverything()
        #expect(first.reachedLevel == .authenticatedSecureConnections)
        let pdus = bench.trace.count
        let again = bench.secure(.authenticatedSecureConnections)
        #expect(again.outcome == .reached(bench.central.security(of: handle), already: true))
        let fromPeripheral = SecureOutcomeBox()
        bench.peripheral.secure(handle, level: .authenticated) { fromPeripheral.outcome = $0 }
        #expect(fromPeripheral.outcome == .reached(bench.peripheral.security(of: handle), already: true))
        #expect(bench.trace.count == pdus, "nothing was sent")
    }

    @Test func theLevelOfALinkSecurity() {
        #expect(LinkSecurity.unencrypted.level == .none)
        #expect(LinkSecurity(isEncrypted: true, encryptionKeySize: 16).level == .encrypted)
        #expect(LinkSecurity(isEncrypted: true, isAuthenticated: true, encryptionKeySize: 16).level == .authenticated)
        #expect(LinkSecurity(isEncrypted: true, isAuthenticated: true, isSecureConnections: true, encryptionKeySize: 15).level == .authenticated)
        #expect(LinkSecurity(isEncrypted: true, isAuthenticated: true, isSecureConnections: true, encryptionKeySize: 16).level
                == .authenticatedSecureConnections)
    }

    // MARK: The peripheral's Security Request (Vol 3, Part H, 3.6.7)

    @Test func thePeripheralAsksWithASecurityRequestAndTheCentralPairsToItsLevel() throws {
        let bench = Bench(central: settings(.displayYesNo, mitm: false), peripheral: settings(.displayYesNo, mitm: false))
        let outcome = SecureOutcomeBox()
        bench.peripheral.secure(handle, level: .authenticated) { outcome.outcome = $0 }
        bench.pump()
        let request = try #require(bench.trace.first)
        #expect(!request.0 && request.1.first == SMPCode.securityRequest.rawValue)
        #expect(SMPAuthRequirements(rawValue: request.1[1]).mitm, "level 3 asks for MITM protection")
        // The central answers with a Pairing Request that asks for MITM too (2.4.6), so both compare.
        #expect(bench.prompt(central: true)?.kind.shownValue != nil)
        try bench.answerEverything()
        #expect(outcome.reachedLevel == .authenticatedSecureConnections)
        #expect(bench.peripheralRose == [.authenticatedSecureConnections])
    }

    @Test func aSecurityRequestNobodyAnswersFailsAfterThirtySeconds() {
        let bench = Bench(central: settings(.noInputNoOutput), peripheral: settings(.noInputNoOutput))
        bench.centralMuted = true
        let outcome = SecureOutcomeBox()
        // The central hears the request but what it sends never arrives.
        bench.peripheral.secure(handle, level: .encrypted) { outcome.outcome = $0 }
        bench.pump()
        bench.scheduler.advance(by: .seconds(29))
        #expect(outcome.outcome == nil)
        bench.scheduler.advance(by: .seconds(1))
        #expect(outcome.failure == .pairingFailure)
    }

    @Test func aSecurityRequestTheCentralMissedIsSentAgainAndThePairingItStartsReachesTheLevel() throws {
        let bench = Bench(central: settings(.noInputNoOutput, mitm: false), peripheral: settings(.noInputNoOutput, mitm: false))
        bench.securityRequestsLost = 2
        let outcome = SecureOutcomeBox()
        bench.peripheral.secure(handle, level: .encrypted) { outcome.outcome = $0 }
        bench.pump()
        #expect(bench.securityRequests == 1)
        bench.scheduler.advance(by: .milliseconds(999))
        bench.pump()
        #expect(bench.securityRequests == 1, "not before a second has passed")
        bench.scheduler.advance(by: .milliseconds(1))
        bench.pump()
        #expect(bench.securityRequests == 2)
        bench.scheduler.advance(by: .seconds(2))
        bench.pump()
        #expect(bench.securityRequests == 3, "the third reaches the central")
        try bench.answerEverything()
        #expect(outcome.reachedLevel == .encrypted)
        bench.scheduler.advance(by: .seconds(60))
        bench.pump()
        #expect(bench.securityRequests == 3, "none once the central answered")
    }

    @Test func aCentralThatNeverAnswersIsAskedFiveTimesWithinTheThirtySeconds() {
        let bench = Bench(central: settings(.noInputNoOutput), peripheral: settings(.noInputNoOutput))
        bench.securityRequestsLost = .max
        let outcome = SecureOutcomeBox()
        bench.peripheral.secure(handle, level: .authenticated) { outcome.outcome = $0 }
        bench.pump()
        var sentAt = [0]
        for second in 1...40 {
            let before = bench.securityRequests
            bench.scheduler.advance(by: .seconds(1))
            bench.pump()
            if bench.securityRequests > before { sentAt.append(second) }
        }
        #expect(sentAt == [0, 1, 3, 7, 15])
        #expect(bench.trace.filter { !$0.0 }.allSatisfy { SMPAuthRequirements(rawValue: $0.1[1]).mitm },
                "every one asks for the MITM protection level 3 needs")
        #expect(outcome.failure == .pairingFailure)
    }

    @Test func aCentralThatRefusesIsNotAskedAgain() {
        let bench = Bench(central: settings(.noInputNoOutput), peripheral: settings(.noInputNoOutput))
        let outcome = SecureOutcomeBox()
        bench.peripheral.secure(handle, level: .encrypted) { outcome.outcome = $0 }
        // The central answers the request with Pairing Failed, Pairing Not Supported (3.5.5).
        bench.peripheral.receive([SMPCode.pairingFailed.rawValue, 0x05][...], on: handle)
        bench.pump()
        #expect(outcome.failure == .pairingFailure, "at once, not after the 30 s")
        bench.scheduler.advance(by: .seconds(40))
        bench.pump()
        #expect(bench.securityRequests == 1)
    }

    @Test func thePeripheralsSecureEndsWithThePairingFailure() throws {
        let bench = Bench(central: settings(.displayYesNo), peripheral: settings(.displayYesNo))
        let outcome = SecureOutcomeBox()
        bench.peripheral.secure(handle, level: .authenticated) { outcome.outcome = $0 }
        bench.pump()
        try bench.answer(bench.prompt(central: true), .confirm(false))
        #expect(outcome.failure == .pairingFailure)
    }

    @Test func aFailureIsToldOnceOnEachSideThroughSecureOrSecurityFailed() throws {
        // The central secures; the peripheral, which did not ask, hears of the failure through securityFailed.
        let bench = Bench(central: settings(.displayYesNo), peripheral: settings(.displayYesNo))
        let outcome = bench.secure(.authenticated)
        try bench.answer(bench.prompt(central: false), .confirm(false))
        #expect(outcome.failure == .pairingFailure && bench.centralFailed.isEmpty)
        #expect(bench.peripheralFailed == [.pairingFailure])

        // The peripheral secures (Security Request); the central pairs on its own and refuses.
        let other = Bench(central: settings(.displayYesNo), peripheral: settings(.displayYesNo))
        let asked = SecureOutcomeBox()
        other.peripheral.secure(handle, level: .authenticated) { asked.outcome = $0 }
        other.pump()
        try other.answer(other.prompt(central: true), .confirm(false))
        #expect(asked.failure == .pairingFailure && other.peripheralFailed.isEmpty)
        #expect(other.centralFailed == [.pairingFailure])

        // The controller cannot encrypt with the pairing's key: an encryption failure, told once
        // on each side although it also ends the pairing.
        let failing = Bench(central: settings(.noInputNoOutput), peripheral: settings(.noInputNoOutput))
        failing.encryptionFails = 0x3D
        let encrypting = failing.secure(.encrypted)
        try failing.answerEverything()
        #expect(encrypting.failure == .encryptionFailure && failing.centralFailed.isEmpty)
        #expect(failing.peripheralFailed == [.encryptionFailure])
        #expect(!failing.central.isPairing(handle) && !failing.peripheral.isPairing(handle))

        // The link closing is `disconnected`'s to tell, not a security failure.
        let closing = Bench(central: settings(.noInputNoOutput), peripheral: settings(.noInputNoOutput))
        closing.central.secure(handle, pair: true) { _ in }
        closing.pump()
        closing.central.linkClosed(handle)
        closing.peripheral.linkClosed(handle)
        #expect(closing.centralFailed.isEmpty && closing.peripheralFailed.isEmpty)
    }

    @Test func aResetForgetsTheWaitAfterARefusedPairing() throws {
        let bench = Bench(central: settings(.displayYesNo), peripheral: settings(.displayYesNo))
        _ = bench.secure(.authenticated)
        try bench.answer(bench.prompt(central: false), .confirm(false))
        // 2.3.6: a new attempt at once is refused with Repeated Attempts (0x09)...
        bench.trace = []
        let refused = bench.secure(.authenticated)
        #expect(bench.failure(sentByCentral: false) == 0x09 && refused.failure == .pairingFailure)
        // ...unless the owner reset the peripheral's memory of failures.
        bench.peripheral.forgetPairingAttempts()
        bench.trace = []
        let again = bench.secure(.authenticated)
        #expect(bench.failure(sentByCentral: false) == nil && bench.prompt(central: false) != nil)
        try bench.answerEverything()
        #expect(again.reachedLevel == .authenticatedSecureConnections)
    }

    // MARK: Settings at run time, bonds

    @Test func settingsChangedOnAnOpenLinkTakeTheNextPairing() throws {
        let bench = Bench(central: settings(.displayYesNo), peripheral: settings(.noInputNoOutput))
        bench.peripheral.pairingSettings = settings(.displayYesNo)
        bench.central.pairingSettings = PairingSettings(ioCapability: .displayYesNo, bondable: false)
        let outcome = bench.secure(.authenticated)
        #expect(bench.prompt(central: false)?.kind.shownValue != nil, "Numeric Comparison: the new IO capability")
        let request = try #require(bench.trace.first { $0.0 && $0.1.first == SMPCode.pairingRequest.rawValue })
        #expect(!SMPAuthRequirements(rawValue: request.1[3]).bonding)
        try bench.answerEverything()
        #expect(outcome.reachedLevel == .authenticatedSecureConnections)
        #expect(bench.central.bonds.bond(for: peripheralAddress) == nil, "not bondable: no bond")
    }

    @Test func bondQueriesFindAndForgetAPeerAcrossBothStores() throws {
        let bench = Bench(central: settings(.noInputNoOutput), peripheral: settings(.noInputNoOutput))
        let outcome = bench.secure(.encrypted)
        try bench.answerEverything()
        #expect(outcome.reachedLevel == .encrypted)
        let stores = [bench.peripheral.bonds, bench.central.bonds]
        #expect(BondQueries.isBonded(peripheralAddress, in: stores))
        #expect(BondQueries.isBonded(centralAddress, in: stores))
        #expect(!BondQueries.isBonded(LEAddress(peripheralOwner.address, isRandom: false), in: stores), "the type counts")
        #expect(BondQueries.forget(peripheralAddress, in: stores))
        #expect(!BondQueries.isBonded(peripheralAddress, in: stores))
        #expect(!BondQueries.forget(peripheralAddress, in: stores))
        #expect(BondQueries.isBonded(centralAddress, in: stores), "the other peer's bond stays")
    }
}
