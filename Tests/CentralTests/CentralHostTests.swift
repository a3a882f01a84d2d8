import BlemuATT
import BlemuCentral
import BlemuCore
import BlemuGATTClient
import BlemuHCI
import BlemuSimulator
import BlemuL2CAP
import Logging
import Testing
@testable import HostTestSupport

@Suite struct CentralScanningTests {
    @Test func extendedScanningMergesAdvertisingDataAndScanResponse() throws {
        let b = try CentralBench(extended: true)
        b.host.startScanning(active: true)
        #expect(b.controller.commands(HCIOpcode.leSetExtendedScanParameters).first?.parameters == [0x00, 0x00, 0x01, 0x01, 0x60, 0x00, 0x30, 0x00])
        #expect(b.controller.commands(HCIOpcode.leSetExtendedScanEnable).last?.parameters.first == 1)
        #expect(b.controller.commands(HCIOpcode.leSetScanEnable).isEmpty)
        b.extendedReport(nameData, scanResponse: false)
        // Service Data for 0x181A (Core Supplement, Part A, 1.11) in the scan response.
        b.extendedReport(servicesData + [0x05, 0x16, 0x1A, 0x18, 0xAA, 0xBB], scanResponse: true)
        b.extendedReport(nameData, scanResponse: false, rssi: -60)
        #expect(b.advertisements.map(\.1) == [.new, .content, .rssi])
        let last = try #require(b.advertisements.last?.0)
        #expect(last.name == "Test" && last.services == [BluetoothUUID(0x180D), BluetoothUUID(0x180F)])
        #expect(last.rssi == -60 && last.isConnectable && last.txPower == nil)
        #expect(last.serviceData.map(\.uuid) == [BluetoothUUID(0x181A)] && last.serviceData.first?.data == [0xAA, 0xBB])
        b.host.stopScanning()
        #expect(b.controller.commands(HCIOpcode.leSetExtendedScanEnable).last?.parameters.first == 0)
    }

    /// An advertiser in extended PDUs whose data the controller reports in two fragments
    /// (0x0021: connectable, Data_Status 0x01; then 0x0001, complete; 7.7.65.13) is seen once,
    /// with the data whole and marked extended; before the fix only the last fragment was kept.
    @Test func extendedReportsInFragmentsAreSeenOnceWhole() throws {
        let b = try CentralBench(extended: true)
        b.host.startScanning(active: true)
        let tail = [UInt8](repeating: 0x77, count: 40)
        b.extendedReport(nameData + [0x29, 0xFF] + [UInt8](repeating: 0x66, count: 200), scanResponse: false, eventType: 0x0021)
        #expect(b.advertisements.isEmpty)
        b.extendedReport(tail, scanResponse: false, eventType: 0x0001)
        let seen = try #require(b.advertisements.last?.0)
        #expect(b.advertisements.count == 1)
        #expect(seen.advertisingData.count == nameData.count + 202 + 40 && seen.advertisingData.suffix(40) == tail[...])
        #expect(seen.usesExtendedPDUs && seen.isConnectable)
        b.extendedReport(nameData, scanResponse: false)
        #expect(b.advertisements.last?.0.usesExtendedPDUs == false)
    }

    @Test func legacyControllerGetsLegacyCommands() throws {
        let b = try CentralBench(extended: false)
        b.host.startScanning(active: false)
        #expect(b.controller.commands(HCIOpcode.leSetScanParameters).first?.parameters.first == 0x00)
        #expect(b.controller.commands(HCIOpcode.leSetScanEnable).last?.parameters == [1, 0])
        #expect(b.controller.commands(HCIOpcode.leSetExtendedScanParameters).isEmpty)
        b.legacyReport(nameData, type: 0x03)   // ADV_NONCONN_IND
        #expect(b.advertisements.first?.0.name == "Test")
        #expect(b.advertisements.first?.0.isConnectable == false)
    }

    /// A controller that lists LE Extended Advertising but answers LE Set Extended Scan
    /// Parameters with Unknown HCI Command (0x01) never ran it: the central scans with the
    /// legacy commands instead of giving up, and no extended enable goes out before them.
    @Test func extendedScanParametersUnknownToTheControllerFallBackToLegacyScanning() throws {
        let b = try CentralBench(extended: true)
        b.controller.failures[HCIOpcode.leSetExtendedScanParameters] = HCIStatus.unknownCommand
        var errors: [String] = []
        b.host.onError = { errors.append($0) }
        b.host.startScanning(active: true)
        #expect(errors.isEmpty)
        #expect(b.controller.commands(HCIOpcode.leSetExtendedScanEnable).isEmpty)
        #expect(b.controller.commands(HCIOpcode.leSetScanParameters).count == 1)
        #expect(b.controller.commands(HCIOpcode.leSetScanEnable).last?.parameters == [1, 0])
        b.legacyReport(nameData, type: 0x00)   // ADV_IND
        #expect(b.advertisements.first?.0.name == "Test")
    }

    /// Any other refusal of the scan parameters is the controller's answer: reported, no fallback.
    @Test func scanParametersRefusedForAnotherReasonAreReported() throws {
        let b = try CentralBench(extended: true)
        b.controller.failures[HCIOpcode.leSetExtendedScanParameters] = HCIStatus.commandDisallowed
        var errors: [String] = []
        b.host.onError = { errors.append($0) }
        b.host.startScanning(active: true)
        #expect(errors == ["the controller refused the scan parameters (HCI status 0x0c)"])
        #expect(b.controller.commands(HCIOpcode.leSetScanParameters).isEmpty)
        #expect(b.controller.commands(HCIOpcode.leSetExtendedScanEnable).isEmpty)
    }

    /// LE Extended Create Connection unknown to the controller: the connection is made with LE
    /// Create Connection, and the attempt completes.
    @Test func extendedCreateConnectionUnknownToTheControllerConnectsWithTheLegacyCommand() throws {
        let b = try CentralBench(extended: true)
        b.controller.failures[HCIOpcode.leExtendedCreateConnection] = HCIStatus.unknownCommand
        let link = try b.connect()
        #expect(link.peer.address == b.peer)
        #expect(b.controller.commands(HCIOpcode.leCreateConnection).count == 1)
    }

    /// Extended reports in fragments (Data_Status 0x01 then 0x00, Vol 4, Part E, 7.7.65.13) are
    /// recorded once whole; a truncated train (0x02) is dropped; an extended report without the
    /// legacy bit marks the advertiser as using extended PDUs.
    @Test func fragmentedExtendedReportsAreJoinedBeforeTheyAreRecorded() {
        var table = AdvertiserTable()
        let address = BluetoothAddress(value: 1)
        let first = [UInt8](repeating: 0x11, count: 229), last: [UInt8] = [0x22, 0x22]
        #expect(table.reassemble(address: address, isScanResponse: false, dataStatus: 0x01, data: first) == nil)
        #expect(table.reassemble(address: address, isScanResponse: false, dataStatus: 0x00, data: last) == first + last)
        #expect(table.reassemble(address: address, isScanResponse: false, dataStatus: 0x00, data: last) == last)
        #expect(table.reassemble(address: address, isScanResponse: false, dataStatus: 0x01, data: first) == nil)
        #expect(table.reassemble(address: address, isScanResponse: false, dataStatus: 0x02, data: last) == nil)
        #expect(table.reassemble(address: address, isScanResponse: false, dataStatus: 0x00, data: last) == last)
        let (extended, _) = table.record(address: address, addressType: 1, rssi: nil, connectable: true, isScanResponse: false,
                                         data: nameData, extendedPDUs: true, now: 1)
        #expect(extended.usesExtendedPDUs)
        let (legacy, _) = table.record(address: address, addressType: 1, rssi: nil, connectable: true, isScanResponse: false,
                                       data: nameData, now: 2)
        #expect(!legacy.usesExtendedPDUs)
    }

    /// A crowded room cannot grow the table past its capacity: the one heard longest ago goes.
    @Test func theAdvertiserTableIsBounded() {
        var table = AdvertiserTable(capacity: 3)
        for index in 0..<5 {
            table.record(address: BluetoothAddress(value: UInt64(index)), addressType: 1, rssi: -50, connectable: true,
                         isScanResponse: false, data: nameData, now: UInt64(index))
        }
        #expect(table.entries.count == 3)
        #expect(Set(table.entries.keys) == Set((2..<5).map { BluetoothAddress(value: UInt64($0)) }))
        // Undecodable data is kept raw, with no content.
        let (bad, _) = table.record(address: BluetoothAddress(value: 9), addressType: 1, rssi: nil, connectable: true,
                                    isScanResponse: false, data: [0x09, 0x09], now: 9)
        #expect(bad.content == nil && bad.advertisingData == [0x09, 0x09] && bad.name == "")
    }
}

@Suite struct CentralConnectingTests {
    /// A report naming a resolved identity (Address_Type 0x02, Vol 4, Part E, 7.7.65.2) is shown
    /// as one, and a connection to that advertiser names it with Peer_Address_Type 0x00 (public,
    /// 7.8.12): the advertiser is one `LEAddress`, the reported type kept for the scan only.
    @Test func aResolvedIdentityIsShownAsOneAndConnectedWithItsType() throws {
        let b = try CentralBench(extended: false)
        b.host.startScanning()
        let identity = BluetoothAddress("00:1B:DC:01:02:03")!
        b.controller.event(0x3E, [0x02, 1, 0x00, 0x02] + identity.littleEndianBytes + [UInt8(nameData.count)] + nameData + [0xCE])
        let heard = try #require(b.advertisements.last?.0)
        #expect(heard.advertiser == LEAddress(identity, isRandom: false))
        #expect(heard.addressTypeName == "public-identity")
        var result: Result<CentralLink, CentralError>?
        b.host.connect(to: heard.advertiser) { result = $0 }
        let command = try #require(b.controller.commands(HCIOpcode.leCreateConnection).last)
        #expect(Array(command.parameters[5...11]) == [0x00] + identity.littleEndianBytes)
        b.controller.centralConnected(handle: 0x0040, peer: identity)
        #expect(try result?.get().handle == 0x0040)
    }

    @Test func aConnectionThatDoesNotComeIsCancelledAfterTheTimeout() throws {
        let b = try CentralBench(extended: true)
        b.host.startScanning()
        var result: Result<CentralLink, CentralError>?
        b.host.connect(to: LEAddress(b.peer, isRandom: true), timeout: .seconds(5)) { result = $0 }
        #expect(b.controller.commands(HCIOpcode.leExtendedCreateConnection).count == 1)
        // Scanning paused while initiating.
        #expect(b.controller.commands(HCIOpcode.leSetExtendedScanEnable).last?.parameters.first == 0)
        var busy: Result<CentralLink, CentralError>?
        b.host.connect(to: LEAddress(b.peer, isRandom: true)) { busy = $0 }
        #expect(busy.map { if case .failure(.busy) = $0 { true } else { false } } == true)
        b.scheduler.advance(by: .seconds(5))
        #expect(b.controller.commands(HCIOpcode.leCreateConnectionCancel).count == 1)
        #expect(result == nil)
        // 7.8.13: the cancelled attempt ends with LE Connection Complete, Unknown Connection Identifier.
        b.controller.centralConnected(handle: 0, peer: b.peer, status: 0x02)
        #expect(result.map { if case .failure(.timeout) = $0 { true } else { false } } == true)
        // Scanning comes back.
        #expect(b.controller.commands(HCIOpcode.leSetExtendedScanEnable).last?.parameters.first == 1)
    }

    @Test func theGATTClientRunsOverTheLink() throws {
        let b = try CentralBench(extended: false, twoMegabit: true)
        let link = try b.connect()
        #expect(b.controller.commands(HCIOpcode.leCreateConnection).count == 1)
        // Longer packets and LE 2M asked for, as the controller allows.
        #expect(b.controller.commands(HCIOpcode.leSetDataLength).count == 1)
        #expect(b.controller.commands(HCIOpcode.leSetPHY).first?.parameters == [0x40, 0x00, 0x00, 0x02, 0x02, 0x00, 0x00])
        var value: Result<[UInt8], GATTClientError>?
        link.client.read(0x0003) { value = $0 }
        #expect(b.controller.takeL2CAP(handle: 0x40, cid: L2CAPChannel.att) == [[0x0A, 0x03, 0x00]])
        b.controller.sendL2CAP(handle: 0x40, cid: L2CAPChannel.att, [0x0B, 0x42])
        #expect(try value?.get() == [0x42])
        // The peer discovering us gets our GAP service.
        b.controller.sendL2CAP(handle: 0x40, cid: L2CAPChannel.att, [0x10, 0x01, 0x00, 0xFF, 0xFF, 0x00, 0x28])
        let answer = try #require(b.controller.takeL2CAP(handle: 0x40, cid: L2CAPChannel.att).first)
        #expect(answer.prefix(2) == [0x11, 0x06] && answer[6...7] == [0x00, 0x18])
        // Closing the link ends what was waiting.
        var pending: Result<[UInt8], GATTClientError>?
        var reason: UInt8?
        link.onDisconnected = { reason = $0 }
        link.client.read(0x0005) { pending = $0 }
        b.controller.disconnect(handle: 0x40, reason: 0x13)
        #expect(pending?.error == .disconnected && reason == 0x13 && !link.isOpen)
        #expect(b.host.links.isEmpty)
    }

    /// Vol 3, Part A, 4.20: the central accepts parameters the Core allows, and updates the link.
    @Test func connectionParameterUpdateRequestsAreAnsweredByTheRules() throws {
        let b = try CentralBench(extended: false)
        _ = try b.connect()
        #expect(b.controller.commands(HCIOpcode.leSetPHY).isEmpty)
        var request: [UInt8] = [0x12, 0x07, 0x08, 0x00]
        for value: UInt16 in [24, 40, 0, 400] { request.appendLE(value) }
        b.controller.sendL2CAP(handle: 0x40, cid: L2CAPChannel.leSignaling, request)
        #expect(b.controller.takeL2CAP(handle: 0x40, cid: L2CAPChannel.leSignaling) == [[0x13, 0x07, 0x02, 0x00, 0x00, 0x00]])
        #expect(b.controller.commands(HCIOpcode.leConnectionUpdate).count == 1)
        // A timeout shorter than the interval allows is rejected, and nothing is updated.
        var bad: [UInt8] = [0x12, 0x08, 0x08, 0x00]
        for value: UInt16 in [24, 3200, 0, 10] { bad.appendLE(value) }
        b.controller.sendL2CAP(handle: 0x40, cid: L2CAPChannel.leSignaling, bad)
        #expect(b.controller.takeL2CAP(handle: 0x40, cid: L2CAPChannel.leSignaling) == [[0x13, 0x08, 0x02, 0x00, 0x01, 0x00]])
        #expect(b.controller.commands(HCIOpcode.leConnectionUpdate).count == 1)
    }
}


/// Vol 3, Part F, 3.2.8 and 3.4.2.2: a link has one ATT_MTU, whichever side exchanged it. The
/// central's own small server must use the ATT_MTU its client negotiated, and the other way round.
@Suite struct CentralLinkMTUTests {
    @Test func theServerUsesTheMTUTheClientNegotiated() throws {
        let b = try CentralBench(extended: false)
        let link = try b.connect()
        var negotiated: Result<Int, GATTClientError>?
        link.client.exchangeMTU(517) { negotiated = $0 }
        #expect(b.controller.takeL2CAP(handle: 0x40, cid: L2CAPChannel.att) == [[0x02, 0x05, 0x02]])
        b.controller.sendL2CAP(handle: 0x40, cid: L2CAPChannel.att, [0x03, 0x05, 0x02])
        #expect(try negotiated?.get() == 517)
        // A 39-byte Read Multiple Request (Vol 3, Part F, 3.4.4.7) from the peripheral, past the
        // default 23: our server answers it at ATT_MTU 517, not with Invalid PDU.
        var request: [UInt8] = [0x0E]
        for _ in 0..<19 { request.appendLE(UInt16(0x0003)) }
        #expect(request.count == 39)
        b.controller.sendL2CAP(handle: 0x40, cid: L2CAPChannel.att, request)
        let answer = try #require(b.controller.takeL2CAP(handle: 0x40, cid: L2CAPChannel.att).first)
        #expect(answer.first == 0x0F, "answered \(Hex.bytes(answer))")
        #expect(answer.count > 23, "the response fills the negotiated ATT_MTU, not the default")
    }

    @Test func theClientUsesTheMTUThePeerExchangedWithOurServer() throws {
        let b = try CentralBench(extended: false)
        let link = try b.connect()
        b.controller.sendL2CAP(handle: 0x40, cid: L2CAPChannel.att, [0x02, 0x64, 0x00])
        #expect(b.controller.takeL2CAP(handle: 0x40, cid: L2CAPChannel.att) == [[0x03, 0x05, 0x02]])
        #expect(link.client.mtu == 100)
        // A 64-byte write now goes as one Write Request, not as prepared writes at ATT_MTU 23.
        link.client.write(0x0003, [UInt8](repeating: 0x41, count: 64)) { _ in }
        #expect(b.controller.takeL2CAP(handle: 0x40, cid: L2CAPChannel.att).map { $0.prefix(3) } == [[0x12, 0x03, 0x00]])
    }
}
