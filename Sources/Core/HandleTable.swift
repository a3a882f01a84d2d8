/// A map from a 16-bit handle (a connection handle, an attribute handle) to a value, for the
/// lookups every request makes. `Dictionary` hashes each key with SipHash and changes a value
/// through a `modify` coroutine whose frame glibc's malloc provides; this table hashes with one
/// multiplication (Fibonacci hashing), probes linearly, and changes a value in place with
/// `modify(_:_:)`, so a lookup costs a few instructions and allocates nothing. It keeps the
/// part of `Dictionary`'s interface the stack uses: subscript, `removeValue(forKey:)`, `keys`,
/// `values`, `count`, iteration (in no particular order).
public struct HandleTable<Value> {
    @usableFromInline struct Slot {
        @usableFromInline var key: UInt16
        /// Whether the slot holds an entry (tested without touching the value).
        @usableFromInline var used: Bool
        @usableFromInline var value: Value?
        @inlinable init(key: UInt16, value: Value?) {
            self.key = key
            self.used = value != nil
            self.value = value
        }
    }

    /// Open addressing: a power-of-two number of slots, at most half of them used.
    @usableFromInline var slots: [Slot]
    /// 32 minus log2 of the slot count: the hash is the top bits of the product.
    @usableFromInline var shift: UInt32
    public private(set) var count = 0

    public init() {
        slots = Array(repeating: Slot(key: 0, value: nil), count: 8)
        shift = 29
    }

    public var isEmpty: Bool { count == 0 }

    @inlinable func home(_ key: UInt16) -> Int {
        Int(truncatingIfNeeded: (UInt32(key) &* 2_654_435_769) >> shift)
    }

    /// The slot holding `key`, if any.
    @inlinable func index(of key: UInt16) -> Int? {
        let mask = slots.count - 1
        var index = home(key)
        while slots[index].used {
            if slots[index].key == key { return index }
            index = (index + 1) & mask
        }
        return nil
    }

    @inlinable public subscript(key: UInt16) -> Value? {
        get { index(of: key).flatMap { slots[$0].value } }
        set {
            if let newValue { insert(newValue, forKey: key) } else { removeValue(forKey: key) }
        }
    }

    /// Changes the value for `key` where it lies; nil (and `body` not called) when there is none.
    @inlinable @discardableResult
    public mutating func modify<Result>(_ key: UInt16, _ body: (inout Value) -> Result) -> Result? {
        guard let index = index(of: key) else { return nil }
        return body(&slots[index].value!)
    }

    public mutating func insert(_ value: Value, forKey key: UInt16) {
        if let index = index(of: key) {
            slots[index].value = value
            return
        }
        if (count + 1) * 2 > slots.count { grow() }
        let mask = slots.count - 1
        var index = home(key)
        while slots[index].used { index = (index + 1) & mask }
        slots[index] = Slot(key: key, value: value)
        count += 1
    }

    @discardableResult
    public mutating func removeValue(forKey key: UInt16) -> Value? {
        guard var hole = index(of: key) else { return nil }
        let removed = slots[hole].value
        slots[hole] = Slot(key: 0, value: nil)
        count -= 1
        // Backward-shift deletion: the entries after the hole that would not be found past it
        // move into it, so a probe never stops early and no tombstones pile up.
        let mask = slots.count - 1
        var next = (hole + 1) & mask
        while slots[next].used {
            let wanted = home(slots[next].key)
            // Whether `wanted` lies cyclically in (hole, next]: then the entry stays.
            let stays = hole <= next ? (hole < wanted && wanted <= next) : (hole < wanted || wanted <= next)
            if !stays {
                slots[hole] = slots[next]
                slots[next] = Slot(key: 0, value: nil)
                hole = next
            }
            next = (next + 1) & mask
        }
        return removed
    }

    public mutating func removeAll() {
        for index in slots.indices { slots[index] = Slot(key: 0, value: nil) }
        count = 0
    }

    private mutating func grow() {
        let old = slots
        slots = Array(repeating: Slot(key: 0, value: nil), count: old.count * 2)
        shift -= 1
        count = 0
        for slot in old { if let value = slot.value { insert(value, forKey: slot.key) } }
    }

    /// The keys, in no particular order.
    public var keys: [UInt16] { compactMap { $0.key } }

    /// The values, in no particular order, without a copy (a view of their own, not a lazy
    /// `map`, whose closure a debug build allocates a context for).
    public var values: Values { Values(slots: slots) }

    public struct Values: Sequence {
        @usableFromInline let slots: [Slot]
        @inlinable init(slots: [Slot]) { self.slots = slots }

        public struct Iterator: IteratorProtocol {
            @usableFromInline let slots: [Slot]
            @usableFromInline var index = 0
            @inlinable init(slots: [Slot]) { self.slots = slots }
            @inlinable public mutating func next() -> Value? {
                while index < slots.count {
                    defer { index += 1 }
                    if slots[index].used { return slots[index].value }
                }
                return nil
            }
        }

        @inlinable public func makeIterator() -> Iterator { Iterator(slots: slots) }
    }
}

extension HandleTable: Sequence {
    public struct Iterator: IteratorProtocol {
        @usableFromInline let slots: [Slot]
        @usableFromInline var index = 0
        @inlinable init(slots: [Slot]) { self.slots = slots }
        @inlinable public mutating func next() -> (key: UInt16, value: Value)? {
            while index < slots.count {
                defer { index += 1 }
                if let value = slots[index].value { return (slots[index].key, value) }
            }
            return nil
        }
    }

    @inlinable public func makeIterator() -> Iterator { Iterator(slots: slots) }
    @inlinable public var underestimatedCount: Int { count }
}

extension HandleTable: ExpressibleByDictionaryLiteral {
    public init(dictionaryLiteral elements: (UInt16, Value)...) {
        self.init()
        for (key, value) in elements { insert(value, forKey: key) }
    }
}
