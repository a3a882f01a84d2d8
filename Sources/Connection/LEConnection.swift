import BlemuATT
import BlemuChannels
import BlemuCore
import BlemuGATT
import BlemuGATTClient
import BlemuL2CAP

/// One ACL link, whichever role made it (Zephyr's `bt_conn`, Bumble's `Connection`): its L2CAP
/// link (Vol 3, Part A, 2.1), the link's one `LinkSecurityState` (set by the security layer and
/// read in place by the GATT server session and the credit based channels), the unenhanced ATT
/// bearer on CID 0x0004 (one ATT_MTU for client and server, Vol 3, Part F, 3.2.8), the GATT
/// server session of the peer as a client (its CCCDs, caching, signing), the credit based
/// channels, and SMP's fixed channel 0x0006. A role attaches its endpoints to it: the
/// peripheral its device's database (`serve`), the central a GATT client (`attachClient`) and
/// its small server of its own.
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

    public init(link: L2CAPLink, channelServers: ChannelServers) {
        self.link = link
        security = LinkSecurityState()
        session = GATTServerSession(security: security)
        bearer = ATTBearer(link: link)
        channels = CreditBasedChannels(link: link, servers: channelServers, security: security)
    }

    /// Serves `database` on the unenhanced bearer to `peer`, with the link's session.
    public func serve(_ database: GATTDatabase, peer: ATTPeer) -> ATTServer {
        let server = ATTServer(database: database, peer: peer, scheduler: link.context.scheduler, bearer: bearer,
                               session: session, endsSession: true)
        self.server = server
        return server
    }

    /// A GATT client for the peer's database on the unenhanced bearer.
    public func attachClient() -> GATTClient {
        let client = GATTClient(scheduler: link.context.scheduler, bearer: bearer)
        self.client = client
        return client
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
