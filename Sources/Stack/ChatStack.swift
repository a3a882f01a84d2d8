import BlemuCentral
import BlemuChat
import BlemuChatProtocol
import BlemuCore
import BlemuCrypto
import BlemuDevices
import BlemuHost
import BlemuRunLoop
import BlemuSecurity
import BlemuService
import BlemuTransport
import Logging

#if canImport(Glibc)
import Glibc
#endif

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
    /// Where the node's key and the names bound to keys live (Docs/CHAT.md, "Identity"); nil:
    /// no identity, the node's lines unsigned and what it hears unchecked (the open room of old).
    public var stateDirectory: String?
    /// Refuse unsigned lines: plain clients' writes and unsigned frames (`--signed-only`).
    public var signedOnly = false
    /// A private room's passphrase (`--passphrase-file`); nil: an open room.
    public var passphrase: [UInt8]?
    /// The chat characteristics need an encrypted link (`--require-encryption`): Just Works is
    /// enough, an authenticated key with `passkey`.
    public var requireEncryption = false
    /// A host's static pairing passkey (a central types it: Passkey Entry, an authenticated
    /// key); a member's, typed when a host asks for one.
    public var passkey: UInt32?
    /// How members reach a host, and whether a host publishes its chat channel (`--transport`).
    public var transport: ChatTransport = .auto

    public init(controllers: [(spec: ControllerSpec, role: ChatSide.Role)], room: String?, name: String?, memberName: String) {
        self.controllers = controllers
        self.room = room
        self.name = name
        self.memberName = memberName
    }

    /// The node's name in its lines: a node that only hosts is the room (the seed app's host),
    /// otherwise a member speaking with its own name.
    public var me: String {
        controllers.allSatisfy({ $0.role == .host }) ? (name ?? hostedRoom) : memberName
    }

    /// The room a host side hosts: --room, else its name, else the chat device's.
    var hostedRoom: String { room ?? name ?? ChatDevice().profile.defaultName }

    /// The room's name, which every node of a room must agree on (signatures cover it): the
    /// hosted room's where this node may host (an auto side hosts `--room`), nil when it only
    /// joins: then it is the advertised name of the first host joined.
    public var signedRoom: String? {
        if controllers.contains(where: { $0.role == .host }) { return hostedRoom }
        if controllers.contains(where: { $0.role == .auto }) { return room ?? ChatDevice().profile.defaultName }
        return nil
    }

    /// The room whose names `--pin-name` and `--forget-name` bind: the one a run signs in, else
    /// the room as given (a member's is its host's name: `--room` given whole).
    public var namingRoom: String { signedRoom ?? room ?? name ?? "" }
}

extension ChatPlan {
    /// A private room's passphrase (`--passphrase-file`): the file's bytes (4 KiB at most, read
    /// through `RegularFile`: a FIFO is refused), one trailing newline taken off; never empty
    /// (an empty one would be a room anyone can read, thinking it private).
    public static func readPassphrase(_ path: String) throws(StackFailure) -> [UInt8] {
        var bytes: [UInt8]
        switch RegularFile.read(path, maximumBytes: 4096, followSymlinks: true) {
        case .success(let read): bytes = read
        case .failure(let error): throw StackFailure("--passphrase-file \(path.visible): \(error)")
        }
        if bytes.last == UInt8(ascii: "\n") { bytes.removeLast() }
        guard !bytes.isEmpty else { throw StackFailure("--passphrase-file \(path.visible) is empty: a private room needs a passphrase") }
        return bytes
    }
}

/// A chat node assembled from its plan: a `ControllerStack` with the `chat` device per
/// controller, a `CentralHost` beside it on the controller where the node may be a member, a `ChatSide` each
/// and the `ChatNode` that bridges them; the clean stop and the fatal errors of them all; what
/// systemd is told (a `Type=notify` unit, Docs/CHAT.md "As a service"): READY=1 once every side
/// is in its room, STATUS= kept current, WATCHDOG=1 when the unit asks for it, STOPPING=1.
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
    /// The node's keys, names and marks: the marks not saved yet are saved at the clean stop.
    private let store: ChatIdentityStore?
    /// sd_notify(3), when systemd started the node with a NOTIFY_SOCKET (else every call returns at once).
    private let service: ServiceNotifier
    /// STATUS= rebuilt at most this often (as `blemu run`'s): it is asked for after every HCI event.
    static let serviceStatusGap: Duration = .milliseconds(100)
    private var serviceStatusUpdate: SpacedAction?
    /// The status systemd was told last: the line is built and sent only when it changes.
    private var reportedStatus: ChatServiceStatus?
    /// The last controller trouble (lost, unreachable), for STATUS=.
    private var lastError: String?
    /// Each side's controller, as the status line names it.
    private let controllerNames: [String]

    public init(plan: ChatPlan, loop: RunLoop, logger: Logger) throws(StackFailure) {
        self.loop = loop
        self.logger = logger
        service = ServiceNotifier(logger: logger)
        controllerNames = plan.controllers.map(\.spec.description)
        let defaultName = ChatDevice().profile.defaultName
        let hostedRoom = plan.hostedRoom
        let me = plan.me
        // The node's identity and trust, in the room's name; a node that only joins learns the
        // name from its host (the first one it joins), and makes its trust then.
        let store = plan.stateDirectory.map { ChatIdentityStore(directory: $0, logger: logger) }
        self.store = store
        func makeTrust(room: String) throws(StackFailure) -> ChatTrust {
            guard let store else { preconditionFailure("a trust without a state directory") }
            do {
                return try store.trust(room: room, me: me, signedOnly: plan.signedOnly, passphrase: plan.passphrase, scheduler: loop)
            } catch {
                throw StackFailure("\(error)")
            }
        }
        var trust: ChatTrust?
        if store != nil, let room = plan.signedRoom { trust = try makeTrust(room: room) }

        var stacks: [ControllerStack] = []
        var sides: [ChatSide] = []
        let requirement: ChatDevice.LinkRequirement = !plan.requireEncryption ? .none : plan.passkey == nil ? .encrypted : .authenticated
        for (index, (spec, role)) in plan.controllers.enumerated() {
            let device = ChatDevice(linkRequirement: requirement, transport: plan.transport)
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
            var withSecurity = configuration
            withSecurity.security = Self.hostSecurity(plan: plan, configuration: configuration, index: index)
            do {
                try stack.add(device: device, configuration: withSecurity)
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
                // A controller without a public address (00:00:00:00:00:00) has the member
                // connect from, and name as its identity, the chat device's static random
                // address: the controller's one random address, which the device advertises from.
                shared.ownRandomAddress = peripheral.address
                // A host that needs an encrypted link is paired with, and the bond kept.
                shared.attach(security: Self.memberSecurity(plan: plan, me: me, index: index, loop: loop, logger: logger))
                central = shared
            }
            let side = ChatSide(role: role, room: roomName, roomFilter: role == .member ? plan.room : roomName, me: me,
                                device: device, peripheral: peripheral, central: central, mtu: plan.mtu, scheduler: loop, logger: logger,
                                trust: trust)
            // A bridge's rooms are one room, of one name: its members join only a host of it.
            if let signedRoom = plan.signedRoom, store != nil, role == .member { side.enter(room: signedRoom, trust: trust) }
            side.transport = plan.transport
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
        let awaitingTrust = store != nil && trust == nil
        node = ChatNode(me: me, sides: sides, trust: trust, awaitingTrust: awaitingTrust)
        if awaitingTrust {
            // Only members: the room is the first host's name, on every side from then on.
            for side in sides {
                side.onJoinedHost = { [unowned self] name in
                    guard self.node.awaitingTrust else { return }
                    let joined: ChatTrust
                    do {
                        joined = try makeTrust(room: name)
                    } catch {
                        return self.fail("\(error)")
                    }
                    logger.notice("chat room '\(name.visible)': signing as \(me.visible) (\(joined.identity?.publicKey.fingerprint ?? "no key"))")
                    for side in self.sides { side.enter(room: name, trust: joined) }
                    self.node.adopt(joined)
                }
            }
        }
        for stack in stacks { stack.onFatal = { [unowned self] in fail($0) } }
        for side in sides { side.onFatal = { [unowned self] in fail($0) } }
        // A chat on a board runs for days: once every controller is ready and every host side
        // advertises, the pages only start-up used go back (as `blemu run` does).
        let roles = plan.controllers.map(\.role)
        for stack in stacks {
            stack.onStateMayChange = { [unowned self] error in
                guard !isStopping else { return }
                if let error { lastError = error }
                let settled = self.stacks.indices.allSatisfy { index in
                    self.stacks[index].controller.isReady
                        && (roles[index] != .host || self.stacks[index].peripherals.allSatisfy(\.isAdvertising))
                }
                startupPages.release(once: settled, logger: logger)
                serviceStatusUpdate?.request()
            }
        }
        // `started` once every controller came up (as `blemu run` logs it: BLEMU_EVENT=started).
        var waitingForFirstUp = stacks.count
        for stack in stacks {
            stack.onFirstUp = { [unowned self] in
                waitingForFirstUp -= 1
                guard waitingForFirstUp == 0, !isStopping else { return }
                logger.event(.started, .notice, "blemu \(blemuVersion) started: chat as \(me.visible), \(Self.startedRooms(plan))")
            }
        }
        if service.isEnabled {
            // Told after every HCI event (advertising, links, controllers) and each change of a
            // side's place in its room (members join and leave over ATT and channels, not HCI
            // events): at most every 100 ms, the last change never lost; no timer while none comes.
            serviceStatusUpdate = SpacedAction(scheduler: loop, gap: Self.serviceStatusGap) { [unowned self] in reportServiceStatus() }
            for side in sides { side.onPresenceMayChange = { [unowned self] in serviceStatusUpdate?.request() } }
        }
    }

    /// The rooms as the `started` line names them: `hosting 'kitchen' on hci0`.
    static func startedRooms(_ plan: ChatPlan) -> String {
        plan.controllers.map { spec, role in
            switch role {
            case .host: "hosting '\(plan.hostedRoom.visible)' on \(spec)"
            case .member: "joining '\((plan.room ?? "any room").visible)' on \(spec)"
            case .auto: "joining or hosting '\((plan.room ?? ChatDevice().profile.defaultName).visible)' on \(spec)"
            }
        }.joined(separator: ", ")
    }

    /// Where the node is in each of its rooms now: systemd's STATUS= line (`line`) and READY=1
    /// (`isReady`).
    public var serviceStatus: ChatServiceStatus {
        ChatServiceStatus(rooms: sides.indices.map { index in
            ChatServiceStatus.Room(name: sides[index].roomName, controller: controllerNames[index], presence: sides[index].presence,
                                   controllerUp: stacks[index].link.isUp)
        }, lastError: lastError)
    }

    /// READY=1 the first time every side is in its room, STATUS= whenever the status changed.
    private func reportServiceStatus() {
        guard service.isEnabled, !isStopping else { return }
        let status = serviceStatus
        guard status != reportedStatus else { return }
        reportedStatus = status
        if !service.isReady && status.isReady {
            service.ready(status: status.line)
        } else {
            service.update(status: status.line)
        }
    }

    /// The chat device's pairing: its passkey, its bonds and IRK in the state directory (so a
    /// member that bonded encrypts with the bond after a restart of either), keyed to its
    /// identity address as `blemu run`'s devices are; a bridge's second room has files of its own.
    static func hostSecurity(plan: ChatPlan, configuration: PeripheralConfiguration, index: Int) -> SecurityConfiguration {
        let address = PeripheralConfiguration.identityAddress(deviceName: ChatDevice.deviceName, localName: configuration.name,
                                                              configured: configuration.address)
        let owner = BondOwner(device: ChatDevice.deviceName, name: configuration.name + (index == 0 ? "" : " \(index + 1)"),
                              address: address)
        let directory = plan.stateDirectory
        return SecurityConfiguration(passkey: plan.passkey, bondStorePath: directory.map { $0 + "/" + owner.fileName },
                                     identityPath: directory.map { $0 + "/" + owner.identityFileName })
    }

    /// A member's pairing, for hosts that need an encrypted link: it types `passkey` when a host
    /// shows one, and keeps its bonds (and IRK) in the state directory, one file per controller.
    static func memberSecurity(plan: ChatPlan, me: String, index: Int, loop: RunLoop, logger: Logger) -> CentralSecurity {
        let name = me + (index == 0 ? "" : " \(index + 1)")
        let owner = BondOwner(device: "chat-member", name: name, address: BluetoothAddress.staticRandom(seed: "blemu/chat-member/\(name)"))
        let directory = plan.stateDirectory
        let configuration = CentralSecurityConfiguration(passkey: plan.passkey,
                                                         bondStorePath: directory.map { $0 + "/" + owner.fileName },
                                                         identityPath: directory.map { $0 + "/" + owner.identityFileName })
        // The owner's static random address only names the files: the address SMP uses, and
        // the identity address distributed, is the one the member connects from — its
        // controller's public address, since the chat device advertises from the random one, or
        // that random one when the controller has no public address (`CentralHost.attach` and
        // `controllerReady` set it; Vol 3, Part H, 3.6.5).
        return CentralSecurity(configuration: configuration, owner: owner, localAddress: LEAddress(owner.address, isRandom: true),
                               scheduler: loop, logger: logger)
    }

    /// A clean stop on SIGINT and SIGTERM (a second one exits at once), the watchdog's pings when
    /// systemd asks for them, then every controller started.
    public func start() throws(StackFailure) {
        do {
            try loop.handleSignals([SIGINT, SIGTERM]) { [unowned self] signal in
                if isStopping {
                    logger.warning("second signal: exiting without a clean stop")
                    Glibc.exit(130)
                }
                let name = signal == SIGINT ? "SIGINT" : "SIGTERM"
                logger.event(.stopping, .notice, "stopping on \(name)")
                stop(because: "stopping on \(name)")
            }
        } catch {
            throw StackFailure("cannot handle signals: \(error)")
        }
        // The first STATUS= follows the first controller up (an HCI event), not before: a
        // controller not opened yet is not one that is down.
        service.startWatchdog(on: loop)
        for stack in stacks { stack.start() }
    }

    /// Every side stopped, every controller reset, then the loop.
    public func stop() { stop(because: "stopping") }

    /// The clean stop; systemd is told STOPPING=1 with `why` as the status.
    private func stop(because why: String) {
        guard !isStopping else { return }
        isStopping = true
        serviceStatusUpdate?.cancel()
        service.stopping(status: why)
        store?.saveMarks()
        for side in sides { side.stop() }
        ControllerStack.stopAll(stacks) { [loop] in loop.stop() }
    }

    /// Stops with `message` as the run's failure (the first one is kept).
    public func fail(_ message: String) {
        if failure == nil { failure = message }
        stop(because: "failed: \(message)")
    }

    /// After the last line is delivered, a little longer before stopping: the host's last
    /// notifications are on their way through the controller.
    public static let deliveredGrace: Duration = .milliseconds(500)

    /// `blemu chat --exit-on-eof`, once its input ended: a clean stop as soon as nothing the
    /// node said is on its way any more (looked at every 100 ms), then `deliveredGrace` later.
    public func stopOnceDelivered() {
        guard !isStopping else { return }
        if node.hasUndelivered {
            loop.schedule(after: .milliseconds(100)) { [self] in stopOnceDelivered() }
        } else {
            logger.notice("stdin ended and every line is delivered: stopping (--exit-on-eof)")
            loop.schedule(after: Self.deliveredGrace) { [self] in stop(because: "stopping: stdin ended and every line is delivered") }
        }
    }
}
