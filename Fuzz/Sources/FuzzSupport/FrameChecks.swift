import BlemuCore
import BlemuHCI
import BlemuL2CAP
import BlemuSMP
import BlemuSimulator

/// What the peripheral's host may send on its fixed channels, checked on every whole L2CAP
/// frame the simulated controller reassembles (its `onFrame`); a violation aborts the run (see
/// `fuzzFailure`). The controller checks the ACL rules below (boundaries, buffers, handles).
/// - ATT: PDUs no longer than the bearer's MTU allows, and of a kind a server sends;
/// - LE signalling: commands that decode, with a nonzero identifier;
/// - SMP: well-formed PDUs a pairing responder sends (Vol 3, Part H, 3.3);
/// - nothing on any other channel.
final class FrameChecks {
    /// Whether the harness alone speaks for the controller, so links are what it says.
    let truthful: Bool
    /// The longest ATT PDU the peripheral may send on a link: 23 until it answered an Exchange MTU.
    private var attLimit: [UInt16: Int] = [:]
    /// `BLEMU_FUZZ_TRACE=1`: print the L2CAP frames both ways.
    let trace = fuzzEnvironmentFlag("BLEMU_FUZZ_TRACE")

    init(truthful: Bool) { self.truthful = truthful }

    func linkEvent(_ event: SimulatedController.LinkEvent) {
        switch event {
        case .opened(let handle): if truthful { attLimit[handle] = 23 }
        case .closed(let handle): attLimit[handle] = nil
        case .reset: attLimit.removeAll()
        }
    }

    func check(handle: UInt16, cid: UInt16, _ payload: ArraySlice<UInt8>) {
        if trace { writeStandardError("< handle \(handle) cid \(cid): \(hex(Array(payload)))\n") }
        switch cid {
        case L2CAPChannel.att:
            guard let opcode = payload.first else { fuzzFailure("empty ATT PDU sent") }
            // When the fuzz input speaks for the controller it can reopen a handle under a
            // link's feet, so only the protocol's ceiling is certain then.
            let limit = truthful ? attLimit[handle] ?? 23 : 517
            fuzzCheck(payload.count <= limit, "ATT PDU \(opcode) of \(payload.count) bytes on a bearer allowing \(limit)")
            // What a server sends: Error Response, responses, notifications and indications.
            let serverOpcodes: Set<UInt8> = [0x01, 0x03, 0x05, 0x07, 0x09, 0x0B, 0x0D, 0x0F, 0x11, 0x13, 0x17, 0x19,
                                             0x1B, 0x1D, 0x21, 0x23]
            fuzzCheck(serverOpcodes.contains(opcode), "the server sent ATT opcode \(opcode), which is not a server PDU")
            if opcode == 0x03 { attLimit[handle] = 517 }
        case L2CAPChannel.leSignaling:
            guard let command = try? SignalingCommand(frame: payload) else {
                fuzzFailure("the host sent a malformed LE signalling frame \(Array(payload))")
            }
            fuzzCheck(command.identifier != 0, "the host sent a signalling command with identifier 0")
        case L2CAPChannel.securityManager:
            guard let command = try? SMPCommand(pdu: payload) else {
                fuzzFailure("the host sent a malformed SMP PDU \(Array(payload))")
            }
            fuzzCheck(command.code != .pairingRequest && command.code != .keypressNotification,
                      "the host sent SMP code \(command.code.rawValue), which a responder never sends")
        case 0x0040...0x007F:
            // A K-frame of a credit based channel (Vol 3, Part A, 3.4.3, 4.22): at most the
            // largest MPS there is (the peer's MPS is checked by the channel tests).
            fuzzCheck(payload.count <= 65533, "the host sent a \(payload.count)-byte K-frame on channel \(cid)")
        default:
            fuzzFailure("the host sent an L2CAP frame on channel \(cid), neither a fixed nor a dynamic LE channel")
        }
    }
}
