#if canImport(Glibc)
import Glibc
#endif

/// Why a controller transport could not be opened, or stopped working: one line that says what
/// failed and what to do about it. The CLI prints `description` as is.
public struct TransportError: Error, CustomStringConvertible, Equatable, Sendable {
    public enum Kind: String, Sendable {
        /// The `--controller` text is not a spec.
        case invalidSpec
        /// socket(AF_BLUETOOTH) gave EAFNOSUPPORT: the kernel has no Bluetooth.
        case noBluetoothSupport
        /// No adapter with that index (ENODEV).
        case noSuchAdapter
        /// The adapter is up, or being set up by bluetoothd (EBUSY).
        case adapterBusy
        /// Another program holds the adapter's user channel (EUSERS).
        case adapterInUse
        /// rfkill blocks the radio (ERFKILL).
        case radioBlocked
        /// EPERM / EACCES: missing capability or file permission.
        case permissionDenied
        /// Nothing listens at that address (ECONNREFUSED).
        case connectionRefused
        /// The peer did not answer in time.
        case timedOut
        /// The host name does not resolve.
        case hostNotFound
        /// The network or host cannot be reached.
        case unreachable
        /// The serial device does not exist (ENOENT, ENXIO, ENODEV).
        case noSuchDevice
        /// The device is not a terminal (ENOTTY).
        case notASerialPort
        /// Another program has the serial port open.
        case deviceBusy
        /// termios has no constant for that baud rate.
        case unsupportedBaud
        /// The Unix socket path does not exist.
        case noSuchSocket
        /// The controller closed the connection (EOF, EPOLLHUP).
        case closedByPeer
        /// The connection broke (ECONNRESET, EPIPE, ENETDOWN).
        case connectionReset
        /// Any other system call failure.
        case ioFailure
    }

    public let kind: Kind
    /// The errno behind the failure, when there was one.
    public let errnoCode: Int32?
    public let description: String

    public init(_ kind: Kind, errnoCode: Int32? = nil, _ description: String) {
        self.kind = kind
        self.errnoCode = errnoCode
        self.description = description
    }
}

// MARK: Messages, by what was being done

extension TransportError {
    static let acceptedSpecs =
        "use hciN, tcp:HOST[:PORT] (port 6402 by default), netsim[:INSTANCE] (the Android Emulator), unix:PATH or serial:DEVICE[:BAUD] (115200 by default), e.g. tcp:127.0.0.1:6402"

    static func invalidSpec(_ text: String, _ problem: String) -> TransportError {
        TransportError(.invalidSpec, "invalid controller spec \"\(text)\" (\(problem)): \(acceptedSpecs)")
    }

    /// socket() or bind() of the HCI user channel on adapter `index` failed with `code`.
    static func hciUserChannel(index: UInt16, _ operation: String, _ code: Int32) -> TransportError {
        let name = "hci\(index)"
        let why = "(\(errnoName(code)))"
        switch code {
        case EAFNOSUPPORT:
            return TransportError(.noBluetoothSupport, errnoCode: code,
                "\(name): this kernel has no Bluetooth support \(why): use a machine with Bluetooth, "
                + "or a virtual controller (--controller tcp:127.0.0.1:6402 with rootcanal)")
        case ENODEV:
            return TransportError(.noSuchAdapter, errnoCode: code,
                "\(name): no such Bluetooth adapter \(why): list the adapters with `btmgmt info` "
                + "(or `ls /sys/class/bluetooth`) and use one that exists")
        case EBUSY:
            return TransportError(.adapterBusy, errnoCode: code,
                "\(name): the adapter is up or owned by bluetoothd \(why) (or the kernel is still setting up an adapter "
                + "just plugged in): power it off with "
                + "`btmgmt --index \(index) power off`, or set AutoEnable=false in /etc/bluetooth/main.conf "
                + "and stop bluetoothd")
        case EUSERS, EALREADY:
            return TransportError(.adapterInUse, errnoCode: code,
                "\(name): another program holds this adapter's user channel \(why): stop it, "
                + "only one program at a time can use \(name)")
        case ERFKILL:
            return TransportError(.radioBlocked, errnoCode: code,
                "\(name): the radio is blocked by rfkill \(why): unblock it with `rfkill unblock bluetooth`")
        case EPERM, EACCES:
            return TransportError(.permissionDenied, errnoCode: code,
                "\(name): the HCI user channel needs CAP_NET_ADMIN \(why): run as root, "
                + "or grant it once with `sudo setcap cap_net_admin+ep path/to/blemu`")
        default:
            return TransportError(.ioFailure, errnoCode: code,
                "\(name): \(operation) of the HCI user channel failed: \(describe(errno: code)): "
                + "check the adapter with `btmgmt info`")
        }
    }

    /// connect() to a TCP controller failed with `code`.
    static func tcpConnect(_ spec: ControllerSpec, port: UInt16, _ code: Int32) -> TransportError {
        if case .netsim(let instance, _) = spec, code == ECONNREFUSED {
            return netsimNotListening(spec, instance: instance, port: port)
        }
        switch code {
        case ECONNREFUSED:
            return TransportError(.connectionRefused, errnoCode: code,
                "\(spec): connection refused (ECONNREFUSED): is rootcanal running? start it with "
                + "`.venv/bin/python scripts/rootcanal_server.py --hci-port \(port)` (in the blemu checkout, "
                + "after scripts/setup), or point --controller at the controller's HCI port")
        case ETIMEDOUT:
            return TransportError(.timedOut, errnoCode: code,
                "\(spec): connection timed out (ETIMEDOUT): check the host and port, and that a controller listens there")
        case ENETUNREACH, EHOSTUNREACH, ENETDOWN, EHOSTDOWN, EADDRNOTAVAIL:
            return TransportError(.unreachable, errnoCode: code,
                "\(spec): cannot reach the host (\(errnoName(code))): check the address and the network")
        case EACCES, EPERM:
            return TransportError(.permissionDenied, errnoCode: code,
                "\(spec): the connection is not permitted (\(errnoName(code))): check the firewall rules")
        default:
            return TransportError(.ioFailure, errnoCode: code,
                "\(spec): connect failed: \(describe(errno: code)): check the host and port")
        }
    }

    /// Nothing listens on netsim's HCI port: what to do about it.
    static func netsimNotListening(_ spec: ControllerSpec, instance: UInt16, port: UInt16) -> TransportError {
        TransportError(.connectionRefused, errnoCode: ECONNREFUSED,
            "\(spec): nothing listens on netsim's HCI port 127.0.0.1:\(port) (ECONNREFUSED): start the Android Emulator "
            + "(instance \(instance)) first, with `-netsim-args=\"--no-shutdown\"` so netsim stays up between emulator runs; "
            + "netsim listens on loopback only, so blemu must run on the emulator's machine (in Docker: `--network host`); "
            + "a netsim started with --hci-port N is reached with NETSIM_HCI_PORT=N")
    }

    static func tcpTimeout(_ spec: ControllerSpec, after timeout: Duration) -> TransportError {
        TransportError(.timedOut,
            "\(spec): no answer within \(seconds(timeout)): check the host and port, and that a controller "
            + "(rootcanal, Bumble) listens there")
    }

    static func hostNotFound(_ spec: ControllerSpec, host: String, _ reason: String) -> TransportError {
        TransportError(.hostNotFound,
            "\(spec): cannot resolve host \"\(host)\" (\(reason)): use an IP address, or a name in /etc/hosts or DNS")
    }

    /// connect() to a Unix socket controller failed with `code`.
    static func unixConnect(_ spec: ControllerSpec, path: String, _ code: Int32) -> TransportError {
        switch code {
        case ENOENT, ENOTDIR:
            return TransportError(.noSuchSocket, errnoCode: code,
                "\(spec): no such socket (\(errnoName(code))): start the controller that listens on \(path) first, "
                + "or fix the path")
        case ECONNREFUSED:
            return TransportError(.connectionRefused, errnoCode: code,
                "\(spec): nothing listens on the socket (ECONNREFUSED): start the controller that serves \(path) "
                + "(the file is left over from one that stopped)")
        case EACCES, EPERM:
            return TransportError(.permissionDenied, errnoCode: code,
                "\(spec): permission denied (\(errnoName(code))): run as a user that may write \(path)")
        case EAGAIN:
            return TransportError(.ioFailure, errnoCode: code,
                "\(spec): the listener's backlog is full (EAGAIN): retry when the controller accepts connections")
        default:
            return TransportError(.ioFailure, errnoCode: code,
                "\(spec): connect failed: \(describe(errno: code)): check that a controller listens on \(path)")
        }
    }

    static func unixPathTooLong(_ spec: ControllerSpec, length: Int, limit: Int) -> TransportError {
        TransportError(.invalidSpec,
            "\(spec): the path is \(length) bytes, longer than the \(limit) a Unix socket address holds: use a shorter path")
    }

    /// open() or setup of a serial device failed with `code`.
    static func serialOpen(_ spec: ControllerSpec, device: String, baud: Int, _ code: Int32) -> TransportError {
        switch code {
        case ENOENT, ENXIO, ENODEV, ENOTDIR:
            return TransportError(.noSuchDevice, errnoCode: code,
                "\(spec): no such device (\(errnoName(code))): is the board plugged in? list the serial ports "
                + "with `ls /dev/ttyACM* /dev/ttyUSB* /dev/serial/by-id`")
        case EACCES, EPERM:
            return TransportError(.permissionDenied, errnoCode: code,
                "\(spec): permission denied (\(errnoName(code))): add your user to the dialout group "
                + "(`sudo usermod -aG dialout $USER`, then log in again) or run as root")
        case EBUSY, EWOULDBLOCK:
            return TransportError(.deviceBusy, errnoCode: code,
                "\(spec): \(device) is in use by another program: close it (a serial monitor, ModemManager) and retry")
        case ENOTTY:
            return TransportError(.notASerialPort, errnoCode: code,
                "\(spec): \(device) is not a serial port (ENOTTY): give the UART device, e.g. /dev/ttyACM0")
        case EINVAL:
            return TransportError(.unsupportedBaud, errnoCode: code,
                "\(spec): the port refuses \(baud) baud (EINVAL): use a rate the UART supports, e.g. 115200 or 1000000")
        default:
            return TransportError(.ioFailure, errnoCode: code,
                "\(spec): opening \(device) failed: \(describe(errno: code)): check the device")
        }
    }

    /// The link was working and stopped: EOF, a hangup, or a read/write error `code`.
    static func lost(_ spec: ControllerSpec, _ operation: String, errno code: Int32?) -> TransportError {
        guard let code else {
            return TransportError(.closedByPeer,
                "\(spec): the controller closed the connection: check that it is still running")
        }
        if case .hci = spec, [EPIPE, ENODEV, ENETDOWN, ENXIO].contains(code) {
            // The kernel hangs up a user channel when it unregisters the adapter.
            return TransportError(.connectionReset, errnoCode: code,
                "\(spec): the adapter was removed (\(errnoName(code))): it was unplugged, reset, or its driver "
                + "unloaded; blemu opens it again when it is back (`btmgmt info` lists the adapters)")
        }
        switch code {
        case ECONNRESET, EPIPE, ECONNABORTED:
            return TransportError(.connectionReset, errnoCode: code,
                "\(spec): the controller dropped the connection (\(errnoName(code))): check that it is still running")
        case ENETDOWN, ENODEV, ENXIO, EIO:
            return TransportError(.connectionReset, errnoCode: code,
                "\(spec): the controller went away during \(operation) (\(errnoName(code))): check that the adapter "
                + "or board is still there (`btmgmt info`, `ls /dev/tty*`)")
        default:
            return TransportError(.ioFailure, errnoCode: code,
                "\(spec): \(operation) failed: \(describe(errno: code)): check the controller and its connection")
        }
    }

    static func setup(_ spec: ControllerSpec, _ operation: String, _ code: Int32) -> TransportError {
        TransportError(.ioFailure, errnoCode: code,
            "\(spec): \(operation) failed: \(describe(errno: code)): this is unexpected; report it with the spec used")
    }

    private static func seconds(_ duration: Duration) -> String {
        let milliseconds = duration.nanoseconds / 1_000_000
        return milliseconds % 1000 == 0 ? "\(milliseconds / 1000) s" : "\(milliseconds) ms"
    }
}

// MARK: errno text

/// `"Connection refused (ECONNREFUSED)"`: strerror plus the symbolic name, which is what people search for.
public func describe(errno code: Int32) -> String {
    "\(String(cString: strerror(code))) (\(errnoName(code)))"
}

/// The symbolic name of an errno value (`ECONNREFUSED`), or `errno N` for the uncommon ones.
public func errnoName(_ code: Int32) -> String {
    switch code {
    case EPERM: "EPERM"
    case ENOENT: "ENOENT"
    case EINTR: "EINTR"
    case EIO: "EIO"
    case ENXIO: "ENXIO"
    case EBADF: "EBADF"
    case EAGAIN: "EAGAIN"
    case ENOMEM: "ENOMEM"
    case EACCES: "EACCES"
    case EBUSY: "EBUSY"
    case EEXIST: "EEXIST"
    case ENODEV: "ENODEV"
    case ENOTDIR: "ENOTDIR"
    case EINVAL: "EINVAL"
    case EMFILE: "EMFILE"
    case ENFILE: "ENFILE"
    case ENOTTY: "ENOTTY"
    case ENOSPC: "ENOSPC"
    case EPIPE: "EPIPE"
    case ENAMETOOLONG: "ENAMETOOLONG"
    case EUSERS: "EUSERS"
    case ENOTSOCK: "ENOTSOCK"
    case EPROTONOSUPPORT: "EPROTONOSUPPORT"
    case EOPNOTSUPP: "EOPNOTSUPP"
    case EAFNOSUPPORT: "EAFNOSUPPORT"
    case EADDRINUSE: "EADDRINUSE"
    case EADDRNOTAVAIL: "EADDRNOTAVAIL"
    case ENETDOWN: "ENETDOWN"
    case ENETUNREACH: "ENETUNREACH"
    case ECONNABORTED: "ECONNABORTED"
    case ECONNRESET: "ECONNRESET"
    case ENOBUFS: "ENOBUFS"
    case EISCONN: "EISCONN"
    case ENOTCONN: "ENOTCONN"
    case ETIMEDOUT: "ETIMEDOUT"
    case ECONNREFUSED: "ECONNREFUSED"
    case EHOSTDOWN: "EHOSTDOWN"
    case EHOSTUNREACH: "EHOSTUNREACH"
    case EALREADY: "EALREADY"
    case EINPROGRESS: "EINPROGRESS"
    case ERFKILL: "ERFKILL"
    default: "errno \(code)"
    }
}
