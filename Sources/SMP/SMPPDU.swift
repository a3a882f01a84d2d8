import BlemuCore
import BlemuCrypto

/// SMP command codes (Vol 3, Part H, 3.3, Table 3.3). Any other code is reserved: "If a packet
/// is received with a reserved Code it shall be ignored."
public enum SMPCode: UInt8, Sendable, CaseIterable {
    case pairingRequest = 0x01
    case pairingResponse = 0x02
    case pairingConfirm = 0x03
    case pairingRandom = 0x04
    case pairingFailed = 0x05
    case encryptionInformation = 0x06
    case centralIdentification = 0x07
    case identityInformation = 0x08
    case identityAddressInformation = 0x09
    case signingInformation = 0x0A
    case securityRequest = 0x0B
    case pairingPublicKey = 0x0C
    case pairingDHKeyCheck = 0x0D
    case keypressNotification = 0x0E
}

/// One Swift value per SMP command (Vol 3, Part H, 3.5 and 3.6), each with a total decoder
/// `init(pdu:)` — the whole PDU, code first — and an encoder `encode(into:)`. Every SMP command
/// has a fixed length; anything else, or a reserved value, is a `DecodeError`.
public protocol SMPPDU: Equatable, Sendable {
    static var code: SMPCode { get }
    init(pdu: ArraySlice<UInt8>) throws(DecodeError)
    func encode(into out: inout [UInt8])
}

extension SMPPDU {
    public var encoded: [UInt8] {
        var out: [UInt8] = []
        encode(into: &out)
        return out
    }

    /// A reader past the code, after checking the code and the exact length (code included).
    static func reader(_ pdu: ArraySlice<UInt8>, length: Int) throws(DecodeError) -> ByteReader {
        var reader = ByteReader(pdu)
        let raw = try reader.u8()
        guard raw == code.rawValue else { throw DecodeError(.unknownType, "expected \(code), got \(Hex.byte(raw))") }
        guard pdu.count == length else {
            throw DecodeError(pdu.count < length ? .truncated : .trailingBytes,
                              "\(code) is \(length) octets, got \(pdu.count)")
        }
        return reader
    }
}

// MARK: Pairing features

/// IO capabilities (3.5.1, Table 3.4). 0x05-0xFF are reserved.
public enum SMPIOCapability: UInt8, Sendable, CaseIterable {
    case displayOnly = 0x00
    case displayYesNo = 0x01
    case keyboardOnly = 0x02
    case noInputNoOutput = 0x03
    case keyboardDisplay = 0x04
}

/// The AuthReq field (3.5.1, Figure 3.3): Bonding_Flags (2 bits; 0b01 Bonding, 0b00 No Bonding,
/// others reserved), MITM, SC, Keypress, CT2, and two RFU bits.
///
/// The raw octet is kept as received, so f6's IOcap hashes exactly what was sent; the accessors
/// read the defined bits, and reserved bits are ignored as the spec asks of a receiver.
public struct SMPAuthRequirements: Equatable, Sendable {
    public var rawValue: UInt8

    public init(rawValue: UInt8) { self.rawValue = rawValue }

    public init(bonding: Bool, mitm: Bool, secureConnections: Bool, keypress: Bool = false, ct2: Bool = false) {
        rawValue = (bonding ? 0x01 : 0) | (mitm ? 0x04 : 0) | (secureConnections ? 0x08 : 0)
            | (keypress ? 0x10 : 0) | (ct2 ? 0x20 : 0)
    }

    /// Bonding_Flags == 0b01. The reserved values 0b10 and 0b11 read as no bonding.
    public var bonding: Bool { rawValue & 0x03 == 0x01 }
    public var mitm: Bool { rawValue & 0x04 != 0 }
    public var secureConnections: Bool { rawValue & 0x08 != 0 }
    public var keypress: Bool { rawValue & 0x10 != 0 }
    public var ct2: Bool { rawValue & 0x20 != 0 }
}

/// Initiator/Responder Key Distribution (3.6.1, Figure 3.11): EncKey, IdKey, SignKey, LinkKey;
/// bits 4-7 are reserved and ignored.
public struct SMPKeyDistribution: OptionSet, Sendable, Hashable {
    public var rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    /// LE legacy: LTK, EDIV and Rand (Encryption Information, Central Identification).
    /// Ignored in LE Secure Connections, where both sides derive the LTK.
    public static let encryptionKey = SMPKeyDistribution(rawValue: 0x01)
    /// IRK and identity address (Identity Information, Identity Address Information).
    public static let identityKey = SMPKeyDistribution(rawValue: 0x02)
    /// CSRK (Signing Information).
    public static let signingKey = SMPKeyDistribution(rawValue: 0x04)
    /// BR/EDR link key by cross-transport key derivation (not offered here).
    public static let linkKey = SMPKeyDistribution(rawValue: 0x08)

    public static let defined: SMPKeyDistribution = [.encryptionKey, .identityKey, .signingKey, .linkKey]
}

/// The body shared by Pairing Request and Pairing Response (3.5.1, 3.5.2).
public struct SMPPairingFeatures: Equatable, Sendable {
    public var ioCapability: SMPIOCapability
    /// OOB data flag: 0x00 not present, 0x01 present; others are reserved.
    public var oobDataPresent: Bool
    public var authRequirements: SMPAuthRequirements
    /// 7...16 octets.
    public var maximumEncryptionKeySize: UInt8
    public var initiatorKeyDistribution: SMPKeyDistribution
    public var responderKeyDistribution: SMPKeyDistribution

    public static let encryptionKeySizes: ClosedRange<UInt8> = 7...16

    public init(ioCapability: SMPIOCapability, oobDataPresent: Bool = false, authRequirements: SMPAuthRequirements,
                maximumEncryptionKeySize: UInt8 = 16, initiatorKeyDistribution: SMPKeyDistribution,
                responderKeyDistribution: SMPKeyDistribution) {
        self.ioCapability = ioCapability
        self.oobDataPresent = oobDataPresent
        self.authRequirements = authRequirements
        self.maximumEncryptionKeySize = maximumEncryptionKeySize
        self.initiatorKeyDistribution = initiatorKeyDistribution
        self.responderKeyDistribution = responderKeyDistribution
    }

    init(reading r: inout ByteReader) throws(DecodeError) {
        let rawIO = try r.u8()
        guard let io = SMPIOCapability(rawValue: rawIO) else {
            throw DecodeError(.invalidValue, "reserved IO capability \(Hex.byte(rawIO))")
        }
        ioCapability = io
        let oob = try r.u8()
        guard oob <= 0x01 else { throw DecodeError(.invalidValue, "reserved OOB data flag \(Hex.byte(oob))") }
        oobDataPresent = oob == 0x01
        authRequirements = SMPAuthRequirements(rawValue: try r.u8())
        maximumEncryptionKeySize = try r.u8()
        guard Self.encryptionKeySizes.contains(maximumEncryptionKeySize) else {
            throw DecodeError(.invalidValue, "maximum encryption key size \(maximumEncryptionKeySize) is outside 7...16")
        }
        initiatorKeyDistribution = SMPKeyDistribution(rawValue: try r.u8())
        responderKeyDistribution = SMPKeyDistribution(rawValue: try r.u8())
    }

    func encode(into out: inout [UInt8]) {
        out.append(ioCapability.rawValue)
        out.append(oobDataPresent ? 0x01 : 0x00)
        out.append(authRequirements.rawValue)
        out.append(maximumEncryptionKeySize)
        out.append(initiatorKeyDistribution.rawValue)
        out.append(responderKeyDistribution.rawValue)
    }

    /// IOcap of f6 (2.2.8): AuthReq || OOB data flag || IO capability, most significant first;
    /// returned little-endian like every toolbox input.
    public var ioCapField: [UInt8] {
        [ioCapability.rawValue, oobDataPresent ? 0x01 : 0x00, authRequirements.rawValue]
    }
}

/// Vol 3, Part H, 3.5.1.
public struct SMPPairingRequest: SMPPDU {
    public static let code = SMPCode.pairingRequest
    public var features: SMPPairingFeatures
    public init(_ features: SMPPairingFeatures) { self.features = features }
    public init(pdu: ArraySlice<UInt8>) throws(DecodeError) {
        var r = try Self.reader(pdu, length: 7)
        features = try SMPPairingFeatures(reading: &r)
    }
    public func encode(into out: inout [UInt8]) {
        out.append(Self.code.rawValue)
        features.encode(into: &out)
    }
}

/// Vol 3, Part H, 3.5.2.
public struct SMPPairingResponse: SMPPDU {
    public static let code = SMPCode.pairingResponse
    public var features: SMPPairingFeatures
    public init(_ features: SMPPairingFeatures) { self.features = features }
    public init(pdu: ArraySlice<UInt8>) throws(DecodeError) {
        var r = try Self.reader(pdu, length: 7)
        features = try SMPPairingFeatures(reading: &r)
    }
    public func encode(into out: inout [UInt8]) {
        out.append(Self.code.rawValue)
        features.encode(into: &out)
    }
}

// MARK: 128-bit values

/// The commands whose body is one 128-bit value, little-endian.
public protocol SMPValue128PDU: SMPPDU {
    var value: [UInt8] { get }
    init(value: [UInt8])
}

extension SMPValue128PDU {
    public init(pdu: ArraySlice<UInt8>) throws(DecodeError) {
        var r = try Self.reader(pdu, length: 17)
        self.init(value: Array(try r.bytes(16)))
    }
    public func encode(into out: inout [UInt8]) {
        precondition(value.count == 16, "\(Self.code) carries 16 octets")
        out.append(Self.code.rawValue)
        out += value
    }
}

/// Vol 3, Part H, 3.5.3: Mconfirm/Sconfirm (legacy) or Ca/Cb (Secure Connections).
public struct SMPPairingConfirm: SMPValue128PDU {
    public static let code = SMPCode.pairingConfirm
    public var value: [UInt8]
    public init(value: [UInt8]) { self.value = value }
}

/// Vol 3, Part H, 3.5.4: Mrand/Srand or Na/Nb.
public struct SMPPairingRandom: SMPValue128PDU {
    public static let code = SMPCode.pairingRandom
    public var value: [UInt8]
    public init(value: [UInt8]) { self.value = value }
}

/// Vol 3, Part H, 3.6.2: the LTK (LE legacy).
public struct SMPEncryptionInformation: SMPValue128PDU {
    public static let code = SMPCode.encryptionInformation
    public var value: [UInt8]
    public init(value: [UInt8]) { self.value = value }
    public var longTermKey: [UInt8] { value }
}

/// Vol 3, Part H, 3.6.4: the IRK.
public struct SMPIdentityInformation: SMPValue128PDU {
    public static let code = SMPCode.identityInformation
    public var value: [UInt8]
    public init(value: [UInt8]) { self.value = value }
    public var identityResolvingKey: [UInt8] { value }
}

/// Vol 3, Part H, 3.6.6: the CSRK.
public struct SMPSigningInformation: SMPValue128PDU {
    public static let code = SMPCode.signingInformation
    public var value: [UInt8]
    public init(value: [UInt8]) { self.value = value }
    public var signatureKey: [UInt8] { value }
}

/// Vol 3, Part H, 3.5.7: Ea/Eb.
public struct SMPPairingDHKeyCheck: SMPValue128PDU {
    public static let code = SMPCode.pairingDHKeyCheck
    public var value: [UInt8]
    public init(value: [UInt8]) { self.value = value }
}

// MARK: Failure

/// Pairing Failed reasons (3.5.5, Table 3.7). 0x00 and 0x10-0xFF are reserved.
public enum SMPPairingFailedReason: UInt8, Sendable, CaseIterable, Error {
    case passkeyEntryFailed = 0x01
    case oobNotAvailable = 0x02
    case authenticationRequirements = 0x03
    case confirmValueFailed = 0x04
    case pairingNotSupported = 0x05
    case encryptionKeySize = 0x06
    case commandNotSupported = 0x07
    case unspecifiedReason = 0x08
    case repeatedAttempts = 0x09
    case invalidParameters = 0x0A
    case dhKeyCheckFailed = 0x0B
    case numericComparisonFailed = 0x0C
    case brEdrPairingInProgress = 0x0D
    case crossTransportKeyDerivationNotAllowed = 0x0E
    case keyRejected = 0x0F
}

/// Vol 3, Part H, 3.5.5.
public struct SMPPairingFailed: SMPPDU {
    public static let code = SMPCode.pairingFailed
    public var reason: SMPPairingFailedReason
    public init(reason: SMPPairingFailedReason) { self.reason = reason }
    public init(pdu: ArraySlice<UInt8>) throws(DecodeError) {
        var r = try Self.reader(pdu, length: 2)
        let raw = try r.u8()
        guard let reason = SMPPairingFailedReason(rawValue: raw) else {
            throw DecodeError(.invalidValue, "reserved Pairing Failed reason \(Hex.byte(raw))")
        }
        self.reason = reason
    }
    public func encode(into out: inout [UInt8]) {
        out.append(Self.code.rawValue)
        out.append(reason.rawValue)
    }
}

// MARK: Key distribution

/// Vol 3, Part H, 3.6.3: EDIV and Rand, which identify the LTK of Encryption Information.
public struct SMPCentralIdentification: SMPPDU {
    public static let code = SMPCode.centralIdentification
    public var encryptedDiversifier: UInt16
    public var randomNumber: UInt64
    public init(encryptedDiversifier: UInt16, randomNumber: UInt64) {
        self.encryptedDiversifier = encryptedDiversifier
        self.randomNumber = randomNumber
    }
    public init(pdu: ArraySlice<UInt8>) throws(DecodeError) {
        var r = try Self.reader(pdu, length: 11)
        encryptedDiversifier = try r.u16()
        randomNumber = try r.u64()
    }
    public func encode(into out: inout [UInt8]) {
        out.append(Self.code.rawValue)
        out.appendLE(encryptedDiversifier)
        out.appendLE(randomNumber)
    }
}

/// Vol 3, Part H, 3.6.5: the identity address, public (0x00) or static random (0x01); other
/// types are reserved.
public struct SMPIdentityAddressInformation: SMPPDU {
    public static let code = SMPCode.identityAddressInformation
    public var address: LEAddress
    public init(address: LEAddress) { self.address = address }
    public init(pdu: ArraySlice<UInt8>) throws(DecodeError) {
        var r = try Self.reader(pdu, length: 8)
        let type = try r.u8()
        guard type <= 0x01 else { throw DecodeError(.invalidValue, "reserved identity address type \(Hex.byte(type))") }
        address = LEAddress(try BluetoothAddress(littleEndian: try r.bytes(6)), isRandom: type == 0x01)
    }
    public func encode(into out: inout [UInt8]) {
        out.append(Self.code.rawValue)
        out.append(address.isRandom ? 0x01 : 0x00)
        out += address.address.littleEndianBytes
    }
}

// MARK: Security Request, Secure Connections, keypress

/// Vol 3, Part H, 3.6.7: sent by a peripheral to ask the central to pair or encrypt.
public struct SMPSecurityRequest: SMPPDU {
    public static let code = SMPCode.securityRequest
    public var authRequirements: SMPAuthRequirements
    public init(authRequirements: SMPAuthRequirements) { self.authRequirements = authRequirements }
    public init(pdu: ArraySlice<UInt8>) throws(DecodeError) {
        var r = try Self.reader(pdu, length: 2)
        authRequirements = SMPAuthRequirements(rawValue: try r.u8())
    }
    public func encode(into out: inout [UInt8]) {
        out.append(Self.code.rawValue)
        out.append(authRequirements.rawValue)
    }
}

/// Vol 3, Part H, 3.5.6. The decoder checks the point is on the curve (CVE-2018-5383).
public struct SMPPairingPublicKey: SMPPDU {
    public static let code = SMPCode.pairingPublicKey
    public var key: SMPPublicKey
    public init(key: SMPPublicKey) { self.key = key }
    public init(pdu: ArraySlice<UInt8>) throws(DecodeError) {
        var r = try Self.reader(pdu, length: 65)
        key = try SMPPublicKey(x: try r.bytes(32), y: try r.bytes(32))
    }
    public func encode(into out: inout [UInt8]) {
        out.append(Self.code.rawValue)
        out += key.x
        out += key.y
    }
}

/// Keypress notification types (3.5.8, Table 3.8). 0x05-0xFF are reserved.
public enum SMPKeypressType: UInt8, Sendable, CaseIterable {
    case entryStarted = 0x00
    case digitEntered = 0x01
    case digitErased = 0x02
    case cleared = 0x03
    case entryCompleted = 0x04
}

/// Vol 3, Part H, 3.5.8.
public struct SMPKeypressNotification: SMPPDU {
    public static let code = SMPCode.keypressNotification
    public var type: SMPKeypressType
    public init(type: SMPKeypressType) { self.type = type }
    public init(pdu: ArraySlice<UInt8>) throws(DecodeError) {
        var r = try Self.reader(pdu, length: 2)
        let raw = try r.u8()
        guard let type = SMPKeypressType(rawValue: raw) else {
            throw DecodeError(.invalidValue, "reserved keypress notification type \(Hex.byte(raw))")
        }
        self.type = type
    }
    public func encode(into out: inout [UInt8]) {
        out.append(Self.code.rawValue)
        out.append(type.rawValue)
    }
}

// MARK: Any command

/// Any SMP command, decoded by its code.
public enum SMPCommand: Equatable, Sendable {
    case pairingRequest(SMPPairingRequest)
    case pairingResponse(SMPPairingResponse)
    case pairingConfirm(SMPPairingConfirm)
    case pairingRandom(SMPPairingRandom)
    case pairingFailed(SMPPairingFailed)
    case encryptionInformation(SMPEncryptionInformation)
    case centralIdentification(SMPCentralIdentification)
    case identityInformation(SMPIdentityInformation)
    case identityAddressInformation(SMPIdentityAddressInformation)
    case signingInformation(SMPSigningInformation)
    case securityRequest(SMPSecurityRequest)
    case pairingPublicKey(SMPPairingPublicKey)
    case pairingDHKeyCheck(SMPPairingDHKeyCheck)
    case keypressNotification(SMPKeypressNotification)

    /// Throws `.unknownType` for an empty PDU or a reserved code, and the command's own
    /// `DecodeError` for a wrong length or a reserved value.
    public init(pdu: ArraySlice<UInt8>) throws(DecodeError) {
        guard let raw = pdu.first else { throw DecodeError(.truncated, "empty SMP PDU") }
        guard let code = SMPCode(rawValue: raw) else { throw DecodeError(.unknownType, "reserved SMP code \(Hex.byte(raw))") }
        switch code {
        case .pairingRequest: self = .pairingRequest(try SMPPairingRequest(pdu: pdu))
        case .pairingResponse: self = .pairingResponse(try SMPPairingResponse(pdu: pdu))
        case .pairingConfirm: self = .pairingConfirm(try SMPPairingConfirm(pdu: pdu))
        case .pairingRandom: self = .pairingRandom(try SMPPairingRandom(pdu: pdu))
        case .pairingFailed: self = .pairingFailed(try SMPPairingFailed(pdu: pdu))
        case .encryptionInformation: self = .encryptionInformation(try SMPEncryptionInformation(pdu: pdu))
        case .centralIdentification: self = .centralIdentification(try SMPCentralIdentification(pdu: pdu))
        case .identityInformation: self = .identityInformation(try SMPIdentityInformation(pdu: pdu))
        case .identityAddressInformation: self = .identityAddressInformation(try SMPIdentityAddressInformation(pdu: pdu))
        case .signingInformation: self = .signingInformation(try SMPSigningInformation(pdu: pdu))
        case .securityRequest: self = .securityRequest(try SMPSecurityRequest(pdu: pdu))
        case .pairingPublicKey: self = .pairingPublicKey(try SMPPairingPublicKey(pdu: pdu))
        case .pairingDHKeyCheck: self = .pairingDHKeyCheck(try SMPPairingDHKeyCheck(pdu: pdu))
        case .keypressNotification: self = .keypressNotification(try SMPKeypressNotification(pdu: pdu))
        }
    }

    public var code: SMPCode {
        switch self {
        case .pairingRequest: .pairingRequest
        case .pairingResponse: .pairingResponse
        case .pairingConfirm: .pairingConfirm
        case .pairingRandom: .pairingRandom
        case .pairingFailed: .pairingFailed
        case .encryptionInformation: .encryptionInformation
        case .centralIdentification: .centralIdentification
        case .identityInformation: .identityInformation
        case .identityAddressInformation: .identityAddressInformation
        case .signingInformation: .signingInformation
        case .securityRequest: .securityRequest
        case .pairingPublicKey: .pairingPublicKey
        case .pairingDHKeyCheck: .pairingDHKeyCheck
        case .keypressNotification: .keypressNotification
        }
    }

    public var encoded: [UInt8] {
        switch self {
        case .pairingRequest(let pdu): pdu.encoded
        case .pairingResponse(let pdu): pdu.encoded
        case .pairingConfirm(let pdu): pdu.encoded
        case .pairingRandom(let pdu): pdu.encoded
        case .pairingFailed(let pdu): pdu.encoded
        case .encryptionInformation(let pdu): pdu.encoded
        case .centralIdentification(let pdu): pdu.encoded
        case .identityInformation(let pdu): pdu.encoded
        case .identityAddressInformation(let pdu): pdu.encoded
        case .signingInformation(let pdu): pdu.encoded
        case .securityRequest(let pdu): pdu.encoded
        case .pairingPublicKey(let pdu): pdu.encoded
        case .pairingDHKeyCheck(let pdu): pdu.encoded
        case .keypressNotification(let pdu): pdu.encoded
        }
    }
}
