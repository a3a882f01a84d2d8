import BlemuChat
import BlemuCore

/// The one line systemd's STATUS= carries for `blemu chat` (`systemctl status blemu-chat@NAME`,
/// Docs/CHAT.md "As a service"): where the node is in each of its rooms, controllers down, the
/// last error. `room kitchen: hosting, 2 members`; `member of kitchen via C4:12:…`; `looking for
/// room kitchen`. A node in several rooms (a bridge) names each room's controller.
public struct ChatServiceStatus: Equatable, Sendable {
    public struct Room: Equatable, Sendable {
        /// The room's name as this side knows it: the hosted room, the room given, or the name of
        /// the host a member joined; nil: a member that joins any room (no `--room`).
        public var name: String?
        /// The controller's spec (`hci0`, `tcp:…`), named when the node has several.
        public var controller: String
        public var presence: ChatSide.Presence
        public var controllerUp: Bool

        public init(name: String?, controller: String, presence: ChatSide.Presence, controllerUp: Bool = true) {
            self.name = name
            self.controller = controller
            self.presence = presence
            self.controllerUp = controllerUp
        }
    }

    public var rooms: [Room]
    public var lastError: String?

    public init(rooms: [Room], lastError: String? = nil) {
        self.rooms = rooms
        self.lastError = lastError
    }

    /// Every side is in its room (READY=1): hosting and advertising, or a member of a host's room.
    public var isReady: Bool { !rooms.isEmpty && rooms.allSatisfy(\.presence.isInRoom) }

    /// A name in the line: made visible (a member's room is its host's advertised name, which a
    /// peer chooses), cut between characters past `nameLimit` bytes (fewer when there are several
    /// rooms, so the line keeps each of them in systemd's 200 bytes).
    static func shown(_ name: String, limit: Int) -> String {
        let visible = name.visible
        guard visible.utf8.count > limit else { return visible }
        var cut = ""
        for character in visible {
            if cut.utf8.count + character.utf8.count > limit - 3 { break }
            cut.append(character)
        }
        return cut + "…"
    }

    /// How much of a name the line shows: one room, or each of several.
    static let nameLimit = 40
    static let nameLimitOfSeveral = 20

    public var line: String {
        let limit = rooms.count > 1 ? Self.nameLimitOfSeveral : Self.nameLimit
        var parts: [String] = rooms.map { room in
            let on = rooms.count > 1 ? " on \(Self.shown(room.controller, limit: limit))" : ""
            let named = room.name.map { "room \(Self.shown($0, limit: limit))" }
            switch room.presence {
            case let .hosting(members, advertising):
                return "\(named ?? "room")\(on): hosting, \(members) member\(members == 1 ? "" : "s")" + (advertising ? "" : ", not advertising")
            case let .member(host, address):
                return "member of \(Self.shown(host, limit: limit))\(on) via \(address)"
            case .looking(let again):
                return "looking for \(named ?? "a chat room")\(on)" + (again ? " again: the link to its host was lost" : "")
            }
        }
        let down = rooms.count(where: { !$0.controllerUp })
        if down > 0 { parts.append("\(down) controller(s) down") }
        return parts.joined(separator: "; ") + (lastError.map { "; last error: \($0)" } ?? "")
    }
}
