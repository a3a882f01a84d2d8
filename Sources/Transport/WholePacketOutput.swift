#if canImport(Glibc)
import Glibc
#endif
import BlemuHCI

/// The output of a descriptor that takes one packet per write, whole or not at all (the HCI
/// user channel's socket, `/dev/vhci`): a packet that cannot go at once waits, whole, in a
/// bounded queue behind the ones before it, and goes when the descriptor is writable again.
/// A partial write breaks the medium's promise and ends the channel. A class: a failed write
/// closes the channel at once, and its owner drops the queue from inside `flush`.
final class WholePacketOutput {
    /// The most bytes of packets that may wait.
    let capacity: Int
    /// Bytes of packets waiting for the descriptor to become writable.
    private(set) var queuedBytes = 0
    private var queue: [[UInt8]] = []
    private var head = 0

    init(capacity: Int) { self.capacity = max(capacity, H4Framer.maxPacketLength) }

    /// Writes or queues one packet; false, having written nothing, when the queue cannot take it
    /// or the write failed (the channel then fails, deferred: the caller is mid-send).
    func send(_ type: H4PacketType, _ body: ArraySlice<UInt8>, on channel: FileDescriptorChannel) -> Bool {
        let total = 1 + body.count
        guard capacity - queuedBytes >= total else { return false }
        if head == queue.count {  // else it waits behind the queue, to keep the order
            switch channel.write(type, body) {
            case .written(let count) where count == total:
                return true
            case .wouldBlock:
                break
            case .written:  // a packet goes whole or not at all
                channel.fail(.lost(channel.spec, "write", errno: EIO), deferred: true)
                return false
            case .failed(let code):
                channel.fail(.lost(channel.spec, "write", errno: code), deferred: true)
                return false
            }
        }
        var packet: [UInt8] = []
        packet.reserveCapacity(total)
        packet.append(type.rawValue)
        packet.append(contentsOf: body)
        queue.append(packet)
        queuedBytes += total
        channel.watchWritable(true)
        return true
    }

    /// Writes what waits, in order, until the descriptor would block; called when it is writable.
    func flush(on channel: FileDescriptorChannel) {
        writing: while head < queue.count {
            let packet = queue[head]
            switch channel.write(packet[...]) {
            case .written(let count) where count == packet.count:
                head += 1
                queuedBytes -= packet.count
            case .wouldBlock:
                break writing
            case .written:
                channel.fail(.lost(channel.spec, "write", errno: EIO), deferred: false)
                return
            case .failed(let code):
                channel.fail(.lost(channel.spec, "write", errno: code), deferred: false)
                return
            }
        }
        if head == queue.count {
            queue.removeAll(keepingCapacity: true)
            head = 0
            channel.watchWritable(false)
        } else if head >= 64 {
            queue.removeSubrange(0..<head)
            head = 0
        }
    }

    /// The channel closed: what waited is dropped.
    func drop() {
        queue = []
        head = 0
        queuedBytes = 0
    }
}
