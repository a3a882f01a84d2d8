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
