import BlemuATT
import BlemuCore
import BlemuGATT
import BlemuHost
import BlemuDevices
import BlemuTestSupport
import Testing
@testable import HostTestSupport

/// The lock through the whole stack: a central paired with the passkey (its control point and
/// event log need it), with indications on, a clock moved by hand.
@Suite struct LockTests {
    private let pin = "4821"

    /// A lock with a known PIN, a central connected and subscribed to the control point's
    /// indications and Lock State's notifications.
    private func ready(pin: String? = "4821", logger: CapturedLog? = nil) throws -> (LockDevice, Bench) {
        let device = LockDevice(pin: pin, seed: 9)
        let bench = try Bench.paired(device, logger: logger)
        #expect(bench.subscribe(device.controlPoint, notify: false, indicate: true) == [[0x13]])
        #expect(bench.subscribe(device.lockState) == [[0x13]])
        return (device, bench)
    }

    private func command(_ opcode: UInt8, _ pin: String) -> [UInt8] { [opcode] + Array(pin.utf8) }

    /// Writes a command and waits for its outcome: the indication's value, confirmed.
    private func operate(_ bench: Bench, _ device: LockDevice, _ value: [UInt8],
                         wait: Duration = .seconds(2)) -> (result: [UInt8]?, states: [[UInt8]]) {
        #expect(bench.write(device.controlPoint, value).last == [0x13])
        bench.run(for: wait, step: .milliseconds(10))
        let sent = bench.sent()
        let indications = sent.indications(of: device.controlPoint)
        #expect(indications.count <= 1)
        if !indications.isEmpty { bench.att([0x1E]) }
        return (indications.first, sent.notifications(of: device.lockState))
    }

    @Test func unlocksWithThePINWhenTheMotorIsDone() throws {
        let (device, bench) = try ready()
        #expect(bench.read(device.lockState) == [1], "the lock starts locked")
        #expect(bench.write(device.controlPoint, command(0x02, pin)) == [[0x13]], "the Write Response comes first")
        // The motor takes its time: nothing yet after a second.
        bench.run(for: .seconds(1), step: .milliseconds(10))
        #expect(bench.sent().isEmpty)
        #expect(bench.read(device.lockState) == [1])
        // Another command meanwhile: Procedure Already In Progress (Supplement, Part B, 1.2).
        #expect(bench.writeError(device.controlPoint, command(0x01, pin)) == 0xFE)
        bench.run(for: .seconds(1), step: .milliseconds(10))
        let sent = bench.sent()
        #expect(sent.notifications(of: device.lockState) == [[0]])
        #expect(sent.indications(of: device.controlPoint) == [[0x80, 0x02, 0x01]])
        bench.att([0x1E])
        #expect(bench.read(device.lockState) == [0])
        // Lock again: success, Lock State 1.
        let locked = operate(bench, device, command(0x01, pin))
        #expect(locked.result == [0x80, 0x01, 0x01])
        #expect(locked.states == [[1]])
    }

    @Test func aWriterWithoutIndicationsGetsFD() throws {
        let device = LockDevice(pin: pin, seed: 1)
        let bench = try Bench.paired(device)
        #expect(bench.writeError(device.controlPoint, command(0x02, pin)) == 0xFD)
        // Notifications are not indications: still 0xFD.
        bench.write(device.controlPoint.clientConfigurationHandle ?? 0, [0x01, 0x00])
        #expect(bench.writeError(device.controlPoint, command(0x02, pin)) == 0xFD)
        // Another central's indications do not count for this one.
        bench.controller.connect(handle: 0x0041, peer: BluetoothAddress("E0:E1:E2:E3:E4:E5")!)
        bench.encryptWithBond(link: 0x0041, peer: BluetoothAddress("E0:E1:E2:E3:E4:E5")!)
        #expect(bench.subscribe(device.controlPoint, notify: false, indicate: true, link: 0x0041) == [[0x13]])
        #expect(bench.writeError(device.controlPoint, command(0x02, pin)) == 0xFD)
        #expect(bench.writeError(device.controlPoint, command(0x02, pin), link: 0x0041) == nil)
        bench.run(for: .seconds(2), step: .milliseconds(100))
        #expect(device.state == .unlocked)
        #expect(bench.sent().indications(of: device.controlPoint).isEmpty, "only the writer hears the result")
    }

    @Test func malformedCommands() throws {
        let (device, bench) = try ready()
        #expect(bench.writeError(device.controlPoint, []) == 0x0D)
        #expect(bench.writeError(device.controlPoint, command(0x02, "123456789")) == 0x0D, "10 bytes: longer than the longest PIN")
        // An unknown opcode: result 0x05 (with or without a PIN), and it is no wrong PIN.
        #expect(operate(bench, device, command(0x07, pin)).result == [0x80, 0x07, 0x05])
        #expect(operate(bench, device, [0x00]).result == [0x80, 0x00, 0x05])
        #expect(device.wrongPINsInARow == 0)
        // A Write Command is not how the control point is used: ignored, no action.
        bench.controller.sendL2CAP(handle: Bench.link, cid: 0x0004, [0x52] + Bench.le(device.controlPoint.valueHandle) + command(0x02, pin))
        bench.run(for: .seconds(2), step: .milliseconds(100))
        #expect(bench.sent().isEmpty)
        #expect(device.state == .locked)
    }

    @Test func wrongPINsLockTheControlPointOutFor60Seconds() throws {
        let (device, bench) = try ready()
        for attempt in 1...4 {
            #expect(operate(bench, device, command(0x02, "0000")).result == [0x80, 0x02, 0x02], "attempt \(attempt)")
        }
        #expect(device.wrongPINsInARow == 4)
        // Not digits, too short: still wrong PINs, and they count.
        #expect(operate(bench, device, command(0x02, "ab")).result == [0x80, 0x02, 0x02], "the fifth is still 0x02")
        #expect((57...60).contains(device.lockoutSecondsLeft), "a 60 s lockout, 2 s in")
        // During the lockout every write is 0x04, the right PIN too, and nothing moves.
        #expect(operate(bench, device, command(0x02, pin)).result == [0x80, 0x02, 0x04])
        #expect(operate(bench, device, command(0x07, pin)).result == [0x80, 0x07, 0x04])
        bench.run(for: .seconds(53))
        #expect(operate(bench, device, command(0x02, pin)).result == [0x80, 0x02, 0x04], "59 s in, still locked out")
        #expect(device.state == .locked)
        // 60 s after the fifth wrong PIN: accepted again.
        let unlocked = operate(bench, device, command(0x02, pin))
        #expect(unlocked.result == [0x80, 0x02, 0x01])
        #expect(unlocked.states == [[0]])
    }

    @Test func aRightPINResetsTheCount() throws {
        let (device, bench) = try ready()
        for _ in 1...4 { _ = operate(bench, device, command(0x01, "1111")) }
        #expect(operate(bench, device, command(0x01, pin)).result == [0x80, 0x01, 0x01])
        #expect(device.wrongPINsInARow == 0)
        for _ in 1...4 { #expect(operate(bench, device, command(0x01, "1111")).result == [0x80, 0x01, 0x02]) }
        #expect(device.lockoutSecondsLeft == 0)
        #expect(operate(bench, device, command(0x02, pin)).result == [0x80, 0x02, 0x01])
    }

    @Test func relocksItselfAfterTheDelay() throws {
        let (device, bench) = try ready()
        #expect(bench.read(device.relockDelay) == [0, 0], "auto-relock is off out of the box")
        #expect(bench.writeError(device.relockDelay, [0x0A]) == 0x0D)
        #expect(bench.writeError(device.relockDelay, [0x0A, 0x00, 0x00]) == 0x0D)
        #expect(bench.writeError(device.relockDelay, [0x0A, 0x00]) == nil)
        #expect(bench.read(device.relockDelay) == [0x0A, 0x00])
        #expect(operate(bench, device, command(0x02, pin)).states == [[0]])
        // 10 s later the motor runs by itself; Lock State says so, and nobody gets an indication.
        bench.run(for: .seconds(9))
        #expect(bench.sent().isEmpty)
        bench.run(for: .seconds(3))
        let sent = bench.sent()
        #expect(sent.notifications(of: device.lockState) == [[1]])
        #expect(sent.indications(of: device.controlPoint).isEmpty)
        #expect(String(decoding: device.events.bytes, as: UTF8.self).contains("locked automatically"))
        // Turned off, it stays open.
        #expect(bench.writeError(device.relockDelay, [0x00, 0x00]) == nil)
        _ = operate(bench, device, command(0x02, pin))
        bench.run(for: .seconds(600), step: .seconds(10))
        #expect(device.state == .unlocked)
        #expect(bench.scheduler.pendingCount == 0, "no timer while nothing is due")
    }

    @Test func anObstructedBoltJams() throws {
        let (device, bench) = try ready()
        let jammed = try #require(device.settings.first { $0.key == "jammed" })
        #expect(jammed.apply("1") == nil)
        let attempt = operate(bench, device, command(0x02, pin))
        #expect(attempt.result == [0x80, 0x02, 0x03])
        #expect(attempt.states == [[2]])
        #expect(bench.read(device.lockState) == [2])
        // Still obstructed: it jams again. Cleared: it locks.
        #expect(operate(bench, device, command(0x01, pin)).result == [0x80, 0x01, 0x03])
        #expect(jammed.apply("0") == nil)
        let locked = operate(bench, device, command(0x01, pin))
        #expect(locked.result == [0x80, 0x01, 0x01])
        #expect(locked.states == [[1]])
        #expect(jammed.apply("maybe")?.contains("jammed") == true)
    }

    @Test func theEventLogIsReadWholeAtTheDefaultMTU() throws {
        let (device, bench) = try ready()
        for _ in 1...3 { _ = operate(bench, device, command(0x02, "0000")) }
        _ = operate(bench, device, command(0x02, pin))
        _ = operate(bench, device, command(0x01, pin))
        let expected = device.events.bytes
        #expect(expected.count > 100)
        // A long read at ATT_MTU 23: Read, then Read Blob until a short part (Vol 3, Part G, 4.8.3).
        #expect(bench.longRead(device.eventLog.valueHandle) == expected)
        let text = String(decoding: expected, as: UTF8.self)
        let lines = text.split(separator: "\n")
        #expect(lines.first?.hasSuffix("locked (powered on)") == true)
        #expect(lines.last?.hasSuffix("locked by \(bench.central)") == true)
        for line in lines {
            // HH:MM:SS, then the event.
            let stamp = line.prefix(8)
            #expect(stamp.count == 8 && stamp.enumerated().allSatisfy { $0.offset % 3 == 2 ? $0.element == ":" : $0.element.isNumber },
                    "line \(line)")
        }

        // An event during a long read does not tear it: the blobs continue the value read at offset 0.
        let handle = Bench.le(device.eventLog.valueHandle)
        var value = Array(bench.att([0x0A] + handle).first?.dropFirst() ?? [])
        #expect(value.count == 22)
        #expect(device.settings.first { $0.key == "pin" }?.apply("9999") == nil)   // logs "PIN changed"
        while true {
            let part = Array(bench.att([0x0C] + handle + Bench.le(UInt16(value.count))).first?.dropFirst() ?? [])
            value += part
            if part.count < 22 { break }
        }
        #expect(value == expected)
        #expect(device.events.bytes != expected, "the log has moved on")
        #expect(bench.longRead(device.eventLog.valueHandle) == device.events.bytes)
    }

    @Test func theEventLogKeepsTheNewest512Bytes() throws {
        let (device, bench) = try ready()
        for _ in 0..<40 {
            _ = operate(bench, device, command(0x07, pin))
        }
        let bytes = device.events.bytes
        #expect(bytes.count <= 512 && bytes.count > 400)
        #expect(bytes.last == 0x0A)
        #expect(!String(decoding: bytes, as: UTF8.self).contains("powered on"), "the oldest lines went first")
        #expect(bench.longRead(device.eventLog.valueHandle) == bytes)
    }

    @Test func withoutAPINTheLockMakesOneAndLogsItOnce() throws {
        let capture = CapturedLog()
        let (device, bench) = try ready(pin: nil, logger: capture)
        let generated = try #require(device.pin)
        #expect(LockDevice.pinRefusal(generated) == nil)
        let lines = capture.lines.filter { $0.contains("PIN") }
        // Labelled: the pairing passkey is six digits too.
        #expect(lines == ["notice no PIN given: the lock's PIN is \(generated) (for the Lock Control Point's lock and unlock, not for pairing)"])
        #expect(operate(bench, device, command(0x02, generated)).result == [0x80, 0x02, 0x01])
        #expect(!String(decoding: device.events.bytes, as: UTF8.self).contains(generated), "the PIN stays out of the Event Log")
        // The same seed makes the same PIN, so a test can replay a run.
        let again = LockDevice(seed: 9)
        _ = try Bench.connected(again)
        #expect(again.pin == generated)
    }

    @Test func thePINRules() throws {
        for good in ["0000", "1234", "12345678"] {
            #expect(LockDevice.pinRefusal(good) == nil, "\(good)")
        }
        for bad in ["", "123", "123456789", "12a4", "12 34", "１２３４", "-123"] {
            #expect(LockDevice.pinRefusal(bad) != nil, "\(bad)")
        }
        let (device, bench) = try ready()
        let setting = try #require(device.settings.first { $0.key == "pin" })
        #expect(setting.apply("12") != nil)
        #expect(device.pin == pin, "a refused PIN changes nothing")
        #expect(setting.apply("77665544") == nil)
        #expect(operate(bench, device, command(0x02, pin)).result == [0x80, 0x02, 0x02])
        #expect(operate(bench, device, command(0x02, "77665544")).result == [0x80, 0x02, 0x01])
        #expect(Set(device.settings.map(\.key)) == ["jammed", "pin", "battery"])
    }
}
