import BlemuCore
import BlemuHCI

/// The simulated controller's answers to commands, and what they do to its state.
extension SimulatedController {
    // MARK: Answers (Vol 4, Part E, 7)

    /// Acts on `command` and answers it as the controller does (also when `answersCommands` is
    /// off: a test that answers by hand calls this).
    public func answer(_ command: HCICommand) {
        let status = failures[command.opcode] ?? act(on: command)
        switch command.opcode {
        case HCIOpcode.disconnect:
            // Command Status, then Disconnection Complete when the link existed (7.1.6, 7.7.5).
            commandStatus(command.opcode, status)
            let handle = command.parameters.count >= 2
                ? (UInt16(command.parameters[0]) | UInt16(command.parameters[1]) << 8) & 0x0FFF : 0xFFFF
            if status == HCIStatus.success, completesDisconnects, openHandles.contains(handle) {
                disconnect(handle: handle, reason: HCIStatus.localHostTerminated)
            }
        case HCIOpcode.leCreateConnection, HCIOpcode.leExtendedCreateConnection,
             HCIOpcode.leConnectionUpdate, HCIOpcode.leSetPHY:
            // Commands answered with Command Status (7.8.12, 7.8.66, 7.8.18, 7.8.49).
            commandStatus(command.opcode, status)
        default:
            commandComplete(command.opcode, [status] + returnParameters(for: command))
        }
    }

    /// What a healthy controller returns for `opcode` in Command Complete, Status first.
    public func successParameters(for opcode: UInt16) -> [UInt8] {
        [HCIStatus.success] + returnParameters(for: HCICommand(opcode: opcode, parameters: []))
    }

    /// Command Complete's return parameters after the Status (7.3, 7.4, 7.8).
    private func returnParameters(for command: HCICommand) -> [UInt8] {
        var returned: [UInt8] = []
        switch command.opcode {
        case HCIOpcode.leReadResolvingListSize:
            returned.append(resolvingListSize)
        case HCIOpcode.readEncryptionKeySize:
            // 7.5.7: Connection_Handle, Key_Size (when a test sets one).
            guard let reportedKeySize else { break }
            returned += Array(command.parameters.prefix(2)) + [reportedKeySize]
        case HCIOpcode.readLocalVersion:
            returned += [hciVersion, 0x00, 0x00, hciVersion]
            returned.appendLE(manufacturer)
            returned += [0x00, 0x00]
        case HCIOpcode.readBDAddr:
            returned += address.littleEndianBytes
        case HCIOpcode.readLocalSupportedCommands:
            var bits = [UInt8](repeating: 0xFF, count: 64)
            if !supportsBufferSizeV2 { bits[41] &= ~0x20 }
            returned += bits
        case HCIOpcode.readLocalSupportedFeatures:
            returned += [UInt8](repeating: 0, count: 8)
        case HCIOpcode.leReadLocalSupportedFeatures:
            returned.appendLE(leFeatures)
        case HCIOpcode.leReadNumberOfSupportedAdvertisingSets:
            returned.append(extendedAdvertisingSets)
        case HCIOpcode.leReadMaximumAdvertisingDataLength:
            returned.appendLE(maximumAdvertisingDataLength)
        case HCIOpcode.leSetExtendedAdvertisingParameters, HCIOpcode.leReadAdvertisingChannelTxPower:
            returned.append(UInt8(bitPattern: advertisingTxPower))
        case HCIOpcode.leReadBufferSize:
            returned.appendLE(aclBufferSize)
            returned.append(aclBufferCount)
        case HCIOpcode.leReadBufferSizeV2:
            returned.appendLE(aclBufferSize)
            returned.append(aclBufferCount)
            returned += [0xFB, 0x00, 0x04]   // ISO buffers
        case HCIOpcode.readBufferSize:
            returned.appendLE(brEdrACLLength)
            returned.append(64)
            returned.appendLE(brEdrACLPackets)
            returned.appendLE(UInt16(0))
        case HCIOpcode.leSetDataLength, HCIOpcode.leRemoteConnectionParameterRequestReply,
             HCIOpcode.leRemoteConnectionParameterRequestNegativeReply:
            // Connection_Handle (7.8.33, 7.8.31, 7.8.32).
            returned += command.parameters.prefix(2)
        default:
            break
        }
        return returned
    }

    /// Command Complete (7.7.14) with the controller's credits.
    public func commandComplete(_ opcode: UInt16, _ returned: [UInt8]) {
        event(0x0E, [commandCredits] + le(opcode) + returned)
    }

    /// Command Status (7.7.15) with the controller's credits.
    public func commandStatus(_ opcode: UInt16, _ status: UInt8) {
        event(0x0F, [status, commandCredits] + le(opcode))
    }

    func le(_ v: UInt16) -> [UInt8] { [UInt8(v & 0xFF), UInt8(v >> 8)] }

    public var isAdvertising: Bool { legacyAdvertising || !enabledSets.isEmpty }

    /// What a command does to the controller's state: the resolving list's rules (7.8.38 –
    /// 7.8.44, 7.8.77), advertising, a reset. Success for every other command.
    func act(on command: HCICommand) -> UInt8 {
        let p = command.parameters
        let locked = isAdvertising && addressResolution
        switch command.opcode {
        case HCIOpcode.reset:
            // A reset controller forgets its links and the packets it held (7.3.2). A clean
            // stop ends with a Reset even when links did not close in time; the stack is
            // finished then and may still hold them, so what it sends on them is dropped.
            if isStopping { forgottenAtStop.formUnion(openHandles) }
            resolvingList = []
            addressResolution = false
            legacyAdvertising = false
            if checksLinks {
                openHandles.removeAll()
                inFlight.removeAll()
                uncompleted.removeAll()
            }
            onLinkEvent?(.reset)
        case HCIOpcode.leSetAdvertisingEnable:
            if failures[command.opcode] == nil { legacyAdvertising = p.first == 1 }
        case HCIOpcode.leSetRandomAddress:
            randomAddress = try? BluetoothAddress(littleEndian: p.prefix(6))
        case HCIOpcode.leSetAdvertisingData:
            if let length = p.first { advertisingData = Array(p.dropFirst().prefix(Int(length))) }
        case HCIOpcode.leSetPeriodicAdvertisingParameters, HCIOpcode.leSetPeriodicAdvertisingData,
             HCIOpcode.leSetPeriodicAdvertisingEnable:
            guard supportsPeriodicAdvertising else { return 0x01 }   // Unknown HCI Command
            guard command.opcode == HCIOpcode.leSetPeriodicAdvertisingParameters else { break }
            // 7.8.61: a set with scannable, connectable, legacy or anonymous properties has no train.
            let set = p.first
            let parameters = commands(HCIOpcode.leSetExtendedAdvertisingParameters).last { $0.parameters.first == set }?.parameters
            guard let parameters, parameters.count >= 3 else { break }
            let properties = UInt16(parameters[1]) | UInt16(parameters[2]) << 8
            // Bits 0 connectable, 1 scannable, 4 legacy PDUs, 5 anonymous (7.8.53).
            if properties & 0x0033 != 0 { return 0x12 }   // Invalid HCI Command Parameters
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

    /// The extended advertising sets the host has enabled and not disabled since (from the
    /// recorded commands), less those that ended since (`setTerminated`: a connection or a
    /// timeout ends a set, Vol 4, Part E, 7.8.56).
    public var enabledSets: Set<UInt8> {
        var on: Set<UInt8> = []
        var enabledAt: [UInt8: Int] = [:]
        for (index, command) in commands.enumerated() where command.opcode == HCIOpcode.leSetExtendedAdvertisingEnable {
            let p = command.parameters
            guard p.count >= 3 else { continue }
            if p[0] == 1 {
                on.insert(p[2])
                enabledAt[p[2]] = index
            } else {
                on.remove(p[2])
            }
        }
        for (set, endedAt) in endedSets where (enabledAt[set] ?? -1) < endedAt { on.remove(set) }
        return on
    }

    public func setAddresses() -> [UInt8: [UInt8]] {
        var out: [UInt8: [UInt8]] = [:]
        for command in commands(HCIOpcode.leSetAdvertisingSetRandomAddress) where command.parameters.count == 7 {
            out[command.parameters[0]] = Array(command.parameters[1...])
        }
        return out
    }

    public func commands(_ opcode: UInt16) -> [HCICommand] { commands.filter { $0.opcode == opcode } }
}
