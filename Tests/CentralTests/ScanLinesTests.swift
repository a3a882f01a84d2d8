@testable import BlemuCentral
import BlemuCore
import BlemuHCI
import Testing
@testable import HostTestSupport

/// `blemu scan`'s lines: new and changed advertisers, RSSI moves only when asked, and a memory
/// that stays bounded however many advertisers pass by.
@Suite struct ScanLinesTests {
    static let second: UInt64 = 1_000_000_000

    func heard(_ address: UInt64, rssi: Int8? = -50, at: UInt64, name: String = "x") -> Advertisement {
        Advertisement(advertiser: LEAddress(BluetoothAddress(value: address), isRandom: true), rssi: rssi, isConnectable: true,
                      content: AdvertisingContent(name: name), lastSeen: at)
    }

    /// `lines.update`, for `#expect` (which cannot take a mutating call).
    func update(_ lines: inout ScanLines, for advertisement: Advertisement, change: AdvertiserTable.Change) -> ScanLines.Update? {
        lines.update(for: advertisement, change: change)
    }

    @Test func manyMoreAdvertisersThanTheBoundKeepTheMemoryAtTheBound() {
        var lines = ScanLines(rssiUpdates: true)
        // A steady advertiser, heard all along...
        let steady: UInt64 = 0xC1_00_00_00_00_01
        #expect(update(&lines, for: heard(steady, at: 0), change: .new) == .new)
        // ...among 20,000 random ones (80 times the bound), each heard once.
        var notNew = 0, largest = 0
        for index in 0..<20_000 {
            let at = UInt64(index + 1) * 1_000
            if lines.update(for: heard(0xC2_00_00_00_00_00 + UInt64(index), at: at), change: .new) != .new { notNew += 1 }
            if index % 100 == 0, lines.update(for: heard(steady, at: at), change: .rssi) != nil { notNew += 1 }
            largest = max(largest, lines.count)
        }
        #expect(notNew == 0)
        #expect(largest == ScanLines.defaultCapacity && lines.count == ScanLines.defaultCapacity)
        // The one heard longest ago made room; the steady one, heard often, was never forgotten.
        #expect(update(&lines, for: heard(steady, at: 400 * Self.second), change: .content) == .changed)
        #expect(update(&lines, for: heard(0xC2_00_00_00_00_00, at: 400 * Self.second), change: .new) == .new)
        #expect(lines.count == ScanLines.defaultCapacity)
    }

    @Test func textModeMakesNoLineForAnRSSIMove() {
        var lines = ScanLines(rssiUpdates: false)
        #expect(update(&lines, for: heard(1, rssi: -40, at: 0), change: .new) == .new)
        #expect(update(&lines, for: heard(1, rssi: -80, at: 5 * Self.second), change: .rssi) == nil)
        #expect(update(&lines, for: heard(1, rssi: -80, at: 6 * Self.second, name: "y"), change: .content) == .changed)
    }

    @Test func jsonModeReportsRSSIMovesOfThreeDBAtMostOnceASecond() {
        var lines = ScanLines(rssiUpdates: true)
        #expect(update(&lines, for: heard(1, rssi: -40, at: 0), change: .new) == .new)
        #expect(update(&lines, for: heard(1, rssi: -42, at: 2 * Self.second), change: .rssi) == nil)     // 2 dB
        #expect(update(&lines, for: heard(1, rssi: -50, at: Self.second / 2), change: .rssi) == nil)     // too soon
        #expect(update(&lines, for: heard(1, rssi: -50, at: 2 * Self.second), change: .rssi) == .rssi)
        #expect(update(&lines, for: heard(1, rssi: nil, at: 5 * Self.second), change: .rssi) == nil)    // unknown is no move
        #expect(update(&lines, for: heard(1, rssi: -48, at: 6 * Self.second), change: .rssi) == nil)    // 2 dB from the last line
    }

    /// Service data is not `AdvertiserTable`'s content: a new BTHome reading or Eddystone frame came
    /// as `.rssi` and printed nothing in text mode (issue 34). The observer's fingerprints of what
    /// it decoded make it a line; the same reading again, or RSSI alone, does not.
    @Test func aNewReadingMakesALineWhereRSSIAloneDoesNot() {
        var lines = ScanLines(rssiUpdates: false)
        func reading(_ kind: UInt8, _ fingerprint: Int) -> ScanLines.Reading { .init(kind: kind, fingerprint: fingerprint) }
        func update(_ at: UInt64, rssi: Int8 = -50, _ readings: [ScanLines.Reading]) -> ScanLines.Update? {
            lines.update(for: heard(1, rssi: rssi, at: at * Self.second), change: at == 0 ? .new : .rssi, readings: readings)
        }
        #expect(update(0, [reading(0, 21)]) == .new)
        #expect(update(1, rssi: -80, [reading(0, 21)]) == nil)
        #expect(update(2, [reading(0, 22)]) == .reading)
        #expect(update(3, [reading(0, 22)]) == nil)
        // Back to a value heard before: still news.
        #expect(update(4, [reading(0, 21)]) == .reading)
        // Frames that take turns (Eddystone UID, URL, TLM) are each compared with their own kind.
        #expect(update(5, [reading(2, 7)]) == .reading)
        #expect(update(6, [reading(3, 8)]) == .reading)
        #expect(update(7, [reading(2, 7)]) == nil)
        #expect(update(8, [reading(3, 8)]) == nil)
        #expect(update(9, [reading(4, 1)]) == .reading)
        #expect(update(10, [reading(2, 7)]) == nil)
        #expect(update(11, [reading(4, 2)]) == .reading)
        // With --json, a reading is a line of its own kind, and RSSI moves keep their rule.
        var json = ScanLines(rssiUpdates: true)
        #expect(json.update(for: heard(1, rssi: -50, at: 0), change: .new, readings: [reading(0, 1)]) == .new)
        #expect(json.update(for: heard(1, rssi: -51, at: Self.second), change: .rssi, readings: [reading(0, 2)]) == .reading)
        #expect(json.update(for: heard(1, rssi: -52, at: 3 * Self.second), change: .rssi, readings: [reading(0, 2)]) == nil)
        #expect(json.update(for: heard(1, rssi: -60, at: 4 * Self.second), change: .rssi, readings: [reading(0, 2)]) == .rssi)
    }

    @Test func theReadingKindsRememberedPerAdvertiserAreBounded() {
        var lines = ScanLines(rssiUpdates: false)
        #expect(lines.update(for: heard(1, at: 0), change: .new) == .new)
        // A peer whose advertisements carry ever new kinds: each is news, the memory stays bounded.
        for kind in 0..<200 {
            #expect(lines.update(for: heard(1, at: UInt64(kind + 1)), change: .rssi,
                                 readings: [.init(kind: UInt8(kind), fingerprint: 0)]) == .reading)
        }
        #expect(lines.readingKinds(of: BluetoothAddress(value: 1)) == ScanLines.maximumReadingKinds)
    }

    @Test func aTXPowerOf127IsNotAvailable() {
        var advertisement = heard(1, at: 0)
        advertisement.reportedTxPower = 127
        #expect(advertisement.txPower == nil)
        advertisement.reportedTxPower = nil
        advertisement.content = AdvertisingContent(name: "x", txPowerLevel: 127)
        #expect(advertisement.txPower == nil)
        advertisement.content = AdvertisingContent(name: "x", txPowerLevel: -10)
        #expect(advertisement.txPower == -10)
    }
}
