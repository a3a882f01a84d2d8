import BlemuAssignedNumbers
import BlemuCentral
import BlemuCore

/// `blemu scan --table`: every advertiser heard, one row each, in the order of their addresses,
/// for a terminal that redraws it in place (as nRF Connect's scanner list does). Pure: the rows
/// from the advertisers and the time, cut to the terminal's width and height; the CLI draws them.
///
/// By address, not by RSSI: RSSI moves by a few dB with every packet, so rows sorted by it swap
/// places at each redraw and a row cannot be followed by eye; an address stays where it is (a
/// new advertiser goes in at its place), and the RSSI column still shows which is near.
public enum ScanTable {
    /// The header, then at most `rows` advertisers (by address: by its 48 bits, most significant
    /// first, as written), each cut to `width` characters; a last line says how many more there
    /// are when they do not fit. A BTHome reading `replays` refuses is shown refused.
    public static func lines(_ advertisements: some Collection<Advertisement>, now: UInt64, keys: BroadcastReport.Keys = .init(),
                             replays: BTHomeReplayGuard = .init(), width: Int, rows: Int) -> [String] {
        let width = max(width, 40)
        let sorted = advertisements.sorted { $0.address.value < $1.address.value }
        var out = [cut(header, width), cut("\(advertisements.count) advertiser\(advertisements.count == 1 ? "" : "s")", width)]
        let shown = sorted.prefix(max(0, rows))
        out += shown.map { cut(row($0, now: now, keys: keys, replays: replays), width) }
        if sorted.count > shown.count { out.append(cut("… \(sorted.count - shown.count) more", width)) }
        return out
    }

    static let header = pad("ADDRESS", 17) + "  " + pad("RSSI", 8) + "  " + pad("SEEN", 5) + "  " + pad("NAME", 20) + "  SERVICES, DATA"

    /// One advertiser: address, RSSI, seconds since last heard, name (a peer's text, visible,
    /// at most 20 characters), services named, then what the observer decoded or the appearance.
    static func row(_ advertisement: Advertisement, now: UInt64, keys: BroadcastReport.Keys,
                    replays: BTHomeReplayGuard = .init()) -> String {
        let seconds = now >= advertisement.lastSeen ? (now - advertisement.lastSeen) / 1_000_000_000 : 0
        var details: [String] = advertisement.services.map { uuid in
            uuid.description + (AssignedNumbers.serviceName(uuid).map { " (\($0))" } ?? "")
        }
        if let appearance = advertisement.appearance, let name = AssignedNumbers.appearanceName(appearance) { details.append(name) }
        let report = BroadcastReport(advertisement, keys: keys)
        if let refusal = replays.refusal(of: report, from: advertisement.address) {
            // The latest data is a replay: its reading is not shown, the refusal is.
            details += report.items.map { item in
                guard case .bthome = item else { return item.text }
                return "bthome  counter \(refusal.counter) after \(refusal.lastCounter): refused (a replay)"
            }
        } else {
            details += report.textLines
        }
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
