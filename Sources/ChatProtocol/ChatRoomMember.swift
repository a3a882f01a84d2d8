import DequeModule

/// One member of a `ChatRoom` and what waits for it: its own bounded queue of lines (each cut
/// into the notifications or SDUs it takes), the "you missed" note, where it is in a RESUME's
/// catching up, and the pieces of the message it is writing.
struct ChatRoomMember {
    let key: ChatRoom.MemberKey
    /// A blemu node on the chat channel: its frames are SDUs of it, one frame each.
    let onChannel: Bool
    /// `central-` and the end of its address (`central-AA01`) until a framed message names it.
    var name: String
    /// The name its join was announced with, which its leave says too: one name for one
    /// member in the room's announcements (its messages carry the name they were sent with).
    let announcedName: String
    /// A blemu node, on the frames characteristic or a channel; else a plain client on Message.
    let framed: Bool
    /// A plain client wrote a line already: `/name NAME` counts only as its first.
    var hasWritten = false
    /// Lines waiting, each as the notifications it takes (cut to the member's ATT_MTU),
    /// with the lane they go on.
    private(set) var queue: Deque<(lane: ChatRoom.Lane, parts: Deque<[UInt8]>)> = []
    /// What `queue` holds, in bytes (each part with `partOverhead`).
    private(set) var queuedBytes = 0
    var missed = 0
    /// The "you missed" note at the front of `queue`, not begun yet: how many lines it
    /// counts. Should it give way in turn, its count goes back to `missed` (it is no line).
    var noteAtFront: Int?
    /// Its join was announced, so its leave is (`announcedJoinsPerLink`).
    var announced = true
    /// Told that its sealed lines cannot be read here (a private room, another passphrase).
    var toldUnreadable = false
    /// Part of `queue.first` has gone out: the rest of it goes next, whole, before any
    /// "you missed" note, and it is never the line an overflow drops (either would cut
    /// into a line the member has half received: a plain client shows the note inside
    /// the line, a framed one's MOREs would follow the wrong DATA).
    var lineStarted = false
    var reassembly = ChatReassembly()
    /// When a notification last left for it (monotonic ns): a member that takes nothing
    /// for `stallLimit` no longer holds back the host's own lines.
    var lastProgress: UInt64
    /// Catching up after a RESUME: the sequence of the next history entry it gets. Live
    /// messages wait in the history meanwhile, so everything comes in order.
    var replayNext: UInt64?
    /// A live message (not an announcement) was queued for it: a RESUME from now on comes
    /// too late (it would replay older lines after newer ones).
    var heardLive = false

    init(key: ChatRoom.MemberKey, onChannel: Bool, name: String, framed: Bool, now: UInt64) {
        self.key = key
        self.onChannel = onChannel
        self.name = name
        self.announcedName = name
        self.framed = framed
        self.lastProgress = now
    }

    static func size(of parts: some Sequence<[UInt8]>) -> Int {
        parts.reduce(0) { $0 + $1.count + ChatRoom.partOverhead }
    }
    mutating func append(_ lane: ChatRoom.Lane, _ parts: [[UInt8]]) {
        queue.append((lane, Deque(parts)))
        queuedBytes += Self.size(of: parts)
    }
    mutating func prepend(_ lane: ChatRoom.Lane, _ parts: [[UInt8]]) {
        queue.prepend((lane, Deque(parts)))
        queuedBytes += Self.size(of: parts)
    }
    mutating func removeLine(at index: Int) {
        queuedBytes -= Self.size(of: queue.remove(at: index).parts)
    }
    /// The first line's first part went out.
    mutating func removeFirstPart() {
        guard let part = queue[0].parts.popFirst() else { return }
        queuedBytes -= part.count + ChatRoom.partOverhead
    }
    /// Over the line or byte limit with `adding` bytes more.
    func isFull(adding bytes: Int) -> Bool {
        queue.count >= ChatRoom.memberQueueLimit || (!queue.isEmpty && queuedBytes + bytes > ChatRoom.memberQueueByteLimit)
    }
    /// Has as much waiting as it should (`busyThreshold`, `busyByteThreshold`).
    var isHalfFull: Bool { queue.count >= ChatRoom.busyThreshold || queuedBytes >= ChatRoom.busyByteThreshold }
    /// Took something within `stallLimit` of `now`.
    func isTaking(at now: UInt64) -> Bool { now &- lastProgress < ChatRoom.stallLimit.nanoseconds }
}
