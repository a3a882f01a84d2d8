import BlemuATT
import BlemuChannels
import BlemuCore
import BlemuEATT
import BlemuGATT

/// What the device puts on each Enhanced ATT bearer of a link (the bearers themselves, the
/// EATT PSM and which bearer carries what are BlemuEATT's): its server with its own transaction
/// state, behind the device's fault stage, so the client's requests on different bearers are
/// answered each on its own bearer, none waiting for another's.
final class ServedBearer {
    let enhanced: EnhancedATTBearer
    let server: ATTServer
    let faultStage: FaultStage
    var channel: CreditBasedChannel { enhanced.channel }

    init(_ enhanced: EnhancedATTBearer, connection: Connection, links: DeviceLinks) {
        self.enhanced = enhanced
        // The client's state (CCCDs, caching, signing, the link's security) is the connection's
        // one session, whatever bearer it uses (Vol 3, Part G, 3.3.3.3).
        server = ATTServer(database: links.database, peer: connection.peer, scheduler: links.scheduler, bearer: enhanced.bearer,
                           session: connection.server.session)
        faultStage = FaultStage(server: server, plan: links.faults, scheduler: links.scheduler)
        server.delegate = links.serverDelegate
        server.reportsValueAccess = links.reportsValueAccess
        faultStage.delegate = links.faultDelegate
    }
}

extension DeviceLinks {
    /// The receive MTU of each enhanced bearer: the largest ATT_MTU the server builds PDUs for.
    static let enhancedBearerMTU = UInt16(ATTServer.maximumMTU)

    /// The EATT PSM served on every link, each channel to its link's bearers.
    func serveEnhancedATT() -> EnhancedATTService<ServedBearer>? {
        EnhancedATTService(servers: channelServers, mtu: Self.enhancedBearerMTU) { [unowned self] handle in
            connections[handle]?.enhanced
        }
    }

    /// A link's set of enhanced bearers, each made with the device's server on it.
    func makeEnhancedBearers(for connection: Connection) -> EnhancedBearers<ServedBearer> {
        EnhancedBearers(scheduler: scheduler, attach: { [unowned self, unowned connection] bearer in
            ServedBearer(bearer, connection: connection, links: self)
        }, detach: { served in _ = served.server.close() })
    }
}
