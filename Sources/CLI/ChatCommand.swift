import ArgumentParser
import BlemuCentral
import BlemuChat
import BlemuChatProtocol
import BlemuControl
import BlemuCore
import BlemuCrypto
import BlemuDevices
import BlemuHost
import BlemuRunLoop
import BlemuStack
import BlemuTransport
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// `blemu chat`: a headless chat over BLE (Docs/CHAT.md). On each controller this node hosts
/// the room (`--role peripheral`: the `chat` device), joins it (`--role central`), or decides
/// which (`--role auto`). With `--controller` twice it is in a room on each radio and bridges
/// them. Lines from stdin are sent; lines received go to stdout as `[NAME] text`; logs to stderr,
/// or to the journal under systemd (`--log`), which is also told how the node is doing (`ChatStack`).
struct ChatCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "chat",
        abstract: "Chat over BLE, headless: stdin lines are sent, received lines printed as [NAME] text.",
        discussion: """
            --role peripheral hosts a room (the chat device, advertised as --name); --role central joins the first chat \
            host found (its name containing --room, when given); --role auto joins the host of room --room or hosts it. \
            Give --controller twice (and --role once, or once per controller) to be in a room on each radio and bridge \
            them. stdin may be a pipe, a file or /dev/null.
            """)

    enum Role: String, ExpressibleByArgument, CaseIterable {
        case peripheral, central, auto

        var sideRole: ChatSide.Role {
            switch self {
            case .peripheral: .host
            case .central: .member
            case .auto: .auto
            }
        }
    }

    @Option(name: .customLong("controller"), parsing: .singleValue,
            help: "Controller spec (default: $BLEMU_CONTROLLER); twice to bridge a room on each radio.")
    var controllers: [String] = []

    @Option(name: .customLong("role"), parsing: .singleValue,
            help: "peripheral (host the room), central (join one) or auto (join the room's host if there is one, else host it); once, or once per --controller (default: peripheral).")
    var roles: [Role] = []

    @Option(help: "Your name: the host's advertised name, or the name a member's lines are signed with (default: the host name).")
    var name: String?

    @Option(help: ArgumentHelp("The room: peripheral, its advertised name (default: --name); central, join a host whose name contains this (default: any); auto, the room's name (default: blemu Chat).", valueName: "NAME"))
    var room: String?

    @Option(help: ArgumentHelp("central: the Client Rx MTU offered (23 to 517; default 517).", valueName: "N"))
    var mtu: Int = 517

    @Option(help: ArgumentHelp("Between blemu nodes: auto (the host's L2CAP chat channel when it has one, else GATT), channel (only the channel: a host without one is passed over) or gatt (never the channel; hosting, publish none) (default: auto).", valueName: "auto|channel|gatt"))
    var transport: ChatTransport = .auto

    @Option(help: ArgumentHelp("Where logs go: \(LogDestination.offeredList)."
        + " auto is the systemd journal when systemd started blemu (JOURNAL_STREAM or INVOCATION_ID), else stderr;"
        + " an unreachable journal falls back to stderr. Lines received still go to stdout. Default: auto."))
    var log: LogDestination?

    @Option(name: .customLong("log-level"), help: "trace, debug, info, notice, warning, error or critical. Default: notice.")
    var logLevel: Logger.Level = .notice

    @Option(name: .customLong("state-dir"),
            help: ArgumentHelp("Where this node keeps its chat identity (chat-identity, made on first use), its message numbers (chat-numbers), the names bound to keys (chat-names-HEX) and the highest number delivered from each (chat-marks-HEX) (default: $STATE_DIRECTORY, else ~/.local/state/blemu).", valueName: "DIR"))
    var stateDirectory: String?

    @Flag(help: "Print this node's name and its key's fingerprint, then NAME=KEY (the whole public key, 64 hex digits, as another node's --pin-name takes it; the key made in --state-dir on first use), and exit.")
    var identity = false

    @Option(name: .customLong("passphrase-file"),
            help: ArgumentHelp("A private room: its passphrase is this file's content (one trailing newline taken off); lines are encrypted end to end and plain clients cannot join.", valueName: "PATH"))
    var passphraseFile: String?

    @Flag(name: .customLong("signed-only"), help: "Refuse unsigned lines: plain clients' writes (ATT error 0x13) and unsigned frames.")
    var signedOnly = false

    @Flag(name: .customLong("require-encryption"),
          help: "Hosting: the chat characteristics need an encrypted link (Just Works is enough; with --passkey an authenticated one); a central is refused (ATT error 0x05 or 0x0F) until it pairs. blemu members pair on their own, whatever this says, and keep the bond in --state-dir.")
    var requireEncryption = false

    @Option(help: ArgumentHelp("The six-digit pairing passkey: hosting, the static one centrals type (Passkey Entry, an authenticated key); as a member, the one typed when a host asks for it.", valueName: "DIGITS"))
    var passkey: String?

    @Option(name: .customLong("forget-name"),
            help: ArgumentHelp("Forget the key NAME is bound to in the room (--room, else --name): the next key it speaks with is taken. Then exit.", valueName: "NAME"))
    var forgetName: String?

    @Option(name: .customLong("pin-name"),
            help: ArgumentHelp("Bind NAME to KEY (64 hex digits, an Ed25519 public key) in the room (--room, else --name). Then exit.", valueName: "NAME=KEY"))
    var pinName: String?

    @Flag(name: .customLong("exit-on-eof"),
          help: "When stdin ends, exit (status 0) once every line read is delivered (default: keep running and listening).")
    var exitOnEOF = false

    /// The longest line taken from stdin; a longer one ends the reading of stdin, with a warning.
    static let maxLineBytes = 4096
    /// Controllers one node bridges, at most.
    static let maxControllers = 4

    func validate() throws {
        guard (23...517).contains(mtu) else { throw ValidationError("--mtu must be 23 to 517, not \(mtu)") }
        if let name, name.isEmpty || name.utf8.count > ChatFrame.maxSenderBytes {
            throw ValidationError("--name must be 1 to \(ChatFrame.maxSenderBytes) bytes")
        }
        guard controllers.count <= Self.maxControllers else {
            throw ValidationError("--controller at most \(Self.maxControllers) times, not \(controllers.count)")
        }
        guard roles.count <= 1 || roles.count == max(controllers.count, 1) else {
            throw ValidationError("--role once, or once per --controller (\(controllers.count)), not \(roles.count) times")
        }
        if let stateDirectory, stateDirectory.isEmpty { throw ValidationError("--state-dir needs a directory") }
        guard stateDirectoryPath(stateDirectory) != nil else {
            throw ValidationError("no state directory for the chat identity: give --state-dir DIR (or set STATE_DIRECTORY or HOME)")
        }
        if let passphraseFile, passphraseFile.isEmpty { throw ValidationError("--passphrase-file needs a path") }
        _ = try parsedPasskey()
        if forgetName != nil || pinName != nil {
            guard forgetName == nil || pinName == nil else { throw ValidationError("--forget-name or --pin-name, not both") }
            guard room != nil || name != nil else { throw ValidationError("--forget-name and --pin-name need the room: --room (or --name)") }
            if let pinName { _ = try Self.parsePin(pinName) }
        }
    }

    /// `NAME=KEY`: the name and its Ed25519 public key (64 hex digits).
    static func parsePin(_ text: String) throws -> (name: String, key: ChatPublicKey) {
        guard let equals = text.lastIndex(of: "="), equals != text.startIndex else {
            throw ValidationError("--pin-name takes NAME=KEY, KEY 64 hex digits")
        }
        let name = String(text[..<equals])
        guard name.utf8.count <= ChatFrame.maxSenderBytes else {
            throw ValidationError("--pin-name: a name is at most \(ChatFrame.maxSenderBytes) bytes")
        }
        guard let bytes = Hex.parse(String(text[text.index(after: equals)...])), let key = try? ChatPublicKey(bytes) else {
            throw ValidationError("--pin-name: KEY must be an Ed25519 public key, 64 hex digits")
        }
        return (name, key)
    }

    /// `--passkey`: six digits at most, 0 to 999999.
    func parsedPasskey() throws -> UInt32? {
        guard let passkey else { return nil }
        guard let value = CentralPairingOptions.parsePasskey(passkey) else {
            throw ValidationError("--passkey '\(passkey.visible)': give the six digits (0 to 999999)")
        }
        return value
    }

    /// This node's name in its messages: --name, else the machine's host name.
    private var memberName: String {
        if let name { return name }
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count - 1) == 0 else { return "blemu" }
        let host = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return host.isEmpty ? "blemu" : host
    }

    func run() throws {
        try LogSetup.bootstrap(destination: log ?? .auto, level: logLevel)
        defer { LogSetup.finish() }
        let logger = Logger(label: "blemu.chat")
        if identity || forgetName != nil || pinName != nil {
            return try manageIdentity(logger: logger)
        }
        // Before any radio is opened: a bad passphrase file is said at once.
        let passphrase = try passphraseFile.map { path throws in try ChatPlan.readPassphrase(path) }
        let (specs, loop) = try controllersAndLoop(controllers)
        let roleOf = { (index: Int) -> Role in roles.isEmpty ? .peripheral : roles[roles.count == 1 ? 0 : index] }
        var plan = ChatPlan(controllers: specs.enumerated().map { ($0.element, roleOf($0.offset).sideRole) },
                            room: room, name: name, memberName: memberName)
        plan.mtu = mtu
        plan.stateDirectory = stateDirectoryPath(stateDirectory)
        plan.signedOnly = signedOnly
        plan.passphrase = passphrase
        plan.requireEncryption = requireEncryption
        plan.passkey = try parsedPasskey()
        plan.transport = transport
        let chat = try ChatStack(plan: plan, loop: loop, logger: logger)
        let node = chat.node
        node.onLine = { sender, text in emitLine(ChatNode.shown(sender: sender, text: text)) }
        let input = StdinLines(loop: loop, logger: logger) { line in node.say(line) }
        input.holdBack = { node.isBusy }
        if exitOnEOF {
            // Every line read is said; once none is on its way any more, a clean stop.
            input.onEnd = { chat.stopOnceDelivered() }
        }
        node.onRoom = { input.resume() }
        try chat.start()
        input.start()
        loop.run()
        input.stop()
        if let failure = chat.failure { throw RuntimeFailure(failure) }
    }
}

extension ChatCommand {
    /// `--identity`, `--forget-name`, `--pin-name`: on the state directory's files, no radio.
    func manageIdentity(logger: Logger) throws {
        guard let directory = stateDirectoryPath(stateDirectory) else { throw RuntimeFailure("no state directory") }
        let store = ChatIdentityStore(directory: directory, logger: logger)
        // The name as a run would have it (the roles matter: a node that only hosts is the room).
        let plan = ChatPlan(controllers: (roles.isEmpty ? [Role.peripheral] : roles).map { (ControllerSpec.hci(index: 0), $0.sideRole) },
                            room: room, name: name, memberName: memberName)
        if identity {
            let key: ChatSigningKey
            do {
                key = try store.loadOrCreateKey()
            } catch {
                throw RuntimeFailure(error.description)
            }
            print(ChatIdentityStore.identityLine(name: plan.me, key: key.publicKey))
            // The whole key, as another node's `--pin-name` takes it.
            print(ChatIdentityStore.pinArgument(name: plan.me, key: key.publicKey))
        }
        let roomName = plan.namingRoom
        if let forgetName {
            store.pin(forgetName, to: nil, room: roomName)
            print("\(forgetName.visible) forgotten in chat room '\(roomName.visible)': the next key it speaks with is taken")
        }
        if let pinName {
            let pin = try Self.parsePin(pinName)
            store.pin(pin.name, to: pin.key, room: roomName)
            print("\(pin.name.visible) bound to key \(pin.key.fingerprint) in chat room '\(roomName.visible)'")
        }
    }
}

/// Lines from stdin on the run loop, whatever stdin is: a pipe or terminal is watched
/// (nonblocking), a regular file or /dev/null is read at once (epoll does not take files).
/// At end of input it only stops reading: the chat goes on listening.
///
/// Back-pressure instead of loss: after each line `holdBack` is asked whether the chat can
/// take more; while it cannot, stdin is not read (a pipe's writer blocks, the lines wait in the
/// kernel) until `resume()`.
final class StdinLines {
    private let loop: RunLoop
    private let logger: Logger
    private let onLine: (String) -> Void
    /// Asked after each line: true pauses the reading until `resume()`.
    var holdBack: (() -> Bool)?
    /// stdin ended and every line in it was handed to `onLine`.
    var onEnd: (() -> Void)?
    private var reachedEnd = false
    private var buffer = LineBuffer(maxLineLength: ChatCommand.maxLineBytes)
    private var watching = false
    private var isFile = false
    private var paused = false
    private var ended = false

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
            isFile = true
            loop.schedule(after: .zero) { [weak self] in self?.readAvailable() }
        }
    }

    func stop() {
        if watching { loop.unregister(fd: 0) }
        watching = false
        ended = true
    }

    /// Reads on after `holdBack` paused it: first the lines already read, then stdin.
    func resume() {
        guard paused else { return }
        paused = false
        drain()
        guard !paused, !ended else { return }
        if isFile {
            loop.schedule(after: .zero) { [weak self] in self?.readAvailable() }
        } else if !watching {
            do {
                try loop.register(fd: 0, events: .readable) { [weak self] _ in self?.readAvailable() }
                watching = true
            } catch {
                logger.warning("stdin can no longer be watched (\(error)); it is not read any more")
                ended = true
            }
        }
    }

    private func pause() {
        paused = true
        // Unwatched while paused: level-triggered epoll would wake the loop for it on every turn.
        if watching { loop.unregister(fd: 0) }
        watching = false
    }

    private func readAvailable() {
        var chunk = [UInt8](repeating: 0, count: 4096)
        while !paused, !ended {
            let count = chunk.withUnsafeMutableBytes { read(0, $0.baseAddress, $0.count) }
            if count > 0 {
                buffer.append(contentsOf: chunk[..<count])
                drain()
                continue
            }
            if count < 0 && (errno == EAGAIN || errno == EINTR) { return }
            // End of input (or an error): the rest of a last line without newline counts too.
            if buffer.pendingCount > 0 { buffer.append(contentsOf: [UInt8(ascii: "\n")]) }
            stop()
            reachedEnd = true
            drain()
            return
        }
    }

    private func drain() {
        defer {
            // Every line handed on (none held back by a pause): the end is told once.
            if reachedEnd, !paused, buffer.pendingCount == 0, let onEnd {
                self.onEnd = nil
                onEnd()
            }
        }
        while !paused, let line = buffer.nextLine() {
            switch line {
            case .line(let bytes):
                let text = String(decoding: bytes, as: UTF8.self)
                if !text.isEmpty { onLine(text) }
                if holdBack?() == true { pause() }
            case .tooLong:
                logger.warning("a stdin line longer than \(ChatCommand.maxLineBytes) bytes was cut off; stdin is no longer read")
                stop()
                // As if stdin ended there (--exit-on-eof stops once the lines before it are delivered).
                buffer = LineBuffer(maxLineLength: ChatCommand.maxLineBytes)
                reachedEnd = true
                return
            }
        }
    }
}

extension ChatTransport: ExpressibleByArgument {}
