import BlemuATT
import BlemuChannels
import BlemuCore
import BlemuEATT
import BlemuGATT
import BlemuGATTClient
import BlemuL2CAP

/// One ACL link, whichever role made it (Zephyr's `bt_conn`, Bumble's `Connection`): its L2CAP
/// link (Vol 3, Part A, 2.1), the link's one `LinkSecurityState` (set by the security layer and
/// read in place by the GATT server session and the credit based channels), the unenhanced ATT
/// bearer on CID 0x0004 (one ATT_MTU for client and server, Vol 3, Part F, 3.2.8), its Enhanced
/// ATT bearers (Vol 3, Part G, 3.6), the GATT server session of the peer as a client (its
/// CCCDs, caching, signing), the credit based channels, and SMP's fixed channel 0x0006. A role
/// attaches its endpoints to it: the peripheral its device's database (`serve`, and
/// `serveOnEnhancedBearers` for the server on each enhanced bearer, behind the role's stage),
/// the central a GATT client (`attachClient`, `attachClientsOnEnhancedBearers`) and its small
/// server of its own.
public final class LEConnection {
    public var handle: UInt16 { link.handle }
    public let link: L2CAPLink
    /// How the link is protected now: the one value, read in place by everyone who checks it.
    public let security: LinkSecurityState
    /// The link's unenhanced ATT bearer.
    public let bearer: ATTBearer
    /// What the GATT server knows of the peer as a client, for every bearer of the link.
    public let session: GATTServerSession
    /// The link's credit based channels (Vol 3, Part A, 4.22-4.28), to the SPSMs `channelServers` serves.
    public let channels: CreditBasedChannels
    /// The GATT server on the unenhanced bearer, once a role attached it.
    public private(set) var server: ATTServer?
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

    public init(link: L2CAPLink, channelServers: ChannelServers) {
        self.link = link
        security = LinkSecurityState()
        session = GATTServerSession(security: security)
        bearer = ATTBearer(link: link)
        channels = CreditBasedChannels(link: link, servers: channelServers, security: security)
    }

    /// Serves `database` on the unenhanced bearer to `peer`, with the link's session; `watch`:
    /// who watches the requests of the role's servers (the device's), shared by the servers of
    /// the enhanced bearers too.
    public func serve(_ database: GATTDatabase, peer: ATTPeer, watch: ATTServerWatch? = nil) -> ATTServer {
        let server = ATTServer(database: database, peer: peer, scheduler: link.context.scheduler, bearer: bearer,
                               session: session, endsSession: true, watch: watch)
        self.server = server
        return server
    }

    /// A GATT client for the peer's database on the unenhanced bearer.
    public func attachClient() -> GATTClient {
        let client = GATTClient(scheduler: link.context.scheduler, bearer: bearer)
        self.client = client
        return client
    }

    /// Serves the database of `serve` on every enhanced bearer too, each server with the link's
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
