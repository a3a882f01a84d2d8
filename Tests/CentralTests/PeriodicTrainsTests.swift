import BlemuCore
@testable import BlemuHCI
import Testing
@testable import HostTestSupport

@testable import BlemuCentral

/// The scanner's periodic advertising bookkeeping (Vol 4, Part E, 7.8.67 and 7.7.65.13-16):
/// one Create Sync at a time, bounded trains, fragments reassembled within 1650 bytes.
@Suite struct PeriodicTrainsTests {
    static let advertiser = BluetoothAddress("C0:11:22:33:44:55")!

    static func announcement(sid: UInt8 = 3, interval: UInt16 = 80, address: BluetoothAddress = advertiser) -> ExtendedAdvertisingReport {
        ExtendedAdvertisingReport(eventType: 0, addressType: 1, address: address, txPower: nil, rssi: -50, data: [],
                                  advertisingSID: sid, periodicInterval: interval)
    }

    static func established(handle: UInt16 = 1, status: UInt8 = 0, sid: UInt8 = 3) -> PeriodicSyncEstablished {
        PeriodicSyncEstablished(status: status, syncHandle: handle, sid: sid, addressType: 1, address: advertiser, phy: 1,
                                interval: 80, clockAccuracy: 0)
    }

    @Test func anAnnouncedTrainIsSynchronizedOnceAndOneAtATime() {
        var trains = PeriodicTrains()
        let result1 = trains.createSync(for: Self.announcement(interval: 0))
        #expect(result1 == nil)     // no train
        let command = trains.createSync(for: Self.announcement())
        // Timeout: 80 × 1.25 ms × 6 = 600 ms, raised to the 1 s floor (100 × 10 ms).
        #expect(command == .lePeriodicAdvertisingCreateSync(sid: 3, addressType: 1, address: Self.advertiser, timeout: 100))
        let result2 = trains.createSync(for: Self.announcement(sid: 4))
        #expect(result2 == nil)          // one pending already
        let result3 = trains.established(Self.established())
        #expect(result3 != nil)
        let result4 = trains.createSync(for: Self.announcement())
        #expect(result4 == nil)                // synchronized already
        let result5 = trains.createSync(for: Self.announcement(sid: 4))
        #expect(result5 != nil)
    }

    @Test func aRefusedTrainIsNotAskedAgain() {
        var trains = PeriodicTrains()
        _ = trains.createSync(for: Self.announcement())
        let result6 = trains.established(Self.established(status: 0x44))
        #expect(result6 == nil)
        #expect(trains.pending == nil)
        let result7 = trains.createSync(for: Self.announcement())
        #expect(result7 == nil)
    }

    @Test func atMostCapacityTrains() {
        var trains = PeriodicTrains(capacity: 2)
        for handle in UInt16(1)...3 {
            let address = BluetoothAddress(value: 0xC0_00_00_00_00_00 + UInt64(handle))
            guard trains.createSync(for: Self.announcement(address: address)) != nil else { break }
            _ = trains.established(PeriodicSyncEstablished(status: 0, syncHandle: handle, sid: 3, addressType: 1, address: address,
                                                           phy: 1, interval: 80, clockAccuracy: 0))
        }
        #expect(trains.trains.count == 2)
    }

    @Test func fragmentsAreReassembledAndBounded() throws {
        var trains = PeriodicTrains()
        _ = trains.createSync(for: Self.announcement())
        _ = trains.established(Self.established())
        func report(_ status: UInt8, _ data: [UInt8], handle: UInt16 = 1) -> PeriodicAdvertisingReport {
            PeriodicAdvertisingReport(syncHandle: handle, txPower: nil, rssi: -50, cteType: 0xFF, dataStatus: status, data: data)
        }
        let result8 = trains.report(report(0x01, [1, 2]))
        #expect(result8 == nil)
        let result9 = trains.report(report(0x00, [3]))
        let whole = try #require(result9)
        #expect(whole.data == [1, 2, 3] && !whole.truncated)
        let result10 = trains.report(report(0x00, [9], handle: 7))
        #expect(result10 == nil)                // not a train held
        // 1650 bytes at most: the fragment beyond is dropped with the rest of that data.
        let result11 = trains.report(report(0x01, [UInt8](repeating: 0, count: 1600)))
        #expect(result11 == nil)
        let result12 = trains.report(report(0x01, [UInt8](repeating: 0, count: 100)))
        let cut = try #require(result12)
        #expect(cut.truncated && cut.data.count == 1600)
        let result13 = trains.report(report(0x00, [5]))
        #expect(result13 == nil)                           // the rest of the cut data
        let result14 = trains.report(report(0x00, [6]))
        #expect(result14?.data == [6])
        let result15 = trains.lost(1)
        #expect(result15 != nil && trains.trains.isEmpty)
    }
}
