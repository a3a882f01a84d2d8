import BlemuCentral
import BlemuChannels
import BlemuConnection
import BlemuControl
import BlemuCore
import BlemuHCI
import BlemuHost
import BlemuProgrammableHost
import BlemuSimulator
import BlemuTestSupport
import Logging
import Testing

/// A peer's end of a channel: it echoes each SDU unless told to keep them.
final class PeerChannelEnd: CreditBasedChannelDelegate {
    var opened: [CreditBasedChannel] = []
    var received: [[UInt8]] = []
    var closed: [ChannelCloseReason] = []
    var echoes = true
    /// Gives the peer no credits back once open.
    var stallOnOpen = false

    func channelOpened(_ channel: CreditBasedChannel) {
        opened.append(channel)
        if stallOnOpen { channel.pauseReceiving(true) }
    }
    func channel(_ channel: CreditBasedChannel, received sdu: ArraySlice<UInt8>) {
        received.append(Array(sdu))
        if echoes { _ = channel.send(sdu) }
    }
    func channelClosed(_ channel: CreditBasedChannel, reason: ChannelCloseReason) { closed.append(reason) }
    func channelIsReady(_ channel: CreditBasedChannel) {}
}

/// The programmable host on one simulated controller, joined by `SimulatedAir` to a peer on
/// another: the peer advertises (a `ProgrammedAdvertising`) for the host to connect to as
/// central, or connects (a `CentralHost`) to the host's own advertisement, wired into the host
/// as its peripheral side is.
final class ChannelBench {
    let scheduler = ManualScheduler()
    let hostController = SimulatedController()
    let peerController = SimulatedController()
    let air: SimulatedAir
    let host: ProgrammableHost
    /// The host's peripheral side, wired as the host wires it (`peripheralLinkOpened`).
    let hostAdvertising: ProgrammedAdvertising
    let peerAdvertising: ProgrammedAdvertising
    let peerCentral: CentralHost
    var events: [HostEvent] = []
    var peerLinks: [ProgrammedAdvertising.AcceptedLink] = []
    let peerEnd = PeerChannelEnd()

    static let hostAddress = BluetoothAddress("00:1B:DC:00:00:0A")!
    static let hostAdvertisingAddress = BluetoothAddress("C5:00:00:00:00:0A")!
    static let peerAddress = BluetoothAddress("00:1B:DC:00:00:0B")!
    static let peerRandom = BluetoothAddress("C6:00:00:00:00:0B")!

    init(logger: Logger = Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })) throws {
        hostController.address = Self.hostAddress
        peerController.address = Self.peerAddress
        hostController.extendedAdvertisingSets = 4
        peerController.extendedAdvertisingSets = 4
        air = SimulatedAir(hostController, peerController)
        let h = hostController, p = peerController
        let hostControllerHost = ControllerHost(controller: "host", scheduler: scheduler, logger: logger,
                                                transmitBufferCapacity: PeripheralHost.largestPDU, output: { h.output($0, $1) })
        host = try ProgrammableHost(on: hostControllerHost, stateDirectory: nil, logger: logger)
        let logger = Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })
        hostAdvertising = try ProgrammedAdvertising(controller: hostControllerHost,
                                                    configuration: PeripheralConfiguration(name: "Host", controller: "host"),
                                                    randomAddress: Self.hostAdvertisingAddress, logger: logger)
        h.host = hostControllerHost.hci
        let peerControllerHost = ControllerHost(controller: "peer", scheduler: scheduler, logger: logger,
                                                transmitBufferCapacity: PeripheralHost.largestPDU, output: { p.output($0, $1) })
        peerAdvertising = try ProgrammedAdvertising(controller: peerControllerHost,
                                                    configuration: PeripheralConfiguration(name: "Peer", controller: "peer"),
                                                    randomAddress: Self.peerRandom, logger: logger)
        peerCentral = try CentralHost(on: peerControllerHost)
        p.host = peerControllerHost.hci
        host.onEvent = { [unowned self] in self.events.append($0) }
        hostAdvertising.onConnection = { [unowned self] accepted in
            self.host.peripheralLinkOpened(accepted.connection, advertisement: accepted.advertisement, ownAddress: accepted.ownAddress)
        }
        hostAdvertising.onLinkClosed = { [unowned self] in self.host.peripheralLinkClosed(handle: $0, reason: $1) }
        peerAdvertising.onConnection = { [unowned self] in self.peerLinks.append($0) }
        hostControllerHost.controllerUp()
        peerControllerHost.controllerUp()
        air.run()
    }

    /// The host connects (central) to the peer's advertisement; the link id.
    func hostConnects() throws -> Int {
        _ = try peerAdvertising.start(.init(data: [0x02, 0x01, 0x06], connectable: true, ownAddressType: .randomAddress)).get()
        air.run()
        _ = try host.connect(HostConnectRequest(peer: Self.peerRandom, peerAddressType: .randomDevice))
        air.run()
        guard case .connected(let link)? = events.last(where: { $0.name == "connected" }) else {
            Issue.record("no connected event: \(events)")
            throw HostError(nil, "not connected")
        }
        return link.link
    }

    /// The peer connects (central) to the host's advertisement; the peer's link and the host's link id.
    func peerConnects() throws -> (CentralLink, Int) {
        _ = try hostAdvertising.start(.init(data: [0x02, 0x01, 0x06], connectable: true, ownAddressType: .randomAddress)).get()
        air.run()
        var result: Result<CentralLink, CentralError>?
        peerCentral.connect(to: LEAddress(Self.hostAdvertisingAddress, isRandom: true)) { result = $0 }
        air.run()
        let link = try #require(try result?.get())
        guard case .connected(let summary)? = events.last(where: { $0.name == "connected" }) else {
            Issue.record("no connected event: \(events)")
            throw HostError(nil, "not connected")
        }
        #expect(summary.role == .peripheral)
        return (link, summary.link)
    }

    var opened: [HostChannelSummary] {
        events.compactMap { if case .channelOpened(let summary) = $0 { summary } else { nil } }
    }

    var data: [(Int, [UInt8])] {
        events.compactMap { if case .channelData(let channel, let bytes) = $0 { (channel, bytes) } else { nil } }
    }
}

@Suite struct HostChannelsTests {
    @Test func aChannelToThePeersSPSMOpensCarriesSDUsBothWaysAndDisconnects() throws {
        let bench = try ChannelBench()
        let link = try bench.hostConnects()
        let peerLink = try #require(bench.peerLinks.first)
        peerLink.connection.channels.servers.serve(spsm: 0x0080, parameters: ChannelParameters(mtu: 512, mps: 100, initialCredits: 4),
                                                   delegate: bench.peerEnd)

        let id = try bench.host.channels.connect(HostChannelRequest(link: link, spsm: 0x0080,
                                                                    parameters: ChannelParameters(mtu: 300, mps: 50, initialCredits: 3)))
        bench.air.run()
        let opened = try #require(bench.opened.first)
        #expect(opened.channel == id && opened.link == link && opened.spsm == 0x0080 && !opened.incoming && !opened.enhanced)
        #expect(opened.mtu == 300 && opened.mps == 50 && opened.peerMTU == 512 && opened.peerMPS == 100)
        #expect((0x0040...0x007F).contains(opened.cid) && (0x0040...0x007F).contains(opened.peerCID))

        // An SDU longer than the peer's MPS goes in several K-frames; the echo comes back whole.
        let sdu = (0..<250).map { UInt8($0) }
        try bench.host.channels.send(channel: id, sdu)
        bench.air.run()
        #expect(bench.peerEnd.received == [sdu])
        #expect(bench.data.map(\.0) == [id] && bench.data.map(\.1) == [sdu])

        // Past the peer's MTU: refused, nothing sent.
        #expect(throws: HostError.self) { try bench.host.channels.send(channel: id, [UInt8](repeating: 1, count: 513)) }
        try bench.host.channels.disconnect(channel: id)
        bench.air.run()
        #expect(bench.events.last == .channelClosed(channel: id, reason: .disconnected))
        #expect(bench.peerEnd.closed == [.disconnectedByPeer])
        #expect(throws: HostError(.unknownChannel, "no channel \(id) is open")) { try bench.host.channels.send(channel: id, [1]) }

        // A second channel gets a new id.
        let next = try bench.host.channels.connect(HostChannelRequest(link: link, spsm: 0x0080))
        #expect(next > id)
    }

    @Test func anEnhancedChannelOpensToo() throws {
        let bench = try ChannelBench()
        let link = try bench.hostConnects()
        bench.peerLinks.first?.connection.channels.servers.serve(spsm: 0x0081, delegate: bench.peerEnd)
        let id = try bench.host.channels.connect(HostChannelRequest(link: link, spsm: 0x0081, enhanced: true))
        bench.air.run()
        #expect(bench.opened.first?.channel == id && bench.opened.first?.enhanced == true)
        try bench.host.channels.send(channel: id, Array("hello".utf8))
        bench.air.run()
        #expect(bench.data.first?.1 == Array("hello".utf8))
    }

    @Test func aRefusedChannelFailsWithItsResult() throws {
        let bench = try ChannelBench()
        let link = try bench.hostConnects()
        let id = try bench.host.channels.connect(HostChannelRequest(link: link, spsm: 0x0090))
        bench.air.run()
        #expect(bench.events.last == .channelFailed(channel: id, reason: .refused(0x0002)))
        #expect(HostChannelEnd.refused(0x0002).word == "spsm-not-supported")
        #expect(HostChannelEnd.refused(0x0042).word == "result-0x0042")
        #expect(throws: HostError.self) { try bench.host.channels.send(channel: id, [1]) }
    }

    @Test func aLinkThatClosesClosesItsChannels() throws {
        let bench = try ChannelBench()
        let link = try bench.hostConnects()
        bench.peerLinks.first?.connection.channels.servers.serve(spsm: 0x0080, delegate: bench.peerEnd)
        let id = try bench.host.channels.connect(HostChannelRequest(link: link, spsm: 0x0080))
        bench.air.run()
        try bench.host.disconnect(link: link, reason: 0x13)
        bench.air.run()
        #expect(bench.events.contains(.channelClosed(channel: id, reason: .linkClosed)))
        #expect(bench.host.channels.count == 0)
    }

    @Test func aPeerOpensAChannelToAListenedSPSMOnAPeripheralLink() throws {
        let bench = try ChannelBench()
        try bench.host.channels.listen(spsm: 0x0025, parameters: ChannelParameters(mtu: 200, mps: 64, initialCredits: 5))
        let (peerLink, link) = try bench.peerConnects()
        let peerChannel = try #require(peerLink.openChannel(spsm: 0x0025, parameters: ChannelParameters(mtu: 100), delegate: bench.peerEnd))
        bench.air.run()
        let opened = try #require(bench.opened.first)
        #expect(opened.incoming && opened.link == link && opened.spsm == 0x0025 && opened.mtu == 200 && opened.peerMTU == 100)
        bench.peerEnd.echoes = false
        _ = peerChannel.send(Array("ping".utf8))
        bench.air.run()
        #expect(bench.data.map(\.1) == [Array("ping".utf8)] && bench.data.first?.0 == opened.channel)
        try bench.host.channels.send(channel: opened.channel, Array("pong".utf8))
        bench.air.run()
        #expect(bench.peerEnd.received == [Array("pong".utf8)])
        peerChannel.disconnect()
        bench.air.run()
        #expect(bench.events.last == .channelClosed(channel: opened.channel, reason: .peer))
    }

    @Test func aPeerOpensAChannelToAListenedSPSMOnACentralLinkAndUnlistenRefusesTheNext() throws {
        let bench = try ChannelBench()
        // Listened before the link opens: served on it as it opens.
        try bench.host.channels.listen(spsm: 0x0080, parameters: ChannelParameters())
        let link = try bench.hostConnects()
        let peerChannels = try #require(bench.peerLinks.first?.connection.channels)
        _ = peerChannels.connect(spsm: 0x0080, delegate: bench.peerEnd)
        bench.air.run()
        #expect(bench.opened.count == 1 && bench.opened.first?.incoming == true && bench.opened.first?.link == link)

        try bench.host.channels.unlisten(spsm: 0x0080)
        _ = peerChannels.connect(spsm: 0x0080, delegate: bench.peerEnd)
        bench.air.run()
        #expect(bench.opened.count == 1)
        #expect(bench.peerEnd.closed == [.refused(0x0002)])
        #expect(throws: HostError.self) { try bench.host.channels.unlisten(spsm: 0x0080) }
    }

    @Test func aFullSendQueueIsRefusedAsNoRoomAndReadyFollows() throws {
        let bench = try ChannelBench()
        let link = try bench.hostConnects()
        bench.peerEnd.stallOnOpen = true
        bench.peerEnd.echoes = false
        bench.peerLinks.first?.connection.channels.servers.serve(spsm: 0x0080, parameters: ChannelParameters(mtu: 1000, initialCredits: 1),
                                                                 delegate: bench.peerEnd)
        let id = try bench.host.channels.connect(HostChannelRequest(link: link, spsm: 0x0080))
        bench.air.run()
        var refusal: HostError?
        for _ in 0..<100 {
            do { try bench.host.channels.send(channel: id, [UInt8](repeating: 7, count: 1000)) } catch { refusal = error; break }
        }
        #expect(refusal?.code == .noRoom)
        bench.air.run()
        for channel in bench.peerEnd.opened { channel.pauseReceiving(false) }
        bench.air.run()
        #expect(bench.events.contains(.channelReady(channel: id)))
    }

    @Test func requestsTheHostCannotRunAreRefused() throws {
        let bench = try ChannelBench()
        let link = try bench.hostConnects()
        #expect(throws: HostError(.unknownLink, "no link 99 is open")) {
            try bench.host.channels.connect(HostChannelRequest(link: 99, spsm: 0x0080))
        }
        #expect((try? bench.host.channels.listen(spsm: 0x0027, parameters: ChannelParameters())) == nil, "EATT's")
        try bench.host.channels.listen(spsm: 0x0080, parameters: ChannelParameters())
        #expect(throws: HostError.self) { try bench.host.channels.listen(spsm: 0x0080, parameters: ChannelParameters()) }
        #expect(throws: HostError.self) { try bench.host.channels.disconnect(channel: 5) }
        // A connection under way cannot be written to or disconnected yet.
        let id = try bench.host.channels.connect(HostChannelRequest(link: link, spsm: 0x0080))
        #expect(throws: HostError.self) { try bench.host.channels.send(channel: id, [1]) }
    }

    @Test func aPeerOpeningAndClosingChannelsWithoutEndMakesABoundedNumberOfLines() throws {
        let log = CapturedLog()
        let bench = try ChannelBench(logger: log.logger)
        try bench.host.channels.listen(spsm: 0x0080, parameters: ChannelParameters())
        let (peerLink, _) = try bench.peerConnects()
        log.removeAll()
        for _ in 0..<200 {
            let opened = try #require(peerLink.openChannel(spsm: 0x0080, delegate: bench.peerEnd))
            bench.air.run()
            opened.disconnect()
            bench.air.run()
        }
        #expect(bench.opened.count == 200, "every channel told as an event")
        let lines = log.messages.filter { $0.contains("channel ") }
        #expect(lines.count <= 50, "\(lines.count) lines")
    }

    @Test func aResetForgetsTheListenedSPSMs() throws {
        let bench = try ChannelBench()
        _ = try bench.hostConnects()
        try bench.host.channels.listen(spsm: 0x0080, parameters: ChannelParameters())
        try bench.host.reset()
        bench.air.run()
        #expect(bench.events.last == .reset)
        #expect(bench.host.channels.listened.isEmpty)
    }
}

@Suite struct HostChannelRequestTests {
    func decode(_ line: String) -> Result<ControlRequest, ControlRequestError> { ControlRequest.decode(line: Array(line.utf8)) }

    func host(_ line: String) throws -> HostRequest {
        guard case .host(let request) = try decode(line).get().command else { throw HostError(nil, "not a host request") }
        return request
    }

    @Test func everyChannelOpDecodesWithItsDefaults() throws {
        #expect(try host(#"{"id":1,"cmd":"host","op":"channel-connect","link":2,"spsm":128}"#)
                == .channelConnect(HostChannelRequest(link: 2, spsm: 0x80)))
        #expect(try host(#"{"id":1,"cmd":"host","op":"channel-connect","link":2,"spsm":"0x0081","mtu":100,"mps":64,"credits":3,"enhanced":true}"#)
                == .channelConnect(HostChannelRequest(link: 2, spsm: 0x81, parameters: ChannelParameters(mtu: 100, mps: 64, initialCredits: 3),
                                                      enhanced: true)))
        #expect(try host(#"{"id":1,"cmd":"host","op":"channel-listen","spsm":"25"}"#) == .channelListen(spsm: 0x25, ChannelParameters()))
        #expect(try host(#"{"id":1,"cmd":"host","op":"channel-unlisten","spsm":37}"#) == .channelUnlisten(spsm: 37))
        #expect(try host(#"{"id":1,"cmd":"host","op":"channel-send","channel":4,"data":"00ff"}"#) == .channelSend(channel: 4, [0x00, 0xFF]))
        #expect(try host(#"{"id":1,"cmd":"host","op":"channel-send","channel":4,"data":""}"#) == .channelSend(channel: 4, []))
        #expect(try host(#"{"id":1,"cmd":"host","op":"channel-disconnect","channel":4}"#) == .channelDisconnect(channel: 4))
    }

    static let hostile: [String] = [
        #"{"id":1,"cmd":"host","op":"channel-connect","spsm":128}"#,
        #"{"id":1,"cmd":"host","op":"channel-connect","link":2}"#,
        #"{"id":1,"cmd":"host","op":"channel-connect","link":2,"spsm":0}"#,
        #"{"id":1,"cmd":"host","op":"channel-connect","link":2,"spsm":256}"#,
        #"{"id":1,"cmd":"host","op":"channel-connect","link":2,"spsm":"0x0100"}"#,
        #"{"id":1,"cmd":"host","op":"channel-connect","link":2,"spsm":"+80"}"#,
        #"{"id":1,"cmd":"host","op":"channel-connect","link":2,"spsm":"0x"}"#,
        #"{"id":1,"cmd":"host","op":"channel-connect","link":2,"spsm":1.5}"#,
        #"{"id":1,"cmd":"host","op":"channel-connect","link":2,"spsm":128,"mtu":22}"#,
        #"{"id":1,"cmd":"host","op":"channel-connect","link":2,"spsm":128,"mtu":65535}"#,
        #"{"id":1,"cmd":"host","op":"channel-connect","link":2,"spsm":128,"mps":65534}"#,
        #"{"id":1,"cmd":"host","op":"channel-connect","link":2,"spsm":128,"credits":0}"#,
        #"{"id":1,"cmd":"host","op":"channel-connect","link":2,"spsm":128,"credits":65536}"#,
        #"{"id":1,"cmd":"host","op":"channel-connect","link":2,"spsm":128,"enhanced":true,"mtu":63}"#,
        #"{"id":1,"cmd":"host","op":"channel-connect","link":2,"spsm":128,"enhanced":true,"mps":23}"#,
        #"{"id":1,"cmd":"host","op":"channel-connect","link":2,"spsm":128,"enhanced":"yes"}"#,
        #"{"id":1,"cmd":"host","op":"channel-connect","link":0,"spsm":128}"#,
        #"{"id":1,"cmd":"host","op":"channel-connect","link":2,"spsm":128,"data":"00"}"#,
        #"{"id":1,"cmd":"host","op":"channel-listen","spsm":[1]}"#,
        #"{"id":1,"cmd":"host","op":"channel-listen"}"#,
        #"{"id":1,"cmd":"host","op":"channel-send","channel":1}"#,
        #"{"id":1,"cmd":"host","op":"channel-send","channel":1,"data":"0"}"#,
        #"{"id":1,"cmd":"host","op":"channel-send","channel":1,"data":"zz"}"#,
        #"{"id":1,"cmd":"host","op":"channel-send","channel":1,"data":"+f+f"}"#,
        #"{"id":1,"cmd":"host","op":"channel-send","channel":1,"data":"0x00"}"#,
        #"{"id":1,"cmd":"host","op":"channel-send","channel":1,"data":"00 ff"}"#,
        #"{"id":1,"cmd":"host","op":"channel-send","channel":1,"data":[0]}"#,
        #"{"id":1,"cmd":"host","op":"channel-send","channel":"1","data":"00"}"#,
        #"{"id":1,"cmd":"host","op":"channel-disconnect","channel":-1}"#,
        #"{"id":1,"cmd":"host","op":"channel-unlisten","spsm":"zz"}"#,
    ]

    @Test(arguments: hostile)
    func aHostileChannelRequestIsRefusedWithItsId(_ line: String) {
        guard case .failure(let error) = decode(line) else {
            Issue.record("decoded: \(line)")
            return
        }
        #expect(error.id == 1)
    }

    @Test func anSDUPastTheLargestMTUIsRefusedBeforeItIsParsed() {
        let data = String(repeating: "ab", count: Int(HostChannels.largestMTU) + 1)
        guard case .failure(let error) = decode(#"{"id":1,"cmd":"host","op":"channel-send","channel":1,"data":"\#(data)"}"#) else {
            Issue.record("decoded")
            return
        }
        #expect(error.message.contains("at most 16384 bytes"))
    }

    @Test func eachChannelRequestEncodesToWhatDecodesBackToIt() throws {
        let requests: [HostRequest] = [
            .channelConnect(HostChannelRequest(link: 2, spsm: 0x80, parameters: ChannelParameters(mtu: 100, mps: 64, initialCredits: 3), enhanced: true)),
            .channelListen(spsm: 0x25, ChannelParameters(mtu: 300, mps: 30, initialCredits: 1)), .channelUnlisten(spsm: 0xFF),
            .channelSend(channel: 7, [0, 1, 0xFE]), .channelDisconnect(channel: 7),
        ]
        for request in requests {
            let line = ControlRequest(id: 5, command: .host(request)).json.encoded
            #expect(try host(line) == request, "\(line)")
        }
    }

    @Test func theCtlWordsBecomeTheSameRequests() throws {
        #expect(try HostRequest.parse(arguments: ["channel-connect", "--link", "3", "--spsm", "0x80", "--mtu", "512", "--enhanced", "true"])
                == .channelConnect(HostChannelRequest(link: 3, spsm: 0x80, parameters: ChannelParameters(mtu: 512), enhanced: true)))
        #expect(try HostRequest.parse(arguments: ["channel-send", "--channel", "1", "--data", "6869"]) == .channelSend(channel: 1, [0x68, 0x69]))
        #expect(throws: ControlUsageError.self) { try HostRequest.parse(arguments: ["channel-listen", "--spsm", "300"]) }
    }

    @Test func channelEventsCarryTheirFields() {
        func json(_ event: HostEvent) -> String { JSONValue.object(HostControl.members(event)).encoded }
        let opened = HostChannelSummary(channel: 3, link: 1, spsm: 0x80, cid: 0x40, peerCID: 0x41, mtu: 512, mps: 247, peerMTU: 100,
                                        peerMPS: 64, incoming: true, enhanced: false)
        #expect(json(.channelOpened(opened)) == #"{"event":"channel-opened","device":"host","channel":3,"link":1,"spsm":"0x0080","cid":"0x0040","peer_cid":"0x0041","mtu":512,"mps":247,"peer_mtu":100,"peer_mps":64,"incoming":true,"enhanced":false}"#)
        #expect(json(.channelFailed(channel: 3, reason: .refused(0x0005)))
                == #"{"event":"channel-failed","device":"host","channel":3,"result":"0x0005","reason":"insufficient-authentication"}"#)
        #expect(json(.channelFailed(channel: 3, reason: .timeout)) == #"{"event":"channel-failed","device":"host","channel":3,"result":null,"reason":"timeout"}"#)
        #expect(json(.channelData(channel: 3, [0x01, 0xAB])) == #"{"event":"channel-data","device":"host","channel":3,"data":"01ab"}"#)
        #expect(json(.channelReady(channel: 3)) == #"{"event":"channel-ready","device":"host","channel":3}"#)
        #expect(json(.channelClosed(channel: 3, reason: .linkClosed)) == #"{"event":"channel-closed","device":"host","channel":3,"reason":"link-closed"}"#)
    }
}
