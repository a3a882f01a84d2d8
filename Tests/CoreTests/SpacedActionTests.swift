import Testing
@testable import BlemuCore

@Suite struct SpacedActionTests {
    @Test func aBurstRunsOnceNowAndOnceAtTheGapsEndAndNothingIsLeftScheduled() {
        let clock = ManualScheduler()
        let start = clock.nowNanoseconds
        var runs: [UInt64] = []
        let action = SpacedAction(scheduler: clock, gap: .milliseconds(100)) { runs.append(clock.nowNanoseconds - start) }
        action.request()
        #expect(runs == [0])
        for _ in 0..<1_000 {
            clock.advance(by: .microseconds(50))
            action.request()
        }
        // 50 ms in: the burst is put off to 100 ms, once.
        #expect(runs == [0])
        clock.advance(by: .milliseconds(50))
        #expect(runs == [0, 100_000_000])
        // Quiet: nothing more runs, and a request after a quiet gap runs at once.
        clock.advance(by: .seconds(5))
        #expect(runs.count == 2)
        #expect(clock.pendingCount == 0)
        action.request()
        #expect(runs.last == 5_100_000_000)
    }

    @Test func cancelForgetsAPutOffRequest() {
        let clock = ManualScheduler()
        var runs = 0
        let action = SpacedAction(scheduler: clock, gap: .milliseconds(100)) { runs += 1 }
        action.request()
        action.request()
        action.cancel()
        clock.advance(by: .seconds(1))
        #expect(runs == 1)
    }
}
