import BlemuATT
import BlemuCore
import BlemuGATT
import BlemuGATTClient
import FoundationEssentials
import Testing
@testable import BlemuProfile

/// A recording's file (`blemu gatt ... record`): handles, advertising, the timeline. Every
/// mistake names its path in the file; a profile without handles still loads as before.
@Suite struct RecordedProfileTests {
    static let services = """
        [{"uuid": "1800", "handle": 1, "endHandle": 3, "characteristics": [
           {"uuid": "2A00", "handle": 2, "valueHandle": 3, "properties": ["read"], "value": "41"}]},
         {"uuid": "180D", "handle": 8, "endHandle": 12, "characteristics": [
           {"uuid": "2A37", "handle": 9, "valueHandle": 10, "properties": ["notify"],
            "descriptors": [{"uuid": "2902", "handle": 12}]}]}]
        """

    static func file(services: String = services, extra: String = "") -> String {
        """
        {"format": "blemu-gatt-profile", "version": 1, "name": "A", "address": "C1:22:33:44:55:66", "addressType": "random",
         "services": \(services)\(extra)}
        """
    }

    func parse(_ text: String) throws(ProfileError) -> GATTProfile { try GATTProfile.parse(Data(text.utf8), name: "r.json") }

    func refusal(_ text: String) -> String {
        do { _ = try parse(text); return "accepted" } catch { return error.description }
    }

    @Test func aRecordingParsesSurvivesEncodingAndPlacesTheDatabase() throws {
        let profile = try parse(Self.file(extra: #", "recording": {"duration": 1, "events": [{"at": 0.5, "handle": 10, "value": "0048"}]}"#))
        #expect(try parse(profile.encoded()) == profile)
        let database = try GATTDatabase(services: ProfileDevice(profile).services)
        #expect((1...12).filter { database.attribute(UInt16($0)) != nil } == [1, 2, 3, 8, 9, 10, 12])
        #expect(database.attribute(12)?.type == GATTType.clientConfiguration)
        #expect(profile.replayAddress == BluetoothAddress("C1:22:33:44:55:66"))
    }

    /// Extended advertising (Vol 6, Part B, 2.3.4.9): up to 1650 bytes per payload with the
    /// flag, which survives a round trip; without it 31 stays the limit.
    @Test func extendedAdvertisingDataUpToTheExtendedLimitRoundTrips() throws {
        let data = "02010603FF" + String(repeating: "ab", count: 1645)
        let profile = try parse(Self.file(extra: #", "extendedAdvertising": true, "advertisingData": "\#(data)""#))
        #expect(profile.extendedAdvertising == true)
        #expect(profile.advertisingData.flatMap(GATTProfile.bytes)?.count == 1650)
        #expect(try parse(profile.encoded()) == profile)
        #expect(profile.encoded().contains(#""extendedAdvertising" : true"#))
    }

    /// `record` keeps an extended advertiser's payloads whole and says they were extended; a
    /// legacy one stays as before; what not even extended PDUs carry is left out.
    @Test func theExporterRecordsExtendedPayloadsWhole() throws {
        func recorded(_ data: [UInt8], extended: Bool) -> GATTProfile {
            GATTProfile(recording: [], values: [:], heard: [], duration: 1, permissions: [:],
                        advertised: GATTProfile.Advertised(name: "A", address: BluetoothAddress("C1:22:33:44:55:66")!, appearance: nil, services: []),
                        addressIsRandom: true, advertisingData: data, scanResponseData: [], extendedAdvertising: extended)
        }
        let long = [0x02, 0x01, 0x06] + [UInt8](repeating: 0x42, count: 300)
        let extended = recorded(long, extended: true)
        #expect(extended.advertisingData.flatMap(GATTProfile.bytes) == long)
        #expect(extended.extendedAdvertising == true)
        #expect(try parse(extended.encoded()) == extended)
        let legacy = recorded([0x02, 0x01, 0x06], extended: false)
        #expect(legacy.advertisingData == "020106" && legacy.extendedAdvertising == nil)
        #expect(recorded([UInt8](repeating: 0, count: 1651), extended: true).advertisingData == nil)
    }

    @Test func aPublicAddressIsNotTakenAndSaysWhy() throws {
        let profile = try parse(Self.file().replacing("\"random\"", with: "\"public\""))
        #expect(profile.replayAddress == nil)
        #expect(profile.addressNote?.contains("vendor command") == true)
        #expect(ProfileDevice(profile).adjustments.contains { $0.contains("vendor command") })
    }

    @Test func handleMistakesAreNamedByTheirPath() {
        func services(_ edit: (String) -> String) -> String { refusal(Self.file(services: edit(Self.services))) }
        #expect(services { $0.replacing(#""handle": 8,"#, with: #""handle": 3,"#) }
            == "r.json: services[1].handle: 3 overlaps or comes before 3 (services[0].endHandle): handles rise through the file")
        #expect(services { $0.replacing(#""valueHandle": 10"#, with: #""valueHandle": 11"#) }
            == "r.json: services[1].characteristics[0].valueHandle: 11 is not 10: the value follows its declaration (Vol 3, Part G, 3.3)")
        #expect(services { $0.replacing(#", "handle": 12"#, with: "") }
            == "r.json: services[1].characteristics[0].descriptors[0].handle: missing: a profile with handles needs every attribute's handle")
        #expect(services { $0.replacing(#""uuid": "2902""#, with: #""uuid": "2901""#) }
            == "r.json: services[1].characteristics[0].descriptors: it notifies or indicates, so it needs its 2902 descriptor (the CCCD) with its handle")
        #expect(services { $0.replacing(#""endHandle": 12"#, with: #""endHandle": 11"#) }
            == "r.json: services[1].endHandle: 11 is not from 12 (its last attribute) to 65535")
        #expect(services { $0.replacing(#""handle": 8,"#, with: #""handle": 70000,"#) }
            == "r.json: services[1].handle: 70000 is not a handle (1 to 65535)")
    }

    @Test func recordingAndAdvertisingMistakesAreNamedByTheirPath() {
        func extra(_ text: String) -> String { refusal(Self.file(extra: text)) }
        #expect(extra(#", "recording": {"duration": 1, "events": [{"at": 0.5, "handle": 10, "value": "00"}, {"at": 0.2, "handle": 10, "value": "00"}]}"#)
            == "r.json: recording.events[1].at: 0.2 is not from 0.5 (the event before) to 1.0 (the duration)")
        #expect(extra(#", "recording": {"duration": 1, "events": [{"at": 0.5, "handle": 3, "value": "00"}]}"#)
            == "r.json: recording.events[0].handle: 3 is not the value handle of a characteristic that notifies or indicates")
        #expect(extra(#", "recording": {"duration": 0, "events": []}"#)
            == "r.json: recording.duration: 0.0 is not above 0 and at most 86400 seconds")
        #expect(extra(#", "recording": {"duration": 1, "events": [{"at": 0.5, "handle": 10, "value": "zz"}]}"#)
            == "r.json: recording.events[0].value: 'zz' is not hex (0102ff)")
        #expect(extra(#", "advertisingData": "\#(String(repeating: "00", count: 32))""#)
            == "r.json: advertisingData: 32 bytes; legacy advertising carries at most 31 (Vol 6, Part B, 2.3.1.1); set \"extendedAdvertising\": true for up to 1650")
        #expect(extra(#", "extendedAdvertising": true, "scanResponseData": "\#(String(repeating: "00", count: 1651))""#)
            == "r.json: scanResponseData: 1651 bytes; extended advertising carries at most 1650 (Vol 6, Part B, 2.3.4.9)")
        #expect(extra(#", "replay": "twice""#) == "r.json: replay: 'twice' is not loop or once")
        #expect(refusal(Self.file().replacing("\"random\"", with: "\"odd\"")) == "r.json: addressType: 'odd' is not public or random")
        // Events need handles to name.
        let unplaced = #"[{"uuid": "180D", "characteristics": [{"uuid": "2A37", "properties": ["notify"]}]}]"#
        #expect(refusal(Self.file(services: unplaced, extra: #", "recording": {"duration": 1, "events": [{"at": 0, "handle": 3, "value": "00"}]}"#))
            == "r.json: recording.events: events name value handles: the services need their handles")
    }

    /// An included service may be anywhere in the database (Vol 3, Part G, 3.2): a recording of
    /// a device whose first service includes a later one is served with that include, pointing
    /// at the later service's recorded handles.
    @Test func aRecordedIncludeOfALaterServiceIsServed() throws {
        let services = """
            [{"uuid": "1812", "handle": 1, "endHandle": 4, "includes": ["180F"], "characteristics": [
               {"uuid": "2A4A", "handle": 3, "valueHandle": 4, "properties": ["read"], "value": "0111"}]},
             {"uuid": "180F", "handle": 8, "endHandle": 10, "characteristics": [
               {"uuid": "2A19", "handle": 9, "valueHandle": 10, "properties": ["read"], "value": "5a"}]}]
            """
        let device = ProfileDevice(try parse(Self.file(services: services)))
        let database = try GATTDatabase(services: device.services)
        let include = try #require(database.attribute(2))
        #expect(include.type == GATTType.include)
        guard case .fixed(let value) = include.content else { Issue.record("the include is not a fixed value"); return }
        #expect(value == [0x08, 0x00, 0x0A, 0x00, 0x0F, 0x18])
        #expect(device.adjustments.isEmpty)
    }

    /// `record`'s summary on stderr: what the file holds, and where the twin will not do what
    /// the original did (a subscription that caught nothing or failed, a value never read for
    /// want of security, a key size not asked for, the Diagnostics values frozen).
    @Test func theRecordingSummarySaysWhatTheTwinWillNotDo() throws {
        let services = """
            [{"uuid": "180D", "handle": 1, "endHandle": 9, "characteristics": [
               {"uuid": "2A37", "handle": 2, "valueHandle": 3, "properties": ["notify"], "descriptors": [{"uuid": "2902", "handle": 4}]},
               {"uuid": "2A38", "handle": 5, "valueHandle": 6, "properties": ["read"], "permissions": ["read-encrypted"]},
               {"uuid": "2A39", "handle": 7, "valueHandle": 8, "properties": ["indicate"], "descriptors": [{"uuid": "2902", "handle": 9}]}]},
             {"uuid": "7d3c0001-9a5e-4d1a-8f6e-5c1b2d3e4f50", "handle": 10, "endHandle": 12, "characteristics": [
               {"uuid": "7d3c0002-9a5e-4d1a-8f6e-5c1b2d3e4f50", "handle": 11, "valueHandle": 12, "properties": ["read"], "value": "00"}]}]
            """
        let heard = try parse(Self.file(services: services, extra: #", "recording": {"duration": 2, "events": [{"at": 0.5, "handle": 3, "value": "0048"}]}"#))
        let lines = heard.recordingSummary(refusals: [6: [0x0C]], notSubscribed: [8: .att(.insufficientEncryption, handle: 9)])
        #expect(lines.count == 5, "\(lines)")
        #expect(lines.first == "record: 2 services, 4 characteristics, 1 notification or indication caught in 2 s")
        #expect(lines.contains { $0.hasPrefix("record: warning: 2A39 (service 180D) at 0x0008 could not be subscribed (") && $0.hasSuffix("the twin lets a central subscribe without that security") })
        #expect(lines.contains { $0.hasPrefix("record: warning: 2A38 (service 180D) at 0x0006 was refused for want of security and not read: the twin keeps the permission (read-encrypted)") })
        #expect(lines.contains { $0.hasPrefix("record: warning: 2A38 (service 180D) at 0x0006 wanted a longer encryption key (0x0C)") })
        #expect(lines.last?.hasPrefix("record: the Diagnostics service (7d3c0001-9a5e-4d1a-8f6e-5c1b2d3e4f50) is kept as recorded: its values are frozen") == true, "\(lines)")
        // Nothing heard: the subscription that caught nothing is named.
        let silent = try parse(Self.file(services: services, extra: #", "recording": {"duration": 2.5, "events": []}"#))
        let quiet = silent.recordingSummary(refusals: [:], notSubscribed: [:])
        #expect(quiet.first == "record: 2 services, 4 characteristics, 0 notifications and indications caught in 2.5 s")
        #expect(quiet.contains("record: warning: 2A37 (service 180D) at 0x0003 was subscribed to but sent nothing in 2.5 s: its twin sends nothing either"))
        #expect(quiet.contains { $0.contains("2A39") && $0.contains("sent nothing") })
    }

    /// A recording's keys are checked as a clone's (Docs/PROFILES.md, "The format"): the
    /// recording, its events, the handles.
    @Test func unknownKeysOfARecordingAreRefusedByTheirPath() {
        #expect(refusal(Self.file(extra: #", "recording": {"duration": 1, "events": [{"at": 0.5, "handle": 10, "value": "00", "indicaton": true}]}"#))
                .hasPrefix("r.json: recording.events[0].indicaton: unknown key (did you mean indication? allowed: at, handle, value, indication)"))
        #expect(refusal(Self.file(extra: #", "recording": {"duration": 1, "events": [], "loop": true}"#))
                .hasPrefix("r.json: recording.loop: unknown key (allowed: duration, events)"))
        #expect(refusal(Self.file(services: Self.services.replacing(#""endHandle": 3,"#, with: #""endHandle": 3, "endhandle": 3,"#)))
                .hasPrefix("r.json: services[0].endhandle: unknown key (did you mean endHandle?"))
        #expect(refusal(Self.file(extra: #", "advertisingData": "020106", "advertisingData": "0201""#))
                == "r.json: advertisingData: appears twice in one object: give each key once")
    }

    @Test func tooManyEventsAreRefused() {
        let event = #"{"at": 0, "handle": 10, "value": "00"}"#
        let events = Array(repeating: event, count: GATTProfile.maxEvents + 1).joined(separator: ",")
        #expect(refusal(Self.file(extra: #", "recording": {"duration": 1, "events": [\#(events)]}"#))
            == "r.json: recording.events: \(GATTProfile.maxEvents + 1) events; a recording holds at most \(GATTProfile.maxEvents)")
    }
}
