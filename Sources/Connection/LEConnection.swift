import BlemuATT
import BlemuChannels
import BlemuCore
import BlemuEATT
import BlemuGATT
import BlemuGATTClient
import BlemuHCI
import BlemuL2CAP

/// One ACL link, whichever role made it (Zephyr's `bt_conn`, Bumble's `Connection`): its L2CAP
/// link (Vol 3, Part A, 2.1), the link's one `LinkSecurityState` (set by the security layer and
/// read in place by the GATT server session and the credit based channels), the unenhanced ATT
/// bearer on CID 0x0004 (one ATT_MTU for client and server, Vol 3, Part F, 3.2.8), its Enhanced
/// ATT bearers (Vol 3, Part G, 3.6), the GATT server session of the peer as a client (its
/// CCCDs, caching, signing), the credit based channels, and SMP's fixed channel 0x0006. A role
/// attaches its endpoints to it: the peripheral its device's database (`serving`, behind the
/// role's stage, and `serveOnEnhancedBearers` for the server on each enhanced bearer), the
/// central a GATT client (`attachClient`, `attachClientsOnEnhancedBearers`) and its small server
/// of its own. Which bearer carries the served database's next indication, or a notification
/// the unenhanced bearer refused, is the connection's (`indicationStage`, `notifyOnEnhancedBearer`).
public final class LEConnection {
    public var handle: UInt16 { link.handle }
    public let link: L2CAPLink
    /// The peer, as the connection event named it (the identity address when the controller
    /// resolved a private one): the link's servers serve it.
    public let peer: ATTPeer
    /// The link's connection parameters: the connection event's, then each LE Connection Update
    /// Complete's (Vol 4, Part E, 7.7.65.3).
    public var parameters: LinkParameters
    /// The request for other parameters the role scheduled (the peripheral's for its preferred
    /// ones, Vol 3, Part A, 4.20); the role cancels it when the link closes.
    public var parameterRequest: TimerID?
    /// How the link is protected now: the one value, read in place by everyone who checks it.
    public let security: LinkSecurityState
    /// The link's unenhanced ATT bearer.
    public let bearer: ATTBearer
    /// What the GATT server knows of the peer as a client, for every bearer of the link.
    public let session: GATTServerSession
    /// The link's credit based channels (Vol 3, Part A, 4.22-4.28), to the SPSMs `channelServers` serves.
    public let channels: CreditBasedChannels
    /// The GATT server on the unenhanced bearer, when the role serves a database on it (`init`'s
    /// `serving`). A constant: read from the role's module for every update it sends, where a
    /// variable would cost a run-time exclusivity check (`@exclusivity(unchecked)` does not
    /// cross modules).
    public let server: ATTServer?
    /// The stage the role put in front of `server` (the device's faults): the served database's
    /// updates go through it. Nil: the role put none (the central's small server).
    public let stage: FaultStage?
    /// The GATT client on the unenhanced bearer, once a role attached it.
    public private(set) var client: GATTClient?
    /// The link's Enhanced ATT bearers (Vol 3, Part G, 3.6), each with the endpoints the roles
    /// attached; made at the first use (the peer opening one, or our client asking).
    public private(set) lazy var enhanced = EnhancedBearers<EnhancedEndpoint>(
        scheduler: link.context.scheduler,
        attach: { [unowned self] bearer in attachEndpoints(to: bearer) },
        detach: { endpoint in endpoint.close() })
    /// What the role puts in front of the server of each enhanced bearer (the peripheral: its
    /// delegate and fault stage); nil: no server on enhanced bearers.
    private var enhancedServer: ((ATTServer) -> FaultStage)?
    /// What the role does with the GATT client of each enhanced bearer; nil: no client on them.
    private var enhancedClient: ((GATTClient, EnhancedATTBearer) -> Void)?

    /// `serving`: the database the role serves on the unenhanced bearer to the peer, with the
    /// link's session; `watch`: who watches the requests of the role's servers (the device's),
    /// shared by the servers of the enhanced bearers too; `front`, when given, readies the
    /// server (its delegate) and gives the stage in front of it (`stage`).
    public init(link: L2CAPLink, peer: ATTPeer, parameters: LinkParameters, channelServers: ChannelServers,
                serving database: GATTDatabase? = nil, watch: ATTServerWatch? = nil,
                front: ((ATTServer) -> FaultStage)? = nil) {
        self.link = link
        self.peer = peer
        self.parameters = parameters
        let security = LinkSecurityState()
        self.security = security
        let session = GATTServerSession(security: security)
        self.session = session
        let bearer = ATTBearer(link: link)
        self.bearer = bearer
        channels = CreditBasedChannels(link: link, servers: channelServers, security: security)
        let server = database.map {
            ATTServer(database: $0, peer: peer, scheduler: link.context.scheduler, bearer: bearer,
                      session: session, endsSession: true, watch: watch)
        }
        self.server = server
        stage = server.flatMap { front?($0) }
    }

    /// Where the served database's next indication to this client goes: the unenhanced
    /// bearer's stage, unless it has one waiting and the client set the EATT bit of Client
    /// Supported Features (Vol 3, Part G, 7.2, bit 1), which lets the server use any of its
    /// bearers; then an enhanced bearer with none waiting (one indication at a time per bearer,
    /// Part F, 3.3.2). Nil: no stage in front of the server.
    public var indicationStage: FaultStage? {
        guard let stage else { return nil }
        guard !enhanced.isEmpty, session.clientFeatures & EATT.clientSupportsEATT != 0,
              let server, server.indicationsWaiting > 0,
              let idle = enhanced.entries.first(where: { $0.endpoint.server?.indicationsWaiting == 0 }),
              let idleStage = idle.endpoint.stage else { return stage }
        return idleStage
    }

    /// A notification the unenhanced bearer's full queue refused goes on an enhanced bearer of
    /// a client that set the EATT bit (7.2, bit 1), where the channel's own queue may take it.
    public func notifyOnEnhancedBearer(_ characteristic: Characteristic, value: ArraySlice<UInt8>) -> UpdateOutcome {
        guard session.clientFeatures & EATT.clientSupportsEATT != 0 else { return .queueFull }
        for entry in enhanced.entries {
            guard let server = entry.endpoint.server, let stage = entry.endpoint.stage,
                  entry.bearer.hasRoomForNotification(of: min(value.count + 3, server.mtu), maximumPDU: ATTServer.maximumMTU) else { continue }
            let outcome = stage.notify(characteristic, value: value)
            if outcome != .queueFull { return outcome }
        }
        return .queueFull
    }

    /// A GATT client for the peer's database on the unenhanced bearer.
    public func attachClient() -> GATTClient {
        let client = GATTClient(scheduler: link.context.scheduler, bearer: bearer)
        self.client = client
        return client
    }

    /// Serves the database of `serving` on every enhanced bearer too, each server with the link's
    /// one session (the client's state is the connection's, whatever bearer it uses, Vol 3,
    /// Part G, 3.3.3.3) and its own transaction state; `front` readies each server (its
    /// delegate) and gives the stage its PDUs go through.
    public func serveOnEnhancedBearers(front: @escaping (ATTServer) -> FaultStage) {
        enhancedServer = front
    }

    /// Puts a GATT client on every enhanced bearer; `ready` readies each (its listeners).
    public func attachClientsOnEnhancedBearers(_ ready: @escaping (GATTClient, EnhancedATTBearer) -> Void) {
        enhancedClient = ready
    }

    private func attachEndpoints(to bearer: EnhancedATTBearer) -> EnhancedEndpoint {
        var server: ATTServer?
        var stage: FaultStage?
        if let enhancedServer, let unenhanced = self.server {
            let made = ATTServer(database: unenhanced.database, peer: unenhanced.peer, scheduler: link.context.scheduler,
                                 bearer: bearer.bearer, session: session, watch: unenhanced.watch)
            server = made
            stage = enhancedServer(made)
        }
        var client: GATTClient?
        if let enhancedClient {
            let made = GATTClient(scheduler: link.context.scheduler, bearer: bearer.bearer)
            enhancedClient(made, bearer)
            client = made
        }
        return EnhancedEndpoint(bearer: bearer, server: server, stage: stage, client: client)
    }

    /// The link's security changed or its pairing ended: the servers of every bearer answer
    /// what they held for the pairing (`ATTServer.securitySettled`).
    public func securitySettled() {
        server?.securitySettled()
        for entry in enhanced.entries { entry.endpoint.server?.securitySettled() }
    }

    /// The Security Manager's PDUs on CID 0x0006 (Vol 3, Part H, 3.2) go to `receive`.
    public func receiveSecurityManager(_ receive: @escaping (ArraySlice<UInt8>) -> Void) {
        link.register(cid: L2CAPChannel.securityManager, receive)
    }

    /// Sends one Security Manager PDU; false when the link did not take it.
    @discardableResult
    public func sendSecurityManager(_ pdu: ArraySlice<UInt8>) -> Bool {
        link.send(cid: L2CAPChannel.securityManager, pdu, priority: .required)
    }
}

/// What one Enhanced ATT bearer of a link carries, as the roles attached it: the connection's
/// database served with the link's session (behind the role's stage), a GATT client, or both.
public final class EnhancedEndpoint {
    public let bearer: EnhancedATTBearer
    public let server: ATTServer?
    /// The stage in front of `server` (the device's faults); its updates go through it.
    public let stage: FaultStage?
    public let client: GATTClient?

    init(bearer: EnhancedATTBearer, server: ATTServer?, stage: FaultStage?, client: GATTClient?) {
        self.bearer = bearer
        self.server = server
        self.stage = stage
        self.client = client
    }

    /// The bearer closed: its server and client let go.
    func close() {
        _ = server?.close()
        client?.close()
    }
}
