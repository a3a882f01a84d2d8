import BlemuChatProtocol
import BlemuCore
import BlemuDevices
import BlemuL2CAP

/// A central on one link of a `SharedBench` speaking LE credit based signalling and K-frames
/// by hand (Vol 3, Part A, 3.4.3, 4.22-4.24), as a hostile or plain peer of a device's channel.
struct ChannelPeer {
    let bench: SharedBench
    let handle: UInt16
    var ourCID: UInt16 = 0x0041
    var hostCID: UInt16 = 0
    var hostMPS = 23

    /// LE Credit Based Connection Request (4.22); the response's result. The credits default
    /// to enough that the host never runs dry.
    mutating func open(spsm: UInt16, mtu: UInt16 = 8192, mps: UInt16 = 1020, credits: UInt16 = 1000) -> UInt16? {
        var request: [UInt8] = [0x14, 0x01, 10, 0]
        request.appendLE(spsm)
        request.appendLE(ourCID)
        request.appendLE(mtu)
        request.appendLE(mps)
        request.appendLE(credits)
        bench.controller.sendL2CAP(handle: handle, cid: L2CAPChannel.leSignaling, request)
        guard let response = bench.controller.takeL2CAP(handle: handle, cid: L2CAPChannel.leSignaling).first(where: { $0.first == 0x15 }),
              response.count >= 14 else { return nil }
        hostCID = UInt16(response[4]) | UInt16(response[5]) << 8
        hostMPS = Int(UInt16(response[8]) | UInt16(response[9]) << 8)
        return UInt16(response[12]) | UInt16(response[13]) << 8
    }

    /// Disconnection Request (Vol 3, Part A, 4.6).
    func close() {
        var request: [UInt8] = [0x06, 0x02, 4, 0]
        request.appendLE(hostCID)
        request.appendLE(ourCID)
        bench.controller.sendL2CAP(handle: handle, cid: L2CAPChannel.leSignaling, request)
        _ = bench.controller.takeL2CAP(handle: handle, cid: L2CAPChannel.leSignaling)
    }

    /// LE Flow Control Credit (4.24).
    func credit(_ credits: UInt16) {
        var packet: [UInt8] = [0x16, 0x03, 4, 0]
        packet.appendLE(ourCID)
        packet.appendLE(credits)
        bench.controller.sendL2CAP(handle: handle, cid: L2CAPChannel.leSignaling, packet)
    }

    /// One SDU, cut into K-frames of the host's MPS (the first with the SDU length, 3.4.3).
    func send(_ sdu: [UInt8]) {
        var rest = sdu[...]
        var first = true
        repeat {
            var frame: [UInt8] = []
            if first { frame.appendLE(UInt16(sdu.count)) }
            let take = min(rest.count, hostMPS - frame.count)
            frame += rest.prefix(take)
            rest = rest.dropFirst(take)
            first = false
            bench.controller.sendL2CAP(handle: handle, cid: hostCID, frame)
        } while !rest.isEmpty
    }

    /// The SDUs the host sent since the last call, put together from its K-frames.
    func received() -> [[UInt8]] {
        var sdus: [[UInt8]] = []
        var current: [UInt8] = []
        var length: Int?
        for frame in bench.controller.takeL2CAP(handle: handle, cid: ourCID) {
            var data = frame[...]
            if length == nil {
                length = Int(frame[0]) | Int(frame[1]) << 8
                data = data.dropFirst(2)
            }
            current += data
            if current.count == length {
                sdus.append(current)
                current = []
                length = nil
            }
        }
        return sdus
    }

    func frames() -> [ChatFrame?] { received().map { try? ChatFrame(decoding: $0[...]) } }
}
