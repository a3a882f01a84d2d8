import BlemuCentral
import BlemuCore
import BlemuDevices
import BlemuHCI
import BlemuHost
import BlemuSimulator
import BlemuTransport
import CAllocationCounter
import Logging
import Testing

/// A central link's send path allocates nothing once warm: a Write Command through the link's
/// ATT bearer, L2CAP and the HCI host to the controller, and the controller's Number Of
/// Completed Packets back, as each packet of `blemu bench`'s GATT send does. The link is made
/// through two simulated controllers; then the central's output goes to a sink, so only the
/// host's own allocations are counted.
@Suite struct CentralAllocationTests {
    final class Sink {
        var forward: ((UInt8, ArraySlice<UInt8>) -> Bool)?
        var sent = 0
        func output(_ type: UInt8, _ packet: ArraySlice<UInt8>) -> Bool {
            if let forward { return forward(type, packet) }
            sent += 1
            return true
        }
    }

    /// A central linked to a heart-rate peripheral through two simulated controllers, its
    /// output then going to `sink` alone.
    final class Linked {
        let scheduler = ManualScheduler()
        let a = SimulatedController(), b = SimulatedController()
        let air: SimulatedAir
        let sink = Sink()
        let central: CentralHost
        let peripheral: Peripheral
        let link: CentralLink

        init() throws {
            let logger = Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })
            a.address = BluetoothAddress("C0:DE:00:00:00:01")!
            b.address = BluetoothAddress("C0:DE:00:00:00:02")!
            air = SimulatedAir(a, b)
            let a = a, b = b, sink = sink
            sink.forward = { a.output($0, $1) }
            central = try CentralHost(on: ControllerHost(controller: "central", scheduler: scheduler, logger: logger,
                                                          output: { sink.output($0, $1) }))
            a.host = central.hci
            let peripheral = try Peripheral(device: HeartRateDevice(seed: 7),
                                            configuration: PeripheralConfiguration(name: "Air", controller: "peripheral"),
                                            scheduler: scheduler, logger: logger, output: { b.output($0, $1) })
            self.peripheral = peripheral
            b.deliver = { [unowned peripheral] in peripheral.receive(packetType: $0, packet: $1) }
            central.controller.controllerUp()
            peripheral.controllerUp()
            air.run()
            let address = try #require(b.randomAddress)
            var made: Result<CentralLink, CentralError>?
            central.connect(to: LEAddress(address, isRandom: true)) { made = $0 }
            air.run()
            link = try #require(try made?.get())
            air.run()
            sink.forward = nil
        }
    }

    @Test func aWriteCommandAndItsCompletionAllocateNothing() throws {
        let rig = try Linked()
        let link = rig.link, central = rig.central, sink = rig.sink
        let handle = link.handle
        // Number Of Completed Packets (Vol 4, Part E, 7.7.19): one handle, one packet.
        let completed: [UInt8] = [0x13, 0x05, 0x01, UInt8(handle & 0xFF), UInt8(handle >> 8), 0x01, 0x00]
        var pdu: [UInt8] = [0x52, 0x10, 0x00] + [UInt8](repeating: 0xAB, count: 17)
        pdu.reserveCapacity(64)
        var refused = 0
        let step = {
            if !link.bearer.send(pdu[...], kind: .notification) { refused += 1 }
            central.hci.receiveEvent(completed[...])
        }
        step()
        step()
        blemu_allocation_counting_start()
        for _ in 0..<200 { step() }
        let allocations = blemu_allocation_counting_stop()
        #expect(allocations == 0)
        #expect(refused == 0)
        #expect(sink.sent == 202)
    }

    /// A notification from the peripheral (`blemu bench`'s GATT receive): the ACL packet
    /// through the HCI host, L2CAP and the ATT bearer to the GATT client's handler.
    @Test func aNotificationReceivedAllocatesNothing() throws {
        let rig = try Linked()
        let handle = rig.link.handle
        var heard = 0
        rig.link.client.onNotification = { _, value in heard += value.count }
        // ATT_HANDLE_VALUE_NTF (Vol 3, Part F, 3.4.7.1) on the ATT channel (CID 0x0004).
        let att: [UInt8] = [0x1B, 0x10, 0x00] + [UInt8](repeating: 0xCD, count: 17)
        let l2cap: [UInt8] = [UInt8(att.count), 0x00, 0x04, 0x00] + att
        let acl: [UInt8] = [UInt8(handle & 0xFF), UInt8(handle >> 8) | 0x20, UInt8(l2cap.count), 0x00] + l2cap
        let step = { rig.central.hci.receiveACL(acl[...]) }
        step()
        step()
        blemu_allocation_counting_start()
        for _ in 0..<200 { step() }
        let allocations = blemu_allocation_counting_stop()
        #expect(allocations == 0)
        #expect(heard == 202 * 17)
    }

    /// What a controller's socket gives (`blemu bench` over rootcanal): a read of H4 bytes, a
    /// Number Of Completed Packets and a notification, framed (`H4Framer`, in the reused
    /// buffer a transport keeps) and handed to the HCI host.
    @Test func controllerBytesFramedAndHandledAllocateNothing() throws {
        let rig = try Linked()
        let handle = rig.link.handle
        var heard = 0
        rig.link.client.onNotification = { _, value in heard += value.count }
        let att: [UInt8] = [0x1B, 0x10, 0x00] + [UInt8](repeating: 0xCD, count: 17)
        let l2cap: [UInt8] = [UInt8(att.count), 0x00, 0x04, 0x00] + att
        let bytes: [UInt8] = [0x04, 0x13, 0x05, 0x01, UInt8(handle & 0xFF), UInt8(handle >> 8), 0x01, 0x00]
            + [0x02, UInt8(handle & 0xFF), UInt8(handle >> 8) | 0x20, UInt8(l2cap.count), 0x00] + l2cap
        var framer = H4Framer()
        let hci = rig.central.hci
        let step = {
            framer.feed(bytes[...]) { type, body in
                switch type {
                case .event: hci.receiveEvent(body)
                case .acl: hci.receiveACL(body)
                default: break
                }
            }
        }
        step()
        step()
        blemu_allocation_counting_start()
        for _ in 0..<200 { step() }
        let allocations = blemu_allocation_counting_stop()
        #expect(allocations == 0)
        #expect(heard == 202 * 17)
    }
}
