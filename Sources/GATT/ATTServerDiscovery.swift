import BlemuATT
import BlemuCore

/// The server's discovery requests (Vol 3, Part F, 3.4.3 and 3.4.4; Part G, 4.4-4.7), each
/// answered on the bearer of the server that received it: Find Information, Find By Type Value
/// and Read By Group Type from the database alone (`AttributeDiscovery`), Read By Type here.
extension ATTServer {
    // MARK: Discovery (Vol 3, Part F, 3.4.3 and 3.4.4; Part G, 4.4-4.7): the database's answers

    func findInformation(_ pdu: ArraySlice<UInt8>) throws(ATTFailure) {
        let request = try decode(ATTFindInformationRequest.self, pdu)
        begin(.findInformationResponse)
        try AttributeDiscovery.findInformation(request, in: database, mtu: mtu, into: &out)
        respond(pdu[pdu.startIndex])
    }

    func findByTypeValue(_ pdu: ArraySlice<UInt8>) throws(ATTFailure) {
        let request = try decode(ATTFindByTypeValueRequest.self, pdu)
        begin(.findByTypeValueResponse)
        try AttributeDiscovery.findByTypeValue(request, in: database, mtu: mtu, into: &out)
        respond(pdu[pdu.startIndex])
    }

    func readByGroupType(_ pdu: ArraySlice<UInt8>) throws(ATTFailure) {
        guard pdu.count == 7 || pdu.count == 21 else { throw ATTFailure(.invalidPDU, 0) }
        let request = try decode(ATTReadByGroupTypeRequest.self, pdu)
        begin(.readByGroupTypeResponse)
        try AttributeDiscovery.readByGroupType(request, in: database, mtu: mtu, into: &out)
        respond(pdu[pdu.startIndex])
    }

    /// Read By Type reads values (the device's, a CCCD's), and so is the server's, not the database's.
    func readByType(_ pdu: ArraySlice<UInt8>) throws(ATTFailure) {
        guard pdu.count == 7 || pdu.count == 21 else { throw ATTFailure(.invalidPDU, 0) }
        let request = try decode(ATTReadByTypeRequest.self, pdu)
        try AttributeDiscovery.checkRange(request.startHandle, request.endHandle)
        begin(.readByTypeResponse)
        // Vol 3, Part F, 3.4.4.2: each value is at most min(ATT_MTU - 4, 253) octets, and all
        // pairs in one response have the same length.
        let maxValue = min(mtu - 4, 253)
        var pairLength = 0
        if let range = AttributeDiscovery.handles(in: database, request.startHandle, request.endHandle) {
            for handle in range {
                guard let a = database.attribute(handle) else { continue }
                guard a.type == request.attributeType else { continue }
                let first = pairLength == 0
                let value: ArraySlice<UInt8>
                do {
                    try AttributeChecks.readable(a, self)
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
}
