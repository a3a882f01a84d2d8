import BlemuCore
import BlemuDevices
import BlemuHCI
import BlemuHost
import BlemuSecurity
import Testing
@testable import HostTestSupport

/// Privacy (Vol 3, Part C, 10.7; Vol 6, Part B, 1.3.2.2): advertising from resolvable private
/// addresses made from the device's IRK, renewed on a timer.
@Suite struct PrivacyTests {
    private func resolves(_ bytes: [UInt8], _ peripheral: Peripheral) throws -> Bool {
        let address = try BluetoothAddress(littleEndian: bytes)
        return ResolvablePrivateAddress.resolves(address, irk: peripheral.security.identity.resolvingKey)
    }

    @Test func withoutPrivacyTheIdentityAddressIsAdvertised() throws {
        let bench = try Bench(device: HeartRateDevice(seed: 1))
        #expect(bench.peripheral.advertisingAddress == bench.peripheral.address)
        #expect(bench.controller.commands(HCIOpcode.leSetRandomAddress).map(\.parameters) == [bench.peripheral.address.littleEndianBytes])
    }

    @Test func aLegacyControllerGetsANewPrivateAddressAfterAStopAtEveryTimeout() throws {
        let bench = try Bench(device: HeartRateDevice(seed: 1), privacy: true)
        let c = bench.controller
        let p = bench.peripheral
        let first = try #require(c.commands(HCIOpcode.leSetRandomAddress).last).parameters
        #expect(first != p.address.littleEndianBytes, "the identity address is never advertised")
        #expect(first[5] & 0xC0 == 0x40)
        #expect(try resolves(first, p))
        #expect(p.isAdvertising && p.advertisingAddress.littleEndianBytes == first)

        // Past the fast phase (its own restart at 30 s), then to the address's timeout at 60 s.
        bench.scheduler.advance(by: .seconds(31))
        #expect(c.commands(HCIOpcode.leSetRandomAddress).last?.parameters == first, "the slow phase keeps the address")
        let before = c.commands.count
        bench.scheduler.advance(by: .seconds(30))
        let after = Array(c.commands[before...])
        let second = try #require(after.first { $0.opcode == HCIOpcode.leSetRandomAddress }).parameters
        #expect(second != first)
        #expect(try resolves(second, p))
        // LE Set Random Address is refused while advertising (Vol 4, Part E, 7.8.4): off, address, on.
        let order = after.map(\.opcode).filter { [HCIOpcode.leSetAdvertisingEnable, HCIOpcode.leSetRandomAddress].contains($0) }
        #expect(order == [HCIOpcode.leSetAdvertisingEnable, HCIOpcode.leSetRandomAddress, HCIOpcode.leSetAdvertisingEnable])
        #expect(after.filter { $0.opcode == HCIOpcode.leSetAdvertisingEnable }.map(\.parameters) == [[0], [1]])
        #expect(p.isAdvertising)
    }

    @Test func aRefusedAddressIsSentAgainAtTheNextStart() throws {
        let bench = try Bench(device: HeartRateDevice(seed: 1), privacy: true)
        let c = bench.controller
        bench.scheduler.advance(by: .seconds(31))
        // The controller refuses the next address (Command Disallowed, Vol 4, Part E, 7.8.4).
        c.failures[HCIOpcode.leSetRandomAddress] = 0x0C
        bench.scheduler.advance(by: .seconds(30))
        let refused = try #require(c.commands(HCIOpcode.leSetRandomAddress).last).parameters
        c.failures = [:]
        let count = c.commands(HCIOpcode.leSetRandomAddress).count
        // A central comes and goes: advertising starts again, with the address sent again.
        c.connect(handle: 0x0040, peer: bench.central)
        c.disconnect(handle: 0x0040)
        let commands = c.commands(HCIOpcode.leSetRandomAddress)
        #expect(commands.count == count + 1)
        #expect(commands.last?.parameters == refused)
        #expect(bench.peripheral.isAdvertising)
    }

    /// Vol 3, Part C, 12.5: Resolvable Private Address Only, 0, in GAP with privacy only.
    @Test func gapSaysResolvablePrivateAddressesOnlyWithPrivacy() throws {
        let rpaOnly = BluetoothUUID(0x2AC9)
        let bench = try Bench(device: HeartRateDevice(seed: 1), privacy: true)
        let handle = try #require(bench.peripheral.database.characteristic(rpaOnly)?.valueHandle)
        bench.controller.connect(handle: Bench.link, peer: bench.central)
        #expect(bench.read(handle) == [0x00])
        let plain = try Bench(device: HeartRateDevice(seed: 1))
        #expect(plain.peripheral.database.characteristic(rpaOnly) == nil)
    }

    @Test func aNewAddressDoesNotStartTheFastPhaseOver() throws {
        let bench = try Bench(device: HeartRateDevice(seed: 1), privacy: true, rpaTimeout: .seconds(10))
        let c = bench.controller
        bench.scheduler.advance(by: .seconds(11))
        // Restarted for the new address, still fast (20 ms = 32 units).
        #expect(c.commands(HCIOpcode.leSetRandomAddress).count == 2)
        #expect(c.commands(HCIOpcode.leSetAdvertisingParameters).last?.parameters.first == 32)
        // Slow at 30 s after the start, as without privacy (two more addresses on the way).
        bench.scheduler.advance(by: .seconds(20))
        #expect(c.commands(HCIOpcode.leSetAdvertisingParameters).last?.parameters.first == 244)
        #expect(bench.peripheral.advertisingInterval == 244)
    }

    @Test func eachExtendedSetGetsItsOwnPrivateAddress() throws {
        let bench = try SharedBench(devices: [HeartRateDevice(seed: 1), HeartRateDevice(seed: 2)], privacy: true)
        let first = bench.controller.setAddresses()
        for peripheral in bench.peripherals {
            let set = try #require(peripheral.advertisingSet)
            let address = try #require(first[set])
            #expect(address != peripheral.address.littleEndianBytes)
            #expect(try resolves(address, peripheral))
        }
        // Two devices, two IRKs: one's addresses do not resolve with the other's key.
        let setA = try #require(bench.peripherals[0].advertisingSet)
        let a = try #require(first[setA])
        #expect(try !resolves(a, bench.peripherals[1]))
        bench.scheduler.advance(by: .seconds(61))
        let second = bench.controller.setAddresses()
        for peripheral in bench.peripherals {
            let set = try #require(peripheral.advertisingSet)
            #expect(second[set] != first[set])
            #expect(try resolves(try #require(second[set]), peripheral))
        }
        #expect(bench.controller.enabledSets == [0, 1])
    }
}
