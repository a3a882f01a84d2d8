import BlemuCore
import Crypto

/// A P-256 public key as LE Secure Connections sends it (Vol 3, Part H, 3.5.6): X then Y,
/// 32 octets each, little-endian.
///
/// Only points on the curve can be made: swift-crypto (BoringSSL) refuses any other on init.
/// That is the defence against the invalid-curve attack of CVE-2018-5383 (a point off the curve,
/// e.g. with Y = 0, leaks the DHKey to a man in the middle): Vol 3, Part H, 2.3.5.6.1 since the
/// erratum 10734 requires the receiver to check the point.
public struct SMPPublicKey: Equatable, Sendable {
    public let x: [UInt8]
    public let y: [UInt8]

    /// Throws `DecodeError` for coordinates of the wrong size (`.lengthMismatch`) or a point not
    /// on the curve (`.invalidValue`).
    public init(x: some Collection<UInt8>, y: some Collection<UInt8>) throws(DecodeError) {
        guard x.count == 32, y.count == 32 else {
            throw DecodeError(.lengthMismatch, "P-256 coordinates are 32 bytes, got \(x.count) and \(y.count)")
        }
        let x = Array(x), y = Array(y)
        do {
            _ = try Self.p256Key(x: x, y: y)
        } catch {
            throw DecodeError(.invalidValue, "public key is not a point on P-256")
        }
        self.x = x
        self.y = y
    }

    init(_ key: P256.KeyAgreement.PublicKey) {
        let raw = Array(key.rawRepresentation)
        x = raw[0..<32].reversed()
        y = raw[32..<64].reversed()
    }

    /// The X coordinate of the debug public key (2.3.5.6.1; also Appendix D.1's PKa), little-endian.
    public static let debugKeyX: [UInt8] = [
        0xE6, 0x9D, 0x35, 0x0E, 0x48, 0x01, 0x03, 0xCC, 0xDB, 0xFD, 0xF4, 0xAC, 0x11, 0x91, 0xF4, 0xEF,
        0xB9, 0xA5, 0xF9, 0xE9, 0xA7, 0x83, 0x2C, 0x5E, 0x2C, 0xBE, 0x97, 0xF2, 0xD2, 0x03, 0xB0, 0x20,
    ]

    /// swift-crypto's key (not Sendable, so made when needed; a point was checked once already).
    static func p256Key(x: [UInt8], y: [UInt8]) throws -> P256.KeyAgreement.PublicKey {
        // The raw form is X || Y, each most significant octet first.
        try P256.KeyAgreement.PublicKey(rawRepresentation: x.reversed() + y.reversed())
    }
}

/// Our P-256 key pair for LE Secure Connections (Vol 3, Part H, 2.3.5.6.1). A fresh one per
/// pairing is the default; the spec allows reuse, but a fresh key costs little here.
public struct SMPKeyPair: Sendable {
    /// The private scalar, most significant octet first (swift-crypto's keys are not Sendable).
    private let privateKeyBigEndian: [UInt8]
    public let publicKey: SMPPublicKey

    /// A new random key pair.
    public init() {
        let privateKey = P256.KeyAgreement.PrivateKey()
        privateKeyBigEndian = Array(privateKey.rawRepresentation)
        publicKey = SMPPublicKey(privateKey.publicKey)
    }

    /// A key pair from a private key given most significant octet first, as the spec prints
    /// them (Appendix D.1, and the debug key of 2.3.5.6.1). For tests and debug mode.
    public init(privateKeyBigEndian: [UInt8]) throws(DecodeError) {
        do {
            let privateKey = try P256.KeyAgreement.PrivateKey(rawRepresentation: privateKeyBigEndian)
            self.privateKeyBigEndian = privateKeyBigEndian
            publicKey = SMPPublicKey(privateKey.publicKey)
        } catch {
            throw DecodeError(.invalidValue, "not a P-256 private key")
        }
    }

    /// The DHKey (2.3.5.6.1): the X coordinate of our private key times the peer's point,
    /// 32 octets little-endian. `peer` is on the curve by construction.
    public func dhKey(with peer: SMPPublicKey) -> [UInt8] {
        do {
            let privateKey = try P256.KeyAgreement.PrivateKey(rawRepresentation: privateKeyBigEndian)
            let secret = try privateKey.sharedSecretFromKeyAgreement(with: SMPPublicKey.p256Key(x: peer.x, y: peer.y))
            return secret.withUnsafeBytes { Array($0) }.reversed()
        } catch {
            // Only thrown for keys BoringSSL refuses, which both inits already checked.
            preconditionFailure("ECDH failed on a validated key: \(error)")
        }
    }
}
