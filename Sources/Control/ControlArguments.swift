import BlemuATT
import BlemuCore
import BlemuHost
import BlemuGATT
import BlemuHCI

/// A `blemu ctl` command line that is not a command, with what to type instead.
public struct ControlUsageError: Error, Equatable, Sendable, CustomStringConvertible {
    public let message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

extension ControlCommand {
    /// A link's connection handle as `list` shows it (decimal) or in hex (0x0EFF): 0x0000 to
    /// 0x0EFF (Vol 4, Part E, 5.4.2).
    static func parseLinkHandle(_ text: String) -> UInt16? {
        let value = text.hasPrefix("0x") || text.hasPrefix("0X") ? UInt16(text.dropFirst(2), radix: 16) : UInt16(text)
        return value.flatMap { $0 <= 0x0EFF ? $0 : nil }
    }

    /// The command forms, for `blemu ctl --help` and usage errors.
    public static var usage: String { deviceUsage + HostRequest.usage }

    private static let deviceUsage = """
        list [DEVICE|PATTERN|fleet:NAME]
        set DEVICE KEY VALUE [--exact]
        notify DEVICE UUID HEX
        disconnect DEVICE [--reason HEX]
        advertise DEVICE on|off
        service DEVICE UUID on|off
        fault DEVICE UUID error HEX [--count N]
        fault DEVICE UUID delay MS [--count N]
        fault DEVICE UUID drop [--count N]
        fault DEVICE channel CID stall|drop [HANDLE|PEER]
        fault clear [DEVICE]
        pairing DEVICE confirm|reject
        authorize DEVICE UUID allow|deny [PEER [public|random]]
        bonds DEVICE [forget [ADDRESS]]
        watch [DEVICE|PATTERN|fleet:NAME] [--kinds KIND,...] [--uuid UUID]

        """

    /// Parses the words after `blemu ctl PATH` (`set heart-rate bpm 120`), checking every value
    /// as the server would, so a mistake is told before anything is sent. Options (`--reason`,
    /// `--count`, also as `--count=N`) may come anywhere after the command's name; `--` ends them,
    /// so a value may start with `--`. A lone `-5` is a value, not an option.
    public init(arguments: [String]) throws(ControlUsageError) {
        guard let name = arguments.first else {
            throw ControlUsageError("give a command: \(ControlRequest.commandNames.joined(separator: ", "))")
        }
        if name == "host" {
            // The host's ops take their fields as --field value, each checked by the op's decoder.
            self = .host(try HostRequest.parse(arguments: Array(arguments.dropFirst())))
            return
        }
        var words: [String] = []
        var options: [String: String] = [:]
        var rest = arguments.dropFirst()
        var optionsEnded = false
        var exact = false
        while let word = rest.popFirst() {
            guard !optionsEnded, word.hasPrefix("--") else {
                words.append(word)
                continue
            }
            if word == "--" {
                optionsEnded = true
                continue
            }
            // The one option without a value.
            if word == "--exact" {
                guard !exact else { throw ControlUsageError("--exact given twice") }
                exact = true
                continue
            }
            var option = String(word.dropFirst(2))
            var value: String?
            if let equals = option.firstIndex(of: "=") {
                value = String(option[option.index(after: equals)...])
                option = String(option[..<equals])
            }
            guard ["reason", "count", "kinds", "uuid"].contains(option) else {
                throw ControlUsageError("unknown option \(quoted(word)); options: --exact (set), --reason HEX (disconnect), --count N (fault), --kinds KIND,... and --uuid UUID (watch)")
            }
            guard options[option] == nil else { throw ControlUsageError("--\(option) given twice") }
            if value == nil { value = rest.popFirst() }
            guard let value else { throw ControlUsageError("--\(option) needs a value") }
            options[option] = value
        }

        func expect(_ count: ClosedRange<Int>, _ form: String) throws(ControlUsageError) {
            guard count.contains(words.count) else { throw ControlUsageError("usage: \(form)") }
        }
        func refuseOptions(except allowed: String?, _ form: String) throws(ControlUsageError) {
            for option in options.keys where option != allowed {
                throw ControlUsageError("\(name) takes no --\(option); usage: \(form)")
            }
            if exact && name != "set" { throw ControlUsageError("\(name) takes no --exact; usage: \(form)") }
        }

        switch name {
        case "watch":
            let form = "watch [DEVICE|PATTERN|fleet:NAME] [--kinds KIND,...] [--uuid UUID]"
            try expect(0...1, form)
            if let device = words.first, DevicePattern.isPattern(device), case .failure(let error) = DevicePattern.parse(device) {
                throw ControlUsageError(error.message)
            }
            var filter = EventFilter(device: words.first)
            for option in options.keys where option != "kinds" && option != "uuid" {
                throw ControlUsageError("watch takes no --\(option); usage: \(form)")
            }
            if exact { throw ControlUsageError("watch takes no --exact; usage: \(form)") }
            if let text = options["kinds"] {
                guard let kinds = EventFilter.parseKinds(text) else {
                    throw ControlUsageError("--kinds \(quoted(text)) is not a comma-separated list of event kinds: \(EventFilter.kindList)")
                }
                filter.kinds = kinds
            }
            if let text = options["uuid"] {
                guard let uuid = ControlRequest.parseUUID(text) else {
                    throw ControlUsageError("\(quoted(text)) is not a UUID: give 2A37, 0x2A37 or the 128-bit form")
                }
                filter.uuid = uuid
            }
            self = .watch(filter)
        case "list":
            let form = "list [DEVICE|PATTERN|fleet:NAME]"
            try expect(0...1, form)
            try refuseOptions(except: nil, form)
            if let device = words.first, DevicePattern.isPattern(device), case .failure(let error) = DevicePattern.parse(device) {
                throw ControlUsageError(error.message)
            }
            self = .list(device: words.first)
        case "set":
            let form = "set DEVICE KEY VALUE [--exact]"
            try expect(3...3, form)
            try refuseOptions(except: nil, form)
            self = .set(device: words[0], key: words[1], value: words[2], exact: exact)
        case "notify":
            let form = "notify DEVICE UUID HEX"
            try expect(3...3, form)
            try refuseOptions(except: nil, form)
            guard let uuid = ControlRequest.parseUUID(words[1]) else {
                throw ControlUsageError("\(quoted(words[1])) is not a UUID: give 2A37, 0x2A37 or the 128-bit form 00002a37-0000-1000-8000-00805f9b34fb")
            }
            switch ControlRequest.parseValue(words[2]) {
            case .failure(let refusal): throw ControlUsageError("the value \(refusal.message)")
            case .success(let bytes): self = .notify(device: words[0], characteristic: uuid, value: bytes)
            }
        case "disconnect":
            let form = "disconnect DEVICE [--reason HEX]"
            try expect(1...1, form)
            try refuseOptions(except: "reason", form)
            var reason = HCIStatus.remoteUserTerminated
            if let text = options["reason"] {
                guard let code = ControlRequest.parseHexByte(text) else {
                    throw ControlUsageError("--reason \(quoted(text)) is not a hex octet; reasons: \(ControlRequest.allowedReasonList)")
                }
                guard ControlRequest.allowedReasons.contains(code) else {
                    throw ControlUsageError("--reason \(Hex.byte(code)) is not one HCI Disconnect allows: \(ControlRequest.allowedReasonList)")
                }
                reason = code
            }
            self = .disconnect(device: words[0], reason: reason)
        case "pairing":
            let form = "pairing DEVICE confirm|reject"
            try expect(2...2, form)
            try refuseOptions(except: nil, form)
            switch words[1] {
            case "confirm": self = .pairing(device: words[0], confirm: true)
            case "reject": self = .pairing(device: words[0], confirm: false)
            default: throw ControlUsageError("pairing takes confirm or reject, not \(quoted(words[1]))")
            }
        case "authorize":
            let form = "authorize DEVICE UUID allow|deny [PEER [public|random]]"
            try expect(3...5, form)
            try refuseOptions(except: nil, form)
            guard let uuid = ControlRequest.parseUUID(words[1]) else {
                throw ControlUsageError("\(quoted(words[1])) is not a UUID: give 2A37, 0x2A37 or the 128-bit form")
            }
            let allow: Bool
            switch words[2] {
            case "allow": allow = true
            case "deny": allow = false
            default: throw ControlUsageError("authorize takes allow or deny, not \(quoted(words[2]))")
            }
            var peer: LEAddress?
            if words.count >= 4 {
                guard let parsed = BluetoothAddress(words[3]) else {
                    throw ControlUsageError("\(quoted(words[3])) is not a central's address like AA:BB:CC:DD:EE:FF")
                }
                var isRandom = true
                if words.count == 5 {
                    switch words[4] {
                    case "public": isRandom = false
                    case "random": isRandom = true
                    default: throw ControlUsageError("a central's address type is public or random, not \(quoted(words[4]))")
                    }
                }
                peer = LEAddress(parsed, isRandom: isRandom)
            }
            self = .authorize(device: words[0], characteristic: uuid, allow: allow, peer: peer)
        case "bonds":
            let form = "bonds DEVICE [forget [ADDRESS]]"
            try expect(1...3, form)
            try refuseOptions(except: nil, form)
            guard words.count > 1 else {
                self = .bonds(device: words[0])
                return
            }
            guard words[1] == "forget" else { throw ControlUsageError("bonds takes forget [ADDRESS], not \(quoted(words[1]))") }
            var address: BluetoothAddress?
            if words.count == 3 {
                guard let parsed = BluetoothAddress(words[2]) else {
                    throw ControlUsageError("\(quoted(words[2])) is not an address: give AA:BB:CC:DD:EE:FF")
                }
                address = parsed
            }
            self = .forgetBonds(device: words[0], address: address)
        case "advertise":
            let form = "advertise DEVICE on|off"
            try expect(2...2, form)
            try refuseOptions(except: nil, form)
            switch words[1] {
            case "on": self = .advertise(device: words[0], on: true)
            case "off": self = .advertise(device: words[0], on: false)
            default: throw ControlUsageError("advertise takes on or off, not \(quoted(words[1]))")
            }
        case "service":
            let form = "service DEVICE UUID on|off"
            try expect(3...3, form)
            try refuseOptions(except: nil, form)
            guard let uuid = ControlRequest.parseUUID(words[1]) else {
                throw ControlUsageError("\(quoted(words[1])) is not a UUID: give 180F, 0x180F or the 128-bit form 0000180f-0000-1000-8000-00805f9b34fb")
            }
            switch words[2] {
            case "on": self = .service(device: words[0], service: uuid, present: true)
            case "off": self = .service(device: words[0], service: uuid, present: false)
            default: throw ControlUsageError("service takes on or off, not \(quoted(words[2]))")
            }
        case "fault":
            // `fault clear [DEVICE]` has at most two words; injecting a fault takes three or more,
            // so a device whose local name is `clear` can still be given a fault.
            if words.first == "clear" && words.count <= 2 {
                try refuseOptions(except: nil, "fault clear [DEVICE]")
                self = .clearFaults(device: words.count == 2 ? words[1] : nil)
                return
            }
            let form = "fault DEVICE UUID error HEX|delay MS|drop [--count N], fault DEVICE channel CID stall|drop [HANDLE|PEER], or fault clear [DEVICE]"
            guard words.count >= 3 else { throw ControlUsageError("usage: \(form)") }
            if words[1] == "channel" {
                let channelForm = "fault DEVICE channel CID stall|drop [HANDLE|PEER]"
                try refuseOptions(except: nil, channelForm)
                try expect(4...5, channelForm)
                guard let cid = ControlRequest.parseChannelID(words[2]) else {
                    throw ControlUsageError("\(quoted(words[2])) is not a channel's CID: 0x0040 to 0x007F, as `list` shows it")
                }
                let fault: ChannelFault
                switch words[3] {
                case "stall": fault = .stallCredits
                case "drop": fault = .dropChannel
                default: throw ControlUsageError("a channel fault is stall or drop, not \(quoted(words[3]))")
                }
                // The link, as `list` shows it: its connection handle, or its central's address.
                var link: LinkName?
                if words.count == 5 {
                    if let address = BluetoothAddress(words[4]) {
                        link = .peer(address)
                    } else if let handle = Self.parseLinkHandle(words[4]) {
                        link = .handle(handle)
                    } else {
                        throw ControlUsageError("\(quoted(words[4])) is neither a link's handle (0 to 3839, or 0x0EFF) nor a central's address like AA:BB:CC:DD:EE:FF, as `list` shows them")
                    }
                }
                self = .channelFault(device: words[0], cid: cid, fault: fault, link: link)
                return
            }
            try refuseOptions(except: "count", form)
            guard let uuid = ControlRequest.parseUUID(words[1]) else {
                throw ControlUsageError("\(quoted(words[1])) is not a UUID: give 2A37, 0x2A37 or the 128-bit form 00002a37-0000-1000-8000-00805f9b34fb")
            }
            let action: FaultPlan.Action
            switch words[2] {
            case "error":
                try expect(4...4, "fault DEVICE UUID error HEX [--count N]")
                guard let code = ControlRequest.parseHexByte(words[3]), code != 0 else {
                    throw ControlUsageError("error \(quoted(words[3])) is not an ATT error code: give 0x01 to 0xFF")
                }
                action = .error(ATTError(rawValue: code))
            case "delay":
                try expect(4...4, "fault DEVICE UUID delay MS [--count N]")
                guard let ms = Int(words[3]), (1...ControlRequest.maxDelayMilliseconds).contains(ms), !words[3].hasPrefix("+") else {
                    throw ControlUsageError("delay \(quoted(words[3])) is not a whole number of milliseconds from 1 to \(ControlRequest.maxDelayMilliseconds)")
                }
                action = .delay(.milliseconds(ms))
            case "drop":
                try expect(3...3, "fault DEVICE UUID drop [--count N]")
                action = .drop
            default:
                throw ControlUsageError("unknown fault \(quoted(words[2])): error HEX, delay MS or drop (or fault clear [DEVICE])")
            }
            var count: Int?
            if let text = options["count"] {
                guard let value = Int(text), (1...ControlRequest.maxFaultCount).contains(value), !text.hasPrefix("+") else {
                    throw ControlUsageError("--count \(quoted(text)) is not a whole number from 1 to \(ControlRequest.maxFaultCount)")
                }
                count = value
            }
            self = .fault(device: words[0], characteristic: uuid, action: action, count: count)
        default:
            throw ControlUsageError("unknown command \(quoted(name)); commands: \(ControlRequest.commandNames.joined(separator: ", "))")
        }
    }
}
