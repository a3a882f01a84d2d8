import Testing
import BlemuCore
import BlemuCrypto
import BlemuSMP
@testable import BlemuSecurity

private let owner = BondOwner(device: "lock", name: "Lock", address: BluetoothAddress("C4:11:22:33:44:55")!)
private let local = LEAddress(owner.address, isRandom: true)
private let centralAddress = LEAddress(BluetoothAddress("D1:22:33:44:55:66")!, isRandom: true)
private let handle: UInt16 = 0x0040

/// A PeripheralSecurity with everything it sends recorded.
private final class Bench {
    let scheduler = ManualScheduler()
    let recorder = LogRecorder()
    let security: PeripheralSecurity
    var sent: [[UInt8]] = []
    var keyAnswers: [[UInt8]?] = []
    var changes: [LinkSecurity] = []

    init(_ configuration: SecurityConfiguration = SecurityConfiguration(), store: BondStore? = nil) {
        var seed: UInt64 = 1
        security = PeripheralSecurity(configuration: configuration, owner: owner, localAddress: local,
                                      scheduler: scheduler, logger: recorder.logger) {
            seed += 1
            return SeededRandom(seed: seed)
        }
        security.sendSMP = { [unowned self] _, pdu in self.sent.append(pdu) }
        security.answerKeyRequest = { [unowned self] _, key in self.keyAnswers.append(key) }
        security.securityChanged = { [unowned self] _, state in self.changes.append(state) }
        security.linkOpened(handle, peer: centralAddress)
    }

    func receive(_ pdu: [UInt8]) -> [[UInt8]] {
        let before = sent.count
        security.receive(pdu[...], on: handle)
        return Array(sent[before...])
    }
}

/// LE legacy Just Works as the central does it, with the toolbox (Vol 3, Part H, 2.3.5.5).
private struct LegacyCentral {
    var random = SeededRandom(seed: 99)
    var features = SMPPairingFeatures(ioCapability: .noInputNoOutput, oobDataPresent: false,
                                      authRequirements: SMPAuthRequirements(bonding: true, mitm: false, secureConnections: false),
                                      maximumEncryptionKeySize: 16, initiatorKeyDistribution: [],
                                      responderKeyDistribution: [.encryptionKey])
    var preq: [UInt8] = []
    var pres: [UInt8] = []
    var mrand: [UInt8] = []
    let tk = [UInt8](repeating: 0, count: 16)

    /// Pairing Request → Response, Confirm → Confirm, Random → Random; returns the STK.
    mutating func pair(_ bench: Bench, wrongConfirm: Bool = false) -> [UInt8]? {
        preq = SMPPairingRequest(features).encoded
        guard let response = bench.receive(preq).first, response.first == SMPCode.pairingResponse.rawValue else { return nil }
        pres = response
        mrand = random.bytes(16)
        var mconfirm = SMPCrypto.c1(k: tk, r: mrand, preq: preq, pres: pres, initiator: centralAddress, responder: local)
        if wrongConfirm { mconfirm[0] ^= 1 }
        guard let sconfirm = bench.receive(SMPPairingConfirm(value: mconfirm).encoded).first,
              let confirm = try? SMPPairingConfirm(pdu: sconfirm[...]) else { return nil }
        guard let answer = bench.receive(SMPPairingRandom(value: mrand).encoded).first,
              let srand = try? SMPPairingRandom(pdu: answer[...]) else { return nil }
        #expect(SMPCrypto.c1(k: tk, r: srand.value, preq: preq, pres: pres, initiator: centralAddress, responder: local) == confirm.value)
        return SMPCrypto.s1(k: tk, r1: srand.value, r2: mrand)
    }
}

@Suite struct PeripheralSecurityTests {
    @Test func legacyJustWorksPairsEncryptsBondsAndReconnects() throws {
        let bench = Bench()
        var central = LegacyCentral()
        let paired = central.pair(bench)
        let stk = try #require(paired)
        #expect(bench.security.isPairing(handle))

        // The central encrypts with the STK: EDIV 0, Rand 0.
        bench.security.longTermKeyRequested(on: handle, randomNumber: 0, encryptedDiversifier: 0)
        #expect(bench.keyAnswers == [stk])
        let before = bench.sent.count
        bench.security.encryptionChanged(on: handle, status: 0, enabled: true)
        // Key distribution: Encryption Information, Central Identification.
        let keys = Array(bench.sent[before...])
        #expect(keys.count == 2)
        let ltk = try SMPEncryptionInformation(pdu: keys[0][...]).longTermKey
        let identification = try SMPCentralIdentification(pdu: keys[1][...])
        #expect(!bench.security.isPairing(handle))
        #expect(bench.recorder.events(.paired).count == 1)
        #expect(bench.recorder.events(.paired).first?.message.contains("bonded") == true)
        #expect(bench.security.security(of: handle) == LinkSecurity(isEncrypted: true, isAuthenticated: false,
                                                                    isSecureConnections: false, encryptionKeySize: 16, isBonded: true))
        let bond = try #require(bench.security.bonds.bond(for: centralAddress))
        #expect(bond.longTermKey.key == ltk)

        // A new link: the central names the distributed key by its EDIV and Rand.
        bench.security.linkClosed(handle)
        bench.security.linkOpened(handle, peer: centralAddress)
        bench.security.longTermKeyRequested(on: handle, randomNumber: identification.randomNumber,
                                            encryptedDiversifier: identification.encryptedDiversifier)
        #expect(bench.keyAnswers.last == ltk)
        bench.security.encryptionChanged(on: handle, status: 0, enabled: true)
        #expect(bench.security.security(of: handle).isBonded)
        // Other EDIV/Rand, or SC's zeros, do not name it.
        bench.security.longTermKeyRequested(on: handle, randomNumber: 0, encryptedDiversifier: 0)
        #expect(bench.keyAnswers.last == .some(nil))
        #expect(bench.recorder.events(.keyMissing).count == 1)
    }

    /// Found by the l2cap fuzz target: an Encryption Change the host never gave a key for
    /// made the link count as encrypted (LE legacy, 16 octets), and encryption-required values
    /// were served on it.
    @Test func anEncryptionChangeWithoutAKeyGivenLeavesTheLinkUnencrypted() {
        let bench = Bench()
        // Nothing asked for a key.
        bench.security.encryptionChanged(on: handle, status: 0, enabled: true)
        #expect(!bench.security.security(of: handle).isEncrypted)
        // A key asked for and refused (no bond): a negative reply.
        bench.security.longTermKeyRequested(on: handle, randomNumber: 0, encryptedDiversifier: 0)
        #expect(bench.keyAnswers == [nil])
        bench.security.encryptionChanged(on: handle, status: 0, enabled: true)
        bench.security.encryptionChanged(on: handle, status: 0, enabled: true, refresh: true)
        #expect(!bench.security.security(of: handle).isEncrypted)
        #expect(bench.changes.isEmpty)
        #expect(bench.recorder.events(.encryptionChanged).isEmpty)
    }

    /// The controller sets the pace of Encryption Change events (a central re-encrypting, a
    /// controller gone wrong): one without a key given for it is a warning each, under the
    /// budget of pairing outcomes, thirty a minute, the rest counted on the next line
    /// (Docs/REFERENCE.md, Budgets).
    @Test func aFloodOfEncryptionChangesWithoutAKeyIsLoggedWithinTheBudget() {
        let bench = Bench()
        for _ in 0..<500 { bench.security.encryptionChanged(on: handle, status: 0, enabled: true) }
        #expect(!bench.security.security(of: handle).isEncrypted)
        let warnings = { bench.recorder.entries.map(\.message).filter { $0.contains("without a key given for it; not treated as encrypted") } }
        #expect(warnings().count == 30)
        #expect(bench.recorder.entries.count == 30, "nothing else is said")
        bench.scheduler.advance(by: .seconds(61))
        bench.security.encryptionChanged(on: handle, status: 0, enabled: true)
        #expect(warnings().count == 31)
        #expect(warnings().last?.hasSuffix("(470 similar lines left out)") == true)
    }

    @Test func aSecureConnectionsBondIsNamedByZeros() {
        let bench = Bench()
        let key = [UInt8](repeating: 0x5A, count: 16)
        bench.security.bonds.save(Bond(peer: centralAddress, longTermKey: SMPLongTermKey(key: key), encryptionKeySize: 16,
                                       secureConnections: true, authenticated: true))
        bench.security.longTermKeyRequested(on: handle, randomNumber: 0, encryptedDiversifier: 0)
        #expect(bench.keyAnswers == [key])
        bench.security.encryptionChanged(on: handle, status: 0, enabled: true)
        #expect(bench.security.security(of: handle) == LinkSecurity(isEncrypted: true, isAuthenticated: true,
                                                                    isSecureConnections: true, encryptionKeySize: 16, isBonded: true))
        #expect(bench.changes.count == 1)
        #expect(bench.recorder.events(.encryptionChanged).count == 1)
        // No key in any log line.
        #expect(!bench.recorder.entries.contains { $0.message.lowercased().contains("5a5a") })
    }

    @Test func noBondNoKey() {
        let bench = Bench()
        bench.security.longTermKeyRequested(on: handle, randomNumber: 1, encryptedDiversifier: 2)
        bench.security.longTermKeyRequested(on: 0x0099, randomNumber: 0, encryptedDiversifier: 0)
        #expect(bench.keyAnswers == [nil, nil])
        #expect(bench.recorder.events(.keyMissing).count == 1)
    }

    @Test func aFailedEncryptionIsLoggedWithTheStatus() {
        let bench = Bench()
        bench.security.encryptionChanged(on: handle, status: 0x3D, enabled: false)
        let entry = bench.recorder.events(.encryptionChanged).first
        #expect(entry?.level == .warning)
        #expect(entry?.metadata[LogKey.hciStatus] == "0x3d")
        #expect(!bench.security.security(of: handle).isEncrypted)
    }

    @Test func aWrongConfirmFailsAndTheNextAttemptWaitsLongerEachTime() {
        let bench = Bench()
        var central = LegacyCentral()
        #expect(central.pair(bench, wrongConfirm: true) == nil)
        #expect(bench.sent.last == [SMPCode.pairingFailed.rawValue, SMPPairingFailedReason.confirmValueFailed.rawValue])
        let failed = bench.recorder.events(.pairingFailed)
        #expect(failed.count == 1)
        #expect(failed.first?.metadata[LogKey.reason] == "0x04")

        // At once: refused with Repeated Attempts, and the responder never saw it.
        let refused = bench.receive(SMPPairingRequest(central.features).encoded)
        #expect(refused == [[SMPCode.pairingFailed.rawValue, SMPPairingFailedReason.repeatedAttempts.rawValue]])
        #expect(!bench.security.isPairing(handle))

        // After the first wait (2 s) pairing may start again; a second failure waits 4 s.
        bench.scheduler.advance(by: .seconds(2))
        #expect(central.pair(bench, wrongConfirm: true) == nil)
        bench.scheduler.advance(by: .seconds(3))
        #expect(bench.receive(SMPPairingRequest(central.features).encoded).first?.last == SMPPairingFailedReason.repeatedAttempts.rawValue)
        bench.scheduler.advance(by: .seconds(1))
        // A success clears the count.
        #expect(central.pair(bench) != nil)
    }

    @Test func theSMPTimerEndsAPairingAfter30Seconds() {
        let bench = Bench()
        let central = LegacyCentral()
        #expect(bench.receive(SMPPairingRequest(central.features).encoded).first?.first == SMPCode.pairingResponse.rawValue)
        bench.scheduler.advance(by: .seconds(29))
        #expect(bench.security.isPairing(handle))
        bench.scheduler.advance(by: .seconds(2))
        #expect(!bench.security.isPairing(handle))
        #expect(bench.recorder.events(.pairingFailed).first?.message.contains("SMP timeout") == true)
        // SMP is over on this link (Vol 3, Part H, 3.4): nothing is answered.
        #expect(bench.receive(SMPPairingRequest(central.features).encoded).isEmpty)
    }

    @Test func aPasskeyMakesTheDeviceDisplayOnlyAndDemandMITM() {
        let bench = Bench(SecurityConfiguration(passkey: 123456))
        var features = LegacyCentral().features
        // A central that can neither type nor show: Just Works, which the device refuses.
        let refused = bench.receive(SMPPairingRequest(features).encoded)
        #expect(refused == [[SMPCode.pairingFailed.rawValue, SMPPairingFailedReason.authenticationRequirements.rawValue]])
        features.ioCapability = .keyboardOnly
        let response = bench.receive(SMPPairingRequest(features).encoded).first ?? []
        let decoded = try? SMPPairingResponse(pdu: response[...])
        #expect(decoded?.features.ioCapability == .displayOnly)
        #expect(decoded?.features.authRequirements.mitm == true)
        // The passkey is not written to the log.
        #expect(!bench.recorder.entries.contains { $0.message.contains("123456") })
    }

    /// A refusal for want of security asks the central to pair (Security Request, Vol 3,
    /// Part H, 3.6.7) with the device's requirements: once per link, never during a pairing.
    @Test func aSecurityRequestGoesOncePerLinkAndNotDuringAPairing() throws {
        let bench = Bench(SecurityConfiguration(passkey: 123456))
        bench.security.securityNeeded(on: handle)
        bench.security.securityNeeded(on: handle)
        #expect(bench.sent.count == 1)
        let request = try SMPSecurityRequest(pdu: (bench.sent.first ?? [])[...])
        #expect(request.authRequirements.bonding && request.authRequirements.mitm && request.authRequirements.secureConnections)
        // A new link may be asked again; one in the middle of a pairing is not.
        bench.security.linkClosed(handle)
        bench.security.linkOpened(handle, peer: centralAddress)
        var features = LegacyCentral().features
        features.ioCapability = .keyboardOnly
        features.authRequirements = SMPAuthRequirements(bonding: true, mitm: true, secureConnections: false)
        #expect(bench.receive(SMPPairingRequest(features).encoded).first?.first == SMPCode.pairingResponse.rawValue)
        let before = bench.sent.count
        bench.security.securityNeeded(on: handle)
        #expect(bench.sent.count == before)
        // An unknown link: nothing.
        bench.security.securityNeeded(on: 0x0099)
        #expect(bench.sent.count == before)
    }

    @Test func closingTheLinkEndsThePairingAndItsTimer() {
        let bench = Bench()
        _ = bench.receive(SMPPairingRequest(LegacyCentral().features).encoded)
        #expect(bench.scheduler.pendingCount == 1)
        bench.security.linkClosed(handle)
        #expect(bench.scheduler.pendingCount == 0)
        #expect(bench.recorder.events(.pairingFailed).count == 1)
    }

    /// Total and bounded: 2000 random PDUs (half with a valid code) and stray key requests
    /// neither trap nor leave the link unusable. Every answer is a well-formed SMP PDU (at most
    /// 65 octets, Vol 3, Part H, 3.2), at most the one SMP timer runs, and after the link
    /// closes a new one on the same handle pairs, once the Repeated Attempts wait the storm's
    /// failures imposed (at most 5 minutes, 2.3.6) is over.
    @Test func randomBytesOnTheSMPChannelNeverTrap() throws {
        let bench = Bench()
        var random = SeededRandom(seed: 5)
        for _ in 0..<2000 {
            let length = Int(random.next() % 70)
            var pdu = random.bytes(length)
            if !pdu.isEmpty && random.next() % 2 == 0 { pdu[0] = UInt8(random.next() % 0x0F) }
            bench.security.receive(pdu[...], on: handle)
            if random.next() % 50 == 0 {
                bench.security.longTermKeyRequested(on: handle, randomNumber: random.next(), encryptedDiversifier: 0)
                bench.security.encryptionChanged(on: handle, status: UInt8(random.next() % 2), enabled: true)
            }
            #expect(bench.scheduler.pendingCount <= 1, "one SMP timer per link at most")
        }
        #expect(!bench.sent.isEmpty, "the storm was answered (Pairing Failed, Pairing Response)")
        for pdu in bench.sent {
            #expect(pdu.count <= 65 && (try? SMPCommand(pdu: pdu[...])) != nil, "sent \(Hex.bytes(pdu))")
        }
        bench.security.linkClosed(handle)
        #expect(bench.scheduler.pendingCount == 0)
        bench.scheduler.advance(by: .seconds(301))
        bench.security.linkOpened(handle, peer: centralAddress)
        var central = LegacyCentral()
        #expect(central.pair(bench) != nil, "a new link pairs after the storm")
    }
}

@Suite struct BondedSubscriptionTests {
    @Test func aBondedCentralsCCCDsReachTheFileAtMostOnceASecondAndWhenTheLinkCloses() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path + "/" + owner.fileName
        let scheduler = ManualScheduler()
        let format = BondAttachmentFormat(fields: ["cccds"]) { $0 }
        let security = PeripheralSecurity(configuration: SecurityConfiguration(bondStorePath: path), owner: owner,
                                          localAddress: local, bondAttachment: format, scheduler: scheduler,
                                          logger: LogRecorder().logger)
        let key = [UInt8](repeating: 7, count: 16)
        security.bonds.save(Bond(peer: centralAddress, longTermKey: SMPLongTermKey(key: key), encryptionKeySize: 16,
                                 secureConnections: true, authenticated: false))
        security.linkOpened(handle, peer: centralAddress)
        security.longTermKeyRequested(on: handle, randomNumber: 0, encryptedDiversifier: 0)
        security.encryptionChanged(on: handle, status: 0, enabled: true)
        func stored() -> BondAttachment? {
            BondStore(path: path, owner: owner, attachmentFormat: format, logger: LogRecorder().logger).bond(for: centralAddress)?.attachment
        }
        func cccds(_ values: [String: Int64]) -> BondAttachment { BondAttachment(["cccds": .table(values)]) }
        security.setBondAttachment(cccds(["16": 1]), on: handle, onlyIfBondedLink: true, write: .soon)
        security.setBondAttachment(cccds(["16": 1, "32": 2]), on: handle, onlyIfBondedLink: true, write: .soon)
        #expect(stored() == .empty, "not written at once")
        scheduler.advance(by: .seconds(1))
        #expect(stored() == cccds(["16": 1, "32": 2]))
        security.setBondAttachment(cccds(["32": 2]), on: handle, onlyIfBondedLink: true, write: .soon)
        security.linkClosed(handle)
        #expect(stored() == cccds(["32": 2]), "written when the link closes")
        #expect(scheduler.pendingCount == 0)
    }
}
