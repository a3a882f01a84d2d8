import Testing
import BlemuCore
@testable import BlemuHCI

/// Periodic advertising's HCI commands and events (Core Vol 4, Part E, 7.8.61-7.8.69 and
/// 7.7.65.13-7.7.65.16), byte-exact, and their decoders total on hostile bytes.

private func hex(_ text: String) -> [UInt8] { Hex.parse(text) ?? [] }

private func encoded(_ command: HCICommand?) -> [UInt8] {
    var out: [UInt8] = []
    command?.encode(into: &out)
    return out
}

private func event(_ text: String) throws(DecodeError) -> HCIEvent { try HCIEvent(packet: hex(text)[...]) }

private let peerAddressLE = "554433 2211c0"
private let peerAddress = BluetoothAddress("C0:11:22:33:44:55")!

@Suite struct PeriodicAdvertisingCommandTests {
    /// 7.8.61: Advertising_Handle, Interval_Min (2), Interval_Max (2), Properties (2; bit 6 TX power).
    @Test func setParameters() {
        #expect(encoded(.leSetPeriodicAdvertisingParameters(set: 1, intervalMin: 0x50, intervalMax: 0x60))
            == hex("3e20 07 01 5000 6000 0000"))
        #expect(encoded(.leSetPeriodicAdvertisingParameters(set: 1, intervalMin: 0x50, intervalMax: 0x60, includeTxPower: true))
            == hex("3e20 07 01 5000 6000 4000"))
    }

    /// 7.8.62: Advertising_Handle, Operation, Advertising_Data_Length, Data (at most 252 octets).
    @Test func setDataCompleteAndTooLong() {
        #expect(encoded(.leSetPeriodicAdvertisingData(set: 2, data: hex("0a16d2fc4002c40903bf13")))
            == hex("3f20 0e 02 03 0b 0a16d2fc4002c40903bf13"))
        #expect(HCICommand.leSetPeriodicAdvertisingData(set: 2, data: [UInt8](repeating: 0, count: 252)) != nil)
        #expect(HCICommand.leSetPeriodicAdvertisingData(set: 2, data: [UInt8](repeating: 0, count: 253)) == nil)
        #expect(HCICommand.leSetPeriodicAdvertisingData(set: 2, operation: 0x05, data: []) == nil)
    }

    /// 7.8.63: Enable, Advertising_Handle.
    @Test func enable() {
        #expect(encoded(.leSetPeriodicAdvertisingEnable(true, set: 3)) == hex("4020 02 01 03"))
        #expect(encoded(.leSetPeriodicAdvertisingEnable(false, set: 3)) == hex("4020 02 00 03"))
    }

    /// 7.8.67: Options, Advertising_SID, Advertiser_Address_Type, Advertiser_Address, Skip (2),
    /// Sync_Timeout (2), Sync_CTE_Type; 7.8.68 none; 7.8.69 Sync_Handle.
    @Test func createSyncCancelAndTerminate() {
        #expect(encoded(.lePeriodicAdvertisingCreateSync(sid: 4, addressType: 1, address: peerAddress, skip: 0, timeout: 0x01F4))
            == hex("4420 0e 00 04 01" + peerAddressLE + "0000 f401 00"))
        #expect(encoded(.lePeriodicAdvertisingCreateSyncCancel) == hex("4520 00"))
        #expect(encoded(.lePeriodicAdvertisingTerminateSync(handle: 0x0102)) == hex("4620 02 0201"))
    }
}

@Suite struct PeriodicAdvertisingEventTests {
    /// 7.7.65.14: Status, Sync_Handle, Advertising_SID, Advertiser_Address_Type, Address, PHY,
    /// Periodic_Advertising_Interval (2), Clock_Accuracy.
    @Test func syncEstablished() throws {
        #expect(try event("3e10 0e 00 0100 04 01" + peerAddressLE + "01 5000 05") == .lePeriodicAdvertisingSyncEstablished(
            PeriodicSyncEstablished(status: 0, syncHandle: 1, sid: 4, addressType: 1, address: peerAddress, phy: 1, interval: 0x50, clockAccuracy: 5)))
        #expect(throws: DecodeError.self) { try event("3e0f 0e 00 0100 04 01" + peerAddressLE + "01 5000") }
        #expect(throws: DecodeError.self) { try event("3e11 0e 00 0100 04 01" + peerAddressLE + "01 5000 05 00") }
    }

    /// 7.7.65.15: Sync_Handle, TX_Power, RSSI, CTE_Type, Data_Status, Data_Length, Data.
    @Test func report() throws {
        #expect(try event("3e0b 0f 0100 7f c4 ff 00 03 020106") == .lePeriodicAdvertisingReport(
            PeriodicAdvertisingReport(syncHandle: 1, txPower: nil, rssi: -60, cteType: 0xFF, dataStatus: 0, data: hex("020106"))))
        // Data_Length past the event, or short of it: refused, not read beyond.
        #expect(throws: DecodeError.self) { try event("3e0b 0f 0100 7f c4 ff 00 04 020106") }
        #expect(throws: DecodeError.self) { try event("3e0b 0f 0100 7f c4 ff 00 02 020106") }
    }

    /// 7.7.65.16: Sync_Handle.
    @Test func syncLost() throws {
        #expect(try event("3e03 10 0100") == .lePeriodicAdvertisingSyncLost(syncHandle: 1))
        #expect(throws: DecodeError.self) { try event("3e02 10 01") }
    }

    /// 7.7.65.13: the Advertising_SID and Periodic_Advertising_Interval of an extended report,
    /// which Create Sync needs.
    @Test func extendedReportCarriesSIDAndPeriodicInterval() throws {
        let report = "0000 01" + peerAddressLE + "01 01 05 7f c4 5000 00 000000000000 03 020106"
        guard case .leExtendedAdvertisingReport(let reports) = try event("3e1d 0d 01" + report), let first = reports.first else {
            Issue.record("not an extended report"); return
        }
        #expect(first.advertisingSID == 5 && first.periodicInterval == 0x50)
    }

    /// Every truncation of each event is an error, never a trap.
    @Test func everyTruncationIsAnError() {
        for full in ["3e10 0e 00 0100 04 01" + peerAddressLE + "01 5000 05", "3e0b 0f 0100 7f c4 ff 00 03 020106", "3e03 10 0100"] {
            let bytes = hex(full)
            for cut in 3..<bytes.count {
                var packet = Array(bytes.prefix(cut))
                packet[1] = UInt8(cut - 2)
                #expect(throws: DecodeError.self) { try HCIEvent(packet: packet[...]) }
            }
        }
    }
}
