import BlemuCore

/// What a layer above Security keeps with a bond and Security never looks into: the bonded
/// client's GATT state (Host's `BondedClientState`: CCCDs, robust-caching state, SignCounter,
/// Database Hash). The bond file stores it in the bond's entry, beside the keys, as the JSON
/// values it is made of; `BondAttachmentFormat` names its fields and checks what a file holds.
public struct BondAttachment: Equatable, Sendable {
    /// One JSON value of an entry: the kinds a bond file holds besides keys.
    public enum Value: Equatable, Sendable {
        case integer(Int64)
        case flag(Bool)
        case text(String)
        /// An object of integers (e.g. CCCD values by handle).
        case table([String: Int64])
    }

    /// The values by field name; a field that is absent is not written.
    public var values: [String: Value]

    public init(_ values: [String: Value] = [:]) {
        self.values = values
    }

    public static let empty = BondAttachment()

    public subscript(field: String) -> Value? {
        get { values[field] }
        set { values[field] = newValue }
    }
}

/// How the owner of a bond's attachment lays it out in the bond file: the entry's fields that
/// are the attachment's, and how what a file holds in them is read: in its canonical form, or
/// nil when it is not usable (the entry is then malformed and the file set aside as damaged,
/// like one with a bad key).
public struct BondAttachmentFormat: Sendable {
    /// The fields of a bond's entry that belong to the attachment (the others are Security's or ignored).
    public let fields: [String]
    public let canonical: @Sendable (BondAttachment) -> BondAttachment?

    public init(fields: [String], canonical: @escaping @Sendable (BondAttachment) -> BondAttachment?) {
        self.fields = fields
        self.canonical = canonical
    }

    /// No attachment: a store of keys only (the central's own bonds).
    public static let none = BondAttachmentFormat(fields: [], canonical: { $0 })
}
