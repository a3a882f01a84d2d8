@testable import BlemuCentral
import BlemuCore
import BlemuHCI
import Testing

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
