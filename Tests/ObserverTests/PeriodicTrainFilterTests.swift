import BlemuCore
import BlemuObserver
import Testing

/// `blemu scan --periodic`'s lines: a train's data once until it changes, or each new reading of the watched advertiser.
@Suite struct PeriodicTrainFilterTests {
    private let sensor = BluetoothAddress("C0:11:22:33:44:55")!
    private let other = BluetoothAddress("C0:11:22:33:44:66")!

    /// A BTHome v2 reading (temperature) with packet id `packetID`, as service data 0xFCD2.
    private func bthome(packetID: UInt8) -> [UInt8] {
        // Flags; service data 0xFCD2: BTHome v2 unencrypted, packet id, temperature 25.00 °C.
        [0x02, 0x01, 0x06, 0x09, 0x16, 0xD2, 0xFC, 0x40, 0x00, packetID, 0x02, 0xC4, 0x09]
    }

    private func isNew(_ filter: inout PeriodicTrainFilter, _ data: [UInt8], handle: UInt16, from address: BluetoothAddress) -> Bool {
        filter.isNew(data, report: BroadcastReport(address: address, advertisingData: data), syncHandle: handle, from: address)
    }

    @Test func aTrainsDataIsShownOnceUntilItChanges() {
        var filter = PeriodicTrainFilter(watching: nil)
        let data = Array("hello".utf8), changed = Array("hellp".utf8)
        let shown1 = isNew(&filter, data, handle: 1, from: sensor)
        #expect(shown1)
        let shown2 = isNew(&filter, data, handle: 1, from: sensor)
        #expect(!shown2, "the train repeats it every interval")
        let shown3 = isNew(&filter, data, handle: 2, from: other)
        #expect(shown3, "another train's own data")
        let shown4 = isNew(&filter, changed, handle: 1, from: sensor)
        #expect(shown4)
        let shown5 = isNew(&filter, changed, handle: 1, from: sensor)
        #expect(!shown5)
        let shown6 = isNew(&filter, data, handle: 1, from: sensor)
        #expect(shown6, "back to the old data is a change too")
    }

    @Test func aTrainWhoseSyncEndedShowsItsDataAgain() {
        var filter = PeriodicTrainFilter(watching: nil)
        let data = Array("hello".utf8)
        let shown7 = isNew(&filter, data, handle: 1, from: sensor)
        #expect(shown7)
        filter.syncEnded(1)
        let shown8 = isNew(&filter, data, handle: 1, from: sensor)
        #expect(shown8)
        filter.syncEnded(7)
        let shown9 = isNew(&filter, data, handle: 1, from: sensor)
        #expect(!shown9, "another train's end changes nothing")
    }

    @Test func watchingOneAdvertiserShowsEachNewReadingOfItOnly() {
        var filter = PeriodicTrainFilter(watching: sensor)
        let shown10 = isNew(&filter, bthome(packetID: 1), handle: 1, from: sensor)
        #expect(shown10)
        let shown11 = isNew(&filter, bthome(packetID: 1), handle: 1, from: sensor)
        #expect(!shown11, "the same packet id: the same reading")
        let shown12 = isNew(&filter, bthome(packetID: 2), handle: 2, from: other)
        #expect(!shown12, "not the watched advertiser")
        let shown13 = isNew(&filter, bthome(packetID: 2), handle: 1, from: sensor)
        #expect(shown13)
        filter.syncEnded(1)
        let shown14 = isNew(&filter, bthome(packetID: 2), handle: 1, from: sensor)
        #expect(!shown14, "a reading is new by its packet id, not by the sync")
    }
}
