import BlemuBench
import BlemuBenchProtocol
import BlemuCore
import CAllocationCounter
import Testing

/// `blemu bench`'s packet path allocates nothing once warm: the sender's packet encoded into
/// its reused buffer, framed for a channel, read back out of the stream and counted by a
/// receiving runner, as each packet of a run does.
@Suite struct BenchAllocationTests {
    final class LoopbackIO: BenchPacketIO {
        var room = 0
        var frame: [UInt8] = []
        var framer = BenchStreamFramer()
        weak var receiver: BenchRunner?
        var overhead: Int { BenchStreamFramer.lengthFieldSize }
        var largestPacket: Int { 1022 }
        var mtu: Int { 1024 }

        init() { frame.reserveCapacity(1024) }

        func sendPacket(_ packet: ArraySlice<UInt8>) -> Bool {
            guard room > 0 else { return false }
            room -= 1
            frame.removeAll(keepingCapacity: true)
            BenchStreamFramer.frame(packet, into: &frame)
            let receiver = receiver
            framer.receive(frame[...]) { receiver?.received($0) }
            return true
        }
    }

    @Test func sendingAndReceivingAPacketAllocatesNothing() {
        let clock = ManualScheduler()
        let sender = BenchRunner(scenario: .send, mode: .l2capClient, packetCount: 1_000_000, packetSize: 500, scheduler: clock)
        let receiver = BenchRunner(scenario: .receive, mode: .l2capServer, packetCount: 0, packetSize: 500, scheduler: clock)
        let io = LoopbackIO()
        io.receiver = receiver
        sender.io = io
        // One packet per call: the transport takes one, then has room for one more.
        let step = {
            io.room = 1
            sender.ioIsReady()
        }
        step()
        step()
        blemu_allocation_counting_start()
        for _ in 0..<200 { step() }
        let allocations = blemu_allocation_counting_stop()
        #expect(allocations == 0)
        #expect(!receiver.isFinished)
    }
}
