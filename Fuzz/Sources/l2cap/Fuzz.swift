import BlemuCore
import BlemuDevice
import BlemuDevices
import BlemuHCI
import BlemuHost
import FuzzSupport

/// `l2cap`: a little language of link events driving a Peripheral — links opening and closing,
/// L2CAP frames (whole or in fragments, with honest or lying lengths) on every fixed channel
/// and others, raw ACL packets with any boundary flag, LE link events, and clock jumps past
/// every timeout (command 3 s, reassembly 10 s, ATT transaction and fast advertising 30 s).
/// The controller is the harness's, so it is truthful and also checks the host's credits.
///
/// Input: controller flags and sizes (see `controllerOptions`), a device byte (bit 0: the
/// length-rules device, else bit 1: channel-echo, which publishes an L2CAP credit based channel
/// on SPSM 0x0080; else heart-rate), then ops, each a byte (mod 8) and its operands:
///   0 a          connect handle (a & 3) if the controller advertises (in the central role when
///                a & 0x80, which a controller may do for a host that never asked: it must refuse)
///   1 a r        disconnect handle (a & 3) with reason r
///   2 a n… p…    L2CAP frame: handle a & 3; channel (a >> 2) & 3: ATT, signalling, SMP, or a
///                u16 that follows; a & 0x10 fragments it (fragment size: next byte);
///                a & 0x20 puts a u16 from the input in the length field; a & 0x40: payload
///                length is a u16 (mod 1100), else a byte; first fragment flag 10, or 00 when
///                a & 0x80
///   3 a n d…     a raw ACL packet on handle a & 3 with boundary flag (a >> 2) & 3, n bytes
///   4 t          the clock moves: t < 200: t × 10 ms; else 3.1 s, 10.5 s, 30.5 s, 65 s, 600 s
///                (65 s and 600 s as a stall of the run loop, then 11 s timer by timer: each
///                timer due in the stall fires once, a 1 s tick too, `PeripheralRig.jump`)
///   5            Number Of Completed Packets for everything in flight
///   6            the peripheral stops (blemu's clean stop)
///   7 a k …      an LE event on handle a & 3: connection update complete, remote connection
///                parameter request, data length change, PHY update, encryption change, data
///                buffer overflow (k picks; parameters from the input)
/// Op bytes 0xE0 and up are typed, so most of them get past the first decoder (0xE0 + 4k + h:
/// on handle h & 3):
///   0xE0–0xE3    a client ATT PDU of a chosen opcode with fuzzed fields (`typedATTPDU`)
///   0xE4–0xE7    an SMP PDU of a chosen code with fuzzed fields (`typedSMPPDU`)
///   0xE8–0xEB    the central starts encryption: LE Long Term Key Request (EDIV and Rand zero, or
///                from the input), then Encryption Change with the status that follows
///   0xEC–0xEF    a credit based signalling command on CID 0x0005 (`typedCreditBasedSignaling`:
///                LE and enhanced connection, credits, reconfiguration, disconnection)
///   0xF0–0xF3    a K-frame on dynamic CID 0x0040 + (next byte & 0x3F) (`typedKFrame`)
///   0xF4–0xFF    as 0xE0–0xE3
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    var input = FuzzBytes(data, size)
    let options = controllerOptions(input.u8(), input.u8())
    let deviceByte = input.u8()
    let lengthRules = deviceByte & 0x01 != 0
    let channelEcho = !lengthRules && deviceByte & 0x02 != 0
    let rig = PeripheralRig.take(deviceKind: lengthRules ? 1 : channelEcho ? 2 : 0, options: options, truthful: true) { () -> Device in
        if lengthRules { return LengthRulesDevice() }
        return channelEcho ? ChannelEchoDevice() as Device : HeartRateDevice(seed: 1)
    }
    let controller = rig.controller
    let handles: [UInt16] = [0x0040, 0x0041, 0x0EFF, 0x0001]

    let memory = MemoryBound(bound: 8 << 20)
    while !input.isAtEnd {
        let op = input.u8()
        defer { memory.check("op \(op)") }
        if op >= 0xE0 {
            let handle = handles[Int(op & 3)]
            switch (op - 0xE0) >> 2 {
            case 1:
                sendFrame(rig, handle: handle, cid: 0x0006, typedSMPPDU(&input))
            case 2:
                let raw = input.u8()
                controller.requestLongTermKey(handle: handle, random: raw & 1 != 0 ? UInt64(input.u16()) : UInt64(0),
                                              ediv: raw & 2 != 0 ? input.u16() : 0)
                controller.flush()
                var p: [UInt8] = [input.u8() & 0x01 == 0 ? 0x00 : 0x06]  // success, or PIN or Key Missing
                p.appendLE(handle)
                p.append(p[0] == 0 ? 0x01 : 0x00)
                controller.event(0x08, p)
                controller.flush()
            case 3:
                sendFrame(rig, handle: handle, cid: 0x0005, typedCreditBasedSignaling(&input))
            case 4:
                let cid = 0x0040 + UInt16(input.u8() & 0x3F)
                sendFrame(rig, handle: handle, cid: cid, typedKFrame(&input))
            default:
                sendFrame(rig, handle: handle, cid: 0x0004, typedATTPDU(&input, handleCount: rig.attributeCount))
            }
            continue
        }
        switch op % 8 {
        case 0:
            let a = input.u8()
            let handle = handles[Int(a & 3)]
            // A controller never reports a second connection on a handle in use, and a central
            // connects only to a peripheral that advertises.
            let central = a & 0x80 != 0
            guard !controller.openHandles.contains(handle), central || controller.isAdvertising else { continue }
            controller.connect(handle: handle, peer: rig.central, central: central)
            controller.flush()
        case 1:
            let handle = handles[Int(input.u8() & 3)]
            let reason = input.u8()
            guard controller.openHandles.contains(handle) else { continue }
            controller.disconnect(handle: handle, reason: reason)
            controller.flush()
        case 2:
            let a = input.u8()
            let handle = handles[Int(a & 3)]
            let cids: [UInt16] = [0x0004, 0x0005, 0x0006]
            let cid = (a >> 2) & 3 == 3 ? input.u16() : cids[Int((a >> 2) & 3)]
            let fragment = a & 0x10 != 0 ? Int(input.u8() % 64) + 1 : Int.max
            let lie: UInt16? = a & 0x20 != 0 ? input.u16() : nil
            let length = a & 0x40 != 0 ? Int(input.u16()) % 1100 : Int(input.u8())
            let payload = input.take(length)
            var frame: [UInt8] = []
            frame.appendLE(lie ?? UInt16(payload.count))
            frame.appendLE(cid)
            frame += payload
            var start = 0
            repeat {
                let end = min(frame.count, start + min(fragment, 1024))
                let boundary: ACLPacket.Boundary = start > 0 ? .continuing : a & 0x80 != 0 ? .firstNonFlushable : .firstFlushable
                rig.sendACL(handle: handle, boundary: boundary, data: frame[start..<end])
                start = end
            } while start < frame.count
        case 3:
            let a = input.u8()
            let data = input.take(Int(input.u8()))
            rig.sendACL(handle: handles[Int(a & 3)], boundary: ACLPacket.Boundary(rawValue: (a >> 2) & 3)!, data: data[...])
        case 4:
            let t = input.u8()
            let jumps: [UInt64] = [3_100, 10_500, 30_500, 65_000, 600_000]
            if t < 200 {
                rig.advance(milliseconds: UInt64(t) * 10)
            } else {
                // 65 s and 10 minutes: a stall, then the last 11 s timer by timer (`PeripheralRig.jump`).
                let jump = jumps[Int(t - 200) % jumps.count]
                jump > 60_000 ? rig.jump(milliseconds: jump) : rig.advance(milliseconds: jump)
            }
        case 5:
            controller.completePackets()
            controller.flush()
        case 6:
            rig.stop()
        default:
            let a = input.u8()
            let handle = handles[Int(a & 3)]
            var p: [UInt8] = []
            switch input.u8() % 6 {
            case 0:  // LE Connection Update Complete (7.7.65.3)
                p = [0x03, input.u8()]
                p.appendLE(handle)
                p += input.take(6)
                controller.event(0x3E, p)
            case 1:  // LE Remote Connection Parameter Request (7.7.65.6)
                p = [0x06]
                p.appendLE(handle)
                p += input.take(8)
                controller.event(0x3E, p)
            case 2:  // LE Data Length Change (7.7.65.7)
                p = [0x07]
                p.appendLE(handle)
                p += input.take(8)
                controller.event(0x3E, p)
            case 3:  // LE PHY Update Complete (7.7.65.12)
                p = [0x0C, input.u8()]
                p.appendLE(handle)
                p += input.take(2)
                controller.event(0x3E, p)
            case 4:  // Encryption Change (7.7.8): nothing asked for it
                p = [input.u8()]
                p.appendLE(handle)
                p.append(input.u8())
                controller.event(0x08, p)
            default:  // Data Buffer Overflow (7.7.26)
                controller.event(0x1A, [0x01])
            }
            controller.flush()
        }
    }
    rig.end()
    return 0
}

/// A whole, well-formed L2CAP frame on a fixed channel.
func sendFrame(_ rig: PeripheralRig, handle: UInt16, cid: UInt16, _ payload: [UInt8]) {
    var frame: [UInt8] = []
    frame.appendLE(UInt16(payload.count))
    frame.appendLE(cid)
    frame += payload
    // In fragments no longer than the controller's buffers, as a central's controller sends them.
    var start = 0
    repeat {
        let end = min(frame.count, start + 27)
        rig.sendACL(handle: handle, boundary: start == 0 ? .firstFlushable : .continuing, data: frame[start..<end])
        start = end
    } while start < frame.count
}

@_cdecl("l2cap_main")
public func l2capMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    PeripheralRig.freshPerInput
        ? blemu_fuzz_driver(argc, argv) { data, size in fuzz(data, size) }
        : blemu_fuzz_driver_keeping_state(argc, argv) { data, size in fuzz(data, size) }
}
