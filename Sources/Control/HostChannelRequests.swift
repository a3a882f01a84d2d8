import BlemuChannels
import BlemuCore
import BlemuProgrammableHost

// The programmable host's channel ops (Docs/CONTROL.md, "The programmable host"): their entries
// in `HostRequest.opTable`, their encoding for `blemu ctl`, their decoders.

extension HostRequest {
    static let channelParameterFields: [(name: String, kind: FieldKind)] = [("mtu", .integer), ("mps", .integer), ("credits", .integer)]

    static let channelOps: [(name: String, op: Op)] = [
        ("channel-connect", Op(fields: [("link", .integer), ("spsm", .code)] + channelParameterFields + [("enhanced", .bool)],
                               decode: { reader throws(ControlRequestError) in .channelConnect(try reader.hostChannelConnect()) })),
        ("channel-listen", Op(fields: [("spsm", .code)] + channelParameterFields,
                              decode: { reader throws(ControlRequestError) in
                                  let spsm = try reader.spsm()
                                  return .channelListen(spsm: spsm, try reader.channelParameters(enhanced: false))
                              })),
        ("channel-unlisten", Op(fields: [("spsm", .code)],
                                decode: { reader throws(ControlRequestError) in .channelUnlisten(spsm: try reader.spsm()) })),
        ("channel-send", Op(fields: [("channel", .integer), ("data", .string)],
                            decode: { reader throws(ControlRequestError) in
                                let channel = try reader.hostID("channel")
                                return .channelSend(channel: channel, try reader.sdu())
                            })),
        ("channel-disconnect", Op(fields: [("channel", .integer)],
                                  decode: { reader throws(ControlRequestError) in .channelDisconnect(channel: try reader.hostID("channel")) })),
    ]

    static func parameterMembers(_ parameters: ChannelParameters) -> [(String, JSONValue)] {
        [("mtu", .integer(Int64(parameters.mtu))), ("mps", .integer(Int64(parameters.mps))),
         ("credits", .integer(Int64(parameters.initialCredits)))]
    }

    /// A channel op's fields after `op`.
    var channelMembers: [(String, JSONValue)] {
        switch self {
        case .channelConnect(let request):
            return [("link", .integer(Int64(request.link))), ("spsm", .string(Hex.word(request.spsm)))]
                + Self.parameterMembers(request.parameters) + [("enhanced", .bool(request.enhanced))]
        case .channelListen(let spsm, let parameters):
            return [("spsm", .string(Hex.word(spsm)))] + Self.parameterMembers(parameters)
        case .channelUnlisten(let spsm):
            return [("spsm", .string(Hex.word(spsm)))]
        case .channelSend(let channel, let data):
            return [("channel", .integer(Int64(channel))), ("data", .string(Hex.bytes(data)))]
        case .channelDisconnect(let channel):
            return [("channel", .integer(Int64(channel)))]
        default:
            return []
        }
    }
}

extension FieldReader {
    /// An LE SPSM (Vol 3, Part A, 4.22: 0x0001-0x00FF): a number, or hex like "0x0080" or "80".
    mutating func spsm() throws(ControlRequestError) -> UInt16 {
        guard let value = field("spsm") else { throw fail("missing \"spsm\": an LE SPSM, 0x0001 to 0x00FF") }
        let range = CreditBasedLimits.spsms
        switch value {
        case .integer(let number) where number >= Int64(range.lowerBound) && number <= Int64(range.upperBound):
            return UInt16(number)
        case .string(let text):
            var digits = Substring(text)
            if digits.hasPrefix("0x") || digits.hasPrefix("0X") { digits = digits.dropFirst(2) }
            guard (1...4).contains(digits.utf8.count), digits.utf8.allSatisfy({ Hex.digit($0) != nil }),
                  let spsm = UInt16(digits, radix: 16), range.contains(spsm) else {
                throw fail("\"spsm\" \(quoted(text)) is not an LE SPSM, 0x0001 to 0x00FF (Vol 3, Part A, 4.22)")
            }
            return spsm
        default:
            throw fail("\"spsm\" must be an LE SPSM, a number from 1 to 255 or hex like \"0x0080\" (Vol 3, Part A, 4.22), not \(ControlRequest.describe(value))")
        }
    }

    /// `mtu`, `mps` and `credits`, each optional (BlemuChannels' defaults): MTU 23 (64 enhanced)
    /// to the host's largest, MPS 23 (64 enhanced) to 65533 (4.22, 4.25), credits 1 to 65535 (4.24).
    mutating func channelParameters(enhanced: Bool) throws(ControlRequestError) -> ChannelParameters {
        let least = Int(enhanced ? CreditBasedLimits.enhancedMinimum : CreditBasedLimits.leMinimumMTU)
        let defaults = HostChannels.defaultParameters
        let mtu = try optionalInteger("mtu", in: least...Int(HostChannels.largestMTU)) ?? Int(defaults.mtu)
        let mps = try optionalInteger("mps", in: least...Int(CreditBasedLimits.mpsRange.upperBound)) ?? Int(defaults.mps)
        let credits = try optionalInteger("credits", in: 1...CreditBasedLimits.maximumCredits) ?? Int(defaults.initialCredits)
        return ChannelParameters(mtu: UInt16(mtu), mps: UInt16(mps), initialCredits: UInt16(credits))
    }

    mutating func hostChannelConnect() throws(ControlRequestError) -> HostChannelRequest {
        let link = try hostID("link")
        let spsm = try spsm()
        let enhanced = try optionalBool("enhanced") ?? false
        return HostChannelRequest(link: link, spsm: spsm, parameters: try channelParameters(enhanced: enhanced), enhanced: enhanced)
    }

    /// One SDU in hex (two digits a byte, nothing else), at most the host's largest MTU: bounded
    /// before it is parsed.
    mutating func sdu() throws(ControlRequestError) -> [UInt8] {
        guard let value = field("data") else { throw fail("missing \"data\": the SDU in hex, like \"68656c6c6f\"") }
        guard case .string(let text) = value else { throw fail("\"data\" must be a string of hex digits, not \(value.kind)") }
        let limit = Int(HostChannels.largestMTU)
        guard text.utf8.count <= 2 * limit else {
            throw fail("\"data\" is \(text.utf8.count) characters long; an SDU here is at most \(limit) bytes")
        }
        guard text.utf8.count % 2 == 0, text.utf8.allSatisfy({ Hex.digit($0) != nil }), let bytes = Hex.parse(text) else {
            throw fail("\"data\" \(quoted(String(text.prefix(40)))) is not hex bytes like 68656c6c6f (two digits a byte)")
        }
        return bytes
    }
}
