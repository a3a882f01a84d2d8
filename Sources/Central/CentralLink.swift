import BlemuATT
import BlemuCore
import BlemuGATT
import BlemuGATTClient
import BlemuHCI
import BlemuL2CAP

/// One link made in the central role: its L2CAP fixed channels (Vol 3, Part A, 2.1), a GATT
/// client for the peer's database, and a small GATT server of our own (GAP and GATT, which
/// every LE device serves, Vol 3, Part C, 12 and Part G, 7) for a peer that discovers us.
public final class CentralLink {
    public let handle: UInt16
    public let peer: BluetoothAddress
    public let peerAddressType: UInt8
    public internal(set) var parameters: LinkParameters
    /// The peer's database, through ATT.
    public let client: GATTClient
    let server: ATTServer
    var reassembler = L2CAPReassembler()
    var reassemblyTimer: TimerID?
    public internal(set) var isOpen = true
    /// The HCI reason the link closed with.
    public var onDisconnected: ((UInt8) -> Void)?
    weak var host: CentralHost?

    init(handle: UInt16, peer: BluetoothAddress, peerAddressType: UInt8, parameters: LinkParameters,
         database: GATTDatabase, host: CentralHost) {
        self.handle = handle
        self.peer = peer
        self.peerAddressType = peerAddressType
        self.parameters = parameters
        self.host = host
        let scheduler = host.scheduler
        // One ATT bearer, one ATT_MTU (Vol 3, Part F, 3.2.8): an exchange by either side sets
        // it for our client and our server alike.
        let bearerMTU = ATTBearerMTU()
        server = ATTServer(database: database, peer: ATTPeer(connectionHandle: handle, address: peer), scheduler: scheduler,
                           bearerMTU: bearerMTU)
        client = GATTClient(scheduler: scheduler, bearerMTU: bearerMTU) { [weak host] pdu in
            host?.sendFrame(cid: L2CAPChannel.att, payload: pdu[...], on: handle, priority: .required) ?? false
        }
        server.delegate = host
        client.onTimeout = { [weak host] in
            // Vol 3, Part F, 3.3.3: a bearer that timed out is useless; the link goes.
            host?.logger.warning("ATT transaction timed out on link \(handle): disconnecting")
            host?.hci.send(.disconnect(handle: handle, reason: HCIStatus.remoteUserTerminated))
        }
    }

    /// Asks the controller to close the link; `onDisconnected` tells when it is gone.
    public func disconnect(reason: UInt8 = HCIStatus.remoteUserTerminated) {
        guard isOpen else { return }
        host?.hci.send(.disconnect(handle: handle, reason: reason))
    }

    /// One ATT PDU from the peer: responses, notifications and indications are the client's;
    /// requests, commands and confirmations are for our server.
    func receiveATT(_ pdu: ArraySlice<UInt8>) {
        guard let opcode = pdu.first else { return }
        if GATTClient.isForClient(opcode) {
            client.receive(pdu)
        } else {
            server.receive(pdu)
        }
    }

    func closed(reason: UInt8) {
        guard isOpen else { return }
        isOpen = false
        client.close()
        _ = server.close()
        onDisconnected?(reason)
    }
}
