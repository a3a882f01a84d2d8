import BlemuCore
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
    public var onClosed: ((TransportError) -> Void)?
    public private(set) var isOpen = true
    public private(set) var discardedBytes = 0

    /// Bytes of packets waiting for the socket to become writable.
    public private(set) var queuedBytes = 0

    private let loop: RunLoop
    private var fd: Int32
    private var readBuffer = [UInt8](repeating: 0, count: H4Framer.maxPacketLength)
    private var queue: [[UInt8]] = []
    private var queueHead = 0
    private var pendingFailure: TimerID?

    /// Opens and binds the user channel of adapter `index`. The adapter must be powered off
    /// (and not claimed by bluetoothd); this needs CAP_NET_ADMIN.
    public init(index: UInt16, loop: RunLoop,
                queueCapacity: Int = ControllerTransports.defaultOutputCapacity) throws(TransportError) {
        self.spec = .hci(index: index)
        self.index = index
        self.loop = loop
        self.queueCapacity = max(queueCapacity, H4Framer.maxPacketLength)
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
        self.fd = fd
        do throws(RunLoopError) {
            try loop.register(fd: fd, events: .readable) { [weak self] events in self?.handle(events) }
        } catch {
            closeFD(fd)
            self.fd = -1
            isOpen = false
            throw .setup(spec, "registering with the run loop", error.errnoCode)
        }
    }

    deinit {
        if fd >= 0 {
            loop.unregister(fd: fd)
            closeFD(fd)
        }
        if let pendingFailure { loop.cancel(pendingFailure) }
    }

    // MARK: Output

    public func send(_ type: H4PacketType, _ body: ArraySlice<UInt8>) -> Bool {
        guard isOpen else { return false }
        let total = 1 + body.count
        guard queueCapacity - queuedBytes >= total else { return false }
        if queueHead < queue.count {
            enqueue(type, body)
            return true
        }
        let written = writePacket(type, body)
        if written == total { return true }
        let code = written < 0 ? errno : EIO  // a datagram goes whole or not at all
        if written < 0 && (code == EAGAIN || code == EWOULDBLOCK || code == ENOBUFS || code == EINTR) {
            enqueue(type, body)
            watchWritable(true)
            return true
        }
        fail(.lost(spec, "write", errno: code), deferred: true)
        return false
    }

    private func enqueue(_ type: H4PacketType, _ body: ArraySlice<UInt8>) {
        var packet: [UInt8] = []
        packet.reserveCapacity(1 + body.count)
        packet.append(type.rawValue)
        packet.append(contentsOf: body)
        queue.append(packet)
        queuedBytes += packet.count
    }

    private func writePacket(_ type: H4PacketType, _ body: ArraySlice<UInt8>) -> Int {
        var indicator = type.rawValue
        return withUnsafeMutablePointer(to: &indicator) { indicatorPointer in
            body.withUnsafeBufferPointer { bodyBuffer in
                withUnsafeTemporaryAllocation(of: iovec.self, capacity: 2) { vectors in
                    vectors[0] = iovec(iov_base: UnsafeMutableRawPointer(indicatorPointer), iov_len: 1)
                    vectors[1] = iovec(iov_base: UnsafeMutableRawPointer(mutating: bodyBuffer.baseAddress),
                                       iov_len: bodyBuffer.count)
                    var message = msghdr()
                    message.msg_iov = vectors.baseAddress
                    message.msg_iovlen = 2
                    return sendmsg(fd, &message, CLINUX_MSG_NOSIGNAL)
                }
            }
        }
    }

    private func flush() {
        while queueHead < queue.count {
            let packet = queue[queueHead]
            let written = packet.withUnsafeBytes { raw in Glibc.send(fd, raw.baseAddress, raw.count, CLINUX_MSG_NOSIGNAL) }
            if written == packet.count {
                queueHead += 1
                queuedBytes -= packet.count
                continue
            }
            let code = written < 0 ? errno : EIO
            if written < 0 && code == EINTR { continue }
            if written < 0 && (code == EAGAIN || code == EWOULDBLOCK || code == ENOBUFS) { break }
            fail(.lost(spec, "write", errno: code), deferred: false)
            return
        }
        if queueHead == queue.count {
            queue.removeAll(keepingCapacity: true)
            queueHead = 0
            watchWritable(false)
        } else if queueHead >= 64 {
            queue.removeSubrange(0..<queueHead)
            queueHead = 0
        }
    }

    private var watchingWritable = false

    private func watchWritable(_ on: Bool) {
        guard on != watchingWritable, isOpen else { return }
        do throws(RunLoopError) {
            try loop.modify(fd: fd, events: on ? [.readable, .writable] : .readable)
            watchingWritable = on
        } catch {
            fail(.setup(spec, "epoll_ctl(MOD)", error.errnoCode), deferred: true)
        }
    }

    // MARK: Input

    private func handle(_ events: IOEvents) {
        if events.contains(.writable) {
            flush()
            guard isOpen else { return }
        }
        guard !events.isDisjoint(with: [.readable, .hangup, .error]) else { return }
        for _ in 0..<16 {
            let count = readBuffer.withUnsafeMutableBytes { raw in read(fd, raw.baseAddress, raw.count) }
            if count > 0 {
                if let packet = H4Framer.parseDatagram(readBuffer[0..<count]) {
                    onPacket?(packet.type, packet.body)
                    guard isOpen else { return }
                } else {
                    discardedBytes += count
                }
                continue
            }
            let code = count < 0 ? errno : 0
            if count < 0 && code == EINTR { continue }
            if count < 0 && (code == EAGAIN || code == EWOULDBLOCK) {
                if !events.isDisjoint(with: [.hangup, .error]) { fail(.lost(spec, "read", errno: ENETDOWN), deferred: false) }
                return
            }
            // EOF or an error such as ENETDOWN: the adapter was unplugged or reset.
            fail(.lost(spec, "read", errno: count == 0 ? nil : code), deferred: false)
            return
        }
    }

    // MARK: Closing

    public func close() {
        if let pendingFailure {
            loop.cancel(pendingFailure)
            self.pendingFailure = nil
        }
        tearDown()
    }

    private func tearDown() {
        guard isOpen else { return }
        isOpen = false
        loop.unregister(fd: fd)
        closeFD(fd)
        fd = -1
        queue = []
        queueHead = 0
        queuedBytes = 0
    }

    private func fail(_ error: TransportError, deferred: Bool) {
        guard isOpen else { return }
        tearDown()
        if deferred {
            pendingFailure = loop.schedule(after: .zero) { [weak self] in
                guard let self else { return }
                self.pendingFailure = nil
                self.onClosed?(error)
            }
        } else {
            onClosed?(error)
        }
    }
}
