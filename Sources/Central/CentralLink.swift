import BlemuATT
import BlemuChannels
import BlemuConnection
import BlemuCore
import BlemuEATT
import BlemuGATT
import BlemuGATTClient
import BlemuHCI
import BlemuL2CAP

/// One link made in the central role: the role-neutral `LEConnection` (its L2CAP link, Vol 3,
/// Part A, 2.1, with one ATT bearer on it, security, channels, SMP) with the central's endpoints
/// attached: a GATT client for the peer's database on that bearer, and a small GATT server of
/// our own beside it (GAP and GATT, which every LE device serves, Vol 3, Part C, 12 and Part G,
/// 7) for a peer that discovers us.
public final class CentralLink {
    public var handle: UInt16 { l2cap.handle }
    /// The link, whichever role made it.
    public let connection: LEConnection
    /// The peer's address with its type, as the connection event gave it (the identity address
    /// when the controller resolved a private one): the connection's.
    public var peer: LEAddress { connection.peer.leAddress }
    /// The link's connection parameters: the connection's.
    public internal(set) var parameters: LinkParameters {
        get { connection.parameters }
        set { connection.parameters = newValue }
    }
    /// The link's L2CAP: reassembly, its fixed channels, LE signalling.
    public var l2cap: L2CAPLink { connection.link }
    /// The link's one ATT bearer (one ATT_MTU, Vol 3, Part F, 3.2.8): an exchange by either
    /// side sets it for our client and our server alike.
    public var bearer: ATTBearer { connection.bearer }
    /// The peer's database, through ATT.
    public let client: GATTClient
    /// The link's credit based channels (Vol 3, Part A, 4.22-4.28): the ones we open to a
    /// peripheral's SPSM (`openChannel`, `openEnhancedChannels`); we serve no SPSM, so a
    /// peripheral's own requests are refused with SPSM not supported (0x0002).
    public var channels: CreditBasedChannels { connection.channels }
    public internal(set) var isOpen = true
    /// The HCI reason the link closed with.
    public var onDisconnected: ((UInt8) -> Void)?
    /// The link's HCI transmit queue has room again after refusing a PDU (a best-effort one: a
    /// write without response sent as `ATTSendKind.notification`, as `blemu bench` sends them).
    public var onTransmitQueueRoom: (() -> Void)?
    weak var host: CentralHost?

    init(l2cap: L2CAPLink, peer: LEAddress, parameters: LinkParameters,
         database: GATTDatabase, host: CentralHost) {
        // We serve no SPSM: a peripheral's own channel requests are refused.
        let handle = l2cap.handle
        connection = LEConnection(link: l2cap, peer: ATTPeer(connectionHandle: handle, address: peer), parameters: parameters,
                                  channelServers: ChannelServers(), serving: database)
        self.host = host
        client = connection.attachClient()
        connection.server?.delegate = host
        attachClientsOnEnhancedBearers()
        client.onTimeout = { [weak host] in
            // Vol 3, Part F, 3.3.3: a bearer that timed out is useless; the link goes.
            host?.logger.warning("ATT transaction timed out on link \(handle): disconnecting")
            host?.hci.send(.disconnect(handle: handle, reason: HCIStatus.remoteUserTerminated))
        }
    }

    /// Opens an LE Credit Based Flow Control Mode channel to the peripheral's `spsm` (Vol 3,
    /// Part A, 4.22): `delegate` hears it opened (or closed with the refusal's result), its SDUs
    /// and when it is ready again, as a device's published channel does. Nil when it cannot be
    /// asked for (the link is closed, the SPSM is not a valid one, every CID is taken).
    public func openChannel(spsm: UInt16, parameters: ChannelParameters = ChannelParameters(),
                            delegate: CreditBasedChannelDelegate) -> CreditBasedChannel? {
        channels.connect(spsm: spsm, parameters: parameters, delegate: delegate)
    }

    /// Opens one to five Enhanced Credit Based Flow Control Mode channels in one request (4.25).
    public func openEnhancedChannels(spsm: UInt16, count: Int, parameters: ChannelParameters = ChannelParameters(),
                                     delegate: CreditBasedChannelDelegate) -> [CreditBasedChannel] {
        channels.connectEnhanced(spsm: spsm, count: count, parameters: parameters, delegate: delegate)
    }

    /// Asks the controller to close the link; `onDisconnected` tells when it is gone.
    public func disconnect(reason: UInt8 = HCIStatus.remoteUserTerminated) {
        guard isOpen else { return }
        host?.hci.send(.disconnect(handle: handle, reason: reason))
    }

    func closed(reason: UInt8) {
        guard isOpen else { return }
        isOpen = false
        l2cap.close()
        client.close()
        _ = connection.server?.close()
        onDisconnected?(reason)
    }
}
