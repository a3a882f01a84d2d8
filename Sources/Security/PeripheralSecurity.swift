import BlemuCore
import BlemuCrypto
import BlemuSMP
import Glibc
import Logging

/// How a device pairs (Vol 3, Part C, 10; Part H, 2.3).
public struct SecurityConfiguration: Sendable {
    /// A static six-digit passkey (a label on the box): the device is DisplayOnly, demands MITM
    /// protection, and a central types this passkey (Passkey Entry). Nil: NoInputNoOutput, Just Works.
    public var passkey: UInt32?
    /// The IO capability the device declares (`--io-capability`), instead of the one the
    /// passkey implies. DisplayYesNo (or KeyboardDisplay) shows a Numeric Comparison value in
    /// the log when a central with a display pairs with MITM.
    public var ioCapability: SMPIOCapability?
    /// The user's answer to every Numeric Comparison (`--numeric-comparison accept|reject`):
    /// rejecting fails the pairing with Numeric Comparison Failed (0x0C).
    public var acceptNumericComparison: Bool
    /// Wait for the answer instead (`--numeric-comparison ask`): `answerNumericComparison`,
    /// from the control socket's `pairing DEVICE confirm|reject`, within the 30 s SMP timer.
    public var askNumericComparison: Bool
    /// Whether centrals may bond (keys kept across links).
    public var bondable: Bool
    /// Secure Connections Only mode (Vol 3, Part C, 10.2.4): LE legacy pairing is refused.
    public var secureConnectionsOnly: Bool
    /// The bond file (nil: bonds are kept in memory until blemu stops).
    public var bondStorePath: String?
    /// Bonds kept per device; a new one beyond this replaces the oldest.
    public var maximumBonds: Int
    /// The identity file, which keeps the device's IRK (nil: a new IRK each run).
    public var identityPath: String?
    /// The passkey is the one blemu made up and logged (the lock's label), not one the user gave:
    /// the control socket's `list` shows it, so a user with a refused pairing can look it up.
    /// A passkey given is shown nowhere.
    public var passkeyIsGenerated = false
    /// The shortest key (octets, 7...16) a pairing may leave; shorter fails with Encryption Key
    /// Size (0x06). `Peripheral` raises it to what the device's permissions require
    /// (`GATTDatabase.requiredEncryptionKeySize`).
    public var minimumEncryptionKeySize: UInt8 = 7

    public init(passkey: UInt32? = nil, ioCapability: SMPIOCapability? = nil, acceptNumericComparison: Bool = true,
                askNumericComparison: Bool = false, bondable: Bool = true, secureConnectionsOnly: Bool = false,
                bondStorePath: String? = nil, maximumBonds: Int = 16, identityPath: String? = nil) {
        self.identityPath = identityPath
        self.passkey = passkey
        self.ioCapability = ioCapability
        self.acceptNumericComparison = acceptNumericComparison
        self.askNumericComparison = askNumericComparison
        self.bondable = bondable
        self.secureConnectionsOnly = secureConnectionsOnly
        self.bondStorePath = bondStorePath
        self.maximumBonds = max(1, maximumBonds)
    }

    /// The SMP responder's configuration these choices make.
    public var responderConfiguration: SMPResponderConfiguration {
        SMPResponderConfiguration(
            ioCapability: ioCapability ?? (passkey == nil ? .noInputNoOutput : .displayOnly), bondable: bondable,
            requireMITM: passkey != nil, secureConnections: true, secureConnectionsOnly: secureConnectionsOnly,
            minimumEncryptionKeySize: min(max(minimumEncryptionKeySize, 7), 16),
            passkey: passkey.map { .fixed($0) } ?? .random)
    }
}

/// The Security Manager of one device, for all its links: an `SMPResponder` per link fed by
/// the SMP channel (L2CAP CID 0x0006), the 30 s SMP timer on the run loop (Vol 3, Part H, 3.4),
/// the answer to LE Long Term Key Request (from the pairing under way or from a bond), the link's
/// security after Encryption Change, the bond store, and the repeated-attempts rule (2.3.6).
///
/// No I/O of its own: what goes to the controller leaves through `sendSMP` and `answerKeyRequest`.
public final class PeripheralSecurity {
    public let configuration: SecurityConfiguration
    public let bonds: BondStore
    /// The device's identity address, and the responder's address in confirm and check values
    /// of links made while it advertised from it.
    public let localAddress: LEAddress
    /// The device's IRK and identity address (Vol 3, Part H, 2.4.2.1): distributed to a bonding
    /// central that asks for IdKey, and the key of the device's resolvable private addresses.
    /// Read from the identity file at start when there is one; otherwise made (and written) when
    /// first needed — privacy, or a central asking to pair — so a device nobody pairs with
    /// writes nothing to the state directory.
    public var identity: SMPIdentity {
        if let loadedIdentity { return loadedIdentity }
        var random = makeRandom()
        let made = DeviceIdentityStore.loadOrCreate(path: configuration.identityPath, owner: owner, logger: logger, random: &random)
        loadedIdentity = made
        return made
    }
    private var loadedIdentity: SMPIdentity?
    /// The identity if it exists already (read from the identity file, or made by a pairing):
    /// unlike `identity`, never makes one.
    public var existingIdentity: SMPIdentity? { loadedIdentity }

    /// Forgets the IRK (the programmable host's `reset`, a factory reset): the identity file is
    /// removed and the next use of `identity` makes a new one, so no central that bonded before
    /// resolves the addresses made after. Links paired already keep theirs.
    public func forgetIdentity() {
        loadedIdentity = nil
        guard let path = configuration.identityPath else { return }
        if unlink(path) != 0 && errno != ENOENT {
            logger.error("identity file \(path) not removed (errno \(errno)); its IRK is used again next time")
        }
    }
    private let owner: BondOwner
    /// Sends one SMP PDU on a link's CID 0x0006.
    public var sendSMP: (_ handle: UInt16, _ pdu: [UInt8]) -> Void = { _, _ in }
    /// Answers LE Long Term Key Request: the key (Reply, Vol 4, Part E, 7.8.25) or nil (Negative Reply, 7.8.26).
    public var answerKeyRequest: (_ handle: UInt16, _ key: [UInt8]?) -> Void = { _, _ in }
    /// A link's security changed (encrypted, or its pairing finished).
    public var securityChanged: (_ handle: UInt16, _ security: LinkSecurity) -> Void = { _, _ in }
    /// A pairing made a bond and it was saved (the host loads a new IRK into the controller's
    /// resolving list).
    public var bondSaved: (_ bond: Bond) -> Void = { _ in }
    /// A pairing completed on the link, by `method` (before `securityChanged` tells its result).
    public var pairingCompleted: (_ handle: UInt16, _ result: SMPPairingResult) -> Void = { _, _ in }
    /// A link's LE security level rose (Vol 3, Part C, 10.2.1), whoever started it: told once
    /// per rise, after `securityChanged`.
    public var securityRose: (_ handle: UInt16, _ security: LinkSecurity) -> Void = { _, _ in }
    /// A pairing or an encryption on the link failed while no `secure` call waited for it (the
    /// central paired on its own and it failed): every failure is told once, through `secure`'s
    /// completion or here. The link closing is not told here.
    public var securityFailed: (_ handle: UInt16, _ failure: SecureFailure, _ detail: String) -> Void = { _, _, _ in }
    /// A pairing on the link ended, done or failed (after `pairingCompleted` or the failure's
    /// report): what waited for it may go on.
    public var pairingEnded: (_ handle: UInt16) -> Void = { _ in }

    /// How the next pairings are made, set at run time (the programmable host); nil: as
    /// `configuration` says. A pairing under way keeps its terms.
    public var pairingSettings: PairingSettings?
    /// Where the pairings' questions go (Just Works, Numeric Comparison, Passkey Entry, the
    /// passkey to show) to be answered later; nil: answered at once as `configuration` says
    /// (static passkey, `acceptNumericComparison`, `askNumericComparison`).
    public var prompts: PairingPrompts?

    /// The SMP timeout (Vol 3, Part H, 3.4).
    public static let timeout: Duration = SMPLinkDriver<SMPResponder>.timeout
    /// The waits before `secure`'s Security Request is sent again, one after the other, while
    /// the central has neither paired, nor encrypted, nor refused (1, 3, 7 and 15 s after the
    /// first; all within the 30 s `secure` waits). The Core specification lets a central act on
    /// a Security Request or not (Vol 3, Part H, 2.4.6) and sets no limit on asking; a central
    /// that listens for it only from some moment on (Bumble's Pandora server while its
    /// WaitSecurity runs; a phone while its app is in the foreground) misses one sent once, as
    /// soon as the link opened. A repeat is never sent once the central answered anything.
    public static let securityRequestRepeats: [Duration] = [.seconds(1), .seconds(2), .seconds(4), .seconds(8)]

    private let scheduler: TimerScheduling
    private var logger: Logger
    private var links: [UInt16: Link] = [:]
    private var attempts = PairingAttempts()
    private let makeRandom: () -> any RandomNumberGenerator
    /// Pairing requests and key requests come at a central's pace.
    private var peerLog = LogBudget()
    /// Pairings, their failures and encryption changes too: a central can repeat them at will.
    private var outcomeLog = LogBudget(burst: 30, window: .seconds(60))
    /// Changes of a bond's attachment that come at a central's pace (CCCD writes, signed writes)
    /// reach the bond file at most once a second (a central toggling a CCCD must not make a write
    /// and fsync per request).
    private var flushTimer: TimerID?
    public static let bondWriteDelay: Duration = .seconds(1)

    private final class Link {
        let handle: UInt16
        let peer: LEAddress
        /// The address bonds are looked up by: the central's identity address when the
        /// controller resolved its private address, else `peer` (matched, or resolved with ah).
        let bondAddress: LEAddress
        /// The address the central connected to (the responder's in confirm and check values).
        let local: LEAddress
        /// The identity address the link's pairing distributes when `local` is a resolvable
        /// private address the host made (nil: as `identity(_:onLinkTo:)` decides).
        let identityAddress: LEAddress?
        /// The pairing machine and its SMP timer.
        let smp: SMPLinkDriver<SMPResponder>
        var responder: SMPResponder {
            get { smp.machine }
            set { smp.machine = newValue }
        }
        /// The STK or LTK the pairing under way made (encryptionKeyReady).
        var pairingKey: SMPLongTermKey?
        /// What the controller was given in the last LTK reply: the security it brings once on.
        var keyInUse: LinkSecurity?
        var security = LinkSecurity.unencrypted
        /// A Security Request went out on this link (once per link: the central decides).
        var askedForSecurity = false
        /// The question the pairing under way waits on: its id in `prompts`, or nil when it was
        /// asked through `askNumericComparison` (answered by `answerNumericComparison`).
        var prompt: (id: UInt64?, kind: PairingPromptKind)?
        /// A Numeric Comparison value waiting for the user's answer.
        var comparison: UInt32? {
            if case .numericComparison(let value)? = prompt?.kind { value } else { nil }
        }
        /// `secure` calls waiting for the link to reach their level.
        var securing: [(level: LESecurityLevel, completion: (SecureOutcome) -> Void)] = []
        /// The 30 s a central has to answer `secure`'s Security Request (Vol 3, Part H, 3.4).
        var securityRequestTimer: TimerID?
        /// The next time `secure`'s Security Request is sent again while the central has
        /// answered nothing (`securityRequestRepeats`).
        var securityRequestRepeat: TimerID?
        /// The central answered since `secure` last asked: an SMP PDU or an LTK request came.
        var centralAnswered = false
        /// The level last told through `securityRose`.
        var toldLevel = LESecurityLevel.none
        /// The pairing's failure was told already (as the encryption failure that ends it).
        var failureTold = false
        /// A passkey made for the pairing under way (no static one), shown until it ends.
        var shownPasskey: UInt32?
        init(handle: UInt16, peer: LEAddress, bondAddress: LEAddress, local: LEAddress, identityAddress: LEAddress?,
             smp: SMPLinkDriver<SMPResponder>) {
            self.handle = handle
            self.peer = peer
            self.bondAddress = bondAddress
            self.local = local
            self.identityAddress = identityAddress
            self.smp = smp
        }
    }

    /// `random` makes a generator per link for the responder's nonces and keys: the system's
    /// (getrandom) unless a test seeds its own.
    /// `bondAttachment`: how the layer above keeps its state with each bond in the bond file.
    public init(configuration: SecurityConfiguration, owner: BondOwner, localAddress: LEAddress,
                bondAttachment: BondAttachmentFormat = .none, scheduler: TimerScheduling, logger: Logger,
                random: @escaping () -> any RandomNumberGenerator = { SystemRandomNumberGenerator() }) {
        self.configuration = configuration
        self.localAddress = localAddress
        self.scheduler = scheduler
        self.logger = logger
        self.makeRandom = random
        bonds = BondStore(path: configuration.bondStorePath, owner: owner, limit: configuration.maximumBonds,
                          attachmentFormat: bondAttachment, logger: logger)
        self.owner = owner
        if let path = configuration.identityPath, DeviceIdentityStore.exists(path) { _ = identity }
    }

    /// Forgets every central's failed pairings (2.3.6's waiting intervals), as a factory reset
    /// does: the next attempt from any central is answered at once.
    public func forgetPairingAttempts() {
        attempts = PairingAttempts()
    }

    /// The security of a link (unencrypted for an unknown handle).
    public func security(of handle: UInt16) -> LinkSecurity {
        links[handle]?.security ?? .unencrypted
    }

    /// Whether a pairing runs on the link.
    public func isPairing(_ handle: UInt16) -> Bool {
        links[handle]?.responder.isPairing ?? false
    }

    // MARK: Links

    /// A central connected from `peer` (the address of LE Connection Complete, with its type) to
    /// `local`, the address the device advertised from, with its type (a resolvable private
    /// address with privacy; a programmed advertisement's public or static random address; the
    /// identity address when nil). The pairing's confirm and check values use the
    /// addresses of the connection (Vol 3, Part H, 2.2.3, 2.2.7). `resolvedIdentity`: the
    /// central's identity address when the controller resolved its private address with the
    /// resolving list (LE Enhanced Connection Complete, Peer_Address_Type 0x02/0x03): its bond is
    /// looked up by it directly; without it, by `peer` (the host's ah() for a private address).
    /// `identityAddress`: the identity address the link's pairing distributes when `local` is a
    /// resolvable private address made from this IRK for an identity other than the device's
    /// own (the programmable host's, its public or its static random address); nil: the device's.
    public func linkOpened(_ handle: UInt16, peer: LEAddress, local: LEAddress? = nil, resolvedIdentity: LEAddress? = nil,
                           identityAddress: LEAddress? = nil) {
        if let old = links.removeValue(forKey: handle) { old.smp.close() }
        let responderAddress = local ?? localAddress
        let smp = SMPLinkDriver(makeResponder(peer: peer, local: responderAddress, identityAddress: identityAddress,
                                              identity: loadedIdentity),
                                scheduler: scheduler) { [weak self] pdu in self?.sendSMP(handle, pdu) }
        let link = Link(handle: handle, peer: peer, bondAddress: resolvedIdentity ?? peer, local: responderAddress,
                        identityAddress: identityAddress, smp: smp)
        smp.onEvent = { [weak self, weak link] event in
            guard let self, let link else { return }
            self.handle(event, on: link)
        }
        links[handle] = link
    }

    /// Our IRK and identity address go to a bonding central that asks (IdKey, 3.6.1), so it can
    /// resolve the addresses we advertise from with privacy on.
    private func makeResponder(peer: LEAddress, local: LEAddress, identityAddress: LEAddress?, identity: SMPIdentity?) -> SMPResponder {
        SMPResponder(configuration: responderConfiguration(identity: identity, local: local, identityAddress: identityAddress),
                     initiatorAddress: peer, responderAddress: local, random: makeRandom())
    }

    /// The responder's configuration now: `configuration`'s, or `pairingSettings`' when set;
    /// Just Works confirmed by the owner when `prompts` takes the questions.
    private func responderConfiguration(identity: SMPIdentity?, local: LEAddress, identityAddress: LEAddress?) -> SMPResponderConfiguration {
        var responderConfiguration = configuration.responderConfiguration
        if let pairingSettings {
            responderConfiguration.pairing = pairingSettings.pairingConfiguration(
                identity: nil, minimumEncryptionKeySize: configuration.minimumEncryptionKeySize, confirmsJustWorks: false)
            responderConfiguration.requestMITM = pairingSettings.mitm
        }
        responderConfiguration.pairing.identity = identity.map { Self.identity($0, onLinkTo: local, identityAddress: identityAddress) }
        responderConfiguration.pairing.confirmsJustWorks = prompts != nil
        return responderConfiguration
    }

    /// The identity a link's pairing distributes (Identity Address Information, Vol 3, Part H,
    /// 3.6.5): the device's IRK with the address the central connected to when that is an
    /// identity address (public, or static random, Vol 6, Part B, 1.3) — the programmable host
    /// advertises from the controller's public address or its static random one, and the central
    /// bonds with the one it connected to — else the device's identity address (never a
    /// resolvable private address the device advertised from with privacy). A link made from a
    /// resolvable private address the programmable host made from this IRK distributes the
    /// identity that address stands for, `identityAddress` (Vol 3, Part H, 2.4.2.1: a bonded
    /// central then resolves the address to it).
    static func identity(_ identity: SMPIdentity, onLinkTo local: LEAddress, identityAddress: LEAddress? = nil) -> SMPIdentity {
        if let identityAddress { return SMPIdentity(resolvingKey: identity.resolvingKey, address: identityAddress) }
        guard !local.isRandom || local.address.isValidStaticRandom else { return identity }
        return SMPIdentity(resolvingKey: identity.resolvingKey, address: local)
    }

    public func linkClosed(_ handle: UInt16) {
        guard let link = links.removeValue(forKey: handle) else { return }
        link.smp.close()
        dropPrompt(link)
        finishSecuring(link, .failed(.connectionDied, detail: "the link closed"))
        if link.responder.isPairing, let leftOut = outcomeLog.take(now: scheduler.nowNanoseconds, for: logger) {
            logger.event(.pairingFailed, .notice, "pairing with \(link.peer.address) ended: the link closed\(LogBudget.note(leftOut))",
                         metadata(link))
        }
        // What a bonded central changed reaches the file before its link is forgotten.
        flushBonds()
    }

    /// The bond of the central on a link, if it has one.
    public func bond(on handle: UInt16) -> Bond? {
        guard let link = links[handle] else { return nil }
        return bonds.bond(for: link.bondAddress)
    }

    /// When a change of a bond's attachment reaches the bond file.
    public enum BondWrite: Sendable {
        /// Now (a link closes, a central's state that changes rarely).
        case now
        /// Within `bondWriteDelay`, and when the link closes or blemu stops: for changes that
        /// come at a central's pace (CCCD writes, SignCounters), so a central cannot make a write
        /// and fsync per request.
        case soon
    }

    /// The attachment of the bond of the central on `handle` becomes `attachment` (what the
    /// layer above keeps with the bond). With `onlyIfBondedLink`, only while the link is
    /// encrypted with a bond's key or bonded by its pairing (a central that merely has a bond is
    /// not yet known to be that central). Nothing without a bond.
    public func setBondAttachment(_ attachment: BondAttachment, on handle: UInt16, onlyIfBondedLink: Bool, write: BondWrite) {
        guard let link = links[handle], !onlyIfBondedLink || link.security.isBonded else { return }
        switch write {
        case .now:
            bonds.setAttachment(attachment, for: link.bondAddress)
        case .soon:
            guard bonds.setAttachment(attachment, for: link.bondAddress, write: false), flushTimer == nil else { return }
            flushTimer = scheduler.schedule(after: Self.bondWriteDelay) { [weak self] in
                self?.flushTimer = nil
                self?.bonds.flush()
            }
        }
    }

    /// Writes what waits for the bond file now.
    public func flushBonds() {
        if let flushTimer { scheduler.cancel(flushTimer) }
        flushTimer = nil
        bonds.flush()
    }

    // MARK: SMP

    /// A request was refused for want of security (ATT 0x05, 0x0F or 0x0C): the peripheral asks
    /// the central to pair, or to encrypt with the key of its bond, with a Security Request
    /// (Vol 3, Part H, 2.4.6 and 3.6.7) carrying the device's requirements. Once per link, and
    /// not while a pairing runs or after the SMP timeout: the central decides what to do.
    public func securityNeeded(on handle: UInt16) {
        guard let link = links[handle], !link.askedForSecurity, !link.responder.isPairing, !link.responder.hasTimedOut else { return }
        link.askedForSecurity = true
        sendSMP(handle, link.responder.securityRequest)
        if let leftOut = peerLog.take(now: scheduler.nowNanoseconds, for: logger) {
            logger.info("asked \(link.peer.address) to \(bonds.bond(for: link.bondAddress) != nil ? "encrypt with its bond" : "pair") (Security Request)\(LogBudget.note(leftOut))",
                        metadata: metadata(link))
        }
    }

    /// One SMP PDU from the central (CID 0x0006).
    public func receive(_ pdu: ArraySlice<UInt8>, on handle: UInt16) {
        guard let link = links[handle] else { return }
        link.centralAnswered = true
        if pdu.first == SMPCode.pairingFailed.rawValue, !link.responder.isPairing, !link.securing.isEmpty {
            // The central's answer to `secure`'s Security Request: it will not pair (2.4.6 lets
            // it answer with Pairing Failed, Pairing Not Supported). No pairing runs to end.
            let reason = pdu.count == 2 ? SMPPairingFailedReason(rawValue: pdu[pdu.startIndex + 1]) : nil
            let why = reason.map { Self.describe($0) } ?? "a malformed Pairing Failed"
            return finishSecuring(link, .failed(.pairingFailure, detail: "the central refused the Security Request: \(why)"))
        }
        if pdu.first == SMPCode.pairingRequest.rawValue, !link.responder.isPairing, !link.responder.hasTimedOut {
            let now = scheduler.nowNanoseconds
            if let wait = attempts.remainingWait(for: link.peer.address, now: now) {
                // 2.3.6: a pairing attempt before the waiting interval has passed is refused.
                sendSMP(handle, SMPPairingFailed(reason: .repeatedAttempts).encoded)
                if let leftOut = peerLog.take(now: now, for: logger) {
                    logger.event(.pairingFailed, .warning,
                                 "pairing with \(link.peer.address) refused: repeated attempts, \(Self.seconds(wait)) s left to wait\(LogBudget.note(leftOut))",
                                 metadata(link, reason: .repeatedAttempts))
                }
                return
            }
            // The first pairing of a device without an identity file makes the identity now. The
            // idle responder holds nothing but its configuration: a new one takes the identity
            // and the settings of the moment (`pairingSettings`, `prompts`).
            let bondable = pairingSettings?.bondable ?? configuration.bondable
            let wanted = responderConfiguration(identity: bondable ? identity : loadedIdentity, local: link.local,
                                                identityAddress: link.identityAddress)
            if link.responder.configuration != wanted {
                link.responder = SMPResponder(configuration: wanted, initiatorAddress: link.peer, responderAddress: link.local,
                                              random: makeRandom())
            }
            if let leftOut = peerLog.take(now: now, for: logger) {
                let known = bonds.bond(for: link.bondAddress) != nil ? " (it is bonded: a new pairing replaces the bond)" : ""
                logger.info("\(link.peer.address) asks to pair\(known)\(LogBudget.note(leftOut))", metadata: metadata(link))
            }
        }
        link.smp.run { $0.receive(pdu) }
    }

    // MARK: Encryption

    /// LE Long Term Key Request (Vol 4, Part E, 7.7.65.5): the central starts encryption.
    public func longTermKeyRequested(on handle: UInt16, randomNumber: UInt64, encryptedDiversifier: UInt16) {
        guard let link = links[handle] else {
            answerKeyRequest(handle, nil)
            return
        }
        link.centralAnswered = true
        // The pairing under way: its STK (legacy) or LTK (Secure Connections), named by EDIV 0, Rand 0.
        if let key = link.pairingKey, encryptedDiversifier == 0, randomNumber == 0, let summary = link.responder.pairingSummary {
            link.keyInUse = LinkSecurity(pairing: summary)
            answerKeyRequest(handle, key.key)
            return
        }
        guard let bond = bonds.bond(for: link.bondAddress) else {
            refuseKey(link, "no bond with it")
            return
        }
        guard bond.answers(encryptedDiversifier: encryptedDiversifier, randomNumber: randomNumber) else {
            refuseKey(link, "EDIV and Rand do not name the key of its bond")
            return
        }
        link.keyInUse = LinkSecurity(bond: bond)
        answerKeyRequest(handle, bond.longTermKey.key)
    }

    private func refuseKey(_ link: Link, _ why: String) {
        link.keyInUse = nil
        if let leftOut = peerLog.take(now: scheduler.nowNanoseconds, for: logger) {
            logger.event(.keyMissing, .notice,
                         "\(link.peer.address) asked to encrypt the link: \(why); negative reply (PIN or Key Missing)\(LogBudget.note(leftOut))",
                         metadata(link))
        }
        answerKeyRequest(link.handle, nil)
    }

    /// Encryption Change (7.7.8) or Encryption Key Refresh Complete (7.7.39, `refresh`).
    /// `keySize` is the controller's (Encryption Change v2), when it said.
    public func encryptionChanged(on handle: UInt16, status: UInt8, enabled: Bool, keySize: UInt8? = nil, refresh: Bool = false) {
        guard let link = links[handle] else { return }
        let what = refresh ? "encryption key refresh" : "encryption change"
        let leftOut = outcomeLog.take(now: scheduler.nowNanoseconds, for: logger)
        guard status == 0 else {
            if let leftOut {
                logger.event(.encryptionChanged, .warning, "\(what) with \(link.peer.address) failed\(LogBudget.note(leftOut))",
                             metadata(link).merging([LogKey.hciStatus: .string(Hex.byte(status))]) { $1 })
            }
            link.keyInUse = nil
            failSecuring(link, .failed(.encryptionFailure, detail: "\(what) failed, HCI status \(Hex.byte(status))"))
            if link.responder.isPairing {
                // The central could not encrypt with the key the pairing made: that pairing is
                // over, its failure told just now as the encryption's.
                link.failureTold = true
                link.smp.run { $0.abort(.unspecifiedReason) }
                link.failureTold = false
            }
            return
        }
        guard enabled else {
            link.security = .unencrypted
            if let leftOut {
                logger.event(.encryptionChanged, .notice, "link with \(link.peer.address) no longer encrypted\(LogBudget.note(leftOut))",
                             metadata(link))
            }
            tellSecurity(link)
            return
        }
        guard let keyInUse = link.keyInUse else {
            // Vol 6, Part B, 5.1.3.1: a peripheral's controller encrypts with the key its host
            // gave in LE Long Term Key Request Reply. No key was given on this link (none was
            // asked for, or the answer was a negative reply), so the controller's word cannot
            // be right: the link stays as it was, and nothing that needs encryption is served.
            if let leftOut {
                logger.warning("link with \(link.peer.address): the controller reports \(what) without a key given for it; not treated as encrypted\(LogBudget.note(leftOut))",
                               metadata: metadata(link))
            }
            return
        }
        let (security, difference) = LinkSecurity.encrypted(with: keyInUse, controllerKeySize: keySize)
        if let difference, leftOut != nil {
            // The outcome line below carries the count of lines left out before.
            logger.warning("link with \(link.peer.address): \(difference)", metadata: metadata(link))
        }
        link.security = security
        if let leftOut {
            logger.event(.encryptionChanged, .info, "link with \(link.peer.address) \(security.summary)\(LogBudget.note(leftOut))",
                         metadata(link))
        }
        tellSecurity(link)
        if link.responder.isPairing {
            // Encrypted with the STK or LTK: key distribution (3.6.1).
            link.pairingKey = nil
            link.smp.run { $0.linkEncrypted() }
        } else {
            // Encrypted with a bond's key: that is what the central answered `secure` with.
            settleSecuring(link)
        }
    }

    /// What the device "displays" for the pairing under way on a link (Vol 3, Part H, 2.3.5.6):
    /// a passkey made for this pairing only, which the central's user types, or a Numeric
    /// Comparison value waiting for `answerNumericComparison`. The control socket's `list` shows
    /// them, so a test script can compare them with what the app shows.
    public func pairingDisplay(on handle: UInt16) -> (passkey: UInt32?, comparison: UInt32?) {
        guard let link = links[handle] else { return (nil, nil) }
        return (link.shownPasskey, link.comparison)
    }

    /// Numeric Comparison values waiting for the user's answer, one per link pairing now.
    public var waitingComparisons: [UInt32] { links.values.compactMap(\.comparison) }

    /// The user's answer to the Numeric Comparisons waiting (`askNumericComparison`): confirm
    /// goes on with the pairing, reject fails it with Numeric Comparison Failed (0x0C). Returns
    /// how many were answered.
    @discardableResult
    public func answerNumericComparison(_ confirm: Bool) -> Int {
        var answered = 0
        for link in links.values.sorted(by: { $0.handle < $1.handle }) {
            guard let value = link.comparison, link.prompt?.id == nil else { continue }
            link.prompt = nil
            answered += 1
            logger.notice("pairing with \(link.peer.address): Numeric Comparison \(PasskeyLabel.sixDigits(value)) \(confirm ? "confirmed" : "rejected")",
                          metadata: metadata(link))
            link.smp.run { $0.numericComparisonConfirmed(confirm) }
        }
        return answered
    }

    /// The controller's key size for a link (Read Encryption Key Size, Vol 4, Part E, 7.5.7).
    public func keySizeRead(on handle: UInt16, keySize: UInt8) {
        guard let link = links[handle], link.security.isEncrypted,
              let difference = link.security.controllerReported(keySize: keySize) else { return }
        if let leftOut = outcomeLog.take(now: scheduler.nowNanoseconds, for: logger) {
            logger.warning("link with \(link.peer.address): \(difference)\(LogBudget.note(leftOut))", metadata: metadata(link))
        }
        tellSecurity(link)
    }

    // MARK: The responder's output

    private func handle(_ event: SMPResponderEvent, on link: Link) {
        if let prompts, let kind = PairingPromptKind(event) {
            if case .passkeyDisplay(let passkey) = kind { link.shownPasskey = passkey }
            ask(kind, on: link, through: prompts)
            return
        }
        switch event {
        case .displayPasskey(let passkey):
            if configuration.passkey != nil {
                // The passkey is the static one of the configuration (a label): not repeated in the log.
                logger.notice("pairing with \(link.peer.address): Passkey Entry, the central types the device's passkey (--passkey)",
                              metadata: metadata(link))
            } else {
                // A new passkey for this pairing only (2.3.5.6.3): the device's "display" is the log
                // (and the control socket's `list`).
                link.shownPasskey = passkey
                logger.notice("pairing with \(link.peer.address): Passkey Entry, the central types \(PasskeyLabel.sixDigits(passkey))",
                              metadata: metadata(link))
            }
        case .passkeyRequested:
            // blemu never asks for a passkey (it is DisplayOnly or NoInputNoOutput): refuse.
            link.smp.run { $0.passkeyEntered(nil) }
        case .confirmNumericComparison(let value):
            // The device's "display" is the log (Vol 3, Part H, 2.3.5.6.2: both users compare the
            // six digits); its user's answer is --numeric-comparison.
            if configuration.askNumericComparison {
                link.prompt = (nil, .numericComparison(value))
                logger.notice("pairing with \(link.peer.address): Numeric Comparison \(PasskeyLabel.sixDigits(value)): waiting for the answer (control socket: pairing DEVICE confirm|reject)",
                              metadata: metadata(link))
                return
            }
            let accept = configuration.acceptNumericComparison
            logger.notice("pairing with \(link.peer.address): Numeric Comparison \(PasskeyLabel.sixDigits(value)) \(accept ? "accepted" : "rejected (--numeric-comparison reject)")",
                          metadata: metadata(link))
            link.smp.run { $0.numericComparisonConfirmed(accept) }
        case .confirmJustWorks:
            // Asked only when `prompts` takes the questions (`confirmsJustWorks`).
            link.smp.run { $0.justWorksConfirmed(true) }
        case .encryptionKeyReady(let key):
            link.pairingKey = key
        case .paired(let result):
            link.shownPasskey = nil
            dropPrompt(link)
            paired(result, on: link)
            pairingEnded(link.handle)
        case let .failed(reason, origin):
            link.pairingKey = nil
            link.shownPasskey = nil
            dropPrompt(link)
            failed(reason: reason, origin: origin, on: link)
            pairingEnded(link.handle)
        }
    }

    // MARK: Prompts

    /// Puts the pairing's question to the owner; the pairing waits for the answer (or ends
    /// with the SMP timeout, 3.4, or the link).
    private func ask(_ kind: PairingPromptKind, on link: Link, through prompts: PairingPrompts) {
        dropPrompt(link)
        let id = prompts.ask(handle: link.handle, peer: link.peer, isCentral: false, kind: kind,
                             opened: { [weak link] id in link?.prompt = (id, kind) }) { [weak self, weak link] answer in
            guard let self, let link, link.prompt?.kind == kind else { return .unknownPairing }
            link.prompt = nil
            if let leftOut = self.outcomeLog.take(now: self.scheduler.nowNanoseconds, for: self.logger) {
                self.logger.notice("pairing with \(link.peer.address): \(kind.logName) answered \(answer.logName)\(LogBudget.note(leftOut))",
                                   metadata: self.metadata(link))
            }
            answer.feed(to: link.smp, for: kind)
            return nil
        }
        if let leftOut = outcomeLog.take(now: scheduler.nowNanoseconds, for: logger) {
            logger.notice("pairing with \(link.peer.address): \(kind.logName), waiting for the answer (pairing \(id))\(LogBudget.note(leftOut))",
                          metadata: metadata(link))
        }
    }

    private func dropPrompt(_ link: Link) {
        if let id = link.prompt?.id { prompts?.drop(id) }
        link.prompt = nil
    }

    // MARK: Securing a link

    /// Asks the central on the link for `level` (Vol 3, Part C, 10.2.1): at once `.reached(…,
    /// already: true)` when the link has it; else a Security Request (Vol 3, Part H, 3.6.7) whose
    /// AuthReq asks for MITM protection for levels 3 and 4, sent again while the central answers
    /// nothing (`securityRequestRepeats`), then the outcome once the central
    /// has paired or encrypted (or failed, or the link closed, or 30 s passed without an answer:
    /// the SMP timer starts with a Security Request, 3.4). A pairing already under way is waited
    /// for instead of asking again.
    public func secure(_ handle: UInt16, level: LESecurityLevel, completion: @escaping (SecureOutcome) -> Void) {
        guard let link = links[handle] else { return completion(.failed(.connectionDied, detail: "no such link")) }
        if link.security.level >= level { return completion(.reached(link.security, already: true)) }
        guard !link.responder.hasTimedOut else {
            return completion(.failed(.pairingFailure, detail: "SMP timed out earlier on this link (Vol 3, Part H, 3.4)"))
        }
        link.securing.append((level, completion))
        guard !link.responder.isPairing else { return }
        link.askedForSecurity = true
        link.centralAnswered = false
        sendSMP(handle, link.responder.securityRequest(mitm: level.needsMITM))
        stopSecurityRequestTimer(link)
        link.securityRequestTimer = scheduler.schedule(after: Self.timeout) { [weak self, weak link] in
            guard let self, let link else { return }
            link.securityRequestTimer = nil
            guard !link.responder.isPairing else { return }
            self.finishSecuring(link, .failed(.pairingFailure, detail: "the central did not answer the Security Request within 30 s"))
        }
        repeatSecurityRequest(on: link, after: 0)
        if let leftOut = peerLog.take(now: scheduler.nowNanoseconds, for: logger) {
            logger.info("asked \(link.peer.address) for security level \(level.rawValue) (Security Request)\(LogBudget.note(leftOut))",
                        metadata: metadata(link))
        }
    }

    /// Ends the `secure` calls waiting on the link whose level is settled by `security` (a
    /// pairing done, or encryption with a bond's key).
    private func settleSecuring(_ link: Link) {
        guard !link.securing.isEmpty else { return }
        let waiting = link.securing
        link.securing = []
        stopSecurityRequestTimer(link)
        for (level, completion) in waiting { completion(.judge(link.security, wanted: level)) }
    }

    /// A failure: to the `secure` calls waiting, else to `securityFailed`.
    private func failSecuring(_ link: Link, _ outcome: SecureOutcome) {
        guard link.securing.isEmpty else { return finishSecuring(link, outcome) }
        if case .failed(let failure, let detail) = outcome { securityFailed(link.handle, failure, detail) }
    }

    private func finishSecuring(_ link: Link, _ outcome: SecureOutcome) {
        let waiting = link.securing
        link.securing = []
        stopSecurityRequestTimer(link)
        for entry in waiting { entry.completion(outcome) }
    }

    private func stopSecurityRequestTimer(_ link: Link) {
        if let timer = link.securityRequestTimer { scheduler.cancel(timer) }
        link.securityRequestTimer = nil
        if let timer = link.securityRequestRepeat { scheduler.cancel(timer) }
        link.securityRequestRepeat = nil
    }

    /// Sends `secure`'s Security Request again after the `step`th wait of
    /// `securityRequestRepeats`, unless by then the central answered, a pairing runs, or no
    /// `secure` waits any more; asks for MITM protection if any waiting level needs it.
    private func repeatSecurityRequest(on link: Link, after step: Int) {
        guard step < Self.securityRequestRepeats.count else { return }
        link.securityRequestRepeat = scheduler.schedule(after: Self.securityRequestRepeats[step]) { [weak self, weak link] in
            guard let self, let link else { return }
            link.securityRequestRepeat = nil
            guard self.links[link.handle] === link, !link.securing.isEmpty, !link.centralAnswered,
                  !link.responder.isPairing, !link.responder.hasTimedOut else { return }
            let mitm = link.securing.contains { $0.level.needsMITM }
            self.sendSMP(link.handle, link.responder.securityRequest(mitm: mitm))
            if let leftOut = self.peerLog.take(now: self.scheduler.nowNanoseconds, for: self.logger) {
                self.logger.info("asked \(link.peer.address) again (Security Request \(step + 2)): it has not answered\(LogBudget.note(leftOut))",
                                 metadata: self.metadata(link))
            }
            self.repeatSecurityRequest(on: link, after: step + 1)
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

    private func paired(_ result: SMPPairingResult, on link: Link) {
        attempts.succeeded(link.peer.address)
        pairingCompleted(link.handle, result)
        let method = result.authenticated ? "authenticated" : "unauthenticated (Just Works)"
        let kind = result.secureConnections ? "LE Secure Connections" : "LE legacy"
        var bonded = false
        var note = ""
        if result.bonded, let key = result.longTermKey {
            if result.peerUsedDebugKey {
                note = "; not bonded: the central used the debug key, which anyone can decrypt with"
            } else {
                let bond = Bond(peer: link.peer, identity: result.peerIdentity?.address,
                                identityResolvingKey: result.peerIdentity?.resolvingKey, longTermKey: key,
                                encryptionKeySize: result.encryptionKeySize, secureConnections: result.secureConnections,
                                authenticated: result.authenticated, signatureKey: result.peerSignatureKey)
                let dropped = bonds.save(bond)
                bondSaved(bond)
                bonded = true
                note = "; bonded"
                for old in dropped {
                    logger.notice("\(old) dropped: the limit is \(bonds.limit) bonds, the oldest goes", metadata: metadata(link))
                }
            }
        } else if result.bonded {
            note = "; no key to keep (the central asked for none)"
        } else {
            note = "; not bonded (the central did not ask to bond)"
        }
        if link.security.isEncrypted {
            link.security.isAuthenticated = result.authenticated
            link.security.isSecureConnections = result.secureConnections
            link.security.isBonded = bonded
        }
        if let leftOut = outcomeLog.take(now: scheduler.nowNanoseconds, for: logger) {
            logger.event(.paired, .notice,
                         "paired with \(result.peerIdentity?.address.address.description ?? link.peer.address.description): \(kind), \(method), \(result.encryptionKeySize)-octet key\(note)\(LogBudget.note(leftOut))",
                         metadata(link))
        }
        tellSecurity(link)
        settleSecuring(link)
    }

    private func failed(reason: SMPPairingFailedReason?, origin: SMPFailureOrigin, on link: Link) {
        let reasonText = reason.map { "\(Self.describe($0)) (\(Hex.byte($0.rawValue)))" } ?? "no reason"
        let who: String
        switch origin {
        case .local: who = "blemu ended it"
        case .peer: who = "the central ended it"
        case .timeout: who = "no answer within \(Self.timeout) (SMP timeout); no more pairing on this link"
        }
        var wait = ""
        if let reason, PairingAttempts.counts(reason) {
            let seconds = attempts.failed(link.peer.address, now: scheduler.nowNanoseconds)
            wait = "; the next attempt from it waits \(Self.seconds(seconds)) s"
        }
        if let leftOut = outcomeLog.take(now: scheduler.nowNanoseconds, for: logger) {
            logger.event(.pairingFailed, .warning, "pairing with \(link.peer.address) failed: \(reasonText), \(who)\(wait)\(LogBudget.note(leftOut))",
                         metadata(link, reason: reason))
        }
        if !link.failureTold { failSecuring(link, .pairingFailed(reason, "pairing failed: \(reasonText), \(who)")) }
    }

    private func metadata(_ link: Link, reason: SMPPairingFailedReason? = nil) -> Logger.Metadata {
        .pairing(peer: link.peer, handle: link.handle, reason: reason)
    }

    static func seconds(_ nanoseconds: UInt64) -> String {
        String(Double(nanoseconds / 1_000_000) / 1000)
    }

    /// The reason's name in Vol 3, Part H, 3.5.5, Table 3.7.
    public static func describe(_ reason: SMPPairingFailedReason) -> String {
        switch reason {
        case .passkeyEntryFailed: "Passkey Entry Failed"
        case .oobNotAvailable: "OOB Not Available"
        case .authenticationRequirements: "Authentication Requirements"
        case .confirmValueFailed: "Confirm Value Failed"
        case .pairingNotSupported: "Pairing Not Supported"
        case .encryptionKeySize: "Encryption Key Size"
        case .commandNotSupported: "Command Not Supported"
        case .unspecifiedReason: "Unspecified Reason"
        case .repeatedAttempts: "Repeated Attempts"
        case .invalidParameters: "Invalid Parameters"
        case .dhKeyCheckFailed: "DHKey Check Failed"
        case .numericComparisonFailed: "Numeric Comparison Failed"
        case .brEdrPairingInProgress: "BR/EDR Pairing In Progress"
        case .crossTransportKeyDerivationNotAllowed: "Cross-transport Key Derivation/Generation Not Allowed"
        case .keyRejected: "Key Rejected"
        }
    }
}

/// The repeated-attempts rule (Vol 3, Part H, 2.3.6): after a failed pairing, the next attempt
/// from the same central waits, and the wait doubles with every further failure, so a passkey
/// cannot be guessed quickly. A success clears the central's count. Bounded: the 64 centrals
/// seen last are remembered.
struct PairingAttempts {
    static let limit = 64
    static let firstWait: UInt64 = 2_000_000_000
    static let longestWait: UInt64 = 300_000_000_000

    private struct Entry {
        var failures: Int
        var notBefore: UInt64
        var lastFailure: UInt64
    }
    private var entries: [BluetoothAddress: Entry] = [:]

    /// Failures that an attacker guessing a passkey or a key would cause (not protocol errors).
    static func counts(_ reason: SMPPairingFailedReason) -> Bool {
        switch reason {
        case .confirmValueFailed, .dhKeyCheckFailed, .passkeyEntryFailed, .numericComparisonFailed: true
        default: false
        }
    }

    /// Nanoseconds still to wait, or nil when an attempt may start.
    func remainingWait(for peer: BluetoothAddress, now: UInt64) -> UInt64? {
        guard let entry = entries[peer], entry.notBefore > now else { return nil }
        return entry.notBefore - now
    }

    /// Counts a failure; returns the wait it imposes.
    mutating func failed(_ peer: BluetoothAddress, now: UInt64) -> UInt64 {
        var entry = entries[peer] ?? Entry(failures: 0, notBefore: 0, lastFailure: now)
        entry.failures += 1
        let wait = min(Self.longestWait, Self.firstWait << UInt64(min(entry.failures - 1, 20)))
        entry.notBefore = now + wait
        entry.lastFailure = now
        entries[peer] = entry
        if entries.count > Self.limit, let oldest = entries.min(by: { $0.value.lastFailure < $1.value.lastFailure })?.key {
            entries.removeValue(forKey: oldest)
        }
        return wait
    }

    mutating func succeeded(_ peer: BluetoothAddress) {
        entries.removeValue(forKey: peer)
    }
}
