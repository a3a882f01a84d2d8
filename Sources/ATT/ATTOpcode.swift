/// ATT opcodes (Vol 3, Part F, 3.4.8, Table 3.37).
///
/// Bit 6 is the Command Flag: a PDU with it set is a command, which gets no response and is
/// ignored when unknown (Vol 3, Part F, 3.3.1). Bit 7 is the Authentication Signature Flag.
public enum ATTOpcode: UInt8, Sendable, CaseIterable {
    case errorResponse = 0x01
    case exchangeMTURequest = 0x02
    case exchangeMTUResponse = 0x03
    case findInformationRequest = 0x04
    case findInformationResponse = 0x05
    case findByTypeValueRequest = 0x06
    case findByTypeValueResponse = 0x07
    case readByTypeRequest = 0x08
    case readByTypeResponse = 0x09
    case readRequest = 0x0A
    case readResponse = 0x0B
    case readBlobRequest = 0x0C
    case readBlobResponse = 0x0D
    case readMultipleRequest = 0x0E
    case readMultipleResponse = 0x0F
    case readByGroupTypeRequest = 0x10
    case readByGroupTypeResponse = 0x11
    case writeRequest = 0x12
    case writeResponse = 0x13
    case prepareWriteRequest = 0x16
    case prepareWriteResponse = 0x17
    case executeWriteRequest = 0x18
    case executeWriteResponse = 0x19
    case readMultipleVariableRequest = 0x20
    case readMultipleVariableResponse = 0x21
    case multipleHandleValueNotification = 0x23
    case handleValueNotification = 0x1B
    case handleValueIndication = 0x1D
    case handleValueConfirmation = 0x1E
    case writeCommand = 0x52
    case signedWriteCommand = 0xD2

    /// Vol 3, Part F, 3.3.1: the Command Flag.
    public static func isCommand(_ raw: UInt8) -> Bool { raw & 0x40 != 0 }

    /// Whether a raw opcode is a request a server must answer: not a command, and not one of the
    /// PDUs a server receives without answering (responses, notifications, confirmations).
    /// Vol 3, Part F, 3.4.9: requests are the methods a client sends and expects a response to.
    public static func isRequestForm(_ raw: UInt8) -> Bool {
        !isCommand(raw) && !isForClient(raw) && raw != handleValueConfirmation.rawValue
    }

    /// Which end of a bearer a PDU from the peer is for, decided here only (Vol 3, Part F, 3.3 and
    /// 3.4.8): responses, notifications and indications are the client's; requests, commands and
    /// confirmations (and what is unknown) the server's, which answers an unknown request.
    /// Those are the odd opcodes up to 0x23 but 0x15 and 0x1F, which Table 3.37 leaves unused
    /// (tested against the table's list in ATTBearerTests).
    public static func isForClient(_ raw: UInt8) -> Bool {
        raw & 1 == 1 && raw <= 0x23 && raw != 0x15 && raw != 0x1F
    }
}

/// ATT error codes (Vol 3, Part F, 3.4.1.1, Table 3.4) and the common profile error codes
/// (Core Specification Supplement, Part B, 1.2).
public struct ATTError: Error, RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    public static let invalidHandle = ATTError(rawValue: 0x01)
    public static let readNotPermitted = ATTError(rawValue: 0x02)
    public static let writeNotPermitted = ATTError(rawValue: 0x03)
    public static let invalidPDU = ATTError(rawValue: 0x04)
    public static let insufficientAuthentication = ATTError(rawValue: 0x05)
    public static let requestNotSupported = ATTError(rawValue: 0x06)
    public static let invalidOffset = ATTError(rawValue: 0x07)
    public static let insufficientAuthorization = ATTError(rawValue: 0x08)
    public static let prepareQueueFull = ATTError(rawValue: 0x09)
    public static let attributeNotFound = ATTError(rawValue: 0x0A)
    public static let attributeNotLong = ATTError(rawValue: 0x0B)
    public static let encryptionKeySizeTooShort = ATTError(rawValue: 0x0C)
    public static let invalidAttributeValueLength = ATTError(rawValue: 0x0D)
    public static let unlikelyError = ATTError(rawValue: 0x0E)
    public static let insufficientEncryption = ATTError(rawValue: 0x0F)
    public static let unsupportedGroupType = ATTError(rawValue: 0x10)
    public static let insufficientResources = ATTError(rawValue: 0x11)
    public static let databaseOutOfSync = ATTError(rawValue: 0x12)
    public static let valueNotAllowed = ATTError(rawValue: 0x13)
    // Common profile and service error codes (Supplement, Part B, 1.2).
    public static let writeRequestRejected = ATTError(rawValue: 0xFC)
    public static let cccdImproperlyConfigured = ATTError(rawValue: 0xFD)
    public static let procedureAlreadyInProgress = ATTError(rawValue: 0xFE)
    public static let outOfRange = ATTError(rawValue: 0xFF)

    /// Application errors 0x80–0x9F belong to the profile or device (Vol 3, Part F, 3.4.1.1).
    public static func application(_ code: UInt8) -> ATTError {
        ATTError(rawValue: 0x80 | (code & 0x1F))
    }

    public var isApplicationError: Bool { (0x80...0x9F).contains(rawValue) }

    public var description: String {
        let names: [UInt8: String] = [
            0x01: "Invalid Handle", 0x02: "Read Not Permitted", 0x03: "Write Not Permitted",
            0x04: "Invalid PDU", 0x05: "Insufficient Authentication", 0x06: "Request Not Supported",
            0x07: "Invalid Offset", 0x08: "Insufficient Authorization", 0x09: "Prepare Queue Full",
            0x0A: "Attribute Not Found", 0x0B: "Attribute Not Long", 0x0C: "Encryption Key Size Too Short",
            0x0D: "Invalid Attribute Value Length", 0x0E: "Unlikely Error", 0x0F: "Insufficient Encryption",
            0x10: "Unsupported Group Type", 0x11: "Insufficient Resources", 0x12: "Database Out Of Sync",
            0x13: "Value Not Allowed", 0xFC: "Write Request Rejected",
            0xFD: "Client Characteristic Configuration Descriptor Improperly Configured",
            0xFE: "Procedure Already in Progress", 0xFF: "Out of Range",
        ]
        if let name = names[rawValue] { return "\(name) (\(Hex.byte(rawValue)))" }
        if isApplicationError { return "Application Error (\(Hex.byte(rawValue)))" }
        return "Error \(Hex.byte(rawValue))"
    }
}

import BlemuCore
