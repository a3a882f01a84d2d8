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
    public var queueCapacity: Int { output.capacity }
    public var onPacket: ((H4PacketType, ArraySlice<UInt8>) -> Void)?
    public var onClosed: ((TransportError) -> Void)? {
        get { channel.onClosed }
        set { channel.onClosed = newValue }
    }
    public var isOpen: Bool { channel.isOpen }
    public private(set) var discardedBytes = 0

    /// Bytes of packets waiting for the socket to become writable.
    public var queuedBytes: Int { output.queuedBytes }

    private let channel: FileDescriptorChannel
    private let output: WholePacketOutput

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
        output = WholePacketOutput(capacity: queueCapacity)
        // One packet per read, up to 16 per wakeup.
        channel = try FileDescriptorChannel(adopting: fd, spec: spec, medium: .hciUserChannel, loop: loop,
                                            readBufferSize: H4Framer.maxPacketLength, readsPerWakeup: 16)
        channel.owner = self
    }

    // MARK: Output

    public func send(_ type: H4PacketType, _ body: ArraySlice<UInt8>) -> Bool {
        guard isOpen else { return false }
        return output.send(type, body, on: channel)
    }

    private func flush() { output.flush(on: channel) }

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

    func channelDidClose() { output.drop() }
}
