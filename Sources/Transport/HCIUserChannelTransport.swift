import BlemuCore
import BlemuHCI
import BlemuRunLoop
import CBlueZ
import CLinux

#if canImport(Glibc)
import Glibc
#endif

/// The Linux HCI user channel: exclusive raw access to adapter `hciN`, bypassing the kernel's
/// host stack. Each read() returns exactly one packet with its H4 indicator; each write() must
/// be exactly one packet, so output that cannot go at once is queued as whole packets.
public final class HCIUserChannelTransport: ControllerTransport {
    public let spec: ControllerSpec
    public let index: UInt16
    public let queueCapacity: Int
    public var onPacket: ((H4PacketType, ArraySlice<UInt8>) -> Void)?
    public var onClosed: ((TransportError) -> Void)? {
        get { channel.onClosed }
        set { channel.onClosed = newValue }
    }
    public var isOpen: Bool { channel.isOpen }
    public private(set) var discardedBytes = 0

    /// Bytes of packets waiting for the socket to become writable.
    public private(set) var queuedBytes = 0

    private let channel: FileDescriptorChannel
    private var queue: [[UInt8]] = []
    private var queueHead = 0

    /// Opens and binds the user channel of adapter `index`. The adapter must be powered off
    /// (and not claimed by bluetoothd); this needs CAP_NET_ADMIN.
    public convenience init(index: UInt16, loop: RunLoop,
                            queueCapacity: Int = ControllerTransports.defaultOutputCapacity) throws(TransportError) {
        let fd = socket(AF_BLUETOOTH, CLINUX_SOCK_RAW_NONBLOCK, BTPROTO_HCI)
        guard fd >= 0 else { throw .hciUserChannel(index: index, "socket", errno) }
        var address = sockaddr_hci()
        address.hci_family = sa_family_t(AF_BLUETOOTH)
        address.hci_dev = index
        address.hci_channel = UInt16(HCI_CHANNEL_USER)
        let bound = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_hci>.size))
            }
        }
        guard bound == 0 else {
            let code = errno
            closeFD(fd)
            throw .hciUserChannel(index: index, "bind", code)
        }
        try self.init(adopting: fd, index: index, loop: loop, queueCapacity: queueCapacity)
    }

    /// Takes ownership of `fd`, a bound user channel socket (or, in tests, any socket that
    /// keeps packet boundaries).
    init(adopting fd: Int32, index: UInt16, loop: RunLoop, queueCapacity: Int) throws(TransportError) {
        self.spec = .hci(index: index)
        self.index = index
        self.queueCapacity = max(queueCapacity, H4Framer.maxPacketLength)
        // One packet per read, up to 16 per wakeup.
        channel = try FileDescriptorChannel(adopting: fd, spec: spec, medium: .hciUserChannel, loop: loop,
                                            readBufferSize: H4Framer.maxPacketLength, readsPerWakeup: 16)
        channel.owner = self
    }

    // MARK: Output

    public func send(_ type: H4PacketType, _ body: ArraySlice<UInt8>) -> Bool {
        guard isOpen else { return false }
        let total = 1 + body.count
        guard queueCapacity - queuedBytes >= total else { return false }
        if queueHead == queue.count {  // else it waits behind the queue, to keep the order
            switch channel.write(type, body) {
            case .written(let count) where count == total:
                return true
            case .wouldBlock:
                break
            case .written:  // a datagram goes whole or not at all
                channel.fail(.lost(spec, "write", errno: EIO), deferred: true)
                return false
            case .failed(let code):
                channel.fail(.lost(spec, "write", errno: code), deferred: true)
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

    private func flush() {
        writing: while queueHead < queue.count {
            let packet = queue[queueHead]
            switch channel.write(packet[...]) {
            case .written(let count) where count == packet.count:
                queueHead += 1
                queuedBytes -= packet.count
            case .wouldBlock:
                break writing
            case .written:
                channel.fail(.lost(spec, "write", errno: EIO), deferred: false)
                return
            case .failed(let code):
                channel.fail(.lost(spec, "write", errno: code), deferred: false)
                return
            }
        }
        if queueHead == queue.count {
            queue.removeAll(keepingCapacity: true)
            queueHead = 0
            channel.watchWritable(false)
        } else if queueHead >= 64 {
            queue.removeSubrange(0..<queueHead)
            queueHead = 0
        }
    }

    // MARK: Closing

    /// Unregisters and closes the socket; queued packets are dropped and `onClosed` does not follow.
    public func close() {
        channel.close()
    }
}

extension HCIUserChannelTransport: FileDescriptorChannelOwner {
    func channelIsWritable() { flush() }

    /// Each read is exactly one packet with its indicator.
    func channelReceived(_ bytes: ArraySlice<UInt8>) {
        if let packet = H4Framer.parseDatagram(bytes) {
            onPacket?(packet.type, packet.body)
        } else {
            discardedBytes += bytes.count
        }
    }

    func channelDidClose() {
        queue = []
        queueHead = 0
        queuedBytes = 0
    }
}
