import BlemuCore

/// The Lock State characteristic's values (uint8).
public enum LockState: UInt8, Sendable {
    case unlocked = 0, locked = 1, jammed = 2
    public var name: String { ["unlocked", "locked", "jammed"][Int(rawValue)] }
}

/// The lock's mechanism: the PIN check, the lockout after wrong PINs, the motor that throws the
/// bolt (and jams against an obstruction), the auto-relock countdown. No GATT, no timers of its
/// own: time is handed in (`now`, monotonic nanoseconds), the model says when it next needs to
/// look (`nextDeadline`), and `advance(to:)` runs what fell due, in time order, each step at its
/// own deadline, returning what happened for the device to indicate, notify and log.
///
/// One operation at a time: a command is checked `processingTime` after it arrives (so the
/// Write Response goes before the outcome), then the motor runs for `motorTravel`.
public struct LockModel: Sendable {
    public static let pinLengths = 4...8
    public static let wrongPINsBeforeLockout = 5
    public static let lockoutDuration: Duration = .seconds(60)
    /// The controller checks a command before the motor starts.
    public static let processingTime: Duration = .milliseconds(20)
    /// A bolt takes about a second and a half to throw.
    public static let motorTravel: Duration = .milliseconds(1500)

    /// The control point's commands (the first octet of a write).
    public enum Opcode: UInt8, Sendable {
        case lock = 0x01, unlock = 0x02
    }

    /// What `advance` did.
    public enum Outcome: Equatable, Sendable {
        /// The command `code` came while the control point was locked out; nothing else happened.
        case refusedLockedOut(code: UInt8)
        /// The command's opcode is neither lock nor unlock.
        case unknownOpcode(code: UInt8)
        /// A wrong PIN, the `count`th in a row (counted before the lockout resets it); `lockedOut`
        /// when it was the last one allowed and the lockout began.
        case wrongPIN(code: UInt8, count: Int, lockedOut: Bool)
        /// The motor stopped: the bolt is where it was sent (`wanted`) or jammed (`state`).
        /// `code` is the command's opcode, or nil when the auto-relock moved it.
        case moved(wanted: LockState, state: LockState, code: UInt8?)
    }

    public private(set) var state: LockState = .locked
    /// The obstruction in the bolt's way: a motor run that ends while it is there ends jammed.
    public var obstructed = false
    public private(set) var relockDelaySeconds: UInt16 = 0
    public private(set) var wrongPINsInARow = 0
    /// The PIN (4 to 8 ASCII digits, `pinRefusal`); nil until one is given or generated.
    public var pin: String?

    private enum Operation: Sendable {
        case idle
        /// A command being checked, until the deadline.
        case checking(command: [UInt8], until: UInt64)
        /// The motor running towards `wanted`, until the deadline; `code` nil for the auto-relock.
        case moving(wanted: LockState, code: UInt8?, until: UInt64)
    }
    private var operation: Operation = .idle
    private var lockedOutUntil: UInt64?
    private var relockAt: UInt64?

    public init(pin: String? = nil) {
        self.pin = pin
    }

    /// Why `text` cannot be a PIN, or nil when it can: 4 to 8 ASCII digits.
    public static func pinRefusal(_ text: String) -> String? {
        let digits = text.utf8.allSatisfy { (0x30...0x39).contains($0) }
        return digits && pinLengths.contains(text.utf8.count) ? nil : "a PIN is 4 to 8 digits, not '\(text)'"
    }

    /// A command is being checked or the motor is running.
    public var isBusy: Bool {
        if case .idle = operation { return false }
        return true
    }

    /// Seconds of lockout left at `now` (0 when the control point takes commands).
    public func lockoutSecondsLeft(now: UInt64) -> Double {
        guard let until = lockedOutUntil, now < until else { return 0 }
        return Double(until - now) / 1e9
    }

    /// When `advance` next has something to do, if ever.
    public var nextDeadline: UInt64? {
        var deadline = relockAt
        switch operation {
        case .idle: break
        case .checking(_, let until), .moving(_, _, let until): deadline = min(deadline ?? until, until)
        }
        return deadline
    }

    /// Takes a control point command (`[opcode][PIN]`, not empty) to check after `processingTime`.
    /// False, and nothing changes, while an operation is in progress.
    public mutating func command(_ value: [UInt8], now: UInt64) -> Bool {
        guard !isBusy, !value.isEmpty else { return false }
        operation = .checking(command: value, until: now + Self.processingTime.nanoseconds)
        return true
    }

    /// Sets the auto-relock delay (0: off); the countdown restarts with it (or stops).
    public mutating func setRelockDelay(_ seconds: UInt16, now: UInt64) {
        relockDelaySeconds = seconds
        scheduleRelock(now: now)
    }

    /// Forgets the operation in progress and the countdown (the device stopped).
    public mutating func halt() {
        operation = .idle
        relockAt = nil
    }

    /// Runs every step due by `now`, in time order.
    public mutating func advance(to now: UInt64) -> [Outcome] {
        var outcomes: [Outcome] = []
        while let deadline = nextDeadline, deadline <= now {
            switch operation {
            case .checking(let command, let until) where until == deadline:
                operation = .idle
                if let outcome = check(command, at: until) { outcomes.append(outcome) }
            case .moving(let wanted, let code, let until) where until == deadline:
                operation = .idle
                state = obstructed ? .jammed : wanted
                outcomes.append(.moved(wanted: wanted, state: state, code: code))
                scheduleRelock(now: until)
            default:
                // The relock countdown ran out. A command under way decides the state; it
                // restarts the countdown if it leaves the lock open.
                relockAt = nil
                if state == .unlocked, !isBusy { startMotor(to: .locked, code: nil, now: deadline) }
            }
        }
        return outcomes
    }

    /// Checks a command: an answer at once, or the motor started (nil).
    private mutating func check(_ value: [UInt8], at now: UInt64) -> Outcome? {
        let code = value[0]
        if let until = lockedOutUntil, now < until { return .refusedLockedOut(code: code) }
        lockedOutUntil = nil
        guard let opcode = Opcode(rawValue: code) else { return .unknownOpcode(code: code) }
        guard value.dropFirst().elementsEqual((pin ?? "").utf8) else {
            wrongPINsInARow += 1
            let count = wrongPINsInARow
            let lockedOut = wrongPINsInARow >= Self.wrongPINsBeforeLockout
            if lockedOut {
                wrongPINsInARow = 0
                lockedOutUntil = now + Self.lockoutDuration.nanoseconds
            }
            return .wrongPIN(code: code, count: count, lockedOut: lockedOut)
        }
        wrongPINsInARow = 0
        startMotor(to: opcode == .lock ? .locked : .unlocked, code: code, now: now)
        return nil
    }

    private mutating func startMotor(to wanted: LockState, code: UInt8?, now: UInt64) {
        relockAt = nil
        operation = .moving(wanted: wanted, code: code, until: now + Self.motorTravel.nanoseconds)
    }

    /// Counts down to relocking while the lock is open and a delay is set.
    private mutating func scheduleRelock(now: UInt64) {
        relockAt = state == .unlocked && relockDelaySeconds > 0
            ? now + UInt64(relockDelaySeconds) * 1_000_000_000 : nil
    }
}
