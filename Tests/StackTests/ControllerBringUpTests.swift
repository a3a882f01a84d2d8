import BlemuCore
import Testing
@testable import BlemuStack

@Suite struct ControllerBringUpTests {
    @Test func atMostAWindowOpensAtOnceAndEachReadyOneLetsTheNextIn() {
        let clock = ManualScheduler()
        let bringUp = ControllerBringUp(scheduler: clock, window: 8)
        var started: [Int] = []
        for index in 0..<20 { bringUp.add { started.append(index) } }
        #expect(started.isEmpty)
        bringUp.begin()
        #expect(started == Array(0..<8))
        bringUp.ready(3)
        #expect(started == Array(0..<9))
        // Ready again (a later re-initialization), or one never opened: nothing more opens.
        bringUp.ready(3)
        bringUp.ready(15)
        #expect(started == Array(0..<9))
        for index in 0..<20 { bringUp.ready(index) }
        #expect(started == Array(0..<20))
        #expect(bringUp.waiting == 0 && bringUp.inWindow == 0)
        #expect(clock.pendingCount == 0)
    }

    @Test func eachOpensNoSoonerThanItsDevicesStartInTheOrderTheyStart() {
        let clock = ManualScheduler()
        let bringUp = ControllerBringUp(scheduler: clock, window: 8)
        let start = clock.nowNanoseconds
        var started: [(name: String, at: UInt64)] = []
        for (name, seconds) in [("late", 5), ("now", 0), ("soon", 2), ("alsoNow", 0)] {
            bringUp.add(notBefore: .seconds(seconds)) { started.append((name, clock.nowNanoseconds - start)) }
        }
        #expect(bringUp.lastNotBefore == .seconds(5))
        bringUp.begin()
        #expect(started.map(\.name) == ["now", "alsoNow"])
        clock.advance(by: .milliseconds(1_999))
        #expect(started.count == 2)
        clock.advance(by: .milliseconds(1))
        #expect(started.map(\.name) == ["now", "alsoNow", "soon"])
        clock.advance(by: .seconds(3))
        #expect(started.map(\.name) == ["now", "alsoNow", "soon", "late"])
        #expect(started.last?.at == 5_000_000_000)
    }

    @Test func oneDueWhileTheWindowIsFullWaitsForAPlace() {
        let clock = ManualScheduler()
        let bringUp = ControllerBringUp(scheduler: clock, window: 1)
        var started: [Int] = []
        bringUp.add { started.append(0) }
        bringUp.add(notBefore: .seconds(1)) { started.append(1) }
        bringUp.begin()
        clock.advance(by: .seconds(2))
        #expect(started == [0])
        bringUp.ready(0)
        #expect(started == [0, 1])
    }

    @Test func oneThatNeverComesUpHoldsItsPlaceOnlyForTheSlotTimeout() {
        let clock = ManualScheduler()
        let bringUp = ControllerBringUp(scheduler: clock, window: 1, slotTimeout: .seconds(10))
        var started: [Int] = []
        for index in 0..<3 { bringUp.add { started.append(index) } }
        bringUp.begin()
        clock.advance(by: .milliseconds(9_999))
        #expect(started == [0])
        clock.advance(by: .milliseconds(1))
        #expect(started == [0, 1])
        // The first comes up late: 1 holds the one place still, so 2 waits for it.
        bringUp.ready(0)
        #expect(started == [0, 1])
        bringUp.ready(1)
        #expect(started == [0, 1, 2])
    }

    @Test func cancelOpensNothingMoreAndLeavesNoTimer() {
        let clock = ManualScheduler()
        let bringUp = ControllerBringUp(scheduler: clock, window: 2)
        var started: [Int] = []
        for index in 0..<4 { bringUp.add(notBefore: .seconds(index)) { started.append(index) } }
        bringUp.begin()
        #expect(started == [0])
        bringUp.cancel()
        #expect(clock.pendingCount == 0)
        clock.advance(by: .seconds(10))
        bringUp.ready(0)
        #expect(started == [0])
    }
}
