import BlemuCentral
import BlemuCore
import Testing

@testable import BlemuObserver

/// `blemu scan --table`'s rows: the strongest first, names and decodings beside the numbers,
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

    @Test func rowsAreTheStrongestFirstWithNamesAndDecodings() {
        let lines = ScanTable.lines(advertisers(), now: 4_000_000_000, width: 200, rows: 10)
        #expect(lines.count == 5)
        #expect(lines[0].hasPrefix("ADDRESS            RSSI      SEEN   NAME"))
        #expect(lines[1] == "3 advertisers")
        #expect(lines[2] == "C4:00:00:00:00:02  -40 dBm   1 s    X\\x1bY                manufacturer-data 0x0059 (Nordic Semiconductor ASA)  abcd")
        #expect(lines[3] == "C4:00:00:00:00:01  -70 dBm   3 s    HR                    180D (Heart Rate); 180F (Battery Service); Heart Rate Sensor: Heart Rate Belt")
        #expect(lines[4].hasPrefix("C4:00:00:00:00:03  ?"))
    }

    @Test func linesAreCutToTheTerminalAndExtraRowsCounted() {
        let lines = ScanTable.lines(advertisers(), now: 4_000_000_000, width: 50, rows: 1)
        #expect(lines.allSatisfy { $0.count <= 50 })
        #expect(lines[2].hasPrefix("C4:00:00:00:00:02") && lines[2].hasSuffix("…"))
        #expect(lines.last == "… 2 more (weaker)")
        #expect(ScanTable.lines([], now: 0, width: 80, rows: 10) == [ScanTable.header, "0 advertisers"])
    }
}
