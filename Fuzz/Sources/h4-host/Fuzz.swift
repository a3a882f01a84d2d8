import BlemuCore
import BlemuDevices
import BlemuHCI
import BlemuTransport
import FuzzSupport

/// `h4-host`: the input is what a controller says on an H4 link — events and ACL data — after
/// a scripted controller has initialized the host. It goes through the real H4Framer in chunks
/// into a Peripheral running the heart-rate device, with the clock moving between chunks.
///
/// Input: flags, sizes (see `controllerOptions`: whether the controller keeps answering
/// commands or leaves that to the input, ACL buffers, ...), chunk size (0: all at once), clock
/// step per chunk in 50 ms units, then the H4 byte stream — or, when bit 5 of the sizes byte is
/// set, typed records that `typedH4Stream` turns into one (HCI events the host handles with
/// their parameter lengths right, ACL packets carrying typed ATT and SMP PDUs), so most of the
/// input gets past the framer and the event decoders.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    var input = FuzzBytes(data, size)
    let options = controllerOptions(input.u8(), input.u8())
    let chunkSize = Int(input.u8())
    let step = UInt64(input.u8()) * 50
    let sizes = input.bytes.count > 1 ? input.bytes[1] : 0
    let stream = sizes & 0x20 != 0 ? typedH4Stream(&input) : input.rest()

    let rig = PeripheralRig.take(deviceKind: 0, options: options, truthful: false) { HeartRateDevice(seed: 1) }
    let memory = MemoryBound(bound: 8 << 20)
    let controller = rig.controller
    let peripheral = rig.peripheral
    var framer = H4Framer()
    var start = 0
    while start < stream.count {
        let end = chunkSize == 0 ? stream.count : min(stream.count, start + chunkSize)
        framer.feed(stream[start..<end]) { type, body in
            if type == .event { controller.note(body) }
            peripheral.receive(packetType: type.rawValue, packet: body)
        }
        controller.flush()
        if step > 0 { rig.advance(milliseconds: step) }
        start = end
        memory.check("\(start) bytes")
    }
    fuzzCheck(framer.bufferedCount <= H4Framer.maxPacketLength, "the framer holds \(framer.bufferedCount) bytes, more than one packet")
    rig.end()
    return 0
}

/// The H4 stream of typed records, each a record byte r and its fields:
///   r % 4 == 0  an HCI event the host handles (`events` below picks by the next byte), its
///               parameters the right length, a connection handle where it has one
///   r % 4 == 1  an ACL packet with a whole L2CAP frame carrying a typed ATT PDU
///   r % 4 == 2  the same with a typed SMP PDU
///   r % 4 == 3  n raw bytes (n: the next byte mod 32)
/// Handles: bits 2–3 of r pick 0x0040, 0x0041, 0x0EFF or the next u16.
func typedH4Stream(_ input: inout FuzzBytes) -> [UInt8] {
    // (event code, LE subevent or nil, parameter bytes after the code/subevent, handle offset or nil)
    let events: [(UInt8, UInt8?, Int, Int?)] = [
        (0x05, nil, 4, 1),        // Disconnection Complete (7.7.5)
        (0x08, nil, 4, 1),        // Encryption Change (7.7.8)
        (0x13, nil, 5, 1),        // Number Of Completed Packets (7.7.19): one handle
        (0x10, nil, 1, nil),      // Hardware Error (7.7.16)
        (0x1A, nil, 1, nil),      // Data Buffer Overflow (7.7.26)
        (0x30, nil, 3, 1),        // Encryption Key Refresh Complete (7.7.39)
        (0x3E, 0x01, 18, 1),      // LE Connection Complete (7.7.65.1)
        (0x3E, 0x0A, 30, 1),      // LE Enhanced Connection Complete (7.7.65.10)
        (0x3E, 0x03, 9, 1),       // LE Connection Update Complete
        (0x3E, 0x05, 12, 0),      // LE Long Term Key Request
        (0x3E, 0x06, 10, 0),      // LE Remote Connection Parameter Request
        (0x3E, 0x07, 10, 0),      // LE Data Length Change
        (0x3E, 0x0C, 5, 1),       // LE PHY Update Complete
        (0x3E, 0x12, 5, 2),       // LE Advertising Set Terminated (status, set, handle, events)
    ]
    let commands: [UInt16] = [HCIOpcode.reset, HCIOpcode.disconnect, HCIOpcode.readEncryptionKeySize,
                              HCIOpcode.leSetAdvertisingEnable, HCIOpcode.leSetAdvertisingData,
                              HCIOpcode.leLongTermKeyRequestReply, HCIOpcode.leLongTermKeyRequestNegativeReply,
                              HCIOpcode.leRemoteConnectionParameterRequestReply, HCIOpcode.leSetDataLength,
                              HCIOpcode.leSetExtendedAdvertisingEnable, HCIOpcode.leReadBufferSize, HCIOpcode.leSetPHY]
    var stream: [UInt8] = []
    var records = 0
    while !input.isAtEnd, records < 2_000 {
        records += 1
        let r = input.u8()
        let handles: [UInt16] = [0x0040, 0x0041, 0x0EFF]
        let pick = Int((r >> 2) & 3)
        let handle = pick < 3 ? handles[pick] : input.u16() & 0x0FFF
        switch r % 4 {
        case 0:
            let k = Int(input.u8())
            if k >= 0xF0 {
                // Command Complete or Status for a command the host sends.
                let opcode = commands[Int(input.u8()) % commands.count]
                if k & 1 == 0 {
                    var p: [UInt8] = [1]
                    p.appendLE(opcode)
                    p.append(input.u8() & 0x80 != 0 ? input.u8() : 0)
                    p += input.take(Int(input.u8() % 12))
                    stream += [0x04, 0x0E, UInt8(p.count)] + p
                } else {
                    var p: [UInt8] = [input.u8() & 0x80 != 0 ? input.u8() : 0, 1]
                    p.appendLE(opcode)
                    stream += [0x04, 0x0F, UInt8(p.count)] + p
                }
                continue
            }
            let (code, subevent, length, handleOffset) = events[k % events.count]
            var p = input.take(length)
            p += [UInt8](repeating: 0, count: length - p.count)
            if let offset = handleOffset {
                p[offset] = UInt8(handle & 0xFF)
                p[offset + 1] = UInt8(handle >> 8)
                if offset >= 1, k & 0x80 == 0 { p[0] = 0 }  // mostly success
            }
            if code == 0x13 { p[0] = 1 }
            let body = (subevent.map { [$0] } ?? []) + p
            stream += [0x04, code, UInt8(body.count)] + body
        case 1, 2:
            let payload = r % 4 == 1 ? typedATTPDU(&input, handleCount: 40) : typedSMPPDU(&input)
            var frame: [UInt8] = []
            frame.appendLE(UInt16(payload.count))
            frame.appendLE(UInt16(r % 4 == 1 ? 0x0004 : 0x0006))
            frame += payload
            var header: [UInt8] = [0x02]
            header.appendLE(handle | 0x2000)  // first automatically flushable
            header.appendLE(UInt16(frame.count))
            stream += header + frame
        default:
            stream += input.take(Int(input.u8() % 32))
        }
    }
    return stream
}

@_cdecl("h4_host_main")
public func h4HostMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    PeripheralRig.freshPerInput
        ? blemu_fuzz_driver(argc, argv) { data, size in fuzz(data, size) }
        : blemu_fuzz_driver_keeping_state(argc, argv) { data, size in fuzz(data, size) }
}
