import BlemuATT
import BlemuCore
import BlemuDevice
import BlemuDevices
import BlemuGATT
import BlemuHCI
import BlemuSimulator
import BlemuHost
import BlemuL2CAP
import BlemuSecurity
import Foundation
import Logging
import Testing
@testable import HostTestSupport

@Suite struct PeripheralTests {
    @Test func initializesAndAdvertisesLikeAGoodSensor() throws {
        let bench = try Bench(device: HeartRateDevice(seed: 1))
        let c = bench.controller
        #expect(c.commands.first?.opcode == HCIOpcode.reset)
        // No v2 in the supported commands: the host falls back to LE Read Buffer Size v1.
        #expect(c.commands(HCIOpcode.leReadBufferSize).count == 1)
        #expect(c.commands(HCIOpcode.leReadBufferSizeV2).isEmpty)
        #expect(c.commands(HCIOpcode.leWriteSuggestedDefaultDataLength).count == 1)
        #expect(bench.peripheral.hci.isReady)
        let random = try #require(c.commands(HCIOpcode.leSetRandomAddress).first)
        #expect(random.parameters == bench.peripheral.address.littleEndianBytes)
        #expect(bench.peripheral.address.isValidStaticRandom)
        // Fast advertising: 20 ms = 32 units, connectable undirected, random own address.
        let parameters = try #require(c.commands(HCIOpcode.leSetAdvertisingParameters).first).parameters
        #expect(Array(parameters[0..<5]) == [32, 0, 32, 0, 0x00])
        #expect(parameters[5] == 0x01)
        let data = try #require(c.commands(HCIOpcode.leSetAdvertisingData).first).parameters
        let length = Int(data[0])
        let structures = try AdvertisingPayload.parseADStructures(data[1...length])
        #expect(structures.contains { $0.type == 0x01 && Array($0.data) == [0x06] })
        #expect(structures.contains { ($0.type == 0x03 || $0.type == 0x02) && Array($0.data.prefix(2)) == [0x0D, 0x18] })
        // TX Power Level is the controller's advertising power, read before advertising.
        #expect(structures.contains { $0.type == 0x0A && Array($0.data) == [UInt8(bitPattern: -4)] })
        #expect(c.commands(HCIOpcode.leSetAdvertisingEnable).last?.parameters == [1])
        #expect(bench.peripheral.isAdvertising)

        // After 30 s the interval drops to 152.5 ms (244 units).
        bench.scheduler.advance(by: .seconds(31))
        let slow = try #require(c.commands(HCIOpcode.leSetAdvertisingParameters).last).parameters
        #expect(Array(slow[0..<4]) == [244, 0, 244, 0])
        #expect(bench.peripheral.isAdvertising)
    }

    @Test func addressIsStableAcrossRuns() throws {
        let a = try Bench(device: HeartRateDevice(seed: 1), name: "Same")
        let b = try Bench(device: HeartRateDevice(seed: 2), name: "Same")
        let other = try Bench(device: HeartRateDevice(seed: 1), name: "Other")
        #expect(a.peripheral.address == b.peripheral.address)
        #expect(a.peripheral.address != other.peripheral.address)
    }

    @Test func servesDiscoveryMTUAndConsistentLongReads() throws {
        let bench = try Bench(device: HeartRateDevice(seed: 3))
        bench.controller.connect(handle: 0x0040, peer: bench.central)
        #expect(bench.peripheral.connectionCount == 1)
        // The controller does Data Length Extension: the host asks for 251 octets on the new link.
        let dle = try #require(bench.controller.commands(HCIOpcode.leSetDataLength).first)
        #expect(dle.parameters == [0x40, 0x00, 251, 0, 0x48, 0x08])
        // Advertising goes on for another central.
        #expect(bench.peripheral.isAdvertising)

        // Primary service discovery starts with GAP at handle 1.
        let services = bench.att([0x10, 0x01, 0x00, 0xFF, 0xFF, 0x00, 0x28])
        let first = try #require(services.first)
        #expect(Array(first.prefix(8)) == [0x11, 6, 0x01, 0x00, 0x07, 0x00, 0x00, 0x18])

        // Diagnostics: a long read at MTU 23 is one consistent JSON value, counted once.
        let diagnostics = bench.handle(of: BluetoothUUID("7d3c0002-9a5e-4d1a-8f6e-5c1b2d3e4f50")!)
        let value = bench.longRead(diagnostics)
        #expect(value.count > 100)
        let json = try #require(try JSONSerialization.jsonObject(with: Data(value)) as? [String: Any])
        for key in ["device", "firmware", "uptime_ms", "connections", "att_requests", "att_errors", "last_error", "reads"] {
            #expect(json[key] != nil, "missing \(key)")
        }
        #expect(json["device"] as? String == "heart-rate")
        #expect(json["reads"] as? Int == 1)
        #expect(json["connections"] as? Int == 1)
        let again = try #require(try JSONSerialization.jsonObject(with: Data(bench.longRead(diagnostics))) as? [String: Any])
        #expect(again["reads"] as? Int == 2)

        // MTU exchange: the server answers 517; the link MTU becomes the client's 185.
        #expect(bench.att([0x02, 185, 0]) == [[0x03, 0x05, 0x02]])
        let big = bench.longRead(diagnostics, mtu: 185)
        #expect(big.count > 100)
        let third = try #require(try JSONSerialization.jsonObject(with: Data(big)) as? [String: Any])
        #expect(third["reads"] as? Int == 3)
    }

    @Test func heartRateNotificationsFollowTheCCCDAndControlPointErrors() throws {
        let device = HeartRateDevice(seed: 4)
        let bench = try Bench(device: device)
        bench.controller.connect(handle: 0x0040, peer: bench.central)
        let measurement = device.measurement
        let cccd = try #require(measurement.clientConfigurationHandle)
        // Not subscribed yet: no notifications however long we wait.
        bench.scheduler.advance(by: .seconds(3))
        #expect(bench.controller.takeL2CAP(handle: 0x0040, cid: L2CAPChannel.att).isEmpty)

        #expect(bench.att([0x12, UInt8(cccd & 0xFF), UInt8(cccd >> 8), 0x01, 0x00]) == [[0x13]])
        bench.scheduler.advance(by: .seconds(5))
        let notifications = bench.controller.takeL2CAP(handle: 0x0040, cid: L2CAPChannel.att)
        #expect(notifications.count == 5)
        for pdu in notifications {
            #expect(pdu[0] == 0x1B)
            #expect(UInt16(pdu[1]) | UInt16(pdu[2]) << 8 == measurement.valueHandle)
            let hr = try HeartRateMeasurement(decoding: pdu[3...])
            #expect((45...180).contains(hr.heartRate))
            #expect(hr.sensorContact == .detected)
            // One second of beats at this rate: RR intervals near 60/HR seconds.
            for rr in hr.rrIntervals {
                let seconds = Double(rr) / 1024
                #expect(abs(seconds - 60 / Double(hr.heartRate)) < 0.15)
            }
        }
        // Energy Expended appears in the first of every ten.
        #expect(try HeartRateMeasurement(decoding: notifications[0][3...]).energyExpended != nil)

        // Control point: 0x01 resets energy; anything else is ATT error 0x80.
        let point = device.controlPoint.valueHandle
        #expect(bench.att([0x12, UInt8(point & 0xFF), UInt8(point >> 8), 0x02]) == [[0x01, 0x12, UInt8(point & 0xFF), UInt8(point >> 8), 0x80]])
        #expect(bench.att([0x12, UInt8(point & 0xFF), UInt8(point >> 8), 0x01]) == [[0x13]])
        #expect(device.heart.energyKilojoules == 0)
        // Writing the cached Body Sensor Location is not permitted.
        let location = device.bodySensorLocation.valueHandle
        #expect(bench.att([0x12, UInt8(location & 0xFF), UInt8(location >> 8), 0x02])
                == [[0x01, 0x12, UInt8(location & 0xFF), UInt8(location >> 8), 0x03]])

        // Unsubscribe: the notifications stop.
        #expect(bench.att([0x12, UInt8(cccd & 0xFF), UInt8(cccd >> 8), 0x00, 0x00]) == [[0x13]])
        bench.scheduler.advance(by: .seconds(3))
        #expect(bench.controller.takeL2CAP(handle: 0x0040, cid: L2CAPChannel.att).isEmpty)
    }

    @Test func twoCentralsHaveTheirOwnATTState() throws {
        let device = HeartRateDevice(seed: 5)
        let bench = try Bench(device: device)
        bench.controller.connect(handle: 0x0040, peer: bench.central)
        bench.controller.connect(handle: 0x0041, peer: BluetoothAddress("E0:E1:E2:E3:E4:E5")!)
        #expect(bench.peripheral.connectionCount == 2)
        #expect(bench.att([0x02, 100, 0], handle: 0x0040) == [[0x03, 0x05, 0x02]])
        let cccd = try #require(device.measurement.clientConfigurationHandle)
        bench.att([0x12, UInt8(cccd & 0xFF), UInt8(cccd >> 8), 0x01, 0x00], handle: 0x0041)
        bench.scheduler.advance(by: .seconds(2))
        #expect(bench.controller.takeL2CAP(handle: 0x0040, cid: L2CAPChannel.att).isEmpty)
        #expect(bench.controller.takeL2CAP(handle: 0x0041, cid: L2CAPChannel.att).count == 2)
        // The CCCD reads back per link.
        #expect(bench.att([0x0A, UInt8(cccd & 0xFF), UInt8(cccd >> 8)], handle: 0x0040) == [[0x0B, 0x00, 0x00]])
        #expect(bench.att([0x0A, UInt8(cccd & 0xFF), UInt8(cccd >> 8)], handle: 0x0041) == [[0x0B, 0x01, 0x00]])
    }

    @Test func advertisingRestartsAfterDisconnectionAndStopIsClean() throws {
        let bench = try Bench(device: HeartRateDevice(seed: 6))
        let c = bench.controller
        c.connect(handle: 0x0040, peer: bench.central)
        // The connection ended legacy advertising; it restarted fast for the next central.
        #expect(bench.peripheral.isAdvertising)
        #expect(bench.peripheral.advertisingInterval == AdvertisingTiming.defaultFastInterval)
        bench.scheduler.advance(by: .seconds(20))
        let commandsBefore = c.commands.count
        c.disconnect(handle: 0x0040, reason: 0x13)
        #expect(bench.peripheral.connectionCount == 0)
        // Already fast: no off-and-on gap in which a connecting central would be lost; only the
        // 30 s fast phase starts over (Apple's guidelines: fast after every disconnection).
        #expect(c.commands.count == commandsBefore)
        #expect(bench.peripheral.isAdvertising)
        bench.scheduler.advance(by: .seconds(29))
        #expect(bench.peripheral.advertisingInterval == AdvertisingTiming.defaultFastInterval)
        bench.scheduler.advance(by: .seconds(2))
        #expect(bench.peripheral.advertisingInterval == AdvertisingTiming.defaultSlowInterval)
        // From the slow phase, a disconnection switches back to fast.
        c.connect(handle: 0x0041, peer: bench.central)
        bench.scheduler.advance(by: .seconds(31))
        #expect(bench.peripheral.advertisingInterval == AdvertisingTiming.defaultSlowInterval)
        c.disconnect(handle: 0x0041, reason: 0x13)
        #expect(bench.peripheral.advertisingInterval == AdvertisingTiming.defaultFastInterval)

        c.connect(handle: 0x0042, peer: bench.central)
        var stopped = false
        bench.peripheral.stop { stopped = true }
        // Advertising off, the link closed with Remote User Terminated (0x13)...
        #expect(c.commands(HCIOpcode.leSetAdvertisingEnable).last?.parameters == [0])
        #expect(c.commands(HCIOpcode.disconnect).last?.parameters == [0x42, 0x00, 0x13])
        #expect(!stopped)
        let resetsBefore = c.commands(HCIOpcode.reset).count
        c.disconnect(handle: 0x0042, reason: 0x16)
        // ...then HCI Reset, and done.
        #expect(c.commands(HCIOpcode.reset).count == resetsBefore + 1)
        #expect(stopped)
    }

    @Test func stopFinishesEvenWhenTheControllerNeverAnswers() throws {
        let bench = try Bench(device: HeartRateDevice(seed: 7))
        bench.controller.connect(handle: 0x0040, peer: bench.central)
        var stopped = false
        bench.peripheral.stop { stopped = true }
        #expect(!stopped)
        bench.scheduler.advance(by: .seconds(10))
        #expect(stopped)
    }

    @Test func stopFinishesAtOnceWhenTheControllerGoesAwayMeanwhile() throws {
        let bench = try Bench(device: HeartRateDevice(seed: 10))
        bench.controller.connect(handle: 0x0040, peer: bench.central)
        var stops = 0
        bench.peripheral.stop { stops += 1 }
        #expect(stops == 0)
        bench.controller.isGone = true
        bench.peripheral.controllerDown(reason: "radio gone")
        // Nothing is left to disconnect or reset: done now, not after a command timeout.
        #expect(stops == 1)
        bench.scheduler.advance(by: .seconds(10))
        #expect(stops == 1)
    }

    @Test func backpressureTellsTheDeviceWhenThereIsRoom() throws {
        let device = ProbeDevice()
        let bench = try Bench(device: device) { c in
            c.aclBufferCount = 1
            c.autoComplete = false
        }
        let c = bench.controller
        c.connect(handle: 0x0040, peer: bench.central)
        let cccd = try #require(device.value.clientConfigurationHandle)
        c.sendL2CAP(handle: 0x0040, cid: L2CAPChannel.att, [0x12, UInt8(cccd & 0xFF), UInt8(cccd >> 8), 0x01, 0x00])
        #expect(device.subscriptions.last?.notify == true)
        let context = try #require(device.context)
        var accepted = 0
        while context.notify(device.value, value: [UInt8(accepted)]) { accepted += 1 }
        // Bounded: the queue took a handful, then said no — nothing was dropped silently.
        #expect(accepted >= HCIHost.bestEffortQueueLimit)
        #expect(accepted < 64)
        #expect(device.readyCalls == 0)
        for _ in 0..<100 { c.completePackets() }
        #expect(device.readyCalls == 1)
        let values = c.takeL2CAP(handle: 0x0040, cid: L2CAPChannel.att).filter { $0.first == 0x1B }.map { $0[3] }
        // Every accepted notification arrived, in order.
        #expect(values == (0..<accepted).map { UInt8($0) })
    }

    @Test func indicationsWaitForConfirmation() throws {
        let device = ProbeDevice()
        let bench = try Bench(device: device)
        bench.controller.connect(handle: 0x0040, peer: bench.central)
        let cccd = try #require(device.value.clientConfigurationHandle)
        #expect(bench.att([0x12, UInt8(cccd & 0xFF), UInt8(cccd >> 8), 0x02, 0x00]) == [[0x13]])
        let context = try #require(device.context)
        #expect(context.indicate(device.value, value: [1], to: nil))
        #expect(context.indicate(device.value, value: [2], to: nil))
        var sent = bench.controller.takeL2CAP(handle: 0x0040, cid: L2CAPChannel.att)
        #expect(sent.map { $0[0] } == [0x1D])
        sent = bench.att([0x1E])
        #expect(sent.map { Array($0) } == [[0x1D, UInt8(device.value.valueHandle & 0xFF), UInt8(device.value.valueHandle >> 8), 2]])
        // No confirmation for 30 s: the bearer is dead and the link is closed (Vol 3, Part F, 3.3.3).
        bench.scheduler.advance(by: .seconds(31))
        #expect(bench.controller.commands(HCIOpcode.disconnect).last?.parameters == [0x40, 0x00, 0x13])
    }

    @Test func signallingAndSecurityManagerAnswers() throws {
        let bench = try Bench(device: HeartRateDevice(seed: 8))
        let c = bench.controller
        c.connect(handle: 0x0040, peer: bench.central, interval: 6)
        // After a second the peripheral asks for its preferred parameters (Vol 3, Part A, 4.20).
        bench.scheduler.advance(by: .seconds(1))
        let request = try #require(c.takeL2CAP(handle: 0x0040, cid: L2CAPChannel.leSignaling).first)
        #expect(request[0] == 0x12)
        #expect(request[2...3] == [8, 0])
        let preferred = ConnectionParameters.recommended
        var expected: [UInt8] = []
        for v in [preferred.intervalMin, preferred.intervalMax, preferred.peripheralLatency, preferred.supervisionTimeout] { expected.appendLE(v) }
        #expect(Array(request[4...]) == expected)
        // An unknown command: Command Reject, same identifier, reason 0 (Vol 3, Part A, 4.1).
        c.sendL2CAP(handle: 0x0040, cid: L2CAPChannel.leSignaling, [0x30, 0x07, 0x00, 0x00])
        #expect(c.takeL2CAP(handle: 0x0040, cid: L2CAPChannel.leSignaling) == [[0x01, 0x07, 0x02, 0x00, 0x00, 0x00]])
        // LE credit based connection: refused, SPSM not supported.
        c.sendL2CAP(handle: 0x0040, cid: L2CAPChannel.leSignaling, [0x14, 0x09, 0x0A, 0x00, 0x80, 0x00, 0x40, 0x00, 0x17, 0x00, 0x17, 0x00, 0x01, 0x00])
        let refusal = try #require(c.takeL2CAP(handle: 0x0040, cid: L2CAPChannel.leSignaling).first)
        #expect(refusal[0] == 0x15 && refusal[1] == 0x09 && Array(refusal.suffix(2)) == [0x02, 0x00])
        // Pairing Request (legacy, bonding): the Security Manager answers with its Pairing Response
        // (Vol 3, Part H, 3.5.2): NoInputNoOutput, no OOB, Bonding and SC, 16 octets, the
        // central's keys (EncKey, IdKey, SignKey) and ours (EncKey, IdKey: the device's IRK and
        // identity address; no CSRK, blemu never signs).
        c.sendL2CAP(handle: 0x0040, cid: L2CAPChannel.securityManager, [0x01, 0x03, 0x00, 0x01, 0x10, 0x07, 0x07])
        #expect(c.takeL2CAP(handle: 0x0040, cid: L2CAPChannel.securityManager) == [[0x02, 0x03, 0x00, 0x09, 0x10, 0x07, 0x03]])
        // An unknown CID and an unknown connection handle are dropped, not answered.
        c.sendL2CAP(handle: 0x0040, cid: 0x0099, [1, 2, 3])
        c.sendL2CAP(handle: 0x0777, cid: L2CAPChannel.att, [0x0A, 0x01, 0x00])
        #expect(c.frames.isEmpty)
    }

    @Test func halfGatheredPDUsAreDroppedAfterTheReassemblyTimeout() throws {
        let bench = try Bench(device: HeartRateDevice(seed: 9))
        let c = bench.controller
        c.connect(handle: 0x0040, peer: bench.central)
        func fragment(_ boundary: ACLPacket.Boundary, _ data: [UInt8]) {
            var packet: [UInt8] = []
            ACLPacket(handle: 0x0040, boundary: boundary, data: data[...]).encode(into: &packet)
            bench.peripheral.hci.receiveACL(packet[...])
        }
        // A Read Request for handle 1 in two fragments, the second one too late.
        fragment(.firstFlushable, [0x03, 0x00, 0x04, 0x00, 0x0A])
        bench.scheduler.advance(by: .seconds(11))
        fragment(.continuing, [0x01, 0x00])
        #expect(c.takeL2CAP(handle: 0x0040, cid: L2CAPChannel.att).isEmpty)
        // In time, the same fragments make a request that is answered.
        fragment(.firstFlushable, [0x03, 0x00, 0x04, 0x00, 0x0A])
        bench.scheduler.advance(by: .seconds(1))
        fragment(.continuing, [0x01, 0x00])
        #expect(c.takeL2CAP(handle: 0x0040, cid: L2CAPChannel.att) == [[0x0B, 0x00, 0x18]]) // GAP service declaration
    }

    @Test func controllerLossAndHardwareErrorRecover() throws {
        let device = ProbeDevice()
        let bench = try Bench(device: device)
        let c = bench.controller
        c.connect(handle: 0x0040, peer: bench.central)
        bench.peripheral.controllerDown(reason: "test")
        #expect(device.disconnected.count == 1)
        #expect(!bench.peripheral.isAdvertising)
        let resets = c.commands(HCIOpcode.reset).count
        bench.peripheral.controllerUp()
        #expect(c.commands(HCIOpcode.reset).count == resets + 1)
        #expect(bench.peripheral.isAdvertising)

        c.connect(handle: 0x0041, peer: bench.central)
        c.event(0x10, [0x01]) // Hardware Error
        #expect(device.disconnected.count == 2)
        #expect(c.commands(HCIOpcode.reset).count == resets + 2)
        #expect(bench.peripheral.isAdvertising)
    }

    @Test func parametersBreakingTheCoreAreReplacedByTheRecommendedOnes() throws {
        let device = ProbeDevice()
        // Interval max below min and a timeout too short for the latency: no controller takes these.
        device.profile.connectionParameters = ConnectionParameters(intervalMin: 40, intervalMax: 24, peripheralLatency: 10,
                                                                   supervisionTimeout: 10)
        let bench = try Bench(device: device)
        bench.controller.connect(handle: 0x0040, peer: bench.central)
        bench.scheduler.advance(by: .seconds(1))
        let request = try #require(bench.controller.takeL2CAP(handle: 0x0040, cid: L2CAPChannel.leSignaling).first)
        #expect(Array(request[4...]) == ConnectionParameters.recommended.encoded)
        // And GAP's Peripheral Preferred Connection Parameters says the same.
        let ppcp = bench.handle(of: BluetoothUUID(0x2A04))
        #expect(bench.att([0x0A, UInt8(ppcp & 0xFF), UInt8(ppcp >> 8)]) == [[0x0B] + ConnectionParameters.recommended.encoded])
    }

    @Test func cachedValuesMustBeReadOnly() {
        final class Broken: Device {
            static let deviceName = "broken"
            static let summary = ""
            let profile = DeviceProfile(defaultName: "Broken", advertisedServices: [], appearance: 0)
            var services: [Service] {
                [Service(0x180F) { Characteristic(0x2A19, properties: [.read, .notify], cachedValue: [100]) }]
            }
            func start(context: DeviceContext) {}
        }
        #expect(throws: GATTDatabaseError.self) { try Bench(device: Broken()) }
    }
}
