import BlemuCentral
import BlemuConnection
import BlemuCore
import BlemuHCI
import BlemuHost
import BlemuProgrammableHost
import BlemuSimulator
import Logging
import Testing

/// The programmable host's peripheral side on a simulated controller, joined by `SimulatedAir` to
/// a `CentralHost` on another: what a program asks to advertise, the commands that go out, and
/// the links a central makes.
final class ProgrammedBench {
    typealias Parameters = ProgrammedAdvertising.Parameters
    let scheduler = ManualScheduler()
    let centralController = SimulatedController()
    let hostController = SimulatedController()
    let air: SimulatedAir
    let central: CentralHost
    let controller: ControllerHost
    let advertising: ProgrammedAdvertising
    var accepted: [ProgrammedAdvertising.AcceptedLink] = []
    var stopped: [(id: Int, reason: ProgrammedAdvertising.StopReason)] = []

    static let publicAddress = BluetoothAddress("00:1B:DC:00:00:02")!
    static let randomAddress = BluetoothAddress("C3:11:22:33:44:55")!
    static let centralAddress = BluetoothAddress("00:1B:DC:00:00:01")!

    /// A central role beside the advertising on the host's controller, as the programmable host has.
    var hostCentral: CentralHost?

    /// `sets` 0: a controller without LE Extended Advertising (the legacy commands). `withCentral`:
    /// a `CentralHost` on the host's controller too.
    init(sets: UInt8 = 4, withCentral: Bool = false, configure: (SimulatedController) -> Void = { _ in }) throws {
        let logger = Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })
        centralController.address = Self.centralAddress
        hostController.address = Self.publicAddress
        hostController.extendedAdvertisingSets = sets
        configure(hostController)
        air = SimulatedAir(centralController, hostController)
        let a = centralController, b = hostController
        central = try CentralHost(on: ControllerHost(controller: "central", scheduler: scheduler, logger: logger, output: { a.output($0, $1) }))
        a.host = central.hci
        controller = ControllerHost(controller: "host", scheduler: scheduler, logger: logger,
                                    transmitBufferCapacity: PeripheralHost.largestPDU, output: { b.output($0, $1) })
        advertising = try ProgrammedAdvertising(controller: controller,
                                                configuration: PeripheralConfiguration(name: "Programmed", controller: "host"),
                                                randomAddress: Self.randomAddress, logger: logger)
        if withCentral { hostCentral = try CentralHost(on: controller) }
        b.host = controller.hci
        advertising.onConnection = { [unowned self] in self.accepted.append($0) }
        advertising.onStopped = { [unowned self] in self.stopped.append(($0, $1)) }
        central.controller.controllerUp()
        controller.controllerUp()
        air.run()
    }

    /// Starts `parameters`; the id, after the controller answered.
    func start(_ parameters: Parameters) throws -> Int {
        let id = try advertising.start(parameters).get()
        air.run()
        return id
    }

    /// The commands sent from here on.
    func commands(after mark: Int, _ opcode: UInt16) -> [HCICommand] {
        hostController.commands[mark...].filter { $0.opcode == opcode }
    }

    func connect(to address: LEAddress) -> Result<CentralLink, CentralError>? {
        var result: Result<CentralLink, CentralError>?
        central.connect(to: address) { result = $0 }
        air.run()
        return result
    }
}

/// LE Set Extended Advertising Parameters (Vol 4, Part E, 7.8.53), read back.
struct ExtendedParameters: Equatable {
    let set: UInt8
    let properties: UInt16
    let interval: UInt32
    let ownAddressType: UInt8
    let peerAddressType: UInt8
    let peer: [UInt8]
    let primaryPHY: UInt8
    let secondaryPHY: UInt8

    init?(_ command: HCICommand) {
        let p = command.parameters
        guard command.opcode == HCIOpcode.leSetExtendedAdvertisingParameters, p.count == 25 else { return nil }
        set = p[0]
        properties = UInt16(p[1]) | UInt16(p[2]) << 8
        interval = UInt32(p[3]) | UInt32(p[4]) << 8 | UInt32(p[5]) << 16
        let intervalMax = UInt32(p[6]) | UInt32(p[7]) << 8 | UInt32(p[8]) << 16
        guard intervalMax == interval else { return nil }
        ownAddressType = p[10]
        peerAddressType = p[11]
        peer = Array(p[12..<18])
        primaryPHY = p[20]
        secondaryPHY = p[22]
    }
}

@Suite struct ProgrammedAdvertisingTests {
    typealias Parameters = ProgrammedAdvertising.Parameters
    static let target = LEAddress(BluetoothAddress("C0:DE:00:00:00:77")!, isRandom: true)
    static let flags: [UInt8] = [0x02, 0x01, 0x06]
    static let name: [UInt8] = [0x05, 0x09, 0x74, 0x65, 0x73, 0x74]

    // MARK: The commands of each combination

    /// One combination and what its LE Set Extended Advertising Parameters carries.
    struct Combination: CustomTestStringConvertible, Sendable {
        let label: String
        let parameters: Parameters
        let properties: UInt16
        var testDescription: String { label }
    }

    static let combinations: [Combination] = [
        Combination(label: "legacy connectable (ADV_IND)", parameters: Parameters(data: flags, scanResponse: name, legacy: true, connectable: true),
                    properties: 0x13),
        Combination(label: "legacy scannable (ADV_SCAN_IND)", parameters: Parameters(data: flags, scanResponse: name, legacy: true, scannable: true),
                    properties: 0x12),
        Combination(label: "legacy non-connectable (ADV_NONCONN_IND)", parameters: Parameters(data: flags, legacy: true), properties: 0x10),
        Combination(label: "legacy directed, low duty cycle", parameters: Parameters(legacy: true, connectable: true, directedTo: target),
                    properties: 0x15),
        Combination(label: "legacy directed, high duty cycle",
                    parameters: Parameters(legacy: true, connectable: true, directedTo: target, highDutyCycle: true), properties: 0x1D),
        Combination(label: "extended connectable", parameters: Parameters(data: flags, connectable: true), properties: 0x01),
        Combination(label: "extended scannable", parameters: Parameters(scanResponse: name, scannable: true), properties: 0x02),
        Combination(label: "extended non-connectable", parameters: Parameters(data: flags), properties: 0x00),
        Combination(label: "extended connectable directed", parameters: Parameters(connectable: true, directedTo: target), properties: 0x05),
        Combination(label: "extended scannable directed", parameters: Parameters(scanResponse: name, scannable: true, directedTo: target),
                    properties: 0x06),
        Combination(label: "extended non-connectable directed", parameters: Parameters(data: flags, directedTo: target), properties: 0x04),
    ]

    @Test(arguments: combinations)
    func eachCombinationSendsItsEventPropertiesPeerAndPayloads(_ combination: Combination) throws {
        let bench = try ProgrammedBench()
        let mark = bench.hostController.commands.count
        let id = try bench.start(combination.parameters)
        let sent = try #require(bench.commands(after: mark, HCIOpcode.leSetExtendedAdvertisingParameters).first.flatMap(ExtendedParameters.init))
        #expect(sent.properties == combination.properties)
        #expect(sent.interval == 160, "100 ms in units of 0.625 ms")
        #expect(sent.ownAddressType == 0x00)
        #expect(sent.primaryPHY == 0x01 && sent.secondaryPHY == 0x01)
        let p = combination.parameters
        if let peer = p.directedTo {
            #expect(sent.peerAddressType == 0x01 && sent.peer == peer.address.littleEndianBytes)
        } else {
            #expect(sent.peerAddressType == 0x00 && sent.peer == [0, 0, 0, 0, 0, 0])
        }
        let data = bench.commands(after: mark, HCIOpcode.leSetExtendedAdvertisingData).map { Array($0.parameters.dropFirst(4)) }
        let scanResponse = bench.commands(after: mark, HCIOpcode.leSetExtendedScanResponseData).map { Array($0.parameters.dropFirst(4)) }
        // ADV_DIRECT_IND carries no data; a scannable extended set's data is its scan response.
        #expect(data.joined().elementsEqual(p.data))
        #expect(scanResponse.joined().elementsEqual(p.answersScans ? p.scanResponse ?? [] : []))
        #expect(scanResponse.isEmpty == !p.answersScans)
        // Enabled, with the 1.28 s duration only for high duty cycle (7.8.56).
        let enable = try #require(bench.commands(after: mark, HCIOpcode.leSetExtendedAdvertisingEnable).last)
        #expect(enable.parameters == [1, 1, sent.set] + (p.highDutyCycle ? [128, 0] : [0, 0]) + [0])
        #expect(bench.advertising.advertisements[id]?.isOn == true)
        #expect(bench.stopped.isEmpty)
    }

    @Test func theOwnAddressTypeRandomGivesTheSetTheHostsStaticRandomAddress() throws {
        let bench = try ProgrammedBench()
        let mark = bench.hostController.commands.count
        let id = try bench.start(Parameters(data: Self.flags, connectable: true, ownAddressType: .randomAddress))
        let sent = try #require(bench.commands(after: mark, HCIOpcode.leSetExtendedAdvertisingParameters).first.flatMap(ExtendedParameters.init))
        #expect(sent.ownAddressType == 0x01)
        #expect(bench.hostController.setAddresses()[sent.set] == ProgrammedBench.randomAddress.littleEndianBytes)
        #expect(bench.advertising.advertisements[id]?.ownAddress == LEAddress(ProgrammedBench.randomAddress, isRandom: true))
        // Public: no set address at all.
        let publicMark = bench.hostController.commands.count
        let other = try bench.start(Parameters(data: Self.flags, connectable: true))
        #expect(bench.commands(after: publicMark, HCIOpcode.leSetAdvertisingSetRandomAddress).isEmpty)
        #expect(bench.advertising.advertisements[other]?.ownAddress == LEAddress(ProgrammedBench.publicAddress, isRandom: false))
    }

    @Test(arguments: [(20.0, UInt32(0x20)), (100, 160), (21.3, 34), (1000, 1600), (10240, 0x4000)])
    func theIntervalGoesOutInUnitsOfFiveEighthsOfAMillisecond(_ milliseconds: Double, _ units: UInt32) throws {
        let bench = try ProgrammedBench()
        let mark = bench.hostController.commands.count
        _ = try bench.start(Parameters(data: Self.flags, intervalMilliseconds: milliseconds))
        let sent = try #require(bench.commands(after: mark, HCIOpcode.leSetExtendedAdvertisingParameters).first.flatMap(ExtendedParameters.init))
        #expect(sent.interval == units)
    }

    @Test(arguments: [(ProgrammedAdvertising.PHY.leCoded, ProgrammedAdvertising.PHY.le2M, UInt8(0x03), UInt8(0x02)),
                      (.le1M, .leCoded, 0x01, 0x03), (.leCoded, .leCoded, 0x03, 0x03), (.le1M, .le2M, 0x01, 0x02)])
    func thePhysGoOutAsPrimaryAndSecondaryAdvertisingPHY(_ primary: ProgrammedAdvertising.PHY, _ secondary: ProgrammedAdvertising.PHY,
                                                        _ primaryByte: UInt8, _ secondaryByte: UInt8) throws {
        let bench = try ProgrammedBench { $0.supports2MPHY = true; $0.otherLEFeatures = 1 << 11 }
        let mark = bench.hostController.commands.count
        _ = try bench.start(Parameters(data: Self.flags, connectable: true, primaryPHY: primary, secondaryPHY: secondary))
        let sent = try #require(bench.commands(after: mark, HCIOpcode.leSetExtendedAdvertisingParameters).first.flatMap(ExtendedParameters.init))
        #expect(sent.primaryPHY == primaryByte && sent.secondaryPHY == secondaryByte)
    }

    /// What the checks refuse still has units in range, never a trap (a value from a socket).
    @Test(arguments: [Double.nan, -.infinity, .infinity, -5, 0, 1e300])
    func anIntervalOutOfRangeHasUnitsInRangeAndIsRefused(_ milliseconds: Double) throws {
        let parameters = Parameters(intervalMilliseconds: milliseconds)
        #expect((0x20...0x4000).contains(parameters.intervalUnits))
        let capabilities = ProgrammedAdvertising.Capabilities(extendedCommands: true)
        #expect(ProgrammedAdvertising.ruleBroken(by: parameters, on: capabilities)?.contains("interval_ms must be 20 to 10240") == true)
    }

    @Test func extendedDataLongerThanOneCommandGoesInFragments() throws {
        let bench = try ProgrammedBench()
        let data = (0..<300).map { UInt8(truncatingIfNeeded: $0) }
        let mark = bench.hostController.commands.count
        _ = try bench.start(Parameters(data: data))
        let fragments = bench.commands(after: mark, HCIOpcode.leSetExtendedAdvertisingData)
        // Operation 0x01 (first fragment), 0x02 (last), 7.8.54.
        #expect(fragments.map { $0.parameters[1] } == [0x01, 0x02])
        #expect(fragments.flatMap { $0.parameters.dropFirst(4) } == data)
    }

    // MARK: A controller driven with the legacy commands

    @Test func aLegacyOnlyControllerGetsTheLegacyCommandsAndOneAdvertisementAtATime() throws {
        let bench = try ProgrammedBench(sets: 0)
        let mark = bench.hostController.commands.count
        _ = try bench.start(Parameters(legacy: true, connectable: true, directedTo: Self.target, ownAddressType: .randomAddress,
                                       intervalMilliseconds: 50))
        let parameters = try #require(bench.commands(after: mark, HCIOpcode.leSetAdvertisingParameters).first).parameters
        // Interval 80 units, ADV_DIRECT_IND low duty cycle (0x04), own random, peer random and its address (7.8.5).
        #expect(Array(parameters[0..<4]) == [80, 0, 80, 0])
        #expect(parameters[4] == 0x04 && parameters[5] == 0x01 && parameters[6] == 0x01)
        #expect(Array(parameters[7..<13]) == Self.target.address.littleEndianBytes)
        #expect(bench.hostController.randomAddress == ProgrammedBench.randomAddress)
        #expect(bench.commands(after: mark, HCIOpcode.leSetAdvertisingData).isEmpty, "ADV_DIRECT_IND has no data")
        #expect(bench.hostController.legacyAdvertising)
        #expect(bench.commands(after: mark, HCIOpcode.leSetExtendedAdvertisingParameters).isEmpty)

        let refused = bench.advertising.start(Parameters(data: Self.flags, legacy: true))
        #expect(refused.failure?.code == "no-room")
        let extended = bench.advertising.start(Parameters(data: Self.flags))
        #expect(extended.failure?.message.contains("LE extended advertising commands") == true)
    }

    @Test func aLegacyOnlyControllerSendsTheAdvertisingTypeOfEachLegacyKind() throws {
        let kinds: [(Parameters, UInt8)] = [
            (Parameters(data: Self.flags, legacy: true, connectable: true), 0x00),
            (Parameters(legacy: true, connectable: true, directedTo: Self.target, highDutyCycle: true), 0x01),
            (Parameters(data: Self.flags, scanResponse: Self.name, legacy: true, scannable: true), 0x02),
            (Parameters(data: Self.flags, legacy: true), 0x03),
        ]
        for (parameters, type) in kinds {
            let bench = try ProgrammedBench(sets: 0)
            let mark = bench.hostController.commands.count
            _ = try bench.start(parameters)
            let sent = try #require(bench.commands(after: mark, HCIOpcode.leSetAdvertisingParameters).first).parameters
            #expect(sent[4] == type)
            #expect(sent[5] == 0x00, "own address public")
            let scanResponse = bench.commands(after: mark, HCIOpcode.leSetScanResponseData)
            #expect(scanResponse.isEmpty == !parameters.answersScans)
        }
    }

    // MARK: Refused combinations, each naming its rule

    struct Refused: CustomTestStringConvertible, Sendable {
        let parameters: Parameters
        let rule: String
        var testDescription: String { rule }
    }

    static let long = [UInt8](repeating: 0xAA, count: 32)
    static let refusals: [Refused] = [
        Refused(parameters: Parameters(intervalMilliseconds: 19.9), rule: "7.8.5"),
        Refused(parameters: Parameters(intervalMilliseconds: 10240.5), rule: "interval_ms must be 20 to 10240"),
        Refused(parameters: Parameters(intervalMilliseconds: .nan), rule: "interval_ms must be 20 to 10240"),
        Refused(parameters: Parameters(ownAddressType: .randomAddress, privateAddressTimeoutMilliseconds: 60_000), rule: "rpa_timeout_ms goes with own address type resolvable"),
        Refused(parameters: Parameters(ownAddressType: .resolvableOrPublic, privateAddressTimeoutMilliseconds: 0), rule: "rpa_timeout_ms must be 1000 to 41400000"),
        Refused(parameters: Parameters(legacy: true, connectable: true, highDutyCycle: true), rule: "bit 3 needs bit 2"),
        Refused(parameters: Parameters(connectable: true, directedTo: target, highDutyCycle: true), rule: "high duty cycle directed advertising is legacy only"),
        Refused(parameters: Parameters(legacy: true, primaryPHY: .leCoded), rule: "LE 1M only"),
        Refused(parameters: Parameters(legacy: true, secondaryPHY: .le2M), rule: "LE 1M only"),
        Refused(parameters: Parameters(legacy: true, directedTo: target), rule: "legacy directed advertising is connectable"),
        Refused(parameters: Parameters(legacy: true, connectable: true, scannable: true, directedTo: target), rule: "legacy directed advertising is not scannable"),
        Refused(parameters: Parameters(data: flags, legacy: true, connectable: true, directedTo: target), rule: "ADV_DIRECT_IND has no AdvData"),
        Refused(parameters: Parameters(scanResponse: name, legacy: true, connectable: true, directedTo: target), rule: "ADV_DIRECT_IND has no AdvData"),
        Refused(parameters: Parameters(data: long, legacy: true, connectable: true), rule: "legacy advertising data is at most 31 bytes, not 32"),
        Refused(parameters: Parameters(scanResponse: long, legacy: true, connectable: true), rule: "a legacy scan response is at most 31 bytes, not 32"),
        Refused(parameters: Parameters(scanResponse: name, legacy: true), rule: "ADV_NONCONN_IND is not scanned"),
        Refused(parameters: Parameters(scanResponse: name, connectable: true, scannable: true), rule: "cannot be both connectable and scannable"),
        Refused(parameters: Parameters(primaryPHY: .le2M), rule: "primary_phy is 1m or coded"),
        Refused(parameters: Parameters(primaryPHY: .leCoded), rule: "no LE Coded PHY"),
        Refused(parameters: Parameters(secondaryPHY: .leCoded), rule: "no LE Coded PHY"),
        Refused(parameters: Parameters(secondaryPHY: .le2M), rule: "no LE 2M PHY"),
        Refused(parameters: Parameters(data: flags, scanResponse: name, scannable: true), rule: "its AUX_ADV_IND has no AdvData"),
        Refused(parameters: Parameters(scannable: true), rule: "needs a scan response"),
        Refused(parameters: Parameters(scanResponse: name, connectable: true), rule: "a non-scannable set takes no scan response data"),
        Refused(parameters: Parameters(data: [UInt8](repeating: 1, count: 246), connectable: true), rule: "at most 245 bytes, not 246"),
        Refused(parameters: Parameters(data: [UInt8](repeating: 1, count: 1001)), rule: "Max_Advertising_Data_Length 1000"),
        Refused(parameters: Parameters(scanResponse: [UInt8](repeating: 1, count: 1001), scannable: true), rule: "Max_Advertising_Data_Length 1000"),
    ]

    @Test(arguments: refusals)
    func aCombinationTheSpecForbidsIsRefusedNamingItsRuleAndSendsNothing(_ refused: Refused) throws {
        let bench = try ProgrammedBench { $0.maximumAdvertisingDataLength = 1000 }
        let mark = bench.hostController.commands.count
        let result = bench.advertising.start(refused.parameters)
        let refusal = try #require(result.failure)
        #expect(refusal.message.contains(refused.rule), "\(refusal.message)")
        #expect(refusal.code == nil)
        bench.air.run()
        #expect(bench.hostController.commands.count == mark, "nothing sent")
        #expect(bench.advertising.advertisements.isEmpty)
    }

    @Test func theOwnAddressTypePublicIsRefusedWhenTheControllerHasNoPublicAddress() throws {
        let bench = try ProgrammedBench { $0.address = BluetoothAddress(value: 0) }
        let refused = bench.advertising.start(Parameters(data: Self.flags, connectable: true))
        #expect(refused.failure?.message.contains("no public address") == true)
        #expect((try? bench.start(Parameters(data: Self.flags, connectable: true, ownAddressType: .randomAddress))) != nil)
    }

    @Test func aStartBeforeTheControllerIsReadyIsRefusedAsNotReady() throws {
        let bench = try ProgrammedBench()
        bench.controller.controllerDown(reason: "test")
        #expect(bench.advertising.start(Parameters(data: Self.flags)).failure?.code == "not-ready")
    }

    @Test func everySetInUseRefusesTheNextAdvertisementAsNoRoom() throws {
        let bench = try ProgrammedBench(sets: 2)
        _ = try bench.start(Parameters(data: Self.flags))
        _ = try bench.start(Parameters(data: Self.flags))
        let refused = bench.advertising.start(Parameters(data: Self.flags))
        #expect(refused.failure?.code == "no-room")
    }

    // MARK: Links

    @Test func aCentralConnectingToAnAdvertisementBecomesAPeripheralLinkReportedWithItsId() throws {
        let bench = try ProgrammedBench()
        let id = try bench.start(Parameters(data: Self.flags, connectable: true, ownAddressType: .randomAddress))
        let set = try #require(bench.advertising.advertisements[id]?.set)
        let enables = bench.hostController.commands(HCIOpcode.leSetExtendedAdvertisingEnable).count
        let link = try #require(try bench.connect(to: LEAddress(ProgrammedBench.randomAddress, isRandom: true))?.get())

        let accepted = try #require(bench.accepted.first)
        #expect(bench.accepted.count == 1)
        #expect(accepted.advertisement == id)
        #expect(accepted.peer == LEAddress(ProgrammedBench.centralAddress, isRandom: false) && accepted.peerAddressType == 0x00)
        #expect(accepted.parameters.interval == 24, "as LE Connection Complete gave it")
        #expect(bench.advertising.peripheral.address == ProgrammedBench.randomAddress, "the blank device's identity: the host's static random address")
        #expect(accepted.ownAddress == LEAddress(ProgrammedBench.randomAddress, isRandom: true))
        #expect(bench.advertising.peripheral.connection(on: accepted.connection.handle) === accepted.connection)
        #expect(bench.advertising.peripheral.connectionCount == 1)
        #expect(bench.controller.linkRole(accepted.connection.handle) == .peripheral)

        // The link's GATT server is the blank device's: GAP Device Name (handle 3, GAP first).
        var name: [UInt8]?
        link.client.read(3) { name = try? $0.get() }
        bench.air.run()
        #expect(name.map { String(decoding: $0, as: UTF8.self) } == "Programmed")

        // The set ended with the connection (7.8.56); the advertisement goes on.
        let again = bench.hostController.commands(HCIOpcode.leSetExtendedAdvertisingEnable)
        #expect(again.count == enables + 1 && again.last?.parameters == [1, 1, set, 0, 0, 0])
        #expect(bench.hostController.enabledSets.contains(set))
        #expect(bench.advertising.advertisements[id]?.isOn == true)
        #expect(bench.stopped.isEmpty)
    }

    @Test func aLegacyAdvertisementGoesOnAfterItsConnection() throws {
        let bench = try ProgrammedBench(sets: 0)
        let id = try bench.start(Parameters(data: Self.flags, legacy: true, connectable: true))
        _ = try #require(try bench.connect(to: LEAddress(ProgrammedBench.publicAddress, isRandom: false))?.get())
        #expect(bench.accepted.map(\.advertisement) == [id])
        #expect(bench.accepted.first?.ownAddress == LEAddress(ProgrammedBench.publicAddress, isRandom: false))
        // Legacy advertising ended with the connection (Vol 6, Part B, 4.4.2) and is enabled again.
        #expect(bench.hostController.legacyAdvertising)
        #expect(bench.hostController.commands(HCIOpcode.leSetAdvertisingEnable).last?.parameters == [1])
    }

    @Test func aDirectedAdvertisementIsConnectedByTheCentralItNames() throws {
        let bench = try ProgrammedBench()
        let central = LEAddress(ProgrammedBench.centralAddress, isRandom: false)
        let id = try bench.start(Parameters(connectable: true, directedTo: central))
        _ = try #require(try bench.connect(to: LEAddress(ProgrammedBench.publicAddress, isRandom: false))?.get())
        #expect(bench.accepted.map(\.advertisement) == [id])
        #expect(bench.accepted.first?.peer == central)
    }

    @Test func aRefusedReEnableAfterAConnectionIsTriedAgainWhenALinkCloses() throws {
        let bench = try ProgrammedBench()
        let id = try bench.start(Parameters(data: Self.flags, connectable: true))
        bench.hostController.failures[HCIOpcode.leSetExtendedAdvertisingEnable] = HCIStatus.commandDisallowed
        let link = try #require(try bench.connect(to: LEAddress(ProgrammedBench.publicAddress, isRandom: false))?.get())
        #expect(bench.advertising.advertisements[id]?.isOn == false)
        #expect(bench.stopped.isEmpty, "it waits for room, it does not stop")
        bench.hostController.failures = [:]
        link.disconnect()
        bench.air.run()
        #expect(bench.advertising.advertisements[id]?.isOn == true)
    }

    /// LE Advertising Set Terminated naming a link that is not open (its LE Connection Complete
    /// failed): the set is off all the same, and the advertisement goes on.
    @Test func aSetEndedForALinkThatNeverOpenedGoesOn() throws {
        let bench = try ProgrammedBench()
        let id = try bench.start(Parameters(data: Self.flags, connectable: true))
        let set = try #require(bench.advertising.advertisements[id]?.set)
        bench.hostController.setTerminated(set: set, handle: 0x0099)
        bench.air.run()
        #expect(bench.hostController.enabledSets.contains(set))
        #expect(bench.accepted.isEmpty && bench.stopped.isEmpty)
    }

    @Test func aClosedLinkIsToldWithItsHandleAndReason() throws {
        let bench = try ProgrammedBench()
        var closed: [(UInt16, UInt8)] = []
        bench.advertising.onLinkClosed = { closed.append(($0, $1)) }
        _ = try bench.start(Parameters(data: Self.flags, connectable: true))
        let link = try #require(try bench.connect(to: LEAddress(ProgrammedBench.publicAddress, isRandom: false))?.get())
        let handle = try #require(bench.accepted.first?.connection.handle)
        link.disconnect(reason: HCIStatus.remoteUserTerminated)
        bench.air.run()
        #expect(closed.map(\.0) == [handle] && closed.first?.1 == HCIStatus.remoteUserTerminated)
        #expect(bench.advertising.peripheral.connectionCount == 0)
    }

    /// The controller refuses resolving list changes while advertising with address resolution
    /// on (Vol 4, Part E, 7.8.38): the host's change turns every advertisement off, then on.
    @Test func advertisingGoesOffForAResolvingListChangeAndOnAfterIt() throws {
        let bench = try ProgrammedBench()
        let first = try bench.start(Parameters(data: Self.flags, connectable: true))
        let second = try bench.start(Parameters(data: Self.flags))
        bench.advertising.resolvingListChangeBegins()
        bench.air.run()
        #expect(!bench.hostController.isAdvertising)
        #expect(bench.advertising.advertisements.values.allSatisfy { !$0.isOn })
        bench.advertising.resolvingListChangeEnded()
        bench.air.run()
        let sets = Set([first, second].compactMap { bench.advertising.advertisements[$0]?.set })
        #expect(bench.hostController.enabledSets == sets)
        #expect(bench.advertising.advertisements.values.allSatisfy { $0.isOn })
        #expect(bench.stopped.isEmpty)
    }

    // MARK: Stop and restart

    @Test func aStoppedAdvertisementTurnsItsSetOffAndFreesItAndAnIdIsNeverReused() throws {
        let bench = try ProgrammedBench(sets: 1)
        let id = try bench.start(Parameters(data: Self.flags, connectable: true))
        let set = try #require(bench.advertising.advertisements[id]?.set)
        let mark = bench.hostController.commands.count
        #expect(bench.advertising.stop(id))
        bench.air.run()
        #expect(bench.stopped.map(\.id) == [id] && bench.stopped.first?.reason == .stopped)
        #expect(bench.commands(after: mark, HCIOpcode.leSetExtendedAdvertisingEnable).map(\.parameters) == [[0, 1, set, 0, 0, 0]])
        #expect(bench.commands(after: mark, HCIOpcode.leRemoveAdvertisingSet).map(\.parameters) == [[set]])
        #expect(!bench.hostController.isAdvertising)
        #expect(!bench.advertising.stop(id), "already stopped")
        #expect(bench.stopped.count == 1)

        // The one set is free again; the new advertisement has a new id, and is connectable.
        let restarted = try bench.start(Parameters(data: Self.flags, connectable: true))
        #expect(restarted != id)
        #expect(bench.advertising.advertisements[restarted]?.set == set)
        _ = try #require(try bench.connect(to: LEAddress(ProgrammedBench.publicAddress, isRandom: false))?.get())
        #expect(bench.accepted.map(\.advertisement) == [restarted])
    }

    @Test func stopAllStopsEveryAdvertisement() throws {
        let bench = try ProgrammedBench()
        let first = try bench.start(Parameters(data: Self.flags))
        let second = try bench.start(Parameters(data: Self.flags, connectable: true))
        bench.advertising.stopAll()
        bench.air.run()
        #expect(bench.stopped.map(\.id) == [first, second])
        #expect(bench.stopped.allSatisfy { $0.reason == .stopped })
        #expect(!bench.hostController.isAdvertising)
    }

    // MARK: Ends the controller decides

    @Test func aHighDutyCycleDirectedAdvertisementThatTimesOutStopsWithTimeout() throws {
        // Legacy commands: LE Connection Complete with Advertising Timeout (7.7.65.1).
        let legacy = try ProgrammedBench(sets: 0)
        let id = try legacy.start(Parameters(legacy: true, connectable: true, directedTo: Self.target, highDutyCycle: true))
        legacy.hostController.connect(handle: 0, peer: BluetoothAddress(value: 0), status: HCIStatus.advertisingTimeout)
        legacy.air.run()
        #expect(legacy.stopped.map(\.id) == [id] && legacy.stopped.first?.reason == .timeout)
        #expect(legacy.stopped.first?.reason.word == "timeout")
        #expect(legacy.advertising.advertisements.isEmpty)

        // With a central role on the controller too, the event's Role octet (0x00 as rootcanal
        // sends it) does not make it the central's: the advertiser hears it.
        let shared = try ProgrammedBench(sets: 0, withCentral: true)
        let directed = try shared.start(Parameters(legacy: true, connectable: true, directedTo: Self.target, highDutyCycle: true))
        shared.hostController.connect(handle: 0, peer: BluetoothAddress(value: 0), central: true, status: HCIStatus.advertisingTimeout)
        shared.air.run()
        #expect(shared.stopped.map(\.id) == [directed] && shared.stopped.first?.reason == .timeout)

        // An extended set: LE Advertising Set Terminated with Advertising Timeout (7.7.65.18).
        let extended = try ProgrammedBench()
        let other = try extended.start(Parameters(legacy: true, connectable: true, directedTo: Self.target, highDutyCycle: true))
        let set = try #require(extended.advertising.advertisements[other]?.set)
        extended.hostController.setTerminated(set: set, handle: 0, status: HCIStatus.advertisingTimeout)
        // A controller may send the failed connection too (7.8.56): one stop all the same.
        extended.hostController.connect(handle: 0, peer: BluetoothAddress(value: 0), status: HCIStatus.advertisingTimeout)
        extended.air.run()
        #expect(extended.stopped.map(\.id) == [other] && extended.stopped.first?.reason == .timeout)
        // Its set is free again.
        let next = try extended.start(Parameters(data: Self.flags))
        #expect(extended.advertising.advertisements[next]?.set == set)
    }

    @Test func aCommandTheControllerRefusesStopsTheAdvertisementWithItsStatus() throws {
        let bench = try ProgrammedBench()
        bench.hostController.failures[HCIOpcode.leSetExtendedAdvertisingParameters] = HCIStatus.invalidParameters
        let id = try bench.start(Parameters(data: Self.flags, connectable: true))
        #expect(bench.stopped.map(\.id) == [id])
        #expect(bench.stopped.first?.reason == .refused(command: "LE Set Extended Advertising Parameters", status: HCIStatus.invalidParameters))
        #expect(bench.advertising.advertisements.isEmpty)
        // The enable went through: it is turned off again.
        #expect(bench.hostController.commands(HCIOpcode.leSetExtendedAdvertisingEnable).last?.parameters.first == 0)
    }

    @Test func aControllerResetStopsEveryAdvertisementWithReset() throws {
        let bench = try ProgrammedBench()
        let id = try bench.start(Parameters(data: Self.flags, connectable: true))
        bench.hostController.event(0x10, [0x01])   // Hardware Error (7.7.16): the host resets
        bench.air.run()
        #expect(bench.stopped.map(\.id) == [id] && bench.stopped.first?.reason == .controllerReset)
        #expect(bench.controller.isReady)
        // Advertising starts again on request after initialization.
        #expect((try? bench.start(Parameters(data: Self.flags))) != nil)
    }

    @Test func aLostControllerStopsEveryAdvertisementWithControllerLost() throws {
        let bench = try ProgrammedBench()
        let id = try bench.start(Parameters(data: Self.flags))
        bench.controller.controllerDown(reason: "gone")
        #expect(bench.stopped.map(\.id) == [id] && bench.stopped.first?.reason == .controllerLost)
    }

    @Test func theHostsStopTurnsAdvertisingOffAndStopsEachWithHostStopping() throws {
        let bench = try ProgrammedBench()
        let id = try bench.start(Parameters(data: Self.flags, connectable: true))
        var done = false
        bench.controller.stop { done = true }
        bench.air.run()
        #expect(done)
        #expect(bench.stopped.map(\.id) == [id] && bench.stopped.first?.reason == .hostStopping)
        #expect(bench.advertising.start(Parameters(data: Self.flags)).failure?.code == "not-ready")
    }

    // MARK: The devices beside it

    @Test func theBlankDeviceTakesNoSetAndNeverAdvertisesByItself() throws {
        let bench = try ProgrammedBench()
        #expect(bench.advertising.peripheral.advertisingSet == nil)
        #expect(!bench.hostController.isAdvertising)
        #expect(bench.controller.usesExtendedCommands, "a controller with sets takes the extended commands, for both kinds")
    }
}

extension Result {
    var failure: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}
