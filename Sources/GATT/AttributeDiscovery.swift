import BlemuATT
import BlemuCore

/// Discovery as functions of the database (Vol 3, Part F, 3.4.3 and 3.4.4; Part G, 4.4-4.7):
/// Find Information, Find By Type Value and Read By Group Type answered from the declarations
/// alone, each response written into `out` after its opcode (the server's response buffer),
/// within `mtu`; and the range rules every ranged request shares. Nothing of a bearer or a
/// client is here: the server decodes the request, calls, and sends the response through its
/// one way out. Read By Type reads values (the device's, a CCCD's) and so is the server's.
enum AttributeDiscovery {
    static func findInformation(_ request: ATTFindInformationRequest, in database: GATTDatabase, mtu: Int,
                                into out: inout [UInt8]) throws(ATTFailure) {
        try checkRange(request.startHandle, request.endHandle)
        guard let range = handles(in: database, request.startHandle, request.endHandle) else {
            throw ATTFailure(.attributeNotFound, request.startHandle)
        }
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
    }

    static func findByTypeValue(_ request: ATTFindByTypeValueRequest, in database: GATTDatabase, mtu: Int,
                                into out: inout [UInt8]) throws(ATTFailure) {
        try checkRange(request.startHandle, request.endHandle)
        let type = BluetoothUUID(request.attributeType)
        if let range = handles(in: database, request.startHandle, request.endHandle) {
            for handle in range {
                guard let a = database.attribute(handle) else { continue }
                guard a.type == type, case .fixed(let bytes) = a.content, matches(bytes, request.value, type: type) else {
                    continue
                }
                guard out.count + 4 <= mtu else { break }
                out.appendLE(handle)
                // Vol 3, Part F, 3.4.3.4: the group end for a grouping attribute, else the handle itself.
                out.appendLE(a.groupEnd >= handle ? a.groupEnd : handle)
            }
        }
        guard out.count > 1 else { throw ATTFailure(.attributeNotFound, request.startHandle) }
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

    static func readByGroupType(_ request: ATTReadByGroupTypeRequest, in database: GATTDatabase, mtu: Int,
                                into out: inout [UInt8]) throws(ATTFailure) {
        try checkRange(request.startHandle, request.endHandle)
        // Vol 3, Part G, 2.5.3: only services are grouping types.
        guard request.groupType == GATTType.primaryService || request.groupType == GATTType.secondaryService else {
            throw ATTFailure(.unsupportedGroupType, request.startHandle)
        }
        let maxValue = min(mtu - 6, 251)
        var entryLength = 0
        if let range = handles(in: database, request.startHandle, request.endHandle) {
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
    }

    /// Vol 3, Part F, 3.4.3.1 (and each ranged request): start 0 or start > end is Invalid Handle.
    static func checkRange(_ start: UInt16, _ end: UInt16) throws(ATTFailure) {
        guard start != 0, start <= end else { throw ATTFailure(.invalidHandle, start) }
    }

    /// The handles of `start...end` that exist in `database`.
    static func handles(in database: GATTDatabase, _ start: UInt16, _ end: UInt16) -> ClosedRange<UInt16>? {
        let last = min(end, database.lastHandle)
        return start <= last ? start...last : nil
    }
}
