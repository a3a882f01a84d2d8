/// A map from a 16-bit handle (a connection handle, an attribute handle) to a value, for the
/// lookups every request makes. `Dictionary` hashes each key with SipHash and changes a value
/// through a `modify` coroutine whose frame glibc's malloc provides; this table hashes with one
/// multiplication (Fibonacci hashing), probes linearly, and changes a value in place with
/// `modify(_:_:)`, so a lookup costs a few instructions and allocates nothing. It keeps the
/// part of `Dictionary`'s interface the stack uses: subscript, `removeValue(forKey:)`, `keys`,
/// `values`, `count`, iteration (in no particular order).
public struct HandleTable<Value> {
    /// One tag per slot, apart from the values: 0 for an empty slot, else `occupied | key`.
    /// A probe reads only these, a non-generic array of integers, so it never copies a value
    /// through the generic value witness (which a debug build does for every element read of
    /// an array of generic structs, and which showed as the hot paths' largest generic cost).
    @usableFromInline var tags: [UInt32]
    /// The value of each slot, at the same index as its tag.
    @usableFromInline var storage: [Value?]
    /// 32 minus log2 of the slot count: the hash is the top bits of the product.
    @usableFromInline var shift: UInt32
    public private(set) var count = 0

    @usableFromInline static var occupied: UInt32 { 0x1_0000 }

    public init() {
        tags = Array(repeating: 0, count: 8)
        storage = Array(repeating: nil, count: 8)
        shift = 29
    }

    public var isEmpty: Bool { count == 0 }

    @inlinable func home(_ key: UInt16) -> Int {
        Int(truncatingIfNeeded: (UInt32(key) &* 2_654_435_769) >> shift)
    }

    /// The slot holding `key`, if any.
    @inlinable func index(of key: UInt16) -> Int? {
        let mask = tags.count - 1
        let wanted = Self.occupied | UInt32(key)
        var index = home(key)
        while true {
            let tag = tags[index]
            if tag == wanted { return index }
            if tag == 0 { return nil }
            index = (index + 1) & mask
        }
    }

    @inlinable public subscript(key: UInt16) -> Value? {
        get {
            guard let index = index(of: key) else { return nil }
            return storage[index]
        }
        set {
            if let newValue { insert(newValue, forKey: key) } else { removeValue(forKey: key) }
        }
    }

    /// Changes the value for `key` where it lies; nil (and `body` not called) when there is none.
    @inlinable @discardableResult
    public mutating func modify<Result>(_ key: UInt16, _ body: (inout Value) -> Result) -> Result? {
        guard let index = index(of: key) else { return nil }
        return body(&storage[index]!)
    }

    public mutating func insert(_ value: Value, forKey key: UInt16) {
        if let index = index(of: key) {
            storage[index] = value
            return
        }
        if (count + 1) * 2 > tags.count { grow() }
        let mask = tags.count - 1
        var index = home(key)
        while tags[index] != 0 { index = (index + 1) & mask }
        tags[index] = Self.occupied | UInt32(key)
        storage[index] = value
        count += 1
    }

    @discardableResult
    public mutating func removeValue(forKey key: UInt16) -> Value? {
        guard var hole = index(of: key) else { return nil }
        let removed = storage[hole]
        tags[hole] = 0
        storage[hole] = nil
        count -= 1
        // Backward-shift deletion: the entries after the hole that would not be found past it
        // move into it, so a probe never stops early and no tombstones pile up.
        let mask = tags.count - 1
        var next = (hole + 1) & mask
        while tags[next] != 0 {
            let wanted = home(UInt16(truncatingIfNeeded: tags[next]))
            // Whether `wanted` lies cyclically in (hole, next]: then the entry stays.
            let stays = hole <= next ? (hole < wanted && wanted <= next) : (hole < wanted || wanted <= next)
            if !stays {
                tags[hole] = tags[next]
                storage[hole] = storage[next]
                tags[next] = 0
                storage[next] = nil
                hole = next
            }
            next = (next + 1) & mask
        }
        return removed
    }

    public mutating func removeAll() {
        for index in tags.indices {
            tags[index] = 0
            storage[index] = nil
        }
        count = 0
    }

    private mutating func grow() {
        let oldTags = tags
        let oldStorage = storage
        tags = Array(repeating: 0, count: oldTags.count * 2)
        storage = Array(repeating: nil, count: oldTags.count * 2)
        shift -= 1
        count = 0
        for index in oldTags.indices where oldTags[index] != 0 {
            if let value = oldStorage[index] { insert(value, forKey: UInt16(truncatingIfNeeded: oldTags[index])) }
        }
    }

    /// The keys, in no particular order.
    public var keys: [UInt16] { compactMap { $0.key } }

    /// The values, in no particular order, without a copy (a view of their own, not a lazy
    /// `map`, whose closure a debug build allocates a context for).
    public var values: Values { Values(tags: tags, storage: storage) }

    public struct Values: Sequence {
        @usableFromInline let tags: [UInt32]
        @usableFromInline let storage: [Value?]
        @inlinable init(tags: [UInt32], storage: [Value?]) {
            self.tags = tags
            self.storage = storage
        }

        public struct Iterator: IteratorProtocol {
            @usableFromInline let tags: [UInt32]
            @usableFromInline let storage: [Value?]
            @usableFromInline var index = 0
            @inlinable init(tags: [UInt32], storage: [Value?]) {
                self.tags = tags
                self.storage = storage
            }
            @inlinable public mutating func next() -> Value? {
                while index < tags.count {
                    defer { index += 1 }
                    if tags[index] != 0 { return storage[index] }
                }
                return nil
            }
        }

        @inlinable public func makeIterator() -> Iterator { Iterator(tags: tags, storage: storage) }
    }
}

extension HandleTable: Sequence {
    public struct Iterator: IteratorProtocol {
        @usableFromInline let tags: [UInt32]
        @usableFromInline let storage: [Value?]
        @usableFromInline var index = 0
        @inlinable init(tags: [UInt32], storage: [Value?]) {
            self.tags = tags
            self.storage = storage
        }
        @inlinable public mutating func next() -> (key: UInt16, value: Value)? {
            while index < tags.count {
                defer { index += 1 }
                let tag = tags[index]
                if tag != 0, let value = storage[index] { return (UInt16(truncatingIfNeeded: tag), value) }
            }
            return nil
        }
    }

    @inlinable public func makeIterator() -> Iterator { Iterator(tags: tags, storage: storage) }
    @inlinable public var underestimatedCount: Int { count }
}

extension HandleTable: ExpressibleByDictionaryLiteral {
    public init(dictionaryLiteral elements: (UInt16, Value)...) {
        self.init()
        for (key, value) in elements { insert(value, forKey: key) }
    }
}
