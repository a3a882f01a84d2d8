import BlemuATT
import BlemuChannels
import BlemuConnection
import BlemuCore
import BlemuEATT
import BlemuGATT

/// The device's part of Enhanced ATT (the bearers are its links' `LEConnection`s', the EATT PSM
/// and which bearer carries what are BlemuEATT's): the PSM served on every link, and on each
/// bearer the device's server, with its own transaction state, behind the device's fault
/// stage (`frontServer`, FixedChannels.swift), so the client's requests on different bearers are answered each on its own bearer,
/// none waiting for another's.
extension DeviceLinks {
    /// The receive MTU of each enhanced bearer: the largest ATT_MTU the server builds PDUs for.
    static let enhancedBearerMTU = UInt16(ATTServer.maximumMTU)

    /// The EATT PSM served on every link, each channel to its link's bearers.
    func serveEnhancedATT() -> EnhancedATTService<EnhancedEndpoint>? {
        EnhancedATTService(servers: channelServers, mtu: Self.enhancedBearerMTU) { [unowned self] handle in
            connections[handle]?.enhanced
        }
    }
}
