import Testing
import BlemuBroadcast
import BlemuCore
import BlemuHCI
@testable import BlemuLint

/// Each rule with an advertisement that fails it and one that passes it.
@Suite struct AdvertisingLintTests {
    static let heartRate = BluetoothUUID(0x180D)
    /// Flags, the heart rate service and a name: what the heart-rate device sends.
    static let good = AdvertisingPayload.build(AdvertisingContent(name: "blemu HR", serviceUUIDs: [heartRate], appearance: 0x0340))

    static func connectable(_ data: [UInt8], scanResponse: [UInt8] = [], timing: AdvertisingTiming = AdvertisingTiming(),
                            extended: Bool = false, primary: BluetoothUUID? = heartRate) -> LintedAdvertisement {
        LintedAdvertisement(advertisingData: data, scanResponseData: scanResponse, connectable: true, extended: extended,
                            interval: .phases(timing), primaryService: primary)
    }

    static func beacon(_ data: [UInt8], intervalUnits: UInt16 = 160) -> LintedAdvertisement {
        LintedAdvertisement(advertisingData: data, connectable: false, interval: .fixed(intervalUnits))
    }

    /// The ids of the rules `advertisement` fails.
    static func failed(_ advertisement: LintedAdvertisement) -> [String] {
        AdvertisingLint.check(advertisement).map(\.rule.id)
    }

    static let iBeacon = IBeacon(uuid: Array(repeating: 0xAB, count: 16), major: 1, minor: 2, measuredPower: -59)!

    @Test func aBuiltPayloadAndTheBeaconsOfTheSpecificationsPassEveryRule() throws {
        #expect(Self.failed(Self.connectable(Self.good.advertisingData, scanResponse: Self.good.scanResponseData)).isEmpty)
        #expect(Self.failed(Self.beacon(Self.iBeacon.advertisingData)).isEmpty)
        let uid = EddystoneFrame.uid(txPower: -18, namespace: Array(repeating: 1, count: 10), instance: Array(repeating: 2, count: 6))
        #expect(Self.failed(Self.beacon(try uid.advertisingData())).isEmpty)
        #expect(Self.failed(Self.beacon(try EddystoneFrame.url(txPower: -18, url: "https://github.com").advertisingData())).isEmpty)
    }

    @Test func everyRuleHasAnIdASummaryASourceAndIsListedOnce() {
        let ids = AdvertisingLint.rules.map(\.id)
        #expect(Set(ids).count == ids.count)
        #expect(ids == ["ad-structures", "data-length", "flags", "local-name", "primary-service", "advertising-interval",
                        "ibeacon-frame", "eddystone-frame"])
        for rule in AdvertisingLint.rules {
            #expect(!rule.summary.isEmpty && !rule.source.isEmpty && !rule.summary.contains("\n"))
        }
    }

    @Test func aStructureRunningPastTheEndOrAMalformedKnownOneFailsAdStructures() {
        // Flags, then a name whose length byte claims 9 bytes with 3 left.
        let truncated = Self.connectable([0x02, 0x01, 0x06, 0x09, 0x09, 0x41, 0x42])
        #expect(Self.failed(truncated).contains("ad-structures"))
        // A 16-bit UUID list of 3 bytes.
        let oddList = Self.connectable(Self.good.advertisingData, scanResponse: [0x04, 0x03, 0x0D, 0x18, 0x0F])
        #expect(AdvertisingLint.check(oddList).contains { $0.rule.id == "ad-structures" && $0.detail.hasPrefix("scan response") })
        #expect(!Self.failed(Self.connectable(Self.good.advertisingData, scanResponse: Self.good.scanResponseData)).contains("ad-structures"))
    }

    @Test func legacyDataPast31BytesFailsDataLengthAndExtendedDataDoesNot() {
        let name = [UInt8](repeating: 0x41, count: 30)
        let long = [0x02, 0x01, 0x06, 0x03, 0x03, 0x0D, 0x18] + [UInt8(name.count + 1), 0x09] + name
        #expect(long.count > 31)
        let finding = AdvertisingLint.check(Self.connectable(long)).first { $0.rule.id == "data-length" }
        #expect(finding?.detail.contains("at most 31") == true)
        #expect(!Self.failed(Self.connectable(long, extended: true)).contains("data-length"))
        #expect(!Self.failed(Self.connectable(Self.good.advertisingData)).contains("data-length"))
    }

    @Test func connectableOrBeaconAdvertisingWithoutFlagsFailsFlags() {
        let noFlags = Array(Self.good.advertisingData.dropFirst(3))
        #expect(Self.failed(Self.connectable(noFlags, scanResponse: Self.good.scanResponseData)).contains("flags"))
        #expect(Self.failed(Self.beacon(Array(Self.iBeacon.advertisingData.dropFirst(3)))).contains("flags"))
        // Flags in the scan response, and Flags that say the device is not discoverable.
        #expect(Self.failed(Self.connectable(Self.good.advertisingData, scanResponse: [0x02, 0x01, 0x06])).contains("flags"))
        let hidden = [0x02, 0x01, 0x04] + noFlags
        #expect(AdvertisingLint.check(Self.connectable(hidden)).contains { $0.rule.id == "flags" && $0.detail.contains("Discoverable") })
        #expect(!Self.failed(Self.connectable(Self.good.advertisingData)).contains("flags"))
        #expect(!Self.failed(Self.beacon(Self.iBeacon.advertisingData)).contains("flags"))
    }

    @Test func aConnectableAdvertisementWithoutANameFailsLocalName() {
        let unnamed = AdvertisingPayload.build(AdvertisingContent(serviceUUIDs: [Self.heartRate]))
        #expect(Self.failed(Self.connectable(unnamed.advertisingData, scanResponse: unnamed.scanResponseData)).contains("local-name"))
        // The name in the scan response is enough.
        let named = AdvertisingPayload.build(AdvertisingContent(serviceUUIDs: [Self.heartRate]))
        #expect(!Self.failed(Self.connectable(named.advertisingData, scanResponse: [0x03, 0x09, 0x48, 0x52])).contains("local-name"))
        // A beacon needs none.
        #expect(!Self.failed(Self.beacon(Self.iBeacon.advertisingData)).contains("local-name"))
    }

    @Test func aPrimaryServiceOnlyInTheScanResponseOrNowhereFailsPrimaryService() {
        let flagsAndName: [UInt8] = [0x02, 0x01, 0x06, 0x03, 0x09, 0x48, 0x52]
        let inScanResponse = Self.connectable(flagsAndName, scanResponse: [0x03, 0x03, 0x0D, 0x18])
        #expect(AdvertisingLint.check(inScanResponse).contains { $0.rule.id == "primary-service" && $0.detail.contains("only in the scan response") })
        #expect(Self.failed(Self.connectable(flagsAndName, primary: nil)).contains("primary-service"))
        // Another service in the advertising data is not the primary one.
        #expect(Self.failed(Self.connectable(flagsAndName + [0x03, 0x03, 0x0F, 0x18])).contains("primary-service"))
        #expect(!Self.failed(Self.connectable(flagsAndName + [0x03, 0x03, 0x0D, 0x18])).contains("primary-service"))
        // A 128-bit primary service in its own list.
        let uuid = BluetoothUUID("ABDD3056-28FA-441D-A470-55A75A52553A")!
        var list128: [UInt8] = []
        uuid.append128(to: &list128)
        #expect(!Self.failed(Self.connectable(flagsAndName + [17, 0x07] + list128, primary: uuid)).contains("primary-service"))
    }

    @Test func intervalsApplesGuidelinesDoNotRecommendFailAdvertisingInterval() {
        let data = Self.good.advertisingData, scan = Self.good.scanResponseData
        #expect(Self.failed(Self.connectable(data, scanResponse: scan, timing: AdvertisingTiming(slowInterval: 1600))).contains("advertising-interval"))
        #expect(Self.failed(Self.connectable(data, scanResponse: scan, timing: AdvertisingTiming(fastInterval: 160))).contains("advertising-interval"))
        #expect(Self.failed(Self.connectable(data, scanResponse: scan, timing: AdvertisingTiming(fastDuration: .seconds(10)))).contains("advertising-interval"))
        #expect(!Self.failed(Self.connectable(data, scanResponse: scan, timing: AdvertisingTiming(slowInterval: 2056))).contains("advertising-interval"))
    }

    @Test func anIBeaconOtherThanApplesLayoutOrIntervalFailsIBeaconFrame() {
        let data = Self.iBeacon.advertisingData
        // Cut short: 20 bytes after the length byte's 21.
        var short = Array(data.dropLast())
        short[3] -= 1
        #expect(Self.failed(Self.beacon(short)).contains("ibeacon-frame"))
        // A name after the manufacturer data.
        #expect(Self.failed(Self.beacon(data + [0x01, 0x09])).contains("ibeacon-frame"))
        #expect(Self.failed(Self.beacon(data, intervalUnits: 1600)).contains("ibeacon-frame"))
        #expect(!Self.failed(Self.beacon(data)).contains("ibeacon-frame"))
        // Other Apple manufacturer data is no iBeacon.
        #expect(!Self.failed(Self.beacon([0x02, 0x01, 0x06, 0x05, 0xFF, 0x4C, 0x00, 0x10, 0x01])).contains("ibeacon-frame"))
    }

    @Test func anEddystoneFrameOtherThanTheSpecificationsFailsEddystoneFrame() throws {
        let uid = try EddystoneFrame.uid(txPower: -18, namespace: Array(repeating: 1, count: 10), instance: Array(repeating: 2, count: 6))
            .advertisingData()
        // Without the service UUID list: Flags, then the service data.
        let unlisted = Array(uid.prefix(3)) + Array(uid.dropFirst(7))
        #expect(AdvertisingLint.check(Self.beacon(unlisted)).contains { $0.rule.id == "eddystone-frame" && $0.detail.contains("0xFEAA") })
        // The UID without its 2 reserved bytes (the decoder takes it, the specification does not).
        var shortUID = Array(uid.dropLast(2))
        shortUID[7] -= 2
        #expect(Self.failed(Self.beacon(shortUID)).contains("eddystone-frame"))
        // An unknown frame type.
        let unknown = Array(uid.prefix(7)) + [0x04, 0x16, 0xAA, 0xFE, 0x50]
        #expect(Self.failed(Self.beacon(unknown)).contains("eddystone-frame"))
        // A TLM of 13 bytes.
        let tlm = try EddystoneFrame.telemetry(batteryMillivolts: 3000, temperature: 22, advertisingCount: 1, uptimeTenths: 1).advertisingData()
        var shortTLM = Array(tlm.dropLast())
        shortTLM[7] -= 1
        #expect(Self.failed(Self.beacon(shortTLM)).contains("eddystone-frame"))
        #expect(!Self.failed(Self.beacon(tlm)).contains("eddystone-frame"))
        #expect(!Self.failed(Self.beacon(uid)).contains("eddystone-frame"))
    }
}
