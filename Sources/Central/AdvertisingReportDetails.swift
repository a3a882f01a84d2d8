import BlemuCore
import BlemuHCI

/// One advertising report as the controller gave it (Vol 4, Part E, 7.7.65.2 and 7.7.65.13),
/// beside the advertiser it was merged into: what a program that sees every report needs
/// (`CentralHost.onReport`). Legacy reports say what their event type implies.
public struct AdvertisingReportDetails: Equatable, Sendable {
    public var address: BluetoothAddress
    /// Address_Type as reported (0x00-0x03; 0xFF anonymous in an extended report).
    public var addressType: UInt8
    public var isLegacy: Bool
    public var isConnectable: Bool
    public var isScannable: Bool
    public var isDirected: Bool
    public var isScanResponse: Bool
    /// The controller cut the data short (Data_Status 0x02).
    public var isTruncated: Bool
    /// Advertising_SID; nil for a legacy report or a PDU without an ADI (0xFF).
    public var sid: UInt8?
    /// 0x01 LE 1M, 0x03 LE Coded.
    public var primaryPHY: UInt8
    /// nil: no secondary channel PDU; 0x01 LE 1M, 0x02 LE 2M, 0x03 LE Coded.
    public var secondaryPHY: UInt8?
    public var txPower: Int8?
    public var rssi: Int8?
    /// Periodic_Advertising_Interval (1.25 ms units); nil: none.
    public var periodicInterval: UInt16?
    /// The address a directed PDU was sent to, with its Direct_Address_Type; nil undirected (or
    /// a legacy report, which does not carry it).
    public var directAddress: BluetoothAddress?
    public var directAddressType: UInt8?
    /// This report's data: the advertising data, or the scan response (`isScanResponse`),
    /// reassembled from its fragments (what came, when truncated).
    public var data: [UInt8]

    public init(legacy report: AdvertisingReport) {
        address = report.address
        addressType = report.addressType
        isLegacy = true
        // 7.7.65.2: 0x00 ADV_IND, 0x01 ADV_DIRECT_IND, 0x02 ADV_SCAN_IND, 0x03 ADV_NONCONN_IND, 0x04 SCAN_RSP.
        isConnectable = report.eventType <= 0x01
        isScannable = report.eventType == 0x00 || report.eventType == 0x02 || report.eventType == 0x04
        isDirected = report.eventType == 0x01
        isScanResponse = report.eventType == 0x04
        isTruncated = false
        sid = nil
        primaryPHY = 0x01
        secondaryPHY = nil
        txPower = nil
        rssi = report.rssi == 127 ? nil : report.rssi
        periodicInterval = nil
        directAddress = nil
        directAddressType = nil
        data = report.data
    }

    public init(extended report: ExtendedAdvertisingReport, data: [UInt8], truncated: Bool) {
        address = report.address
        addressType = report.addressType
        isLegacy = report.isLegacy
        isConnectable = report.isConnectable
        isScannable = report.isScannable
        isDirected = report.isDirected
        isScanResponse = report.isScanResponse
        isTruncated = truncated
        sid = report.isLegacy || report.advertisingSID == 0xFF ? nil : report.advertisingSID
        primaryPHY = report.primaryPHY
        secondaryPHY = report.secondaryPHY == 0 ? nil : report.secondaryPHY
        txPower = report.txPower
        rssi = report.rssi
        periodicInterval = report.periodicInterval == 0 ? nil : report.periodicInterval
        directAddress = report.isDirected ? report.directAddress : nil
        directAddressType = report.isDirected ? report.directAddressType : nil
        self.data = data
    }
}
