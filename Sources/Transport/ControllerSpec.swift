#if canImport(Glibc)
import Glibc
#endif

/// Where the controller is (Docs/REFERENCE.md, "Controller specs"): `hciN`, `tcp:HOST:PORT`,
/// `netsim[:INSTANCE]`, `unix:PATH`, `serial:DEVICE[:BAUD]`.
public enum ControllerSpec: Hashable, Sendable, CustomStringConvertible {
    /// Linux HCI user channel on adapter `index`.
    case hci(index: UInt16)
    /// H4 over TCP (rootcanal, Bumble).
    case tcp(host: String, port: UInt16)
    /// H4 over TCP to the Android Emulator's netsim on this machine: its HCI port, where every
    /// connection is a new controller on the emulator's radio. `port` is resolved when parsing
    /// (`netsimPort`), from NETSIM_HCI_PORT or the instance's default.
    case netsim(instance: UInt16, port: UInt16)
    /// H4 over a Unix stream socket.
    case unix(path: String)
    /// H4 over a UART, 8N1 with RTS/CTS.
    case serial(device: String, baud: Int)

    /// rootcanal's HCI port.
    public static let defaultTCPPort: UInt16 = 6402
    public static let defaultBaud = 115_200
    /// The rates `serial:DEVICE:BAUD` accepts: those termios has a constant for.
    public static let supportedBauds = [
        1200, 2400, 4800, 9600, 19200, 38400, 57600, 115_200, 230_400, 460_800, 500_000, 576_000,
        921_600, 1_000_000, 1_152_000, 1_500_000, 2_000_000, 2_500_000, 3_000_000, 3_500_000, 4_000_000,
    ]

    /// netsim's HCI port for the first emulator; instance N listens on 6402 + N - 1.
    public static let netsimFirstHCIPort: UInt16 = 6402
    /// Where netsim listens: loopback only.
    public static let netsimHost = "127.0.0.1"

    /// `environment` is where NETSIM_HCI_PORT is looked up (nil: this process's environment).
    public init(parsing text: String, environment: [String: String]? = nil) throws(TransportError) {
        if text == "netsim" || text.hasPrefix("netsim:") {
            self = try Self.parseNetsim(text, environment: environment)
        } else if text.hasPrefix("hci") {
            let digits = text.dropFirst(3)
            guard !digits.isEmpty, digits.allSatisfy(\.isASCIIDigit), let index = UInt16(digits) else {
                throw TransportError.invalidSpec(text, "hci needs an adapter number, e.g. hci0")
            }
            self = .hci(index: index)
        } else if text.hasPrefix("tcp:") {
            self = try Self.parseTCP(text, String(text.dropFirst(4)))
        } else if text.hasPrefix("unix:") {
            let path = String(text.dropFirst(5))
            guard !path.isEmpty else { throw TransportError.invalidSpec(text, "unix needs a socket path") }
            self = .unix(path: path)
        } else if text.hasPrefix("serial:") {
            self = try Self.parseSerial(text, String(text.dropFirst(7)))
        } else {
            throw TransportError.invalidSpec(text, "unknown kind")
        }
    }

    /// `HOST`, `HOST:PORT`, `[IPV6]` or `[IPV6]:PORT`.
    private static func parseTCP(_ text: String, _ rest: String) throws(TransportError) -> ControllerSpec {
        let host: Substring
        var portText: Substring?
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]") else {
                throw TransportError.invalidSpec(text, "an IPv6 address needs its closing ]")
            }
            host = rest[rest.index(after: rest.startIndex)..<close]
            let after = rest[rest.index(after: close)...]
            if !after.isEmpty {
                guard after.first == ":" else { throw TransportError.invalidSpec(text, "expected :PORT after ]") }
                portText = after.dropFirst()
            }
        } else {
            let parts = rest.split(separator: ":", omittingEmptySubsequences: false)
            switch parts.count {
            case 1: host = parts[0]
            case 2: host = parts[0]; portText = parts[1]
            default: throw TransportError.invalidSpec(text, "write an IPv6 address in brackets, e.g. tcp:[::1]:6402")
            }
        }
        guard !host.isEmpty else { throw TransportError.invalidSpec(text, "tcp needs a host") }
        var port = defaultTCPPort
        if let portText {
            guard !portText.isEmpty, portText.allSatisfy(\.isASCIIDigit), let value = UInt16(portText), value != 0 else {
                throw TransportError.invalidSpec(text, "the port must be a number from 1 to 65535")
            }
            port = value
        }
        return .tcp(host: String(host), port: port)
    }

    /// `netsim` or `netsim:INSTANCE` (1 for the first emulator).
    private static func parseNetsim(_ text: String, environment: [String: String]?) throws(TransportError) -> ControllerSpec {
        var instance: UInt16 = 1
        if text.hasPrefix("netsim:") {
            let digits = text.dropFirst(7)
            guard !digits.isEmpty, digits.allSatisfy(\.isASCIIDigit), let value = UInt16(digits), value >= 1,
                  Int(value) - 1 + Int(netsimFirstHCIPort) <= Int(UInt16.max) else {
                throw TransportError.invalidSpec(text, "netsim takes an emulator instance from 1, e.g. netsim:1")
            }
            instance = value
        }
        return .netsim(instance: instance, port: try netsimPort(instance: instance, environment: environment))
    }

    /// netsim's HCI port for `instance`: NETSIM_HCI_PORT when set (the port netsim was started
    /// with, `--hci-port`), else 6402 + instance - 1 (netsim's default for each emulator).
    public static func netsimPort(instance: UInt16, environment: [String: String]? = nil) throws(TransportError) -> UInt16 {
        let variable = environment.map { $0["NETSIM_HCI_PORT"] } ?? getenv("NETSIM_HCI_PORT").map { String(cString: $0) }
        if let variable, !variable.isEmpty {
            guard variable.allSatisfy(\.isASCIIDigit), let port = UInt16(variable), port != 0 else {
                throw TransportError(.invalidSpec,
                    "NETSIM_HCI_PORT=\"\(variable)\" is not a port (a number from 1 to 65535): fix or unset it")
            }
            return port
        }
        return UInt16(Int(netsimFirstHCIPort) + Int(instance) - 1)
    }

    /// The host and port to connect to, for the specs that are TCP.
    public var tcpEndpoint: (host: String, port: UInt16)? {
        switch self {
        case .tcp(let host, let port): (host, port)
        case .netsim(_, let port): (Self.netsimHost, port)
        case .hci, .unix, .serial: nil
        }
    }

    /// `DEVICE` or `DEVICE:BAUD`. Device paths may hold colons themselves
    /// (/dev/serial/by-path/pci-0000:00:14.0-usb-0:1:1.0-port0), so the last field is taken for
    /// a baud rate only when it is made of letters and digits alone: all digits is a rate, and
    /// anything else (`abc`, `115k`) is a bad one, named as such rather than opened as part of
    /// the path. Fields of by-path names hold `.` or `-`, so they stay in the path. A path whose
    /// own last field is letters and digits alone is written with its rate: `serial:/dev/x:ab:115200`.
    private static func parseSerial(_ text: String, _ rest: String) throws(TransportError) -> ControllerSpec {
        var device = Substring(rest)
        var baud = defaultBaud
        if let colon = rest.lastIndex(of: ":") {
            let tail = rest[rest.index(after: colon)...]
            if tail.isEmpty {
                throw TransportError.invalidSpec(text, "no baud rate after the last ':'; write serial:DEVICE or serial:DEVICE:BAUD")
            }
            if tail.allSatisfy(\.isASCIILetterOrDigit) {
                guard tail.allSatisfy(\.isASCIIDigit), let value = Int(tail), supportedBauds.contains(value) else {
                    let what = tail.allSatisfy(\.isASCIIDigit) ? "is not supported" : "is not a number"
                    throw TransportError.invalidSpec(
                        text, "baud \(tail) \(what); use one of \(supportedBauds.map(String.init).joined(separator: ", "))")
                }
                baud = value
                device = rest[..<colon]
            }
        }
        guard !device.isEmpty else { throw TransportError.invalidSpec(text, "serial needs a device, e.g. /dev/ttyACM0") }
        return .serial(device: String(device), baud: baud)
    }

    /// The canonical spec: parsing it gives this value back (netsim's, with the same NETSIM_HCI_PORT).
    public var description: String {
        switch self {
        case .hci(let index): "hci\(index)"
        case .tcp(let host, let port): host.contains(":") ? "tcp:[\(host)]:\(port)" : "tcp:\(host):\(port)"
        case .netsim(let instance, _): "netsim:\(instance)"
        case .unix(let path): "unix:\(path)"
        case .serial(let device, let baud): "serial:\(device):\(baud)"
        }
    }
}

extension Character {
    fileprivate var isASCIIDigit: Bool { ("0"..."9").contains(self) }
    fileprivate var isASCIILetterOrDigit: Bool {
        guard let ascii = asciiValue else { return false }
        return (0x30...0x39).contains(ascii) || (0x41...0x5A).contains(ascii) || (0x61...0x7A).contains(ascii)
    }
}
