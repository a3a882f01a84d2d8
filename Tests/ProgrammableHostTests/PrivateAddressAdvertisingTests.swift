import BlemuCentral
import BlemuCore
import BlemuHCI
import BlemuHost
import BlemuProgrammableHost
import BlemuSecurity
import BlemuSimulator
import Testing

/// A generator that gives the values it was handed, then repeats the last (what
/// `ResolvablePrivateAddress.make` draws prand from).
private struct GivenValues: RandomNumberGenerator {
    var values: [UInt64]
    mutating func next() -> UInt64 { values.count > 1 ? values.removeFirst() : values[0] }
}

/// Own address types resolvable-or-public and resolvable-or-random for `advertise` (issue 36):
/// the host makes the resolvable private address itself from the IRK its peripheral side's
/// pairings distribute (Vol 6, Part B, 1.3.2.2), advertises it as a random address, renews it
/// every TGAP(private_addr_int) (Vol 3, Part C, Appendix A), and a link made from it pairs with
/// the private address as the responder's and gives the identity it stands for.
@Suite struct PrivateAddressAdvertisingTests {
    typealias Parameters = ProgrammedAdvertising.Parameters
    static let flags: [UInt8] = [0x02, 0x01, 0x06]

    /// Core Vol 3, Part H, D.7: ah(IRK ec0234a3 57c8ad05 341010a6 0a397d9b, prand 708194) =
    /// 0dfbaa, so the address is prand || hash, 70:81:94:0D:FB:AA. prand's random part is drawn
    /// (bits 0-21), its top bits are 0b01 (Vol 6, Part B, 1.3.2.2); a random part of all zeros or
    /// all ones is drawn again.
    @Test func theAddressIsPrandAndAhOfTheSpecsVector() {
        let irk: [UInt8] = [0x9b, 0x7d, 0x39, 0x0a, 0xa6, 0x10, 0x10, 0x34, 0x05, 0xad, 0xc8, 0x57, 0xa3, 0x34, 0x02, 0xec]
        var random = GivenValues(values: [0, 0x3F_FFFF, 0xFFFF_FFFF_FFC0_0000, 0x30_8194])
        let address = ResolvablePrivateAddress.make(irk: irk, random: &random)
        #expect(address == BluetoothAddress("70:81:94:0D:FB:AA")!)
        #expect(ResolvablePrivateAddress.resolves(address, irk: irk))
    }

    private func sentSet(_ bench: ProgrammedBench, after mark: Int) throws -> ExtendedParameters {
        try #require(bench.commands(after: mark, HCIOpcode.leSetExtendedAdvertisingParameters).first.flatMap(ExtendedParameters.init))
    }

    @Test(arguments: [ProgrammedAdvertising.OwnAddressType.resolvableOrPublic, .resolvableOrRandom])
    func aResolvableAdvertisementGoesOutAsARandomAddressMadeFromThePeripheralsIRK(type: ProgrammedAdvertising.OwnAddressType) throws {
        let bench = try ProgrammedBench()
        let mark = bench.hostController.commands.count
        let id = try bench.start(Parameters(data: Self.flags, connectable: true, ownAddressType: type))
        let sent = try sentSet(bench, after: mark)
        // Own_Address_Type random: the set's random address is the private one; no resolving list.
        #expect(sent.ownAddressType == 0x01)
        let advertisement = try #require(bench.advertising.advertisements[id])
        let address = advertisement.ownAddress
        #expect(address.isRandom)
        #expect(bench.hostController.setAddresses()[sent.set] == address.address.littleEndianBytes)
        #expect(address.address.bytes.5 & 0xC0 == 0x40, "prand's two top bits are 0b01")
        #expect(ResolvablePrivateAddress.resolves(address.address, irk: bench.advertising.peripheral.security.identity.resolvingKey))
        #expect(bench.advertising.resolvingKey == bench.advertising.peripheral.security.identity.resolvingKey)
        #expect(advertisement.identityAddress == (type == .resolvableOrPublic ? LEAddress(ProgrammedBench.publicAddress, isRandom: false)
                                                                              : LEAddress(ProgrammedBench.randomAddress, isRandom: true)))
        #expect(bench.hostController.commands(HCIOpcode.leAddDeviceToResolvingList).isEmpty)
        #expect(advertisement.isOn && bench.stopped.isEmpty)
        // Two advertisements, two private addresses: they cannot be linked by address.
        let other = try bench.start(Parameters(data: Self.flags, ownAddressType: type))
        #expect(bench.advertising.advertisements[other]?.ownAddress != address)
    }

    @Test func theAddressIsRenewedAfterItsTimeoutWithOneTimerAndNoOtherWakeup() throws {
        let bench = try ProgrammedBench()
        let timersBefore = bench.scheduler.pendingCount
        let id = try bench.start(Parameters(data: Self.flags, connectable: true, ownAddressType: .resolvableOrPublic,
                                            privateAddressTimeoutMilliseconds: 2_000))
        #expect(bench.scheduler.pendingCount == timersBefore + 1, "one timer for the renewal")
        let set = try #require(bench.advertising.advertisements[id]?.set)
        let first = try #require(bench.advertising.advertisements[id]?.ownAddress)
        let mark = bench.hostController.commands.count
        bench.scheduler.advance(by: .milliseconds(1_999))
        bench.air.run()
        #expect(bench.hostController.commands.count == mark, "nothing before the timeout")
        #expect(bench.advertising.advertisements[id]?.ownAddress == first)
        bench.scheduler.advance(by: .milliseconds(1))
        bench.air.run()
        let second = try #require(bench.advertising.advertisements[id]?.ownAddress)
        #expect(second != first && second.isRandom)
        #expect(ResolvablePrivateAddress.resolves(second.address, irk: bench.advertising.resolvingKey))
        // The connectable set is turned off, given the address (7.8.52), and on again.
        let sent = bench.hostController.commands[mark...].map(\.opcode)
        #expect(sent == [HCIOpcode.leSetExtendedAdvertisingEnable, HCIOpcode.leSetAdvertisingSetRandomAddress,
                         HCIOpcode.leSetExtendedAdvertisingEnable])
        #expect(bench.hostController.setAddresses()[set] == second.address.littleEndianBytes)
        #expect(bench.hostController.enabledSets.contains(set))
        #expect(bench.advertising.advertisements[id]?.isOn == true)
        #expect(bench.scheduler.pendingCount == timersBefore + 1, "the next renewal, and only it")
        // Stopped: the timer goes with it.
        bench.advertising.stop(id)
        bench.air.run()
        #expect(bench.scheduler.pendingCount == timersBefore)
        let addressesSent = bench.hostController.commands(HCIOpcode.leSetAdvertisingSetRandomAddress).count
        bench.scheduler.advance(by: .seconds(10))
        bench.air.run()
        #expect(bench.hostController.commands(HCIOpcode.leSetAdvertisingSetRandomAddress).count == addressesSent)
    }

    @Test func theDefaultTimeoutIsFifteenMinutes() throws {
        let bench = try ProgrammedBench()
        let id = try bench.start(Parameters(data: Self.flags, ownAddressType: .resolvableOrRandom))
        let first = bench.advertising.advertisements[id]?.ownAddress
        bench.scheduler.advance(by: .seconds(899))
        bench.air.run()
        #expect(bench.advertising.advertisements[id]?.ownAddress == first)
        bench.scheduler.advance(by: .seconds(1))
        bench.air.run()
        #expect(bench.advertising.advertisements[id]?.ownAddress != first)
    }

    @Test func aLegacyControllerGetsThePrivateAddressAsItsRandomAddressAndTheStaticOneBackAfter() throws {
        let bench = try ProgrammedBench(sets: 0)
        let id = try bench.start(Parameters(data: Self.flags, legacy: true, connectable: true, ownAddressType: .resolvableOrRandom,
                                            privateAddressTimeoutMilliseconds: 1_000))
        let first = try #require(bench.advertising.advertisements[id]?.ownAddress)
        #expect(bench.hostController.randomAddress == first.address)
        #expect(bench.hostController.commands(HCIOpcode.leSetAdvertisingParameters).last?.parameters[5] == 0x01)
        #expect(bench.advertising.controllerRandomAddressIsPrivate)
        let mark = bench.hostController.commands.count
        bench.scheduler.advance(by: .seconds(1))
        bench.air.run()
        let second = try #require(bench.advertising.advertisements[id]?.ownAddress)
        #expect(second != first && bench.hostController.randomAddress == second.address)
        // Advertising off for LE Set Random Address (7.8.4), then on again.
        #expect(bench.hostController.commands[mark...].map(\.opcode)
                == [HCIOpcode.leSetAdvertisingEnable, HCIOpcode.leSetRandomAddress, HCIOpcode.leSetAdvertisingEnable])
        #expect(bench.hostController.legacyAdvertising)
        bench.advertising.stop(id)
        bench.air.run()
        #expect(bench.hostController.randomAddress == ProgrammedBench.randomAddress)
        #expect(!bench.advertising.controllerRandomAddressIsPrivate)
    }

    @Test func aRefusedAddressLeavesTheOldOneInUseUntilTheNext() throws {
        let bench = try ProgrammedBench()
        let id = try bench.start(Parameters(data: Self.flags, connectable: true, ownAddressType: .resolvableOrPublic,
                                            privateAddressTimeoutMilliseconds: 1_000))
        let first = bench.advertising.advertisements[id]?.ownAddress
        bench.hostController.failures[HCIOpcode.leSetAdvertisingSetRandomAddress] = HCIStatus.commandDisallowed
        bench.scheduler.advance(by: .seconds(1))
        bench.air.run()
        #expect(bench.advertising.advertisements[id]?.ownAddress == first)
        #expect(bench.advertising.advertisements[id]?.isOn == true && bench.stopped.isEmpty)
        bench.hostController.failures[HCIOpcode.leSetAdvertisingSetRandomAddress] = nil
        bench.scheduler.advance(by: .seconds(1))
        bench.air.run()
        #expect(bench.advertising.advertisements[id]?.ownAddress != first)
    }

    @Test func aLinkMadeFromThePrivateAddressHasItAsItsOwnAddress() throws {
        let bench = try ProgrammedBench()
        let id = try bench.start(Parameters(data: Self.flags, connectable: true, ownAddressType: .resolvableOrPublic))
        let address = try #require(bench.advertising.advertisements[id]?.ownAddress)
        _ = try #require(try bench.connect(to: address)?.get())
        let accepted = try #require(bench.accepted.first)
        #expect(accepted.advertisement == id && accepted.ownAddress == address)
        #expect(bench.advertising.identityAddress(ofSet: bench.advertising.advertisements[id]?.set)
                == LEAddress(ProgrammedBench.publicAddress, isRandom: false))
    }

    @Test func theRefusalsOfTheResolvableTypesAndTheTimeout() throws {
        let withoutPublic = try ProgrammedBench { $0.address = BluetoothAddress(value: 0) }
        guard case .failure(let noPublic) = withoutPublic.advertising.start(Parameters(ownAddressType: .resolvableOrPublic)) else {
            Issue.record("resolvable-or-public without a public address was not refused")
            return
        }
        #expect(noPublic.message.contains("no public address for the private address to stand for"), "\(noPublic.message)")
        // Without a public address, resolvable-or-random still goes.
        #expect((try? withoutPublic.start(Parameters(ownAddressType: .resolvableOrRandom))) != nil)

        let bench = try ProgrammedBench()
        for (parameters, rule) in [
            (Parameters(ownAddressType: .publicAddress, privateAddressTimeoutMilliseconds: 5_000), "rpa_timeout_ms goes with own address type resolvable"),
            (Parameters(ownAddressType: .randomAddress, privateAddressTimeoutMilliseconds: 5_000), "rpa_timeout_ms goes with own address type resolvable"),
            (Parameters(ownAddressType: .resolvableOrRandom, privateAddressTimeoutMilliseconds: 999), "rpa_timeout_ms must be 1000 to 41400000"),
            (Parameters(ownAddressType: .resolvableOrRandom, privateAddressTimeoutMilliseconds: 41_400_001), "rpa_timeout_ms must be 1000 to 41400000"),
            (Parameters(ownAddressType: .resolvableOrRandom, privateAddressTimeoutMilliseconds: .min), "rpa_timeout_ms must be 1000 to 41400000"),
            (Parameters(ownAddressType: .resolvableOrRandom, privateAddressTimeoutMilliseconds: .max), "rpa_timeout_ms must be 1000 to 41400000"),
        ] {
            let mark = bench.hostController.commands.count
            let refusal = bench.advertising.start(parameters)
            guard case .failure(let why) = refusal else {
                Issue.record("\(parameters) was not refused")
                continue
            }
            #expect(why.message.contains(rule), "\(why.message)")
            #expect(bench.hostController.commands.count == mark, "nothing sent")
        }
        #expect(bench.advertising.advertisements.isEmpty)
        // Out of range, the duration is held to the range all the same.
        #expect(Parameters(privateAddressTimeoutMilliseconds: .max).privateAddressTimeout == .seconds(41_400))
        #expect(Parameters(privateAddressTimeoutMilliseconds: .min).privateAddressTimeout == .seconds(1))
    }
}

/// The pairing on a link made from a private address: the confirm values hash the private
/// address the central connected to (Vol 3, Part H, 2.2.6: ra), and the identity distributed
/// (3.6.4, 3.6.5) is the IRK the address was made from with the identity it stands for, never
/// the private address; a reset forgets that IRK.
@Suite struct PrivateAddressPairingTests {
    typealias Bench = HostPeripheralSecurityTests.Bench

    @Test(arguments: [ProgrammedAdvertising.OwnAddressType.resolvableOrPublic, .resolvableOrRandom])
    func aBondingCentralGetsTheIRKOfTheAddressAndTheIdentityItStandsFor(type: ProgrammedAdvertising.OwnAddressType) throws {
        let b = try Bench()
        b.host.security.configure(PairingSettings(ioCapability: .noInputNoOutput, mitm: false))
        let id = try b.advertising.start(ProgrammedAdvertising.Parameters(data: [0x02, 0x01, 0x06], connectable: true,
                                                                          ownAddressType: type)).get()
        b.air.run()
        let address = try #require(b.advertising.advertisements[id]?.ownAddress)
        var connected: CentralLink?
        b.central.connect(to: address) { connected = try? $0.get() }
        b.air.run()
        let link = try #require(connected)
        guard case .connected(let summary)? = b.events.first(where: { $0.name == "connected" }) else {
            Issue.record("no connected event: \(b.events)")
            return
        }
        #expect(summary.ownAddress == address)
        _ = try b.host.secure(link: summary.link, level: .encrypted)
        b.air.run()
        guard case .pairingRequest(let request)? = b.events.last else {
            Issue.record("no pairing request: \(b.events)")
            return
        }
        try b.host.security.answer(request.pairing, .confirm(true))
        b.run(centralHandle: link.connection.handle, hostHandle: summary.handle)
        #expect(!b.events.contains { $0.name == "security-failed" }, "\(b.events)")
        let identity = type == .resolvableOrPublic ? LEAddress(b.hostController.address, isRandom: false)
            : LEAddress(b.advertising.randomAddress, isRandom: true)
        let bond = try #require(b.centralSecurity.bonds.bonds.first, "the central bonded")
        #expect(bond.peer == address, "bonded from the private address")
        #expect(bond.identity == identity, "the identity the address stands for, not \(address)")
        #expect(bond.identityResolvingKey == b.advertising.peripheral.security.identity.resolvingKey)
        #expect(bond.resolves(address))
    }

    @Test func resetForgetsThePeripheralSidesIRK() throws {
        let b = try Bench()
        let before = b.advertising.peripheral.security.identity.resolvingKey
        try b.host.reset()
        #expect(b.advertising.peripheral.security.identity.resolvingKey != before)
    }
}

/// With the legacy commands the controller has one random address (Vol 4, Part E, 7.8.4): while
/// an advertisement's private address is it, a connection from the random address would go out
/// from the private one while SMP hashed the static one, so it is refused; from the public
/// address it goes.
@Suite struct PrivateAddressLegacyConnectTests {
    @Test func aConnectionFromTheRandomAddressIsRefusedWhileALegacyPrivateAddressIsTheControllers() throws {
        let bench = try AdvertisingHostBench(sets: 0)
        let peer = BluetoothAddress("C0:DE:00:00:00:77")!
        let id = try bench.advertise(ProgrammedAdvertising.Parameters(data: [0x02, 0x01, 0x06], legacy: true, connectable: true),
                                     own: .resolvableOrPublic)
        for own in [AddressType.randomDevice, .randomIdentity] {
            #expect(throws: HostError.self) {
                try bench.host.connect(HostConnectRequest(peer: peer, peerAddressType: .randomDevice, ownAddressType: own))
            }
        }
        #expect(bench.host.attempt == nil)
        try bench.host.stopAdvertising(id)
        bench.air.run()
        // Stopped: the static random address is the controller's again, and the connection may go.
        #expect(bench.hostController.randomAddress == bench.host.randomAddress.address)
        _ = try bench.host.connect(HostConnectRequest(peer: peer, peerAddressType: .randomDevice, ownAddressType: .randomDevice))
        #expect(bench.host.attempt != nil)
    }

    @Test func fromThePublicAddressItGoesAndExtendedSetsNeverStandInTheWay() throws {
        let legacy = try AdvertisingHostBench(sets: 0)
        _ = try legacy.advertise(ProgrammedAdvertising.Parameters(data: [0x02, 0x01, 0x06], legacy: true, connectable: true),
                                 own: .resolvableOrRandom)
        _ = try legacy.host.connect(HostConnectRequest(peer: BluetoothAddress("C0:DE:00:00:00:77")!, peerAddressType: .randomDevice,
                                                       ownAddressType: .publicDevice))
        #expect(legacy.host.attempt != nil)
        let extended = try AdvertisingHostBench()
        _ = try extended.advertise(ProgrammedAdvertising.Parameters(data: [0x02, 0x01, 0x06], connectable: true), own: .resolvableOrRandom)
        #expect(!extended.host.advertising.controllerRandomAddressIsPrivate)
        _ = try extended.host.connect(HostConnectRequest(peer: BluetoothAddress("C0:DE:00:00:00:77")!, peerAddressType: .randomDevice,
                                                         ownAddressType: .randomDevice))
        #expect(extended.host.attempt != nil)
    }
}
