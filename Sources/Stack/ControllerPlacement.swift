import BlemuHCI
import BlemuTransport

/// Which controller connection each device of `blemu run` goes on (`RunStack`; issue 38,
/// Docs/REFERENCE.md "Fleets"). rootcanal's radio work is every advertising packet times every
/// controller on its air (PERFORMANCE.md, "A fleet over the air"), so a fleet is put on as few
/// connections as the rules allow:
///
/// - On an `hciN` or `serial:` spec, or any with `--share-controller`: one connection for all
///   its devices (an adapter opens once).
/// - On a `tcp:` or `unix:` spec whose advertising sets were asked (`ControllerProbe`), a
///   connectable fleet member opens a connection of its own, and a broadcasting fleet member
///   takes a free set on one already open there, those with a connectable member first, or
///   opens one. So a connection holds at most one device that takes links: rootcanal hands a
///   controller's incoming link data to the first of its links with that peer's address
///   (AclConnectionHandler::GetHandle), and a gateway linked to two connectable members of one
///   controller got both links' data on one of them. Broadcasters take no links.
/// - Any other device: a connection of its own (each `tcp:` connection is a controller of its own).
///
/// Connections are numbered in the order the plans first use them.
public struct ControllerPlacement: Equatable, Sendable {
    /// Each plan's connection.
    public let connectionOfPlan: [Int]
    public let connectionCount: Int

    /// What the placement did on one spec whose sets were asked, for the run's notice.
    public struct PooledSpec: Equatable, Sendable {
        public let spec: ControllerSpec
        public let sets: Int
        public let members: Int
        public let connectableMembers: Int
        public let connections: Int

        /// `fleet members on tcp:…: 1100 on 100 connection(s), 16 a connection (the advertising
        /// sets the controller reports); 100 connectable, one a connection`.
        public var notice: String {
            "fleet members on \(spec): \(members) on \(connections) connection(s), \(sets) a connection (the advertising sets the controller reports)"
                + (connectableMembers > 0 ? "; \(connectableMembers) connectable, one a connection" : "")
        }
    }
    public let pooled: [PooledSpec]

    /// The sets of a connection used: at most `HCIHost.fleetMembersPerConnection`, so the
    /// members' starts fit the HCI command queue (`HCIHost.maxQueuedCommands`).
    static func usableSets(_ reported: Int) -> Int { max(1, min(reported, HCIHost.fleetMembersPerConnection)) }

    public static func place(_ plans: [DevicePlan], options: RunOptions) -> ControllerPlacement {
        var kinds = DevicePlanning.BroadcasterKinds()
        var raw = [Int?](repeating: nil, count: plans.count)
        var opened = 0
        func open() -> Int {
            opened += 1
            return opened - 1
        }
        // The connections on each pooled spec with sets still free for broadcasters, in the order opened.
        var free: [ControllerSpec: [(connection: Int, sets: Int)]] = [:]
        var pooledOrder: [ControllerSpec] = []
        var members: [ControllerSpec: (all: Int, connectable: Int, connections: Set<Int>)] = [:]
        func setsAsked(_ plan: DevicePlan) -> Int? {
            guard plan.fleet != nil, RunStack.poolsFleetMembers(plan.spec, options: options) else { return nil }
            return options.advertisingSets[plan.spec].map(Self.usableSets)
        }
        func count(_ plan: DevicePlan, on connection: Int, connectable: Bool) {
            if members[plan.spec] == nil { pooledOrder.append(plan.spec) }
            members[plan.spec, default: (0, 0, [])].all += 1
            if connectable { members[plan.spec, default: (0, 0, [])].connectable += 1 }
            members[plan.spec, default: (0, 0, [])].connections.insert(connection)
        }
        // Connectable members first, each opening its connection, so the broadcasters fill those.
        for (index, plan) in plans.enumerated() {
            guard let sets = setsAsked(plan), !kinds.isBroadcaster(plan.device) else { continue }
            let connection = open()
            raw[index] = connection
            if sets > 1 { free[plan.spec, default: []].append((connection, sets - 1)) }
            count(plan, on: connection, connectable: true)
        }
        for (index, plan) in plans.enumerated() {
            guard let sets = setsAsked(plan), kinds.isBroadcaster(plan.device) else { continue }
            let connection: Int
            var withRoom = free[plan.spec] ?? []
            if let slot = withRoom.firstIndex(where: { $0.sets > 0 }) {
                connection = withRoom[slot].connection
                withRoom[slot].sets -= 1
            } else {
                connection = open()
                withRoom.append((connection, sets - 1))
            }
            free[plan.spec] = withRoom
            raw[index] = connection
            count(plan, on: connection, connectable: false)
        }
        var shared: [ControllerSpec: Int] = [:]
        for (index, plan) in plans.enumerated() where raw[index] == nil {
            if RunStack.sharesOneController(plan.spec, options: options) {
                if let connection = shared[plan.spec] {
                    raw[index] = connection
                } else {
                    let connection = open()
                    shared[plan.spec] = connection
                    raw[index] = connection
                }
            } else {
                raw[index] = open()
            }
        }
        // Numbered by first use in the plans' order.
        var number: [Int: Int] = [:]
        let connectionOfPlan = raw.map { connection in
            let connection = connection ?? 0
            if let known = number[connection] { return known }
            number[connection] = number.count
            return number.count - 1
        }
        let pooled = pooledOrder.compactMap { spec -> PooledSpec? in
            guard let counted = members[spec], let sets = options.advertisingSets[spec] else { return nil }
            return PooledSpec(spec: spec, sets: usableSets(sets), members: counted.all, connectableMembers: counted.connectable,
                              connections: counted.connections.count)
        }
        return ControllerPlacement(connectionOfPlan: connectionOfPlan, connectionCount: number.count, pooled: pooled)
    }
}
