import BlemuCore

/// A well-formed ATT PDU a client sends (Vol 3, Part F, 3.4), built from the input: the opcode
/// is picked from the client's PDUs, the fields are fuzzed but shaped — handles mostly within
/// the database (`handleCount`), ranges, attribute types the server knows, values of a chosen
/// length — so most of these get past the PDU decoders into the server's procedures. Raw PDUs
/// (the other records of the targets) still cover the decoders.
///
/// Bytes read: an opcode selector, then the opcode's fields; a field selector with its top
/// values (0xF0 and up) takes a raw value from the input instead.
public func typedATTPDU(_ input: inout FuzzBytes, handleCount: Int) -> [UInt8] {
    let opcodes: [UInt8] = [0x02, 0x04, 0x06, 0x08, 0x0A, 0x0C, 0x0E, 0x10, 0x12, 0x52, 0xD2, 0x16, 0x18, 0x1E, 0x20]
    let selector = input.u8()
    let opcode = opcodes[Int(selector) % opcodes.count]
    var pdu: [UInt8] = [opcode]

    func handle() -> UInt16 {
        let h = input.u8()
        if h >= 0xF0 { return input.u16() }
        return UInt16(Int(h) % max(1, handleCount) + 1)
    }
    func range() {
        let start = handle()
        let span = input.u8()
        pdu.appendLE(start)
        // An open range (to 0xFFFF), a short one, or one ending before it starts.
        pdu.appendLE(span == 0xFF ? 0xFFFF : span == 0xFE ? start &- 1 : start &+ UInt16(span))
    }
    func type() {
        let known: [UInt16] = [0x2800, 0x2801, 0x2802, 0x2803, 0x2900, 0x2901, 0x2902, 0x2903, 0x2904, 0x2A00, 0x2A05,
                               0x2B29, 0x2B2A, 0x2A19, 0x180F]
        let u = input.u8()
        switch u {
        case 0xF0...0xF7: pdu.appendLE(input.u16())
        case 0xF8...0xFD:
            let raw = input.take(16)
            pdu += raw + [UInt8](repeating: 0, count: 16 - raw.count)
        case 0xFE: BluetoothUUID(0x2800).append128(to: &pdu)  // a 16-bit type in its 128-bit form
        case 0xFF: BluetoothUUID(high: 0xF0220000_0000_4000, low: 0x8000_0000_0000_0004).append128(to: &pdu)  // LengthRulesDevice's
        default: pdu.appendLE(known[Int(u) % known.count])
        }
    }
    func value() {
        let n = input.u8()
        pdu += input.take(n < 0xF0 ? Int(n) % 48 : Int(input.u16()) % 600)
    }

    switch opcode {
    case 0x02:
        let mtus: [UInt16] = [23, 24, 64, 185, 247, 512, 517, 22]
        pdu.appendLE(input.u8() & 0x80 != 0 ? input.u16() : mtus[Int(input.u8() & 7)])
    case 0x04: range()
    case 0x06:
        range()
        let types: [UInt16] = [0x2800, 0x2801, 0x2803, 0x2902]
        pdu.appendLE(types[Int(input.u8() & 3)])
        value()
    case 0x08, 0x10: range(); type()
    case 0x0A: pdu.appendLE(handle())
    case 0x0C, 0x16:
        pdu.appendLE(handle())
        let o = input.u8()
        pdu.appendLE(o >= 0xF0 ? input.u16() : UInt16(o) * 4)
        if opcode == 0x16 { value() }
    case 0x0E, 0x20:
        for _ in 0..<(Int(input.u8() % 6) + 1) { pdu.appendLE(handle()) }
    case 0x12, 0x52: pdu.appendLE(handle()); value()
    case 0xD2:
        pdu.appendLE(handle())
        value()
        pdu += input.take(12)
    case 0x18: pdu.append(input.u8() % 3)
    default: break
    }
    return pdu
}
