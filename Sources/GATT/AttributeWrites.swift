import BlemuATT
import BlemuCore

/// A bearer's writes (Vol 3, Part F, 3.4.5 and 3.4.6): Write Request and Command, Signed Write,
/// Prepare and Execute Write, and CCCD values written through the session. Its state is the
/// bearer's prepare queue and Execute Write's checked writes; the handlers read the server's
/// database, session and peer in place, and answer through the server's one `respond`.
struct AttributeWrites {
    /// A write that passed every check and only waits to be applied.
    enum CheckedWrite {
        case clientConfiguration(Characteristic, flags: UInt16)
        case device(Characteristic, WriteRequest)
    }

    /// The prepare queue (at most `maxPreparedWrites` parts of at most ATT_MTU - 5 bytes each)
    /// and, reused too, the writes Execute Write checked before any applies.
    var prepareQueue = PrepareQueue()
    var checkedWrites: [CheckedWrite] = []

    /// Empties the prepare queue and Execute Write's working space, keeping their room.
    mutating func clear() {
        // The checked writes hold views of the assembled bytes: they go first, so those are emptied in place.
        checkedWrites.removeAll(keepingCapacity: true)
        prepareQueue.clear()
    }

    /// Everything that can refuse a write, with no side effects, so Execute Write can check
    /// every prepared value before it applies any (Vol 3, Part F, 3.4.6.3).
    static func check(_ a: Attribute, offset: Int, value: ArraySlice<UInt8>, withResponse: Bool,
                      _ server: ATTServer) throws(ATTFailure) -> CheckedWrite {
        switch a.content {
        case .clientConfiguration(let c):
            // Vol 3, Part G, 3.3.3.3: two octets, written whole.
            if let error = ValueLength.fixed(2).refusal(offset: offset, count: value.count) { throw ATTFailure(error, a.handle) }
            let flags = UInt16(value[value.startIndex]) | UInt16(value[value.startIndex + 1]) << 8
            // Enabling what the characteristic does not do is a misconfiguration of the CCCD.
            if (flags & 0x0001 != 0 && !c.properties.contains(.notify))
                || (flags & 0x0002 != 0 && !c.properties.contains(.indicate)) {
                throw ATTFailure(.cccdImproperlyConfigured, a.handle)
            }
            return .clientConfiguration(c, flags: flags & 0x0003)
        case .fixed:
            throw ATTFailure(.writeNotPermitted, a.handle)
        case .dynamic(let c):
            // A pattern, not `!= nil`: comparing a closure through the generic operator wraps it
            // in a thunk, an allocation per write in a debug build.
            guard case .some = c.onWrite else { throw ATTFailure(.writeNotPermitted, a.handle) }
            // The device's length rule holds whatever the offsets: its handler never sees a
            // value its declaration rules out.
            if let error = c.length.refusal(offset: offset, count: value.count) { throw ATTFailure(error, a.handle) }
            let request = WriteRequest(peer: server.peer, offset: offset, value: ValueBytes(value), withResponse: withResponse)
            if let error = c.validateWrite?(request) { throw ATTFailure(error, a.handle) }
            return .device(c, request)
        }
    }

    /// Applies a checked write. Only the device's `onWrite` can still refuse here.
    static func apply(_ write: CheckedWrite, prepared: Bool = false, _ server: ATTServer) throws(ATTFailure) {
        switch write {
        case .clientConfiguration(let c, let flags):
            let old = server.session.configure(c, flags)
            if old != flags {
                server.delegate?.attServer(server, configured: c, from: old, to: flags)
            }
        case .device(let c, let request):
            if let error = c.onWrite?(request) { throw ATTFailure(error, c.valueHandle) }
            if server.watch.reportsWrites { server.watch.observer?.attServer(server, wrote: c, request: request, prepared: prepared) }
        }
    }

    static func write(_ a: Attribute, value: ArraySlice<UInt8>, withResponse: Bool, _ server: ATTServer) throws(ATTFailure) {
        try apply(check(a, offset: 0, value: value, withResponse: withResponse, server), server)
    }

    static func writeRequest(_ server: ATTServer, _ pdu: ArraySlice<UInt8>) throws(ATTFailure) {
        let request = try server.decode(ATTWriteRequest.self, pdu)
        let a = try writableAttribute(request.handle, declaring: .write, server)
        try write(a, value: request.value, withResponse: true, server)
        server.begin(.writeResponse)
        server.respond(pdu[pdu.startIndex])
    }

    static func writeCommand(_ server: ATTServer, _ pdu: ArraySlice<UInt8>) throws(ATTFailure) {
        let command = try server.decode(ATTWriteCommand.self, pdu)
        let a = try writableAttribute(command.handle, declaring: .writeWithoutResponse, server)
        try write(a, value: command.value, withResponse: false, server)
    }

    /// The attribute a Write Request or Write Command names, once it may be written that way:
    /// writable, a characteristic value whose declaration has `property` (Write, or Write Without
    /// Response: the properties say which procedure the value takes, Vol 3, Part G, 3.3.1.1),
    /// and authorized.
    private static func writableAttribute(_ handle: UInt16, declaring property: CharacteristicProperties,
                                          _ server: ATTServer) throws(ATTFailure) -> Attribute {
        let a = try server.lookup(handle)
        try AttributeChecks.writable(a, server)
        if let c = a.characteristic, case .dynamic = a.content, !c.properties.contains(property) {
            throw ATTFailure(.writeNotPermitted, a.handle)
        }
        try AttributeChecks.authorized(a, .write, server)
        return a
    }

    /// Signed Write Command (Vol 3, Part F, 3.4.5.4; Part G, 4.9.2). On an unencrypted link the
    /// signature is what authenticates the value: it must verify with the CSRK of the client's
    /// bond and name a SignCounter larger than the last one accepted (Vol 3, Part C, 10.4.2),
    /// else the command is ignored (3.4.5.4: a failed verification is ignored, no response
    /// exists) and the delegate hears why. On an encrypted link the encryption already gives
    /// the data signing's protection (Vol 3, Part C, 10.2.3, mixed security modes; a client
    /// "shall" use Write Without Response there, Part G, 4.9.2), so the value is taken as a
    /// Write Command would be, signature unchecked. Either way the characteristic must have the
    /// Authenticated Signed Writes property, and its own permissions still apply.
    static func signedWriteCommand(_ server: ATTServer, _ pdu: ArraySlice<UInt8>) throws(ATTFailure) {
        let command = try server.decode(ATTSignedWriteCommand.self, pdu)
        let a = try server.lookup(command.handle)
        guard a.writable, let c = a.characteristic, c.properties.contains(.authenticatedSignedWrites),
              case .dynamic = a.content else {
            throw ATTFailure(.writeNotPermitted, a.handle)
        }
        if !server.session.linkSecurity.isEncrypted {
            switch server.session.verifySignedWrite(pdu, signature: command.signature) {
            case .dropped(let reason):
                server.delegate?.attServer(server, droppedSignedWrite: reason, handle: command.handle)
                return
            case .accepted(let counter):
                server.delegate?.attServer(server, acceptedSignCounter: counter)
            }
        }
        try AttributeChecks.writable(a, server)
        try AttributeChecks.authorized(a, .write, server)
        try write(a, value: command.value, withResponse: false, server)
    }

    static func prepareWrite(_ server: ATTServer, _ pdu: ArraySlice<UInt8>) throws(ATTFailure) {
        let request = try server.decode(ATTPrepareWriteRequest.self, pdu)
        let a = try server.lookup(request.handle)
        // 3.4.6.1: permissions are checked on the Prepare Write Request itself — write access,
        // encryption, authentication, key size and authorization — so a refused part never
        // enters the queue and the Execute Write Request only checks offsets and values.
        try AttributeChecks.writable(a, server)
        if let c = a.characteristic, case .dynamic = a.content, !c.properties.contains(.write) {
            throw ATTFailure(.writeNotPermitted, a.handle)
        }
        try AttributeChecks.authorized(a, .write, server)
        guard !server.writes.prepareQueue.isFull else { throw ATTFailure(.prepareQueueFull, a.handle) }
        if !server.writes.prepareQueue.hasRoom {
            server.writes.prepareQueue.reserve()
            server.writes.checkedWrites.reserveCapacity(ATTServer.maxPreparedWrites)
        }
        // 3.4.6.1: offsets and lengths are not checked now but at Execute Write.
        server.writes.prepareQueue.append(handle: request.handle, offset: Int(request.offset), value: request.value)
        // 3.4.6.2: the response echoes the request, so the client can check it (reliable writes).
        server.out.removeAll(keepingCapacity: true)
        server.out.append(ATTOpcode.prepareWriteResponse.rawValue)
        server.out.append(contentsOf: pdu.dropFirst())
        server.respond(pdu[pdu.startIndex])
    }

    static func executeWrite(_ server: ATTServer, _ pdu: ArraySlice<UInt8>) throws(ATTFailure) {
        let request = try server.decode(ATTExecuteWriteRequest.self, pdu)
        // 3.4.6.3: whatever happens next, the queue is cleared.
        defer { server.writes.clear() }
        if request.flags == .write {
            try server.writes.prepareQueue.assemble(in: server.database)
            // 3.4.6.3: every value is checked — offsets, lengths, the device's own rules — before
            // any is written, so a refusal leaves every attribute unchanged.
            // Iterated through references of their own (no copy): a device's handler that ends
            // the link, and so empties them, cannot pull the ground from under these loops.
            let bytes = server.writes.prepareQueue.assembledBytes
            for entry in server.writes.prepareQueue.assembled {
                let value = bytes[entry.start..<(entry.start + entry.count)]
                server.writes.checkedWrites.append(try check(server.lookup(entry.handle), offset: entry.offset, value: value,
                                                             withResponse: true, server))
            }
            for (index, write) in server.writes.checkedWrites.enumerated() {
                do {
                    try apply(write, prepared: true, server)
                } catch {
                    // Only an onWrite that refuses what its validateWrite accepted gets here:
                    // the values before it are written already.
                    server.delegate?.attServer(server, executeWriteRefusedAfter: index, error: error.error, handle: error.handle)
                    throw error
                }
            }
        }
        server.begin(.executeWriteResponse)
        server.respond(pdu[pdu.startIndex])
    }

    /// Restores the CCCD values a bonded client set on an earlier link (Vol 3, Part G, 3.3.3.3:
    /// they persist across connections for bonded devices). Values for handles that are not a
    /// notifying characteristic now, or flags its properties do not allow, are left out; the
    /// delegate hears of each value that changes, as after a write.
    static func restoreClientConfigurations(_ values: [UInt16: UInt16], _ server: ATTServer) {
        let database = server.database, session = server.session
        for characteristic in database.characteristics where characteristic.notifies {
            guard let stored = values[characteristic.valueHandle], database.attribute(characteristic.valueHandle) != nil else { continue }
            var flags = stored & 0x0003
            if !characteristic.properties.contains(.notify) { flags &= ~0x0001 }
            if !characteristic.properties.contains(.indicate) { flags &= ~0x0002 }
            guard flags != 0, flags != session.clientConfiguration(characteristic) else { continue }
            let old = session.configure(characteristic, flags)
            server.delegate?.attServer(server, configured: characteristic, from: old, to: flags)
        }
    }
}

/// The access checks a request passes before its value is read or written (Vol 3, Part F, 3.2.5
/// and 4.4; Vol 3, Part C, 10.3 and 10.5), in the order the client is told of what fails.
enum AttributeChecks {
    static func readable(_ a: Attribute, _ server: ATTServer) throws(ATTFailure) {
        guard a.readable else { throw ATTFailure(.readNotPermitted, a.handle) }
        if a.encryptionRequiredToRead {
            try security(a, authentication: a.authenticationRequiredToRead, server.session)
        }
        try authorized(a, .read, server)
    }

    static func writable(_ a: Attribute, _ server: ATTServer) throws(ATTFailure) {
        guard a.writable else { throw ATTFailure(.writeNotPermitted, a.handle) }
        if a.encryptionRequiredToWrite {
            try security(a, authentication: a.authenticationRequiredToWrite, server.session)
        }
        // Authorization comes after each write's own Write Not Permitted checks (the property
        // its opcode needs): the writes call `authorized` themselves.
    }

    /// Authorization (Vol 3, Part C, 10.5; Vol 3, Part F, 3.2.5: "Authorization permissions
    /// determine whether a client needs to be authorized before an attribute can be accessed").
    /// It is asked last, once the link's security is enough, so a client is told first what it
    /// can fix itself (pair, encrypt: 0x05, 0x0F, 0x0C) and the device is only asked about a
    /// request it would otherwise serve; a refusal is Insufficient Authorization (0x08, Vol 3,
    /// Part F, 3.4.1.1 Table 3.4). Only the value attribute carries the characteristic's
    /// permissions: its CCCD and descriptors are not authorized.
    static func authorized(_ a: Attribute, _ access: AttributeAccess, _ server: ATTServer) throws(ATTFailure) {
        guard let c = a.characteristic, a.handle == c.valueHandle else { return }
        let required: AttributePermissions = access == .read ? .readAuthorizationRequired : .writeAuthorizationRequired
        guard c.permissions.contains(required) else { return }
        let authorized = c.authorize.map { $0(server.peer, access) } ?? (server.delegate?.attServer(server, authorize: c, access: access) ?? false)
        guard authorized else { throw ATTFailure(.insufficientAuthorization, a.handle) }
    }

    /// The link's security against an attribute that requires encryption (Vol 3, Part C,
    /// 10.3.1 and 10.3.2; Vol 3, Part F, 4.4), decided by the session.
    static func security(_ a: Attribute, authentication: Bool, _ session: GATTServerSession) throws(ATTFailure) {
        if let error = session.securityRefusal(for: a.characteristic, authentication: authentication) { throw ATTFailure(error, a.handle) }
    }
}
