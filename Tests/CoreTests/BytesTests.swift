import Testing
@testable import BlemuCore

@Suite struct ByteReaderTests {
    @Test func readsLittleEndian() throws {
        var r = ByteReader([0x01, 0x34, 0x12, 0x78, 0x56, 0x34, 0x12, 0xAA])
        #expect(try r.u8() == 0x01)
        #expect(try r.u16() == 0x1234)
        #expect(try r.u32() == 0x1234_5678)
        #expect(r.remaining == 1)
        #expect(throws: DecodeError(.truncated)) { try r.u16() }
        #expect(try r.u8() == 0xAA)
        #expect(r.isAtEnd)
    }

    @Test func slicesWithoutCopyAndRejectsNegative() throws {
        var r = ByteReader([1, 2, 3, 4][1...])
        #expect(Array(try r.bytes(2)) == [2, 3])
        #expect(throws: DecodeError.self) { try r.bytes(-1) }
        #expect(throws: DecodeError.self) { try r.bytes(2) }
        #expect(Array(r.rest()) == [4])
    }

    @Test func hexRoundTrip() {
        #expect(Hex.parse("0a1B") == [0x0A, 0x1B])
        #expect(Hex.parse("0x0a 1b") == [0x0A, 0x1B])
        #expect(Hex.parse("abc") == nil)
        #expect(Hex.parse("zz") == nil)
        #expect(Hex.byte(0x0A) == "0x0a")
        #expect(Hex.word(0x2A) == "0x002a")
    }

    /// Every byte: the 22 ASCII hex digits have their value, every other byte (the neighbours
    /// of the digit ranges, '/', ':', '@', 'G', '`', 'g', and non-ASCII) has none.
    @Test func hexDigitValues() {
        let digits = Array("0123456789abcdef".utf8)
        for byte in UInt8.min...UInt8.max {
            let expected = digits.firstIndex(of: byte).map(UInt8.init)
                ?? digits.firstIndex(of: byte | 0x20).flatMap { $0 >= 10 && (0x41...0x46).contains(byte) ? UInt8($0) : nil }
            #expect(Hex.digit(byte) == expected, "\(byte)")
        }
    }
}

@Suite struct AddressTests {
    @Test func parsesAndPrints() throws {
        let a = try #require(BluetoothAddress("C0:11:22:33:44:55"))
        #expect(a.description == "C0:11:22:33:44:55")
        #expect(a.littleEndianBytes == [0x55, 0x44, 0x33, 0x22, 0x11, 0xC0])
        #expect(a.isValidStaticRandom)
        #expect(BluetoothAddress("C0:11:22:33:44") == nil)
        #expect(BluetoothAddress("G0:11:22:33:44:55") == nil)
        #expect(!(BluetoothAddress("00:11:22:33:44:55")!.isValidStaticRandom))
    }

    @Test func staticRandomIsStableAndValid() {
        let a = BluetoothAddress.staticRandom(seed: "heart-rate")
        #expect(a == BluetoothAddress.staticRandom(seed: "heart-rate"))
        #expect(a != BluetoothAddress.staticRandom(seed: "thermostat"))
        for seed in ["", "a", "heart-rate", "chat", "lock"] {
            #expect(BluetoothAddress.staticRandom(seed: seed).isValidStaticRandom)
        }
    }
}

@Suite struct UUIDTests {
    @Test func shortAndLongForms() throws {
        let hr = BluetoothUUID(0x180D)
        #expect(hr.uint16 == 0x180D)
        #expect(hr.description == "180D")
        #expect(hr.attBytes == [0x0D, 0x18])
        #expect(BluetoothUUID("180d") == hr)
        #expect(BluetoothUUID("0000180D-0000-1000-8000-00805F9B34FB") == hr)
        let custom = try #require(BluetoothUUID("7d3c0001-9a5e-4d1a-8f6e-5c1b2d3e4f50"))
        #expect(custom.uint16 == nil)
        #expect(custom.description == "7d3c0001-9a5e-4d1a-8f6e-5c1b2d3e4f50")
        #expect(custom.attBytes.count == 16)
        #expect(custom.attBytes.first == 0x50)
        #expect(try BluetoothUUID(littleEndian: custom.attBytes[...]) == custom)
        #expect(throws: DecodeError.self) { try BluetoothUUID(littleEndian: [1, 2, 3][...]) }
        #expect(BluetoothUUID("7d3c0001-9a5e-4d1a-8f6e-5c1b2d3e4f5") == nil)
    }
}

@Suite struct ManualSchedulerTests {
    @Test func firesInDeadlineOrderAndCancels() {
        let s = ManualScheduler()
        var fired: [Int] = []
        s.schedule(after: .milliseconds(30)) { fired.append(3) }
        let cancelled = s.schedule(after: .milliseconds(20)) { fired.append(2) }
        s.schedule(after: .milliseconds(10)) { fired.append(1) }
        s.cancel(cancelled)
        s.advance(by: .milliseconds(15))
        #expect(fired == [1])
        s.advance(by: .milliseconds(100))
        #expect(fired == [1, 3])
    }

    @Test func aStallFiresEachDueTimerOnceAtTheNewTime() {
        let s = ManualScheduler()
        let start = s.nowNanoseconds
        var ticks: [UInt64] = []
        var timeouts: [UInt64] = []
        func tick() { s.schedule(after: .seconds(1)) { ticks.append(s.nowNanoseconds - start); tick() } }
        tick()
        s.schedule(after: .seconds(600)) { timeouts.append(s.nowNanoseconds - start) }
        s.schedule(after: .seconds(700)) { timeouts.append(s.nowNanoseconds - start) }
        s.stall(for: .seconds(650))
        // The tick once (not 650 times), the 10-minute timer, both at the new time; not the later one.
        #expect(ticks == [650_000_000_000])
        #expect(timeouts == [650_000_000_000])
        #expect(s.nowNanoseconds - start == 650_000_000_000)
        // What the tick rescheduled runs a period after the stall.
        s.advance(by: .seconds(1))
        #expect(ticks == [650_000_000_000, 651_000_000_000])
    }
}
