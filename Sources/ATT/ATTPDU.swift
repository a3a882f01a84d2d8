import BlemuCore

/// One Swift value per ATT PDU (Vol 3, Part F, 3.4), each with a total decoder
/// `init(pdu:)` — the whole PDU, opcode first — and an encoder `encode(into:)`.
/// Decoders check the opcode and the exact length rules of their section and throw
/// `DecodeError` for anything else; variable parts are slices of the input (no copy).
public protocol ATTPDU {
    static var opcode: ATTOpcode { get }
    init(pdu: ArraySlice<UInt8>) throws(DecodeError)
    func encode(into out: inout [UInt8])
}

extension ATTPDU {
    /// A new array holding the encoded PDU (tests and clients; hot paths encode into a reused buffer).
    public var encoded: [UInt8] {
        var out: [UInt8] = []
        encode(into: &out)
        return out
    }

    @inlinable static func reader(_ pdu: ArraySlice<UInt8>) throws(DecodeError) -> ByteReader {
        var reader = ByteReader(pdu)
        let raw = try reader.u8()
        guard raw == opcode.rawValue else { throw DecodeError(.unknownType, "expected \(opcode), got \(Hex.byte(raw))") }
        return reader
    }
}

/// A UUID field of a request: ATT carries only the 2- or 16-byte forms (Vol 3, Part F, 3.2.1).
@inlinable func decodeATTUUID(_ bytes: ArraySlice<UInt8>) throws(DecodeError) -> BluetoothUUID {
    guard bytes.count == 2 || bytes.count == 16 else {
        throw DecodeError(.lengthMismatch, "ATT UUID must be 2 or 16 bytes, got \(bytes.count)")
    }
    return try BluetoothUUID(littleEndian: bytes)
}

// MARK: Error and MTU

/// Vol 3, Part F, 3.4.1.1.
public struct ATTErrorResponse: ATTPDU, Equatable {
    public static let opcode = ATTOpcode.errorResponse
    public var requestOpcode: UInt8
    public var handle: UInt16
    public var error: ATTError
    public init(requestOpcode: UInt8, handle: UInt16, error: ATTError) {
        self.requestOpcode = requestOpcode
        self.handle = handle
        self.error = error
    }
    public init(pdu: ArraySlice<UInt8>) throws(DecodeError) {
        var r = try Self.reader(pdu)
        requestOpcode = try r.u8()
        handle = try r.u16()
        error = ATTError(rawValue: try r.u8())
        try r.expectEnd("Error Response")
    }
    public func encode(into out: inout [UInt8]) {
        out.append(Self.opcode.rawValue)
        out.append(requestOpcode)
        out.appendLE(handle)
        out.append(error.rawValue)
    }
}

/// Vol 3, Part F, 3.4.2.1.
public struct ATTExchangeMTURequest: ATTPDU, Equatable {
    public static let opcode = ATTOpcode.exchangeMTURequest
    public var clientRxMTU: UInt16
    public init(clientRxMTU: UInt16) { self.clientRxMTU = clientRxMTU }
    public init(pdu: ArraySlice<UInt8>) throws(DecodeError) {
        var r = try Self.reader(pdu)
        clientRxMTU = try r.u16()
        try r.expectEnd("Exchange MTU Request")
    }
    public func encode(into out: inout [UInt8]) {
        out.append(Self.opcode.rawValue)
        out.appendLE(clientRxMTU)
    }
}

/// Vol 3, Part F, 3.4.2.2.
public struct ATTExchangeMTUResponse: ATTPDU, Equatable {
    public static let opcode = ATTOpcode.exchangeMTUResponse
    public var serverRxMTU: UInt16
    public init(serverRxMTU: UInt16) { self.serverRxMTU = serverRxMTU }
    public init(pdu: ArraySlice<UInt8>) throws(DecodeError) {
        var r = try Self.reader(pdu)
        serverRxMTU = try r.u16()
        try r.expectEnd("Exchange MTU Response")
    }
    public func encode(into out: inout [UInt8]) {
        out.append(Self.opcode.rawValue)
        out.appendLE(serverRxMTU)
    }
}

// MARK: Discovery requests

/// A request over a handle range: Find Information (3.4.3.1).
public struct ATTFindInformationRequest: ATTPDU, Equatable {
    public static let opcode = ATTOpcode.findInformationRequest
    public var startHandle: UInt16
    public var endHandle: UInt16
    public init(startHandle: UInt16, endHandle: UInt16) {
        self.startHandle = startHandle
        self.endHandle = endHandle
    }
    public init(pdu: ArraySlice<UInt8>) throws(DecodeError) {
        var r = try Self.reader(pdu)
        startHandle = try r.u16()
        endHandle = try r.u16()
        try r.expectEnd("Find Information Request")
    }
    public func encode(into out: inout [UInt8]) {
        out.append(Self.opcode.rawValue)
        out.appendLE(startHandle)
        out.appendLE(endHandle)
    }
}

/// Vol 3, Part F, 3.4.3.3: the attribute type is always a 16-bit UUID here.
public struct ATTFindByTypeValueRequest: ATTPDU, Equatable {
    public static let opcode = ATTOpcode.findByTypeValueRequest
    public var startHandle: UInt16
    public var endHandle: UInt16
    public var attributeType: UInt16
    public var value: ArraySlice<UInt8>
    public init(startHandle: UInt16, endHandle: UInt16, attributeType: UInt16, value: ArraySlice<UInt8>) {
        self.startHandle = startHandle
        self.endHandle = endHandle
        self.attributeType = attributeType
        self.value = value
    }
    public init(pdu: ArraySlice<UInt8>) throws(DecodeError) {
        var r = try Self.reader(pdu)
        startHandle = try r.u16()
        endHandle = try r.u16()
        attributeType = try r.u16()
        value = r.rest()
    }
    public func encode(into out: inout [UInt8]) {
        out.append(Self.opcode.rawValue)
        out.appendLE(startHandle)
        out.appendLE(endHandle)
        out.appendLE(attributeType)
        out.append(contentsOf: value)
    }
}

// MARK: Reads

/// Vol 3, Part F, 3.4.4.3.
public struct ATTReadRequest: ATTPDU, Equatable {
    public static let opcode = ATTOpcode.readRequest
    public var handle: UInt16
    public init(handle: UInt16) { self.handle = handle }
    public init(pdu: ArraySlice<UInt8>) throws(DecodeError) {
        var r = try Self.reader(pdu)
        handle = try r.u16()
        try r.expectEnd("Read Request")
    }
    public func encode(into out: inout [UInt8]) {
        out.append(Self.opcode.rawValue)
        out.appendLE(handle)
    }
}

/// Vol 3, Part F, 3.4.4.5.
public struct ATTReadBlobRequest: ATTPDU, Equatable {
    public static let opcode = ATTOpcode.readBlobRequest
    public var handle: UInt16
    public var offset: UInt16
    public init(handle: UInt16, offset: UInt16) {
        self.handle = handle
        self.offset = offset
    }
    public init(pdu: ArraySlice<UInt8>) throws(DecodeError) {
        var r = try Self.reader(pdu)
        handle = try r.u16()
        offset = try r.u16()
        try r.expectEnd("Read Blob Request")
    }
    public func encode(into out: inout [UInt8]) {
        out.append(Self.opcode.rawValue)
        out.appendLE(handle)
        out.appendLE(offset)
    }
}

// MARK: Writes

/// Vol 3, Part F, 3.4.5.4: handle, value, then a 12-octet authentication signature.
public struct ATTSignedWriteCommand: ATTPDU, Equatable {
    public static let opcode = ATTOpcode.signedWriteCommand
    public var handle: UInt16
    public var value: ArraySlice<UInt8>
    public var signature: ArraySlice<UInt8>
    public init(pdu: ArraySlice<UInt8>) throws(DecodeError) {
        var r = try Self.reader(pdu)
        handle = try r.u16()
        guard r.remaining >= 12 else { throw DecodeError(.truncated, "Signed Write Command without signature") }
        value = try r.bytes(r.remaining - 12)
        signature = r.rest()
    }
    public func encode(into out: inout [UInt8]) {
        out.append(Self.opcode.rawValue)
        out.appendLE(handle)
        out.append(contentsOf: value)
        out.append(contentsOf: signature)
    }
}

/// Prepare Write Request (3.4.6.1) and its response (3.4.6.2), which echoes it.
public struct ATTPrepareWritePDU<Tag: ATTOpcodeTag>: ATTPDU, Equatable {
    public static var opcode: ATTOpcode { Tag.opcode }
    public var handle: UInt16
    public var offset: UInt16
    public var value: ArraySlice<UInt8>
    public init(handle: UInt16, offset: UInt16, value: ArraySlice<UInt8>) {
        self.handle = handle
        self.offset = offset
        self.value = value
    }
    public init(pdu: ArraySlice<UInt8>) throws(DecodeError) {
        var r = try Self.reader(pdu)
        handle = try r.u16()
        offset = try r.u16()
        value = r.rest()
    }
    public func encode(into out: inout [UInt8]) {
        out.append(Self.opcode.rawValue)
        out.appendLE(handle)
        out.appendLE(offset)
        out.append(contentsOf: value)
    }
}

/// Vol 3, Part F, 3.4.6.3: flags 0x00 cancel all prepared writes, 0x01 write them all.
public struct ATTExecuteWriteRequest: ATTPDU, Equatable {
    public static let opcode = ATTOpcode.executeWriteRequest
    public enum Flags: UInt8, Sendable { case cancel = 0x00, write = 0x01 }
    public var flags: Flags
    public init(flags: Flags) { self.flags = flags }
    public init(pdu: ArraySlice<UInt8>) throws(DecodeError) {
        var r = try Self.reader(pdu)
        let raw = try r.u8()
        try r.expectEnd("Execute Write Request")
        guard let flags = Flags(rawValue: raw) else { throw DecodeError(.invalidValue, "Execute Write flags \(Hex.byte(raw))") }
        self.flags = flags
    }
    public func encode(into out: inout [UInt8]) {
        out.append(Self.opcode.rawValue)
        out.append(flags.rawValue)
    }
}

// MARK: Responses a client decodes

/// Vol 3, Part F, 3.4.3.4: one or more (found attribute handle, group end handle) pairs.
public struct ATTFindByTypeValueResponse: ATTPDU, Equatable {
    public static let opcode = ATTOpcode.findByTypeValueResponse
    public var data: ArraySlice<UInt8>
    public init(pdu: ArraySlice<UInt8>) throws(DecodeError) {
        var r = try Self.reader(pdu)
        data = r.rest()
        guard !data.isEmpty, data.count % 4 == 0 else {
            throw DecodeError(.lengthMismatch, "Find By Type Value Response data \(data.count)")
        }
    }
    public var ranges: [(handle: UInt16, groupEnd: UInt16)] {
        stride(from: data.startIndex, to: data.endIndex, by: 4).map { base in
            (UInt16(data[base]) | UInt16(data[base + 1]) << 8, UInt16(data[base + 2]) | UInt16(data[base + 3]) << 8)
        }
    }
    public func encode(into out: inout [UInt8]) {
        out.append(Self.opcode.rawValue)
        out.append(contentsOf: data)
    }
}

/// Vol 3, Part F, 3.4.4.2: Length, then handle-value pairs of that length.
public struct ATTReadByTypeResponse: ATTPDU, Equatable {
    public static let opcode = ATTOpcode.readByTypeResponse
    public var pairLength: UInt8
    public var data: ArraySlice<UInt8>
    public init(pdu: ArraySlice<UInt8>) throws(DecodeError) {
        var r = try Self.reader(pdu)
        pairLength = try r.u8()
        data = r.rest()
        guard pairLength >= 2, !data.isEmpty, data.count % Int(pairLength) == 0 else {
            throw DecodeError(.lengthMismatch, "Read By Type Response length \(pairLength), data \(data.count)")
        }
    }
    public var pairs: [(handle: UInt16, value: ArraySlice<UInt8>)] {
        var out: [(handle: UInt16, value: ArraySlice<UInt8>)] = []
        var r = ByteReader(data)
        while r.remaining >= Int(pairLength), let handle = try? r.u16(), let value = try? r.bytes(Int(pairLength) - 2) {
            out.append((handle, value))
        }
        return out
    }
    public func encode(into out: inout [UInt8]) {
        out.append(Self.opcode.rawValue)
        out.append(pairLength)
        out.append(contentsOf: data)
    }
}

/// Vol 3, Part F, 3.4.4.10: Length, then (handle, end group handle, value) of that length.
public struct ATTReadByGroupTypeResponse: ATTPDU, Equatable {
    public static let opcode = ATTOpcode.readByGroupTypeResponse
    public var entryLength: UInt8
    public var data: ArraySlice<UInt8>
    public init(pdu: ArraySlice<UInt8>) throws(DecodeError) {
        var r = try Self.reader(pdu)
        entryLength = try r.u8()
        data = r.rest()
        guard entryLength >= 4, !data.isEmpty, data.count % Int(entryLength) == 0 else {
            throw DecodeError(.lengthMismatch, "Read By Group Type Response length \(entryLength), data \(data.count)")
        }
    }
    public var entries: [(handle: UInt16, endGroup: UInt16, value: ArraySlice<UInt8>)] {
        var out: [(handle: UInt16, endGroup: UInt16, value: ArraySlice<UInt8>)] = []
        var r = ByteReader(data)
        while r.remaining >= Int(entryLength), let handle = try? r.u16(), let end = try? r.u16(),
              let value = try? r.bytes(Int(entryLength) - 4) {
            out.append((handle, end, value))
        }
        return out
    }
    public func encode(into out: inout [UInt8]) {
        out.append(Self.opcode.rawValue)
        out.append(entryLength)
        out.append(contentsOf: data)
    }
}

/// Vol 3, Part F, 3.4.3.2: format 0x01 (16-bit UUIDs) or 0x02 (128-bit), then handle-UUID pairs.
public struct ATTFindInformationResponse: ATTPDU, Equatable {
    public static let opcode = ATTOpcode.findInformationResponse
    public var format: UInt8
    public var data: ArraySlice<UInt8>
    public init(pdu: ArraySlice<UInt8>) throws(DecodeError) {
        var r = try Self.reader(pdu)
        format = try r.u8()
        data = r.rest()
        let size: Int
        switch format {
        case 0x01: size = 4
        case 0x02: size = 18
        default: throw DecodeError(.invalidValue, "Find Information format \(Hex.byte(format))")
        }
        guard !data.isEmpty, data.count % size == 0 else { throw DecodeError(.lengthMismatch, "Find Information data") }
    }
    public var pairs: [(handle: UInt16, type: BluetoothUUID)] {
        let size = format == 0x01 ? 4 : 18
        return stride(from: data.startIndex, to: data.endIndex, by: size).compactMap { base in
            guard let uuid = try? BluetoothUUID(littleEndian: data[(base + 2)..<(base + size)]) else { return nil }
            return (UInt16(data[base]) | UInt16(data[base + 1]) << 8, uuid)
        }
    }
    public func encode(into out: inout [UInt8]) {
        out.append(Self.opcode.rawValue)
        out.append(format)
        out.append(contentsOf: data)
    }
}

// MARK: Shapes shared by several PDUs

/// Ties a shared PDU shape to one opcode.
public protocol ATTOpcodeTag: Sendable {
    static var opcode: ATTOpcode { get }
}

/// A PDU that is a handle and a value: Write Request (3.4.5.1), Write Command (3.4.5.3),
/// Handle Value Notification (3.4.7.1) and Indication (3.4.7.2).
public struct ATTHandleValuePDU<Tag: ATTOpcodeTag>: ATTPDU, Equatable {
    public static var opcode: ATTOpcode { Tag.opcode }
    public var handle: UInt16
    public var value: ArraySlice<UInt8>
    public init(handle: UInt16, value: ArraySlice<UInt8>) {
        self.handle = handle
        self.value = value
    }
    public init(pdu: ArraySlice<UInt8>) throws(DecodeError) {
        var r = try Self.reader(pdu)
        handle = try r.u16()
        value = r.rest()
    }
    public func encode(into out: inout [UInt8]) {
        out.append(Self.opcode.rawValue)
        out.appendLE(handle)
        out.append(contentsOf: value)
    }
}

/// A handle range and a 2- or 16-byte UUID: Read By Type (3.4.4.1) and Read By Group Type
/// (3.4.4.9). Any other UUID length is an Invalid PDU.
public struct ATTRangeTypePDU<Tag: ATTOpcodeTag>: ATTPDU, Equatable {
    public static var opcode: ATTOpcode { Tag.opcode }
    public var startHandle: UInt16
    public var endHandle: UInt16
    public var attributeType: BluetoothUUID
    public init(startHandle: UInt16, endHandle: UInt16, attributeType: BluetoothUUID) {
        self.startHandle = startHandle
        self.endHandle = endHandle
        self.attributeType = attributeType
    }
    public init(pdu: ArraySlice<UInt8>) throws(DecodeError) {
        var r = try Self.reader(pdu)
        startHandle = try r.u16()
        endHandle = try r.u16()
        attributeType = try decodeATTUUID(r.rest())
    }
    public func encode(into out: inout [UInt8]) {
        out.append(Self.opcode.rawValue)
        out.appendLE(startHandle)
        out.appendLE(endHandle)
        attributeType.appendATT(to: &out)
    }
}

/// Two or more handles: Read Multiple (3.4.4.7) and Read Multiple Variable (3.4.4.11).
public struct ATTHandleListPDU<Tag: ATTOpcodeTag>: ATTPDU, Equatable {
    public static var opcode: ATTOpcode { Tag.opcode }
    public var handles: ArraySlice<UInt8>
    public init(handles: [UInt16]) {
        var raw: [UInt8] = []
        for h in handles { raw.appendLE(h) }
        self.handles = raw[...]
    }
    public init(pdu: ArraySlice<UInt8>) throws(DecodeError) {
        var r = try Self.reader(pdu)
        handles = r.rest()
        guard handles.count >= 4, handles.count % 2 == 0 else {
            throw DecodeError(.lengthMismatch, "\(Self.opcode) needs two or more handles")
        }
    }
    /// Handles decoded already (by the other PDU of this shape).
    public init(checkedHandles: ArraySlice<UInt8>) { handles = checkedHandles }
    public var handleCount: Int { handles.count / 2 }
    public func handle(at index: Int) -> UInt16 {
        let base = handles.startIndex + 2 * index
        return UInt16(handles[base]) | UInt16(handles[base + 1]) << 8
    }
    public func encode(into out: inout [UInt8]) {
        out.append(Self.opcode.rawValue)
        out.append(contentsOf: handles)
    }
}

/// A value alone: Read (3.4.4.4) and Read Blob (3.4.4.6) responses.
public struct ATTValuePDU<Tag: ATTOpcodeTag>: ATTPDU, Equatable {
    public static var opcode: ATTOpcode { Tag.opcode }
    public var value: ArraySlice<UInt8>
    public init(value: ArraySlice<UInt8>) { self.value = value }
    public init(pdu: ArraySlice<UInt8>) throws(DecodeError) {
        var r = try Self.reader(pdu)
        value = r.rest()
    }
    public func encode(into out: inout [UInt8]) {
        out.append(Self.opcode.rawValue)
        out.append(contentsOf: value)
    }
}

/// The opcode alone: Write Response (3.4.5.2), Handle Value Confirmation (3.4.7.3).
public struct ATTOpcodeOnlyPDU<Tag: ATTOpcodeTag>: ATTPDU, Equatable {
    public static var opcode: ATTOpcode { Tag.opcode }
    public init() {}
    public init(pdu: ArraySlice<UInt8>) throws(DecodeError) {
        try Self.reader(pdu).expectEnd("\(Self.opcode)")
    }
    public func encode(into out: inout [UInt8]) { out.append(Self.opcode.rawValue) }
}

public enum ATTWriteRequestTag: ATTOpcodeTag { public static let opcode = ATTOpcode.writeRequest }
public enum ATTWriteCommandTag: ATTOpcodeTag { public static let opcode = ATTOpcode.writeCommand }
public enum ATTNotificationTag: ATTOpcodeTag { public static let opcode = ATTOpcode.handleValueNotification }
public enum ATTIndicationTag: ATTOpcodeTag { public static let opcode = ATTOpcode.handleValueIndication }
public enum ATTReadByTypeTag: ATTOpcodeTag { public static let opcode = ATTOpcode.readByTypeRequest }
public enum ATTReadByGroupTypeTag: ATTOpcodeTag { public static let opcode = ATTOpcode.readByGroupTypeRequest }
public enum ATTReadMultipleTag: ATTOpcodeTag { public static let opcode = ATTOpcode.readMultipleRequest }
public enum ATTReadMultipleVariableTag: ATTOpcodeTag { public static let opcode = ATTOpcode.readMultipleVariableRequest }
public enum ATTReadResponseTag: ATTOpcodeTag { public static let opcode = ATTOpcode.readResponse }
public enum ATTReadBlobResponseTag: ATTOpcodeTag { public static let opcode = ATTOpcode.readBlobResponse }
public enum ATTWriteResponseTag: ATTOpcodeTag { public static let opcode = ATTOpcode.writeResponse }
public enum ATTConfirmationTag: ATTOpcodeTag { public static let opcode = ATTOpcode.handleValueConfirmation }
public enum ATTPrepareWriteRequestTag: ATTOpcodeTag { public static let opcode = ATTOpcode.prepareWriteRequest }
public enum ATTPrepareWriteResponseTag: ATTOpcodeTag { public static let opcode = ATTOpcode.prepareWriteResponse }
public enum ATTExecuteWriteResponseTag: ATTOpcodeTag { public static let opcode = ATTOpcode.executeWriteResponse }
public enum ATTReadMultipleResponseTag: ATTOpcodeTag { public static let opcode = ATTOpcode.readMultipleResponse }
public enum ATTReadMultipleVariableResponseTag: ATTOpcodeTag {
    public static let opcode = ATTOpcode.readMultipleVariableResponse
}

public typealias ATTWriteRequest = ATTHandleValuePDU<ATTWriteRequestTag>
public typealias ATTWriteCommand = ATTHandleValuePDU<ATTWriteCommandTag>
public typealias ATTHandleValueNotification = ATTHandleValuePDU<ATTNotificationTag>
public typealias ATTHandleValueIndication = ATTHandleValuePDU<ATTIndicationTag>
public typealias ATTReadByTypeRequest = ATTRangeTypePDU<ATTReadByTypeTag>
public typealias ATTReadByGroupTypeRequest = ATTRangeTypePDU<ATTReadByGroupTypeTag>
public typealias ATTReadMultipleRequest = ATTHandleListPDU<ATTReadMultipleTag>
public typealias ATTReadMultipleVariableRequest = ATTHandleListPDU<ATTReadMultipleVariableTag>
public typealias ATTReadResponse = ATTValuePDU<ATTReadResponseTag>
public typealias ATTReadBlobResponse = ATTValuePDU<ATTReadBlobResponseTag>
public typealias ATTWriteResponse = ATTOpcodeOnlyPDU<ATTWriteResponseTag>
public typealias ATTHandleValueConfirmation = ATTOpcodeOnlyPDU<ATTConfirmationTag>
public typealias ATTPrepareWriteRequest = ATTPrepareWritePDU<ATTPrepareWriteRequestTag>
public typealias ATTPrepareWriteResponse = ATTPrepareWritePDU<ATTPrepareWriteResponseTag>
public typealias ATTExecuteWriteResponse = ATTOpcodeOnlyPDU<ATTExecuteWriteResponseTag>
/// Vol 3, Part F, 3.4.4.8: the values one after the other, cut at ATT_MTU - 1.
public typealias ATTReadMultipleResponse = ATTValuePDU<ATTReadMultipleResponseTag>
/// Vol 3, Part F, 3.4.4.12: (length, value) tuples; the last may be cut at ATT_MTU - 1.
public typealias ATTReadMultipleVariableResponse = ATTValuePDU<ATTReadMultipleVariableResponseTag>

extension ATTRangeTypePDU where Tag == ATTReadByGroupTypeTag {
    /// Read By Group Type calls its UUID the Attribute Group Type (3.4.4.9).
    public init(startHandle: UInt16, endHandle: UInt16, groupType: BluetoothUUID) {
        self.init(startHandle: startHandle, endHandle: endHandle, attributeType: groupType)
    }
    public var groupType: BluetoothUUID {
        get { attributeType }
        set { attributeType = newValue }
    }
}

/// Multiple Handle Value Notification (Vol 3, Part F, 3.4.7.4): the Handle Length Value Tuple
/// List, each tuple a handle, a 2-byte length and that many value bytes, "two or more" of them.
/// Sent only to a client that set the Multiple Handle Value Notifications bit (bit 2) of Client
/// Supported Features (Vol 3, Part G, 7.2). The decoder is total: a tuple shorter than its length,
/// a handle 0x0000, or fewer than two tuples is a decode error.
public struct ATTMultipleHandleValueNotification: ATTPDU, Equatable {
    public static let opcode = ATTOpcode.multipleHandleValueNotification
    public struct Tuple: Equatable {
        public var handle: UInt16
        public var value: ArraySlice<UInt8>
        public init(handle: UInt16, value: ArraySlice<UInt8>) {
            self.handle = handle
            self.value = value
        }
    }
    public var tuples: [Tuple]
    public init(tuples: [Tuple]) { self.tuples = tuples }

    public init(pdu: ArraySlice<UInt8>) throws(DecodeError) {
        var r = try Self.reader(pdu)
        var tuples: [Tuple] = []
        while !r.isAtEnd {
            let handle = try r.u16()
            guard handle != 0 else { throw DecodeError(.invalidValue, "Multiple Handle Value Notification: handle 0x0000") }
            let length = Int(try r.u16())
            // A value longer than what is left cannot be (the PDU is at most ATT_MTU).
            tuples.append(Tuple(handle: handle, value: try r.bytes(length)))
        }
        guard tuples.count >= 2 else {
            throw DecodeError(.lengthMismatch, "Multiple Handle Value Notification with \(tuples.count) tuple(s); two or more")
        }
        self.tuples = tuples
    }

    public func encode(into out: inout [UInt8]) {
        out.append(Self.opcode.rawValue)
        for tuple in tuples {
            out.appendLE(tuple.handle)
            out.appendLE(UInt16(truncatingIfNeeded: tuple.value.count))
            out.append(contentsOf: tuple.value)
        }
    }
}
