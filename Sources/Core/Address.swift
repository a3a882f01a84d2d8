/// A Bluetooth device address (BD_ADDR), 48 bits.
///
/// Stored as the over-the-air little-endian bytes; printed most significant byte first
/// (`AA:BB:CC:DD:EE:FF`), the way every tool shows it.
public struct BluetoothAddress: Hashable, Sendable, CustomStringConvertible {
    /// Little-endian: `bytes.0` is the least significant octet.
    public var bytes: (UInt8, UInt8, UInt8, UInt8, UInt8, UInt8)

    public init(bytes: (UInt8, UInt8, UInt8, UInt8, UInt8, UInt8)) { self.bytes = bytes }

    public init(littleEndian array: some Collection<UInt8>) throws(DecodeError) {
        guard array.count == 6 else { throw DecodeError(.invalidValue, "address needs 6 bytes") }
        let a = Array(array)
        bytes = (a[0], a[1], a[2], a[3], a[4], a[5])
    }

    public init(value: UInt64) {
        bytes = (UInt8(truncatingIfNeeded: value), UInt8(truncatingIfNeeded: value >> 8),
                 UInt8(truncatingIfNeeded: value >> 16), UInt8(truncatingIfNeeded: value >> 24),
                 UInt8(truncatingIfNeeded: value >> 32), UInt8(truncatingIfNeeded: value >> 40))
    }

    /// Parses `AA:BB:CC:DD:EE:FF` (also with `-`); nil for anything else.
    public init?(_ text: String) {
        let parts = text.split(whereSeparator: { $0 == ":" || $0 == "-" })
        guard parts.count == 6 else { return nil }
        var value: UInt64 = 0
        for part in parts {
            guard part.count == 2, let octet = UInt8(part, radix: 16) else { return nil }
            value = value << 8 | UInt64(octet)
        }
        self.init(value: value)
    }

    public var value: UInt64 {
        UInt64(bytes.0) | UInt64(bytes.1) << 8 | UInt64(bytes.2) << 16 | UInt64(bytes.3) << 24
            | UInt64(bytes.4) << 32 | UInt64(bytes.5) << 40
    }

    public var littleEndianBytes: [UInt8] { [bytes.0, bytes.1, bytes.2, bytes.3, bytes.4, bytes.5] }

    /// A static random address has its two most significant bits set (Vol 6, Part B, 1.3.2.1)
    /// and its random part neither all zeros nor all ones.
    public var isValidStaticRandom: Bool {
        let random = value & 0x3FFF_FFFF_FFFF
        return bytes.5 & 0xC0 == 0xC0 && random != 0 && random != 0x3FFF_FFFF_FFFF
    }

    /// A static random address derived from `seed` (a device name, say): the same seed gives the
    /// same address on every run, so a phone that bonded yesterday finds the same device today.
    public static func staticRandom(seed: String) -> BluetoothAddress {
        // FNV-1a, 64 bit: stable across runs and platforms (Swift's Hasher is seeded per process).
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in seed.utf8 {
            hash ^= UInt64(byte)
            hash &*= 0x0000_0100_0000_01B3
        }
        var random = (hash ^ (hash >> 48)) & 0x3FFF_FFFF_FFFF
        if random == 0 || random == 0x3FFF_FFFF_FFFF { random = 0x1234_5678_9ABC }
        return BluetoothAddress(value: random | 0xC000_0000_0000)
    }

    public var description: String {
        let v = value
        return stride(from: 40, through: 0, by: -8).map { shift in
            let s = String(UInt8(truncatingIfNeeded: v >> UInt64(shift)), radix: 16, uppercase: true)
            return s.count == 1 ? "0" + s : s
        }.joined(separator: ":")
    }

    public static func == (a: BluetoothAddress, b: BluetoothAddress) -> Bool { a.value == b.value }
    public func hash(into hasher: inout Hasher) { hasher.combine(value) }
}

/// The address type that goes with an address in HCI (Vol 4, Part E, 7.8.5 and 7.7.65.1).
public enum AddressType: UInt8, Sendable {
    case publicDevice = 0x00
    case randomDevice = 0x01
    case publicIdentity = 0x02
    case randomIdentity = 0x03
}

/// An LE device address with its type (Vol 6, Part B, 1.3): public, or random (static, or
/// private, resolvable or not). What names a peer or ourselves above HCI: to SMP and its
/// crypto toolbox (the address type bit of c1, the type octet of f5 and f6), in bonds and their
/// keys, in authorization. HCI's four address types (`AddressType`: the two identity types too)
/// come to this when the address reaches the host.
public struct LEAddress: Hashable, Sendable {
    public var address: BluetoothAddress
    public var isRandom: Bool

    public init(_ address: BluetoothAddress, isRandom: Bool) {
        self.address = address
        self.isRandom = isRandom
    }

    /// An address with HCI's Peer_Address_Type (Vol 4, Part E, 7.7.65.10): 0x00 public and 0x01
    /// random device address, 0x02 public and 0x03 random identity address (the controller
    /// resolved a private address to it): the type is bit 0; other values (reserved) are read
    /// the same way, so no byte from the controller is refused here.
    public init(_ address: BluetoothAddress, peerAddressType: UInt8) {
        self.init(address, isRandom: peerAddressType & 0x01 != 0)
    }

    /// HCI's Peer_Address_Type for commands that name this address (0x00 public, 0x01 random).
    public var peerAddressType: UInt8 { isRandom ? 0x01 : 0x00 }
}
