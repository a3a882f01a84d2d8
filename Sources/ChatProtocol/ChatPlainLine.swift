/// A line of the plain protocol (Docs/CHAT.md, "The plain protocol"), the Core Bluetooth chat
/// app's: one write or notification of UTF-8 text on Message is one message, `NAME: text` for
/// a line someone wrote, or an announcement starting with `* ` (as it is). The host writes it
/// to its plain clients (`ChatRoom`), a blemu member reads it from a plain host and writes it
/// for others' lines it passes on (`ChatMember`): one format, here.
public enum ChatPlainLine: Equatable, Sendable {
    case announcement(String)
    case message(sender: String, text: String)

    /// `NAME: text`, or an announcement where `sender` is empty (the host's announcements have no sender).
    public init(sender: String, text: String) {
        self = sender.isEmpty ? .announcement(text) : .message(sender: sender, text: text)
    }

    /// What a plain host notified: `NAME: text`, else (no `: `, or starting with `* `) an announcement.
    public init(parsing text: String) {
        if let colon = text.firstRange(of: ": "), !text.hasPrefix("* ") {
            self = .message(sender: String(text[..<colon.lowerBound]), text: String(text[colon.upperBound...]))
        } else {
            self = .announcement(text)
        }
    }

    /// UTF-8 pieces of at most `limit` bytes (20 at least, ATT's default; 512 at most, the
    /// longest attribute value), never cutting a character — but one longer than `limit` (a
    /// letter with many combining marks), which is cut between its scalars, never inside one:
    /// every piece is UTF-8 and nothing is lost.
    public static func parts(of text: String, limit: Int) -> [[UInt8]] {
        let limit = min(512, max(20, limit))
        var parts: [[UInt8]] = []
        var current: [UInt8] = []
        func add(_ bytes: some Collection<UInt8>) {
            if current.count + bytes.count > limit, !current.isEmpty {
                parts.append(current)
                current = []
            }
            current += bytes
        }
        for character in text {
            let bytes = String(character).utf8
            if bytes.count <= limit {
                add(bytes)
            } else {
                // A scalar is at most 4 bytes, and `limit` at least 20.
                for scalar in character.unicodeScalars { add(String(scalar).utf8) }
            }
        }
        if !current.isEmpty { parts.append(current) }
        return parts
    }

    /// The line as it goes on Message.
    public var text: String {
        switch self {
        case .announcement(let text): text
        case let .message(sender, text): "\(sender): \(text)"
        }
    }
}

extension ChatTrust {
    /// A name that cannot be checked (a plain client's, a plain host's lines), as a room with
    /// trust shows it: with the unverified mark, once.
    public static func unverified(_ sender: String) -> String {
        sender.hasPrefix(unverifiedMark) ? sender : unverifiedMark + sender
    }
}
