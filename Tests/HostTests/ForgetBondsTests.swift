import BlemuCore
import BlemuCrypto
import BlemuDevices
import BlemuHCI
import BlemuHost
import BlemuSMP
import BlemuSecurity
import Testing
#if canImport(Glibc)
import Glibc
@testable import HostTestSupport
#endif

/// Forgetting bonds in the running device (`PeripheralControl.forgetBonds`, the control socket's
/// `bonds DEVICE forget [ADDRESS]`): gone from the store and its file, out of the controller's
/// resolving list with advertising stopped for the change, and the next key request refused.
@Suite struct ForgetBondsTests {
    // The centrals of the resolving list's tests.
    static let (phone, phoneIRK, phoneKey) = (ResolvingListTests.phone, ResolvingListTests.phoneIRK, ResolvingListTests.phoneKey)
    static let (tablet, tabletIRK, tabletKey) = (ResolvingListTests.tablet, ResolvingListTests.tabletIRK, ResolvingListTests.tabletKey)
    static let listCommands = [HCIOpcode.leRemoveDeviceFromResolvingList, HCIOpcode.leClearResolvingList,
                               HCIOpcode.leAddDeviceToResolvingList, HCIOpcode.leSetAdvertisingEnable,
                               HCIOpcode.leSetExtendedAdvertisingEnable]

    private static func bond(_ identity: BluetoothAddress, irk: [UInt8]?, key: [UInt8], peer: BluetoothAddress? = nil) -> Bond {
        Bond(peer: LEAddress(peer ?? identity, isRandom: true), identity: LEAddress(identity, isRandom: true), identityResolvingKey: irk,
             longTermKey: SMPLongTermKey(key: key), encryptionKeySize: 16, secureConnections: true, authenticated: false,
             client: BondedClientState(clientConfigurations: [0x0010: 0x0001], clientSupportedFeatures: 0x01))
    }

    private static func temporaryDirectory() -> String {
        var template = Array("/tmp/blemu-forget-test-XXXXXX".utf8CString)
        let made = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
        return made.map { String(cString: $0) } ?? "/tmp"
    }

    /// A device with bonds (in a bond file) with the phone and the tablet, both in the
    /// controller's resolving list, advertising.
    private func bench(directory: String) throws -> Bench {
        let bench = try Bench(device: HeartRateDevice(seed: 1),
                              security: SecurityConfiguration(bondStorePath: directory + "/bonds.json"),
                              configure: { $0.supportsLLPrivacy = true; $0.resolvingListSize = 4 })
        let security = bench.peripheral.security
        _ = security.identity
        security.bonds.save(Self.bond(Self.phone, irk: Self.phoneIRK, key: Self.phoneKey, peer: BluetoothAddress("C9:00:00:00:00:09")!))
        security.bonds.save(Self.bond(Self.tablet, irk: Self.tabletIRK, key: Self.tabletKey))
        bench.peripheral.controllerDown(reason: "test")
        bench.peripheral.controllerUp()
        #expect(bench.controller.resolvingList.count == 2 && bench.peripheral.isAdvertising)
        bench.controller.commands = []
        return bench
    }

    private func keyAnswered(_ bench: Bench, handle: UInt16) -> [UInt8]? {
        let before = bench.controller.commands.count
        bench.controller.requestLongTermKey(handle: handle)
        let after = bench.controller.commands[before...]
        if let reply = after.first(where: { $0.opcode == HCIOpcode.leLongTermKeyRequestReply }) { return Array(reply.parameters.dropFirst(2)) }
        #expect(after.contains { $0.opcode == HCIOpcode.leLongTermKeyRequestNegativeReply })
        return nil
    }

    private func fileBonds(_ path: String) -> [Bond]? {
        guard case let .bonds(_, bonds) = BondStore.inspect(path: path, attachmentFormat: BondedClientState.format) else { return nil }
        return bonds
    }

    @Test func forgettingOneCentral() throws {
        let directory = Self.temporaryDirectory()
        defer { unlink(directory + "/bonds.json"); rmdir(directory) }
        let bench = try bench(directory: directory)
        let c = bench.controller
        #expect(fileBonds(directory + "/bonds.json")?.count == 2)
        // The phone is connected and encrypted with its bond: it keeps the link.
        c.connect(handle: Bench.link, peer: Self.phone)
        #expect(keyAnswered(bench, handle: Bench.link) == Self.phoneKey)
        c.event(0x08, [0x00, UInt8(Bench.link & 0xFF), UInt8(Bench.link >> 8), 0x01])
        c.commands = []

        // By its identity address (the peer address it bonded from works as well, below).
        let outcome = bench.peripheral.control.forgetBonds(Self.phone)
        #expect(outcome.bonds.map(\.identity?.address) == [Self.phone])
        #expect(outcome.linksKept == 1 && outcome.resolvingListEntries == 1)
        #expect(bench.peripheral.control.bonds.map(\.identity?.address) == [Self.tablet])
        // The file no longer has it, nor its CCCDs and caching state.
        let left = try #require(fileBonds(directory + "/bonds.json"))
        #expect(left.map(\.identity?.address) == [Self.tablet])
        // Advertising stopped for the Remove, started again after it; the tablet stays listed.
        let order = c.commands.map(\.opcode).filter { Self.listCommands.contains($0) }
        #expect(order == [HCIOpcode.leSetAdvertisingEnable, HCIOpcode.leRemoveDeviceFromResolvingList, HCIOpcode.leSetAdvertisingEnable])
        #expect(c.commands(HCIOpcode.leSetAdvertisingEnable).map(\.parameters) == [[0x00], [0x01]])
        #expect(c.commands(HCIOpcode.leRemoveDeviceFromResolvingList).first?.parameters == [0x01] + Self.phone.littleEndianBytes)
        #expect(c.resolvingList == [[0x01] + Self.tablet.littleEndianBytes])
        #expect(c.isAdvertising && bench.peripheral.isAdvertising)
        #expect(bench.peripheral.control.linkSummaries.first?.encrypted == true, "the link stays")

        // Its next connection finds no bond: the negative reply.
        c.disconnect(handle: Bench.link)
        c.connect(handle: 0x0041, peer: Self.phone)
        #expect(bench.peripheral.security.bond(on: 0x0041) == nil)
        #expect(keyAnswered(bench, handle: 0x0041) == nil)
        #expect(fileBonds(directory + "/bonds.json")?.count == 1, "closing the link wrote nothing back")
        // The tablet is still known, and forgetting by the address it bonded from works too.
        c.connect(handle: 0x0042, peer: Self.tablet)
        #expect(keyAnswered(bench, handle: 0x0042) == Self.tabletKey)
        #expect(bench.peripheral.control.forgetBonds(Self.tablet).bonds.count == 1)
    }

    @Test func anUnknownAddressForgetsNothing() throws {
        let directory = Self.temporaryDirectory()
        defer { unlink(directory + "/bonds.json"); rmdir(directory) }
        let bench = try bench(directory: directory)
        let outcome = bench.peripheral.control.forgetBonds(BluetoothAddress("C7:00:00:00:00:07")!)
        #expect(outcome.bonds.isEmpty && outcome.resolvingListEntries == 0)
        #expect(bench.peripheral.control.bonds.count == 2 && fileBonds(directory + "/bonds.json")?.count == 2)
        #expect(bench.controller.commands.isEmpty, "nothing sent, advertising untouched")
        // The address a central bonded from names it as well as its identity.
        #expect(bench.peripheral.control.forgetBonds(BluetoothAddress("C9:00:00:00:00:09")!).bonds.map(\.identity?.address) == [Self.phone])
    }

    @Test func forgettingEveryBondClearsTheList() throws {
        let directory = Self.temporaryDirectory()
        defer { unlink(directory + "/bonds.json"); rmdir(directory) }
        let bench = try bench(directory: directory)
        let c = bench.controller
        let outcome = bench.peripheral.control.forgetBonds(nil)
        #expect(outcome.bonds.count == 2 && outcome.linksKept == 0 && outcome.resolvingListEntries == 2)
        #expect(bench.peripheral.control.bonds.isEmpty && fileBonds(directory + "/bonds.json")?.isEmpty == true)
        let order = c.commands.map(\.opcode).filter { Self.listCommands.contains($0) }
        #expect(order == [HCIOpcode.leSetAdvertisingEnable, HCIOpcode.leClearResolvingList, HCIOpcode.leSetAdvertisingEnable])
        #expect(c.resolvingList.isEmpty && c.isAdvertising && bench.peripheral.isAdvertising)
        c.connect(handle: Bench.link, peer: Self.tablet)
        #expect(keyAnswered(bench, handle: Bench.link) == nil)
        // Nothing left: forgetting again sends nothing.
        c.commands = []
        #expect(bench.peripheral.control.forgetBonds(nil).bonds.isEmpty && c.commands.isEmpty)
    }

    /// Devices on one controller share its list: forgetting every bond of one device removes
    /// the entries only it wanted, one by one, and keeps those another device is bonded with.
    @Test func forgettingEveryBondOfOneSharedDeviceRemovesOnlyItsEntries() throws {
        let bench = try SharedBench(devices: [HeartRateDevice(seed: 1), HeartRateDevice(seed: 2)], sets: 4)
        let c = bench.controller
        c.supportsLLPrivacy = true
        let (first, second) = (bench.peripherals[0], bench.peripherals[1])
        let laptop = BluetoothAddress("C4:22:33:44:55:88")!
        first.security.bonds.save(Self.bond(Self.phone, irk: Self.phoneIRK, key: Self.phoneKey))
        first.security.bonds.save(Self.bond(laptop, irk: [UInt8](repeating: 0x99, count: 16), key: Self.tabletKey))
        second.security.bonds.save(Self.bond(Self.phone, irk: Self.phoneIRK, key: Self.tabletKey))
        bench.host.controller.controllerDown(reason: "test")
        c.commands = []
        bench.host.controller.controllerUp()
        #expect(c.resolvingList.count == 2)
        #expect(c.addressResolution, "resolution on")
        c.commands = []
        let outcome = first.control.forgetBonds(nil)
        #expect(outcome.bonds.count == 2 && outcome.resolvingListEntries == 1)
        #expect(c.commands(HCIOpcode.leClearResolvingList).isEmpty)
        #expect(c.commands(HCIOpcode.leRemoveDeviceFromResolvingList).map(\.parameters) == [[0x01] + laptop.littleEndianBytes])
        #expect(c.resolvingList == [[0x01] + Self.phone.littleEndianBytes])
        let removeIndex = try #require(c.commands.firstIndex { $0.opcode == HCIOpcode.leRemoveDeviceFromResolvingList })
        #expect(c.commands[..<removeIndex].contains { $0.opcode == HCIOpcode.leSetExtendedAdvertisingEnable && $0.parameters.first == 0 })
        #expect(first.isAdvertising && second.isAdvertising && c.enabledSets.count == 2)
        // The second device still has its bond with the phone.
        #expect(second.control.bonds.count == 1)
        // Now the second forgets it too: the last listed entry, the list cleared.
        c.commands = []
        #expect(second.control.forgetBonds(Self.phone).resolvingListEntries == 1)
        #expect(c.commands(HCIOpcode.leRemoveDeviceFromResolvingList).count == 1 && c.resolvingList.isEmpty)
    }

    /// A Remove the controller refuses (the shared central scans, say) leaves the entry, and
    /// advertising comes back all the same; the controller's identity names no bond any more.
    @Test func aRefusedRemoveStillForgetsTheBond() throws {
        let directory = Self.temporaryDirectory()
        defer { unlink(directory + "/bonds.json"); rmdir(directory) }
        let bench = try bench(directory: directory)
        let c = bench.controller
        c.failures[HCIOpcode.leRemoveDeviceFromResolvingList] = HCIStatus.commandDisallowed
        #expect(bench.peripheral.control.forgetBonds(Self.phone).bonds.count == 1)
        #expect(c.resolvingList.count == 2 && c.isAdvertising && bench.peripheral.isAdvertising)
        var random = SeededRandom(seed: 3)
        c.connectEnhanced(handle: Bench.link, peerType: 0x03, peer: Self.phone, rpa: ResolvablePrivateAddress.make(irk: Self.phoneIRK, random: &random))
        #expect(keyAnswered(bench, handle: Bench.link) == nil)
    }

    /// Without LL Privacy nothing goes to the controller: the bond is forgotten all the same.
    @Test func withoutLLPrivacyOnlyTheBondGoes() throws {
        let bench = try Bench(device: HeartRateDevice(seed: 1))
        bench.peripheral.security.bonds.save(Self.bond(Self.phone, irk: Self.phoneIRK, key: Self.phoneKey))
        bench.controller.commands = []
        #expect(bench.peripheral.control.forgetBonds(Self.phone).resolvingListEntries == 0)
        #expect(bench.controller.commands.isEmpty && bench.peripheral.control.bonds.isEmpty)
    }
}
