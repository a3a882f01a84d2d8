import BlemuATT
import BlemuConnection
import BlemuCore
import BlemuGATT
import BlemuSecurity
import Logging

/// The bonded clients' GATT state of one device (`BondedClientState`, kept with each bond by
/// `PeripheralSecurity`): given back to a link's server when a bonded central returns, and
/// kept when the central changes it or its link closes.
final class BondedClients {
    let security: PeripheralSecurity
    let database: GATTDatabase
    let standard: StandardServices
    let scheduler: TimerScheduling
    var logger: Logger

    init(security: PeripheralSecurity, database: GATTDatabase, standard: StandardServices, scheduler: TimerScheduling,
         logger: Logger) {
        self.security = security
        self.database = database
        self.standard = standard
        self.scheduler = scheduler
        self.logger = logger
    }

    /// The state kept with the bond of the central on `handle` (nil: no bond).
    func state(on handle: UInt16) -> BondedClientState? {
        security.bond(on: handle)?.client
    }

    private func change(on handle: UInt16, onlyIfBondedLink: Bool, write: PeripheralSecurity.BondWrite,
                        _ update: (inout BondedClientState) -> Void) {
        // The link's own state first: cheaper than a bond lookup (which may resolve addresses).
        if onlyIfBondedLink && !security.security(of: handle).isBonded { return }
        guard var state = state(on: handle) else { return }
        update(&state)
        security.setBondAttachment(state.attachment, on: handle, onlyIfBondedLink: onlyIfBondedLink, write: write)
    }

    // MARK: Back when a bonded central returns

    /// A link opens: a bonded central's CSRK and SignCounter verify its signed writes (Vol 3,
    /// Part C, 10.4: also on a link it does not encrypt), and its caching state is back.
    func linkOpened(_ connection: LEConnection, log: inout LogBudget) {
        connection.session.signing = signingState(on: connection.handle)
        restoreCachingState(on: connection, log: &log)
    }

    /// A bonded central's Client Supported Features and change-awareness are back when its link
    /// opens (Vol 3, Part G, 2.5.2.1): a robust-caching client that was change-unaware when it
    /// left, or whose database changed while it was away (another Database Hash), gets Database
    /// Out Of Sync until it reads the hash or confirms Service Changed. Done at once, before
    /// encryption, so the client's first request already sees it.
    func restoreCachingState(on connection: LEConnection, log: inout LogBudget) {
        guard let state = state(on: connection.handle), state.clientSupportedFeatures != 0 else { return }
        let session = connection.session
        session.restoreClientFeatures(state.clientSupportedFeatures)
        let changedWhileAway = state.databaseHash.map { $0 != database.hash } ?? false
        if session.clientSupportsRobustCaching && (!state.changeAware || changedWhileAway) {
            session.becomeChangeUnaware()
            // A central sets the pace of its connections: budgeted.
            guard let leftOut = log.take(now: scheduler.nowNanoseconds, for: logger) else { return }
            logger.info("\(connection.peer.address) is a bonded robust-caching client \(changedWhileAway ? "whose database changed while it was away" : "that left change-unaware"): Database Out Of Sync until it reads the Database Hash or confirms Service Changed\(LogBudget.note(leftOut))",
                        metadata: [LogKey.peer: .string(connection.peer.address.description), LogKey.connHandle: .string("\(connection.handle)")])
        }
    }

    /// The CSRK and last SignCounter of the bond of the central on `handle`, if it gave a CSRK.
    func signingState(on handle: UInt16) -> ATTSigningState? {
        guard let bond = security.bond(on: handle), let key = bond.signatureKey else { return nil }
        return ATTSigningState(signatureKey: key, lastCounter: bond.client.signCounter)
    }

    /// The link's security changed (`PeripheralSecurity.securityChanged`): bonded now, its
    /// caching state is kept with the bond; a pairing that just made a bond with a CSRK verifies
    /// signed writes from now on; encrypted with a bond's key, the subscriptions it left are
    /// back (Vol 3, Part G, 3.3.3.3) and it hears of changes made while it was away.
    func securityChanged(_ state: LinkSecurity, on connection: LEConnection) {
        let handle = connection.handle
        let session = connection.session
        if state.isBonded { cachingStateKnown(on: connection) }
        if session.signing == nil { session.signing = signingState(on: handle) }
        guard state.isEncrypted, state.isBonded, let kept = self.state(on: handle) else { return }
        if !kept.clientConfigurations.isEmpty { connection.server?.restoreClientConfigurations(kept.clientConfigurations) }
        tellOfChangesWhileAway(kept, on: connection)
        // A new bond keeps the subscriptions made before the pairing finished.
        subscriptionsChanged(on: connection)
    }

    /// A bonded central that enabled Service Changed and comes back to a database that changed
    /// while it was away (another Database Hash) hears of it: the whole range (Vol 3, Part G, 7.1).
    private func tellOfChangesWhileAway(_ kept: BondedClientState, on connection: LEConnection) {
        guard let known = kept.databaseHash, known != database.hash,
              connection.session.isSubscribed(standard.serviceChanged, indications: true),
              let stage = connection.stage else { return }
        let outcome = stage.indicateServiceChanged(standard.serviceChanged, range: 0x0001...0xFFFF)
        logger.event(.stateChanged, .notice,
                     "the database changed while \(connection.peer.address) was away: Service Changed 0x0001-0xFFFF \(outcome == .queued ? "indicated" : "not sent (\(outcome))")",
                     [LogKey.peer: .string(connection.peer.address.description), LogKey.connHandle: .string("\(connection.peer.connectionHandle)")])
    }

    // MARK: Kept when it changes

    /// The client's CCCD values changed: a bonded link's reach the bond file within
    /// `PeripheralSecurity.bondWriteDelay` (Vol 3, Part G, 3.3.3.3).
    func subscriptionsChanged(on connection: LEConnection) {
        let values = connection.session.clientConfigurationValues
        change(on: connection.handle, onlyIfBondedLink: true, write: .soon) { $0.clientConfigurations = values }
    }

    /// The Client Supported Features and change-awareness of a bonded link's client (2.5.2.1:
    /// persistent across connections for a bonded client), written now. `features`: just
    /// written by the client (else those the link has).
    func cachingStateKnown(on connection: LEConnection, features written: UInt8? = nil) {
        let features = written ?? connection.session.clientFeatures
        let changeAware = connection.session.isChangeAware
        change(on: connection.handle, onlyIfBondedLink: true, write: .now) {
            $0.clientSupportedFeatures = features
            $0.changeAware = changeAware
        }
    }

    /// A signed write was verified with the bond's CSRK: its SignCounter is kept (written within
    /// `bondWriteDelay`, and when the link closes), so neither a replay nor an older counter is
    /// taken later, also after a restart.
    func signCounterAccepted(_ counter: UInt32, on handle: UInt16) {
        change(on: handle, onlyIfBondedLink: false, write: .soon) { $0.signCounter = counter }
    }

    /// The link closes: what a bonded central knew of the database, for when it comes back
    /// (Vol 3, Part G, 7.1), and its caching state.
    func linkClosing(_ connection: LEConnection) {
        let hash = database.hash
        change(on: connection.handle, onlyIfBondedLink: true, write: .now) { $0.databaseHash = hash }
        cachingStateKnown(on: connection)
    }
}
