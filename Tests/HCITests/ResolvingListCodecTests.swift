import Testing
import BlemuCore
@testable import BlemuHCI

/// The controller's resolving list, byte-exact against Vol 4, Part E of the Core spec 5.4.

private func hex(_ text: String) -> [UInt8] {
    guard let bytes = Hex.parse(text) else {
        Issue.record("bad hex literal in test: \(text)")
        return []
    }
    return bytes
}

private func encoded(_ command: HCICommand) -> [UInt8] {
    var out: [UInt8] = []
    command.encode(into: &out)
    return out
}

@Suite struct ResolvingListCodecTests {
    private let identity = BluetoothAddress("C1:22:33:44:55:66")!
    private let peerIRK = [UInt8](0x00..<0x10)
    private let localIRK = [UInt8](0xA0..<0xB0)

    /// 7.8.38: Peer_Identity_Address_Type, Peer_Identity_Address, Peer_IRK, Local_IRK (OCF 0x0027).
    @Test func addDeviceToResolvingList() {
        let command = HCICommand.leAddDeviceToResolvingList(peerIdentity: LEAddress(identity, isRandom: true),
                                                             peerIRK: peerIRK, localIRK: localIRK)
        #expect(encoded(command) == hex("2720 27 01 6655443322c1 000102030405060708090a0b0c0d0e0f a0a1a2a3a4a5a6a7a8a9aaabacadaeaf"))
        // A key of another size is padded or cut, never a malformed command.
        let short = HCICommand.leAddDeviceToResolvingList(peerIdentity: LEAddress(identity, isRandom: false),
                                                           peerIRK: [1], localIRK: [UInt8](repeating: 2, count: 20))
        #expect(short.parameters.count == 39)
        #expect(short.parameters[7] == 1 && short.parameters[8..<23].allSatisfy { $0 == 0 })
        #expect(short.parameters[23...].allSatisfy { $0 == 2 })
    }

    /// 7.8.40, 7.8.41, 7.8.44, 7.8.77.
    @Test func theOtherCommands() {
        #expect(encoded(.leClearResolvingList) == hex("2920 00"))
        // 7.8.39: Peer_Identity_Address_Type, Peer_Identity_Address (OCF 0x0028).
        #expect(encoded(.leRemoveDeviceFromResolvingList(peerIdentity: LEAddress(identity, isRandom: true)))
                == hex("2820 07 01 6655443322c1"))
        #expect(HCIOpcode.name(HCIOpcode.leRemoveDeviceFromResolvingList) == "LE Remove Device From Resolving List")
        #expect(encoded(.leReadResolvingListSize) == hex("2a20 00"))
        #expect(encoded(.leSetAddressResolutionEnable(true)) == hex("2d20 01 01"))
        #expect(encoded(.leSetAddressResolutionEnable(false)) == hex("2d20 01 00"))
        #expect(encoded(.leSetPrivacyMode(peerIdentity: LEAddress(identity, isRandom: true), deviceMode: true))
                == hex("4e20 08 01 6655443322c1 01"))
        #expect(encoded(.leSetPrivacyMode(peerIdentity: LEAddress(identity, isRandom: false), deviceMode: false))
                == hex("4e20 08 00 6655443322c1 00"))
        #expect(HCIOpcode.name(HCIOpcode.leAddDeviceToResolvingList) == "LE Add Device To Resolving List")
    }

    /// 7.8.41 returns Status, Resolving_List_Size; the others Status alone. Total decoders.
    @Test func returnParameters() throws {
        #expect(try ResolvingListSizeReturn(returnParameters: hex("00 10")) == ResolvingListSizeReturn(status: 0, size: 16))
        #expect(try ResolvingListSizeReturn(returnParameters: hex("01")) == ResolvingListSizeReturn(status: 1, size: 0))
        #expect(throws: DecodeError.self) { try ResolvingListSizeReturn(returnParameters: hex("00")) }
        #expect(throws: DecodeError.self) { try ResolvingListSizeReturn(returnParameters: hex("00 10 00")) }
        #expect(throws: DecodeError.self) { try ResolvingListSizeReturn(returnParameters: []) }
        #expect(try StatusReturn(returnParameters: hex("0c"), command: "LE Add Device To Resolving List") == StatusReturn(status: 0x0C))
        #expect(throws: DecodeError.self) { try StatusReturn(returnParameters: [], command: "x") }
        #expect(throws: DecodeError.self) { try StatusReturn(returnParameters: hex("00 00"), command: "x") }
        for length in 0...4 {
            for value: UInt8 in [0x00, 0x01, 0xFF] {
                let bytes = [UInt8](repeating: value, count: length)
                _ = try? ResolvingListSizeReturn(returnParameters: bytes)
                _ = try? StatusReturn(returnParameters: bytes, command: "x")
            }
        }
    }

    /// 7.7.65.10: Peer_Address_Type 0x03 (random identity, resolved by the controller), the
    /// identity as Peer_Address, then Local_ and Peer_Resolvable_Private_Address.
    @Test func enhancedConnectionCompleteWithAResolvedIdentity() throws {
        let event = try HCIEvent(packet: hex("3e1f 0a 00 4000 01 03 6655443322c1 000000000000 abcdef123456 1800 0000 9001 00")[...])
        guard case .leConnectionComplete(let complete) = event else {
            Issue.record("not a connection: \(event)")
            return
        }
        #expect(complete.peerAddressType == 0x03 && complete.peerIdentityResolved)
        #expect(complete.peerAddress == identity)
        #expect(complete.peerResolvablePrivateAddress == BluetoothAddress("56:34:12:EF:CD:AB"))
        #expect(complete.parameters == LinkParameters(interval: 24, latency: 0, supervisionTimeout: 400))
        // Not resolved: type 0x01, no private address.
        let plain = try HCIEvent(packet: hex("3e1f 0a 00 4000 01 01 6655443322c1 000000000000 000000000000 1800 0000 9001 00")[...])
        guard case .leConnectionComplete(let other) = plain else {
            Issue.record("not a connection: \(plain)")
            return
        }
        #expect(!other.peerIdentityResolved && other.peerResolvablePrivateAddress == nil)
        // rootcanal 1.10: type 0x00 with the identity, and the private address it resolved.
        let quirk = try HCIEvent(packet: hex("3e1f 0a 00 ff0e 01 00 0217de104cda 000000000000 e55daf509175 1800 0000 4800 00")[...])
        guard case .leConnectionComplete(let resolved) = quirk else {
            Issue.record("not a connection: \(quirk)")
            return
        }
        #expect(resolved.peerIdentityResolved && resolved.peerAddressType == 0x00)
        #expect(resolved.peerAddress == BluetoothAddress("DA:4C:10:DE:17:02"))
        #expect(resolved.peerResolvablePrivateAddress == BluetoothAddress("75:91:50:AF:5D:E5"))
    }

    /// Vol 6, Part B, 4.6 bit 6 and the four commands of Supported Commands.
    @Test func llPrivacyNeedsTheFeatureAndTheCommands() {
        var info = ControllerInfo()
        info.leFeatures = 1 << 6
        #expect(!info.supportsLLPrivacy)
        info.supportedCommands[34] = 0b0110_1000
        info.supportedCommands[35] = 0b0000_0010
        #expect(info.supportsLLPrivacy && !info.supportsPrivacyMode)
        info.supportedCommands[39] = 0b0000_0100
        #expect(info.supportsPrivacyMode)
        info.leFeatures = 0
        #expect(!info.supportsLLPrivacy)
    }
}
