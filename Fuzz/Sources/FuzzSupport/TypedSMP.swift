/// Fixed lengths of the SMP PDUs, code first (Vol 3, Part H, 3.5 and 3.6).
public let smpPDULengths: [UInt8: Int] = [0x01: 7, 0x02: 7, 0x03: 17, 0x04: 17, 0x05: 2, 0x06: 17, 0x07: 11, 0x08: 17,
                                          0x09: 8, 0x0A: 17, 0x0B: 2, 0x0C: 65, 0x0D: 17, 0x0E: 2]

/// An SMP PDU of a code the input picks (1–14, or any byte), of that code's length (or one
/// off, when the selector says), its fields from the input: past the length check of
/// `SMPCommand(pdu:)` most of the time, into the pairing state machines.
public func typedSMPPDU(_ input: inout FuzzBytes) -> [UInt8] {
    let k = input.u8()
    let code = k & 0x0F == 0x0F ? input.u8() : (k & 0x0F) % 14 + 1
    var length = smpPDULengths[code] ?? 1 + Int(input.u8() % 20)
    if k & 0x10 != 0 { length += k & 0x20 != 0 ? 1 : -1 }
    return [code] + input.take(max(0, length - 1))
}
