/// Where the controller is (Docs/REFERENCE.md, "Controller specs"): `hciN`, `tcp:HOST:PORT`,
/// `unix:PATH`, `serial:DEVICE[:BAUD]`.
public enum ControllerSpec: Hashable, Sendable, CustomStringConvertible {
    /// Linux HCI user channel on adapter `index`.
    case hci(index: UInt16)
    /// H4 over TCP (rootcanal, Bumble).
    case tcp(host: String, port: UInt16)
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

    public init(parsing text: String) throws(TransportError) {
        if text.hasPrefix("hci") {
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

    /// The canonical spec: parsing it gives this value back.
    public var description: String {
        switch self {
        case .hci(let index): "hci\(index)"
        case .tcp(let host, let port): host.contains(":") ? "tcp:[\(host)]:\(port)" : "tcp:\(host):\(port)"
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
