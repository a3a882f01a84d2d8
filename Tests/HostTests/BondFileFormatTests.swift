import BlemuCore
import BlemuCrypto
import BlemuHost
import BlemuSMP
import BlemuSecurity
import Logging
import Testing
#if canImport(Glibc)
import Glibc
@testable import HostTestSupport
#endif

/// The bond file keeps its format byte for byte: the bonded client's GATT state (Host's) is
/// written into the same entry as the keys (Security's), with the same JSON as before it
/// became a type of its own.
@Suite struct BondFileFormatTests {
    static let owner = BondOwner(device: "lock", name: "Front Door", address: BluetoothAddress("C4:11:22:33:44:55")!)

    static func temporaryDirectory() -> String {
        var template = Array("/tmp/blemu-bondfile-test-XXXXXX".utf8CString)
        let made = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
        return made.map { String(cString: $0) } ?? "/tmp"
    }

    static func read(_ path: String) -> String {
        guard case .success(let bytes) = RegularFile.read(path, maximumBytes: 1 << 20, followSymlinks: false) else { return "" }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// One bond with everything a central can leave, one with keys only.
    static func bonds() -> [Bond] {
        [Bond(peer: LEAddress(BluetoothAddress("D1:22:33:44:55:66")!, isRandom: true),
              identity: LEAddress(BluetoothAddress("C9:00:00:00:00:01")!, isRandom: true),
              identityResolvingKey: [UInt8](repeating: 0x11, count: 16),
              longTermKey: SMPLongTermKey(key: [UInt8](repeating: 0xAB, count: 16), encryptedDiversifier: 0x1234,
                                          randomNumber: 0xFEDC_BA98_7654_3210),
              encryptionKeySize: 16, secureConnections: false, authenticated: true,
              signatureKey: [UInt8](repeating: 0x22, count: 16),
              client: BondedClientState(clientConfigurations: [0x0010: 0x0001, 0x0020: 0x0002], databaseHash: [UInt8](0..<16),
                                        signCounter: 41, clientSupportedFeatures: 0x01, changeAware: false)),
         Bond(peer: LEAddress(BluetoothAddress("00:22:33:44:55:77")!, isRandom: false),
              longTermKey: SMPLongTermKey(key: [UInt8](repeating: 0xCD, count: 16)),
              encryptionKeySize: 7, secureConnections: true, authenticated: false)]
    }

    /// What the bond store wrote before the client state became a type of its own.
    static let expected = """
{
  "address" : "C4:11:22:33:44:55",
  "bonds" : [
    {
      "authenticated" : true,
      "cccds" : {
        "16" : 1,
        "32" : 2
      },
      "changeAware" : false,
      "clientFeatures" : 1,
      "csrk" : "22222222222222222222222222222222",
      "databaseHash" : "000102030405060708090a0b0c0d0e0f",
      "ediv" : 4660,
      "identity" : "C9:00:00:00:00:01",
      "identityRandom" : true,
      "irk" : "11111111111111111111111111111111",
      "keySize" : 16,
      "ltk" : "abababababababababababababababab",
      "peer" : "D1:22:33:44:55:66",
      "peerRandom" : true,
      "rand" : "fedcba9876543210",
      "secureConnections" : false,
      "sequence" : 1,
      "signCounter" : 41
    },
    {
      "authenticated" : false,
      "ediv" : 0,
      "keySize" : 7,
      "ltk" : "cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd",
      "peer" : "00:22:33:44:55:77",
      "peerRandom" : false,
      "rand" : "0",
      "secureConnections" : true,
      "sequence" : 2
    }
  ],
  "device" : "lock",
  "format" : "blemu-bonds",
  "name" : "Front Door",
  "version" : 1
}
"""

    @Test func aBondFileIsWrittenAsBefore() {
        let directory = Self.temporaryDirectory()
        defer { _ = unlink(directory + "/bonds.json"); _ = rmdir(directory) }
        let path = directory + "/bonds.json"
        let store = BondStore(path: path, owner: Self.owner, attachmentFormat: BondedClientState.format, logger: Self.quiet)
        for bond in Self.bonds() { store.save(bond) }
        #expect(Self.read(path) == Self.expected)
        // Read back, every value is the one saved, and written again the file is the same.
        let reloaded = BondStore(path: path, owner: Self.owner, attachmentFormat: BondedClientState.format, logger: Self.quiet)
        #expect(reloaded.bonds.map(\.client) == Self.bonds().map(\.client))
        #expect(reloaded.bonds.first?.client.signCounter == 41)
        reloaded.forget(BluetoothAddress("00:22:33:44:55:77")!)
        reloaded.save(Self.bonds()[1])
        #expect(Self.read(path).replacing("\"sequence\" : 3", with: "\"sequence\" : 2") == Self.expected)
    }

    static func write(_ text: String, to path: String) {
        guard let file = fopen(path, "w") else { return }
        fputs(text, file)
        fclose(file)
    }

    static let quiet = Logger(label: "test") { _ in SwiftLogNoOpLogHandler() }

    /// `blemu bonds list` and the control socket show the same line as before.
    @Test func aBondsSummaryIsTheSame() {
        let bonds = Self.bonds()
        #expect(bonds[0].summary == "D1:22:33:44:55:66 (random) identity C9:00:00:00:00:01 (random): LE legacy, authenticated, 16-octet key, 2 subscription(s) kept, signs writes (SignCounter 41), robust caching (change-unaware)")
        #expect(bonds[1].summary == "00:22:33:44:55:77 (public): LE Secure Connections, unauthenticated, 7-octet key")
    }

    /// Every value of the client's state from a file is checked: one out of range makes the
    /// file damaged (set aside, the store starts empty), like a bad key.
    @Test(arguments: [("\"signCounter\" : 41", "\"signCounter\" : 4294967296"), ("\"clientFeatures\" : 1", "\"clientFeatures\" : 256"),
                      ("\"16\" : 1", "\"16\" : 65536"), ("\"changeAware\" : false", "\"changeAware\" : 0"),
                      ("\"databaseHash\" : \"000102030405060708090a0b0c0d0e0f\"", "\"databaseHash\" : \"0001\""),
                      ("\"cccds\" : {", "\"cccds\" : {\"x\" : 1, ")])
    func aMalformedClientStateMakesTheFileDamaged(good: String, bad: String) throws {
        let directory = Self.temporaryDirectory()
        let path = directory + "/bonds.json"
        defer {
            for name in ["bonds.json", "bonds.json.damaged-1"] { _ = unlink(directory + "/" + name) }
            _ = rmdir(directory)
        }
        let text = Self.expected.replacing(good, with: bad)
        #expect(text != Self.expected)
        Self.write(text, to: path)
        #expect(BondStore(path: path, owner: Self.owner, attachmentFormat: BondedClientState.format, logger: Self.quiet).bonds.isEmpty)
        // Unchanged, the same file loads.
        Self.write(Self.expected, to: path)
        #expect(BondStore(path: path, owner: Self.owner, attachmentFormat: BondedClientState.format, logger: Self.quiet).bonds.count == 2)
    }
}
