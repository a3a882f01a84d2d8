import BlemuCore
import BlemuCrypto

/// The framed chat between blemu nodes (Docs/CHAT.md, "Frames"): on a second characteristic of
/// the chat service, so plain clients never see it. A message has an identity — its sender's
/// name and a number the sender picks — travels in pieces that fit any ATT_MTU, is delivered
/// once however often it is sent, and the host acknowledges it to the member that wrote it.
///
///     DATA  0x01 | number u32 | hops u8 | sender length u8 | total u16 | first chunk
///     MORE  0x03 | offset u16 | chunk
///     ACK   0x02 | number u32 | sender
///     RESUME 0x04 | number u32 | sender
///     SIGNED 0x05 | number u32 | hops u8 | sender length u8 | total u16 | first chunk
///     SEALED 0x06 | number u32 | hops u8 | sender length u8 | total u16 | first chunk
///     JOIN  0x07   (on a chat channel only: a member's first frame with nothing to resume)
///
/// Little-endian. The pieces carry one stream, the sender's name (UTF-8, at most 32 bytes)
/// then the text (UTF-8, at most 4096 bytes); `total` is the stream's length and `offset`
/// where a chunk goes in it. A MORE continues the last DATA on the same link (ATT keeps a
/// link's PDUs in order, Vol 3, Part F, 3.3), so at ATT_MTU 23 a DATA carries 11 bytes and a
/// MORE 17. `hops` counts the relays a message may still take (bridges count it down). An ACK
/// names the identity it acknowledges: the number and the sender's name (UTF-8, at most 32
/// bytes, to the end of the frame; empty: the member it goes to), since a bridge writes the
/// messages of others too. A member that joins again sends RESUME with the identity of the
/// last message it received (before it subscribes): the host replays what came after it.
/// SIGNED starts a signed message: as DATA, but its stream begins with the origin's Ed25519
/// public key (32 bytes) and signature (64 bytes) over `ChatProof.signedBytes` (room, sender,
/// number, text; not hops), then the sender's name and the text. SEALED is SIGNED in a private
/// room: the text is sealed (`ChatProof.sealed`: nonce, ciphertext, tag) and signed as it is sealed.
public enum ChatFrame: Equatable, Sendable {
    case data(number: UInt32, hops: UInt8, senderLength: Int, total: Int, chunk: [UInt8])
    /// A signed message's first piece: its stream is key | signature | sender | text.
    case signedData(number: UInt32, hops: UInt8, senderLength: Int, total: Int, chunk: [UInt8])
    /// A private room's message's first piece: key | signature | sender | sealed text.
    case sealedData(number: UInt32, hops: UInt8, senderLength: Int, total: Int, chunk: [UInt8])
    case more(offset: Int, chunk: [UInt8])
    /// `sender` empty: the message of the member the ACK goes to.
    case ack(number: UInt32, sender: String = "")
    /// From a member joining again: the last message it received; what came after is replayed.
    case resume(number: UInt32, sender: String)
    /// A member's first frame on a chat channel when it has nothing to resume: it joins the
    /// room from now on (on a channel, the first frame is what subscribing is on Frames).
    case join

    public static let dataType: UInt8 = 0x01
    public static let ackType: UInt8 = 0x02
    public static let moreType: UInt8 = 0x03
    public static let resumeType: UInt8 = 0x04
    public static let signedDataType: UInt8 = 0x05
    public static let sealedDataType: UInt8 = 0x06
    public static let joinType: UInt8 = 0x07
    /// The longest frame: a SEALED carrying a whole message (header, proof, name, sealed text).
    /// A chat channel's MTU takes it, so a message is always one SDU there.
    public static let largestFrame = dataHeaderSize + proofSize + maxSenderBytes + maxMessageBytes + sealingOverhead
    /// What sealing adds to a text: the nonce and the tag.
    public static let sealingOverhead = ChatRoomKey.nonceLength + ChatRoomKey.tagLength
    /// The key and signature a signed stream starts with.
    public static let proofSize = ChatPublicKey.length + ChatPublicKey.signatureLength
    /// The longest message, in UTF-8 bytes.
    public static let maxMessageBytes = 4096
    /// The longest sender name, in UTF-8 bytes.
    public static let maxSenderBytes = 32
    /// Bytes before the chunk.
    public static let dataHeaderSize = 9
    public static let moreHeaderSize = 3

    public func encoded() -> [UInt8] {
        var out: [UInt8] = []
        switch self {
        case let .data(number, hops, senderLength, total, chunk), let .signedData(number, hops, senderLength, total, chunk),
             let .sealedData(number, hops, senderLength, total, chunk):
            switch self {
            case .data: out.append(Self.dataType)
            case .signedData: out.append(Self.signedDataType)
            default: out.append(Self.sealedDataType)
            }
            out.appendLE(number)
            out.append(hops)
            out.append(UInt8(clamping: senderLength))
            out.appendLE(UInt16(clamping: total))
            out += chunk
        case let .more(offset, chunk):
            out.append(Self.moreType)
            out.appendLE(UInt16(clamping: offset))
            out += chunk
        case let .ack(number, sender):
            out.append(Self.ackType)
            out.appendLE(number)
            out += ChatMessageID(sender: sender, number: number).senderBytes
        case let .resume(number, sender):
            out.append(Self.resumeType)
            out.appendLE(number)
            out += ChatMessageID(sender: sender, number: number).senderBytes
        case .join:
            out.append(Self.joinType)
        }
        return out
    }

    /// Total: any bytes give a frame or an error saying what is wrong.
    public init(decoding bytes: ArraySlice<UInt8>) throws(DecodeError) {
        var reader = ByteReader(bytes)
        let type = try reader.u8()
        let limit = Self.proofSize + Self.maxSenderBytes + Self.maxMessageBytes + Self.sealingOverhead
        switch type {
        case Self.dataType, Self.signedDataType, Self.sealedDataType:
            let number = try reader.u32()
            let hops = try reader.u8()
            let senderLength = Int(try reader.u8())
            let total = Int(try reader.u16())
            let chunk = Array(reader.rest())
            // A signed stream has room for its key and signature: a shorter one is truncated.
            let head = senderLength + (type == Self.dataType ? 0 : Self.proofSize)
            let body = Self.maxMessageBytes + (type == Self.sealedDataType ? Self.sealingOverhead : 0)
            guard senderLength <= Self.maxSenderBytes else { throw DecodeError(.invalidValue, "a \(senderLength)-byte sender name") }
            guard head <= total, total - head <= body else {
                throw DecodeError(.invalidValue, "a \(total)-byte stream with a \(head)-byte head")
            }
            guard chunk.count <= total else { throw DecodeError(.invalidValue, "a \(chunk.count)-byte chunk of a \(total)-byte stream") }
            switch type {
            case Self.dataType: self = .data(number: number, hops: hops, senderLength: senderLength, total: total, chunk: chunk)
            case Self.signedDataType: self = .signedData(number: number, hops: hops, senderLength: senderLength, total: total, chunk: chunk)
            default: self = .sealedData(number: number, hops: hops, senderLength: senderLength, total: total, chunk: chunk)
            }
        case Self.moreType:
            let offset = Int(try reader.u16())
            let chunk = Array(reader.rest())
            guard offset + chunk.count <= limit else { throw DecodeError(.invalidValue, "chunk \(offset)+\(chunk.count) past \(limit) bytes") }
            self = .more(offset: offset, chunk: chunk)
        case Self.ackType, Self.resumeType:
            let number = try reader.u32()
            let sender = reader.rest()
            guard sender.count <= Self.maxSenderBytes else { throw DecodeError(.invalidValue, "a \(sender.count)-byte sender name") }
            guard let name = String(validating: sender, as: UTF8.self) else {
                throw DecodeError(.invalidValue, "a sender name that is not UTF-8")
            }
            self = type == Self.ackType ? .ack(number: number, sender: name) : .resume(number: number, sender: name)
        case Self.joinType:
            guard reader.isAtEnd else { throw DecodeError(.invalidValue, "a JOIN with \(reader.remaining) bytes after it") }
            self = .join
        default:
            throw DecodeError(.unknownType, "chat frame type \(Hex.byte(type))")
        }
    }

    /// An ACK of `id` that fits a notification of at most `limit` bytes (ATT_MTU - 3; at least
    /// 20): a sender name too long for it (more than 15 bytes at ATT_MTU 23) is cut between
    /// characters, and the member takes it for the message whose name starts with it
    /// (`ChatMessageID.isAcknowledged`). Whole, a 32-byte name made a 37-byte ACK, which the
    /// stack cut to 20 bytes: not UTF-8, or another name, so the message was never acknowledged.
    public static func acknowledgement(of id: ChatMessageID, limit: Int) -> [UInt8] {
        let room = min(512, max(20, limit)) - 5
        var cut = ""
        var bytes = 0
        for character in id.sender {
            let count = String(character).utf8.count
            guard bytes + count <= room else { break }
            bytes += count
            cut.append(character)
        }
        return ChatFrame.ack(number: id.number, sender: cut).encoded()
    }

    /// A message as one DATA frame and the MOREs that follow it, each of at most `limit` bytes
    /// (ATT_MTU - 3 for a notification or a write; at least 20, ATT's default, and at most 512,
    /// the longest attribute value, Vol 3, Part F, 3.2.9).
    public static func frames(of text: [UInt8], id: ChatMessageID, hops: UInt8, limit: Int) -> [[UInt8]] {
        frames(of: text, id: id, hops: hops, cut: min(512, max(20, limit)))
    }

    /// A message as one frame, whole (DATA, SIGNED or SEALED, no MORE): on a chat channel each
    /// frame is one SDU, which L2CAP cuts into K-frames itself (Vol 3, Part A, 3.4.3). At most
    /// `largestFrame` bytes.
    public static func channelFrame(of text: [UInt8], id: ChatMessageID, hops: UInt8) -> [UInt8] {
        frames(of: text, id: id, hops: hops, cut: largestFrame)[0]
    }

    private static func frames(of text: [UInt8], id: ChatMessageID, hops: UInt8, cut limit: Int) -> [[UInt8]] {
        let proof = id.proof.map { $0.key.bytes + $0.signature } ?? []
        // A sealed message carries its sealed text, never `text` (which a relay cannot know).
        let body = id.proof?.sealed.map { $0.prefix(maxMessageBytes + sealingOverhead) } ?? text.prefix(maxMessageBytes)
        let stream = proof + id.senderBytes + body
        let first = min(stream.count, limit - dataHeaderSize)
        let chunk = Array(stream[..<first])
        let (number, length) = (id.number, id.senderBytes.count)
        let start: ChatFrame = switch id.proof {
        case nil: .data(number: number, hops: hops, senderLength: length, total: stream.count, chunk: chunk)
        case let proof? where proof.sealed == nil: .signedData(number: number, hops: hops, senderLength: length, total: stream.count, chunk: chunk)
        default: .sealedData(number: number, hops: hops, senderLength: length, total: stream.count, chunk: chunk)
        }
        var frames = [start.encoded()]
        var offset = first
        while offset < stream.count {
            let end = min(stream.count, offset + limit - moreHeaderSize)
            frames.append(ChatFrame.more(offset: offset, chunk: Array(stream[offset..<end])).encoded())
            offset = end
        }
        return frames
    }
}

/// Who sent a message, and its number: together, its identity. A signed message's identity is
/// also its origin's key (`proof.key`): two messages that claim one name and number with
/// different keys (or one signed, one not) are two identities, so nobody can take another's
/// numbers (delivered-once, ACK and RESUME matching keep them apart). The signature travels with
/// the identity (a bridge relays it unchanged) but is no part of it.
public struct ChatMessageID: Hashable, Sendable, CustomStringConvertible {
    public let sender: String
    public let number: UInt32
    let senderBytes: [UInt8]
    /// The origin's key and signature, for a signed message.
    public let proof: ChatProof?

    public static func == (a: Self, b: Self) -> Bool {
        a.number == b.number && a.senderBytes == b.senderBytes && a.proof?.key == b.proof?.key
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(number)
        hasher.combine(senderBytes)
        hasher.combine(proof?.key)
    }

    /// Whether an ACK or RESUME (number and sender only) names this message.
    public func isNamed(number: UInt32, sender: String) -> Bool {
        self.number == number && self.sender == sender
    }

    /// Whether an ACK of `number` naming `sender` acknowledges this message: its name, or the
    /// start of its name where the ACK had to cut it (`ChatFrame.acknowledgement`: at least
    /// 12 bytes, what 15 bytes leave between 4-byte characters). Look for an exact match first.
    public func isAcknowledged(number: UInt32, sender: String) -> Bool {
        guard self.number == number else { return false }
        let named = Array(sender.utf8)
        return named == senderBytes || (named.count >= 12 && named.count < senderBytes.count && senderBytes.starts(with: named))
    }

    /// The same identity with `proof` (signed by its origin).
    public func with(proof: ChatProof?) -> ChatMessageID {
        ChatMessageID(sender: sender, number: number, proof: proof)
    }

    /// `sender` is cut to `ChatFrame.maxSenderBytes` of UTF-8, between characters.
    public init(sender: String, number: UInt32, proof: ChatProof? = nil) {
        self.proof = proof
        var bytes: [UInt8] = []
        for character in sender {
            let next = Array(String(character).utf8)
            guard bytes.count + next.count <= ChatFrame.maxSenderBytes else { break }
            bytes += next
        }
        senderBytes = bytes
        self.sender = String(decoding: bytes, as: UTF8.self)
        self.number = number
    }

    public var description: String { "\(sender)#\(number)" }
}

/// Messages being put together from the frames of one link, and the identities already
/// delivered: each message comes out once, whole, whatever was repeated or resent. Bounded: one
/// message in pieces at a time (a link's frames come in order) and the last `rememberedLimit`
/// identities.
public struct ChatReassembly {
    public static let rememberedLimit = 1024

    private var current: (number: UInt32, hops: UInt8, senderLength: Int, total: Int, signed: Bool, sealed: Bool, bytes: [UInt8])?
    private var delivered: Set<ChatMessageID> = []
    private var deliveredOrder: [ChatMessageID] = []

    public init() {}

    public enum Outcome: Equatable {
        /// More pieces are needed.
        case incomplete
        /// The whole message, the first time.
        case message(ChatMessageID, text: [UInt8], hops: UInt8)
        /// A message delivered before (a resend): acknowledge it again, deliver nothing.
        case duplicate(ChatMessageID)
        /// A MORE that does not continue the message being put together, or a name or text
        /// that is not UTF-8: dropped.
        case inconsistent
    }

    /// Takes one frame (ACKs and RESUMEs are not for reassembly: `.incomplete`).
    public mutating func take(_ frame: ChatFrame) -> Outcome {
        switch frame {
        case .ack, .resume, .join:
            return .incomplete
        case let .data(number, hops, senderLength, total, chunk):
            current = (number, hops, senderLength, total, false, false, chunk)
        case let .signedData(number, hops, senderLength, total, chunk):
            current = (number, hops, senderLength, total, true, false, chunk)
        case let .sealedData(number, hops, senderLength, total, chunk):
            current = (number, hops, senderLength, total, true, true, chunk)
        case let .more(offset, chunk):
            guard var message = current, offset == message.bytes.count, offset + chunk.count <= message.total else {
                current = nil
                return .inconsistent
            }
            message.bytes += chunk
            current = message
        }
        guard let message = current, message.bytes.count >= message.total else { return .incomplete }
        current = nil
        // The decoder let only streams with room for the proof and the sender through.
        var proof: ChatProof?
        var stream = message.bytes[...]
        if message.signed {
            guard let key = try? ChatPublicKey(stream.prefix(ChatPublicKey.length)) else { return .inconsistent }
            let signature = Array(stream.dropFirst(ChatPublicKey.length).prefix(ChatPublicKey.signatureLength))
            stream = stream.dropFirst(ChatFrame.proofSize)
            // Sealed: the text is the room's secret, carried in the proof; what comes out is empty.
            proof = ChatProof(key: key, signature: signature,
                              sealed: message.sealed ? Array(stream.dropFirst(message.senderLength)) : nil)
        }
        let senderBytes = stream.prefix(message.senderLength)
        let text = message.sealed ? [] : Array(stream.dropFirst(message.senderLength))
        guard let sender = String(validating: senderBytes, as: UTF8.self), String(validating: text, as: UTF8.self) != nil else {
            return .inconsistent
        }
        let id = ChatMessageID(sender: sender, number: message.number, proof: proof)
        if delivered.contains(id) { return .duplicate(id) }
        remember(id)
        return .message(id, text: text, hops: message.hops)
    }

    /// Marks a message as delivered (one this node sent itself, so its echo is not taken).
    public mutating func remember(_ id: ChatMessageID) {
        guard delivered.insert(id).inserted else { return }
        deliveredOrder.append(id)
        if deliveredOrder.count > Self.rememberedLimit {
            delivered.remove(deliveredOrder.removeFirst())
        }
    }

    /// Whether `id` came out (or was remembered) among the last `rememberedLimit`.
    public func hasDelivered(_ id: ChatMessageID) -> Bool { delivered.contains(id) }

    /// Whether a message is being put together.
    public var isPending: Bool { current != nil }
}

/// A signed message's proof: its origin's public key and the Ed25519 signature over
/// `signedBytes` — what identifies the message and what it says, in its room; not `hops`, which
/// bridges change. A frame replayed with another text, number, sender or into another room fails.
public struct ChatProof: Hashable, Sendable {
    public let key: ChatPublicKey
    /// 64 bytes when made here; a frame's may be anything (verification fails then).
    public let signature: [UInt8]
    /// In a private room: the text sealed with the room's key (nonce | ciphertext | tag), which
    /// the signature covers in place of the text.
    public let sealed: [UInt8]?

    public init(key: ChatPublicKey, signature: [UInt8], sealed: [UInt8]? = nil) {
        self.key = key
        self.signature = signature
        self.sealed = sealed
    }

    /// What sealing binds to the ciphertext: the origin's key and the message's identity in its room.
    public static func sealingContext(key: ChatPublicKey, room: String, sender: String, number: UInt32) -> [UInt8] {
        Array("blemu-chat-sealed-v1".utf8) + [0] + key.bytes + signedBytes(room: room, sender: sender, number: number, text: [])
    }

    /// A private room's message: `text` sealed with `roomKey` (its identity and origin's key
    /// authenticated with it), then signed as sealed.
    public static func seal(room: String, sender: String, number: UInt32, text: some Collection<UInt8>,
                            with key: ChatSigningKey, roomKey: ChatRoomKey, scheme: ChatSignatureScheme = .ed25519) -> ChatProof {
        let sealed = roomKey.seal(Array(text), authenticating: sealingContext(key: key.publicKey, room: room, sender: sender, number: number))
        let signature = scheme.sign(key, signedBytes(room: room, sender: sender, number: number, text: sealed))
        return ChatProof(key: key.publicKey, signature: signature, sealed: sealed)
    }

    /// The text of a sealed message, or nil: not sealed, or not with this room key and identity.
    public func open(room: String, sender: String, number: UInt32, with roomKey: ChatRoomKey) -> [UInt8]? {
        guard let sealed else { return nil }
        return roomKey.open(sealed, authenticating: Self.sealingContext(key: key, room: room, sender: sender, number: number))
    }

    /// `blemu-chat-v1` 0x00 | room length u8 | room | sender length u8 | sender | number u32 LE | text.
    /// Lengths are bytes of UTF-8; room and sender are cut as frames cut them (at most 255 and 32).
    public static func signedBytes(room: String, sender: String, number: UInt32, text: some Collection<UInt8>) -> [UInt8] {
        let roomBytes = Array(room.utf8.prefix(255))
        let senderBytes = ChatMessageID(sender: sender, number: number).senderBytes
        var out = Array("blemu-chat-v1".utf8) + [0]
        out.append(UInt8(roomBytes.count))
        out += roomBytes
        out.append(UInt8(senderBytes.count))
        out += senderBytes
        out.appendLE(number)
        out += text
        return out
    }

    /// The proof of `text` said as `sender` number `number` in `room`, by `key`.
    public static func sign(room: String, sender: String, number: UInt32, text: some Collection<UInt8>, with key: ChatSigningKey,
                            scheme: ChatSignatureScheme = .ed25519) -> ChatProof {
        ChatProof(key: key.publicKey, signature: scheme.sign(key, signedBytes(room: room, sender: sender, number: number, text: text)))
    }

    /// Whether this proof is the key's signature of that message in that room (of its sealed
    /// text, for a sealed one: `text` is not looked at then).
    public func verifies(room: String, sender: String, number: UInt32, text: some Collection<UInt8>,
                         scheme: ChatSignatureScheme = .ed25519) -> Bool {
        if let sealed { return scheme.verify(key, signature, Self.signedBytes(room: room, sender: sender, number: number, text: sealed)) }
        return scheme.verify(key, signature, Self.signedBytes(room: room, sender: sender, number: number, text: text))
    }
}
