import Testing
import BlemuCore
import BlemuTestSupport
import BlemuCrypto
@testable import BlemuSMP

/// The initiator side of pairing, played by the tests with the toolbox alone, so the responder
/// is checked against the spec's equations rather than against itself.
struct TestCentral {
    static let centralAddress = LEAddress(BluetoothAddress("C1:22:33:44:55:66")!, isRandom: true)
    static let peripheralAddress = LEAddress(BluetoothAddress("D4:AA:BB:CC:DD:EE")!, isRandom: true)

    var features: SMPPairingFeatures
    var random = SeededRandom(seed: 0xC0FFEE)
    var keyPair = try! SMPKeyPair(privateKeyBigEndian: be(AppendixD.privateA))

    var preq: [UInt8] = []
    var pres: [UInt8] = []
    var response: SMPPairingFeatures?
    var peerPublicKey: SMPPublicKey?
    var peerConfirm: [UInt8] = []
    var localRandom: [UInt8] = []
    var peerRandom: [UInt8] = []

    init(io: SMPIOCapability = .noInputNoOutput, bonding: Bool = true, mitm: Bool = false, secureConnections: Bool = true,
         maximumKeySize: UInt8 = 16, oob: Bool = false,
         initiatorKeys: SMPKeyDistribution = [.identityKey, .signingKey],
         responderKeys: SMPKeyDistribution = [.encryptionKey, .identityKey, .signingKey]) {
        features = SMPPairingFeatures(ioCapability: io, oobDataPresent: oob,
                                      authRequirements: SMPAuthRequirements(bonding: bonding, mitm: mitm, secureConnections: secureConnections),
                                      maximumEncryptionKeySize: maximumKeySize,
                                      initiatorKeyDistribution: initiatorKeys, responderKeyDistribution: responderKeys)
    }

    static func responder(_ configuration: SMPResponderConfiguration, seed: UInt64 = 7, keyPair: SMPKeyPair? = nil) -> SMPResponder {
        SMPResponder(configuration: configuration, initiatorAddress: centralAddress, responderAddress: peripheralAddress,
                     random: SeededRandom(seed: seed), keyPair: keyPair)
    }

    mutating func random16() -> [UInt8] { random.bytes(16) }

    // MARK: Steps

    /// Sends Pairing Request; returns the Pairing Response the responder sent (or nil).
    mutating func requestPairing(_ responder: inout SMPResponder) -> (SMPPairingResponse?, SMPResponderOutput) {
        preq = SMPPairingRequest(features).encoded
        let out = responder.receive(preq[...])
        guard let first = out.pdus.first, let response = try? SMPPairingResponse(pdu: first[...]) else { return (nil, out) }
        pres = first
        self.response = response.features
        return (response, out)
    }

    /// Secure Connections: sends our public key; returns the responder's output.
    mutating func sendPublicKey(_ responder: inout SMPResponder) -> SMPResponderOutput {
        let out = responder.receive(SMPPairingPublicKey(key: keyPair.publicKey).encoded[...])
        if let first = out.pdus.first, let key = try? SMPPairingPublicKey(pdu: first[...]) { peerPublicKey = key.key }
        if out.pdus.count > 1, let confirm = try? SMPPairingConfirm(pdu: out.pdus[1][...]) { peerConfirm = confirm.value }
        return out
    }

    var dhKey: [UInt8] { keyPair.dhKey(with: peerPublicKey!) }

    /// Just Works / Numeric Comparison: sends Na, checks Cb against Nb. Returns the output.
    mutating func exchangeNonces(_ responder: inout SMPResponder) -> SMPResponderOutput {
        localRandom = random16()
        let out = responder.receive(SMPPairingRandom(value: localRandom).encoded[...])
        if let first = out.pdus.first, let nb = try? SMPPairingRandom(pdu: first[...]) {
            peerRandom = nb.value
            #expect(SMPCrypto.f4(u: peerPublicKey!.x, v: keyPair.publicKey.x, x: nb.value, z: 0) == peerConfirm,
                    "Cb must be f4(PKbx, PKax, Nb, 0)")
        }
        return out
    }

    /// The six digits the central shows in Numeric Comparison: g2(PKax, PKbx, Na, Nb).
    var numericValue: UInt32 {
        SMPCrypto.numericComparisonValue(u: keyPair.publicKey.x, v: peerPublicKey!.x, x: localRandom, y: peerRandom)
    }

    /// Passkey Entry, the 20 rounds; `enter` is called when the responder waits for its user
    /// (after the first confirm), and returns the output that carried Cb1.
    mutating func passkeyRounds(_ responder: inout SMPResponder, passkey: UInt32,
                                enter: ((inout SMPResponder) -> SMPResponderOutput)? = nil) -> SMPResponderOutput? {
        for round in 0..<20 {
            let z = 0x80 | UInt8((passkey >> UInt32(round)) & 1)
            localRandom = random16()
            let cai = SMPCrypto.f4(u: keyPair.publicKey.x, v: peerPublicKey!.x, x: localRandom, z: z)
            var out = responder.receive(SMPPairingConfirm(value: cai).encoded[...])
            if round == 0, let enter {
                #expect(out.pdus.isEmpty, "the responder waits for its user before Cb1")
                out = enter(&responder)
            }
            guard out.pdus.count == 1, let cb = try? SMPPairingConfirm(pdu: out.pdus[0][...]) else { return out }
            let randomOut = responder.receive(SMPPairingRandom(value: localRandom).encoded[...])
            guard randomOut.pdus.count == 1, let nb = try? SMPPairingRandom(pdu: randomOut.pdus[0][...]) else { return randomOut }
            #expect(SMPCrypto.f4(u: peerPublicKey!.x, v: keyPair.publicKey.x, x: nb.value, z: z) == cb.value,
                    "Cbi must be f4(PKbx, PKax, Nbi, rbi)")
            peerRandom = nb.value
        }
        return nil
    }

    /// Sends Ea = f6(MacKey, Na, Nb, rb, IOcapA, A, B) (or a corrupted one); checks Eb and
    /// returns the output and the LTK the central derived.
    mutating func sendDHKeyCheck(_ responder: inout SMPResponder, passkey: UInt32? = nil, corrupt: Bool = false)
        -> (SMPResponderOutput, ltk: [UInt8]) {
        let a = Self.centralAddress, b = Self.peripheralAddress
        let (macKey, ltk) = SMPCrypto.f5(w: dhKey, n1: localRandom, n2: peerRandom, a1: a, a2: b)
        let r = passkey.map { SMPCrypto.temporaryKey($0) } ?? [UInt8](repeating: 0, count: 16)
        var ea = SMPCrypto.f6(w: macKey, n1: localRandom, n2: peerRandom, r: r, ioCap: features.ioCapField, a1: a, a2: b)
        if corrupt { ea[3] ^= 0x40 }
        let out = responder.receive(SMPPairingDHKeyCheck(value: ea).encoded[...])
        if let first = out.pdus.first, let eb = try? SMPPairingDHKeyCheck(pdu: first[...]) {
            #expect(eb.value == SMPCrypto.f6(w: macKey, n1: peerRandom, n2: localRandom, r: r,
                                             ioCap: response!.ioCapField, a1: b, a2: a), "Eb must be f6(MacKey, Nb, Na, ra, IOcapB, B, A)")
        }
        return (out, ltk)
    }

    // MARK: LE legacy

    /// Sends Mconfirm = c1(TK, Mrand, ...) and returns the output (Sconfirm when the TK is known).
    mutating func sendLegacyConfirm(_ responder: inout SMPResponder, tk: [UInt8]) -> SMPResponderOutput {
        localRandom = random16()
        let mconfirm = SMPCrypto.c1(k: tk, r: localRandom, preq: preq, pres: pres,
                                    initiator: Self.centralAddress, responder: Self.peripheralAddress)
        let out = responder.receive(SMPPairingConfirm(value: mconfirm).encoded[...])
        if let first = out.pdus.first, let confirm = try? SMPPairingConfirm(pdu: first[...]) { peerConfirm = confirm.value }
        return out
    }

    /// Sends Mrand; checks Srand against Sconfirm; returns the output and the STK the central derived.
    mutating func sendLegacyRandom(_ responder: inout SMPResponder, tk: [UInt8], random override: [UInt8]? = nil)
        -> (SMPResponderOutput, stk: [UInt8]) {
        let out = responder.receive(SMPPairingRandom(value: override ?? localRandom).encoded[...])
        var stk: [UInt8] = []
        if let first = out.pdus.first, let srand = try? SMPPairingRandom(pdu: first[...]) {
            peerRandom = srand.value
            #expect(SMPCrypto.c1(k: tk, r: srand.value, preq: preq, pres: pres, initiator: Self.centralAddress,
                                 responder: Self.peripheralAddress) == peerConfirm, "Sconfirm must be c1(TK, Srand, ...)")
            stk = SMPCrypto.s1(k: tk, r1: srand.value, r2: localRandom)
        }
        return (out, stk)
    }
}

extension SMPResponderOutput {
    var decoded: [SMPCommand] { pdus.compactMap { try? SMPCommand(pdu: $0[...]) } }
    var failure: SMPPairingFailedReason? {
        for command in decoded { if case .pairingFailed(let failed) = command { return failed.reason } }
        return nil
    }
    var encryptionKey: SMPLongTermKey? {
        for event in events { if case .encryptionKeyReady(let key) = event { return key } }
        return nil
    }
    var paired: SMPPairingResult? {
        for event in events { if case .paired(let result) = event { return result } }
        return nil
    }
}
