import BlemuBroadcast
import BlemuCore

/// `blemu scan --watch ADDRESS`: which of one advertiser's reports are a new reading, to print
/// each once. A broadcaster repeats one reading in every advertising event until it has a new
/// one, so a scanner hears each many times:
/// - BTHome with a packet id (object 0x00): a reading is new when the packet id differs from the
///   last one printed (bthome.io/format: "a receiver can use it to filter duplicates"); an
///   encrypted one's counter moves with every advertisement and is not compared.
/// - anything else: new when what it decodes to differs from the last printed (unchanged
///   payloads are not repeated).
/// It remembers one report, of the one advertiser watched: bounded whatever the peer sends.
public struct ReadingWatch {
    public let address: BluetoothAddress
    private var lastPacketID: UInt8?
    private var lastReport: BroadcastReport?

    public init(address: BluetoothAddress) { self.address = address }

    /// Whether `report`, heard from `from`, is a reading not printed yet (and now remembered).
    public mutating func isNewReading(_ report: BroadcastReport, from: BluetoothAddress) -> Bool {
        guard from == address else { return false }
        let comparable = BroadcastReport.withoutCounters(report)
        if let packetID = report.bthome?.packetID {
            defer { lastPacketID = packetID; lastReport = comparable }
            return packetID != lastPacketID
        }
        lastPacketID = nil
        guard comparable != lastReport else { return false }
        lastReport = comparable
        return true
    }
}
