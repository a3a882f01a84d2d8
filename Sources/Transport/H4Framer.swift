import BlemuHCI

/// Cuts an H4 byte stream into HCI packets.
///
/// Bytes go in with `append`, packets come out with `nextPacket()`: the body slice (header +
/// payload, no indicator byte) points into the framer's one buffer, so framing allocates
/// nothing per packet. Use a packet before the next `append`, or copy it. An unknown indicator
/// byte is skipped and counted in `discardedBytes` until a known one resynchronises the
/// stream. The buffer never holds more than `capacity` bytes.
public struct H4Framer {
    /// The largest H4 packet: indicator, ACL header, and the most a 16-bit length allows.
    public static let maxPacketLength = 1 + 4 + 65535

    public let capacity: Int
    /// Bytes skipped because they could not start a packet.
    public private(set) var discardedBytes = 0
    /// Complete packets returned so far.
    public private(set) var packetCount = 0

    private var buffer: [UInt8] = []
    /// Index of the first byte not yet framed.
    private var readIndex = 0

    /// `capacity` below one maximal packet plus a byte is raised to that, so a full buffer always
    /// holds a complete packet and `append` can always make progress after `nextPacket()`.
    public init(capacity: Int = H4Framer.maxPacketLength + 16 * 1024) {
        self.capacity = max(capacity, Self.maxPacketLength + 1)
        buffer.reserveCapacity(min(self.capacity, 4096))
    }

    /// Bytes held that are not part of a packet returned yet.
    public var bufferedCount: Int { buffer.count - readIndex }

    /// How many bytes `append` can take now.
    public var freeCapacity: Int { capacity - bufferedCount }

    /// Takes as many of `bytes` as fit (see `freeCapacity`) and returns how many it took;
    /// call `nextPacket()` until it returns nil, then append the rest.
    @discardableResult
    public mutating func append<Bytes: Collection<UInt8>>(contentsOf bytes: Bytes) -> Int {
        compact()
        let count = min(bytes.count, capacity - buffer.count)
        guard count > 0 else { return 0 }
        if count == bytes.count {
            buffer.append(contentsOf: bytes)
        } else {
            buffer.append(contentsOf: bytes.prefix(count))
        }
        return count
    }

    /// The next complete packet, or nil until more bytes arrive.
    public mutating func nextPacket() -> (type: H4PacketType, body: ArraySlice<UInt8>)? {
        while readIndex < buffer.count {
            guard let type = H4PacketType(rawValue: buffer[readIndex]) else {
                readIndex += 1
                discardedBytes += 1
                continue
            }
            let start = readIndex + 1
            let available = buffer[start...]
            guard let payload = type.payloadLength(header: available) else { return nil }
            let length = type.headerLength + payload
            guard available.count >= length else { return nil }
            readIndex = start + length
            packetCount += 1
            return (type, buffer[start..<start + length])
        }
        return nil
    }

    /// Appends `bytes` and hands each complete packet to `deliver`. `deliver` runs while the
    /// framer is being mutated: it must not touch this framer (or what holds it).
    public mutating func feed<Bytes: Collection<UInt8>>(_ bytes: Bytes,
                                                         _ deliver: (H4PacketType, ArraySlice<UInt8>) -> Void) {
        var rest = bytes[...]
        repeat {
            let taken = append(contentsOf: rest)
            rest = rest.dropFirst(taken)
            while let packet = nextPacket() { deliver(packet.type, packet.body) }
            if taken == 0 && !rest.isEmpty { reset() }  // cannot happen (see init); never spin
        } while !rest.isEmpty
    }

    /// Drops the bytes of an incomplete packet (counted as discarded), e.g. after a reconnect.
    public mutating func reset() {
        discardedBytes += bufferedCount
        buffer.removeAll(keepingCapacity: true)
        readIndex = 0
    }

    /// One whole packet, for transports where each read is exactly one packet (the HCI user
    /// channel): nil unless `datagram` is an indicator followed by exactly the length its
    /// header announces.
    public static func parseDatagram(_ datagram: ArraySlice<UInt8>) -> (type: H4PacketType, body: ArraySlice<UInt8>)? {
        guard let first = datagram.first, let type = H4PacketType(rawValue: first) else { return nil }
        let body = datagram.dropFirst()
        guard let payload = type.payloadLength(header: body), body.count == type.headerLength + payload else {
            return nil
        }
        return (type, body)
    }

    /// Moves the unframed bytes to the front, keeping the allocation.
    private mutating func compact() {
        guard readIndex > 0 else { return }
        if readIndex >= buffer.count {
            buffer.removeAll(keepingCapacity: true)
        } else {
            buffer.removeSubrange(0..<readIndex)
        }
        readIndex = 0
    }
}
