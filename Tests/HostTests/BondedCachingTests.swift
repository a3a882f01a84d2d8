import BlemuATT
import BlemuCore
import BlemuCrypto
import BlemuDevices
import BlemuGATT
import BlemuHCI
import BlemuHost
import BlemuSMP
import BlemuSecurity
import Testing
@testable import HostTestSupport

/// Robust Caching for a bonded client (Vol 3, Part G, 2.5.2.1, 7.2) and its signed writes'
/// keys, through the whole stack with a scripted controller.
@Suite struct BondedCachingTests {
    private func bond(_ bench: Bench, features: UInt8, hash: [UInt8]?, changeAware: Bool = true) -> Bond {
        Bond(peer: LEAddress(bench.central, isRandom: true), longTermKey: SMPLongTermKey(key: [UInt8](repeating: 0x42, count: 16)),
             encryptionKeySize: 16, secureConnections: true, authenticated: false,
             client: BondedClientState(databaseHash: hash, clientSupportedFeatures: features, changeAware: changeAware))
    }

    private func handle(_ bench: Bench, _ uuid: BluetoothUUID) throws -> UInt16 {
        try #require(bench.peripheral.database.characteristic(uuid)?.valueHandle)
    }

    private func errorCode(_ answer: [[UInt8]]) -> UInt8? {
        guard let pdu = answer.last, pdu.first == 0x01, pdu.count == 5 else { return nil }
        return pdu[4]
    }

    @Test func aBondedClientBackAfterAChangeIsOutOfSyncUntilItReadsTheHash() throws {
        let bench = try Bench(device: HeartRateDevice(seed: 1))
        bench.peripheral.security.bonds.save(bond(bench, features: 0x01, hash: [UInt8](repeating: 0xEE, count: 16)))
        bench.controller.connect(handle: Bench.link, peer: bench.central)
        let location = try handle(bench, BluetoothUUID(0x2A38))
        #expect(errorCode(bench.att([0x0A] + Bench.le(location))) == 0x12)
        // Read By Type of the Database Hash over the whole range is allowed, and makes it aware.
        let hash = bench.att([0x08, 0x01, 0x00, 0xFF, 0xFF, 0x2A, 0x2B]).last
        #expect(hash?.first == 0x09)
        #expect(bench.read(location) != nil)
        // Its Client Supported Features are back, and a bit it set cannot be cleared (7.2).
        let features = try handle(bench, GATTType.clientSupportedFeatures)
        #expect(bench.read(features) == [0x01])
        #expect(errorCode(bench.att([0x12] + Bench.le(features) + [0x00])) == 0x13)
    }

    @Test func anUnchangedDatabaseLeavesABondedClientInSync() throws {
        let bench = try Bench(device: HeartRateDevice(seed: 1))
        bench.peripheral.security.bonds.save(bond(bench, features: 0x01, hash: bench.peripheral.database.hash))
        bench.controller.connect(handle: Bench.link, peer: bench.central)
        #expect(bench.read(try handle(bench, BluetoothUUID(0x2A38))) != nil)
    }

    @Test func aClientThatLeftChangeUnawareComesBackChangeUnaware() throws {
        let bench = try Bench(device: HeartRateDevice(seed: 1))
        bench.peripheral.security.bonds.save(bond(bench, features: 0x01, hash: bench.peripheral.database.hash, changeAware: false))
        bench.controller.connect(handle: Bench.link, peer: bench.central)
        #expect(errorCode(bench.att([0x0A] + Bench.le(try handle(bench, BluetoothUUID(0x2A38))))) == 0x12)
    }

    @Test func withoutRobustCachingNothingIsOutOfSync() throws {
        let bench = try Bench(device: HeartRateDevice(seed: 1))
        bench.peripheral.security.bonds.save(bond(bench, features: 0x00, hash: [UInt8](repeating: 0xEE, count: 16)))
        bench.controller.connect(handle: Bench.link, peer: bench.central)
        #expect(bench.read(try handle(bench, BluetoothUUID(0x2A38))) != nil)
    }
}
