/// The HCI packet indicator that precedes every packet on an H4 (UART-style) transport
/// (Vol 4, Part A, 2: "HCI packet indicators").
public enum H4PacketType: UInt8, Sendable, CustomStringConvertible {
    case command = 0x01
    case acl = 0x02
    case sco = 0x03
    case event = 0x04
    case iso = 0x05

    /// Bytes of the HCI header, which carries the payload length (Vol 4, Part E, 5.4).
    public var headerLength: Int {
        switch self {
        case .command: 3  // opcode u16, parameter total length u8 (5.4.1)
        case .acl: 4      // handle + flags u16, data total length u16 (5.4.2)
        case .sco: 3      // handle + flags u16, data total length u8 (5.4.3)
        case .event: 2    // event code u8, parameter total length u8 (5.4.4)
        case .iso: 4      // handle + flags u16, data load length: 14 bits of a u16 (5.4.5)
        }
    }

    /// The payload length that `header` (at least `headerLength` bytes) announces.
    @inlinable
    public func payloadLength(header: ArraySlice<UInt8>) -> Int? {
        guard header.count >= headerLength else { return nil }
        let base = header.startIndex
        switch self {
        case .event: return Int(header[base + 1])
        case .command, .sco: return Int(header[base + 2])
        case .acl: return Int(header[base + 2]) | Int(header[base + 3]) << 8
        case .iso: return (Int(header[base + 2]) | Int(header[base + 3]) << 8) & 0x3FFF
        }
    }

    public var description: String {
        switch self {
        case .command: "command"
        case .acl: "acl"
        case .sco: "sco"
        case .event: "event"
        case .iso: "iso"
        }
    }
}

/// What HCI reaches the controller through (Vol 4, Part A): the controller's transport, handed
/// to `ControllerHost` once, when the stack is assembled. From then on packets pass between the
/// transport and HCI directly, both ways: no layer above HCI is on the packet path.
public protocol HCITransport: AnyObject {
    /// Where received packets go: `ControllerHost` sets it once (the body is valid during the call).
    var onPacket: ((H4PacketType, ArraySlice<UInt8>) -> Void)? { get set }
    /// Sends one packet (without its indicator byte); false, having sent nothing, when the
    /// transport is down or cannot take the whole packet now.
    func send(_ type: H4PacketType, _ body: ArraySlice<UInt8>) -> Bool
}
