import BlemuCore
import Testing

@Suite struct TimerWheelTests {
    /// A thousand devices measuring every 10 s, their starts spread over 10 s: the run loop
    /// wakes once per 100 ms tick that has any, not once per device.
    @Test func aThousandTimersSpreadOverTenSecondsWakeTheLoopAtMostOncePerTick() {
        let clock = ManualScheduler()
        let wheel = TimerWheel(base: clock, tick: .milliseconds(100))
        var fired = 0
        for device in 0..<1000 {
            wheel.schedule(after: .milliseconds(10_000 + Int64(device) * 10)) { fired += 1 }
        }
        #expect(wheel.armedTicks <= 101)
        clock.advance(by: .seconds(21))
        #expect(fired == 1000)
        #expect(clock.firedCount <= 101)
        #expect(wheel.pendingCount == 0)
        #expect(wheel.armedTicks == 0)
    }

    /// Each timer fires within half a tick of its deadline, and those on one tick in the order
    /// they were scheduled.
    @Test func aTimerFiresWithinHalfATickOfItsDeadlineInTheOrderScheduled() {
        let clock = ManualScheduler()
        let wheel = TimerWheel(base: clock, tick: .milliseconds(100))
        let start = clock.nowNanoseconds
        var firings: [(Int, UInt64)] = []
        let delays: [Int64] = [1_020, 1_049, 1_051, 1_000, 2_345]
        for (index, milliseconds) in delays.enumerated() {
            wheel.schedule(after: .milliseconds(milliseconds)) { firings.append((index, clock.nowNanoseconds)) }
        }
        clock.advance(by: .seconds(3))
        #expect(firings.map(\.0) == [0, 1, 3, 2, 4])
        for (index, at) in firings {
            let deadline = start + UInt64(delays[index]) * 1_000_000
            #expect(at + 50_000_000 >= deadline && at <= deadline + 50_000_000)
        }
    }

    /// A model that schedules its next measurement from its action, woken late (the loop was
    /// busy: here up to 30 ms), stays on the grid: ten periods of 10 s take 100 s, not a tick
    /// more each, as rounding up would make them.
    @Test func aTimerThatSchedulesItselfAgainWokenLateDoesNotDrift() {
        let clock = ManualScheduler()
        let wheel = TimerWheel(base: clock, tick: .milliseconds(100))
        var times: [UInt64] = []
        func measure() {
            times.append(clock.nowNanoseconds)
            wheel.schedule(after: .seconds(10)) { measure() }
        }
        wheel.schedule(after: .seconds(10)) { measure() }
        // The clock jumps 30 ms at a time; what fell due fires late, seeing the new time.
        for _ in 0..<3_335 { clock.stall(for: .milliseconds(30)) }
        #expect(times.count == 10)
        let span = times.last.map { $0 - times[0] } ?? 0
        #expect(span >= 90_000_000_000 - 30_000_000 && span <= 90_000_000_000 + 30_000_000)
    }

    @Test func aCancelledTimerDoesNotFireAndItsTickGoesWhenItWasTheLast() {
        let clock = ManualScheduler()
        let wheel = TimerWheel(base: clock, tick: .milliseconds(100))
        var fired: [String] = []
        let alone = wheel.schedule(after: .seconds(5)) { fired.append("alone") }
        let first = wheel.schedule(after: .seconds(7)) { fired.append("first") }
        wheel.schedule(after: .seconds(7)) { fired.append("second") }
        #expect(wheel.armedTicks == 2)
        wheel.cancel(alone)
        #expect(wheel.armedTicks == 1)
        #expect(clock.pendingCount == 1)
        wheel.cancel(first)
        wheel.cancel(first)
        clock.advance(by: .seconds(8))
        #expect(fired == ["second"])
        #expect(clock.firedCount == 1)
    }

    /// An action that cancels a timer of the same tick, still to run, stops it.
    @Test func anActionCancelsATimerOfItsOwnTick() {
        let clock = ManualScheduler()
        let wheel = TimerWheel(base: clock, tick: .milliseconds(100))
        var fired: [String] = []
        var later: TimerID?
        wheel.schedule(after: .seconds(2)) {
            fired.append("first")
            if let later { wheel.cancel(later) }
        }
        later = wheel.schedule(after: .seconds(2)) { fired.append("later") }
        clock.advance(by: .seconds(3))
        #expect(fired == ["first"])
    }

    /// Timers shorter than ten ticks are the base scheduler's, exact, and cancel through it.
    @Test func aShortTimerPassesThroughExact() {
        let clock = ManualScheduler()
        let wheel = TimerWheel(base: clock, tick: .milliseconds(100))
        let start = clock.nowNanoseconds
        var at: UInt64 = 0
        wheel.schedule(after: .milliseconds(123)) { at = clock.nowNanoseconds }
        let cancelled = wheel.schedule(after: .milliseconds(200)) { Issue.record("cancelled, yet fired") }
        #expect(wheel.pendingCount == 0)
        wheel.cancel(cancelled)
        clock.advance(by: .seconds(1))
        #expect(at == start + 123_000_000)
    }
}
