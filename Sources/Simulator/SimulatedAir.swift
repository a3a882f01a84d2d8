import BlemuCore
import BlemuHCI

/// Two simulated controllers in one process joined by a perfect radio: the in-process
/// two-controller mode. A host that creates a connection (LE Create Connection, 7.8.12, or LE
/// Extended Create Connection, 7.8.66) to the address the other controller advertises gets a
/// link, each side with its own handle and role (LE Connection Complete, 7.7.65.1); ACL data
/// sent on one side arrives on the other, and is completed to its sender; Disconnect closes
/// both ends (7.1.6, 7.7.5). Both controllers deliver `.queued`, so neither host is re-entered
/// from inside its own output: `run()` passes packets until both are quiet. No timing, no
/// loss, no encryption: what the hosts do with each other is what the test looks at.
public final class SimulatedAir {
    public let controllers: [SimulatedController]
    /// (side, handle) → (other side, its handle), both ways.
    private var links: [Int: [UInt16: UInt16]] = [0: [:], 1: [:]]
    private var nextHandle: [UInt16] = [0x0040, 0x0040]
    /// The address each side is trying to connect to.
    private var connecting: [Int: BluetoothAddress] = [:]

    public init(_ first: SimulatedController, _ second: SimulatedController) {
        controllers = [first, second]
        for (side, controller) in controllers.enumerated() {
            controller.delivery = .queued
            controller.airAnswers = { [unowned self] in self.answer($0, from: side) }
            controller.onACL = { [unowned self] in self.carry(from: side, handle: $0, boundary: $1, data: $2) }
        }
    }

    /// Passes packets both ways until both controllers are quiet (at most `limit` rounds).
    public func run(limit: Int = 10_000) {
        for _ in 0..<limit {
            guard controllers.contains(where: { !$0.isQuiet }) else { return }
            for controller in controllers { controller.flush() }
        }
    }

    /// The handle a link has on `side` (0 or 1), by its handle on the other side.
    public func handle(on side: Int, peerHandle: UInt16) -> UInt16? { links[1 - side]?[peerHandle] }

    private func answer(_ command: HCICommand, from side: Int) -> Bool {
        let controller = controllers[side], other = controllers[1 - side]
        let p = command.parameters
        switch command.opcode {
        case HCIOpcode.leCreateConnection, HCIOpcode.leExtendedCreateConnection:
            // Peer_Address_Type and Peer_Address: octets 5 and 6…11 (7.8.12), 2 and 3…8 (7.8.66).
            let legacy = command.opcode == HCIOpcode.leCreateConnection
            let at = legacy ? 5 : 2
            guard p.count >= at + 7, let peer = try? BluetoothAddress(littleEndian: p[(at + 1)..<(at + 7)]) else { return false }
            let ownType = legacy ? (p.count > 12 ? p[12] : 0) : p[1]
            controller.commandStatus(command.opcode, HCIStatus.success)
            let centralAddress = ownType & 0x01 == 1 ? controller.randomAddress ?? controller.address : controller.address
            guard let set = advertiser(other, at: peer, for: centralAddress) else {
                connecting[side] = peer
                return true
            }
            let centralHandle = nextHandle[side], peripheralHandle = nextHandle[1 - side]
            nextHandle[side] += 1
            nextHandle[1 - side] += 1
            links[side]?[centralHandle] = peripheralHandle
            links[1 - side]?[peripheralHandle] = centralHandle
            controller.connect(handle: centralHandle, peer: peer, peerType: p[at], central: true)
            other.connect(handle: peripheralHandle, peer: centralAddress, peerType: ownType & 0x01)
            if let set { other.setTerminated(set: set, handle: peripheralHandle) }
            return true
        case HCIOpcode.leCreateConnectionCancel:
            guard let peer = connecting.removeValue(forKey: side) else { return false }
            // 7.8.13: Command Complete, then LE Connection Complete with Unknown Connection Identifier.
            controller.commandComplete(command.opcode, [HCIStatus.success])
            controller.connect(handle: 0, peer: peer, central: true, status: HCIStatus.unknownConnectionIdentifier)
            return true
        case HCIOpcode.disconnect:
            guard p.count >= 3 else { return false }
            let handle = (UInt16(p[0]) | UInt16(p[1]) << 8) & 0x0FFF
            guard let peerHandle = links[side]?.removeValue(forKey: handle) else { return false }
            links[1 - side]?[peerHandle] = nil
            controller.commandStatus(command.opcode, HCIStatus.success)
            controller.disconnect(handle: handle, reason: HCIStatus.localHostTerminated)
            other.disconnect(handle: peerHandle, reason: p[2])
            return true
        default:
            return false
        }
    }

    /// Whether `controller` advertises connectably at `address` to `central`: `.some(nil)` for
    /// legacy advertising, `.some(set)` for an extended set, nil when nobody is there. An
    /// advertisement is connectable by its type or properties (Vol 4, Part E, 7.8.5, 7.8.53), at the
    /// address of its own address type (the public one for 0x00, else the random one), and a
    /// directed one only to the central it names.
    private func advertiser(_ controller: SimulatedController, at address: BluetoothAddress,
                            for central: BluetoothAddress) -> UInt8?? {
        if controller.legacyAdvertising {
            // LE Set Advertising Parameters: Advertising_Type, Own_Address_Type, Peer_Address (7.8.5).
            let p = controller.commands(HCIOpcode.leSetAdvertisingParameters).last?.parameters ?? []
            let type = p.count >= 15 ? p[4] : 0x00
            let connectable = type == 0x00 || type == 0x01 || type == 0x04
            let directedTo = type == 0x01 || type == 0x04 ? try? BluetoothAddress(littleEndian: p[7..<13]) : nil
            let own = p.count >= 15 && p[5] == 0x00 ? [controller.address] : p.count >= 15 ? [controller.randomAddress].compactMap { $0 }
                : [controller.address, controller.randomAddress].compactMap { $0 }
            if connectable && own.contains(address) && (directedTo == nil || directedTo == central) { return .some(nil) }
        }
        let sets = controller.enabledSets
        let addresses = controller.setAddresses()
        for set in sets.sorted() {
            // LE Set Extended Advertising Parameters: properties, Own_Address_Type, Peer_Address (7.8.53).
            guard let p = controller.commands(HCIOpcode.leSetExtendedAdvertisingParameters).last(where: { $0.parameters.first == set })?.parameters,
                  p.count >= 18 else { continue }
            let properties = UInt16(p[1]) | UInt16(p[2]) << 8
            guard properties & 0x01 != 0 else { continue }
            let own = p[10] == 0x00 ? controller.address : addresses[set].flatMap { try? BluetoothAddress(littleEndian: $0) }
            guard own == address else { continue }
            if properties & 0x04 != 0, (try? BluetoothAddress(littleEndian: p[12..<18])) != central { continue }
            return .some(set)
        }
        return nil
    }

    /// Host → controller → air → the other controller → its host; LE data from a controller
    /// starts with "first automatically flushable" (Vol 4, Part E, 5.4.2).
    private func carry(from side: Int, handle: UInt16, boundary: ACLPacket.Boundary, data: ArraySlice<UInt8>) {
        guard let peerHandle = links[side]?[handle] else { return }
        controllers[1 - side].receiveFromAir(handle: peerHandle, boundary: boundary == .continuing ? .continuing : .firstFlushable,
                                             data: data)
    }
}
