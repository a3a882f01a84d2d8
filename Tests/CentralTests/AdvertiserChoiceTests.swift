import BlemuCore
import BlemuHCI
import Testing
@testable import HostTestSupport
@testable import BlemuCentral

/// `blemu gatt --name/--service`: one match is the peripheral, several an error listing them;
/// the scan lasts at least the window, and not a moment more than it must.
@Suite struct AdvertiserChoiceTests {
    static let second: UInt64 = 1_000_000_000

    func heard(_ name: String, _ address: UInt64, rssi: Int8? = -50) -> Advertisement {
        Advertisement(advertiser: LEAddress(BluetoothAddress(value: address), isRandom: true), rssi: rssi, isConnectable: true,
                      content: AdvertisingContent(name: name), lastSeen: 0)
    }

    @Test func aUniqueMatchIsTakenWhenTheWindowEnds() {
        var choice = AdvertiserChoice(startedAt: 10 * Self.second)
        #expect(choice.windowEnded() == .keepScanning)
        let end = 10 * Self.second + 1_500_000_000
        #expect(choice.heard(heard("HR", 1), now: 10 * Self.second + 20_000_000) == .waitUntil(end))
        // The same advertiser again (its scan response, a new RSSI) is still one.
        #expect(choice.heard(heard("HR", 1, rssi: -40), now: 10 * Self.second + 40_000_000) == .waitUntil(end))
        #expect(choice.windowEnded() == .connect(heard("HR", 1, rssi: -40)))
    }

    @Test func aMatchAfterTheWindowIsTakenAtOnce() {
        var choice = AdvertiserChoice(startedAt: 0)
        #expect(choice.heard(heard("HR", 1), now: 2 * Self.second) == .connect(heard("HR", 1)))
    }

    @Test func anAddressTakesTheFirstMatch() {
        var choice = AdvertiserChoice(startedAt: 5, window: .zero)
        #expect(choice.heard(heard("HR", 1), now: 5) == .connect(heard("HR", 1)))
    }

    /// A flood of new addresses with the name keeps the list bounded, and the choice ambiguous.
    @Test func aFloodOfAddressesIsBounded() {
        var choice = AdvertiserChoice(startedAt: 0)
        for address in 1...1000 { _ = choice.heard(heard("HR", UInt64(address)), now: UInt64(address)) }
        #expect(choice.matches.count == AdvertiserChoice.maximumMatches)
        guard case .ambiguous(let listed) = choice.windowEnded() else {
            Issue.record("a flood of advertisers is not one")
            return
        }
        #expect(listed.count == AdvertiserChoice.maximumMatches)
        #expect(listed.first == heard("HR", 1))
    }

    @Test func severalMatchesAreAnErrorListingThem() {
        var choice = AdvertiserChoice(startedAt: 0)
        _ = choice.heard(heard("HR A", 1, rssi: -61), now: 1)
        _ = choice.heard(heard("HR B", 2, rssi: nil), now: 2)
        let both = [heard("HR A", 1, rssi: -61), heard("HR B", 2, rssi: nil)]
        #expect(choice.windowEnded() == .ambiguous(both))
        #expect(AdvertiserChoice.ambiguity(both, matching: "name 'HR'")
                == "2 advertisers match name 'HR': \"HR A\" 00:00:00:00:00:01 -61 dBm, \"HR B\" 00:00:00:00:00:02 RSSI unknown; give --address to choose one")
    }

    /// A private address that gave way to a new one of the same name is one advertiser (its
    /// latest address); two private addresses heard in turn are two.
    @Test func aNewPrivateAddressIsTheSameAdvertiser() {
        let old: UInt64 = 0x4A_0000_0001, new: UInt64 = 0x5B_0000_0002   // top bits 01: resolvable
        var choice = AdvertiserChoice(startedAt: 0)
        _ = choice.heard(heard("TH", old << 8), now: 100)
        _ = choice.heard(heard("TH", old << 8), now: 200)
        _ = choice.heard(heard("TH", new << 8), now: 300)
        _ = choice.heard(heard("TH", new << 8), now: 400)
        #expect(choice.windowEnded() == .connect(heard("TH", new << 8)))
        // Interleaved: two devices.
        var two = AdvertiserChoice(startedAt: 0)
        for (address, now) in [(old << 8, 100), (new << 8, 150), (old << 8, 200), (new << 8, 250)] as [(UInt64, UInt64)] {
            _ = two.heard(heard("TH", address), now: now)
        }
        #expect(two.windowEnded() == .ambiguous([heard("TH", old << 8), heard("TH", new << 8)]))
        // Another name, or a static address, is never taken over.
        var named = AdvertiserChoice(startedAt: 0)
        _ = named.heard(heard("TH", old << 8), now: 100)
        _ = named.heard(heard("TX", new << 8), now: 300)
        #expect(named.windowEnded() == .ambiguous([heard("TH", old << 8), heard("TX", new << 8)]))
        var fixed = AdvertiserChoice(startedAt: 0)
        _ = fixed.heard(heard("TH", 0xC4_0000_0000_01), now: 100)
        _ = fixed.heard(heard("TH", 0xC4_0000_0000_02), now: 300)
        #expect(fixed.windowEnded() == .ambiguous([heard("TH", 0xC4_0000_0000_01), heard("TH", 0xC4_0000_0000_02)]))
    }

    /// An advertiser's name is hostile: the error stays one line.
    @Test func theListIsOneLineWhateverTheNames() {
        let line = AdvertiserChoice.ambiguity([heard("a\nb\r\u{7F}\u{1B}\u{202E}", 1), heard("", 2)], matching: "service 180D")
        #expect(!line.contains("\n") && !line.contains("\r") && line.contains(#""a\x0ab\x0d\x7f\x1b\u202e""#) && line.contains("(no name)"))
    }
}
