import ArgumentParser
import BlemuCentral
import BlemuControl
import BlemuCore
import BlemuDevices
import BlemuGATT
import BlemuGATTClient
import BlemuHost
import BlemuRunLoop
import BlemuTransport
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// `blemu chat`: a headless chat over BLE in the seed app's plain protocol. As the peripheral it
/// hosts the room (the `chat` device); as the central it joins the first chat host it finds.
/// Lines from stdin are sent; lines received go to stdout as `[NAME] text`; status to stderr.
struct ChatCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "chat",
        abstract: "Chat over BLE, headless: stdin lines are sent, received lines printed as [NAME] text.",
        discussion: "--role peripheral hosts a room (the chat device); --role central joins the first chat host found (its name containing --room, when given). stdin may be a pipe, a file or /dev/null.")

    enum Role: String, ExpressibleByArgument, CaseIterable { case peripheral, central, auto }

    @Option(name: .customLong("controller"), help: "Controller spec (default: $BLEMU_CONTROLLER).")
    var controller: String?

    @Option(help: "peripheral (host the room), central (join one) or auto (join the room's host if there is one, else host it).")
    var role: Role = .peripheral

    @Option(help: "Your name: the host's advertised name, or the name a member's lines are signed with (default: the host name).")
    var name: String?

    @Option(help: ArgumentHelp("central: join a host whose name contains this; auto: the room's name (default: blemu Chat).", valueName: "NAME"))
    var room: String?

    @Option(help: ArgumentHelp("central: the Client Rx MTU offered (23 to 517; default 517).", valueName: "N"))
    var mtu: Int = 517

    @Option(name: .customLong("log-level"), help: "Log level for stderr (default: notice).")
    var logLevel: Logger.Level = .notice

    /// A line of the room on stdout: `[NAME] text`, or an announcement as it is.
    static func printLine(_ sender: String?, _ text: String) {
        emitLine(sender.map { "[\($0)] \(text)" } ?? text)
    }

    /// The longest line taken from stdin; a longer one ends the reading of stdin, with a warning.
    static let maxLineBytes = 4096

    func validate() throws {
        guard (23...517).contains(mtu) else { throw ValidationError("--mtu must be 23 to 517, not \(mtu)") }
        if let name, name.isEmpty || name.utf8.count > ChatFrame.maxSenderBytes {
            throw ValidationError("--name must be 1 to \(ChatFrame.maxSenderBytes) bytes")
        }
    }

    func run() throws {
        try LogSetup.bootstrap(destination: .stderr, level: logLevel)
        defer { LogSetup.finish() }
        let logger = Logger(label: "blemu.chat")
        switch role {
        case .peripheral: try host(logger: logger)
        case .central: try join(logger: logger)
        case .auto: try auto(logger: logger)
        }
    }

    // MARK: Host

    private func host(logger: Logger) throws {
        let (spec, loop) = try controllerAndLoop(controller)
        let device = ChatDevice()
        let localName = name ?? device.profile.defaultName
        device.hostName = localName
        device.onMessage = Self.printLine
        let emulator = Emulator(spec: spec, loop: loop, logger: logger)
        do {
            try emulator.add(device: device, configuration: PeripheralConfiguration(name: localName, controller: spec.description))
        } catch {
            throw RuntimeFailure("chat device: \(error)")
        }
        var failure: String?
        var stopping = false
        func stop() {
            guard !stopping else { return }
            stopping = true
            emulator.stop { loop.stop() }
        }
        emulator.onFatal = { message in
            failure = message
            stop()
        }
        let input = StdinLines(loop: loop, logger: logger) { line in
            device.send(line)
            emitLine("[\(localName)] \(line)")
        }
        try stopOnSignals(loop, isStopping: { stopping }, stop: stop)
        logger.notice("hosting chat room '\(localName)' on \(spec)")
        emulator.start()
        input.start()
        loop.run()
        input.stop()
        if let failure { throw RuntimeFailure(failure) }
    }

    // MARK: Join

    /// This node's name in its messages: --name, else the machine's host name.
    private var memberName: String {
        if let name { return name }
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count - 1) == 0 else { return "blemu" }
        let host = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return host.isEmpty ? "blemu" : host
    }

    private func join(logger: Logger) throws {
        let session = try CentralSession(controller: controller, logger: logger)
        let member = ChatMember(central: session.host, loop: session.loop, logger: logger, me: memberName, room: room, mtu: mtu,
                                rejoinTimeout: ChatMember.rejoinTimeout)
        member.onGone = { why in session.finish(failure: why) }
        member.onFatal = { why in session.finish(failure: why) }
        session.host.onError = { message in session.finish(failure: message) }
        session.host.onReady = { member.start() }
        let input = StdinLines(loop: session.loop, logger: logger) { line in member.say(line) }
        input.start()
        try session.run()
        input.stop()
    }

    // MARK: Auto

    /// `--role auto` (seed 004, approach 2): look for a host of the room for a few seconds, a
    /// random part of it so that two boards started together do not both decide at once; join
    /// it, or else host the room. One controller does both roles. A host that sees another
    /// host of its room with a lower address gives way and joins it (two rooms merge into
    /// one); a member whose host is gone for good takes over.
    private func auto(logger: Logger) throws {
        let (spec, loop) = try controllerAndLoop(controller)
        let me = memberName
        let roomName = room ?? ChatDevice().profile.defaultName
        let device = ChatDevice()
        device.hostName = me
        device.onMessage = Self.printLine
        let emulator = Emulator(spec: spec, loop: loop, logger: logger)
        do {
            // Every node of a room may host it: each needs its own address (the name alone would give them one).
            let address = BluetoothAddress.staticRandom(seed: "blemu/chat/\(roomName)/\(me)")
            try emulator.add(device: device, configuration: PeripheralConfiguration(name: roomName, address: address,
                                                                                     controller: spec.description))
        } catch {
            throw RuntimeFailure("chat device: \(error)")
        }
        guard let peripheral = emulator.peripherals.first else { throw RuntimeFailure("chat device: not created") }
        // Not hosting until decided: the device is there, silent.
        peripheral.setAdvertisingAllowed(false)
        let central: CentralHost
        do {
            central = try CentralHost(sharing: emulator.host.hci, controller: spec.description, scheduler: loop, logger: logger)
        } catch {
            throw RuntimeFailure("the central's own GATT database: \(error)")
        }
        emulator.host.share(with: central)
        let member = ChatMember(central: central, loop: loop, logger: logger, me: me, room: roomName, mtu: mtu,
                                rejoinTimeout: ChatMember.takeoverTimeout)

        enum State { case deciding, member, host }
        var state = State.deciding
        var early: [String] = []
        var failure: String?
        var stopping = false
        func stop() {
            guard !stopping else { return }
            stopping = true
            emulator.stop { loop.stop() }
        }
        func host(_ why: String) {
            guard state != .host, !stopping else { return }
            state = .host
            logger.notice("hosting chat room '\(roomName)' (\(why))")
            member.watchForHosts { other in
                // Two hosts of one room: the one with the higher address gives way.
                guard state == .host, other.address.value < peripheral.address.value else { return }
                logger.notice("another host of '\(roomName)' (\(other.address)) is here: joining it")
                state = .member
                peripheral.setAdvertisingAllowed(false)
                peripheral.disconnectAll()
                member.join(preferring: other.address)
            }
            peripheral.setAdvertisingAllowed(true)
            // What this node was given as a member and no host acknowledged, then what came
            // while deciding: said by the new host itself, in order.
            let lines = member.takeUndelivered() + early
            early.removeAll()
            for line in lines { say(line) }
        }
        func say(_ line: String) {
            switch state {
            case .deciding: early.append(line)
            case .host:
                device.send(line)
                emitLine("[\(me)] \(line)")
            case .member: member.say(line)
            }
        }
        member.onJoined = {
            guard state == .deciding else { return }
            state = .member
            for line in early { member.say(line) }
            early.removeAll()
        }
        member.onGone = { _ in host("the host is gone: taking over") }
        member.onFatal = { why in
            failure = why
            stop()
        }
        emulator.onFatal = { message in
            failure = message
            stop()
        }
        central.onError = { message in
            failure = message
            stop()
        }
        /// Hosts unless a host was found meanwhile; a connection still being made gets a second.
        func decide() {
            guard state == .deciding else { return }
            if member.isConnecting {
                loop.schedule(after: .seconds(1)) { decide() }
                return
            }
            member.stopLooking()
            host("no host of '\(roomName)' found")
        }
        central.onReady = {
            guard state == .deciding else { return }
            member.start()
            // 3 s, plus up to 2 s at random: two boards started together decide apart.
            loop.schedule(after: .milliseconds(3000 + Int64.random(in: 0...2000))) { decide() }
        }
        let input = StdinLines(loop: loop, logger: logger) { line in say(line) }
        try stopOnSignals(loop, isStopping: { stopping }, stop: stop)
        emulator.start()
        input.start()
        loop.run()
        input.stop()
        if let failure { throw RuntimeFailure(failure) }
    }
}

/// A member of a chat room: finds a host of the room, joins it, sends its lines in order —
/// framed when the host has Frames, plain otherwise — and prints what the room says. When the
/// link drops it looks for a host again; the lines not acknowledged go first, with their numbers.
final class ChatMember {
    /// How long a member looks for its host again after losing the link.
    static let rejoinTimeout: Duration = .seconds(30)
    /// In `--role auto`, how long before a member takes over as host.
    static let takeoverTimeout: Duration = .seconds(8)

    let central: CentralHost
    let loop: RunLoop
    let logger: Logger
    let me: String
    let room: String?
    let mtu: Int
    let rejoinTimeout: Duration
    /// Joined a host (the first time).
    var onJoined: (() -> Void)?
    /// No host found again within `rejoinTimeout`: why.
    var onGone: ((String) -> Void)?
    /// A host without a chat characteristic, or the like: why.
    var onFatal: ((String) -> Void)?

    private var link: CentralLink?
    private var target: (characteristic: RemoteCharacteristic, framed: Bool)?
    /// Lines to send, in order; a line already numbered (sent before a link dropped, not
    /// acknowledged) keeps its number, so the host recognises the resend.
    private var pending: [(number: UInt32?, text: String)] = []
    private var unacknowledged: [UInt32: String] = [:]
    private var reassembly = ChatReassembly()
    private var nextNumber: UInt32 = 1
    private var sending = false
    private(set) var isConnecting = false
    private var looking = false
    private var joinedOnce = false
    private var hostAddress: BluetoothAddress?
    private var preferred: BluetoothAddress?
    private var rejoinDeadline: TimerID?
    /// While hosting (auto): told of every other host of the room heard.
    private var hostWatcher: ((Advertisement) -> Void)?

    init(central: CentralHost, loop: RunLoop, logger: Logger, me: String, room: String?, mtu: Int, rejoinTimeout: Duration) {
        self.central = central
        self.loop = loop
        self.logger = logger
        self.me = me
        self.room = room
        self.mtu = mtu
        self.rejoinTimeout = rejoinTimeout
        central.onAdvertisement = { [unowned self] advertisement, _ in self.heard(advertisement) }
    }

    /// Starts looking for a host of the room.
    func start() {
        looking = true
        central.startScanning(active: true)
    }

    /// Stops looking (a node that decided to host).
    func stopLooking() {
        looking = false
        central.stopScanning()
    }

    /// While this node hosts: scan on (active, for the names in scan responses; duplicates
    /// filtered by the controller, so a room's host costs few wakeups), and `watcher` hears of
    /// every other host of the room.
    func watchForHosts(_ watcher: @escaping (Advertisement) -> Void) {
        hostWatcher = watcher
        looking = false
        central.stopScanning()
        central.startScanning(active: true, filterDuplicates: true)
    }

    /// Joins a host of the room, `address` first when it is heard. The scan starts over without
    /// the watch's duplicate filter, which would hide the host already heard.
    func join(preferring address: BluetoothAddress) {
        hostWatcher = nil
        preferred = address
        central.stopScanning()
        start()
    }

    func say(_ line: String) {
        pending.append((nil, line))
        sendNext()
    }

    private func isRoomHost(_ advertisement: Advertisement) -> Bool {
        advertisement.isConnectable && advertisement.services.contains(ChatDevice.serviceUUID)
            && (room.map { advertisement.name.contains($0) } ?? true)
    }

    private func heard(_ advertisement: Advertisement) {
        guard isRoomHost(advertisement) else { return }
        if let hostWatcher {
            hostWatcher(advertisement)
            return
        }
        guard looking, !isConnecting, link == nil else { return }
        if let preferred, advertisement.address != preferred { return }
        connect(to: advertisement)
    }

    private func connect(to advertisement: Advertisement) {
        isConnecting = true
        central.stopScanning()
        central.connect(to: advertisement.address, addressType: advertisement.addressType) { [weak self] result in
            guard let self else { return }
            guard case .success(let made) = result else {
                self.isConnecting = false
                if self.looking { self.central.startScanning(active: true) }
                return
            }
            self.joined(made, advertisement)
        }
    }

    private func joined(_ made: CentralLink, _ advertisement: Advertisement) {
        link = made
        looking = false
        preferred = nil
        if let rejoinDeadline { loop.cancel(rejoinDeadline) }
        let again = hostAddress == advertisement.address
        hostAddress = advertisement.address
        logger.notice("\(again ? "joined again" : "joined") chat room '\(advertisement.name)' (\(advertisement.address)) as \(me)")
        made.onDisconnected = { [weak self] reason in self?.lost(reason: reason) }
        made.client.onNotification = { [weak self] _, value in self?.received(value) }
        made.client.exchangeMTU(mtu) { [weak self] _ in
            made.client.discoverAll { discovered in
                guard let self else { return }
                guard case .success(let services) = discovered else { return made.disconnect() }
                // Frames between blemu nodes when the host has them; else the plain protocol.
                let chosen: (characteristic: RemoteCharacteristic, framed: Bool)
                if let frames = services.characteristic(ChatDevice.framesUUID, in: ChatDevice.serviceUUID) {
                    chosen = (frames, true)
                } else if let plain = services.characteristic(ChatDevice.messageUUID, in: ChatDevice.serviceUUID) {
                    chosen = (plain, false)
                } else {
                    return self.fatal("\(advertisement.address) has no chat message characteristic")
                }
                made.client.configure(chosen.characteristic, notify: true, indicate: false) { subscribed in
                    if case .failure = subscribed { return made.disconnect() }
                    self.isConnecting = false
                    self.target = chosen
                    if !self.joinedOnce {
                        self.joinedOnce = true
                        self.onJoined?()
                    }
                    self.sendNext()
                }
            }
        }
    }

    private func fatal(_ why: String) {
        onFatal?(why)
    }

    /// What the host notified.
    private func received(_ value: ArraySlice<UInt8>) {
        guard let target else { return }
        if !target.framed {
            // The host relays "NAME: text"; its announcements start with "* ".
            let text = String(decoding: value, as: UTF8.self)
            if let colon = text.range(of: ": "), !text.hasPrefix("* ") {
                show(sender: String(text[..<colon.lowerBound]), text: String(text[colon.upperBound...]))
            } else {
                show(sender: "", text: text)
            }
            return
        }
        guard let frame = try? ChatFrame(decoding: value) else {
            return logger.warning("a malformed chat frame from the host was ignored")
        }
        if case .ack(let acknowledged) = frame { unacknowledged[acknowledged] = nil }
        if case let .message(id, bytes, _) = reassembly.take(frame) {
            show(sender: id.sender, text: String(decoding: bytes, as: UTF8.self))
        }
    }

    private func show(sender: String, text: String) {
        emitLine(sender.isEmpty ? text : "[\(sender)] \(text)")
    }

    /// Writes the next waiting line, one write at a time, in order: framed, as DATA and MORE
    /// frames of ATT_MTU - 3 bytes; plain, as one write (a long write when it does not fit).
    private func sendNext() {
        guard !sending, let link, let target, link.isOpen, !pending.isEmpty else { return }
        sending = true
        let (numbered, line) = pending.removeFirst()
        var writes: [[UInt8]]
        if target.framed {
            let number = numbered ?? nextNumber
            if numbered == nil { nextNumber &+= 1 }
            let id = ChatMessageID(sender: me, number: number)
            unacknowledged[number] = line
            reassembly.remember(id)
            writes = ChatFrame.frames(of: Array(line.utf8.prefix(ChatFrame.maxMessageBytes)), id: id, hops: ChatDevice.initialHops,
                                      limit: link.client.mtu - 3)
        } else {
            writes = [Array(line.utf8)]
        }
        func writeNext() {
            guard !writes.isEmpty else {
                sending = false
                return sendNext()
            }
            link.client.write(target.characteristic.valueHandle, writes.removeFirst()) { [weak self] result in
                if case .failure(let error) = result {
                    // The link is going: what was not acknowledged is sent again on the next one.
                    self?.logger.info("a line was not sent whole: \(error)")
                    writes.removeAll()
                }
                writeNext()
            }
        }
        writeNext()
    }

    /// The link to the host is gone: look for it (or another host of the room) again; the
    /// lines not acknowledged go first, in order, with their numbers.
    private func lost(reason: UInt8) {
        link = nil
        target = nil
        sending = false
        isConnecting = false
        // Numbers were given in the order lines were first sent, so they order the resend.
        var numbered = unacknowledged
        for (number, text) in pending { if let number { numbered[number] = text } }
        unacknowledged.removeAll()
        pending = numbered.sorted { $0.key < $1.key }.map { (number: Optional($0.key), text: $0.value) }
            + pending.filter { $0.number == nil }
        guard hostWatcher == nil else { return }   // this node hosts now: nothing to rejoin
        logger.notice("the link to the chat host was lost (reason \(Hex.byte(reason))); looking for it again, \(pending.count) line(s) waiting")
        if let rejoinDeadline { loop.cancel(rejoinDeadline) }
        rejoinDeadline = loop.schedule(after: rejoinTimeout) { [weak self] in
            guard let self, self.link == nil, !self.isConnecting else { return }
            self.stopLooking()
            self.onGone?("the chat host is gone: not found again within \(self.rejoinTimeout)"
                         + (self.pending.isEmpty ? "" : "; \(self.pending.count) line(s) not delivered"))
        }
        start()
    }

    /// Lines given and not yet acknowledged by a host (auto: a node that becomes host sends them itself).
    func takeUndelivered() -> [String] {
        defer { pending.removeAll(); unacknowledged.removeAll() }
        var numbered = unacknowledged
        for (number, text) in pending { if let number { numbered[number] = text } }
        return numbered.sorted { $0.key < $1.key }.map(\.value) + pending.filter { $0.number == nil }.map(\.text)
    }
}

/// Lines from stdin on the run loop, whatever stdin is: a pipe or terminal is watched
/// (nonblocking), a regular file or /dev/null is read at once (epoll does not take files).
/// At end of input it only stops reading: the chat goes on listening.
final class StdinLines {
    private let loop: RunLoop
    private let logger: Logger
    private let onLine: (String) -> Void
    private var buffer = LineBuffer(maxLineLength: ChatCommand.maxLineBytes)
    private var watching = false

    init(loop: RunLoop, logger: Logger, onLine: @escaping (String) -> Void) {
        self.loop = loop
        self.logger = logger
        self.onLine = onLine
    }

    func start() {
        let flags = fcntl(0, F_GETFL)
        if flags >= 0 { _ = fcntl(0, F_SETFL, flags | O_NONBLOCK) }
        do {
            try loop.register(fd: 0, events: .readable) { [weak self] _ in self?.readAvailable() }
            watching = true
        } catch {
            // A regular file (or /dev/null): reads never block, so it is read now, on the loop.
            loop.schedule(after: .zero) { [weak self] in self?.readAvailable() }
        }
    }

    func stop() {
        if watching { loop.unregister(fd: 0) }
        watching = false
    }

    private func readAvailable() {
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = chunk.withUnsafeMutableBytes { read(0, $0.baseAddress, $0.count) }
            if count > 0 {
                buffer.append(contentsOf: chunk[..<count])
                drain()
                continue
            }
            if count < 0 && (errno == EAGAIN || errno == EINTR) { return }
            // End of input (or an error): the rest of a last line without newline counts too.
            if buffer.pendingCount > 0 {
                buffer.append(contentsOf: [UInt8(ascii: "\n")])
                drain()
            }
            stop()
            return
        }
    }

    private func drain() {
        while let line = buffer.nextLine() {
            switch line {
            case .line(let bytes):
                let text = String(decoding: bytes, as: UTF8.self)
                if !text.isEmpty { onLine(text) }
            case .tooLong:
                logger.warning("a stdin line longer than \(ChatCommand.maxLineBytes) bytes was cut off; stdin is no longer read")
                stop()
                return
            }
        }
    }
}
