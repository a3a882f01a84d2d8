import BlemuCore

/// The connection parameters a link runs with (Vol 4, Part E, 7.7.65.1): interval in 1.25 ms,
/// latency in connection events, supervision timeout in 10 ms.
public struct LinkParameters: Equatable, Sendable {
    public var interval: UInt16
    public var latency: UInt16
    public var supervisionTimeout: UInt16
    public init(interval: UInt16, latency: UInt16, supervisionTimeout: UInt16) {
        self.interval = interval
        self.latency = latency
        self.supervisionTimeout = supervisionTimeout
    }
}

/// LE Connection Complete (7.7.65.1) and LE Enhanced Connection Complete (7.7.65.10) in one shape.
public struct LEConnectionComplete: Equatable, Sendable {
    public var status: UInt8
    public var handle: UInt16
    /// 0x00 central, 0x01 peripheral (our role).
    public var role: UInt8
    /// 0x00 public, 0x01 random; in the enhanced event also 0x02 public identity and 0x03
    /// random identity: the controller resolved the peer's private address with its resolving
    /// list, and `peerAddress` is the identity address.
    public var peerAddressType: UInt8
    public var peerAddress: BluetoothAddress
    public var parameters: LinkParameters
    /// The enhanced event's Peer_Resolvable_Private_Address: the address the peer used over the
    /// air when the controller resolved it (nil when all zero, or from the legacy event).
    public var peerResolvablePrivateAddress: BluetoothAddress? = nil
    /// LE Enhanced Connection Complete v2 (subevent 0x29, Core 5.4): the advertising set the
    /// link came from (0xFF: none, or not a set); nil from the other forms.
    public var advertisingHandle: UInt8? = nil

    /// The controller resolved the peer: Peer_Address_Type 0x02 or 0x03 (7.7.65.10), or a
    /// Peer_Resolvable_Private_Address that is not all zero, which the spec allows only with
    /// those types: rootcanal 1.10 reports a resolved peer as 0x00/0x01 with the identity address
    /// and the private address it used. Either way `peerAddress` is the identity, whose type is
    /// bit 0 of Peer_Address_Type.
    public var peerIdentityResolved: Bool {
        peerAddressType == 0x02 || peerAddressType == 0x03 || peerResolvablePrivateAddress != nil
    }

    /// `peerAddress` with its type: bit 0 of Peer_Address_Type (an identity address when the
    /// controller resolved the peer).
    public var peer: LEAddress { LEAddress(peerAddress, peerAddressType: peerAddressType) }
}

/// An HCI event, decoded (Vol 4, Part E, 7.7). Decoding is total: unknown events and LE
/// subevents come back as `.other`/`.leOther`, malformed ones as a thrown `DecodeError`.
public enum HCIEvent: Equatable, Sendable {
    case commandComplete(numPackets: UInt8, opcode: UInt16, returnParameters: [UInt8])
    case commandStatus(status: UInt8, numPackets: UInt8, opcode: UInt16)
    case disconnectionComplete(status: UInt8, handle: UInt16, reason: UInt8)
    case numberOfCompletedPackets([(handle: UInt16, count: UInt16)])
    case hardwareError(code: UInt8)
    case dataBufferOverflow(linkType: UInt8)
    /// 7.7.8: Encryption_Enabled 0x00 off, 0x01 on (AES-CCM for LE), 0x02 on with AES-CCM (BR/EDR).
    case encryptionChange(status: UInt8, handle: UInt16, enabled: UInt8)
    /// 7.7.8 v2 (event 0x59): the same with Encryption_Key_Size (octets).
    case encryptionChangeV2(status: UInt8, handle: UInt16, enabled: UInt8, keySize: UInt8)
    /// 7.7.39: an encrypted link was encrypted again (a new key, e.g. after pairing on it).
    case encryptionKeyRefreshComplete(status: UInt8, handle: UInt16)
    case leConnectionComplete(LEConnectionComplete)
    case leConnectionUpdateComplete(status: UInt8, handle: UInt16, parameters: LinkParameters)
    case leRemoteConnectionParameterRequest(handle: UInt16, intervalMin: UInt16, intervalMax: UInt16,
                                            latency: UInt16, timeout: UInt16)
    case leDataLengthChange(handle: UInt16, maxTxOctets: UInt16, maxTxTime: UInt16, maxRxOctets: UInt16, maxRxTime: UInt16)
    case lePHYUpdateComplete(status: UInt8, handle: UInt16, txPHY: UInt8, rxPHY: UInt8)
    /// 7.7.65.18: an advertising set stopped; with status 0, because `connectionHandle` was
    /// made from it (sent after the connection's LE Connection Complete).
    case leAdvertisingSetTerminated(status: UInt8, set: UInt8, connectionHandle: UInt16, completedEvents: UInt8)
    /// 7.7.65.5: the central starts encryption and asks the host for the link's key.
    case leLongTermKeyRequest(handle: UInt16, randomNumber: UInt64, encryptedDiversifier: UInt16)
    case leAdvertisingReport([AdvertisingReport])
    /// LE Extended Advertising Report (7.7.65.13).
    case leExtendedAdvertisingReport([ExtendedAdvertisingReport])
    /// 7.7.65.14: a Create Sync ended: synchronized to a periodic train, or why not.
    case lePeriodicAdvertisingSyncEstablished(PeriodicSyncEstablished)
    /// 7.7.65.15: data of a periodic train synchronized to.
    case lePeriodicAdvertisingReport(PeriodicAdvertisingReport)
    /// 7.7.65.16: the sync timed out (the train went silent for Sync_Timeout).
    case lePeriodicAdvertisingSyncLost(syncHandle: UInt16)
    case leOther(subevent: UInt8)
    case other(code: UInt8)

    public static func == (a: HCIEvent, b: HCIEvent) -> Bool {
        switch (a, b) {
        case let (.numberOfCompletedPackets(x), .numberOfCompletedPackets(y)):
            return x.count == y.count && zip(x, y).allSatisfy { $0.handle == $1.handle && $0.count == $1.count }
        case let (.commandComplete(a1, a2, a3), .commandComplete(b1, b2, b3)): return a1 == b1 && a2 == b2 && a3 == b3
        case let (.commandStatus(a1, a2, a3), .commandStatus(b1, b2, b3)): return a1 == b1 && a2 == b2 && a3 == b3
        case let (.disconnectionComplete(a1, a2, a3), .disconnectionComplete(b1, b2, b3)): return a1 == b1 && a2 == b2 && a3 == b3
        case let (.hardwareError(x), .hardwareError(y)): return x == y
        case let (.dataBufferOverflow(x), .dataBufferOverflow(y)): return x == y
        case let (.encryptionChange(a1, a2, a3), .encryptionChange(b1, b2, b3)): return a1 == b1 && a2 == b2 && a3 == b3
        case let (.encryptionChangeV2(a1, a2, a3, a4), .encryptionChangeV2(b1, b2, b3, b4)):
            return a1 == b1 && a2 == b2 && a3 == b3 && a4 == b4
        case let (.encryptionKeyRefreshComplete(a1, a2), .encryptionKeyRefreshComplete(b1, b2)): return a1 == b1 && a2 == b2
        case let (.leConnectionComplete(x), .leConnectionComplete(y)): return x == y
        case let (.leConnectionUpdateComplete(a1, a2, a3), .leConnectionUpdateComplete(b1, b2, b3)): return a1 == b1 && a2 == b2 && a3 == b3
        case let (.leRemoteConnectionParameterRequest(a1, a2, a3, a4, a5), .leRemoteConnectionParameterRequest(b1, b2, b3, b4, b5)):
            return a1 == b1 && a2 == b2 && a3 == b3 && a4 == b4 && a5 == b5
        case let (.leDataLengthChange(a1, a2, a3, a4, a5), .leDataLengthChange(b1, b2, b3, b4, b5)):
            return a1 == b1 && a2 == b2 && a3 == b3 && a4 == b4 && a5 == b5
        case let (.lePHYUpdateComplete(a1, a2, a3, a4), .lePHYUpdateComplete(b1, b2, b3, b4)):
            return a1 == b1 && a2 == b2 && a3 == b3 && a4 == b4
        case let (.leAdvertisingReport(x), .leAdvertisingReport(y)): return x == y
        case let (.leExtendedAdvertisingReport(x), .leExtendedAdvertisingReport(y)): return x == y
        case let (.leLongTermKeyRequest(a1, a2, a3), .leLongTermKeyRequest(b1, b2, b3)): return a1 == b1 && a2 == b2 && a3 == b3
        case let (.leAdvertisingSetTerminated(a1, a2, a3, a4), .leAdvertisingSetTerminated(b1, b2, b3, b4)):
            return a1 == b1 && a2 == b2 && a3 == b3 && a4 == b4
        case let (.lePeriodicAdvertisingSyncEstablished(x), .lePeriodicAdvertisingSyncEstablished(y)): return x == y
        case let (.lePeriodicAdvertisingReport(x), .lePeriodicAdvertisingReport(y)): return x == y
        case let (.lePeriodicAdvertisingSyncLost(x), .lePeriodicAdvertisingSyncLost(y)): return x == y
        case let (.leOther(x), .leOther(y)): return x == y
        case let (.other(x), .other(y)): return x == y
        default: return false
        }
    }

    /// Decodes an event packet: event code, parameter length, parameters (Vol 4, Part E, 5.4.4).
    public init(packet: ArraySlice<UInt8>) throws(DecodeError) {
        var r = ByteReader(packet)
        let code = try r.u8()
        let length = Int(try r.u8())
        guard r.remaining == length else {
            throw DecodeError(.lengthMismatch, "event \(Hex.byte(code)) says \(length) bytes, has \(r.remaining)")
        }
        switch code {
        case 0x0E:
            let numPackets = try r.u8()
            let opcode = try r.u16()
            self = .commandComplete(numPackets: numPackets, opcode: opcode, returnParameters: Array(r.rest()))
        case 0x0F:
            let status = try r.u8()
            let numPackets = try r.u8()
            let opcode = try r.u16()
            try r.expectEnd("Command Status")
            self = .commandStatus(status: status, numPackets: numPackets, opcode: opcode)
        case 0x05:
            let status = try r.u8()
            let handle = try r.u16() & 0x0FFF
            let reason = try r.u8()
            try r.expectEnd("Disconnection Complete")
            self = .disconnectionComplete(status: status, handle: handle, reason: reason)
        case 0x13:
            let count = Int(try r.u8())
            guard r.remaining == count * 4 else { throw DecodeError(.lengthMismatch, "Number Of Completed Packets") }
            var entries: [(handle: UInt16, count: UInt16)] = []
            entries.reserveCapacity(count)
            for _ in 0..<count { entries.append((try r.u16() & 0x0FFF, try r.u16())) }
            self = .numberOfCompletedPackets(entries)
        case 0x10:
            let hwCode = try r.u8()
            self = .hardwareError(code: hwCode)
        case 0x1A:
            self = .dataBufferOverflow(linkType: try r.u8())
        case 0x08:
            let status = try r.u8()
            let handle = try r.u16() & 0x0FFF
            let enabled = try r.u8()
            try r.expectEnd("Encryption Change")
            self = .encryptionChange(status: status, handle: handle, enabled: enabled)
        case 0x59:
            let status = try r.u8()
            let handle = try r.u16() & 0x0FFF
            let enabled = try r.u8()
            let keySize = try r.u8()
            try r.expectEnd("Encryption Change v2")
            self = .encryptionChangeV2(status: status, handle: handle, enabled: enabled, keySize: keySize)
        case 0x30:
            let status = try r.u8()
            let handle = try r.u16() & 0x0FFF
            try r.expectEnd("Encryption Key Refresh Complete")
            self = .encryptionKeyRefreshComplete(status: status, handle: handle)
        case 0x3E:
            self = try HCIEvent.decodeLEMeta(&r)
        default:
            self = .other(code: code)
        }
    }

    private static func decodeLEMeta(_ r: inout ByteReader) throws(DecodeError) -> HCIEvent {
        let subevent = try r.u8()
        switch subevent {
        case 0x01, 0x0A, 0x29:
            // 7.7.65.1 / 7.7.65.10: the enhanced form adds the two resolvable private addresses;
            // its v2 (subevent 0x29, Core 5.4) then Advertising_Handle and Sync_Handle at the end.
            // blemu leaves v2 masked (LE event mask bit 40 clear), so controllers send v1, but a
            // controller that sends v2 anyway still opens the link.
            let status = try r.u8()
            let handle = try r.u16() & 0x0FFF
            let role = try r.u8()
            let peerType = try r.u8()
            let peer = try BluetoothAddress(littleEndian: try r.bytes(6))
            var peerPrivate: BluetoothAddress?
            if subevent != 0x01 {
                try r.skip(6) // Local_Resolvable_Private_Address
                let rpa = try r.bytes(6)
                if rpa.contains(where: { $0 != 0 }) { peerPrivate = try BluetoothAddress(littleEndian: rpa) }
            }
            let interval = try r.u16()
            let latency = try r.u16()
            let timeout = try r.u16()
            _ = try r.u8() // central clock accuracy
            var advertisingHandle: UInt8?
            if subevent == 0x29 {
                advertisingHandle = try r.u8()
                _ = try r.u16() // Sync_Handle (a periodic advertising sync; blemu has none)
            }
            return .leConnectionComplete(LEConnectionComplete(
                status: status, handle: handle, role: role, peerAddressType: peerType, peerAddress: peer,
                parameters: LinkParameters(interval: interval, latency: latency, supervisionTimeout: timeout),
                peerResolvablePrivateAddress: peerPrivate, advertisingHandle: advertisingHandle))
        case 0x02:
            let count = Int(try r.u8())
            var reports: [AdvertisingReport] = []
            for _ in 0..<count {
                let eventType = try r.u8()
                let addressType = try r.u8()
                let address = try BluetoothAddress(littleEndian: try r.bytes(6))
                let dataLength = Int(try r.u8())
                let data = Array(try r.bytes(dataLength))
                let rssi = try r.i8()
                reports.append(AdvertisingReport(eventType: eventType, addressType: addressType, address: address,
                                                 data: data, rssi: rssi))
            }
            return .leAdvertisingReport(reports)
        case 0x03:
            let status = try r.u8()
            let handle = try r.u16() & 0x0FFF
            let p = LinkParameters(interval: try r.u16(), latency: try r.u16(), supervisionTimeout: try r.u16())
            return .leConnectionUpdateComplete(status: status, handle: handle, parameters: p)
        case 0x06:
            return .leRemoteConnectionParameterRequest(handle: try r.u16() & 0x0FFF, intervalMin: try r.u16(),
                                                       intervalMax: try r.u16(), latency: try r.u16(), timeout: try r.u16())
        case 0x07:
            return .leDataLengthChange(handle: try r.u16() & 0x0FFF, maxTxOctets: try r.u16(), maxTxTime: try r.u16(),
                                       maxRxOctets: try r.u16(), maxRxTime: try r.u16())
        case 0x05:
            let handle = try r.u16() & 0x0FFF
            let random = try r.u64()
            let ediv = try r.u16()
            try r.expectEnd("LE Long Term Key Request")
            return .leLongTermKeyRequest(handle: handle, randomNumber: random, encryptedDiversifier: ediv)
        case 0x12:
            let status = try r.u8()
            let set = try r.u8()
            let handle = try r.u16() & 0x0FFF
            let completed = try r.u8()
            try r.expectEnd("LE Advertising Set Terminated")
            return .leAdvertisingSetTerminated(status: status, set: set, connectionHandle: handle, completedEvents: completed)
        case 0x0D:
            let count = Int(try r.u8())
            var reports: [ExtendedAdvertisingReport] = []
            for _ in 0..<count {
                let eventType = try r.u16()
                let addressType = try r.u8()
                let address = try BluetoothAddress(littleEndian: try r.bytes(6))
                let primaryPHY = try r.u8()
                let secondaryPHY = try r.u8()
                let sid = try r.u8()
                let txPower = try r.i8()
                let rssi = try r.i8()
                let periodicInterval = try r.u16()
                let directAddressType = try r.u8()
                let directAddress = try BluetoothAddress(littleEndian: try r.bytes(6))
                let dataLength = Int(try r.u8())
                let data = Array(try r.bytes(dataLength))
                reports.append(ExtendedAdvertisingReport(eventType: eventType, addressType: addressType, address: address,
                                                         txPower: txPower == 127 ? nil : txPower,
                                                         rssi: rssi == 127 ? nil : rssi, data: data,
                                                         advertisingSID: sid, periodicInterval: periodicInterval,
                                                         primaryPHY: primaryPHY, secondaryPHY: secondaryPHY,
                                                         directAddressType: directAddressType, directAddress: directAddress))
            }
            try r.expectEnd("LE Extended Advertising Report")
            return .leExtendedAdvertisingReport(reports)
        case 0x0C:
            return .lePHYUpdateComplete(status: try r.u8(), handle: try r.u16() & 0x0FFF, txPHY: try r.u8(), rxPHY: try r.u8())
        default:
            return try Self.decodePeriodic(subevent: subevent, &r) ?? .leOther(subevent: subevent)
        }
    }
}

/// One report of LE Advertising Report (Vol 4, Part E, 7.7.65.2).
public struct AdvertisingReport: Equatable, Sendable {
    /// 0x00 ADV_IND, 0x01 ADV_DIRECT_IND, 0x02 ADV_SCAN_IND, 0x03 ADV_NONCONN_IND, 0x04 SCAN_RSP.
    public var eventType: UInt8
    public var addressType: UInt8
    public var address: BluetoothAddress
    public var data: [UInt8]
    public var rssi: Int8
}

/// One report of LE Extended Advertising Report (Vol 4, Part E, 7.7.65.13).
public struct ExtendedAdvertisingReport: Equatable, Sendable {
    /// Bit 0 connectable, 1 scannable, 2 directed, 3 scan response, 4 legacy PDU; bits 5-6 the
    /// data status: 0 complete, 1 incomplete with more to come, 2 incomplete and truncated.
    public var eventType: UInt16
    public var addressType: UInt8
    public var address: BluetoothAddress
    /// dBm; nil when the controller does not know (127).
    public var txPower: Int8?
    /// dBm; nil when not available (127).
    public var rssi: Int8?
    public var data: [UInt8]
    /// Advertising_SID: the set's id (0x00-0x0F), 0xFF when the PDU had no ADI.
    public var advertisingSID: UInt8 = 0xFF
    /// Periodic_Advertising_Interval in 1.25 ms units: nonzero when the set has a periodic
    /// train to sync to (Vol 4, Part E, 7.7.65.13).
    public var periodicInterval: UInt16 = 0
    /// Primary_PHY: 0x01 LE 1M, 0x03 LE Coded.
    public var primaryPHY: UInt8 = 0x01
    /// Secondary_PHY: 0x00 none (no PDU on the secondary channel), 0x01 LE 1M, 0x02 LE 2M, 0x03 LE Coded.
    public var secondaryPHY: UInt8 = 0x00
    /// Direct_Address_Type and Direct_Address: to whom a directed PDU was sent (meaningful only
    /// with bit 2 of the event type).
    public var directAddressType: UInt8 = 0x00
    public var directAddress = BluetoothAddress(value: 0)

    public var isConnectable: Bool { eventType & 0x0001 != 0 }
    public var isScannable: Bool { eventType & 0x0002 != 0 }
    public var isDirected: Bool { eventType & 0x0004 != 0 }
    /// The report is of a legacy PDU (bit 4).
    public var isLegacy: Bool { eventType & 0x0010 != 0 }
    public var isScanResponse: Bool { eventType & 0x0008 != 0 }
    public var dataStatus: UInt16 { (eventType >> 5) & 0x03 }
}

/// An ACL data packet (Vol 4, Part E, 5.4.2): handle (12 bits), Packet Boundary flag (2 bits),
/// Broadcast flag (2 bits), data length, data.
public struct ACLPacket: Equatable {
    public enum Boundary: UInt8, Sendable {
        /// Host to controller, first fragment of an LE L2CAP PDU.
        case firstNonFlushable = 0b00
        case continuing = 0b01
        /// Controller to host, first fragment.
        case firstFlushable = 0b10
        case complete = 0b11
    }
    public var handle: UInt16
    public var boundary: Boundary
    public var data: ArraySlice<UInt8>

    public init(handle: UInt16, boundary: Boundary, data: ArraySlice<UInt8>) {
        self.handle = handle
        self.boundary = boundary
        self.data = data
    }

    public init(packet: ArraySlice<UInt8>) throws(DecodeError) {
        var r = ByteReader(packet)
        let header = try r.u16()
        let length = Int(try r.u16())
        guard r.remaining == length else {
            throw DecodeError(.lengthMismatch, "ACL says \(length) bytes, has \(r.remaining)")
        }
        handle = header & 0x0FFF
        boundary = Boundary(rawValue: UInt8((header >> 12) & 0x3)) ?? .continuing // all four values exist
        data = r.rest()
    }

    public static func appendHeader(handle: UInt16, boundary: Boundary, length: Int, to out: inout [UInt8]) {
        out.appendLE(handle & 0x0FFF | UInt16(boundary.rawValue) << 12)
        out.appendLE(UInt16(truncatingIfNeeded: length))
    }

    public func encode(into out: inout [UInt8]) {
        Self.appendHeader(handle: handle, boundary: boundary, length: data.count, to: &out)
        out.append(contentsOf: data)
    }
}
