import BlemuDevices
import BlemuTransport
import FuzzSupport

/// `h4-host`: the input is what a controller says on an H4 link — events and ACL data — after
/// a scripted controller has initialized the host. It goes through the real H4Framer in chunks
/// into a Peripheral running the heart-rate device, with the clock moving between chunks.
///
/// Input: flags, sizes (see `controllerOptions`: whether the controller keeps answering
/// commands or leaves that to the input, ACL buffers, ...), chunk size (0: all at once), clock
/// step per chunk in 50 ms units, then the H4 byte stream.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    var input = FuzzBytes(data, size)
    let options = controllerOptions(input.u8(), input.u8())
    let chunkSize = Int(input.u8())
    let step = UInt64(input.u8()) * 50
    let stream = input.rest()

    let rig = PeripheralRig(device: HeartRateDevice(seed: 1), options: options, truthful: false)
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
    }
    fuzzCheck(framer.bufferedCount <= H4Framer.maxPacketLength, "the framer holds \(framer.bufferedCount) bytes, more than one packet")
    rig.finish()
    return 0
}

@_cdecl("h4_host_main")
public func h4HostMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    blemu_fuzz_driver(argc, argv) { data, size in fuzz(data, size) }
}
