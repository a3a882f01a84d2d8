import BlemuCore
import BlemuCrypto
import BlemuSMP
import Glibc
import Logging

/// What blemu's central offers when it pairs, and where its bonds live.
public struct CentralSecurityConfiguration: Sendable {
    /// The IO capability the central declares (default KeyboardDisplay: it can type a passkey
    /// given with `--passkey` and show one or a comparison value on stderr).
    public var ioCapability: SMPIOCapability
    public var bondable: Bool
    /// The passkey the user types for a peripheral that shows one (or is labelled with one).
    public var passkey: UInt32?
    /// Numeric Comparison: accept the value (after showing it). False: reject (0x0C).
    public var acceptNumericComparison: Bool
    /// The central's bond file (nil: bonds only in memory).
    public var bondStorePath: String?
    public var maximumBonds: Int
    /// The central's identity file, which keeps its IRK (nil: a new IRK each run).
    public var identityPath: String?

    public init(ioCapability: SMPIOCapability = .keyboardDisplay, bondable: Bool = true, passkey: UInt32? = nil,
                acceptNumericComparison: Bool = true, bondStorePath: String? = nil, maximumBonds: Int = 16,
                identityPath: String? = nil) {
        self.ioCapability = ioCapability
        self.bondable = bondable
        self.passkey = passkey
        self.acceptNumericComparison = acceptNumericComparison
        self.bondStorePath = bondStorePath
        self.maximumBonds = maximumBonds
        self.identityPath = identityPath
    }

    /// `identity`: the IRK and identity address offered (IdKey in the initiator key
    /// distribution, Vol 3, Part H, 3.6.1) and sent when the peripheral asks for them.
    func initiatorConfiguration(identity: SMPIdentity?) -> SMPInitiatorConfiguration {
        // The MITM flag whenever the user can compare or type (as Android does): the IO
        // capabilities then choose Numeric Comparison or Passkey Entry over Just Works.
        SMPInitiatorConfiguration(ioCapability: ioCapability, bondable: bondable,
                                  requestMITM: ioCapability != .noInputNoOutput, secureConnections: true,
                                  identity: identity)
    }
}

/// Why securing a link failed.
public enum CentralSecurityError: Error, Equatable, Sendable, CustomStringConvertible {
    /// Pairing Failed: sent by us (`local`), by the peripheral (`peer`), or the SMP timeout.
    case pairingFailed(reason: SMPPairingFailedReason?, origin: SMPFailureOrigin)
    /// The controller could not encrypt (Encryption Change with this HCI status).
    case encryptionFailed(status: UInt8)
    case linkClosed
    /// SMP timed out on this link earlier (Vol 3, Part H, 3.4): no pairing until a new link.
    case smpUnavailable

    public var description: String {
        switch self {
        case let .pairingFailed(reason, origin):
            let text = reason.map { "\(PeripheralSecurity.describe($0)) (\(Hex.byte($0.rawValue)))" } ?? "no reason given"
            switch origin {
            case .local: return "pairing failed: \(text), blemu ended it"
            case .peer where reason == .repeatedAttempts:
                // Vol 3, Part H, 2.3.6: the peer keeps a waiting interval after a failed pairing
                // and refuses attempts inside it. Only the peer knows how long is left.
                return "pairing failed: the peripheral answered \(text): the peer refuses repeated attempts after "
                    + "a failed pairing (Vol 3, Part H, 2.3.6); wait and retry (a blemu device waits 2 s after a "
                    + "first failure, doubling with each further one up to 5 minutes, and logs the time left)"
            case .peer: return "pairing failed: the peripheral answered \(text)"
            case .timeout: return "pairing failed: no answer within 30 s (SMP timeout)"
            }
        case .encryptionFailed(let status):
            return "encryption failed (HCI status \(Hex.byte(status))\(status == 0x06 ? ", PIN or Key Missing: the peripheral has no key for this bond" : ""))"
        case .linkClosed: return "the link closed"
        case .smpUnavailable: return "SMP timed out earlier on this link"
        }
    }
}

/// Pairing and bonding on a central's links (blemu's own central, `blemu gatt`): per link an
/// `SMPInitiator` with the 30 s SMP timer on the scheduler, encryption started with the key of
/// a pairing or of a bond (LE Enable Encryption is the owner's: `startEncryption`), Encryption
/// Change, the peripheral's Security Request (Vol 3, Part H, 2.4.6), and the central's own
/// `BondStore` (a file of its own, so central-side bonds never mix with a device's).
/// No I/O but the bond file; the owner (`CentralHost`) carries PDUs and HCI.
public final class CentralSecurity {
    public let configuration: CentralSecurityConfiguration
    public let bonds: BondStore
    /// This central's address on its links (the owner sets it once the controller is known).
    public var localAddress: LEAddress
    public var sendSMP: (_ handle: UInt16, _ pdu: [UInt8]) -> Void = { _, _ in }
    /// LE Enable Encryption on the link with this key (Vol 4, Part E, 7.8.24).
    public var startEncryption: (_ handle: UInt16, _ key: SMPLongTermKey) -> Void = { _, _ in }
    /// Told when the link's security changes (encrypted, paired).
    public var securityChanged: (_ handle: UInt16, _ security: LinkSecurity) -> Void = { _, _ in }
    /// What the user sees: the passkey to type on the peripheral, the value to compare.
    public var display: (_ message: String) -> Void = { _ in }
    /// A link's LE security level rose (Vol 3, Part C, 10.2.1), whoever started it: told once
    /// per rise, after `securityChanged`.
    public var securityRose: (_ handle: UInt16, _ security: LinkSecurity) -> Void = { _, _ in }
    /// Securing the link failed (a pairing, or encryption with a bond's key) while no
    /// `secure(_:level:completion:)` call waited for it (the peripheral's Security Request,
    /// `secure(_:pair:)`): every failure is told once, through that completion or here. The
    /// link closing is not told here.
    public var securityFailed: (_ handle: UInt16, _ failure: SecureFailure, _ detail: String) -> Void = { _, _, _ in }
    /// How the next pairings are made, set at run time (the programmable host); nil: as
    /// `configuration` says. A pairing under way keeps its terms.
    public var pairingSettings: PairingSettings?
    /// Where the pairings' questions go (Just Works, Numeric Comparison, Passkey Entry, the
    /// passkey to show) to be answered later; nil: answered at once as `configuration` says.
    public var prompts: PairingPrompts?

    private let scheduler: TimerScheduling
    /// Lines whose pace the peripheral sets (its Security Requests).
    private var peerLog = LogBudget()
    private let logger: Logger
    private let makeRandom: () -> any RandomNumberGenerator
    private var links: [UInt16: Link] = [:]
    private let owner: BondOwner
    private var loadedIdentity: SMPIdentity?

    /// The central's IRK and identity address, which it distributes when a bonding peripheral
    /// asks for IdKey, so the peripheral keeps who it bonded with by identity (and can resolve
    /// the central should it ever use private addresses). The IRK is read from the identity
    /// file, else made and written there when the central first pairs with bonding, like a
    /// device's (`DeviceIdentityStore`, which names it by the owner's address); with
    /// `sharedResolvingKey`, the other role's IRK instead.
    ///
    /// The address is the one this central connects from, `localAddress`: "the Identity Address
    /// Information command is used to distribute its public device address or static random
    /// address" (Vol 3, Part H, 3.6.5), and a central without privacy that connects from its
    /// controller's public address (a chat member, whose controller also advertises the room)
    /// must name that, type public, not a static random address it never uses. blemu's central
    /// never connects from a resolvable private address, so `localAddress` is always one of the two.
    public var identity: SMPIdentity {
        if let sharedResolvingKey { return SMPIdentity(resolvingKey: sharedResolvingKey.make(), address: localAddress) }
        let stored: SMPIdentity
        if let loadedIdentity {
            stored = loadedIdentity
        } else {
            var random = makeRandom()
            stored = DeviceIdentityStore.loadOrCreate(path: configuration.identityPath, owner: owner, logger: logger, random: &random)
            loadedIdentity = stored
        }
        return SMPIdentity(resolvingKey: stored.resolvingKey, address: localAddress)
    }

    /// The IRK of the host's other role, used instead of this central's own identity file: the
    /// programmable host hands its peripheral side's here, so both roles distribute one IRK, the
    /// one its advertised resolvable private addresses are made from (one IRK per identity, as
    /// Zephyr and Bumble keep it; Vol 3, Part H, 2.4.2.1). `existing`: the IRK if it exists
    /// already; `make`: the IRK, made if need be. nil: the identity file.
    public var sharedResolvingKey: (existing: () -> [UInt8]?, make: () -> [UInt8])?

    /// Whether the IRK exists already (read or made), without making it.
    private var hasIdentity: Bool {
        if let sharedResolvingKey { return sharedResolvingKey.existing() != nil }
        return loadedIdentity != nil
    }

    /// Forgets the IRK (a factory reset, the programmable host's `reset`): the identity file is
    /// removed and the next bonding pairing makes a new one. Links paired already keep theirs.
    public func forgetIdentity() {
        loadedIdentity = nil
        guard let path = configuration.identityPath else { return }
        if unlink(path) != 0 && errno != ENOENT {
            logger.error("identity file \(path) not removed (errno \(errno)); its IRK is used again next time")
        }
    }

    /// The identity as distributed on a link made from `local`: that address, when it is not
    /// `localAddress` (a host that connects from its public or its static random address link by
    /// link, each an identity address, Vol 6, Part B, 1.3): the peripheral keeps the bond under
    /// the address it knows this central by, and finds it when the central connects from it again.
    private func identity(at local: LEAddress) -> SMPIdentity {
        SMPIdentity(resolvingKey: identity.resolvingKey, address: local)
    }

    private final class Link {
        let handle: UInt16
        let peer: LEAddress
        /// This side's address on the link (the initiator's in SMP's hashes).
        let local: LEAddress
        /// The pairing machine and its SMP timer.
        let smp: SMPLinkDriver<SMPInitiator>
        var initiator: SMPInitiator {
            get { smp.machine }
            set { smp.machine = newValue }
        }
        /// The security the key given to the controller brings once the link is encrypted.
        var keyInUse: LinkSecurity?
        /// Encrypting with this bond's key (a failure then falls back to pairing).
        var encryptingWithBond = false
        var security = LinkSecurity.unencrypted
        var waiting: [(Result<LinkSecurity, CentralSecurityError>) -> Void] = []
        /// Whether this link was paired (not only encrypted with a bond) while open.
        var pairedHere = false
        /// The question the pairing under way waits on (its id in `prompts`).
        var prompt: (id: UInt64, kind: PairingPromptKind)?
        /// The level the `secure` under way wants (MITM is asked for from level 3); `.none`
        /// when no `secure(_:level:completion:)` call waits.
        var levelWanted = LESecurityLevel.none
        /// The level last told through `securityRose`.
        var toldLevel = LESecurityLevel.none
        /// The pairing's failure was told already (as the encryption failure that ends it).
        var failureTold = false
        init(handle: UInt16, peer: LEAddress, local: LEAddress, smp: SMPLinkDriver<SMPInitiator>) {
            self.handle = handle
            self.peer = peer
            self.local = local
            self.smp = smp
        }
    }

    public init(configuration: CentralSecurityConfiguration, owner: BondOwner, localAddress: LEAddress,
                scheduler: TimerScheduling, logger: Logger,
                random: @escaping () -> any RandomNumberGenerator = { SystemRandomNumberGenerator() }) {
        self.configuration = configuration
        self.localAddress = localAddress
        self.scheduler = scheduler
        self.logger = logger
        self.makeRandom = random
        self.owner = owner
        // Keys only: the central keeps no GATT state with its bonds.
        bonds = BondStore(path: configuration.bondStorePath, owner: owner, limit: configuration.maximumBonds,
                          attachmentFormat: .none, logger: logger)
    }

    public func security(of handle: UInt16) -> LinkSecurity { links[handle]?.security ?? .unencrypted }
    public func isPairing(_ handle: UInt16) -> Bool { links[handle]?.initiator.isPairing ?? false }
    /// Whether the link was paired while it was open (rather than encrypted with a bond).
    public func wasPaired(_ handle: UInt16) -> Bool { links[handle]?.pairedHere ?? false }

    // MARK: Links

    /// A link to `peer` (its address as LE Connection Complete gave it) opened. `local`: the
    /// address this side connected from (the initiator's address SMP hashes, Vol 3, Part H,
    /// 2.2.6 and 2.2.7: ia/iat), when it is not `localAddress` (a host that connects from its
    /// public or its random address link by link).
    public func linkOpened(_ handle: UInt16, peer: LEAddress, local: LEAddress? = nil) {
        if let old = links.removeValue(forKey: handle) { close(old) }
        let local = local ?? localAddress
        let initiator = SMPInitiator(configuration: initiatorConfiguration(identity: hasIdentity ? identity(at: local) : nil),
                                     initiatorAddress: local, responderAddress: peer, random: makeRandom())
        let smp = SMPLinkDriver(initiator, scheduler: scheduler) { [weak self] pdu in self?.sendSMP(handle, pdu) }
        let link = Link(handle: handle, peer: peer, local: local, smp: smp)
        smp.onEvent = { [weak self, weak link] event in
            guard let self, let link else { return }
            self.handle(event, on: link)
        }
        links[handle] = link
    }

    public func linkClosed(_ handle: UInt16) {
        guard let link = links.removeValue(forKey: handle) else { return }
        close(link)
    }

    private func close(_ link: Link) {
        link.smp.close()
        dropPrompt(link)
        finish(link, .failure(.linkClosed))
    }

    /// The initiator's configuration now: `configuration`'s, or `pairingSettings`' when set;
    /// Just Works confirmed by the owner when `prompts` takes the questions.
    private func initiatorConfiguration(identity: SMPIdentity?) -> SMPInitiatorConfiguration {
        var initiatorConfiguration = configuration.initiatorConfiguration(identity: identity)
        if let pairingSettings {
            initiatorConfiguration.pairing = pairingSettings.pairingConfiguration(identity: identity, confirmsJustWorks: false)
            initiatorConfiguration.requestMITM = pairingSettings.mitm
        }
        initiatorConfiguration.pairing.confirmsJustWorks = prompts != nil
        return initiatorConfiguration
    }

    // MARK: Securing a link

    /// Makes the link encrypted, as a phone does when a request fails for want of security:
    /// with the key of the peripheral's bond when there is one (and `pair` is false), else (or
    /// when that fails) by pairing. `completion` gets the link's security once encrypted, or why
    /// not. Calls while one is under way wait for the same outcome.
    public func secure(_ handle: UInt16, pair forcePairing: Bool = false,
                       completion: @escaping (Result<LinkSecurity, CentralSecurityError>) -> Void) {
        guard let link = links[handle] else { return completion(.failure(.linkClosed)) }
        link.waiting.append(completion)
        guard link.waiting.count == 1 else { return }
        // An encrypted link that still is not enough needs a stronger key: a new pairing.
        if !forcePairing, !link.security.isEncrypted, let bond = bonds.bond(for: link.peer) {
            encrypt(link, with: bond)
        } else {
            pair(link, answering: nil)
        }
    }

    private func encrypt(_ link: Link, with bond: Bond) {
        link.encryptingWithBond = true
        link.keyInUse = LinkSecurity(bond: bond)
        logger.info("encrypting the link with \(link.peer.address) with the key of our bond (\(bond.strength))",
                    metadata: metadata(link))
        startEncryption(link.handle, bond.longTermKey)
    }

    private func pair(_ link: Link, answering request: SMPAuthRequirements?) {
        guard !link.initiator.hasTimedOut else { return finish(link, .failure(.smpUnavailable)) }
        link.encryptingWithBond = false
        if !link.initiator.isPairing {
            // The first bonding pairing makes (or reads) the identity now. The idle initiator
            // holds nothing but its configuration: a new one takes the identity and the
            // settings of the moment (`pairingSettings`, `prompts`).
            let bondable = pairingSettings?.bondable ?? configuration.bondable
            let wanted = initiatorConfiguration(identity: bondable || hasIdentity ? identity(at: link.local) : nil)
            if link.initiator.configuration != wanted {
                link.initiator = SMPInitiator(configuration: wanted, initiatorAddress: link.local, responderAddress: link.peer,
                                              random: makeRandom())
            }
        }
        logger.info("pairing with \(link.peer.address)", metadata: metadata(link))
        // Levels 3 and 4 need MITM protection: asked for as a Security Request asking it would.
        let requirements = link.levelWanted.needsMITM && !(request?.mitm ?? false)
            ? SMPAuthRequirements(bonding: request?.bonding ?? false, mitm: true, secureConnections: request?.secureConnections ?? false)
            : request
        link.smp.run { $0.start(answering: requirements) }
    }

    // MARK: SMP

    /// One SMP PDU from the peripheral (CID 0x0006).
    public func receive(_ pdu: ArraySlice<UInt8>, on handle: UInt16) {
        guard let link = links[handle] else { return }
        link.smp.run { $0.receive(pdu) }
    }

    /// Encryption Change (Vol 4, Part E, 7.7.8) or Encryption Key Refresh Complete (7.7.39).
    public func encryptionChanged(on handle: UInt16, status: UInt8, enabled: Bool, keySize: UInt8? = nil) {
        guard let link = links[handle] else { return }
        guard status == 0 else {
            link.keyInUse = nil
            logger.event(.encryptionChanged, .warning, "encrypting the link with \(link.peer.address) failed",
                         metadata(link).merging([LogKey.hciStatus: .string(Hex.byte(status))]) { $1 })
            if link.encryptingWithBond {
                // The peripheral lost our bond (or never had it): pair again, as a phone asks to.
                link.encryptingWithBond = false
                logger.notice("\(link.peer.address) has no key for our bond (HCI status \(Hex.byte(status))): pairing again",
                              metadata: metadata(link))
                display("the peripheral does not know our bond (HCI status \(Hex.byte(status))): pairing again")
                pair(link, answering: nil)
            } else if link.initiator.isPairing {
                finish(link, .failure(.encryptionFailed(status: status)))
                // The pairing this ends was told as the encryption failure just now.
                link.failureTold = true
                link.smp.run { $0.abort(.unspecifiedReason) }
                link.failureTold = false
            } else {
                finish(link, .failure(.encryptionFailed(status: status)))
            }
            return
        }
        guard enabled else {
            link.security = .unencrypted
            tellSecurity(link)
            return
        }
        let (security, difference) = LinkSecurity.encrypted(with: link.keyInUse, controllerKeySize: keySize)
        if let difference {
            logger.warning("link with \(link.peer.address): \(difference)", metadata: metadata(link))
        }
        link.security = security
        logger.event(.encryptionChanged, .info, "link with \(link.peer.address) \(security.summary)", metadata(link))
        tellSecurity(link)
        if link.initiator.isPairing {
            // Encrypted with the STK or LTK: the peripheral's keys, then ours (3.6.1).
            link.smp.run { $0.linkEncrypted() }
        } else if link.encryptingWithBond {
            link.encryptingWithBond = false
            finish(link, .success(security))
        }
    }

    // MARK: The initiator's output

    private func handle(_ event: SMPInitiatorEvent, on link: Link) {
        if let prompts, let kind = PairingPromptKind(event) {
            ask(kind, on: link, through: prompts)
            return
        }
        switch event {
        case .displayPasskey(let passkey):
            display("type the passkey \(Self.sixDigits(passkey)) on \(link.peer.address)")
        case .passkeyRequested:
            if let passkey = configuration.passkey {
                link.smp.run { $0.passkeyEntered(passkey) }
            } else {
                display("\(link.peer.address) asks for a passkey (Passkey Entry): give it with --passkey")
                link.smp.run { $0.passkeyEntered(nil) }
            }
        case .confirmNumericComparison(let value):
            let accept = configuration.acceptNumericComparison
            display("Numeric Comparison with \(link.peer.address): \(Self.sixDigits(value)) (\(accept ? "accepted" : "rejected"))")
            link.smp.run { $0.numericComparisonConfirmed(accept) }
        case .confirmJustWorks:
            // Asked only when `prompts` takes the questions (`confirmsJustWorks`).
            link.smp.run { $0.justWorksConfirmed(true) }
        case .startEncryption(let key):
            if let summary = link.initiator.pairingSummary {
                link.keyInUse = LinkSecurity(pairing: summary)
            }
            startEncryption(link.handle, key)
        case .securityRequested(let requirements):
            // 2.4.6: encrypt with the bond when it is strong enough, else pair with these requirements.
            // The peripheral sets the pace of its Security Requests: the line has a budget.
            if let leftOut = peerLog.take(now: scheduler.nowNanoseconds, for: logger) {
                logger.info("\(link.peer.address) asks for security (Security Request)\(LogBudget.note(leftOut))", metadata: metadata(link))
            }
            guard link.waiting.isEmpty, !link.security.isEncrypted || (requirements.mitm && !link.security.isAuthenticated) else { return }
            link.waiting.append { _ in }
            if let bond = bonds.bond(for: link.peer), bond.authenticated || !requirements.mitm {
                encrypt(link, with: bond)
            } else {
                pair(link, answering: requirements)
            }
        case .paired(let result):
            dropPrompt(link)
            paired(result, on: link)
        case let .failed(reason, origin):
            dropPrompt(link)
            let error = CentralSecurityError.pairingFailed(reason: reason, origin: origin)
            logger.event(.pairingFailed, .warning, "pairing with \(link.peer.address) failed: \(error)",
                         metadata(link, reason: reason))
            finish(link, .failure(error), tellUnwaited: !link.failureTold)
        }
    }

    private func paired(_ result: SMPPairingResult, on link: Link) {
        link.pairedHere = true
        var note = "; not bonded"
        if result.bonded, let key = result.longTermKey {
            let bond = Bond(peer: link.peer, identity: result.peerIdentity?.address,
                            identityResolvingKey: result.peerIdentity?.resolvingKey, longTermKey: key,
                            encryptionKeySize: result.encryptionKeySize, secureConnections: result.secureConnections,
                            authenticated: result.authenticated)
            for old in bonds.save(bond) {
                logger.notice("\(old) dropped: the limit is \(bonds.limit) bonds, the oldest goes", metadata: metadata(link))
            }
            note = "; bonded"
        }
        link.security.isAuthenticated = result.authenticated
        link.security.isSecureConnections = result.secureConnections
        link.security.isBonded = note == "; bonded"
        logger.event(.paired, .notice,
                     "paired with \(link.peer.address): \(result.secureConnections ? "LE Secure Connections" : "LE legacy"), \(result.authenticated ? "authenticated" : "unauthenticated (Just Works)"), \(result.encryptionKeySize)-octet key\(note)",
                     metadata(link))
        tellSecurity(link)
        finish(link, .success(link.security))
    }

    /// `tellUnwaited`: a failure no `secure(_:level:completion:)` waited for goes to `securityFailed`.
    private func finish(_ link: Link, _ result: Result<LinkSecurity, CentralSecurityError>, tellUnwaited: Bool = true) {
        let waiting = link.waiting
        let levelWaited = link.levelWanted != .none
        link.waiting = []
        link.levelWanted = .none
        for completion in waiting { completion(result) }
        if tellUnwaited, !levelWaited, case .failure(let error) = result, error != .linkClosed,
           case .failed(let failure, let detail) = Self.outcome(of: error) {
            securityFailed(link.handle, failure, detail)
        }
    }

    /// Tells `securityChanged`, and `securityRose` when the level rose.
    private func tellSecurity(_ link: Link) {
        securityChanged(link.handle, link.security)
        let level = link.security.level
        if level > link.toldLevel {
            link.toldLevel = level
            securityRose(link.handle, link.security)
        } else if level < link.toldLevel {
            link.toldLevel = level
        }
    }

    // MARK: Prompts

    /// Puts the pairing's question to the owner; the pairing waits for the answer (or ends
    /// with the SMP timeout, Vol 3, Part H, 3.4, or the link).
    private func ask(_ kind: PairingPromptKind, on link: Link, through prompts: PairingPrompts) {
        dropPrompt(link)
        logger.info("pairing with \(link.peer.address): \(kind.logName), waiting for the answer", metadata: metadata(link))
        prompts.ask(handle: link.handle, peer: link.peer, isCentral: true, kind: kind,
                    opened: { [weak link] id in link?.prompt = (id, kind) }) { [weak self, weak link] answer in
            guard let self, let link, link.prompt?.kind == kind else { return .unknownPairing }
            link.prompt = nil
            self.logger.info("pairing with \(link.peer.address): \(kind.logName) answered \(answer.logName)", metadata: self.metadata(link))
            answer.feed(to: link.smp, for: kind)
            return nil
        }
    }

    private func dropPrompt(_ link: Link) {
        if let id = link.prompt?.id { prompts?.drop(id) }
        link.prompt = nil
    }

    // MARK: Securing to a level

    /// Brings the link to `level` (Vol 3, Part C, 10.2.1): at once `.reached(…, already: true)`
    /// when it has it; else encrypts with the peripheral's bond when its key is strong enough,
    /// or pairs (asking for MITM protection for levels 3 and 4). The outcome says whether the
    /// level was reached, or what failed.
    public func secure(_ handle: UInt16, level: LESecurityLevel, completion: @escaping (SecureOutcome) -> Void) {
        guard let link = links[handle] else { return completion(.failed(.connectionDied, detail: "no such link")) }
        if link.security.level >= level { return completion(.reached(link.security, already: true)) }
        let bondIsEnough = bonds.bond(for: link.peer).map { LinkSecurity(bond: $0).level >= level } ?? false
        if level > link.levelWanted { link.levelWanted = level }
        secure(handle, pair: !bondIsEnough) { result in
            switch result {
            case .success(let security): completion(.judge(security, wanted: level))
            case .failure(let error): completion(Self.outcome(of: error))
            }
        }
    }

    /// `secure`'s class of a failure.
    static func outcome(of error: CentralSecurityError) -> SecureOutcome {
        switch error {
        case .pairingFailed(let reason, _): .pairingFailed(reason, error.description)
        case .encryptionFailed: .failed(.encryptionFailure, detail: error.description)
        case .linkClosed: .failed(.connectionDied, detail: error.description)
        case .smpUnavailable: .failed(.pairingFailure, detail: error.description)
        }
    }

    private func metadata(_ link: Link, reason: SMPPairingFailedReason? = nil) -> Logger.Metadata {
        .pairing(peer: link.peer, handle: link.handle, reason: reason)
    }

    static func sixDigits(_ value: UInt32) -> String {
        let text = String(value % 1_000_000)
        return String(repeating: "0", count: 6 - text.count) + text
    }
}
