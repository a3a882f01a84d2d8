import Testing
import BlemuCore
@testable import BlemuHCI

/// The HCI side of LE encryption, byte-exact against Vol 4, Part E of the Core spec 5.4.

private func hex(_ text: String) -> [UInt8] {
    guard let bytes = Hex.parse(text) else {
        Issue.record("bad hex literal in test: \(text)")
        return []
    }
    return bytes
}

private func event(_ text: String) throws(DecodeError) -> HCIEvent {
    try HCIEvent(packet: hex(text)[...])
}

private func encoded(_ command: HCICommand) -> [UInt8] {
    var out: [UInt8] = []
    command.encode(into: &out)
    return out
}

@Suite struct EncryptionCodecTests {
    /// 7.7.65.5: Subevent_Code 0x05, Connection_Handle, Random_Number (8), Encrypted_Diversifier (2).
    @Test func longTermKeyRequest() throws {
        #expect(try event("3e0d 05 4000 0102030405060708 3412")
                == .leLongTermKeyRequest(handle: 0x0040, randomNumber: 0x0807_0605_0403_0201, encryptedDiversifier: 0x1234))
        #expect(try event("3e0d 05 4000 0000000000000000 0000")
                == .leLongTermKeyRequest(handle: 0x0040, randomNumber: 0, encryptedDiversifier: 0))
        #expect(throws: DecodeError.self) { try event("3e0c 05 4000 0102030405060708 34") }
        #expect(throws: DecodeError.self) { try event("3e0e 05 4000 0102030405060708 3412 00") }
    }

    /// 7.8.25: Connection_Handle, Long_Term_Key (16 octets, least significant first).
    @Test func longTermKeyRequestReply() {
        let key = (0..<16).map { UInt8($0) }
        #expect(encoded(.leLongTermKeyRequestReply(handle: 0x0040, key: key))
                == hex("1a20 12 4000 000102030405060708090a0b0c0d0e0f"))
        // A short key never makes a short command.
        #expect(encoded(.leLongTermKeyRequestReply(handle: 0x0040, key: [0xAA])).count == 3 + 18)
        #expect(HCIOpcode.name(HCIOpcode.leLongTermKeyRequestReply) == "LE Long Term Key Request Reply")
    }

    /// 7.8.24: Connection_Handle, Random_Number (8), Encrypted_Diversifier (2), Long_Term_Key (16).
    @Test func enableEncryption() {
        let key = (0..<16).map { UInt8($0) }
        #expect(encoded(.leEnableEncryption(handle: 0x0040, randomNumber: 0x0807_0605_0403_0201, encryptedDiversifier: 0x1234, key: key))
                == hex("1920 1c 4000 0102030405060708 3412 000102030405060708090a0b0c0d0e0f"))
        #expect(encoded(.leEnableEncryption(handle: 0x0041, randomNumber: 0, encryptedDiversifier: 0, key: [0xAA])).count == 3 + 28)
        #expect(HCIOpcode.name(HCIOpcode.leEnableEncryption) == "LE Enable Encryption")
    }

    /// 7.8.26: Connection_Handle.
    @Test func longTermKeyRequestNegativeReply() {
        #expect(encoded(.leLongTermKeyRequestNegativeReply(handle: 0x0041)) == hex("1b20 02 4100"))
    }

    /// 7.7.8: Status, Connection_Handle, Encryption_Enabled; exactly four octets.
    @Test func encryptionChange() throws {
        #expect(try event("0804 00 4000 01") == .encryptionChange(status: 0, handle: 0x0040, enabled: 1))
        #expect(try event("0804 06 4000 00") == .encryptionChange(status: 0x06, handle: 0x0040, enabled: 0))
        #expect(throws: DecodeError.self) { try event("0803 00 4000") }
        #expect(throws: DecodeError.self) { try event("0805 00 4000 01 00") }
    }

    /// 7.7.8 v2 (0x59): adds Encryption_Key_Size.
    @Test func encryptionChangeV2() throws {
        #expect(try event("5905 00 4000 01 10") == .encryptionChangeV2(status: 0, handle: 0x0040, enabled: 1, keySize: 16))
        #expect(throws: DecodeError.self) { try event("5904 00 4000 01") }
        #expect(throws: DecodeError.self) { try event("5906 00 4000 01 10 00") }
    }

    /// 7.7.39: Status, Connection_Handle.
    @Test func encryptionKeyRefreshComplete() throws {
        #expect(try event("3003 00 4000") == .encryptionKeyRefreshComplete(status: 0, handle: 0x0040))
        #expect(throws: DecodeError.self) { try event("3002 00 40") }
        #expect(throws: DecodeError.self) { try event("3004 00 4000 00") }
    }

    /// 7.5.7: the command carries Connection_Handle; the return Status, Connection_Handle, Key_Size.
    @Test func readEncryptionKeySize() throws {
        #expect(encoded(.readEncryptionKeySize(handle: 0x0040)) == hex("0814 02 4000"))
        #expect(try EncryptionKeySizeReturn(returnParameters: hex("00 4000 10"))
                == EncryptionKeySizeReturn(status: 0, handle: 0x0040, keySize: 16))
        #expect(try EncryptionKeySizeReturn(returnParameters: hex("02")) == EncryptionKeySizeReturn(status: 2, handle: 0, keySize: 0))
        #expect(throws: DecodeError.self) { try EncryptionKeySizeReturn(returnParameters: hex("00 4000")) }
        #expect(throws: DecodeError.self) { try EncryptionKeySizeReturn(returnParameters: hex("00 4000 10 00")) }
        #expect(throws: DecodeError.self) { try EncryptionKeySizeReturn(returnParameters: []) }
    }

    /// Total: every prefix and every one-byte mutation of these events decodes or throws, and
    /// what each gives is right: a cut event is refused, a wrong length octet is refused, and a
    /// changed parameter value decodes to another event (never the original, never refused).
    @Test func mutatedEncryptionEventsNeverTrap() throws {
        let samples = ["0804 00 4000 01", "5905 00 4000 01 10", "3003 00 4000", "3e0d 05 4000 0102030405060708 3412"]
        for sample in samples {
            let bytes = hex(sample)
            let original = try HCIEvent(packet: bytes[...])
            for length in 0..<bytes.count {
                #expect(throws: DecodeError.self, "\(sample) cut to \(length) octets") { try HCIEvent(packet: bytes.prefix(length)) }
            }
            // Parameters after the code, the length and (LE Meta) the subevent code.
            let firstValue = bytes[0] == 0x3E ? 3 : 2
            for index in bytes.indices {
                for value: UInt8 in [0x00, 0x01, 0x7F, 0xFF] where value != bytes[index] {
                    var mutated = bytes
                    mutated[index] = value
                    let decoded: HCIEvent?
                    do { decoded = try HCIEvent(packet: mutated[...]) } catch { decoded = nil }
                    if index == 1 {
                        #expect(decoded == nil, "\(sample) with length \(value) was accepted")
                    } else if index >= firstValue {
                        #expect(decoded != nil && decoded != original, "\(sample) with octet \(index) = \(value)")
                    }
                }
            }
        }
    }
}
