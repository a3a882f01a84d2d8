import BlemuCore

// Periodic advertising (Core Vol 6, Part B, 4.4.2.12): an advertising set sends AUX_SYNC_IND
// PDUs at a fixed interval, found through the SyncInfo of its extended advertisements; a
// scanner synchronizes to the train (LE Periodic Advertising Create Sync) and then receives its
// data in LE Periodic Advertising Report events without scanning.

extension HCIOpcode {
    public static let leSetPeriodicAdvertisingParameters: UInt16 = 0x203E
    public static let leSetPeriodicAdvertisingData: UInt16 = 0x203F
    public static let leSetPeriodicAdvertisingEnable: UInt16 = 0x2040
    public static let lePeriodicAdvertisingCreateSync: UInt16 = 0x2044
    public static let lePeriodicAdvertisingCreateSyncCancel: UInt16 = 0x2045
    public static let lePeriodicAdvertisingTerminateSync: UInt16 = 0x2046
}

extension HCICommand {
    /// Vol 4, Part E, 7.8.61: the set's periodic interval in 1.25 ms units (0x0006 and up);
    /// properties bit 6 includes the TX power in the AUX_SYNC_IND.
    public static func leSetPeriodicAdvertisingParameters(set: UInt8, intervalMin: UInt16, intervalMax: UInt16,
                                                          includeTxPower: Bool = false) -> HCICommand {
        var p: [UInt8] = [set]
        p.appendLE(intervalMin)
        p.appendLE(intervalMax)
        p.appendLE(UInt16(includeTxPower ? 0x0040 : 0))
        return HCICommand(opcode: HCIOpcode.leSetPeriodicAdvertisingParameters, parameters: p)
    }

    /// The most data one LE Set Periodic Advertising Data carries (7.8.62: Advertising_Data_Length ≤ 252).
    public static let periodicAdvertisingDataFragment = 252

    /// Vol 4, Part E, 7.8.62: `data` (at most 252 bytes; `operation` 0x03 "complete data" when it
    /// is all, else 0x01 first / 0x00 intermediate / 0x02 last fragment). Nil for more than 252 bytes.
    public static func leSetPeriodicAdvertisingData(set: UInt8, operation: UInt8 = 0x03, data: [UInt8]) -> HCICommand? {
        guard data.count <= periodicAdvertisingDataFragment, operation <= 0x04 else { return nil }
        return HCICommand(opcode: HCIOpcode.leSetPeriodicAdvertisingData, parameters: [set, operation, UInt8(data.count)] + data)
    }

    /// Vol 4, Part E, 7.8.63: bit 0 of Enable starts the train (bit 1, the ADI field, left clear).
    public static func leSetPeriodicAdvertisingEnable(_ enable: Bool, set: UInt8) -> HCICommand {
        HCICommand(opcode: HCIOpcode.leSetPeriodicAdvertisingEnable, parameters: [enable ? 0x01 : 0x00, set])
    }

    /// Vol 4, Part E, 7.8.67: synchronize to the train of `sid` from `address` (Options 0x00:
    /// this advertiser, not the Periodic Advertiser List; reporting enabled). `skip`: periodic
    /// events that may be skipped; `timeout` in 10 ms units (0x000A-0x4000) before the sync is
    /// lost; any CTE type accepted. Answered with Command Status, then LE Periodic Advertising
    /// Sync Established.
    public static func lePeriodicAdvertisingCreateSync(sid: UInt8, addressType: UInt8, address: BluetoothAddress,
                                                       skip: UInt16 = 0, timeout: UInt16) -> HCICommand {
        var p: [UInt8] = [0x00, sid, addressType]
        p += address.littleEndianBytes
        p.appendLE(skip)
        p.appendLE(timeout)
        p.append(0x00)                       // Sync_CTE_Type: no restriction
        return HCICommand(opcode: HCIOpcode.lePeriodicAdvertisingCreateSync, parameters: p)
    }

    /// Vol 4, Part E, 7.8.68: gives up a pending Create Sync (then Sync Established with 0x44,
    /// Operation Cancelled by Host).
    public static let lePeriodicAdvertisingCreateSyncCancel = HCICommand(opcode: HCIOpcode.lePeriodicAdvertisingCreateSyncCancel)

    /// Vol 4, Part E, 7.8.69.
    public static func lePeriodicAdvertisingTerminateSync(handle: UInt16) -> HCICommand {
        var p: [UInt8] = []
        p.appendLE(handle)
        return HCICommand(opcode: HCIOpcode.lePeriodicAdvertisingTerminateSync, parameters: p)
    }
}

/// LE Periodic Advertising Sync Established (Vol 4, Part E, 7.7.65.14).
public struct PeriodicSyncEstablished: Equatable, Sendable {
    public var status: UInt8
    public var syncHandle: UInt16
    public var sid: UInt8
    public var addressType: UInt8
    public var address: BluetoothAddress
    public var phy: UInt8
    /// 1.25 ms units.
    public var interval: UInt16
    public var clockAccuracy: UInt8

    public init(status: UInt8, syncHandle: UInt16, sid: UInt8, addressType: UInt8, address: BluetoothAddress,
                phy: UInt8, interval: UInt16, clockAccuracy: UInt8) {
        self.status = status
        self.syncHandle = syncHandle
        self.sid = sid
        self.addressType = addressType
        self.address = address
        self.phy = phy
        self.interval = interval
        self.clockAccuracy = clockAccuracy
    }
}

/// LE Periodic Advertising Report (Vol 4, Part E, 7.7.65.15): one fragment of the train's data.
public struct PeriodicAdvertisingReport: Equatable, Sendable {
    public var syncHandle: UInt16
    /// dBm; nil when not available (127).
    public var txPower: Int8?
    /// dBm; nil when not available (127).
    public var rssi: Int8?
    public var cteType: UInt8
    /// 0x00 complete, 0x01 incomplete with more to come, 0x02 incomplete and truncated (no more),
    /// 0xFF failed to receive an AUX_SYNC_SUBEVENT_IND (7.7.65.15).
    public var dataStatus: UInt8
    public var data: [UInt8]

    public init(syncHandle: UInt16, txPower: Int8?, rssi: Int8?, cteType: UInt8, dataStatus: UInt8, data: [UInt8]) {
        self.syncHandle = syncHandle
        self.txPower = txPower
        self.rssi = rssi
        self.cteType = cteType
        self.dataStatus = dataStatus
        self.data = data
    }
}

extension HCIEvent {
    /// The three periodic advertising subevents; nil for another subevent.
    static func decodePeriodic(subevent: UInt8, _ r: inout ByteReader) throws(DecodeError) -> HCIEvent? {
        switch subevent {
        case 0x0E:
            let established = PeriodicSyncEstablished(
                status: try r.u8(), syncHandle: try r.u16() & 0x0FFF, sid: try r.u8(), addressType: try r.u8(),
                address: try BluetoothAddress(littleEndian: try r.bytes(6)), phy: try r.u8(), interval: try r.u16(),
                clockAccuracy: try r.u8())
            try r.expectEnd("LE Periodic Advertising Sync Established")
            return .lePeriodicAdvertisingSyncEstablished(established)
        case 0x0F:
            let handle = try r.u16() & 0x0FFF
            let txPower = try r.i8()
            let rssi = try r.i8()
            let cteType = try r.u8()
            let dataStatus = try r.u8()
            let length = Int(try r.u8())
            let data = Array(try r.bytes(length))
            try r.expectEnd("LE Periodic Advertising Report")
            return .lePeriodicAdvertisingReport(PeriodicAdvertisingReport(
                syncHandle: handle, txPower: txPower == 127 ? nil : txPower, rssi: rssi == 127 ? nil : rssi,
                cteType: cteType, dataStatus: dataStatus, data: data))
        case 0x10:
            let handle = try r.u16() & 0x0FFF
            try r.expectEnd("LE Periodic Advertising Sync Lost")
            return .lePeriodicAdvertisingSyncLost(syncHandle: handle)
        default:
            return nil
        }
    }
}
