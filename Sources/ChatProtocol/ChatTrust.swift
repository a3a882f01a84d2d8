import BlemuCore
import BlemuCrypto
import Logging
#if canImport(Glibc)
import Glibc
#endif

/// What a chat node trusts in one room (Docs/CHAT.md, "Signed messages" and "Names bound to
/// keys"): its own key, which signs its lines; the key each name spoke with first (trust on
/// first use), which every later signed line of that name must have; and whether plain
/// (unsigned) lines are taken at all. Shared by the node's host device, member and bridge: each
/// checks a message (`check`) before delivering or relaying it.
///
/// - A signed message is delivered only when its signature over room, sender, number and text
///   verifies and its key is the one its name is bound to; a bad signature is dropped, counted and
///   logged (rate-limited); another key for a bound name is refused with one local warning line.
/// - A bound name's highest number delivered (its mark) is kept: a signed line numbered at or
///   below it is a replay (or a resend already delivered) and is not delivered again, even after
///   the in-memory "delivered once" memory forgot it or the node restarted (the marks are saved
///   with the names, `ChatIdentityStore`).
/// - A signed message whose name cannot be bound (the table is full of names seen more
///   recently or pinned, or its link bound its share of new names this minute) is delivered
///   but shown unverified (`shownSender`: `~NAME`), never as bound.
/// - An unsigned message is unverified: it is delivered under `~NAME` (never under a name a key
///   can hold: signed names cannot start with `~`), unless `signedOnly` refuses it.
/// - A message with an empty sender (an announcement) is the host's alone: no member's is taken.
public final class ChatTrust {
    /// Names remembered per room, at most: past this, a new name pushes out the one seen least
    /// recently (never a pinned one), so a peer cannot grow memory or the file without bound.
    public static let bindingLimit = 1024
    /// New names one link may bind in `bindingWindow` (a host's member link, or a member's link
    /// to its host): a peer making keys and names in a loop cannot push out the room's names.
    public static let newNamesPerLink = 10
    /// New names all links together may bind in `bindingWindow`.
    public static let newNamesPerWindow = 60
    public static let bindingWindow: Duration = .seconds(60)
    /// Links whose budget of new names is tracked, at most (the oldest window gives way).
    static let budgetedLinks = 64
    /// Warning lines for (name, key) pairs, at most one each; past this many pairs, only logs.
    public static let warnedLimit = 256
    /// What marks an unverified name.
    public static let unverifiedMark = "~"
    /// Numbers this node reserves at a time (`takeNumber`): written before the first is used.
    public static let numberBlock: UInt32 = 1024

    /// One bound name: its key, whether an operator pinned it (never pushed out), when it was
    /// last seen (for pushing out the least recently seen), and its mark (the highest number
    /// delivered from it, nil before its first line).
    struct Binding {
        var key: ChatPublicKey
        var pinned: Bool
        var lastSeen: UInt64
        var mark: UInt32?
    }

    public let room: String
    public let identity: ChatSigningKey?
    /// Refuse unsigned lines (plain writes with ATT error 0x13, unsigned frames dropped).
    public let signedOnly: Bool
    private var entries: [String: Binding] = [:]
    /// The names bound, and their keys.
    public var bindings: [String: ChatPublicKey] { entries.mapValues(\.key) }
    /// The names an operator pinned (`pin`, `--pin-name`): never pushed out.
    public var pinnedNames: Set<String> { Set(entries.filter(\.value.pinned).keys) }
    /// The marks: each bound name's highest number delivered, with its key (for the state directory).
    public var marks: [String: (key: ChatPublicKey, number: UInt32)] {
        entries.compactMapValues { entry in entry.mark.map { (entry.key, $0) } }
    }
    /// A private room's key (from `--passphrase-file`): this node's lines are sealed with it
    /// and only sealed lines are taken. Without it a node still checks and relays sealed lines
    /// (a host or bridge between radios) but cannot read them.
    public let roomKey: ChatRoomKey?
    /// How lines are signed and checked: Ed25519 (`.ed25519`) unless a harness gives a stand-in.
    public let signatures: ChatSignatureScheme
    /// Messages refused in a private room because they were not sealed.
    public private(set) var refusedUnsealed = 0
    public private(set) var badSignatures = 0
    public private(set) var impersonations = 0
    public private(set) var refusedUnsigned = 0
    public private(set) var forgedAnnouncements = 0
    /// Signed lines numbered at or below their name's mark: not delivered again.
    public private(set) var replays = 0
    /// Signed lines shown unverified: their name could not be bound.
    public private(set) var unbound = 0
    /// A name was bound to a key (or forgotten: nil), for the state directory.
    public var onBindingsChanged: (([String: ChatPublicKey]) -> Void)?
    /// A mark moved after the marks were last saved (`marksSaved`): once until then.
    public var onMarksChanged: (() -> Void)?
    public private(set) var marksChanged = false
    /// A line to show on this node (`* someone tried to speak as NAME: key 3f2a… is not NAME's`).
    public var onWarning: ((String) -> Void)?
    /// Monotonic nanoseconds, for the budget of new names (a node's run loop's clock).
    public var clock: () -> UInt64 = ChatTrust.monotonicNanoseconds
    /// This node's next message number (`takeNumber`), and the first one not reserved yet.
    public private(set) var nextNumber: UInt32
    private var reservedUpTo: UInt32
    /// Numbers up to (not including) this one may be used: save it before any is.
    public var onNumbersReserved: ((UInt32) -> Void)?
    private let logger: Logger
    private var warned: Set<[UInt8]> = []
    private var seenTick: UInt64 = 0
    private var budgets: [UInt32: (start: UInt64, count: Int)] = [:]
    private var roomBudget: (start: UInt64, count: Int) = (0, 0)

    /// `me`: this node's name, bound to its own key from the start (nobody else speaks as it).
    /// `pinned`: the names of `bindings` an operator pinned; `marks`: the marks saved, taken
    /// where the name is still bound to that key. `firstNumber`: where this node's numbers go on
    /// (`ChatIdentityStore`'s reservation); nil: anywhere (random).
    public init(room: String, identity: ChatSigningKey?, me: String?, signedOnly: Bool = false,
                bindings: [String: ChatPublicKey] = [:], pinned: Set<String> = [],
                marks: [String: (key: ChatPublicKey, number: UInt32)] = [:], firstNumber: UInt32? = nil,
                roomKey: ChatRoomKey? = nil, signatures: ChatSignatureScheme = .ed25519, logger: Logger) {
        self.room = room
        self.signatures = signatures
        self.roomKey = roomKey
        self.identity = identity
        self.signedOnly = signedOnly
        self.logger = logger
        let start = firstNumber ?? UInt32.random(in: 1...(UInt32.max / 2))
        nextNumber = start
        reservedUpTo = firstNumber == nil ? start &+ UInt32.max / 4 : start
        // Pinned names first, so a file over the limit keeps them.
        for (name, key) in bindings.sorted(by: { (pinned.contains($0.key) ? 0 : 1, $0.key) < (pinned.contains($1.key) ? 0 : 1, $1.key) })
        where entries.count < Self.bindingLimit {
            let mark = marks[name].flatMap { $0.key == key ? $0.number : nil }
            entries[name] = Binding(key: key, pinned: pinned.contains(name), lastSeen: 0, mark: mark)
        }
        if let me, !me.isEmpty, let identity, entries[me]?.key == identity.publicKey {
            entries[me]?.pinned = true
        } else if let me, !me.isEmpty, let identity, entries[me] == nil {
            if entries.count >= Self.bindingLimit, let oldest = leastRecentlySeen() { entries[oldest] = nil }
            if entries.count < Self.bindingLimit {
                entries[me] = Binding(key: identity.publicKey, pinned: true, lastSeen: 0, mark: nil)
            }
        }
    }

    /// This node's next message number: they only go up, across restarts too (a receiver's mark
    /// refuses a number at or below one it delivered). Each block of `numberBlock` is reserved
    /// (`onNumbersReserved`, written to the state directory) before its first number is used,
    /// so a crash skips what was left of the block rather than reuse a number.
    public func takeNumber() -> UInt32 {
        if nextNumber >= reservedUpTo {
            reservedUpTo = nextNumber &+ Self.numberBlock
            onNumbersReserved?(reservedUpTo)
        }
        defer { nextNumber &+= 1 }
        return nextNumber
    }

    /// The marks were saved: the next moved mark says so again (`onMarksChanged`).
    public func marksSaved() { marksChanged = false }

    /// The name a message is shown under: a signed one whose name is not bound to its key (the
    /// table had no room for it) is unverified, `~NAME`, as an unsigned one is.
    public func shownSender(_ id: ChatMessageID) -> String {
        guard let proof = id.proof, !id.sender.isEmpty, entries[id.sender]?.key != proof.key else { return id.sender }
        return Self.unverifiedMark + id.sender
    }

    static func monotonicNanoseconds() -> UInt64 {
        #if canImport(Glibc)
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
        #else
        return 0
        #endif
    }

    /// `id` with this node's proof of `text`, when it has a key (sealed in a private room,
    /// unless `sealing` is false: announcements); as it is otherwise.
    public func sign(_ id: ChatMessageID, text: some Collection<UInt8>, sealing: Bool = true) -> ChatMessageID {
        guard let identity else { return id }
        // This node's own line: its mark too, so a replay of it is not taken for a line of the room.
        if !id.sender.isEmpty, var entry = entries[id.sender], entry.key == identity.publicKey, entry.mark.map({ $0 < id.number }) ?? true {
            entry.mark = id.number
            entries[id.sender] = entry
            markMoved()
        }
        if sealing, let roomKey {
            return id.with(proof: ChatProof.seal(room: room, sender: id.sender, number: id.number, text: text, with: identity, roomKey: roomKey, scheme: signatures))
        }
        return id.with(proof: ChatProof.sign(room: room, sender: id.sender, number: id.number, text: text, with: identity, scheme: signatures))
    }

    /// A sealed message's text, for this node to show: nil when it is not sealed or this node
    /// cannot open it (no passphrase, or another one).
    public func open(_ id: ChatMessageID) -> String? {
        guard let roomKey, let proof = id.proof,
              let text = proof.open(room: room, sender: id.sender, number: id.number, with: roomKey) else { return nil }
        return String(validating: text, as: UTF8.self)
    }

    /// The identity a member's message is delivered and relayed under, or nil: refused.
    /// `link`: which link it came on (a host's member, or a member's link to its host), whose
    /// budget of new names it spends.
    public func check(_ id: ChatMessageID, text: some Collection<UInt8>, from link: UInt32 = 0) -> ChatMessageID? {
        guard !id.sender.isEmpty else {
            forgedAnnouncements += 1
            logRateLimited(forgedAnnouncements, "a member's message with an empty sender (an announcement is the host's) was dropped")
            return nil
        }
        guard let proof = id.proof else {
            guard !signedOnly, roomKey == nil else {
                refusedUnsigned += 1
                logRateLimited(refusedUnsigned, "an unsigned message from '\(id.sender.visible)' was refused: the room is signed-only")
                return nil
            }
            return id.sender.hasPrefix(Self.unverifiedMark) ? id : ChatMessageID(sender: Self.unverifiedMark + id.sender, number: id.number)
        }
        guard !id.sender.hasPrefix(Self.unverifiedMark), proof.verifies(room: room, sender: id.sender, number: id.number, text: text, scheme: signatures) else {
            badSignatures += 1
            logRateLimited(badSignatures, "a message signed as '\(id.sender.visible)' with a bad signature was dropped")
            return nil
        }
        // A private room's members seal every line: one in the clear is no member's.
        guard roomKey == nil || proof.sealed != nil else {
            refusedUnsealed += 1
            logRateLimited(refusedUnsealed, "a message from '\(id.sender.visible)' that was not sealed was refused: the room is private")
            return nil
        }
        seenTick += 1
        switch entries[id.sender] {
        case var entry? where entry.key == proof.key:
            // At or below its mark: delivered before (a replay, or a resend on another path).
            if let mark = entry.mark, id.number <= mark {
                replays += 1
                // A resend after a lost acknowledgement or a catching-up member's old lines too:
                // not worth a warning.
                if replays & (replays - 1) == 0 {
                    logger.info("a line of '\(id.sender.visible)' numbered \(id.number), at or below the \(mark) delivered already, was not delivered again (\(replays) so far)")
                }
                return nil
            }
            entry.mark = id.number
            entry.lastSeen = seenTick
            entries[id.sender] = entry
            markMoved()
            return id
        case let entry?:
            impersonations += 1
            warn(id.sender, claimed: proof.key, bound: entry.key)
            return nil
        case nil:
            guard spendNewName(link: link) else {
                unbound += 1
                logRateLimited(unbound, "'\(id.sender.visible)' spoke with key \(proof.key.fingerprint): not bound (too many new names from its link this minute), shown unverified")
                return id
            }
            if entries.count >= Self.bindingLimit {
                guard let oldest = leastRecentlySeen() else {
                    unbound += 1
                    logRateLimited(unbound, "'\(id.sender.visible)' spoke with key \(proof.key.fingerprint): not bound, \(Self.bindingLimit) names are pinned, shown unverified")
                    return id
                }
                logger.info("'\(oldest.visible)' in chat room '\(room.visible)' was seen least recently: its key is forgotten for '\(id.sender.visible)'")
                entries[oldest] = nil
            }
            entries[id.sender] = Binding(key: proof.key, pinned: false, lastSeen: seenTick, mark: id.number)
            logger.info("'\(id.sender.visible)' in chat room '\(room.visible)' speaks with key \(proof.key.fingerprint)")
            onBindingsChanged?(bindings)
            markMoved()
            return id
        }
    }

    /// The name not pinned that was seen least recently (names not seen since the start first).
    private func leastRecentlySeen() -> String? {
        entries.filter { !$0.value.pinned }.min { ($0.value.lastSeen, $0.key) < ($1.value.lastSeen, $1.key) }?.key
    }

    /// Whether `link` (and the room) may bind one more new name in this window; spends it.
    private func spendNewName(link: UInt32) -> Bool {
        let now = clock()
        let window = UInt64(Self.bindingWindow.components.seconds) * 1_000_000_000
        if now &- roomBudget.start >= window { roomBudget = (now, 0) }
        var budget = budgets[link] ?? (now, 0)
        if now &- budget.start >= window { budget = (now, 0) }
        guard budget.count < Self.newNamesPerLink, roomBudget.count < Self.newNamesPerWindow else { return false }
        budget.count += 1
        roomBudget.count += 1
        if budgets[link] == nil, budgets.count >= Self.budgetedLinks,
           let oldest = budgets.min(by: { $0.value.start < $1.value.start })?.key {
            budgets[oldest] = nil
        }
        budgets[link] = budget
        return true
    }

    private func markMoved() {
        guard !marksChanged else { return }
        marksChanged = true
        onMarksChanged?()
    }

    /// Whether an announcement (empty sender) from the host of this link may be shown: unsigned
    /// (a host without a key), or signed with a signature that verifies.
    public func checkAnnouncement(_ id: ChatMessageID, text: some Collection<UInt8>) -> Bool {
        guard let proof = id.proof else { return !signedOnly }
        guard proof.verifies(room: room, sender: "", number: id.number, text: text, scheme: signatures) else {
            badSignatures += 1
            logRateLimited(badSignatures, "an announcement with a bad signature was dropped")
            return false
        }
        return true
    }

    /// `name` speaks with `key` from now on (an operator's pin), or with whichever key it uses
    /// first again (`key` nil: forgotten).
    public func pin(_ name: String, to key: ChatPublicKey?) {
        if let key {
            if entries[name] == nil, entries.count >= Self.bindingLimit {
                guard let oldest = leastRecentlySeen() else { return }
                entries[oldest] = nil
            }
            // Another key: the old key's mark says nothing of it.
            let mark = entries[name].flatMap { $0.key == key ? $0.mark : nil }
            entries[name] = Binding(key: key, pinned: true, lastSeen: seenTick, mark: mark)
        } else {
            entries[name] = nil
        }
        onBindingsChanged?(bindings)
    }

    /// Whether plain writes are refused here, said in the log (rate-limited).
    public func refusePlainWrite(from name: String) -> Bool {
        guard signedOnly || roomKey != nil else { return false }
        refusedUnsigned += 1
        logRateLimited(refusedUnsigned, "a plain write from \(name.visible) was refused (ATT error 0x13): the room is signed-only")
        return true
    }

    private func warn(_ name: String, claimed: ChatPublicKey, bound: ChatPublicKey) {
        let line = "* someone tried to speak as \(name.visible): key \(claimed.shortFingerprint) is not \(name.visible)'s"
        logger.warning("\(line) (\(name.visible) speaks with \(bound.fingerprint))")
        let pair = Array(name.utf8) + claimed.bytes
        guard !warned.contains(pair), warned.count < Self.warnedLimit else { return }
        warned.insert(pair)
        onWarning?(line)
    }

    /// The 1st, 2nd, 4th, 8th… of a kind: a flood of bad frames cannot flood the log.
    private func logRateLimited(_ count: Int, _ message: String) {
        guard count & (count - 1) == 0 else { return }
        logger.warning("\(message) (\(count) so far)")
    }
}
