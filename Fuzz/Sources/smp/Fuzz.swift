import BlemuCore
import BlemuCrypto
import BlemuSMP
import FuzzSupport

/// `smp`: both pairing roles — an `SMPInitiator` (the central's Security Manager) and an
/// `SMPResponder` (the peripheral's) — paired against each other over a link the input
/// controls: it delivers their PDUs in order, drops, tampers with or replays them, injects PDUs
/// of a chosen code with fuzzed fields, plays both users (the right passkey, a wrong one,
/// cancel, accept or reject a comparison), expires either side's 30 s timer, aborts, starts
/// pairings and tells a side its link is encrypted out of turn. The controller is honest: it
/// encrypts the link only when the key the initiator starts encryption with is the key the
/// responder holds (Vol 6, Part B, 5.1.3: the LTK both sides use).
///
/// Oracles beyond traps: a pairing both sides report complete yields the same keys on both
/// sides (the LTK with its EDIV and Rand, the key size, Secure Connections, authentication,
/// bonding) and the identities each side distributed, unless the input tampered with the link
/// after encryption started (an encrypted link cannot be tampered with); every PDU a side sends
/// decodes as an `SMPCommand` of a code that role sends (Vol 3, Part H, 3.3); a side that timed
/// out never sends again (3.4); memory stays bounded.
///
/// Input: two config bytes, then ops (byte mod 12, operands after):
///   config 0: bits 0–2 initiator IO capability (mod 5), bits 3–5 responder's, bit 6 initiator
///             Secure Connections, bit 7 responder Secure Connections
///   config 1: bit 0/1 initiator/responder bondable, bit 2/3 MITM asked/required, bit 4 SC only
///             (responder), bit 5 identities distributed, bits 6–7 responder's maximum key size
///             (16, 7, 10, 16)
///   0 n       n PDUs move (0: until nothing is in flight), in order, the users answering right
///   1 d i b   the next PDU of direction d (bit 0: to the responder) has byte i xored with b
///   2 d       the next PDU of direction d is dropped
///   3 d k …   a PDU of code k (table below) with fuzzed fields to side d (bit 1: a length off by one)
///   4 d k     PDU k of the trace (everything sent so far) replayed to side d
///   5 d p     side d's user types: bit 0 of p: the right passkey, else a wrong one; p = 0xFF cancels
///   6 d a     side d's user answers the comparison (a bit 0)
///   7 d       side d's SMP timer expires
///   8 d r     side d aborts with reason r
///   9 s       the initiator starts (s bit 0: answering a Security Request asking for MITM)
///   10 d      side d is told the link is encrypted (out of turn)
///   11        the responder sends its Security Request
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    var input = FuzzBytes(data, size)
    let bench = Bench(input.u8(), input.u8())
    let memory = MemoryBound(bound: 1 << 20)
    var ops = 0
    while !input.isAtEnd, ops < 4_000 {
        ops += 1
        let op = input.u8() % 12
        let d = input.u8() & 1 == 1
        switch op {
        case 0:
            let n = Int(input.u8())
            bench.move(n == 0 ? 1_000 : n, usersAnswer: true)
        case 1: bench.tamper(toResponder: d, index: Int(input.u8()), mask: input.u8())
        case 2: bench.drop(toResponder: d)
        case 3:
            let pdu = typedSMPPDU(&input)
            bench.inject(pdu, toResponder: d)
        case 4: bench.replay(Int(input.u8()), toResponder: d)
        case 5:
            let p = input.u8()
            bench.userTypes(responder: d, right: p & 1 == 1, cancel: p == 0xFF)
        case 6: bench.userCompares(responder: d, accept: input.u8() & 1 == 1)
        case 7: bench.timerExpires(responder: d)
        case 8: bench.abort(responder: d, reason: input.u8())
        case 9: bench.start(mitm: d)
        case 10: bench.encrypted(responder: d)
        default: bench.securityRequest()
        }
        memory.check("op \(op)")
    }
    // The link settles honestly: what is in flight moves, the users answer right.
    bench.move(1_000, usersAnswer: true)
    bench.checkKeysAgree()
    memory.check("the end")
    return 0
}

/// Private keys of both sides, fixed for the process: a P-256 key pair per pairing would cost
/// more than the rest of an input. The public keys differ, as they must (a reflected key fails).
let initiatorKeyPair = SMPKeyPair()
let responderKeyPair = SMPKeyPair()

final class Bench {
    var initiator: SMPInitiator
    var responder: SMPResponder
    let identities: Bool
    let initiatorIdentity = SMPIdentity(resolvingKey: [UInt8](0x50..<0x60),
                                        address: LEAddress(BluetoothAddress("C1:22:33:44:55:66")!, isRandom: true))
    let responderIdentity = SMPIdentity(resolvingKey: [UInt8](0x30..<0x40),
                                        address: LEAddress(BluetoothAddress("D4:AA:BB:CC:DD:EE")!, isRandom: true))

    private var toResponder: [[UInt8]] = []
    private var toInitiator: [[UInt8]] = []
    private var trace: [[UInt8]] = []
    private var tamper: [Bool: (Int, UInt8)] = [:]

    /// Passkeys shown and values to compare, per side (true: the responder).
    private var shown: [Bool: UInt32] = [:]
    private var asked: [Bool: Bool] = [:]
    private var comparing: [Bool: Bool] = [:]
    private var initiatorKey: SMPLongTermKey?
    private var responderKey: SMPLongTermKey?
    private var encryptedHonestly = false
    /// The link was encrypted once: from then on tampering is outside what SMP can detect.
    private var encryptionStarted = false
    private var tamperedAfterEncryption = false
    private var initiatorPaired: SMPPairingResult?
    private var responderPaired: SMPPairingResult?

    init(_ c0: UInt8, _ c1: UInt8) {
        let io = SMPIOCapability.allCases
        identities = c1 & 0x20 != 0
        let maximum: [UInt8] = [16, 7, 10, 16]
        let initiatorAddress = LEAddress(BluetoothAddress("C0:11:22:33:44:55")!, isRandom: true)
        let responderAddress = LEAddress(BluetoothAddress("06:05:04:03:02:01")!, isRandom: false)
        initiator = SMPInitiator(
            configuration: SMPInitiatorConfiguration(
                ioCapability: io[Int(c0 & 0x07) % io.count], bondable: c1 & 0x01 != 0, requireMITM: false,
                requestMITM: c1 & 0x04 != 0, secureConnections: c0 & 0x40 != 0,
                identity: c1 & 0x20 != 0 ? initiatorIdentity : nil),
            initiatorAddress: initiatorAddress, responderAddress: responderAddress,
            random: SeededRandom(seed: 1), keyPair: initiatorKeyPair)
        responder = SMPResponder(
            configuration: SMPResponderConfiguration(
                ioCapability: io[Int((c0 >> 3) & 0x07) % io.count], bondable: c1 & 0x02 != 0, requireMITM: c1 & 0x08 != 0,
                secureConnections: c0 & 0x80 != 0, secureConnectionsOnly: c1 & 0x10 != 0,
                maximumEncryptionKeySize: maximum[Int(c1 >> 6)],
                identity: c1 & 0x20 != 0 ? responderIdentity : nil),
            initiatorAddress: initiatorAddress, responderAddress: responderAddress,
            random: SeededRandom(seed: 2), keyPair: responderKeyPair)
    }

    // MARK: What each side says

    private func took(_ out: SMPInitiatorOutput, timedOutBefore: Bool) {
        for pdu in out.pdus {
            fuzzCheck(!timedOutBefore, "the initiator sent \(hex(pdu)) after its SMP timer expired")
            guard let command = try? SMPCommand(pdu: pdu[...]) else { fuzzFailure("the initiator sent a malformed PDU \(hex(pdu))") }
            switch command {
            case .pairingResponse, .securityRequest: fuzzFailure("the initiator sent \(hex(pdu)), a responder's PDU")
            default: break
            }
            toResponder.append(pdu)
            trace.append(pdu)
        }
        for event in out.events {
            switch event {
            case .displayPasskey(let p):
                fuzzCheck(p <= 999_999, "the initiator shows passkey \(p)")
                shown[false] = p
            case .passkeyRequested: asked[false] = true
            case .confirmNumericComparison(let v):
                fuzzCheck(v <= 999_999, "the initiator compares \(v)")
                comparing[false] = true
            case .startEncryption(let key):
                initiatorKey = key
                encryptIfKeysMatch()
            case .paired(let result): initiatorPaired = result
            // Asked only when the configuration says so (`confirmsJustWorks`), which these never do.
            case .confirmJustWorks: fuzzFailure("the initiator asked to confirm Just Works unasked")
            case .securityRequested, .failed: break
            }
        }
    }

    private func took(_ out: SMPResponderOutput, timedOutBefore: Bool) {
        for pdu in out.pdus {
            fuzzCheck(!timedOutBefore, "the responder sent \(hex(pdu)) after its SMP timer expired")
            guard let command = try? SMPCommand(pdu: pdu[...]) else { fuzzFailure("the responder sent a malformed PDU \(hex(pdu))") }
            switch command {
            case .pairingRequest, .keypressNotification: fuzzFailure("the responder sent \(hex(pdu)), an initiator's PDU")
            default: break
            }
            toInitiator.append(pdu)
            trace.append(pdu)
        }
        for event in out.events {
            switch event {
            case .displayPasskey(let p):
                fuzzCheck(p <= 999_999, "the responder shows passkey \(p)")
                shown[true] = p
            case .passkeyRequested: asked[true] = true
            case .confirmNumericComparison(let v):
                fuzzCheck(v <= 999_999, "the responder compares \(v)")
                comparing[true] = true
            case .encryptionKeyReady(let key):
                responderKey = key
                encryptIfKeysMatch()
            case .paired(let result): responderPaired = result
            case .confirmJustWorks: fuzzFailure("the responder asked to confirm Just Works unasked")
            case .failed: break
            }
        }
    }

    /// The controller: LE Start Encryption with the initiator's key succeeds when the responder
    /// answers the LTK request with the same key.
    private func encryptIfKeysMatch() {
        guard !encryptedHonestly, let i = initiatorKey, let r = responderKey, i.key == r.key else { return }
        encryptedHonestly = true
        encryptionStarted = true
        let rt = responder.hasTimedOut, it = initiator.hasTimedOut
        took(responder.linkEncrypted(), timedOutBefore: rt)
        took(initiator.linkEncrypted(), timedOutBefore: it)
    }

    private func deliver(_ pdu: [UInt8], toResponder: Bool) {
        if toResponder {
            let before = responder.hasTimedOut
            took(responder.receive(pdu[...]), timedOutBefore: before)
        } else {
            let before = initiator.hasTimedOut
            took(initiator.receive(pdu[...]), timedOutBefore: before)
        }
    }

    // MARK: Ops

    func move(_ count: Int, usersAnswer: Bool) {
        var moved = 0
        while moved < count {
            moved += 1
            if !toResponder.isEmpty {
                var pdu = toResponder.removeFirst()
                if let (i, b) = tamper.removeValue(forKey: true), i < pdu.count { pdu[i] ^= b; adversary() }
                deliver(pdu, toResponder: true)
            } else if !toInitiator.isEmpty {
                var pdu = toInitiator.removeFirst()
                if let (i, b) = tamper.removeValue(forKey: false), i < pdu.count { pdu[i] ^= b; adversary() }
                deliver(pdu, toResponder: false)
            } else if usersAnswer, answerOneUser() {
                continue
            } else {
                return
            }
        }
    }

    /// The honest users: each types what the other side shows, accepts a comparison.
    private func answerOneUser() -> Bool {
        for side in [false, true] {
            if asked[side] == true { userTypes(responder: side, right: true, cancel: false); return true }
            if comparing[side] == true { userCompares(responder: side, accept: true); return true }
        }
        return false
    }

    private func adversary() { if encryptionStarted { tamperedAfterEncryption = true } }

    func tamper(toResponder: Bool, index: Int, mask: UInt8) { tamper[toResponder] = (index % 80, mask) }

    func drop(toResponder: Bool) {
        if toResponder, !self.toResponder.isEmpty { self.toResponder.removeFirst(); adversary() }
        if !toResponder, !toInitiator.isEmpty { toInitiator.removeFirst(); adversary() }
    }

    func inject(_ pdu: [UInt8], toResponder: Bool) {
        adversary()
        deliver(pdu, toResponder: toResponder)
    }

    func replay(_ index: Int, toResponder: Bool) {
        guard !trace.isEmpty else { return }
        inject(trace[index % trace.count], toResponder: toResponder)
    }

    func userTypes(responder side: Bool, right: Bool, cancel: Bool) {
        asked[side] = false
        // The passkey on the other side's display, or on this side's own (both type: 2.3.5.3).
        let shownValue = shown[!side] ?? shown[side] ?? 123_456
        let typed: UInt32? = cancel ? nil : right ? shownValue : (shownValue + 1) % 1_000_000
        if side {
            let before = responder.hasTimedOut
            took(responder.passkeyEntered(typed), timedOutBefore: before)
        } else {
            let before = initiator.hasTimedOut
            took(initiator.passkeyEntered(typed), timedOutBefore: before)
        }
    }

    func userCompares(responder side: Bool, accept: Bool) {
        comparing[side] = false
        if side {
            let before = responder.hasTimedOut
            took(responder.numericComparisonConfirmed(accept), timedOutBefore: before)
        } else {
            let before = initiator.hasTimedOut
            took(initiator.numericComparisonConfirmed(accept), timedOutBefore: before)
        }
    }

    func timerExpires(responder side: Bool) {
        if side {
            took(responder.timerExpired(), timedOutBefore: false)
            fuzzCheck(responder.hasTimedOut || !responder.isPairing, "the responder pairs on after its timer expired")
        } else {
            took(initiator.timerExpired(), timedOutBefore: false)
            fuzzCheck(initiator.hasTimedOut || !initiator.isPairing, "the initiator pairs on after its timer expired")
        }
    }

    func abort(responder side: Bool, reason: UInt8) {
        let reasons = SMPPairingFailedReason.allCases
        let r = reasons[Int(reason) % reasons.count]
        if side {
            let before = responder.hasTimedOut
            took(responder.abort(r), timedOutBefore: before)
        } else {
            let before = initiator.hasTimedOut
            took(initiator.abort(r), timedOutBefore: before)
        }
    }

    func start(mitm: Bool) {
        let before = initiator.hasTimedOut
        took(initiator.start(answering: mitm ? SMPAuthRequirements(bonding: true, mitm: true, secureConnections: true) : nil),
             timedOutBefore: before)
    }

    func encrypted(responder side: Bool) {
        encryptionStarted = true
        tamperedAfterEncryption = true
        if side {
            let before = responder.hasTimedOut
            took(responder.linkEncrypted(), timedOutBefore: before)
        } else {
            let before = initiator.hasTimedOut
            took(initiator.linkEncrypted(), timedOutBefore: before)
        }
    }

    func securityRequest() {
        guard !responder.hasTimedOut else { return }
        toInitiator.append(responder.securityRequest)
        trace.append(responder.securityRequest)
    }

    /// A pairing both sides completed yields the same keys on both sides.
    func checkKeysAgree() {
        guard let i = initiatorPaired, let r = responderPaired, !tamperedAfterEncryption else { return }
        fuzzCheck(i.longTermKey == r.longTermKey,
                  "the sides paired with different LTKs: initiator \(String(describing: i.longTermKey)), responder \(String(describing: r.longTermKey))")
        fuzzCheck(i.encryptionKeySize == r.encryptionKeySize, "key sizes \(i.encryptionKeySize) and \(r.encryptionKeySize)")
        fuzzCheck(i.secureConnections == r.secureConnections, "Secure Connections \(i.secureConnections) and \(r.secureConnections)")
        fuzzCheck(i.authenticated == r.authenticated, "authenticated \(i.authenticated) and \(r.authenticated)")
        fuzzCheck(i.bonded == r.bonded, "bonded \(i.bonded) and \(r.bonded)")
        if let identity = i.peerIdentity { fuzzCheck(identity == responderIdentity, "the initiator holds identity \(identity)") }
        if let identity = r.peerIdentity { fuzzCheck(identity == initiatorIdentity, "the responder holds identity \(identity)") }
        fuzzCheck(!i.peerUsedDebugKey && !r.peerUsedDebugKey, "a debug key was reported where none was used")
    }
}

@_cdecl("smp_main")
public func smpMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    blemu_fuzz_driver(argc, argv) { data, size in fuzz(data, size) }
}
