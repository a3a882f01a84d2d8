import BlemuATT
import BlemuCore
import BlemuGATT
import BlemuDevice
import Logging

/// `lock`: a motorized door lock opened with a PIN — blemu's Lock service, Device Information
/// 0x180A, Battery 0x180F.
///
/// | characteristic | format | access |
/// |---|---|---|
/// | Lock State `7d3c0201-…` | uint8: 0 unlocked, 1 locked, 2 jammed | read, notify |
/// | Lock Control Point `7d3c0202-…` | write `[opcode][PIN, ASCII digits]`; indicates `[0x80, opcode, result]` | write, indicate |
/// | Event Log `7d3c0203-…` | UTF-8 lines `HH:MM:SS event` (time since power-on), newest last, at most 512 bytes | read (long) |
/// | Auto-relock Delay `7d3c0204-…` | uint16 seconds, 0 = off | read, write |
///
/// The control point works like the SIG's (RACP, CGM): a write is answered with a Write
/// Response, and the outcome follows as an indication to the writer, once the motor is done.
/// Results: 0x01 success, 0x02 wrong PIN, 0x03 jammed, 0x04 locked out, 0x05 unknown opcode.
/// ATT errors (Supplement, Part B, 1.2): 0xFD when the writer has not enabled indications,
/// 0xFE while an operation is in progress; an empty write is 0x0D, longer than 9 bytes 0x0D
/// (the stack). Five wrong PINs in a row lock the control point out for 60 s.
///
/// The mechanism (PIN check, lockout, motor, relock) is `LockModel`; this class wires it to the
/// characteristics, the one timer it asks for, the Event Log and the indications.
public final class LockDevice: Device {
    public static let deviceName = "lock"
    /// The lock pairs with its static passkey, always (Docs/SECURITY.md).
    public static let pairsWithStaticPasskey = true
    public static let summary = "door lock: Lock 7d3c0200-…, Device Information 0x180A, Battery 0x180F"

    public static let serviceUUID = BluetoothUUID("7d3c0200-9a5e-4d1a-8f6e-5c1b2d3e4f50")!
    public static let lockStateUUID = BluetoothUUID("7d3c0201-9a5e-4d1a-8f6e-5c1b2d3e4f50")!
    public static let controlPointUUID = BluetoothUUID("7d3c0202-9a5e-4d1a-8f6e-5c1b2d3e4f50")!
    public static let eventLogUUID = BluetoothUUID("7d3c0203-9a5e-4d1a-8f6e-5c1b2d3e4f50")!
    public static let relockDelayUUID = BluetoothUUID("7d3c0204-9a5e-4d1a-8f6e-5c1b2d3e4f50")!

    public typealias Opcode = LockModel.Opcode
    /// The first octet of every control point indication.
    public static let responseCode: UInt8 = 0x80
    public enum Result: UInt8, Sendable {
        case success = 0x01, wrongPIN = 0x02, jammed = 0x03, lockedOut = 0x04, unknownOpcode = 0x05
    }

    public static let pinLengths = LockModel.pinLengths
    public static let wrongPINsBeforeLockout = LockModel.wrongPINsBeforeLockout
    public static let lockoutDuration = LockModel.lockoutDuration
    public static let processingTime = LockModel.processingTime
    public static let motorTravel = LockModel.motorTravel

    public let lockState: Characteristic
    public let controlPoint: Characteristic
    public let eventLog: Characteristic
    public let relockDelay: Characteristic
    public let battery = BatteryService(startLevel: 80, drainPerHour: 0.01)
    public let profile: DeviceProfile

    /// The mechanism: the bolt, the PIN, the lockout, the operation in progress, the relock countdown.
    public private(set) var model: LockModel
    public var state: LockState { model.state }
    /// The obstruction the `jammed` setting puts in the bolt's way: every operation jams while it is there.
    public var obstructed: Bool { model.obstructed }
    public var relockDelaySeconds: UInt16 { model.relockDelaySeconds }
    public var wrongPINsInARow: Int { model.wrongPINsInARow }
    /// The PIN; nil until start when none was given (then one is generated).
    public var pin: String? { model.pin }
    public let events = RecentLines(maxBytes: ValueLength.attributeMaximum)

    private weak var context: DeviceContext?
    private var random: SeededRandom
    private var startNanoseconds: UInt64 = 0
    /// At the model's next deadline, if it has one.
    private var timer: TimerID?
    /// Who wrote the command in progress: the outcome is indicated to them. One at a time.
    private var commandPeer: ATTPeer?
    private let lockStateValue: NotifiedValue

    /// - Parameter pin: 4 to 8 ASCII digits (check with `pinRefusal`); nil generates one at start
    ///   and logs it once.
    public init(pin: String? = nil, seed: UInt64 = UInt64.random(in: 1...UInt64.max)) {
        precondition(pin.map { Self.pinRefusal($0) == nil } ?? true, "LockDevice: \(pin.flatMap(Self.pinRefusal) ?? "")")
        model = LockModel(pin: pin)
        random = SeededRandom(seed: seed)
        lockState = Characteristic(Self.lockStateUUID, properties: [.read, .notify], length: .fixed(1),
                                   descriptors: [.userDescription("Lock state: 0 unlocked, 1 locked, 2 jammed")])
        controlPoint = Characteristic(Self.controlPointUUID, properties: [.write, .indicate],
                                      permissions: ControlPointAccess.permissions,
                                      length: .variable(max: 1 + Self.pinLengths.upperBound),
                                      descriptors: [.userDescription("Lock control point")])
        controlPoint.minimumEncryptionKeySize = Self.requiredKeySize
        // Who came and went is the owner's business: only a central paired with the passkey reads it.
        eventLog = events.makeCharacteristic(Self.eventLogUUID, description: "Event log",
                                             permissions: [.readAuthenticationRequired, .secureConnectionsRequired])
        eventLog.minimumEncryptionKeySize = Self.requiredKeySize
        relockDelay = Characteristic(Self.relockDelayUUID, properties: [.read, .write], length: .fixed(2),
                                     descriptors: [.userDescription("Auto-relock delay, s (0: off)"),
                                                   // uint16 (0x06), seconds (0x2703).
                                                   .presentationFormat(format: 0x06, unit: 0x2703)])
        lockStateValue = NotifiedValue(lockState)
        lockStateValue.baseline([model.state.rawValue])
        // Appearance 0x0708: Access Control, Door Lock (Assigned Numbers 2.6.3).
        profile = DeviceProfile(defaultName: "blemu Lock", advertisedServices: [Self.serviceUUID, BluetoothUUID(0x180F)],
                                appearance: 0x0708)
        wireHandlers()
    }

    public var services: [Service] {
        [
            Service(Self.serviceUUID) {
                lockState
                controlPoint
                eventLog
                relockDelay
            },
            DeviceInformation(model: "blemu LK-1", serialNumber: "LK-0001").makeService(),
            battery.service,
        ]
    }

    public func start(context: DeviceContext) {
        self.context = context
        startNanoseconds = context.scheduler.nowNanoseconds
        battery.start(context: context)
        if pin == nil {
            let generated = String((0..<6).map { _ in Character(String(random.below(10))) })
            model.pin = generated
            // Six digits, like the pairing passkey logged beside it: the label says which is which.
            context.log(.stateChanged, .notice, "no PIN given: the lock's PIN is \(generated) (\(Self.pinLabel))", [:])
        }
        record("\(state.name) (powered on)")
    }

    public func stop() {
        if let timer { context?.scheduler.cancel(timer) }
        timer = nil
        model.halt()
        commandPeer = nil
        battery.stop()
    }

    public func subscriptionChanged(_ characteristic: Characteristic, peer: ATTPeer, notify: Bool, indicate: Bool) {
        battery.subscriptionChanged(characteristic)
    }

    /// `jammed` puts an obstruction in the bolt's way (every operation jams until it is set to
    /// 0); `pin` changes the PIN; `battery` sets the level.
    public var settings: [DeviceSetting] {
        [
            .flag("jammed", "1: the bolt is obstructed, so every operation ends jammed (Lock State 2, result 0x03); 0: clear") {
                [weak self] jammed in
                self?.model.obstructed = jammed
                self?.context?.log(.stateChanged, .info, jammed ? "bolt obstructed: operations will jam" : "bolt obstruction cleared", [:])
            },
            DeviceSetting("pin", "the PIN, 4 to 8 digits") { [weak self] text in
                if let refusal = Self.pinRefusal(text) { return refusal }
                guard let self else { return nil }
                self.model.pin = text
                // Before start this is the PIN the lock was set up with, not an event.
                if self.context != nil { self.record("PIN changed") }
                return nil
            },
            battery.setting,
        ]
    }

    /// What the PIN is for, said where it is logged, so nobody types it as the pairing passkey.
    public static let pinLabel = "for the Lock Control Point's lock and unlock, not for pairing"

    /// Why `text` cannot be a PIN, or nil when it can: 4 to 8 ASCII digits.
    public static func pinRefusal(_ text: String) -> String? { LockModel.pinRefusal(text) }

    /// Seconds of lockout left (0 when the control point takes commands).
    public var lockoutSecondsLeft: Double {
        guard let now = context?.scheduler.nowNanoseconds else { return 0 }
        return model.lockoutSecondsLeft(now: now)
    }

    public var isBusy: Bool { model.isBusy }

    // MARK: The control point

    /// The lock's promise is Security Mode 1 Level 4 (Vol 3, Part C, 10.2.1): "Authenticated LE
    /// Secure Connections pairing with encryption using a 128-bit strength encryption key". So
    /// its protected values need 16-octet keys: the permissions declare it, the ATT server
    /// answers a shorter key with Encryption Key Size Too Short (0x0C), and the Security Manager
    /// refuses a pairing that would leave one (Encryption Key Size, 0x06).
    public static let requiredKeySize: UInt8 = 16

    /// Who may use the Lock Control Point: only a central that paired with the lock's passkey
    /// (`--passkey`, else the generated label) with LE Secure Connections, on a link encrypted
    /// with that authenticated 128-bit key — the declared permissions, which the ATT server
    /// checks before the device hears of a write (Insufficient Authentication 0x05, or
    /// Insufficient Encryption 0x0F for a bonded central that has not encrypted yet, or 0x0C;
    /// Vol 3, Part C, 10.3) — and the PIN. And a central that has enabled indications, since its
    /// results come as indications (0xFD otherwise, Supplement Part B, 1.2).
    enum ControlPointAccess {
        static let permissions: AttributePermissions = [.writeAuthenticationRequired, .secureConnectionsRequired]

        static func refusal(_ peer: ATTPeer, controlPoint: Characteristic, context: DeviceContext) -> ATTError? {
            context.isSubscribed(controlPoint, peer: peer, indications: true) ? nil : .cccdImproperlyConfigured
        }
    }

    private func wireHandlers() {
        lockState.onRead = { [weak self] _, value in
            guard let self else { return .unlikelyError }
            value.append(self.state.rawValue)
            return nil
        }
        // validateWrite has no side effects (Execute Write asks it before applying anything).
        controlPoint.validateWrite = { [weak self] request in
            guard let self, let context = self.context else { return .unlikelyError }
            if let refusal = ControlPointAccess.refusal(request.peer, controlPoint: self.controlPoint, context: context) {
                return refusal
            }
            guard request.offset == 0 else { return .invalidOffset }
            guard !request.value.isEmpty else { return .invalidAttributeValueLength }
            return self.isBusy ? .procedureAlreadyInProgress : nil
        }
        controlPoint.onWrite = { [weak self] request in
            guard let self, let context = self.context else { return .unlikelyError }
            // The outcome is indicated after the Write Response, as the SIG's control points do;
            // the command outlives the handler, so it is copied out of the PDU.
            guard self.model.command(Array(request.value), now: context.scheduler.nowNanoseconds) else {
                return .procedureAlreadyInProgress
            }
            self.commandPeer = request.peer
            self.scheduleModel()
            return nil
        }
        relockDelay.onRead = { [weak self] _, value in
            guard let self else { return .unlikelyError }
            value.appendLE(self.relockDelaySeconds)
            return nil
        }
        relockDelay.onWrite = { [weak self] request in
            guard let self else { return .unlikelyError }
            guard let now = self.context?.scheduler.nowNanoseconds else { return .unlikelyError }
            // The countdown restarts with the new delay (or stops, at 0).
            self.model.setRelockDelay(request.value.uint16LE(at: 0), now: now)
            self.record(self.relockDelaySeconds == 0 ? "auto-relock off" : "auto-relock after \(self.relockDelaySeconds) s",
                        peer: request.peer)
            self.scheduleModel()
            return nil
        }
    }

    /// One timer, at the model's next deadline.
    private func scheduleModel() {
        guard let context else { return }
        if let timer { context.scheduler.cancel(timer) }
        timer = nil
        guard let deadline = model.nextDeadline else { return }
        let now = context.scheduler.nowNanoseconds
        timer = context.scheduler.schedule(after: .nanoseconds(Int64(clamping: deadline > now ? deadline - now : 0))) { [weak self] in
            guard let self, let context = self.context else { return }
            self.timer = nil
            for outcome in self.model.advance(to: context.scheduler.nowNanoseconds) { self.report(outcome) }
            self.scheduleModel()
        }
    }

    /// Logs an outcome of the mechanism, notifies Lock State when the bolt moved, and answers the
    /// writer of the command.
    private func report(_ outcome: LockModel.Outcome) {
        switch outcome {
        case .refusedLockedOut(let code):
            guard let peer = takeCommandPeer() else { return }
            record("refused \(peer.address): locked out", peer: peer)
            answer(peer, code, .lockedOut)
        case .unknownOpcode(let code):
            guard let peer = takeCommandPeer() else { return }
            record("unknown opcode \(Hex.byte(code)) from \(peer.address)", peer: peer)
            answer(peer, code, .unknownOpcode)
        case .wrongPIN(let code, let count, let lockedOut):
            guard let peer = takeCommandPeer() else { return }
            record("wrong PIN from \(peer.address) (\(count) of \(Self.wrongPINsBeforeLockout))", peer: peer)
            if lockedOut { record("locked out for \(Self.lockoutDuration.components.seconds) s") }
            answer(peer, code, .wrongPIN)
        case .moved(let wanted, let state, let code):
            let peer = code == nil ? nil : takeCommandPeer()
            let who = peer.map { " by \($0.address)" } ?? " automatically"
            let verb = wanted == .locked ? "locking" : "unlocking"
            record(state == .jammed ? "jammed while \(verb)\(who)" : "\(wanted.name)\(who)", peer: peer)
            lockStateValue.update([state.rawValue], context: context)
            if let peer, let code { answer(peer, code, state == .jammed ? .jammed : .success) }
        }
    }

    private func takeCommandPeer() -> ATTPeer? {
        defer { commandPeer = nil }
        return commandPeer
    }

    private func answer(_ peer: ATTPeer, _ code: UInt8, _ result: Result) {
        context?.indicate(controlPoint, to: peer) {
            $0.append(Self.responseCode)
            $0.append(code)
            $0.append(result.rawValue)
        }
    }

    /// Adds a line to the Event Log and logs it as a state change.
    private func record(_ event: String, peer: ATTPeer? = nil) {
        let elapsed = context.map { ($0.scheduler.nowNanoseconds &- startNanoseconds) / 1_000_000_000 } ?? 0
        // HH:MM:SS since power-on: a lock has no wall clock until someone sets one.
        let stamp = [elapsed / 3600, elapsed / 60 % 60, elapsed % 60].map { $0 < 10 ? "0\($0)" : "\($0)" }.joined(separator: ":")
        events.append("\(stamp) \(event)")
        var metadata: Logger.Metadata = [:]
        if let peer { metadata[LogKey.peer] = .string(peer.address.description) }
        context?.log(.stateChanged, .info, event, metadata)
    }
}
