import BlemuControl
import BlemuCore
import BlemuGATTClient

/// How a `blemu gatt` command (or a `shell` line) names a characteristic: by its UUID (`2A19`
/// or the 128-bit form), by a number written with `0x` (`0x2A19`, `0x0014`: the characteristic
/// with that 16-bit UUID when the peripheral has one, else the one whose value handle it is —
/// what `dump` shows beside each characteristic), or by the name `dump` shows for it, in any case,
/// its words joined by spaces, hyphens or underscores (`"Battery Level"`, `battery-level`).
public enum CharacteristicReference: Hashable, Sendable, CustomStringConvertible {
    case uuid(BluetoothUUID)
    /// `0x` and 1 to 4 hex digits: a 16-bit UUID or a value handle, told apart by the database.
    case number(UInt16)
    /// Lowercase words joined by hyphens (`normalized`).
    case name(String)

    /// nil: nothing a characteristic can be named by (empty, or hex that is not a UUID).
    public init?(_ text: String) {
        if text.hasPrefix("0x") || text.hasPrefix("0X"), (1...4).contains(text.utf8.count - 2),
           let number = UInt16(text.dropFirst(2), radix: 16) {
            self = .number(number)
            return
        }
        if let uuid = ControlRequest.parseUUID(text) {
            self = .uuid(uuid)
            return
        }
        // Hex digits and hyphens alone were meant as a UUID (a digit too few, say): not a name.
        let name = Self.normalized(text)
        guard !name.isEmpty, !text.utf8.allSatisfy({ Hex.digit($0) != nil || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: "x") })
        else { return nil }
        self = .name(name)
    }

    /// "Battery Level", "battery_level", "BATTERY-LEVEL" → "battery-level": lowercase ASCII
    /// letters and digits, every run of anything else one hyphen, none at the ends.
    public static func normalized(_ text: some StringProtocol) -> String {
        var out = ""
        var pendingHyphen = false
        for byte in text.utf8 {
            let lower = byte | 0x20
            if (byte >= 0x30 && byte <= 0x39) || (lower >= 0x61 && lower <= 0x7A) {
                if pendingHyphen && !out.isEmpty { out += "-" }
                pendingHyphen = false
                out.unicodeScalars.append(Unicode.Scalar(byte >= 0x30 && byte <= 0x39 ? byte : lower))
            } else {
                pendingHyphen = true
            }
        }
        return out
    }

    public var description: String {
        switch self {
        case .uuid(let uuid): return uuid.description
        case .number(let number): return Hex.word(number)
        case .name(let name): return name
        }
    }

    /// The characteristic this names among `services` (the first in handle order, as for a
    /// UUID), or why none: "has no characteristic ..." (the caller puts the peer before it).
    public func resolve(in services: [RemoteService]) -> Result<RemoteCharacteristic, ResolveError> {
        let characteristics = services.lazy.flatMap(\.characteristics)
        switch self {
        case .uuid(let uuid):
            guard let found = characteristics.first(where: { $0.uuid == uuid }) else { return .failure(ResolveError("has no characteristic \(uuid)")) }
            return .success(found)
        case .number(let number):
            let uuid = BluetoothUUID(number)
            if let found = characteristics.first(where: { $0.uuid == uuid }) { return .success(found) }
            guard let found = characteristics.first(where: { $0.valueHandle == number }) else {
                return .failure(ResolveError("has no characteristic \(Hex.word(number)): neither a characteristic's 16-bit UUID nor its value handle"))
            }
            return .success(found)
        case .name(let name):
            guard let found = characteristics.first(where: { characteristic in
                GATTValueText.nameOfCharacteristic(characteristic.uuid).map { Self.normalized($0) == name } ?? false
            }) else {
                return .failure(ResolveError("has no characteristic named '\(name)' (`dump` shows the names it knows)"))
            }
            return .success(found)
        }
    }

    public struct ResolveError: Error, CustomStringConvertible {
        public let description: String
        public init(_ description: String) { self.description = description }
    }
}
