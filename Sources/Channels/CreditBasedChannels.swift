import BlemuCore
import BlemuHCI
import BlemuL2CAP

/// One SPSM a device serves: its security, what its channels offer, and who hears them.
public final class ChannelServer {
    public let spsm: UInt16
    public var security: ChannelSecurity
    public var parameters: ChannelParameters
    /// Asked for each request that passed the security check: false refuses it with
    /// Insufficient Authorization (0x0006). The argument is the link's connection handle.
    public var authorize: ((UInt16) -> Bool)?
    /// Served only in Enhanced Credit Based Flow Control Mode: an LE Credit Based request to it
    /// gets SPSM not supported (0x0002). EATT's PSM 0x0027 is one (Vol 3, Part G, 3.6 and
    /// Part F, 3.2.11: an Enhanced ATT bearer is an L2CAP channel in that mode).
    public var enhancedOnly = false
    public weak var delegate: CreditBasedChannelDelegate?

    init(spsm: UInt16, security: ChannelSecurity, parameters: ChannelParameters, delegate: CreditBasedChannelDelegate?) {
        self.spsm = spsm
        self.security = security
        self.parameters = parameters
        self.delegate = delegate
    }
}

/// The SPSMs served on the links of one device (shared by its links' `CreditBasedChannels`).
public final class ChannelServers {
    public private(set) var servers: [ChannelServer] = []

    public init() {}

    /// Serves a fixed SPSM (0x0001-0x00FF); nil when it is out of range or served already.
    @discardableResult
    public func serve(spsm: UInt16, security: ChannelSecurity = .none, parameters: ChannelParameters = ChannelParameters(),
                      delegate: CreditBasedChannelDelegate?) -> ChannelServer? {
        guard CreditBasedLimits.spsms.contains(spsm), server(spsm) == nil else { return nil }
        let server = ChannelServer(spsm: spsm, security: security, parameters: parameters, delegate: delegate)
        servers.append(server)
        return server
    }

    /// Serves the lowest free dynamic SPSM (0x0080-0x00FF, Vol 3, Part A, 4.22), as Core
    /// Bluetooth's `publishL2CAPChannel` assigns one; nil when all 128 are taken.
    public func publish(security: ChannelSecurity = .none, parameters: ChannelParameters = ChannelParameters(),
                        delegate: CreditBasedChannelDelegate?) -> ChannelServer? {
        guard let spsm = CreditBasedLimits.dynamicSPSMs.first(where: { server($0) == nil }) else { return nil }
        return serve(spsm: spsm, security: security, parameters: parameters, delegate: delegate)
    }

    /// Stops serving `spsm`: new requests get SPSM not supported; open channels stay.
    public func remove(spsm: UInt16) {
        servers.removeAll { $0.spsm == spsm }
    }

    public func server(_ spsm: UInt16) -> ChannelServer? {
        servers.first { $0.spsm == spsm }
    }
}

/// The credit based channels of one link, in either role (Vol 3, Part A, 4.6, 4.7, 4.22-4.28,
/// 10.1): it answers the peer's requests against the device's `ChannelServers` and the link's
/// security, opens channels of its own, and carries their K-frames. Attached to its
/// `L2CAPLink`, which hands it the credit based signalling and the dynamic CIDs.
public final class CreditBasedChannels: L2CAPDynamicChannels {
    /// Channels a peer may hold open (or opening, or closing) on one link: past it a request is
    /// refused with No resources (0x0004).
    public static let defaultChannelLimit = 16
    /// How long our request waits for its response (the RTX timer, Vol 3, Part A, 6.2.1: 1 to
    /// 60 s). A peer that never answers a Disconnection Request would otherwise keep the CID.
    public static let responseTimeout: Duration = .seconds(30)
    /// The sum of our channels' receive MTUs one link may hold: each channel gathers an SDU of up
    /// to its MTU (3.4.3), so this bounds what a peer can make a link buffer whatever the channel
    /// count. 384 KiB takes six channels at the largest MTU (65535: an enhanced request of five, and one more) or
    /// sixteen at 24 KiB, where sixteen at 65535 would be 1 MiB a link; past it a request (or a
    /// channel within an enhanced request) is refused with No resources (0x0004, 4.23, 4.26).
    public static let defaultReceiveBudget = 384 * 1024

    unowned let link: L2CAPLink
    public let servers: ChannelServers
    public let channelLimit: Int
    public let receiveBudget: Int
    /// The link's one security state, read in place (the security layer sets it at each
    /// Encryption Change; the link's GATT server session reads the same).
    public let security: LinkSecurityState
    /// How the link is protected now.
    public var linkSecurity: LinkSecurity {
        get { security.current }
        set { security.current = newValue }
    }
    public private(set) var channels: [CreditBasedChannel] = []

    private enum Pending {
        case connect(identifier: UInt8, mode: CreditBasedChannel.Mode, channels: [CreditBasedChannel])
        case reconfigure(identifier: UInt8, channels: [CreditBasedChannel], mtu: UInt16, mps: UInt16)
        var identifier: UInt8 {
            switch self {
            case .connect(let id, _, _), .reconfigure(let id, _, _, _): id
            }
        }
    }
    private var creditCommand: [UInt8] = []
    /// Our requests awaiting their responses (at most one per channel, so bounded by the limit).
    private var pending: [Pending] = []

    public init(link: L2CAPLink, servers: ChannelServers, security: LinkSecurityState = LinkSecurityState(),
                channelLimit: Int = CreditBasedChannels.defaultChannelLimit,
                receiveBudget: Int = CreditBasedChannels.defaultReceiveBudget) {
        self.link = link
        self.servers = servers
        self.security = security
        self.channelLimit = max(0, min(channelLimit, CreditBasedLimits.dynamicCIDs.count))
        self.receiveBudget = max(0, receiveBudget)
        link.attach(dynamicChannels: self)
    }

    public func channel(localCID: UInt16) -> CreditBasedChannel? {
        channels.first { $0.localCID == localCID }
    }

    private func channel(remoteCID: UInt16) -> CreditBasedChannel? {
        channels.first { $0.remoteCID == remoteCID && $0.state != .closed && $0.state != .connecting }
    }

    /// The receive MTUs of the link's channels (open, opening or closing), against `receiveBudget`.
    public var receiveMTUInUse: Int { channels.reduce(0) { $0 + Int($1.local.mtu) } }

    private func budgetTakes(_ mtu: UInt16, count: Int = 1) -> Bool {
        receiveMTUInUse + Int(mtu) * count <= receiveBudget
    }

    /// The lowest dynamic CID no channel of this link uses, within the limit.
    private func freeCID() -> UInt16? {
        guard channels.count < channelLimit else { return nil }
        return CreditBasedLimits.dynamicCIDs.first { cid in !channels.contains { $0.localCID == cid } }
    }

    private func remove(_ channel: CreditBasedChannel) {
        answered(channel)
        channels.removeAll { $0 === channel }
    }

    /// Starts the RTX timer of our request about `channel`: unanswered, a connecting channel
    /// fails and a disconnecting one is forgotten, its CID free again.
    private func awaitAnswer(_ channel: CreditBasedChannel) {
        answered(channel)
        channel.responseTimer = link.context.scheduler.schedule(after: Self.responseTimeout) { [weak self, weak channel] in
            guard let self, let channel else { return }
            channel.responseTimer = nil
            switch channel.state {
            case .connecting:
                self.pending.removeAll { if case .connect(_, _, let asked) = $0 { asked.contains { $0 === channel } } else { false } }
                channel.ended(.timedOut)
                self.remove(channel)
            case .disconnecting:
                channel.ended(.timedOut)
                self.remove(channel)
            case .open, .closed:
                break
            }
        }
    }

    private func answered(_ channel: CreditBasedChannel) {
        if let timer = channel.responseTimer { link.context.scheduler.cancel(timer) }
        channel.responseTimer = nil
    }

    // MARK: Opening channels of our own

    /// Opens one channel in LE Credit Based Flow Control Mode (4.22). Nil when the link has no
    /// free CID within the limit, or `spsm` is out of range; else the channel, connecting, whose
    /// delegate hears `channelOpened` or `channelClosed(.refused)`.
    public func connect(spsm: UInt16, parameters: ChannelParameters = ChannelParameters(),
                        delegate: CreditBasedChannelDelegate?) -> CreditBasedChannel? {
        guard !link.isClosed, CreditBasedLimits.spsms.contains(spsm),
              parameters.mtu >= CreditBasedLimits.leMinimumMTU, CreditBasedLimits.mpsRange.contains(parameters.mps),
              budgetTakes(parameters.mtu), let cid = freeCID() else { return nil }
        let channel = CreditBasedChannel(mode: .le, spsm: spsm, localCID: cid, local: parameters, owner: self, delegate: delegate)
        channels.append(channel)
        let id = link.takeIdentifier()
        pending.append(.connect(identifier: id, mode: .le, channels: [channel]))
        awaitAnswer(channel)
        send(LECreditBasedConnectionRequest(spsm: spsm, sourceCID: cid, mtu: parameters.mtu, mps: parameters.mps,
                                            initialCredits: parameters.initialCredits), identifier: id)
        return channel
    }

    /// Opens one to five channels in Enhanced Credit Based Flow Control Mode with one request
    /// (4.25); MTU and MPS at least 64. Empty when they cannot be asked for.
    public func connectEnhanced(spsm: UInt16, count: Int, parameters: ChannelParameters = ChannelParameters(),
                                delegate: CreditBasedChannelDelegate?) -> [CreditBasedChannel] {
        guard !link.isClosed, CreditBasedLimits.spsms.contains(spsm),
              (1...CreditBasedLimits.enhancedChannelsPerRequest).contains(count),
              parameters.mtu >= CreditBasedLimits.enhancedMinimum, parameters.mps >= CreditBasedLimits.enhancedMinimum,
              channels.count + count <= channelLimit, budgetTakes(parameters.mtu, count: count) else { return [] }
        var opened: [CreditBasedChannel] = []
        for _ in 0..<count {
            guard let cid = freeCID() else { break }
            let channel = CreditBasedChannel(mode: .enhanced, spsm: spsm, localCID: cid, local: parameters, owner: self, delegate: delegate)
            channels.append(channel)
            opened.append(channel)
        }
        let id = link.takeIdentifier()
        pending.append(.connect(identifier: id, mode: .enhanced, channels: opened))
        for channel in opened { awaitAnswer(channel) }
        send(CreditBasedConnectionRequest(spsm: spsm, mtu: parameters.mtu, mps: parameters.mps,
                                          initialCredits: parameters.initialCredits, sourceCIDs: opened.map(\.localCID)),
             identifier: id)
        return opened
    }

    /// Asks the peer to take a larger MTU (and this MPS) for our receiving side of up to five
    /// enhanced channels (4.27). False when the Core's rules forbid it here: the MTU may only
    /// grow, the MPS may shrink only for a single channel, both at least 64.
    @discardableResult
    public func reconfigure(_ reconfigured: [CreditBasedChannel], mtu: UInt16, mps: UInt16) -> Bool {
        let mps = min(mps, ChannelParameters.largestMPS)
        guard (1...CreditBasedLimits.enhancedChannelsPerRequest).contains(reconfigured.count),
              mtu >= CreditBasedLimits.enhancedMinimum, mps >= CreditBasedLimits.enhancedMinimum,
              reconfigured.allSatisfy({ $0.mode == .enhanced && $0.state == .open && $0.owner === self && mtu >= $0.local.mtu }),
              reconfigured.count == 1 || reconfigured.allSatisfy({ mps >= $0.local.mps }),
              !pending.contains(where: { if case .reconfigure = $0 { true } else { false } }),
              receiveMTUInUse + reconfigured.reduce(0, { $0 + Int(mtu) - Int($1.local.mtu) }) <= receiveBudget else { return false }
        let id = link.takeIdentifier()
        pending.append(.reconfigure(identifier: id, channels: reconfigured, mtu: mtu, mps: mps))
        send(CreditBasedReconfigureRequest(mtu: mtu, mps: mps, destinationCIDs: reconfigured.map(\.localCID)), identifier: id)
        return true
    }

    // MARK: L2CAPDynamicChannels

    public func receive(cid: UInt16, _ pdu: ArraySlice<UInt8>) -> Bool {
        guard let channel = channel(localCID: cid) else { return false }
        channel.receive(pdu)
        return true
    }

    public func transmitQueueHasRoom() {
        for channel in channels where channel.state == .open { channel.transmitQueueHasRoom() }
    }

    public func linkClosed() {
        let all = channels
        channels = []
        pending = []
        for channel in all {
            answered(channel)
            channel.ended(.linkClosed)
        }
    }

    public func signaling(_ command: SignalingCommand) {
        do throws(DecodeError) {
            switch command.code {
            case SignalingCode.leCreditBasedConnectionRequest:
                leConnectionRequested(try LECreditBasedConnectionRequest(data: command.data), identifier: command.identifier)
            case SignalingCode.leCreditBasedConnectionResponse:
                leConnectionAnswered(try LECreditBasedConnectionResponse(data: command.data), identifier: command.identifier)
            case SignalingCode.creditBasedConnectionRequest:
                enhancedConnectionRequested(command)
            case SignalingCode.creditBasedConnectionResponse:
                enhancedConnectionAnswered(try CreditBasedConnectionResponse(data: command.data), identifier: command.identifier)
            case SignalingCode.flowControlCredit:
                let indication = try FlowControlCreditIndication(data: command.data)
                // The CID is the sender's own: our channel whose destination it is.
                channel(remoteCID: indication.cid)?.creditsReceived(indication.credits)
            case SignalingCode.disconnectionRequest:
                disconnectionRequested(try DisconnectionRequest(data: command.data), identifier: command.identifier)
            case SignalingCode.disconnectionResponse:
                let response = try DisconnectionResponse(data: command.data)
                if let channel = channel(localCID: response.sourceCID), channel.state == .disconnecting,
                   channel.remoteCID == response.destinationCID {
                    channel.ended(.disconnected)
                    remove(channel)
                }
            case SignalingCode.creditBasedReconfigureRequest:
                reconfigureRequested(command)
            case SignalingCode.creditBasedReconfigureResponse:
                reconfigureAnswered(try CreditBasedReconfigureResponse(data: command.data), identifier: command.identifier)
            case SignalingCode.commandReject:
                requestRejected(identifier: command.identifier)
            default:
                break
            }
        } catch {
            link.context.warnPeer("malformed credit based signalling (code \(Hex.byte(command.code))): \(error)", handle: link.handle)
            // Vol 3, Part A, 4.1: a request whose data cannot be understood is rejected; a
            // malformed response or indication is dropped.
            if !SignalingCode.isResponse(command.code) { link.sendSignaling(.commandReject(identifier: command.identifier)) }
        }
    }

    // MARK: Requests from the peer

    /// Vol 3, Part A, 4.22 and 4.23.
    private func leConnectionRequested(_ request: LECreditBasedConnectionRequest, identifier: UInt8) {
        func refuse(_ result: CreditBasedResult) {
            send(LECreditBasedConnectionResponse.refused(result), identifier: identifier)
            // The peer sets the pace of its requests: the line is under the links' budget.
            link.context.logPeer(.info, "L2CAP: LE credit based connection to SPSM \(Hex.word(request.spsm)) refused: \(result)",
                                 handle: link.handle)
        }
        guard request.mtu >= CreditBasedLimits.leMinimumMTU, CreditBasedLimits.mpsRange.contains(request.mps) else {
            return refuse(.unacceptableParameters)
        }
        let server: ChannelServer
        switch admit(spsm: request.spsm) {
        case .failure(let result): return refuse(result)
        case .success(let found): server = found
        }
        guard !server.enhancedOnly else { return refuse(.spsmNotSupported) }
        guard CreditBasedLimits.dynamicCIDs.contains(request.sourceCID) else { return refuse(.invalidSourceCID) }
        guard channel(remoteCID: request.sourceCID) == nil else { return refuse(.sourceCIDAlreadyAllocated) }
        guard budgetTakes(server.parameters.mtu), let cid = freeCID() else { return refuse(.noResources) }
        let channel = CreditBasedChannel(mode: .le, spsm: request.spsm, localCID: cid, local: server.parameters, owner: self,
                                         delegate: server.delegate)
        channels.append(channel)
        send(LECreditBasedConnectionResponse(destinationCID: cid, mtu: channel.local.mtu, mps: channel.local.mps,
                                             initialCredits: channel.local.initialCredits, result: CreditBasedResult.success.rawValue),
             identifier: identifier)
        channel.opened(remoteCID: request.sourceCID, peerMTU: request.mtu, peerMPS: request.mps, credits: request.initialCredits)
    }

    /// The checks every request of either mode passes per SPSM: served, then the link's security
    /// (0x0005, 0x0007, 0x0008), then the server's authorization (0x0006).
    private func admit(spsm: UInt16) -> Result<ChannelServer, CreditBasedResult> {
        guard let server = servers.server(spsm) else { return .failure(.spsmNotSupported) }
        if let refusal = server.security.refusal(for: linkSecurity) { return .failure(refusal) }
        if let authorize = server.authorize, !authorize(link.handle) { return .failure(.insufficientAuthorization) }
        return .success(server)
    }

    /// Vol 3, Part A, 4.25 and 4.26: each source CID accepted or refused on its own; the Result
    /// says the last refusal.
    private func enhancedConnectionRequested(_ command: SignalingCommand) {
        let request: CreditBasedConnectionRequest
        do {
            request = try CreditBasedConnectionRequest(data: command.data)
        } catch {
            // Too few bytes for the fixed fields: not understood. Else the CIDs are wrong in
            // number: all refused, Invalid parameters.
            guard command.data.count >= 8 else { return link.sendSignaling(.commandReject(identifier: command.identifier)) }
            return refuseEnhanced(spsm: nil, .invalidParameters, channels: (command.data.count - 8) / 2, identifier: command.identifier)
        }
        let asked = request.sourceCIDs.count
        guard request.mtu >= CreditBasedLimits.enhancedMinimum, request.mps >= CreditBasedLimits.enhancedMinimum,
              request.mps <= CreditBasedLimits.mpsRange.upperBound else {
            return refuseEnhanced(spsm: request.spsm, .invalidParameters, channels: asked, identifier: command.identifier)
        }
        let server: ChannelServer
        switch admit(spsm: request.spsm) {
        case .failure(let result): return refuseEnhanced(spsm: request.spsm, result, channels: asked, identifier: command.identifier)
        case .success(let found): server = found
        }
        var result = CreditBasedResult.success
        var destinations: [UInt16] = []
        var opened: [(CreditBasedChannel, UInt16)] = []
        for (index, source) in request.sourceCIDs.enumerated() {
            if !CreditBasedLimits.dynamicCIDs.contains(source) {
                result = .invalidSourceCID
            } else if channel(remoteCID: source) != nil || request.sourceCIDs[..<index].contains(source) {
                result = .sourceCIDAlreadyAllocated
            } else if budgetTakes(server.parameters.mtu), let cid = freeCID() {
                let channel = CreditBasedChannel(mode: .enhanced, spsm: request.spsm, localCID: cid, local: server.parameters,
                                                 owner: self, delegate: server.delegate)
                channel.remoteCID = source
                channel.state = .disconnecting  // Not yet open: frames wait for the response to go.
                channels.append(channel)
                opened.append((channel, source))
                destinations.append(cid)
                continue
            } else {
                result = .noResources
            }
            destinations.append(0)
        }
        let local = server.parameters
        send(CreditBasedConnectionResponse(mtu: local.mtu, mps: local.mps, initialCredits: local.initialCredits,
                                           result: result.rawValue, destinationCIDs: destinations), identifier: command.identifier)
        if opened.count < asked {
            link.context.logPeer(.info, "L2CAP: credit based connection to SPSM \(Hex.word(request.spsm)): \(asked - opened.count) of \(asked) channels refused: \(result)",
                                 handle: link.handle)
        }
        for (channel, source) in opened {
            channel.state = .connecting
            channel.opened(remoteCID: source, peerMTU: request.mtu, peerMPS: request.mps, credits: request.initialCredits)
        }
    }

    /// Every channel of an enhanced request refused with `result` (4.26), and a line under the
    /// links' budget, since the peer sets the pace of its requests.
    private func refuseEnhanced(spsm: UInt16?, _ result: CreditBasedResult, channels: Int, identifier: UInt8) {
        send(CreditBasedConnectionResponse.refused(result, channels: channels), identifier: identifier)
        link.context.logPeer(.info, "L2CAP: credit based connection\(spsm.map { " to SPSM \(Hex.word($0))" } ?? "") refused: \(result)",
                             handle: link.handle)
    }

    /// Vol 3, Part A, 4.6 and 4.7: the peer closes a channel; one we do not have gets a Command
    /// Reject, Invalid CID in request (4.1, reason 0x0002), whose data is our endpoint (the
    /// request's Destination CID) and then the peer's (its Source CID).
    private func disconnectionRequested(_ request: DisconnectionRequest, identifier: UInt8) {
        guard let channel = channel(localCID: request.destinationCID), channel.remoteCID == request.sourceCID,
              channel.state != .connecting else {
            return link.sendSignaling(.invalidCIDReject(identifier: identifier, localCID: request.destinationCID,
                                                        remoteCID: request.sourceCID))
        }
        send(DisconnectionResponse(destinationCID: request.destinationCID, sourceCID: request.sourceCID), identifier: identifier)
        channel.ended(.disconnectedByPeer)
        remove(channel)
    }

    /// Vol 3, Part A, 4.27 and 4.28: the peer's receiving side of some of our enhanced channels
    /// takes a new MTU (never smaller) and MPS (smaller only for a single channel).
    private func reconfigureRequested(_ command: SignalingCommand) {
        func answer(_ result: ReconfigureResult) { send(CreditBasedReconfigureResponse(result), identifier: command.identifier) }
        let request: CreditBasedReconfigureRequest
        do {
            request = try CreditBasedReconfigureRequest(data: command.data)
        } catch {
            guard command.data.count >= 4 else { return link.sendSignaling(.commandReject(identifier: command.identifier)) }
            return answer(.unacceptableParameters)
        }
        guard request.mtu >= CreditBasedLimits.enhancedMinimum, request.mps >= CreditBasedLimits.enhancedMinimum,
              request.mps <= CreditBasedLimits.mpsRange.upperBound else { return answer(.unacceptableParameters) }
        var targets: [CreditBasedChannel] = []
        for cid in request.destinationCIDs {
            guard let channel = channel(remoteCID: cid), channel.mode == .enhanced, channel.state == .open,
                  !targets.contains(where: { $0 === channel }) else { return answer(.invalidDestinationCID) }
            targets.append(channel)
        }
        guard targets.allSatisfy({ request.mtu >= $0.peerMTU }) else { return answer(.mtuReductionNotAllowed) }
        guard targets.count == 1 || targets.allSatisfy({ request.mps >= $0.peerMPS }) else { return answer(.mpsReductionNotAllowed) }
        for channel in targets { channel.applyPeer(mtu: request.mtu, mps: request.mps) }
        answer(.success)
    }

    // MARK: Responses to our requests

    private func takePending(_ identifier: UInt8) -> Pending? {
        guard let index = pending.firstIndex(where: { $0.identifier == identifier }) else { return nil }
        return pending.remove(at: index)
    }

    private func leConnectionAnswered(_ response: LECreditBasedConnectionResponse, identifier: UInt8) {
        guard let found = takePending(identifier) else { return }
        guard case .connect(_, .le, let asked) = found, let channel = asked.first else { return pending.append(found) }
        guard channel.state == .connecting else { return }
        guard response.result == CreditBasedResult.success.rawValue else {
            channel.ended(.refused(response.result))
            return remove(channel)
        }
        guard CreditBasedLimits.dynamicCIDs.contains(response.destinationCID), self.channel(remoteCID: response.destinationCID) == nil,
              response.mtu >= CreditBasedLimits.leMinimumMTU, CreditBasedLimits.mpsRange.contains(response.mps) else {
            return openedWrongly(channel, remoteCID: response.destinationCID, "unacceptable LE credit based connection response")
        }
        answered(channel)
        channel.opened(remoteCID: response.destinationCID, peerMTU: response.mtu, peerMPS: response.mps, credits: response.initialCredits)
    }

    private func enhancedConnectionAnswered(_ response: CreditBasedConnectionResponse, identifier: UInt8) {
        guard let found = takePending(identifier) else { return }
        guard case .connect(_, .enhanced, let asked) = found else { return pending.append(found) }
        let acceptable = response.mtu >= CreditBasedLimits.enhancedMinimum && response.mps >= CreditBasedLimits.enhancedMinimum
            && response.mps <= CreditBasedLimits.mpsRange.upperBound
        for (index, channel) in asked.enumerated() where channel.state == .connecting {
            let destination = index < response.destinationCIDs.count ? response.destinationCIDs[index] : 0
            if destination == 0 {
                // 4.26: a refused channel's destination CID is 0x0000; a success without one is a refusal too.
                channel.ended(.refused(response.result == 0 ? CreditBasedResult.noResources.rawValue : response.result))
                remove(channel)
            } else if !acceptable || !CreditBasedLimits.dynamicCIDs.contains(destination) || self.channel(remoteCID: destination) != nil {
                openedWrongly(channel, remoteCID: destination, "unacceptable credit based connection response")
            } else {
                answered(channel)
                channel.opened(remoteCID: destination, peerMTU: response.mtu, peerMPS: response.mps, credits: response.initialCredits)
            }
        }
    }

    /// The peer says a channel opened with values the Core forbids: disconnected at once when
    /// its CID could be one, else forgotten.
    private func openedWrongly(_ channel: CreditBasedChannel, remoteCID: UInt16, _ why: String) {
        link.context.warnPeer("L2CAP: \(why)", handle: link.handle)
        channel.ended(.protocolViolation(why))
        if CreditBasedLimits.dynamicCIDs.contains(remoteCID), self.channel(remoteCID: remoteCID) == nil {
            channel.remoteCID = remoteCID
            channel.state = .disconnecting
            send(DisconnectionRequest(destinationCID: remoteCID, sourceCID: channel.localCID), identifier: link.takeIdentifier())
            awaitAnswer(channel)
        } else {
            remove(channel)
        }
    }

    private func reconfigureAnswered(_ response: CreditBasedReconfigureResponse, identifier: UInt8) {
        guard let found = takePending(identifier) else { return }
        guard case .reconfigure(_, let targets, let mtu, let mps) = found else { return pending.append(found) }
        guard response.result == ReconfigureResult.success.rawValue else {
            return link.context.logger.info("L2CAP: credit based reconfiguration refused, result \(Hex.word(response.result))",
                                            metadata: [LogKey.connHandle: "\(link.handle)"])
        }
        for channel in targets where channel.state == .open { channel.applyLocal(mtu: mtu, mps: mps) }
    }

    /// A Command Reject answering one of our requests: the peer does not do credit based channels.
    private func requestRejected(identifier: UInt8) {
        guard let found = takePending(identifier) else { return }
        guard case .connect(_, _, let asked) = found else { return }
        for channel in asked where channel.state == .connecting {
            channel.ended(.rejected)
            remove(channel)
        }
    }

    // MARK: For the channels

    func send<PDU: CreditBasedPDU>(_ pdu: PDU, identifier: UInt8) {
        link.sendSignaling(pdu.command(identifier: identifier))
    }

    /// A Flow Control Credit Indication (4.24), built in a reused buffer: credits go back on the
    /// data path, which allocates nothing.
    func sendCredits(_ credits: UInt16, for channel: CreditBasedChannel) {
        creditCommand.removeAll(keepingCapacity: true)
        creditCommand.append(SignalingCode.flowControlCredit)
        creditCommand.append(link.takeIdentifier())
        creditCommand.appendLE(UInt16(4))
        creditCommand.appendLE(channel.localCID)
        creditCommand.appendLE(credits)
        _ = link.send(cid: L2CAPChannel.leSignaling, creditCommand[...], priority: .required)
    }

    /// Closes `channel` here at once and asks the peer to (4.6); the CID stays taken until the
    /// peer answers or the link closes.
    func disconnect(_ channel: CreditBasedChannel, reason: ChannelCloseReason) {
        guard channel.state == .open else { return }
        channel.ended(reason, state: .disconnecting)
        send(DisconnectionRequest(destinationCID: channel.remoteCID, sourceCID: channel.localCID), identifier: link.takeIdentifier())
        awaitAnswer(channel)
    }

    /// The peer broke a rule of the mode on `channel`: disconnected, as 3.4.3 and 10.1 require.
    func violation(_ channel: CreditBasedChannel, _ why: String) {
        link.context.warnPeer("L2CAP channel \(Hex.word(channel.localCID)): \(why): disconnecting", handle: link.handle)
        disconnect(channel, reason: .protocolViolation(why))
    }
}
