import BlemuATT
import BlemuCore
import BlemuGATT
import BlemuHost
import BlemuSecurity
import Logging

/// Runs control requests against the running devices, through the `Peripheral` control API,
/// and builds the replies (Docs/CONTROL.md). Each request is logged as `control-command` with
/// its result: commands that change something always (notice), the rest — `list`, refused
/// and malformed requests — within a budget, since a client sets their pace.
public final class DeviceControl {
    private let devices: () -> [Peripheral]
    private let logger: Logger
    private let scheduler: TimerScheduling
    private var budget = LogBudget(burst: 100, window: .seconds(10))

    /// Who takes `watch` requests (set once the server exists); without it `watch` is refused.
    public var watchers: EventWatchers?
    /// The programmable host (`blemu host`); without it `host` requests are refused.
    public var host: HostControl?
    /// The device name `watch` takes for the programmable host's events.
    public static let hostWatchName = "host"
    /// The fleet of each device (`DeviceNames.Entry.fleet`), by the index `devices` gives it.
    public var fleets: [String?] = []
    /// A `list` reply holds devices up to this many bytes of JSON; the devices past it are
    /// counted (`left_out`). So one reply, with the 64 KiB of replies a client may leave
    /// waiting (`outputHighWater`), stays within the socket's `outputLimit` (1 MiB, past which
    /// the client would be dropped) and the line a client reads (the Python kit's 1 MiB):
    /// about 1,100 thermometers (860 bytes each).
    public var maxListBytes = 960 * 1024

    /// Log lines the budget left out so far.
    public var logLinesLeftOut: Int { budget.leftOutTotal }

    /// `devices` gives the running devices in command-line order, each time a request needs them.
    public init(logger: Logger, scheduler: TimerScheduling, devices: @escaping () -> [Peripheral]) {
        self.logger = logger
        self.scheduler = scheduler
        self.devices = devices
    }

    // MARK: Requests

    /// The reply line (without its newline) to one request line from client `client`.
    public func reply(to line: ArraySlice<UInt8>, client: Int) -> String {
        switch ControlRequest.decode(line: line) {
        case .failure(let error):
            let shown = quoted(String(decoding: line.prefix(48), as: UTF8.self), limit: 48)
            logBudgeted(.warning, "control client \(client): refused \(line.count)-byte line \(shown): \(printable(error.message, limit: 400))")
            return Self.errorReply(id: error.id, error.message).encoded
        case .success(let request):
            return execute(request, client: client).encoded
        }
    }

    /// Runs one decoded request; the reply carries its id.
    public func execute(_ request: ControlRequest, client: Int) -> JSONValue {
        let peripherals = devices()
        let names = DeviceNames(peripherals.map { ($0.deviceName, $0.configuration.name) }, fleets: fleets)
        let summary = Self.summary(of: request.command)

        func refuse(_ message: String, _ peripheral: Peripheral? = nil) -> JSONValue {
            logBudgeted(.warning, "control client \(client): \(summary): refused: \(printable(message, limit: 400))", peripheral)
            return Self.errorReply(id: request.id, message)
        }
        func done(_ peripheral: Peripheral, _ result: String, _ members: [(String, JSONValue)]) -> JSONValue {
            if client == 0 {
                // A scenario's step (client 0): a `repeat` runs them as fast as the loop turns,
                // so its lines go within the budget, what it leaves out counted.
                logBudgeted(.notice, "scenario: \(summary): \(result)", peripheral)
            } else {
                peripheral.logger.event(.controlCommand, .notice, "control client \(client): \(summary): \(result)")
            }
            return .object([("id", .integer(request.id)), ("ok", true)] + members)
        }
        func target(_ name: String) -> Result<(Peripheral, String), ControlRequestError> {
            names.resolveOne(name, command: request.command.name).map { (peripherals[$0], names.entries[$0].ref) }
        }

        switch request.command {
        case .host(let hostRequest):
            guard let host else {
                return refuse("this blemu runs no programmable host: start one with `blemu host --controller SPEC --control PATH`")
            }
            return host.execute(hostRequest, id: request.id, client: client)

        case .watch(let filter) where filter.device == Self.hostWatchName && host != nil:
            guard let watchers else { return refuse("this control socket has no event stream") }
            guard filter.kinds == nil, filter.uuid == nil else {
                return refuse("watch host takes no kinds or uuid: it streams every event of the host")
            }
            watchers.add(client: client, filter: filter, devices: [], host: true)
            logBudgeted(.info, "control client \(client): \(summary): watching the host")
            return .object([("id", .integer(request.id)), ("ok", true), ("watching", true), ("device", .string(Self.hostWatchName)),
                            ("kinds", .null), ("uuid", .null)])

        case .watch(let filter):
            guard let watchers else { return refuse("this control socket has no event stream") }
            var devices: Set<Int>?
            var selected: [Int] = []
            if let name = filter.device {
                // One device, a pattern or a fleet: a set of indices, bounded by the devices that
                // run, whatever the pattern; its events go through the watcher's bounded queue.
                switch names.select(name) {
                case .failure(let error): return refuse(error.message)
                case .success(let indices):
                    selected = indices
                    devices = Set(indices)
                }
            }
            // A watch of everything sees the host's events too.
            watchers.add(client: client, filter: filter, devices: devices,
                         host: host != nil && filter.device == nil && filter.kinds == nil && filter.uuid == nil)
            logBudgeted(.info, "control client \(client): \(summary): watching")
            var members: [(String, JSONValue)] = [("id", .integer(request.id)), ("ok", true), ("watching", true)]
            // One device by its name: its ref, as before; a pattern or a fleet: the text as given,
            // and how many devices it named.
            if let name = filter.device, case .success(let index) = names.resolve(name), selected == [index] {
                members.append(("device", .string(names.entries[index].ref)))
            } else {
                members.append(("device", filter.device.map { .string($0) } ?? .null))
                if filter.device != nil { members.append(("devices", .integer(Int64(selected.count)))) }
            }
            members.append(("kinds", filter.kindsText.map { .string($0) } ?? .null))
            members.append(("uuid", filter.uuid.map { .string($0.description) } ?? .null))
            return .object(members)

        case .list(let name):
            var indices = Array(peripherals.indices)
            if let name {
                switch names.select(name) {
                case .failure(let error): return refuse(error.message)
                case .success(let selected): indices = selected
                }
            }
            let (listing, leftOut) = Self.listing(peripherals, names: names, indices: indices, maxBytes: maxListBytes)
            logBudgeted(.info, "control client \(client): \(summary): \(indices.count - leftOut) device(s)"
                        + (leftOut > 0 ? ", \(leftOut) left out past \(maxListBytes) bytes" : ""))
            var members: [(String, JSONValue)] = [("id", .integer(request.id)), ("ok", true), ("devices", listing)]
            if leftOut > 0 {
                // Never silently short: the count, and how to see the rest.
                members.append(("left_out", .integer(Int64(leftOut))))
                members.append(("why", .string("the reply holds at most \(maxListBytes) bytes of devices; list a pattern or a fleet to see the rest")))
            }
            return .object(members)

        case .set(let name, let key, let value, let exact):
            switch target(name) {
            case .failure(let error): return refuse(error.message)
            case .success(let (peripheral, ref)):
                if let refusal = peripheral.control.applySetting(key, value, exact: exact) { return refuse(refusal, peripheral) }
                return done(peripheral, "\(key) set to \(printable(value))\(exact ? ", held there" : "")",
                            [("device", .string(ref)), ("key", .string(key)), ("value", .string(value))]
                                + (exact ? [("exact", true)] : []))
            }

        case .notify(let name, let uuid, let value):
            switch target(name) {
            case .failure(let error): return refuse(error.message)
            case .success(let (peripheral, ref)):
                switch ValueInjection.send(value, characteristic: uuid, of: peripheral) {
                case .failure(let refusal): return refuse(refusal.message, peripheral)
                case .success(let sent):
                    return done(peripheral, sent.summary(bytes: value.count),
                                [("device", .string(ref)), ("uuid", .string(uuid.description)), ("value", .string(Hex.bytes(value))),
                                 ("centrals", .integer(Int64(sent.reached.count))),
                                 ("notified", .integer(Int64(sent.reached.count(where: { !$0.indicated })))),
                                 ("indicated", .integer(Int64(sent.reached.count(where: { $0.indicated })))),
                                 ("queue_full", .integer(Int64(sent.queueFull.count)))])
                }
            }

        case .disconnect(let name, let reason):
            switch target(name) {
            case .failure(let error): return refuse(error.message)
            case .success(let (peripheral, ref)):
                guard Peripheral.disconnectReasons.contains(reason) else {
                    return refuse("reason \(Hex.byte(reason)) is not one HCI Disconnect allows", peripheral)
                }
                let links = peripheral.control.disconnectAll(reason: reason)
                return done(peripheral, "\(links) link(s) asked to close",
                            [("device", .string(ref)), ("reason", .string(Hex.byte(reason))), ("links", .integer(Int64(links)))])
            }

        case .pairing(let name, let confirm):
            switch target(name) {
            case .failure(let error): return refuse(error.message)
            case .success(let (peripheral, ref)):
                let answered = peripheral.control.answerPairing(confirm: confirm)
                guard answered > 0 else {
                    return refuse("no Numeric Comparison is waiting for an answer (the device needs --numeric-comparison ask and a central pairing)", peripheral)
                }
                return done(peripheral, "Numeric Comparison \(confirm ? "confirmed" : "rejected")",
                            [("device", .string(ref)), ("answer", .string(confirm ? "confirm" : "reject")),
                             ("answered", .integer(Int64(answered)))])
            }

        case .authorize(let name, let uuid, let allow, let peer):
            switch target(name) {
            case .failure(let error): return refuse(error.message)
            case .success(let (peripheral, ref)):
                if let refusal = peripheral.control.setAuthorization(allow, characteristic: uuid, peer: peer) {
                    return refuse(refusal, peripheral)
                }
                var members: [(String, JSONValue)] = [("device", .string(ref)), ("uuid", .string(uuid.description)),
                                                      ("answer", .string(allow ? "allow" : "deny"))]
                var what = (allow ? "requests authorized" : "requests refused with Insufficient Authorization (0x08)")
                if let peer {
                    members += [("peer", .string(peer.address.description)), ("peer_random", .bool(peer.isRandom))]
                    what += " for \(peer.address) (\(peer.isRandom ? "random" : "public"))"
                } else {
                    // The answer for every central leaves the per-central ones in place (they
                    // override it): the reply names them, so nobody thinks "deny" denied them all.
                    let kept = peripheral.control.peerAuthorizations(of: uuid)
                    members.append(("per_central", .array(kept.map(Self.describe))))
                    if !kept.isEmpty { what += "; \(kept.count) per-central answer(s) left in place" }
                }
                return done(peripheral, what, members)
            }

        case .bonds(let name):
            switch target(name) {
            case .failure(let error): return refuse(error.message)
            case .success(let (peripheral, ref)):
                let bonds = peripheral.control.bonds
                logBudgeted(.info, "control client \(client): \(summary): \(bonds.count) bond(s)", peripheral)
                return .object([("id", .integer(request.id)), ("ok", true), ("device", .string(ref)),
                                ("bonds", .array(bonds.map(Self.describe)))])
            }

        case .forgetBonds(let name, let address):
            switch target(name) {
            case .failure(let error): return refuse(error.message)
            case .success(let (peripheral, ref)):
                let outcome = peripheral.control.forgetBonds(address)
                if let address, outcome.bonds.isEmpty {
                    let known = peripheral.control.bonds.map { ($0.identity ?? $0.peer).address.description }
                    return refuse("\(ref) has no bond with \(address)"
                                  + (known.isEmpty ? " (it has no bonds)" : "; its bonded centrals: \(known.joined(separator: ", "))"), peripheral)
                }
                let who = outcome.bonds.map { ($0.identity ?? $0.peer).address.description }.joined(separator: ", ")
                let kept = outcome.linksKept > 0 ? "; \(outcome.linksKept) link(s) stay encrypted with the old key until they close" : ""
                let listed = outcome.resolvingListEntries > 0 ? "; \(outcome.resolvingListEntries) resolving list entr\(outcome.resolvingListEntries == 1 ? "y" : "ies") removed" : ""
                return done(peripheral, outcome.bonds.isEmpty ? "no bonds to forget" : "forgot \(outcome.bonds.count) bond(s): \(who)\(kept)\(listed)",
                            [("device", .string(ref)), ("address", address.map { .string($0.description) } ?? .null),
                             ("forgotten", .array(outcome.bonds.map(Self.describe))),
                             ("links_kept", .integer(Int64(outcome.linksKept))),
                             ("resolving_list_removed", .integer(Int64(outcome.resolvingListEntries)))])
            }

        case .advertise(let name, let on):
            switch target(name) {
            case .failure(let error): return refuse(error.message)
            case .success(let (peripheral, ref)):
                peripheral.control.setAdvertisingAllowed(on)
                return done(peripheral, on ? "advertising allowed" : "advertising off until allowed again",
                            [("device", .string(ref)), ("on", .bool(on))])
            }

        case .service(let name, let uuid, let present):
            switch target(name) {
            case .failure(let error): return refuse(error.message)
            case .success(let (peripheral, ref)):
                let change: DatabaseChange
                do {
                    change = try peripheral.control.setService(uuid, present: present)
                } catch {
                    return refuse(error.description, peripheral)
                }
                let range: JSONValue = change.range.map {
                    .object([("start", .string(Hex.word($0.lowerBound))), ("end", .string(Hex.word($0.upperBound)))])
                } ?? .null
                return done(peripheral, change.range == nil ? "unchanged" : "database changed, Service Changed indicated on \(change.indicated) link(s)",
                            [("device", .string(ref)), ("uuid", .string(uuid.description)), ("on", .bool(present)),
                             ("changed", .bool(change.range != nil)), ("range", range),
                             ("database_hash", .string(Hex.bytes(change.hash))),
                             ("indicated", .integer(Int64(change.indicated))),
                             ("change_unaware", .integer(Int64(change.changeUnaware))),
                             ("advertising_changed", .bool(change.advertisingChanged))])
            }

        case .fault(let name, let uuid, let action, let count):
            switch target(name) {
            case .failure(let error): return refuse(error.message)
            case .success(let (peripheral, ref)):
                if let refusal = peripheral.control.injectFault(action, characteristic: uuid, count: count) {
                    return refuse(refusal, peripheral)
                }
                return done(peripheral, "fault planned",
                            [("device", .string(ref)), ("uuid", .string(uuid.description))]
                                + Self.describe(action) + [("count", count.map { .integer(Int64($0)) } ?? .null)])
            }

        case .channelFault(let name, let cid, let fault, let link):
            switch target(name) {
            case .failure(let error): return refuse(error.message)
            case .success(let (peripheral, ref)):
                if let refusal = peripheral.control.injectChannelFault(fault, cid: cid, link: link) {
                    return refuse(refusal, peripheral)
                }
                var members: [(String, JSONValue)] = [("device", .string(ref)), ("action", .string(fault.rawValue)), ("cid", .string(Hex.word(cid)))]
                switch link {
                case .handle(let handle)?: members.append(("handle", .integer(Int64(handle))))
                case .peer(let address)?: members.append(("peer", .string(address.description)))
                case nil: break
                }
                return done(peripheral, fault == .stallCredits ? "channel credits stalled" : "channel disconnected", members)
            }

        case .clearFaults(let name):
            var cleared: [Peripheral] = []
            if let name {
                switch target(name) {
                case .failure(let error): return refuse(error.message)
                case .success(let (peripheral, _)): cleared = [peripheral]
                }
            } else {
                cleared = peripherals
            }
            var refs: [JSONValue] = []
            for peripheral in cleared {
                peripheral.control.clearFaults()
                if let index = peripherals.firstIndex(where: { $0 === peripheral }) {
                    refs.append(.string(names.entries[index].ref))
                }
                if client == 0 {
                    logBudgeted(.notice, "scenario: \(summary): faults cleared", peripheral)
                } else {
                    peripheral.logger.event(.controlCommand, .notice, "control client \(client): \(summary): faults cleared")
                }
            }
            if cleared.isEmpty { logBudgeted(.notice, "control client \(client): \(summary): no devices") }
            return .object([("id", .integer(request.id)), ("ok", true), ("cleared", .array(refs))])
        }
    }

    /// Whether a command would be taken by the devices as they are now, without running it: a
    /// setting's value against its range (`PeripheralControl.checkSetting`), a `notify`'s
    /// characteristic (one that notifies or indicates). Nil, or why not. A scenario file's
    /// steps are checked so before anything starts.
    public static func check(_ command: ControlCommand, devices peripherals: [Peripheral]) -> String? {
        let names = DeviceNames(peripherals.map { ($0.deviceName, $0.configuration.name) })
        guard let name = command.device else { return nil }
        if case .list = command { return nil }
        if case .watch = command { return nil }
        let peripheral: Peripheral
        switch names.resolveOne(name, command: command.name) {
        case .failure(let error): return error.message
        case .success(let index): peripheral = peripherals[index]
        }
        switch command {
        case .set(_, let key, let value, let exact):
            return peripheral.control.checkSetting(key, value, exact: exact)
        case .notify(_, let uuid, _):
            if case .failure(let refusal) = ValueInjection.target(uuid, of: peripheral) { return refusal.message }
            return nil
        case .fault(_, let uuid, _, _), .authorize(_, let uuid, _, _):
            return peripheral.characteristics.contains { $0.uuid == uuid } ? nil : "\(peripheral.deviceName) has no characteristic \(uuid)"
        default:
            return nil
        }
    }

    // MARK: Replies

    public static func errorReply(id: Int64?, _ message: String) -> JSONValue {
        .object([("id", id.map { .integer($0) } ?? .null), ("ok", false), ("error", .string(message))])
    }

    /// Six digits with leading zeros, as a passkey or comparison value is shown to a user.
    static func sixDigits(_ value: UInt32) -> String {
        let digits = String(value)
        return String(repeating: "0", count: max(0, 6 - digits.count)) + digits
    }

    /// A per-central authorization answer, as `list` and `authorize` show it.
    static func describe(_ answer: PeerAuthorization) -> JSONValue {
        .object([("uuid", .string(answer.characteristic.description)), ("peer", .string(answer.peer.address.description)),
                 ("peer_random", .bool(answer.peer.isRandom)), ("allow", .bool(answer.allowed))])
    }

    /// `list`: one object per device of `indices` (in command-line order), as many as fit in
    /// `maxBytes` of JSON, and how many did not.
    static func listing(_ peripherals: [Peripheral], names: DeviceNames, indices: [Int], maxBytes: Int) -> (JSONValue, leftOut: Int) {
        var listed: [JSONValue] = []
        var bytes = 0
        for (position, index) in indices.enumerated() {
            let entry = listing(peripherals[index], names: names, index: index)
            bytes += entry.encoded.utf8.count + 1
            guard bytes <= maxBytes else { return (.array(listed), indices.count - position) }
            listed.append(entry)
        }
        return (.array(listed), 0)
    }

    /// `list`: one object per device, in command-line order.
    static func listing(_ peripherals: [Peripheral], names: DeviceNames) -> JSONValue {
        .array(peripherals.indices.map { listing(peripherals[$0], names: names, index: $0) })
    }

    /// `list`'s object for one device.
    static func listing(_ peripheral: Peripheral, names: DeviceNames, index: Int) -> JSONValue {
        do {
            let links: [JSONValue] = peripheral.control.linkSummaries.map { link in
                // A pairing's "display" (six digits, as the user reads them), only while it waits.
                let shown: [(String, JSONValue)] =
                    (link.pairingPasskey.map { [("pairing_passkey", JSONValue.string(sixDigits($0)))] } ?? [])
                    + (link.pairingComparison.map { [("numeric_comparison", JSONValue.string(sixDigits($0)))] } ?? [])
                return .object([("peer", .string(link.peer.address.description)), ("peer_random", .bool(link.peer.isRandom)),
                                ("handle", .integer(Int64(link.handle))),
                                ("mtu", .integer(Int64(link.mtu))), ("encrypted", .bool(link.encrypted))] + shown
                               + [("channels", .array(link.channels.map(describe)))])
            }
            let settings: [JSONValue] = peripheral.device.settings.map { setting in
                .object([("key", .string(setting.key)), ("summary", .string(setting.summary))])
            }
            let characteristics = peripheral.characteristics
            let faults: [JSONValue] = peripheral.control.faults.planned.map { planned in
                let uuid = characteristics.first { $0.valueHandle == planned.valueHandle }?.uuid
                return .object([("uuid", uuid.map { .string($0.description) } ?? .null),
                                ("att_handle", .string(Hex.word(planned.valueHandle)))]
                               + describe(planned.action)
                               + [("remaining", planned.remaining.map { .integer(Int64($0)) } ?? .null)])
            }
            return .object([
                ("ref", .string(names.entries[index].ref)),
                ("device", .string(peripheral.deviceName)),
                ("name", .string(peripheral.configuration.name)),
                ("address", .string(peripheral.address.description)),
                ("controller", .string(peripheral.configuration.controller)),
                // The fleet it is a member of, as `fleet:` names it; null for any other device.
                ("fleet", names.entries[index].fleet.map { .string(DeviceNames.fleetPrefix + $0) } ?? .null),
                ("advertising", .bool(peripheral.isAdvertising)),
                ("advertising_allowed", .bool(peripheral.advertisingAllowed)),
                // A broadcaster's advertising data as sent now (hex); null for a connectable device.
                ("broadcast", peripheral.broadcastPayload.map { .string(Hex.bytes($0)) } ?? .null),
                ("connections", .array(links)),
                ("settings", .array(settings)),
                ("faults", .array(faults)),
                ("services_out", .array(peripheral.control.absentServices.map { .string($0.description) })),
                // The made-up pairing passkey (the lock's label, logged at start too); never one given.
                ("passkey", peripheral.configuration.security.passkeyIsGenerated
                    ? peripheral.configuration.security.passkey.map { .string(sixDigits($0)) } ?? .null : .null),
                ("authorized", .array(characteristics.filter { peripheral.control.authorizations[$0.valueHandle] == true }
                                        .map { .string($0.uuid.description) })),
                ("authorized_peers", .array(peripheral.control.peerAuthorizations.map(describe))),
            ])
        }
    }

    /// A link's credit based channel as `list` shows it.
    static func describe(_ channel: ChannelSummary) -> JSONValue {
        .object([("spsm", .string(Hex.word(channel.spsm))), ("mode", .string(channel.enhanced ? "enhanced" : "le")),
                 ("cid", .string(Hex.word(channel.localCID))), ("peer_cid", .string(Hex.word(channel.remoteCID))),
                 ("mtu", .integer(Int64(channel.mtu))), ("mps", .integer(Int64(channel.mps))),
                 ("peer_mtu", .integer(Int64(channel.peerMTU))), ("peer_mps", .integer(Int64(channel.peerMPS))),
                 ("credits", .integer(Int64(channel.sendCredits))), ("peer_credits", .integer(Int64(channel.receiveCredits))),
                 ("queued", .integer(Int64(channel.queuedBytes))), ("reassembling", .integer(Int64(channel.reassemblingBytes))),
                 ("credits_stalled", .bool(channel.creditsStalled))])
    }

    /// `"action":"error","error":"0x0e"`, `"action":"delay","ms":500`, `"action":"drop"`.
    static func describe(_ action: FaultPlan.Action) -> [(String, JSONValue)] {
        switch action {
        case .error(let error): return [("action", "error"), ("error", .string(Hex.byte(error.rawValue)))]
        case .delay(let duration): return [("action", "delay"), ("ms", .integer(Int64(duration.milliseconds)))]
        case .drop: return [("action", "drop")]
        }
    }

    /// A bond as the `bonds` reply shows it: who the central is, how strong the bond is, what
    /// it keeps, and `blemu bonds list`'s line for it; never a key.
    static func describe(_ bond: Bond) -> JSONValue {
        .object([("peer", .string(bond.peer.address.description)), ("peer_random", .bool(bond.peer.isRandom)),
                 ("identity", bond.identity.map { .string($0.address.description) } ?? .null),
                 ("identity_random", bond.identity.map { .bool($0.isRandom) } ?? .null),
                 ("irk", .bool(bond.identityResolvingKey != nil)), ("csrk", .bool(bond.signatureKey != nil)),
                 ("authenticated", .bool(bond.authenticated)), ("secure_connections", .bool(bond.secureConnections)),
                 ("key_size", .integer(Int64(bond.encryptionKeySize))),
                 ("subscriptions", .integer(Int64(bond.client.clientConfigurations.count))),
                 ("summary", .string(bond.summary))])
    }

    /// The command as `blemu ctl` words, for the log (client text made printable).
    static func summary(of command: ControlCommand) -> String {
        switch command {
        case .list(let device): return "list" + (device.map { " \(printable($0))" } ?? "")
        case .set(let device, let key, let value, let exact):
            return "set \(printable(device)) \(printable(key)) \(printable(value))\(exact ? " --exact" : "")"
        case .notify(let device, let uuid, let value):
            return "notify \(printable(device)) \(uuid) \(value.count > 32 ? Hex.bytes(value.prefix(32)) + "… (\(value.count) bytes)" : Hex.bytes(value))"
        case .disconnect(let device, let reason): return "disconnect \(printable(device)) --reason \(Hex.byte(reason))"
        case .advertise(let device, let on): return "advertise \(printable(device)) \(on ? "on" : "off")"
        case .pairing(let device, let confirm): return "pairing \(printable(device)) \(confirm ? "confirm" : "reject")"
        case .authorize(let device, let uuid, let allow, let peer):
            return "authorize \(printable(device)) \(uuid) \(allow ? "allow" : "deny")"
                + (peer.map { " \($0.address) \($0.isRandom ? "random" : "public")" } ?? "")
        case .service(let device, let uuid, let present): return "service \(printable(device)) \(uuid) \(present ? "on" : "off")"
        case .fault(let device, let uuid, let action, let count):
            let what: String
            switch action {
            case .error(let error): what = "error \(Hex.byte(error.rawValue))"
            case .delay(let duration): what = "delay \(duration.milliseconds)"
            case .drop: what = "drop"
            }
            return "fault \(printable(device)) \(uuid) \(what)" + (count.map { " --count \($0)" } ?? "")
        case .clearFaults(let device): return "fault clear" + (device.map { " " + printable($0) } ?? "")
        case .watch(let filter):
            return "watch" + (filter.device.map { " " + printable($0) } ?? "") + (filter.kindsText.map { " --kinds \($0)" } ?? "")
                + (filter.uuid.map { " --uuid \($0)" } ?? "")
        case .channelFault(let device, let cid, let fault, let link):
            let on: String
            switch link {
            case .handle(let handle)?: on = " \(handle)"
            case .peer(let address)?: on = " \(address)"
            case nil: on = ""
            }
            return "fault \(printable(device)) channel \(Hex.word(cid)) \(fault == .stallCredits ? "stall" : "drop")\(on)"
        case .bonds(let device): return "bonds \(printable(device))"
        case .host(let request): return "host \(request.op)"
        case .forgetBonds(let device, let address): return "bonds \(printable(device)) forget" + (address.map { " \($0)" } ?? "")
        }
    }

    // MARK: Logging

    private func logBudgeted(_ level: Logger.Level, _ message: String, _ peripheral: Peripheral? = nil) {
        let target = peripheral?.logger ?? logger
        guard target.logLevel <= level else { return }
        guard let leftOut = budget.take(now: scheduler.nowNanoseconds, for: target) else { return }
        target.event(.controlCommand, level, "\(message)\(LogBudget.note(leftOut))")
    }
}

/// A value sent exactly as given to the centrals subscribed to a characteristic: the control
/// socket's `notify` and a scenario's `notify:` step, one mechanism. Each subscribed central
/// gets a notification when it enabled them, else an indication when it enabled those
/// (Vol 3, Part G, 3.3.3.3). A value longer than a subscriber's ATT_MTU - 3 is refused whole,
/// never cut (a notification or an indication carries at most ATT_MTU - 3 octets of the value,
/// Vol 3, Part F, 3.4.7.1 and 3.4.7.2): what a test sends is what the app gets, or an error.
public enum ValueInjection {
    public struct Sent {
        /// The centrals it was queued for, in connection handle order.
        public var reached: [(peer: ATTPeer, indicated: Bool)]
        /// Subscribed centrals whose transmit queue was full: not sent to them.
        public var queueFull: [ATTPeer]

        public func summary(bytes: Int) -> String {
            var text = "\(bytes) byte(s) sent to \(reached.count) central(s)"
            let indicated = reached.filter(\.indicated).count
            if indicated > 0 { text += " (\(indicated) as an indication)" }
            if !queueFull.isEmpty {
                text += "; not sent to \(queueFull.map(\.address.description).joined(separator: ", ")): transmit queue full"
            }
            return text
        }
    }

    public struct Refusal: Error, Equatable { public let message: String }

    public static func send(_ value: [UInt8], characteristic uuid: BluetoothUUID, of peripheral: Peripheral) -> Result<Sent, Refusal> {
        switch target(uuid, of: peripheral) {
        case .failure(let refusal): return .failure(refusal)
        case .success(let characteristic): return send(value, characteristic, of: peripheral)
        }
    }

    /// The characteristic `notify` sends as: the first with the UUID that notifies or indicates.
    public static func target(_ uuid: BluetoothUUID, of peripheral: Peripheral) -> Result<Characteristic, Refusal> {
        let matching = peripheral.characteristics.filter { $0.uuid == uuid }
        guard !matching.isEmpty else { return .failure(Refusal(message: "\(peripheral.deviceName) has no characteristic \(uuid)")) }
        guard let characteristic = matching.first(where: { $0.properties.contains(.notify) || $0.properties.contains(.indicate) }) else {
            return .failure(Refusal(message: "characteristic \(uuid) of \(peripheral.deviceName) neither notifies nor indicates"))
        }
        return .success(characteristic)
    }

    private static func send(_ value: [UInt8], _ characteristic: Characteristic, of peripheral: Peripheral) -> Result<Sent, Refusal> {
        var targets: [(peer: ATTPeer, indicate: Bool)] = []
        for peer in peripheral.peers {
            if characteristic.properties.contains(.notify), peripheral.isSubscribed(characteristic, peer: peer, indications: false) {
                targets.append((peer, false))
            } else if characteristic.properties.contains(.indicate), peripheral.isSubscribed(characteristic, peer: peer, indications: true) {
                targets.append((peer, true))
            }
        }
        let tooSmall = targets.filter { value.count > peripheral.attMTU(of: $0.peer) - 3 }
        if !tooSmall.isEmpty {
            let who = tooSmall.map { "\($0.peer.address) (ATT_MTU \(peripheral.attMTU(of: $0.peer)): at most \(peripheral.attMTU(of: $0.peer) - 3) bytes)" }
            return .failure(Refusal(message: "the value is \(value.count) bytes, longer than a notification or indication to "
                                    + who.joined(separator: ", ") + " carries (ATT_MTU - 3, Vol 3, Part F, 3.4.7): nothing sent"))
        }
        var sent = Sent(reached: [], queueFull: [])
        for target in targets {
            let queued = target.indicate
                ? peripheral.indicate(characteristic, value: value, to: target.peer, completion: nil)
                : peripheral.notify(characteristic, value: value, to: target.peer)
            if queued {
                sent.reached.append((target.peer, target.indicate))
            } else {
                sent.queueFull.append(target.peer)
            }
        }
        return .success(sent)
    }
}
