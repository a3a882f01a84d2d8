import BlemuCore
import BlemuHCI
import BlemuRunLoop
import CLinux

#if canImport(Glibc)
import Glibc
#endif

/// H4 over a byte stream: a TCP or Unix socket, or a UART. Packets are framed from the stream
/// by their headers (`H4Framer`); output the kernel cannot take at once waits in one bounded
/// buffer, flushed on EPOLLOUT.
public final class StreamTransport: ControllerTransport {
    /// How to write: sockets with MSG_NOSIGNAL (a closed peer gives EPIPE, not SIGPIPE), terminals with writev.
    public enum Medium: Sendable {
        case socket
        case terminal
    }

    public let spec: ControllerSpec
    public let medium: Medium
    public let outputCapacity: Int
    public var onPacket: ((H4PacketType, ArraySlice<UInt8>) -> Void)?
    public var onClosed: ((TransportError) -> Void)? {
        get { channel.onClosed }
        set { channel.onClosed = newValue }
    }
    public var isOpen: Bool { channel.isOpen }

    public var discardedBytes: Int { framer.discardedBytes }
    /// TCP_QUICKACK requests so far (TCP only): one after each read that follows output, not one per read.
    public var quickAcknowledgementRequests: Int { channel.quickAcknowledgementRequests }
    /// Bytes accepted by `send` and not yet taken by the kernel.
    public var bufferedOutputCount: Int { output.count - outputHead }

    private let channel: FileDescriptorChannel
    private var framer = H4Framer()
    private var output: [UInt8] = []
    private var outputHead = 0

    /// Takes ownership of `fd` (closed on failure too): makes it nonblocking and registers it.
    public init(adopting fd: Int32, spec: ControllerSpec, medium: Medium, loop: RunLoop,
                outputCapacity: Int = ControllerTransports.defaultOutputCapacity) throws(TransportError) {
        self.spec = spec
        self.medium = medium
        self.outputCapacity = max(outputCapacity, H4Framer.maxPacketLength)
        // Up to 4 reads of 16 KiB per wakeup; a short read means the stream is drained.
        channel = try FileDescriptorChannel(adopting: fd, spec: spec, medium: medium == .socket ? .streamSocket : .terminal,
                                            loop: loop, readBufferSize: 16 * 1024, readsPerWakeup: 4)
        channel.owner = self
    }

    /// Connects to a controller listening on the Unix stream socket at `path`.
    public static func connect(unixPath path: String, loop: RunLoop,
                               outputCapacity: Int = ControllerTransports.defaultOutputCapacity) throws(TransportError)
        -> StreamTransport
    {
        let spec = ControllerSpec.unix(path: path)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let pathBytes = Array(path.utf8)
        let limit = MemoryLayout.size(ofValue: address.sun_path) - 1
        guard pathBytes.count <= limit else { throw .unixPathTooLong(spec, length: pathBytes.count, limit: limit) }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (index, byte) in pathBytes.enumerated() { raw[index] = byte }
        }
        let fd = socket(AF_UNIX, CLINUX_SOCK_STREAM_NONBLOCK, 0)
        guard fd >= 0 else { throw .setup(spec, "socket(AF_UNIX)", errno) }
        let result = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard result == 0 else {
            let code = errno
            closeFD(fd)
            throw .unixConnect(spec, path: path, code)
        }
        return try StreamTransport(adopting: fd, spec: spec, medium: .socket, loop: loop, outputCapacity: outputCapacity)
    }

    /// Opens a UART: exclusive (flock), raw 8N1, RTS/CTS, `baud` (Vol 4, Part A, 3).
    public static func openSerial(device: String, baud: Int, loop: RunLoop,
                                  outputCapacity: Int = ControllerTransports.defaultOutputCapacity) throws(TransportError)
        -> StreamTransport
    {
        let spec = ControllerSpec.serial(device: device, baud: baud)
        let fd = Glibc.open(device, O_RDWR | O_NOCTTY | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else { throw .serialOpen(spec, device: device, baud: baud, errno) }
        // Two programs reading one UART each get half the bytes: refuse to share it.
        if flock(fd, LOCK_EX | LOCK_NB) != 0 {
            let code = errno
            closeFD(fd)
            throw .serialOpen(spec, device: device, baud: baud, code)
        }
        guard clinux_serial_configure(fd, Int32(clamping: baud)) == 0 else {
            let code = errno
            closeFD(fd)
            throw .serialOpen(spec, device: device, baud: baud, code)
        }
        return try StreamTransport(adopting: fd, spec: spec, medium: .terminal, loop: loop, outputCapacity: outputCapacity)
    }

    // MARK: Output

    public func send(_ type: H4PacketType, _ body: ArraySlice<UInt8>) -> Bool {
        guard isOpen else { return false }
        let total = 1 + body.count
        // Checked before writing anything, so a refused packet is never half sent.
        guard outputCapacity - bufferedOutputCount >= total else { return false }
        var sent = 0
        if bufferedOutputCount == 0 {  // else it waits behind what is buffered, to keep the order
            switch channel.write(type, body) {
            case .written(let count): sent = count
            case .wouldBlock: break
            case .failed(let code):
                channel.fail(.lost(spec, "write", errno: code), deferred: true)
                return false
            }
            if sent == total { return true }
        }
        if sent == 0 {
            output.append(type.rawValue)
            output.append(contentsOf: body)
        } else {
            output.append(contentsOf: body[(body.startIndex + sent - 1)...])
        }
        channel.watchWritable(true)
        return true
    }

    private func flush() {
        writing: while outputHead < output.count {
            switch channel.write(output[outputHead...]) {
            case .written(let count) where count > 0:
                outputHead += count
            case .wouldBlock:
                break writing
            case .written:  // nothing taken although writable: it never will be
                channel.fail(.lost(spec, "write", errno: EIO), deferred: false)
                return
            case .failed(let code):
                channel.fail(.lost(spec, "write", errno: code), deferred: false)
                return
            }
        }
        if outputHead == output.count {
            output.removeAll(keepingCapacity: true)
            outputHead = 0
            channel.watchWritable(false)
        } else if outputHead >= 64 * 1024 {
            output.removeSubrange(0..<outputHead)
            outputHead = 0
        }
    }

    // MARK: Input

    private func deliver(_ bytes: ArraySlice<UInt8>) {
        var rest = bytes
        while !rest.isEmpty {
            let taken = framer.append(contentsOf: rest)
            rest = rest.dropFirst(taken)
            while let packet = framer.nextPacket() {
                onPacket?(packet.type, packet.body)
                guard isOpen else { return }
            }
            if taken == 0 { framer.reset() }  // cannot happen (the framer always has room after draining)
        }
    }

    // MARK: Closing

    /// Unregisters and closes the fd; pending output is dropped and `onClosed` does not follow.
    public func close() {
        channel.close()
    }
}

extension StreamTransport: FileDescriptorChannelOwner {
    func channelIsWritable() { flush() }

    func channelReceived(_ bytes: ArraySlice<UInt8>) { deliver(bytes) }

    func channelDidClose() {
        output = []
        outputHead = 0
        framer.reset()
    }
}
