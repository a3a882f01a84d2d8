import BlemuCore
import Testing
@testable import BlemuATT

// Exact byte strings built from the PDU formats of Vol 3, Part F, 3.4 (opcode first,
// multi-octet fields little-endian, 3.3). Each test decodes the bytes, checks every field,
// and re-encodes to the same bytes.

func bytes(_ hex: String) -> [UInt8] {
    guard let parsed = Hex.parse(hex) else {
        Issue.record("bad hex in test: \(hex)")
        return []
    }
    return parsed
}

/// Decodes `input` as `T`, expecting the decoder to throw a DecodeError of `kind`.
func expectDecodeError<T: ATTPDU>(_ type: T.Type, _ input: [UInt8], _ kind: DecodeError.Kind,
                                  sourceLocation: SourceLocation = #_sourceLocation) {
    do {
        let value = try T(pdu: input[...])
        Issue.record("decoded \(Hex.bytes(input, separator: " ")) as \(value), expected \(kind)",
                     sourceLocation: sourceLocation)
    } catch {
        #expect(error.kind == kind, "\(T.self) on \(Hex.bytes(input, separator: " "))", sourceLocation: sourceLocation)
    }
}

/// Decodes and re-encodes: the formats here are canonical, so the bytes must come back unchanged.
func decodeRoundTrip<T: ATTPDU>(_ type: T.Type, _ input: [UInt8],
                                sourceLocation: SourceLocation = #_sourceLocation) throws -> T {
    let value = try T(pdu: input[...])
    #expect(value.encoded == input, "\(T.self) round trip", sourceLocation: sourceLocation)
    // The same bytes inside a larger buffer (a slice with a non-zero start index) decode the same.
    let framed = [0xEE, 0xEE] + input + [0xEE]
    let again = try T(pdu: framed[2..<(2 + input.count)])
    #expect(again.encoded == input, "\(T.self) from an offset slice", sourceLocation: sourceLocation)
    return value
}

/// 6E400001-B5A3-F393-E0A9-E50E24DCCA9E, the least significant octet first (Vol 3, Part F, 3.2.1).
let uuid128Wire = bytes("9ECADC24 0EE5A9E0 93F3A3B5 0100406E")
let uuid128 = BluetoothUUID("6E400001-B5A3-F393-E0A9-E50E24DCCA9E")!

@Suite struct ATTErrorAndMTUPDUTests {
    // 3.4.1.1: opcode, Request Opcode In Error, Attribute Handle In Error, Error Code.
    @Test func errorResponse() throws {
        let pdu = try decodeRoundTrip(ATTErrorResponse.self, bytes("01 0A 0300 0A"))
        #expect(pdu.requestOpcode == 0x0A)
        #expect(pdu.handle == 0x0003)
        #expect(pdu.error == .attributeNotFound)
        #expect(ATTErrorResponse(requestOpcode: 0x12, handle: 0x1234, error: .application(0x00)).encoded
                == bytes("01 12 3412 80"))
        expectDecodeError(ATTErrorResponse.self, bytes("02 0A 0300 0A"), .unknownType)
        expectDecodeError(ATTErrorResponse.self, bytes("01 0A 0300"), .truncated)
        expectDecodeError(ATTErrorResponse.self, bytes("01 0A 0300 0A 00"), .trailingBytes)
    }

    // 3.4.2.1 / 3.4.2.2: one 2-octet Rx MTU each.
    @Test func exchangeMTU() throws {
        let request = try decodeRoundTrip(ATTExchangeMTURequest.self, bytes("02 F700"))
        #expect(request.clientRxMTU == 247)
        let response = try decodeRoundTrip(ATTExchangeMTUResponse.self, bytes("03 0502"))
        #expect(response.serverRxMTU == 517)
        #expect(ATTExchangeMTURequest(clientRxMTU: 23).encoded == bytes("02 1700"))
        #expect(ATTExchangeMTUResponse(serverRxMTU: 0x0100).encoded == bytes("03 0001"))
        expectDecodeError(ATTExchangeMTURequest.self, bytes("03 F700"), .unknownType)
        expectDecodeError(ATTExchangeMTURequest.self, bytes("02 F7"), .truncated)
        expectDecodeError(ATTExchangeMTURequest.self, bytes("02 F700 00"), .trailingBytes)
        expectDecodeError(ATTExchangeMTUResponse.self, bytes("02 0502"), .unknownType)
        expectDecodeError(ATTExchangeMTUResponse.self, bytes("03"), .truncated)
        expectDecodeError(ATTExchangeMTUResponse.self, bytes("03 0502 01"), .trailingBytes)
    }

    @Test func emptyInputIsTruncatedForEveryDecoder() {
        expectDecodeError(ATTErrorResponse.self, [], .truncated)
        expectDecodeError(ATTExchangeMTURequest.self, [], .truncated)
        expectDecodeError(ATTReadRequest.self, [], .truncated)
        expectDecodeError(ATTHandleValueConfirmation.self, [], .truncated)
        expectDecodeError(ATTWriteResponse.self, [], .truncated)
        expectDecodeError(ATTReadResponse.self, [], .truncated)
    }
}

@Suite struct ATTDiscoveryPDUTests {
    // 3.4.3.1: Starting Handle, Ending Handle.
    @Test func findInformationRequest() throws {
        let pdu = try decodeRoundTrip(ATTFindInformationRequest.self, bytes("04 0100 FFFF"))
        #expect(pdu.startHandle == 0x0001)
        #expect(pdu.endHandle == 0xFFFF)
        #expect(ATTFindInformationRequest(startHandle: 0x0010, endHandle: 0x0020).encoded == bytes("04 1000 2000"))
        expectDecodeError(ATTFindInformationRequest.self, bytes("05 0100 FFFF"), .unknownType)
        expectDecodeError(ATTFindInformationRequest.self, bytes("04 0100 FF"), .truncated)
        expectDecodeError(ATTFindInformationRequest.self, bytes("04 0100 FFFF 00"), .trailingBytes)
    }

    // 3.4.3.2: Format 0x01 = handle + 16-bit UUID pairs, 0x02 = handle + 128-bit UUID pairs.
    @Test func findInformationResponse() throws {
        let short = try decodeRoundTrip(ATTFindInformationResponse.self, bytes("05 01 0100 0028 0200 0328"))
        #expect(short.format == 0x01)
        #expect(short.pairs.map(\.handle) == [1, 2])
        #expect(short.pairs.map(\.type) == [BluetoothUUID(0x2800), BluetoothUUID(0x2803)])

        let long = try decodeRoundTrip(ATTFindInformationResponse.self, bytes("05 02 1900") + uuid128Wire)
        #expect(long.format == 0x02)
        #expect(long.pairs.count == 1)
        #expect(long.pairs.first?.handle == 0x0019)
        #expect(long.pairs.first?.type == uuid128)

        expectDecodeError(ATTFindInformationResponse.self, bytes("04 01 0100 0028"), .unknownType)
        expectDecodeError(ATTFindInformationResponse.self, bytes("05 03 0100 0028"), .invalidValue)
        expectDecodeError(ATTFindInformationResponse.self, bytes("05 01"), .lengthMismatch)
        expectDecodeError(ATTFindInformationResponse.self, bytes("05 01 0100 00"), .lengthMismatch)
        expectDecodeError(ATTFindInformationResponse.self, bytes("05 02 0100 0028"), .lengthMismatch)
        expectDecodeError(ATTFindInformationResponse.self, bytes("05"), .truncated)
    }

    // 3.4.3.3: Starting Handle, Ending Handle, 16-bit Attribute Type, Attribute Value (0 or more).
    @Test func findByTypeValueRequest() throws {
        let pdu = try decodeRoundTrip(ATTFindByTypeValueRequest.self, bytes("06 0100 FFFF 0028 0D18"))
        #expect(pdu.startHandle == 1)
        #expect(pdu.endHandle == 0xFFFF)
        #expect(pdu.attributeType == 0x2800)
        #expect(Array(pdu.value) == [0x0D, 0x18])
        let empty = try decodeRoundTrip(ATTFindByTypeValueRequest.self, bytes("06 0100 0500 0228"))
        #expect(empty.value.isEmpty)
        let built = ATTFindByTypeValueRequest(startHandle: 0x0017, endHandle: 0xFFFF, attributeType: 0x2800,
                                              value: uuid128Wire[...])
        #expect(built.encoded == bytes("06 1700 FFFF 0028") + uuid128Wire)
        expectDecodeError(ATTFindByTypeValueRequest.self, bytes("07 0100 FFFF 0028 0D18"), .unknownType)
        expectDecodeError(ATTFindByTypeValueRequest.self, bytes("06 0100 FFFF 00"), .truncated)
        expectDecodeError(ATTFindByTypeValueRequest.self, bytes("06 0100"), .truncated)
    }

    // 3.4.4.1: Starting Handle, Ending Handle, Attribute Type of 2 or 16 octets.
    @Test func readByTypeRequest() throws {
        let short = try decodeRoundTrip(ATTReadByTypeRequest.self, bytes("08 0100 FFFF 0328"))
        #expect(short.startHandle == 1)
        #expect(short.endHandle == 0xFFFF)
        #expect(short.attributeType == BluetoothUUID(0x2803))
        let long = try decodeRoundTrip(ATTReadByTypeRequest.self, bytes("08 0100 FFFF") + uuid128Wire)
        #expect(long.attributeType == uuid128)
        #expect(ATTReadByTypeRequest(startHandle: 5, endHandle: 9, attributeType: BluetoothUUID(0x2A00)).encoded
                == bytes("08 0500 0900 002A"))
        expectDecodeError(ATTReadByTypeRequest.self, bytes("10 0100 FFFF 0328"), .unknownType)
        expectDecodeError(ATTReadByTypeRequest.self, bytes("08 0100 FF"), .truncated)
        expectDecodeError(ATTReadByTypeRequest.self, bytes("08 0100 FFFF 032800"), .lengthMismatch)
        expectDecodeError(ATTReadByTypeRequest.self, bytes("08 0100 FFFF 03"), .lengthMismatch)
        expectDecodeError(ATTReadByTypeRequest.self, bytes("08 0100 FFFF"), .lengthMismatch)
        // A 32-bit UUID is not an ATT form (3.2.1), even though BluetoothUUID can decode it.
        expectDecodeError(ATTReadByTypeRequest.self, bytes("08 0100 FFFF 03280000"), .lengthMismatch)
        expectDecodeError(ATTReadByTypeRequest.self, bytes("08 0100 FFFF") + uuid128Wire + [0], .lengthMismatch)
    }

    @Test func readByTypeRequestWith128BitFormOfA16BitUUIDReEncodesShort() throws {
        // 00002803-0000-1000-8000-00805F9B34FB sent as 16 octets is the same UUID as 0x2803.
        let wire = bytes("FB349B5F 80000080 00100000 03280000")
        let pdu = try ATTReadByTypeRequest(pdu: (bytes("08 0100 FFFF") + wire)[...])
        #expect(pdu.attributeType == BluetoothUUID(0x2803))
        #expect(pdu.encoded == bytes("08 0100 FFFF 0328"))
    }

    // 3.4.4.9: same shape as Read By Type.
    @Test func readByGroupTypeRequest() throws {
        let pdu = try decodeRoundTrip(ATTReadByGroupTypeRequest.self, bytes("10 0100 FFFF 0028"))
        #expect(pdu.startHandle == 1)
        #expect(pdu.endHandle == 0xFFFF)
        #expect(pdu.groupType == BluetoothUUID(0x2800))
        let long = try decodeRoundTrip(ATTReadByGroupTypeRequest.self, bytes("10 0100 FFFF") + uuid128Wire)
        #expect(long.groupType == uuid128)
        #expect(ATTReadByGroupTypeRequest(startHandle: 0x17, endHandle: 0xFFFF, groupType: BluetoothUUID(0x2801)).encoded
                == bytes("10 1700 FFFF 0128"))
        expectDecodeError(ATTReadByGroupTypeRequest.self, bytes("08 0100 FFFF 0028"), .unknownType)
        expectDecodeError(ATTReadByGroupTypeRequest.self, bytes("10 01"), .truncated)
        expectDecodeError(ATTReadByGroupTypeRequest.self, bytes("10 0100 FFFF 002800"), .lengthMismatch)
        expectDecodeError(ATTReadByGroupTypeRequest.self, bytes("10 0100 FFFF 00"), .lengthMismatch)
    }

    // 3.4.4.2: Length, then handle-value pairs of exactly that length.
    @Test func readByTypeResponse() throws {
        let pdu = try decodeRoundTrip(ATTReadByTypeResponse.self,
                                      bytes("09 07 0200 02 0300 002A 0500 0A 0600 192A"))
        #expect(pdu.pairLength == 7)
        let pairs = pdu.pairs
        #expect(pairs.map(\.handle) == [2, 5])
        #expect(pairs.map { Array($0.value) } == [bytes("02 0300 002A"), bytes("0A 0600 192A")])
        let handleOnly = try decodeRoundTrip(ATTReadByTypeResponse.self, bytes("09 02 0300"))
        #expect(handleOnly.pairs.count == 1)
        #expect(handleOnly.pairs.first?.value.isEmpty == true)
        expectDecodeError(ATTReadByTypeResponse.self, bytes("08 07 0200 02 0300 002A"), .unknownType)
        expectDecodeError(ATTReadByTypeResponse.self, bytes("09"), .truncated)
        expectDecodeError(ATTReadByTypeResponse.self, bytes("09 07"), .lengthMismatch)
        expectDecodeError(ATTReadByTypeResponse.self, bytes("09 07 0200 02 0300 00"), .lengthMismatch)
        // A length below 2 cannot hold a handle (and 0 must not divide by zero).
        expectDecodeError(ATTReadByTypeResponse.self, bytes("09 00 0200"), .lengthMismatch)
        expectDecodeError(ATTReadByTypeResponse.self, bytes("09 01 02"), .lengthMismatch)
    }

    // 3.4.4.10: Length, then (handle, end group handle, value) of exactly that length.
    @Test func readByGroupTypeResponse() throws {
        let pdu = try decodeRoundTrip(ATTReadByGroupTypeResponse.self,
                                      bytes("11 06 0100 0300 0018 0700 1600 0D18"))
        #expect(pdu.entryLength == 6)
        let entries = pdu.entries
        #expect(entries.map(\.handle) == [1, 7])
        #expect(entries.map(\.endGroup) == [3, 0x16])
        #expect(entries.map { Array($0.value) } == [bytes("0018"), bytes("0D18")])
        let long = try decodeRoundTrip(ATTReadByGroupTypeResponse.self, bytes("11 14 1700 1B00") + uuid128Wire)
        #expect(long.entries.first.map { Array($0.value) } == uuid128Wire)
        expectDecodeError(ATTReadByGroupTypeResponse.self, bytes("09 06 0100 0300 0018"), .unknownType)
        expectDecodeError(ATTReadByGroupTypeResponse.self, bytes("11"), .truncated)
        expectDecodeError(ATTReadByGroupTypeResponse.self, bytes("11 06"), .lengthMismatch)
        expectDecodeError(ATTReadByGroupTypeResponse.self, bytes("11 06 0100 0300 00"), .lengthMismatch)
        expectDecodeError(ATTReadByGroupTypeResponse.self, bytes("11 00 0100"), .lengthMismatch)
        expectDecodeError(ATTReadByGroupTypeResponse.self, bytes("11 03 010003"), .lengthMismatch)
    }
}

@Suite struct ATTReadPDUTests {
    // 3.4.4.3: Attribute Handle.
    @Test func readRequest() throws {
        let pdu = try decodeRoundTrip(ATTReadRequest.self, bytes("0A 0300"))
        #expect(pdu.handle == 3)
        #expect(ATTReadRequest(handle: 0x1234).encoded == bytes("0A 3412"))
        expectDecodeError(ATTReadRequest.self, bytes("0C 0300"), .unknownType)
        expectDecodeError(ATTReadRequest.self, bytes("0A 03"), .truncated)
        expectDecodeError(ATTReadRequest.self, bytes("0A 0300 00"), .trailingBytes)
    }

    // 3.4.4.5: Attribute Handle, Value Offset.
    @Test func readBlobRequest() throws {
        let pdu = try decodeRoundTrip(ATTReadBlobRequest.self, bytes("0C 1900 1600"))
        #expect(pdu.handle == 0x19)
        #expect(pdu.offset == 22)
        #expect(ATTReadBlobRequest(handle: 1, offset: 0x0200).encoded == bytes("0C 0100 0002"))
        expectDecodeError(ATTReadBlobRequest.self, bytes("0A 1900 1600"), .unknownType)
        expectDecodeError(ATTReadBlobRequest.self, bytes("0C 1900 16"), .truncated)
        expectDecodeError(ATTReadBlobRequest.self, bytes("0C 1900 1600 00"), .trailingBytes)
    }

    // 3.4.4.7 / 3.4.4.11: a Set Of Handles, two or more.
    @Test func readMultipleRequest() throws {
        let pdu = try decodeRoundTrip(ATTReadMultipleRequest.self, bytes("0E 0300 0600 0A00"))
        #expect(pdu.handleCount == 3)
        #expect((0..<pdu.handleCount).map(pdu.handle(at:)) == [3, 6, 10])
        #expect(ATTReadMultipleRequest(handles: [0x0102, 0x0304]).encoded == bytes("0E 0201 0403"))
        expectDecodeError(ATTReadMultipleRequest.self, bytes("20 0300 0600"), .unknownType)
        expectDecodeError(ATTReadMultipleRequest.self, bytes("0E 0300"), .lengthMismatch)
        expectDecodeError(ATTReadMultipleRequest.self, bytes("0E 0300 06"), .lengthMismatch)
        expectDecodeError(ATTReadMultipleRequest.self, bytes("0E"), .lengthMismatch)
    }

    @Test func readMultipleVariableRequest() throws {
        let pdu = try decodeRoundTrip(ATTReadMultipleVariableRequest.self, bytes("20 0300 0600"))
        #expect(pdu.handleCount == 2)
        #expect((0..<pdu.handleCount).map(pdu.handle(at:)) == [3, 6])
        #expect(ATTReadMultipleVariableRequest(handles: [1, 2, 3]).encoded == bytes("20 0100 0200 0300"))
        expectDecodeError(ATTReadMultipleVariableRequest.self, bytes("0E 0300 0600"), .unknownType)
        expectDecodeError(ATTReadMultipleVariableRequest.self, bytes("20 0300"), .lengthMismatch)
        expectDecodeError(ATTReadMultipleVariableRequest.self, bytes("20 0300 0600 01"), .lengthMismatch)
    }

    // 3.4.4.4 / 3.4.4.6: the value (or part of it) alone, possibly empty.
    @Test func readAndReadBlobResponses() throws {
        let read = try decodeRoundTrip(ATTReadResponse.self, bytes("0B 626C656D75"))
        #expect(Array(read.value) == Array("blemu".utf8))
        let empty = try decodeRoundTrip(ATTReadBlobResponse.self, bytes("0D"))
        #expect(empty.value.isEmpty)
        let blob = try decodeRoundTrip(ATTReadBlobResponse.self, bytes("0D 0102"))
        #expect(Array(blob.value) == [1, 2])
        #expect(ATTReadResponse(value: [9][...]).encoded == [0x0B, 9])
        expectDecodeError(ATTReadResponse.self, bytes("0D 01"), .unknownType)
        expectDecodeError(ATTReadBlobResponse.self, bytes("0B 01"), .unknownType)
    }
}

@Suite struct ATTWritePDUTests {
    // 3.4.5.1: Attribute Handle, Attribute Value (0 or more octets).
    @Test func writeRequest() throws {
        let pdu = try decodeRoundTrip(ATTWriteRequest.self, bytes("12 0D00 0100"))
        #expect(pdu.handle == 0x0D)
        #expect(Array(pdu.value) == [0x01, 0x00])
        let empty = try decodeRoundTrip(ATTWriteRequest.self, bytes("12 0F00"))
        #expect(empty.value.isEmpty)
        #expect(ATTWriteRequest(handle: 0x0F, value: [0xAA][...]).encoded == bytes("12 0F00 AA"))
        expectDecodeError(ATTWriteRequest.self, bytes("52 0D00 0100"), .unknownType)
        expectDecodeError(ATTWriteRequest.self, bytes("12 0D"), .truncated)
    }

    // 3.4.5.3: same fields as the request, opcode 0x52 (Command Flag set).
    @Test func writeCommand() throws {
        let pdu = try decodeRoundTrip(ATTWriteCommand.self, bytes("52 0F00 AABB"))
        #expect(pdu.handle == 0x0F)
        #expect(Array(pdu.value) == [0xAA, 0xBB])
        #expect(ATTWriteCommand(handle: 1, value: [][...]).encoded == bytes("52 0100"))
        expectDecodeError(ATTWriteCommand.self, bytes("12 0F00 AABB"), .unknownType)
        expectDecodeError(ATTWriteCommand.self, bytes("52"), .truncated)
    }

    // 3.4.5.4: Attribute Handle, Attribute Value, then a 12-octet Authentication Signature.
    @Test func signedWriteCommand() throws {
        let signature = bytes("000102030405060708090A0B")
        let pdu = try decodeRoundTrip(ATTSignedWriteCommand.self, bytes("D2 0F00 AABB") + signature)
        #expect(pdu.handle == 0x0F)
        #expect(Array(pdu.value) == [0xAA, 0xBB])
        #expect(Array(pdu.signature) == signature)
        let noValue = try decodeRoundTrip(ATTSignedWriteCommand.self, bytes("D2 0F00") + signature)
        #expect(noValue.value.isEmpty)
        expectDecodeError(ATTSignedWriteCommand.self, bytes("52 0F00") + signature, .unknownType)
        expectDecodeError(ATTSignedWriteCommand.self, bytes("D2 0F00") + signature.dropLast(), .truncated)
        expectDecodeError(ATTSignedWriteCommand.self, bytes("D2 0F"), .truncated)
    }

    // 3.4.6.1: Attribute Handle, Value Offset, Part Attribute Value.
    @Test func prepareWriteRequest() throws {
        let pdu = try decodeRoundTrip(ATTPrepareWriteRequest.self, bytes("16 0F00 1200 010203"))
        #expect(pdu.handle == 0x0F)
        #expect(pdu.offset == 18)
        #expect(Array(pdu.value) == [1, 2, 3])
        let empty = try decodeRoundTrip(ATTPrepareWriteRequest.self, bytes("16 0F00 0000"))
        #expect(empty.value.isEmpty)
        #expect(ATTPrepareWriteRequest(handle: 2, offset: 0x0100, value: [7][...]).encoded == bytes("16 0200 0001 07"))
        expectDecodeError(ATTPrepareWriteRequest.self, bytes("17 0F00 1200 01"), .unknownType)
        expectDecodeError(ATTPrepareWriteRequest.self, bytes("16 0F00 12"), .truncated)
    }

    // 3.4.6.3: Flags 0x00 cancel, 0x01 write; other values reserved.
    @Test func executeWriteRequest() throws {
        let write = try decodeRoundTrip(ATTExecuteWriteRequest.self, bytes("18 01"))
        #expect(write.flags == .write)
        let cancel = try decodeRoundTrip(ATTExecuteWriteRequest.self, bytes("18 00"))
        #expect(cancel.flags == .cancel)
        #expect(ATTExecuteWriteRequest(flags: .write).encoded == bytes("18 01"))
        expectDecodeError(ATTExecuteWriteRequest.self, bytes("18 02"), .invalidValue)
        expectDecodeError(ATTExecuteWriteRequest.self, bytes("18 FF"), .invalidValue)
        expectDecodeError(ATTExecuteWriteRequest.self, bytes("19 01"), .unknownType)
        expectDecodeError(ATTExecuteWriteRequest.self, bytes("18"), .truncated)
        expectDecodeError(ATTExecuteWriteRequest.self, bytes("18 01 00"), .trailingBytes)
    }

    // 3.4.5.2 / 3.4.6.4: opcode only.
    @Test func writeResponse() throws {
        _ = try decodeRoundTrip(ATTWriteResponse.self, bytes("13"))
        #expect(ATTWriteResponse().encoded == [0x13])
        expectDecodeError(ATTWriteResponse.self, bytes("19"), .unknownType)
        expectDecodeError(ATTWriteResponse.self, bytes("13 00"), .trailingBytes)
    }
}

@Suite struct ATTServerInitiatedPDUTests {
    // 3.4.7.1 / 3.4.7.2: Attribute Handle, Attribute Value.
    @Test func notificationAndIndication() throws {
        let notification = try decodeRoundTrip(ATTHandleValueNotification.self, bytes("1B 0C00 0048"))
        #expect(notification.handle == 0x0C)
        #expect(Array(notification.value) == [0x00, 0x48])
        let indication = try decodeRoundTrip(ATTHandleValueIndication.self, bytes("1D 0C00"))
        #expect(indication.handle == 0x0C)
        #expect(indication.value.isEmpty)
        #expect(ATTHandleValueNotification(handle: 0x13, value: [1][...]).encoded == bytes("1B 1300 01"))
        #expect(ATTHandleValueIndication(handle: 0x13, value: [1][...]).encoded == bytes("1D 1300 01"))
        expectDecodeError(ATTHandleValueNotification.self, bytes("1D 0C00 00"), .unknownType)
        expectDecodeError(ATTHandleValueIndication.self, bytes("1B 0C00 00"), .unknownType)
        expectDecodeError(ATTHandleValueNotification.self, bytes("1B 0C"), .truncated)
        expectDecodeError(ATTHandleValueIndication.self, bytes("1D"), .truncated)
    }

    // 3.4.7.3: opcode only.
    @Test func confirmation() throws {
        _ = try decodeRoundTrip(ATTHandleValueConfirmation.self, bytes("1E"))
        #expect(ATTHandleValueConfirmation().encoded == [0x1E])
        expectDecodeError(ATTHandleValueConfirmation.self, bytes("1E 00"), .trailingBytes)
        expectDecodeError(ATTHandleValueConfirmation.self, bytes("1D"), .unknownType)
    }
}
