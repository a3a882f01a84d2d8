import Testing
import BlemuCore
import BlemuCrypto
import BlemuSMP
@testable import BlemuSecurity

private let peripheralOwner = BondOwner(device: "lock", name: "Lock", address: BluetoothAddress("C4:11:22:33:44:55")!)
private let centralOwner = BondOwner(device: "central", name: "blemu central", address: BluetoothAddress("D1:22:33:44:55:66")!)
private let peripheralAddress = LEAddress(peripheralOwner.address, isRandom: true)
private let centralAddress = LEAddress(centralOwner.address, isRandom: true)
private let handle: UInt16 = 0x0040

/// blemu's central security against blemu's peripheral security over a simulated link and
/// controller: SMP PDUs queued both ways, LE Enable Encryption answered through the peripheral's
/// LE Long Term Key Request, Encryption Change to both when the keys match (else PIN or Key
/// Missing, 0x06, to the central).
private final class Link {
    let scheduler = ManualScheduler()
    let recorder = LogRecorder()
    let central: CentralSecurity
    var peripheral: PeripheralSecurity
    var pending: [() -> Void] = []
    var shown: [String] = []
    var pdusToPeripheral = 0
    var encryptions = 0
    /// The address the central connects from (its controller's public address, for a chat member).
    let centralLocal: LEAddress

    init(central configuration: CentralSecurityConfiguration, peripheral peripheralConfiguration: SecurityConfiguration,
         centralStore: String? = nil, centralLocal: LEAddress = centralAddress) {
        var seed: UInt64 = 10
        self.centralLocal = centralLocal
        central = CentralSecurity(configuration: configuration, owner: centralOwner, localAddress: centralLocal,
                                  scheduler: scheduler, logger: recorder.logger) {
            seed += 1
            return SeededRandom(seed: seed)
        }
        peripheral = Self.makePeripheral(peripheralConfiguration, scheduler: scheduler, recorder: recorder)
        wire()
    }

    static func makePeripheral(_ configuration: SecurityConfiguration, scheduler: ManualScheduler, recorder: LogRecorder) -> PeripheralSecurity {
        var seed: UInt64 = 100
        return PeripheralSecurity(configuration: configuration, owner: peripheralOwner, localAddress: peripheralAddress,
                                  scheduler: scheduler, logger: recorder.logger) {
            seed += 1
            return SeededRandom(seed: seed)
        }
    }

    func wire() {
        central.display = { [unowned self] in shown.append($0) }
        central.sendSMP = { [unowned self] _, pdu in
            pdusToPeripheral += 1
            pending.append { [unowned self] in peripheral.receive(pdu[...], on: handle) }
        }
        peripheral.sendSMP = { [unowned self] _, pdu in
            pending.append { [unowned self] in central.receive(pdu[...], on: handle) }
        }
        central.startEncryption = { [unowned self] _, key in
            encryptions += 1
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
    }

    /// A link; `privateAddress`: the peripheral advertised from (and connects as) this
    /// resolvable private address instead of its identity address.
    func open(privateAddress: BluetoothAddress? = nil) {
        central.linkOpened(handle, peer: privateAddress.map { LEAddress($0, isRandom: true) } ?? peripheralAddress)
        peripheral.linkOpened(handle, peer: centralLocal, local: privateAddress.map { LEAddress($0, isRandom: true) })
    }

    func close() {
        central.linkClosed(handle)
        peripheral.linkClosed(handle)
    }

    /// Secures the link and runs everything until quiet.
    func secure(pair: Bool = false) -> Result<LinkSecurity, CentralSecurityError>? {
        var outcome: Result<LinkSecurity, CentralSecurityError>?
        central.secure(handle, pair: pair) { outcome = $0 }
        pump()
        return outcome
    }

    func pump() {
        var steps = 0
        while !pending.isEmpty && steps < 1000 {
            steps += 1
            pending.removeFirst()()
        }
    }
}

@Suite struct CentralSecurityTests {
    @Test func justWorksBondsBothSidesThenTheNextLinkEncryptsWithoutPairing() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path + "/" + centralOwner.fileName
        let link = Link(central: CentralSecurityConfiguration(bondStorePath: path), peripheral: SecurityConfiguration())
        link.open()
        let first = try #require(link.secure()).get()
        #expect(first.isEncrypted && first.isSecureConnections && !first.isAuthenticated && first.isBonded)
        #expect(link.central.wasPaired(handle))
        let bond = try #require(link.central.bonds.bond(for: peripheralAddress))
        #expect(bond.longTermKey == link.peripheral.bonds.bond(for: centralAddress)?.longTermKey)
        #expect(directory.files().contains(centralOwner.fileName), "the central's bond is in its own file")

        // A new link: LE Enable Encryption with the bond's key, no SMP at all.
        link.close()
        link.open()
        let before = link.pdusToPeripheral
        let second = try #require(link.secure()).get()
        #expect(second.isEncrypted && second.isBonded && !link.central.wasPaired(handle))
        #expect(link.pdusToPeripheral == before, "re-encrypting with a bond sends no SMP")

        // A restarted central reads its bond back from the file.
        let reloaded = BondStore(path: path, owner: centralOwner, attachmentFormat: .none, logger: link.recorder.logger)
        #expect(reloaded.bond(for: peripheralAddress)?.longTermKey == bond.longTermKey)
    }

    /// A peripheral with privacy (Vol 6, Part B, 1.3.2.2) bonds from one resolvable private
    /// address and comes back from another: the central asked for its IRK and identity (IdKey,
    /// Vol 3, Part H, 3.6.1), keeps them with the bond, resolves the new address with the IRK
    /// (ah, 2.2.2) and encrypts with the bond, no SMP.
    @Test func aPeripheralBackUnderANewPrivateAddressIsRecognisedByItsIRK() throws {
        let link = Link(central: CentralSecurityConfiguration(), peripheral: SecurityConfiguration())
        var random = SeededRandom(seed: 7)
        let irk = link.peripheral.identity.resolvingKey
        let before = ResolvablePrivateAddress.make(irk: irk, random: &random)
        let after = ResolvablePrivateAddress.make(irk: irk, random: &random)
        #expect(before != after)
        link.open(privateAddress: before)
        _ = try #require(link.secure()).get()
        let bond = try #require(link.central.bonds.bond(for: LEAddress(before, isRandom: true)))
        #expect(bond.identity == peripheralAddress, "the identity address the peripheral distributed")
        #expect(bond.identityResolvingKey == irk)

        link.close()
        link.open(privateAddress: after)
        let pdus = link.pdusToPeripheral
        let second = try #require(link.secure()).get()
        #expect(second.isEncrypted && second.isBonded && !link.central.wasPaired(handle))
        #expect(link.pdusToPeripheral == pdus, "re-encrypting with the bond sends no SMP")
        #expect(link.recorder.entries.contains { $0.message.contains("with the key of our bond") })

        // An address from another IRK is a stranger: it pairs.
        link.close()
        var other = SeededRandom(seed: 8)
        let stranger = ResolvablePrivateAddress.make(irk: [UInt8](repeating: 0x5A, count: 16), random: &other)
        #expect(link.central.bonds.bond(for: LEAddress(stranger, isRandom: true)) == nil)
    }

    @Test func passkeyEntryWithTheLocksPasskey() throws {
        let link = Link(central: CentralSecurityConfiguration(passkey: 123_456), peripheral: SecurityConfiguration(passkey: 123_456))
        link.open()
        let security = try #require(link.secure()).get()
        #expect(security.isAuthenticated && security.isSecureConnections)
        #expect(link.peripheral.security(of: handle).isAuthenticated)
    }

    @Test func aWrongPasskeyFailsWithConfirmValueFailed() {
        let link = Link(central: CentralSecurityConfiguration(passkey: 123_457), peripheral: SecurityConfiguration(passkey: 123_456))
        link.open()
        let outcome = link.secure()
        guard case .failure(.pairingFailed(let reason, _))? = outcome else {
            Issue.record("expected a pairing failure, got \(String(describing: outcome))")
            return
        }
        #expect(reason == .confirmValueFailed)
        #expect(link.central.bonds.bonds.isEmpty && !link.central.security(of: handle).isEncrypted)
        #expect("\(CentralSecurityError.pairingFailed(reason: .confirmValueFailed, origin: .peer))".contains("Confirm Value Failed (0x04)"))
    }

    /// Vol 3, Part H, 2.3.6: right after a failed pairing the peripheral refuses the next
    /// attempt with Repeated Attempts (0x09); the central's error says to wait and retry, and
    /// the peripheral's log line how long is left.
    @Test func aPairingRetriedRightAfterAFailureIsRefusedAndTheErrorSaysToWaitAndRetry() {
        let link = Link(central: CentralSecurityConfiguration(passkey: 123_457), peripheral: SecurityConfiguration(passkey: 123_456))
        link.open()
        guard case .failure(.pairingFailed(.confirmValueFailed?, _))? = link.secure() else {
            Issue.record("expected Confirm Value Failed first")
            return
        }
        link.close()
        link.open()
        let outcome = link.secure(pair: true)
        guard case .failure(let error)? = outcome, error == .pairingFailed(reason: .repeatedAttempts, origin: .peer) else {
            Issue.record("expected Repeated Attempts from the peripheral, got \(String(describing: outcome))")
            return
        }
        #expect("\(error)".contains("Repeated Attempts (0x09): the peer refuses repeated attempts"))
        #expect("\(error)".contains("wait and retry"))
        #expect(link.recorder.entries.contains { $0.message.contains("refused: repeated attempts, 2.0 s left to wait") })
    }

    @Test func noPasskeyGivenCancelsWithPasskeyEntryFailedAndSaysWhatToGive() {
        let link = Link(central: CentralSecurityConfiguration(), peripheral: SecurityConfiguration(passkey: 123_456))
        link.open()
        guard case .failure(.pairingFailed(.passkeyEntryFailed, .local))? = link.secure() else {
            Issue.record("expected Passkey Entry Failed")
            return
        }
        #expect(link.shown.contains { $0.contains("--passkey") })
    }

    @Test func aPeripheralThatLostTheBondIsPairedAgain() throws {
        let link = Link(central: CentralSecurityConfiguration(), peripheral: SecurityConfiguration())
        link.open()
        _ = try #require(link.secure()).get()
        link.close()
        // The peripheral forgets us (a new one with no bonds on the same link).
        link.peripheral = Link.makePeripheral(SecurityConfiguration(), scheduler: link.scheduler, recorder: link.recorder)
        link.wire()
        link.open()
        let again = try #require(link.secure()).get()
        #expect(again.isEncrypted && link.central.wasPaired(handle))
        #expect(link.encryptions == 3, "bond key refused (0x06), then the new pairing's key")
        #expect(link.shown.contains { $0.contains("pairing again") })
    }

    @Test func aSecurityRequestMakesTheCentralPairOnItsOwn() {
        let link = Link(central: CentralSecurityConfiguration(), peripheral: SecurityConfiguration())
        link.open()
        link.peripheral.securityNeeded(on: handle)
        link.pump()
        #expect(link.central.security(of: handle).isEncrypted && link.central.wasPaired(handle))
    }

    /// A peripheral sets the pace of its Security Requests (Vol 3, Part H, 3.6.7): with a bond
    /// the central encrypts once and lets the rest be, but each is a line, under a budget of ten
    /// a minute, the rest counted on the next line (Docs/REFERENCE.md, Budgets).
    @Test func aFloodOfSecurityRequestsIsLoggedWithinTheBudget() throws {
        let link = Link(central: CentralSecurityConfiguration(), peripheral: SecurityConfiguration())
        link.open()
        #expect(try #require(link.secure()).get().isBonded)
        link.close()
        link.open()
        link.recorder.entries.removeAll()
        let request = SMPSecurityRequest(authRequirements: SMPAuthRequirements(bonding: true, mitm: false, secureConnections: true)).encoded
        for _ in 0..<500 { link.central.receive(request[...], on: handle) }
        link.pump()
        #expect(link.central.security(of: handle).isEncrypted && !link.central.wasPaired(handle), "encrypted once with the bond")
        let asks = { link.recorder.entries.map(\.message).filter { $0.contains("asks for security (Security Request)") } }
        #expect(asks().count == 10)
        link.scheduler.advance(by: .seconds(61))
        link.central.receive(request[...], on: handle)
        #expect(asks().count == 11)
        #expect(asks().last?.hasSuffix("(490 similar lines left out)") == true)
    }

    @Test func theSMPTimerEndsAPairingThePeripheralNeverAnswers() {
        let link = Link(central: CentralSecurityConfiguration(), peripheral: SecurityConfiguration())
        link.open()
        link.central.sendSMP = { _, _ in }   // the peripheral hears nothing
        var outcome: Result<LinkSecurity, CentralSecurityError>?
        link.central.secure(handle) { outcome = $0 }
        link.scheduler.advance(by: .seconds(29))
        #expect(outcome == nil)
        link.scheduler.advance(by: .seconds(2))
        #expect(outcome == .failure(.pairingFailed(reason: nil, origin: .timeout)))
        // SMP is over on this link (Vol 3, Part H, 3.4).
        link.central.secure(handle) { outcome = $0 }
        #expect(outcome == .failure(.smpUnavailable))
    }
}

extension CentralSecurityTests {
    /// The central distributes an IRK and identity address of its own when the peripheral asks
    /// for IdKey (Vol 3, Part H, 3.6.1, 3.6.4, 3.6.5): the peripheral's bond holds them, and the
    /// IRK is kept in the central's identity file, the same on the next run.
    @Test func theCentralDistributesItsIdentityKeptInItsStateDirectory() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let configuration = CentralSecurityConfiguration(bondStorePath: directory.path + "/" + centralOwner.fileName,
                                                         identityPath: directory.path + "/" + centralOwner.identityFileName)
        let link = Link(central: configuration, peripheral: SecurityConfiguration())
        #expect(!directory.files().contains(centralOwner.identityFileName), "no identity before a pairing")
        link.open()
        _ = try #require(link.secure()).get()
        let kept = try #require(link.peripheral.bonds.bond(for: centralAddress))
        #expect(kept.identity == centralAddress, "the peripheral's bond has the central's identity address")
        let irk = try #require(kept.identityResolvingKey)
        #expect(irk == link.central.identity.resolvingKey && irk.count == 16 && irk.contains { $0 != 0 })
        #expect(directory.files().contains(centralOwner.identityFileName))

        // A restarted central reads the same IRK back, and a new bond gets it.
        let again = Link(central: configuration, peripheral: SecurityConfiguration())
        again.open()
        _ = try #require(again.secure(pair: true)).get()
        #expect(again.peripheral.bonds.bond(for: centralAddress)?.identityResolvingKey == irk)
    }

    /// A central that connects from its controller's public address (a chat member, whose
    /// controller advertises the room from its one random address) distributes that public
    /// address as its identity, type public (Vol 3, Part H, 3.6.5), not the static random
    /// address that names its files; the identity file still holds the IRK, and after a restart
    /// the peripheral finds the bond by the address the central connects from.
    @Test func aCentralOnItsPublicAddressDistributesThatAddressAsItsIdentity() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let publicAddress = LEAddress(BluetoothAddress("00:1B:DC:07:32:10")!, isRandom: false)
        let configuration = CentralSecurityConfiguration(bondStorePath: directory.path + "/" + centralOwner.fileName,
                                                         identityPath: directory.path + "/" + centralOwner.identityFileName)
        let link = Link(central: configuration, peripheral: SecurityConfiguration(), centralLocal: publicAddress)
        link.open()
        _ = try #require(link.secure()).get()
        let kept = try #require(link.peripheral.bonds.bond(for: publicAddress))
        #expect(kept.identity == publicAddress, "the identity is the address the central connected from, type public")
        #expect(link.central.identity.address == publicAddress)
        let irk = try #require(kept.identityResolvingKey)
        #expect(directory.files().contains(centralOwner.identityFileName))

        // A restarted central: the same IRK from its file, and the peripheral's bond still found.
        let again = Link(central: configuration, peripheral: SecurityConfiguration(), centralLocal: publicAddress)
        again.peripheral = link.peripheral
        again.wire()
        again.open()
        let secured = try #require(again.secure()).get()
        #expect(secured.isBonded && !again.central.wasPaired(handle), "encrypted with the bond, no pairing")
        #expect(again.central.identity == SMPIdentity(resolvingKey: irk, address: publicAddress))
        #expect(again.peripheral.bonds.bond(for: publicAddress)?.identity == publicAddress)
    }

    /// Without bonding nothing is distributed, and no identity file is written.
    @Test func aCentralThatDoesNotBondMakesNoIdentity() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let configuration = CentralSecurityConfiguration(bondable: false,
                                                         identityPath: directory.path + "/" + centralOwner.identityFileName)
        let link = Link(central: configuration, peripheral: SecurityConfiguration())
        link.open()
        _ = try #require(link.secure()).get()
        #expect(directory.files().isEmpty)
    }
}
