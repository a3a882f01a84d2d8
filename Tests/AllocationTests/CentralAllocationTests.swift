import BlemuBenchRig
import BlemuCentral
import BlemuCore
import BlemuHCI
import BlemuTransport
import CAllocationCounter
import Testing

/// A central link's path allocates nothing once warm, as each packet of `blemu bench`'s GATT
/// modes goes: a Write Command through the link's ATT bearer, L2CAP and the HCI host with the
/// controller's Number Of Completed Packets back, and a notification received. The link is
/// made through two simulated controllers (`AirBench`); then the central's output goes to a
/// counting sink, so only the host's own allocations are counted.
@Suite struct CentralAllocationTests {
    /// The bench with its link made, the central's output counted and dropped.
    final class Linked {
        let bench: AirBench
        let link: CentralLink
        var sent = 0
        var heard = 0

        init() throws {
            bench = try AirBench()
            let address = try #require(bench.peripheralController.randomAddress)
            link = try #require(try bench.connect(to: address)?.get())
            bench.air.run()
            bench.centralOutput = { [unowned self] _, _ in sent += 1; return true }
            link.client.onNotification = { [unowned self] _, value in heard += value.count }
        }

        /// Number Of Completed Packets (Vol 4, Part E, 7.7.19): the link's handle, one packet.
        var completed: [UInt8] { [0x13, 0x05, 0x01, UInt8(link.handle & 0xFF), UInt8(link.handle >> 8), 0x01, 0x00] }

        /// ATT_HANDLE_VALUE_NTF (Vol 3, Part F, 3.4.7.1) of 17 bytes on the ATT channel (CID
        /// 0x0004), one ACL packet.
        var notification: [UInt8] {
            let att: [UInt8] = [0x1B, 0x10, 0x00] + [UInt8](repeating: 0xCD, count: Self.notified)
            let l2cap: [UInt8] = [UInt8(att.count), 0x00, 0x04, 0x00] + att
            return [UInt8(link.handle & 0xFF), UInt8(link.handle >> 8) | 0x20, UInt8(l2cap.count), 0x00] + l2cap
        }
        static let notified = 17

        /// Heap allocations of 200 runs of `step` after two warm-up runs.
        func allocations(_ step: () -> Void) -> Int {
            step()
            step()
            blemu_allocation_counting_start()
            for _ in 0..<Self.counted { step() }
            return blemu_allocation_counting_stop()
        }
        static let counted = 200
    }

    @Test func aWriteCommandAndItsCompletionAllocateNothing() throws {
        let rig = try Linked()
        let completed = rig.completed
        var pdu: [UInt8] = [0x52, 0x10, 0x00] + [UInt8](repeating: 0xAB, count: 17)
        pdu.reserveCapacity(64)
        var refused = 0
        let count = rig.allocations {
            if !rig.link.bearer.send(pdu[...], kind: .notification) { refused += 1 }
            rig.bench.central.hci.receiveEvent(completed[...])
        }
        #expect(count == 0)
        #expect(refused == 0)
        #expect(rig.sent == Linked.counted + 2)
    }

    /// A notification from the peripheral (`blemu bench`'s GATT receive): the ACL packet
    /// through the HCI host, L2CAP and the ATT bearer to the GATT client's handler.
    @Test func aNotificationReceivedAllocatesNothing() throws {
        let rig = try Linked()
        let acl = rig.notification
        #expect(rig.allocations { rig.bench.central.hci.receiveACL(acl[...]) } == 0)
        #expect(rig.heard == (Linked.counted + 2) * Linked.notified)
    }

    /// What a controller's socket gives (`blemu bench` over rootcanal): one read of H4 bytes, a
    /// Number Of Completed Packets and a notification, framed by `H4Framer` (in the buffer a
    /// transport keeps) and handed to the HCI host.
    @Test func controllerBytesFramedAndHandledAllocateNothing() throws {
        let rig = try Linked()
        let bytes: [UInt8] = [H4PacketType.event.rawValue] + rig.completed + [H4PacketType.acl.rawValue] + rig.notification
        var framer = H4Framer()
        let hci = rig.bench.central.hci
        let count = rig.allocations {
            framer.feed(bytes[...]) { type, body in
                switch type {
                case .event: hci.receiveEvent(body)
                case .acl: hci.receiveACL(body)
                default: break
                }
            }
        }
        #expect(count == 0)
        #expect(rig.heard == (Linked.counted + 2) * Linked.notified)
    }
}
