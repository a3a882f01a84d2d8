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

/// One link to a central: the role-neutral `LEConnection` (its L2CAP link, security, ATT
/// bearer, GATT session, channels, SMP) with the device's endpoints attached: its database's
/// server behind its fault stage, and its enhanced bearers.
final class Connection {
    var handle: UInt16 { link.handle }
    let peer: ATTPeer
    let le: LEConnection
    var link: L2CAPLink { le.link }
    let server: ATTServer
    /// In front of the server: the device's planned faults; the device's updates go through it.
    let faultStage: FaultStage
    /// The link's credit based channels (the device's published SPSMs).
    var channels: CreditBasedChannels { le.channels }
    /// The client's Enhanced ATT bearers (the link's), each with the device's server on it
    /// behind its fault stage (EnhancedATT.swift).
    var enhanced: EnhancedBearers<EnhancedEndpoint> { le.enhanced }
    var parameters: LinkParameters
    var parameterTimer: TimerID?

    /// Where the device's next indication to this client goes: the unenhanced bearer, unless it
    /// has one waiting and the client set the EATT bit of Client Supported Features (Vol 3,
    /// Part G, 7.2, bit 1), which lets the server use any of its bearers; then an enhanced
    /// bearer with none waiting (one indication at a time per bearer, Part F, 3.3.2).
    func indicationStage(clientFeatures: UInt8) -> FaultStage {
        guard clientFeatures & EATT.clientSupportsEATT != 0, server.indicationsWaiting > 0,
              let idle = enhanced.entries.first(where: { $0.endpoint.server?.indicationsWaiting == 0 }),
              let stage = idle.endpoint.stage else { return faultStage }
        return stage
    }

    /// A notification the unenhanced bearer's full queue refused goes on an enhanced bearer of
    /// a client that set the EATT bit (7.2, bit 1), where the channel's own queue may take it.
    func notifyOnEnhancedBearer(_ characteristic: Characteristic, value: ArraySlice<UInt8>, clientFeatures: UInt8) -> UpdateOutcome {
        guard clientFeatures & EATT.clientSupportsEATT != 0 else { return .queueFull }
        for entry in enhanced.entries {
            guard let server = entry.endpoint.server, let stage = entry.endpoint.stage,
                  entry.bearer.hasRoomForNotification(of: min(value.count + 3, server.mtu), maximumPDU: ATTServer.maximumMTU) else { continue }
            let outcome = stage.notify(characteristic, value: value)
            if outcome != .queueFull { return outcome }
        }
        return .queueFull
    }

    init(peer: ATTPeer, le: LEConnection, server: ATTServer, faultStage: FaultStage, parameters: LinkParameters) {
        self.peer = peer
        self.le = le
        self.server = server
        self.faultStage = faultStage
        self.parameters = parameters
    }
}
