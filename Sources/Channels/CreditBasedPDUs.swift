import BlemuCore
import BlemuL2CAP

// The signalling PDUs of the credit based modes (Vol 3, Part A, 4.6, 4.7, 4.22-4.28): one value
// type per PDU, each with a total decoder of a command's data (the code and identifier are
// `SignalingCommand`'s) and an encoder to a command.

/// A signalling PDU of the credit based modes.
public protocol CreditBasedPDU: Equatable {
    static var code: UInt8 { get }
    init(data: ArraySlice<UInt8>) throws(DecodeError)
    func encode(into out: inout [UInt8])
}

extension CreditBasedPDU {
    /// The whole signalling command.
    public func command(identifier: UInt8) -> SignalingCommand {
        var data: [UInt8] = []
        encode(into: &data)
        return SignalingCommand(code: Self.code, identifier: identifier, data: data[...])
    }
}

/// The Result field of the connection responses (Vol 3, Part A, 4.23 and 4.26; the enhanced
/// response's 0x0004, 0x0009 and 0x000A say "some connections refused").
public enum CreditBasedResult: UInt16, Error, Sendable, CustomStringConvertible {
    case success = 0x0000
    case spsmNotSupported = 0x0002
    case noResources = 0x0004
    case insufficientAuthentication = 0x0005
    case insufficientAuthorization = 0x0006
    case insufficientEncryptionKeySize = 0x0007
    case insufficientEncryption = 0x0008
    case invalidSourceCID = 0x0009
    case sourceCIDAlreadyAllocated = 0x000A
    case unacceptableParameters = 0x000B
    /// Enhanced mode only (4.26).
    case invalidParameters = 0x000C

    public var description: String {
        switch self {
        case .success: "success"
        case .spsmNotSupported: "SPSM not supported"
        case .noResources: "no resources available"
        case .insufficientAuthentication: "insufficient authentication"
        case .insufficientAuthorization: "insufficient authorization"
        case .insufficientEncryptionKeySize: "insufficient encryption key size"
        case .insufficientEncryption: "insufficient encryption"
        case .invalidSourceCID: "invalid source CID"
        case .sourceCIDAlreadyAllocated: "source CID already allocated"
        case .unacceptableParameters: "unacceptable parameters"
        case .invalidParameters: "invalid parameters"
        }
    }
}

/// The ranges of the credit based modes.
public enum CreditBasedLimits {
    /// Vol 3, Part A, 2.1, Table 2.3: the dynamically allocated CIDs of an LE-U logical link.
    public static let dynamicCIDs: ClosedRange<UInt16> = 0x0040...0x007F
    /// Vol 3, Part A, 4.22: LE-U SPSMs, fixed 0x0001-0x007F (SIG assigned), dynamic 0x0080-0x00FF.
    public static let spsms: ClosedRange<UInt16> = 0x0001...0x00FF
    public static let dynamicSPSMs: ClosedRange<UInt16> = 0x0080...0x00FF
    /// 4.22: MTU at least 23, MPS 23-65533.
    public static let leMinimumMTU: UInt16 = 23
    public static let mpsRange: ClosedRange<UInt16> = 23...65533
    /// 4.25: the enhanced mode's MTU and MPS are at least 64.
    public static let enhancedMinimum: UInt16 = 64
    /// 4.25: one to five channels per enhanced request.
    public static let enhancedChannelsPerRequest = 5
    /// 4.24: the credit count of a channel never exceeds 65535.
    public static let maximumCredits = 65535
}

private func decodeCIDs(_ reader: inout ByteReader, _ what: String) throws(DecodeError) -> [UInt16] {
    guard reader.remaining % 2 == 0 else { throw DecodeError(.lengthMismatch, "\(what): odd number of CID bytes") }
    let count = reader.remaining / 2
    guard (1...CreditBasedLimits.enhancedChannelsPerRequest).contains(count) else {
        throw DecodeError(.invalidValue, "\(what): \(count) CIDs, 1 to 5 allowed")
    }
    var cids: [UInt16] = []
    cids.reserveCapacity(count)
    for _ in 0..<count { cids.append(try reader.u16()) }
    return cids
}

/// Vol 3, Part A, 4.22: LE Credit Based Connection Request.
public struct LECreditBasedConnectionRequest: CreditBasedPDU {
    public static let code = SignalingCode.leCreditBasedConnectionRequest
    public var spsm: UInt16
    public var sourceCID: UInt16
    public var mtu: UInt16
    public var mps: UInt16
    public var initialCredits: UInt16

    public init(spsm: UInt16, sourceCID: UInt16, mtu: UInt16, mps: UInt16, initialCredits: UInt16) {
        self.spsm = spsm; self.sourceCID = sourceCID; self.mtu = mtu; self.mps = mps; self.initialCredits = initialCredits
    }

    public init(data: ArraySlice<UInt8>) throws(DecodeError) {
        var r = ByteReader(data)
        spsm = try r.u16(); sourceCID = try r.u16(); mtu = try r.u16(); mps = try r.u16(); initialCredits = try r.u16()
        try r.expectEnd("LE Credit Based Connection Request")
    }

    public func encode(into out: inout [UInt8]) {
        for v in [spsm, sourceCID, mtu, mps, initialCredits] { out.appendLE(v) }
    }
}

/// Vol 3, Part A, 4.23: LE Credit Based Connection Response. A refusal carries zeros but the result.
public struct LECreditBasedConnectionResponse: CreditBasedPDU {
    public static let code = SignalingCode.leCreditBasedConnectionResponse
    public var destinationCID: UInt16
    public var mtu: UInt16
    public var mps: UInt16
    public var initialCredits: UInt16
    /// The raw Result: a peer may send one this side does not know (a refusal all the same).
    public var result: UInt16

    public init(destinationCID: UInt16, mtu: UInt16, mps: UInt16, initialCredits: UInt16, result: UInt16) {
        self.destinationCID = destinationCID; self.mtu = mtu; self.mps = mps; self.initialCredits = initialCredits; self.result = result
    }

    public static func refused(_ result: CreditBasedResult) -> Self {
        Self(destinationCID: 0, mtu: 0, mps: 0, initialCredits: 0, result: result.rawValue)
    }

    public init(data: ArraySlice<UInt8>) throws(DecodeError) {
        var r = ByteReader(data)
        destinationCID = try r.u16(); mtu = try r.u16(); mps = try r.u16(); initialCredits = try r.u16(); result = try r.u16()
        try r.expectEnd("LE Credit Based Connection Response")
    }

    public func encode(into out: inout [UInt8]) {
        for v in [destinationCID, mtu, mps, initialCredits, result] { out.appendLE(v) }
    }
}

/// Vol 3, Part A, 4.24: Flow Control Credit Indication. `cid` is the sender's own (source) CID
/// of the channel, the destination CID of the one that takes the credits.
public struct FlowControlCreditIndication: CreditBasedPDU {
    public static let code = SignalingCode.flowControlCredit
    public var cid: UInt16
    public var credits: UInt16

    public init(cid: UInt16, credits: UInt16) { self.cid = cid; self.credits = credits }

    public init(data: ArraySlice<UInt8>) throws(DecodeError) {
        var r = ByteReader(data)
        cid = try r.u16(); credits = try r.u16()
        try r.expectEnd("Flow Control Credit Indication")
    }

    public func encode(into out: inout [UInt8]) { out.appendLE(cid); out.appendLE(credits) }
}

/// Disconnection Request and Response have one layout (Vol 3, Part A, 4.6, 4.7): the destination
/// CID, then the source CID. One codec serves both.
public protocol DisconnectionPDU: CreditBasedPDU {
    /// The PDU's name in a decode error.
    static var name: String { get }
    var destinationCID: UInt16 { get }
    var sourceCID: UInt16 { get }
    init(destinationCID: UInt16, sourceCID: UInt16)
}

extension DisconnectionPDU {
    public init(data: ArraySlice<UInt8>) throws(DecodeError) {
        var r = ByteReader(data)
        let destinationCID = try r.u16(), sourceCID = try r.u16()
        try r.expectEnd(Self.name)
        self.init(destinationCID: destinationCID, sourceCID: sourceCID)
    }

    public func encode(into out: inout [UInt8]) { out.appendLE(destinationCID); out.appendLE(sourceCID) }
}

/// Vol 3, Part A, 4.6: Disconnection Request. The destination CID is the receiver's endpoint,
/// the source CID the sender's.
public struct DisconnectionRequest: DisconnectionPDU {
    public static let code = SignalingCode.disconnectionRequest
    public static let name = "Disconnection Request"
    public var destinationCID: UInt16
    public var sourceCID: UInt16

    public init(destinationCID: UInt16, sourceCID: UInt16) { self.destinationCID = destinationCID; self.sourceCID = sourceCID }
}

/// Vol 3, Part A, 4.7: Disconnection Response, the request's two CIDs echoed.
public struct DisconnectionResponse: DisconnectionPDU {
    public static let code = SignalingCode.disconnectionResponse
    public static let name = "Disconnection Response"
    public var destinationCID: UInt16
    public var sourceCID: UInt16

    public init(destinationCID: UInt16, sourceCID: UInt16) { self.destinationCID = destinationCID; self.sourceCID = sourceCID }
}

/// Vol 3, Part A, 4.25: Credit Based Connection Request (enhanced mode), one to five source CIDs.
public struct CreditBasedConnectionRequest: CreditBasedPDU {
    public static let code = SignalingCode.creditBasedConnectionRequest
    public var spsm: UInt16
    public var mtu: UInt16
    public var mps: UInt16
    public var initialCredits: UInt16
    public var sourceCIDs: [UInt16]

    public init(spsm: UInt16, mtu: UInt16, mps: UInt16, initialCredits: UInt16, sourceCIDs: [UInt16]) {
        self.spsm = spsm; self.mtu = mtu; self.mps = mps; self.initialCredits = initialCredits; self.sourceCIDs = sourceCIDs
    }

    public init(data: ArraySlice<UInt8>) throws(DecodeError) {
        var r = ByteReader(data)
        spsm = try r.u16(); mtu = try r.u16(); mps = try r.u16(); initialCredits = try r.u16()
        sourceCIDs = try decodeCIDs(&r, "Credit Based Connection Request")
    }

    public func encode(into out: inout [UInt8]) {
        for v in [spsm, mtu, mps, initialCredits] + sourceCIDs { out.appendLE(v) }
    }
}

/// Vol 3, Part A, 4.26: Credit Based Connection Response: one destination CID per requested
/// channel, 0x0000 for each refused.
public struct CreditBasedConnectionResponse: CreditBasedPDU {
    public static let code = SignalingCode.creditBasedConnectionResponse
    public var mtu: UInt16
    public var mps: UInt16
    public var initialCredits: UInt16
    public var result: UInt16
    public var destinationCIDs: [UInt16]

    public init(mtu: UInt16, mps: UInt16, initialCredits: UInt16, result: UInt16, destinationCIDs: [UInt16]) {
        self.mtu = mtu; self.mps = mps; self.initialCredits = initialCredits; self.result = result; self.destinationCIDs = destinationCIDs
    }

    /// Every channel refused: as many zero CIDs as were asked for (at most five).
    public static func refused(_ result: CreditBasedResult, channels: Int) -> Self {
        Self(mtu: 0, mps: 0, initialCredits: 0, result: result.rawValue,
             destinationCIDs: Array(repeating: 0, count: max(0, min(channels, CreditBasedLimits.enhancedChannelsPerRequest))))
    }

    public init(data: ArraySlice<UInt8>) throws(DecodeError) {
        var r = ByteReader(data)
        mtu = try r.u16(); mps = try r.u16(); initialCredits = try r.u16(); result = try r.u16()
        // A response refusing a request that could not be parsed may carry no CIDs at all.
        guard r.remaining % 2 == 0, r.remaining / 2 <= CreditBasedLimits.enhancedChannelsPerRequest else {
            throw DecodeError(.lengthMismatch, "Credit Based Connection Response: \(r.remaining) bytes of CIDs")
        }
        destinationCIDs = []
        while r.remaining > 0 { destinationCIDs.append(try r.u16()) }
    }

    public func encode(into out: inout [UInt8]) {
        for v in [mtu, mps, initialCredits, result] + destinationCIDs { out.appendLE(v) }
    }
}

/// Vol 3, Part A, 4.27: Credit Based Reconfigure Request: the new MTU and MPS of the sender's
/// receiving side, for one to five of its channels (its own CIDs, the receiver's destinations).
public struct CreditBasedReconfigureRequest: CreditBasedPDU {
    public static let code = SignalingCode.creditBasedReconfigureRequest
    public var mtu: UInt16
    public var mps: UInt16
    public var destinationCIDs: [UInt16]

    public init(mtu: UInt16, mps: UInt16, destinationCIDs: [UInt16]) {
        self.mtu = mtu; self.mps = mps; self.destinationCIDs = destinationCIDs
    }

    public init(data: ArraySlice<UInt8>) throws(DecodeError) {
        var r = ByteReader(data)
        mtu = try r.u16(); mps = try r.u16()
        destinationCIDs = try decodeCIDs(&r, "Credit Based Reconfigure Request")
    }

    public func encode(into out: inout [UInt8]) {
        for v in [mtu, mps] + destinationCIDs { out.appendLE(v) }
    }
}

/// The Result of a Credit Based Reconfigure Response (Vol 3, Part A, 4.28).
public enum ReconfigureResult: UInt16, Sendable {
    case success = 0x0000
    case mtuReductionNotAllowed = 0x0001
    case mpsReductionNotAllowed = 0x0002
    case invalidDestinationCID = 0x0003
    case unacceptableParameters = 0x0004
}

/// Vol 3, Part A, 4.28: Credit Based Reconfigure Response.
public struct CreditBasedReconfigureResponse: CreditBasedPDU {
    public static let code = SignalingCode.creditBasedReconfigureResponse
    public var result: UInt16

    public init(result: UInt16) { self.result = result }
    public init(_ result: ReconfigureResult) { self.result = result.rawValue }

    public init(data: ArraySlice<UInt8>) throws(DecodeError) {
        var r = ByteReader(data)
        result = try r.u16()
        try r.expectEnd("Credit Based Reconfigure Response")
    }

    public func encode(into out: inout [UInt8]) { out.appendLE(result) }
}
