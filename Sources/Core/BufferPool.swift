/// Byte buffers kept for reuse: bytes that must wait (a PDU for controller credits, an
/// indication for its confirmation) are copied into a buffer taken from here, and the buffer
/// comes back once they are gone, so a steady flow allocates nothing. At most `limit` spare
/// buffers are kept (a buffer given back past that is freed): the memory held stays bounded.
public struct BufferPool {
    private var spare: [[UInt8]] = []
    /// The most spare buffers kept.
    public let limit: Int
    /// The room a new buffer gets, so it can later hold any value of the expected size.
    public let bufferCapacity: Int

    public init(limit: Int, bufferCapacity: Int) {
        self.limit = limit
        self.bufferCapacity = bufferCapacity
    }

    /// An empty buffer with room for `bufferCapacity` bytes: a spare one when there is one.
    public mutating func take() -> [UInt8] {
        guard var buffer = spare.popLast() else {
            var fresh: [UInt8] = []
            fresh.reserveCapacity(bufferCapacity)
            return fresh
        }
        // Emptied here, not when given back: by now no copy of it is left to force a new buffer.
        buffer.removeAll(keepingCapacity: true)
        return buffer
    }

    /// A buffer holding `bytes`.
    public mutating func take(_ bytes: ArraySlice<UInt8>) -> [UInt8] {
        var buffer = take()
        buffer.append(contentsOf: bytes)
        return buffer
    }

    /// Gives a buffer back for reuse; freed when `limit` buffers are spare already.
    public mutating func give(_ buffer: [UInt8]) {
        guard spare.count < limit else { return }
        if spare.capacity < limit { spare.reserveCapacity(limit) }
        spare.append(buffer)
    }
}
