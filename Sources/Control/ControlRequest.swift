import BlemuATT
import BlemuCore
import BlemuGATT
import BlemuHCI
import BlemuHost
import FoundationEssentials

/// What a control client may ask, one value per command (Docs/CONTROL.md). A request line
/// decodes to one of these or to a `ControlRequestError`, never anything in between.
public enum ControlCommand: Equatable, Sendable {
    /// Devices, addresses, advertising, links, settings and planned faults: every device
    /// (nil), or those `device` names: one, a pattern or a fleet (`DeviceNames.select`).
    case list(device: String?)
    /// A value of a device's simulated world (`PeripheralControl.applySetting`); `exact` holds
    /// a value that moves by itself where it is set, until it is set again.
    case set(device: String, key: String, value: String, exact: Bool = false)
    /// These bytes, exactly, sent now to every central subscribed to the characteristic: a
    /// notification, or an indication to a central that enabled indications
    /// (`ValueInjection`); a scenario's `notify:` step too.
    case notify(device: String, characteristic: BluetoothUUID, value: [UInt8])
    /// Every link of the device, with an HCI Disconnect reason (`Peripheral.disconnectReasons`).
    case disconnect(device: String, reason: UInt8)
    /// Advertising allowed or not (`Peripheral.setAdvertisingAllowed`).
    case advertise(device: String, on: Bool)
    /// A service taken out of the device's database or put back, announced by Service Changed
    /// (`PeripheralControl.setService`).
    case service(device: String, service: BluetoothUUID, present: Bool)
    /// A fault for one characteristic; `count` nil applies it until cleared.
    case fault(device: String, characteristic: BluetoothUUID, action: FaultPlan.Action, count: Int?)
    /// Every planned fault of one device, or of all of them (nil).
    case clearFaults(device: String?)
    /// A fault on the device's open credit based channel with this local CID on the link `link`
    /// names, or on the only link with such a channel (`PeripheralControl.injectChannelFault`):
    /// its credits stalled, or it disconnected.
    case channelFault(device: String, cid: UInt16, fault: ChannelFault, link: LinkName? = nil)
    /// The user's answer to the Numeric Comparison the device waits for (`--numeric-comparison ask`).
    case pairing(device: String, confirm: Bool)
    /// Whether requests for a value that requires authorization are authorized
    /// (`PeripheralControl.setAuthorization`; refused until allowed): for every central, or with
    /// `peer` for the central with that address (its link's or its bonded identity) and type
    /// (random unless said), overriding the answer for every central.
    case authorize(device: String, characteristic: BluetoothUUID, allow: Bool, peer: LEAddress? = nil)
    /// The device's bonds, as `blemu bonds list` shows them (never a key).
    case bonds(device: String)
    /// Forgets the bonds of the central at `address` (the address it bonded from or its
    /// identity), or every bond of the device (nil), in the running device (`PeripheralControl.forgetBonds`).
    case forgetBonds(device: String, address: BluetoothAddress?)
    /// The connection becomes a stream of the devices' events that pass the filter
    /// (`EventWatchers`); no reply but the first.
    case watch(EventFilter)
    /// A request to the programmable host (`blemu host`; Docs/CONTROL.md, "The programmable host").
    case host(HostRequest)

    /// The `cmd` of its request.
    public var name: String {
        switch self {
        case .list: return "list"
        case .set: return "set"
        case .notify: return "notify"
        case .disconnect: return "disconnect"
        case .advertise: return "advertise"
        case .service: return "service"
        case .fault, .clearFaults, .channelFault: return "fault"
        case .pairing: return "pairing"
        case .authorize: return "authorize"
        case .bonds, .forgetBonds: return "bonds"
        case .watch: return "watch"
        case .host: return "host"
        }
    }

    /// Whether it changes nothing (so its log line may be left out by the budget).
    public var isReadOnly: Bool {
        switch self {
        case .list, .bonds, .watch: return true
        case .host(let request): return request.isReadOnly
        default: return false
        }
    }

    /// The device it names, if any.
    public var device: String? {
        switch self {
        case .list(let device): return device
        case .host: return nil
        case .watch(let filter): return filter.device
        case .set(let device, _, _, _), .notify(let device, _, _), .disconnect(let device, _), .advertise(let device, _), .fault(let device, _, _, _),
             .service(let device, _, _), .pairing(let device, _), .authorize(let device, _, _, _), .bonds(let device),
             .forgetBonds(let device, _), .channelFault(let device, _, _, _):
            return device
        case .clearFaults(let device): return device
        }
    }
}

/// Why a request line is refused, with its id when the line had a usable one.
public struct ControlRequestError: Error, Equatable, Sendable, CustomStringConvertible {
    public var id: Int64?
    public var message: String
    public init(id: Int64?, _ message: String) {
        self.id = id
        self.message = message
    }
    public var description: String { message }
}

/// One request: the client's id, echoed in the reply, and the command.
public struct ControlRequest: Equatable, Sendable {
    public var id: Int64
    public var command: ControlCommand

    public init(id: Int64, command: ControlCommand) {
        self.id = id
        self.command = command
    }

    // MARK: Limits

    /// Ids are whole numbers from 0 to 2^53 - 1, which every JSON implementation holds exactly.
    public static let maxID: Int64 = (1 << 53) - 1
    /// `count` of a fault: 1 to this.
    public static let maxFaultCount = 1_000_000
    /// `ms` of a delay fault: 1 to this (5 minutes: past ATT's 30 s transaction timeout, so an
    /// app's timeout handling can be tested too).
    public static let maxDelayMilliseconds = 300_000
    /// The longest string field (device, key, value, uuid, action), in UTF-8 bytes.
    public static let maxStringLength = 256
    /// What an unknown command, and `blemu ctl` usage, lists.
    public static let commandNames = ["list", "set", "notify", "disconnect", "advertise", "service", "fault", "pairing", "authorize", "bonds", "watch", "host"]

    // MARK: Decoding

    /// Decodes one line (without its newline): a JSON object with `id`, `cmd` and the command's
    /// fields, nothing else. Total: any bytes give a request or an error.
    public static func decode<Bytes: Collection>(line: Bytes) -> Result<ControlRequest, ControlRequestError>
    where Bytes.Element == UInt8 {
        let fields: [String: JSONField]
        do {
            fields = try JSONDecoder().decode([String: JSONField].self, from: Data(line))
        } catch DecodingError.typeMismatch {
            return .failure(ControlRequestError(id: nil, "a request is one JSON object per line, like {\"id\":1,\"cmd\":\"list\"}"))
        } catch {
            return .failure(ControlRequestError(id: nil, "not JSON: a request is one JSON object per line, like {\"id\":1,\"cmd\":\"list\"}"))
        }
        // The decoder keeps the last of two members with one name: `{"cmd":"list","cmd":"set"}`
        // would run a command the client may not have meant. Refused whole instead (RFC 8259,
        // 4: names within an object SHOULD be unique).
        if let duplicate = JSONObjectNames.firstDuplicate(in: Array(line)) {
            var id: Int64?
            if duplicate != "id", case .integer(let value)? = fields["id"], (0...maxID).contains(value) { id = value }
            return .failure(ControlRequestError(id: id, "\(JSONString.literal(String(duplicate.prefix(64)))) appears twice: a request names each field once"))
        }
        return decode(fields: fields)
    }

    /// Checks a decoded object: the id first, so that every later error carries it.
    public static func decode(fields: [String: JSONField]) -> Result<ControlRequest, ControlRequestError> {
        guard let idField = fields["id"] else {
            return .failure(ControlRequestError(id: nil, "missing \"id\": every request carries a whole number id, echoed in its reply"))
        }
        guard case .integer(let id) = idField, (0...maxID).contains(id) else {
            return .failure(ControlRequestError(id: nil, "\"id\" must be a whole number from 0 to \(maxID), not \(describe(idField))"))
        }
        var reader = FieldReader(fields: fields, id: id)
        do throws(ControlRequestError) {
            let command = try reader.command()
            return .success(ControlRequest(id: id, command: command))
        } catch {
            return .failure(error)
        }
    }

    static func describe(_ field: JSONField) -> String {
        switch field {
        case .integer(let value): return String(value)
        case .number(let value): return String(value)
        case .string(let text): return "the string \(quoted(text, limit: 32))"
        default: return field.kind
        }
    }

    // MARK: Encoding

    /// The request as one line of JSON (without the newline), as `blemu ctl` sends it.
    public var json: JSONValue {
        var members: [(String, JSONValue)] = [("id", .integer(id)), ("cmd", .string(command.name))]
        switch command {
        case .list(let device):
            if let device { members.append(("device", .string(device))) }
        case .set(let device, let key, let value, let exact):
            members += [("device", .string(device)), ("key", .string(key)), ("value", .string(value))]
            if exact { members.append(("exact", true)) }
        case .notify(let device, let characteristic, let value):
            members += [("device", .string(device)), ("uuid", .string(characteristic.description)), ("value", .string(Hex.bytes(value)))]
        case .disconnect(let device, let reason):
            members += [("device", .string(device)), ("reason", .string(Hex.byte(reason)))]
        case .advertise(let device, let on):
            members += [("device", .string(device)), ("on", .bool(on))]
        case .service(let device, let service, let present):
            members += [("device", .string(device)), ("uuid", .string(service.description)), ("on", .bool(present))]
        case .fault(let device, let characteristic, let action, let count):
            members += [("device", .string(device)), ("uuid", .string(characteristic.description))]
            switch action {
            case .error(let error): members += [("action", "error"), ("error", .string(Hex.byte(error.rawValue)))]
            case .delay(let duration): members += [("action", "delay"), ("ms", .integer(Int64(duration.milliseconds)))]
            case .drop: members += [("action", "drop")]
            }
            if let count { members.append(("count", .integer(Int64(count)))) }
        case .channelFault(let device, let cid, let fault, let link):
            members += [("device", .string(device)), ("action", .string(fault.rawValue)), ("cid", .string(Hex.word(cid)))]
            switch link {
            case .handle(let handle)?: members.append(("handle", .integer(Int64(handle))))
            case .peer(let address)?: members.append(("peer", .string(address.description)))
            case nil: break
            }
        case .clearFaults(let device):
            members.append(("action", "clear"))
            if let device { members.append(("device", .string(device))) }
        case .pairing(let device, let confirm):
            members += [("device", .string(device)), ("answer", .string(confirm ? "confirm" : "reject"))]
        case .authorize(let device, let characteristic, let allow, let peer):
            members += [("device", .string(device)), ("uuid", .string(characteristic.description)),
                        ("answer", .string(allow ? "allow" : "deny"))]
            if let peer { members += [("peer", .string(peer.address.description)), ("peer_random", .bool(peer.isRandom))] }
        case .bonds(let device):
            members.append(("device", .string(device)))
        case .forgetBonds(let device, let address):
            members += [("device", .string(device)), ("action", "forget")]
            if let address { members.append(("address", .string(address.description))) }
        case .watch(let filter):
            if let device = filter.device { members.append(("device", .string(device))) }
            if let kinds = filter.kindsText { members.append(("kinds", .string(kinds))) }
            if let uuid = filter.uuid { members.append(("uuid", .string(uuid.description))) }
        case .host(let request):
            members += request.members
        }
        return .object(members)
    }
}

extension Duration {
    /// Whole milliseconds (rounded down).
    var milliseconds: Int {
        let (seconds, attoseconds) = components
        return Int(clamping: seconds * 1000 + attoseconds / 1_000_000_000_000_000)
    }
}

/// Reads the fields of one request object, naming the field in every refusal, and checks that
/// nothing else was sent (a misspelt `count` would otherwise make a fault permanent).
struct FieldReader {
    let fields: [String: JSONField]
    let id: Int64
    var used: Set<String> = ["id", "cmd"]

    init(fields: [String: JSONField], id: Int64) {
        self.fields = fields
        self.id = id
    }

    func fail(_ message: String) -> ControlRequestError { ControlRequestError(id: id, message) }

    mutating func command() throws(ControlRequestError) -> ControlCommand {
        guard let cmdField = fields["cmd"] else {
            throw fail("missing \"cmd\": one of \(ControlRequest.commandNames.joined(separator: ", "))")
        }
        guard case .string(let cmd) = cmdField else {
            throw fail("\"cmd\" must be a string, one of \(ControlRequest.commandNames.joined(separator: ", ")), not \(cmdField.kind)")
        }
        let command: ControlCommand
        switch cmd {
        case "list":
            command = .list(device: try optionalString("device"))
        case "set":
            let device = try string("device")
            let key = try string("key")
            let value = try settingValue("value")
            command = .set(device: device, key: key, value: value, exact: try optionalBool("exact") ?? false)
        case "notify":
            let device = try string("device")
            let uuidText = try string("uuid")
            guard let uuid = ControlRequest.parseUUID(uuidText) else {
                throw fail("\"uuid\" \(quoted(uuidText)) is not a UUID: give 2A37, 0x2A37 or the 128-bit form 00002a37-0000-1000-8000-00805f9b34fb")
            }
            guard let valueField = field("value") else { throw fail("missing \"value\": the bytes in hex, like \"0096\"") }
            guard case .string(let hex) = valueField else { throw fail("\"value\" must be a string of hex digits, not \(valueField.kind)") }
            switch ControlRequest.parseValue(hex) {
            case .failure(let refusal): throw fail("\"value\" \(refusal.message)")
            case .success(let bytes): command = .notify(device: device, characteristic: uuid, value: bytes)
            }
        case "disconnect":
            let device = try string("device")
            let reason = try optionalCode("reason") ?? HCIStatus.remoteUserTerminated
            guard ControlRequest.allowedReasons.contains(reason) else {
                throw fail("\"reason\" \(Hex.byte(reason)) is not one HCI Disconnect allows: \(ControlRequest.allowedReasonList)")
            }
            command = .disconnect(device: device, reason: reason)
        case "advertise":
            let device = try string("device")
            command = .advertise(device: device, on: try bool("on"))
        case "service":
            let device = try string("device")
            let uuidText = try string("uuid")
            guard let uuid = ControlRequest.parseUUID(uuidText) else {
                throw fail("\"uuid\" \(quoted(uuidText)) is not a UUID: give 180F, 0x180F or the 128-bit form 0000180f-0000-1000-8000-00805f9b34fb")
            }
            command = .service(device: device, service: uuid, present: try bool("on"))
        case "fault":
            command = try fault()
        case "pairing":
            let device = try string("device")
            switch try string("answer") {
            case "confirm": command = .pairing(device: device, confirm: true)
            case "reject": command = .pairing(device: device, confirm: false)
            case let other: throw fail("\"answer\" \(quoted(other)) is not confirm or reject")
            }
        case "authorize":
            let device = try string("device")
            let uuidText = try string("uuid")
            guard let uuid = ControlRequest.parseUUID(uuidText) else {
                throw fail("\"uuid\" \(quoted(uuidText)) is not a UUID: give 2A37, 0x2A37 or the 128-bit form 00002a37-0000-1000-8000-00805f9b34fb")
            }
            let allow: Bool
            switch try string("answer") {
            case "allow": allow = true
            case "deny": allow = false
            case let other: throw fail("\"answer\" \(quoted(other)) is not allow or deny")
            }
            var peer: BluetoothAddress?
            if let text = try optionalString("peer") {
                guard let parsed = BluetoothAddress(text) else {
                    throw fail("\"peer\" \(quoted(text)) is not an address like AA:BB:CC:DD:EE:FF")
                }
                peer = parsed
            }
            // The address type: a public and a random address with the same bits are two devices.
            let peerIsRandom = try optionalBool("peer_random")
            if peerIsRandom != nil && peer == nil { throw fail("\"peer_random\" goes with \"peer\"") }
            command = .authorize(device: device, characteristic: uuid, allow: allow,
                                 peer: peer.map { LEAddress($0, isRandom: peerIsRandom ?? true) })
        case "bonds":
            let device = try string("device")
            switch try optionalString("action") ?? "list" {
            case "list":
                if field("address") != nil { throw fail("\"address\" goes with \"action\":\"forget\"") }
                command = .bonds(device: device)
            case "forget":
                var address: BluetoothAddress?
                if let text = try optionalString("address") {
                    guard let parsed = BluetoothAddress(text) else {
                        throw fail("\"address\" \(quoted(text)) is not an address like AA:BB:CC:DD:EE:FF")
                    }
                    address = parsed
                }
                command = .forgetBonds(device: device, address: address)
            case let other: throw fail("\"action\" \(quoted(other)) is not list or forget")
            }
        case "watch":
            var filter = EventFilter(device: try optionalString("device"))
            if let text = try optionalString("kinds") {
                guard let kinds = EventFilter.parseKinds(text) else {
                    throw fail("\"kinds\" \(quoted(text)) is not a comma-separated list of event kinds: \(EventFilter.kindList)")
                }
                filter.kinds = kinds
            }
            if let text = try optionalString("uuid") {
                guard let uuid = ControlRequest.parseUUID(text) else {
                    throw fail("\"uuid\" \(quoted(text)) is not a UUID: give 2A37, 0x2A37 or the 128-bit form 00002a37-0000-1000-8000-00805f9b34fb")
                }
                filter.uuid = uuid
            }
            command = .watch(filter)
        case "host":
            command = .host(try HostRequest.decode(&self))
        default:
            throw fail("unknown command \(quoted(cmd)); commands: \(ControlRequest.commandNames.joined(separator: ", "))")
        }
        let unknown = fields.keys.filter { !used.contains($0) }.sorted()
        if !unknown.isEmpty {
            let allowed = used.subtracting(["id", "cmd"]).sorted()
            throw fail("\(cmd) takes no \(unknown.map { quoted($0, limit: 32) }.joined(separator: ", "))"
                       + (allowed.isEmpty ? "" : "; its fields: \(allowed.joined(separator: ", "))"))
        }
        return command
    }

    private mutating func fault() throws(ControlRequestError) -> ControlCommand {
        let action = try string("action")
        if action == "clear" {
            return .clearFaults(device: try optionalString("device"))
        }
        let device = try string("device")
        if let fault = ChannelFault(rawValue: action) {
            guard let text = try optionalString("cid") else {
                throw fail("missing \"cid\": the channel's local CID as `list` shows it, 0x0040 to 0x007F")
            }
            guard let cid = ControlRequest.parseChannelID(text) else {
                throw fail("\"cid\" \(quoted(text)) is not a dynamic LE CID: 0x0040 to 0x007F")
            }
            // The link: its connection handle (as `list` shows it; 0x0000-0x0EFF, Vol 4, Part E,
            // 5.4.2) or its central's address.
            let handle = try optionalInteger("handle", in: 0...0x0EFF)
            let peerText = try optionalString("peer")
            if handle != nil && peerText != nil { throw fail("give the link by \"handle\" or by \"peer\", not both") }
            var link: LinkName? = handle.map { .handle(UInt16($0)) }
            if let peerText {
                guard let address = BluetoothAddress(peerText) else {
                    throw fail("\"peer\" \(quoted(peerText)) is not an address like AA:BB:CC:DD:EE:FF")
                }
                link = .peer(address)
            }
            return .channelFault(device: device, cid: cid, fault: fault, link: link)
        }
        let uuidText = try string("uuid")
        guard let uuid = ControlRequest.parseUUID(uuidText) else {
            throw fail("\"uuid\" \(quoted(uuidText)) is not a UUID: give 2A37, 0x2A37 or the 128-bit form 00002a37-0000-1000-8000-00805f9b34fb")
        }
        let planned: FaultPlan.Action
        switch action {
        case "error":
            guard let code = try optionalCode("error") else { throw fail("missing \"error\": the ATT error code, 0x01 to 0xFF") }
            guard code != 0 else { throw fail("\"error\" 0x00 is not an ATT error code: give 0x01 to 0xFF") }
            planned = .error(ATTError(rawValue: code))
        case "delay":
            guard let ms = try optionalInteger("ms", in: 1...ControlRequest.maxDelayMilliseconds) else {
                throw fail("missing \"ms\": the delay in milliseconds, 1 to \(ControlRequest.maxDelayMilliseconds)")
            }
            planned = .delay(.milliseconds(ms))
        case "drop":
            planned = .drop
        default:
            throw fail("unknown fault action \(quoted(action)): error, delay, drop, stall-credits, drop-channel or clear")
        }
        let count = try optionalInteger("count", in: 1...ControlRequest.maxFaultCount)
        return .fault(device: device, characteristic: uuid, action: planned, count: count)
    }

    // MARK: Fields

    mutating func field(_ key: String) -> JSONField? {
        used.insert(key)
        guard let value = fields[key], value != .null else { return nil }
        return value
    }

    mutating func string(_ key: String) throws(ControlRequestError) -> String {
        guard let text = try optionalString(key) else { throw fail("missing \"\(key)\"") }
        return text
    }

    mutating func optionalString(_ key: String) throws(ControlRequestError) -> String? {
        guard let value = field(key) else { return nil }
        guard case .string(let text) = value else { throw fail("\"\(key)\" must be a string, not \(value.kind)") }
        guard !text.isEmpty else { throw fail("\"\(key)\" is empty") }
        return try bounded(key, text)
    }

    /// Names, keys and values are short: a longer one is a mistake (or an attack on the log).
    private func bounded(_ key: String, _ text: String) throws(ControlRequestError) -> String {
        guard text.utf8.count <= ControlRequest.maxStringLength else {
            throw fail("\"\(key)\" is \(text.utf8.count) bytes long; at most \(ControlRequest.maxStringLength)")
        }
        return text
    }

    mutating func optionalBool(_ key: String) throws(ControlRequestError) -> Bool? {
        guard field(key) != nil else { return nil }
        return try bool(key)
    }

    mutating func bool(_ key: String) throws(ControlRequestError) -> Bool {
        guard let value = field(key) else { throw fail("missing \"\(key)\": true or false") }
        guard case .bool(let flag) = value else { throw fail("\"\(key)\" must be true or false, not \(ControlRequest.describe(value))") }
        return flag
    }

    /// A setting's value as the device parses it: a string, or a number or boolean as JSON writes it.
    private mutating func settingValue(_ key: String) throws(ControlRequestError) -> String {
        guard let value = field(key) else { throw fail("missing \"\(key)\"") }
        switch value {
        case .string(let text): return try bounded(key, text)
        case .integer(let number): return String(number)
        case .number(let number): return String(number)
        case .bool(let flag): return flag ? "true" : "false"
        default: throw fail("\"\(key)\" must be a string or a number, not \(value.kind)")
        }
    }

    mutating func optionalInteger(_ key: String, in range: ClosedRange<Int>) throws(ControlRequestError) -> Int? {
        guard let value = field(key) else { return nil }
        guard case .integer(let number) = value, number >= Int64(range.lowerBound), number <= Int64(range.upperBound) else {
            throw fail("\"\(key)\" must be a whole number from \(range.lowerBound) to \(range.upperBound), not \(ControlRequest.describe(value))")
        }
        return Int(number)
    }

    /// A one-octet code: a number (19) or a hex string ("0x13", "13").
    mutating func optionalCode(_ key: String) throws(ControlRequestError) -> UInt8? {
        guard let value = field(key) else { return nil }
        switch value {
        case .integer(let number) where (0...255).contains(number):
            return UInt8(number)
        case .string(let text):
            guard let code = ControlRequest.parseHexByte(text) else {
                throw fail("\"\(key)\" \(quoted(text)) is not a hex octet like 0x13")
            }
            return code
        default:
            throw fail("\"\(key)\" must be an octet, a number from 0 to 255 or a hex string like \"0x13\", not \(ControlRequest.describe(value))")
        }
    }
}

extension ControlRequest {
    /// The reasons HCI Disconnect takes (Vol 4, Part E, 7.1.6).
    public static var allowedReasons: Set<UInt8> { Peripheral.disconnectReasons }
    static var allowedReasonList: String { allowedReasons.sorted().map(Hex.byte).joined(separator: ", ") }

    /// `0x13`, `13`, `0X1a`, `5`: one or two hex digits, with or without `0x`.
    public static func parseHexByte(_ text: String) -> UInt8? {
        var digits = Substring(text)
        if digits.hasPrefix("0x") || digits.hasPrefix("0X") { digits = digits.dropFirst(2) }
        guard (1...2).contains(digits.utf8.count), digits.utf8.allSatisfy(isASCIIHexDigit) else { return nil }
        return UInt8(digits, radix: 16)
    }

    /// A dynamic LE channel's CID, `0x0040` or `40` (hex) to `0x007F` (Vol 3, Part A, 2.1, Table 2.3).
    public static func parseChannelID(_ text: String) -> UInt16? {
        var digits = Substring(text)
        if digits.hasPrefix("0x") || digits.hasPrefix("0X") { digits = digits.dropFirst(2) }
        guard (1...4).contains(digits.utf8.count), digits.utf8.allSatisfy(isASCIIHexDigit),
              let cid = UInt16(digits, radix: 16), (0x0040...0x007F).contains(cid) else { return nil }
        return cid
    }

    /// The longest value `notify` sends: an attribute value is at most 512 octets (Vol 3,
    /// Part F, 3.2.9), and nothing longer can be any characteristic's value.
    public static let maxValueLength = 512

    /// A value to send as hex digits (`0096`, `0x0096`): 1 to 512 bytes (`maxValueLength`).
    public static func parseValue(_ text: String) -> Result<[UInt8], ControlUsageError> {
        let tooLong = "an attribute value is at most \(maxValueLength) bytes (Vol 3, Part F, 3.2.9)"
        // Parsed only up to a bound (digits with separators), so a huge string costs nothing.
        guard text.utf8.count <= 4 * maxValueLength + 2 else {
            return .failure(ControlUsageError("is \(text.utf8.count) characters long; \(tooLong)"))
        }
        guard let bytes = Hex.parse(text), !bytes.isEmpty else {
            return .failure(ControlUsageError("\(quoted(String(text.prefix(40)))) is not hex bytes like 0096 (two digits a byte)"))
        }
        guard bytes.count <= maxValueLength else { return .failure(ControlUsageError("is \(bytes.count) bytes long; \(tooLong)")) }
        return .success(bytes)
    }

    /// `2A37`, `0x2A37`, `00002a37` or the 36-character form; nothing else (no signs, no spaces).
    public static func parseUUID(_ text: String) -> BluetoothUUID? {
        var body = Substring(text)
        if body.hasPrefix("0x") || body.hasPrefix("0X") { body = body.dropFirst(2) }
        guard body.utf8.allSatisfy({ isASCIIHexDigit($0) || $0 == UInt8(ascii: "-") }) else { return nil }
        if body.contains("-") && body.utf8.count != 36 { return nil }
        return BluetoothUUID(String(body))
    }
}

private func isASCIIHexDigit(_ byte: UInt8) -> Bool { Hex.digit(byte) != nil }
