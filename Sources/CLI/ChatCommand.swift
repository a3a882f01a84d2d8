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

    enum Role: String, ExpressibleByArgument, CaseIterable { case peripheral, central }

    @Option(name: .customLong("controller"), help: "Controller spec (default: $BLEMU_CONTROLLER).")
    var controller: String?

    @Option(help: "peripheral (host the room) or central (join one).")
    var role: Role = .peripheral

    @Option(help: "Your name: the host's advertised name, or the name a member's lines are signed with (default: the host name).")
    var name: String?

    @Option(help: ArgumentHelp("central: join a host whose name contains this.", valueName: "NAME"))
    var room: String?

    @Option(help: ArgumentHelp("central: the Client Rx MTU offered (23 to 517; default 517).", valueName: "N"))
    var mtu: Int = 517

    @Option(name: .customLong("log-level"), help: "Log level for stderr (default: notice).")
    var logLevel: Logger.Level = .notice

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
        }
    }

    // MARK: Host

    private func host(logger: Logger) throws {
        let text = controller ?? getenv("BLEMU_CONTROLLER").map { String(cString: $0) }
        guard let text, !text.isEmpty else { throw ValidationError("give --controller SPEC or set BLEMU_CONTROLLER") }
        let spec: ControllerSpec
        do { spec = try ControllerSpec(parsing: text) } catch { throw ValidationError(error.description) }
        let loop: RunLoop
        do { loop = try RunLoop() } catch { throw RuntimeFailure("cannot start the run loop: \(error)") }
        let device = ChatDevice()
        let localName = name ?? device.profile.defaultName
        device.hostName = localName
        device.onMessage = { sender, text in emitLine(sender.map { "[\($0)] \(text)" } ?? text) }
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
        do {
            try loop.handleSignals([SIGINT, SIGTERM]) { _ in
                if stopping { Glibc.exit(130) }
                stop()
            }
        } catch {
            throw RuntimeFailure("cannot handle signals: \(error)")
        }
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

    /// How long a member looks for its host again after losing the link.
    static let rejoinTimeout: Duration = .seconds(30)

    private func join(logger: Logger) throws {
        let session = try CentralSession(controller: controller, logger: logger)
        let host = session.host
        let me = memberName
        var link: CentralLink?
        var target: (characteristic: RemoteCharacteristic, framed: Bool)?
        /// Lines to send, in order; a line already numbered (sent before a link dropped, not
        /// acknowledged) keeps its number, so the host recognises the resend.
        var pending: [(number: UInt32?, text: String)] = []
        var unacknowledged: [UInt32: String] = [:]
        var reassembly = ChatReassembly()
        var nextNumber: UInt32 = 1
        var sending = false
        var connecting = false
        var hostAddress: BluetoothAddress?
        var rejoinDeadline: TimerID?

        /// Writes the next waiting line, one write at a time, in order: framed, as DATA and MORE
        /// frames of ATT_MTU - 3 bytes; plain, as one write (a long write when it does not fit).
        func sendNext() {
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
                link.client.write(target.characteristic.valueHandle, writes.removeFirst()) { result in
                    if case .failure(let error) = result {
                        // The link is going: what was not acknowledged is sent again on the next one.
                        logger.info("a line was not sent whole: \(error)")
                        writes.removeAll()
                    }
                    writeNext()
                }
            }
            writeNext()
        }

        func show(sender: String, text: String) {
            emitLine(sender.isEmpty ? text : "[\(sender)] \(text)")
        }

        /// The link to the host is gone: look for it (or another host of the room) again; the
        /// lines not acknowledged go first, in order, with their numbers.
        func lost(reason: UInt8) {
            link = nil
            target = nil
            sending = false
            connecting = false
            // Numbers were given in the order lines were first sent, so they order the resend.
            var numbered = unacknowledged
            for (number, text) in pending { if let number { numbered[number] = text } }
            unacknowledged.removeAll()
            pending = numbered.sorted { $0.key < $1.key }.map { (number: Optional($0.key), text: $0.value) }
                + pending.filter { $0.number == nil }
            logger.notice("the link to the chat host was lost (reason \(Hex.byte(reason))); looking for it again, \(pending.count) line(s) waiting")
            if let rejoinDeadline { session.loop.cancel(rejoinDeadline) }
            rejoinDeadline = session.loop.schedule(after: Self.rejoinTimeout) {
                guard link == nil else { return }
                session.finish(failure: "the chat host is gone: not found again within \(Self.rejoinTimeout)"
                               + (pending.isEmpty ? "" : "; \(pending.count) line(s) not delivered"))
            }
            host.startScanning(active: true)
        }

        let input = StdinLines(loop: session.loop, logger: logger) { line in
            pending.append((nil, line))
            sendNext()
        }
        host.onReady = { host.startScanning(active: true) }
        host.onError = { message in session.finish(failure: message) }
        host.onAdvertisement = { advertisement, _ in
            guard !connecting, link == nil, advertisement.isConnectable, advertisement.services.contains(ChatDevice.serviceUUID),
                  room.map({ advertisement.name.contains($0) }) ?? true else { return }
            connecting = true
            host.stopScanning()
            host.connect(to: advertisement.address, addressType: advertisement.addressType) { result in
                guard case .success(let made) = result else {
                    connecting = false
                    host.startScanning(active: true)
                    return
                }
                link = made
                if let rejoinDeadline { session.loop.cancel(rejoinDeadline) }
                let again = hostAddress == advertisement.address
                hostAddress = advertisement.address
                logger.notice("\(again ? "joined again" : "joined") chat room '\(advertisement.name)' (\(advertisement.address)) as \(me)")
                made.onDisconnected = { reason in lost(reason: reason) }
                made.client.onNotification = { _, value in
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
                made.client.exchangeMTU(mtu) { _ in
                    made.client.discoverAll { discovered in
                        guard case .success(let services) = discovered else {
                            return made.disconnect()
                        }
                        // Frames between blemu nodes when the host has them; else the plain protocol.
                        let chosen: (characteristic: RemoteCharacteristic, framed: Bool)
                        if let frames = services.characteristic(ChatDevice.framesUUID, in: ChatDevice.serviceUUID) {
                            chosen = (frames, true)
                        } else if let plain = services.characteristic(ChatDevice.messageUUID, in: ChatDevice.serviceUUID) {
                            chosen = (plain, false)
                        } else {
                            return session.finish(failure: "\(advertisement.address) has no chat message characteristic")
                        }
                        made.client.configure(chosen.characteristic, notify: true, indicate: false) { subscribed in
                            if case .failure = subscribed { return made.disconnect() }
                            target = chosen
                            sendNext()
                        }
                    }
                }
            }
        }
        input.start()
        try session.run()
        input.stop()
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
