import BlemuCore
import BlemuGATT

/// A device that never accepts a connection: it broadcasts its readings in its advertising data
/// (a BTHome sensor, a beacon). It serves no GATT services of its own; the host advertises it
/// non-connectable and non-scannable (ADV_NONCONN_IND, Vol 6, Part B, 2.3.1.3, or the extended
/// form when its data passes 31 octets), in a set of its own beside the connectable devices on
/// the controller. See Docs/BROADCASTERS.md.
public protocol BroadcastingDevice: Device {
    /// The advertising data as it should be now: AD structures (Vol 3, Part C, 11), Flags
    /// included when the format wants them. At most 31 octets on a controller without LE
    /// Extended Advertising, at most 251 with it. Read when advertising starts and after each
    /// `BroadcastContext.broadcastChanged()`.
    var advertisingData: [UInt8] { get }
    /// The advertising interval, units of 0.625 ms (20 ms to 10.24 s, Vol 4, Part E, 7.8.5).
    var broadcastInterval: UInt16 { get }
    /// Called once, instead of `start(context:)`, when the controller is ready: timers for the
    /// simulated world start here, and the first `advertisingData` is read right after.
    func start(broadcasting context: BroadcastContext)
}

extension BroadcastingDevice {
    public var services: [Service] { [] }
    public func start(context: DeviceContext) {}
}

/// What the stack offers a broadcaster beside the `DeviceContext`.
public protocol BroadcastContext: DeviceContext {
    /// The address the device advertises from (BTHome's encryption nonce begins with it).
    var advertisingAddress: BluetoothAddress { get }
    /// `advertisingData` or `broadcastInterval` may have changed: the host reads them and
    /// sends the controller only what differs (nothing at all when nothing does).
    func broadcastChanged()
}

extension Peripheral: BroadcastContext {
    public func broadcastChanged() { advertising.broadcastChanged() }

    /// The advertising data a broadcaster sends now (nil for a connectable device): the
    /// control socket's `list` shows it.
    public var broadcastPayload: [UInt8]? { advertising.broadcaster != nil ? advertising.payload.advertisingData : nil }
}
