import BlemuCore

/// HCI command opcodes: OGF << 10 | OCF (Vol 4, Part E, 5.4.1 and 7).
public enum HCIOpcode {
    public static let disconnect: UInt16 = 0x0406
    public static let setEventMask: UInt16 = 0x0C01
    public static let reset: UInt16 = 0x0C03
    public static let readLocalVersion: UInt16 = 0x1001
    public static let readLocalSupportedCommands: UInt16 = 0x1002
    public static let readLocalSupportedFeatures: UInt16 = 0x1003
    public static let readBufferSize: UInt16 = 0x1005
    public static let readBDAddr: UInt16 = 0x1009
    public static let readEncryptionKeySize: UInt16 = 0x1408
    public static let leSetEventMask: UInt16 = 0x2001
    public static let leReadBufferSize: UInt16 = 0x2002
    public static let leReadLocalSupportedFeatures: UInt16 = 0x2003
    public static let leSetRandomAddress: UInt16 = 0x2005
    public static let leSetAdvertisingParameters: UInt16 = 0x2006
    public static let leReadAdvertisingChannelTxPower: UInt16 = 0x2007
    public static let leSetAdvertisingData: UInt16 = 0x2008
    public static let leSetScanResponseData: UInt16 = 0x2009
    public static let leSetAdvertisingEnable: UInt16 = 0x200A
    public static let leSetScanParameters: UInt16 = 0x200B
    public static let leSetScanEnable: UInt16 = 0x200C
    public static let leCreateConnection: UInt16 = 0x200D
    public static let leConnectionUpdate: UInt16 = 0x2013
    public static let leEnableEncryption: UInt16 = 0x2019
    public static let leLongTermKeyRequestReply: UInt16 = 0x201A
    public static let leLongTermKeyRequestNegativeReply: UInt16 = 0x201B
    public static let leRemoteConnectionParameterRequestReply: UInt16 = 0x2020
    public static let leRemoteConnectionParameterRequestNegativeReply: UInt16 = 0x2021
    public static let leSetDataLength: UInt16 = 0x2022
    public static let leSetPHY: UInt16 = 0x2032
    public static let leWriteSuggestedDefaultDataLength: UInt16 = 0x2024
    public static let leReadBufferSizeV2: UInt16 = 0x2060
    public static let leSetAdvertisingSetRandomAddress: UInt16 = 0x2035
    public static let leSetExtendedAdvertisingParameters: UInt16 = 0x2036
    public static let leSetExtendedAdvertisingData: UInt16 = 0x2037
    public static let leSetExtendedScanResponseData: UInt16 = 0x2038
    public static let leSetExtendedAdvertisingEnable: UInt16 = 0x2039
    public static let leReadMaximumAdvertisingDataLength: UInt16 = 0x203A
    public static let leReadNumberOfSupportedAdvertisingSets: UInt16 = 0x203B
    public static let leRemoveAdvertisingSet: UInt16 = 0x203C
    public static let leClearAdvertisingSets: UInt16 = 0x203D
    public static let leCreateConnectionCancel: UInt16 = 0x200E
    public static let leSetExtendedScanParameters: UInt16 = 0x2041
    public static let leSetExtendedScanEnable: UInt16 = 0x2042
    public static let leExtendedCreateConnection: UInt16 = 0x2043
    public static let leAddDeviceToResolvingList: UInt16 = 0x2027
    public static let leRemoveDeviceFromResolvingList: UInt16 = 0x2028
    public static let leClearResolvingList: UInt16 = 0x2029
    public static let leReadResolvingListSize: UInt16 = 0x202A
    public static let leSetAddressResolutionEnable: UInt16 = 0x202D
    public static let leSetPrivacyMode: UInt16 = 0x204E

    public static func name(_ opcode: UInt16) -> String {
        let names: [UInt16: String] = [
            disconnect: "Disconnect", setEventMask: "Set Event Mask", reset: "Reset",
            readLocalVersion: "Read Local Version Information", readLocalSupportedCommands: "Read Local Supported Commands",
            readLocalSupportedFeatures: "Read Local Supported Features", readBufferSize: "Read Buffer Size",
            readBDAddr: "Read BD_ADDR", readEncryptionKeySize: "Read Encryption Key Size", leSetEventMask: "LE Set Event Mask", leReadBufferSize: "LE Read Buffer Size",
            leReadLocalSupportedFeatures: "LE Read Local Supported Features", leSetRandomAddress: "LE Set Random Address",
            leSetAdvertisingParameters: "LE Set Advertising Parameters",
            leReadAdvertisingChannelTxPower: "LE Read Advertising Physical Channel Tx Power",
            leSetAdvertisingData: "LE Set Advertising Data", leSetScanResponseData: "LE Set Scan Response Data",
            leSetAdvertisingEnable: "LE Set Advertising Enable", leSetScanParameters: "LE Set Scan Parameters",
            leSetScanEnable: "LE Set Scan Enable", leCreateConnection: "LE Create Connection",
            leConnectionUpdate: "LE Connection Update",
            leEnableEncryption: "LE Enable Encryption",
            leLongTermKeyRequestReply: "LE Long Term Key Request Reply",
            leLongTermKeyRequestNegativeReply: "LE Long Term Key Request Negative Reply",
            leRemoteConnectionParameterRequestReply: "LE Remote Connection Parameter Request Reply",
            leRemoteConnectionParameterRequestNegativeReply: "LE Remote Connection Parameter Request Negative Reply",
            leSetDataLength: "LE Set Data Length", leSetPHY: "LE Set PHY", leWriteSuggestedDefaultDataLength: "LE Write Suggested Default Data Length",
            leReadBufferSizeV2: "LE Read Buffer Size v2",
            leSetAdvertisingSetRandomAddress: "LE Set Advertising Set Random Address",
            leSetExtendedAdvertisingParameters: "LE Set Extended Advertising Parameters",
            leSetExtendedAdvertisingData: "LE Set Extended Advertising Data",
            leSetExtendedScanResponseData: "LE Set Extended Scan Response Data",
            leSetExtendedAdvertisingEnable: "LE Set Extended Advertising Enable",
            leReadMaximumAdvertisingDataLength: "LE Read Maximum Advertising Data Length",
            leReadNumberOfSupportedAdvertisingSets: "LE Read Number of Supported Advertising Sets",
            leRemoveAdvertisingSet: "LE Remove Advertising Set", leClearAdvertisingSets: "LE Clear Advertising Sets",
            leCreateConnectionCancel: "LE Create Connection Cancel",
            leSetExtendedScanParameters: "LE Set Extended Scan Parameters",
            leSetExtendedScanEnable: "LE Set Extended Scan Enable",
            leExtendedCreateConnection: "LE Extended Create Connection",
            leAddDeviceToResolvingList: "LE Add Device To Resolving List",
            leRemoveDeviceFromResolvingList: "LE Remove Device From Resolving List", leClearResolvingList: "LE Clear Resolving List",
            leReadResolvingListSize: "LE Read Resolving List Size",
            leSetAddressResolutionEnable: "LE Set Address Resolution Enable", leSetPrivacyMode: "LE Set Privacy Mode",
        ]
        return names[opcode] ?? "command \(Hex.word(opcode))"
    }
}

/// An HCI command packet (Vol 4, Part E, 5.4.1): opcode, parameter length, parameters.
public struct HCICommand: Equatable, Sendable {
    public let opcode: UInt16
    public let parameters: [UInt8]

    public init(opcode: UInt16, parameters: [UInt8] = []) {
        self.opcode = opcode
        self.parameters = parameters
    }

    public func encode(into out: inout [UInt8]) {
        out.appendLE(opcode)
        out.append(UInt8(truncatingIfNeeded: parameters.count))
        out.append(contentsOf: parameters)
    }

    public var name: String { HCIOpcode.name(opcode) }

    // MARK: Builders, one per command blemu sends

    public static let reset = HCICommand(opcode: HCIOpcode.reset)
    public static let readLocalVersion = HCICommand(opcode: HCIOpcode.readLocalVersion)
    public static let readBDAddr = HCICommand(opcode: HCIOpcode.readBDAddr)
    public static let readLocalSupportedCommands = HCICommand(opcode: HCIOpcode.readLocalSupportedCommands)
    public static let readLocalSupportedFeatures = HCICommand(opcode: HCIOpcode.readLocalSupportedFeatures)
    public static let leReadLocalSupportedFeatures = HCICommand(opcode: HCIOpcode.leReadLocalSupportedFeatures)
    public static let readBufferSize = HCICommand(opcode: HCIOpcode.readBufferSize)
    public static let leReadBufferSize = HCICommand(opcode: HCIOpcode.leReadBufferSize)
    public static let leReadBufferSizeV2 = HCICommand(opcode: HCIOpcode.leReadBufferSizeV2)
    public static let leReadAdvertisingChannelTxPower = HCICommand(opcode: HCIOpcode.leReadAdvertisingChannelTxPower)

    /// Vol 4, Part E, 7.3.1: the events the host wants beyond the defaults.
    public static func setEventMask(_ mask: UInt64) -> HCICommand {
        var p: [UInt8] = []
        p.appendLE(mask)
        return HCICommand(opcode: HCIOpcode.setEventMask, parameters: p)
    }

    /// Vol 4, Part E, 7.8.1.
    public static func leSetEventMask(_ mask: UInt64) -> HCICommand {
        var p: [UInt8] = []
        p.appendLE(mask)
        return HCICommand(opcode: HCIOpcode.leSetEventMask, parameters: p)
    }

    /// Vol 4, Part E, 7.8.4.
    public static func leSetRandomAddress(_ address: BluetoothAddress) -> HCICommand {
        HCICommand(opcode: HCIOpcode.leSetRandomAddress, parameters: address.littleEndianBytes)
    }

    /// Vol 4, Part E, 7.8.5: intervals in 0.625 ms units; type 0x00 = ADV_IND (connectable
    /// undirected); own address type; channel map 0x07 = all three; filter policy 0x00 = none.
    /// `peer`: the central a directed type (0x01 ADV_DIRECT_IND high duty cycle, 0x04 low duty
    /// cycle) is for, as Peer_Address_Type (0x00 public, 0x01 random) and Peer_Address; nil
    /// (undirected) sends zeros, which the controller ignores.
    public static func leSetAdvertisingParameters(intervalMin: UInt16, intervalMax: UInt16, type: UInt8 = 0x00,
                                                  ownAddressType: AddressType, peer: LEAddress? = nil) -> HCICommand {
        var p: [UInt8] = []
        p.appendLE(intervalMin)
        p.appendLE(intervalMax)
        p.append(type)
        p.append(ownAddressType.rawValue)
        p.append(peer?.peerAddressType ?? 0x00)
        p.append(contentsOf: peer?.address.littleEndianBytes ?? [UInt8](repeating: 0, count: 6))
        p.append(0x07)
        p.append(0x00)
        return HCICommand(opcode: HCIOpcode.leSetAdvertisingParameters, parameters: p)
    }

    /// Vol 4, Part E, 7.8.7 / 7.8.8: length then 31 octets, zero padded.
    public static func leSetAdvertisingData(_ data: [UInt8]) -> HCICommand {
        HCICommand(opcode: HCIOpcode.leSetAdvertisingData, parameters: padded31(data))
    }

    public static func leSetScanResponseData(_ data: [UInt8]) -> HCICommand {
        HCICommand(opcode: HCIOpcode.leSetScanResponseData, parameters: padded31(data))
    }

    private static func padded31(_ data: [UInt8]) -> [UInt8] {
        let body = Array(data.prefix(31))
        return [UInt8(body.count)] + body + [UInt8](repeating: 0, count: 31 - body.count)
    }

    /// Vol 4, Part E, 7.8.9.
    public static func leSetAdvertisingEnable(_ enable: Bool) -> HCICommand {
        HCICommand(opcode: HCIOpcode.leSetAdvertisingEnable, parameters: [enable ? 1 : 0])
    }

    // MARK: Extended advertising (Vol 4, Part E, 7.8.53 – 7.8.60)

    /// 7.8.53: one advertising set's parameters. Event properties 0x0013 = connectable,
    /// scannable, legacy PDUs (ADV_IND), so every central sees it, including ones that scan
    /// only for legacy advertising; own address type random, with the set's own address
    /// (7.8.52); 1M PHY; no TX power preference (0x7F); the set handle as its SID.
    /// `properties` other than the default: 0x0010, non-connectable and non-scannable with legacy
    /// PDUs (ADV_NONCONN_IND); 0x0000, non-connectable and non-scannable extended advertising
    /// (ADV_EXT_IND with AUX_ADV_IND, for data beyond 31 octets), Vol 4, Part E, 7.8.53.
    /// `peer`: the central a directed set (properties bit 2) is for, as Peer_Address_Type and
    /// Peer_Address; nil (undirected) sends zeros. `primaryPHY` (0x01 LE 1M, 0x03 LE Coded) and
    /// `secondaryPHY` (0x01 LE 1M, 0x02 LE 2M, 0x03 LE Coded): Primary_Advertising_PHY and
    /// Secondary_Advertising_PHY; a set with legacy PDUs uses LE 1M only.
    public static func leSetExtendedAdvertisingParameters(set: UInt8, intervalMin: UInt16, intervalMax: UInt16,
                                                          ownAddressType: AddressType,
                                                          properties: UInt16 = connectableLegacyProperties,
                                                          peer: LEAddress? = nil, primaryPHY: UInt8 = 0x01,
                                                          secondaryPHY: UInt8 = 0x01) -> HCICommand {
        var p: [UInt8] = [set]
        p.appendLE(properties)
        p.appendLE24(UInt32(intervalMin))
        p.appendLE24(UInt32(intervalMax))
        p.append(0x07)                       // all three primary channels
        p.append(ownAddressType.rawValue)
        p.append(peer?.peerAddressType ?? 0x00)   // peer address type (zero: undirected)
        p.append(contentsOf: peer?.address.littleEndianBytes ?? [UInt8](repeating: 0, count: 6))
        p.append(0x00)                       // no filter
        p.append(0x7F)                       // TX power: no preference
        p.append(primaryPHY)
        p.append(0x00)                       // secondary max skip
        p.append(secondaryPHY)
        p.append(set & 0x0F)                 // advertising SID
        p.append(0x00)                       // no scan request notifications
        return HCICommand(opcode: HCIOpcode.leSetExtendedAdvertisingParameters, parameters: p)
    }

    /// Advertising_Event_Properties (7.8.53): bit 0 connectable, bit 1 scannable, bit 4 legacy PDUs.
    public static let connectableLegacyProperties: UInt16 = 0x0013
    public static let nonConnectableLegacyProperties: UInt16 = 0x0010
    public static let nonConnectableExtendedProperties: UInt16 = 0x0000
    /// Connectable, non-scannable extended advertising (ADV_EXT_IND with a connectable
    /// AUX_ADV_IND): connectable and scannable together are legacy only (7.8.53), so such a
    /// set has no scan response.
    public static let connectableExtendedProperties: UInt16 = 0x0001

    /// 7.8.52: a set's own random address.
    public static func leSetAdvertisingSetRandomAddress(set: UInt8, _ address: BluetoothAddress) -> HCICommand {
        HCICommand(opcode: HCIOpcode.leSetAdvertisingSetRandomAddress, parameters: [set] + address.littleEndianBytes)
    }

    /// 7.8.54: operation 0x03 = complete data in one command; fragment preference 0x01 = the
    /// controller should not fragment. Legacy PDUs carry at most 31 octets.
    /// A set that advertises with extended PDUs takes up to 251 octets in one command
    /// (`maximumLength: extendedDataMaximumLength`).
    public static func leSetExtendedAdvertisingData(set: UInt8, _ data: [UInt8],
                                                    maximumLength: Int = AdvertisingPayload.maximumLength) -> HCICommand {
        let body = Array(data.prefix(min(maximumLength, extendedDataMaximumLength)))
        return HCICommand(opcode: HCIOpcode.leSetExtendedAdvertisingData, parameters: [set, 0x03, 0x01, UInt8(body.count)] + body)
    }

    /// 7.8.54: Advertising_Data_Length is at most 251 octets per command.
    public static let extendedDataMaximumLength = 251

    /// 7.8.54: data longer than one command carries, in fragments of at most 251 octets:
    /// Operation 0x01 (first fragment), 0x00 (intermediate), 0x02 (last); 0x03 (complete) when
    /// one command holds it all. Only while the set is disabled (else Command Disallowed).
    public static func leSetExtendedAdvertisingDataFragments(set: UInt8, _ data: [UInt8]) -> [HCICommand] {
        guard data.count > extendedDataMaximumLength else { return [leSetExtendedAdvertisingData(set: set, data, maximumLength: extendedDataMaximumLength)] }
        var commands: [HCICommand] = []
        var start = 0
        while start < data.count {
            let end = min(start + extendedDataMaximumLength, data.count)
            let operation: UInt8 = start == 0 ? 0x01 : end == data.count ? 0x02 : 0x00
            commands.append(HCICommand(opcode: HCIOpcode.leSetExtendedAdvertisingData,
                                       parameters: [set, operation, 0x01, UInt8(end - start)] + data[start..<end]))
            start = end
        }
        return commands
    }

    /// 7.8.55, like 7.8.54.
    public static func leSetExtendedScanResponseData(set: UInt8, _ data: [UInt8]) -> HCICommand {
        let body = Array(data.prefix(AdvertisingPayload.maximumLength))
        return HCICommand(opcode: HCIOpcode.leSetExtendedScanResponseData, parameters: [set, 0x03, 0x01, UInt8(body.count)] + body)
    }

    /// 7.8.55: a scan response of an extended scannable set, in fragments as 7.8.54's data
    /// (`leSetExtendedAdvertisingDataFragments`): Scan_Response_Data_Length at most 251 octets per
    /// command; only while the set is disabled. Empty data is one command with no data.
    public static func leSetExtendedScanResponseDataFragments(set: UInt8, _ data: [UInt8]) -> [HCICommand] {
        leSetExtendedAdvertisingDataFragments(set: set, data).map {
            HCICommand(opcode: HCIOpcode.leSetExtendedScanResponseData, parameters: $0.parameters)
        }
    }

    /// 7.8.56: one set on or off, with no event limit; `duration` in units of 10 ms (0: until
    /// disabled; a high duty cycle directed set needs one of at most 1.28 s, 128).
    public static func leSetExtendedAdvertisingEnable(_ enable: Bool, set: UInt8, duration: UInt16 = 0) -> HCICommand {
        HCICommand(opcode: HCIOpcode.leSetExtendedAdvertisingEnable,
                   parameters: [enable ? 1 : 0, 1, set, UInt8(truncatingIfNeeded: duration), UInt8(truncatingIfNeeded: duration >> 8), 0])
    }

    /// 7.8.59: one set removed, so its next use starts from no data (a set's old data may not fit
    /// the properties it is given next: Invalid HCI Command Parameters, 7.8.53).
    public static func leRemoveAdvertisingSet(set: UInt8) -> HCICommand {
        HCICommand(opcode: HCIOpcode.leRemoveAdvertisingSet, parameters: [set])
    }

    /// 7.8.57.
    public static let leReadMaximumAdvertisingDataLength = HCICommand(opcode: HCIOpcode.leReadMaximumAdvertisingDataLength)
    /// 7.8.58.
    public static let leReadNumberOfSupportedAdvertisingSets = HCICommand(opcode: HCIOpcode.leReadNumberOfSupportedAdvertisingSets)
    /// 7.8.60: every set removed (after a reset there are none; before reuse, to be sure).
    public static let leClearAdvertisingSets = HCICommand(opcode: HCIOpcode.leClearAdvertisingSets)

    /// Vol 4, Part E, 7.1.6.
    public static func disconnect(handle: UInt16, reason: UInt8) -> HCICommand {
        var p: [UInt8] = []
        p.appendLE(handle)
        p.append(reason)
        return HCICommand(opcode: HCIOpcode.disconnect, parameters: p)
    }

    /// Vol 4, Part E, 7.8.25: the key the central's encryption request is answered with
    /// (Long_Term_Key, 16 octets, least significant first). A key of another size is padded
    /// or cut to 16 octets, never sent as a malformed command.
    public static func leLongTermKeyRequestReply(handle: UInt16, key: [UInt8]) -> HCICommand {
        var p: [UInt8] = []
        p.appendLE(handle)
        p.append(contentsOf: key.prefix(16))
        p.append(contentsOf: [UInt8](repeating: 0, count: max(0, 16 - key.count)))
        return HCICommand(opcode: HCIOpcode.leLongTermKeyRequestReply, parameters: p)
    }

    /// Vol 4, Part E, 7.8.24: the central starts (or refreshes) encryption of a link with a key
    /// and the Random_Number and Encrypted_Diversifier that name it (zero for an STK or a Secure
    /// Connections LTK). Command Status first, then Encryption Change (or Key Refresh Complete).
    public static func leEnableEncryption(handle: UInt16, randomNumber: UInt64, encryptedDiversifier: UInt16,
                                          key: [UInt8]) -> HCICommand {
        var p: [UInt8] = []
        p.appendLE(handle)
        for index in 0..<8 { p.append(UInt8(truncatingIfNeeded: randomNumber >> (8 * UInt64(index)))) }
        p.appendLE(encryptedDiversifier)
        p.append(contentsOf: key.prefix(16))
        p.append(contentsOf: [UInt8](repeating: 0, count: max(0, 16 - key.count)))
        return HCICommand(opcode: HCIOpcode.leEnableEncryption, parameters: p)
    }

    /// Vol 4, Part E, 7.5.7: the key size the controller encrypts a link with.
    public static func readEncryptionKeySize(handle: UInt16) -> HCICommand {
        var p: [UInt8] = []
        p.appendLE(handle)
        return HCICommand(opcode: HCIOpcode.readEncryptionKeySize, parameters: p)
    }

    /// Vol 4, Part E, 7.8.26: the host has no key for this link; the controller answers the
    /// central's encryption request with PIN or Key Missing.
    public static func leLongTermKeyRequestNegativeReply(handle: UInt16) -> HCICommand {
        var p: [UInt8] = []
        p.appendLE(handle)
        return HCICommand(opcode: HCIOpcode.leLongTermKeyRequestNegativeReply, parameters: p)
    }

    /// Vol 4, Part E, 7.8.31: accept the central's request with these parameters; the CE
    /// lengths are informative (0).
    public static func leRemoteConnectionParameterRequestReply(handle: UInt16, intervalMin: UInt16, intervalMax: UInt16,
                                                               latency: UInt16, timeout: UInt16) -> HCICommand {
        var p: [UInt8] = []
        for v in [handle, intervalMin, intervalMax, latency, timeout, 0, 0] { p.appendLE(v) }
        return HCICommand(opcode: HCIOpcode.leRemoteConnectionParameterRequestReply, parameters: p)
    }

    /// Vol 4, Part E, 7.8.32: reason 0x3B = Unacceptable Connection Parameters.
    public static func leRemoteConnectionParameterRequestNegativeReply(handle: UInt16, reason: UInt8 = 0x3B) -> HCICommand {
        var p: [UInt8] = []
        p.appendLE(handle)
        p.append(reason)
        return HCICommand(opcode: HCIOpcode.leRemoteConnectionParameterRequestNegativeReply, parameters: p)
    }

    /// Vol 4, Part E, 7.8.33: 251 octets / 2120 µs is the largest LE data PDU (Vol 6, Part B, 4.5.10).
    public static func leSetDataLength(handle: UInt16, txOctets: UInt16 = 251, txTime: UInt16 = 2120) -> HCICommand {
        var p: [UInt8] = []
        p.appendLE(handle)
        p.appendLE(txOctets)
        p.appendLE(txTime)
        return HCICommand(opcode: HCIOpcode.leSetDataLength, parameters: p)
    }

    /// Vol 4, Part E, 7.8.35.
    public static func leWriteSuggestedDefaultDataLength(txOctets: UInt16 = 251, txTime: UInt16 = 2120) -> HCICommand {
        var p: [UInt8] = []
        p.appendLE(txOctets)
        p.appendLE(txTime)
        return HCICommand(opcode: HCIOpcode.leWriteSuggestedDefaultDataLength, parameters: p)
    }

    /// Vol 4, Part E, 7.8.10 (central mode).
    public static func leSetScanParameters(active: Bool, interval: UInt16 = 0x0060, window: UInt16 = 0x0030,
                                           ownAddressType: AddressType) -> HCICommand {
        var p: [UInt8] = [active ? 0x01 : 0x00]
        p.appendLE(interval)
        p.appendLE(window)
        p.append(ownAddressType.rawValue)
        p.append(0x00)
        return HCICommand(opcode: HCIOpcode.leSetScanParameters, parameters: p)
    }

    /// Vol 4, Part E, 7.8.11.
    public static func leSetScanEnable(_ enable: Bool, filterDuplicates: Bool = false) -> HCICommand {
        HCICommand(opcode: HCIOpcode.leSetScanEnable, parameters: [enable ? 1 : 0, filterDuplicates ? 1 : 0])
    }

    /// Vol 4, Part E, 7.8.64: scanning on `phys` (Scanning_PHYs: bit 0 LE 1M, bit 2 LE Coded;
    /// the same type, interval and window for each, in that order), no filter policy.
    public static func leSetExtendedScanParameters(active: Bool, interval: UInt16 = 0x0060, window: UInt16 = 0x0030,
                                                   ownAddressType: AddressType, phys: ScanningPHYs = .oneM) -> HCICommand {
        let phys = phys.isEmpty ? ScanningPHYs.oneM : phys
        var p: [UInt8] = [ownAddressType.rawValue, 0x00, phys.rawValue]
        for _ in 0..<phys.count {
            p.append(active ? 0x01 : 0x00)
            p.appendLE(interval)
            p.appendLE(window)
        }
        return HCICommand(opcode: HCIOpcode.leSetExtendedScanParameters, parameters: p)
    }

    /// Vol 4, Part E, 7.8.65: until disabled (duration and period 0).
    public static func leSetExtendedScanEnable(_ enable: Bool, filterDuplicates: Bool = false) -> HCICommand {
        HCICommand(opcode: HCIOpcode.leSetExtendedScanEnable,
                   parameters: [enable ? 1 : 0, filterDuplicates ? 1 : 0, 0, 0, 0, 0])
    }

    /// Vol 4, Part E, 7.8.12: connect to one peer (no filter accept list), named by its address
    /// and its Peer_Address_Type (0x00 public, 0x01 random).
    /// `peerAddressType` nil: the peer's (0x00 or 0x01); 0x02 and 0x03 name an identity the
    /// controller resolves with its resolving list.
    public static func leCreateConnection(peer: LEAddress, peerAddressType: UInt8? = nil, ownAddressType: AddressType,
                                          parameters: ConnectionRequestParameters) -> HCICommand {
        var p: [UInt8] = []
        p.appendLE(parameters.scanInterval)
        p.appendLE(parameters.scanWindow)
        p.append(0x00)                       // initiator filter policy: the peer given here
        p.append(peerAddressType ?? peer.peerAddressType)
        p.append(contentsOf: peer.address.littleEndianBytes)
        p.append(ownAddressType.rawValue)
        parameters.appendConnectionFields(to: &p)
        return HCICommand(opcode: HCIOpcode.leCreateConnection, parameters: p)
    }

    /// Vol 4, Part E, 7.8.66: the same on the LE 1M PHY, for controllers with extended advertising.
    public static func leExtendedCreateConnection(peer: LEAddress, peerAddressType: UInt8? = nil, ownAddressType: AddressType,
                                                  parameters: ConnectionRequestParameters) -> HCICommand {
        var p: [UInt8] = [0x00, ownAddressType.rawValue, peerAddressType ?? peer.peerAddressType]
        p.append(contentsOf: peer.address.littleEndianBytes)
        p.append(0x01)                       // initiating PHYs: LE 1M
        p.appendLE(parameters.scanInterval)
        p.appendLE(parameters.scanWindow)
        parameters.appendConnectionFields(to: &p)
        return HCICommand(opcode: HCIOpcode.leExtendedCreateConnection, parameters: p)
    }

    /// Vol 4, Part E, 7.8.49: the host prefers LE 2M both ways; the controllers settle on what
    /// both support (LE 1M otherwise).
    public static func leSetPHY2M(handle: UInt16) -> HCICommand {
        var p: [UInt8] = []
        p.appendLE(handle)
        p += [0x00, 0x02, 0x02, 0x00, 0x00]   // All_PHYs 0 (both given), TX and RX prefer LE 2M, no PHY options
        return HCICommand(opcode: HCIOpcode.leSetPHY, parameters: p)
    }

    /// Vol 4, Part E, 7.8.13.
    public static let leCreateConnectionCancel = HCICommand(opcode: HCIOpcode.leCreateConnectionCancel)

    // MARK: The resolving list (Vol 4, Part E, 7.8.38 – 7.8.44, 7.8.77)

    /// 7.8.38: a peer's identity address (type 0x00 public, 0x01 random) with its IRK, and the
    /// local IRK the controller would make our own resolvable private addresses with. Keys
    /// least significant octet first, as the bond file and SMP keep them; a key of another size
    /// is padded or cut to 16 octets, never sent as a malformed command.
    public static func leAddDeviceToResolvingList(peerIdentity: LEAddress, peerIRK: [UInt8], localIRK: [UInt8]) -> HCICommand {
        var p: [UInt8] = [peerIdentity.peerAddressType]
        p.append(contentsOf: peerIdentity.address.littleEndianBytes)
        for key in [peerIRK, localIRK] {
            p.append(contentsOf: key.prefix(16))
            p.append(contentsOf: [UInt8](repeating: 0, count: max(0, 16 - key.count)))
        }
        return HCICommand(opcode: HCIOpcode.leAddDeviceToResolvingList, parameters: p)
    }

    /// 7.8.39: the entry of a peer's identity address (type 0x00 public, 0x01 random).
    public static func leRemoveDeviceFromResolvingList(peerIdentity: LEAddress) -> HCICommand {
        HCICommand(opcode: HCIOpcode.leRemoveDeviceFromResolvingList,
                   parameters: [peerIdentity.peerAddressType] + peerIdentity.address.littleEndianBytes)
    }

    /// 7.8.40.
    public static let leClearResolvingList = HCICommand(opcode: HCIOpcode.leClearResolvingList)
    /// 7.8.41.
    public static let leReadResolvingListSize = HCICommand(opcode: HCIOpcode.leReadResolvingListSize)

    /// 7.8.44: address resolution in the controller on or off.
    public static func leSetAddressResolutionEnable(_ enable: Bool) -> HCICommand {
        HCICommand(opcode: HCIOpcode.leSetAddressResolutionEnable, parameters: [enable ? 1 : 0])
    }

    /// 7.8.77: Privacy_Mode 0x00 Network, 0x01 Device (a peer in the list that shows its
    /// identity address instead of a resolvable private address is still accepted).
    public static func leSetPrivacyMode(peerIdentity: LEAddress, deviceMode: Bool) -> HCICommand {
        HCICommand(opcode: HCIOpcode.leSetPrivacyMode,
                   parameters: [peerIdentity.peerAddressType] + peerIdentity.address.littleEndianBytes + [deviceMode ? 0x01 : 0x00])
    }

    /// Vol 4, Part E, 7.8.18: the central changes a link's parameters.
    public static func leConnectionUpdate(handle: UInt16, intervalMin: UInt16, intervalMax: UInt16, latency: UInt16,
                                          timeout: UInt16) -> HCICommand {
        var p: [UInt8] = []
        p.appendLE(handle)
        p.appendLE(intervalMin)
        p.appendLE(intervalMax)
        p.appendLE(latency)
        p.appendLE(timeout)
        p.appendLE(UInt16(0))                // minimum CE length
        p.appendLE(UInt16(0))                // maximum CE length
        return HCICommand(opcode: HCIOpcode.leConnectionUpdate, parameters: p)
    }
}

/// What a central asks for when it connects (Vol 4, Part E, 7.8.12): how it scans for the peer
/// while initiating, and the link's parameters (units of 0.625 ms for scanning, 1.25 ms for the
/// interval, 10 ms for the timeout).
/// Scanning_PHYs of LE Set Extended Scan Parameters (Vol 4, Part E, 7.8.64).
public struct ScanningPHYs: OptionSet, Equatable, Hashable, Sendable {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }
    public static let oneM = ScanningPHYs(rawValue: 0x01)
    public static let coded = ScanningPHYs(rawValue: 0x04)
    /// How many PHYs: the command repeats its per-PHY fields this many times.
    public var count: Int { rawValue.nonzeroBitCount }
}

public struct ConnectionRequestParameters: Equatable, Sendable {
    public var scanInterval: UInt16 = 0x0060
    public var scanWindow: UInt16 = 0x0060
    /// 30 – 50 ms: what phones use, and what Apple's guidelines accept.
    public var intervalMin: UInt16 = 24
    public var intervalMax: UInt16 = 40
    public var latency: UInt16 = 0
    /// 4 s.
    public var supervisionTimeout: UInt16 = 400

    public init() {}

    func appendConnectionFields(to p: inout [UInt8]) {
        p.appendLE(intervalMin)
        p.appendLE(intervalMax)
        p.appendLE(latency)
        p.appendLE(supervisionTimeout)
        p.appendLE(UInt16(0))                // minimum CE length
        p.appendLE(UInt16(0))                // maximum CE length
    }
}

/// HCI error codes blemu uses by name (Vol 1, Part F, 1.3).
public enum HCIStatus {
    public static let success: UInt8 = 0x00
    /// Unknown HCI Command: the controller does not have the command at all (Vol 1, Part F, 2.1).
    public static let unknownCommand: UInt8 = 0x01
    public static let unknownConnectionIdentifier: UInt8 = 0x02
    public static let hardwareFailure: UInt8 = 0x03
    public static let connectionTimeout: UInt8 = 0x08
    public static let commandDisallowed: UInt8 = 0x0C
    public static let remoteUserTerminated: UInt8 = 0x13
    /// Remote Device Terminated Connection due to Low Resources: a link beyond our limit.
    public static let remoteDeviceTerminatedLowResources: UInt8 = 0x14
    public static let localHostTerminated: UInt8 = 0x16
    public static let unsupportedRemoteFeature: UInt8 = 0x1A
    public static let unspecifiedError: UInt8 = 0x1F
    public static let unacceptableConnectionParameters: UInt8 = 0x3B
    /// Advertising Timeout: high duty cycle directed advertising, or a set's duration, ended
    /// without a connection (Vol 4, Part E, 7.7.65.1, 7.7.65.18).
    public static let advertisingTimeout: UInt8 = 0x3C
    public static let memoryCapacityExceeded: UInt8 = 0x07
    public static let invalidParameters: UInt8 = 0x12
}

/// The return parameters of a command that returns its Status alone (Vol 4, Part E: LE Add
/// Device To Resolving List 7.8.38, LE Clear Resolving List 7.8.40, LE Set Address Resolution
/// Enable 7.8.44, LE Set Privacy Mode 7.8.77). Total: anything else throws.
public struct StatusReturn: Equatable, Sendable {
    public var status: UInt8

    public init(status: UInt8) { self.status = status }

    public init(returnParameters: some Collection<UInt8>, command: String) throws(DecodeError) {
        var r = ByteReader(Array(returnParameters)[...])
        status = try r.u8()
        try r.expectEnd(command)
    }
}

/// The return parameters of LE Read Resolving List Size (Vol 4, Part E, 7.8.41): Status,
/// Resolving_List_Size (entries). Total: anything else throws.
public struct ResolvingListSizeReturn: Equatable, Sendable {
    public var status: UInt8
    public var size: UInt8

    public init(status: UInt8, size: UInt8) {
        self.status = status
        self.size = size
    }

    public init(returnParameters: some Collection<UInt8>) throws(DecodeError) {
        var r = ByteReader(Array(returnParameters)[...])
        status = try r.u8()
        guard status == HCIStatus.success else {
            // A failed command may return the status alone.
            size = 0
            return
        }
        size = try r.u8()
        try r.expectEnd("LE Read Resolving List Size")
    }
}


/// The return parameters of Read Encryption Key Size (Vol 4, Part E, 7.5.7): Status,
/// Connection_Handle, Key_Size (octets). Total: anything else throws.
public struct EncryptionKeySizeReturn: Equatable, Sendable {
    public var status: UInt8
    public var handle: UInt16
    public var keySize: UInt8

    public init(status: UInt8, handle: UInt16, keySize: UInt8) {
        self.status = status
        self.handle = handle
        self.keySize = keySize
    }

    public init(returnParameters: some Collection<UInt8>) throws(DecodeError) {
        var r = ByteReader(Array(returnParameters)[...])
        status = try r.u8()
        guard status == HCIStatus.success else {
            // A failed command may return the status alone.
            handle = (try? r.u16()).map { $0 & 0x0FFF } ?? 0
            keySize = 0
            return
        }
        handle = try r.u16() & 0x0FFF
        keySize = try r.u8()
        try r.expectEnd("Read Encryption Key Size")
    }
}
