import BlemuCore
import BlemuCrypto
import BlemuSMP
import FoundationEssentials
import Logging
#if canImport(Glibc)
import Glibc
#endif

/// A device's identity for privacy (Vol 3, Part C, 10.7; Vol 3, Part H, 2.4.2.1): its identity
/// address (the static random address centrals bond with) and its IRK, from which the
/// resolvable private addresses it advertises from are made and with which a bonded central
/// resolves them.
///
/// The IRK is generated once and kept in the state directory (`identity-DEVICE-NAME.json`,
/// written atomically with mode 0600 like the bond file), so a central that bonded yesterday
/// resolves today's addresses. A file that is damaged or names another address is reported,
/// moved aside (`PATH.damaged-N`) and replaced by a new identity: the centrals that bonded
/// under the old IRK must bond again, which is the only safe choice for a key nobody can trust.
public enum DeviceIdentityStore {
    static let format = "blemu-identity"
    static let version = 1

    struct File: Codable {
        var format: String
        var version: Int
        var device: String
        var name: String
        var address: String
        /// Least significant octet first, as on the air.
        var irk: String
    }

    /// The identity of `owner`: loaded from `path`, or generated (and written there). Without a
    /// path the identity lives until blemu stops.
    public static func loadOrCreate(path: String?, owner: BondOwner, logger: Logger,
                                    random: inout some RandomNumberGenerator) -> SMPIdentity {
        let address = LEAddress(owner.address, isRandom: true)
        if let path {
            switch BondStore.readFile(path) {
            case .missing:
                break
            case .failed(let reason):
                // Left alone (like an unreadable bond file); this run has an identity of its own.
                logger.error("identity file \(path) cannot be read (\(reason)); using a new IRK until blemu stops")
                return SMPIdentity(resolvingKey: newKey(&random), address: address)
            case .read(let bytes):
                do {
                    return try parse(bytes, owner: owner)
                } catch {
                    let aside = moveAside(path)
                    logger.error("identity file \(path) is damaged or foreign (\(error)); \(aside.map { "moved to \($0)" } ?? "could not be moved aside"), a new IRK is made (bonded centrals must pair again to resolve the new addresses)")
                }
            }
        }
        let identity = SMPIdentity(resolvingKey: newKey(&random), address: address)
        if let path {
            let file = File(format: format, version: version, device: owner.device, name: owner.name,
                            address: owner.address.description, irk: Hex.bytes(identity.resolvingKey))
            do {
                let encoder = JSONEncoder()
                encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
                if let failure = BondStore.writeAtomically(Array(try encoder.encode(file)), to: path) {
                    logger.error("identity file \(path) not written: \(failure); the IRK lasts until blemu stops")
                } else {
                    logger.info("identity file \(path) created")
                }
            } catch {
                logger.error("identity file \(path): cannot encode (\(error))")
            }
        }
        return identity
    }

    /// Whether an identity file (or anything else) is at `path`.
    public static func exists(_ path: String) -> Bool {
        if case .missing = BondStore.readFile(path) { return false }
        return true
    }

    /// Every value checked: a hand-edited file is refused, never trusted.
    static func parse(_ bytes: [UInt8], owner: BondOwner) throws -> SMPIdentity {
        let file = try JSONDecoder().decode(File.self, from: Data(bytes))
        guard file.format == format, file.version == version else {
            throw BondFileError("format \(file.format) version \(file.version), expected \(format) version \(version)")
        }
        guard file.device == owner.device, BluetoothAddress(file.address) == owner.address else {
            throw BondFileError("it belongs to \(file.device) \(file.address), not \(owner.device) \(owner.address)")
        }
        // An all-zero IRK would make every address resolvable by anyone (and resolves nothing, Bond.resolves).
        guard let irk = Hex.parse(file.irk), irk.count == 16, irk.contains(where: { $0 != 0 }) else {
            throw BondFileError("the IRK is not 16 octets of hex")
        }
        return SMPIdentity(resolvingKey: irk, address: LEAddress(owner.address, isRandom: true))
    }

    static func newKey(_ random: inout some RandomNumberGenerator) -> [UInt8] {
        while true {
            var key: [UInt8] = []
            while key.count < 16 { key += withUnsafeBytes(of: random.next()) { Array($0) } }
            key = Array(key.prefix(16))
            if key.contains(where: { $0 != 0 }) { return key }
        }
    }

    private static func moveAside(_ path: String) -> String? {
        for attempt in 1...1000 {
            let aside = "\(path).damaged-\(attempt)"
            if case .missing = BondStore.readFile(aside) {
                return rename(path, aside) == 0 ? aside : nil
            }
        }
        return nil
    }
}

/// Resolvable private addresses (Vol 6, Part B, 1.3.2.2): the 24 most significant bits are
/// prand, whose two top bits are 0b01 and whose random part is neither all zeros nor all ones;
/// the 24 least significant are hash = ah(IRK, prand) (Vol 3, Part H, 2.2.2).
public enum ResolvablePrivateAddress {
    public static func make(irk: [UInt8], random: inout some RandomNumberGenerator) -> BluetoothAddress {
        while true {
            let value = random.next()
            // prand, little-endian: bits 0-21 random, bit 22 set, bit 23 clear.
            let randomPart = UInt32(truncatingIfNeeded: value) & 0x3F_FFFF
            guard randomPart != 0, randomPart != 0x3F_FFFF else { continue }
            let prand = [UInt8(randomPart & 0xFF), UInt8((randomPart >> 8) & 0xFF), UInt8(randomPart >> 16) | 0x40]
            let hash = SMPCrypto.ah(irk: irk, prand: prand)
            // `try!`-free: six octets always make an address.
            guard let address = try? BluetoothAddress(littleEndian: hash + prand) else { continue }
            return address
        }
    }

    /// Whether `address` was made from `irk`.
    public static func resolves(_ address: BluetoothAddress, irk: [UInt8]) -> Bool {
        Bond(peer: LEAddress(address, isRandom: true), identityResolvingKey: irk,
             longTermKey: SMPLongTermKey(key: []), encryptionKeySize: 16, secureConnections: true, authenticated: false)
            .resolves(LEAddress(address, isRandom: true))
    }
}
