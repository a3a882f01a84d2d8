import BlemuCentral
import BlemuChannels
import BlemuChatProtocol
import BlemuCore
import BlemuDevice
import BlemuDevices
import BlemuGATT
import BlemuGATTClient
import BlemuHost
import BlemuSecurity
import Logging

/// A message on its way from this node: its identity, the relays it may still take, its text.
public struct OutgoingChatMessage: Equatable {
    public let id: ChatMessageID
    public let hops: UInt8
    public let text: String

    public init(id: ChatMessageID, hops: UInt8, text: String) {
        self.id = id
        self.hops = hops
        self.text = text
    }
}

/// A member of a chat room: finds a host of the room, joins it, sends its messages in order —
/// framed when the host has Frames, plain otherwise — and tells what the room says. When the
/// link drops it looks for a host again; the messages not acknowledged go first, with their
/// identities, so the host delivers each once.
public final class ChatMember: CreditBasedChannelDelegate {
    /// How long a member looks for its host again after losing the link.
    public static let rejoinTimeout: Duration = .seconds(30)
    /// In `--role auto`, how long before a member takes over as host.
    public static let takeoverTimeout: Duration = .seconds(8)
    /// Messages waiting to be sent (or resent) at which the source of lines should pause (`isBusy`).
    public static let busyThreshold = 128
    /// Messages waiting, at most: a bridge's relays from another room cannot be paused at the
    /// source, so past this the oldest give way, with a warning.
    public static let pendingLimit = 1024
    /// Messages sent and not acknowledged, at most, before the next waits for an ACK.
    public static let window = 64

    let central: CentralHost
    let scheduler: TimerScheduling
    let logger: Logger
    let me: String
    /// A host's name must contain this (nil: any host); once a signing node knows its room's
    /// name, its whole name (`ChatSide.enter(room:trust:)`).
    var room: String?
    /// The host's name must be the room's whole name (auto), not only contain it (central).
    var wholeName: Bool
    /// The advertised name of the host joined last: the room's name.
    public private(set) var hostName: String?
    let mtu: Int
    let rejoinTimeout: Duration
    /// Joined a host (the first time).
    public var onJoined: (() -> Void)?
    /// In a host's room, or out of it: `isInRoom` changed (each join and each lost link).
    public var onInRoomChanged: (() -> Void)?
    /// No host found again within `rejoinTimeout`: why.
    public var onGone: ((String) -> Void)?
    /// A host of the room turned out not to be one (`SetAsideHosts`): its address and why.
    /// The member goes on looking; this is for tests and the curious.
    public var onSetAside: ((BluetoothAddress, String) -> Void)?
    /// What the host said: announcements, and messages (with their identity when framed).
    public var onHeard: ((ChatRoom.Heard) -> Void)?
    /// `isBusy` is over: the source of lines may go on.
    public var onRoom: (() -> Void)?
    /// Signatures and names bound to keys: every message the host relays is checked before it
    /// is told (`ChatTrust.check`); nil: taken as it comes.
    public var trust: ChatTrust?

    /// How to reach the host: its chat channel when it has one (auto), only that (channel), or
    /// only GATT (gatt). Set before `start`.
    public var transport: ChatTransport = .auto
    /// The chat channel to the host, once open: frames go as SDUs on it, one frame each.
    public private(set) var channel: CreditBasedChannel?
    /// A chat channel being opened, and what follows when it opens or fails.
    private var opening: (channel: CreditBasedChannel?, secured: Bool, joined: () -> Void, failed: (String) -> Void)?

    private var link: CentralLink?
    private var target: (characteristic: RemoteCharacteristic, framed: Bool)?
    /// Messages to send, in order.
    private var pending: [OutgoingChatMessage] = []
    /// Sent on this link and not acknowledged yet, in the order sent.
    private var unacknowledged: [OutgoingChatMessage] = []
    private var reassembly = ChatReassembly()
    /// The last message heard from a host (not an announcement): a member that joins again
    /// asks for what came after it (RESUME).
    private var lastHeard: ChatMessageID?
    /// Plain hosts give no identities: numbered here, so each line is told once.
    private var plainNumber: UInt32 = 0
    private var sending = false
    /// The link to the host is being secured (`securing`): said once, whatever waits for it.
    private var isSecuring = false
    public private(set) var isConnecting = false
    private var looking = false
    private var joinedOnce = false
    private var wasBusy = false
    private var dropped = 0
    /// The address of the host joined last.
    public private(set) var hostAddress: BluetoothAddress?
    private var preferred: BluetoothAddress?
    private var rejoinDeadline: TimerID?
    /// While hosting (auto): told of every other host of the room heard.
    private var hostWatcher: ((Advertisement) -> Void)?
    private var watchTimer: TimerID?
    /// Advertisers of the room that were no host of it: passed over for a while.
    public private(set) var setAside = SetAsideHosts()

    public init(central: CentralHost, scheduler: TimerScheduling, logger: Logger, me: String, room: String?, wholeName: Bool = false,
                mtu: Int, rejoinTimeout: Duration) {
        self.wholeName = wholeName
        self.central = central
        self.scheduler = scheduler
        self.logger = logger
        self.me = me
        self.room = room
        self.mtu = mtu
        self.rejoinTimeout = rejoinTimeout
        central.onAdvertisement = { [unowned self] advertisement, _ in self.heard(advertisement) }
    }

    /// Whether the member is in a host's room now: its chat characteristic subscribed to or its
    /// chat channel open, the link up.
    public var isInRoom: Bool { target != nil }

    /// Whether `send` should wait: `busyThreshold` messages wait already. They are kept, not
    /// dropped; the source pauses (stdin is not read) until `onRoom`.
    public var isBusy: Bool { pending.count >= Self.busyThreshold }

    /// Whether messages given to it still wait to be sent or acknowledged (a plain host's
    /// write response is its acknowledgement).
    public var hasUndelivered: Bool { !pending.isEmpty || !unacknowledged.isEmpty || sending }

    /// Starts looking for a host of the room.
    public func start() {
        looking = true
        central.startScanning(active: true)
    }

    /// Stops looking (a node that decided to host).
    public func stopLooking() {
        looking = false
        central.stopScanning()
    }

    /// How long each look for other hosts lasts while this node hosts...
    public static let watchWindow: Duration = .seconds(3)
    /// ...and how long between looks: this, plus up to as much again at random.
    public static let watchInterval: Duration = .seconds(10)

    /// While this node hosts: `watcher` hears of every other host of the room. It looks for
    /// `watchWindow` every `watchInterval` or so, scanning actively without the controller's
    /// duplicate filter: the room's name is in the scan response, which controllers that
    /// filter duplicates may report never (rootcanal does not), and between looks the radio
    /// and the process rest.
    public func watchForHosts(_ watcher: @escaping (Advertisement) -> Void) {
        hostWatcher = watcher
        looking = false
        central.stopScanning()
        watchCycle(scanning: false)
    }

    private func watchCycle(scanning: Bool) {
        guard hostWatcher != nil else { return }
        if scanning {
            logger.debug("looking for other hosts of the room for \(Self.watchWindow)")
            central.startScanning(active: true)
            watchTimer = scheduler.schedule(after: Self.watchWindow) { [weak self] in
                self?.central.stopScanning()
                self?.watchCycle(scanning: false)
            }
        } else {
            let interval = Int64(Self.watchInterval.nanoseconds / 1_000_000)
            watchTimer = scheduler.schedule(after: .milliseconds(interval + Int64.random(in: 0...interval))) { [weak self] in
                self?.watchCycle(scanning: true)
            }
        }
    }

    /// No more watching (the node stops, or joins another host).
    public func stopWatching() {
        hostWatcher = nil
        if let watchTimer { scheduler.cancel(watchTimer) }
        watchTimer = nil
    }

    /// Joins a host of the room, `address` first when it is heard. The scan starts over without
    /// the watch's duplicate filter, which would hide the host already heard.
    /// Not in within `rejoinTimeout`, the member is gone (`onGone`: an auto node hosts again), as
    /// after a lost link: the other host may have vanished, or its connections fail.
    public func join(preferring address: BluetoothAddress) {
        stopWatching()
        preferred = address
        central.stopScanning()
        if let rejoinDeadline { scheduler.cancel(rejoinDeadline) }
        rejoinDeadline = scheduler.schedule(after: rejoinTimeout) { [weak self] in self?.rejoinTimedOut() }
        start()
    }

    /// Sends a message to the room, after those waiting.
    public func send(_ message: OutgoingChatMessage) {
        if pending.count >= Self.pendingLimit {
            pending.removeFirst()
            dropped += 1
            if dropped == 1 || dropped % 100 == 0 {
                logger.warning("the chat host takes messages more slowly than they come: \(dropped) message(s) left out so far")
            }
        }
        pending.append(message)
        if isBusy { wasBusy = true }
        sendNext()
    }

    private func isRoomHost(_ advertisement: Advertisement) -> Bool {
        advertisement.isConnectable && advertisement.services.contains(ChatDevice.serviceUUID)
            && (room.map { wholeName ? advertisement.name == $0 : advertisement.name.contains($0) } ?? true)
    }

    private func heard(_ advertisement: Advertisement) {
        guard isRoomHost(advertisement) else { return }
        if let hostWatcher {
            // A host set aside (it failed as the room's host, or only timed out under load) is
            // none to give way to: the node would stop hosting for a host it will not join, and
            // the room would have none. Its time over, the next look hears it again.
            guard !setAside.isSetAside(advertisement.address, now: scheduler.nowNanoseconds) else { return }
            logger.debug("heard a host of the room while hosting: \(advertisement.address)")
            hostWatcher(advertisement)
            return
        }
        guard looking, !isConnecting, link == nil else { return }
        if let preferred, advertisement.address != preferred { return }
        guard !setAside.isSetAside(advertisement.address, now: scheduler.nowNanoseconds) else { return }
        connect(to: advertisement)
    }

    private func connect(to advertisement: Advertisement) {
        isConnecting = true
        central.stopScanning()
        central.connect(to: advertisement.advertiser) { [weak self] result in
            guard let self else { return }
            guard case .success(let made) = result else {
                self.isConnecting = false
                if self.looking { self.central.startScanning(active: true) }
                return
            }
            self.joined(made, advertisement)
        }
    }

    /// Connected to an advertiser of the room: it is the room's host once its chat
    /// characteristic is found and subscribed to. Until then the link is only a try: if it
    /// fails, the advertiser is set aside and the member looks on (`notAHost`).
    private func joined(_ made: CentralLink, _ advertisement: Advertisement) {
        link = made
        made.onDisconnected = { [weak self] reason in
            guard let self else { return }
            if self.target == nil { self.tryEnded(made) } else { self.lost(reason: reason) }
        }
        made.client.onNotification = { [weak self] _, value in self?.received(value) }
        made.client.exchangeMTU(mtu) { [weak self] _ in
            made.client.discoverAll { discovered in
                guard let self else { return }
                guard case .success(let services) = discovered else {
                    return self.notAHost(made, advertisement, because: "its GATT discovery failed")
                }
                // Frames between blemu nodes when the host has them; else the plain protocol.
                let chosen: (characteristic: RemoteCharacteristic, framed: Bool)
                if let frames = services.characteristic(ChatDevice.framesUUID, in: ChatDevice.serviceUUID) {
                    chosen = (frames, true)
                } else if let plain = services.characteristic(ChatDevice.messageUUID, in: ChatDevice.serviceUUID) {
                    chosen = (plain, false)
                } else {
                    return self.notAHost(made, advertisement, because: "it has no chat message characteristic")
                }
                // The room's whole name, when the filter did not give it: the host's GAP Device
                // Name (the advertisement may carry only a shortened one, Core Supplement, Part A, 1.2).
                let subscribeOverGATT = { (hostName: String) in
                    // Joining again: where it left off, before it subscribes, so the catching up
                    // comes first and in order (Docs/CHAT.md, "When a link drops").
                    // A host that needs an encrypted link (`--require-encryption`) refuses both
                    // until the link is secured: with our bond, else by pairing, then once more.
                    if chosen.framed, let lastHeard = self.lastHeard {
                        let resume = ChatFrame.resume(number: lastHeard.number, sender: lastHeard.sender).encoded()
                        self.securing(made, { done in made.client.write(chosen.characteristic.valueHandle, resume, completion: done) }) { _ in }
                    }
                    self.securing(made, { done in
                        made.client.configure(chosen.characteristic, notify: true, indicate: false, completion: done)
                    }) { subscribed in
                        if case .failure(let error) = subscribed {
                            return self.notAHost(made, advertisement, because: "subscribing to its chat characteristic failed (\(error))")
                        }
                        self.becameMember(made, advertisement, hostName: hostName, chosen: chosen)
                    }
                }
                // The host's chat channel when it has one (its SPSM in the chat service), GATT otherwise.
                let subscribe = { (hostName: String) in
                    let psm = services.characteristic(L2CAPPSMCharacteristic.uuid, in: ChatDevice.serviceUUID)
                    guard chosen.framed, self.transport != .gatt, let psm else {
                        if self.transport == .channel {
                            return self.notAHost(made, advertisement, because: "it has no chat channel (--transport channel)")
                        }
                        return subscribeOverGATT(hostName)
                    }
                    made.client.read(psm.valueHandle) { read in
                        guard made.isOpen, self.link === made else { return }
                        guard let bytes = try? read.get(), bytes.count == 2, case let spsm = UInt16(bytes[bytes.startIndex]) | UInt16(bytes[bytes.startIndex + 1]) << 8,
                              spsm != 0 else {
                            return self.channelFailed(made, advertisement, "its chat channel's SPSM could not be read") { subscribeOverGATT(hostName) }
                        }
                        self.openChannel(made, spsm: spsm, secured: false, joined: {
                            self.becameMember(made, advertisement, hostName: hostName, chosen: chosen)
                        }, failed: { why in
                            self.channelFailed(made, advertisement, why) { subscribeOverGATT(hostName) }
                        })
                    }
                }
                guard !self.wholeName, chosen.framed, let nameCharacteristic = services.characteristic(GATTType.deviceName) else {
                    return subscribe(advertisement.name)
                }
                made.client.read(nameCharacteristic.valueHandle) { read in
                    guard made.isOpen, self.link === made else { return }
                    let name = (try? read.get()).flatMap { String(validating: $0, as: UTF8.self) }
                    subscribe(name.map { $0.isEmpty ? advertisement.name : $0 } ?? advertisement.name)
                }
            }
        }
    }

    /// The host's chat characteristic is subscribed to, or its chat channel is open: the member
    /// is in the room.
    private func becameMember(_ made: CentralLink, _ advertisement: Advertisement, hostName: String,
                              chosen: (characteristic: RemoteCharacteristic, framed: Bool)) {
        guard made.isOpen, link === made else { return }
        isConnecting = false
        looking = false
        preferred = nil
        if let rejoinDeadline { scheduler.cancel(rejoinDeadline) }
        rejoinDeadline = nil
        let again = hostAddress == advertisement.address
        hostAddress = advertisement.address
        self.hostName = hostName
        logger.notice("\(again ? "joined again" : "joined") chat room '\(advertisement.name)' (\(advertisement.address)) as \(me)\(channel.map { " on its chat channel (SPSM \(Hex.word($0.spsm)))" } ?? "")")
        target = chosen
        if !joinedOnce {
            joinedOnce = true
            onJoined?()
        }
        onInRoomChanged?()
        sendNext()
    }

    /// Opens the host's chat channel on `made`. Refused for want of security (Insufficient
    /// Authentication 0x0005, Encryption Key Size 0x0007, Encryption 0x0008: Vol 3, Part A,
    /// 4.23), the link is secured (our bond, else pairing) and it is asked once more, as for the
    /// GATT requests (`securing`). Open, its first frame is RESUME (joining again) or JOIN.
    private func openChannel(_ made: CentralLink, spsm: UInt16, secured: Bool, joined: @escaping () -> Void,
                             failed: @escaping (String) -> Void) {
        // Set first: an in-process peer may answer before `openChannel` returns.
        opening = (nil, secured, joined, failed)
        guard let opened = made.openChannel(spsm: spsm, parameters: ChannelParameters(mtu: ChatDevice.channelMTU), delegate: self) else {
            opening = nil
            return failed("its chat channel could not be asked for")
        }
        if opening != nil, opening?.channel == nil { opening?.channel = opened }
    }

    /// The chat channel was not to be had: GATT's Frames instead (`--transport auto`), or the
    /// host is passed over (`--transport channel`).
    private func channelFailed(_ made: CentralLink, _ advertisement: Advertisement, _ why: String, fallback: () -> Void) {
        guard made.isOpen, link === made else { return }
        if transport == .channel { return notAHost(made, advertisement, because: why + " (--transport channel)") }
        logger.notice("\(why): chatting over GATT instead")
        fallback()
    }

    public func channelOpened(_ opened: CreditBasedChannel) {
        guard let opening, opening.channel == nil || opening.channel === opened else { return opened.disconnect() }
        self.opening = nil
        // A host whose channel cannot take a whole frame is no chat channel.
        guard Int(opened.peerMTU) >= ChatFrame.largestFrame else {
            opened.delegate = nil
            opened.disconnect()
            return opening.failed("its chat channel takes SDUs of \(opened.peerMTU) bytes, fewer than a frame's \(ChatFrame.largestFrame)")
        }
        channel = opened
        let first = lastHeard.map { ChatFrame.resume(number: $0.number, sender: $0.sender) } ?? .join
        _ = opened.send(first.encoded())
        opening.joined()
    }

    public func channel(_ channel: CreditBasedChannel, received sdu: ArraySlice<UInt8>) {
        guard channel === self.channel else { return }
        received(sdu)
    }

    public func channelIsReady(_ channel: CreditBasedChannel) {
        guard channel === self.channel else { return }
        sendNext()
    }

    public func channelClosed(_ closed: CreditBasedChannel, reason: ChannelCloseReason) {
        if let opening, opening.channel == nil || opening.channel === closed {
            self.opening = nil
            guard let link, link.isOpen else { return }
            let refusedForSecurity: Bool = switch reason {
            case .refused(let result):
                [CreditBasedResult.insufficientAuthentication, .insufficientEncryption, .insufficientEncryptionKeySize]
                    .contains { $0.rawValue == result }
            default: false
            }
            guard refusedForSecurity, !opening.secured, let security = central.security else {
                return opening.failed("its chat channel was not opened (\(reason))")
            }
            logger.notice("the chat host \(link.peer.address) refused for want of security (its chat channel \(reason)): \(security.bonds.bond(for: link.peer) != nil ? "encrypting with our bond" : "pairing")")
            security.secure(link.handle) { [weak self] secured in
                guard let self, let link = self.link, link.isOpen else { return }
                switch secured {
                case .failure(let why):
                    self.logger.warning("securing the link to the chat host \(link.peer.address) failed: \(why)")
                    opening.failed("its chat channel needs a secured link")
                case .success(let linkSecurity):
                    self.logger.notice("\(security.wasPaired(link.handle) ? "paired with" : "encrypted with our bond to") the chat host \(link.peer.address): \(linkSecurity.summary)")
                    self.openChannel(link, spsm: closed.spsm, secured: true, joined: opening.joined, failed: opening.failed)
                }
            }
            return
        }
        guard closed === channel else { return }
        channel = nil
        // The link stays but the room is gone from it: it is closed, and the member joins again
        // (resending what was not acknowledged, RESUME) as after any lost link.
        logger.notice("the chat channel to the host closed (\(reason)): joining again")
        link?.disconnect()
    }

    /// Runs `request` on `made`; refused for want of security (Insufficient Authentication
    /// 0x05, Insufficient Encryption 0x0F, Encryption Key Size Too Short 0x0C: Vol 3, Part C,
    /// 10.3.2), the link is secured — encrypted with our bond for the host, else paired, the
    /// bond kept in the state directory — and the request runs once more, as a phone does (and
    /// `blemu gatt`, `GATTWorkflow`). Requests refused together wait for the one securing.
    private func securing<T>(_ made: CentralLink, _ request: @escaping (@escaping (Result<T, GATTClientError>) -> Void) -> Void,
                             completion: @escaping (Result<T, GATTClientError>) -> Void) {
        request { [weak self] result in
            guard let self, case .failure(.att(let error, _)) = result, GATTWorkflow.securityRefusals.contains(error),
                  let security = self.central.security, made.isOpen else { return completion(result) }
            if !self.isSecuring {
                self.isSecuring = true
                let bonded = security.bonds.bond(for: made.peer) != nil
                self.logger.notice("the chat host \(made.peer.address) refused for want of security (\(error)): \(bonded ? "encrypting with our bond" : "pairing")")
            }
            security.secure(made.handle) { [weak self] secured in
                guard let self else { return }
                let first = self.isSecuring
                self.isSecuring = false
                switch secured {
                case .failure(let why):
                    if first {
                        let hint = PairingHint.forFailure(why, passkeyGiven: security.configuration.passkey != nil).map { ": " + $0 } ?? ""
                        self.logger.warning("securing the link to the chat host \(made.peer.address) failed: \(why)\(hint)")
                    }
                    completion(result)
                case .success(let linkSecurity):
                    if first {
                        self.logger.notice("\(security.wasPaired(made.handle) ? "paired with" : "encrypted with our bond to") the chat host \(made.peer.address): \(linkSecurity.summary)")
                    }
                    request(completion)
                }
            }
        }
    }

    /// An advertiser of the room is no host of it: set aside for `SetAsideHosts.duration`
    /// (logged once), the link closed, and the member looks on (Docs/CHAT.md, "Finding the host").
    private func notAHost(_ made: CentralLink, _ advertisement: Advertisement, because why: String) {
        // A link that dropped meanwhile says nothing against the host (it failed the request): look on.
        guard made.isOpen else { return tryEnded(made) }
        if setAside.setAside(advertisement.address, now: scheduler.nowNanoseconds) {
            logger.warning("'\(advertisement.name)' (\(advertisement.address)) advertises the chat room but \(why): passed over for \(SetAsideHosts.duration.components.seconds) s, looking on")
            onSetAside?(advertisement.address, why)
        }
        if preferred == advertisement.address { preferred = nil }
        made.disconnect()   // tryEnded follows, from onDisconnected
    }

    /// A link that never became the member's link to a host is gone: look on.
    private func tryEnded(_ made: CentralLink) {
        guard link === made else { return }
        link = nil
        channel = nil
        opening = nil
        isConnecting = false
        guard hostWatcher == nil, looking else { return }
        central.startScanning(active: true)
    }

    /// What the host notified.
    private func received(_ value: ArraySlice<UInt8>) {
        guard let target else { return }
        if !target.framed {
            // The host relays "NAME: text"; its announcements start with "* ".
            switch ChatPlainLine(parsing: String(decoding: value, as: UTF8.self)) {
            case let .message(sender, text):
                plainNumber &+= 1
                // A plain host's lines carry no signature: unverified.
                let id = ChatMessageID(sender: trust != nil ? ChatTrust.unverified(sender) : sender, number: plainNumber)
                // A plain host's lines carry no hop count: a bridge may pass them on, once less than its own.
                onHeard?(.message(id, text: text, hops: ChatRoom.initialHops - 1))
            case .announcement(let text):
                onHeard?(.announcement(text))
            }
            return
        }
        guard let frame = try? ChatFrame(decoding: value) else {
            return logger.warning("a malformed chat frame from the host was ignored")
        }
        if case let .ack(number, sender) = frame {
            let named = sender.isEmpty ? me : sender
            // Its whole name first; else one the host cut to fit the notification.
            if let index = unacknowledged.firstIndex(where: { $0.id.isNamed(number: number, sender: named) })
                ?? unacknowledged.firstIndex(where: { $0.id.isAcknowledged(number: number, sender: named) }) {
                unacknowledged.remove(at: index)
            }
            sendNext()
            return
        }
        let outcome = reassembly.take(frame)
        if case .duplicate(let id) = outcome, !id.sender.isEmpty { lastHeard = id }
        if case let .message(id, bytes, hops) = outcome {
            let text = String(decoding: bytes, as: UTF8.self)
            if id.sender.isEmpty {
                guard trust?.checkAnnouncement(id, text: bytes) ?? true else { return }
                onHeard?(.announcement(text))
                return
            }
            lastHeard = id
            // Its link to the host spends its own budget of new names (a bridge has one a side).
            let via = 0x8000_0000 | UInt32(link?.handle ?? 0)
            guard let checked = trust.map({ $0.check(id, text: bytes, from: via) }) ?? id else { return }
            onHeard?(.message(checked, text: text, hops: hops))
        }
    }

    /// Writes the next waiting message, one write at a time, in order: framed, as DATA and
    /// MORE frames of ATT_MTU - 3 bytes; plain, as one write (a long write when it does not
    /// fit), signed `NAME: ` when it is another's.
    private func sendNext() {
        if let channel { return sendOnChannel(channel) }
        guard !sending, let link, let target, link.isOpen, !pending.isEmpty, unacknowledged.count < Self.window else { return }
        sending = true
        let message = pending.removeFirst()
        if wasBusy, pending.count <= Self.busyThreshold / 2 {
            wasBusy = false
            onRoom?()
        }
        var writes: [[UInt8]]
        if target.framed {
            unacknowledged.append(message)
            reassembly.remember(message.id)
            writes = ChatFrame.frames(of: Array(message.text.utf8.prefix(ChatFrame.maxMessageBytes)), id: message.id,
                                      hops: message.hops, limit: link.client.mtu - 3)
        } else if message.id.proof?.sealed != nil {
            // A private room's line cannot go to a plain host (it would show it to anyone): left out, said.
            logger.warning("a private room's line was not sent: the host \(hostAddress.map { "\($0)" } ?? "") speaks only the plain protocol")
            writes = []
        } else {
            // Its own lines as they are (the host names them); another's as `NAME: text`.
            writes = [Array((message.id.sender == me ? message.text : ChatPlainLine.message(sender: message.id.sender, text: message.text).text).utf8)]
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

    /// On the chat channel: each waiting message as one SDU (one whole frame, no MORE), while
    /// the window allows and the channel takes them; a full channel says when it has room
    /// (`channelIsReady`), an ACK when the window has.
    private func sendOnChannel(_ channel: CreditBasedChannel) {
        guard target != nil, channel.state == .open else { return }
        while let message = pending.first, unacknowledged.count < Self.window {
            let frame = ChatFrame.channelFrame(of: Array(message.text.utf8.prefix(ChatFrame.maxMessageBytes)), id: message.id, hops: message.hops)
            guard channel.send(frame) else { return }
            pending.removeFirst()
            unacknowledged.append(message)
            reassembly.remember(message.id)
            if wasBusy, pending.count <= Self.busyThreshold / 2 {
                wasBusy = false
                onRoom?()
            }
        }
    }

    /// The link to the host is gone: look for it (or another host of the room) again; the
    /// messages not acknowledged go first, in the order they were sent.
    private func lost(reason: UInt8) {
        let wasInRoom = target != nil
        link = nil
        target = nil
        channel = nil
        opening = nil
        sending = false
        isConnecting = false
        pending = unacknowledged + pending
        unacknowledged.removeAll()
        if wasInRoom { onInRoomChanged?() }
        guard hostWatcher == nil else { return }   // this node hosts now: nothing to rejoin
        logger.notice("the link to the chat host was lost (reason \(Hex.byte(reason))); looking for it again, \(pending.count) line(s) waiting")
        if let rejoinDeadline { scheduler.cancel(rejoinDeadline) }
        rejoinDeadline = scheduler.schedule(after: rejoinTimeout) { [weak self] in self?.rejoinTimedOut() }
        start()
    }

    private func rejoinTimedOut() {
        rejoinDeadline = nil
        guard target == nil else { return }
        if isConnecting {
            // A try under way (it may be a host that is none): its outcome decides, in a second.
            rejoinDeadline = scheduler.schedule(after: .seconds(1)) { [weak self] in self?.rejoinTimedOut() }
            return
        }
        stopLooking()
        preferred = nil
        onGone?("the chat host is gone: not found again within \(rejoinTimeout)"
                + (pending.isEmpty ? "" : "; \(pending.count) line(s) not delivered"))
    }

    /// Messages given and not yet acknowledged by a host, in order (auto: a node that becomes
    /// host says them itself).
    public func takeUndelivered() -> [OutgoingChatMessage] {
        defer {
            pending.removeAll()
            unacknowledged.removeAll()
            if wasBusy {
                wasBusy = false
                onRoom?()
            }
        }
        return unacknowledged + pending
    }
}
