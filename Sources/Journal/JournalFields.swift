import BlemuCore
import Logging

/// The journal's names for what blemu logs: field names, priorities and the MESSAGE_ID of each
/// event kind (Docs/REFERENCE.md, "Logs"; Docs/blemu.catalog explains each id).
public enum JournalFields {
    /// Every metadata key becomes `BLEMU_` + the key in capitals: `conn_handle` → `BLEMU_CONN_HANDLE`.
    public static let prefix: StaticString = "BLEMU_"
    /// journald ignores longer field names (systemd, journal_field_valid(): "Don't allow names
    /// longer than 64 chars").
    public static let maximumNameLength = 64
    /// How many entries the flood budget left out before this one (budgeted entries only).
    public static let suppressed: StaticString = "BLEMU_SUPPRESSED"
    public static let snoopFrame: StaticString = "BLEMU_SNOOP_FRAME"
    public static let identifier = "blemu"

    /// The journal field of a metadata key. sd_journal_send(3): "The variable name must be in
    /// uppercase and consist only of characters, numbers and underscores, and may not begin
    /// with an underscore." The prefix keeps the leading character a letter; anything else
    /// becomes `_`.
    public static func name(forKey key: String) -> String {
        var bytes: [UInt8] = []
        appendName(forKey: key, to: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// `name(forKey:)` appended to a buffer, with no allocation beyond the buffer's growth.
    static func appendName(forKey key: String, to bytes: inout [UInt8]) {
        let start = bytes.count
        prefix.withUTF8Buffer { bytes.append(contentsOf: $0) }
        for byte in key.utf8 {
            guard bytes.count - start < maximumNameLength else { break }
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"): bytes.append(byte - 0x20)
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "_"): bytes.append(byte)
            default: bytes.append(UInt8(ascii: "_"))
            }
        }
    }

    /// The syslog priority (syslog(3), the journal's PRIORITY) of a swift-log level. swift-log's
    /// levels follow syslog's names, so each maps to its namesake; trace has none and is debug.
    public static func priority(_ level: Logger.Level) -> UInt8 {
        switch level {
        case .trace, .debug: return 7   // LOG_DEBUG
        case .info: return 6            // LOG_INFO
        case .notice: return 5          // LOG_NOTICE
        case .warning: return 4         // LOG_WARNING
        case .error: return 3           // LOG_ERR
        case .critical: return 2        // LOG_CRIT
        }
    }

    /// The MESSAGE_ID of each event kind: 128 bits, lower-case hex, generated once and never
    /// changed (systemd's catalog and `journalctl MESSAGE_ID=` rely on it; Docs/blemu.catalog
    /// has the same ids, which a unit test checks).
    public static func messageID(_ event: BlemuEvent) -> StaticString {
        switch event {
        case .started: return "8c7474dc85c34d09807c61d3d9227c91"
        case .controllerUp: return "97b3bf7d8c03423eafef5224d9e4d42e"
        case .controllerLost: return "6d0e8da679744000b579193934607136"
        case .advertisingStarted: return "dabf16b1af294befa8cd2d072f446c39"
        case .advertisingStopped: return "49c860efb9bf41a48affa5e99089c197"
        case .connected: return "705f4d5e5a004e2796323564917dda13"
        case .disconnected: return "62be445da2734ecdbb84622d9e2d1956"
        case .mtuChanged: return "74013435e0984e2fb0d10280e5ff4773"
        case .subscribed: return "7dae088174e6407ebc12e6b33024a97c"
        case .unsubscribed: return "51f47ea4d45c46cbb1675bcea017fe69"
        case .attError: return "6bf7cd38a2d44496aadaf1d6019ca475"
        case .write: return "a6452014f9b34c0fa42eccaca0df6963"
        case .stateChanged: return "1ee4e02563704c23bf041f754ba15af1"
        case .faultInjected: return "d7091f0d0d1d4899a6ad684305ebf2fe"
        case .controlCommand: return "be14f1f5b51449da8377822e37edc1e1"
        case .stopping: return "53835d6d83ed45098be9fa72f889c8b3"
        case .paired: return "17c86d82b3224606b8123c84cb3e3f3c"
        case .pairingFailed: return "bf173841173e4813812717c3426a9632"
        case .encryptionChanged: return "c6df45e93aae4bffa8cfa154e110c166"
        case .keyMissing: return "3124b8b07ea44bb3b66ef572e4fbe76c"
        case .addressChanged: return "c3099ab9bfff4606bcda38131824d522"
        }
    }
}
