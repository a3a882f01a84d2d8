import BlemuChannels
import BlemuCore
import BlemuHCI
import BlemuProgrammableHost
import BlemuSMP
import BlemuSecurity

/// One request to the programmable host: `{"id":N,"cmd":"host","op":OP, ...}` (Docs/CONTROL.md,
/// "The programmable host"). Each op is a case with its own decoder (`HostRequest.ops`: its
/// fields, their kinds for `blemu ctl`, the decoder) and its own encoding (`members`), so an op
/// is added in one place and the decoding of the others is untouched.
public enum HostRequest: Equatable, Sendable {
    /// The host's identity and random address.
    case address
    /// Back to factory state; the `reset` event tells when done.
    case reset
    case scan(HostScanRequest)
    case scanStop(scan: Int)
    case connect(HostConnectRequest)
    /// HCI Disconnect with a reason 7.1.6 allows.
    case disconnect(link: Int, reason: UInt8)
    case links
    /// An advertisement started (`advertise`); its id comes in the reply.
    case advertise(HostAdvertiseRequest)
    case advertiseStop(advertisement: Int)
    /// L2CAP credit based channels (HostChannelRequests.swift).
    case channelConnect(HostChannelRequest)
    case channelListen(spsm: UInt16, ChannelParameters)
    case channelUnlisten(spsm: UInt16)
    case channelSend(channel: Int, [UInt8])
    case channelDisconnect(channel: Int)
    /// How both roles pair from now on (a field left out takes its default).
    case pairingConfig(PairingSettings)
    /// Bring a link to an LE security level (Vol 3, Part C, 10.2.1).
    case secure(link: Int, level: LESecurityLevel)
    /// The answer to a `pairing-request`.
    case pairingAnswer(pairing: Int, PairingAnswer)
    /// Whether either role has a bond with this peer.
    case bonded(LEAddress)
    /// Deletes the peer's bonds of both roles.
    case forget(LEAddress)

    /// The op's name on the socket.
    public var op: String {
        switch self {
        case .address: return "address"
        case .reset: return "reset"
        case .scan: return "scan"
        case .scanStop: return "scan-stop"
        case .connect: return "connect"
        case .disconnect: return "disconnect"
        case .links: return "links"
        case .advertise: return "advertise"
        case .advertiseStop: return "advertise-stop"
        case .channelConnect: return "channel-connect"
        case .channelListen: return "channel-listen"
        case .channelUnlisten: return "channel-unlisten"
        case .channelSend: return "channel-send"
        case .channelDisconnect: return "channel-disconnect"
        case .pairingConfig: return "pairing-config"
        case .secure: return "secure"
        case .pairingAnswer: return "pairing-answer"
        case .bonded: return "bonded"
        case .forget: return "forget"
        }
    }

    public var isReadOnly: Bool {
        switch self {
        case .address, .links, .bonded: return true
        default: return false
        }
    }

    /// What a field holds, for `blemu ctl host OP --field value` (the words become these JSON
    /// values, then the one decoder checks them).
    public enum FieldKind: Equatable, Sendable {
        case string
        case integer
        case bool
        /// A list of strings: `--phys 1m,coded`.
        case stringList
        /// A number or a hex string (an HCI code): `--reason 0x13`.
        case code
    }

    /// One op: its fields and its decoder.
    struct Op: Sendable {
        let fields: [(name: String, kind: FieldKind)]
        let decode: @Sendable (inout FieldReader) throws(ControlRequestError) -> HostRequest
    }

    /// Every op, in the order usage lists them: the one place an op is declared (its case, its
    /// `members` and `HostControl`'s execution follow from the enum).
    static let opTable: [(name: String, op: Op)] = [
        ("address", Op(fields: [], decode: { _ throws(ControlRequestError) in .address })),
        ("reset", Op(fields: [], decode: { _ throws(ControlRequestError) in .reset })),
        ("scan", Op(fields: [("legacy", .bool), ("passive", .bool), ("own_address_type", .string), ("phys", .stringList),
                            ("interval_ms", .integer), ("window_ms", .integer)],
                   decode: { reader throws(ControlRequestError) in .scan(try reader.hostScan()) })),
        ("scan-stop", Op(fields: [("scan", .integer)],
                         decode: { reader throws(ControlRequestError) in .scanStop(scan: try reader.hostID("scan")) })),
        ("connect", Op(fields: [("address", .string), ("address_type", .string), ("own_address_type", .string), ("timeout_ms", .integer)],
                       decode: { reader throws(ControlRequestError) in .connect(try reader.hostConnect()) })),
        ("disconnect", Op(fields: [("link", .integer), ("reason", .code)],
                          decode: { reader throws(ControlRequestError) in try reader.hostDisconnect() })),
        ("links", Op(fields: [], decode: { _ throws(ControlRequestError) in .links })),
        ("advertise", Op(fields: [("data", .string), ("scan_response", .string), ("legacy", .bool), ("connectable", .bool),
                                  ("scannable", .bool), ("directed_to", .string), ("directed_type", .string),
                                  ("own_address_type", .string), ("rpa_timeout_ms", .integer), ("interval_ms", .integer),
                                  ("primary_phy", .string), ("secondary_phy", .string)],
                         decode: { reader throws(ControlRequestError) in .advertise(try reader.hostAdvertise()) })),
        ("advertise-stop", Op(fields: [("advertisement", .integer)],
                              decode: { reader throws(ControlRequestError) in
                                  .advertiseStop(advertisement: try reader.hostID("advertisement"))
                              })),
        ("pairing-config", Op(fields: [("io_capability", .string), ("bonding", .bool), ("mitm", .bool),
                                      ("secure_connections_only", .bool), ("keys", .stringList)],
                              decode: { reader throws(ControlRequestError) in .pairingConfig(try reader.pairingSettings()) })),
        ("secure", Op(fields: [("link", .integer), ("level", .integer)],
                      decode: { reader throws(ControlRequestError) in try reader.hostSecure() })),
        ("pairing-answer", Op(fields: [("pairing", .integer), ("confirm", .bool), ("passkey", .integer)],
                              decode: { reader throws(ControlRequestError) in try reader.pairingAnswer() })),
        ("bonded", Op(fields: [("address", .string), ("address_type", .string)],
                      decode: { reader throws(ControlRequestError) in .bonded(try reader.peerAddress()) })),
        ("forget", Op(fields: [("address", .string), ("address_type", .string)],
                      decode: { reader throws(ControlRequestError) in .forget(try reader.peerAddress()) })),
    ] + channelOps

    static let ops: [String: Op] = Dictionary(uniqueKeysWithValues: opTable.map { ($0.name, $0.op) })

    /// The op names, in the table's order, for errors and usage.
    public static var opNames: [String] { opTable.map(\.name) }

    /// The fields of `op` and their kinds (nil: no such op).
    public static func fields(of op: String) -> [(name: String, kind: FieldKind)]? { ops[op]?.fields }

    /// Decodes the `op` and its fields; every other field is refused, naming the op.
    static func decode(_ reader: inout FieldReader) throws(ControlRequestError) -> HostRequest {
        guard let opField = reader.field("op") else { throw reader.fail("missing \"op\": one of \(opNames.joined(separator: ", "))") }
        guard case .string(let name) = opField else {
            throw reader.fail("\"op\" must be a string, one of \(opNames.joined(separator: ", ")), not \(opField.kind)")
        }
        guard let op = ops[name] else {
            throw reader.fail("unknown host op \(quoted(name)); ops: \(opNames.joined(separator: ", "))")
        }
        let request = try op.decode(&reader)
        let unknown = reader.fields.keys.filter { !reader.used.contains($0) }.sorted()
        if !unknown.isEmpty {
            let allowed = op.fields.map(\.name)
            throw reader.fail("host \(name) takes no \(unknown.map { quoted($0, limit: 32) }.joined(separator: ", "))"
                              + (allowed.isEmpty ? "" : "; its fields: \(allowed.joined(separator: ", "))"))
        }
        return request
    }

    /// The request's fields after `id` and `cmd`, as `blemu ctl` sends them.
    var members: [(String, JSONValue)] {
        var members: [(String, JSONValue)] = [("op", .string(op))]
        switch self {
        case .address, .reset, .links:
            break
        case .scan(let scan):
            members += [("legacy", .bool(scan.legacyOnly)), ("passive", .bool(scan.passive))]
            if let own = scan.ownAddressType { members.append(("own_address_type", .string(HostWords.ownAddressType(own)))) }
            members += [("phys", .array(HostWords.phys(scan.phys).map { .string($0) })),
                        ("interval_ms", .integer(Int64(scan.intervalMilliseconds))),
                        ("window_ms", .integer(Int64(scan.windowMilliseconds)))]
        case .scanStop(let scan):
            members.append(("scan", .integer(Int64(scan))))
        case .connect(let connect):
            members += [("address", .string(connect.peer.description)),
                        ("address_type", .string(HostWords.addressType(connect.peerAddressType.rawValue)))]
            if let own = connect.ownAddressType { members.append(("own_address_type", .string(HostWords.ownAddressType(own)))) }
            members.append(("timeout_ms", .integer(Int64(connect.timeout.milliseconds))))
        case .disconnect(let link, let reason):
            members += [("link", .integer(Int64(link))), ("reason", .string(Hex.byte(reason)))]
        case .advertise(let advertise):
            let p = advertise.parameters
            members.append(("data", .string(Hex.bytes(p.data))))
            if let scanResponse = p.scanResponse { members.append(("scan_response", .string(Hex.bytes(scanResponse)))) }
            members += [("legacy", .bool(p.legacy)), ("connectable", .bool(p.connectable)), ("scannable", .bool(p.scannable))]
            if let peer = p.directedTo {
                members += [("directed_to", .string(peer.address.description)), ("directed_type", .string(peer.isRandom ? "random" : "public"))]
            }
            if let own = advertise.ownAddressType { members.append(("own_address_type", .string(HostWords.ownAddressType(own)))) }
            if let timeout = p.privateAddressTimeoutMilliseconds { members.append(("rpa_timeout_ms", .integer(Int64(timeout)))) }
            members += [("interval_ms", .integer(Int64(p.intervalMilliseconds))), ("primary_phy", .string(HostWords.phy(p.primaryPHY.rawValue))),
                        ("secondary_phy", .string(HostWords.phy(p.secondaryPHY.rawValue)))]
        case .advertiseStop(let advertisement):
            members.append(("advertisement", .integer(Int64(advertisement))))
        case .channelConnect, .channelListen, .channelUnlisten, .channelSend, .channelDisconnect:
            members += channelMembers
        case .pairingConfig(let settings):
            members += [("io_capability", .string(HostWords.ioCapability(settings.ioCapability))), ("bonding", .bool(settings.bondable)),
                        ("mitm", .bool(settings.mitm)), ("secure_connections_only", .bool(settings.secureConnectionsOnly)),
                        ("keys", .array(HostWords.keys(settings.keys).map { .string($0) }))]
        case .secure(let link, let level):
            members += [("link", .integer(Int64(link))), ("level", .integer(Int64(level.rawValue)))]
        case .pairingAnswer(let pairing, let answer):
            members.append(("pairing", .integer(Int64(pairing))))
            switch answer {
            case .confirm(let yes): members.append(("confirm", .bool(yes)))
            case .passkey(let passkey): members.append(("passkey", .integer(Int64(passkey))))
            case .reject: break
            }
        case .bonded(let peer), .forget(let peer):
            members += [("address", .string(peer.address.description)), ("address_type", .string(peer.isRandom ? "random" : "public"))]
        }
        return members
    }

    /// `blemu ctl PATH host OP [--field value ...]`: the words as the JSON fields of the request,
    /// each converted by its kind, then decoded like a line from the socket.
    public static func parse(arguments: [String]) throws(ControlUsageError) -> HostRequest {
        guard let name = arguments.first else { throw ControlUsageError("host needs an op: \(opNames.joined(separator: ", "))") }
        guard let op = ops[name] else {
            throw ControlUsageError("unknown host op \(quoted(name)); ops: \(opNames.joined(separator: ", "))")
        }
        let usage = "host \(name)" + op.fields.map { " [--\($0.name.replacingUnderscores) \(Self.placeholder($0.kind))]" }.joined()
        var fields: [String: JSONField] = ["id": .integer(0), "cmd": .string("host"), "op": .string(name)]
        var rest = arguments.dropFirst()
        while let word = rest.popFirst() {
            guard word.hasPrefix("--") else { throw ControlUsageError("unexpected \(quoted(word)); usage: \(usage)") }
            var option = String(word.dropFirst(2))
            var value: String?
            if let equals = option.firstIndex(of: "=") {
                value = String(option[option.index(after: equals)...])
                option = String(option[..<equals])
            }
            let key = option.replacingHyphens
            guard let kind = op.fields.first(where: { $0.name == key })?.kind else {
                throw ControlUsageError("host \(name) takes no --\(printable(option, limit: 32)); usage: \(usage)")
            }
            guard fields[key] == nil else { throw ControlUsageError("--\(option) given twice") }
            if value == nil { value = rest.popFirst() }
            guard let value else { throw ControlUsageError("--\(option) needs a value") }
            switch kind {
            case .string, .code:
                fields[key] = .string(value)
            case .integer:
                guard let number = Int64(value), !value.hasPrefix("+") else {
                    throw ControlUsageError("--\(option) \(quoted(value)) is not a whole number")
                }
                fields[key] = .integer(number)
            case .bool:
                switch value {
                case "true": fields[key] = .bool(true)
                case "false": fields[key] = .bool(false)
                default: throw ControlUsageError("--\(option) takes true or false, not \(quoted(value))")
                }
            case .stringList:
                fields[key] = .array(value.split(separator: ",", omittingEmptySubsequences: false).map { .string(String($0)) })
            }
        }
        switch ControlRequest.decode(fields: fields) {
        case .success(let request):
            guard case .host(let host) = request.command else { throw ControlUsageError("usage: \(usage)") }
            return host
        case .failure(let error):
            throw ControlUsageError(error.message)
        }
    }

    private static func placeholder(_ kind: FieldKind) -> String {
        switch kind {
        case .string: return "VALUE"
        case .integer: return "N"
        case .bool: return "true|false"
        case .stringList: return "A,B"
        case .code: return "HEX"
        }
    }

    /// `blemu ctl --help`'s lines.
    public static var usage: String {
        opNames.map { name in
            "host \(name)" + (ops[name]?.fields ?? []).map { " [--\($0.name.replacingUnderscores) \(placeholder($0.kind))]" }.joined()
        }.joined(separator: "\n")
    }
}

/// The words of the host's vocabulary for HCI's values (Vol 4, Part E, 7.7.65.2 and 7.8.5).
public enum HostWords {
    /// Address_Type of a report or Peer_Address_Type of a connection.
    public static func addressType(_ type: UInt8) -> String {
        switch type {
        case 0x00: return "public"
        case 0x01: return "random"
        case 0x02: return "public-identity"
        case 0x03: return "random-identity"
        case 0xFF: return "anonymous"
        default: return "type-\(type)"
        }
    }

    public static let addressTypes: [String: AddressType] = [
        "public": .publicDevice, "random": .randomDevice, "public-identity": .publicIdentity, "random-identity": .randomIdentity,
    ]

    /// Own_Address_Type (7.8.5): 0x02 and 0x03 are resolvable private addresses with a fallback.
    public static let ownAddressTypes: [String: AddressType] = [
        "public": .publicDevice, "random": .randomDevice, "resolvable-or-public": .publicIdentity, "resolvable-or-random": .randomIdentity,
    ]

    public static func ownAddressType(_ type: AddressType) -> String {
        switch type {
        case .publicDevice: return "public"
        case .randomDevice: return "random"
        case .publicIdentity: return "resolvable-or-public"
        case .randomIdentity: return "resolvable-or-random"
        }
    }

    /// Own_Address_Type of an advertisement (7.8.5, 7.8.53).
    public static let advertisingOwnAddressTypes: [String: ProgrammedAdvertising.OwnAddressType] = [
        "public": .publicAddress, "random": .randomAddress, "resolvable-or-public": .resolvableOrPublic,
        "resolvable-or-random": .resolvableOrRandom,
    ]

    public static func ownAddressType(_ type: ProgrammedAdvertising.OwnAddressType) -> String {
        switch type {
        case .publicAddress: return "public"
        case .randomAddress: return "random"
        case .resolvableOrPublic: return "resolvable-or-public"
        case .resolvableOrRandom: return "resolvable-or-random"
        }
    }

    /// IO capabilities (Vol 3, Part H, 3.5.1, Table 3.4).
    public static let ioCapabilities: [(String, SMPIOCapability)] = [
        ("display-only", .displayOnly), ("display-yes-no", .displayYesNo), ("keyboard-only", .keyboardOnly),
        ("no-input-no-output", .noInputNoOutput), ("keyboard-display", .keyboardDisplay),
    ]

    public static func ioCapability(_ capability: SMPIOCapability) -> String {
        ioCapabilities.first { $0.1 == capability }?.0 ?? "keyboard-display"
    }

    /// The key kinds of the key distribution (3.6.1): EncKey, IdKey, SignKey.
    public static let keyKinds: [(String, SMPKeyDistribution)] = [("enc", .encryptionKey), ("id", .identityKey), ("sign", .signingKey)]

    public static func keys(_ keys: SMPKeyDistribution) -> [String] {
        keyKinds.filter { keys.contains($0.1) }.map(\.0)
    }

    /// A pairing prompt's method (`pairing-request`).
    public static func method(_ kind: PairingPromptKind) -> String {
        switch kind {
        case .justWorks: return "just-works"
        case .numericComparison: return "numeric-comparison"
        case .passkeyEntry: return "passkey-entry"
        case .passkeyDisplay: return "passkey-display"
        }
    }

    public static func phys(_ phys: ScanningPHYs) -> [String] {
        var names: [String] = []
        if phys.contains(.oneM) { names.append("1m") }
        if phys.contains(.coded) { names.append("coded") }
        return names
    }

    /// Primary_PHY and Secondary_PHY of an extended report (7.7.65.13).
    public static func phy(_ phy: UInt8) -> String {
        switch phy {
        case 0x01: return "1m"
        case 0x02: return "2m"
        case 0x03: return "coded"
        default: return "phy-\(phy)"
        }
    }
}

extension FieldReader {
    /// A whole-number id a host reply gave (a scan, a link): 1 to 2^53 - 1.
    mutating func hostID(_ key: String) throws(ControlRequestError) -> Int {
        guard let id = try optionalInteger(key, in: 1...Int(ControlRequest.maxID)) else {
            throw fail("missing \"\(key)\": the id the host gave")
        }
        return id
    }

    mutating func hostScan() throws(ControlRequestError) -> HostScanRequest {
        var scan = HostScanRequest()
        scan.legacyOnly = try optionalBool("legacy") ?? false
        scan.passive = try optionalBool("passive") ?? false
        scan.ownAddressType = try ownAddressType()
        if let value = field("phys") {
            guard case .array(let elements) = value, !elements.isEmpty, elements.count <= 2 else {
                throw fail("\"phys\" must be a list of one or two of \"1m\" and \"coded\", like [\"1m\",\"coded\"], not \(ControlRequest.describe(value))")
            }
            var phys: ScanningPHYs = []
            for element in elements {
                switch element {
                case .string("1m") where !phys.contains(.oneM): phys.insert(.oneM)
                case .string("coded") where !phys.contains(.coded): phys.insert(.coded)
                default:
                    throw fail("\"phys\" holds \(ControlRequest.describe(element)): each is \"1m\" or \"coded\", once (scanning is on the primary advertising PHYs, Vol 4, Part E, 7.8.64)")
                }
            }
            scan.phys = phys
        }
        let range = HostScanRequest.millisecondRange
        scan.intervalMilliseconds = try optionalInteger("interval_ms", in: range) ?? scan.intervalMilliseconds
        scan.windowMilliseconds = try optionalInteger("window_ms", in: range) ?? min(scan.windowMilliseconds, scan.intervalMilliseconds)
        guard scan.windowMilliseconds <= scan.intervalMilliseconds else {
            throw fail("\"window_ms\" \(scan.windowMilliseconds) is longer than \"interval_ms\" \(scan.intervalMilliseconds): the window is at most the interval (Vol 4, Part E, 7.8.10)")
        }
        return scan
    }

    mutating func hostConnect() throws(ControlRequestError) -> HostConnectRequest {
        let text = try string("address")
        guard let address = BluetoothAddress(text) else { throw fail("\"address\" \(quoted(text)) is not an address like AA:BB:CC:DD:EE:FF") }
        let typeText = try string("address_type")
        guard let type = HostWords.addressTypes[typeText] else {
            throw fail("\"address_type\" \(quoted(typeText)) is not public, random, public-identity or random-identity")
        }
        let own = try ownAddressType()
        let range = HostConnectRequest.timeoutRange
        let timeout = try optionalInteger("timeout_ms", in: range) ?? HostConnectRequest.defaultTimeoutMilliseconds
        return HostConnectRequest(peer: address, peerAddressType: type, ownAddressType: own, timeout: .milliseconds(timeout))
    }

    mutating func hostDisconnect() throws(ControlRequestError) -> HostRequest {
        let link = try hostID("link")
        let reason = try optionalCode("reason") ?? HCIStatus.remoteUserTerminated
        guard ControlRequest.allowedReasons.contains(reason) else {
            throw fail("\"reason\" \(Hex.byte(reason)) is not one HCI Disconnect allows: \(ControlRequest.allowedReasonList)")
        }
        return .disconnect(link: link, reason: reason)
    }

    /// `advertise`'s fields. Each is checked for what it is here; whether the combination is one
    /// the controller may take (Vol 4, Part E, 7.8.5, 7.8.53 – 7.8.57) the host checks when it
    /// starts it (`ProgrammedAdvertising.ruleBroken`), also before anything is sent.
    mutating func hostAdvertise() throws(ControlRequestError) -> HostAdvertiseRequest {
        var p = ProgrammedAdvertising.Parameters()
        p.data = try optionalHex("data", what: "the advertising data") ?? []
        p.scanResponse = try optionalHex("scan_response", what: "the scan response data")
        p.legacy = try optionalBool("legacy") ?? false
        p.connectable = try optionalBool("connectable") ?? false
        p.scannable = try optionalBool("scannable") ?? false
        let peerText = try optionalString("directed_to")
        let peerType = try optionalString("directed_type")
        if let peerText {
            guard let address = BluetoothAddress(peerText) else {
                throw fail("\"directed_to\" \(quoted(peerText)) is not an address like AA:BB:CC:DD:EE:FF")
            }
            guard let peerType else { throw fail("\"directed_to\" needs \"directed_type\": public or random") }
            guard peerType == "public" || peerType == "random" else {
                throw fail("\"directed_type\" \(quoted(peerType)) is not public or random (Peer_Address_Type, Vol 4, Part E, 7.8.53)")
            }
            p.directedTo = LEAddress(address, isRandom: peerType == "random")
        } else if peerType != nil {
            throw fail("\"directed_type\" goes with \"directed_to\"")
        }
        var ownAddressType: ProgrammedAdvertising.OwnAddressType?
        if let text = try optionalString("own_address_type") {
            guard let type = HostWords.advertisingOwnAddressTypes[text] else {
                throw fail("\"own_address_type\" \(quoted(text)) is not public, random, resolvable-or-public or resolvable-or-random")
            }
            ownAddressType = type
        }
        // Whether it goes with the own address type is the host's check (`ruleBroken`): the type
        // defaults to the identity's when absent.
        p.privateAddressTimeoutMilliseconds = try optionalInteger("rpa_timeout_ms",
                                                                  in: ProgrammedAdvertising.Parameters.privateAddressTimeoutRange)
        let range = Int(ProgrammedAdvertising.Parameters.intervalRange.lowerBound)...Int(ProgrammedAdvertising.Parameters.intervalRange.upperBound)
        if let interval = try optionalInteger("interval_ms", in: range) { p.intervalMilliseconds = Double(interval) }
        if let text = try optionalString("primary_phy") {
            switch text {
            case "1m": p.primaryPHY = .le1M
            case "coded": p.primaryPHY = .leCoded
            default:
                throw fail("\"primary_phy\" \(quoted(text)) is not 1m or coded (Primary_Advertising_PHY, Vol 4, Part E, 7.8.53)")
            }
        }
        if let text = try optionalString("secondary_phy") {
            switch text {
            case "1m": p.secondaryPHY = .le1M
            case "2m": p.secondaryPHY = .le2M
            case "coded": p.secondaryPHY = .leCoded
            default:
                throw fail("\"secondary_phy\" \(quoted(text)) is not 1m, 2m or coded (Secondary_Advertising_PHY, Vol 4, Part E, 7.8.53)")
            }
        }
        return HostAdvertiseRequest(parameters: p, ownAddressType: ownAddressType)
    }

    /// AD structures as hex digits, two a byte (`""` is none), at most the most any controller
    /// takes (Max_Advertising_Data_Length 0x0672, 1650 octets, Vol 4, Part E, 7.8.57); read only up
    /// to that bound, so a huge string costs nothing.
    private mutating func optionalHex(_ key: String, what: String) throws(ControlRequestError) -> [UInt8]? {
        guard let value = field(key) else { return nil }
        guard case .string(let text) = value else {
            throw fail("\"\(key)\" must be a string of hex digits (\(what)), not \(ControlRequest.describe(value))")
        }
        let limit = AdvertisingPayload.extendedMaximumLength
        let utf8 = text.utf8
        guard utf8.count <= 2 * limit else {
            throw fail("\"\(key)\" is \(utf8.count) characters long: at most \(limit) bytes (\(2 * limit) hex digits), the most a controller takes (Vol 4, Part E, 7.8.57)")
        }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(utf8.count / 2)
        var high: UInt8?
        for character in utf8 {
            guard let digit = Hex.digit(character) else {
                throw fail("\"\(key)\" \(quoted(String(text.prefix(40)))) is not hex digits like 020106 (two a byte, nothing else)")
            }
            if let first = high {
                bytes.append(first << 4 | digit)
                high = nil
            } else {
                high = digit
            }
        }
        guard high == nil else { throw fail("\"\(key)\" has an odd number of hex digits: two a byte") }
        return bytes
    }

    /// `pairing-config`: every field optional, one left out takes its default (PairingSettings()).
    mutating func pairingSettings() throws(ControlRequestError) -> PairingSettings {
        var settings = PairingSettings()
        if let text = try optionalString("io_capability") {
            guard let capability = HostWords.ioCapabilities.first(where: { $0.0 == text })?.1 else {
                throw fail("\"io_capability\" \(quoted(text)) is not \(HostWords.ioCapabilities.map(\.0).joined(separator: ", ")) (Vol 3, Part H, 3.5.1)")
            }
            settings.ioCapability = capability
        }
        settings.bondable = try optionalBool("bonding") ?? settings.bondable
        settings.mitm = try optionalBool("mitm") ?? settings.mitm
        settings.secureConnectionsOnly = try optionalBool("secure_connections_only") ?? settings.secureConnectionsOnly
        if let value = field("keys") {
            let words = HostWords.keyKinds.map(\.0).joined(separator: ", ")
            guard case .array(let elements) = value, elements.count <= HostWords.keyKinds.count else {
                throw fail("\"keys\" must be a list of some of \(words), like [\"enc\",\"id\"], not \(ControlRequest.describe(value))")
            }
            var keys: SMPKeyDistribution = []
            for element in elements {
                guard case .string(let word) = element, let kind = HostWords.keyKinds.first(where: { $0.0 == word })?.1,
                      !keys.contains(kind) else {
                    throw fail("\"keys\" holds \(ControlRequest.describe(element)): each is one of \(words), once (the key distribution, Vol 3, Part H, 3.6.1)")
                }
                keys.insert(kind)
            }
            settings.keys = keys
        }
        return settings
    }

    mutating func hostSecure() throws(ControlRequestError) -> HostRequest {
        let link = try hostID("link")
        guard let number = try optionalInteger("level", in: 1...4), let level = LESecurityLevel(rawValue: number) else {
            throw fail("missing \"level\": the LE security level, 1 to 4 (Vol 3, Part C, 10.2.1)")
        }
        return .secure(link: link, level: level)
    }

    /// `pairing-answer`: `confirm` or `passkey`, neither a rejection; not both.
    mutating func pairingAnswer() throws(ControlRequestError) -> HostRequest {
        let pairing = try hostID("pairing")
        let confirm = try optionalBool("confirm")
        let passkey = try optionalInteger("passkey", in: 0...999_999)
        switch (confirm, passkey) {
        case (.some, .some): throw fail("a pairing answer is \"confirm\" or \"passkey\", not both")
        case (.some(let yes), nil): return .pairingAnswer(pairing: pairing, .confirm(yes))
        case (nil, .some(let passkey)): return .pairingAnswer(pairing: pairing, .passkey(UInt32(passkey)))
        case (nil, nil): return .pairingAnswer(pairing: pairing, .reject)
        }
    }

    /// A peer's address and type (`bonded`, `forget`): the identity types name the same address.
    mutating func peerAddress() throws(ControlRequestError) -> LEAddress {
        let text = try string("address")
        guard let address = BluetoothAddress(text) else { throw fail("\"address\" \(quoted(text)) is not an address like AA:BB:CC:DD:EE:FF") }
        let typeText = try string("address_type")
        guard let type = HostWords.addressTypes[typeText] else {
            throw fail("\"address_type\" \(quoted(typeText)) is not public, random, public-identity or random-identity")
        }
        return LEAddress(address, isRandom: type.rawValue & 0x01 != 0)
    }

    private mutating func ownAddressType() throws(ControlRequestError) -> AddressType? {
        guard let text = try optionalString("own_address_type") else { return nil }
        guard let type = HostWords.ownAddressTypes[text] else {
            throw fail("\"own_address_type\" \(quoted(text)) is not public, random, resolvable-or-public or resolvable-or-random")
        }
        return type
    }
}

private extension String {
    var replacingUnderscores: String { String(map { $0 == "_" ? "-" : $0 }) }
    var replacingHyphens: String { String(map { $0 == "-" ? "_" : $0 }) }
}
