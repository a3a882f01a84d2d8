import BlemuATT
import BlemuCore

/// The server's discovery requests (Vol 3, Part F, 3.4.3 and 3.4.4; Part G, 4.4-4.7): Find
/// Information, Find By Type Value, Read By Type and Read By Group Type, each answered on the
/// bearer of the server that received it.
extension ATTServer {
    func findInformation(_ pdu: ArraySlice<UInt8>) throws(ATTFailure) {
        let request = try decode(ATTFindInformationRequest.self, pdu)
        try checkRange(request.startHandle, request.endHandle)
        guard let range = handles(request.startHandle, request.endHandle) else {
            throw ATTFailure(.attributeNotFound, request.startHandle)
        }
        begin(.findInformationResponse)
        var format: UInt8 = 0
        for handle in range {
            guard let a = database.attribute(handle) else { continue }
            let thisFormat: UInt8 = a.type.uint16 != nil ? 0x01 : 0x02
            let size = thisFormat == 0x01 ? 4 : 18
            if format == 0 {
                format = thisFormat
                out.append(format)
            } else if thisFormat != format {
                break
            }
            guard out.count + size <= mtu else { break }
            out.appendLE(handle)
            a.type.appendATT(to: &out)
        }
        // Every handle of the range in a service taken out: nothing to return is Attribute Not
        // Found (Vol 3, Part F, 3.4.3.1), never a response without a format.
        guard format != 0 else { throw ATTFailure(.attributeNotFound, request.startHandle) }
        respond(pdu[pdu.startIndex])
    }

    func findByTypeValue(_ pdu: ArraySlice<UInt8>) throws(ATTFailure) {
        let request = try decode(ATTFindByTypeValueRequest.self, pdu)
        try checkRange(request.startHandle, request.endHandle)
        let type = BluetoothUUID(request.attributeType)
        begin(.findByTypeValueResponse)
        if let range = handles(request.startHandle, request.endHandle) {
            for handle in range {
                guard let a = database.attribute(handle) else { continue }
                guard a.type == type, case .fixed(let bytes) = a.content, Self.matches(bytes, request.value, type: type) else {
                    continue
                }
                guard out.count + 4 <= mtu else { break }
                out.appendLE(handle)
                // Vol 3, Part F, 3.4.3.4: the group end for a grouping attribute, else the handle itself.
                out.appendLE(a.groupEnd >= handle ? a.groupEnd : handle)
            }
        }
        guard out.count > 1 else { throw ATTFailure(.attributeNotFound, request.startHandle) }
        respond(pdu[pdu.startIndex])
    }

    /// Service declarations hold UUIDs, which compare as UUIDs: a 16-bit service asked for in
    /// its 128-bit form still matches (as Zephyr's find_type does).
    private static func matches(_ value: [UInt8], _ wanted: ArraySlice<UInt8>, type: BluetoothUUID) -> Bool {
        if value.elementsEqual(wanted) { return true }
        guard type == GATTType.primaryService || type == GATTType.secondaryService,
              let a = try? BluetoothUUID(littleEndian: value[...]), let b = try? BluetoothUUID(littleEndian: wanted) else {
            return false
        }
        return a == b
    }

    func readByType(_ pdu: ArraySlice<UInt8>) throws(ATTFailure) {
        guard pdu.count == 7 || pdu.count == 21 else { throw ATTFailure(.invalidPDU, 0) }
        let request = try decode(ATTReadByTypeRequest.self, pdu)
        try checkRange(request.startHandle, request.endHandle)
        begin(.readByTypeResponse)
        // Vol 3, Part F, 3.4.4.2: each value is at most min(ATT_MTU - 4, 253) octets, and all
        // pairs in one response have the same length.
        let maxValue = min(mtu - 4, 253)
        var pairLength = 0
        if let range = handles(request.startHandle, request.endHandle) {
            for handle in range {
                guard let a = database.attribute(handle) else { continue }
                guard a.type == request.attributeType else { continue }
                let first = pairLength == 0
                let value: ArraySlice<UInt8>
                do {
                    try checkReadable(a)
                    value = try self.value(of: a, offset: 0)
                } catch {
                    // 3.4.4.1: an error on the first attribute is the answer; later ones end the list.
                    if first { throw error }
                    break
                }
                let length = min(value.count, maxValue)
                if first {
                    pairLength = length + 2
                    out.append(UInt8(pairLength))
                } else if length + 2 != pairLength {
                    break
                }
                guard out.count + pairLength <= mtu else { break }
                out.appendLE(handle)
                out.append(contentsOf: value.prefix(length))
                if first, value.count >= maxValue, case .dynamic = a.content {
                    // Read Using Characteristic UUID may be continued with Read Blob (Vol 3,
                    // Part G, 4.8.2): keep the value so the continuation is consistent.
                    keepLongRead(handle, value)
                }
            }
        }
        guard pairLength > 0 else { throw ATTFailure(.attributeNotFound, request.startHandle) }
        if !session.isChangeAware && request.attributeType == GATTType.databaseHash { session.databaseHashRead() }
        respond(pdu[pdu.startIndex])
    }

    func readByGroupType(_ pdu: ArraySlice<UInt8>) throws(ATTFailure) {
        guard pdu.count == 7 || pdu.count == 21 else { throw ATTFailure(.invalidPDU, 0) }
        let request = try decode(ATTReadByGroupTypeRequest.self, pdu)
        try checkRange(request.startHandle, request.endHandle)
        // Vol 3, Part G, 2.5.3: only services are grouping types.
        guard request.groupType == GATTType.primaryService || request.groupType == GATTType.secondaryService else {
            throw ATTFailure(.unsupportedGroupType, request.startHandle)
        }
        begin(.readByGroupTypeResponse)
        let maxValue = min(mtu - 6, 251)
        var entryLength = 0
        if let range = handles(request.startHandle, request.endHandle) {
            for handle in range {
                guard let a = database.attribute(handle) else { continue }
                guard a.type == request.groupType, case .fixed(let bytes) = a.content else { continue }
                let length = min(bytes.count, maxValue)
                if entryLength == 0 {
                    entryLength = length + 4
                    out.append(UInt8(entryLength))
                } else if length + 4 != entryLength {
                    break
                }
                guard out.count + entryLength <= mtu else { break }
                out.appendLE(handle)
                out.appendLE(a.groupEnd)
                out.append(contentsOf: bytes.prefix(length))
            }
        }
        guard entryLength > 0 else { throw ATTFailure(.attributeNotFound, request.startHandle) }
        respond(pdu[pdu.startIndex])
    }
}
