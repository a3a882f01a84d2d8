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
    func makeLink(_ event: LEConnectionComplete, peer: ATTPeer) -> Connection {
        let le = LEConnection(link: L2CAPLink(handle: event.handle, role: .peripheral, context: l2cap), channelServers: channelServers)
        let server = le.serve(database, peer: peer, watch: requestWatch)
        server.delegate = serverDelegate
        // The device's faults sit between the bearer and the server.
        let faultStage = FaultStage(server: server, plan: faults, scheduler: scheduler)
        faultStage.delegate = faultDelegate
        let handle = event.handle
        le.receiveSecurityManager { [unowned security] payload in security.receive(payload, on: handle) }
        let connection = Connection(peer: peer, le: le, server: server, faultStage: faultStage, parameters: event.parameters)
        // Enhanced ATT bearers the central opens on the EATT PSM (BlemuEATT), the device's server on each.
        serveOnEnhancedBearers(of: le)
        return connection
    }

    func disconnect(_ connection: Connection, reason: UInt8) {
        hci.send(.disconnect(handle: connection.handle, reason: reason))
    }
}
