import BlemuAssignedNumbers
import BlemuCentral
import BlemuCore

/// `blemu scan --table`: every advertiser heard, one row each, the strongest first, for a
/// terminal that redraws it in place (as nRF Connect's scanner list does). Pure: the rows from
/// the advertisers and the time, cut to the terminal's width and height; the CLI draws them.
public enum ScanTable {
    /// The header, then at most `rows` advertisers (the strongest RSSI first, unknown RSSI
    /// last, then by address), each cut to `width` characters; a last line says how many more
    /// there are when they do not fit.
    public static func lines(_ advertisements: some Collection<Advertisement>, now: UInt64, keys: BroadcastReport.Keys = .init(),
                             width: Int, rows: Int) -> [String] {
        let width = max(width, 40)
        let sorted = advertisements.sorted { a, b in
            switch (a.rssi, b.rssi) {
            case let (x?, y?) where x != y: return x > y
            case (_?, nil): return true
            case (nil, _?): return false
            default: return a.address.description < b.address.description
            }
        }
        var out = [cut(header, width), cut("\(advertisements.count) advertiser\(advertisements.count == 1 ? "" : "s")", width)]
        let shown = sorted.prefix(max(0, rows))
        out += shown.map { cut(row($0, now: now, keys: keys), width) }
        if sorted.count > shown.count { out.append(cut("… \(sorted.count - shown.count) more (weaker)", width)) }
        return out
    }

    static let header = pad("ADDRESS", 17) + "  " + pad("RSSI", 8) + "  " + pad("SEEN", 5) + "  " + pad("NAME", 20) + "  SERVICES, DATA"

    /// One advertiser: address, RSSI, seconds since last heard, name (a peer's text, visible,
    /// at most 20 characters), services named, then what the observer decoded or the appearance.
    static func row(_ advertisement: Advertisement, now: UInt64, keys: BroadcastReport.Keys) -> String {
        let seconds = now >= advertisement.lastSeen ? (now - advertisement.lastSeen) / 1_000_000_000 : 0
        var details: [String] = advertisement.services.map { uuid in
            uuid.description + (AssignedNumbers.serviceName(uuid).map { " (\($0))" } ?? "")
        }
        if let appearance = advertisement.appearance, let name = AssignedNumbers.appearanceName(appearance) { details.append(name) }
        details += BroadcastReport(advertisement, keys: keys).textLines
        let name = String(advertisement.name.visible.prefix(20))
        return pad(advertisement.address.description, 17) + "  "
            + pad(advertisement.rssi.map { "\($0) dBm" } ?? "?", 8) + "  "
            + pad("\(seconds) s", 5) + "  " + pad(name, 20) + "  " + details.joined(separator: "; ")
    }

    static func pad(_ text: String, _ count: Int) -> String {
        text.count >= count ? text : text + String(repeating: " ", count: count - text.count)
    }

    /// At most `width` characters: a cut line ends with "…".
    static func cut(_ line: String, _ width: Int) -> String {
        line.count <= width ? line : String(line.prefix(width - 1)) + "…"
    }
}
