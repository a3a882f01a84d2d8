import BlemuCentral
import BlemuConnection
import BlemuCore

/// The programmable host's links, of both roles, in one table: each under a link id the host
/// gives (a Pandora `Connection` token), never reused while the process runs, so a program that
/// holds an old id is told `unknown-link` rather than acting on a newer link that reused the
/// HCI handle (Vol 4, Part E, 5.3.1 lets the controller reuse it at once).
public final class HostLinks {
    public struct Entry {
        public let id: Int
        public let role: HostRole
        /// The link, whichever role made it.
        public let connection: LEConnection
        /// The central's link with its GATT client, for a link made in the central role.
        public let central: CentralLink?
        public let ownAddress: LEAddress
        public let attempt: Int?
        public let advertisement: Int?

        public var handle: UInt16 { connection.handle }

        public var summary: HostLinkSummary {
            HostLinkSummary(link: id, role: role, handle: handle, peer: connection.peer.leAddress, ownAddress: ownAddress,
                            attempt: attempt, advertisement: advertisement, interval: connection.parameters.interval,
                            latency: connection.parameters.latency, supervisionTimeout: connection.parameters.supervisionTimeout,
                            security: connection.security.current)
        }
    }

    /// The open links by id, in the order they opened (ids only grow).
    public private(set) var entries: [Entry] = []
    private var nextID = 1

    public init() {}

    public var count: Int { entries.count }

    /// Records an open link; returns its new id.
    @discardableResult
    public func add(role: HostRole, connection: LEConnection, central: CentralLink? = nil, ownAddress: LEAddress,
                    attempt: Int? = nil, advertisement: Int? = nil) -> Entry {
        // A handle names one link at a time: an entry still on it is gone (its close was missed).
        entries.removeAll { $0.handle == connection.handle }
        let entry = Entry(id: nextID, role: role, connection: connection, central: central, ownAddress: ownAddress,
                          attempt: attempt, advertisement: advertisement)
        nextID += 1
        entries.append(entry)
        return entry
    }

    public func entry(id: Int) -> Entry? { entries.first { $0.id == id } }
    public func entry(handle: UInt16) -> Entry? { entries.first { $0.handle == handle } }

    /// Whether a link to this peer (address and type) is open.
    public func isConnected(to peer: BluetoothAddress) -> Bool {
        entries.contains { $0.connection.peer.leAddress.address == peer }
    }

    /// Removes the link on `handle`; returns it (nil when none is there).
    @discardableResult
    public func remove(handle: UInt16) -> Entry? {
        guard let index = entries.firstIndex(where: { $0.handle == handle }) else { return nil }
        return entries.remove(at: index)
    }
}
