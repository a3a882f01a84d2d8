import BlemuChannels
import BlemuCore
import BlemuHCI
import BlemuL2CAP
import CAllocationCounter
import Logging
import Testing

/// A credit based channel's data path allocates nothing once warm: SDUs cut into K-frames, the
/// K-frames gathered into SDUs on the other link, credits given back, all through two links
/// joined in process (each link's HCI hands its PDUs straight to the other link).
@Suite struct ChannelAllocationTests {
    final class Wire: L2CAPLower {
        weak var peer: L2CAPLink?
        func sendL2CAP(handle: UInt16, pdu: ArraySlice<UInt8>, priority: TransmitPriority) -> Bool {
            peer?.receive(ACLPacket(handle: handle, boundary: .firstFlushable, data: pdu))
            return true
        }
        func send(_ command: HCICommand, completion: ((CommandResult) -> Void)?) -> Bool { true }
    }

    final class Counter: CreditBasedChannelDelegate {
        var bytes = 0
        func channelOpened(_ channel: CreditBasedChannel) {}
        func channel(_ channel: CreditBasedChannel, received sdu: ArraySlice<UInt8>) { bytes &+= sdu.count }
        func channelClosed(_ channel: CreditBasedChannel, reason: ChannelCloseReason) {}
        func channelIsReady(_ channel: CreditBasedChannel) {}
    }

    @Test func sdusBothWaysAllocateNothing() throws {
        let logger = Logger(label: "alloc", factory: { _ in SwiftLogNoOpLogHandler() })
        let scheduler = ManualScheduler()
        let wireA = Wire(), wireB = Wire()
        let a = L2CAPLink(handle: 1, role: .central, context: L2CAPLinkContext(hci: wireA, scheduler: scheduler, logger: logger))
        let b = L2CAPLink(handle: 1, role: .peripheral, context: L2CAPLinkContext(hci: wireB, scheduler: scheduler, logger: logger))
        wireA.peer = b
        wireB.peer = a
        let servers = ChannelServers()
        let receiver = Counter()
        let sender = Counter()
        let spsm = try #require(servers.publish(parameters: ChannelParameters(mtu: 4096, mps: 100, initialCredits: 8), delegate: receiver)).spsm
        let channelsA = CreditBasedChannels(link: a, servers: ChannelServers())
        let channelsB = CreditBasedChannels(link: b, servers: servers)
        let channel = try #require(channelsA.connect(spsm: spsm, parameters: ChannelParameters(mtu: 4096, mps: 100), delegate: sender))
        try #require(channel.state == .open)
        let small = [UInt8](repeating: 7, count: 50)   // one K-frame
        let large = [UInt8](repeating: 9, count: 3000) // thirty-one K-frames, gathered
        let count = AllocationTests().allocations {
            _ = channel.send(small)
            _ = channel.send(large)
        }
        #expect(count == 0)
        #expect(receiver.bytes == (AllocationTests.iterations + 1) * 3050)
        _ = channelsB
    }
}
