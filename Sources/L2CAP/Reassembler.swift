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
    private var expected = 0
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
            guard data.count >= 4 else {
                if data.count >= 2 {
                    // The header itself is fragmented: gather it.
                    let length = Int(data[data.startIndex]) | Int(data[data.startIndex + 1]) << 8
                    try begin(length: length, with: data)
                    if hadPartial { throw .startWhileIncomplete }
                    return
                }
                throw .truncatedHeader
            }
            let length = Int(data[data.startIndex]) | Int(data[data.startIndex + 1]) << 8
            let cid = UInt16(data[data.startIndex + 2]) | UInt16(data[data.startIndex + 3]) << 8
            if data.count - 4 == length {
                deliver(cid, data.dropFirst(4))
            } else if data.count - 4 > length {
                throw .overrun(expected: length, got: data.count - 4)
            } else {
                try begin(length: length, with: data)
            }
            if hadPartial { throw .startWhileIncomplete }
        case .continuing:
            guard active else { throw .continuationWithoutStart }
            buffer.append(contentsOf: packet.data)
            if buffer.count == expected + 4 {
                let cid = UInt16(buffer[2]) | UInt16(buffer[3]) << 8
                active = false
                deliver(cid, buffer[4...])
                buffer.removeAll(keepingCapacity: true)
            } else if buffer.count > expected + 4 {
                let got = buffer.count - 4
                reset()
                throw .overrun(expected: expected, got: got)
            }
        }
    }

    private mutating func begin(length: Int, with data: ArraySlice<UInt8>) throws(ReassemblyError) {
        guard length <= maxPDU else { throw .tooLong(length) }
        expected = length
        active = true
        buffer.append(contentsOf: data)
    }
}

/// Writes a basic L2CAP header (Vol 3, Part A, 3.1) followed by the payload.
public func appendL2CAPFrame(cid: UInt16, payload: ArraySlice<UInt8>, to out: inout [UInt8]) {
    out.appendLE(UInt16(truncatingIfNeeded: payload.count))
    out.appendLE(cid)
    out.append(contentsOf: payload)
}
