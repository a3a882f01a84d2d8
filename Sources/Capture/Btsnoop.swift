/// The btsnoop file format, as Apple's PacketLogger and Frontline (Teledyne LeCroy) document it,
/// modelled on RFC 1761 ("Snoop Version 2 Packet Capture File Format"): every integer is big-endian.
///
///     file header: identification "btsnoop\0" (8 octets), version u32 = 1, datalink type u32
///     record:      original length u32, included length u32, packet flags u32,
///                  cumulative drops u32, timestamp i64 (microseconds since midnight,
///                  January 1st, 0 AD, nominal Gregorian), then the packet data
///
/// blemu writes datalink 1002, "HCI UART (H4)": each record's data begins with the H4 packet
/// indicator (0x01 command, 0x02 ACL, 0x03 SCO, 0x04 event, 0x05 ISO), which is what `btmon -r`
/// and Wireshark decode.
public enum Btsnoop {
    /// Datalink 1002: HCI UART (H4).
    public static let datalinkH4: UInt32 = 1002
    public static let version: UInt32 = 1
    public static let headerLength = 16
    public static let recordHeaderLength = 24

    /// Microseconds from 0000-01-01 (the btsnoop epoch) to 1970-01-01 (the Unix epoch).
    public static let unixEpochOffsetMicroseconds: Int64 = 0x00dc_ddb3_0f2f_8000

    /// The 16-octet file header.
    public static let fileHeader: [UInt8] = {
        var header: [UInt8] = Array("btsnoop".utf8) + [0]
        appendBigEndian(version, to: &header)
        appendBigEndian(datalinkH4, to: &header)
        return header
    }()

    /// Packet flags (bit 0: direction, bit 1: command/event versus data).
    public struct Flags: OptionSet, Sendable {
        public let rawValue: UInt32
        public init(rawValue: UInt32) { self.rawValue = rawValue }
        /// "0 = sent, 1 = received": 0 is host to controller.
        public static let received = Flags(rawValue: 1 << 0)
        /// "0 = data, 1 = command/event".
        public static let commandOrEvent = Flags(rawValue: 1 << 1)

        /// The flags of an H4 packet of `packetType` going `received` (controller to host) or not.
        public init(packetType: UInt8, received: Bool) {
            var flags: Flags = []
            if received { flags.insert(.received) }
            if packetType == 0x01 || packetType == 0x04 { flags.insert(.commandOrEvent) }
            self = flags
        }
    }

    /// Appends one record: its 24-octet header, the H4 indicator, then `packet` (the HCI packet
    /// without indicator). Returns the record's length.
    @discardableResult
    public static func appendRecord(to buffer: inout [UInt8], packetType: UInt8, packet: ArraySlice<UInt8>,
                                    received: Bool, unixMicroseconds: Int64) -> Int {
        let dataLength = UInt32(truncatingIfNeeded: 1 + packet.count)
        let start = buffer.count
        appendBigEndian(dataLength, to: &buffer)  // original length
        appendBigEndian(dataLength, to: &buffer)  // included length: never truncated
        appendBigEndian(Flags(packetType: packetType, received: received).rawValue, to: &buffer)
        appendBigEndian(UInt32(0), to: &buffer)   // cumulative drops
        let timestamp = unixMicroseconds &+ unixEpochOffsetMicroseconds
        appendBigEndian(UInt64(bitPattern: timestamp), to: &buffer)
        buffer.append(packetType)
        buffer.append(contentsOf: packet)
        return buffer.count - start
    }

    static func appendBigEndian<Value: FixedWidthInteger>(_ value: Value, to buffer: inout [UInt8]) {
        var shift = Value.bitWidth - 8
        while shift >= 0 {
            buffer.append(UInt8(truncatingIfNeeded: value >> shift))
            shift -= 8
        }
    }
}
