import BlemuCentral
import BlemuCore
import BlemuGATT
@testable import BlemuGATTClient
import BlemuHCI
import BlemuL2CAP
import BlemuProfile
import BlemuRecording
import BlemuSecurity
import Logging
import Testing
@testable import HostTestSupport

/// `blemu gatt ... record` and `dump --profile` without the command line: what a central's
/// `GATTWorkflow` found (a dump, a timeline) made a recording or a clone, with its summary.
@Suite struct GATTRecordingTests {
    static let quiet = Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })

    /// Battery Level (read, notify, its CCCD) and a Heart Rate Control Point whose read was
    /// refused for want of encryption.
    static let level = RemoteCharacteristic(
        characteristic: DiscoveredCharacteristic(uuid: BluetoothUUID(0x2A19), properties: [.read, .notify],
                                                 declarationHandle: 0x0010, valueHandle: 0x0011, endHandle: 0x0012),
        descriptors: [DiscoveredDescriptor(uuid: GATTType.clientConfiguration, handle: 0x0012)])
    static let secret = RemoteCharacteristic(
        characteristic: DiscoveredCharacteristic(uuid: BluetoothUUID(0x2A29), properties: [.read],
                                                 declarationHandle: 0x0013, valueHandle: 0x0014, endHandle: 0x0014),
        descriptors: [])
    static let services = [RemoteService(service: DiscoveredService(uuid: BluetoothUUID(0x180F), handles: 0x000F...0x0014),
                                         includes: [], characteristics: [level, secret])]

    static var advertisement: Advertisement {
        var advertisement = Advertisement(advertiser: LEAddress(BluetoothAddress("C4:11:22:33:44:55")!, isRandom: true),
                                          rssi: -40, isConnectable: true, lastSeen: 0)
        advertisement.advertisingData = [0x02, 0x01, 0x06, 0x05, 0x09] + Array("Cell".utf8)
        advertisement.content = AdvertisingContent(name: "Cell", serviceUUIDs: [BluetoothUUID(0x180F)])
        return advertisement
    }

    static var dump: GATTWorkflow.Dump {
        var dump = GATTWorkflow.Dump(services: services)
        dump.values = [0x0011: .success([0x64]), 0x0012: .success([0x00, 0x00]),
                       0x0014: .failure(.att(.insufficientEncryption, handle: 0x0014))]
        dump.refusals = [0x0014: [0x0F]]
        return dump
    }

    @Test func aRecordingIsTheDumpWithItsHandlesAdvertisingAndTimeline() throws {
        let heard = [GATTWorkflow.Heard(at: 0.25, handle: 0x0011, value: [0x63], indication: false),
                     GATTWorkflow.Heard(at: 1.5004, handle: 0x0011, value: [0x62], indication: true)]
        let recording = GATTRecording(dump: Self.dump, heard: heard, duration: 2, advertisement: Self.advertisement)
        let profile = recording.profile
        #expect(profile.name == "Cell" && profile.address == "C4:11:22:33:44:55" && profile.addressType == "random")
        #expect(profile.advertisedServices == ["180F"])
        #expect(profile.advertisingData == "0201060509" + Hex.bytes(Array("Cell".utf8)) && profile.scanResponseData == "")
        let service = try #require(profile.services.first)
        #expect(service.handle == 0x000F && service.endHandle == 0x0014)
        #expect(service.characteristics.map(\.valueHandle) == [0x0011, 0x0014])
        #expect(service.characteristics[0].value == "64" && service.characteristics[0].descriptors?.first?.handle == 0x0012)
        // The refused value: no value, the permission its refusal showed.
        #expect(service.characteristics[1].value == nil && service.characteristics[1].permissions == ["read-encrypted"])
        let events = try #require(profile.recording?.events)
        #expect(profile.recording?.duration == 2)
        #expect(events.map(\.at) == [0.25, 1.5] && events.map(\.value) == ["63", "62"] && events.map(\.indication) == [nil, true])
        #expect(recording.lossNote == nil)
        #expect(recording.summary == [
            "record: 1 service, 2 characteristics, 2 notifications and indications caught in 2 s",
            "record: warning: 2A29 (service 180F) at 0x0014 was refused for want of security and not read: the twin keeps the permission"
                + " (read-encrypted) and serves no value (record with --pair, or with a bond in --state-dir, to read it)",
        ])
    }

    /// A chatty peer: past `GATTWorkflow.maxHeard` values are counted and said, and a file
    /// holds at most `GATTProfile.maxEvents` of them.
    @Test func aRecordingIsBoundedAndSaysWhatItLeftOut() {
        let heard = (0...GATTProfile.maxEvents).map { GATTWorkflow.Heard(at: 0, handle: 0x0011, value: [UInt8(truncatingIfNeeded: $0)], indication: false) }
        let recording = GATTRecording(dump: Self.dump, heard: heard, notKept: 3, duration: 1, advertisement: Self.advertisement)
        #expect(recording.profile.recording?.events.count == GATTProfile.maxEvents)
        #expect(recording.lossNote == "record: 3 values more than the \(GATTWorkflow.maxHeard) kept were not recorded")
        #expect(GATTWorkflow.maxHeard == 100_000)
    }

    /// A subscription that failed is said, with what the twin does instead.
    @Test func aSubscriptionThatFailedIsInTheSummary() {
        let recording = GATTRecording(dump: Self.dump, heard: [], notSubscribed: [0x0011: .att(.insufficientAuthentication, handle: 0x0012)],
                                      duration: 10, advertisement: Self.advertisement)
        #expect(recording.summary.contains { $0.hasPrefix("record: warning: 2A19 (service 180F) at 0x0011 could not be subscribed (")
                                                 && $0.hasSuffix("the twin lets a central subscribe without that security") })
    }

    @Test func aCloneHasTheRefusalsPermissionsAndWhatWasCaptured() throws {
        let clone = GATTProfile(cloning: Self.dump, captured: [0x0011: [[0x63], [0x62]]], advertisement: Self.advertisement)
        let characteristics = try #require(clone.services.first?.characteristics)
        #expect(clone.name == "Cell" && clone.address == "C4:11:22:33:44:55" && clone.recording == nil)
        #expect(characteristics[0].valueHandle == nil, "a clone places nothing")
        #expect(characteristics[0].notifications == ["63", "62"] && characteristics[1].permissions == ["read-encrypted"])
    }

    final class Bench {
        let central: CentralBench
        let link: CentralLink
        let workflow: GATTWorkflow

        init() throws {
            central = try CentralBench(extended: false)
            let own = BluetoothAddress("D0:01:02:03:04:05")!
            let security = CentralSecurity(configuration: CentralSecurityConfiguration(),
                                           owner: BondOwner(device: "central", name: "blemu central", address: own),
                                           localAddress: LEAddress(own, isRandom: true), scheduler: central.scheduler, logger: GATTRecordingTests.quiet)
            central.host.ownRandomAddress = own
            central.host.attach(security: security)
            link = try central.connect()
            workflow = GATTWorkflow(link: link, security: security, scheduler: central.scheduler, logger: GATTRecordingTests.quiet)
        }

        var attSent: [[UInt8]] { central.controller.takeL2CAP(handle: link.handle, cid: L2CAPChannel.att) }
        func answer(_ pdu: [UInt8]) { central.controller.sendL2CAP(handle: link.handle, cid: L2CAPChannel.att, pdu) }
    }

    /// `record` on a link: every value read, then subscribed to what notifies, and what comes
    /// in the seconds asked kept with its time from the start.
    @Test func recordProfileReadsThenKeepsTheTimelineOfTheLink() throws {
        let b = try Bench()
        var result: GATTRecording?
        b.workflow.recordProfile([RemoteService(service: DiscoveredService(uuid: BluetoothUUID(0x180F), handles: 0x000F...0x0012),
                                                includes: [], characteristics: [Self.level])],
                                 for: 2, secureAndRetry: false, advertisement: Self.advertisement) { result = $0 }
        #expect(b.attSent == [[0x0A, 0x11, 0x00]])
        b.answer([0x0B, 0x64])
        #expect(b.attSent == [[0x0A, 0x12, 0x00]])
        b.answer([0x0B, 0x00, 0x00])
        #expect(b.attSent == [[0x12, 0x12, 0x00, 0x01, 0x00]], "notifications on")
        b.answer([0x13])
        b.central.scheduler.advance(by: .milliseconds(500))
        b.answer([0x1B, 0x11, 0x00, 0x63])
        b.answer([0x1B, 0x05, 0x00, 0xEE])   // not a value being recorded
        #expect(result == nil)
        b.central.scheduler.advance(by: .milliseconds(1500))
        let recording = try #require(result)
        #expect(recording.profile.services.first?.characteristics.first?.value == "64")
        let events = try #require(recording.profile.recording?.events)
        #expect(events.count == 1 && events.first?.at == 0.5 && events.first?.handle == 0x0011 && events.first?.value == "63")
        #expect(recording.summary == ["record: 1 service, 1 characteristic, 1 notification or indication caught in 2 s"])
    }

    /// `dump --profile --capture S`: the clone with what notified in S seconds; without it, at once.
    @Test func cloneProfileCapturesOnlyWhenAsked() throws {
        let b = try Bench()
        var clone: GATTProfile?
        b.workflow.cloneProfile(Self.dump, capture: nil, advertisement: Self.advertisement) { clone = $0 }
        #expect(clone?.services.first?.characteristics.first?.notifications == nil)
        #expect(b.attSent.isEmpty)
        clone = nil
        b.workflow.cloneProfile(Self.dump, capture: 1, advertisement: Self.advertisement) { clone = $0 }
        #expect(b.attSent == [[0x12, 0x12, 0x00, 0x01, 0x00]])
        b.answer([0x13])
        b.answer([0x1B, 0x11, 0x00, 0x63])
        #expect(clone == nil)
        b.central.scheduler.advance(by: .seconds(1))
        #expect(clone?.services.first?.characteristics.first?.notifications == ["63"])
    }
}
