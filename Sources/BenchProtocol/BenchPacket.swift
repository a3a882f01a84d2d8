import BlemuCore

/// The packets of Bumble's `bumble-bench` (bumble/apps/bench.py, `Packet`), so either end of a
/// bench run may be Bumble or blemu:
///
///     RESET     type 0                                        1 byte
///     SEQUENCE  type 1, flags, sequence LE32, timestamp LE32, payload   10 + n bytes
///     ACK       type 2, flags, sequence LE32                  6 bytes
///
/// Flag bit 0 (LAST) marks the last packet of a run; the receiver answers it with an ACK
/// (and the pong side answers every packet). The timestamp is microseconds since the run began,
/// truncated to 32 bits. The payload is zeros; only its length matters.
public struct BenchPacket: Equatable, Sendable {
    public enum Kind: UInt8, Sendable { case reset = 0, sequence = 1, ack = 2 }

    public var kind: Kind
    public var flags: UInt8
    public var sequence: UInt32
    public var timestamp: UInt32
    /// Bytes after the 10-byte header of a SEQUENCE packet.
    public var payloadLength: Int

    public static let lastFlag: UInt8 = 0x01
    public static let sequenceHeaderLength = 10
    public static let ackLength = 6

    public init(kind: Kind, flags: UInt8 = 0, sequence: UInt32 = 0, timestamp: UInt32 = 0, payloadLength: Int = 0) {
        self.kind = kind
        self.flags = flags
        self.sequence = sequence
        self.timestamp = timestamp
        self.payloadLength = payloadLength
    }

    public static let reset = BenchPacket(kind: .reset)

    public static func ack(for packet: BenchPacket) -> BenchPacket {
        BenchPacket(kind: .ack, flags: packet.flags, sequence: packet.sequence)
    }

    public var isLast: Bool { flags & Self.lastFlag != 0 }

    /// Bytes the packet takes encoded.
    public var encodedLength: Int {
        switch kind {
        case .reset: 1
        case .ack: Self.ackLength
        case .sequence: Self.sequenceHeaderLength + payloadLength
        }
    }

    /// Writes the packet into `out` after what it holds (the payload as zeros): with a buffer
    /// reused from packet to packet nothing is allocated.
    public func encode(into out: inout [UInt8]) {
        out.append(kind.rawValue)
        guard kind != .reset else { return }
        out.append(flags)
        out.appendLE(sequence)
        guard kind == .sequence else { return }
        out.appendLE(timestamp)
        // One append of the zeros, not one per byte: per byte it was 6% of blemu's instructions
        // in a GATT send run (Docs/PERFORMANCE.md "Per packet").
        out.append(contentsOf: repeatElement(0, count: max(0, payloadLength)))
    }

    public var encoded: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(encodedLength)
        encode(into: &out)
        return out
    }

    /// Why bytes are not a packet.
    public enum DecodeFailure: Error, Equatable, Sendable, CustomStringConvertible {
        case empty
        case unknownType(UInt8)
        case tooShort(kind: Kind, length: Int)

        public var description: String {
            switch self {
            case .empty: "empty packet"
            case .unknownType(let type): "unknown packet type \(Hex.byte(type))"
            case .tooShort(let kind, let length): "\(kind) packet of \(length) bytes is too short"
            }
        }
    }

    /// Total: any bytes give a packet or the reason they are not one. Bytes after a RESET or an
    /// ACK are ignored, as Bumble does.
    public static func decode(_ bytes: ArraySlice<UInt8>) -> Result<BenchPacket, DecodeFailure> {
        guard let type = bytes.first else { return .failure(.empty) }
        guard let kind = Kind(rawValue: type) else { return .failure(.unknownType(type)) }
        let base = bytes.startIndex
        func le32(_ at: Int) -> UInt32 {
            UInt32(bytes[base + at]) | UInt32(bytes[base + at + 1]) << 8 | UInt32(bytes[base + at + 2]) << 16 | UInt32(bytes[base + at + 3]) << 24
        }
        switch kind {
        case .reset:
            return .success(.reset)
        case .ack:
            guard bytes.count >= ackLength else { return .failure(.tooShort(kind: kind, length: bytes.count)) }
            return .success(BenchPacket(kind: .ack, flags: bytes[base + 1], sequence: le32(2)))
        case .sequence:
            guard bytes.count >= sequenceHeaderLength else { return .failure(.tooShort(kind: kind, length: bytes.count)) }
            return .success(BenchPacket(kind: .sequence, flags: bytes[base + 1], sequence: le32(2), timestamp: le32(6),
                                        payloadLength: bytes.count - sequenceHeaderLength))
        }
    }
}

/// Bumble-bench's framing on a byte stream (an L2CAP channel, `StreamedPacketIO`): each packet
/// after its length, two bytes big-endian. The receiving side treats SDUs as a stream: a packet
/// may span SDUs and an SDU may hold several.
public struct BenchStreamFramer {
    /// Bytes of the packet being gathered (at most 65535: the length field bounds it).
    private var packet: [UInt8] = []
    private var header: [UInt8] = []
    private var need = 0

    public static let lengthFieldSize = 2

    public init() {
        packet.reserveCapacity(1024)
        header.reserveCapacity(2)
    }

    /// Appends `packet`'s frame (its length, then its bytes) to `out`.
    public static func frame(_ packet: ArraySlice<UInt8>, into out: inout [UInt8]) {
        out.append(UInt8(truncatingIfNeeded: packet.count >> 8))
        out.append(UInt8(truncatingIfNeeded: packet.count))
        out.append(contentsOf: packet)
    }

    /// Feeds bytes of the stream; `packet` hears each whole packet (valid only during the call).
    public mutating func receive(_ bytes: ArraySlice<UInt8>, packet deliver: (ArraySlice<UInt8>) -> Void) {
        var rest = bytes
        while !rest.isEmpty {
            if need > 0 {
                let chunk = rest.prefix(need)
                packet.append(contentsOf: chunk)
                rest = rest.dropFirst(chunk.count)
                need -= chunk.count
                if need == 0 {
                    deliver(packet[...])
                    packet.removeAll(keepingCapacity: true)
                }
                continue
            }
            header.append(rest.first!)
            rest = rest.dropFirst()
            if header.count == Self.lengthFieldSize {
                need = Int(header[0]) << 8 | Int(header[1])
                header.removeAll(keepingCapacity: true)
                // A zero-length packet is delivered as such (and then fails to decode as empty).
                if need == 0 { deliver(packet[...]) }
            }
        }
    }

    /// Bytes held for a packet not yet whole.
    public var pendingBytes: Int { packet.count + header.count }
}
