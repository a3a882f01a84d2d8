import BlemuChannels
import BlemuCore
import BlemuGATT
import BlemuHCI
import Logging

/// What the stack offers a running device: time, logging, and updates to centrals.
/// Nothing here is about HCI or L2CAP: a device only knows its characteristics.
public protocol DeviceContext: AnyObject {
    var scheduler: TimerScheduling { get }
    var logger: Logger { get }
    /// The centrals connected now.
    var peers: [ATTPeer] { get }
    /// Notifies every central that enabled notifications (or only `peer`). False when a
    /// transmit queue was full for at least one of them: the device hears `peripheralIsReady`
    /// when there is room again, like Core Bluetooth's updateValue /
    /// peripheralManagerIsReady(toUpdateSubscribers:).
    /// `encode` writes the value into a buffer the stack reuses, so notifying allocates nothing;
    /// it must not notify itself.
    @discardableResult func notify(_ characteristic: Characteristic, to peer: ATTPeer?,
                                   encode: (inout ValueBuffer) -> Void) -> Bool
    /// The same with bytes already at hand (a value kept to compare with the next).
    @discardableResult func notify(_ characteristic: Characteristic, value: [UInt8], to peer: ATTPeer?) -> Bool
    /// Notifies several values at once: to a central that set the Multiple Handle Value
    /// Notifications bit of Client Supported Features (Vol 3, Part G, 7.2, bit 2) in one
    /// Multiple Handle Value Notification (Vol 3, Part F, 3.4.7.4) when they fit its ATT_MTU,
    /// to the others one notification each. False as for `notify`.
    @discardableResult func notify(_ updates: [(characteristic: Characteristic, value: [UInt8])], to peer: ATTPeer?) -> Bool
    /// Indicates to every central that enabled indications (or only `peer`). False when a queue
    /// was full for at least one of them: the device hears `peripheralIsReady` when there is
    /// room again. `completion` is called once for each central the indication was queued
    /// for, when it is confirmed, times out (30 s) or its link closes first.
    /// `encode` writes the value into the buffer `notify` uses; it must not notify or indicate
    /// itself.
    @discardableResult func indicate(_ characteristic: Characteristic, to peer: ATTPeer?, completion: IndicationCompletion?,
                                     encode: (inout ValueBuffer) -> Void) -> Bool
    /// The ATT_MTU of `peer`'s link (23 when it is not connected): a notification carries ATT_MTU - 3 bytes.
    func attMTU(of peer: ATTPeer) -> Int
    /// Whether `peer` (or any central, when nil) enabled notifications or indications.
    func isSubscribed(_ characteristic: Characteristic, peer: ATTPeer?, indications: Bool) -> Bool
    /// Logs an event with the device's metadata.
    func log(_ event: BlemuEvent, _ level: Logger.Level, _ message: @autoclosure () -> String,
             _ metadata: @autoclosure () -> Logger.Metadata)
    /// How `peer`'s link is protected now: encrypted, with an authenticated key, ... (Docs/SECURITY.md).
    func linkSecurity(of peer: ATTPeer) -> LinkSecurity
    /// Whether centrals pair with this device's passkey (`--passkey`), so it can tell an
    /// authenticated central from any other.
    var pairsWithPasskey: Bool { get }
    /// Publishes an L2CAP channel, like Core Bluetooth's `publishL2CAPChannel(withEncryption:)`:
    /// blemu assigns a dynamic SPSM (0x0080-0x00FF) and returns it (nil when all 128 are taken).
    /// Centrals open LE or enhanced credit based channels to it on any link; `delegate` hears each
    /// open, its SDUs and its close, and a refused `send` is followed by `channelIsReady`.
    /// `security` is checked against the link at each request (an encrypted-only channel refuses
    /// an unencrypted link with 0x0008). Expose the SPSM with `L2CAPPSMCharacteristic`.
    func publishL2CAPChannel(security: ChannelSecurity, parameters: ChannelParameters,
                             delegate: CreditBasedChannelDelegate) -> UInt16?
    /// Stops serving `spsm`: new requests are refused, open channels stay.
    func unpublishL2CAPChannel(_ spsm: UInt16)
}

/// The characteristic Core Bluetooth apps read a published L2CAP channel's PSM from (its UUID is
/// the one iOS accessories use): a little-endian UInt16, read-only, in one of the device's services.
public enum L2CAPPSMCharacteristic {
    public static let uuid = BluetoothUUID("ABDD3056-28FA-441D-A470-55A75A52553A")!

    /// The characteristic, its value `spsm()` at each read (0 until the channel is published).
    public static func make(spsm: @escaping () -> UInt16) -> Characteristic {
        Characteristic(uuid, properties: .read, length: .fixed(2), onRead: { _, value in
            value.appendLE(spsm())
            return nil
        })
    }
}

extension DeviceContext {
    /// Notifies every central that enabled notifications (or only `peer`) with bytes at hand.
    @discardableResult
    public func notify(_ characteristic: Characteristic, value: [UInt8], to peer: ATTPeer?) -> Bool {
        notify(characteristic, to: peer) { $0.append(contentsOf: value) }
    }

    /// One notification each (a context that knows no client's features).
    @discardableResult
    public func notify(_ updates: [(characteristic: Characteristic, value: [UInt8])], to peer: ATTPeer?) -> Bool {
        var all = true
        for update in updates where !notify(update.characteristic, value: update.value, to: peer) { all = false }
        return all
    }

    /// Notifies every central that enabled notifications with bytes at hand.
    @discardableResult
    public func notify(_ characteristic: Characteristic, value: [UInt8]) -> Bool {
        notify(characteristic, value: value, to: nil)
    }

    /// Notifies every central that enabled notifications, the value written by `encode`.
    @discardableResult
    public func notify(_ characteristic: Characteristic, encode: (inout ValueBuffer) -> Void) -> Bool {
        notify(characteristic, to: nil, encode: encode)
    }

    /// Indicates with bytes at hand.
    @discardableResult
    public func indicate(_ characteristic: Characteristic, value: [UInt8], to peer: ATTPeer?,
                         completion: IndicationCompletion?) -> Bool {
        indicate(characteristic, to: peer, completion: completion) { $0.append(contentsOf: value) }
    }

    /// Indicates without waiting to hear how each indication ended.
    @discardableResult
    public func indicate(_ characteristic: Characteristic, value: [UInt8], to peer: ATTPeer? = nil) -> Bool {
        indicate(characteristic, value: value, to: peer, completion: nil)
    }

    /// Indicates the value written by `encode`, without waiting to hear how it ended.
    @discardableResult
    public func indicate(_ characteristic: Characteristic, to peer: ATTPeer? = nil, encode: (inout ValueBuffer) -> Void) -> Bool {
        indicate(characteristic, to: peer, completion: nil, encode: encode)
    }
}

/// How a device presents itself before anyone connects.
public struct DeviceProfile: Sendable {
    /// The default local name (overridden by `--name`).
    public var defaultName: String
    /// Services to list in the advertisement, most important first.
    public var advertisedServices: [BluetoothUUID]
    /// GAP Appearance (Assigned Numbers 2.6).
    public var appearance: UInt16
    public var connectionParameters: ConnectionParameters
    public var advertisingTiming: AdvertisingTiming
    public var txPowerLevel: Int8?
    /// Advertising data and scan response to send as they are (a recorded device's, Core
    /// Supplement, Part A), instead of the ones built from the name, services and appearance.
    public var recordedAdvertising: (advertisingData: [UInt8], scanResponseData: [UInt8])?
    /// The recorded device advertised with extended PDUs: the replay does too, from a
    /// connectable extended set (its advertising data may pass 31 octets; such a set has no
    /// scan response, Vol 4, Part E, 7.8.53), on a controller with LE Extended Advertising.
    public var recordedAdvertisingIsExtended = false

    public init(defaultName: String, advertisedServices: [BluetoothUUID], appearance: UInt16,
                connectionParameters: ConnectionParameters = .recommended,
                advertisingTiming: AdvertisingTiming = AdvertisingTiming(), txPowerLevel: Int8? = 0) {
        self.defaultName = defaultName
        self.advertisedServices = advertisedServices
        self.appearance = appearance
        self.connectionParameters = connectionParameters
        self.advertisingTiming = advertisingTiming
        self.txPowerLevel = txPowerLevel
    }
}

/// An emulated peripheral: its GATT services and the simulated world behind them.
/// See Docs/WRITING-A-DEVICE.md.
public protocol Device: AnyObject {
    /// The name on the command line (`heart-rate`), Docs/REFERENCE.md "Device names".
    static var deviceName: String { get }
    static var summary: String { get }
    /// Whether centrals must pair with Passkey Entry and the device's static passkey (a label
    /// on the box: `--passkey`, else one generated on the first start and kept in the state
    /// directory). The device is then DisplayOnly with MITM required.
    static var pairsWithStaticPasskey: Bool { get }
    var profile: DeviceProfile { get }
    /// The device's own services (GAP, GATT and Diagnostics are added by the stack).
    var services: [Service] { get }
    /// Called once the database is built; timers for the simulated world start here.
    func start(context: DeviceContext)
    func stop()
    /// A transmit queue that was full (`notify` or `indicate` returned false) has room again.
    func peripheralIsReady()
    func peerConnected(_ peer: ATTPeer)
    /// Called after every subscription the link held was reported ended.
    func peerDisconnected(_ peer: ATTPeer)
    /// A central changed its CCCD — or its link closed, which ends every subscription it held
    /// (reported with both false before `peerDisconnected`).
    func subscriptionChanged(_ characteristic: Characteristic, peer: ATTPeer, notify: Bool, indicate: Bool)
    /// What a test script or a configuration file may set (`blemu ctl PATH set DEVICE KEY VALUE`,
    /// `[device]` tables of `--config`): the next read or notification shows the new value.
    var settings: [DeviceSetting] { get }
}

/// One value of a device's simulated world that can be set from outside, by name.
public struct DeviceSetting {
    /// The key (`bpm`, `room`, `jammed`): lower case, digits and `-`.
    public let key: String
    /// What it is and what it accepts, for errors and `blemu devices`: "room temperature, °C, -20 to 50".
    public let summary: String
    /// Parses and applies a value given as text; returns nil, or why the value is refused
    /// (one line, naming what is allowed). It must change nothing when it refuses.
    public let apply: (String) -> String?
    /// Parses a value without applying it: nil when `apply` would take it (a scenario file's
    /// `set:` is checked before anything starts). Nil for a setting checked only when applied.
    public let check: ((String) -> String?)?
    /// For a value that moves by itself (a heart's wander, a battery's drain): sets it and
    /// holds it there until it is set again (`set DEVICE KEY VALUE --exact`). Nil when the
    /// value stays as set anyway (`moves` false: `--exact` sets it as `apply` does) or cannot
    /// be held (`moves` true: `--exact` is refused).
    public let hold: ((String) -> String?)?
    /// Whether the device changes the value by itself after it is set.
    public let moves: Bool

    public init(_ key: String, _ summary: String, check: ((String) -> String?)? = nil, moves: Bool = false,
                hold: ((String) -> String?)? = nil, apply: @escaping (String) -> String?) {
        self.key = key
        self.summary = summary
        self.check = check
        self.moves = moves
        self.hold = hold
        self.apply = apply
    }
}

extension Device {
    public static var pairsWithStaticPasskey: Bool { false }
    public var settings: [DeviceSetting] { [] }
    public func stop() {}
    public func peripheralIsReady() {}
    public func peerConnected(_ peer: ATTPeer) {}
    public func peerDisconnected(_ peer: ATTPeer) {}
    public func subscriptionChanged(_ characteristic: Characteristic, peer: ATTPeer, notify: Bool, indicate: Bool) {}
}
