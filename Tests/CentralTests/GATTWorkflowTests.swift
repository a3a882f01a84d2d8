import BlemuATT
import BlemuCentral
import BlemuCore
import BlemuCrypto
import BlemuGATT
@testable import BlemuGATTClient
import BlemuHCI
import BlemuL2CAP
import BlemuSMP
import BlemuSecurity
import Logging
import Testing
@testable import HostTestSupport

/// The GATT workflows of a central link (`GATTWorkflow`, what `blemu gatt` runs) against a
/// scripted controller: the retry after securing, once only, and the dump's reads.
@Suite struct GATTWorkflowTests {
    static let quiet = Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })

    final class Bench {
        let central: CentralBench
        let security: CentralSecurity
        let link: CentralLink
        let workflow: GATTWorkflow
        var notes: [String] = []
        var failures: [String] = []

        init() throws {
            central = try CentralBench(extended: false)
            let own = BluetoothAddress("D0:01:02:03:04:05")!
            security = CentralSecurity(configuration: CentralSecurityConfiguration(),
                                       owner: BondOwner(device: "central", name: "blemu central", address: own),
                                       localAddress: LEAddress(own, isRandom: true), scheduler: central.scheduler, logger: GATTWorkflowTests.quiet)
            central.host.ownRandomAddress = own
            central.host.attach(security: security)
            link = try central.connect()
            workflow = GATTWorkflow(link: link, security: security, scheduler: central.scheduler, logger: GATTWorkflowTests.quiet)
            workflow.onNote = { [unowned self] in notes.append($0) }
            workflow.onFailure = { [unowned self] in failures.append($0) }
        }

        var attSent: [[UInt8]] { central.controller.takeL2CAP(handle: link.handle, cid: L2CAPChannel.att) }
        func answer(_ pdu: [UInt8]) { central.controller.sendL2CAP(handle: link.handle, cid: L2CAPChannel.att, pdu) }
        func bond() {
            let key = SMPLongTermKey(key: [UInt8](repeating: 0x42, count: 16), encryptedDiversifier: 0x1234, randomNumber: 7)
            security.bonds.save(Bond(peer: LEAddress(central.peer, isRandom: true), longTermKey: key, encryptionKeySize: 16,
                                     secureConnections: false, authenticated: true))
        }
    }

    /// Vol 3, Part C, 10.3.2: Insufficient Authentication (0x05) makes the central encrypt
    /// with its bond and send the request once more; a second refusal is the answer.
    @Test func aRequestRefusedForWantOfSecurityIsRetriedOnceAfterEncrypting() throws {
        let b = try Bench()
        b.bond()
        var result: Result<[UInt8], GATTClientError>?
        b.workflow.retryingOnSecurity({ done in b.link.client.read(0x0003, completion: done) }) { result = $0 }
        #expect(b.attSent == [[0x0A, 0x03, 0x00]])
        b.answer([0x01, 0x0A, 0x03, 0x00, 0x05])
        #expect(b.central.controller.commands(HCIOpcode.leEnableEncryption).count == 1)
        #expect(b.notes.count == 1 && b.notes[0].hasSuffix("encrypting with our bond, then trying once more"))
        #expect(result == nil)
        b.central.controller.event(0x08, [0x00, 0x40, 0x00, 0x01])   // Encryption Change, enabled
        #expect(b.notes.last?.hasPrefix("encrypted with our bond: ") == true)
        #expect(b.attSent == [[0x0A, 0x03, 0x00]], "the read, once more")
        b.answer([0x01, 0x0A, 0x03, 0x00, 0x05])
        #expect(result?.error == .att(.insufficientAuthentication, handle: 0x0003), "no second retry")
        #expect(b.central.controller.commands(HCIOpcode.leEnableEncryption).count == 1)
        #expect(b.failures.isEmpty)
    }

    /// `blemu gatt read A B` / `write A V B W`: of several requests, only those refused for want
    /// of security go again after encrypting (Vol 3, Part C, 10.3.2), once; the first answers keep.
    @Test func aBatchSendsOnlyItsRefusedRequestsAgainOnceAfterEncrypting() throws {
        let b = try Bench()
        b.bond()
        var reads: [UInt16: Result<[UInt8], GATTClientError>]?
        b.workflow.read([0x0003, 0x0005]) { reads = $0 }
        #expect(b.attSent == [[0x0A, 0x03, 0x00]], "one request at a time on the one bearer")
        b.answer([0x0B, 0x11])
        #expect(b.attSent == [[0x0A, 0x05, 0x00]])
        b.answer([0x01, 0x0A, 0x05, 0x00, 0x05])
        #expect(b.central.controller.commands(HCIOpcode.leEnableEncryption).count == 1)
        #expect(reads == nil)
        b.central.controller.event(0x08, [0x00, 0x40, 0x00, 0x01])   // Encryption Change, enabled
        #expect(b.attSent == [[0x0A, 0x05, 0x00]], "only the refused read, once more")
        b.answer([0x0B, 0x22])
        #expect(try reads?[0x0003]?.get() == [0x11] && reads?[0x0005]?.get() == [0x22])

        var writes: [UInt16: Result<Void, GATTClientError>]?
        b.workflow.write([(handle: 0x0007, value: [0x01]), (handle: 0x0009, value: [0x02])]) { writes = $0 }
        #expect(b.attSent == [[0x12, 0x07, 0x00, 0x01]])
        b.answer([0x01, 0x12, 0x07, 0x00, 0x0F])   // Insufficient Encryption: but the retry was used
        #expect(b.attSent == [[0x12, 0x09, 0x00, 0x02]])
        b.answer([0x13])
        #expect(b.attSent.isEmpty, "a workflow retries after securing once only")
        #expect(writes?[0x0007]?.error == .att(.insufficientEncryption, handle: 0x0007))
        #expect((try? writes?[0x0009]?.get()) != nil)
        #expect(b.failures.isEmpty)
    }

    /// A pairing the peer refuses ends the workflow with one line naming the link; the request's
    /// own completion is not called (the front end stops on the failure).
    @Test func aSecuringThatFailsEndsTheWorkflow() throws {
        let b = try Bench()
        var result: Result<[UInt8], GATTClientError>?
        b.workflow.retryingOnSecurity({ done in b.link.client.read(0x0003, completion: done) }) { result = $0 }
        _ = b.attSent
        b.answer([0x01, 0x0A, 0x03, 0x00, 0x0F])   // Insufficient Encryption
        #expect(b.notes.count == 1 && b.notes[0].hasSuffix("pairing, then trying once more"))
        let sent = b.central.controller.takeL2CAP(handle: b.link.handle, cid: L2CAPChannel.securityManager)
        #expect(sent.first?.first == SMPCode.pairingRequest.rawValue)
        b.central.controller.sendL2CAP(handle: b.link.handle, cid: L2CAPChannel.securityManager,
                                       SMPPairingFailed(reason: .pairingNotSupported).encoded)
        #expect(b.failures.count == 1 && b.failures[0].hasPrefix("securing the link with \(b.central.peer): "))
        #expect(result == nil)
    }

    /// A dump reads every readable value and every descriptor, in handle order, keeping each
    /// refusal's code (what a profile's permissions are made of); nothing is written.
    @Test func aDumpReadsEveryValueAndKeepsTheRefusals() throws {
        let b = try Bench()
        let readable = RemoteCharacteristic(
            characteristic: DiscoveredCharacteristic(uuid: BluetoothUUID(0x2A19), properties: [.read, .notify],
                                                     declarationHandle: 0x0010, valueHandle: 0x0011, endHandle: 0x0012),
            descriptors: [DiscoveredDescriptor(uuid: GATTType.clientConfiguration, handle: 0x0012)])
        let writeOnly = RemoteCharacteristic(
            characteristic: DiscoveredCharacteristic(uuid: BluetoothUUID(0x2A39), properties: [.write],
                                                     declarationHandle: 0x0013, valueHandle: 0x0014, endHandle: 0x0014),
            descriptors: [])
        let services = [RemoteService(service: DiscoveredService(uuid: BluetoothUUID(0x180F), handles: 0x0010...0x0014),
                                      includes: [], characteristics: [readable, writeOnly])]
        var dump: GATTWorkflow.Dump?
        b.workflow.dump(services, secureAndRetry: false) { dump = $0 }
        #expect(b.attSent == [[0x0A, 0x11, 0x00]])
        b.answer([0x0B, 0x64])
        #expect(b.attSent == [[0x0A, 0x12, 0x00]])
        b.answer([0x01, 0x0A, 0x12, 0x00, 0x05])
        #expect(b.attSent.isEmpty, "the write-only value is not read, nothing is written")
        let result = try #require(dump)
        #expect(try result.values[0x0011]?.get() == [0x64])
        #expect(result.values[0x0012]?.error == .att(.insufficientAuthentication, handle: 0x0012))
        #expect(result.values[0x0014] == nil)
        #expect(result.refusals == [0x0012: [0x05]] && result.readSecured.isEmpty)
        #expect(b.failures.isEmpty)
    }

    /// `blemu gatt dump` with a bond for the peer: what was refused for want of security is read
    /// again after encrypting with the bond, as `read` does (Vol 3, Part C, 10.3.2); without a
    /// bond the dump does not pair.
    @Test func aDumpEncryptsWithItsBondAndReadsTheRefusedValuesAgain() throws {
        let value = RemoteCharacteristic(
            characteristic: DiscoveredCharacteristic(uuid: BluetoothUUID(0x2A19), properties: [.read],
                                                     declarationHandle: 0x0010, valueHandle: 0x0011, endHandle: 0x0011),
            descriptors: [])
        let services = [RemoteService(service: DiscoveredService(uuid: BluetoothUUID(0x180F), handles: 0x0010...0x0011),
                                      includes: [], characteristics: [value])]
        let b = try Bench()
        b.bond()
        var dump: GATTWorkflow.Dump?
        b.workflow.dump(services, secureAndRetry: false) { dump = $0 }
        #expect(b.attSent == [[0x0A, 0x11, 0x00]])
        b.answer([0x01, 0x0A, 0x11, 0x00, 0x0F])   // Insufficient Encryption
        #expect(b.central.controller.commands(HCIOpcode.leEnableEncryption).count == 1)
        #expect(b.notes.first?.hasSuffix("encrypting with our bond, then trying once more") == true, "\(b.notes)")
        b.central.controller.event(0x08, [0x00, 0x40, 0x00, 0x01])   // Encryption Change, enabled
        #expect(b.attSent == [[0x0A, 0x11, 0x00]], "the refused read, once more")
        b.answer([0x0B, 0x5A])
        let result = try #require(dump)
        #expect(try result.values[0x0011]?.get() == [0x5A])
        #expect(result.refusals == [0x0011: [0x0F]] && result.readSecured[0x0011] != nil)
        #expect(b.failures.isEmpty)

        // No bond: the refusal is the answer, nothing is paired.
        let stranger = try Bench()
        var plain: GATTWorkflow.Dump?
        stranger.workflow.dump(services, secureAndRetry: false) { plain = $0 }
        _ = stranger.attSent
        stranger.answer([0x01, 0x0A, 0x11, 0x00, 0x0F])
        #expect(plain?.values[0x0011]?.error == .att(.insufficientEncryption, handle: 0x0011))
        #expect(stranger.central.controller.takeL2CAP(handle: stranger.link.handle, cid: L2CAPChannel.securityManager).isEmpty)
        #expect(stranger.notes.isEmpty)
    }

    /// `dump --profile --capture`: what a characteristic notifies is recorded for the time
    /// asked, at most `maxRecorded` values each, so a chatty peer cannot grow memory without bound.
    @Test func recordingKeepsAtMostMaxRecordedValuesPerCharacteristic() throws {
        let b = try Bench()
        let level = RemoteCharacteristic(
            characteristic: DiscoveredCharacteristic(uuid: BluetoothUUID(0x2A19), properties: [.read, .notify],
                                                     declarationHandle: 0x0010, valueHandle: 0x0011, endHandle: 0x0012),
            descriptors: [DiscoveredDescriptor(uuid: GATTType.clientConfiguration, handle: 0x0012)])
        let services = [RemoteService(service: DiscoveredService(uuid: BluetoothUUID(0x180F), handles: 0x0010...0x0012),
                                      includes: [], characteristics: [level])]
        var recorded: [UInt16: [[UInt8]]]?
        b.workflow.record(services, for: 2) { recorded = $0 }
        #expect(b.attSent == [[0x12, 0x12, 0x00, 0x01, 0x00]], "notifications on")
        b.answer([0x13])
        for index in 0..<(GATTWorkflow.maxRecorded + 6) { b.answer([0x1B, 0x11, 0x00, UInt8(index)]) }
        b.answer([0x1B, 0x05, 0x00, 0xEE])   // not a characteristic being recorded
        #expect(recorded == nil)
        b.central.scheduler.advance(by: .seconds(2))
        let values = try #require(recorded)
        #expect(Array(values.keys) == [0x0011])
        #expect(values[0x0011]?.count == GATTWorkflow.maxRecorded && values[0x0011]?.first == [0] && values[0x0011]?.last == [63])
    }

    /// `dump --profile --pair --eatt require`: the stranger pass goes first over the link as it
    /// is (the enhanced bearers wait for the securing after it); without a later securing,
    /// `require` pairs before anything is read.
    @Test func aRunThatSecuresLaterReadsAsAStrangerFirstEvenWithEATTRequired() throws {
        for securingLater in [true, false] {
            let b = try Bench()
            b.workflow.eatt = .require
            var database: [RemoteService]?
            b.workflow.prepare(securingLater: securingLater) { database = $0 }
            for _ in 0..<10 {
                guard let request = b.attSent.first else { break }
                if request.first == 0x02 { b.answer([0x03, 0x17, 0x00]); continue }   // MTU 23
                b.answer([0x01, request.first ?? 0, request.count > 1 ? request[1] : 0, request.count > 2 ? request[2] : 0, 0x0A])
            }
            let smp = b.central.controller.takeL2CAP(handle: b.link.handle, cid: L2CAPChannel.securityManager)
            if securingLater {
                #expect(database?.isEmpty == true, "the database, for the stranger's reads")
                #expect(smp.isEmpty, "no pairing before the stranger pass")
                #expect(b.notes.last?.hasPrefix("eatt: the first reads go over the unenhanced bearer") == true)
            } else {
                #expect(database == nil, "require: nothing read before securing")
                #expect(smp.first?.first == SMPCode.pairingRequest.rawValue)
            }
            #expect(b.failures.isEmpty)
        }
    }

    /// `--eatt`: a peer whose Server Supported Features (0x2B3A) lack the EATT bit (Vol 3,
    /// Part G, 7.4) is asked for no enhanced bearer: auto goes on with the one bearer, require
    /// ends the workflow with the reason.
    @Test func aPeerWithoutTheEATTBitIsAskedForNoEnhancedBearer() throws {
        for use in [EATTUse.auto, .require] {
            let b = try Bench()
            b.workflow.eatt = use
            b.central.controller.event(0x08, [0x00, 0x40, 0x00, 0x01])   // Encryption Change, enabled
            #expect(b.security.security(of: b.link.handle).isEncrypted)
            var went = false
            b.workflow.openEnhancedBearers { went = true }
            // The GATT service at 0x0005-0x0009 with Server Supported Features (value 0x0007) = 0x00.
            var read: [UInt16] = []
            for _ in 0..<10 {
                guard let request = b.attSent.first else { break }
                let start = request.count >= 3 ? UInt16(request[1]) | UInt16(request[2]) << 8 : 0
                switch request.first {
                case 0x06 where start == 0x0001: b.answer([0x07, 0x05, 0x00, 0x09, 0x00])
                case 0x08 where start == 0x0005: b.answer([0x09, 7, 0x06, 0x00, 0x02, 0x07, 0x00, 0x3A, 0x2B])
                case 0x0A:
                    read.append(start)
                    b.answer([0x0B, 0x00])
                default: b.answer([0x01, request.first ?? 0, request[1], request[2], 0x0A])   // Attribute Not Found
                }
            }
            #expect(read == [0x0007], "Server Supported Features read")
            #expect(b.central.controller.takeL2CAP(handle: b.link.handle, cid: L2CAPChannel.leSignaling).isEmpty,
                    "no Credit Based Connection Request")
            #expect(b.workflow.enhancedBearers == 0 && b.link.clients.count == 1)
            if use == .auto {
                #expect(went && b.failures.isEmpty && b.notes.last == "eatt: the peer does not support EATT: one bearer")
            } else {
                #expect(!went && b.failures == ["--eatt require: the peer does not support EATT"])
            }
        }
    }
}
