import BlemuCore

/// A credit based signalling command (Core Vol 3, Part A, 4.6, 4.7, 4.22-4.28) from the input,
/// as the payload of an LE signalling frame (CID 0x0005): a chosen code with fields that are
/// mostly plausible (our SPSM 0x0080, dynamic CIDs 0x0040-0x007F, small MTUs and MPSs), so
/// most of them reach the channel state machines rather than the first length check.
///
/// Input: k, an identifier, then the code's fields. k % 10 picks the code: LE Credit Based
/// Connection Request/Response (0x14/0x15), Flow Control Credit Indication (0x16), Credit
/// Based Connection Request/Response (0x17/0x18), Credit Based Reconfigure Request/Response
/// (0x19/0x1A), Disconnection Request/Response (0x06/0x07), or a raw code; k & 0x10 lies in the
/// length field by one either way (k & 0x20 picks which).
public func typedCreditBasedSignaling(_ input: inout FuzzBytes) -> [UInt8] {
    let k = input.u8()
    let identifier = input.u8()
    var data: [UInt8] = []
    func spsm() -> UInt16 { let b = input.u8(); return b & 0x80 == 0 ? 0x0080 : UInt16(b) | UInt16(input.u8() & 0x01) << 8 }
    func cid() -> UInt16 { let b = input.u8(); return b & 0xC0 == 0xC0 ? input.u16() : 0x0040 + UInt16(b & 0x3F) }
    func size() -> UInt16 { let b = input.u8(); return b & 0x80 == 0 ? 23 + UInt16(b) * 8 : input.u16() }
    func cids() -> [UInt16] { (0..<(Int(input.u8() % 7))).map { _ in cid() } }  // 0 to 6: past 5 is a refusal
    let code: UInt8
    switch k % 10 {
    case 0:
        code = 0x14
        data.appendLE(spsm()); data.appendLE(cid()); data.appendLE(size()); data.appendLE(size()); data.appendLE(input.u16())
    case 1:
        code = 0x15
        data.appendLE(cid()); data.appendLE(size()); data.appendLE(size()); data.appendLE(input.u16()); data.appendLE(UInt16(input.u8() % 13))
    case 2:
        code = 0x16
        data.appendLE(cid()); data.appendLE(input.u8() & 1 == 0 ? UInt16(input.u8()) : input.u16())
    case 3:
        code = 0x17
        data.appendLE(spsm()); data.appendLE(size()); data.appendLE(size()); data.appendLE(input.u16())
        for c in cids() { data.appendLE(c) }
    case 4:
        code = 0x18
        data.appendLE(size()); data.appendLE(size()); data.appendLE(input.u16()); data.appendLE(UInt16(input.u8() % 13))
        for c in cids() { data.appendLE(c) }
    case 5:
        code = 0x19
        data.appendLE(size()); data.appendLE(size())
        for c in cids() { data.appendLE(c) }
    case 6:
        code = 0x1A
        data.appendLE(UInt16(input.u8() % 8))
    case 7:
        code = 0x06
        data.appendLE(cid()); data.appendLE(cid())
    case 8:
        code = 0x07
        data.appendLE(cid()); data.appendLE(cid())
    default:
        code = input.u8()
        data = input.take(Int(input.u8() % 24))
    }
    var length = data.count
    if k & 0x10 != 0 { length = k & 0x20 != 0 ? length + 1 : max(0, length - 1) }
    var command: [UInt8] = [code, identifier]
    command.appendLE(UInt16(length))
    return command + data
}

/// A K-frame (Vol 3, Part A, 3.4.3) for a dynamic CID: its payload, whose first two bytes are an
/// SDU length when `k & 0x01` (a first frame), honest about the payload that follows unless
/// `k & 0x02`. Input: k, then (with `k & 0x04`) a u16 payload size mod 1100, else a byte.
public func typedKFrame(_ input: inout FuzzBytes) -> [UInt8] {
    let k = input.u8()
    let size = k & 0x04 != 0 ? Int(input.u16()) % 1100 : Int(input.u8())
    let payload = input.take(size)
    guard k & 0x01 != 0 else { return payload }
    var frame: [UInt8] = []
    frame.appendLE(k & 0x02 != 0 ? input.u16() : UInt16(payload.count))
    return frame + payload
}
