import BlemuRunLoop
import CAllocationCounter
import Testing

/// The production run loop's timers (an indication's 30 s timer, a fragment's reassembly timer,
/// the SMP timer) allocate nothing once their storage has grown: a closure made once is
/// scheduled, cancelled or fired again and again without a heap allocation.
@Suite struct RunLoopTimerAllocationTests {
    static let iterations = 200

    /// Allocations of `iterations` runs after as many warm-up runs: a cancelled timer stays in
    /// the heap until tombstones outnumber live timers, so the heap's storage grows over the
    /// first runs and is then reused.
    func allocations(_ body: () -> Void) -> Int {
        for _ in 0..<Self.iterations { body() }
        blemu_allocation_counting_start()
        for _ in 0..<Self.iterations { body() }
        return blemu_allocation_counting_stop()
    }

    @Test func scheduleAndCancel() throws {
        let loop = try RunLoop()
        var fired = 0
        let action = { fired += 1 }
        let count = allocations {
            let id = loop.schedule(after: .seconds(30), action)
            loop.cancel(id)
        }
        #expect(count == 0)
        #expect(fired == 0)
        #expect(loop.pendingTimerCount == 0)
    }

    @Test func scheduleAndFire() throws {
        let loop = try RunLoop()
        var fired = 0
        let action = { fired += 1 }
        let count = allocations {
            loop.schedule(after: .zero, action)
            _ = loop.runOnce(timeout: .milliseconds(100))
        }
        #expect(count == 0)
        #expect(fired == 2 * Self.iterations)
    }
}
