import BlemuConnection
import BlemuCore
import BlemuHCI

/// Advertising a host programs request by request (the programmable host's, BlemuProgrammableHost)
/// rather than a device's own (`DeviceAdvertiser`), on a `PeripheralHost` beside its devices. Its
/// sets come from the role's `advertiser`; the links they accept become links of `acceptingPeripheral`
/// (a device whose configuration says `programmedAdvertising`: it takes no set of its own), with
/// what every peripheral link has (GATT server, Security Manager, credit based channels). The
/// host hands it what concerns its sets: a link made from one, the end of one, the controller's.
public protocol ProgrammedAdvertisingRoute: AnyObject {
    /// The device whose links the program's advertising makes.
    var acceptingPeripheral: Peripheral? { get }
    /// Sets the program may use at once (counted with the devices' for the choice of legacy or
    /// extended commands, `ControllerHost.usesExtendedCommands`).
    var advertisingSetsWanted: Int { get }
    /// Whether it may advertise with extended PDUs (the extended commands even for one set).
    var wantsExtendedAdvertising: Bool { get }
    /// The address a link made from `set` was advertised from, when the set is the program's
    /// (nil: the legacy advertising of a controller driven with legacy commands); nil when it is not.
    func advertisedAddress(ofSet set: UInt8?) -> LEAddress?
    /// The identity address a link made from `set` distributes in its pairing when the set
    /// advertised from a resolvable private address the program made (Vol 3, Part H, 3.6.5: the
    /// identity the address resolves to, never the private address); nil: as the device decides.
    func identityAddress(ofSet set: UInt8?) -> LEAddress?
    /// A link was made from the program's `set` (which the controller stopped with it):
    /// `connection` is the link opened on `acceptingPeripheral` with its `event`, nil when the
    /// device refused it (its link limit: the link is disconnected) or when the set names a link
    /// that is not open (its LE Connection Complete failed or never came).
    func linkMade(_ connection: LEConnection?, event: LEConnectionComplete?, set: UInt8?)
    /// The program's `set` ended without a link: LE Advertising Set Terminated with an error
    /// (7.7.65.18), or a failed LE Connection Complete of legacy advertising (7.7.65.1: Advertising
    /// Timeout, 0x3C, for high duty cycle directed advertising).
    func advertisingEnded(set: UInt8?, status: UInt8)
    /// A link of the role closed with `reason` (Disconnection Complete, Vol 4, Part E, 7.7.5):
    /// room for advertising that waited; `ofAcceptingPeripheral`, the link was the program's device's.
    func linkClosed(_ handle: UInt16, reason: UInt8, ofAcceptingPeripheral: Bool)
    /// The controller's resolving list changes: it refuses that while advertising with address
    /// resolution on (Vol 4, Part E, 7.8.38), so advertising goes off until `resolvingListChangeEnded`.
    func resolvingListChangeBegins()
    /// The change is done: advertising goes on.
    func resolvingListChangeEnded()
    /// The controller is ready (after the devices took their sets).
    func controllerReady()
    /// The controller was reset (`reset` true) or went away: its sets and their advertising are gone.
    func controllerGone(reset: Bool, reason: String)
    /// A stop of the host began: nothing starts any more.
    func stopBegan()
    /// The stop turns advertising off.
    func closeForStop()
}
