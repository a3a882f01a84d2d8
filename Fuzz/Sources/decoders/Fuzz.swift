import BlemuATT
import BlemuBenchProtocol
import BlemuChatProtocol
import BlemuCore
import BlemuDevices
import BlemuHCI
import BlemuL2CAP
import BlemuTransport
import FuzzSupport

/// `decoders`: every decoder of bytes from outside — advertising data, HCI events, ACL
/// packets, each ATT PDU, LE signalling commands, connection parameters, H4 framing, the
/// Heart Rate Measurement, the chat's frames, bumble-bench's packets and its length-prefixed
/// stream — on the input, both at index 0 and as a slice of a larger buffer
/// (the answers must agree), and, for what decodes, encoded and decoded again (the value must
/// survive). The advertising payload builder runs the other way: content from the input is
/// built into the two 31-byte payloads and read back with the decoder.
///
/// Input: a selector byte (mod 13), then the bytes for that decoder. (The control socket's
/// request parser has a target of its own, `control`.)
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    var input = FuzzBytes(data, size)
    let selector = input.u8() % 13
    let bytes = input.rest()
    switch selector {
    case 0: adStructures(bytes)
    case 1: advertisingContent(bytes)
    case 2: advertisingBuild(bytes)
    case 3: hciEvent(bytes)
    case 4: aclPacket(bytes)
    case 5: attPDUs(bytes)
    case 6: signaling(bytes)
    case 7: connectionParameters(bytes)
    case 8: h4(bytes)
    case 9: heartRateMeasurement(bytes)
    case 10: chatFrames(bytes)
    case 11: benchPacket(bytes)
    default: benchStream(bytes)
    }
    return 0
}

/// The same bytes as a slice that does not start at index 0.
func shifted(_ bytes: [UInt8]) -> ArraySlice<UInt8> {
    ([0xA5, 0x5A, 0xFF] + bytes + [0xEE])[3..<(3 + bytes.count)]
}

/// Decodes at index 0 and from a shifted slice (`moved`, when the caller made it already); both
/// must agree. The name is made only for a failure (a type's name through `String(describing:)`
/// is the runtime's reflection: for every ATT PDU type, a sixth of the target's time).
func decodeBoth<T: Equatable>(_ bytes: [UInt8], _ name: @autoclosure () -> String, moved: ArraySlice<UInt8>? = nil,
                              _ decode: (ArraySlice<UInt8>) throws(DecodeError) -> T) -> T? {
    let a = try? decode(bytes[...])
    let b = try? decode(moved ?? shifted(bytes))
    fuzzCheck(a == b, "\(name()) decodes \(hex(bytes)) differently from a shifted slice")
    return a
}

func adStructures(_ bytes: [UInt8]) {
    let decode: (ArraySlice<UInt8>) throws(DecodeError) -> [[UInt8]] = { (s: ArraySlice<UInt8>) throws(DecodeError) in
        try AdvertisingPayload.parseADStructures(s).map { [$0.type] + Array($0.data) }
    }
    guard let structures = decodeBoth(bytes, "parseADStructures", decode) else { return }
    // Every structure is length, type, data: together no more than the input.
    let total = structures.reduce(0) { $0 + 1 + $1.count }
    fuzzCheck(total <= bytes.count, "AD structures of \(total) bytes from \(bytes.count)")
}

func advertisingContent(_ bytes: [UInt8]) {
    guard let split = bytes.first else { return }
    let body = Array(bytes.dropFirst())
    let cut = min(Int(split), body.count)
    let ad = Array(body[..<cut])
    let sr = Array(body[cut...])
    let a = try? AdvertisingContent(decodingAdvertisingData: ad[...], scanResponseData: sr[...])
    let b = try? AdvertisingContent(decodingAdvertisingData: shifted(ad), scanResponseData: shifted(sr))
    fuzzCheck(a == b, "AdvertisingContent decodes \(hex(ad)) / \(hex(sr)) differently from shifted slices")
    // What was decoded builds into payloads that are legal, whatever it was.
    if let a { checkBuild(a) }
}

func advertisingBuild(_ bytes: [UInt8]) {
    var input = FuzzBytes(bytes)
    let shape = input.u8()
    var content = AdvertisingContent(flags: input.u8())
    if shape & 0x01 != 0 { content.appearance = input.u16() }
    if shape & 0x02 != 0 { content.txPowerLevel = Int8(bitPattern: input.u8()) }
    if shape & 0x04 != 0 { content.manufacturerData = input.take(Int(input.u8() % 40)) }
    for _ in 0..<Int((shape >> 3) & 0x07) {
        let kind = input.u8()
        switch kind % 3 {
        case 0: content.serviceUUIDs.append(BluetoothUUID(input.u16()))
        case 1: content.serviceUUIDs.append(BluetoothUUID(uint32: UInt32(input.u16()) << 16 | UInt32(input.u16())))
        default:
            var raw = input.take(16)
            raw += [UInt8](repeating: 0, count: 16 - raw.count)
            if let uuid = try? BluetoothUUID(littleEndian: raw[...]) { content.serviceUUIDs.append(uuid) }
        }
    }
    content.name = String(decoding: input.rest(), as: UTF8.self)
    checkBuild(content)
}

/// `build` keeps its promises: two payloads of at most 31 bytes that the decoder reads back as
/// (a part of) the content, all of it when nothing was omitted.
func checkBuild(_ content: AdvertisingContent) {
    let payload = AdvertisingPayload.build(content)
    fuzzCheck(payload.advertisingData.count <= AdvertisingPayload.maximumLength, "advertising data of \(payload.advertisingData.count) bytes")
    fuzzCheck(payload.scanResponseData.count <= AdvertisingPayload.maximumLength, "scan response of \(payload.scanResponseData.count) bytes")
    let decoded: AdvertisingContent
    do {
        decoded = try AdvertisingContent(decodingAdvertisingData: payload.advertisingData[...],
                                         scanResponseData: payload.scanResponseData[...])
    } catch {
        fuzzFailure("the payload built for \(content) does not decode: \(error)")
    }
    let complete = payload.omitted.isEmpty
    fuzzCheck(decoded.flags == content.flags, "flags \(content.flags) came back as \(decoded.flags)")
    fuzzCheck(Set(decoded.serviceUUIDs).isSubset(of: Set(content.serviceUUIDs)), "service UUIDs that were not asked for")
    fuzzCheck(!complete || Set(decoded.serviceUUIDs) == Set(content.serviceUUIDs), "service UUIDs lost without a word")
    fuzzCheck(decoded.appearance == content.appearance || (!complete && decoded.appearance == nil), "appearance changed")
    fuzzCheck(decoded.txPowerLevel == content.txPowerLevel || (!complete && decoded.txPowerLevel == nil), "TX power changed")
    if let manufacturer = decoded.manufacturerData {
        fuzzCheck(manufacturer == content.manufacturerData, "manufacturer data changed")
    } else {
        fuzzCheck(!complete || content.manufacturerData == nil, "manufacturer data lost without a word")
    }
    fuzzCheck(content.name.unicodeScalars.starts(with: decoded.name.unicodeScalars),
              "name \(content.name.debugDescription) came back as \(decoded.name.debugDescription)")
    fuzzCheck(!complete || decoded.name == content.name, "name cut without a word")
}

func hciEvent(_ bytes: [UInt8]) {
    guard let event = decodeBoth(bytes, "HCIEvent", { (s: ArraySlice<UInt8>) throws(DecodeError) in try HCIEvent(packet: s) }) else {
        return
    }
    _ = "\(event)"
}

func aclPacket(_ bytes: [UInt8]) {
    guard let packet = decodeBoth(bytes, "ACLPacket", { (s: ArraySlice<UInt8>) throws(DecodeError) in try ACLPacket(packet: s) }) else {
        return
    }
    var out: [UInt8] = []
    packet.encode(into: &out)
    // The Broadcast flag is not kept (LE has none), so compare what decoding gives.
    fuzzCheck((try? ACLPacket(packet: out[...])) == packet, "ACLPacket \(hex(bytes)) does not survive encoding as \(hex(out))")
    fuzzCheck(out.count == bytes.count, "ACLPacket re-encodes \(hex(bytes)) as \(hex(out))")
}

func signaling(_ bytes: [UInt8]) {
    let decode = { (s: ArraySlice<UInt8>) throws(DecodeError) in try SignalingCommand(frame: s) }
    guard let command = decodeBoth(bytes, "SignalingCommand", decode) else { return }
    var out: [UInt8] = []
    command.encode(into: &out)
    fuzzCheck(out == bytes, "SignalingCommand re-encodes \(hex(bytes)) as \(hex(out))")
    _ = SecurityManager.answer(to: bytes[...])
}

func connectionParameters(_ bytes: [UInt8]) {
    let decode = { (s: ArraySlice<UInt8>) throws(DecodeError) in try ConnectionParameters(decoding: s) }
    guard let parameters = decodeBoth(bytes, "ConnectionParameters", decode) else { return }
    fuzzCheck(parameters.encoded == bytes, "ConnectionParameters re-encodes \(hex(bytes)) as \(hex(parameters.encoded))")
    _ = parameters.coreViolations
    _ = parameters.appleGuidelineViolations
    _ = parameters.description
}

func h4(_ bytes: [UInt8]) {
    if let datagram = H4Framer.parseDatagram(bytes[...]) {
        fuzzCheck(datagram.body.count == bytes.count - 1, "an H4 datagram of \(bytes.count) bytes gave a \(datagram.body.count)-byte packet")
    }
    // The stream framer, fed in two parts: every packet is exactly what its header announces,
    // and every byte is in a packet, discarded, or still waiting.
    var framer = H4Framer()
    let cut = bytes.isEmpty ? 0 : Int(bytes[0]) % (bytes.count + 1)
    var framed = 0
    for part in [bytes[..<cut], bytes[cut...]] {
        framer.feed(part) { type, body in
            fuzzCheck(type.payloadLength(header: body).map { $0 + type.headerLength } == body.count,
                      "framed a \(type) packet of \(body.count) bytes that announces another length")
            framed += 1 + body.count
        }
    }
    fuzzCheck(framed + framer.discardedBytes + framer.bufferedCount == bytes.count,
              "framer accounts for \(framed + framer.discardedBytes + framer.bufferedCount) of \(bytes.count) bytes")
}

func heartRateMeasurement(_ bytes: [UInt8]) {
    let decode = { (s: ArraySlice<UInt8>) throws(DecodeError) in try HeartRateMeasurement(decoding: s) }
    guard let measurement = decodeBoth(bytes, "HeartRateMeasurement", decode) else { return }
    let encoded = measurement.encode(maxLength: bytes.count + 8)
    fuzzCheck((try? HeartRateMeasurement(decoding: encoded[...])) == measurement,
              "HeartRateMeasurement \(hex(bytes)) does not survive encoding as \(hex(encoded))")
}

/// The chat's frames (Docs/CHAT.md): each decodes the same at both positions and survives
/// encoding; the whole input, cut into frames of its own bytes' lengths, reassembles without a
/// trap and never into a message longer than the limits.
func chatFrames(_ bytes: [UInt8]) {
    let decode = { (s: ArraySlice<UInt8>) throws(DecodeError) in try ChatFrame(decoding: s) }
    if let frame = decodeBoth(bytes, "ChatFrame", decode) {
        fuzzCheck((try? ChatFrame(decoding: frame.encoded()[...])) == frame, "ChatFrame \(hex(bytes)) does not survive encoding")
    }
    var reassembly = ChatReassembly()
    var rest = bytes[...]
    while let length = rest.first {
        let piece = rest.dropFirst().prefix(Int(length))
        rest = rest.dropFirst(1 + piece.count)
        guard let frame = try? ChatFrame(decoding: piece) else { continue }
        if case let .message(id, text, _) = reassembly.take(frame) {
            fuzzCheck(text.count <= ChatFrame.maxMessageBytes && id.sender.utf8.count <= ChatFrame.maxSenderBytes,
                      "a chat message of \(text.count) bytes from a \(id.sender.utf8.count)-byte sender")
        }
    }
}

// MARK: bumble-bench

/// `BenchPacket.decode` (total): the same answer at both positions; a packet encodes to
/// `encodedLength` bytes that decode to it again, and its header is the input's (the payload
/// encodes as zeros, and bytes after a RESET or an ACK are ignored).
func benchPacket(_ bytes: [UInt8]) {
    let decoded = BenchPacket.decode(bytes[...])
    fuzzCheck(decoded == BenchPacket.decode(shifted(bytes)), "BenchPacket decodes \(hex(bytes)) differently from a shifted slice")
    let packet: BenchPacket
    switch decoded {
    case .failure(let failure):
        _ = failure.description
        return
    case .success(let value):
        packet = value
    }
    let encoded = packet.encoded
    fuzzCheck(encoded.count == packet.encodedLength, "BenchPacket \(packet) encodes as \(encoded.count) bytes, not \(packet.encodedLength)")
    fuzzCheck(encoded.count <= bytes.count, "BenchPacket of \(bytes.count) bytes encodes as \(encoded.count)")
    let header = packet.kind == .sequence ? BenchPacket.sequenceHeaderLength : encoded.count
    fuzzCheck(encoded.prefix(header) == bytes.prefix(header), "BenchPacket \(hex(bytes)) re-encodes its header as \(hex(encoded))")
    fuzzCheck(BenchPacket.decode(encoded[...]) == .success(packet), "BenchPacket \(hex(bytes)) does not survive encoding as \(hex(encoded))")
}

/// `BenchStreamFramer` on the input after two bytes, cut into three SDUs at points those choose: every
/// byte is in a delivered packet (with its 2-byte length) or in the packet still gathered, the packets framed
/// again are the stream's bytes, and the input as one SDU (at index 0 or shifted) or byte by
/// byte gives the same packets.
func benchStream(_ input: [UInt8]) {
    let choices = input + [0, 0]
    let bytes = Array(input.dropFirst(2))
    func packets(_ parts: [ArraySlice<UInt8>]) -> (packets: [[UInt8]], framed: Int, pending: Int) {
        var framer = BenchStreamFramer()
        var packets: [[UInt8]] = []
        var framed = 0
        for part in parts {
            framer.receive(part) { packet in
                packets.append(Array(packet))
                framed += BenchStreamFramer.lengthFieldSize + packet.count
                _ = BenchPacket.decode(packet)
            }
        }
        return (packets, framed, framer.pendingBytes)
    }
    let first = Int(choices[0]) % (bytes.count + 1)
    let second = first + Int(choices[1]) % (bytes.count - first + 1)
    let cut = packets([bytes[..<first], bytes[first..<second], bytes[second...]])
    // What follows the whole packets is part of a length field (held), or a whole one (read
    // into the length wanted, not held) and fewer bytes than it announced (held).
    fuzzCheck(cut.framed <= bytes.count, "BenchStreamFramer framed \(cut.framed) of \(bytes.count) bytes")
    let rest = bytes[cut.framed...]
    let accounted = rest.count < BenchStreamFramer.lengthFieldSize
        ? cut.pending == rest.count
        : cut.pending == rest.count - 2 && Int(rest[rest.startIndex]) << 8 | Int(rest[rest.startIndex + 1]) > cut.pending
    fuzzCheck(accounted,
              "BenchStreamFramer accounts for \(cut.framed) bytes framed and \(cut.pending) pending of \(hex(bytes))")
    var reframed: [UInt8] = []
    for packet in cut.packets { BenchStreamFramer.frame(packet[...], into: &reframed) }
    fuzzCheck(reframed[...] == bytes[..<cut.framed], "BenchStreamFramer's packets of \(hex(bytes)) frame again as \(hex(reframed))")
    let whole = packets([bytes[...]])
    fuzzCheck(whole.packets == cut.packets && whole.pending == cut.pending, "BenchStreamFramer: one SDU and three differ on \(hex(bytes))")
    fuzzCheck(packets([shifted(bytes)]).packets == cut.packets, "BenchStreamFramer: a shifted SDU differs on \(hex(bytes))")
    fuzzCheck(packets(bytes.indices.map { bytes[$0...$0] }).packets == cut.packets, "BenchStreamFramer: byte by byte differs on \(hex(bytes))")
}

// MARK: ATT

/// One ATT PDU type: decode at both positions, use its accessors, and decode its encoding.
func att<T: ATTPDU & Equatable>(_ type: T.Type, _ bytes: [UInt8], moved: ArraySlice<UInt8>, inspect: (T) -> Void = { _ in }) {
    guard let pdu = decodeBoth(bytes, "\(T.self)", moved: moved, { (s: ArraySlice<UInt8>) throws(DecodeError) in try T(pdu: s) }) else { return }
    inspect(pdu)
    let encoded = pdu.encoded
    fuzzCheck((try? T(pdu: encoded[...])) == pdu, "\(T.self) \(hex(bytes)) does not survive encoding as \(hex(encoded))")
}

/// Every ATT PDU decoder, with its opcode: an input goes to the decoder of its first byte (every
/// decoder checks the opcode first: the others only refuse it, and each refusal formats its
/// error's text, which was most of the target's time when all 30 ran on every input), and to
/// one other, chosen by the input's length, so each decoder's refusal stays reached.
struct ATTDecoder {
    let opcode: UInt8
    let run: ([UInt8], ArraySlice<UInt8>) -> Void
    init<T: ATTPDU & Equatable>(_ type: T.Type, inspect: @escaping (T) -> Void = { _ in }) {
        opcode = T.opcode.rawValue
        run = { bytes, moved in att(T.self, bytes, moved: moved, inspect: inspect) }
    }
}

func attPDUs(_ bytes: [UInt8]) {
    let moved = shifted(bytes)
    let opcode = bytes.first
    for decoder in attDecoders where decoder.opcode == opcode { decoder.run(bytes, moved) }
    let other = attDecoders[bytes.count % attDecoders.count]
    if other.opcode != opcode { other.run(bytes, moved) }
}

nonisolated(unsafe) let attDecoders: [ATTDecoder] = [
    ATTDecoder(ATTErrorResponse.self),
    ATTDecoder(ATTExchangeMTURequest.self),
    ATTDecoder(ATTExchangeMTUResponse.self),
    ATTDecoder(ATTFindInformationRequest.self),
    ATTDecoder(ATTFindByTypeValueRequest.self),
    ATTDecoder(ATTReadByTypeRequest.self),
    ATTDecoder(ATTReadByGroupTypeRequest.self),
    ATTDecoder(ATTReadRequest.self),
    ATTDecoder(ATTReadBlobRequest.self),
    ATTDecoder(ATTReadMultipleRequest.self) { pdu in _ = (0..<pdu.handleCount).map(pdu.handle(at:)) },
    ATTDecoder(ATTReadMultipleVariableRequest.self) { pdu in _ = (0..<pdu.handleCount).map(pdu.handle(at:)) },
    ATTDecoder(ATTWriteRequest.self),
    ATTDecoder(ATTWriteCommand.self),
    ATTDecoder(ATTSignedWriteCommand.self),
    ATTDecoder(ATTPrepareWriteRequest.self),
    ATTDecoder(ATTExecuteWriteRequest.self),
    ATTDecoder(ATTHandleValueNotification.self),
    ATTDecoder(ATTHandleValueIndication.self),
    ATTDecoder(ATTHandleValueConfirmation.self),
    ATTDecoder(ATTReadResponse.self),
    ATTDecoder(ATTFindByTypeValueResponse.self) { pdu in
        fuzzCheck(pdu.ranges.count == pdu.data.count / 4, "Find By Type Value Response ranges")
    },
    ATTDecoder(ATTPrepareWriteResponse.self),
    ATTDecoder(ATTExecuteWriteResponse.self),
    ATTDecoder(ATTReadMultipleResponse.self),
    ATTDecoder(ATTReadMultipleVariableResponse.self),
    ATTDecoder(ATTReadBlobResponse.self),
    ATTDecoder(ATTReadByTypeResponse.self) { pdu in
        let pairs = pdu.pairs
        fuzzCheck(pairs.count == pdu.data.count / Int(pdu.pairLength), "Read By Type Response pairs")
        fuzzCheck(pairs.allSatisfy { $0.value.count == Int(pdu.pairLength) - 2 }, "Read By Type Response values")
    },
    ATTDecoder(ATTReadByGroupTypeResponse.self) { pdu in
        let entries = pdu.entries
        fuzzCheck(entries.count == pdu.data.count / Int(pdu.entryLength), "Read By Group Type Response entries")
        fuzzCheck(entries.allSatisfy { $0.value.count == Int(pdu.entryLength) - 4 }, "Read By Group Type Response values")
    },
    ATTDecoder(ATTFindInformationResponse.self) { pdu in
        fuzzCheck(pdu.pairs.count == pdu.data.count / (pdu.format == 0x01 ? 4 : 18), "Find Information Response pairs")
    },
    ATTDecoder(ATTWriteResponse.self),
]

@_cdecl("decoders_main")
public func decodersMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    _ = attDecoders   // made before the first input: no input allocates what stays
    return blemu_fuzz_driver(argc, argv) { data, size in fuzz(data, size) }
}
