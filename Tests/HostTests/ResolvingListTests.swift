import BlemuCore
import BlemuCrypto
import BlemuDevices
import BlemuHCI
import BlemuSimulator
import BlemuHost
import BlemuSMP
import BlemuSecurity
import BlemuTestSupport
import Testing
@testable import HostTestSupport

/// The controller's resolving list (Vol 6, Part B, 4.7; Vol 4, Part E, 7.8.38 – 7.8.44, 7.8.77):
/// bonded centrals' IRKs loaded at start on a controller with LL Privacy, the identity of LE
/// Enhanced Connection Complete used for the bond, the host's ah() for the rest.
@Suite struct ResolvingListTests {
    static let phone = BluetoothAddress("C1:22:33:44:55:66")!
    static let phoneIRK = [UInt8](0x10..<0x20)
    static let phoneKey = [UInt8](repeating: 0x42, count: 16)
    static let tablet = BluetoothAddress("C2:22:33:44:55:77")!
    static let tabletIRK = [UInt8](0x30..<0x40)
    static let tabletKey = [UInt8](repeating: 0x24, count: 16)

    private static func bond(_ identity: BluetoothAddress, irk: [UInt8]?, key: [UInt8]) -> Bond {
        Bond(peer: LEAddress(identity, isRandom: true), identity: LEAddress(identity, isRandom: true), identityResolvingKey: irk,
             longTermKey: SMPLongTermKey(key: key), encryptionKeySize: 16, secureConnections: true, authenticated: false)
    }

    private static func privateAddress(_ irk: [UInt8], seed: UInt64) -> BluetoothAddress {
        var random = SeededRandom(seed: seed)
        return ResolvablePrivateAddress.make(irk: irk, random: &random)
    }

    /// A bench whose device has bonds with the phone and the tablet (and one central without
    /// an IRK), on a controller that comes up after they were made.
    private func bench(llPrivacy: Bool, listSize: UInt8 = 4, logger: CapturedLog? = nil) throws -> Bench {
        let bench = try logger.map { try Bench(device: HeartRateDevice(seed: 1), logger: $0.logger, configure: { $0.supportsLLPrivacy = llPrivacy; $0.resolvingListSize = listSize }) }
            ?? Bench(device: HeartRateDevice(seed: 1), configure: { $0.supportsLLPrivacy = llPrivacy; $0.resolvingListSize = listSize })
        let security = bench.peripheral.security
        _ = security.identity
        security.bonds.save(Self.bond(Self.phone, irk: Self.phoneIRK, key: Self.phoneKey))
        security.bonds.save(Self.bond(BluetoothAddress("C3:00:00:00:00:01")!, irk: nil, key: Self.tabletKey))
        security.bonds.save(Self.bond(Self.tablet, irk: Self.tabletIRK, key: Self.tabletKey))
        bench.peripheral.controllerDown(reason: "test")
        bench.controller.commands = []
        bench.peripheral.controllerUp()
        return bench
    }

    /// The key the LE Long Term Key Request on `handle` is answered with (nil: negative reply).
    private func keyAnswered(_ bench: Bench, handle: UInt16 = Bench.link) -> [UInt8]? {
        let before = bench.controller.commands.count
        bench.controller.requestLongTermKey(handle: handle)
        let after = bench.controller.commands[before...]
        if let reply = after.first(where: { $0.opcode == HCIOpcode.leLongTermKeyRequestReply }) { return Array(reply.parameters.dropFirst(2)) }
        return nil
    }

    @Test func theListIsLoadedAtStartBeforeAdvertising() throws {
        let bench = try bench(llPrivacy: true)
        let c = bench.controller
        let order = c.commands.map(\.opcode).filter {
            [HCIOpcode.leReadResolvingListSize, HCIOpcode.leClearResolvingList, HCIOpcode.leAddDeviceToResolvingList,
             HCIOpcode.leSetPrivacyMode, HCIOpcode.leSetAddressResolutionEnable, HCIOpcode.leSetAdvertisingEnable].contains($0)
        }
        #expect(order == [HCIOpcode.leReadResolvingListSize, HCIOpcode.leClearResolvingList,
                          HCIOpcode.leAddDeviceToResolvingList, HCIOpcode.leSetPrivacyMode,
                          HCIOpcode.leAddDeviceToResolvingList, HCIOpcode.leSetPrivacyMode,
                          HCIOpcode.leSetAddressResolutionEnable, HCIOpcode.leSetAdvertisingEnable])
        #expect(c.resolvingList == [[0x01] + Self.phone.littleEndianBytes, [0x01] + Self.tablet.littleEndianBytes])
        #expect(c.addressResolution && bench.peripheral.isAdvertising)
        // The central's IRK, and the device's own as the local IRK; Device Privacy Mode.
        let add = try #require(c.commands(HCIOpcode.leAddDeviceToResolvingList).first).parameters
        #expect(Array(add[7..<23]) == Self.phoneIRK)
        #expect(Array(add[23..<39]) == bench.peripheral.security.identity.resolvingKey)
        #expect(c.commands(HCIOpcode.leSetPrivacyMode).first?.parameters == [0x01] + Self.phone.littleEndianBytes + [0x01])
        #expect(c.commands(HCIOpcode.leSetAddressResolutionEnable).map(\.parameters) == [[0x01]])
    }

    /// With no bonded central to load, start-up sends nothing for the list (three commands
    /// fewer before advertising); the first bond with an IRK loads it, advertising stopped for it.
    @Test func withNoBondsTheListIsLoadedAtTheFirstBond() throws {
        let bench = try Bench(device: HeartRateDevice(seed: 1), configure: { $0.supportsLLPrivacy = true; $0.resolvingListSize = 4 })
        let c = bench.controller
        let listCommands = [HCIOpcode.leReadResolvingListSize, HCIOpcode.leClearResolvingList, HCIOpcode.leAddDeviceToResolvingList,
                            HCIOpcode.leSetPrivacyMode, HCIOpcode.leSetAddressResolutionEnable]
        #expect(bench.peripheral.isAdvertising)
        #expect(!c.commands.contains { listCommands.contains($0.opcode) })
        // A central without an IRK changes nothing.
        let noIRK = Self.bond(BluetoothAddress("C3:00:00:00:00:01")!, irk: nil, key: Self.tabletKey)
        bench.peripheral.security.bonds.save(noIRK)
        bench.peripheral.security.bondSaved(noIRK)
        #expect(!c.commands.contains { listCommands.contains($0.opcode) })
        let phone = Self.bond(Self.phone, irk: Self.phoneIRK, key: Self.phoneKey)
        bench.peripheral.security.bonds.save(phone)
        let before = c.commands.count
        bench.peripheral.security.bondSaved(phone)
        let after = c.commands[before...].map(\.opcode).filter { listCommands.contains($0) || $0 == HCIOpcode.leSetAdvertisingEnable }
        #expect(after == [HCIOpcode.leSetAdvertisingEnable, HCIOpcode.leReadResolvingListSize, HCIOpcode.leClearResolvingList,
                          HCIOpcode.leAddDeviceToResolvingList, HCIOpcode.leSetPrivacyMode, HCIOpcode.leSetAddressResolutionEnable,
                          HCIOpcode.leSetAdvertisingEnable])
        #expect(c.commands(HCIOpcode.leSetAdvertisingEnable).suffix(2).map(\.parameters) == [[0x00], [0x01]])
        #expect(c.resolvingList == [[0x01] + Self.phone.littleEndianBytes])
        #expect(c.addressResolution && c.isAdvertising && bench.peripheral.isAdvertising)
        // From then on the list is loaded: the next central is one Add.
        let tablet = Self.bond(Self.tablet, irk: Self.tabletIRK, key: Self.tabletKey)
        bench.peripheral.security.bonds.save(tablet)
        let beforeTablet = c.commands.count
        bench.peripheral.security.bondSaved(tablet)
        #expect(c.commands[beforeTablet...].filter { $0.opcode == HCIOpcode.leReadResolvingListSize }.isEmpty)
        #expect(c.resolvingList.count == 2)
        // And a central that comes back under a private address is named by the controller.
        bench.controller.connectEnhanced(handle: Bench.link, peerType: 0x03, peer: Self.phone,
                                         rpa: Self.privateAddress(Self.phoneIRK, seed: 11))
        #expect(keyAnswered(bench) == Self.phoneKey)
    }

    @Test func theIdentityOfTheEnhancedEventFindsTheBond() throws {
        let bench = try bench(llPrivacy: true)
        // The private address is not one ah() resolves with the bond's IRK: only the
        // controller's identity can name the bond.
        let shown = Self.privateAddress([UInt8](repeating: 0x77, count: 16), seed: 5)
        bench.controller.connectEnhanced(handle: Bench.link, peerType: 0x03, peer: Self.phone, rpa: shown)
        #expect(bench.peripheral.security.bond(on: Bench.link)?.identity?.address == Self.phone)
        #expect(keyAnswered(bench) == Self.phoneKey)
        bench.controller.disconnect(handle: Bench.link)
        // The same address unresolved (type 0x01): no bond, negative reply.
        bench.controller.connectEnhanced(handle: 0x0041, peerType: 0x01, peer: shown, rpa: nil)
        #expect(bench.peripheral.security.bond(on: 0x0041) == nil)
        #expect(keyAnswered(bench, handle: 0x0041) == nil)
        bench.controller.disconnect(handle: 0x0041)
        // rootcanal 1.10's form: the identity's own type (0x01) with the private address it resolved.
        bench.controller.connectEnhanced(handle: 0x0042, peerType: 0x01, peer: Self.phone, rpa: shown)
        #expect(keyAnswered(bench, handle: 0x0042) == Self.phoneKey)
    }

    @Test func withoutLLPrivacyTheHostResolves() throws {
        let bench = try bench(llPrivacy: false)
        let c = bench.controller
        #expect(c.commands(HCIOpcode.leReadResolvingListSize).isEmpty && c.commands(HCIOpcode.leAddDeviceToResolvingList).isEmpty)
        #expect(c.commands(HCIOpcode.leSetAddressResolutionEnable).isEmpty && bench.peripheral.isAdvertising)
        // The legacy event with a resolvable private address of the tablet: ah() finds the bond.
        c.connect(handle: Bench.link, peer: Self.privateAddress(Self.tabletIRK, seed: 9))
        #expect(keyAnswered(bench) == Self.tabletKey)
    }

    @Test func aFullListLeavesTheRestToTheHost() throws {
        let log = CapturedLog()
        let bench = try bench(llPrivacy: true, listSize: 1, logger: log)
        #expect(bench.controller.resolvingList == [[0x01] + Self.phone.littleEndianBytes])
        #expect(log.lines.contains { $0.contains("1 bonded central(s) loaded, room for 1; 1 more resolved by the host (ah)") })
        // The tablet is not in the list: the controller reports its private address, the host resolves it.
        bench.controller.connectEnhanced(handle: Bench.link, peerType: 0x01, peer: Self.privateAddress(Self.tabletIRK, seed: 3), rpa: nil)
        #expect(keyAnswered(bench) == Self.tabletKey)
    }

    @Test func aNewBondIsAddedWithAdvertisingStoppedForTheTime() throws {
        let bench = try bench(llPrivacy: true)
        let c = bench.controller
        #expect(bench.peripheral.isAdvertising)
        let laptop = BluetoothAddress("C4:22:33:44:55:88")!
        let bond = Self.bond(laptop, irk: [UInt8](repeating: 0x99, count: 16), key: Self.phoneKey)
        bench.peripheral.security.bonds.save(bond)
        let before = c.commands.count
        bench.peripheral.security.bondSaved(bond)
        let after = c.commands[before...].map(\.opcode).filter {
            [HCIOpcode.leAddDeviceToResolvingList, HCIOpcode.leSetPrivacyMode, HCIOpcode.leSetAdvertisingEnable].contains($0)
        }
        #expect(after == [HCIOpcode.leSetAdvertisingEnable, HCIOpcode.leAddDeviceToResolvingList, HCIOpcode.leSetPrivacyMode,
                          HCIOpcode.leSetAdvertisingEnable])
        #expect(c.resolvingList.last == [0x01] + laptop.littleEndianBytes)
        #expect(c.isAdvertising && bench.peripheral.isAdvertising)
    }

    /// A link that closes while the Add waits does not start advertising between the commands
    /// (the controller would refuse the Add): advertising starts once, after it.
    @Test func noDeviceStartsAdvertisingWhileTheListChanges() throws {
        let bench = try bench(llPrivacy: true)
        let c = bench.controller
        let p = bench.peripheral
        c.connect(handle: Bench.link, peer: bench.central)
        let laptop = BluetoothAddress("C4:22:33:44:55:88")!
        let bond = Self.bond(laptop, irk: [UInt8](repeating: 0x99, count: 16), key: Self.phoneKey)
        p.security.bonds.save(bond)
        let before = c.commands.count
        // The controller takes the advertising stop, then no command for a while.
        c.commandCredits = 0
        p.security.bondSaved(bond)
        c.disconnect(handle: Bench.link)
        #expect(!p.isAdvertising, "advertising waits for the Add")
        c.commandCredits = 1
        bench.scheduler.advance(by: .seconds(3))
        let after = c.commands[before...].map(\.opcode).filter {
            [HCIOpcode.leAddDeviceToResolvingList, HCIOpcode.leSetPrivacyMode, HCIOpcode.leSetAdvertisingEnable].contains($0)
        }
        #expect(after == [HCIOpcode.leSetAdvertisingEnable, HCIOpcode.leAddDeviceToResolvingList, HCIOpcode.leSetPrivacyMode,
                          HCIOpcode.leSetAdvertisingEnable])
        #expect(c.resolvingList.last == [0x01] + laptop.littleEndianBytes)
        #expect(c.isAdvertising && p.isAdvertising)
    }

    @Test func aRefusedAddLeavesTheCentralToTheHost() throws {
        let log = CapturedLog()
        let bench = try bench(llPrivacy: true, logger: log)
        let c = bench.controller
        // The shared central scans, say: the controller refuses (Command Disallowed).
        c.failures[HCIOpcode.leAddDeviceToResolvingList] = HCIStatus.commandDisallowed
        let laptop = BluetoothAddress("C4:22:33:44:55:88")!
        let laptopIRK = [UInt8](repeating: 0x99, count: 16)
        let bond = Self.bond(laptop, irk: laptopIRK, key: Self.phoneKey)
        bench.peripheral.security.bonds.save(bond)
        bench.peripheral.security.bondSaved(bond)
        #expect(c.resolvingList.count == 2)
        #expect(log.lines.contains { $0.contains("refused while advertising, scanning or connecting; the host resolves it (ah)") })
        #expect(c.isAdvertising && bench.peripheral.isAdvertising, "advertising is back after the refusal")
        c.connect(handle: Bench.link, peer: Self.privateAddress(laptopIRK, seed: 4))
        #expect(keyAnswered(bench) == Self.phoneKey)
    }

    /// Without stopping advertising, the controller would refuse: the scripted controller keeps
    /// the rule (7.8.38), so the pause is what makes the Add pass.
    @Test func theSimulatedControllerRefusesAnAddWhileAdvertisingWithResolutionOn() throws {
        let bench = try bench(llPrivacy: true)
        #expect(bench.controller.isAdvertising && bench.controller.addressResolution)
        var status: UInt8?
        bench.peripheral.hci.send(.leAddDeviceToResolvingList(peerIdentity: LEAddress(BluetoothAddress("C5:00:00:00:00:01")!, isRandom: true),
                                                              peerIRK: [UInt8](repeating: 1, count: 16), localIRK: [UInt8](repeating: 0, count: 16))) {
            status = $0.status
        }
        #expect(status == HCIStatus.commandDisallowed)
    }

    /// Two devices on one controller share its one list: one entry per central identity, with
    /// the local IRK of the first device that bonded with it; each device finds its own bond.
    @Test func devicesSharingAControllerShareOneList() throws {
        let bench = try SharedBench(devices: [HeartRateDevice(seed: 1), HeartRateDevice(seed: 2)], sets: 4)
        let c = bench.controller
        c.supportsLLPrivacy = true
        let (first, second) = (bench.peripherals[0], bench.peripherals[1])
        let secondKey = [UInt8](repeating: 0x66, count: 16)
        let laptop = BluetoothAddress("C4:22:33:44:55:88")!
        first.security.bonds.save(Self.bond(Self.phone, irk: Self.phoneIRK, key: Self.phoneKey))
        second.security.bonds.save(Self.bond(Self.phone, irk: Self.phoneIRK, key: secondKey))
        second.security.bonds.save(Self.bond(laptop, irk: [UInt8](repeating: 0x99, count: 16), key: Self.tabletKey))
        let (firstIRK, secondIRK) = (first.security.identity.resolvingKey, second.security.identity.resolvingKey)
        bench.host.controller.controllerDown(reason: "test")
        c.commands = []
        bench.host.controller.controllerUp()
        #expect(c.resolvingList == [[0x01] + Self.phone.littleEndianBytes, [0x01] + laptop.littleEndianBytes])
        let adds = c.commands(HCIOpcode.leAddDeviceToResolvingList).map(\.parameters)
        #expect(adds.count == 2 && Array(adds[0][23...]) == firstIRK && Array(adds[1][23...]) == secondIRK)
        #expect(first.isAdvertising && second.isAdvertising)
        // The phone connects to the second device: resolved by the controller, its bond there.
        let set = try #require(second.advertisingSet)
        c.connectEnhanced(handle: Bench.link, peerType: 0x03, peer: Self.phone, rpa: Self.privateAddress(Self.phoneIRK, seed: 7))
        c.setTerminated(set: set, handle: Bench.link)
        #expect(keyAnswered(c, handle: Bench.link) == secondKey)

        // A new bond of the first device: every set off for the Add, back on after it.
        let tablet = Self.bond(Self.tablet, irk: Self.tabletIRK, key: Self.tabletKey)
        first.security.bonds.save(tablet)
        let before = c.commands.count
        first.security.bondSaved(tablet)
        let after = Array(c.commands[before...])
        let addIndex = try #require(after.firstIndex { $0.opcode == HCIOpcode.leAddDeviceToResolvingList })
        let offs = after[..<addIndex].filter { $0.opcode == HCIOpcode.leSetExtendedAdvertisingEnable && $0.parameters.first == 0 }
        #expect(!offs.isEmpty)
        #expect(c.resolvingList.count == 3)
        #expect(c.enabledSets.contains(try #require(first.advertisingSet)) && first.isAdvertising)
    }

    private func keyAnswered(_ c: SimulatedController, handle: UInt16) -> [UInt8]? {
        let before = c.commands.count
        c.requestLongTermKey(handle: handle)
        return c.commands[before...].first { $0.opcode == HCIOpcode.leLongTermKeyRequestReply }.map { Array($0.parameters.dropFirst(2)) }
    }
}
