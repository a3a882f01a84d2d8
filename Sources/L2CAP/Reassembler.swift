import BlemuCore
import BlemuHCI

/// Fixed channel identifiers of the LE-U logical link (Vol 3, Part A, 2.1, Table 2.3).
public enum L2CAPChannel {
    public static let att: UInt16 = 0x0004
    public static let leSignaling: UInt16 = 0x0005
    public static let securityManager: UInt16 = 0x0006
}

/// Why incoming ACL data was dropped.
public enum ReassemblyError: Error, Equatable, CustomStringConvertible {
    case continuationWithoutStart
    case startWhileIncomplete
    case tooLong(Int)
    case overrun(expected: Int, got: Int)
    case truncatedHeader

    public var description: String {
        switch self {
        case .continuationWithoutStart: return "continuing fragment without a start"
        case .startWhileIncomplete: return "new start fragment while a PDU was incomplete (previous one dropped)"
        case .tooLong(let n): return "L2CAP PDU of \(n) bytes exceeds the reassembly bound"
        case .overrun(let e, let g): return "fragments carry \(g) bytes for a \(e)-byte PDU"
        case .truncatedHeader: return "L2CAP basic header cut short"
        }
    }
}

/// Reassembles L2CAP PDUs from ACL fragments for one connection (Vol 3, Part A, 3 and
/// Vol 4, Part E, 5.4.2). A start fragment that holds the whole PDU is passed through without a
/// copy; only fragmented PDUs are gathered, into one reused buffer bounded by `maxPDU`.
public struct L2CAPReassembler {
    /// The largest basic-frame payload blemu accepts: an ATT PDU at the largest MTU (517) is
    /// the biggest thing any of our fixed channels carries.
    public static let defaultMaxPDU = 1024

    public let maxPDU: Int
    private var buffer: [UInt8] = []
    private var active = false

    public init(maxPDU: Int = L2CAPReassembler.defaultMaxPDU) {
        self.maxPDU = maxPDU
    }

    public var isIncomplete: Bool { active }

    public mutating func reset() {
        active = false
        buffer.removeAll(keepingCapacity: true)
    }

    /// Feeds one fragment. Calls `deliver(cid, payload)` when a PDU is complete.
    public mutating func receive(_ packet: ACLPacket,
                                 deliver: (UInt16, ArraySlice<UInt8>) -> Void) throws(ReassemblyError) {
        switch packet.boundary {
        case .firstFlushable, .firstNonFlushable, .complete:
            let hadPartial = active
            reset()
            let data = packet.data
            // An empty start says nothing at all: there is no PDU to gather.
            guard !data.isEmpty else {
                if hadPartial { throw .startWhileIncomplete }
                throw .truncatedHeader
            }
            if data.count >= 4 {
                let length = Int(data[data.startIndex]) | Int(data[data.startIndex + 1]) << 8
                guard length <= maxPDU else { throw .tooLong(length) }
                if data.count - 4 == length {
                    // The whole PDU in one fragment: delivered from the packet, no copy.
                    deliver(UInt16(data[data.startIndex + 2]) | UInt16(data[data.startIndex + 3]) << 8, data.dropFirst(4))
                    if hadPartial { throw .startWhileIncomplete }
                    return
                }
            }
            // Fragmented, possibly even inside the basic header (nothing in Vol 4, Part E, 5.4.2
            // says the first fragment holds the whole header): gather.
            active = true
            buffer.append(contentsOf: data)
            try progress(deliver)
            if hadPartial { throw .startWhileIncomplete }
        case .continuing:
            guard active else { throw .continuationWithoutStart }
            buffer.append(contentsOf: packet.data)
            try progress(deliver)
        }
    }

    private mutating func progress(_ deliver: (UInt16, ArraySlice<UInt8>) -> Void) throws(ReassemblyError) {
        guard buffer.count >= 2 else { return }
        let length = Int(buffer[0]) | Int(buffer[1]) << 8
        guard length <= maxPDU else {
            reset()
            throw .tooLong(length)
        }
        guard buffer.count >= length + 4 else { return }
        guard buffer.count == length + 4 else {
            let got = buffer.count - 4
            reset()
            throw .overrun(expected: length, got: got)
        }
        active = false
        deliver(UInt16(buffer[2]) | UInt16(buffer[3]) << 8, buffer[4...])
        buffer.removeAll(keepingCapacity: true)
    }
}

/// Writes a basic L2CAP header (Vol 3, Part A, 3.1) followed by the payload.
public func appendL2CAPFrame(cid: UInt16, payload: ArraySlice<UInt8>, to out: inout [UInt8]) {
    out.appendLE(UInt16(truncatingIfNeeded: payload.count))
    out.appendLE(cid)
    out.append(contentsOf: payload)
}
