import BlemuChannels
import BlemuATT
import BlemuConnection
import BlemuCore
import BlemuEATT
import BlemuGATT
import BlemuHCI
import BlemuL2CAP
import BlemuSecurity
import Logging

public struct PeripheralConfiguration: Sendable {
    /// The local name, advertised and in GAP Device Name.
    public var name: String
    /// A static random address; nil derives one from the device and name, stable across runs.
    public var address: BluetoothAddress?
    /// The controller spec, for logs and diagnostics.
    public var controller: String
    public var firmware: String
    /// Links this device takes at once; advertising stops at this many. The controller usually
    /// says no sooner (advertising then resumes at the next disconnection).
    public var maxConnections: Int
    /// Delay after connecting before asking the central for the device's preferred parameters.
    public var parameterUpdateDelay: Duration
    /// Overrides of the device's own advertising timing and preferred connection parameters
    /// (a configuration file's `advertising` and `connection`).
    public var advertisingTiming: AdvertisingTiming?
    public var connectionParameters: ConnectionParameters?
    /// Pairing: the static passkey, bonding, where bonds are kept (Docs/SECURITY.md).
    public var security: SecurityConfiguration
    /// Privacy (Vol 3, Part C, 10.7): advertise from a resolvable private address made from the
    /// device's IRK, a new one every `privateAddressTimeout`, instead of the identity address.
    public var privacy: Bool
    /// How long one resolvable private address lasts (Vol 3, Part C, Appendix A: TGAP(private_addr_int), 15 minutes).
    public var privateAddressTimeout: Duration
    /// The device's advertising is programmed (`ProgrammedAdvertisingRoute`, the programmable
    /// host): it takes no advertising set of its own and never advertises by itself; links come
    /// to it from the program's sets.
    public var programmedAdvertising = false
    /// A fleet member's start delay (`start_spread_s`, Docs/REFERENCE.md "Fleets"): the device
    /// advertises only once this has passed since it was made, so a fleet's members do not all
    /// begin in one instant. Its model and settings run from the start.
    public var startDelay: Duration = .zero

    public init(name: String, address: BluetoothAddress? = nil, controller: String, firmware: String = blemuVersion,
                maxConnections: Int = 32, parameterUpdateDelay: Duration = .seconds(1),
                advertisingTiming: AdvertisingTiming? = nil, connectionParameters: ConnectionParameters? = nil,
                security: SecurityConfiguration = SecurityConfiguration(),
                privacy: Bool = false, privateAddressTimeout: Duration = .seconds(15 * 60)) {
        self.security = security
        self.privacy = privacy
        self.privateAddressTimeout = privateAddressTimeout
        self.name = name
        self.address = address
        self.controller = controller
        self.firmware = firmware
        self.maxConnections = maxConnections
        self.parameterUpdateDelay = parameterUpdateDelay
        self.advertisingTiming = advertisingTiming
        self.connectionParameters = connectionParameters
    }
}
