import BlemuChat
import BlemuCore
import Testing

/// Hosts of the room that were none: passed over for a while, at most `capacity` of them.
@Suite struct SetAsideHostsTests {
    static let second: UInt64 = 1_000_000_000

    @Test func aBadHostIsPassedOverForTheDurationThenTriedAgain() {
        var hosts = SetAsideHosts()
        let bad = BluetoothAddress(value: 0xC0_00_00_00_00_01)
        let now: UInt64 = 5 * Self.second
        let first = hosts.setAside(bad, now: now)
        #expect(first)
        #expect(hosts.isSetAside(bad, now: now))
        #expect(!hosts.isSetAside(BluetoothAddress(value: 0xC0_00_00_00_00_02), now: now))
        // Set aside again while it is: nothing new (logged once).
        let again = hosts.setAside(bad, now: now + 30 * Self.second)
        #expect(!again)
        let end = now + UInt64(SetAsideHosts.duration.components.seconds) * Self.second
        #expect(hosts.isSetAside(bad, now: end - 1))
        #expect(!hosts.isSetAside(bad, now: end))
        let afterwards = hosts.setAside(bad, now: end)
        #expect(afterwards)
    }

    @Test func aPeerWithANewAddressEachTimeCannotGrowTheTable() {
        var hosts = SetAsideHosts()
        for index in 0..<10_000 {
            hosts.setAside(BluetoothAddress(value: 0xC0_00_00_00_00_00 + UInt64(index)), now: Self.second + UInt64(index))
        }
        #expect(hosts.until.count == SetAsideHosts.capacity)
        // The newest are kept; the oldest made room.
        #expect(hosts.isSetAside(BluetoothAddress(value: 0xC0_00_00_00_00_00 + 9_999), now: Self.second + 10_000))
        #expect(!hosts.isSetAside(BluetoothAddress(value: 0xC0_00_00_00_00_00), now: Self.second + 10_000))
    }
}
