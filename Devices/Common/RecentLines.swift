import BlemuATT
import BlemuCore
import BlemuGATT

/// A log of recent events served as one long UTF-8 value: lines, newest last, kept within
/// `maxBytes` by dropping the oldest whole lines. A central reads it with a long read (Read,
/// then Read Blob, Vol 3, Part G, 4.8.3); the stack keeps the value taken at offset 0 for the
/// blobs that follow, so the text arrives whole even when an event lands mid-read.
public final class RecentLines {
    public let maxBytes: Int
    private var lines: [String] = []
    private var byteCount = 0

    public init(maxBytes: Int = ValueLength.attributeMaximum) {
        precondition(maxBytes > 0 && maxBytes <= ValueLength.attributeMaximum, "an attribute holds 1 to 512 bytes")
        self.maxBytes = maxBytes
    }

    /// Adds a line (without its newline); the oldest lines go when the text would not fit.
    public func append(_ line: String) {
        let line = Self.prefix(line, maxBytes: maxBytes - 1)
        lines.append(line)
        byteCount += line.utf8.count + 1
        while byteCount > maxBytes, !lines.isEmpty {
            byteCount -= lines.removeFirst().utf8.count + 1
        }
    }

    public var text: String { lines.map { $0 + "\n" }.joined() }
    public var bytes: [UInt8] { Array(text.utf8) }
    public var lineCount: Int { lines.count }

    /// A read-only characteristic serving the text by offset, so a long read is whole.
    /// `refusal`, asked at every read (each part of a long read too): an ATT error for a
    /// central that may not read the lines (e.g. Insufficient Authentication), nil to answer.
    /// `permissions`: the security the stack checks before any read reaches `refusal` (nil: readable by all).
    public func makeCharacteristic(_ uuid: BluetoothUUID, description: String, permissions: AttributePermissions? = nil,
                                   refusal: ((ATTPeer) -> ATTError?)? = nil) -> Characteristic {
        Characteristic(uuid, properties: [.read], permissions: permissions, length: .variable(max: maxBytes),
                       descriptors: [.userDescription(description)],
                       onRead: { [weak self] request, value in
                           guard let self else { return .unlikelyError }
                           if let error = refusal?(request.peer) { return error }
                           value.append(contentsOf: self.text.utf8)
                           return nil
                       })
    }

    /// The longest prefix of `text` within `maxBytes` of UTF-8, cut between characters.
    static func prefix(_ text: String, maxBytes: Int) -> String {
        guard text.utf8.count > maxBytes else { return text }
        var out = ""
        var count = 0
        for character in text {
            let size = character.utf8.count
            guard count + size <= maxBytes else { break }
            out.append(character)
            count += size
        }
        return out
    }
}
