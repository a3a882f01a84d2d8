// The programmable host's L2CAP connection-oriented channels (issue 36): LE Credit Based and
// Enhanced Credit Based Flow Control Mode channels (Vol 3, Part A, 3.4.3, 4.22-4.26, 10.1) on its
// links of both roles, opened, listened for, written and closed on request (Docs/CONTROL.md,
// "The programmable host", channel ops). The channels themselves are BlemuChannels'; this keeps
// their ids and turns what they do into `HostEvent`s.
import BlemuChannels
import BlemuConnection
import BlemuCore
import Logging

/// A channel as a program asks for it (`channel-connect`).
public struct HostChannelRequest: Equatable, Sendable {
    public var link: Int
    public var spsm: UInt16
    /// What we receive: the largest SDU, the largest K-frame payload, the receive window in K-frames.
    public var parameters: ChannelParameters
    /// Enhanced Credit Based Flow Control Mode (4.25) rather than LE Credit Based (4.22).
    public var enhanced: Bool

    public init(link: Int, spsm: UInt16, parameters: ChannelParameters = HostChannels.defaultParameters, enhanced: Bool = false) {
        self.link = link
        self.spsm = spsm
        self.parameters = parameters
        self.enhanced = enhanced
    }
}

/// One channel as the host tells it (`channel-opened`).
public struct HostChannelSummary: Equatable, Sendable {
    public var channel: Int
    public var link: Int
    public var spsm: UInt16
    /// Our CID and the peer's (Vol 3, Part A, 2.1: dynamic CIDs 0x0040-0x007F on LE-U).
    public var cid: UInt16
    public var peerCID: UInt16
    /// What we receive (our MTU and MPS) and what the peer takes (its MTU and MPS).
    public var mtu: UInt16
    public var mps: UInt16
    public var peerMTU: UInt16
    public var peerMPS: UInt16
    /// The peer opened it, to an SPSM listened for.
    public var incoming: Bool
    public var enhanced: Bool

    public init(channel: Int, link: Int, spsm: UInt16, cid: UInt16, peerCID: UInt16, mtu: UInt16, mps: UInt16,
                peerMTU: UInt16, peerMPS: UInt16, incoming: Bool, enhanced: Bool) {
        self.channel = channel
        self.link = link
        self.spsm = spsm
        self.cid = cid
        self.peerCID = peerCID
        self.mtu = mtu
        self.mps = mps
        self.peerMTU = peerMTU
        self.peerMPS = peerMPS
        self.incoming = incoming
        self.enhanced = enhanced
    }
}

/// Why a channel ended, in the host's words (`channel-failed` and `channel-closed`).
public enum HostChannelEnd: Equatable, Sendable {
    /// The peer refused the connection with this L2CAP Result (Vol 3, Part A, 4.23, 4.26).
    case refused(UInt16)
    /// The peer answered the request with a Command Reject (it does not do credit based channels).
    case rejected
    /// `channel-disconnect`, or a reset.
    case disconnected
    /// The peer sent a Disconnection Request (4.6).
    case peer
    /// The peer broke a rule of the mode (credits, MPS, MTU, SDU length; 3.4.3, 10.1): we disconnected.
    case protocolViolation
    /// The ACL link closed.
    case linkClosed
    /// The peer did not answer our request within the RTX time (6.2.1).
    case timeout

    public init(_ reason: ChannelCloseReason) {
        switch reason {
        case .refused(let result): self = .refused(result)
        case .rejected: self = .rejected
        case .disconnected: self = .disconnected
        case .disconnectedByPeer: self = .peer
        case .protocolViolation: self = .protocolViolation
        case .linkClosed: self = .linkClosed
        case .timedOut: self = .timeout
        }
    }

    /// The word on the socket: a refusal says its Result's name.
    public var word: String {
        switch self {
        case .refused(let result): return Self.resultWord(result)
        case .rejected: return "rejected"
        case .disconnected: return "disconnected"
        case .peer: return "peer"
        case .protocolViolation: return "protocol-violation"
        case .linkClosed: return "link-closed"
        case .timeout: return "timeout"
        }
    }

    /// The L2CAP Result of a refusal (nil for the other ends).
    public var result: UInt16? {
        if case .refused(let result) = self { return result }
        return nil
    }

    /// The Result codes of L2CAP_LE_CREDIT_BASED_CONNECTION_RSP and L2CAP_CREDIT_BASED_CONNECTION_RSP
    /// (Vol 3, Part A, 4.23, 4.26) as words; a reserved one as `result-0xNNNN`.
    public static func resultWord(_ result: UInt16) -> String {
        switch CreditBasedResult(rawValue: result) {
        case .success: return "success"
        case .spsmNotSupported: return "spsm-not-supported"
        case .noResources: return "no-resources"
        case .insufficientAuthentication: return "insufficient-authentication"
        case .insufficientAuthorization: return "insufficient-authorization"
        case .insufficientEncryptionKeySize: return "insufficient-encryption-key-size"
        case .insufficientEncryption: return "insufficient-encryption"
        case .invalidSourceCID: return "invalid-source-cid"
        case .sourceCIDAlreadyAllocated: return "source-cid-already-allocated"
        case .unacceptableParameters: return "unacceptable-parameters"
        case .invalidParameters: return "invalid-parameters"
        case nil: return "result-\(Hex.word(result))"
        }
    }
}

/// The programmable host's channels on its links, both roles, each under a channel id never
/// reused while the process runs; the SPSMs a program listens on, served on every link (those
/// open and those to come). Each open channel's SDUs become `channel-data` events; sends are
/// refused, never dropped, when the channel's bounded send queue is full (`no-room`; a
/// `channel-ready` event follows once there is room).
public final class HostChannels: CreditBasedChannelDelegate {
    /// What a channel receives unless the request says otherwise: BlemuChannels' defaults.
    public static let defaultParameters = ChannelParameters()
    /// The largest MTU a program may give: a `channel-data` event carries one SDU in hex, and a
    /// watcher's queue holds 64 KiB (`ControlServer.Limits.streamQueueBytes`), so an SDU of at
    /// most 16 KiB (32 KiB of hex) always fits a line a watcher can take.
    public static let largestMTU: UInt16 = 16_384
    /// The MTUs the requests take: 23 (LE Credit Based's least, 4.22) to `largestMTU`.
    public static let mtuRange: ClosedRange<UInt16> = CreditBasedLimits.leMinimumMTU...largestMTU
    /// The SPSM the host serves itself on peripheral links (Enhanced ATT, Vol 3, Part G, 3.6).
    public static let enhancedATTSPSM: UInt16 = 0x0027

    struct Entry {
        let id: Int
        let channel: CreditBasedChannel
        let link: Int
        let incoming: Bool
        var isOpen: Bool
    }

    private unowned let host: ProgrammableHost
    var onEvent: ((HostEvent) -> Void)?
    /// Open (and opening) channels by id.
    private var entries: [Int: Entry] = [:]
    private var ids: [ObjectIdentifier: Int] = [:]
    private var nextID = 1
    /// The SPSMs listened for, with what their channels receive.
    public private(set) var listened: [UInt16: ChannelParameters] = [:]
    /// Our request under way in `connect`: an in-process peer may answer before it returns.
    private var opening: (id: Int, link: Int)?
    /// Lines about what peers do (channels they open, close, break): their pace is the peers'.
    private var peerLog = LogBudget(burst: 50, window: .seconds(10))

    init(host: ProgrammableHost) {
        self.host = host
    }

    /// The channels open or opening, by id.
    public var count: Int { entries.count }

    public func channel(_ id: Int) -> CreditBasedChannel? { entries[id]?.channel }

    // MARK: Requests

    /// Opens a channel on `request.link` to the peer's `request.spsm`; `channel-opened` or
    /// `channel-failed` tells how it went. Returns its id.
    public func connect(_ request: HostChannelRequest) throws(HostError) -> Int {
        try host.checkReady()
        guard let link = host.links.entry(id: request.link) else { throw HostError(.unknownLink, "no link \(request.link) is open") }
        try Self.check(request.parameters, enhanced: request.enhanced)
        let id = nextID
        opening = (id, link.id)
        defer { opening = nil }
        let channels = link.connection.channels
        let made: CreditBasedChannel?
        if request.enhanced {
            made = channels.connectEnhanced(spsm: request.spsm, count: 1, parameters: request.parameters, delegate: self).first
        } else {
            made = channels.connect(spsm: request.spsm, parameters: request.parameters, delegate: self)
        }
        guard let made else {
            throw HostError(.noRoom, "link \(link.id) takes no more channels: every CID is taken or the link's receive budget (\(channels.receiveBudget) bytes of MTU) is spent")
        }
        nextID += 1
        if ids[ObjectIdentifier(made)] == nil && made.state != .closed {
            adopt(made, id: id, link: link.id, incoming: false)
        }
        host.logger.info("channel \(id): connecting to SPSM \(Hex.word(request.spsm)) on link \(link.id)\(request.enhanced ? " (enhanced)" : "")")
        return id
    }

    /// Accepts channels to `spsm` on every link, open or to come; each one opened is told as
    /// `channel-opened` with `incoming`.
    public func listen(spsm: UInt16, parameters: ChannelParameters) throws(HostError) {
        try host.checkReady()
        guard CreditBasedLimits.spsms.contains(spsm) else {
            throw HostError(nil, "SPSM \(Hex.word(spsm)) is not an LE SPSM (0x0001-0x00FF, Vol 3, Part A, 4.22)")
        }
        guard spsm != Self.enhancedATTSPSM else {
            throw HostError(nil, "SPSM 0x0027 is Enhanced ATT's, which the host serves itself (Vol 3, Part G, 3.6)")
        }
        guard listened[spsm] == nil else { throw HostError(.busy, "SPSM \(Hex.word(spsm)) is listened on already") }
        try Self.check(parameters, enhanced: false)
        if host.links.entries.contains(where: { $0.connection.channels.servers.server(spsm) != nil }) {
            throw HostError(.busy, "SPSM \(Hex.word(spsm)) is served on a link already")
        }
        listened[spsm] = parameters
        for entry in host.links.entries { serve(spsm, parameters, on: entry.connection) }
        host.logger.info("listening on SPSM \(Hex.word(spsm))")
    }

    /// Stops accepting channels to `spsm` (the peer's requests then get SPSM not supported,
    /// 0x0002); open channels stay.
    public func unlisten(spsm: UInt16) throws(HostError) {
        guard listened.removeValue(forKey: spsm) != nil else {
            throw HostError(.unknownChannel, "SPSM \(Hex.word(spsm)) is not listened on")
        }
        for entry in host.links.entries { entry.connection.channels.servers.remove(spsm: spsm) }
        host.logger.info("no longer listening on SPSM \(Hex.word(spsm))")
    }

    /// Queues one SDU on channel `id`. Refused when the channel is not open, the SDU is past the
    /// peer's MTU, or its send queue is full (`no-room`; `channel-ready` follows).
    public func send(channel id: Int, _ data: [UInt8]) throws(HostError) {
        guard let entry = entries[id] else { throw HostError(.unknownChannel, "no channel \(id) is open") }
        guard entry.isOpen, entry.channel.state == .open else { throw HostError(.notReady, "channel \(id) is not open yet") }
        let channel = entry.channel
        guard data.count <= Int(channel.peerMTU) else {
            throw HostError(nil, "an SDU of \(data.count) bytes is past the peer's MTU \(channel.peerMTU) on channel \(id) (Vol 3, Part A, 3.4.3)")
        }
        guard channel.send(data[...]) else {
            throw HostError(.noRoom, "channel \(id)'s send queue is full (\(channel.queuedBytes) bytes wait for the peer's credits); channel-ready tells when there is room")
        }
    }

    /// Disconnects channel `id` (4.6); `channel-closed` tells it, with `disconnected`.
    public func disconnect(channel id: Int) throws(HostError) {
        guard let entry = entries[id] else { throw HostError(.unknownChannel, "no channel \(id) is open") }
        guard entry.isOpen else { throw HostError(.notReady, "channel \(id) is not open yet: its connection is under way") }
        entry.channel.disconnect()
    }

    // MARK: The host's hooks

    /// A link opened, in either role: the SPSMs listened for are served on it.
    func linkOpened(_ connection: LEConnection) {
        for (spsm, parameters) in listened.sorted(by: { $0.key < $1.key }) { serve(spsm, parameters, on: connection) }
    }

    /// A reset: nothing listened for any more (the links, and their channels, are closing).
    func reset() {
        for spsm in listened.keys {
            for entry in host.links.entries { entry.connection.channels.servers.remove(spsm: spsm) }
        }
        listened = [:]
    }

    private func serve(_ spsm: UInt16, _ parameters: ChannelParameters, on connection: LEConnection) {
        if connection.channels.servers.serve(spsm: spsm, parameters: parameters, delegate: self) == nil {
            host.logger.warning("SPSM \(Hex.word(spsm)) is served already on the link with handle \(connection.handle): left as it is")
        }
    }

    /// MTU and MPS a request may give (4.22; enhanced mode at least 64 each, 4.25).
    static func check(_ parameters: ChannelParameters, enhanced: Bool) throws(HostError) {
        guard mtuRange.contains(parameters.mtu) else {
            throw HostError(nil, "mtu \(parameters.mtu) is out of range \(mtuRange.lowerBound)-\(mtuRange.upperBound)")
        }
        guard parameters.initialCredits >= 1 else { throw HostError(nil, "credits must be at least 1") }
        if enhanced {
            guard parameters.mtu >= CreditBasedLimits.enhancedMinimum, parameters.mps >= CreditBasedLimits.enhancedMinimum else {
                throw HostError(nil, "an enhanced channel's mtu and mps are at least 64 (Vol 3, Part A, 4.25)")
            }
        }
    }

    private func logPeer(_ message: @autoclosure () -> String, level: Logger.Level = .info) {
        guard host.logger.logLevel <= level,
              let leftOut = peerLog.take(now: host.controller.scheduler.nowNanoseconds, for: host.logger) else { return }
        host.logger.log(level: level, "\(message())\(LogBudget.note(leftOut))")
    }

    // MARK: CreditBasedChannelDelegate

    private func adopt(_ channel: CreditBasedChannel, id: Int, link: Int, incoming: Bool) {
        entries[id] = Entry(id: id, channel: channel, link: link, incoming: incoming, isOpen: false)
        ids[ObjectIdentifier(channel)] = id
    }

    /// The id of a channel the delegate hears of: ours, our request answered during `connect`,
    /// or a new one a peer opened to an SPSM listened for (nil: on a link not in the table).
    private func id(of channel: CreditBasedChannel) -> Int? {
        if let id = ids[ObjectIdentifier(channel)] { return id }
        if let opening, host.links.entry(id: opening.link)?.handle == channel.linkHandle, entries[opening.id] == nil {
            adopt(channel, id: opening.id, link: opening.link, incoming: false)
            return opening.id
        }
        return nil
    }

    public func channelOpened(_ channel: CreditBasedChannel) {
        var found = id(of: channel)
        if found == nil {
            guard let link = host.links.entry(handle: channel.linkHandle) else {
                logPeer("a channel opened on handle \(channel.linkHandle), which is no link of the host: disconnecting it", level: .warning)
                return channel.disconnect()
            }
            let id = nextID
            nextID += 1
            adopt(channel, id: id, link: link.id, incoming: true)
            found = id
        }
        guard let id = found, var entry = entries[id] else { return }
        entry.isOpen = true
        entries[id] = entry
        logPeer("channel \(id) open on link \(entry.link): SPSM \(Hex.word(channel.spsm)), CID \(Hex.word(channel.localCID))\(entry.incoming ? " (the peer's)" : "")")
        onEvent?(.channelOpened(HostChannelSummary(
            channel: id, link: entry.link, spsm: channel.spsm, cid: channel.localCID, peerCID: channel.remoteCID,
            mtu: channel.local.mtu, mps: channel.local.mps, peerMTU: channel.peerMTU, peerMPS: channel.peerMPS,
            incoming: entry.incoming, enhanced: channel.mode == .enhanced)))
    }

    public func channel(_ channel: CreditBasedChannel, received sdu: ArraySlice<UInt8>) {
        guard let id = ids[ObjectIdentifier(channel)] else { return }
        onEvent?(.channelData(channel: id, Array(sdu)))
    }

    public func channelClosed(_ channel: CreditBasedChannel, reason: ChannelCloseReason) {
        guard let id = id(of: channel), let entry = entries.removeValue(forKey: id) else { return }
        ids.removeValue(forKey: ObjectIdentifier(channel))
        let end = HostChannelEnd(reason)
        logPeer("channel \(id) \(entry.isOpen ? "closed" : "failed"): \(reason)")
        onEvent?(entry.isOpen ? .channelClosed(channel: id, reason: end) : .channelFailed(channel: id, reason: end))
    }

    public func channelIsReady(_ channel: CreditBasedChannel) {
        guard let id = ids[ObjectIdentifier(channel)] else { return }
        onEvent?(.channelReady(channel: id))
    }
}
