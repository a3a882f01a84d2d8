import BlemuCore
import BlemuProgrammableHost

// The channel ops run against the programmable host's `HostChannels`, and their events' fields.
extension HostControl {
    /// The reply's members after `ok` for a channel op.
    func runChannel(_ request: HostRequest, client: Int) throws(HostError) -> [(String, JSONValue)] {
        switch request {
        case .channelConnect(let connect):
            let channel = try host.channels.connect(connect)
            log(client, "channel \(channel): connecting to SPSM \(Hex.word(connect.spsm)) on link \(connect.link)")
            return [("channel", .integer(Int64(channel)))]
        case .channelListen(let spsm, let parameters):
            try host.channels.listen(spsm: spsm, parameters: parameters)
            log(client, "listening on SPSM \(Hex.word(spsm))")
            return []
        case .channelUnlisten(let spsm):
            try host.channels.unlisten(spsm: spsm)
            log(client, "no longer listening on SPSM \(Hex.word(spsm))")
            return []
        case .channelSend(let channel, let data):
            // Sends set a stream's pace: logged within the budget, as the read-only ops are.
            try host.channels.send(channel: channel, data)
            logBudgeted(.debug, "control client \(client): host channel \(channel): \(data.count) bytes queued")
            return []
        case .channelDisconnect(let channel):
            try host.channels.disconnect(channel: channel)
            log(client, "channel \(channel) asked to close")
            return []
        default:
            return []
        }
    }

    /// A channel event's fields after `event` and `device`.
    static func channelMembers(_ event: HostEvent) -> [(String, JSONValue)] {
        switch event {
        case .channelOpened(let opened):
            return [("channel", .integer(Int64(opened.channel))), ("link", .integer(Int64(opened.link))),
                    ("spsm", .string(Hex.word(opened.spsm))), ("cid", .string(Hex.word(opened.cid))),
                    ("peer_cid", .string(Hex.word(opened.peerCID))), ("mtu", .integer(Int64(opened.mtu))),
                    ("mps", .integer(Int64(opened.mps))), ("peer_mtu", .integer(Int64(opened.peerMTU))),
                    ("peer_mps", .integer(Int64(opened.peerMPS))), ("incoming", .bool(opened.incoming)),
                    ("enhanced", .bool(opened.enhanced))]
        case .channelFailed(let channel, let end):
            return [("channel", .integer(Int64(channel))), ("result", end.result.map { .string(Hex.word($0)) } ?? .null),
                    ("reason", .string(end.word))]
        case .channelData(let channel, let data):
            return [("channel", .integer(Int64(channel))), ("data", .string(Hex.bytes(data)))]
        case .channelReady(let channel):
            return [("channel", .integer(Int64(channel)))]
        case .channelClosed(let channel, let end):
            return [("channel", .integer(Int64(channel))), ("reason", .string(end.word))]
        default:
            return []
        }
    }
}
