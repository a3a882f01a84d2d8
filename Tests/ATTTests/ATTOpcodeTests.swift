import BlemuCore
import Testing
@testable import BlemuATT

@Suite struct ATTOpcodeTests {
    /// Vol 3, Part F, 3.4.8, Table 3.37.
    @Test func rawValuesMatchTheSpecTable() {
        let expected: [(ATTOpcode, UInt8)] = [
            (.errorResponse, 0x01), (.exchangeMTURequest, 0x02), (.exchangeMTUResponse, 0x03),
            (.findInformationRequest, 0x04), (.findInformationResponse, 0x05),
            (.findByTypeValueRequest, 0x06), (.findByTypeValueResponse, 0x07),
            (.readByTypeRequest, 0x08), (.readByTypeResponse, 0x09), (.readRequest, 0x0A), (.readResponse, 0x0B),
            (.readBlobRequest, 0x0C), (.readBlobResponse, 0x0D), (.readMultipleRequest, 0x0E),
            (.readMultipleResponse, 0x0F), (.readByGroupTypeRequest, 0x10), (.readByGroupTypeResponse, 0x11),
            (.writeRequest, 0x12), (.writeResponse, 0x13), (.prepareWriteRequest, 0x16),
            (.prepareWriteResponse, 0x17), (.executeWriteRequest, 0x18), (.executeWriteResponse, 0x19),
            (.readMultipleVariableRequest, 0x20), (.readMultipleVariableResponse, 0x21),
            (.multipleHandleValueNotification, 0x23), (.handleValueNotification, 0x1B),
            (.handleValueIndication, 0x1D), (.handleValueConfirmation, 0x1E),
            (.writeCommand, 0x52), (.signedWriteCommand, 0xD2),
        ]
        #expect(expected.count == ATTOpcode.allCases.count)
        for (opcode, raw) in expected {
            #expect(opcode.rawValue == raw, "\(opcode)")
        }
    }

    /// 3.3.1: bit 6 is the Command Flag.
    @Test func commandFlag() {
        #expect(ATTOpcode.isCommand(0x52))
        #expect(ATTOpcode.isCommand(0xD2))
        #expect(ATTOpcode.isCommand(0x7F))
        #expect(ATTOpcode.isCommand(0x40))
        #expect(!ATTOpcode.isCommand(0x12))
        #expect(!ATTOpcode.isCommand(0x3F))
        #expect(!ATTOpcode.isCommand(0x80))
        for raw in UInt8.min...UInt8.max {
            #expect(ATTOpcode.isCommand(raw) == (raw & 0x40 != 0))
        }
        // The only defined commands are Write Command and Signed Write Command.
        for opcode in ATTOpcode.allCases {
            #expect(ATTOpcode.isCommand(opcode.rawValue) == (opcode == .writeCommand || opcode == .signedWriteCommand),
                    "\(opcode)")
        }
    }

    /// Requests are what a server must answer; responses, notifications, indications,
    /// confirmations and commands are not.
    @Test func requestForm() {
        let requests: [ATTOpcode] = [.exchangeMTURequest, .findInformationRequest, .findByTypeValueRequest,
                                     .readByTypeRequest, .readRequest, .readBlobRequest, .readMultipleRequest,
                                     .readByGroupTypeRequest, .writeRequest, .prepareWriteRequest,
                                     .executeWriteRequest, .readMultipleVariableRequest]
        for opcode in ATTOpcode.allCases {
            #expect(ATTOpcode.isRequestForm(opcode.rawValue) == requests.contains(opcode), "\(opcode)")
        }
        // Undefined opcodes without the Command Flag are unknown requests (3.4.1.1: Request Not Supported).
        for raw: UInt8 in [0x00, 0x14, 0x15, 0x1A, 0x1C, 0x1F, 0x22, 0x3F, 0x80, 0xBF] {
            #expect(ATTOpcode.isRequestForm(raw), "\(Hex.byte(raw))")
        }
        // Anything with the Command Flag is never a request.
        for raw in UInt8.min...UInt8.max where raw & 0x40 != 0 {
            #expect(!ATTOpcode.isRequestForm(raw), "\(Hex.byte(raw))")
        }
    }
}

@Suite struct ATTErrorTests {
    /// Vol 3, Part F, 3.4.1.1, Table 3.4, and the Supplement's common profile error codes.
    @Test func codesMatchTheSpec() {
        let expected: [(ATTError, UInt8)] = [
            (.invalidHandle, 0x01), (.readNotPermitted, 0x02), (.writeNotPermitted, 0x03), (.invalidPDU, 0x04),
            (.insufficientAuthentication, 0x05), (.requestNotSupported, 0x06), (.invalidOffset, 0x07),
            (.insufficientAuthorization, 0x08), (.prepareQueueFull, 0x09), (.attributeNotFound, 0x0A),
            (.attributeNotLong, 0x0B), (.encryptionKeySizeTooShort, 0x0C), (.invalidAttributeValueLength, 0x0D),
            (.unlikelyError, 0x0E), (.insufficientEncryption, 0x0F), (.unsupportedGroupType, 0x10),
            (.insufficientResources, 0x11), (.databaseOutOfSync, 0x12), (.valueNotAllowed, 0x13),
            (.writeRequestRejected, 0xFC), (.cccdImproperlyConfigured, 0xFD), (.procedureAlreadyInProgress, 0xFE),
            (.outOfRange, 0xFF),
        ]
        for (error, raw) in expected {
            #expect(error.rawValue == raw)
            #expect(ATTError(rawValue: raw) == error)
            #expect(!error.isApplicationError)
        }
    }

    @Test func descriptionsNameTheErrorAndItsCode() {
        #expect(ATTError.invalidHandle.description == "Invalid Handle (0x01)")
        #expect(ATTError.attributeNotLong.description == "Attribute Not Long (0x0b)")
        #expect(ATTError.invalidAttributeValueLength.description == "Invalid Attribute Value Length (0x0d)")
        #expect(ATTError.cccdImproperlyConfigured.description
                == "Client Characteristic Configuration Descriptor Improperly Configured (0xfd)")
        #expect(ATTError.outOfRange.description == "Out of Range (0xff)")
        #expect(ATTError(rawValue: 0x80).description == "Application Error (0x80)")
        #expect(ATTError(rawValue: 0x9F).description == "Application Error (0x9f)")
        #expect(ATTError(rawValue: 0xA0).description == "Error 0xa0")
        #expect(ATTError(rawValue: 0x00).description == "Error 0x00")
        #expect(ATTError(rawValue: 0x14).description == "Error 0x14")
        // Every code has a description that carries its hex value.
        for raw in UInt8.min...UInt8.max {
            #expect(ATTError(rawValue: raw).description.contains(Hex.byte(raw)))
        }
    }

    /// 3.4.1.1: 0x80–0x9F are Application Errors, defined by a higher layer.
    @Test func applicationErrorRange() {
        for raw in UInt8.min...UInt8.max {
            #expect(ATTError(rawValue: raw).isApplicationError == (0x80...0x9F).contains(raw), "\(Hex.byte(raw))")
            let application = ATTError.application(raw)
            #expect(application.isApplicationError, "application(\(raw)) = \(application)")
        }
        #expect(ATTError.application(0x00).rawValue == 0x80)
        #expect(ATTError.application(0x05).rawValue == 0x85)
        #expect(ATTError.application(0x1F).rawValue == 0x9F)
    }
}
