import BlemuCore
import BlemuHCI

/// A controller written as a script: it answers every command the host sends the way a
/// Core 5.4 controller would, and lets a test inject events and ACL data and read what the
/// host sent. Everything runs synchronously, so a test reads top to bottom.
final class ScriptedController {
    var commands: [HCICommand] = []
    var aclOut: [ACLPacket] = []
    var aclBufferCount: UInt8 = 4
    var aclBufferSize: UInt16 = 27
    var supportsDataLengthExtension = true
    /// LE 2M PHY (LE feature bit 8).
    var supports2MPHY = false
    /// LE Extended Advertising with this many sets (0: a legacy-only controller).
    var extendedAdvertisingSets: UInt8 = 0
    var advertisingTxPower: Int8 = -4
    /// LL Privacy (LE feature bit 6): a resolving list of `resolvingListSize` entries, which
    /// refuses changes while advertising with address resolution on (Vol 4, Part E, 7.8.38).
    var supportsLLPrivacy = false
    /// The key size Read Encryption Key Size reports (nil: only a status, which the host ignores).
    var reportedKeySize: UInt8?
    var resolvingListSize: UInt8 = 4
    /// The resolving list's entries: Peer_Identity_Address_Type and Peer_Identity_Address.
    private(set) var resolvingList: [[UInt8]] = []
    private(set) var addressResolution = false
    private var legacyAdvertising = false
    /// Opcodes to answer with this status instead of success.
    var failures: [UInt16: UInt8] = [:]
    /// When false, ACL packets are taken but not completed until `completePackets`.
    var autoComplete = true
    /// Num_HCI_Command_Packets in every answer (0: a controller that stops taking commands).
    var commandCredits: UInt8 = 1
    /// A controller that takes commands and never answers them.
    var silent = false
    weak var host: HCIHost?
    private var pendingCompletions: [UInt16: UInt16] = [:]
    private var partial: [UInt16: [UInt8]] = [:]
    var frames: [(handle: UInt16, cid: UInt16, payload: [UInt8])] = []

    private func reassemble(_ acl: ACLPacket) {
        var current = acl.boundary == .firstNonFlushable ? [] : partial[acl.handle] ?? []
        current += acl.data
        if current.count >= 4 {
            let length = Int(current[0]) | Int(current[1]) << 8
            if current.count >= length + 4 {
                frames.append((acl.handle, UInt16(current[2]) | UInt16(current[3]) << 8, Array(current[4..<(length + 4)])))
                current = []
            }
        }
        partial[acl.handle] = current
    }

    /// A controller whose transport is gone takes nothing and answers nothing.
    var isGone = false

    func output(_ type: UInt8, _ packet: ArraySlice<UInt8>) -> Bool {
        guard !isGone else { return false }
        switch type {
        case 0x01:
            var r = ByteReader(packet)
            guard let opcode = try? r.u16(), let length = try? r.u8(), let parameters = try? r.bytes(Int(length)) else { return true }
            let command = HCICommand(opcode: opcode, parameters: Array(parameters))
            commands.append(command)
            answer(command)
        case 0x02:
            guard let acl = try? ACLPacket(packet: packet) else { return true }
            aclOut.append(ACLPacket(handle: acl.handle, boundary: acl.boundary, data: Array(acl.data)[...]))
            reassemble(acl)
            pendingCompletions[acl.handle, default: 0] += 1
            if autoComplete { completePackets() }
        default:
            break
        }
        return true
    }

    func completePackets() {
        guard !pendingCompletions.isEmpty else { return }
        let entries = pendingCompletions.sorted { $0.key < $1.key }
        pendingCompletions.removeAll()
        var p: [UInt8] = [UInt8(entries.count)]
        for (handle, count) in entries {
            p.appendLE(handle)
            p.appendLE(count)
        }
        event(0x13, p)
    }

    func event(_ code: UInt8, _ parameters: [UInt8]) {
        host?.receiveEvent(([code, UInt8(parameters.count)] + parameters)[...])
    }

    private func answer(_ command: HCICommand) {
        guard !silent else { return }
        let status = failures[command.opcode] ?? resolvingListStatus(command)
        var returned: [UInt8] = [status]
        switch command.opcode {
        case HCIOpcode.leReadResolvingListSize:
            returned.append(resolvingListSize)
        case HCIOpcode.readEncryptionKeySize:
            // Vol 4, Part E, 7.5.7: Connection_Handle, Key_Size (when a test sets one).
            guard let reportedKeySize else { break }
            returned += Array(command.parameters.prefix(2)) + [reportedKeySize]
        case HCIOpcode.readLocalVersion:
            returned += [0x0D, 0x00, 0x00, 0x0D, 0xFF, 0xFF, 0x00, 0x00]
        case HCIOpcode.readBDAddr:
            returned += [0x01, 0x02, 0x03, 0x04, 0x05, 0x06]
        case HCIOpcode.readLocalSupportedCommands:
            var bits = [UInt8](repeating: 0xFF, count: 64)
            bits[41] = 0 // no LE Read Buffer Size v2: the host must fall back to v1
            returned += bits
        case HCIOpcode.readLocalSupportedFeatures:
            returned += [UInt8](repeating: 0, count: 8)
        case HCIOpcode.leReadLocalSupportedFeatures:
            returned += [(supportsDataLengthExtension ? 0x20 : 0x00) | (supportsLLPrivacy ? 0x40 : 0x00),
                         (extendedAdvertisingSets > 0 ? 0x10 : 0x00) | (supports2MPHY ? 0x01 : 0x00), 0, 0, 0, 0, 0, 0]
        case HCIOpcode.leReadNumberOfSupportedAdvertisingSets:
            returned.append(extendedAdvertisingSets)
        case HCIOpcode.leSetExtendedAdvertisingParameters:
            returned.append(UInt8(bitPattern: advertisingTxPower))
        case HCIOpcode.leReadAdvertisingChannelTxPower:
            returned.append(UInt8(bitPattern: advertisingTxPower))
        case HCIOpcode.leReadBufferSize:
            returned.appendLE(aclBufferSize)
            returned.append(aclBufferCount)
        case HCIOpcode.disconnect, HCIOpcode.leSetDataLength, HCIOpcode.leCreateConnection,
             HCIOpcode.leExtendedCreateConnection, HCIOpcode.leConnectionUpdate:
            // Command Status commands (Vol 4, Part E, 7.1.6 and 7.8.33).
            event(0x0F, [status, commandCredits] + le(command.opcode))
            return
        default:
            break
        }
        event(0x0E, [commandCredits] + le(command.opcode) + returned)
    }

    private func le(_ v: UInt16) -> [UInt8] { [UInt8(v & 0xFF), UInt8(v >> 8)] }

    var isAdvertising: Bool { legacyAdvertising || !enabledSets.isEmpty }

    /// The resolving list's rules (Vol 4, Part E, 7.8.38 – 7.8.44, 7.8.77), and advertising's
    /// state, which they depend on. Success for every other command.
    private func resolvingListStatus(_ command: HCICommand) -> UInt8 {
        let p = command.parameters
        let locked = isAdvertising && addressResolution
        switch command.opcode {
        case HCIOpcode.reset:
            resolvingList = []
            addressResolution = false
            legacyAdvertising = false
        case HCIOpcode.leSetAdvertisingEnable:
            legacyAdvertising = p.first == 1
        case HCIOpcode.leReadResolvingListSize, HCIOpcode.leClearResolvingList, HCIOpcode.leAddDeviceToResolvingList,
             HCIOpcode.leRemoveDeviceFromResolvingList, HCIOpcode.leSetAddressResolutionEnable, HCIOpcode.leSetPrivacyMode:
            guard supportsLLPrivacy else { return 0x01 } // Unknown HCI Command
            switch command.opcode {
            case HCIOpcode.leClearResolvingList:
                if locked { return HCIStatus.commandDisallowed }
                resolvingList = []
            case HCIOpcode.leAddDeviceToResolvingList:
                if locked { return HCIStatus.commandDisallowed }
                let key = Array(p.prefix(7))
                if resolvingList.contains(key) { return HCIStatus.invalidParameters }
                if resolvingList.count >= Int(resolvingListSize) { return HCIStatus.memoryCapacityExceeded }
                resolvingList.append(key)
            case HCIOpcode.leRemoveDeviceFromResolvingList:
                if locked { return HCIStatus.commandDisallowed }
                let key = Array(p.prefix(7))
                guard resolvingList.contains(key) else { return HCIStatus.unknownConnectionIdentifier }
                resolvingList.removeAll { $0 == key }
            case HCIOpcode.leSetAddressResolutionEnable:
                if isAdvertising { return HCIStatus.commandDisallowed }
                addressResolution = p.first == 1
            case HCIOpcode.leSetPrivacyMode:
                if locked { return HCIStatus.commandDisallowed }
                if !resolvingList.contains(Array(p.prefix(7))) { return HCIStatus.unknownConnectionIdentifier }
            default:
                break
            }
        default:
            break
        }
        return HCIStatus.success
    }

    /// LE Enhanced Connection Complete (Vol 4, Part E, 7.7.65.10) as a controller with address
    /// resolution sends it: `peerType` 0x02/0x03 when it resolved `rpa` to the identity `peer`.
    func connectEnhanced(handle: UInt16, peerType: UInt8, peer: BluetoothAddress, rpa: BluetoothAddress?) {
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

    // MARK: Scripted central

    /// LE Connection Complete (Vol 4, Part E, 7.7.65.1): we are the peripheral.
    func connect(handle: UInt16, peer: BluetoothAddress, interval: UInt16 = 24) {
        var p: [UInt8] = [0x01, 0x00]
        p.appendLE(handle)
        p += [0x01, 0x01] + peer.littleEndianBytes
        p.appendLE(interval)
        p.appendLE(UInt16(0))
        p.appendLE(UInt16(400))
        p.append(0x00)
        event(0x3E, p)
    }

    /// LE Connection Complete in the central role (role 0x00), or a failed attempt (`status`).
    func centralConnected(handle: UInt16, peer: BluetoothAddress, status: UInt8 = 0) {
        var p: [UInt8] = [0x01, status]
        p.appendLE(handle)
        p += [0x00, 0x01] + peer.littleEndianBytes
        p.appendLE(UInt16(24))
        p.appendLE(UInt16(0))
        p.appendLE(UInt16(400))
        p.append(0x00)
        event(0x3E, p)
    }

    /// LE Long Term Key Request (Vol 4, Part E, 7.7.65.5): the central starts encryption.
    func requestLongTermKey(handle: UInt16, random: UInt64 = 0, ediv: UInt16 = 0) {
        var p: [UInt8] = [0x05]
        p.appendLE(handle)
        p.appendLE(random)
        p.appendLE(ediv)
        event(0x3E, p)
    }

    /// A connection made from extended advertising set `set`: LE Connection Complete, then LE
    /// Advertising Set Terminated naming the set (Vol 4, Part E, 7.7.65.18), unless
    /// `announceSet` is false (a controller that forgets it).
    func connect(handle: UInt16, peer: BluetoothAddress, set: UInt8, announceSet: Bool = true) {
        connect(handle: handle, peer: peer)
        if announceSet { setTerminated(set: set, handle: handle) }
    }

    func setTerminated(set: UInt8, handle: UInt16, status: UInt8 = 0) {
        var p: [UInt8] = [0x12, status, set]
        p.appendLE(handle)
        p.append(0)
        event(0x3E, p)
    }

    /// The extended advertising sets the host has enabled and not disabled since, and the
    /// random address each was given.
    var enabledSets: Set<UInt8> {
        var on: Set<UInt8> = []
        for command in commands where command.opcode == HCIOpcode.leSetExtendedAdvertisingEnable {
            let p = command.parameters
            guard p.count >= 3 else { continue }
            if p[0] == 1 { on.insert(p[2]) } else { on.remove(p[2]) }
        }
        return on
    }

    func setAddresses() -> [UInt8: [UInt8]] {
        var out: [UInt8: [UInt8]] = [:]
        for command in commands(HCIOpcode.leSetAdvertisingSetRandomAddress) where command.parameters.count == 7 {
            out[command.parameters[0]] = Array(command.parameters[1...])
        }
        return out
    }

    func disconnect(handle: UInt16, reason: UInt8 = 0x13) {
        var p: [UInt8] = [0x00]
        p.appendLE(handle)
        p.append(reason)
        event(0x05, p)
    }

    /// Sends an L2CAP frame on `cid` as one ACL packet from the central.
    func sendL2CAP(handle: UInt16, cid: UInt16, _ payload: [UInt8]) {
        var frame: [UInt8] = []
        frame.appendLE(UInt16(payload.count))
        frame.appendLE(cid)
        frame += payload
        var packet: [UInt8] = []
        ACLPacket(handle: handle, boundary: .firstFlushable, data: frame[...]).encode(into: &packet)
        host?.receiveACL(packet[...])
    }

    /// Everything the host sent on `cid` of a link since the last call, reassembled.
    func takeL2CAP(handle: UInt16, cid: UInt16) -> [[UInt8]] {
        let taken = frames.filter { $0.handle == handle && $0.cid == cid }.map(\.payload)
        frames.removeAll { $0.handle == handle && $0.cid == cid }
        return taken
    }

    func commands(_ opcode: UInt16) -> [HCICommand] { commands.filter { $0.opcode == opcode } }
}
