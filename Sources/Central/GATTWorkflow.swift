import BlemuATT
import BlemuCore
import BlemuCrypto
import BlemuGATT
import BlemuGATTClient
import BlemuSMP
import BlemuSecurity
import Logging

/// The GATT workflows of one connected central link, as a phone runs them (`blemu gatt`, and
/// any front end): the database found and followed, a request refused for want of security
/// retried once after securing the link, every value read (a dump), what notifies recorded.
///
/// A failure that ends the workflow (securing refused, discovery failed, a read timed out) goes
/// to `onFailure` as one line; what a person should know on the way (securing, retrying) to
/// `onNote`. The results go to the completions: printing them is the front end's.
public final class GATTWorkflow {
    public let link: CentralLink
    public let security: CentralSecurity
    public let scheduler: TimerScheduling
    public let logger: Logger
    public var onNote: ((String) -> Void)?
    public var onFailure: ((String) -> Void)?
    /// Whether requests may go on Enhanced ATT bearers (`--eatt`): opened once the link is
    /// encrypted (Vol 3, Part G, 3.6) and the peer says it supports them.
    /// Off unless told (`blemu gatt` says auto): other front ends keep their one bearer.
    public var eatt: EATTUse = .off
    /// The enhanced bearers opened (0: the unenhanced bearer only).
    public private(set) var enhancedBearers = 0
    /// The most bearers that carried one batch of reads, writes or subscriptions (`dump`, `read`
    /// or `write` of several, `record`).
    public private(set) var bearersUsed = 0
    /// Whether enhanced bearers were asked for already (once per link).
    private var triedEATT = false
    /// A request refused for want of security is retried once, after securing the link.
    private var retriedAfterSecuring = false
    /// Values recorded per value handle, at most `maxRecorded` each: a peer's notifications
    /// cannot grow memory without bound.
    public static let maxRecorded = 64

    public init(link: CentralLink, security: CentralSecurity, scheduler: TimerScheduling, logger: Logger) {
        self.link = link
        self.security = security
        self.scheduler = scheduler
        self.logger = logger
    }

    public var client: GATTClient { link.client }

    /// The ATT errors that say a request wants a more secure link (Vol 3, Part C, 10.3.2):
    /// Insufficient Authentication, Insufficient Encryption, Encryption Key Size Too Short.
    public static let securityRefusals: [ATTError] = [.insufficientAuthentication, .insufficientEncryption, .encryptionKeySizeTooShort]

    /// MTU, discovery, then Service Changed followed, as phones do, then the enhanced bearers
    /// (`openEnhancedBearers`); `then` with the database. `securingLater`: the run reads first
    /// over the link as it is and secures it after (`dump --profile --pair`), so the enhanced
    /// bearers, which need an encrypted link (Vol 3, Part G, 3.6), open when it is secured
    /// (`secure` opens them), even with `.require`, which would otherwise pair first.
    public func prepare(securingLater: Bool = false, then: @escaping ([RemoteService]) -> Void) {
        client.exchangeMTU { [self] _ in
            // An MTU refusal leaves the default, which still works.
            client.discoverAll { [self] result in
                switch result {
                case .failure(let error): onFailure?("discovery: \(error)")
                case .success(let services):
                    // A refusal to follow changes nothing else.
                    client.followServiceChanged { [self] _ in
                        guard securingLater, eatt != .off, !security.security(of: link.handle).isEncrypted else {
                            return openEnhancedBearers { then(services) }
                        }
                        onNote?("eatt: the first reads go over the unenhanced bearer, enhanced bearers open once the link is secured")
                        then(services)
                    }
                }
            }
        }
    }

    /// Secures the link (encryption with the bond, or pairing), says how, then `then`.
    public func secure(because refusal: ATTError?, then: @escaping (LinkSecurity) -> Void) {
        let bonded = security.bonds.bond(for: link.peer) != nil
        if let refusal {
            onNote?("refused for want of security (\(refusal)): \(bonded ? "encrypting with our bond" : "pairing"), then trying once more")
        } else {
            onNote?(bonded ? "encrypting with our bond" : "pairing")
        }
        security.secure(link.handle) { [self] result in
            switch result {
            case .failure(let error):
                let hint = PairingHint.forFailure(error, passkeyGiven: security.configuration.passkey != nil).map { ": " + $0 } ?? ""
                onFailure?("securing the link with \(link.peer.address): \(error)\(hint)")
            case .success(let linkSecurity):
                onNote?("\(security.wasPaired(link.handle) ? "paired" : "encrypted with our bond"): \(linkSecurity.summary)")
                // Enhanced ATT bearers only on an encrypted link (Vol 3, Part G, 3.6): now.
                openEnhancedBearers { then(linkSecurity) }
            }
        }
    }

    /// Runs `request`; when the peripheral refuses it for want of security (0x05, 0x0F or 0x0C;
    /// Vol 3, Part C, 10.3.2), secures the link and runs it once more, as a phone does.
    public func retryingOnSecurity<T>(_ request: @escaping (@escaping (Result<T, GATTClientError>) -> Void) -> Void,
                                      completion: @escaping (Result<T, GATTClientError>) -> Void) {
        request { [self] result in
            if case .failure(.att(let error, _)) = result, !retriedAfterSecuring, Self.securityRefusals.contains(error) {
                retriedAfterSecuring = true
                secure(because: error) { _ in request(completion) }
                return
            }
            completion(result)
        }
    }

    /// Opens the link's Enhanced ATT bearers as `eatt` says, once, when the link is encrypted
    /// (Vol 3, Part G, 3.6): `.auto` goes on with the unenhanced bearer alone when the peer has
    /// no EATT or refuses, or when the link is not encrypted; `.require` secures the link for
    /// them, and ends the workflow when the peer has none. `then` when settled.
    public func openEnhancedBearers(then: @escaping () -> Void) {
        guard eatt != .off, !triedEATT else { return then() }
        guard security.security(of: link.handle).isEncrypted else {
            // secure() comes back here once encrypted.
            guard eatt == .require else { return then() }
            return secure(because: nil) { _ in then() }
        }
        triedEATT = true
        link.openEnhancedBearers { [self] result in
            switch result {
            case .success(let clients):
                enhancedBearers = clients.count
                onNote?("eatt: \(clients.count) enhanced ATT bearer\(clients.count == 1 ? "" : "s") open (ATT_MTU \(clients.first?.mtu ?? 0))")
                then()
            case .failure(let error):
                let why = error == .att(.requestNotSupported, handle: 0) ? "the peer does not support EATT" : "enhanced bearers refused (\(error))"
                guard eatt == .auto else { onFailure?("--eatt require: \(why)"); return }
                onNote?("eatt: \(why): one bearer")
                then()
            }
        }
    }

    /// Reads every handle, spread over the link's bearers (one request at a time on each,
    /// Vol 3, Part F, 3.3.2); what was refused for want of security is read once more after
    /// securing the link, as `retryingOnSecurity` does (and over the bearers that opened then).
    public func read(_ handles: [UInt16], then: @escaping ([UInt16: Result<[UInt8], GATTClientError>]) -> Void) {
        retryingRefusedOnce(handles, handle: { $0 }, perform: { [link] in link.read($0, then: $1) }, then: then)
    }

    /// Writes every value with a response, spread over the link's bearers (`CentralLink.write`:
    /// a long write stays whole on one bearer); what was refused for want of security is written
    /// once more after securing the link, as `read` does. `then` with each handle's result.
    public func write(_ writes: [(handle: UInt16, value: [UInt8])],
                      then: @escaping ([UInt16: Result<Void, GATTClientError>]) -> Void) {
        retryingRefusedOnce(writes, handle: { $0.handle }, perform: { [link] in link.write($0, then: $1) }, then: then)
    }

    /// Performs the requests for `items` (a read or write over the bearers); when some were
    /// refused for want of security, secures the link for the first refusal and performs those
    /// once more, their new results replacing the old.
    private func retryingRefusedOnce<Item, Value>(
        _ items: [Item], handle: @escaping (Item) -> UInt16,
        perform: @escaping ([Item], @escaping ([UInt16: Result<Value, GATTClientError>], Int) -> Void) -> Void,
        then: @escaping ([UInt16: Result<Value, GATTClientError>]) -> Void
    ) {
        perform(items) { [self] results, used in
            bearersUsed = max(bearersUsed, used)
            let refused = items.filter {
                guard case .failure(.att(let error, _))? = results[handle($0)] else { return false }
                return Self.securityRefusals.contains(error)
            }
            guard let first = refused.first, !retriedAfterSecuring,
                  case .failure(.att(let error, _))? = results[handle(first)] else {
                return then(results)
            }
            retriedAfterSecuring = true
            secure(because: error) { [self] _ in
                perform(refused) { [self] again, used in
                    bearersUsed = max(bearersUsed, used)
                    then(results.merging(again) { _, new in new })
                }
            }
        }
    }

    /// Subscribes to each characteristic (notifications when it notifies, else indications),
    /// the CCCD writes spread over the link's bearers (`CentralLink.subscribe`); one that
    /// fails is logged and the rest go on.
    /// `then` with the value handles whose subscription failed, and why.
    private func subscribe(_ characteristics: [RemoteCharacteristic], what: String,
                           then: (([UInt16: GATTClientError]) -> Void)? = nil) {
        link.subscribe(characteristics) { [self] results, used in
            bearersUsed = max(bearersUsed, used)
            var failed: [UInt16: GATTClientError] = [:]
            for characteristic in characteristics {
                if case .failure(let error)? = results[characteristic.valueHandle] {
                    logger.warning("\(what): \(characteristic.uuid) could not be subscribed: \(error)")
                    failed[characteristic.valueHandle] = error
                }
            }
            then?(failed)
        }
    }

    /// Every value of a dump, and what each refusal showed.
    public struct Dump {
        public var services: [RemoteService]
        public var values: [UInt16: Result<[UInt8], GATTClientError>] = [:]
        /// The ATT error codes each refused handle answered, in order (a stranger's, then after securing).
        public var refusals: [UInt16: [UInt8]] = [:]
        /// Handles read only once the link was secured: whether it was authenticated then.
        public var readSecured: [UInt16: Bool] = [:]

        public init(services: [RemoteService], values: [UInt16: Result<[UInt8], GATTClientError>] = [:],
                    refusals: [UInt16: [UInt8]] = [:], readSecured: [UInt16: Bool] = [:]) {
            self.services = services
            self.values = values
            self.refusals = refusals
            self.readSecured = readSecured
        }
    }

    /// Every characteristic value that can be read and every descriptor, and what each refusal
    /// showed. Nothing is written: a dump must not change the device. `secureAndRetry`: the
    /// reads go over the link as it is first, then the link is secured and what was refused for
    /// want of security read again (`dump --profile --pair`). Without it, a central with a bond
    /// for the peer encrypts with the bond when something was refused for want of security and
    /// reads that again, as `read` does; it never pairs.
    public func dump(_ services: [RemoteService], secureAndRetry: Bool, then: @escaping (Dump) -> Void) {
        var handles: [UInt16] = []
        for service in services {
            for characteristic in service.characteristics {
                if characteristic.properties.contains(.read) { handles.append(characteristic.valueHandle) }
                handles += characteristic.descriptors.map(\.handle)
            }
        }
        var dump = Dump(services: services)
        // The reads spread over the link's bearers (one at a time on each, Part F, 3.3.2).
        func read(_ pending: [UInt16], then finish: @escaping () -> Void) {
            link.read(pending) { [self] results, used in
                bearersUsed = max(bearersUsed, used)
                for handle in pending {
                    guard let result = results[handle] else { continue }
                    if case .failure(.timeout) = result { onFailure?("read of handle \(Hex.word(handle)) timed out"); return }
                    if case .failure(.att(let error, _)) = result { dump.refusals[handle, default: []].append(error.rawValue) }
                    dump.values[handle] = result
                }
                finish()
            }
        }
        read(handles) { [self] in
            let refused = handles.filter {
                guard case .failure(.att(let error, _))? = dump.values[$0] else { return false }
                return Self.securityRefusals.contains(error)
            }
            // A bond from before is used as `read` uses it (Vol 3, Part C, 10.3.2): a link not yet
            // encrypted is encrypted with it and the refused values read again. Without one (or
            // `secureAndRetry`) a dump does not pair by itself.
            let encryptsWithBond = !retriedAfterSecuring && !refused.isEmpty && security.bonds.bond(for: link.peer) != nil
                && !security.security(of: link.handle).isEncrypted
            guard secureAndRetry || encryptsWithBond else { return then(dump) }
            retriedAfterSecuring = true
            let firstRefusal: ATTError? = refused.first.flatMap {
                guard case .failure(.att(let error, _))? = dump.values[$0] else { return nil }
                return error
            }
            secure(because: secureAndRetry ? nil : firstRefusal) { linkSecurity in
                read(refused) {
                    for handle in refused { if case .success? = dump.values[handle] { dump.readSecured[handle] = linkSecurity.isAuthenticated } }
                    then(dump)
                }
            }
        }
    }

    /// Subscribes to everything that notifies or indicates and records what comes for
    /// `seconds` (at most `maxRecorded` values per characteristic); `then` with the values.
    public func record(_ services: [RemoteService], for seconds: Double, then: @escaping ([UInt16: [[UInt8]]]) -> Void) {
        let notifying = services.flatMap(\.characteristics).filter {
            !$0.properties.isDisjoint(with: [.notify, .indicate]) && $0.clientConfigurationHandle != nil
        }
        let handles = Set(notifying.map(\.valueHandle))
        var recorded: [UInt16: [[UInt8]]] = [:]
        let keep: (UInt16, ArraySlice<UInt8>) -> Void = { handle, value in
            guard handles.contains(handle), recorded[handle, default: []].count < Self.maxRecorded else { return }
            recorded[handle, default: []].append(Array(value))
        }
        client.onNotification = keep
        client.onIndication = keep
        subscribe(notifying, what: "capture")
        scheduler.schedule(after: .milliseconds(Int64(seconds * 1000))) { then(recorded) }
    }
}

extension GATTWorkflow {
    /// One value a peripheral notified or indicated while recording: seconds from the start.
    public struct Heard: Equatable, Sendable {
        public var at: Double
        public var handle: UInt16
        public var value: [UInt8]
        public var indication: Bool

        public init(at: Double, handle: UInt16, value: [UInt8], indication: Bool) {
            self.at = at
            self.handle = handle
            self.value = value
            self.indication = indication
        }
    }

    /// A recording keeps at most this many values (`blemu gatt ... record`); more are counted, not kept.
    public static let maxHeard = 100_000

    /// `blemu gatt ... record`: subscribes to everything that notifies (notifications) or
    /// indicates, and keeps every value that comes for `seconds` with its time from the
    /// start (at most `maxHeard`; `then` gets how many more were not kept, and the value
    /// handles whose subscription failed with why).
    public func recordTimeline(_ services: [RemoteService], for seconds: Double,
                               then: @escaping (_ heard: [Heard], _ notKept: Int, _ notSubscribed: [UInt16: GATTClientError]) -> Void) {
        let notifying = services.flatMap(\.characteristics).filter {
            !$0.properties.isDisjoint(with: [.notify, .indicate]) && $0.clientConfigurationHandle != nil
        }
        let handles = Set(notifying.map(\.valueHandle))
        var heard: [Heard] = []
        var notKept = 0
        let start = scheduler.nowNanoseconds
        func keep(_ indication: Bool) -> (UInt16, ArraySlice<UInt8>) -> Void {
            { [scheduler] handle, value in
                guard handles.contains(handle) else { return }
                guard heard.count < Self.maxHeard else { notKept += 1; return }
                heard.append(Heard(at: Double(scheduler.nowNanoseconds &- start) / 1e9, handle: handle, value: Array(value),
                                   indication: indication))
            }
        }
        client.onNotification = keep(false)
        client.onIndication = keep(true)
        var notSubscribed: [UInt16: GATTClientError] = [:]
        subscribe(notifying, what: "record") { notSubscribed = $0 }
        scheduler.schedule(after: .milliseconds(Int64(seconds * 1000))) { [client] in
            client.onNotification = nil
            client.onIndication = nil
            then(heard, notKept, notSubscribed)
        }
    }
}

/// What to do about a pairing that failed, when the reason says more than its name.
public enum PairingHint {
    /// Passkey Entry with a passkey typed that is not the peripheral's ends in Confirm Value
    /// Failed (Vol 3, Part H, 2.3.5.6.3: each bit's confirm value mismatches), from either side.
    public static func forFailure(_ error: CentralSecurityError, passkeyGiven: Bool) -> String? {
        guard case .pairingFailed(reason: .confirmValueFailed?, _) = error, passkeyGiven else { return nil }
        return "the --passkey given is probably not the peripheral's passkey: a blemu device logs the one it made up "
            + "at start (`centrals pair with the passkey NNNNNN`), keeps it in passkey-DEVICE-NAME.txt in its --state-dir "
            + "and shows it in `blemu ctl PATH list` (\"passkey\"); a real device has it on its label or screen"
    }
}
