import BlemuATT
import BlemuCore
import BlemuGATT
import BlemuHCI
import BlemuHost
import BlemuL2CAP
import BlemuProfile
import BlemuTestSupport
import FoundationEssentials
import Testing
@testable import HostTestSupport

/// A recorded device replayed on the stack: its GAP and GATT at the recorded handles instead of
/// the stack's (the recorded ones win), its advertising data as recorded, and its notifications
/// on the recorded timeline, looping or once.
@Suite struct RecordedReplayTests {
    static func recording(replay: String = "loop") -> String {
        """
        {"format": "blemu-gatt-profile", "version": 1, "name": "Strap", "address": "C1:22:33:44:55:66",
         "addressType": "random", "advertisingData": "020106", "scanResponseData": "0609537472617",
         "replay": "\(replay)",
         "services": [
           {"uuid": "1800", "handle": 16, "endHandle": 18, "characteristics": [
             {"uuid": "2A00", "handle": 17, "valueHandle": 18, "properties": ["read"], "value": "5374726170"}]},
           {"uuid": "1801", "handle": 20, "endHandle": 23, "characteristics": [
             {"uuid": "2A05", "handle": 21, "valueHandle": 22, "properties": ["indicate"],
              "descriptors": [{"uuid": "2902", "handle": 23, "value": "0000"}]}]},
           {"uuid": "180D", "handle": 32, "endHandle": 40, "characteristics": [
             {"uuid": "2A37", "handle": 33, "valueHandle": 34, "properties": ["notify"],
              "descriptors": [{"uuid": "2902", "handle": 36, "value": "0000"}]}]}
         ],
         "recording": {"duration": 2.0, "events": [
           {"at": 0.5, "handle": 34, "value": "0048"}, {"at": 1.5, "handle": 34, "value": "0049"}]}}
        """
    }

    func bench(_ text: String) throws -> Bench {
        let profile = try GATTProfile.parse(Data(text.replacing("0609537472617", with: "06095374726170").utf8), name: "r.json")
        return try Bench(device: ProfileDevice(profile))
    }

    func notifications(_ bench: Bench) -> [[UInt8]] { bench.controller.takeL2CAP(handle: 0x0040, cid: L2CAPChannel.att) }

    @Test func theRecordedGAPAndGATTWinAndSitAtTheirHandles() throws {
        let bench = try bench(Self.recording())
        bench.controller.connect(handle: 0x0040, peer: bench.central)
        // Nothing at 1, where the stack's own GAP would be: the recorded one is at 0x0010.
        #expect(bench.att([0x0A, 0x01, 0x00]) == [[0x01, 0x0A, 0x01, 0x00, 0x01]])  // Invalid Handle (Vol 3, Part F, 3.4.1.1)
        #expect(bench.att([0x0A, 0x12, 0x00]) == [[0x0B] + Array("Strap".utf8)])
        #expect(bench.peripheral.database.services.filter { $0.uuid == GATTType.gattService }.map(\.startHandle) == [20])
        // Its advertising data and scan response go out as recorded.
        #expect(bench.controller.advertisingData == [0x02, 0x01, 0x06])
    }

    /// A recording of an advertiser that used extended PDUs, with `count` bytes of advertising
    /// data (240 by default: one connectable AUX_ADV_IND carries up to 245).
    static func extendedData(_ count: Int = 240) -> [UInt8] {
        // Flags, the name, then Manufacturer Specific Data structures of at most 200 bytes.
        var data: [UInt8] = [0x02, 0x01, 0x06, 0x06, 0x09] + Array("Strap".utf8)
        while data.count < count {
            let structure = min(200, count - data.count)
            data += [UInt8(structure - 1), 0xFF] + [UInt8](repeating: 0x5A, count: structure - 2)
        }
        return data
    }
    static func extendedRecording(_ count: Int = 240) -> String {
        recording().replacing("0609537472617", with: "06095374726170").replacing(#""advertisingData": "020106""#,
                              with: #""extendedAdvertising": true, "advertisingData": "\#(Hex.bytes(extendedData(count)))""#)
    }

    /// A recorded extended advertiser is replayed from a connectable extended set (Vol 4, Part E,
    /// 7.8.53: properties 0x0001, connectable and so not scannable: no scan response), its 240
    /// bytes in one LE Set Extended Advertising Data (operation 0x03, complete, 7.8.54), before
    /// the set is enabled.
    @Test func anExtendedRecordingIsAdvertisedFromAConnectableExtendedSet() throws {
        let profile = try GATTProfile.parse(Data(Self.extendedRecording().utf8), name: "r.json")
        let device = try ProfileDevice(profile)
        #expect(device.adjustments.contains { $0.contains("scanResponseData is not sent") })
        let bench = try Bench(device: device) { $0.extendedAdvertisingSets = 4 }
        let c = bench.controller
        let set = try #require(bench.peripheral.advertisingSet)
        #expect(c.commands(HCIOpcode.leSetExtendedAdvertisingParameters).filter { $0.parameters.first == set }
            .map { UInt16($0.parameters[1]) | UInt16($0.parameters[2]) << 8 }.last == 0x0001)
        let data = c.commands(HCIOpcode.leSetExtendedAdvertisingData).filter { $0.parameters.first == set }.map(\.parameters)
        #expect(data.map { Array($0.prefix(4)) } == [[set, 0x03, 0x01, 240]])
        #expect(data.flatMap { $0.dropFirst(4) } == Self.extendedData())
        #expect(c.commands(HCIOpcode.leSetExtendedScanResponseData).filter { $0.parameters.first == set }.isEmpty)
        // The data went in before the set was enabled (fragments are refused while it runs).
        let opcodes = c.commands.map(\.opcode)
        let lastData = try #require(opcodes.lastIndex(of: HCIOpcode.leSetExtendedAdvertisingData))
        #expect(opcodes.lastIndex(of: HCIOpcode.leSetExtendedAdvertisingEnable).map { $0 > lastData } == true)
        #expect(c.enabledSets.contains(set))
    }

    /// A controller driven with legacy commands cannot send it: the name and services go out in
    /// legacy PDUs instead, with one warning.
    @Test func anExtendedRecordingOnALegacyControllerFallsBackToTheBuiltPayload() throws {
        let profile = try GATTProfile.parse(Data(Self.extendedRecording().utf8), name: "r.json")
        let capture = CapturedLog()
        let bench = try Bench(device: ProfileDevice(profile), logger: capture.logger) { $0.extendedAdvertisingSets = 0 }
        #expect(bench.controller.advertisingData.count <= 31)
        #expect(bench.controller.advertisingData != Array(Self.extendedData().prefix(31)))
        #expect(bench.controller.advertisingData.count > 3)
        #expect(capture.lines.filter { $0.contains("needs a controller with LE Extended Advertising") }.count == 1, "\(capture.lines)")
    }

    /// The payload built in place of a recorded extended advertisement follows the services:
    /// `service 180D off` takes 0x180D out of it, as it does for any device (the recorded bytes
    /// themselves stay as recorded).
    @Test func theBuiltFallbackFollowsAServiceTakenOutAndPutBack() throws {
        let text = Self.extendedRecording(300).replacing(#""replay": "loop","#, with: #""replay": "loop", "advertisedServices": ["180D"],"#)
        let profile = try GATTProfile.parse(Data(text.utf8), name: "r.json")
        let bench = try Bench(device: ProfileDevice(profile)) { $0.extendedAdvertisingSets = 0 }
        let c = bench.controller
        let listed: [UInt8] = [0x03, 0x03, 0x0D, 0x18]   // Complete List of 16-bit Service UUIDs: 0x180D
        #expect(c.advertisingData.count <= 31)
        #expect(c.advertisingData.contains(listed), "\(Hex.bytes(c.advertisingData))")
        let off = try bench.peripheral.control.setService(BluetoothUUID(0x180D), present: false)
        #expect(off.advertisingChanged)
        #expect(!c.advertisingData.contains(listed), "\(Hex.bytes(c.advertisingData))")
        #expect(bench.peripheral.isAdvertising)
        _ = try bench.peripheral.control.setService(BluetoothUUID(0x180D), present: true)
        #expect(c.advertisingData.contains(listed), "\(Hex.bytes(c.advertisingData))")
    }

    /// A controller whose sets take less than one AUX_ADV_IND could (LE Read Maximum Advertising
    /// Data Length, Vol 4, Part E, 7.8.57; some take 191 bytes): the same fallback, naming it.
    @Test func anExtendedRecordingLongerThanTheControllersSetsTakeFallsBack() throws {
        let profile = try GATTProfile.parse(Data(Self.extendedRecording(240).utf8), name: "r.json")
        let capture = CapturedLog()
        let bench = try Bench(device: ProfileDevice(profile), logger: capture.logger) {
            $0.extendedAdvertisingSets = 4
            $0.maximumAdvertisingDataLength = 191
        }
        let set = try #require(bench.peripheral.advertisingSet)
        #expect(bench.controller.commands(HCIOpcode.leSetExtendedAdvertisingParameters).filter { $0.parameters.first == set }
            .map { UInt16($0.parameters[1]) | UInt16($0.parameters[2]) << 8 }.last == 0x0013)
        #expect(bench.peripheral.isAdvertising)
        #expect(capture.lines.filter { $0.contains("(240 bytes) is more than a connectable extended set of this controller carries (191 bytes") }.count == 1,
                "\(capture.lines)")
    }

    /// A connectable AUX_ADV_IND cannot be continued in AUX_CHAIN_IND PDUs (Vol 6, Part B,
    /// 2.3.4), so a recording of more than it carries is not handed to a controller, which would
    /// refuse it (7.8.54: Packet Too Long) or advertise nothing: the name and services go out in
    /// legacy PDUs instead, with one warning that says why.
    @Test func anExtendedRecordingLongerThanOneAuxiliaryPDUFallsBackToTheBuiltPayload() throws {
        let profile = try GATTProfile.parse(Data(Self.extendedRecording(300).utf8), name: "r.json")
        let capture = CapturedLog()
        let bench = try Bench(device: ProfileDevice(profile), logger: capture.logger) { $0.extendedAdvertisingSets = 4 }
        let c = bench.controller
        let set = try #require(bench.peripheral.advertisingSet)
        #expect(c.commands(HCIOpcode.leSetExtendedAdvertisingData).filter { $0.parameters.first == set }
            .allSatisfy { $0.parameters.count <= 4 + 31 })
        // Legacy properties: connectable and scannable undirected (7.8.53, Table 7.2).
        #expect(c.commands(HCIOpcode.leSetExtendedAdvertisingParameters).filter { $0.parameters.first == set }
            .map { UInt16($0.parameters[1]) | UInt16($0.parameters[2]) << 8 }.last == 0x0013)
        #expect(c.enabledSets.contains(set))
        #expect(capture.lines.filter { $0.contains("is more than a connectable extended set of this controller carries (245 bytes") }.count == 1, "\(capture.lines)")
    }

    @Test func notificationsFollowTheRecordedTimelineFromTheFirstSubscriptionAndLoop() throws {
        let bench = try bench(Self.recording())
        bench.controller.connect(handle: 0x0040, peer: bench.central)
        #expect(bench.att([0x12, 36, 0x00, 0x01, 0x00]) == [[0x13]])
        bench.scheduler.advance(by: .milliseconds(400))
        #expect(notifications(bench).isEmpty)
        bench.scheduler.advance(by: .milliseconds(200))
        #expect(notifications(bench) == [[0x1B, 34, 0x00, 0x00, 0x48]])
        bench.scheduler.advance(by: .seconds(1))
        #expect(notifications(bench) == [[0x1B, 34, 0x00, 0x00, 0x49]])
        // The loop starts again after the recording's two seconds: 0x48 at 2.5 s.
        bench.scheduler.advance(by: .seconds(1))
        #expect(notifications(bench) == [[0x1B, 34, 0x00, 0x00, 0x48]])
    }

    @Test func onceStopsAtTheEndOfTheRecording() throws {
        let bench = try bench(Self.recording(replay: "once"))
        bench.controller.connect(handle: 0x0040, peer: bench.central)
        #expect(bench.att([0x12, 36, 0x00, 0x01, 0x00]) == [[0x13]])
        bench.scheduler.advance(by: .seconds(2))
        #expect(notifications(bench).count == 2)
        bench.scheduler.advance(by: .seconds(10))
        #expect(notifications(bench).isEmpty)
    }

    /// The control socket's `service off` works on a twin as on a built-in device: the change
    /// is indicated through the recorded Service Changed (value handle 22, CCCD 23), which
    /// stands in for the stack's (Vol 3, Part G, 7.1: the affected range, start and end).
    @Test func serviceChangedIsIndicatedThroughTheRecordedOne() throws {
        let bench = try bench(Self.recording())
        bench.controller.connect(handle: 0x0040, peer: bench.central)
        #expect(bench.att([0x12, 23, 0x00, 0x02, 0x00]) == [[0x13]])
        let change = try bench.peripheral.control.setService(BluetoothUUID(0x180D), present: false)
        #expect(change.indicated == 1)
        #expect(notifications(bench) == [[0x1D, 22, 0x00, 32, 0x00, 40, 0x00]])
    }
}
