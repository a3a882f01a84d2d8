import BlemuCore
import BlemuHCI

/// Events a test or harness sends the host as the controller would (a peer connecting,
/// disconnecting, starting encryption).
extension SimulatedController {
    // MARK: Scripted events (Vol 4, Part E, 7.7)

    /// LE Connection Complete (7.7.65.1): `role` 0x01 (we are the peripheral) or 0x00.
    public func connect(handle: UInt16, peer: BluetoothAddress, peerType: UInt8 = 0x01, interval: UInt16 = 24,
                        central: Bool = false, status: UInt8 = 0) {
        var p: [UInt8] = [0x01, status]
        p.appendLE(handle)
        p += [central ? 0x00 : 0x01, peerType] + peer.littleEndianBytes
        p.appendLE(interval)
        p.appendLE(UInt16(0))
        p.appendLE(UInt16(400))
        p.append(0x00)
        event(0x3E, p)
    }

    /// LE Connection Complete in the central role (role 0x00), or a failed attempt (`status`).
    public func centralConnected(handle: UInt16, peer: BluetoothAddress, status: UInt8 = 0) {
        connect(handle: handle, peer: peer, central: true, status: status)
    }

    /// LE Enhanced Connection Complete (7.7.65.10) as a controller with address resolution
    /// sends it: `peerType` 0x02/0x03 when it resolved `rpa` to the identity `peer`.
    public func connectEnhanced(handle: UInt16, peerType: UInt8, peer: BluetoothAddress, rpa: BluetoothAddress?) {
        var p: [UInt8] = [0x0A, 0x00]
        p.appendLE(handle)
        p += [0x01, peerType] + peer.littleEndianBytes
        p += [UInt8](repeating: 0, count: 6)
        p += rpa?.littleEndianBytes ?? [UInt8](repeating: 0, count: 6)
        p.appendLE(UInt16(24))
        p.appendLE(UInt16(0))
        p.appendLE(UInt16(400))
        p.append(0x00)
        event(0x3E, p)
    }

    /// A connection made from extended advertising set `set`: LE Connection Complete, then LE
    /// Advertising Set Terminated naming the set (7.7.65.18), unless `announceSet` is false (a
    /// controller that forgets it).
    public func connect(handle: UInt16, peer: BluetoothAddress, set: UInt8, announceSet: Bool = true) {
        connect(handle: handle, peer: peer)
        if announceSet { setTerminated(set: set, handle: handle) }
    }

    /// LE Advertising Set Terminated (7.7.65.18): the set is off from here (7.8.56) until enabled again.
    public func setTerminated(set: UInt8, handle: UInt16, status: UInt8 = 0) {
        endedSets[set] = commands.count
        var p: [UInt8] = [0x12, status, set]
        p.appendLE(handle)
        p.append(0)
        event(0x3E, p)
    }

    /// LE Long Term Key Request (7.7.65.5): the central starts encryption.
    public func requestLongTermKey(handle: UInt16, random: UInt64 = 0, ediv: UInt16 = 0) {
        var p: [UInt8] = [0x05]
        p.appendLE(handle)
        p.appendLE(random)
        p.appendLE(ediv)
        event(0x3E, p)
    }

    /// Disconnection Complete (7.7.5).
    public func disconnect(handle: UInt16, reason: UInt8 = 0x13) {
        var p: [UInt8] = [0x00]
        p.appendLE(handle)
        p.append(reason)
        event(0x05, p)
    }
}
