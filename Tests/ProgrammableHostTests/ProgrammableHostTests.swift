import BlemuCentral
import BlemuChannels
import BlemuConnection
import BlemuCore
import BlemuGATT
import BlemuHCI
import BlemuL2CAP
import BlemuProgrammableHost
import BlemuSimulator
import Foundation
import Logging
import Testing

/// The programmable host on a scripted controller: what each request sends the controller, and
/// the events the controller's answers become.
final class HostBench {
    let scheduler = ManualScheduler()
    let controller = SimulatedController()
    let host: ProgrammableHost
    var events: [HostEvent] = []
    let peer = BluetoothAddress("C4:11:22:33:44:55")!
    let stateDirectory: String

    init(extended: Bool = true, coded: Bool = true, stateDirectory: String? = nil) throws {
        controller.extendedAdvertisingSets = extended ? 4 : 0
        if coded { controller.otherLEFeatures = 1 << 11 }   // LE Coded PHY (Vol 6, Part B, 4.6)
        self.stateDirectory = stateDirectory ?? Self.temporaryDirectory()
        let controller = self.controller
        let logger = Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })
        let controllerHost = ControllerHost(controller: "scripted", scheduler: scheduler, logger: logger,
                                            output: { controller.output($0, $1) })
        host = try ProgrammableHost(on: controllerHost, stateDirectory: self.stateDirectory, logger: logger)
        host.onEvent = { [unowned self] in self.events.append($0) }
        controller.host = controllerHost.hci
        controllerHost.controllerUp()
    }

    static func temporaryDirectory() -> String {
        let path = NSTemporaryDirectory() + "blemu-phost-\(UUID().uuidString)"
        try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    /// One LE Extended Advertising Report (Vol 4, Part E, 7.7.65.13) of `peer`.
    func extendedReport(_ data: [UInt8], eventType: UInt16, primaryPHY: UInt8 = 0x01, secondaryPHY: UInt8 = 0x02, sid: UInt8 = 0x03,
                        txPower: Int8 = -7, rssi: Int8 = -40, direct: BluetoothAddress? = nil) {
        var p: [UInt8] = [0x0D, 1]
        p.appendLE(eventType)
        p += [0x01] + peer.littleEndianBytes + [primaryPHY, secondaryPHY, sid, UInt8(bitPattern: txPower), UInt8(bitPattern: rssi)]
        p += [0, 0] + [direct == nil ? 0x00 : 0x01] + (direct?.littleEndianBytes ?? [UInt8](repeating: 0, count: 6))
        p += [UInt8(data.count)] + data
        controller.event(0x3E, p)
    }

    /// LE Advertising Report (7.7.65.2).
    func legacyReport(_ data: [UInt8], type: UInt8, rssi: Int8 = -50) {
        controller.event(0x3E, [0x02, 1, type, 0x01] + peer.littleEndianBytes + [UInt8(data.count)] + data + [UInt8(bitPattern: rssi)])
    }

    /// Connects to `peer` and returns the `connected` event's link summary.
    func connect(handle: UInt16 = 0x0040, own: AddressType = .randomDevice) throws -> HostLinkSummary {
        let attempt = try host.connect(HostConnectRequest(peer: peer, peerAddressType: .randomDevice, ownAddressType: own))
        controller.centralConnected(handle: handle, peer: peer)
        guard case .connected(let link)? = events.last else {
            Issue.record("no connected event: \(events)")
            throw HostError(nil, "not connected")
        }
        #expect(link.attempt == attempt)
        return link
    }

    var lastAdvertisement: AdvertisingReportDetails? {
        for event in events.reversed() { if case .advertisement(_, let report) = event { return report } }
        return nil
    }
}

@Suite struct ProgrammableHostScanTests {
    /// Scanning_PHYs 0x05 (LE 1M and LE Coded) with the per-PHY fields once each, in that order
    /// (Vol 4, Part E, 7.8.64), from the own address type asked for.
    @Test func aScanOnBothPHYsGivesEachItsParametersInExtendedScanParameters() throws {
        let b = try HostBench()
        var scan = HostScanRequest()
        scan.phys = [.oneM, .coded]
        scan.ownAddressType = .randomDevice
        scan.intervalMilliseconds = 100
        scan.windowMilliseconds = 50
        let id = try b.host.startScan(scan)
        #expect(id == 1)
        // 100 ms = 160 units (0x00A0), 50 ms = 80 (0x0050).
        #expect(b.controller.commands(HCIOpcode.leSetExtendedScanParameters).last?.parameters
                == [0x01, 0x00, 0x05, 0x01, 0xA0, 0x00, 0x50, 0x00, 0x01, 0xA0, 0x00, 0x50, 0x00])
        #expect(b.controller.commands(HCIOpcode.leSetExtendedScanEnable).last?.parameters.first == 1)
    }

    /// The default (no PHYs given) keeps the one-PHY form every caller had.
    @Test func theDefaultScanIsOnLE1MAlone() throws {
        let b = try HostBench()
        var scan = HostScanRequest()
        scan.passive = true
        _ = try b.host.startScan(scan)
        // Passive (0x00), public (the controller has a public address), LE 1M, 60 ms and 30 ms.
        #expect(b.controller.commands(HCIOpcode.leSetExtendedScanParameters).last?.parameters == [0x00, 0x00, 0x01, 0x00, 0x60, 0x00, 0x30, 0x00])
    }

    /// LE Coded is refused, with nothing sent, where it cannot be had: a controller on the
    /// legacy commands (no PHYs in LE Set Scan Parameters), or one without the feature.
    @Test func aCodedScanIsRefusedWhereTheControllerCannotDoIt() throws {
        for (extended, coded) in [(false, true), (true, false)] {
            let b = try HostBench(extended: extended, coded: coded)
            var scan = HostScanRequest()
            scan.phys = [.coded]
            #expect(throws: HostError.self) { try b.host.startScan(scan) }
            #expect(b.controller.commands(HCIOpcode.leSetExtendedScanParameters).isEmpty)
            #expect(b.controller.commands(HCIOpcode.leSetScanParameters).isEmpty)
            #expect(b.host.scan == nil)
        }
    }

    /// Every field of an extended report reaches the event: the event type's bits, SID, both
    /// PHYs, TX power, RSSI and the direct address (7.7.65.13).
    @Test func anExtendedReportBecomesAnAdvertisementWithEveryField() throws {
        let b = try HostBench()
        var both = HostScanRequest()
        both.phys = [.oneM, .coded]
        let id = try b.host.startScan(both)
        let target = BluetoothAddress("C0:AA:BB:CC:DD:EE")!
        // 0x0005: connectable, directed, extended PDUs, complete.
        b.extendedReport([0x02, 0x01, 0x06], eventType: 0x0005, primaryPHY: 0x03, secondaryPHY: 0x03, sid: 9, direct: target)
        guard case .advertisement(let scan, let report)? = b.events.last else { Issue.record("no advertisement: \(b.events)"); return }
        #expect(scan == id)
        #expect(report.address == b.peer && report.addressType == 0x01)
        #expect(!report.isLegacy && report.isConnectable && !report.isScannable && report.isDirected && !report.isScanResponse)
        #expect(!report.isTruncated && report.sid == 9 && report.primaryPHY == 0x03 && report.secondaryPHY == 0x03)
        #expect(report.txPower == -7 && report.rssi == -40 && report.periodicInterval == nil)
        #expect(report.directAddress == target && report.directAddressType == 0x01 && report.data == [0x02, 0x01, 0x06])
    }

    /// A report the controller truncated (Data_Status 0x02) is reported, marked, with what came.
    @Test func aTruncatedReportIsReportedMarkedWithWhatCame() throws {
        let b = try HostBench()
        _ = try b.host.startScan(HostScanRequest())
        b.extendedReport([0x11, 0x22], eventType: 0x0020)   // incomplete, more to come
        #expect(b.events.isEmpty)
        b.extendedReport([0x33], eventType: 0x0040)         // truncated
        let report = try #require(b.lastAdvertisement)
        #expect(report.isTruncated && report.data == [0x11, 0x22, 0x33])
    }

    /// `legacy` scans report only legacy PDUs; legacy reports say what their type implies, with
    /// no SID and no secondary PHY.
    @Test func aLegacyScanReportsOnlyLegacyPDUs() throws {
        let b = try HostBench()
        var scan = HostScanRequest()
        scan.legacyOnly = true
        _ = try b.host.startScan(scan)
        b.extendedReport([0x02, 0x01, 0x06], eventType: 0x0001)   // extended, connectable
        #expect(b.events.isEmpty)
        b.extendedReport([0x02, 0x01, 0x06], eventType: 0x001B, secondaryPHY: 0, sid: 0xFF)   // legacy SCAN_RSP to ADV_IND
        let report = try #require(b.lastAdvertisement)
        #expect(report.isLegacy && report.isScanResponse && report.isScannable && report.sid == nil && report.secondaryPHY == nil)
        // On a legacy controller: LE Advertising Report, ADV_SCAN_IND (0x02).
        let legacy = try HostBench(extended: false)
        _ = try legacy.host.startScan(scan)
        legacy.legacyReport([0x02, 0x01, 0x06], type: 0x02)
        let scannable = try #require(legacy.lastAdvertisement)
        #expect(scannable.isLegacy && scannable.isScannable && !scannable.isConnectable && scannable.rssi == -50)
    }

    /// A scan on LE Coded alone reports no PDU from LE 1M, whatever the controller hands over.
    @Test func aScanReportsOnlyThePrimaryPHYsItIsOn() throws {
        let b = try HostBench()
        var scan = HostScanRequest()
        scan.phys = [.coded]
        _ = try b.host.startScan(scan)
        b.extendedReport([0x02, 0x01, 0x06], eventType: 0x0013, primaryPHY: 0x01, secondaryPHY: 0, sid: 0xFF)   // legacy ADV_IND
        b.extendedReport([0x02, 0x01, 0x06], eventType: 0x0001, primaryPHY: 0x01)
        #expect(b.events.isEmpty)
        b.extendedReport([0x02, 0x01, 0x06], eventType: 0x0001, primaryPHY: 0x03)
        #expect(b.lastAdvertisement?.primaryPHY == 0x03)
    }

    /// A new scan replaces the running one, which is told stopped; a stopped scan is unknown.
    @Test func aNewScanReplacesTheRunningOneAndAStoppedOneIsUnknown() throws {
        let b = try HostBench()
        let first = try b.host.startScan(HostScanRequest())
        let second = try b.host.startScan(HostScanRequest())
        #expect(second == first + 1)
        #expect(b.events == [.scanStopped(scan: first, reason: .replaced)])
        #expect(throws: HostError(.unknownScan, "no scan 1 is running; the running scan is 2")) { try b.host.stopScan(first) }
        try b.host.stopScan(second)
        #expect(b.events.last == .scanStopped(scan: second, reason: .requested))
        #expect(b.controller.commands(HCIOpcode.leSetExtendedScanEnable).last?.parameters.first == 0)
        b.extendedReport([0x02, 0x01, 0x06], eventType: 0x0001)
        #expect(b.lastAdvertisement == nil)
    }
}

@Suite struct ProgrammableHostLinkTests {
    /// LE Extended Create Connection names the peer's type and our own as asked (7.8.66).
    @Test func connectSendsThePeerAndOwnAddressTypesAskedFor() throws {
        let b = try HostBench()
        _ = try b.host.connect(HostConnectRequest(peer: b.peer, peerAddressType: .publicIdentity, ownAddressType: .randomDevice))
        let parameters = try #require(b.controller.commands(HCIOpcode.leExtendedCreateConnection).last?.parameters)
        #expect(Array(parameters.prefix(3)) == [0x00, 0x01, 0x02])
        #expect(Array(parameters[3..<9]) == b.peer.littleEndianBytes)
    }

    /// The link gets an id of its own, never reused: the next link on the same HCI handle is a
    /// new id, and the old id is unknown.
    @Test func linkIdsAreNeverReusedThoughHandlesAre() throws {
        let b = try HostBench()
        b.controller.completesDisconnects = true
        let first = try b.connect()
        #expect(first.link == 1 && first.role == .central && first.handle == 0x0040)
        #expect(first.ownAddress == LEAddress(b.host.randomAddress.address, isRandom: true))
        #expect(throws: HostError.self) {
            _ = try b.host.connect(HostConnectRequest(peer: b.peer, peerAddressType: .randomDevice))
        }
        try b.host.disconnect(link: first.link, reason: 0x13)
        b.controller.disconnect(handle: 0x0040, reason: 0x16)
        #expect(b.events.last == .disconnected(link: 1, reason: 0x16))
        #expect(b.host.links.count == 0)
        let second = try b.connect(handle: 0x0040, own: .publicDevice)
        #expect(second.link == 2 && second.ownAddress == LEAddress(b.controller.address, isRandom: false))
        #expect(throws: HostError(.unknownLink, "no link 1 is open")) { try b.host.disconnect(link: 1, reason: 0x13) }
    }

    /// A second attempt while one is under way is busy; one that nothing answers is cancelled
    /// at its timeout (LE Create Connection Cancel, 7.8.13) and told `timeout`.
    @Test func anAttemptTimesOutAndASecondMeanwhileIsBusy() throws {
        let b = try HostBench()
        let attempt = try b.host.connect(HostConnectRequest(peer: b.peer, peerAddressType: .randomDevice, timeout: .milliseconds(500)))
        #expect(throws: HostError.self) {
            _ = try b.host.connect(HostConnectRequest(peer: BluetoothAddress(value: 7), peerAddressType: .publicDevice))
        }
        b.scheduler.advance(by: .milliseconds(500))
        #expect(b.controller.commands(HCIOpcode.leCreateConnectionCancel).count == 1)
        b.controller.centralConnected(handle: 0, peer: b.peer, status: 0x02)
        #expect(b.events == [.connectFailed(attempt: attempt, reason: .timeout, status: nil)])
        #expect(b.host.attempt == nil)
    }

    /// The controller's refusal comes with its status.
    @Test func aRefusedAttemptCarriesTheControllersStatus() throws {
        let b = try HostBench()
        b.controller.failures[HCIOpcode.leExtendedCreateConnection] = HCIStatus.commandDisallowed
        let attempt = try b.host.connect(HostConnectRequest(peer: b.peer, peerAddressType: .randomDevice))
        #expect(b.events == [.connectFailed(attempt: attempt, reason: .controller, status: HCIStatus.commandDisallowed)])
    }
}

@Suite struct ProgrammableHostResetTests {
    /// A reset stops the scan, closes the links and calls off the attempt; it is told done only
    /// once the last link is gone, with a new random address set and kept.
    @Test func resetIsToldOnceEveryLinkClosedWithANewRandomAddress() throws {
        let b = try HostBench()
        let link = try b.connect()
        let scan = try b.host.startScan(HostScanRequest())
        let before = b.host.randomAddress.address
        b.events.removeAll()
        try b.host.reset()
        #expect(b.events == [.scanStopped(scan: scan, reason: .reset)])
        #expect(b.controller.commands(HCIOpcode.disconnect).last?.parameters == [0x40, 0x00, 0x13])
        // Nothing new while it runs.
        #expect(throws: HostError.self) { _ = try b.host.startScan(HostScanRequest()) }
        b.controller.disconnect(handle: 0x0040, reason: 0x16)
        #expect(b.events.suffix(2) == [.disconnected(link: link.link, reason: 0x16), .reset])
        let after = b.host.randomAddress.address
        #expect(after != before && after.isValidStaticRandom)
        #expect(b.controller.commands(HCIOpcode.leSetRandomAddress).last?.parameters == after.littleEndianBytes)
        let stored = try String(contentsOfFile: b.stateDirectory + "/host-random-address", encoding: .utf8)
        #expect(stored == after.description + "\n")
        _ = try b.host.startScan(HostScanRequest())
    }

    /// An attempt under way is called off and told `stopped`; with nothing else open the reset
    /// is done once the controller ends the attempt.
    @Test func resetCallsOffTheAttempt() throws {
        let b = try HostBench()
        let attempt = try b.host.connect(HostConnectRequest(peer: b.peer, peerAddressType: .randomDevice))
        try b.host.reset()
        #expect(b.controller.commands(HCIOpcode.leCreateConnectionCancel).count == 1)
        #expect(b.events.isEmpty)
        b.controller.centralConnected(handle: 0, peer: b.peer, status: 0x02)
        #expect(b.events == [.connectFailed(attempt: attempt, reason: .stopped, status: nil), .reset])
    }

    /// A link that does not close still lets the reset finish after its patience.
    @Test func resetFinishesAfterItsPatienceWhenALinkStaysOpen() throws {
        let b = try HostBench()
        _ = try b.connect()
        try b.host.reset()
        #expect(!b.events.contains(.reset))
        b.scheduler.advance(by: ProgrammableHost.resetPatience)
        #expect(b.events.last == .reset)
        #expect(!b.host.isResetting)
    }
}

@Suite struct HostRandomAddressTests {
    /// Made once per state directory and kept; a file that holds no static random address (a
    /// public one, text, a huge file, a directory) is replaced, never trusted.
    @Test func theRandomAddressIsKeptPerStateDirectoryAndABadFileIsReplaced() throws {
        let directory = HostBench.temporaryDirectory()
        let logger = Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })
        let first = HostRandomAddress(stateDirectory: directory, logger: logger)
        #expect(first.address.isValidStaticRandom)
        #expect(HostRandomAddress(stateDirectory: directory, logger: logger).address == first.address)
        let path = directory + "/" + HostRandomAddress.fileName
        for bad in ["00:11:22:33:44:55\n", "hello", String(repeating: "C0:", count: 100)] {
            try bad.write(toFile: path, atomically: true, encoding: .utf8)
            let made = HostRandomAddress(stateDirectory: directory, logger: logger)
            #expect(made.address.isValidStaticRandom && made.address != first.address)
            #expect(try String(contentsOfFile: path, encoding: .utf8) == made.address.description + "\n")
        }
        try FileManager.default.removeItem(atPath: path)
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
        #expect(HostRandomAddress(stateDirectory: directory, logger: logger).address.isValidStaticRandom)
        // Without a state directory: one per process, nothing written.
        #expect(HostRandomAddress(stateDirectory: nil, logger: logger).path == nil)
    }
}

/// The seam the peripheral side (programmed advertising) uses: a link it accepted goes into the
/// same table, with role peripheral and its advertisement, and a reset waits for it too.
@Suite struct ProgrammableHostPeripheralSeamTests {
    @Test func aPeripheralLinkIsInTheSameTableAndAResetWaitsForIt() throws {
        let b = try HostBench()
        let central = try b.connect(handle: 0x0040)
        let context = L2CAPLinkContext(hci: b.host.controller.hci, scheduler: b.scheduler,
                                       logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }))
        let peer = LEAddress(BluetoothAddress("C0:99:88:77:66:55")!, isRandom: true)
        let connection = LEConnection(link: L2CAPLink(handle: 0x0041, role: .peripheral, context: context),
                                      peer: ATTPeer(connectionHandle: 0x0041, address: peer),
                                      parameters: LinkParameters(interval: 40, latency: 2, supervisionTimeout: 500),
                                      channelServers: ChannelServers())
        let own = LEAddress(b.host.randomAddress.address, isRandom: true)
        let id = b.host.peripheralLinkOpened(connection, advertisement: 3, ownAddress: own)
        #expect(id == central.link + 1)
        guard case .connected(let summary)? = b.events.last else { Issue.record("no connected event"); return }
        #expect(summary.role == .peripheral && summary.advertisement == 3 && summary.attempt == nil)
        #expect(summary.peer == peer && summary.ownAddress == own && summary.handle == 0x0041 && summary.latency == 2)
        #expect(b.host.links.entries.map(\.role) == [.central, .peripheral])

        try b.host.disconnect(link: id, reason: 0x13)
        #expect(b.controller.commands(HCIOpcode.disconnect).last?.parameters == [0x41, 0x00, 0x13])
        try b.host.reset()
        b.controller.disconnect(handle: 0x0040, reason: 0x16)
        #expect(b.events.last == .disconnected(link: central.link, reason: 0x16))
        b.host.peripheralLinkClosed(handle: 0x0041, reason: 0x16)
        #expect(b.events.suffix(2) == [.disconnected(link: id, reason: 0x16), .reset])
        // A second close of it is nothing.
        b.host.peripheralLinkClosed(handle: 0x0041, reason: 0x16)
        #expect(b.events.last == .reset)
    }

    /// The reset steps (the peripheral and security sides' parts) run when a reset begins.
    @Test func theResetStepsRunWhenAResetBegins() throws {
        let b = try HostBench()
        var ran = 0
        b.host.addResetStep { ran += 1 }
        try b.host.reset()
        #expect(ran == 1 && b.events == [.reset])
    }
}
