import BlemuCore

/// Advertisers that said they host the room and turned out not to (no chat characteristic,
/// discovery or subscription refused): a member passes over them for `duration` and goes on
/// looking, so one advertisement from anyone in range never ends a node. At most `capacity`
/// are kept (a peer advertising from a new address each time cannot grow it): when full, the
/// one whose time ends first makes room.
public struct SetAsideHosts {
    /// How long a bad host is passed over.
    public static let duration: Duration = .seconds(60)
    public static let capacity = 64

    /// Until when (monotonic ns) each address is passed over.
    public private(set) var until: [BluetoothAddress: UInt64] = [:]

    public init() {}

    /// Passes over `address` until `now + duration`. Returns false if it was already set aside
    /// (then nothing changes: it is logged once).
    @discardableResult
    public mutating func setAside(_ address: BluetoothAddress, now: UInt64) -> Bool {
        if isSetAside(address, now: now) { return false }
        until = until.filter { $0.value > now }
        if until.count >= Self.capacity, let first = until.min(by: { $0.value < $1.value })?.key {
            until[first] = nil
        }
        until[address] = now &+ UInt64(Self.duration.components.seconds) * 1_000_000_000
        return true
    }

    public func isSetAside(_ address: BluetoothAddress, now: UInt64) -> Bool {
        guard let end = until[address] else { return false }
        return end > now
    }
}
