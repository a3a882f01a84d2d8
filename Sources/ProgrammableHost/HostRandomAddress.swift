import BlemuCore
import Logging

/// The programmable host's static random address (Vol 6, Part B, 1.3.2.1): made once per state
/// directory and kept there (`host-random-address`, one line `C0:11:22:33:44:55`), so a peer
/// that bonded with it knows it after a restart; a reset makes a new one (a factory reset forgets
/// the device's identity too). Without a state directory, one per process. The file is hostile
/// like any state file: read through `RegularFile` (a regular file of at most 64 bytes), and a
/// line that is not a valid static random address is replaced, with a warning.
public struct HostRandomAddress {
    public static let fileName = "host-random-address"
    public let path: String?
    public private(set) var address: BluetoothAddress

    public init(stateDirectory: String?, logger: Logger) {
        path = stateDirectory.map { $0.hasSuffix("/") ? $0 + Self.fileName : $0 + "/" + Self.fileName }
        if let path {
            switch RegularFile.read(path, maximumBytes: 64, followSymlinks: false) {
            case .success(let bytes):
                let text = String(decoding: bytes, as: UTF8.self).trimmingSpaceAndNewlines
                if let stored = BluetoothAddress(text), stored.isValidStaticRandom {
                    address = stored
                    return
                }
                logger.warning("\(path.visible) does not hold a static random address: making a new one")
            case .failure(let error) where error.kind == .missing:
                break
            case .failure(let error):
                logger.warning("\(path.visible): \(error): making a new random address")
            }
        }
        address = Self.make()
        save(logger: logger)
    }

    /// A new address, saved (a reset).
    public mutating func renew(logger: Logger) {
        var next = Self.make()
        while next == address { next = Self.make() }
        address = next
        save(logger: logger)
    }

    private func save(logger: Logger) {
        guard let path else { return }
        if let failure = RegularFile.writeAtomically(Array((address.description + "\n").utf8), to: path) {
            logger.warning("cannot keep the host's random address in \(path.visible): \(failure)")
        }
    }

    /// The two top bits set, the 46 random ones neither all zero nor all one.
    static func make() -> BluetoothAddress {
        var generator = SystemRandomNumberGenerator()
        while true {
            let random = generator.next() & 0x3FFF_FFFF_FFFF
            if random != 0 && random != 0x3FFF_FFFF_FFFF { return BluetoothAddress(value: random | 0xC000_0000_0000) }
        }
    }
}

private extension String {
    var trimmingSpaceAndNewlines: String {
        var scalars = Substring(self)
        while let last = scalars.last, last == "\n" || last == "\r" || last == " " { scalars.removeLast() }
        while let first = scalars.first, first == " " { scalars.removeFirst() }
        return String(scalars)
    }
}
