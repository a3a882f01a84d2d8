import BlemuCore
import BlemuDevice
import BlemuGATT
import BlemuSMP
import BlemuSecurity
import Logging

/// What only a device that takes connections has: its GATT database (the device's services with
/// the stack's GAP, GATT and Diagnostics), its Security Manager with the bond file, what bonded
/// clients keep, and its links. A `Peripheral` makes them for a connectable device; a
/// broadcaster (`BroadcastingDevice`), which never takes a connection, has none of them.
final class ConnectionParts {
    let database: GATTDatabase
    let standard: StandardServices
    let diagnostics: DiagnosticsService
    /// Pairing, encryption and bonds of the device's links (the SMP channel, LTK requests).
    let security: PeripheralSecurity
    /// What bonded centrals keep across links (CCCDs, caching state, SignCounter, Database Hash).
    let bondedClients: BondedClients
    /// The device's links: the open ones, making them, their parameters, disconnecting.
    let links: DeviceLinks

    /// `services`: the device's own (GAP, GATT and Diagnostics are added here).
    init(device: Device, services: [Service], configuration: PeripheralConfiguration, profile: DeviceProfile,
         address: BluetoothAddress, host: PeripheralHost, faults: FaultPlan, logger: Logger) throws(GATTDatabaseError) {
        let usable = profile.connectionParameters.coreViolations.isEmpty ? profile.connectionParameters : .recommended
        standard = StandardServices(name: configuration.name, appearance: profile.appearance, parameters: usable,
                                    privacy: configuration.privacy)
        let diagnostics = DiagnosticsService()
        // A device that places a service of the stack's own at recorded handles (a recorded
        // device's GAP, GATT or Diagnostics) serves it instead: the recorded one wins, so a
        // central that cached the original's handles finds them. Its Service Changed, if any,
        // is the one the stack indicates through.
        let placedByDevice = Set(services.filter { $0.placement != nil }.map(\.uuid))
        // GAP and GATT first, Diagnostics after the device's services: the handles every
        // built-in device has always had (a central caches them).
        let ownFirst = [standard.gap, standard.gatt].filter { !placedByDevice.contains($0.uuid) }
        let ownLast = [diagnostics.service].filter { !placedByDevice.contains($0.uuid) }
        if placedByDevice.contains(GATTType.gattService),
           let recorded = services.first(where: { $0.uuid == GATTType.gattService })?
               .characteristics.first(where: { $0.uuid == GATTType.serviceChanged && $0.properties.contains(.indicate) }) {
            standard.serviceChanged = recorded
        }
        database = try GATTDatabase(services: ownFirst + services + ownLast)
        self.diagnostics = diagnostics
        var securityConfiguration = configuration.security
        // The device's permissions say how long a key its protected values need: a pairing that
        // would leave a shorter one is refused at once (Encryption Key Size, 0x06).
        securityConfiguration.minimumEncryptionKeySize = max(securityConfiguration.minimumEncryptionKeySize,
                                                             database.requiredEncryptionKeySize)
        security = PeripheralSecurity(
            configuration: securityConfiguration,
            owner: BondOwner(device: type(of: device).deviceName, name: configuration.name, address: address),
            localAddress: LEAddress(address, isRandom: true), bondAttachment: BondedClientState.format,
            scheduler: host.scheduler, logger: logger)
        bondedClients = BondedClients(security: security, database: database, standard: standard, scheduler: host.scheduler,
                                      logger: logger)
        links = DeviceLinks(hci: host.hci, scheduler: host.scheduler, configuration: configuration, preferredParameters: usable,
                            database: database, faults: faults, security: security, logger: logger)
    }
}

/// A broadcaster's identity (its IRK, Vol 3, Part H, 2.4.2.1), for the resolvable private
/// addresses it advertises from with `--privacy`: the identity file a connectable device's
/// Security Manager keeps (`DeviceIdentityStore`), read or made at the first private address,
/// so a broadcaster's addresses resolve with the same key as before, without a Security Manager.
final class BroadcasterIdentity {
    private let path: String?
    private let owner: BondOwner
    private let logger: Logger
    private var loaded: SMPIdentity?

    init(path: String?, owner: BondOwner, logger: Logger) {
        self.path = path
        self.owner = owner
        self.logger = logger
    }

    var resolvingKey: [UInt8] {
        if let loaded { return loaded.resolvingKey }
        var random = SystemRandomNumberGenerator()
        let made = DeviceIdentityStore.loadOrCreate(path: path, owner: owner, logger: logger, random: &random)
        loaded = made
        return made.resolvingKey
    }
}
