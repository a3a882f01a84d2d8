import BlemuCore

/// Which data of periodic advertising trains `blemu scan --periodic` shows: a train's data when
/// it differs from what that train last showed (a train repeats its data every interval until
/// the advertiser changes it), or, watching one advertiser (`--watch`), each new reading of it
/// (`ReadingWatch`). Trains are told apart by their sync handle; a sync that failed or was lost
/// forgets its train, so a train synchronized again under that handle shows its data at once.
/// Held per train the controller is synchronized to (`PeriodicTrains` bounds them).
public struct PeriodicTrainFilter {
    private var lastData: [UInt16: [UInt8]] = [:]
    private var readings: ReadingWatch?

    /// - Parameter watching: the one advertiser `--watch` follows, or nil for every train.
    public init(watching: BluetoothAddress?) {
        readings = watching.map(ReadingWatch.init)
    }

    /// The sync of the train with `syncHandle` failed or was lost.
    public mutating func syncEnded(_ syncHandle: UInt16) {
        lastData[syncHandle] = nil
    }

    /// Whether `data` from the train with `syncHandle` (decoded: `report`, heard from `address`)
    /// is to be shown; if so it is remembered as what that train showed.
    public mutating func isNew(_ data: [UInt8], report: BroadcastReport, syncHandle: UInt16, from address: BluetoothAddress) -> Bool {
        if readings != nil { return readings!.isNewReading(report, from: address) }
        guard lastData[syncHandle] != data else { return false }
        lastData[syncHandle] = data
        return true
    }
}
