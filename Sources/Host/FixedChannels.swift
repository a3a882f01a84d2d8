import BlemuATT
import BlemuChannels
import BlemuConnection
import BlemuCore
import BlemuGATT
import BlemuHCI
import BlemuL2CAP
import Logging

/// The fixed channels of a link (Vol 3, Part A, 2.1): the link itself (`L2CAPLink`) reassembles,
/// frames and answers LE signalling; the device puts its ATT bearer and SMP on it.
extension DeviceLinks {
    /// ACL data of one of this device's links (the host routes only those here).
    func receiveACL(_ packet: ACLPacket) {
        connections[packet.handle]?.link.receive(packet)
    }

    /// The link of `event` (its `LEConnection`) with the device's server (behind its fault
    /// stage) on its ATT bearer, SMP on CID 0x0006, and channels to the device's SPSMs.
    func makeLink(_ event: LEConnectionComplete, peer: ATTPeer) -> LEConnection {
        // The device's faults sit between the bearer and the server.
        let connection = LEConnection(link: L2CAPLink(handle: event.handle, role: .peripheral, context: l2cap), peer: peer,
                                      parameters: event.parameters, channelServers: channelServers,
                                      serving: database, watch: requestWatch, front: frontServer)
        let handle = event.handle
        connection.receiveSecurityManager { [unowned security] payload in security.receive(payload, on: handle) }
        connection.security.pairingUnderWay = { [unowned security] in security.isPairing(handle) }
        // Enhanced ATT bearers the central opens on the EATT PSM (BlemuEATT), the device's server on each.
        connection.serveOnEnhancedBearers { [unowned self] server in frontServer(server) }
        return connection
    }

    /// Readies a server of the device (on the unenhanced bearer or an enhanced one): told to the
    /// device's delegate, behind a fault stage of its own with the device's planned faults.
    func frontServer(_ server: ATTServer) -> FaultStage {
        server.delegate = serverDelegate
        let stage = FaultStage(server: server, plan: faults, scheduler: scheduler)
        stage.delegate = faultDelegate
        return stage
    }

    func disconnect(_ connection: LEConnection, reason: UInt8) {
        hci.send(.disconnect(handle: connection.handle, reason: reason))
    }
}
