import BlemuATT
import BlemuCore
import BlemuDevices
import BlemuGATT
@testable import BlemuHost
import BlemuTestSupport
import Foundation
import Testing
@testable import HostTestSupport

/// The device hears of its links' requests only while someone wants them (the control socket's
/// `watch`, a scenario, the journal's write lines): otherwise a request that goes well calls
/// nothing in Host, and the Diagnostics value still counts it (each link's session counts, the
/// device adds them up when asked, the closed links' included).
@Suite struct RequestWatchTests {
    static func bytes(_ handle: UInt16) -> [UInt8] { [UInt8(handle & 0xFF), UInt8(handle >> 8)] }

    /// The Diagnostics value, read whole.
    static func diagnostics(_ bench: Bench, link: UInt16) throws -> [String: Any] {
        let handle = bench.handle(of: DiagnosticsService.characteristicUUID)
        return try #require(try JSONSerialization.jsonObject(with: Data(bench.longRead(handle, link: link))) as? [String: Any])
    }

    @Test func withNobodyWatchingNoRequestReachesTheDeviceAndTheyAreStillCountedAcrossLinks() throws {
        let device = HeartRateDevice(seed: 4)
        let bench = try Bench(device: device)
        // A delegate that counts stands in for the device's on the links made from now on.
        let counting = CountingServerDelegate()
        bench.peripheral.links.serverDelegate = counting
        #expect(bench.peripheral.links.requestWatch.observer == nil && !bench.peripheral.links.requestWatch.isWatched)
        bench.controller.connect(handle: 0x0040, peer: bench.central)
        let location = device.bodySensorLocation.valueHandle
        let point = device.controlPoint.valueHandle
        for _ in 0..<3 { #expect(bench.att([0x0A] + Self.bytes(location)).first?.first == 0x0B) }
        #expect(bench.att([0x12] + Self.bytes(point) + [0x01]) == [[0x13]])
        #expect(counting.calls == 0, "nothing above the connection heard a request that went well")
        #expect(bench.att([0x0A, 0xFF, 0x7F]).first?.first == 0x01)
        #expect(counting.calls == 1, "an error is always told")
        bench.controller.disconnect(handle: 0x0040, reason: 0x13)

        bench.peripheral.links.serverDelegate = bench.peripheral
        bench.controller.connect(handle: 0x0041, peer: bench.central)
        #expect(bench.att([0x0A] + Self.bytes(location), handle: 0x0041).first?.first == 0x0B)
        #expect(bench.att([0x0A, 0xFF, 0x7F], handle: 0x0041).first?.first == 0x01)
        // 5 on the closed link, 2 on this one; the read of the value itself is counted once answered.
        let value = try Self.diagnostics(bench, link: 0x0041)
        #expect(value["att_requests"] as? Int == 7)
        #expect(value["att_errors"] as? Int == 1, "the error on the closed link went to the counting delegate")
        let again = try Self.diagnostics(bench, link: 0x0041)
        let blobs = (again["att_requests"] as? Int ?? 0) - 7
        #expect(blobs >= 1, "the first long read's Read and Read Blobs are counted: \(blobs)")
    }

    @Test func theJournalsWriteLinesWatchOnlyWritesAndEventsWatchReadsAsWell() throws {
        let log = CapturedLog()
        let device = HeartRateDevice(seed: 4)
        let bench = try Bench(device: device, logger: log.logger)
        let watch = bench.peripheral.links.requestWatch
        // At info level (blemu run's default) each write has its line: writes are watched, reads not.
        #expect(watch.reportsWrites && !watch.reportsReads && !watch.reportsAnswers)
        bench.controller.connect(handle: 0x0040, peer: bench.central)
        log.removeAll()
        #expect(bench.att([0x12] + Self.bytes(device.controlPoint.valueHandle) + [0x01]) == [[0x13]])
        #expect(log.messages.contains("write of 1 bytes to 2A39"), "\(log.messages)")
        var events: [DeviceEvent] = []
        bench.peripheral.eventObserver = { events.append($0) }
        #expect(watch.reportsWrites && watch.reportsReads)
        _ = bench.att([0x0A] + Self.bytes(device.bodySensorLocation.valueHandle))
        #expect(events.map(\.kind) == [.read])
        bench.peripheral.eventObserver = nil
        #expect(!watch.reportsReads)
        // Above info level, and nobody watching: nothing at all.
        var quiet = log.logger
        quiet.logLevel = .notice
        bench.peripheral.logger = quiet
        #expect(!watch.isWatched && watch.observer == nil)
    }
}

/// Counts every call a device's servers make to their delegate.
final class CountingServerDelegate: ATTServerDelegate {
    var calls = 0
    func attServer(_ server: ATTServer, refused opcode: UInt8, handle: UInt16, error: ATTError) { calls += 1 }
    func attServer(_ server: ATTServer, mtuChanged mtu: Int) { calls += 1 }
    func attServer(_ server: ATTServer, configured characteristic: Characteristic, from old: UInt16, to new: UInt16) { calls += 1 }
    func attServerTransactionTimedOut(_ server: ATTServer) { calls += 1 }
    func attServerIndicationQueueHasRoom(_ server: ATTServer) { calls += 1 }
    func attServer(_ server: ATTServer, executeWriteRefusedAfter written: Int, error: ATTError, handle: UInt16) { calls += 1 }
    func attServer(_ server: ATTServer, acceptedSignCounter counter: UInt32) { calls += 1 }
    func attServer(_ server: ATTServer, droppedSignedWrite reason: SignedWriteDrop, handle: UInt16) { calls += 1 }
    func attServer(_ server: ATTServer, authorize characteristic: Characteristic, access: AttributeAccess) -> Bool {
        calls += 1
        return false
    }
}
