import BlemuCentral
import BlemuChatProtocol
import BlemuCore
import BlemuDevices
import BlemuHost
import Logging

/// What a `ChatNode` needs of each of its rooms: `ChatSide` on a controller, or a test's fake.
public protocol ChatRoomSide: AnyObject {
    var isHosting: Bool { get }
    var isBusy: Bool { get }
    /// Whether lines given to this room are still on their way (`--exit-on-eof` waits).
    var hasUndelivered: Bool { get }
    /// A message to the room: this node's, or one a bridge brings from another room.
    func send(_ message: OutgoingChatMessage)
    var onHeard: ((ChatRoom.Heard) -> Void)? { get set }
    var onRoom: (() -> Void)? { get set }
    var onSaidAsHost: (([OutgoingChatMessage]) -> Void)? { get set }
}

/// One controller of a chat node, in one room: it hosts the room there (the `chat` device),
/// is a member of it (a central), or decides which (`auto`, Docs/CHAT.md): it looks for the
/// room's host for a few seconds, a random part of it so that two boards started together do not
/// both decide at once, and joins it or else hosts the room. A host that hears another host of
/// its room with a lower address gives way and joins it (two rooms merge into one); an auto
/// member whose host is gone for good takes over.
public final class ChatSide: ChatRoomSide {
    public enum Role: String, CaseIterable, Sendable {
        /// Host the room at once (`--role peripheral`).
        case host
        /// Join the room's host (`--role central`); end when it is gone for good.
        case member
        /// Join the room's host if there is one, else host it.
        case auto
    }

    public enum State: Equatable {
        case deciding, member, host
    }

    /// Where this side is in its room now, as systemd's STATUS= line tells it.
    public enum Presence: Equatable, Sendable {
        /// Looking for the room's host (a member, or `auto` deciding); `again`: its link to the
        /// host it was in the room of was lost.
        case looking(again: Bool)
        /// Hosting the room: its members now, and whether the chat device advertises.
        case hosting(members: Int, advertising: Bool)
        /// In a host's room: the host's advertised name and its address.
        case member(host: String, address: BluetoothAddress)

        /// In the room: hosting it and advertising, or a member of a host's room.
        public var isInRoom: Bool {
            switch self {
            case .looking: false
            case .hosting(_, let advertising): advertising
            case .member: true
            }
        }
    }

    /// How long `auto` looks before hosting: this, plus up to `randomLookMilliseconds`.
    public static let lookMilliseconds: Int64 = 3000
    public static let randomLookMilliseconds: Int64 = 2000

    public let role: Role
    public let room: String
    public let controller: String
    public private(set) var state: State
    /// What the room says here: announcements, and each message once.
    public var onHeard: ((ChatRoom.Heard) -> Void)?
    /// `isBusy` is over.
    public var onRoom: (() -> Void)?
    /// This side cannot go on: why.
    public var onFatal: ((String) -> Void)?
    /// Messages that waited (as a member, or while deciding) and that this side, now the
    /// room's host, says itself.
    public var onSaidAsHost: (([OutgoingChatMessage]) -> Void)?
    /// `presence` may have changed: a member joined or left the room it hosts, it joined a host's
    /// room or lost its link to it, it took the room over or gave way. Advertising, which the
    /// controller's events change, is not told here (the stack hears every event).
    public var onPresenceMayChange: (() -> Void)?

    private let device: ChatDevice
    private let peripheral: Peripheral
    private let central: CentralHost?
    private let member: ChatMember?
    /// How its member reaches the host (`ChatMember.transport`).
    public var transport: ChatTransport {
        get { member?.transport ?? .auto }
        set { member?.transport = newValue }
    }
    private let scheduler: TimerScheduling
    private let logger: Logger
    /// Messages given while deciding, said once decided.
    private var early: [OutgoingChatMessage] = []
    private var stopped = false

    /// `device` runs on `peripheral`; `central` shares its controller (nil only for `.host`,
    /// which then never looks for other hosts). `roomFilter`: a member joins a host whose name
    /// contains it (nil: any chat host).
    /// `trust`: the node's signatures and names bound to keys (one for all its sides), given to
    /// the device and the member; nil: the open room.
    public init(role: Role, room: String, roomFilter: String?, me: String, device: ChatDevice, peripheral: Peripheral,
                central: CentralHost?, mtu: Int, scheduler: TimerScheduling, logger: Logger, trust: ChatTrust? = nil) {
        precondition(central != nil || role == .host, "a chat member needs a central")
        self.role = role
        self.room = room
        self.controller = central?.controller.name ?? ""
        self.device = device
        self.peripheral = peripheral
        self.central = central
        self.scheduler = scheduler
        self.logger = logger
        member = central.map {
            ChatMember(central: $0, scheduler: scheduler, logger: logger, me: me, room: roomFilter, wholeName: role == .auto, mtu: mtu,
                       rejoinTimeout: role == .auto ? ChatMember.takeoverTimeout : ChatMember.rejoinTimeout)
        }
        state = role == .host ? .host : .deciding
        device.trust = trust
        member?.trust = trust
        device.onHeard = { [unowned self] heard in self.onHeard?(heard) }
        device.onPlainClientRefused = { [logger, unowned peripheral, scheduler] peer in
            // Told once; then its link is closed, after a moment for the notice to leave (a
            // Disconnect may overtake data still queued in the controller).
            logger.notice("\(peer.address) is a plain client of a private room: its link is closed")
            _ = scheduler.schedule(after: Self.refusedLinkGrace) { peripheral.disconnect(peer) }
        }
        device.onRoom = { [unowned self] in self.onRoom?() }
        device.onMembersChanged = { [unowned self] in self.onPresenceMayChange?() }
        if role != .host {
            // Not hosting until decided: the device is there, silent.
            peripheral.setAdvertisingAllowed(false)
        }
        guard let member, let central else { return }
        member.onHeard = { [unowned self] heard in self.onHeard?(heard) }
        member.onRoom = { [unowned self] in self.onRoom?() }
        member.onInRoomChanged = { [unowned self] in self.onPresenceMayChange?() }
        member.onJoined = { [unowned self] in
            if let name = member.hostName { self.onJoinedHost?(name) }
            guard self.state == .deciding else { return }
            self.state = .member
            let waiting = self.early
            self.early.removeAll()
            for message in waiting { member.send(message) }
            self.onRoom?()
        }
        member.onGone = { [unowned self] why in
            if self.role == .auto {
                self.host("the host is gone: taking over")
            } else {
                self.onFatal?(why)
            }
        }
        central.onError = { [unowned self] message in self.onFatal?(message) }
        central.onReady = { [unowned self] in self.controllerReady() }
    }

    public var isHosting: Bool { state == .host }

    /// The room's name as this side knows it: the room it hosts or may host; for a member, the
    /// name of the host it joined last, else the room it looks for (nil: any).
    public var roomName: String? {
        guard role == .member else { return room }
        return member?.hostName ?? member?.room
    }

    /// Where this side is in its room now (systemd's STATUS= line, READY=1 once every side of a
    /// node is in its room).
    public var presence: Presence {
        if state == .host { return .hosting(members: device.memberCount, advertising: peripheral.isAdvertising) }
        guard let member else { return .looking(again: false) }
        if member.isInRoom, let address = member.hostAddress { return .member(host: member.hostName ?? room, address: address) }
        return .looking(again: member.hostAddress != nil)
    }

    /// How long a plain client of a private room keeps its link after it was told it cannot join.
    public static let refusedLinkGrace: Duration = .seconds(1)

    /// The first host joined, by its advertised name: a node that learns its room's name from
    /// its host (`enter(room:trust:)`) learns it here, before anything is said there.
    public var onJoinedHost: ((String) -> Void)?

    /// The room's name is `name` (signatures cover it): from now on a member joins only a host
    /// of that whole name, and `trust` checks what is heard here and what is relayed.
    public func enter(room name: String, trust: ChatTrust?) {
        device.trust = trust
        member?.trust = trust
        member?.room = name
        member?.wholeName = true
    }

    /// Whether the source of this node's lines should wait (Docs/CHAT.md: back-pressure).
    public var isBusy: Bool {
        switch state {
        case .deciding: early.count >= ChatMember.busyThreshold
        case .host: device.isBusy
        case .member: member?.isBusy ?? false
        }
    }

    public var hasUndelivered: Bool {
        switch state {
        case .deciding: !early.isEmpty
        case .host: device.hasQueuedLines
        case .member: member?.hasUndelivered ?? false
        }
    }

    /// A message to the room: this node's, or one a bridge brings from another room.
    public func send(_ message: OutgoingChatMessage) {
        switch state {
        case .deciding: early.append(message)
        case .host: device.relay(message.id, text: message.text, hops: message.hops)
        case .member: member?.send(message)
        }
    }

    public func stop() {
        stopped = true
        member?.stopWatching()
    }

    // MARK: Deciding

    private func controllerReady() {
        guard state == .deciding, !stopped, let member else { return }
        member.start()
        guard role == .auto else { return }
        // 3 s, plus up to 2 s at random: two boards started together decide apart.
        scheduler.schedule(after: .milliseconds(Self.lookMilliseconds + Int64.random(in: 0...Self.randomLookMilliseconds))) {
            [weak self] in self?.decide()
        }
    }

    /// Hosts unless a host was found meanwhile; a connection still being made gets a second.
    private func decide() {
        guard state == .deciding, !stopped, let member else { return }
        if member.isConnecting {
            scheduler.schedule(after: .seconds(1)) { [weak self] in self?.decide() }
            return
        }
        member.stopLooking()
        host("no host of '\(room)' found")
    }

    private func host(_ why: String) {
        guard state != .host, !stopped else { return }
        state = .host
        logger.notice("hosting chat room '\(room)' (\(why))")
        member?.watchForHosts { [weak self] other in
            // Two hosts of one room: the one with the higher address gives way.
            guard let self, self.state == .host, other.address.value < self.peripheral.address.value else { return }
            self.logger.notice("another host of '\(self.room)' (\(other.address)) is here: joining it")
            self.state = .member
            self.peripheral.setAdvertisingAllowed(false)
            self.peripheral.disconnectAll()
            self.member?.join(preferring: other.address)
            self.onPresenceMayChange?()
        }
        peripheral.setAdvertisingAllowed(true)
        // What this node was given as a member and no host acknowledged, then what came while
        // deciding: said by the new host itself, in order, with their identities.
        let waiting = (member?.takeUndelivered() ?? []) + early
        early.removeAll()
        for message in waiting { device.relay(message.id, text: message.text, hops: message.hops) }
        if !waiting.isEmpty { onSaidAsHost?(waiting) }
        onRoom?()
        onPresenceMayChange?()
    }
}

/// A chat node: this node's lines, and the rooms it is in, one per controller (`ChatSide`).
/// Every message it hears is told once (`onLine`), whichever side it came from and however
/// often; a node in two rooms is a bridge: it passes each message on to its other rooms with
/// the same identity and one hop fewer, and drops one that has no hops left, so nothing loops
/// and nothing arrives twice (Docs/CHAT.md, "Bridges").
public final class ChatNode {
    /// Identities remembered to tell and pass each message once.
    public static let rememberedLimit = ChatReassembly.rememberedLimit

    public let me: String
    public let sides: [any ChatRoomSide]
    /// A line to show: who said it (nil: an announcement) and the text.
    public var onLine: ((String?, String) -> Void)?
    /// `isBusy` is over on every side.
    public var onRoom: (() -> Void)?

    private var seen = ChatReassembly()
    /// Said once: this node cannot open the private room's lines.
    private var toldCannotRead = false
    public static let cannotReadNotice = "* this room is private and its lines cannot be read here: no passphrase"
    /// Senders whose sealed lines this node, with a passphrase, could not open: named once each.
    private var unreadableSenders: Set<String> = []
    static let unreadableSenderLimit = 64
    /// What a node with a passphrase shows when a line was sealed with another passphrase.
    public static func unreadableNotice(_ sender: String) -> String {
        "* \(sender.visible)'s lines cannot be read here: sealed with another passphrase than this node's"
    }
    /// This node's lines shown already (once, where it hosts).
    private var echoed = ChatReassembly()
    /// Numbers start anywhere: a node that restarts must not reuse identities the room still
    /// remembers (they would be taken for resends).
    private var nextNumber = UInt32.random(in: 1...(UInt32.max / 2))

    /// Signs this node's lines (the one `ChatTrust` its sides check with); its warnings are shown
    /// as lines (`onLine(nil, …)`). Nil: unsigned lines.
    public private(set) var trust: ChatTrust?
    /// The room's name is not known yet (a member learns it from the host it joins): this
    /// node's lines wait here, unsigned, until `adopt(_:)`; `isBusy` holds stdin meanwhile.
    public private(set) var awaitingTrust: Bool
    private var unsigned: [String] = []

    /// `awaitingTrust`: the trust comes later (`adopt(_:)`), once the room's name is known.
    public init(me: String, sides: [any ChatRoomSide], trust: ChatTrust? = nil, awaitingTrust: Bool = false) {
        self.me = me
        self.sides = sides
        self.trust = trust
        self.awaitingTrust = awaitingTrust && trust == nil
        trust?.onWarning = { [unowned self] line in self.onLine?(nil, line) }
        for side in sides {
            side.onHeard = { [unowned self, unowned side] heard in self.heard(heard, from: side) }
            side.onRoom = { [unowned self] in
                if !self.isBusy { self.onRoom?() }
            }
            // This node's lines show where it hosts: those it says only now too.
            side.onSaidAsHost = { [unowned self] messages in
                for message in messages where message.id.sender == self.me { self.echo(message.id, message.text) }
            }
        }
    }

    /// A line as `blemu chat` prints it: `[SENDER] text`, an announcement (`* NAME joined`)
    /// as it is. Both come from peers: shown with `VisibleText`, so a line is one line and
    /// nothing in it steers the terminal or passes for another sender's line.
    public static func shown(sender: String?, text: String) -> String {
        guard let sender else { return text.visible }
        var line = "["
        VisibleText.append(sender, to: &line)
        line += "] "
        VisibleText.append(text, to: &line)
        return line
    }

    /// The node's trust, now that the room's name is known: the lines that waited for it are
    /// signed and said, in order.
    public func adopt(_ trust: ChatTrust) {
        guard awaitingTrust else { return }
        awaitingTrust = false
        self.trust = trust
        trust.onWarning = { [unowned self] line in self.onLine?(nil, line) }
        let waiting = unsigned
        unsigned.removeAll()
        for text in waiting { say(text) }
        if !isBusy { onRoom?() }
    }

    /// Whether this node's lines should wait: a side has as many waiting as it should hold, or
    /// a line waits for the room's name.
    public var isBusy: Bool { !unsigned.isEmpty || sides.contains { $0.isBusy } }

    /// Whether lines are still on their way in any room (`--exit-on-eof` waits for them).
    public var hasUndelivered: Bool { !unsigned.isEmpty || sides.contains { $0.hasUndelivered } }

    /// Whether this node hosts a room on any of its controllers.
    public var isHosting: Bool { sides.contains { $0.isHosting } }

    /// This node's line, to every room it is in; shown here too where this node hosts.
    public func say(_ text: String) {
        guard !text.isEmpty else { return }
        if awaitingTrust {
            unsigned.append(text)
            return
        }
        // With a trust, numbers that only go up across restarts too (receivers keep marks).
        let number: UInt32
        if let trust {
            number = trust.takeNumber()
        } else {
            number = nextNumber
            nextNumber &+= 1
        }
        let plain = ChatMessageID(sender: me, number: number)
        let id = trust?.sign(plain, text: Array(text.utf8)) ?? plain
        seen.remember(id)
        if isHosting { echo(id, text) }
        let message = OutgoingChatMessage(id: id, hops: ChatRoom.initialHops, text: text)
        for side in sides { side.send(message) }
    }

    private func echo(_ id: ChatMessageID, _ text: String) {
        guard !echoed.hasDelivered(id) else { return }
        echoed.remember(id)
        onLine?(me, text)
    }

    private func heard(_ heard: ChatRoom.Heard, from side: any ChatRoomSide) {
        switch heard {
        case .announcement(let text):
            onLine?(nil, text)
        case let .message(id, text, hops):
            guard !seen.hasDelivered(id) else { return }
            seen.remember(id)
            // A signed line whose name could not be bound to its key shows unverified (`~NAME`).
            let sender = trust?.shownSender(id) ?? id.sender
            if id.proof?.sealed != nil {
                // A private room's line: shown when this node can open it, passed on either way.
                if let opened = trust?.open(id) {
                    onLine?(sender, opened)
                } else if trust?.roomKey != nil {
                    // This node has a passphrase and the line was sealed with another one: the
                    // sender is named (once each), this node is not told it cannot read the room.
                    if unreadableSenders.count < Self.unreadableSenderLimit, unreadableSenders.insert(id.sender).inserted {
                        onLine?(nil, Self.unreadableNotice(sender))
                    }
                } else if !toldCannotRead {
                    toldCannotRead = true
                    onLine?(nil, Self.cannotReadNotice)
                }
            } else {
                onLine?(sender, text)
            }
            guard hops > 0 else { return }
            for other in sides where other !== side {
                other.send(OutgoingChatMessage(id: id, hops: hops - 1, text: text))
            }
        }
    }
}
