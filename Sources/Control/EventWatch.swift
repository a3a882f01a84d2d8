import BlemuCore
import BlemuGATT
import BlemuHost
import BlemuProgrammableHost
import FoundationEssentials

/// What a `watch` asks to see: every field nil sees every event of every device.
public struct EventFilter: Equatable, Sendable {
    /// A device as `ctl` names it (DEVICE, DEVICE#N or a local name).
    public var device: String?
    /// The kinds wanted (`"kinds":"write,read"`).
    public var kinds: Set<DeviceEventKind>?
    /// A characteristic's or a service's UUID; events that name none do not match it.
    public var uuid: BluetoothUUID?

    public init(device: String? = nil, kinds: Set<DeviceEventKind>? = nil, uuid: BluetoothUUID? = nil) {
        self.device = device
        self.kinds = kinds
        self.uuid = uuid
    }

    /// Whether an event passes the kind and UUID filters (the device is matched by index).
    public func matches(_ event: DeviceEvent) -> Bool {
        if let kinds, !kinds.contains(event.kind) { return false }
        if let uuid, event.uuid != uuid { return false }
        return true
    }

    /// `write,read`: kinds by name, comma separated; nil when one is unknown.
    public static func parseKinds(_ text: String) -> Set<DeviceEventKind>? {
        var kinds = Set<DeviceEventKind>()
        for name in text.split(separator: ",", omittingEmptySubsequences: false) {
            guard let kind = DeviceEventKind(rawValue: String(name)) else { return nil }
            kinds.insert(kind)
        }
        return kinds.isEmpty ? nil : kinds
    }

    /// The kind names, in the order `DeviceEventKind` lists them.
    public static var kindList: String { DeviceEventKind.allCases.map(\.rawValue).joined(separator: ", ") }

    /// `"kinds":"read,write"` as a request carries it, in a fixed order.
    public var kindsText: String? {
        kinds.map { kinds in DeviceEventKind.allCases.filter(kinds.contains).map(\.rawValue).joined(separator: ",") }
    }
}

/// One event as a watcher's line shows it, without `seq` and `t` (added per watcher): the
/// event's kind, the device's ref, the central, the characteristic by UUID and handle, and
/// the kind's own fields (Docs/CONTROL.md, "Events").
public enum EventEncoding {
    public static func members(_ event: DeviceEvent, device: String) -> [(String, JSONValue)] {
        var members: [(String, JSONValue)] = [("event", .string(event.kind.rawValue)), ("device", .string(device))]
        if let peer = event.peer {
            members += [("peer", .string(peer.address.description)), ("peer_random", .bool(peer.leAddress.isRandom)),
                        ("conn", .integer(Int64(peer.connectionHandle)))]
        }
        func characteristic(_ c: EventCharacteristic) {
            members += [("uuid", .string(c.uuid.description)), ("att_handle", .string(Hex.word(c.handle)))]
        }
        switch event {
        case .connected:
            break
        case .disconnected(_, let reason):
            members.append(("reason", .string(Hex.byte(reason))))
        case .mtu(_, let mtu):
            members.append(("mtu", .integer(Int64(mtu))))
        case .paired(_, let method, let keySize, let secureConnections, let bonded):
            members += [("method", .string(method.rawValue)), ("key_size", .integer(Int64(keySize))),
                        ("secure_connections", .bool(secureConnections)), ("bonded", .bool(bonded))]
        case .encrypted(_, let keySize, let authenticated):
            members += [("key_size", .integer(Int64(keySize))), ("authenticated", .bool(authenticated))]
        case .subscribed(_, let c, let notify, let indicate):
            characteristic(c)
            members += [("notify", .bool(notify)), ("indicate", .bool(indicate))]
        case .unsubscribed(_, let c, let cause):
            characteristic(c)
            members.append(("cause", cause.map { .string($0) } ?? .null))
        case .read(_, let c, let offset):
            characteristic(c)
            members.append(("offset", .integer(Int64(offset))))
        case .write(_, let c, let offset, let value, let withResponse, let prepared):
            characteristic(c)
            members += [("value", .string(Hex.bytes(value))), ("offset", .integer(Int64(offset))),
                        ("with_response", .bool(withResponse)), ("prepared", .bool(prepared))]
        case .notification(_, let c, let value), .indication(_, let c, let value):
            characteristic(c)
            members.append(("value", .string(Hex.bytes(value))))
        case .confirmed(_, let c, let outcome):
            characteristic(c)
            let text: String
            switch outcome {
            case .confirmed: text = "confirmed"
            case .timedOut: text = "timeout"
            case .disconnected: text = "disconnected"
            case .notSent: text = "not-sent"
            }
            members.append(("outcome", .string(text)))
        case .advertising(let on, let address):
            members += [("on", .bool(on)), ("address", .string(address.description))]
        case .service(let uuid, let on):
            members += [("uuid", .string(uuid.description)), ("on", .bool(on))]
        case .fault(_, let c, let handle, let opcode, let action):
            members += [("uuid", c.map { .string($0.uuid.description) } ?? .null), ("att_handle", .string(Hex.word(handle))),
                        ("opcode", .string(Hex.byte(opcode)))]
            members += DeviceControl.describe(action)
        }
        return members
    }

    /// `"t"`: the monotonic clock in seconds, to the microsecond.
    public static func seconds(_ nanoseconds: UInt64) -> JSONValue {
        .number(Double(nanoseconds / 1000) / 1_000_000)
    }

    /// A whole line: `seq` and `t` first, then the event.
    public static func line(seq: UInt64, nanoseconds: UInt64, _ members: [(String, JSONValue)]) -> String {
        JSONValue.object([("seq", .integer(Int64(seq))), ("t", seconds(nanoseconds))] + members).encoded
    }
}

/// The control socket's watchers (`watch`): each a client connection turned into a stream of
/// event lines, in order, with its own `seq` (1, 2, … over the events its filter passes) and
/// the monotonic `t`. A watcher's queue is its connection's output, at most
/// `ControlServer.Limits.streamQueueBytes`: when an event does not fit, it and every later
/// one are counted, not queued, until the watcher has taken everything waiting; then one
/// `missed` line says how many (its `seq` the last one missed) and events flow again. So a
/// watcher that does not read costs a bounded buffer and never blocks the run loop.
/// The devices report events only while at least one watcher is connected.
public final class EventWatchers {
    private final class Watcher {
        let client: Int
        let filter: EventFilter
        /// Device indices it sees (all when nil).
        let devices: Set<Int>?
        /// It sees the programmable host's events (`watch host`, or a watch of everything).
        let seesHost: Bool
        var seq: UInt64 = 0
        /// Events counted but not queued since the queue was full; 0 while events flow.
        var missed: UInt64 = 0
        init(client: Int, filter: EventFilter, devices: Set<Int>?, seesHost: Bool) {
            self.client = client
            self.filter = filter
            self.devices = devices
            self.seesHost = seesHost
        }
    }

    private unowned let server: ControlServer
    private let clock: any TimerScheduling
    private let deviceRefs: [String]
    private let observe: (((Int, DeviceEvent) -> Void)?) -> Void
    private var watchers: [Watcher] = []

    /// Room kept in a watcher's queue for its `missed` line.
    static let missedLineReserve = 160

    /// `deviceRefs`: each device's ref, by index. `observe` attaches the sink to every device
    /// (nil: detaches it), so devices report events only while someone watches.
    public init(server: ControlServer, clock: any TimerScheduling, deviceRefs: [String],
                observe: @escaping (((Int, DeviceEvent) -> Void)?) -> Void) {
        self.server = server
        self.clock = clock
        self.deviceRefs = deviceRefs
        self.observe = observe
        server.onStreamDrained = { [weak self] client in self?.drained(client) }
        server.onClientClosed = { [weak self] client in self?.remove(client) }
    }

    public var count: Int { watchers.count }

    /// Client `client` becomes a watcher of the devices at `devices` (nil: all) and, with
    /// `host`, of the programmable host's events.
    public func add(client: Int, filter: EventFilter, devices: Set<Int>?, host: Bool = false) {
        guard server.beginStream(client: client) else { return }
        watchers.removeAll { $0.client == client }
        watchers.append(Watcher(client: client, filter: filter, devices: devices, seesHost: host))
        if watchers.count == 1 { observe { [weak self] device, event in self?.deliver(event, device: device) } }
    }

    /// One event of device `device`, to every watcher whose filter passes it.
    public func deliver(_ event: DeviceEvent, device: Int) {
        let refs = deviceRefs
        deliver(to: { ($0.devices?.contains(device) ?? true) && $0.filter.matches(event) }) {
            EventEncoding.members(event, device: device < refs.count ? refs[device] : "?")
        }
    }

    /// One event of the programmable host, to every watcher of the host (`HostControl.members`).
    public func deliver(_ event: HostEvent) {
        guard !watchers.isEmpty else { return }
        deliver(to: { $0.seesHost }) { HostControl.members(event) }
    }

    /// An event to the watchers `wanted` passes, encoded once (`encode`) if any takes it.
    private func deliver(to wanted: (Watcher) -> Bool, members encode: () -> [(String, JSONValue)]) {
        var members: [(String, JSONValue)]?
        let now = clock.nowNanoseconds
        var gone: [Int] = []
        for watcher in watchers {
            guard wanted(watcher) else { continue }
            watcher.seq += 1
            if watcher.missed > 0 {
                watcher.missed += 1
                continue
            }
            if members == nil { members = encode() }
            let line = EventEncoding.line(seq: watcher.seq, nanoseconds: now, members!)
            switch server.stream(line, to: watcher.client, reserve: Self.missedLineReserve) {
            case .queued: break
            case .full: watcher.missed = 1
            case .gone: gone.append(watcher.client)
            }
        }
        for client in gone { remove(client) }
    }

    /// The watcher took everything waiting: what it missed is told now.
    private func drained(_ client: Int) {
        guard let watcher = watchers.first(where: { $0.client == client }), watcher.missed > 0 else { return }
        let line = EventEncoding.line(seq: watcher.seq, nanoseconds: clock.nowNanoseconds, [
            ("event", "missed"), ("count", .integer(Int64(watcher.missed))),
            ("from_seq", .integer(Int64(watcher.seq - watcher.missed + 1))),
        ])
        watcher.missed = 0
        if case .gone = server.stream(line, to: client, reserve: 0) { remove(client) }
    }

    private func remove(_ client: Int) {
        let before = watchers.count
        watchers.removeAll { $0.client == client }
        if before > 0 && watchers.isEmpty { observe(nil) }
    }
}

/// `blemu ctl SOCK wait connected | subscribed UUID | write UUID [equals HEX | matches PATTERN] | read UUID`:
/// the event a shell script waits for, as a `watch` filter and a test of each line.
public struct EventWait: Equatable, Sendable, CustomStringConvertible {
    public var kind: DeviceEventKind
    public var uuid: BluetoothUUID?
    /// `equals HEX`: the written value, exactly.
    public var value: [UInt8]?
    /// `matches PATTERN`: the written value as hex digits, `.` for any one digit and a final
    /// `*` for any bytes after (`01..`: 01 and one byte; `ca08*`: starting with ca08). Kept in
    /// lowercase.
    public var pattern: String?
    public var device: String?

    public static let usage = "wait connected|disconnected | subscribed UUID | unsubscribed UUID | write UUID [equals HEX | matches PATTERN] | read UUID [--device DEVICE]"

    /// Parses the words after `wait`.
    public init(arguments: [String]) throws(ControlUsageError) {
        var words: [String] = []
        var device: String?
        var rest = arguments[...]
        while let word = rest.popFirst() {
            if word == "--device" || word.hasPrefix("--device=") {
                guard device == nil else { throw ControlUsageError("--device given twice") }
                let inline = word.hasPrefix("--device=") ? String(word.dropFirst("--device=".count)) : nil
                guard let name = inline ?? rest.popFirst(), !name.isEmpty else { throw ControlUsageError("--device needs a device") }
                device = name
            } else if word.hasPrefix("--") {
                throw ControlUsageError("unknown option \(quoted(word)); usage: \(Self.usage)")
            } else {
                words.append(word)
            }
        }
        guard let name = words.first else { throw ControlUsageError("usage: \(Self.usage)") }
        self.device = device
        func uuid(at index: Int) throws(ControlUsageError) -> BluetoothUUID {
            guard index < words.count else { throw ControlUsageError("\(name) needs the characteristic's UUID; usage: \(Self.usage)") }
            guard let uuid = ControlRequest.parseUUID(words[index]) else {
                throw ControlUsageError("\(quoted(words[index])) is not a UUID: give 2A37, 0x2A37 or the 128-bit form")
            }
            return uuid
        }
        switch name {
        case "connected", "disconnected":
            guard words.count == 1 else { throw ControlUsageError("usage: wait \(name)") }
            kind = name == "connected" ? .connected : .disconnected
        case "subscribed", "unsubscribed", "read":
            guard words.count == 2 else { throw ControlUsageError("usage: wait \(name) UUID") }
            kind = DeviceEventKind(rawValue: name)!
            self.uuid = try uuid(at: 1)
        case "write":
            self.uuid = try uuid(at: 1)
            kind = .write
            if words.count == 2 { break }
            guard words.count == 4, words[2] == "equals" || words[2] == "matches" else {
                throw ControlUsageError("usage: wait write UUID [equals HEX | matches PATTERN]")
            }
            if words[2] == "matches" {
                guard let pattern = Self.valuePattern(words[3]) else {
                    throw ControlUsageError("\(quoted(words[3])) is not a value pattern: hex digits, `.` for any digit, a final `*` for any bytes after (01.., ca08*)")
                }
                self.pattern = pattern
                break
            }
            guard let bytes = Hex.parse(words[3]) else {
                throw ControlUsageError("\(quoted(words[3])) is not hex bytes like 01ff")
            }
            value = bytes
        default:
            throw ControlUsageError("cannot wait for \(quoted(name)); usage: \(Self.usage)")
        }
    }

    /// A `matches` pattern checked and lowercased: whole bytes of hex digits or `.`, then an
    /// optional `*`; nil when it is not one.
    static func valuePattern(_ text: String) -> String? {
        var body = Substring(text.lowercased())
        let openEnded = body.hasSuffix("*")
        if openEnded { body = body.dropLast() }
        guard body.count % 2 == 0, body.count <= 1024, openEnded || !body.isEmpty,
              body.allSatisfy({ $0 == "." || $0.isHexDigit }) else { return nil }
        return String(body) + (openEnded ? "*" : "")
    }

    /// Whether `bytes` fit a checked `pattern` (`valuePattern`).
    static func value(_ bytes: [UInt8], fits pattern: String) -> Bool {
        let openEnded = pattern.hasSuffix("*")
        let digits = Array(pattern.utf8.dropLast(openEnded ? 1 : 0))
        guard openEnded ? bytes.count * 2 >= digits.count : bytes.count * 2 == digits.count else { return false }
        let hex = Array(Hex.bytes(bytes).utf8)
        for (index, digit) in digits.enumerated() where digit != UInt8(ascii: ".") && digit != hex[index] { return false }
        return true
    }

    /// What the `watch` request asks for: only the events that could match.
    public var filter: EventFilter { EventFilter(device: device, kinds: [kind], uuid: uuid) }

    /// Whether a device's event is the one waited for (a scenario's `wait` and `expect`).
    public func matches(_ event: DeviceEvent) -> Bool {
        guard event.kind == kind else { return false }
        if let uuid, event.uuid != uuid { return false }
        if let value {
            guard case .write(_, _, _, let written, _, _) = event, written == value else { return false }
        }
        if let pattern {
            guard case .write(_, _, _, let written, _, _) = event, Self.value(written, fits: pattern) else { return false }
        }
        return true
    }

    /// Whether an event line is the one waited for.
    public func matches(line: String) -> Bool {
        guard let fields = try? JSONDecoder().decode([String: JSONField].self, from: Data(line.utf8)),
              case .string(kind.rawValue)? = fields["event"] else { return false }
        if let uuid {
            guard case .string(let text)? = fields["uuid"], ControlRequest.parseUUID(text) == uuid else { return false }
        }
        if let value {
            guard case .string(let text)? = fields["value"], Hex.parse(text) == value else { return false }
        }
        if let pattern {
            guard case .string(let text)? = fields["value"], let written = Hex.parse(text), Self.value(written, fits: pattern) else { return false }
        }
        return true
    }

    /// "write to 2A39 of 01", as a timeout message says it ("no … within 5 s").
    public var description: String {
        var text: String
        switch kind {
        case .connected: text = "connection"
        case .disconnected: text = "disconnection"
        case .subscribed: text = "subscription to \(uuid?.description ?? "?")"
        case .unsubscribed: text = "unsubscription from \(uuid?.description ?? "?")"
        case .read: text = "read of \(uuid?.description ?? "?")"
        case .write: text = "write to \(uuid?.description ?? "?")" + (value.map { " of \(Hex.bytes($0))" } ?? "")
            + (pattern.map { " matching \($0)" } ?? "")
        default: text = "\(kind.rawValue) event"
        }
        if let device { text += " on \(device)" }
        return text
    }
}
