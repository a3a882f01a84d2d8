import BlemuCentral
import BlemuCore
import BlemuHCI
import BlemuProgrammableHost
import BlemuSecurity
import Logging

/// Runs `host` requests against the programmable host and builds their replies; encodes its
/// events for the watchers (`watch host`). A refusal carries the host's `code` beside `error`.
/// Requests that change something are logged (notice), as the devices' are; refusals and the
/// read-only ops within a budget, since a client sets their pace.
public final class HostControl {
    public let host: ProgrammableHost
    private let logger: Logger
    private var budget = LogBudget(burst: 100, window: .seconds(10))

    public init(host: ProgrammableHost, logger: Logger) {
        self.host = host
        self.logger = logger
    }

    /// The reply to one decoded request.
    public func execute(_ request: HostRequest, id: Int64, client: Int) -> JSONValue {
        func ok(_ members: [(String, JSONValue)] = []) -> JSONValue {
            .object([("id", .integer(id)), ("ok", true)] + members)
        }
        do throws(HostError) {
            switch request {
            case .address:
                guard host.isReady else { throw HostError(.notReady, "the controller is not ready") }
                let identity = host.identity
                return ok([("address", .string(identity.address.description)),
                           ("address_type", .string(identity.isRandom ? "random" : "public")),
                           ("random_address", .string(host.randomAddress.address.description))])
            case .reset:
                try host.reset()
                log(client, "reset started")
                return ok()
            case .scan(let scan):
                let scanID = try host.startScan(scan)
                log(client, "scan \(scanID) started (\(scan.passive ? "passive" : "active"), \(HostWords.phys(scan.phys).joined(separator: "+")))")
                return ok([("scan", .integer(Int64(scanID)))])
            case .scanStop(let scan):
                try host.stopScan(scan)
                log(client, "scan \(scan) stopped")
                return ok()
            case .connect(let connect):
                let attempt = try host.connect(connect)
                log(client, "attempt \(attempt): connecting to \(connect.peer)")
                return ok([("attempt", .integer(Int64(attempt)))])
            case .disconnect(let link, let reason):
                try host.disconnect(link: link, reason: reason)
                log(client, "link \(link) asked to close (reason \(Hex.byte(reason)))")
                return ok()
            case .advertise(let advertise):
                let advertisement = try host.startAdvertising(advertise)
                log(client, "advertisement \(advertisement) started")
                return ok([("advertisement", .integer(Int64(advertisement)))])
            case .advertiseStop(let advertisement):
                try host.stopAdvertising(advertisement)
                log(client, "advertisement \(advertisement) stopped")
                return ok()
            case .links:
                logBudgeted(.info, "control client \(client): host links: \(host.links.count) link(s)")
                return ok([("links", .array(host.links.entries.map { .object(Self.members($0.summary)) }))])
            case .channelConnect, .channelListen, .channelUnlisten, .channelSend, .channelDisconnect:
                return ok(try runChannel(request, client: client))
            case .pairingConfig(let settings):
                host.security.configure(settings)
                log(client, "pairing settings: \(HostWords.ioCapability(settings.ioCapability)), bonding \(settings.bondable), MITM \(settings.mitm), SC only \(settings.secureConnectionsOnly), keys \(HostWords.keys(settings.keys).joined(separator: ","))")
                return ok()
            case .secure(let link, let level):
                let already = try host.secure(link: link, level: level)
                log(client, "link \(link): securing to level \(level.rawValue)\(already ? " (it has it already)" : "")")
                return already ? ok([("already", true)]) : ok()
            case .pairingAnswer(let pairing, let answer):
                try host.security.answer(UInt64(pairing), answer)
                log(client, "pairing \(pairing) answered")
                return ok()
            case .bonded(let peer):
                logBudgeted(.info, "control client \(client): host bonded \(peer.address)")
                return ok([("bonded", .bool(host.security.isBonded(peer)))])
            case .forget(let peer):
                let forgotten = host.security.forget(peer)
                log(client, "forget \(peer.address): \(forgotten ? "bonds deleted" : "no bond")")
                return ok([("forgotten", .bool(forgotten))])
            }
        } catch {
            logBudgeted(.warning, "control client \(client): host \(request.op): refused: \(printable(error.message, limit: 400))")
            var members: [(String, JSONValue)] = [("id", .integer(id)), ("ok", false), ("error", .string(error.message))]
            if let code = error.code { members.append(("code", .string(code.rawValue))) }
            return .object(members)
        }
    }

    func log(_ client: Int, _ what: String) {
        logger.event(.controlCommand, .notice, "control client \(client): host: \(what)")
    }

    func logBudgeted(_ level: Logger.Level, _ message: String) {
        guard logger.logLevel <= level, let leftOut = budget.take(now: host.controller.scheduler.nowNanoseconds, for: logger) else { return }
        logger.event(.controlCommand, level, "\(message)\(LogBudget.note(leftOut))")
    }

    // MARK: Events

    /// An event as a watcher's line shows it, without `seq` and `t`.
    public static func members(_ event: HostEvent) -> [(String, JSONValue)] {
        var members: [(String, JSONValue)] = [("event", .string(event.name)), ("device", "host")]
        switch event {
        case .reset:
            break
        case .advertisement(let scan, let report):
            members += [
                ("scan", .integer(Int64(scan))), ("address", .string(report.address.description)),
                ("address_type", .string(HostWords.addressType(report.addressType))),
                ("legacy", .bool(report.isLegacy)), ("connectable", .bool(report.isConnectable)),
                ("scannable", .bool(report.isScannable)), ("directed", .bool(report.isDirected)),
                ("scan_response", .bool(report.isScanResponse)), ("truncated", .bool(report.isTruncated)),
                ("sid", report.sid.map { .integer(Int64($0)) } ?? .null),
                ("primary_phy", .string(HostWords.phy(report.primaryPHY))),
                ("secondary_phy", report.secondaryPHY.map { .string(HostWords.phy($0)) } ?? .null),
                ("tx_power", report.txPower.map { .integer(Int64($0)) } ?? .null),
                ("rssi", report.rssi.map { .integer(Int64($0)) } ?? .null),
                // 1.25 ms units (7.7.65.13).
                ("periodic_interval_ms", report.periodicInterval.map { .number(Double($0) * 1.25) } ?? .null),
                ("direct_address", report.directAddress.map { .string($0.description) } ?? .null),
                ("direct_address_type", report.directAddressType.map { .string(HostWords.addressType($0)) } ?? .null),
                ("data", .string(Hex.bytes(report.data))),
            ]
        case .scanStopped(let scan, let reason):
            members += [("scan", .integer(Int64(scan))), ("reason", .string(reason.rawValue))]
        case .connected(let link):
            members += Self.members(link).filter { !["encrypted", "level"].contains($0.0) }
            members += [("interval_ms", .number(Double(link.interval) * 1.25)), ("latency", .integer(Int64(link.latency))),
                        ("timeout_ms", .integer(Int64(link.supervisionTimeout) * 10))]
        case .connectFailed(let attempt, let reason, let status):
            members += [("attempt", .integer(Int64(attempt))), ("reason", .string(reason.rawValue)),
                        ("status", status.map { .string(Hex.byte($0)) } ?? .null)]
        case .disconnected(let link, let reason):
            members += [("link", .integer(Int64(link))), ("reason", .string(Hex.byte(reason)))]
        case .advertisingStopped(let advertisement, let reason):
            members += [("advertisement", .integer(Int64(advertisement))), ("reason", .string(reason.word)),
                        ("status", reason.status.map { .string(Hex.byte($0)) } ?? .null)]
        case .channelOpened, .channelFailed, .channelData, .channelReady, .channelClosed:
            members += channelMembers(event)
        case .pairingRequest(let request):
            members += [("link", .integer(Int64(request.link))), ("pairing", .integer(Int64(request.pairing))),
                        ("method", .string(HostWords.method(request.kind))),
                        ("passkey", request.kind.shownValue.map { .integer(Int64($0)) } ?? .null)]
        case .security(let link, let security):
            members += [("link", .integer(Int64(link))), ("level", .integer(Int64(security.level.rawValue))),
                        ("encrypted", .bool(security.isEncrypted)), ("key_size", .integer(Int64(security.encryptionKeySize))),
                        ("authenticated", .bool(security.isAuthenticated)),
                        ("secure_connections", .bool(security.isSecureConnections)), ("bonded", .bool(security.isBonded))]
        case .securityFailed(let link, let reason, let detail):
            members += [("link", .integer(Int64(link))), ("reason", .string(reason.rawValue)),
                        ("detail", .string(printable(detail, limit: 400)))]
        }
        return members
    }

    /// A link as `links` lists it (and `connected` begins).
    public static func members(_ link: HostLinkSummary) -> [(String, JSONValue)] {
        var members: [(String, JSONValue)] = [
            ("link", .integer(Int64(link.link))), ("role", .string(link.role.rawValue)), ("handle", .integer(Int64(link.handle))),
            ("peer", .string(link.peer.address.description)), ("peer_type", .string(link.peer.isRandom ? "random" : "public")),
            ("own_address", .string(link.ownAddress.address.description)),
            ("own_address_type", .string(link.ownAddress.isRandom ? "random" : "public")),
            ("encrypted", .bool(link.security.isEncrypted)), ("level", .integer(Int64(link.level))),
        ]
        if let attempt = link.attempt { members.append(("attempt", .integer(Int64(attempt)))) }
        if let advertisement = link.advertisement { members.append(("advertisement", .integer(Int64(advertisement)))) }
        return members
    }
}
