import BlemuATT
import BlemuCore
import BlemuDevices
import BlemuGATT
import BlemuHCI
@testable import BlemuHost
import BlemuL2CAP
import BlemuTestSupport
import Foundation
import Logging
import Testing
@testable import HostTestSupport

/// Issue: defects found by new users and a hostile controller, each replayed here.
@Suite struct HardeningTests {
    private func cccd(_ characteristic: Characteristic) -> UInt16 { characteristic.clientConfigurationHandle ?? 0 }

    private func write(_ bench: Bench, _ handle: UInt16, _ value: [UInt8], link: UInt16 = 0x0040) -> [[UInt8]] {
        bench.att([0x12, UInt8(handle & 0xFF), UInt8(handle >> 8)] + value, handle: link)
    }

    /// A closing link ends every subscription it held; the device hears it and its timers stop,
    /// so an idle emulator makes no wakeups.
    @Test func disconnectionEndsSubscriptionsAndTheDeviceStopsTicking() throws {
        let device = HeartRateDevice(seed: 11)
        let bench = try Bench(device: device)
        // Past the fast-advertising phase, an idle device has no timer at all.
        bench.scheduler.advance(by: .seconds(31))
        #expect(bench.scheduler.pendingCount == 0)
        bench.controller.connect(handle: 0x0040, peer: bench.central)
        #expect(write(bench, cccd(device.measurement), [0x01, 0x00]) == [[0x13]])
        // The battery notifies its level at once, then the Write Response follows.
        #expect(write(bench, cccd(device.battery.level), [0x01, 0x00]).last == [0x13])
        bench.scheduler.advance(by: .seconds(3))
        #expect(!bench.controller.takeL2CAP(handle: 0x0040, cid: L2CAPChannel.att).isEmpty, "measurements flow")
        bench.controller.disconnect(handle: 0x0040)
        // Only the fast-advertising phase timer is left; after it, nothing.
        bench.scheduler.advance(by: .seconds(31))
        #expect(bench.scheduler.pendingCount == 0, "the heart and the battery must stop when nobody listens")
    }

    @Test func theDeviceHearsEachEndedSubscriptionBeforeTheDisconnection() throws {
        let probe = ProbeDevice()
        let bench = try Bench(device: probe)
        bench.controller.connect(handle: 0x0040, peer: bench.central)
        #expect(write(bench, cccd(probe.value), [0x03, 0x00]) == [[0x13]])
        #expect(probe.subscriptions.map(\.notify) == [true])
        bench.controller.disconnect(handle: 0x0040)
        #expect(probe.subscriptions.count == 2)
        #expect(probe.subscriptions.last?.notify == false)
        #expect(probe.subscriptions.last?.indicate == false)
        #expect(probe.disconnected.count == 1)
        #expect(probe.context?.isSubscribed(probe.value, peer: nil, indications: true) == false)
    }

    /// Vol 4, Part E, 7.7.65.5 / 7.8.26: with no key for the link, the host says so at once.
    @Test func longTermKeyRequestGetsTheNegativeReply() throws {
        let bench = try Bench(device: ProbeDevice())
        bench.controller.connect(handle: 0x0040, peer: bench.central)
        bench.controller.requestLongTermKey(handle: 0x0040, random: 0x1122334455667788, ediv: 0xBEEF)
        let replies = bench.controller.commands(HCIOpcode.leLongTermKeyRequestNegativeReply)
        #expect(replies.map(\.parameters) == [[0x40, 0x00]])
    }

    /// A second LE Connection Complete on a handle in use: the old link is torn down and
    /// reported before the new one opens.
    @Test func newLinkOnAHandleInUseClosesTheOldOne() throws {
        let probe = ProbeDevice()
        let bench = try Bench(device: probe)
        bench.controller.connect(handle: 0x0040, peer: bench.central)
        #expect(write(bench, cccd(probe.value), [0x01, 0x00]) == [[0x13]])
        let other = BluetoothAddress("E0:E1:E2:E3:E4:E5")!
        bench.controller.connect(handle: 0x0040, peer: other)
        #expect(bench.peripheral.connectionCount == 1)
        #expect(probe.disconnected.map(\.address) == [bench.central])
        #expect(probe.connected.map(\.address) == [bench.central, other])
        #expect(probe.subscriptions.last?.notify == false)
        // The new link starts clean: no subscription carried over from the old central.
        #expect(probe.context?.isSubscribed(probe.value, peer: nil, indications: false) == false)
        #expect(bench.peripheral.peers.map(\.address) == [other])
    }

    /// The same in a role the peripheral does not play (central, here with no central role): the
    /// old link is ended all the same (Vol 4, Part E, 5.3.1) and the new one disconnected, and
    /// the rest of a PDU the old link was sending does not go out on the new one.
    @Test func aLinkInARoleNotPlayedOnAHandleInUseEndsTheOldOne() throws {
        let probe = ProbeDevice()
        let bench = try Bench(device: probe)
        let c = bench.controller
        c.connect(handle: 0x0040, peer: bench.central)
        // The controller's buffers are not given back: a 200-byte PDU goes out in part, the rest waits.
        c.autoComplete = false
        let sent = { c.aclOut.filter { $0.handle == 0x0040 }.count }
        let before = sent()
        #expect(bench.peripheral.hci.sendL2CAP(handle: 0x0040, pdu: ([200, 0x00, 0x04, 0x00] + [UInt8](repeating: 0x1B, count: 200))[...],
                                                priority: .required))
        let partly = sent()
        #expect(partly > before && partly < before + 8, "\(partly - before) of 8 fragments sent")
        c.centralConnected(handle: 0x0040, peer: BluetoothAddress("C4:11:22:33:44:55")!)
        #expect(probe.disconnected.map(\.address) == [bench.central])
        #expect(bench.peripheral.connectionCount == 0)
        #expect(c.commands(HCIOpcode.disconnect).map(\.parameters).last == [0x40, 0x00, 0x13])
        c.completePackets()
        #expect(sent() == partly, "the old link's PDU is not continued on the new link")
    }

    /// Links beyond the device's limit are refused and closed, so a controller cannot grow memory.
    @Test func linksBeyondTheLimitAreRefused() throws {
        let probe = ProbeDevice()
        let bench = try Bench(device: probe, maxConnections: 2)
        for handle: UInt16 in [0x40, 0x41, 0x42, 0x43] {
            bench.controller.connect(handle: handle, peer: BluetoothAddress(value: 0xC0_00_00_00_00_00 | UInt64(handle)))
        }
        #expect(bench.peripheral.connectionCount == 2)
        #expect(probe.connected.count == 2)
        let disconnects = bench.controller.commands(HCIOpcode.disconnect).map(\.parameters)
        #expect(disconnects == [[0x42, 0x00, 0x14], [0x43, 0x00, 0x14]])
        // The refused link's data goes nowhere, and its disconnection is quiet.
        bench.controller.sendL2CAP(handle: 0x42, cid: L2CAPChannel.att, [0x0A, 0x01, 0x00])
        #expect(bench.controller.takeL2CAP(handle: 0x42, cid: L2CAPChannel.att).isEmpty)
        bench.controller.disconnect(handle: 0x42)
        #expect(probe.disconnected.isEmpty)
    }

    /// A controller that gives no command credits (or stops answering) cannot hold a stop:
    /// it ends within the stop deadline, without waiting out every queued command.
    @Test func stopEndsInBoundedTimeWhenTheControllerStopsTakingCommands() throws {
        let bench = try Bench(device: HeartRateDevice(seed: 2))
        bench.controller.connect(handle: 0x0040, peer: bench.central)
        bench.controller.commandCredits = 0
        bench.controller.disconnect(handle: 0x0040)   // queues an advertising restart
        bench.controller.answersCommands = false
        var stopped = 0
        bench.peripheral.stop { stopped += 1 }
        bench.scheduler.advance(by: Peripheral.stopDeadline)
        #expect(stopped == 1)
        bench.scheduler.advance(by: .seconds(60))
        #expect(stopped == 1)
    }

    /// A healthy controller: the stop is done as soon as it answers the Reset.
    @Test func stopIsImmediateWithAnAnsweringController() throws {
        let bench = try Bench(device: HeartRateDevice(seed: 2))
        bench.controller.connect(handle: 0x0040, peer: bench.central)
        var stopped = false
        bench.peripheral.stop { stopped = true }
        bench.controller.disconnect(handle: 0x0040)
        #expect(stopped)
        #expect(bench.controller.commands.last?.opcode == HCIOpcode.reset)
        #expect(bench.scheduler.pendingCount == 0)
    }

    /// A peer that floods ACL data for an unknown handle or channel gets a few log lines, and
    /// the rest are counted.
    @Test func peerControlledLogVolumeHasABudget() throws {
        let capture = CapturedLog()
        let bench = try Bench(device: ProbeDevice(), logger: capture.logger)
        bench.controller.connect(handle: 0x0040, peer: bench.central)
        capture.removeAll()
        for _ in 0..<1000 {
            bench.controller.sendL2CAP(handle: 0x0077, cid: L2CAPChannel.att, [0x0A, 0x01, 0x00])
            bench.controller.sendL2CAP(handle: 0x0040, cid: 0x0099, [0x00])
        }
        // Ten lines each: unknown handles are the controller's (routing), unknown channels the link's.
        let unknownHandle = capture.lines.filter { $0.contains("unknown connection handle") }
        let unknownChannel = capture.lines.filter { $0.contains("unknown channel") }
        #expect(unknownHandle.count == 10)
        #expect(unknownChannel.count == 10)
        // A minute later the budget is back, and the next line says how many were left out.
        bench.scheduler.advance(by: .seconds(61))
        bench.controller.sendL2CAP(handle: 0x0077, cid: L2CAPChannel.att, [0x0A, 0x01, 0x00])
        #expect(capture.lines.last?.contains("990 similar lines left out") == true)
        #expect(bench.peripheral.host.logLinesLeftOut == 990)
    }

    /// `indicate` that returns false is followed by `peripheralIsReady`, and each indication
    /// reports how it ended.
    @Test func indicationsReportRoomAndTheirOutcome() throws {
        let probe = ProbeDevice()
        let bench = try Bench(device: probe)
        bench.controller.connect(handle: 0x0040, peer: bench.central)
        #expect(write(bench, cccd(probe.value), [0x02, 0x00]) == [[0x13]])
        let context = try #require(probe.context)
        var outcomes: [IndicationOutcome] = []
        var accepted = 0
        while context.indicate(probe.value, value: [1], to: nil, completion: { _, outcome in outcomes.append(outcome) }) {
            accepted += 1
            if accepted > 100 { break }
        }
        #expect(accepted == ATTServer.maxPendingIndications + 1)
        #expect(probe.readyCalls == 0)
        bench.att([0x1E])   // Handle Value Confirmation
        #expect(outcomes == [.confirmed])
        #expect(probe.readyCalls == 1)
        bench.controller.disconnect(handle: 0x0040)
        #expect(outcomes.count == accepted)
        #expect(outcomes.dropFirst().allSatisfy { $0 == .disconnected })
    }
}

/// Request-driven events (att-error, write) have a budget too; the counters stay exact.
@Suite struct RequestLogBudgetTests {
    @Test func attErrorFloodIsCountedButNotAllLogged() throws {
        let capture = CapturedLog()
        let bench = try Bench(device: ProbeDevice(), logger: capture.logger)
        bench.controller.connect(handle: 0x0040, peer: bench.central)
        capture.removeAll()
        for _ in 0..<500 { bench.att([0x0A, 0x00, 0x00]) }   // Read Request, handle 0: Invalid Handle
        let logged = capture.lines.filter { $0.contains("ATT ") }
        #expect(logged.count == 100)
        #expect(bench.peripheral.statistics.attErrors == 500)
        bench.scheduler.advance(by: .seconds(11))
        bench.att([0x0A, 0x00, 0x00])
        #expect(capture.lines.last?.contains("400 similar lines left out") == true)
    }
}

/// A small budget, by itself.
@Suite struct LogBudgetTests {
    @Test func burstThenCountThenNote() {
        var budget = LogBudget(burst: 2, window: .seconds(1))
        #expect(budget.take(now: 1) == 0)
        #expect(budget.take(now: 2) == 0)
        #expect(budget.take(now: 3) == nil)
        #expect(budget.take(now: 4) == nil)
        #expect(budget.leftOutTotal == 2)
        #expect(budget.take(now: 1_000_000_001) == 2)
        #expect(budget.take(now: 1_000_000_002) == 0)
        #expect(LogBudget.note(0) == "")
        #expect(LogBudget.note(1) == " (1 similar line left out)")
    }
}

/// Found by the soak test: with three links the Diagnostics value passed 512 octets and was
/// cut into invalid JSON. It must stay a whole JSON object with any number of links.
@Suite struct DiagnosticsSizeTests {
    @Test(arguments: [1, 3, 8, 32])
    func diagnosticsStayWholeJSONWithManyLinks(_ links: Int) throws {
        let bench = try Bench(device: HeartRateDevice(seed: 4), name: String(repeating: "N", count: 200))
        for index in 0..<links {
            bench.controller.connect(handle: UInt16(0x40 + index), peer: BluetoothAddress(value: 0xC0_00_00_00_10_00 | UInt64(index)))
        }
        let handle = bench.handle(of: BluetoothUUID("7d3c0002-9a5e-4d1a-8f6e-5c1b2d3e4f50")!)
        let value = bench.longRead(handle)
        #expect(value.count <= 512)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(value)) as? [String: Any])
        #expect(object["connections"] as? Int == links)
        let listed = (object["links"] as? [Any])?.count ?? -1
        let leftOut = object["links_left_out"] as? Int ?? 0
        #expect(listed + leftOut == links)
        #expect(listed >= 1)
    }
}

/// Found by the fuzzer: links that never reported closing outlived the stop (their timers still
/// sent signalling after the Reset, and the host kept their device alive).
@Suite struct StopForgetsLinksTests {
    @Test func linksThatNeverCloseAreForgottenAfterTheStop() throws {
        let probe = ProbeDevice()
        let bench = try Bench(device: probe)
        bench.controller.connect(handle: 0x0040, peer: bench.central)
        var stopped = false
        bench.peripheral.stop { stopped = true }
        // The controller answers the Disconnect but never reports the link closed.
        bench.scheduler.advance(by: .seconds(3))
        #expect(stopped)
        #expect(bench.peripheral.connectionCount == 0)
        #expect(bench.peripheral.host.connectionCount == 0)
        #expect(probe.disconnected.count == 1)
        let sent = bench.controller.aclOut.count
        bench.scheduler.advance(by: .seconds(60))
        #expect(bench.controller.aclOut.count == sent, "nothing is sent on a link after the stop")
        #expect(bench.scheduler.pendingCount == 0)
    }
}

/// Log lines about an attribute name its characteristic's UUID beside the handle (issue 23: a
/// reader had to map handles to characteristics by hand).
@Suite struct AttributeNamesInLogsTests {
    @Test func anATTErrorLineNamesTheCharacteristicsUUID() throws {
        let capture = CapturedLog()
        let device = HeartRateDevice(seed: 3)
        let bench = try Bench(device: device, logger: capture.logger)
        bench.controller.connect(handle: 0x0040, peer: bench.central)
        let location = try #require(bench.peripheral.database.characteristic(BluetoothUUID(0x2A38)))
        let measurement = try #require(bench.peripheral.database.characteristic(BluetoothUUID(0x2A37)))
        let cccd = try #require(measurement.clientConfigurationHandle)
        capture.removeAll()
        // Body Sensor Location is read-only: Write Not Permitted (0x03).
        _ = bench.att([0x12, UInt8(location.valueHandle & 0xFF), UInt8(location.valueHandle >> 8), 0x01], handle: 0x0040)
        // A CCCD value of one octet: Invalid Attribute Value Length (0x0D).
        _ = bench.att([0x12, UInt8(cccd & 0xFF), UInt8(cccd >> 8), 0x01], handle: 0x0040)
        let errors = capture.lines.filter { $0.contains("ATT ") && $0.contains("for opcode 0x12") }
        #expect(errors.count == 2, "\(capture.lines)")
        #expect(errors.first?.hasSuffix("handle \(Hex.word(location.valueHandle)) (2A38)") == true, "\(errors)")
        #expect(errors.last?.hasSuffix("handle \(Hex.word(cccd)) (2A37 CCCD)") == true, "\(errors)")
        #expect(bench.peripheral.attributeNote(0xFFF0) == "")
    }
}
