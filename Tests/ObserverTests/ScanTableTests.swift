import BlemuBroadcast
import BlemuCentral
import BlemuCore
import BlemuCrypto
import Testing

@testable import BlemuObserver

/// `blemu scan --table`'s rows: by address, names and decodings beside the numbers,
/// cut to the terminal.
@Suite struct ScanTableTests {
    func advertisers() -> [Advertisement] {
        var table = AdvertiserTable()
        // A heart-rate sensor: Flags, 16-bit services 180D 180F, name "HR", appearance 0x0341.
        table.record(address: BluetoothAddress("C4:00:00:00:00:01")!, addressType: 1, rssi: -70, connectable: true,
                     isScanResponse: false, data: [0x02, 0x01, 0x06, 0x05, 0x03, 0x0D, 0x18, 0x0F, 0x18,
                                                   0x03, 0x09, 0x48, 0x52, 0x03, 0x19, 0x41, 0x03], now: 1_000_000_000)
        // Nordic's manufacturer data, stronger, heard later; its name carries an escape.
        table.record(address: BluetoothAddress("C4:00:00:00:00:02")!, addressType: 1, rssi: -40, connectable: false,
                     isScanResponse: false, data: [0x05, 0xFF, 0x59, 0x00, 0xAB, 0xCD, 0x04, 0x09, 0x58, 0x1B, 0x59], now: 3_000_000_000)
        // RSSI unknown: last.
        table.record(address: BluetoothAddress("C4:00:00:00:00:03")!, addressType: 0, rssi: nil, connectable: false,
                     isScanResponse: false, data: [0x02, 0x01, 0x06], now: 3_000_000_000)
        return Array(table.entries.values)
    }

    /// By address, whatever the RSSI (issue 34): rows sorted by RSSI swapped places at each redraw.
    @Test func rowsAreInAddressOrderWithNamesAndDecodings() {
        let lines = ScanTable.lines(advertisers(), now: 4_000_000_000, width: 200, rows: 10)
        #expect(lines.count == 5)
        #expect(lines[0].hasPrefix("ADDRESS            RSSI      SEEN   NAME"))
        #expect(lines[1] == "3 advertisers")
        #expect(lines[2] == "C4:00:00:00:00:01  -70 dBm   3 s    HR                    180D (Heart Rate); 180F (Battery Service); Heart Rate Sensor: Heart Rate Belt")
        #expect(lines[3] == "C4:00:00:00:00:02  -40 dBm   1 s    X\\x1bY                manufacturer-data 0x0059 (Nordic Semiconductor ASA)  abcd")
        #expect(lines[4].hasPrefix("C4:00:00:00:00:03  ?"))
        // The RSSI moves: the rows stay where they are.
        var moved = advertisers()
        for index in moved.indices { moved[index].rssi = moved[index].address.description.hasSuffix("01") ? -30 : -90 }
        #expect(ScanTable.lines(moved, now: 4_000_000_000, width: 200, rows: 10).map { $0.prefix(17) }
                == lines.map { $0.prefix(17) })
        // By the address's value, not its text (which sorts the same here): 0A before 10.
        let low = Advertisement(advertiser: LEAddress(BluetoothAddress("0A:00:00:00:00:00")!, isRandom: false), rssi: -50,
                                isConnectable: false, lastSeen: 0)
        let high = Advertisement(advertiser: LEAddress(BluetoothAddress("10:00:00:00:00:00")!, isRandom: false), rssi: -20,
                                 isConnectable: false, lastSeen: 0)
        #expect(ScanTable.lines([high, low], now: 0, width: 80, rows: 10)[2].hasPrefix("0A:00"))
    }

    @Test func linesAreCutToTheTerminalAndExtraRowsCounted() {
        let lines = ScanTable.lines(advertisers(), now: 4_000_000_000, width: 50, rows: 1)
        #expect(lines.allSatisfy { $0.count <= 50 })
        #expect(lines[2].hasPrefix("C4:00:00:00:00:01") && lines[2].hasSuffix("…"))
        #expect(lines.last == "… 2 more")
        #expect(ScanTable.lines([], now: 0, width: 80, rows: 10) == [ScanTable.header, "0 advertisers"])
    }

    /// The table draws each advertiser's latest data: a replayed encrypted reading there is shown
    /// refused, not as the reading (issue 34).
    @Test func aReplayedReadingIsShownRefused() {
        let key = AESCCMKey(Hex.parse("231d39c1d7cc1ab1aee224cd096db932") ?? [])!
        let address = BluetoothAddress("C4:00:00:00:00:09")!
        let keys = BroadcastReport.Keys(bindkey: key)
        func advertisement(_ counter: UInt32) -> Advertisement {
            let packet = BTHomePacket(objects: [BTHomeObject(.temperature, value: 21.5)!])
            return Advertisement(advertiser: LEAddress(address, isRandom: true), rssi: -50, isConnectable: false,
                                 advertisingData: BTHome.advertisingData(packet, encryption: BTHomeEncryption(key: key, address: address, counter: counter)),
                                 lastSeen: 0)
        }
        var replays = BTHomeReplayGuard()
        #expect(replays.screen(BroadcastReport(advertisement(101), keys: keys), from: address, now: 0) == nil)
        let current = ScanTable.lines([advertisement(101)], now: 0, keys: keys, replays: replays, width: 200, rows: 10)
        #expect(current[2].hasSuffix("bthome  encrypted (counter 101)  temperature 21.50 °C"))
        let replayed = ScanTable.lines([advertisement(100)], now: 0, keys: keys, replays: replays, width: 200, rows: 10)
        #expect(replayed[2].hasSuffix("bthome  counter 100 after 101: refused (a replay)"))
    }
}
