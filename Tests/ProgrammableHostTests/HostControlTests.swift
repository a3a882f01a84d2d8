import BlemuCentral
import BlemuControl
import BlemuCore
@testable import BlemuHCI
import BlemuProgrammableHost
import Logging
import Testing

/// The host's replies and event lines as a program reads them: every field by its documented
/// name (Docs/CONTROL.md, "The programmable host"), and a socket without a host refusing `host`.
@Suite struct HostControlTests {
    @Test func anAdvertisementEventCarriesEveryDocumentedField() {
        var report = ExtendedAdvertisingReport(eventType: 0x0007, addressType: 0x01, address: BluetoothAddress("C0:11:22:33:44:55")!,
                                               txPower: -4, rssi: -60, data: [0x02, 0x01, 0x06], advertisingSID: 2, periodicInterval: 80)
        report.primaryPHY = 0x03
        report.secondaryPHY = 0x02
        report.directAddressType = 0x00
        report.directAddress = BluetoothAddress("00:AA:BB:CC:DD:EE")!
        let event = HostEvent.advertisement(scan: 4, AdvertisingReportDetails(extended: report, data: report.data, truncated: false))
        #expect(JSONValue.object(HostControl.members(event)).encoded
                == #"{"event":"advertisement","device":"host","scan":4,"address":"C0:11:22:33:44:55","address_type":"random","legacy":false,"connectable":true,"scannable":true,"directed":true,"scan_response":false,"truncated":false,"sid":2,"primary_phy":"coded","secondary_phy":"2m","tx_power":-4,"rssi":-60,"periodic_interval_ms":100,"direct_address":"00:AA:BB:CC:DD:EE","direct_address_type":"public","data":"020106"}"#)
    }

    @Test func theOtherEventsCarryTheirFields() {
        let link = HostLinkSummary(link: 3, role: .central, handle: 0x40, peer: LEAddress(BluetoothAddress("C0:11:22:33:44:55")!, isRandom: true),
                                   ownAddress: LEAddress(BluetoothAddress("00:11:22:33:44:55")!, isRandom: false), attempt: 2,
                                   advertisement: nil, interval: 40, latency: 0, supervisionTimeout: 400, security: .unencrypted)
        #expect(JSONValue.object(HostControl.members(.connected(link))).encoded
                == #"{"event":"connected","device":"host","link":3,"role":"central","handle":64,"peer":"C0:11:22:33:44:55","peer_type":"random","own_address":"00:11:22:33:44:55","own_address_type":"public","attempt":2,"interval_ms":50,"latency":0,"timeout_ms":4000}"#)
        #expect(JSONValue.object(HostControl.members(.connectFailed(attempt: 2, reason: .controller, status: 0x3E))).encoded
                == #"{"event":"connect-failed","device":"host","attempt":2,"reason":"controller","status":"0x3e"}"#)
        #expect(JSONValue.object(HostControl.members(.disconnected(link: 3, reason: 0x13))).encoded
                == #"{"event":"disconnected","device":"host","link":3,"reason":"0x13"}"#)
        #expect(JSONValue.object(HostControl.members(.scanStopped(scan: 1, reason: .replaced))).encoded
                == #"{"event":"scan-stopped","device":"host","scan":1,"reason":"replaced"}"#)
        #expect(JSONValue.object(HostControl.members(.reset)).encoded == #"{"event":"reset","device":"host"}"#)
        // Levels of LE security mode 1 (Vol 3, Part C, 10.2.1).
        #expect(LinkSecurity().leSecurityLevel == 1)
        #expect(LinkSecurity(isEncrypted: true, encryptionKeySize: 16).leSecurityLevel == 2)
        #expect(LinkSecurity(isEncrypted: true, isAuthenticated: true, encryptionKeySize: 16).leSecurityLevel == 3)
        #expect(LinkSecurity(isEncrypted: true, isAuthenticated: true, isSecureConnections: true, encryptionKeySize: 16).leSecurityLevel == 4)
        #expect(LinkSecurity(isEncrypted: true, isAuthenticated: true, isSecureConnections: true, encryptionKeySize: 7).leSecurityLevel == 3)
    }

    /// `blemu run`'s socket has no programmable host: `host` is refused, saying what runs one.
    @Test func aSocketWithoutAHostRefusesHostRequests() {
        let control = DeviceControl(logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }), scheduler: ManualScheduler()) { [] }
        let reply = control.reply(to: Array(#"{"id":3,"cmd":"host","op":"address"}"#.utf8)[...], client: 1)
        #expect(reply.contains(#""id":3"#) && reply.contains(#""ok":false"#) && reply.contains("blemu host --controller"))
    }

    /// A refusal by the host carries its code; what the reply says when it is taken.
    @Test func aHostRefusalCarriesItsCode() throws {
        let bench = try HostBench()
        let control = HostControl(host: bench.host, logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }))
        #expect(control.execute(.disconnect(link: 5, reason: 0x13), id: 9, client: 1).encoded
                == #"{"id":9,"ok":false,"error":"no link 5 is open","code":"unknown-link"}"#)
        #expect(control.execute(.scan(HostScanRequest()), id: 10, client: 1).encoded == #"{"id":10,"ok":true,"scan":1}"#)
        let address = control.execute(.address, id: 11, client: 1).encoded
        #expect(address.hasPrefix(#"{"id":11,"ok":true,"address":"06:05:04:03:02:01","address_type":"public","random_address":""#))
        #expect(control.execute(.links, id: 12, client: 1).encoded == #"{"id":12,"ok":true,"links":[]}"#)
    }
}
