import BlemuATT
import BlemuCore

/// The reads answered from more than one value or step (Vol 3, Part F, 3.4.4.5 – 3.4.4.12):
/// Read Blob, which continues the server's long read, and Read Multiple (Variable). They read
/// the server's values, its long read and its session in place, and answer through its one
/// `respond`. Read Request stays the server's, beside `value(of:)` and the long read it starts.
enum AttributeReads {
    static func readBlob(_ server: ATTServer, _ pdu: ArraySlice<UInt8>) throws(ATTFailure) {
        let request = try server.decode(ATTReadBlobRequest.self, pdu)
        let a = try server.lookup(request.handle)
        try AttributeChecks.readable(a, server)
        let offset = Int(request.offset)
        let limit = server.mtu - 1
        let tail: ArraySlice<UInt8>
        if server.longReadHandle == request.handle {
            guard offset <= server.longReadValue.count else { throw ATTFailure(.invalidOffset, a.handle) }
            tail = server.longReadValue[offset...]
            if server.watch.reportsReads { server.reportRead(a, offset: offset) }
        } else {
            server.longReadHandle = nil
            if a.isFixedLength {
                let length: Int
                switch a.content {
                case .fixed(let bytes): length = bytes.count
                case .clientConfiguration: length = 2
                case .dynamic(let c):
                    if case .fixed(let n) = c.length { length = n } else { length = Int.max }
                }
                guard offset <= length else { throw ATTFailure(.invalidOffset, a.handle) }
                // 3.4.4.5: a fixed-length value that fits one Read Response is not long.
                if length <= limit { throw ATTFailure(.attributeNotLong, a.handle) }
            }
            tail = try server.value(of: a, offset: offset)
            if offset == 0, tail.count >= limit, case .dynamic = a.content {
                server.keepLongRead(request.handle, tail)
            }
        }
        server.begin(.readBlobResponse)
        server.out.append(contentsOf: tail.prefix(limit))
        server.respond(pdu[pdu.startIndex])
    }

    static func readMultiple(_ server: ATTServer, _ pdu: ArraySlice<UInt8>, variable: Bool) throws(ATTFailure) {
        // Both are one list of handles (3.4.4.7, 3.4.4.11), read here as the first: a method
        // taken as a closure (`request.handle(at:)`) would allocate its context per request.
        let request = variable ? ATTReadMultipleRequest(checkedHandles: try server.decode(ATTReadMultipleVariableRequest.self, pdu).handles)
                               : try server.decode(ATTReadMultipleRequest.self, pdu)
        server.begin(variable ? .readMultipleVariableResponse : .readMultipleResponse)
        let limit = server.mtu
        for index in 0..<request.handleCount {
            let handle = request.handle(at: index)
            let a = try server.lookup(handle)
            try AttributeChecks.readable(a, server)
            let value = try server.value(of: a, offset: 0)
            if variable {
                // 3.4.4.12: each value with its length; the whole list is cut at ATT_MTU - 1.
                appendTruncated(UInt16(value.count), limit: limit, server)
            }
            server.out.append(contentsOf: value.prefix(max(0, limit - server.out.count)))
        }
        server.respond(pdu[pdu.startIndex])
    }

    static func appendTruncated(_ length: UInt16, limit: Int, _ server: ATTServer) {
        if server.out.count < limit { server.out.append(UInt8(truncatingIfNeeded: length)) }
        if server.out.count < limit { server.out.append(UInt8(truncatingIfNeeded: length >> 8)) }
    }
}
