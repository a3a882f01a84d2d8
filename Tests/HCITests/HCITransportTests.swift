import BlemuCore
import BlemuHCI
import Logging
import Testing

/// The transport is handed to HCI once (`ControllerHost(controller:...:transport:)`): from then
/// on packets pass between them directly, both ways, with nothing above HCI between them
/// (Docs/ARCHITECTURE.md, "One ATT request, end to end").
@Suite struct HCITransportTests {
    /// A transport that records what HCI sends and delivers what a test gives it.
    final class RecordingTransport: HCITransport {
        var onPacket: ((H4PacketType, ArraySlice<UInt8>) -> Void)?
        var sent: [(type: H4PacketType, body: [UInt8])] = []
        func send(_ type: H4PacketType, _ body: ArraySlice<UInt8>) -> Bool {
            sent.append((type, Array(body)))
            return true
        }
        func deliver(_ type: H4PacketType, _ body: [UInt8]) { onPacket?(type, body[...]) }
    }

    static func host(on transport: RecordingTransport) -> ControllerHost {
        ControllerHost(controller: "handed", scheduler: ManualScheduler(),
                       logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }), transport: transport)
    }

    /// Vol 4, Part E, 7.3.2: the host starts with HCI_Reset; its Command Complete (7.7.14) comes
    /// back through the transport's `onPacket`, which HCI set itself, and the next command follows.
    @Test func aControllerHostHandedATransportSendsThroughItAndHearsWhatItReceives() {
        let transport = RecordingTransport()
        let host = Self.host(on: transport)
        #expect(transport.onPacket != nil, "HCI took the transport's packets")
        host.controllerUp()
        #expect(transport.sent.map(\.type) == [.command])
        #expect(transport.sent.first?.body == [0x03, 0x0C, 0x00], "HCI_Reset first")
        // Command Complete: one credit, HCI_Reset, status success.
        transport.deliver(.event, [0x0E, 0x04, 0x01, 0x03, 0x0C, 0x00])
        #expect(transport.sent.count == 2, "the answer reached HCI, which sent the next command")
    }

    /// Number Of Completed Packets (Vol 4, Part E, 7.7.19) only gives buffers back: it changes no
    /// advertising or connection, so the state observer (a service's status) is not called for it,
    /// as it is for every other event; and nothing is called while no observer is set.
    @Test func theStateObserverHearsEveryEventButNumberOfCompletedPackets() {
        let transport = RecordingTransport()
        let host = Self.host(on: transport)
        host.controllerUp()
        transport.deliver(.event, [0x13, 0x05, 0x01, 0x40, 0x00, 0x01, 0x00])
        var calls = 0
        host.onStateMayChange = { calls += 1 }
        transport.deliver(.event, [0x13, 0x05, 0x01, 0x40, 0x00, 0x01, 0x00])
        #expect(calls == 0)
        transport.deliver(.event, [0x0E, 0x04, 0x01, 0x03, 0x0C, 0x00])
        #expect(calls == 1)
    }
}
