import BlemuCore
import BlemuHCI
import BlemuRunLoop
import BlemuTransport
import Logging

/// How many advertising sets the controllers behind a spec run at once, asked before the devices
/// are placed on them: a fleet's members on a `tcp:` or `unix:` spec (where each connection is a
/// controller of its own, as rootcanal's are) share connections that many at a time
/// (`ControllerPlacement`), instead of one connection each or one for all.
public enum ControllerProbe {
    /// Opens `spec` once with no device on it, lets the controller initialize (HCI Reset, its
    /// features, LE Read Number of Supported Advertising Sets: Vol 4, Part E, 7.8.58), and closes
    /// it again. The sets it reported (at most `HCIHost.fleetMembersPerConnection`), or 1 without LE Extended Advertising (Vol 6, Part B, 4.6,
    /// feature bit 12: one legacy advertiser).
    public static func advertisingSets(_ spec: ControllerSpec, loop: RunLoop, logger: Logger,
                                       timeout: Duration = .seconds(15)) throws(StackFailure) -> Int {
        let stack = ControllerStack(spec: spec, loop: loop, logger: logger)
        var failure: String?
        stack.onFatal = { failure = $0 }
        stack.start()
        let deadline = loop.nowNanoseconds + timeout.nanoseconds
        while !stack.controller.isReady, failure == nil, loop.nowNanoseconds < deadline {
            loop.runOnce(timeout: .milliseconds(100))
        }
        let ready = stack.controller.isReady
        let info = stack.controller.hci.info
        var stopped = false
        stack.stop { stopped = true }
        let stopDeadline = loop.nowNanoseconds + Duration.seconds(5).nanoseconds
        while !stopped, loop.nowNanoseconds < stopDeadline { loop.runOnce(timeout: .milliseconds(100)) }
        if let failure { throw StackFailure("controller \(spec): \(failure)") }
        guard ready else {
            throw StackFailure("controller \(spec) did not finish its initialization within \(timeout) when asked how many advertising sets it runs")
        }
        // At most `HCIHost.fleetMembersPerConnection`: so many members' starts fit the command queue.
        return info.supportsExtendedAdvertising && info.advertisingSets > 0
            ? min(info.advertisingSets, HCIHost.fleetMembersPerConnection) : 1
    }

    /// The specs whose advertising sets a run needs to know: the `tcp:` and `unix:` specs with
    /// more than one broadcasting fleet member on them (`pooledMembers`), unless every device of
    /// a spec shares one connection anyway (`--share-controller`).
    public static func specsToProbe(_ plans: [DevicePlan], options: RunOptions) -> [ControllerSpec] {
        pooledMembers(plans, options: options).filter { $0.members > 1 }.map(\.spec)
    }

    /// The fleet members that share connections, by spec in the plans' order: a broadcasting
    /// fleet's members on a `tcp:` or `unix:` spec (a connectable member has a connection of its
    /// own, which they may share: `ControllerPlacement`).
    public static func pooledMembers(_ plans: [DevicePlan], options: RunOptions) -> [(spec: ControllerSpec, members: Int)] {
        var kinds = DevicePlanning.BroadcasterKinds()
        var pooled: [(spec: ControllerSpec, members: Int)] = []
        for plan in plans where plan.fleet != nil && RunStack.poolsFleetMembers(plan.spec, options: options)
            && kinds.isBroadcaster(plan.device) {
            if let index = pooled.firstIndex(where: { $0.spec == plan.spec }) {
                pooled[index].members += 1
            } else {
                pooled.append((plan.spec, 1))
            }
        }
        return pooled
    }
}
