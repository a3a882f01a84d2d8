import BlemuCore
import BlemuDevices
import Testing

/// The lock's mechanism alone: no GATT, no scheduler, time handed in.
@Suite struct LockModelTests {
    private let pin = "4821"
    private let start: UInt64 = 5_000_000_000
    private let processing = LockModel.processingTime.nanoseconds
    private let travel = LockModel.motorTravel.nanoseconds

    private func command(_ opcode: UInt8, _ pin: String) -> [UInt8] { [opcode] + Array(pin.utf8) }

    /// Sends a command at `now` and runs it to its end; returns what happened and when it ended.
    private func operate(_ model: inout LockModel, _ value: [UInt8], at now: UInt64) -> (outcomes: [LockModel.Outcome], end: UInt64) {
        let taken1 = model.command(value, now: now)
        #expect(taken1)
        var outcomes: [LockModel.Outcome] = []
        var end = now
        while model.isBusy, let deadline = model.nextDeadline {
            outcomes += model.advance(to: deadline)
            end = deadline
        }
        return (outcomes, end)
    }

    @Test func anUnlockIsCheckedThenTheMotorRunsThenTheBoltIsOpen() {
        var model = LockModel(pin: pin)
        #expect(model.state == .locked && !model.isBusy && model.nextDeadline == nil)
        let taken2 = model.command(command(0x02, pin), now: start)
        #expect(taken2)
        #expect(model.isBusy)
        #expect(model.nextDeadline == start + processing)
        let outcomes1 = model.advance(to: start + processing - 1)
        #expect(outcomes1.isEmpty)
        // Checked: the motor starts, nothing to say yet.
        let outcomes2 = model.advance(to: start + processing)
        #expect(outcomes2.isEmpty)
        #expect(model.isBusy && model.state == .locked)
        #expect(model.nextDeadline == start + processing + travel)
        let outcomes3 = model.advance(to: start + processing + travel)
        #expect(outcomes3 == [.moved(wanted: .unlocked, state: .unlocked, code: 0x02)])
        #expect(model.state == .unlocked && !model.isBusy && model.nextDeadline == nil)
    }

    @Test func aCommandWhileOneIsUnderWayIsNotTaken() {
        var model = LockModel(pin: pin)
        let taken3 = model.command(command(0x02, pin), now: start)
        #expect(taken3)
        let taken4 = model.command(command(0x01, pin), now: start + 1)
        #expect(!taken4)
        let taken5 = model.command([], now: start + 1)
        #expect(!taken5 && model.isBusy)
        _ = model.advance(to: start + processing + travel)
        #expect(model.state == .unlocked)
        let taken6 = model.command(command(0x01, pin), now: start + processing + travel)
        #expect(taken6)
    }

    @Test func fiveWrongPINsInARowLockTheControlPointOutForAMinute() {
        var model = LockModel(pin: pin)
        var now = start
        for count in 1...4 {
            let run = operate(&model, command(0x02, "0000"), at: now)
            #expect(run.outcomes == [.wrongPIN(code: 0x02, count: count, lockedOut: false)])
            now = run.end
        }
        #expect(model.wrongPINsInARow == 4)
        let fifth = operate(&model, command(0x02, "0000"), at: now)
        #expect(fifth.outcomes == [.wrongPIN(code: 0x02, count: 5, lockedOut: true)])
        #expect(model.wrongPINsInARow == 0)
        #expect(model.lockoutSecondsLeft(now: fifth.end) == 60)
        #expect((57...58).contains(model.lockoutSecondsLeft(now: fifth.end + 2_500_000_000)))
        // Even the right PIN is refused while locked out.
        let refused = operate(&model, command(0x02, pin), at: fifth.end + 1_000_000_000)
        #expect(refused.outcomes == [.refusedLockedOut(code: 0x02)])
        #expect(model.state == .locked)
        // A minute later it is taken again.
        let later = fifth.end + LockModel.lockoutDuration.nanoseconds
        #expect(model.lockoutSecondsLeft(now: later) == 0)
        let operation1 = operate(&model, command(0x02, pin), at: later)
        #expect(operation1.outcomes == [.moved(wanted: .unlocked, state: .unlocked, code: 0x02)])
    }

    @Test func theRightPINStartsTheCountOfWrongOnesAgain() {
        var model = LockModel(pin: pin)
        var now = operate(&model, command(0x01, "99999"), at: start).end
        now = operate(&model, command(0x01, "4820"), at: now).end
        #expect(model.wrongPINsInARow == 2)
        now = operate(&model, command(0x01, pin), at: now).end
        #expect(model.wrongPINsInARow == 0)
        // A PIN that only starts with the right one is wrong.
        let operation2 = operate(&model, command(0x01, pin + "0"), at: now)
        #expect(operation2.outcomes == [.wrongPIN(code: 0x01, count: 1, lockedOut: false)])
    }

    @Test func anUnknownOpcodeIsAnsweredWithoutTheMotor() {
        var model = LockModel(pin: pin)
        let run = operate(&model, command(0x07, pin), at: start)
        #expect(run.outcomes == [.unknownOpcode(code: 0x07)])
        #expect(run.end == start + processing && model.state == .locked && model.wrongPINsInARow == 0)
    }

    @Test func anObstructedBoltJamsAndMovesAgainOnceCleared() {
        var model = LockModel(pin: pin)
        model.obstructed = true
        var run = operate(&model, command(0x02, pin), at: start)
        #expect(run.outcomes == [.moved(wanted: .unlocked, state: .jammed, code: 0x02)])
        #expect(model.state == .jammed)
        model.obstructed = false
        run = operate(&model, command(0x02, pin), at: run.end)
        #expect(run.outcomes == [.moved(wanted: .unlocked, state: .unlocked, code: 0x02)])
    }

    @Test func anOpenLockRelocksItselfAfterTheDelay() {
        var model = LockModel(pin: pin)
        model.setRelockDelay(3, now: start)
        #expect(model.nextDeadline == nil, "locked: nothing to count down")
        let opened = operate(&model, command(0x02, pin), at: start).end
        #expect(model.state == .unlocked)
        #expect(model.nextDeadline == opened + 3_000_000_000)
        let outcomes4 = model.advance(to: opened + 3_000_000_000)
        #expect(outcomes4.isEmpty, "the motor starts")
        #expect(model.isBusy)
        let outcomes5 = model.advance(to: opened + 3_000_000_000 + travel)
        #expect(outcomes5 == [.moved(wanted: .locked, state: .locked, code: nil)])
        #expect(model.state == .locked && model.nextDeadline == nil)
    }

    @Test func aNewDelayRestartsTheCountdownAndZeroStopsIt() {
        var model = LockModel(pin: pin)
        let opened = operate(&model, command(0x02, pin), at: start).end
        model.setRelockDelay(10, now: opened + 1_000_000_000)
        #expect(model.nextDeadline == opened + 11_000_000_000)
        model.setRelockDelay(0, now: opened + 2_000_000_000)
        #expect(model.nextDeadline == nil)
        let outcomes6 = model.advance(to: opened + 3_600_000_000_000)
        #expect(outcomes6.isEmpty && model.state == .unlocked)
    }

    @Test func oneLongAdvanceRunsEveryStepInTimeOrder() {
        var model = LockModel(pin: pin)
        model.setRelockDelay(2, now: start)
        let taken7 = model.command(command(0x02, pin), now: start)
        #expect(taken7)
        // An hour later, all at once: the unlock, then the relock two seconds after it.
        let outcomes7 = model.advance(to: start + 3_600_000_000_000)
        #expect(outcomes7 == [
            .moved(wanted: .unlocked, state: .unlocked, code: 0x02),
            .moved(wanted: .locked, state: .locked, code: nil),
        ])
        #expect(model.state == .locked && !model.isBusy)
    }

    @Test func haltForgetsTheOperationAndTheCountdown() {
        var model = LockModel(pin: pin)
        model.setRelockDelay(1, now: start)
        let taken8 = model.command(command(0x02, pin), now: start)
        #expect(taken8)
        model.halt()
        #expect(!model.isBusy && model.nextDeadline == nil)
        let outcomes8 = model.advance(to: start + 3_600_000_000_000)
        #expect(outcomes8.isEmpty && model.state == .locked)
    }

    @Test func aPINIsFourToEightDigits() {
        #expect(LockModel.pinRefusal("4821") == nil)
        #expect(LockModel.pinRefusal("12345678") == nil)
        #expect(LockModel.pinRefusal("123") != nil)
        #expect(LockModel.pinRefusal("123456789") != nil)
        #expect(LockModel.pinRefusal("12a4") != nil)
        #expect(LockModel.pinRefusal("١٢٣٤") != nil, "Arabic-Indic digits are not ASCII digits")
    }
}
