import BlemuATT
import BlemuCore

/// A bearer's prepare queue (Vol 3, Part F, 3.4.6.1) and Execute Write's working space, in
/// buffers whose room is taken at the bearer's first Prepare Write and reused by every long
/// write after it: at most `ATTServer.maxPreparedWrites` parts.
struct PrepareQueue {
    /// A value in one of the buffers: `count` bytes from `start`, to be written at `offset` of
    /// `handle`'s value. A prepared part, or an attribute's value assembled from its parts.
    struct PlacedValue {
        let handle: UInt16
        let offset: Int
        var start: Int
        var count: Int
    }

    private var parts: [PlacedValue] = []
    private var partBytes: [UInt8] = []
    /// Each attribute's value assembled from its parts (`assemble`), its bytes in `assembledBytes`.
    private(set) var assembled: [PlacedValue] = []
    private(set) var assembledBytes: [UInt8] = []

    var isFull: Bool { parts.count >= ATTServer.maxPreparedWrites }
    /// Whether the room of a full queue is taken already.
    var hasRoom: Bool { parts.capacity >= ATTServer.maxPreparedWrites }

    /// Room for a full queue's parts, and for a 512-byte value's bytes (more is taken when a
    /// client sends more, and kept).
    mutating func reserve() {
        parts.reserveCapacity(ATTServer.maxPreparedWrites)
        partBytes.reserveCapacity(ValueLength.attributeMaximum)
        assembled.reserveCapacity(ATTServer.maxPreparedWrites)
        assembledBytes.reserveCapacity(ValueLength.attributeMaximum)
    }

    /// Queues a part; offsets and lengths are not checked now but at Execute Write (3.4.6.1).
    mutating func append(handle: UInt16, offset: Int, value: ArraySlice<UInt8>) {
        parts.append(PlacedValue(handle: handle, offset: offset, start: partBytes.count, count: value.count))
        partBytes.append(contentsOf: value)
    }

    /// Joins the parts of each attribute in the order they came, into `assembled` and
    /// `assembledBytes`. A part must start within what its attribute's earlier parts cover
    /// (else Invalid Offset); an attribute gone since its Prepare Write is Invalid Handle; the
    /// errors come in the order of the parts.
    mutating func assemble(in database: GATTDatabase) throws(ATTFailure) {
        // First where each value starts and how long it is.
        for part in parts {
            if let index = assembled.firstIndex(where: { $0.handle == part.handle }) {
                let relative = part.offset - assembled[index].offset
                guard relative >= 0, relative <= assembled[index].count else {
                    throw ATTFailure(.invalidOffset, part.handle)
                }
                assembled[index].count = max(assembled[index].count, relative + part.count)
            } else {
                guard database.attribute(part.handle) != nil else { throw ATTFailure(.invalidHandle, part.handle) }
                assembled.append(PlacedValue(handle: part.handle, offset: part.offset, start: 0, count: part.count))
            }
        }
        // Then the bytes: each value's parts laid over one another, later parts last.
        for index in assembled.indices {
            let entry = assembled[index]
            let start = assembledBytes.count
            assembled[index].start = start
            assembledBytes.append(contentsOf: repeatElement(0, count: entry.count))
            for part in parts where part.handle == entry.handle {
                let at = start + part.offset - entry.offset
                for i in 0..<part.count { assembledBytes[at + i] = partBytes[part.start + i] }
            }
        }
    }

    /// Empties the queue and the working space, keeping their room.
    mutating func clear() {
        assembled.removeAll(keepingCapacity: true)
        assembledBytes.removeAll(keepingCapacity: true)
        parts.removeAll(keepingCapacity: true)
        partBytes.removeAll(keepingCapacity: true)
    }

    /// Drops the parts for handles in `range`; the bytes of the others move down.
    mutating func drop(in range: ClosedRange<UInt16>) {
        var kept = 0, bytes = 0
        for index in parts.indices {
            let part = parts[index]
            guard !range.contains(part.handle) else { continue }
            for i in 0..<part.count { partBytes[bytes + i] = partBytes[part.start + i] }
            parts[kept] = PlacedValue(handle: part.handle, offset: part.offset, start: bytes, count: part.count)
            kept += 1
            bytes += part.count
        }
        parts.removeLast(parts.count - kept)
        partBytes.removeLast(partBytes.count - bytes)
    }
}
