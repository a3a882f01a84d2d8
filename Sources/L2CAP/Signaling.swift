import BlemuCore

/// LE signalling channel commands (Vol 3, Part A, 4), as blemu needs them as a peripheral.
public enum SignalingCode {
    public static let commandReject: UInt8 = 0x01
    public static let disconnectionRequest: UInt8 = 0x06
    public static let disconnectionResponse: UInt8 = 0x07
    public static let connectionParameterUpdateRequest: UInt8 = 0x12
    public static let connectionParameterUpdateResponse: UInt8 = 0x13
    public static let leCreditBasedConnectionRequest: UInt8 = 0x14
    public static let leCreditBasedConnectionResponse: UInt8 = 0x15
    public static let flowControlCredit: UInt8 = 0x16
    public static let creditBasedConnectionRequest: UInt8 = 0x17
    public static let creditBasedConnectionResponse: UInt8 = 0x18
    public static let creditBasedReconfigureRequest: UInt8 = 0x19
    public static let creditBasedReconfigureResponse: UInt8 = 0x1A

    /// The codes of the credit based modes and their channels' disconnection (4.6, 4.7, 4.22-4.28).
    public static func isCreditBased(_ code: UInt8) -> Bool {
        code == disconnectionRequest || code == disconnectionResponse || (leCreditBasedConnectionRequest...creditBasedReconfigureResponse).contains(code)
    }

    /// Codes that are responses (or the credit indication): an unknown one gets no Command Reject.
    public static func isResponse(_ code: UInt8) -> Bool {
        [commandReject, disconnectionResponse, connectionParameterUpdateResponse, leCreditBasedConnectionResponse,
         flowControlCredit, creditBasedConnectionResponse, creditBasedReconfigureResponse].contains(code)
    }
}

/// One signalling command: code, identifier, length, data (Vol 3, Part A, 4, Figure 4.3).
public struct SignalingCommand: Equatable {
    public var code: UInt8
    public var identifier: UInt8
    public var data: ArraySlice<UInt8>

    public init(code: UInt8, identifier: UInt8, data: ArraySlice<UInt8>) {
        self.code = code
        self.identifier = identifier
        self.data = data
    }

    /// Decodes one command from an LE signalling frame. LE frames carry exactly one
    /// command (Vol 3, Part A, 4): anything after it is an error.
    public init(frame: ArraySlice<UInt8>) throws(DecodeError) {
        var r = ByteReader(frame)
        code = try r.u8()
        identifier = try r.u8()
        let length = Int(try r.u16())
        guard r.remaining == length else {
            throw DecodeError(.lengthMismatch, "signalling command says \(length) bytes, frame has \(r.remaining)")
        }
        data = r.rest()
    }

    public func encode(into out: inout [UInt8]) {
        out.append(code)
        out.append(identifier)
        out.appendLE(UInt16(truncatingIfNeeded: data.count))
        out.append(contentsOf: data)
    }

    /// Vol 3, Part A, 4.1: Command Reject, reason 0x0000 = Command not understood.
    public static func commandReject(identifier: UInt8, reason: UInt16 = 0x0000, data extra: [UInt8] = []) -> SignalingCommand {
        var d: [UInt8] = []
        d.appendLE(reason)
        d.append(contentsOf: extra)
        return SignalingCommand(code: SignalingCode.commandReject, identifier: identifier, data: d[...])
    }

    /// Vol 3, Part A, 4.1: Command Reject, reason 0x0002 Invalid CID in request. Its data is the
    /// local endpoint, then the remote endpoint, as the side that rejects sees them. For a
    /// Disconnection Request (4.6) the local endpoint is the request's Destination CID ("the
    /// channel endpoint on the device receiving this request") and the remote one its Source CID.
    public static func invalidCIDReject(identifier: UInt8, localCID: UInt16, remoteCID: UInt16) -> SignalingCommand {
        var cids: [UInt8] = []
        cids.appendLE(localCID)
        cids.appendLE(remoteCID)
        return commandReject(identifier: identifier, reason: 0x0002, data: cids)
    }

    /// Vol 3, Part A, 4.20: interval min/max (1.25 ms), latency, timeout (10 ms).
    public static func connectionParameterUpdateRequest(identifier: UInt8, intervalMin: UInt16, intervalMax: UInt16,
                                                        latency: UInt16, timeout: UInt16) -> SignalingCommand {
        var d: [UInt8] = []
        for v in [intervalMin, intervalMax, latency, timeout] { d.appendLE(v) }
        return SignalingCommand(code: SignalingCode.connectionParameterUpdateRequest, identifier: identifier, data: d[...])
    }

    /// Vol 3, Part A, 4.23: refuse an LE credit based connection; result 0x0002 = SPSM not supported.
    public static func leCreditBasedConnectionRefused(identifier: UInt8, result: UInt16 = 0x0002) -> SignalingCommand {
        var d: [UInt8] = []
        for v in [UInt16(0), 0, 0, 0, result] { d.appendLE(v) }
        return SignalingCommand(code: SignalingCode.leCreditBasedConnectionResponse, identifier: identifier, data: d[...])
    }

    /// Vol 3, Part A, 4.26: refuse every channel of an enhanced credit based request.
    public static func creditBasedConnectionRefused(identifier: UInt8, channels: Int, result: UInt16 = 0x0002) -> SignalingCommand {
        var d: [UInt8] = []
        for v in [UInt16(0), 0, 0, result] { d.appendLE(v) }
        for _ in 0..<max(0, min(channels, 5)) { d.appendLE(UInt16(0)) }
        return SignalingCommand(code: SignalingCode.creditBasedConnectionResponse, identifier: identifier, data: d[...])
    }
}

/// Security Manager (Vol 3, Part H, 3.5.5): until pairing exists every SMP command is answered
/// with Pairing Failed, reason Pairing Not Supported (0x05).
public enum SecurityManager {
    public static let pairingFailed: UInt8 = 0x05
    public static let pairingNotSupported: UInt8 = 0x05

    /// The answer to an SMP PDU, or nil when none is due (an empty PDU, a Pairing Failed, or a
    /// reserved code: "If a packet is received with a reserved Code it shall be ignored",
    /// Vol 3, Part H, 3.3; codes 0x01-0x0E are defined).
    public static func answer(to pdu: ArraySlice<UInt8>) -> [UInt8]? {
        guard let code = pdu.first, (0x01...0x0E).contains(code), code != pairingFailed else { return nil }
        return [pairingFailed, pairingNotSupported]
    }
}
