import BlemuBroadcast
import BlemuCentral
import BlemuCore
import BlemuCrypto
import Testing

@testable import BlemuObserver

private let bindkey = AESCCMKey(Hex.parse("231d39c1d7cc1ab1aee224cd096db932") ?? [])!
private let otherKey = AESCCMKey(Hex.parse("231d39c1d7cc1ab1aee224cd096db933") ?? [])!
private let sensor = BluetoothAddress("54:48:E6:8F:80:A5")!

/// An encrypted BTHome advertisement from `address` with `counter`, sealed under `key`, as a scan
/// with `bindkey` decodes it.
private func heard(_ counter: UInt32, temperature: Double = 21.5, from address: BluetoothAddress = sensor,
                   sealedWith key: AESCCMKey = bindkey) -> BroadcastReport {
    let packet = BTHomePacket(objects: [BTHomeObject(.temperature, value: temperature)!])
    let data = BTHome.advertisingData(packet, encryption: BTHomeEncryption(key: key, address: address, counter: counter))
    return BroadcastReport(address: address, advertisingData: data, keys: .init(bindkey: bindkey))
}

/// Replayed encrypted BTHome (issue 34): refused by bthome-ble's rule, said once per advertiser,
/// with a memory bounded like the advertisers'.
@Suite struct BTHomeReplayGuardTests {
    /// What `screen` makes of each counter: "ok", "refused" (the first), "refused again".
    func verdicts(_ counters: [UInt32], guard replays: inout BTHomeReplayGuard, from address: BluetoothAddress = sensor) -> [String] {
        counters.enumerated().map { index, counter in
            guard let refusal = replays.screen(heard(counter, from: address), from: address, now: UInt64(index)) else { return "ok" }
            #expect(refusal.counter == counter)
            return refusal.isFirst ? "refused" : "refused again"
        }
    }

    @Test func aCounterThatGoesBackIsRefusedOnceSaidWhateverItsSize() {
        var replays = BTHomeReplayGuard()
        // 100 and 101 pass; 100 again is a replay; heard again (every advertising event) it is
        // refused without a second word; 101 is the same reading heard again; 50 goes back too
        // (bthome-ble would take it for a device that restarted from 0: a scan cannot tell).
        #expect(verdicts([100, 101, 100, 100, 101, 50, 0], guard: &replays)
                == ["ok", "ok", "refused", "refused again", "ok", "refused again", "refused again"])
        #expect(replays.screen(heard(102), from: sensor, now: 10) == nil)   // growing again
        #expect(verdicts([5000, 4999], guard: &replays) == ["ok", "refused again"])
        #expect(replays.refusal(of: heard(4000), from: sensor)
                == BTHomeReplayGuard.Refusal(counter: 4000, lastCounter: 5000, isFirst: false))
        #expect(replays.refusal(of: heard(5000), from: sensor) == nil)
        #expect("\(BTHomeReplayGuard.Refusal(counter: 100, lastCounter: 101, isFirst: true))"
                == "encrypted BTHome counter 100 after 101: refused as a replay")
    }

    @Test func eachAdvertiserHasItsOwnCounter() {
        var replays = BTHomeReplayGuard()
        let other = BluetoothAddress("54:48:E6:8F:80:A6")!
        #expect(verdicts([300], guard: &replays) == ["ok"])
        #expect(verdicts([150, 120], guard: &replays, from: other) == ["ok", "refused"])
        #expect(verdicts([250], guard: &replays) == ["refused"])
    }

    @Test func onlyReadingsTheKeyOpenedMoveOrTripTheCounter() {
        var replays = BTHomeReplayGuard()
        // A stranger's advertisement under another key with a huge counter: a MIC failure, nothing
        // opened, nothing remembered (else it could lock the real sensor out).
        let forged = heard(0xFFFF_FFF0, sealedWith: otherKey)
        #expect(forged.items == [.bthomeError(.authenticationFailed)])
        #expect(replays.screen(forged, from: sensor, now: 0) == nil && replays.count == 0)
        #expect(verdicts([200], guard: &replays) == ["ok"])
        #expect(replays.screen(forged, from: sensor, now: 1) == nil)
        // Plain BTHome and no BTHome at all neither.
        let plain = BroadcastReport(address: sensor, advertisingData: Hex.parse("020106 0A16D2FC 4002C40903BF13") ?? [])
        #expect(replays.screen(plain, from: sensor, now: 2) == nil)
        #expect(verdicts([201, 150], guard: &replays) == ["ok", "refused"])
    }

    @Test func theMemoryIsBoundedByTheAdvertiserTablesBound() {
        var replays = BTHomeReplayGuard()
        #expect(replays.capacity == AdvertiserTable.defaultCapacity)
        var largest = 0
        for index in 0..<1_000 {
            let address = BluetoothAddress(value: 0xC0_00_00_00_00_00 + UInt64(index))
            #expect(replays.screen(heard(500, from: address), from: address, now: UInt64(index)) == nil)
            largest = max(largest, replays.count)
        }
        #expect(largest == AdvertiserTable.defaultCapacity)
        // The one heard longest ago made room: its counter is forgotten, a lower one passes.
        let first = BluetoothAddress(value: 0xC0_00_00_00_00_00)
        #expect(replays.screen(heard(400, from: first), from: first, now: 2_000) == nil)
        let recent = BluetoothAddress(value: 0xC0_00_00_00_00_00 + 999)
        #expect(replays.screen(heard(400, from: recent), from: recent, now: 2_001)?.lastCounter == 500)
    }
}
