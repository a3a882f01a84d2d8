import BlemuCore
import BlemuRunLoop
import Testing

#if canImport(Glibc)
import Glibc
#endif

@Suite struct RunLoopTimerTests {
    @Test func timersFireInDeadlineOrderAndEqualDeadlinesInScheduleOrder() throws {
        let loop = try RunLoop()
        var fired: [String] = []
        loop.schedule(after: .milliseconds(30)) { fired.append("c") }
        loop.schedule(after: .milliseconds(10)) { fired.append("a1") }
        loop.schedule(after: .milliseconds(20)) { fired.append("b") }
        loop.schedule(after: .milliseconds(10)) { fired.append("a2") }
        #expect(loop.pendingTimerCount == 4)
        #expect(runUntil(loop) { fired.count == 4 })
        #expect(fired == ["a1", "a2", "b", "c"])
        #expect(loop.pendingTimerCount == 0)
    }

    @Test func timerWaitsAtLeastItsDelay() throws {
        let loop = try RunLoop()
        let start = loop.nowNanoseconds
        var firedAt: UInt64 = 0
        loop.schedule(after: .milliseconds(40)) { firedAt = loop.nowNanoseconds }
        #expect(runUntil(loop) { firedAt != 0 })
        #expect(firedAt - start >= 40_000_000)
    }

    @Test func cancelledTimersNeverFire() throws {
        let loop = try RunLoop()
        var fired: [Int] = []
        let first = loop.schedule(after: .milliseconds(5)) { fired.append(1) }
        loop.schedule(after: .milliseconds(15)) { fired.append(2) }
        loop.cancel(first)
        loop.cancel(first)  // twice: no effect
        #expect(loop.pendingTimerCount == 1)
        #expect(runUntil(loop) { fired.count == 1 })
        run(loop, for: .milliseconds(30))
        #expect(fired == [2])
    }

    @Test func cancelFromInsideAFiringTimer() throws {
        let loop = try RunLoop()
        var fired: [String] = []
        var sameDeadline: TimerID?
        var later: TimerID?
        loop.schedule(after: .milliseconds(10)) {
            fired.append("first")
            // Due in the same batch, and a later one: neither may run.
            if let sameDeadline { loop.cancel(sameDeadline) }
            if let later { loop.cancel(later) }
        }
        sameDeadline = loop.schedule(after: .milliseconds(10)) { fired.append("same") }
        later = loop.schedule(after: .milliseconds(25)) { fired.append("later") }
        loop.schedule(after: .milliseconds(40)) { fired.append("last") }
        #expect(runUntil(loop) { fired.contains("last") })
        #expect(fired == ["first", "last"])
    }

    @Test func cancellingAFiredTimerIsHarmless() throws {
        let loop = try RunLoop()
        var count = 0
        let id = loop.schedule(after: .zero) { count += 1 }
        #expect(runUntil(loop) { count == 1 })
        loop.cancel(id)
        let other = loop.schedule(after: .milliseconds(5)) { count += 10 }
        #expect(runUntil(loop) { count == 11 })
        loop.cancel(other)
        #expect(count == 11)
    }

    @Test func timerScheduledFromATimerWithZeroDelayWaitsForTheNextTurn() throws {
        let loop = try RunLoop()
        var ticks = 0
        func tick() {
            ticks += 1
            if ticks < 5 { loop.schedule(after: .zero, tick) }
        }
        loop.schedule(after: .zero, tick)
        var turns = 0
        while ticks < 5 && turns < 100 {
            let ran = loop.runOnce(timeout: .milliseconds(100))
            #expect(ran <= 1, "a self-rescheduling timer must not run twice in one turn")
            turns += 1
        }
        #expect(ticks == 5)
    }

    @Test func idleLoopMakesNoWakeups() throws {
        let loop = try RunLoop()
        // A cancelled timer must leave the timerfd disarmed: the wait lasts its whole timeout.
        let id = loop.schedule(after: .milliseconds(10)) {}
        loop.cancel(id)
        let start = loop.nowNanoseconds
        let ran = loop.runOnce(timeout: .milliseconds(60))
        #expect(ran == 0)
        #expect(loop.nowNanoseconds - start >= 55_000_000)
    }

    @Test func manyTimersWithRandomCancellation() throws {
        let loop = try RunLoop()
        var random = SplitMix64(seed: 42)
        var earliest: [Int: UInt64] = [:]
        var latest: [Int: UInt64] = [:]
        var firedOrder: [Int] = []
        var cancelled = Set<Int>()
        var ids: [Int: TimerID] = [:]
        for index in 0..<600 {
            let delay = Duration.microseconds(Int64.random(in: 0...30_000, using: &random))
            // The loop reads its clock inside schedule: its deadline lies between these two.
            earliest[index] = loop.nowNanoseconds + delay.nanosecondsForTests
            ids[index] = loop.schedule(after: delay) { firedOrder.append(index) }
            latest[index] = loop.nowNanoseconds + delay.nanosecondsForTests
        }
        for index in 0..<600 where Bool.random(using: &random) {
            cancelled.insert(index)
            if let id = ids[index] { loop.cancel(id) }
        }
        #expect(loop.pendingTimerCount == 600 - cancelled.count)
        #expect(runUntil(loop) { firedOrder.count == 600 - cancelled.count })
        run(loop, for: .milliseconds(20))
        #expect(firedOrder.count == 600 - cancelled.count)
        #expect(Set(firedOrder).isDisjoint(with: cancelled))
        // Fired in deadline order: no timer fired before one whose deadline was surely earlier.
        for (earlier, later) in zip(firedOrder, firedOrder.dropFirst()) {
            #expect(earliest[earlier]! <= latest[later]!, "\(earlier) fired before \(later)")
        }
    }

    @Test func stopFromATimerEndsRun() throws {
        let loop = try RunLoop()
        var stoppedByGuard = false
        loop.schedule(after: .milliseconds(10)) { loop.stop() }
        loop.schedule(after: .seconds(5)) {
            stoppedByGuard = true
            loop.stop()
        }
        loop.run()
        #expect(!stoppedByGuard)
        #expect(loop.pendingTimerCount == 1)
    }
}

@Suite struct RunLoopDescriptorTests {
    @Test func pipeBecomesReadableAndHandlerSeesTheData() throws {
        let loop = try RunLoop()
        let (readEnd, writeEnd) = makePipe()
        defer { close(readEnd); close(writeEnd) }
        var received: [UInt8] = []
        var seen: IOEvents = []
        try loop.register(fd: readEnd, events: .readable) { events in
            seen.formUnion(events)
            received += readAvailable(readEnd)
        }
        #expect(loop.runOnce(timeout: .milliseconds(20)) == 0, "nothing written yet")
        writeAll(writeEnd, [1, 2, 3])
        #expect(runUntil(loop) { received.count == 3 })
        #expect(received == [1, 2, 3])
        #expect(seen.contains(.readable))
        loop.unregister(fd: readEnd)
        #expect(!loop.isRegistered(fd: readEnd))
    }

    @Test func writableAndHangupAreReported() throws {
        let loop = try RunLoop()
        let (readEnd, writeEnd) = makePipe()
        defer { close(readEnd) }
        var writeEvents: IOEvents = []
        try loop.register(fd: writeEnd, events: .writable) { writeEvents.formUnion($0) }
        #expect(runUntil(loop) { writeEvents.contains(.writable) })
        loop.unregister(fd: writeEnd)
        close(writeEnd)
        var readEvents: IOEvents = []
        try loop.register(fd: readEnd, events: .readable) { readEvents.formUnion($0) }
        #expect(runUntil(loop) { readEvents.contains(.hangup) })
    }

    @Test func modifyChangesTheWatchedEvents() throws {
        let loop = try RunLoop()
        let (a, b) = makeSocketPair()
        defer { close(a); close(b) }
        var events: [IOEvents] = []
        try loop.register(fd: a, events: .readable) { events.append($0) }
        #expect(loop.runOnce(timeout: .milliseconds(20)) == 0)
        try loop.modify(fd: a, events: [.readable, .writable])
        #expect(runUntil(loop) { !events.isEmpty })
        #expect(events.first?.contains(.writable) == true)
    }

    @Test func registeringTwiceOrModifyingAStrangerThrows() throws {
        let loop = try RunLoop()
        let (readEnd, writeEnd) = makePipe()
        defer { close(readEnd); close(writeEnd) }
        try loop.register(fd: readEnd, events: .readable) { _ in }
        #expect(throws: RunLoopError.self) { try loop.register(fd: readEnd, events: .readable) { _ in } }
        #expect(throws: RunLoopError.self) { try loop.modify(fd: writeEnd, events: .writable) }
        #expect(throws: RunLoopError.self) { try loop.register(fd: 9999, events: .readable) { _ in } }
        loop.unregister(fd: 12345)  // unknown: ignored
        #expect(loop.registeredCount == 1)
    }

    @Test func handlerUnregisteringAnotherReadyDescriptorInTheSameBatchPreventsItsCall() throws {
        let loop = try RunLoop()
        let first = makePipe()
        let second = makePipe()
        defer { close(first.write); close(second.write) }
        var calls = 0
        var replacementCalls = 0
        var closed: Set<Int32> = []
        // Both become readable before the wait, so both are in one epoll batch; whichever runs
        // first unregisters and closes the other, and registers a new pipe (which may reuse
        // the closed fd number): the stale event must reach neither the old nor the new handler.
        var replacement: (read: Int32, write: Int32)?
        func handler(own: Int32, other: Int32) -> (IOEvents) -> Void {
            return { _ in
                calls += 1
                _ = readAvailable(own)
                guard !closed.contains(other) else { return }
                loop.unregister(fd: other)
                close(other)
                closed.insert(other)
                let fresh = makePipe()
                replacement = fresh
                try? loop.register(fd: fresh.read, events: .readable) { _ in replacementCalls += 1 }
            }
        }
        try loop.register(fd: first.read, events: .readable, handler(own: first.read, other: second.read))
        try loop.register(fd: second.read, events: .readable, handler(own: second.read, other: first.read))
        writeAll(first.write, [1])
        writeAll(second.write, [2])
        let ran = loop.runOnce(timeout: .milliseconds(100))
        #expect(ran == 1)
        #expect(calls == 1)
        #expect(replacementCalls == 0)
        if let replacement {
            loop.unregister(fd: replacement.read)
            close(replacement.read)
            close(replacement.write)
        }
        for fd in [first.read, second.read] where !closed.contains(fd) {
            loop.unregister(fd: fd)
            close(fd)
        }
    }

    @Test func handlerMayUnregisterItself() throws {
        let loop = try RunLoop()
        let (readEnd, writeEnd) = makePipe()
        defer { close(readEnd); close(writeEnd) }
        var calls = 0
        try loop.register(fd: readEnd, events: .readable) { _ in
            calls += 1
            loop.unregister(fd: readEnd)
        }
        writeAll(writeEnd, [1])
        run(loop, for: .milliseconds(40))
        #expect(calls == 1, "data is still unread, yet an unregistered handler is never called again")
    }

    @Test func stopFromAnFDHandler() throws {
        let loop = try RunLoop()
        let (readEnd, writeEnd) = makePipe()
        defer { close(readEnd); close(writeEnd) }
        try loop.register(fd: readEnd, events: .readable) { _ in
            _ = readAvailable(readEnd)
            loop.stop()
        }
        var guardFired = false
        let guardTimer = loop.schedule(after: .seconds(5)) { guardFired = true; loop.stop() }
        loop.schedule(after: .milliseconds(10)) { writeAll(writeEnd, [7]) }
        loop.run()
        #expect(!guardFired)
        loop.cancel(guardTimer)
    }
}

@Suite struct RunLoopSignalTests {
    @Test func signalfdDeliversARaisedSignal() throws {
        let loop = try RunLoop()
        var received: [Int32] = []
        try loop.handleSignals([SIGUSR1]) { received.append($0) }
        // raise() is directed at this thread, which now blocks SIGUSR1: it waits for the signalfd.
        raise(SIGUSR1)
        #expect(runUntil(loop) { !received.isEmpty })
        #expect(received == [SIGUSR1])
    }

    @Test func signalHandlerCanStopTheLoop() throws {
        let loop = try RunLoop()
        var received: Int32 = 0
        try loop.handleSignals([SIGUSR2]) { signal in
            received = signal
            loop.stop()
        }
        var guardFired = false
        loop.schedule(after: .milliseconds(10)) { raise(SIGUSR2) }
        loop.schedule(after: .seconds(5)) { guardFired = true; loop.stop() }
        loop.run()
        #expect(received == SIGUSR2)
        #expect(!guardFired)
    }
}
