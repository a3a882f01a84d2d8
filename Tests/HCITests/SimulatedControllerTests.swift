import BlemuCore
import BlemuHCI
import BlemuSimulator
import Testing

/// The simulated controller alone (what every host test, fuzz target and benchmark stands on):
/// its answers follow the Core spec, queued answers wait for `flush()`, and it catches a host
/// that breaks the ACL rules.
@Suite struct SimulatedControllerTests {
    final class Heard {
        var packets: [(type: UInt8, bytes: [UInt8])] = []
        var violations: [String] = []
    }

    func controller(_ delivery: SimulatedController.Delivery = .immediate) -> (SimulatedController, Heard) {
        let controller = SimulatedController(delivery: delivery)
        let heard = Heard()
        controller.deliver = { heard.packets.append(($0, Array($1))) }
        controller.onViolation = { heard.violations.append($0) }
        return (controller, heard)
    }

    /// ACL data from the host on `handle`: the ACL header, then `data`.
    func acl(_ handle: UInt16, boundary: UInt8 = 0x00, _ data: [UInt8]) -> [UInt8] {
        [UInt8(handle & 0xFF), UInt8(handle >> 8) | boundary << 4, UInt8(data.count), UInt8(data.count >> 8)] + data
    }

    /// Vol 4, Part E, 7.8.33: LE Set Data Length ends in Command Complete with the Connection_Handle.
    @Test func setDataLengthIsAnsweredWithCommandCompleteAndTheHandle() {
        let (controller, heard) = controller()
        _ = controller.output(0x01, [0x22, 0x20, 0x06, 0x40, 0x00, 0xFB, 0x00, 0x48, 0x08][...])
        #expect(heard.packets.map(\.bytes) == [[0x0E, 0x06, 0x01, 0x22, 0x20, 0x00, 0x40, 0x00]])
        // Disconnect (7.1.6) is a Command Status command.
        _ = controller.output(0x01, [0x06, 0x04, 0x03, 0x40, 0x00, 0x13][...])
        #expect(heard.packets.last?.bytes == [0x0F, 0x04, 0x00, 0x01, 0x06, 0x04])
        #expect(heard.violations.isEmpty)
    }

    @Test func queuedAnswersWaitForFlush() {
        let (controller, heard) = controller(.queued)
        _ = controller.output(0x01, [0x03, 0x0C, 0x00][...])   // Reset
        #expect(heard.packets.isEmpty && !controller.isQuiet)
        controller.flush()
        #expect(heard.packets.map(\.bytes) == [[0x0E, 0x04, 0x01, 0x03, 0x0C, 0x00]])
        #expect(controller.isQuiet)
    }

    @Test func fragmentsReassembleIntoFramesAndEachPacketIsCompleted() {
        let (controller, heard) = controller()
        controller.checksLinks = true
        controller.connect(handle: 0x0040, peer: BluetoothAddress("F0:F1:F2:F3:F4:F5")!)
        heard.packets.removeAll()
        _ = controller.output(0x02, acl(0x0040, [0x03, 0x00, 0x04, 0x00, 0x0A])[...])
        _ = controller.output(0x02, acl(0x0040, boundary: 0x01, [0x01, 0x00])[...])
        #expect(controller.takeL2CAP(handle: 0x0040, cid: 0x0004) == [[0x0A, 0x01, 0x00]])
        // Number Of Completed Packets (7.7.19) for each, one buffer back each time.
        #expect(heard.packets.map(\.bytes) == [[0x13, 0x05, 0x01, 0x40, 0x00, 0x01, 0x00],
                                               [0x13, 0x05, 0x01, 0x40, 0x00, 0x01, 0x00]])
        #expect(heard.violations.isEmpty)
    }

    /// LE Connection Complete (7.7.65.1) on handle 0x0040 in `role`, from F0:F1:F2:F3:F4:F5,
    /// interval 30 ms, latency 0, timeout 4 s; `short` leaves its last octet out, as a
    /// malformed event a host drops.
    static func connectionComplete(role: UInt8, short: Bool = false) -> [UInt8] {
        var parameters: [UInt8] = [0x01, 0x00, 0x40, 0x00, role, 0x01, 0xF5, 0xF4, 0xF3, 0xF2, 0xF1, 0xF0,
                                   0x18, 0x00, 0x00, 0x00, 0x90, 0x01, 0x00]
        if short { parameters.removeLast() }
        return [0x3E, UInt8(parameters.count)] + parameters
    }

    /// A fuzz input speaking for the controller reopens a handle mid-PDU: whatever the new link's
    /// role (one the host keeps, or refuses), the host ends its old link there (Vol 4, Part E,
    /// 5.3.1) and a new PDU starts afresh (no violation); the old PDU's rest is then caught.
    @Test func aHandleReopenedMidPDUStartsAfresh() {
        for role: UInt8 in [0x01, 0x00, 0x1A] {
            let (controller, heard) = controller()
            let complete = Self.connectionComplete(role: role)
            controller.note(complete[...])
            _ = controller.output(0x02, acl(0x0040, [0x05, 0x00, 0x04, 0x00, 0x0B])[...])   // 1 of 5 bytes
            controller.note(complete[...])
            _ = controller.output(0x02, acl(0x0040, [0x03, 0x00, 0x04, 0x00, 0x0A, 0x01, 0x00])[...])
            #expect(heard.violations.isEmpty, "the new link's first PDU, role \(role)")
            #expect(controller.takeL2CAP(handle: 0x0040, cid: 0x0004) == [[0x0A, 0x01, 0x00]])
            controller.note(complete[...])
            _ = controller.output(0x02, acl(0x0040, [0x05, 0x00, 0x04, 0x00, 0x0B])[...])
            controller.note(complete[...])
            _ = controller.output(0x02, acl(0x0040, boundary: 0x01, [0x01, 0x02, 0x03, 0x04])[...])
            #expect(heard.violations == ["continuing ACL fragment with no PDU started on handle 64"], "role \(role)")
        }
    }

    /// A Connection Complete the host drops as malformed (one octet short) leaves the link it
    /// names as it was, here as in the host: the old link's PDU goes on (h4-host's long run at
    /// 1,408,151 executions: the checker reset the handle on such an event, and took the rest
    /// of the host's PDU for a continuation with no start).
    @Test func aMalformedConnectionCompleteChangesNothing() {
        let (controller, heard) = controller()
        controller.note(Self.connectionComplete(role: 0x01)[...])
        _ = controller.output(0x02, acl(0x0040, [0x03, 0x00, 0x04, 0x00, 0x0A])[...])   // 1 of 3 bytes
        controller.note(Self.connectionComplete(role: 0x01, short: true)[...])
        _ = controller.output(0x02, acl(0x0040, boundary: 0x01, [0x01, 0x00])[...])
        #expect(heard.violations.isEmpty, "\(heard.violations)")
        #expect(controller.takeL2CAP(handle: 0x0040, cid: 0x0004) == [[0x0A, 0x01, 0x00]])
    }

    /// Vol 4, Part E, 4.1.1: no more packets than buffers, none bigger than a buffer, none on a
    /// handle that is not connected; Vol 3, Part A, 7.2.1: fragments make whole frames.
    @Test func aHostBreakingTheACLRulesIsCaught() {
        let (controller, heard) = controller()
        controller.checksLinks = true
        controller.autoComplete = false
        controller.aclBufferCount = 2
        _ = controller.output(0x02, acl(0x0040, [0x01, 0x00, 0x04, 0x00, 0x0A])[...])
        #expect(heard.violations == ["ACL data sent on handle 64, which is not connected"])
        controller.connect(handle: 0x0041, peer: BluetoothAddress("F0:F1:F2:F3:F4:F5")!)
        heard.violations.removeAll()
        _ = controller.output(0x02, acl(0x0041, boundary: 0x01, [0x0A])[...])
        #expect(heard.violations == ["continuing ACL fragment with no PDU started on handle 65"])
        heard.violations.removeAll()
        // A 100-byte PDU on the ATT channel, its first fragment one byte too long for a buffer.
        _ = controller.output(0x02, acl(0x0041, [100, 0x00, 0x04, 0x00] + [UInt8](repeating: 0, count: 24))[...])
        #expect(heard.violations == ["ACL packet of 28 bytes for buffers of 27"])
        _ = controller.output(0x02, acl(0x0041, boundary: 0x01, [UInt8](repeating: 0, count: 27))[...])
        #expect(heard.violations.last == "3 ACL packets in flight for 2 controller buffers")
        controller.completePackets()
        #expect(heard.packets.last?.bytes == [0x13, 0x05, 0x01, 0x41, 0x00, 0x03, 0x00])
    }
}
