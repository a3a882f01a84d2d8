import Testing
import BlemuCore
@testable import BlemuHCI

/// Byte-exact HCI codecs, checked against the packet formats of the Core spec 5.4,
/// Vol 4, Part E (5.4 packet formats, 7.x command and event parameters).

private func hex(_ text: String) -> [UInt8] {
    guard let bytes = Hex.parse(text) else {
        Issue.record("bad hex literal in test: \(text)")
        return []
    }
    return bytes
}

private func encoded(_ command: HCICommand) -> [UInt8] {
    var out: [UInt8] = []
    command.encode(into: &out)
    return out
}

private func event(_ text: String) throws(DecodeError) -> HCIEvent {
    try HCIEvent(packet: hex(text)[...])
}

/// C0:11:22:33:44:55 in over-the-air (little-endian) order.
private let peerAddressLE = "554433 2211c0"
private let peerAddress = BluetoothAddress("C0:11:22:33:44:55")!

@Suite struct HCICommandEncodingTests {
    /// Vol 4, Part E, 5.4.1: opcode = OGF (6 bits) << 10 | OCF (10 bits), sent little-endian.
    @Test(arguments: [
        (HCIOpcode.disconnect, 0x01, 0x0006),                  // 7.1.6
        (HCIOpcode.setEventMask, 0x03, 0x0001),                // 7.3.1
        (HCIOpcode.reset, 0x03, 0x0003),                       // 7.3.2
        (HCIOpcode.readLocalVersion, 0x04, 0x0001),            // 7.4.1
        (HCIOpcode.readLocalSupportedCommands, 0x04, 0x0002),  // 7.4.2
        (HCIOpcode.readLocalSupportedFeatures, 0x04, 0x0003),  // 7.4.3
        (HCIOpcode.readBufferSize, 0x04, 0x0005),              // 7.4.5
        (HCIOpcode.readBDAddr, 0x04, 0x0009),                  // 7.4.6
        (HCIOpcode.leSetEventMask, 0x08, 0x0001),              // 7.8.1
        (HCIOpcode.leReadBufferSize, 0x08, 0x0002),            // 7.8.2 (v1)
        (HCIOpcode.leReadLocalSupportedFeatures, 0x08, 0x0003),// 7.8.3
        (HCIOpcode.leSetRandomAddress, 0x08, 0x0005),          // 7.8.4
        (HCIOpcode.leSetAdvertisingParameters, 0x08, 0x0006),  // 7.8.5
        (HCIOpcode.leReadAdvertisingChannelTxPower, 0x08, 0x0007), // 7.8.6
        (HCIOpcode.leSetAdvertisingData, 0x08, 0x0008),        // 7.8.7
        (HCIOpcode.leSetScanResponseData, 0x08, 0x0009),       // 7.8.8
        (HCIOpcode.leSetAdvertisingEnable, 0x08, 0x000A),      // 7.8.9
        (HCIOpcode.leSetScanParameters, 0x08, 0x000B),         // 7.8.10
        (HCIOpcode.leSetScanEnable, 0x08, 0x000C),             // 7.8.11
        (HCIOpcode.leCreateConnection, 0x08, 0x000D),          // 7.8.12
        (HCIOpcode.leConnectionUpdate, 0x08, 0x0013),          // 7.8.18
        (HCIOpcode.leRemoteConnectionParameterRequestReply, 0x08, 0x0020),         // 7.8.31
        (HCIOpcode.leRemoteConnectionParameterRequestNegativeReply, 0x08, 0x0021), // 7.8.32
        (HCIOpcode.leSetDataLength, 0x08, 0x0022),             // 7.8.33
        (HCIOpcode.leWriteSuggestedDefaultDataLength, 0x08, 0x0024), // 7.8.35
        (HCIOpcode.leReadBufferSizeV2, 0x08, 0x0060),          // 7.8.2 (v2)
    ] as [(UInt16, UInt16, UInt16)])
    func opcodeIsOGFAndOCF(opcode: UInt16, ogf: UInt16, ocf: UInt16) {
        #expect(opcode == ogf << 10 | ocf, "\(HCIOpcode.name(opcode))")
        #expect(!HCIOpcode.name(opcode).hasPrefix("command 0x"), "every opcode blemu sends has a name for the logs")
    }

    @Test func unknownOpcodeIsNamedByItsHexValue() {
        #expect(HCIOpcode.name(0xFC01) == "command 0xfc01")
    }

    @Test func parameterlessCommandsAreOpcodeAndZeroLength() {
        #expect(encoded(.reset) == hex("030c00"))
        #expect(encoded(.readLocalVersion) == hex("011000"))
        #expect(encoded(.readLocalSupportedCommands) == hex("021000"))
        #expect(encoded(.readLocalSupportedFeatures) == hex("031000"))
        #expect(encoded(.readBufferSize) == hex("051000"))
        #expect(encoded(.readBDAddr) == hex("091000"))
        #expect(encoded(.leReadBufferSize) == hex("022000"))
        #expect(encoded(.leReadLocalSupportedFeatures) == hex("032000"))
        #expect(encoded(.leReadAdvertisingChannelTxPower) == hex("072000"))
        #expect(encoded(.leReadBufferSizeV2) == hex("602000"))
    }

    /// 7.3.1: Disconnection Complete (bit 4), Encryption Change (7), Hardware Error (15),
    /// Data Buffer Overflow (25), Encryption Key Refresh Complete (47), LE Meta (61); 8 octets LE.
    @Test func setEventMaskCarriesEightOctetsLittleEndian() {
        #expect(encoded(.setEventMask(HCIHost.eventMask)) == hex("010c08 90 80 00 02 00 80 00 20"))
    }

    /// 7.8.1: LE Connection Complete .. Data Length Change (bits 0-6), Enhanced Connection
    /// Complete (9), PHY Update Complete (11), Extended Advertising Report (12), Periodic
    /// Advertising Sync Established, Report, Sync Lost (13-15), Advertising Set Terminated (17).
    @Test func leSetEventMaskCarriesEightOctetsLittleEndian() {
        #expect(encoded(.leSetEventMask(HCIHost.leEventMask)) == hex("012008 7f fa 02 00 00 00 00 00"))
    }

    /// 7.8.4: Random_Address, 6 octets, least significant first.
    @Test func leSetRandomAddress() {
        #expect(encoded(.leSetRandomAddress(peerAddress)) == hex("052006" + peerAddressLE))
    }

    /// 7.8.5: Interval_Min (2), Interval_Max (2), Advertising_Type, Own_Address_Type,
    /// Peer_Address_Type, Peer_Address (6), Channel_Map, Filter_Policy = 15 octets.
    @Test func leSetAdvertisingParametersIs15Octets() {
        let command = HCICommand.leSetAdvertisingParameters(intervalMin: 0x0020, intervalMax: 0x0030,
                                                             ownAddressType: .randomDevice)
        #expect(command.parameters.count == 15)
        #expect(encoded(command) == hex("06200f 2000 3000 00 01 00 000000000000 07 00"))
        let nonConnectable = HCICommand.leSetAdvertisingParameters(intervalMin: 0x00A0, intervalMax: 0x4000, type: 0x03,
                                                                   ownAddressType: .publicDevice)
        #expect(encoded(nonConnectable) == hex("06200f a000 0040 03 00 00 000000000000 07 00"))
    }

    /// 7.8.7: Advertising_Data_Length (1) then Advertising_Data, always 31 octets, zero padded.
    @Test func leSetAdvertisingDataIs32OctetsZeroPadded() {
        let flags = hex("020106")
        let command = HCICommand.leSetAdvertisingData(flags)
        #expect(command.parameters.count == 32)
        #expect(encoded(command) == hex("082020 03 020106") + [UInt8](repeating: 0, count: 28))

        let empty = HCICommand.leSetAdvertisingData([])
        #expect(encoded(empty) == hex("082020 00") + [UInt8](repeating: 0, count: 31))

        let full = [UInt8](1...31)
        #expect(encoded(.leSetAdvertisingData(full)) == hex("082020 1f") + full)
    }

    @Test func advertisingDataLongerThan31OctetsNeverOverflowsTheCommand() {
        let command = HCICommand.leSetAdvertisingData([UInt8](repeating: 0xAA, count: 40))
        #expect(command.parameters.count == 32)
        #expect(command.parameters.first == 31, "the length octet must match the bytes carried")
    }

    /// 7.8.8: same layout as 7.8.7.
    @Test func leSetScanResponseDataIs32OctetsZeroPadded() {
        let name = hex("03 09 4852")
        #expect(encoded(.leSetScanResponseData(name)) == hex("092020 04 03094852") + [UInt8](repeating: 0, count: 27))
    }

    /// 7.8.9: Advertising_Enable, 1 octet.
    @Test func leSetAdvertisingEnable() {
        #expect(encoded(.leSetAdvertisingEnable(true)) == hex("0a2001 01"))
        #expect(encoded(.leSetAdvertisingEnable(false)) == hex("0a2001 00"))
    }

    /// 7.1.6: Connection_Handle (2), Reason (1).
    @Test func disconnect() {
        #expect(encoded(.disconnect(handle: 0x0040, reason: HCIStatus.remoteUserTerminated)) == hex("060403 4000 13"))
        #expect(encoded(.disconnect(handle: 0x0EFF, reason: 0x3B)) == hex("060403 ff0e 3b"))
    }

    /// 7.8.31: Connection_Handle, Interval_Min, Interval_Max, Max_Latency, Timeout,
    /// Min_CE_Length, Max_CE_Length: seven 2-octet fields = 14 octets.
    @Test func remoteConnectionParameterRequestReplyIs14Octets() {
        let command = HCICommand.leRemoteConnectionParameterRequestReply(handle: 0x0041, intervalMin: 6, intervalMax: 12,
                                                                         latency: 4, timeout: 500)
        #expect(command.parameters.count == 14)
        #expect(encoded(command) == hex("20200e 4100 0600 0c00 0400 f401 0000 0000"))
    }

    /// 7.8.32: Connection_Handle, Reason; 0x3B Unacceptable Connection Parameters by default.
    @Test func remoteConnectionParameterRequestNegativeReply() {
        #expect(encoded(.leRemoteConnectionParameterRequestNegativeReply(handle: 0x0041)) == hex("212003 4100 3b"))
        #expect(encoded(.leRemoteConnectionParameterRequestNegativeReply(handle: 0x0041, reason: 0x1A))
                == hex("212003 4100 1a"))
    }

    /// 7.8.33: Connection_Handle, TX_Octets, TX_Time; 251 / 2120 µs by default.
    @Test func leSetDataLength() {
        #expect(encoded(.leSetDataLength(handle: 0x0040)) == hex("222006 4000 fb00 4808"))
        #expect(encoded(.leSetDataLength(handle: 0x0001, txOctets: 27, txTime: 328)) == hex("222006 0100 1b00 4801"))
    }

    /// 7.8.35: Suggested_Max_TX_Octets, Suggested_Max_TX_Time.
    @Test func leWriteSuggestedDefaultDataLength() {
        #expect(encoded(.leWriteSuggestedDefaultDataLength()) == hex("242004 fb00 4808"))
    }

    /// 7.8.10: LE_Scan_Type, LE_Scan_Interval, LE_Scan_Window, Own_Address_Type,
    /// Scanning_Filter_Policy = 7 octets.
    @Test func leSetScanParameters() {
        #expect(encoded(.leSetScanParameters(active: true, ownAddressType: .publicDevice)) == hex("0b2007 01 6000 3000 00 00"))
        #expect(encoded(.leSetScanParameters(active: false, interval: 0x0010, window: 0x0010, ownAddressType: .randomDevice))
                == hex("0b2007 00 1000 1000 01 00"))
    }

    /// 7.8.11: LE_Scan_Enable, Filter_Duplicates.
    @Test func leSetScanEnable() {
        #expect(encoded(.leSetScanEnable(true, filterDuplicates: true)) == hex("0c2002 01 01"))
        #expect(encoded(.leSetScanEnable(false)) == hex("0c2002 00 00"))
    }

    @Test func encodeAppendsToWhatIsAlreadyThere() {
        var out: [UInt8] = [0x01]   // an H4 packet type in front
        HCICommand.reset.encode(into: &out)
        #expect(out == hex("01 030c00"))
    }
}

@Suite struct HCIEventDecodingTests {
    /// 7.7.14: Num_HCI_Command_Packets, Command_Opcode, Return_Parameters (Reset: Status).
    @Test func commandCompleteForReset() throws {
        #expect(try event("0e04 01 030c 00") == .commandComplete(numPackets: 1, opcode: HCIOpcode.reset, returnParameters: [0x00]))
    }

    @Test func commandCompleteCarriesEveryReturnParameter() throws {
        // LE Read Buffer Size: Status, LE_ACL_Data_Packet_Length = 251, Total_Num_LE_ACL_Data_Packets = 8.
        #expect(try event("0e07 05 0220 00 fb00 08")
                == .commandComplete(numPackets: 5, opcode: HCIOpcode.leReadBufferSize, returnParameters: hex("00fb0008")))
    }

    /// 7.7.14: opcode 0x0000 is a no-op that only hands out command credits.
    @Test func commandCompleteWithNoOpOpcode() throws {
        #expect(try event("0e03 01 0000") == .commandComplete(numPackets: 1, opcode: 0x0000, returnParameters: []))
    }

    /// 7.7.15: Status, Num_HCI_Command_Packets, Command_Opcode.
    @Test func commandStatus() throws {
        #expect(try event("0f04 00 01 0d20") == .commandStatus(status: 0x00, numPackets: 1, opcode: HCIOpcode.leCreateConnection))
        #expect(try event("0f04 0c 00 0604") == .commandStatus(status: HCIStatus.commandDisallowed, numPackets: 0,
                                                                opcode: HCIOpcode.disconnect))
    }

    @Test func commandStatusMissingAParameterIsRejected() {
        #expect(throws: DecodeError(.truncated)) { try event("0f03 00 01 0d") }
    }

    /// 7.7.5: Status, Connection_Handle (12 bits meaningful), Reason.
    @Test func disconnectionComplete() throws {
        #expect(try event("0504 00 4000 13") == .disconnectionComplete(status: 0, handle: 0x0040, reason: 0x13))
        #expect(try event("0504 00 40f0 08") == .disconnectionComplete(status: 0, handle: 0x0040, reason: 0x08),
                "the upper 4 bits of the handle field are not part of the handle")
        #expect(throws: DecodeError(.truncated)) { try event("0503 00 4000") }
    }

    /// 7.7.19: Num_Handles, then Connection_Handle[i], Num_Completed_Packets[i] (interleaved,
    /// Vol 4, Part E, 5.2).
    @Test func numberOfCompletedPacketsWithTwoHandles() throws {
        let decoded = try event("1309 02 4000 0300 4100 0100")
        #expect(decoded == .numberOfCompletedPackets([(handle: 0x0040, count: 3), (handle: 0x0041, count: 1)]))
        #expect(decoded != .numberOfCompletedPackets([(handle: 0x0040, count: 3)]))
    }

    @Test func numberOfCompletedPacketsWhoseCountDisagreesIsRejected() {
        #expect(throws: DecodeError(.lengthMismatch, "Number Of Completed Packets")) { try event("1305 02 4000 0300") }
        #expect(throws: DecodeError(.lengthMismatch, "Number Of Completed Packets")) { try event("1309 01 4000 0300 4100 0100") }
    }

    /// 7.7.16: Hardware_Code.
    @Test func hardwareError() throws {
        #expect(try event("1001 42") == .hardwareError(code: 0x42))
        #expect(throws: DecodeError(.truncated)) { try event("1000") }
    }

    /// 7.7.26 and 7.7.8.
    @Test func dataBufferOverflowAndEncryptionChange() throws {
        #expect(try event("1a01 01") == .dataBufferOverflow(linkType: 0x01))
        #expect(try event("0804 00 4000 01") == .encryptionChange(status: 0, handle: 0x0040, enabled: 1))
    }

    /// 7.7.65.1: Subevent_Code 0x01, Status, Connection_Handle, Role, Peer_Address_Type,
    /// Peer_Address (6), Connection_Interval, Peripheral_Latency, Supervision_Timeout,
    /// Central_Clock_Accuracy = 19 octets.
    @Test func leConnectionComplete() throws {
        let decoded = try event("3e13 01 00 4000 01 01" + peerAddressLE + "1800 0000 f401 00")
        #expect(decoded == .leConnectionComplete(LEConnectionComplete(
            status: 0, handle: 0x0040, role: 0x01, peerAddressType: 0x01, peerAddress: peerAddress,
            parameters: LinkParameters(interval: 24, latency: 0, supervisionTimeout: 500))))
    }

    /// The peer with its type: bit 0 of Peer_Address_Type, so an identity address the controller
    /// resolved (0x02, 0x03, 7.7.65.10) keeps its public or random type.
    @Test func leConnectionCompletesPeerHasItsType() throws {
        guard case .leConnectionComplete(let random) = try event("3e13 01 00 4000 01 01" + peerAddressLE + "1800 0000 f401 00"),
              case .leConnectionComplete(let publicIdentity) = try event("3e1f 0a 00 4100 01 02" + peerAddressLE + "000000000000" + "0a0b0c0d0e4f" + "2800 0200 9001 05")
        else { Issue.record("not decoded as LE Connection Complete"); return }
        #expect(random.peer == LEAddress(peerAddress, isRandom: true))
        #expect(publicIdentity.peer == LEAddress(peerAddress, isRandom: false))
        #expect(publicIdentity.peerIdentityResolved)
    }

    /// 7.8.12 and 7.8.66 name the peer by Peer_Address_Type and Peer_Address: an `LEAddress`
    /// gives 0x00 or 0x01, its identity type from a connection event never going back out.
    @Test func createConnectionNamesThePeerWithItsType() {
        let peer = LEAddress(peerAddress, peerAddressType: 0x03)
        let legacy = HCICommand.leCreateConnection(peer: peer, ownAddressType: .publicDevice, parameters: ConnectionRequestParameters())
        #expect(legacy.parameters[5] == 0x01 && Array(legacy.parameters[6..<12]) == peerAddress.littleEndianBytes)
        #expect(legacy.parameters[12] == 0x00)
        let extended = HCICommand.leExtendedCreateConnection(peer: LEAddress(peerAddress, isRandom: false), ownAddressType: .randomDevice,
                                                              parameters: ConnectionRequestParameters())
        #expect(Array(extended.parameters[1..<9]) == [0x01, 0x00] + peerAddress.littleEndianBytes)
    }

    @Test func leConnectionCompleteWithAByteMissingIsRejected() {
        #expect(throws: DecodeError(.truncated)) { try event("3e12 01 00 4000 01 01" + peerAddressLE + "1800 0000 f401") }
    }

    /// 7.7.65.10: as 7.7.65.1 plus Local_Resolvable_Private_Address and
    /// Peer_Resolvable_Private_Address (6 each) before the interval = 31 octets.
    @Test func leEnhancedConnectionComplete() throws {
        let localRPA = "010203040546"
        let peerRPA = "0a0b0c0d0e4f"
        let decoded = try event("3e1f 0a 00 4100 01 00" + peerAddressLE + localRPA + peerRPA + "2800 0200 9001 05")
        #expect(decoded == .leConnectionComplete(LEConnectionComplete(
            status: 0, handle: 0x0041, role: 0x01, peerAddressType: 0x00, peerAddress: peerAddress,
            parameters: LinkParameters(interval: 40, latency: 2, supervisionTimeout: 400),
            peerResolvablePrivateAddress: BluetoothAddress("4F:0E:0D:0C:0B:0A"))))
    }

    /// 7.7.65.10, v2 (subevent 0x29, Core 5.4): v1's 30 parameter octets, then Advertising_Handle
    /// (1) and Sync_Handle (2) = 34 octets with the subevent code.
    @Test func leEnhancedConnectionCompleteV2() throws {
        let localRPA = "000000000000"
        let peerRPA = "0a0b0c0d0e4f"
        let decoded = try event("3e22 29 00 4200 01 03" + peerAddressLE + localRPA + peerRPA + "1800 0000 f401 01" + "02 ffff")
        #expect(decoded == .leConnectionComplete(LEConnectionComplete(
            status: 0, handle: 0x0042, role: 0x01, peerAddressType: 0x03, peerAddress: peerAddress,
            parameters: LinkParameters(interval: 24, latency: 0, supervisionTimeout: 500),
            peerResolvablePrivateAddress: BluetoothAddress("4F:0E:0D:0C:0B:0A"), advertisingHandle: 0x02)))
        // Without its Sync_Handle it is truncated, not a link.
        #expect(throws: DecodeError(.truncated)) {
            try event("3e20 29 00 4200 01 03" + peerAddressLE + localRPA + peerRPA + "1800 0000 f401 01" + "02")
        }
        // blemu does not unmask it: LE event mask bit 40 stays clear (7.8.1), so v1 comes.
        #expect(HCIHost.leEventMask & (1 << 40) == 0)
    }

    @Test func failedLEConnectionCompleteKeepsItsStatus() throws {
        let decoded = try event("3e13 01 3e 0000 00 00 000000000000 0000 0000 0000 00")
        guard case .leConnectionComplete(let complete) = decoded else {
            Issue.record("decoded as \(decoded)")
            return
        }
        #expect(complete.status == 0x3E)
    }

    /// 7.7.65.3: Status, Connection_Handle, Connection_Interval, Peripheral_Latency, Supervision_Timeout.
    @Test func leConnectionUpdateComplete() throws {
        #expect(try event("3e0a 03 00 4000 2800 0200 9001")
                == .leConnectionUpdateComplete(status: 0, handle: 0x0040,
                                               parameters: LinkParameters(interval: 40, latency: 2, supervisionTimeout: 400)))
    }

    /// 7.7.65.6: Connection_Handle, Interval_Min, Interval_Max, Max_Latency, Timeout.
    @Test func leRemoteConnectionParameterRequest() throws {
        #expect(try event("3e0b 06 4000 0600 0c00 0000 f401")
                == .leRemoteConnectionParameterRequest(handle: 0x0040, intervalMin: 6, intervalMax: 12, latency: 0, timeout: 500))
    }

    /// 7.7.65.7: Connection_Handle, Max_TX_Octets, Max_TX_Time, Max_RX_Octets, Max_RX_Time.
    @Test func leDataLengthChange() throws {
        #expect(try event("3e0b 07 4000 fb00 4808 1b00 4801")
                == .leDataLengthChange(handle: 0x0040, maxTxOctets: 251, maxTxTime: 2120, maxRxOctets: 27, maxRxTime: 328))
    }

    /// 7.7.65.12: Status, Connection_Handle, TX_PHY, RX_PHY.
    @Test func lePHYUpdateComplete() throws {
        #expect(try event("3e06 0c 00 4000 02 01") == .lePHYUpdateComplete(status: 0, handle: 0x0040, txPHY: 2, rxPHY: 1))
    }

    /// 7.7.65.2: Num_Reports, then per report Event_Type, Address_Type, Address, Data_Length,
    /// Data, RSSI (interleaved per Vol 4, Part E, 5.2).
    @Test func leAdvertisingReportWithTwoReports() throws {
        let first = "00 01" + peerAddressLE + "03 020106 c4"
        let second = "04 00 665544332211 00 b0"
        let decoded = try event("3e19 02 02" + first + second)
        #expect(decoded == .leAdvertisingReport([
            AdvertisingReport(eventType: 0x00, addressType: 0x01, address: peerAddress, data: hex("020106"), rssi: -60),
            AdvertisingReport(eventType: 0x04, addressType: 0x00, address: BluetoothAddress("11:22:33:44:55:66")!,
                              data: [], rssi: -80),
        ]))
    }

    /// 7.7.65.13: Num_Reports, then per report Event_Type (2), Address_Type, Address, Primary_PHY,
    /// Secondary_PHY, Advertising_SID, TX_Power, RSSI, Periodic_Advertising_Interval (2),
    /// Direct_Address_Type, Direct_Address, Data_Length, Data. 127 means "not available".
    @Test func leExtendedAdvertisingReport() throws {
        let report = "1b00 01" + peerAddressLE + "01 00 ff 7f c4 0000 00 000000000000 03 020106"
        let decoded = try event("3e1d 0d 01" + report)   // 2 + 27 octets
        #expect(decoded == .leExtendedAdvertisingReport([
            ExtendedAdvertisingReport(eventType: 0x001B, addressType: 0x01, address: peerAddress, txPower: nil, rssi: -60,
                                      data: hex("020106")),
        ]))
        guard case .leExtendedAdvertisingReport(let reports) = decoded, let first = reports.first else { return }
        #expect(first.isConnectable && first.isScanResponse && first.dataStatus == 0)
        #expect(throws: DecodeError.self) { try event("3e05 0d 01 1300 01") }
    }

    @Test func leAdvertisingReportWhoseDataRunsPastTheEventIsRejected() {
        #expect(throws: DecodeError(.truncated)) { try event("3e0f 02 01 00 01" + peerAddressLE + "05 020106 c4") }
    }

    @Test func unknownEventIsOther() throws {
        #expect(try event("ff02 aabb") == .other(code: 0xFF))
        #expect(try event("5700") == .other(code: 0x57))
    }

    @Test func unknownLESubeventIsLEOther() throws {
        #expect(try event("3e03 7f 0102") == .leOther(subevent: 0x7F))
        #expect(try event("3e01 11") == .leOther(subevent: 0x11))   // LE Scan Timeout: not decoded
    }

    @Test func leMetaWithoutSubeventIsRejected() {
        #expect(throws: DecodeError(.truncated)) { try event("3e00") }
    }

    /// 5.4.4: Parameter_Total_Length must count exactly the bytes that follow.
    @Test func parameterLengthMismatchIsRejected() {
        let tooShort = #expect(throws: DecodeError.self) { try event("0e05 01 030c 00") }
        #expect(tooShort?.kind == .lengthMismatch)
        let tooLong = #expect(throws: DecodeError.self) { try event("0e03 01 030c 00") }
        #expect(tooLong?.kind == .lengthMismatch)
    }

    @Test func emptyOrHeaderOnlyPacketsAreRejected() {
        #expect(throws: DecodeError(.truncated)) { try HCIEvent(packet: []) }
        #expect(throws: DecodeError(.truncated)) { try event("0e") }
        #expect(throws: DecodeError(.truncated)) { try event("0e00") }
    }

    /// Transports hand the decoder a slice of a bigger buffer (after the H4 type byte).
    @Test func decodesFromASliceThatDoesNotStartAtZero() throws {
        let h4 = hex("04 0e04 01 030c 00 ffff")
        #expect(try HCIEvent(packet: h4[1..<7]) == .commandComplete(numPackets: 1, opcode: HCIOpcode.reset, returnParameters: [0]))
    }
}

@Suite struct ACLPacketTests {
    /// Vol 4, Part E, 5.4.2: Handle (12 bits), PB flag (bits 12-13), BC flag (bits 14-15),
    /// Data_Total_Length (16 bits), data.
    @Test func decodesHeaderAndData() throws {
        let packet = try ACLPacket(packet: hex("4020 0500 0100 0400 0a")[...])
        #expect(packet.handle == 0x0040)
        #expect(packet.boundary == .firstFlushable)
        #expect(Array(packet.data) == hex("0100 0400 0a"))
    }

    @Test(arguments: [(0x00, ACLPacket.Boundary.firstNonFlushable), (0x10, .continuing), (0x20, .firstFlushable),
                      (0x30, .complete)] as [(UInt8, ACLPacket.Boundary)])
    func everyPacketBoundaryFlag(highByte: UInt8, boundary: ACLPacket.Boundary) throws {
        let packet = try ACLPacket(packet: [0x41, highByte, 0x01, 0x00, 0xEE][...])
        #expect(packet.boundary == boundary)
        #expect(packet.handle == 0x0041)
    }

    @Test func handleIsTwelveBitsAndBroadcastFlagIsIgnored() throws {
        let packet = try ACLPacket(packet: hex("ffef 0000")[...])   // BC = 0b11, PB = 0b10, handle 0xFFF
        #expect(packet.handle == 0x0FFF)
        #expect(packet.boundary == .firstFlushable)
        #expect(packet.data.isEmpty)
    }

    @Test func lengthMustMatchTheData() {
        let short = #expect(throws: DecodeError.self) { try ACLPacket(packet: hex("4020 0500 0100")[...]) }
        #expect(short?.kind == .lengthMismatch)
        let long = #expect(throws: DecodeError.self) { try ACLPacket(packet: hex("4020 0100 0100")[...]) }
        #expect(long?.kind == .lengthMismatch)
        #expect(throws: DecodeError(.truncated)) { try ACLPacket(packet: hex("4020 05")[...]) }
        #expect(throws: DecodeError(.truncated)) { try ACLPacket(packet: [][...]) }
    }

    @Test func encodesHeaderThenData() {
        var out: [UInt8] = []
        ACLPacket(handle: 0x0040, boundary: .firstNonFlushable, data: hex("0300 0400 0a0100")[...]).encode(into: &out)
        #expect(out == hex("4000 0700 0300 0400 0a0100"))
        out.removeAll()
        ACLPacket(handle: 0x0EFF, boundary: .continuing, data: [0xAB]).encode(into: &out)
        #expect(out == hex("ff1e 0100 ab"))
    }

    /// A handle wider than 12 bits must not spill into the PB/BC flags.
    @Test func encodingMasksTheHandleToTwelveBits() {
        var out: [UInt8] = []
        ACLPacket(handle: 0xF040, boundary: .firstNonFlushable, data: []).encode(into: &out)
        #expect(out == hex("4000 0000"))
        out.removeAll()
        ACLPacket.appendHeader(handle: 0xFFFF, boundary: .continuing, length: 27, to: &out)
        #expect(out == hex("ff1f 1b00"))
    }

    @Test func decodeThenEncodeRoundTrips() throws {
        let bytes = hex("0b10 0600 010203040506")
        let packet = try ACLPacket(packet: bytes[...])
        var out: [UInt8] = []
        packet.encode(into: &out)
        #expect(out == bytes)
    }

    @Test func decodedDataIsASliceOfTheInput() throws {
        let bytes = hex("02 4020 0300 aabbcc")   // H4 type byte in front
        let packet = try ACLPacket(packet: bytes[1...])
        #expect(packet.data.startIndex == 5)
        #expect(packet.data == bytes[5...])
    }
}
