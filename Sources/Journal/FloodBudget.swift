/// The journal's flood budget: per kind of entry (BLEMU_EVENT, or the code line for entries
/// without one) and peer, a burst, then a steady rate (a token bucket, kept as its "theoretical
/// arrival time", GCRA). What is left out is counted per key; the next entry of that key that
/// goes out says how many, and a key that has gone quiet gets an entry of its own with the
/// count (`quietEntries`). A central hammering errors costs the journal `burst` entries, then
/// `perSecond` a second.
///
/// The path that drops allocates nothing: a fixed table, keys compared by hash and by string
/// equality, and what a summary needs kept as references to values the caller already made.
struct FloodBudget {
    struct Key {
        /// The BLEMU_EVENT value, or the CODE_FILE of an entry without one.
        var kind: String
        /// 0 for events; the CODE_LINE of an entry without an event.
        var line: UInt
        var peer: String?
    }

    struct Slot {
        var hash: Int
        var key: Key
        var theoreticalArrival: UInt64
        var lastUsed: UInt64
        var leftOut: Int = 0
        var lastLeftOutAt: UInt64 = 0
        /// The last entry left out, which a summary repeats.
        var last: PendingEntry?
    }

    let burst: Int
    let perSecond: Int
    let capacity: Int
    /// A key whose last entry was left out this long ago has gone quiet: its count goes out on
    /// its own.
    let quietAfter: UInt64
    private var emission: UInt64 { 1_000_000_000 / UInt64(perSecond) }
    private(set) var slots: [Slot] = []
    /// Keys with entries left out and not yet reported.
    private(set) var pending = 0

    init(burst: Int = 20, perSecond: Int = 2, capacity: Int = 64, quietAfter: UInt64 = 1_000_000_000) {
        self.burst = max(1, burst)
        self.perSecond = max(1, perSecond)
        self.capacity = max(1, capacity)
        self.quietAfter = quietAfter
        slots.reserveCapacity(self.capacity)
    }

    enum Decision: Equatable {
        /// Write it; `leftOutBefore` entries of its key were left out since the last one written.
        case write(leftOutBefore: Int)
        case leave
    }

    static func hash(kind: String, line: UInt, peer: String?) -> Int {
        var hasher = Hasher()
        hasher.combine(kind)
        hasher.combine(line)
        hasher.combine(peer)
        return hasher.finalize()
    }

    /// Takes one entry at `now` (nanoseconds, monotonic). `entry` is kept, without copying,
    /// for the summary when the entry is left out. `evicted` receives a slot pushed out of a full
    /// table with a count not yet reported.
    mutating func take(kind: String, line: UInt, peer: String?, now: UInt64, entry: @autoclosure () -> PendingEntry,
                       evicted: (Slot) -> Void) -> Decision {
        let hash = Self.hash(kind: kind, line: line, peer: peer)
        let index: Int
        if let found = slots.firstIndex(where: { $0.hash == hash && $0.key.line == line && $0.key.kind == kind && $0.key.peer == peer }) {
            index = found
        } else {
            let slot = Slot(hash: hash, key: Key(kind: kind, line: line, peer: peer), theoreticalArrival: now, lastUsed: now)
            if slots.count < capacity {
                slots.append(slot)
                index = slots.count - 1
            } else {
                // The least recently used key gives its place; its count, if any, goes out first.
                var oldest = 0
                for candidate in slots.indices where slots[candidate].lastUsed < slots[oldest].lastUsed { oldest = candidate }
                if slots[oldest].leftOut > 0 {
                    pending -= 1
                    evicted(slots[oldest])
                }
                slots[oldest] = slot
                index = oldest
            }
        }
        slots[index].lastUsed = now
        // GCRA: an entry conforms when the bucket's arrival time is at most burst - 1 emission
        // intervals ahead of now.
        let arrival = max(slots[index].theoreticalArrival, now)
        if arrival - now > UInt64(burst - 1) * emission {
            if slots[index].leftOut == 0 { pending += 1 }
            slots[index].leftOut += 1
            slots[index].lastLeftOutAt = now
            slots[index].last = entry()
            return .leave
        }
        slots[index].theoreticalArrival = arrival + emission
        let leftOut = slots[index].leftOut
        if leftOut > 0 {
            pending -= 1
            slots[index].leftOut = 0
            slots[index].last = nil
        }
        return .write(leftOutBefore: leftOut)
    }

    /// The keys that have gone quiet with entries left out (all of them when `all`), each
    /// reported once: their counts are reset.
    mutating func quietEntries(now: UInt64, all: Bool = false, _ report: (Slot) -> Void) {
        guard pending > 0 else { return }
        for index in slots.indices where slots[index].leftOut > 0 {
            guard all || now &- slots[index].lastLeftOutAt >= quietAfter else { continue }
            report(slots[index])
            slots[index].leftOut = 0
            slots[index].last = nil
            pending -= 1
        }
    }
}
