import Testing
import BlemuCore
import BlemuCrypto
import BlemuSMP
@testable import BlemuSecurity

private let owner = BondOwner(device: "heart-rate", name: "HR 1", address: BluetoothAddress("C4:11:22:33:44:55")!)

@Suite struct DeviceIdentityTests {
    @Test func theIRKIsMadeOnceAndKeptInAFileOfMode0600() {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        #expect(owner.identityFileName == "identity-heart-rate-HR_1.json")
        let path = dir.path + "/" + owner.identityFileName
        let recorder = LogRecorder()
        var random = SystemRandomNumberGenerator()
        let first = DeviceIdentityStore.loadOrCreate(path: path, owner: owner, logger: recorder.logger, random: &random)
        #expect(first.resolvingKey.count == 16 && first.resolvingKey.contains { $0 != 0 })
        #expect(first.address == LEAddress(owner.address, isRandom: true))
        #expect(dir.mode(owner.identityFileName) == 0o600)
        #expect(dir.files() == [owner.identityFileName], "no temporary file left behind")
        let again = DeviceIdentityStore.loadOrCreate(path: path, owner: owner, logger: recorder.logger, random: &random)
        #expect(again == first)
        // The key is never logged.
        let hex = first.resolvingKey.map { String($0, radix: 16) }.joined()
        #expect(!recorder.entries.contains { $0.message.contains(hex) })
    }

    @Test func aDamagedOrForeignFileIsMovedAsideAndReplaced() {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let recorder = LogRecorder()
        var random = SystemRandomNumberGenerator()
        let path = dir.path + "/" + owner.identityFileName
        for text in ["{ not json", #"{"format":"blemu-identity","version":1,"device":"heart-rate","name":"HR 1","address":"C4:11:22:33:44:55","irk":"00000000000000000000000000000000"}"#,
                     #"{"format":"blemu-identity","version":1,"device":"heart-rate","name":"HR 1","address":"C4:00:00:00:00:01","irk":"0102030405060708090a0b0c0d0e0f10"}"#] {
            dir.write(owner.identityFileName, text)
            let identity = DeviceIdentityStore.loadOrCreate(path: path, owner: owner, logger: recorder.logger, random: &random)
            #expect(identity.resolvingKey != [UInt8](repeating: 0, count: 16))
            #expect(identity.resolvingKey != Array(1...16))
        }
        #expect(dir.files() == [owner.identityFileName, owner.identityFileName + ".damaged-1", owner.identityFileName + ".damaged-2",
                                owner.identityFileName + ".damaged-3"])
        #expect(recorder.entries.filter { $0.level == .error && $0.message.contains("damaged or foreign") }.count == 3)
    }

    /// Vol 6, Part B, 1.3.2.2: prand's two top bits 0b01, its random part neither all 0 nor
    /// all 1, hash = ah(IRK, prand); Vol 3, Part H, Appendix D.7: ah's sample.
    @Test func resolvablePrivateAddressesResolveWithTheirIRKOnly() throws {
        let irk = Array("ec0234a357c8ad05341010a60a397d9b".utf8Chunks)
        #expect(SMPCrypto.ah(irk: irk, prand: [0x94, 0x81, 0x70]) == [0xAA, 0xFB, 0x0D])
        var random = SystemRandomNumberGenerator()
        var seen: Set<BluetoothAddress> = []
        for _ in 0..<50 {
            let address = ResolvablePrivateAddress.make(irk: irk, random: &random)
            #expect(address.bytes.5 & 0xC0 == 0x40)
            #expect(ResolvablePrivateAddress.resolves(address, irk: irk))
            #expect(!ResolvablePrivateAddress.resolves(address, irk: [UInt8](repeating: 0x55, count: 16)))
            seen.insert(address)
        }
        #expect(seen.count == 50, "every address is new")
    }

    @Test func aBondKeepsTheCentralsCSRKAndItsAttachment() {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let recorder = LogRecorder()
        let path = dir.path + "/" + owner.fileName
        let central = LEAddress(BluetoothAddress("D1:22:33:44:55:66")!, isRandom: true)
        let format = BondAttachmentFormat(fields: ["signCounter"]) { $0 }
        let store = BondStore(path: path, owner: owner, attachmentFormat: format, logger: recorder.logger)
        store.save(Bond(peer: central, longTermKey: SMPLongTermKey(key: [UInt8](repeating: 7, count: 16)), encryptionKeySize: 16,
                        secureConnections: true, authenticated: false, signatureKey: [UInt8](repeating: 9, count: 16)))
        #expect(store.setAttachment(BondAttachment(["signCounter": .integer(41)]), for: central, write: false))
        store.flush()
        let reloaded = BondStore(path: path, owner: owner, attachmentFormat: format, logger: recorder.logger).bond(for: central)
        #expect(reloaded?.signatureKey == [UInt8](repeating: 9, count: 16))
        #expect(reloaded?.attachment == BondAttachment(["signCounter": .integer(41)]))
        // A hand-edited CSRK of the wrong length makes the file damaged, never trusted.
        let text = dir.read(owner.fileName)!.replacing(String(repeating: "09", count: 16), with: "0909")
        dir.write(owner.fileName, text)
        #expect(BondStore(path: path, owner: owner, attachmentFormat: format, logger: recorder.logger).bonds.isEmpty)
    }
}

private extension String {
    /// Hex text as octets, most significant first as the spec prints them, reversed to little-endian.
    var utf8Chunks: [UInt8] {
        let chars = Array(self)
        return stride(from: 0, to: chars.count, by: 2).map { UInt8(String(chars[$0..<$0 + 2]), radix: 16)! }.reversed()
    }
}

@Suite struct IdentityDistributionTests {
    /// The identity file is written when a central first asks to pair, not at start: a device
    /// nobody pairs with leaves the state directory alone. The Pairing Response then offers
    /// IdKey (Vol 3, Part H, 3.5.2, 3.6.1).
    @Test func theIdentityIsMadeAtTheFirstPairingRequestAndOffered() {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        var sent: [[UInt8]] = []
        let security = PeripheralSecurity(configuration: SecurityConfiguration(identityPath: dir.path + "/" + owner.identityFileName),
                                          owner: owner, localAddress: LEAddress(owner.address, isRandom: true),
                                          scheduler: ManualScheduler(), logger: LogRecorder().logger)
        security.sendSMP = { _, pdu in sent.append(pdu) }
        let central = LEAddress(BluetoothAddress("D1:22:33:44:55:66")!, isRandom: true)
        security.linkOpened(0x40, peer: central)
        #expect(dir.files().isEmpty)
        // Pairing Request: NoInputNoOutput, bonding + SC, 16 octets, keys EncKey|IdKey|SignKey both ways.
        security.receive([0x01, 0x03, 0x00, 0x09, 0x10, 0x07, 0x07][...], on: 0x40)
        #expect(dir.files() == [owner.identityFileName])
        // Pairing Response: ours IdKey (EncKey is ignored in Secure Connections), the central's IdKey|SignKey.
        #expect(sent.first == [0x02, 0x03, 0x00, 0x09, 0x10, 0x06, 0x02])
        // The next start reads the same identity.
        let again = PeripheralSecurity(configuration: SecurityConfiguration(identityPath: dir.path + "/" + owner.identityFileName),
                                       owner: owner, localAddress: LEAddress(owner.address, isRandom: true),
                                       scheduler: ManualScheduler(), logger: LogRecorder().logger)
        #expect(again.identity == security.identity)
    }
}
