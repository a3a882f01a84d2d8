import BlemuCentral
import BlemuControl
import BlemuCore
import BlemuHCI
import BlemuHost
import BlemuProgrammableHost
import BlemuSimulator
import Logging
import Testing

/// The programmable host on a simulated controller, joined by `SimulatedAir` to a central: its
/// advertising (`advertise`, `advertise-stop`) with the links it accepts in the one table.
final class AdvertisingHostBench {
    let scheduler = ManualScheduler()
    let centralController = SimulatedController()
    let hostController = SimulatedController()
    let air: SimulatedAir
    let central: CentralHost
    let host: ProgrammableHost
    let control: HostControl
    var events: [HostEvent] = []

    static let publicAddress = BluetoothAddress("00:1B:DC:00:00:02")!
    static let centralAddress = BluetoothAddress("00:1B:DC:00:00:01")!

    init(sets: UInt8 = 4) throws {
        let logger = Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })
        centralController.address = Self.centralAddress
        hostController.address = Self.publicAddress
        hostController.extendedAdvertisingSets = sets
        air = SimulatedAir(centralController, hostController)
        let a = centralController, b = hostController
        central = try CentralHost(on: ControllerHost(controller: "central", scheduler: scheduler, logger: logger, output: { a.output($0, $1) }))
        a.host = central.hci
        let controller = ControllerHost(controller: "host", scheduler: scheduler, logger: logger,
                                        transmitBufferCapacity: PeripheralHost.largestPDU, output: { b.output($0, $1) })
        host = try ProgrammableHost(on: controller, stateDirectory: nil, logger: logger)
        control = HostControl(host: host, logger: logger)
        host.onEvent = { [unowned self] in self.events.append($0) }
        b.host = controller.hci
        central.controller.controllerUp()
        controller.controllerUp()
        air.run()
    }

    func advertise(_ parameters: ProgrammedAdvertising.Parameters, own: ProgrammedAdvertising.OwnAddressType? = nil) throws -> Int {
        let id = try host.startAdvertising(HostAdvertiseRequest(parameters: parameters, ownAddressType: own))
        air.run()
        return id
    }

    func connect(to address: LEAddress) -> Result<CentralLink, CentralError>? {
        var result: Result<CentralLink, CentralError>?
        central.connect(to: address) { result = $0 }
        air.run()
        return result
    }

    var connected: [HostLinkSummary] { events.compactMap { if case .connected(let link) = $0 { return link } else { return nil } } }
}

@Suite struct ProgrammableHostAdvertisingTests {
    typealias Parameters = ProgrammedAdvertising.Parameters

    /// A central that connects to an advertisement gets a link in the host's one table, told as
    /// `connected` with the advertisement and the peripheral role; the advertisement goes on;
    /// `disconnect` closes it by link id; `disconnected` tells it.
    @Test func aCentralThatConnectsGetsAPeripheralLinkInTheTableAndTheAdvertisementGoesOn() throws {
        let b = try AdvertisingHostBench()
        let id = try b.advertise(Parameters(data: [0x02, 0x01, 0x06], connectable: true))
        #expect(b.host.advertising.advertisements[id]?.isOn == true)
        // No own address type asked: the identity's (the controller has a public address).
        #expect(b.host.advertising.advertisements[id]?.ownAddress == LEAddress(AdvertisingHostBench.publicAddress, isRandom: false))
        guard case .success = b.connect(to: LEAddress(AdvertisingHostBench.publicAddress, isRandom: false)) else {
            Issue.record("no link")
            return
        }
        guard let link = b.connected.last else { Issue.record("no connected event: \(b.events)"); return }
        #expect(link.role == .peripheral && link.advertisement == id && link.attempt == nil)
        #expect(link.peer == LEAddress(AdvertisingHostBench.centralAddress, isRandom: false))
        #expect(link.ownAddress == LEAddress(AdvertisingHostBench.publicAddress, isRandom: false))
        #expect(b.host.links.entries.map(\.id) == [link.link])
        let line = JSONValue.object(HostControl.members(.connected(link))).encoded
        #expect(line.contains(#""role":"peripheral""#) && line.contains(#""advertisement":\#(id)"#) && !line.contains("attempt"), "\(line)")
        // Enabled again after the connection (LE Advertising Set Terminated ended the set, 7.8.56).
        #expect(b.host.advertising.advertisements[id]?.isOn == true)
        // A second central-side connect to that central is refused: one link per peer.
        #expect(throws: HostError(.alreadyConnected, "a link to \(AdvertisingHostBench.centralAddress) is open already")) {
            _ = try b.host.connect(HostConnectRequest(peer: AdvertisingHostBench.centralAddress, peerAddressType: .publicDevice))
        }

        try b.host.disconnect(link: link.link, reason: 0x13)
        b.air.run()
        #expect(b.events.last == .disconnected(link: link.link, reason: 0x16))
        #expect(b.host.links.count == 0)
    }

    /// `advertise-stop`: `advertising-stopped` with `stopped` at once; an id not running is
    /// `unknown-advertisement`, and a refused combination names its rule without a code.
    @Test func stopTellsAdvertisingStoppedAndUnknownIdsAndBrokenRulesAreRefused() throws {
        let b = try AdvertisingHostBench()
        let id = try b.advertise(Parameters(data: [0x02, 0x01, 0x06]))
        try b.host.stopAdvertising(id)
        #expect(b.events.last == .advertisingStopped(advertisement: id, reason: .stopped))
        #expect(JSONValue.object(HostControl.members(b.events.last!)).encoded
                == #"{"event":"advertising-stopped","device":"host","advertisement":\#(id),"reason":"stopped","status":null}"#)
        #expect(JSONValue.object(HostControl.members(.advertisingStopped(advertisement: 4, reason: .timeout))).encoded
                == #"{"event":"advertising-stopped","device":"host","advertisement":4,"reason":"timeout","status":"0x3c"}"#)
        #expect(b.control.execute(.advertiseStop(advertisement: id), id: 3, client: 1).encoded
                == #"{"id":3,"ok":false,"error":"no advertisement \#(id) is running","code":"unknown-advertisement"}"#)
        let events = b.events.count
        let refused = b.control.execute(.advertise(HostAdvertiseRequest(parameters: Parameters(connectable: true, scannable: true))),
                                         id: 4, client: 1).encoded
        #expect(refused.hasPrefix(#"{"id":4,"ok":false,"error":"extended advertising cannot be both connectable and scannable"#)
                && !refused.contains("code"), "\(refused)")
        #expect(b.control.execute(.advertise(HostAdvertiseRequest()), id: 5, client: 1).encoded == #"{"id":5,"ok":true,"advertisement":\#(id + 1)}"#)
        #expect(b.events.count == events)
    }

    /// A reset stops every advertisement (`advertising-stopped`, `reset`) and closes the links
    /// they accepted; meanwhile `advertise` is `not-ready`; after it the host's new random
    /// address is the one advertised from.
    @Test func aResetStopsAdvertisingClosesItsLinksAndTheNewRandomAddressIsAdvertisedFrom() throws {
        let b = try AdvertisingHostBench()
        let first = try b.advertise(Parameters(connectable: true))
        let second = try b.advertise(Parameters(data: [0x02, 0x01, 0x06]), own: .randomAddress)
        let oldRandom = b.host.randomAddress.address
        #expect(b.host.advertising.advertisements[second]?.ownAddress == LEAddress(oldRandom, isRandom: true))
        guard case .success = b.connect(to: LEAddress(AdvertisingHostBench.publicAddress, isRandom: false)),
              let link = b.connected.last else {
            Issue.record("no link: \(b.events)")
            return
        }
        try b.host.reset()
        #expect(b.events.suffix(2) == [.advertisingStopped(advertisement: first, reason: .hostReset),
                                       .advertisingStopped(advertisement: second, reason: .hostReset)])
        #expect(throws: HostError(.notReady, "a reset is under way; wait for its reset event")) {
            _ = try b.host.startAdvertising(HostAdvertiseRequest())
        }
        b.air.run()
        #expect(b.events.suffix(2) == [.disconnected(link: link.link, reason: 0x16), .reset])
        #expect(b.host.advertising.advertisements.isEmpty)
        let newRandom = b.host.randomAddress.address
        #expect(newRandom != oldRandom && b.host.advertising.randomAddress == newRandom)
        let third = try b.advertise(Parameters(), own: .randomAddress)
        #expect(third == second + 1)
        #expect(b.host.advertising.advertisements[third]?.ownAddress == LEAddress(newRandom, isRandom: true))
        #expect(b.hostController.commands(HCIOpcode.leSetAdvertisingSetRandomAddress).last?.parameters.dropFirst()
                == newRandom.littleEndianBytes[...])
    }

    /// A controller that goes away ends every advertisement (`controller-lost`) and every link
    /// they accepted leaves the table with `disconnected`: no stale link id survives it.
    @Test func aLostControllerStopsAdvertisingAndEmptiesTheTableOfItsLinks() throws {
        let b = try AdvertisingHostBench()
        let id = try b.advertise(Parameters(connectable: true))
        guard case .success = b.connect(to: LEAddress(AdvertisingHostBench.publicAddress, isRandom: false)),
              let link = b.connected.last else {
            Issue.record("no link: \(b.events)")
            return
        }
        b.host.controller.controllerDown(reason: "test")
        #expect(b.events.contains(.advertisingStopped(advertisement: id, reason: .controllerLost)))
        #expect(b.events.contains { if case .disconnected(link.link, _) = $0 { return true } else { return false } }, "\(b.events)")
        #expect(b.host.links.count == 0 && b.host.advertising.advertisements.isEmpty)
        #expect(JSONValue.object(HostControl.members(.advertisingStopped(advertisement: id, reason: .controllerLost))).encoded
                == #"{"event":"advertising-stopped","device":"host","advertisement":\#(id),"reason":"controller-lost","status":null}"#)
    }

    /// Without a public address the default own address is the static random one.
    @Test func withoutAPublicAddressTheDefaultOwnAddressIsTheStaticRandomOne() throws {
        let b = try AdvertisingHostBench()
        b.hostController.address = BluetoothAddress(value: 0)
        b.host.controller.controllerDown(reason: "test")
        b.host.controller.controllerUp()
        b.air.run()
        let id = try b.advertise(Parameters())
        #expect(b.host.advertising.advertisements[id]?.ownAddress == LEAddress(b.host.randomAddress.address, isRandom: true))
    }
}
