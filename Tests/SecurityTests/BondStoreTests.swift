import Testing
import BlemuCore
import BlemuCrypto
import BlemuSMP
#if canImport(Glibc)
import Glibc
#endif
@testable import BlemuSecurity

private let owner = BondOwner(device: "lock", name: "Front Door", address: BluetoothAddress("C4:11:22:33:44:55")!)
private let central = LEAddress(BluetoothAddress("D1:22:33:44:55:66")!, isRandom: true)
/// What a layer above might keep with a bond: Security stores it without looking into it.
private let format = BondAttachmentFormat(fields: ["cccds", "note"]) { attachment in
    if case .text(let note)? = attachment["note"], note.isEmpty { return nil }
    return attachment
}

private func bond(_ peer: LEAddress = central, key: UInt8 = 0xAB, sc: Bool = true) -> Bond {
    Bond(peer: peer, identity: LEAddress(BluetoothAddress("C9:00:00:00:00:01")!, isRandom: true),
         identityResolvingKey: [UInt8](repeating: 0x11, count: 16),
         longTermKey: SMPLongTermKey(key: [UInt8](repeating: key, count: 16), encryptedDiversifier: sc ? 0 : 0x1234,
                                     randomNumber: sc ? 0 : 0xFEDC_BA98_7654_3210),
         encryptionKeySize: 16, secureConnections: sc, authenticated: false,
         attachment: BondAttachment(["cccds": .table(["16": 1])]))
}

@Suite struct BondStoreTests {
    @Test func fileNameIsSafe() {
        #expect(owner.fileName == "bonds-lock-Front_Door.json")
        #expect(BondOwner(device: "x", name: "../../etc/passwd", address: owner.address).fileName == "bonds-x-.._.._etc_passwd.json")
    }

    @Test func bondsSurviveARestartInAFileOfMode0600() {
        let dir = TemporaryDirectory()
        defer {
            TemporaryDirectory.sub(dir, "state").remove()
            dir.remove()
        }
        let path = dir.path + "/state/" + owner.fileName
        let recorder = LogRecorder()
        let store = BondStore(path: path, owner: owner, attachmentFormat: format, logger: recorder.logger)
        #expect(store.bonds.isEmpty)
        store.save(bond())
        var legacyBond = bond(LEAddress(BluetoothAddress("D2:22:33:44:55:66")!, isRandom: true), key: 0xCD, sc: false)
        legacyBond.identity = nil
        store.save(legacyBond)

        let reloaded = BondStore(path: path, owner: owner, attachmentFormat: format, logger: recorder.logger)
        #expect(reloaded.bonds.count == 2)
        let first = reloaded.bond(for: central)
        #expect(first?.longTermKey.key == [UInt8](repeating: 0xAB, count: 16))
        #expect(first?.attachment == BondAttachment(["cccds": .table(["16": 1])]))
        let legacy = reloaded.bond(for: LEAddress(BluetoothAddress("D2:22:33:44:55:66")!, isRandom: true))
        #expect(legacy?.longTermKey.encryptedDiversifier == 0x1234)
        #expect(legacy?.longTermKey.randomNumber == 0xFEDC_BA98_7654_3210)
        #expect(legacy?.secureConnections == false)
        // Found by its identity address too.
        #expect(reloaded.bond(for: LEAddress(BluetoothAddress("C9:00:00:00:00:01")!, isRandom: true)) != nil)

        let state = TemporaryDirectory.sub(dir, "state")
        #expect(state.mode(owner.fileName) == 0o600)
        #expect(state.files() == [owner.fileName], "no temporary file left behind")
        // No key appears in any log line.
        #expect(!recorder.entries.contains { $0.message.lowercased().contains("abababab") })
        #expect(!"\(bond())".contains("abab"))
    }

    @Test func aNewBondOfTheSameCentralReplacesTheOld() {
        let store = BondStore(path: nil, owner: owner, attachmentFormat: format, logger: LogRecorder().logger)
        store.save(bond(key: 1))
        store.save(bond(key: 2))
        #expect(store.bonds.count == 1)
        #expect(store.bond(for: central)?.longTermKey.key.first == 2)
    }

    /// A bonded central that comes back under a resolvable private address (Vol 6, Part B,
    /// 1.3.2.2) is found by its IRK: hash = ah(IRK, prand), prand starting 0b01.
    @Test func aResolvablePrivateAddressIsResolvedWithTheBondsIRK() throws {
        let store = BondStore(path: nil, owner: owner, attachmentFormat: format, logger: LogRecorder().logger)
        store.save(bond())
        let irk = [UInt8](repeating: 0x11, count: 16)
        func address(prand: [UInt8], hash: [UInt8]) throws -> LEAddress {
            LEAddress(try BluetoothAddress(littleEndian: hash + prand), isRandom: true)
        }
        let prand: [UInt8] = [0x94, 0x81, 0x70]   // little-endian: 0x708194, top bits 0b01
        let rpa = try address(prand: prand, hash: SMPCrypto.ah(irk: irk, prand: prand))
        #expect(store.bond(for: rpa)?.peer == central)
        // Another hash, a static address, a public one: not this central.
        var wrong = SMPCrypto.ah(irk: irk, prand: prand)
        wrong[0] ^= 1
        #expect(store.bond(for: try address(prand: prand, hash: wrong)) == nil)
        let staticPrand: [UInt8] = [0x94, 0x81, 0xF0]   // top bits 0b11: a static random address
        #expect(store.bond(for: try address(prand: staticPrand, hash: SMPCrypto.ah(irk: irk, prand: staticPrand))) == nil)
        #expect(store.bond(for: LEAddress(rpa.address, isRandom: false)) == nil)
        // A bond without an IRK (or the all-zero one some centrals send) resolves nothing.
        var plain = bond(LEAddress(BluetoothAddress("D1:00:00:00:00:09")!, isRandom: true), key: 7)
        plain.identityResolvingKey = [UInt8](repeating: 0, count: 16)
        #expect(!plain.resolves(rpa))
    }

    @Test func theOldestGoesBeyondTheLimit() {
        let store = BondStore(path: nil, owner: owner, limit: 3, attachmentFormat: format, logger: LogRecorder().logger)
        var dropped: [Bond] = []
        for index in 1...5 {
            let peer = LEAddress(BluetoothAddress(value: 0xD0_0000_0000_00 + UInt64(index)), isRandom: true)
            var b = bond(peer, key: UInt8(index))
            b.identity = nil
            dropped += store.save(b)
        }
        #expect(store.bonds.count == 3)
        #expect(store.bonds.map { $0.longTermKey.key[0] } == [3, 4, 5])
        #expect(dropped.map { $0.longTermKey.key[0] } == [1, 2])
    }

    @Test(arguments: [
        "not json at all",
        "{\"format\": \"blemu-bonds\"}",
        "{\"format\":\"blemu-bonds\",\"version\":1,\"device\":\"lock\",\"name\":\"Front Door\",\"address\":\"C4:11:22:33:44:55\",\"bonds\":[{\"peer\":\"D1:22:33:44:55:66\",\"peerRandom\":true,\"ltk\":\"00\",\"ediv\":0,\"rand\":\"0\",\"keySize\":16,\"secureConnections\":true,\"authenticated\":false,\"sequence\":1}]}",
        // Another device's file.
        "{\"format\":\"blemu-bonds\",\"version\":1,\"device\":\"thermostat\",\"name\":\"Front Door\",\"address\":\"C4:11:22:33:44:55\",\"bonds\":[]}",
        "{\"format\":\"blemu-bonds\",\"version\":1,\"device\":\"lock\",\"name\":\"Front Door\",\"address\":\"C4:11:22:33:44:56\",\"bonds\":[]}",
        "{\"format\":\"blemu-bonds\",\"version\":2,\"device\":\"lock\",\"name\":\"Front Door\",\"address\":\"C4:11:22:33:44:55\",\"bonds\":[]}",
    ])
    func aDamagedOrForeignFileIsMovedAsideAndReported(text: String) {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        dir.write(owner.fileName, text)
        let recorder = LogRecorder()
        let store = BondStore(path: dir.path + "/" + owner.fileName, owner: owner, attachmentFormat: format, logger: recorder.logger)
        #expect(store.bonds.isEmpty)
        #expect(dir.files() == [owner.fileName + ".damaged-1"])
        let errors = recorder.entries.filter { $0.level == .error }
        #expect(errors.count == 1)
        #expect(errors.first?.message.contains(dir.path + "/" + owner.fileName) == true)
        // Saving again makes a good file beside the one moved aside.
        store.save(bond())
        #expect(BondStore(path: dir.path + "/" + owner.fileName, owner: owner, attachmentFormat: format, logger: recorder.logger).bonds.count == 1)
    }

    @Test func anUnwritableDirectoryKeepsTheBondsInMemory() {
        let recorder = LogRecorder()
        let store = BondStore(path: "/proc/blemu-cannot-write-here/" + owner.fileName, owner: owner, attachmentFormat: format, logger: recorder.logger)
        store.save(bond())
        #expect(store.bond(for: central) != nil)
        #expect(recorder.entries.contains { $0.level == .error && $0.message.contains("not written") })
    }
}

extension TemporaryDirectory {
    static func sub(_ dir: TemporaryDirectory, _ name: String) -> TemporaryDirectory {
        TemporaryDirectory(existing: dir.path + "/" + name)
    }
    init(existing: String) { path = existing }
}

/// A FIFO planted in the state directory at a bond, identity or passkey file's path: the open
/// used to block for ever (O_NOFOLLOW but no O_NONBLOCK), so `blemu run` never advertised.
@Suite struct StateFileFIFOTests {
    private func elapsed(_ body: () -> Void) -> Duration { ContinuousClock().measure(body) }

    @Test func aFIFOAtTheBondFileIsReportedAndTheStoreStartsEmptyAtOnce() {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path + "/" + owner.fileName
        #expect(mkfifo(path, 0o600) == 0)
        let recorder = LogRecorder()
        var store: BondStore?
        #expect(elapsed { store = BondStore(path: path, owner: owner, attachmentFormat: format, logger: recorder.logger) } < .seconds(1))
        #expect(store?.bonds.isEmpty == true)
        #expect(recorder.entries.contains { $0.level == .error && $0.message.contains("a FIFO, not a regular file") },
                "\(recorder.entries.map(\.message))")
        // Saving replaces the FIFO with a regular file (renamed over it), and it reads back.
        store?.save(bond())
        #expect(BondStore(path: path, owner: owner, attachmentFormat: format, logger: recorder.logger).bonds.count == 1)
    }

    @Test func aFIFOAtThePasskeyOrIdentityFileIsReportedAtOnce() {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let passkeyPath = PasskeyLabel.path(directory: dir.path, owner: owner)
        #expect(mkfifo(passkeyPath, 0o600) == 0)
        var outcome: PasskeyLabel.Outcome?
        #expect(elapsed { outcome = PasskeyLabel.loadOrCreate(path: passkeyPath, random: { 123_456 }) } < .seconds(1))
        #expect(outcome?.passkey == 123_456)
        #expect(outcome?.problem?.contains("a FIFO, not a regular file") == true, "\(String(describing: outcome))")

        let identityPath = dir.path + "/identity.json"
        #expect(mkfifo(identityPath, 0o600) == 0)
        let recorder = LogRecorder()
        var random = SystemRandomNumberGenerator()
        #expect(elapsed { _ = DeviceIdentityStore.loadOrCreate(path: identityPath, owner: owner, logger: recorder.logger, random: &random) } < .seconds(1))
        #expect(recorder.entries.contains { $0.level == .error && $0.message.contains("a FIFO, not a regular file") })
    }

    @Test func aFIFOAtTheTemporaryFileOfAWriteIsRefusedNotWaitedOn() {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path + "/" + owner.fileName
        #expect(mkfifo("\(path).tmp-\(getpid())", 0o600) == 0)
        var failure: String?
        #expect(elapsed { failure = BondStore.writeAtomically(Array("{}".utf8), to: path) } < .seconds(1))
        #expect(failure?.contains("a FIFO, not a regular file") == true, "\(String(describing: failure))")
    }
}
