import BlemuCentral
import BlemuCore
import BlemuSMP
import BlemuSecurity
import Logging

/// The programmable host's security (Docs/CONTROL.md, "The programmable host": `pairing-config`,
/// `secure`, `pairing-answer`, `bonded`, `forget`; events `pairing-request`, `security`,
/// `security-failed`), both roles on one controller: the central's `CentralSecurity` attached to
/// the host's `CentralHost`, the peripheral side's `PeripheralSecurity` once handed over
/// (`attach(peripheral:)`), one `PairingPrompts` for both (ids unique across them), one
/// `PairingSettings` set on both, one IRK for both (the peripheral side's, once it is handed
/// over). The bonds of both roles and that IRK live in the state directory; without one, in
/// memory only (nothing written, as the host's random address).
public final class HostSecurity {
    /// The host's question from a pairing, as the `pairing-request` event tells it.
    public struct Request: Equatable, Sendable {
        public let link: Int
        public let pairing: UInt64
        public let kind: PairingPromptKind

        public init(link: Int, pairing: UInt64, kind: PairingPromptKind) {
            self.link = link
            self.pairing = pairing
            self.kind = kind
        }
    }

    public let prompts = PairingPrompts()
    public let central: CentralSecurity
    public private(set) var peripheral: PeripheralSecurity?
    /// How both roles pair from now on (`pairing-config`; `reset` puts back the defaults).
    public private(set) var settings = PairingSettings()

    /// The link id of a connection handle (nil: not a link of the host's table).
    var linkOfHandle: (UInt16) -> Int? = { _ in nil }
    var onEvent: (HostEvent) -> Void = { _ in }
    private let logger: Logger

    /// The file name prefix of the central's bond and identity files (`bonds-host-central-NAME.json`).
    public static let ownerDevice = "host-central"

    init(central host: CentralHost, stateDirectory: String?, name: String, scheduler: TimerScheduling, logger: Logger) {
        self.logger = logger
        // The files' owner: a label stable across runs and resets (the host's random address
        // changes with each reset; its public address is known only once the controller is up).
        let owner = BondOwner(device: Self.ownerDevice, name: name,
                              address: BluetoothAddress.staticRandom(seed: "blemu host " + (stateDirectory ?? "")))
        let directory = stateDirectory.map { $0.hasSuffix("/") ? $0 : $0 + "/" }
        let configuration = CentralSecurityConfiguration(bondStorePath: directory.map { $0 + owner.fileName },
                                                         identityPath: directory.map { $0 + owner.identityFileName })
        central = CentralSecurity(configuration: configuration, owner: owner, localAddress: host.ownSMPAddress,
                                  scheduler: scheduler, logger: logger)
        host.attach(security: central)
        wire(role: central)
        central.pairingSettings = settings
        central.prompts = prompts
        prompts.prompted = { [weak self] prompt in self?.prompted(prompt) }
    }

    /// The peripheral side's Security Manager (the programmed advertising's blank device): the
    /// same prompts and settings, its level rises and failures told as the central's.
    public func attach(peripheral security: PeripheralSecurity) {
        peripheral = security
        // One IRK for both roles: the peripheral side's, which the advertised resolvable private
        // addresses are made from, so a peer that bonded with either role resolves them.
        central.sharedResolvingKey = (existing: { [unowned security] in security.existingIdentity?.resolvingKey },
                                      make: { [unowned security] in security.identity.resolvingKey })
        security.prompts = prompts
        security.pairingSettings = settings
        let changed = security.securityChanged
        security.securityChanged = { [weak self] handle, state in
            changed(handle, state)
            self?.securityChanged(handle, state)
        }
        security.securityRose = { [weak self] handle, state in self?.securityRose(handle, state) }
        security.securityFailed = { [weak self] handle, failure, detail in self?.failed(handle, failure, detail) }
    }

    private func wire(role security: CentralSecurity) {
        let changed = security.securityChanged
        security.securityChanged = { [weak self] handle, state in
            changed(handle, state)
            self?.securityChanged(handle, state)
        }
        security.securityRose = { [weak self] handle, state in self?.securityRose(handle, state) }
        security.securityFailed = { [weak self] handle, failure, detail in self?.failed(handle, failure, detail) }
    }

    /// The host's identity, which the central distributes in Identity Address Information
    /// (Vol 3, Part H, 3.6.5: its public address, or its static random one without).
    func identityIs(_ identity: LEAddress) { central.localAddress = identity }

    // MARK: Requests

    /// `pairing-config`: the next pairings of both roles take `settings` (one under way keeps its terms).
    public func configure(_ settings: PairingSettings) {
        self.settings = settings
        central.pairingSettings = settings
        peripheral?.pairingSettings = settings
    }

    /// `secure`: brings `link` (its connection handle and role) to `level`. Returns true when the
    /// link has it already (nothing done, no event); otherwise the outcome comes as `security`
    /// (a level rise, told by the role) or `security-failed`.
    func secure(link: Int, handle: UInt16, role: HostRole, level: LESecurityLevel) throws(HostError) -> Bool {
        var already: Bool?
        let completion: (SecureOutcome) -> Void = { [weak self] outcome in
            switch outcome {
            case .reached(_, let wasAlready):
                // A rise is told by `securityRose` (whoever started it), so nothing more here.
                if already == nil { already = wasAlready }
            case .failed(let failure, let detail):
                if already == nil { already = false }
                self?.onEvent(.securityFailed(link: link, reason: failure, detail: detail))
            }
        }
        switch role {
        case .central:
            central.secure(handle, level: level, completion: completion)
        case .peripheral:
            guard let peripheral else { throw HostError(nil, "the peripheral side has no Security Manager attached") }
            peripheral.secure(handle, level: level, completion: completion)
        }
        return already ?? false
    }

    /// `pairing-answer`.
    public func answer(_ pairing: UInt64, _ answer: PairingAnswer) throws(HostError) {
        do {
            try prompts.answer(pairing, answer)
        } catch .unknownPairing {
            throw HostError(.unknownPairing, "no pairing \(pairing) waits for an answer (never asked, answered already, or its pairing ended)")
        } catch {
            throw HostError(nil, "pairing \(pairing): \(error)")
        }
    }

    /// The bond stores of both roles.
    public var stores: [BondStore] { [central.bonds] + (peripheral.map { [$0.bonds] } ?? []) }

    /// `bonded`.
    public func isBonded(_ peer: LEAddress) -> Bool { BondQueries.isBonded(peer, in: stores) }

    /// `forget`: whether there was a bond.
    public func forget(_ peer: LEAddress) -> Bool {
        let forgotten = BondQueries.forget(peer, in: stores)
        if forgotten { logger.notice("bonds of \(peer.address) forgotten") }
        return forgotten
    }

    /// Part of `reset`: every bond of both roles deleted (the files written), the IRK forgotten
    /// (the peripheral side's identity file removed, and the central's own, which an older blemu
    /// wrote; a new IRK when next needed), the pairing
    /// settings back to their defaults, the peripheral's waiting intervals after failed
    /// pairings forgotten (Vol 3, Part H, 2.3.6). The links close with the reset, and with
    /// them their prompts.
    func reset() {
        var count = 0
        for store in stores { count += store.forget(nil).count }
        central.forgetIdentity()
        // The peripheral side's too: the resolvable private addresses advertised after the
        // reset are made from a new IRK, which no central bonded before resolves.
        peripheral?.forgetIdentity()
        configure(PairingSettings())
        peripheral?.forgetPairingAttempts()
        logger.notice("reset: \(count) bond(s) and the IRK deleted, pairing settings back to their defaults")
    }

    // MARK: Events

    private func prompted(_ prompt: PairingPrompt) {
        guard let link = linkOfHandle(prompt.handle) else {
            // A link the host does not hold (it cannot be named to the program): refused.
            try? prompts.answer(prompt.id, .reject)
            return
        }
        onEvent(.pairingRequest(Request(link: link, pairing: prompt.id, kind: prompt.kind)))
    }

    /// What each link's last `security` event told: a level rise, or the link turning bonded.
    private var told: [UInt16: (level: LESecurityLevel, bonded: Bool)] = [:]

    private func securityRose(_ handle: UInt16, _ security: LinkSecurity) {
        told[handle] = (security.level, security.isBonded)
        guard let link = linkOfHandle(handle) else { return }
        onEvent(.security(link: link, security))
    }

    /// A link that turns bonded at the level last told (its keys distributed and kept, a moment
    /// after the pairing's encryption raised the level) is told again, with `bonded` true. The
    /// roles tell a change before its rise, so a rise that comes bonded is told once, as the rise.
    private func securityChanged(_ handle: UInt16, _ security: LinkSecurity) {
        guard let last = told[handle] else { return }
        guard security.isBonded, !last.bonded, security.level == last.level, security.level > .none else {
            if !security.isEncrypted { told[handle] = nil }
            return
        }
        told[handle] = (security.level, true)
        guard let link = linkOfHandle(handle) else { return }
        onEvent(.security(link: link, security))
    }

    /// A link closed: its handle may name another link next.
    func linkClosed(handle: UInt16) { told[handle] = nil }

    private func failed(_ handle: UInt16, _ failure: SecureFailure, _ detail: String) {
        guard let link = linkOfHandle(handle) else { return }
        onEvent(.securityFailed(link: link, reason: failure, detail: detail))
    }
}
