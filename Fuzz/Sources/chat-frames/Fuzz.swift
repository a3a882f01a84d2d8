import BlemuATT
import BlemuChannels
import BlemuChatProtocol
import BlemuCore
import BlemuCrypto
import BlemuDevice
import BlemuDevices
import BlemuGATT
import BlemuHost
import FuzzSupport
import Logging

/// `chat-frames`: a chat room's host (`ChatDevice` with its `ChatTrust`: signatures, names bound
/// to keys, signed-only and private rooms) and the frame codec (`ChatFrame`, `ChatReassembly`)
/// fed a sequence of typed operations from up to four member links: raw frames on Frames, plain
/// writes on Message, RESUMEs, link drops, clock jumps, full and ready links, the host's own
/// lines, pins, and signed messages of three known identities with one field fuzzed after
/// signing. The device runs against a `DeviceContext` of this target (no ATT server: a write
/// goes through the characteristic's `validateWrite` then `onWrite`, as the server calls them),
/// which is what makes it fast.
///
/// Oracles, beyond traps: a signed message the host shows (`onHeard`) or relays to a member (put
/// back together from the frames it was notified) verifies — its signature over room, sender,
/// number and text; an unsigned one is shown only under an unverified name (`~NAME`); a name is
/// never shown with another key than the first it was shown with (until an operator's pin or
/// forget); every notification fits the member's ATT_MTU and, on Frames, decodes; memory the
/// device holds stays under a bound after each operation.
///
/// Input: a config byte, then operations (an op byte, its fields; short inputs read zeros):
///   config  bit 0 no trust (the open room as before: only traps and memory are checked)
///           bit 1 signed-only, bit 2 private room (a passphrase), bit 3 the host has no key,
///           bits 4 and 5 both set: signatures are Ed25519, as in blemu; else the stand-in
///           (`StandInSignatures`: a keyed 64-byte tag over the signed bytes, 30 times cheaper)
///   0 L m   link L (0–3) connects with ATT_MTU choice m and subscribes (m bit 7: plain, on Message)
///   1 L n   a raw frame of n bytes (the next u8; 0xFF: the next u16 mod 513) written on Frames
///   2 L n   a plain write of n bytes on Message
///   3 L s k a RESUME with sender choice s and number choice k (a number the room used, or k)
///   4 L     the link drops
///   5 t     the clock moves t × 100 ms (t = 0xFF: 6 s, past the stall limit)
///   6 L i s k n f   identity i (0–2) signs a message as sender choice s, number k, text of n
///                   bytes, then field f is changed (0 none, 1 room, 2 sender, 3 number, 4 a text
///                   byte, 5 another identity's key, 6 a signature byte, 7 hops, 8 sealed for the
///                   room, 9 sealed with another passphrase), and it is written as frames
///   7 n     the host says a line of n bytes
///   8 L     the link's transmit queue is full (notifications refused) or has room again
///   9       every link has room: `peripheralIsReady`
///   10 L    the link unsubscribes (both characteristics)
///   11 s i  sender choice s is pinned to identity i (i ≥ 3: forgotten)
///   12 L    JOIN (a chat channel's first frame) written on Frames: ignored there, nothing is notified
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    var input = FuzzBytes(data, size)
    let config = input.u8()
    let room = Room(trusted: config & 0x01 == 0, signedOnly: config & 0x02 != 0, isPrivate: config & 0x04 != 0,
                    hostSigns: config & 0x08 == 0, ed25519: config & 0x30 == 0x30)
    let memory = MemoryBound(bound: Room.memoryBound)
    while !input.isAtEnd {
        let op = input.u8()
        room.run(op, &input)
        memory.check("operation \(op)")
    }
    room.end()
    return 0
}

/// Three members' identities, the host's and the room, made once per process (key generation
/// and the passphrase's HKDF are not what is fuzzed).
enum Keys {
    static let members = (1...3).map { ChatSigningKey(privateKey: [UInt8](repeating: UInt8($0), count: 32))! }
    static let host = ChatSigningKey(privateKey: [UInt8](repeating: 0x48, count: 32))!
    static let roomName = "Fuzz Room"
    static let roomKey = ChatRoomKey(passphrase: Array("fuzz passphrase".utf8), room: roomName)
    static let otherRoomKey = ChatRoomKey(passphrase: Array("another one".utf8), room: roomName)
    /// Senders a typed op can claim: the members', the host's, an announcement's, an unverified
    /// one, one at the 32-byte limit.
    static let senders = ["alice", "bob", "carol", hostName, "", "~alice", String(repeating: "é", count: 16)]
    static let hostName = "Host"
    static let mtus = [23, 24, 27, 64, 100, 185, 247, 517]
}

final class Room {
    /// What four links can legitimately make the device hold: each member's queue of
    /// `memberQueueLimit` lines of 4 KiB cut into notifications (at ATT_MTU 23 about 15 KB of
    /// arrays a line), the history (`historyByteLimit`, `historyLimit` identities), the
    /// delivered identities and the names bound; anything a peer can grow past it is a bug.
    static let memoryBound = 24 << 20
    static let linkCount = 4

    let scheduler = ManualScheduler()
    let context: RoomContext
    let device = ChatDevice()
    let trust: ChatTrust?
    let roomKey: ChatRoomKey?
    /// Real Ed25519 (config bits 4 and 5), else `StandInSignatures`, in the host and the target alike.
    let ed25519: Bool
    let signatures: ChatSignatureScheme
    /// The key each name was first shown with (the oracle's own memory, not the trust's).
    private var shown: [String: ChatPublicKey] = [:]
    /// Names an operator pinned or forgot (op 11): not checked after that.
    private var pinned: Set<String> = []
    /// Numbers the room used, for RESUMEs that name something.
    private var numbers: [UInt32] = []
    /// Each link's side of the frames it was notified: messages put together as a member would.
    private var memberSide: [UInt16: ChatReassembly] = [:]

    init(trusted: Bool, signedOnly: Bool, isPrivate: Bool, hostSigns: Bool, ed25519: Bool) {
        roomKey = isPrivate ? Keys.roomKey : nil
        self.ed25519 = ed25519
        signatures = ed25519 ? .ed25519 : StandInSignatures.scheme
        trust = trusted ? ChatTrust(room: Keys.roomName, identity: hostSigns ? Keys.host : nil, me: Keys.hostName,
                                    signedOnly: signedOnly, roomKey: roomKey, signatures: signatures, logger: fuzzLogger()) : nil
        context = RoomContext(scheduler: scheduler)
        device.hostName = Keys.hostName
        device.trust = trust
        if hostSigns, trusted { shown[Keys.hostName] = Keys.host.publicKey }
        context.notified = { [unowned self] characteristic, peer, value in notified(characteristic, peer, value) }
        device.onHeard = { [unowned self] heard in
            guard case let .message(id, text, _) = heard else { return }
            numbers.append(id.number)
            if numbers.count > 64 { numbers.removeFirst() }
            check(id, text: Array(text.utf8), where: "shown by the host")
        }
        device.start(context: context)
    }

    func run(_ op: UInt8, _ input: inout FuzzBytes) {
        switch op % 13 {
        case 0:
            let link = link(input.u8())
            let choice = input.u8()
            connect(link, mtu: Keys.mtus[Int(choice & 0x07)], framed: choice & 0x80 == 0)
        case 1:
            let link = link(input.u8())
            let count = input.u8()
            let value = input.take(count == 0xFF ? Int(input.u16()) % 513 : Int(count))
            write(value, on: device.frames, from: link)
        case 2:
            let link = link(input.u8())
            write(input.take(Int(input.u8())), on: device.message, from: link)
        case 3:
            let link = link(input.u8())
            let sender = Keys.senders[Int(input.u8()) % Keys.senders.count]
            let choice = input.u8()
            let number = numbers.isEmpty || choice & 0x80 != 0 ? UInt32(choice) : numbers[Int(choice) % numbers.count]
            write(ChatFrame.resume(number: number, sender: sender).encoded(), on: device.frames, from: link)
        case 4:
            drop(link(input.u8()))
        case 5:
            let t = input.u8()
            scheduler.advance(by: t == 0xFF ? .seconds(6) : .milliseconds(Int64(t) * 100))
        case 6:
            signedMessage(&input)
        case 7:
            device.send(String(decoding: input.take(Int(input.u8())), as: UTF8.self))
        case 8:
            context.links[link(input.u8())]?.full.toggle()
        case 9:
            for key in context.links.keys { context.links[key]?.full = false }
            device.peripheralIsReady()
        case 10:
            let handle = link(input.u8())
            guard let peer = context.links[handle]?.peer else { return }
            context.links[handle]?.subscribed = []
            device.subscriptionChanged(device.message, peer: peer, notify: false, indicate: false)
            device.subscriptionChanged(device.frames, peer: peer, notify: false, indicate: false)
        case 12:
            // Docs/CHAT.md, The chat channel: "JOIN on Frames is ignored".
            let handle = link(input.u8())
            let before = context.notifications
            write(ChatFrame.join.encoded(), on: device.frames, from: handle)
            fuzzCheck(context.notifications == before && device.channelMemberCount == 0,
                      "a JOIN on Frames from link \(handle) was not ignored")
        default:
            let name = Keys.senders[Int(input.u8()) % Keys.senders.count]
            let index = Int(input.u8())
            let key = index < Keys.members.count ? Keys.members[index].publicKey : nil
            trust?.pin(name, to: key)
            // An operator's word: lines of the name already queued or kept for catching up keep
            // the key they were said with, so the name is no longer checked in this input.
            shown[name] = nil
            pinned.insert(name)
        }
    }

    private func link(_ byte: UInt8) -> UInt16 { 0x40 + UInt16(byte) % UInt16(Self.linkCount) }

    private func connect(_ handle: UInt16, mtu: Int, framed: Bool) {
        if context.links[handle] == nil {
            let address = LEAddress(BluetoothAddress("C4:AA:00:00:00:\(String(handle, radix: 16))")!, isRandom: true)
            let peer = ATTPeer(connectionHandle: handle, address: address)
            context.links[handle] = RoomContext.Link(peer: peer, mtu: mtu)
            memberSide[handle] = ChatReassembly()
            device.peerConnected(peer)
        }
        guard let peer = context.links[handle]?.peer else { return }
        let characteristic = framed ? device.frames : device.message
        context.links[handle]?.subscribed.insert(ObjectIdentifier(characteristic))
        device.subscriptionChanged(characteristic, peer: peer, notify: true, indicate: false)
    }

    private func drop(_ handle: UInt16) {
        guard let link = context.links[handle] else { return }
        // As the stack reports a link's end: its subscriptions first, then the link.
        context.links[handle]?.subscribed = []
        device.subscriptionChanged(device.message, peer: link.peer, notify: false, indicate: false)
        device.subscriptionChanged(device.frames, peer: link.peer, notify: false, indicate: false)
        context.links[handle] = nil
        memberSide[handle] = nil
        device.peerDisconnected(link.peer)
    }

    /// A write as the ATT server hands it over: checked, then applied (at most 512 bytes, the
    /// longest attribute value, Vol 3, Part F, 3.2.9).
    private func write(_ value: [UInt8], on characteristic: Characteristic, from handle: UInt16) {
        guard let peer = context.links[handle]?.peer, value.count <= 512 else { return }
        let request = WriteRequest(peer: peer, offset: 0, value: ValueBytes(value[...]), withResponse: true)
        if characteristic.validateWrite?(request) == nil { _ = characteristic.onWrite?(request) }
    }

    private func signedMessage(_ input: inout FuzzBytes) {
        let handle = link(input.u8())
        let signerIndex = Int(input.u8()) % Keys.members.count
        let sender = Keys.senders[Int(input.u8()) % Keys.senders.count]
        let number = UInt32(input.u8())
        let text = Array(String(decoding: input.take(Int(input.u8())), as: UTF8.self).utf8)
        let field = input.u8() % 10
        var proof = ProofCache.sign(room: Keys.roomName, sender: sender, number: number, text: text, signer: signerIndex, ed25519: ed25519)
        var (claimedSender, claimedNumber, claimedText, hops) = (sender, number, text, ChatDevice.initialHops)
        switch field {
        case 1: proof = ProofCache.sign(room: "Other Room", sender: sender, number: number, text: text, signer: signerIndex, ed25519: ed25519)
        case 2: claimedSender = Keys.senders[(Keys.senders.firstIndex(of: sender)! + 1) % Keys.senders.count]
        case 3: claimedNumber &+= 1
        case 4: claimedText = claimedText.isEmpty ? [0x41] : [claimedText[0] ^ 0x01] + claimedText.dropFirst()
        case 5:
            proof = ChatProof(key: ProofCache.identities[(signerIndex + 1) % Keys.members.count], signature: proof.signature)
        case 6:
            var signature = proof.signature
            signature[Int(number) % signature.count] ^= 0x80
            proof = ChatProof(key: proof.key, signature: signature)
        case 7: hops = 0
        case 8: proof = ProofCache.seal(room: Keys.roomName, sender: sender, number: number, text: text, signer: signerIndex, otherRoomKey: false, ed25519: ed25519)
        case 9: proof = ProofCache.seal(room: Keys.roomName, sender: sender, number: number, text: text, signer: signerIndex, otherRoomKey: true, ed25519: ed25519)
        default: break
        }
        let id = ChatMessageID(sender: claimedSender, number: claimedNumber, proof: proof)
        channelFrame(claimedText, id: id, hops: hops)
        let mtu = context.links[handle]?.mtu ?? 23
        for frame in ChatFrame.frames(of: claimedText, id: id, hops: hops, limit: mtu - 3) {
            write(frame, on: device.frames, from: handle)
        }
    }

    /// On a chat channel one frame is one SDU (Docs/CHAT.md, The chat channel): the message's
    /// frame holds all of it, within the channel's MTU, and a member puts it together alone.
    private func channelFrame(_ text: [UInt8], id: ChatMessageID, hops: UInt8) {
        let sdu = ChatFrame.channelFrame(of: text, id: id, hops: hops)
        fuzzCheck(sdu.count <= ChatFrame.largestFrame, "a \(sdu.count)-byte channel frame, past the channel's MTU")
        guard let frame = try? ChatFrame(decoding: sdu[...]) else { fuzzFailure("a channel frame that does not decode: \(hex(sdu))") }
        var side = ChatReassembly()
        guard case let .message(whole, wholeText, _) = side.take(frame) else {
            fuzzFailure("a channel frame that is not a whole message: \(hex(sdu))")
        }
        fuzzCheck(whole.sender == id.sender && whole.number == id.number && (id.proof?.sealed != nil || wholeText == text),
                  "the channel frame of \(id) gave \(whole) with \(hex(wholeText))")
    }

    /// What the device notified: it fits, it decodes, and a member putting it together gets
    /// only messages that pass the oracles.
    private func notified(_ characteristic: Characteristic, _ peer: ATTPeer, _ value: [UInt8]) {
        let mtu = context.links[peer.connectionHandle]?.mtu ?? 23
        fuzzCheck(value.count <= mtu - 3, "a \(value.count)-byte notification at ATT_MTU \(mtu): \(hex(value))")
        if characteristic === device.message {
            fuzzCheck(String(validating: value, as: UTF8.self) != nil, "a plain member was notified bytes that are not UTF-8: \(hex(value))")
            return
        }
        guard let frame = try? ChatFrame(decoding: value[...]) else {
            fuzzFailure("the host notified a frame that does not decode: \(hex(value))")
        }
        guard var side = memberSide[peer.connectionHandle] else { return }
        let outcome = side.take(frame)
        memberSide[peer.connectionHandle] = side
        switch outcome {
        case let .message(id, text, _):
            check(id, text: text, where: "relayed to link \(peer.connectionHandle)")
        case .inconsistent:
            fuzzFailure("the host's frames to link \(peer.connectionHandle) do not put together: \(hex(value))")
        case .incomplete, .duplicate:
            break
        }
    }

    /// The oracles on a message a node would show.
    private func check(_ id: ChatMessageID, text: [UInt8], where place: String) {
        guard let trust else { return }
        guard let proof = id.proof else {
            // Announcements, and the host's own lines when it has no key, are the host's;
            // a member's unsigned line is unverified, and a signed-only room takes none.
            guard !id.sender.isEmpty, !(trust.identity == nil && id.sender == Keys.hostName) else { return }
            fuzzCheck(id.sender.hasPrefix(ChatTrust.unverifiedMark), "an unsigned message \(place) under '\(id.sender)', a name a key can hold")
            fuzzCheck(!trust.signedOnly && trust.roomKey == nil, "a signed-only or private room: an unsigned line of '\(id.sender)' \(place)")
            return
        }
        fuzzCheck(verifies(id, proof, text, room: trust.room),
                  "a message whose signature does not verify was \(place): \(id) key \(proof.key.fingerprint)")
        guard !id.sender.isEmpty else { return }
        fuzzCheck(!id.sender.hasPrefix(ChatTrust.unverifiedMark), "a signed message \(place) under the unverified name '\(id.sender)'")
        if pinned.contains(id.sender) { return }
        // A name that could not be bound (its link's budget of new names spent, or the table
        // full) is shown unverified, `~NAME`: no key is claimed for it.
        if trust.shownSender(id).hasPrefix(ChatTrust.unverifiedMark) {
            fuzzCheck(trust.bindings[id.sender] != proof.key, "'\(id.sender)' is bound to the key it spoke with, but shown unverified")
            return
        }
        if let first = shown[id.sender] {
            fuzzCheck(first == proof.key, "'\(id.sender)' was \(place) with key \(proof.key.fingerprint), but was shown with \(first.fingerprint)")
        } else if trust.bindings.count < ChatTrust.bindingLimit {
            shown[id.sender] = proof.key
        }
    }

    /// Verifications done in this input: a message relayed to three members is verified once
    /// (Ed25519 is a quarter of an execution's time). Not kept across inputs: memory kept past
    /// an input makes libFuzzer run a leak check after it, which cost a hundred times more.
    private struct Verified: Hashable {
        let id: ChatMessageID
        let signature: [UInt8]
        let sealed: [UInt8]?
        let text: [UInt8]
    }
    private var verified: [Verified: Bool] = [:]

    private func verifies(_ id: ChatMessageID, _ proof: ChatProof, _ text: [UInt8], room: String) -> Bool {
        // The stand-in costs less than the table's hashing.
        guard ed25519 else { return proof.verifies(room: room, sender: id.sender, number: id.number, text: text, scheme: signatures) }
        let key = Verified(id: id, signature: proof.signature, sealed: proof.sealed, text: text)
        if let known = verified[key] { return known }
        let result = ProofCache.verifies(proof, room: room, sender: id.sender, number: id.number, text: text)
        verified[key] = result
        return result
    }

    /// The end of an input: every link drops, the device stops, the clock passes every timer.
    func end() {
        for handle in context.links.keys.sorted() { drop(handle) }
        device.stop()
        fuzzCheck(!context.published, "the chat channel is still published after the device stopped")
        scheduler.advance(by: .seconds(60))
    }
}

/// The device's view of the links: who is connected, at which ATT_MTU, subscribed to what, and
/// whether a link's transmit queue is full (a notification is then refused, and the device waits
/// for `peripheralIsReady`).
final class RoomContext: DeviceContext {
    struct Link {
        let peer: ATTPeer
        let mtu: Int
        var full = false
        var subscribed: Set<ObjectIdentifier> = []
    }
    let scheduler: TimerScheduling
    let logger = fuzzLogger()
    var links: [UInt16: Link] = [:]
    var notified: (Characteristic, ATTPeer, [UInt8]) -> Void = { _, _, _ in }
    /// Notifications handed to `notified` so far.
    private(set) var notifications = 0
    /// The SPSM the device's chat channel was published on (the stack's first dynamic SPSM).
    static let chatSPSM: UInt16 = 0x0080
    private(set) var published = false
    private var buffer = ValueBuffer()

    init(scheduler: TimerScheduling) { self.scheduler = scheduler }

    var peers: [ATTPeer] { links.values.map(\.peer).sorted { $0.connectionHandle < $1.connectionHandle } }

    func notify(_ characteristic: Characteristic, to peer: ATTPeer?, encode: (inout ValueBuffer) -> Void) -> Bool {
        buffer.reset()
        encode(&buffer)
        let value = Array(buffer.bytes)
        var sent = true
        for link in links.values.sorted(by: { $0.peer.connectionHandle < $1.peer.connectionHandle })
        where (peer == nil || link.peer == peer) && link.subscribed.contains(ObjectIdentifier(characteristic)) {
            if link.full {
                sent = false
            } else {
                // As the stack does, cut to ATT_MTU - 3: the oracle sees what the device asked for.
                notifications += 1
                notified(characteristic, link.peer, value)
            }
        }
        return sent
    }

    func indicate(_ characteristic: Characteristic, to peer: ATTPeer?, completion: IndicationCompletion?,
                  encode: (inout ValueBuffer) -> Void) -> Bool {
        fuzzFailure("the chat device indicated")
    }

    func attMTU(of peer: ATTPeer) -> Int { links[peer.connectionHandle]?.mtu ?? 23 }

    func isSubscribed(_ characteristic: Characteristic, peer: ATTPeer?, indications: Bool) -> Bool {
        !indications && links.values.contains { (peer == nil || $0.peer == peer) && $0.subscribed.contains(ObjectIdentifier(characteristic)) }
    }

    func log(_ event: BlemuEvent, _ level: Logger.Level, _ message: @autoclosure () -> String,
             _ metadata: @autoclosure () -> Logger.Metadata) {}

    func linkSecurity(of peer: ATTPeer) -> LinkSecurity { .unencrypted }
    var pairsWithPasskey: Bool { false }

    // The chat channel (Docs/CHAT.md) is published once at start and withdrawn at stop; no
    // channel opens here (its members are not fuzzed by this target: a CreditBasedChannel needs
    // the L2CAP layer under it), so its frames reach the device only on Frames.
    func publishL2CAPChannel(security: ChannelSecurity, parameters: ChannelParameters,
                             delegate: CreditBasedChannelDelegate) -> UInt16? {
        fuzzCheck(!published, "the chat device published a second L2CAP channel")
        fuzzCheck(parameters.mtu == UInt16(ChatFrame.largestFrame), "the chat channel's MTU is \(parameters.mtu)")
        published = true
        return Self.chatSPSM
    }
    func unpublishL2CAPChannel(_ spsm: UInt16) {
        fuzzCheck(published && spsm == Self.chatSPSM, "the chat device unpublished SPSM \(spsm), not its channel's")
        published = false
    }
}

/// Ed25519 signatures (and private rooms' sealed texts) the target made or verified, kept across
/// inputs: signing the typed ops' messages and verifying what the host shows were a third of an
/// execution, and the fuzzer signs the same few messages over and over. The table is one block
/// allocated before the first input and never grows (memory an input keeps makes libFuzzer run
/// that input again and then a leak check: a dictionary kept across inputs once made the target
/// 20 times slower). A slot holds one key and its value; a new key takes its slot from the old.
///
/// The oracle stays exact: a proof counts as verified only when its key is a known identity's
/// and its signature is byte for byte the one that identity's key makes for those signed
/// bytes; anything else is verified by Ed25519 as before.
enum ProofCache {
    static let slotCount = 4096
    /// The public keys of the members (0–2) and the host (3).
    static let identities = Keys.members.map(\.publicKey) + [Keys.host.publicKey]
    /// Keys: a tag, the identity, then signed bytes (at most 14 + 1 + 10 + 1 + 32 + 4 + 283).
    static let keyCapacity = 384
    /// Values: a signature (64) or a sealed text (12 + 255 + 16).
    static let valueCapacity = 288
    static let slotSize = 2 + keyCapacity + 2 + valueCapacity
    nonisolated(unsafe) static let slab: UnsafeMutablePointer<UInt8> = {
        let slab = UnsafeMutablePointer<UInt8>.allocate(capacity: slotCount * slotSize)
        slab.initialize(repeating: 0, count: slotCount * slotSize)
        return slab
    }()

    private static func slot(_ key: [UInt8]) -> UnsafeMutablePointer<UInt8> {
        var hash: UInt64 = 0xCBF2_9CE4_8422_2325  // FNV-1a
        for byte in key { hash = (hash ^ UInt64(byte)) &* 0x0100_0000_01B3 }
        return slab + Int(hash % UInt64(slotCount)) * slotSize
    }

    static func lookup(_ key: [UInt8]) -> [UInt8]? {
        let slot = slot(key)
        guard Int(slot[0]) | Int(slot[1]) << 8 == key.count else { return nil }
        for i in key.indices where slot[2 + i] != key[i] { return nil }
        let length = Int(slot[2 + keyCapacity]) | Int(slot[3 + keyCapacity]) << 8
        return Array(UnsafeBufferPointer(start: slot + 4 + keyCapacity, count: length))
    }

    static func store(_ key: [UInt8], _ value: [UInt8]) {
        guard key.count <= keyCapacity, value.count <= valueCapacity else { return }
        let slot = slot(key)
        slot[0] = UInt8(key.count & 0xFF)
        slot[1] = UInt8(key.count >> 8)
        for (i, byte) in key.enumerated() { slot[2 + i] = byte }
        slot[2 + keyCapacity] = UInt8(value.count & 0xFF)
        slot[3 + keyCapacity] = UInt8(value.count >> 8)
        for (i, byte) in value.enumerated() { slot[4 + keyCapacity + i] = byte }
    }

    /// Identity `index`'s signature of `message`: members 0–2, the host 3 (the stand-in's
    /// unless `ed25519`).
    private static func signature(of message: [UInt8], by index: Int, ed25519: Bool) -> [UInt8] {
        guard ed25519 else { return StandInSignatures.tag(identities[index], message) }
        let key = [0, UInt8(index)] + message
        if let known = lookup(key) { return known }
        let signature = (index < Keys.members.count ? Keys.members[index] : Keys.host).signature(of: message)
        store(key, signature)
        return signature
    }

    /// `ChatProof.sign`, by member `signer`.
    static func sign(room: String, sender: String, number: UInt32, text: [UInt8], signer: Int, ed25519: Bool) -> ChatProof {
        let message = ChatProof.signedBytes(room: room, sender: sender, number: number, text: text)
        return ChatProof(key: identities[signer], signature: signature(of: message, by: signer, ed25519: ed25519))
    }

    /// `ChatProof.seal`, by member `signer`, with the room's key or another passphrase's.
    static func seal(room: String, sender: String, number: UInt32, text: [UInt8], signer: Int, otherRoomKey: Bool, ed25519: Bool) -> ChatProof {
        let publicKey = identities[signer]
        let key = [1, UInt8(signer), otherRoomKey ? 1 : 0] + ChatProof.signedBytes(room: room, sender: sender, number: number, text: text)
        let sealed: [UInt8]
        if let known = lookup(key) {
            sealed = known
        } else {
            let context = ChatProof.sealingContext(key: publicKey, room: room, sender: sender, number: number)
            sealed = (otherRoomKey ? Keys.otherRoomKey : Keys.roomKey).seal(text, authenticating: context)
            store(key, sealed)
        }
        let message = ChatProof.signedBytes(room: room, sender: sender, number: number, text: sealed)
        return ChatProof(key: publicKey, signature: signature(of: message, by: signer, ed25519: ed25519), sealed: sealed)
    }

    /// `proof.verifies(...)`: true at once for the signature a known identity's key makes for
    /// these signed bytes (made once, kept), else Ed25519's answer.
    static func verifies(_ proof: ChatProof, room: String, sender: String, number: UInt32, text: [UInt8]) -> Bool {
        guard let index = identities.firstIndex(of: proof.key) else {
            return proof.verifies(room: room, sender: sender, number: number, text: text)
        }
        // Ed25519 signing is deterministic (RFC 8032, 5.1.6) and cheaper than verifying: the
        // signature the identity's key makes for these bytes, if it is this one, verifies.
        // The host's own lines (signed in the stack) were most of the oracle's verifications.
        let message = ChatProof.signedBytes(room: room, sender: sender, number: number, text: proof.sealed ?? text)
        if signature(of: message, by: index, ed25519: true) == proof.signature { return true }
        return proof.verifies(room: room, sender: sender, number: number, text: text)
    }
}

/// The stand-in for Ed25519 (BoringSSL fuzzes the same way: FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION):
/// this target fuzzes the chat protocol around signatures (what is shown, relayed, bound to a
/// name), and Ed25519 was most of an execution. A signature is a 64-byte tag over the public
/// key and the signed bytes: deterministic, and any changed byte of the message changes it
/// (FNV-1a's step `(h ^ b) &* p` is a bijection of `h` for each `b`, so two messages of one length
/// that differ anywhere end with different `h`), so the forgery ops are still refused and the
/// oracles keep their meaning. Anyone can make it for any key, the fuzzer too (a raw frame
/// "signed" for a key of its choosing): such a frame verifies for the host and the oracle alike,
/// as a real signature by that key would. Config bits 4 and 5 keep real Ed25519 in reach.
enum StandInSignatures {
    static let scheme = ChatSignatureScheme(sign: { key, message in tag(key.publicKey, message) },
                                            verify: { key, signature, message in signature == tag(key, message) })

    static func tag(_ key: ChatPublicKey, _ message: [UInt8]) -> [UInt8] {
        var hash: UInt64 = 0xCBF2_9CE4_8422_2325
        for byte in key.bytes { hash = (hash ^ UInt64(byte)) &* 0x0100_0000_01B3 }
        for byte in message { hash = (hash ^ UInt64(byte)) &* 0x0100_0000_01B3 }
        hash ^= UInt64(message.count)
        var tag = [UInt8](repeating: 0, count: ChatPublicKey.signatureLength)
        for lane in 0..<8 {
            // splitmix64 of the hash and the lane: 8 different words.
            var z = hash &+ UInt64(lane + 1) &* 0x9E37_79B9_7F4A_7C15
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            z ^= z >> 31
            for i in 0..<8 { tag[lane * 8 + i] = UInt8(truncatingIfNeeded: z >> (8 * UInt64(i))) }
        }
        return tag
    }
}

@_cdecl("chat_frames_main")
public func chatFramesMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    // Made before the first input, so no input allocates what stays.
    _ = ProofCache.slab
    _ = (ProofCache.identities, Keys.roomKey, Keys.otherRoomKey)
    return blemu_fuzz_driver(argc, argv) { data, size in fuzz(data, size) }
}
