import BlemuCore
import BlemuDevice
import BlemuDevices
import BlemuGATT
import BlemuHCI
import BlemuSimulator
import BlemuHost
import Testing
@testable import HostTestSupport

/// The advertising data follows the database: a service taken out at run time (`service DEVICE
/// UUID off`) leaves the advertised service UUIDs, put back it returns, and the new payload
/// reaches the controller while it advertises, without stopping advertising or a link
/// (Vol 4, Part E, 7.8.7, 7.8.8, 7.8.54, 7.8.55).
@Suite struct AdvertisingUpdateTests {
    /// `[length][type][data]` (Vol 3, Part C, 11).
    static func ad(_ type: UInt8, _ data: [UInt8]) -> [UInt8] { [UInt8(data.count + 1), type] + data }

    static let flags = ad(0x01, [0x06])
    static let appearanceHR = ad(0x19, [0x41, 0x03])
    /// The scripted controller's advertising power, -4 dBm.
    static let txPower = ad(0x0A, [0xFC])

    /// The advertising data of a heart-rate device named `name` (short enough to fit) listing `uuids`.
    static func heartRateData(uuids: [UInt16], name: String = "Test HR") -> [UInt8] {
        let list = uuids.isEmpty ? [] : ad(0x03, uuids.flatMap { [UInt8($0 & 0xFF), UInt8($0 >> 8)] })
        return flags + list + appearanceHR + txPower + ad(0x09, Array(name.utf8))
    }

    /// Two heart-rate devices sharing an extended-advertising controller ("Shared 0", "Shared 1"),
    /// the one at `index`, and its set.
    static func sharedHeartRates(_ index: Int) throws -> (SharedBench, Peripheral, UInt8) {
        let bench = try SharedBench(devices: [HeartRateDevice(seed: 1), HeartRateDevice(seed: 2)])
        let peripheral = bench.peripherals[index]
        return (bench, peripheral, try #require(peripheral.advertisingSet))
    }

    /// LE Set Advertising Data / Scan Response Data: length, then 31 octets zero-padded (7.8.7).
    static func legacyParameters(_ data: [UInt8]) -> [UInt8] {
        [UInt8(data.count)] + data + [UInt8](repeating: 0, count: 31 - data.count)
    }

    /// LE Set Extended Advertising/Scan Response Data: set, Operation 0x03 (complete), fragment
    /// preference 0x01, length, data (7.8.54).
    static func extendedParameters(set: UInt8, _ data: [UInt8]) -> [UInt8] {
        [set, 0x03, 0x01, UInt8(data.count)] + data
    }

    static func sent(_ c: SimulatedController, since count: Int) -> [HCICommand] { Array(c.commands[count...]) }

    @Test func legacyAdvertisingDataDropsTheServiceAndGetsItBackWithoutStopping() throws {
        let bench = try Bench(device: HeartRateDevice(seed: 1))
        let c = bench.controller
        #expect(c.commands(HCIOpcode.leSetAdvertisingData).last?.parameters == Self.legacyParameters(Self.heartRateData(uuids: [0x180D, 0x180F])))
        // A central is connected, and advertising goes on for another.
        c.connect(handle: 0x0040, peer: bench.central)
        #expect(bench.peripheral.isAdvertising)

        var before = c.commands.count
        let off = try bench.peripheral.control.setService(BluetoothUUID(0x180D), present: false)
        #expect(off.advertisingChanged)
        // One command: the advertising data without 0x180D; the scan response (empty) unchanged;
        // advertising not turned off and on; the link kept.
        #expect(Self.sent(c, since: before).map(\.opcode) == [HCIOpcode.leSetAdvertisingData])
        #expect(Self.sent(c, since: before).first?.parameters == Self.legacyParameters(Self.heartRateData(uuids: [0x180F])))
        #expect(bench.peripheral.connectionCount == 1)
        #expect(bench.peripheral.isAdvertising)

        // Both advertised services out: no UUID list at all, the other AD structures as they were.
        before = c.commands.count
        _ = try bench.peripheral.control.setService(BluetoothUUID(0x180F), present: false)
        #expect(Self.sent(c, since: before).map(\.parameters) == [Self.legacyParameters(Self.heartRateData(uuids: []))])

        before = c.commands.count
        let on = try bench.peripheral.control.setService(BluetoothUUID(0x180D), present: true)
        #expect(on.advertisingChanged)
        #expect(Self.sent(c, since: before).map(\.opcode) == [HCIOpcode.leSetAdvertisingData])
        #expect(Self.sent(c, since: before).first?.parameters == Self.legacyParameters(Self.heartRateData(uuids: [0x180D])))

        before = c.commands.count
        _ = try bench.peripheral.control.setService(BluetoothUUID(0x180F), present: true)
        // Back in the profile's order, as at the start.
        #expect(Self.sent(c, since: before).map(\.parameters) == [Self.legacyParameters(Self.heartRateData(uuids: [0x180D, 0x180F]))])
        #expect(bench.peripheral.connectionCount == 1)
        #expect(c.commands(HCIOpcode.disconnect).isEmpty)
    }

    @Test func aServiceThatIsNotAdvertisedSendsNothing() throws {
        let bench = try Bench(device: HeartRateDevice(seed: 1))
        let c = bench.controller
        let before = c.commands.count
        let off = try bench.peripheral.control.setService(BluetoothUUID(0x180A), present: false)   // Device Information
        #expect(off.range != nil && !off.advertisingChanged)
        let on = try bench.peripheral.control.setService(BluetoothUUID(0x180A), present: true)
        #expect(on.range != nil && !on.advertisingChanged)
        #expect(c.commands.count == before)
        // Unchanged (already so): nothing either.
        #expect(try bench.peripheral.control.setService(BluetoothUUID(0x180D), present: true).advertisingChanged == false)
        #expect(c.commands.count == before)
    }

    /// Advertising off: nothing is sent then; the next start carries the payload of the moment.
    @Test func whileAdvertisingIsOffTheNextStartCarriesTheNewData() throws {
        let bench = try Bench(device: HeartRateDevice(seed: 1))
        let c = bench.controller
        bench.peripheral.setAdvertisingAllowed(false)
        var before = c.commands.count
        #expect(try bench.peripheral.control.setService(BluetoothUUID(0x180D), present: false).advertisingChanged)
        #expect(c.commands.count == before)
        before = c.commands.count
        bench.peripheral.setAdvertisingAllowed(true)
        let start = Self.sent(c, since: before)
        #expect(start.filter { $0.opcode == HCIOpcode.leSetAdvertisingData }.map(\.parameters)
                == [Self.legacyParameters(Self.heartRateData(uuids: [0x180F]))])
        #expect(start.last?.opcode == HCIOpcode.leSetAdvertisingEnable && start.last?.parameters == [1])
    }

    /// The controller refuses the new data: advertising and links carry on, and the next start
    /// sends the data of the moment.
    @Test func aRefusedUpdateIsSentAgainAtTheNextStart() throws {
        let bench = try Bench(device: HeartRateDevice(seed: 1))
        let c = bench.controller
        c.failures[HCIOpcode.leSetAdvertisingData] = HCIStatus.commandDisallowed
        var before = c.commands.count
        #expect(try bench.peripheral.control.setService(BluetoothUUID(0x180D), present: false).advertisingChanged)
        #expect(Self.sent(c, since: before).map(\.opcode) == [HCIOpcode.leSetAdvertisingData])
        #expect(bench.peripheral.isAdvertising)
        c.failures = [:]
        bench.peripheral.setAdvertisingAllowed(false)
        before = c.commands.count
        bench.peripheral.setAdvertisingAllowed(true)
        #expect(Self.sent(c, since: before).filter { $0.opcode == HCIOpcode.leSetAdvertisingData }.map(\.parameters)
                == [Self.legacyParameters(Self.heartRateData(uuids: [0x180F]))])
    }

    /// A payload that fills both PDUs: the one builder lays them out again, and each one that
    /// changed is sent (here both: the 128-bit UUID leaves room for the TX power and a shortened
    /// name in the advertising data).
    @Test func bothPayloadsChangeWhenTheLayoutMoves() throws {
        let bench = try Bench(device: ThermostatDevice(seed: 1), name: "Thermostat Test")
        let c = bench.controller
        let name = Array("Thermostat Test".utf8)
        let uuid128 = try #require(BluetoothUUID("7d3c0100-9a5e-4d1a-8f6e-5c1b2d3e4f50"))
        var bytes128: [UInt8] = []
        uuid128.append128(to: &bytes128)
        let appearance = Self.ad(0x19, [0x01, 0x06])
        let list16 = Self.ad(0x03, [0x1A, 0x18, 0x0F, 0x18])
        let fullAdvertising = Self.flags + list16 + Self.ad(0x07, bytes128) + appearance
        let fullScanResponse = Self.ad(0x09, name) + Self.txPower
        #expect(c.commands(HCIOpcode.leSetAdvertisingData).last?.parameters == Self.legacyParameters(fullAdvertising))
        #expect(c.commands(HCIOpcode.leSetScanResponseData).last?.parameters == Self.legacyParameters(fullScanResponse))

        var before = c.commands.count
        #expect(try bench.peripheral.control.setService(uuid128, present: false).advertisingChanged)
        let shortened = Self.flags + list16 + appearance + Self.txPower + Self.ad(0x08, Array(name.prefix(13)))
        #expect(Self.sent(c, since: before).map(\.opcode) == [HCIOpcode.leSetAdvertisingData, HCIOpcode.leSetScanResponseData])
        #expect(Self.sent(c, since: before).map(\.parameters)
                == [Self.legacyParameters(shortened), Self.legacyParameters(Self.ad(0x09, name))])

        before = c.commands.count
        _ = try bench.peripheral.control.setService(uuid128, present: true)
        #expect(Self.sent(c, since: before).map(\.parameters)
                == [Self.legacyParameters(fullAdvertising), Self.legacyParameters(fullScanResponse)])
        #expect(bench.peripheral.isAdvertising)
    }

    /// Devices sharing a controller, each in an extended set of legacy PDUs: the set's data is
    /// replaced with Operation 0x03 while it stays enabled, and only that device's set changes.
    @Test func anExtendedSetGetsItsNewDataWhileEnabled() throws {
        let (bench, second, set) = try Self.sharedHeartRates(1)
        let c = bench.controller
        func data(_ uuids: [UInt16]) -> [UInt8] { Self.heartRateData(uuids: uuids, name: "Shared 1") }
        #expect(c.commands(HCIOpcode.leSetExtendedAdvertisingData).last(where: { $0.parameters.first == set })?.parameters
                == Self.extendedParameters(set: set, data([0x180D, 0x180F])))
        #expect(c.enabledSets == [0, 1])

        var before = c.commands.count
        #expect(try second.control.setService(BluetoothUUID(0x180D), present: false).advertisingChanged)
        #expect(Self.sent(c, since: before).map(\.opcode) == [HCIOpcode.leSetExtendedAdvertisingData])
        #expect(Self.sent(c, since: before).first?.parameters == Self.extendedParameters(set: set, data([0x180F])))
        #expect(c.enabledSets == [0, 1], "no set was stopped")

        before = c.commands.count
        _ = try second.control.setService(BluetoothUUID(0x180D), present: true)
        #expect(Self.sent(c, since: before).map(\.parameters) == [Self.extendedParameters(set: set, data([0x180D, 0x180F]))])
        #expect(c.commands(HCIOpcode.leSetAdvertisingData).isEmpty, "legacy and extended commands never mix (Vol 4, Part E, 3.1.1)")
        #expect(bench.fatal.isEmpty)
    }

    /// A set turned off is not written to; its next start carries the new data.
    @Test func aStoppedExtendedSetGetsItsDataAtItsNextStart() throws {
        let (bench, first, set) = try Self.sharedHeartRates(0)
        let c = bench.controller
        first.setAdvertisingAllowed(false)
        var before = c.commands.count
        #expect(try first.control.setService(BluetoothUUID(0x180F), present: false).advertisingChanged)
        #expect(c.commands.count == before)
        before = c.commands.count
        first.setAdvertisingAllowed(true)
        let written = Self.sent(c, since: before).filter { $0.opcode == HCIOpcode.leSetExtendedAdvertisingData }
        #expect(written.map(\.parameters) == [Self.extendedParameters(set: set, Self.heartRateData(uuids: [0x180D], name: "Shared 0"))])
    }
}
