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
    /// A periodic train beside the advertising, carrying the same data (Vol 6, Part B,
    /// 4.4.2.12): its interval in units of 1.25 ms (7.5 ms to 81.91875 s, Vol 4, Part E,
    /// 7.8.61), nil for none. Read with `broadcastInterval`.
    var periodicInterval: UInt16? { get }
    /// Whether the device may ask for a periodic train (it has a setting for one): the host then
    /// uses a controller's extended advertising commands when it has LE Periodic Advertising,
    /// so the train can be turned on at run time.
    var offersPeriodicAdvertising: Bool { get }
    /// Called once, instead of `start(context:)`, when the controller is ready: timers for the
    /// simulated world start here, and the first `advertisingData` is read right after.
    func start(broadcasting context: BroadcastContext)
    /// The address advertised from changed (with privacy, a new resolvable private address,
    /// Vol 6, Part B, 1.3.2.2). Data that depends on it (BTHome's encryption nonce begins with
    /// it) is made anew here, without `broadcastChanged()`: the host reads `advertisingData`
    /// right after and restarts advertising from the new address with it, so no advertisement
    /// goes out from one address with data made for another.
    func advertisingAddressChanged()
}

extension BroadcastingDevice {
    public var services: [Service] { [] }
    public func start(context: DeviceContext) {}
    public func advertisingAddressChanged() {}
    public var periodicInterval: UInt16? { nil }
    public var offersPeriodicAdvertising: Bool { false }
}

/// What the stack offers a broadcaster beside the `DeviceContext`.
public protocol BroadcastContext: DeviceContext {
    /// The address the device advertises from (BTHome's encryption nonce begins with it).
    var advertisingAddress: BluetoothAddress { get }
    /// `advertisingData`, `broadcastInterval` or `periodicInterval` may have changed: the host
    /// reads them and sends the controller only what differs (nothing at all when nothing does).
    func broadcastChanged()
    /// Why the controller can send no periodic train (nil: it can, or it is not known yet).
    var periodicAdvertisingUnsupportedReason: String? { get }
}
