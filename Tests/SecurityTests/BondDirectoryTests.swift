import Testing
import BlemuCore
import BlemuSMP
#if canImport(Glibc)
import Glibc
#endif
import BlemuSecurity

private let lock = BondOwner(device: "lock", name: "Front Door", address: BluetoothAddress("C4:11:22:33:44:55")!)
private let heart = BondOwner(device: "heart-rate", name: "HR", address: BluetoothAddress("C4:11:22:33:44:56")!)
private let alice = LEAddress(BluetoothAddress("D1:22:33:44:55:66")!, isRandom: true)
private let bob = LEAddress(BluetoothAddress("D2:22:33:44:55:66")!, isRandom: true)
private let format = BondAttachmentFormat(fields: ["cccds"]) { $0 }

private func bond(_ peer: LEAddress, key: UInt8) -> Bond {
    Bond(peer: peer, identity: nil, identityResolvingKey: nil,
         longTermKey: SMPLongTermKey(key: [UInt8](repeating: key, count: 16), encryptedDiversifier: 0, randomNumber: 0),
         encryptionKeySize: 16, secureConnections: true, authenticated: true,
         attachment: BondAttachment(["cccds": .table(["16": 2])]))
}

/// Bonds of two devices in a state directory, as `blemu run` leaves them.
private func stateWithBonds() -> TemporaryDirectory {
    let dir = TemporaryDirectory()
    for (owner, peers) in [(lock, [alice, bob]), (heart, [alice])] {
        let store = BondStore(path: dir.path + "/" + owner.fileName, owner: owner, attachmentFormat: format, logger: LogRecorder().logger)
        for (index, peer) in peers.enumerated() { store.save(bond(peer, key: UInt8(index + 1))) }
    }
    return dir
}

@Suite struct BondDirectoryTests {
    @Test func listsOnlyBondFilesByNameAndNoneWhereThereIsNoDirectory() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        for name in ["bonds-b.json", "bonds-a.json", "chat-identity", "bonds-c.json.tmp", "passkey-lock"] { dir.write(name, "{}") }
        #expect(try BondDirectory(path: dir.path, attachmentFormat: format).files() == [dir.path + "/bonds-a.json", dir.path + "/bonds-b.json"])
        #expect(try BondDirectory(path: dir.path + "/absent", attachmentFormat: format).files() == [])
    }

    @Test func aPathThatIsNoDirectoryIsAListingFailure() {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        dir.write("file", "")
        #expect(throws: BondDirectory.Failure(stage: .listing, path: dir.path + "/file", reason: "Not a directory")) {
            try BondDirectory(path: dir.path + "/file", attachmentFormat: format).files()
        }
    }

    @Test func contentsAreEachFilesBondsOrWhyItCannotBeUsed() throws {
        let dir = stateWithBonds()
        defer { dir.remove() }
        dir.write("bonds-x-broken.json", "{ not json")
        let contents = try BondDirectory(path: dir.path, attachmentFormat: format).contents()
        #expect(contents.map(\.path) == [heart.fileName, lock.fileName, "bonds-x-broken.json"].map { dir.path + "/" + $0 })
        guard case let .bonds(owner, bonds) = contents[1].contents else { Issue.record("\(contents[1])"); return }
        #expect(owner == lock && bonds.map(\.peer) == [alice, bob])
        guard case .damaged = contents[2].contents else { Issue.record("\(contents[2])"); return }
    }

    @Test func forgettingACentralRewritesEveryFileThatHadItAndNoOther() throws {
        let dir = stateWithBonds()
        defer { dir.remove() }
        let directory = BondDirectory(path: dir.path, attachmentFormat: format)
        var heard: [String] = []
        #expect(try directory.forget(alice.address) { owner, count in heard.append("\(owner.device) \(count)") } == 2)
        #expect(heard == ["heart-rate 1", "lock 1"])
        // Bob's bond stays with the lock, its attachment kept; the heart rate has none left.
        let left = try directory.contents()
        guard case let .bonds(_, lockBonds) = left[1].contents, case let .bonds(_, heartBonds) = left[0].contents else {
            Issue.record("\(left)"); return
        }
        #expect(lockBonds.map(\.peer) == [bob] && lockBonds[0].attachment == BondAttachment(["cccds": .table(["16": 2])]))
        #expect(heartBonds.isEmpty)
        #expect(dir.files() == [heart.fileName, lock.fileName], "no temporary file left behind")
    }

    @Test func forgettingNobodyWritesNothing() throws {
        let dir = stateWithBonds()
        defer { dir.remove() }
        let before = dir.read(lock.fileName)
        let stranger = BluetoothAddress("D9:99:99:99:99:99")!
        #expect(try BondDirectory(path: dir.path, attachmentFormat: format).forget(stranger) == 0)
        #expect(dir.read(lock.fileName) == before)
    }

    @Test func forgettingEveryBondEmptiesEveryFile() throws {
        let dir = stateWithBonds()
        defer { dir.remove() }
        let directory = BondDirectory(path: dir.path, attachmentFormat: format)
        #expect(try directory.forget(nil) == 3)
        for (_, contents) in try directory.contents() {
            guard case let .bonds(_, bonds) = contents else { Issue.record("\(contents)"); continue }
            #expect(bonds.isEmpty)
        }
    }
}
