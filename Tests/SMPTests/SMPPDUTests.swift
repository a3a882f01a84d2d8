import Testing
import BlemuCore
import BlemuTestSupport
import BlemuCrypto
@testable import BlemuSMP

@Suite struct SMPPDUTests {
    static let publicKeyPDU = "0C" + Hex.bytes(le(AppendixD.publicAX)) + Hex.bytes(le(AppendixD.publicAY))

    /// One valid PDU per command, as it is on the air.
    static let samples: [String] = [
        "01 04 00 2D 10 0F 0F",                       // Pairing Request: KeyboardDisplay, bond+MITM+SC+CT2, 16, all keys
        "02 03 00 09 07 02 03",                       // Pairing Response: NoInputNoOutput, bond+SC, 7
        "03 000102030405060708090A0B0C0D0E0F",        // Pairing Confirm
        "04 F0F1F2F3F4F5F6F7F8F9FAFBFCFDFEFF",        // Pairing Random
        "05 0B",                                      // Pairing Failed: DHKey Check Failed
        "06 00112233445566778899AABBCCDDEEFF",        // Encryption Information
        "07 3412 0807060504030201",                   // Central Identification
        "08 FFEEDDCCBBAA99887766554433221100",        // Identity Information
        "09 01 665544332211",                         // Identity Address Information (static random)
        "0A 0F0E0D0C0B0A09080706050403020100",        // Signing Information
        "0B 0D",                                      // Security Request
        publicKeyPDU,                                 // Pairing Public Key (Appendix D.1 PKa)
        "0D A0A1A2A3A4A5A6A7A8A9AAABACADAEAF",        // Pairing DHKey Check
        "0E 04",                                      // Keypress Notification: entry completed
    ]

    @Test(arguments: samples)
    func decodesAndReencodesExactly(sample: String) throws {
        let bytes = be(sample)
        let command = try SMPCommand(pdu: bytes[...])
        #expect(command.code.rawValue == bytes[0])
        #expect(command.encoded == bytes)
    }

    @Test func everyCodeHasASample() {
        #expect(Set(Self.samples.map { be($0)[0] }) == Set(SMPCode.allCases.map(\.rawValue)))
    }

    @Test func pairingRequestFields() throws {
        let request = try SMPPairingRequest(pdu: be("01 04 00 2D 10 0F 0F")[...])
        let features = request.features
        #expect(features.ioCapability == .keyboardDisplay)
        #expect(!features.oobDataPresent)
        #expect(features.authRequirements.bonding && features.authRequirements.mitm)
        #expect(features.authRequirements.secureConnections && features.authRequirements.ct2)
        #expect(!features.authRequirements.keypress)
        #expect(features.maximumEncryptionKeySize == 16)
        #expect(features.initiatorKeyDistribution == SMPKeyDistribution.defined)
        #expect(features.responderKeyDistribution == [.encryptionKey, .identityKey, .signingKey, .linkKey])
        #expect(SMPPairingRequest(features).encoded == be("01 04 00 2D 10 0F 0F"))
    }

    /// Reserved bits are kept as received (f6 hashes them) but never read as a feature.
    @Test func reservedBitsAreKeptAndIgnored() throws {
        let request = try SMPPairingRequest(pdu: be("01 03 00 C2 10 F0 F1")[...])
        #expect(!request.features.authRequirements.bonding)   // Bonding_Flags 0b10 is reserved
        #expect(!request.features.authRequirements.mitm && !request.features.authRequirements.secureConnections)
        #expect(request.features.initiatorKeyDistribution.intersection(.defined).isEmpty)
        #expect(request.features.responderKeyDistribution.intersection(.defined) == .encryptionKey)
        #expect(request.encoded == be("01 03 00 C2 10 F0 F1"))
        #expect(request.features.ioCapField == [0x03, 0x00, 0xC2])
    }

    @Test func otherFields() throws {
        let central = try SMPCentralIdentification(pdu: be("07 3412 0807060504030201")[...])
        #expect(central.encryptedDiversifier == 0x1234 && central.randomNumber == 0x0102_0304_0506_0708)
        let address = try SMPIdentityAddressInformation(pdu: be("09 01 665544332211")[...])
        #expect(address.address == LEAddress(BluetoothAddress("11:22:33:44:55:66")!, isRandom: true))
        let key = try SMPPairingPublicKey(pdu: be(Self.publicKeyPDU)[...])
        #expect(key.key.x == le(AppendixD.publicAX))
        #expect(try SMPPairingFailed(pdu: be("05 0B")[...]).reason == .dhKeyCheckFailed)
        #expect(try SMPKeypressNotification(pdu: be("0E 04")[...]).type == .entryCompleted)
        #expect(try SMPSecurityRequest(pdu: be("0B 0D")[...]).authRequirements.mitm)
        #expect(try SMPEncryptionInformation(pdu: be("06 00112233445566778899AABBCCDDEEFF")[...]).longTermKey[15] == 0xFF)
    }

    @Test func pairingFailedReasonsAreAllNamed() throws {
        #expect(SMPPairingFailedReason.allCases.map(\.rawValue) == Array(0x01...0x0F))
        for reason in SMPPairingFailedReason.allCases {
            #expect(try SMPPairingFailed(pdu: [0x05, reason.rawValue][...]).reason == reason)
        }
    }

    @Test(arguments: samples)
    func wrongLengthIsRefused(sample: String) {
        let bytes = be(sample)
        #expect(throws: DecodeError.self) { try SMPCommand(pdu: bytes.dropLast()) }
        #expect(throws: DecodeError.self) { try SMPCommand(pdu: (bytes + [0x00])[...]) }
        #expect(throws: DecodeError.self) { try SMPCommand(pdu: bytes.prefix(1)) }
    }

    @Test(arguments: [
        "", "00", "0F", "FF 01 02", "10 00",
        "01 05 00 00 10 00 00",   // reserved IO capability
        "02 FF 00 00 10 00 00",
        "01 03 02 00 10 00 00",   // reserved OOB flag
        "01 03 00 00 06 00 00",   // key size below 7
        "01 03 00 00 11 00 00",   // key size above 16
        "05 00", "05 10", "05 FF", // reserved Pairing Failed reasons
        "0E 05",                  // reserved keypress type
        "09 02 665544332211",     // reserved identity address type
    ])
    func malformedPDUsAreRefused(sample: String) {
        #expect(throws: DecodeError.self) { try SMPCommand(pdu: be(sample)[...]) }
    }

    /// CVE-2018-5383: the decoder refuses a public key that is not on P-256.
    @Test func publicKeyOffTheCurveIsRefused() {
        var bytes = be(Self.publicKeyPDU)
        for index in 33..<65 { bytes[index] = 0 }
        #expect(throws: DecodeError.self) { try SMPPairingPublicKey(pdu: bytes[...]) }
    }

    @Test func decoderChecksTheCode() {
        #expect(throws: DecodeError.self) { try SMPPairingResponse(pdu: be("01 03 00 00 10 00 00")[...]) }
        #expect(throws: DecodeError.self) { try SMPPairingRandom(pdu: be("03 000102030405060708090A0B0C0D0E0F")[...]) }
    }

    /// Random and mutated bytes never trap; whatever decodes re-encodes to the same bytes.
    @Test func randomAndMutatedBytesNeverTrap() {
        var random = SeededRandom(seed: 0x5350_4D)
        let samples = Self.samples.map { be($0) }
        for _ in 0..<20_000 {
            var bytes: [UInt8]
            if random.chance(50) {
                bytes = random.bytes(random.below(70))
            } else {
                bytes = samples[random.below(samples.count)]
                for _ in 0...random.below(3) where !bytes.isEmpty {
                    bytes[random.below(bytes.count)] = random.byte()
                }
                if random.chance(20) { bytes = Array(bytes.prefix(random.below(bytes.count + 1))) }
            }
            if let command = try? SMPCommand(pdu: bytes[...]) {
                #expect(command.encoded == bytes)
            }
        }
    }

    /// f6's IOcap (Vol 3, Part H, Appendix D.4: 0x010102, AuthReq 0x01, OOB 0x01, IO capability
    /// 0x02) from a features value; CryptoTests check f6 itself against D.4.
    @Test func ioCapFieldIsAppendixD4sIOcap() {
        let features = SMPPairingFeatures(ioCapability: .keyboardOnly, oobDataPresent: true,
                                          authRequirements: SMPAuthRequirements(rawValue: 0x01),
                                          initiatorKeyDistribution: [], responderKeyDistribution: [])
        #expect(features.ioCapField == le("010102"))
    }
}
