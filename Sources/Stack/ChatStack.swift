import BlemuCentral
import BlemuChat
import BlemuCore
import BlemuDevices
import BlemuHost
import BlemuRunLoop
import BlemuTransport
import Logging

/// A chat node's plan (`blemu chat`): a room on each controller, in a role each.
public struct ChatPlan: Sendable {
    /// The controllers, each with its role (host, member or auto).
    public var controllers: [(spec: ControllerSpec, role: ChatSide.Role)]
    /// The room: a host's advertised name; a member joins a host whose name contains it (nil: any).
    public var room: String?
    /// The name given (a host's advertised name), if any.
    public var name: String?
    /// This node's name when it is a member (the name given, else the machine's).
    public var memberName: String
    /// A member's Client Rx MTU (23 to 517).
    public var mtu = 517

    public init(controllers: [(spec: ControllerSpec, role: ChatSide.Role)], room: String?, name: String?, memberName: String) {
        self.controllers = controllers
        self.room = room
        self.name = name
        self.memberName = memberName
    }
}

/// A chat node assembled from its plan: a `ControllerStack` with the `chat` device per
/// controller, a `CentralHost` beside it on the controller where the node may be a member, a `ChatSide` each
/// and the `ChatNode` that bridges them; the clean stop and the fatal errors of them all.
public final class ChatStack {
    public let loop: RunLoop
    public let logger: Logger
    public let stacks: [ControllerStack]
    public let sides: [ChatSide]
    public let node: ChatNode
    /// The first fatal error, if any: the run's failure.
    public private(set) var failure: String?
    public private(set) var isStopping = false
    private var startupPages = StartupPages()

    public init(plan: ChatPlan, loop: RunLoop, logger: Logger) throws(StackFailure) {
        self.loop = loop
        self.logger = logger
        let defaultName = ChatDevice().profile.defaultName
        // A node that hosts at once (every controller a host) is the room: its name is the
        // room's, as the seed app's host; otherwise it is a member signing with its own name.
        let onlyHosts = plan.controllers.allSatisfy { $0.role == .host }
        let hostedRoom = plan.room ?? plan.name ?? defaultName
        let me = onlyHosts ? (plan.name ?? hostedRoom) : plan.memberName

        var stacks: [ControllerStack] = []
        var sides: [ChatSide] = []
        for (spec, role) in plan.controllers {
            let device = ChatDevice()
            device.hostName = me
            let stack = ControllerStack(spec: spec, loop: loop, logger: logger)
            let configuration: PeripheralConfiguration
            let roomName: String
            switch role {
            case .host:
                roomName = hostedRoom
                configuration = PeripheralConfiguration(name: roomName, controller: spec.description)
            case .member, .auto:
                roomName = plan.room ?? defaultName
                // Every node of a room may host it: each needs its own address (the name alone would give them one).
                configuration = PeripheralConfiguration(name: roomName, address: BluetoothAddress.staticRandom(seed: "blemu/chat/\(roomName)/\(me)"),
                                                        controller: spec.description)
            }
            do {
                try stack.add(device: device, configuration: configuration)
            } catch {
                throw StackFailure("chat device: \(error)")
            }
            guard let peripheral = stack.peripherals.first else { throw StackFailure("chat device: not created") }
            var central: CentralHost?
            if role != .host {
                let shared: CentralHost
                do {
                    shared = try CentralHost(on: stack.controller)
                } catch {
                    throw StackFailure("the central's own GATT database: \(error)")
                }
                central = shared
            }
            let side = ChatSide(role: role, room: roomName, roomFilter: role == .member ? plan.room : roomName, me: me,
                                device: device, peripheral: peripheral, central: central, mtu: plan.mtu, scheduler: loop, logger: logger)
            stacks.append(stack)
            sides.append(side)
            switch role {
            case .host: logger.notice("hosting chat room '\(roomName)' on \(spec)")
            case .member: logger.notice("joining chat room '\(plan.room ?? "any")' on \(spec)")
            case .auto: logger.notice("looking for chat room '\(roomName)' on \(spec)")
            }
        }
        self.stacks = stacks
        self.sides = sides
        node = ChatNode(me: me, sides: sides)
        for stack in stacks { stack.onFatal = { [unowned self] in fail($0) } }
        for side in sides { side.onFatal = { [unowned self] in fail($0) } }
        // A chat on a board runs for days: once every controller is ready and every host side
        // advertises, the pages only start-up used go back (as `blemu run` does).
        let roles = plan.controllers.map(\.role)
        for stack in stacks {
            stack.onStateMayChange = { [unowned self] _ in
                guard !isStopping else { return }
                let settled = self.stacks.indices.allSatisfy { index in
                    self.stacks[index].controller.isReady
                        && (roles[index] != .host || self.stacks[index].peripherals.allSatisfy(\.isAdvertising))
                }
                startupPages.release(once: settled, logger: logger)
            }
        }
    }

    /// A clean stop on SIGINT and SIGTERM, then every controller started.
    public func start() throws(StackFailure) {
        try SignalStop.install(on: loop, isStopping: { [unowned self] in isStopping }, stop: { [unowned self] in stop() })
        for stack in stacks { stack.start() }
    }

    /// Every side stopped, every controller reset, then the loop.
    public func stop() {
        guard !isStopping else { return }
        isStopping = true
        for side in sides { side.stop() }
        ControllerStack.stopAll(stacks) { [loop] in loop.stop() }
    }

    /// Stops with `message` as the run's failure (the first one is kept).
    public func fail(_ message: String) {
        if failure == nil { failure = message }
        stop()
    }
}
