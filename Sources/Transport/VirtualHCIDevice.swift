import BlemuCore
import BlemuHCI
import BlemuRunLoop
import CLinux

#if canImport(Glibc)
import Glibc
#endif

/// The host side of a Linux virtual HCI controller: `/dev/vhci` (drivers/bluetooth/hci_vhci.c).
/// Opening it and asking for a primary adapter makes the kernel register a new `hciN` whose
/// controller is this file: each read is one packet the kernel's host stack sends (with its H4
/// indicator), each write must be one whole packet for it. Closing the file unregisters the
/// adapter, as pulling out a USB adapter does.
///
/// The driver's handshake: the first write may be the vendor packet `0xFF <opcode>`, opcode
/// 0x00 asking for a primary (BR/EDR and LE) adapter; the driver registers it and answers
/// `0xFF <opcode> <index, u16 LE>`. (Without it the driver creates one by itself after a
/// second.) `onCreated` reports the index; packets come through `onPacket` only after it.
public final class VirtualHCIDevice {
    public static let defaultPath = "/dev/vhci"
    /// hci_vhci's vendor packet indicator (HCI_VENDOR_PKT) and its "create a primary adapter" opcode.
    static let vendorPacket: UInt8 = 0xFF
    static let createPrimaryAdapter: UInt8 = 0x00

    public let path: String
    public var queueCapacity: Int { output.capacity }
    /// The adapter's index, once the kernel has answered the handshake.
    public private(set) var index: UInt16?
    public var onCreated: ((UInt16) -> Void)?
    public var onPacket: ((H4PacketType, ArraySlice<UInt8>) -> Void)?
    /// The kernel side failed (a read or write error): the file is closed, the adapter gone.
    /// Never because of `close()`.
    public var onClosed: ((TransportError) -> Void)?
    public var isOpen: Bool { channel.isOpen }
    /// Bytes of reads that were no packet (nor the handshake's answer).
    public private(set) var discardedBytes = 0
    /// Bytes of packets waiting for the file to become writable.
    public var queuedBytes: Int { output.queuedBytes }

    private let channel: FileDescriptorChannel
    private let output: WholePacketOutput

    /// Opens `path` (O_RDWR, nonblocking) and asks for a primary adapter.
    public static func open(path: String = defaultPath, loop: RunLoop,
                            queueCapacity: Int = ControllerTransports.defaultOutputCapacity) throws(TransportError)
        -> VirtualHCIDevice
    {
        let fd = Glibc.open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else { throw .vhciOpen(path: path, errno) }
        return try VirtualHCIDevice(adopting: fd, path: path, loop: loop, queueCapacity: queueCapacity)
    }

    /// Whether `path` could be opened for reading and writing, without opening it (opening it
    /// registers an adapter): the reason it cannot, else nil.
    public static func accessProblem(path: String = defaultPath) -> TransportError? {
        access(path, R_OK | W_OK) == 0 ? nil : .vhciOpen(path: path, errno)
    }

    /// Takes ownership of `fd`: `/dev/vhci` opened, or in tests one end of a SOCK_SEQPACKET
    /// socket pair (one packet per read and write, as the driver's file). Writes the handshake.
    public init(adopting fd: Int32, path: String, loop: RunLoop,
                queueCapacity: Int = ControllerTransports.defaultOutputCapacity) throws(TransportError) {
        self.path = path
        output = WholePacketOutput(capacity: queueCapacity)
        // A character device is written with write/writev (`.terminal`); the driver takes each
        // call's bytes, gathered, as one packet. The spec only labels the channel's errors,
        // which `failed` words for the device.
        channel = try FileDescriptorChannel(adopting: fd, spec: .unix(path: path), medium: .terminal, loop: loop,
                                            readBufferSize: H4Framer.maxPacketLength, readsPerWakeup: 16)
        channel.owner = self
        let path = path
        channel.onClosed = { [weak self] error in
            self?.onClosed?(.vhciLost(path: path, errnoCode: error.errnoCode))
        }
        switch channel.write([Self.vendorPacket, Self.createPrimaryAdapter][...]) {
        case .written(2):
            break
        case .written, .wouldBlock:
            channel.close()
            throw .vhciLost(path: path, errnoCode: EIO)
        case .failed(let code):
            channel.close()
            throw .vhciLost(path: path, errnoCode: code)
        }
    }

    // MARK: Output

    /// Queues or writes one packet for the kernel; false, having written nothing, when closed,
    /// before the adapter exists, or when the queue cannot take it.
    public func send(_ type: H4PacketType, _ body: ArraySlice<UInt8>) -> Bool {
        guard isOpen, index != nil else { return false }
        return output.send(type, body, on: channel)
    }

    public func send(_ type: H4PacketType, _ body: [UInt8]) -> Bool { send(type, body[...]) }

    private func flush() { output.flush(on: channel) }

    /// Closes the file, which unregisters the adapter; queued packets are dropped and
    /// `onClosed` does not follow. Idempotent.
    public func close() {
        channel.close()
    }
}

extension VirtualHCIDevice: FileDescriptorChannelOwner {
    func channelIsWritable() { flush() }

    /// The handshake's answer first (`FF 00 index`), then one packet per read.
    func channelReceived(_ bytes: ArraySlice<UInt8>) {
        guard index != nil else {
            let answer = Array(bytes)
            guard answer.count == 4, answer[0] == Self.vendorPacket, answer[1] == Self.createPrimaryAdapter else {
                discardedBytes += bytes.count
                return
            }
            let created = UInt16(answer[2]) | UInt16(answer[3]) << 8
            index = created
            onCreated?(created)
            return
        }
        if let packet = H4Framer.parseDatagram(bytes) {
            onPacket?(packet.type, packet.body)
        } else {
            discardedBytes += bytes.count
        }
    }

    func channelDidClose() { output.drop() }
}

extension TransportError {
    /// open() of /dev/vhci failed with `code`.
    static func vhciOpen(path: String, _ code: Int32) -> TransportError {
        switch code {
        case ENOENT, ENODEV, ENXIO:
            return TransportError(.noSuchDevice, errnoCode: code,
                "\(path): no virtual HCI device (\(errnoName(code))): load the kernel's module with "
                + "`sudo modprobe hci_vhci` (in a container, pass the host's /dev/vhci in: `--device /dev/vhci`)")
        case EACCES, EPERM:
            return TransportError(.permissionDenied, errnoCode: code,
                "\(path): permission denied (\(errnoName(code))): \(path) is root's (mode 0600): run blemu attach as root "
                + "(sudo), or give it CAP_DAC_OVERRIDE, or let a group open the device with a udev rule "
                + "(KERNEL==\"vhci\", GROUP=\"bluetooth\", MODE=\"0660\")")
        case EBUSY:
            return TransportError(.deviceBusy, errnoCode: code, "\(path): busy (EBUSY): retry")
        default:
            return TransportError(.ioFailure, errnoCode: code, "\(path): open failed: \(describe(errno: code))")
        }
    }

    /// The kernel side of /dev/vhci failed after it was opened.
    static func vhciLost(path: String, errnoCode code: Int32?) -> TransportError {
        let why = code.map { describe(errno: $0) } ?? "end of file"
        return TransportError(.connectionReset, errnoCode: code,
            "\(path): the kernel's side of the virtual adapter failed (\(why)): the adapter is gone")
    }
}
