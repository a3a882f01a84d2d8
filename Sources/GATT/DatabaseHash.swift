import BlemuCore
import BlemuCrypto

/// The Database Hash characteristic value (Vol 3, Part G, 7.3): AES-CMAC with an all-zero key over
/// the attributes that shape the database, so a client can tell whether its cache is still valid.
public enum GATTDatabaseHash {
    /// Attribute types hashed as handle || type || value (Vol 3, Part G, 7.3.1): Primary Service,
    /// Secondary Service, Include, Characteristic declarations and Characteristic Extended Properties.
    public static let typesHashedWithValue: Set<UInt16> = [0x2800, 0x2801, 0x2802, 0x2803, 0x2900]
    /// Attribute types hashed as handle || type only: Characteristic User Description, Client and
    /// Server Characteristic Configuration, Presentation Format and Aggregate Format.
    public static let typesHashedWithoutValue: Set<UInt16> = [0x2901, 0x2902, 0x2903, 0x2904, 0x2905]

    /// The hash, in the byte order it is sent in the Database Hash characteristic value: least
    /// significant octet first, i.e. the AES-CMAC output of RFC 4493 reversed. The Core spec does
    /// not say so in 7.3.1, but ATT values are little-endian unless defined otherwise (Vol 3,
    /// Part F, 3.3.1), and both anchors send it so: Zephyr's `db_hash_gen` (subsys/bluetooth/host/
    /// gatt.c: "PTS expects hash to be in little endianness", then `sys_mem_swap`) and Bumble 0.0.236
    /// `GenericAttributeProfileService.get_database_hash` (bumble/profiles/gatt_service.py,
    /// `aes_cmac(m, bytes(16))[::-1]`).
    ///
    /// `attributes` may come in any order; they are hashed in handle order. A nil value hashes as empty.
    public static func compute(_ attributes: [(handle: UInt16, type: BluetoothUUID, value: [UInt8]?)]) -> [UInt8] {
        let key = [UInt8](repeating: 0, count: 16)
        return AESCMAC.mac(key: key, message: message(attributes)).reversed()
    }

    /// The message M the hash is computed over (Vol 3, Part G, 7.3.1), for tests and diagnostics.
    public static func message(_ attributes: [(handle: UInt16, type: BluetoothUUID, value: [UInt8]?)]) -> [UInt8] {
        // A stable sort keeps the caller's order for equal handles (which a valid database has not).
        let ordered = attributes.enumerated().sorted {
            ($0.element.handle, $0.offset) < ($1.element.handle, $1.offset)
        }.map(\.element)
        var out: [UInt8] = []
        for attribute in ordered {
            guard let type = attribute.type.uint16 else { continue }
            if typesHashedWithValue.contains(type) {
                out.appendLE(attribute.handle)
                attribute.type.appendATT(to: &out)
                out += attribute.value ?? []
            } else if typesHashedWithoutValue.contains(type) {
                out.appendLE(attribute.handle)
                attribute.type.appendATT(to: &out)
            }
        }
        return out
    }
}
