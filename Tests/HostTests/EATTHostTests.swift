import BlemuBenchRig
import BlemuCentral
import BlemuChannels
import BlemuATT
import BlemuCore
import BlemuGATTClient
import BlemuCrypto
import BlemuDevices
import BlemuEATT
import BlemuHCI
import BlemuHost
import BlemuSMP
import BlemuSecurity
import Logging
import Testing
@testable import HostTestSupport

/// Enhanced ATT (Vol 3, Part G, 3.6; Part F, 3.2.11) through both stacks (`AirBench`): a central
/// opens Enhanced Credit Based channels on the EATT PSM (0x0027) to a device, each of which is an
/// ATT bearer with the device's server on it and its own ATT_MTU.
@Suite struct EATTHostTests {
    static let eattPSM: UInt16 = 0x0027

    /// One enhanced bearer as the central sees it: ATT PDUs in, ATT PDUs out.
    final class Bearer: CreditBasedChannelDelegate {
        var opened = false
        var received: [[UInt8]] = []
        var closed: [ChannelCloseReason] = []
        func channelOpened(_ channel: CreditBasedChannel) { opened = true }
        func channel(_ channel: CreditBasedChannel, received sdu: ArraySlice<UInt8>) { received.append(Array(sdu)) }
        func channelClosed(_ channel: CreditBasedChannel, reason: ChannelCloseReason) { closed.append(reason) }
        func channelIsReady(_ channel: CreditBasedChannel) {}
    }

    /// The peripheral's side of the link encrypted with a bond's key, as after pairing
    /// (SimulatedAir carries no encryption: the peripheral's controller reports it).
    private func encrypt(_ bench: AirBench) throws {
        let link = try #require(bench.peripheral.control.linkSummaries.first)
        bench.peripheral.security.bonds.save(Bond(
            peer: link.peer, longTermKey: SMPLongTermKey(key: [UInt8](repeating: 0x5A, count: 16)),
            encryptionKeySize: 16, secureConnections: true, authenticated: true))
        bench.peripheralController.requestLongTermKey(handle: link.handle)
        bench.peripheralController.event(0x08, [0x00, UInt8(link.handle & 0xFF), UInt8(link.handle >> 8), 0x01])
        bench.air.run()
        #expect(bench.peripheral.control.linkSummaries.first?.encrypted == true)
    }

    private static func le(_ value: UInt16) -> [UInt8] { [UInt8(value & 0xFF), UInt8(value >> 8)] }
    /// Read By Type Request over the whole database (Vol 3, Part F, 3.4.4.1).
    private static func readByType(_ uuid: UInt16) -> [UInt8] { [0x08, 0x01, 0x00, 0xFF, 0xFF] + le(uuid) }
    /// Find Information Request over the whole database (3.4.3.1): the response holds as many
    /// pairs as ATT_MTU allows.
    private static let findInformation: [UInt8] = [0x04, 0x01, 0x00, 0xFF, 0xFF]

    @Test func enhancedBearersAreRefusedBeforeEncryptionAndServeEachOnTheirOwnAfter() throws {
        let bench = try AirBench()
        let address = try #require(bench.peripheralController.randomAddress)
        let link = try #require(try bench.connect(to: address)?.get())
        let channels = CreditBasedChannels(link: link.l2cap, servers: ChannelServers())

        // Vol 3, Part G, 3.6: only on an encrypted link; Insufficient Encryption before.
        let early = Bearer()
        let refused = channels.connectEnhanced(spsm: Self.eattPSM, count: 2, parameters: ChannelParameters(mtu: 64, mps: 64),
                                               delegate: early)
        #expect(refused.count == 2)
        bench.air.run()
        #expect(early.closed == [.refused(0x0008), .refused(0x0008)])

        try encrypt(bench)
        // EATT is Enhanced Credit Based Flow Control Mode only: an LE Credit Based request to it
        // is refused as to an SPSM not served.
        let leMode = Bearer()
        _ = channels.connect(spsm: Self.eattPSM, parameters: ChannelParameters(mtu: 64), delegate: leMode)
        bench.air.run()
        #expect(leMode.closed == [.refused(0x0002)])

        // Two bearers, each with its own MTU: 64 and 300 (the server's receive MTU is 517).
        let small = Bearer(), large = Bearer()
        let smallChannel = try #require(channels.connectEnhanced(spsm: Self.eattPSM, count: 1,
                                                                 parameters: ChannelParameters(mtu: 64, mps: 64), delegate: small).first)
        let largeChannel = try #require(channels.connectEnhanced(spsm: Self.eattPSM, count: 1,
                                                                 parameters: ChannelParameters(mtu: 300, mps: 300), delegate: large).first)
        bench.air.run()
        #expect(small.opened && large.opened)
        #expect(smallChannel.peerMTU == 517 && largeChannel.peerMTU == 517)

        // A request on each before either is answered: each answered on its own bearer, and
        // Find Information fills each bearer's ATT_MTU (min of the two channel MTUs, Part F, 3.2.8).
        #expect(smallChannel.send(Self.findInformation))
        #expect(largeChannel.send(Self.findInformation))
        bench.air.run()
        let onSmall = try #require(small.received.last), onLarge = try #require(large.received.last)
        #expect(small.received.count == 1 && large.received.count == 1)
        #expect(onSmall.first == 0x05 && onLarge.first == 0x05)
        #expect(onSmall.count == 2 + 15 * 4, "ATT_MTU 64: (64 - 2) / 4 pairs")
        #expect(onLarge.count > onSmall.count && onLarge.count <= 300)

        // Server Supported Features (Vol 3, Part G, 7.4): EATT supported (bit 0).
        #expect(largeChannel.send(Self.readByType(0x2B3A)))
        bench.air.run()
        let serverFeatures = try #require(large.received.last)
        #expect(serverFeatures.count == 5 && serverFeatures[0] == 0x09 && serverFeatures[1] == 3 && serverFeatures[4] & 0x01 == 0x01)

        // Part F, 3.4.2.1: no Exchange MTU on an enhanced bearer: Request Not Supported, MTU kept.
        #expect(smallChannel.send([0x02, 0x00, 0x02]))
        bench.air.run()
        #expect(small.received.last == [0x01, 0x02, 0x00, 0x00, 0x06])

        // A CCCD is the client's, whatever bearer wrote it: written on one, read on the other.
        // The first CCCD is Service Changed's (the GATT service comes before the device's).
        #expect(largeChannel.send(Self.readByType(0x2902)))
        bench.air.run()
        let cccds = try #require(large.received.last)
        #expect(cccds.first == 0x09)
        let cccd = UInt16(cccds[2]) | UInt16(cccds[3]) << 8
        #expect(smallChannel.send([0x12] + Self.le(cccd) + [0x02, 0x00]))
        bench.air.run()
        #expect(small.received.last == [0x13])
        #expect(largeChannel.send([0x0A] + Self.le(cccd)))
        bench.air.run()
        #expect(large.received.last == [0x0B, 0x02, 0x00])

        // Two indications at once: the unenhanced bearer takes one at a time (Part F, 3.3.2), so
        // without the client's EATT bit the second waits there; with it (Client Supported
        // Features, Part G, 7.2, bit 1) the second goes on an idle enhanced bearer.
        let serviceChanged = try #require(bench.peripheral.database.characteristics.first { $0.uuid == BluetoothUUID(0x2A05) })
        func indicateTwice() {
            bench.peripheral.indicate(serviceChanged, value: [0x01, 0x00, 0xFF, 0xFF])
            bench.peripheral.indicate(serviceChanged, value: [0x02, 0x00, 0xFF, 0xFF])
        }
        let before = small.received.count + large.received.count
        indicateTwice()
        bench.air.run()
        #expect(small.received.count + large.received.count == before, "no EATT bit: both on the unenhanced bearer")
        #expect(largeChannel.send(Self.readByType(0x2B29)))
        bench.air.run()
        let features = try #require(large.received.last)
        #expect(features.first == 0x09)
        #expect(largeChannel.send([0x12] + Array(features[2...3]) + [0x02]))
        bench.air.run()
        #expect(large.received.last == [0x13])
        indicateTwice()
        bench.air.run()
        let indications = (small.received + large.received).filter { $0.first == 0x1D }
        #expect(indications == [[0x1D] + Self.le(serviceChanged.valueHandle) + [0x02, 0x00, 0xFF, 0xFF]])

        link.disconnect()
        bench.air.run()
        #expect(small.closed == [.linkClosed] && large.closed == [.linkClosed])
    }

    /// blemu's GATT client opens enhanced bearers when the peer's Server Supported Features say
    /// EATT, and each bearer's client reads on its own (item 4 of the EATT work).
    @Test func aCentralOpensEnhancedBearersWhenThePeerSupportsThem() throws {
        let bench = try AirBench()
        let address = try #require(bench.peripheralController.randomAddress)
        let link = try #require(try bench.connect(to: address)?.get())
        try encrypt(bench)
        var opened: Result<[GATTClient], GATTClientError>?
        link.openEnhancedBearers(count: 2, mtu: 100) { opened = $0 }
        bench.air.run()
        let bearers = try #require(try opened?.get())
        #expect(bearers.count == 2)
        #expect(bearers.allSatisfy { $0.bearer.isEnhanced && $0.mtu == 100 })

        // Device Name (the GAP service's first characteristic value, handle 3) on each at once.
        var names: [Result<[UInt8], GATTClientError>] = []
        for bearer in bearers { bearer.read(0x0003) { names.append($0) } }
        bench.air.run()
        #expect(names.count == 2)
        #expect(names.allSatisfy { (try? $0.get()) == Array("Air".utf8) })

        link.disconnect()
        bench.air.run()
    }

    /// The central's enhanced bearers are its link's (`LEConnection.enhanced`, one set per
    /// connection whichever role), each carrying a GATT client of the central and no server.
    @Test func aCentralsEnhancedBearersAreItsConnections() throws {
        let bench = try AirBench()
        let address = try #require(bench.peripheralController.randomAddress)
        let link = try #require(try bench.connect(to: address)?.get())
        try encrypt(bench)
        link.openEnhancedBearers(count: 2) { _ in }
        bench.air.run()
        let entries = link.connection.enhanced.entries
        #expect(entries.count == 2)
        #expect(entries.allSatisfy { $0.endpoint.client != nil && $0.endpoint.server == nil && $0.endpoint.stage == nil })
        #expect(entries.compactMap { $0.endpoint.client.map(ObjectIdentifier.init) } == link.enhancedClients.map(ObjectIdentifier.init))

        link.disconnect()
        bench.air.run()
        #expect(link.connection.enhanced.isEmpty)
    }

    /// The values a stranger may read from the device: readable characteristics that ask for no security.
    private func readableHandles(_ bench: AirBench) -> [UInt16] {
        bench.peripheral.database.characteristics.filter { $0.properties.contains(.read) && $0.uuid != BluetoothUUID(0x2B29) }
            .map(\.valueHandle)
    }

    /// blemu's client spreads independent reads over every bearer of the link, the unenhanced
    /// one and the enhanced ones, one request at a time on each (Vol 3, Part F, 3.3.2), and
    /// wrote Client Supported Features with the EATT bit before asking for the bearers (Part G, 7.2).
    @Test func aCentralSpreadsItsReadsOverItsBearersOneRequestOnEach() throws {
        let bench = try AirBench()
        let address = try #require(bench.peripheralController.randomAddress)
        let link = try #require(try bench.connect(to: address)?.get())
        try encrypt(bench)
        var opened: Result<[GATTClient], GATTClientError>?
        link.openEnhancedBearers(count: 3) { opened = $0 }
        bench.air.run()
        #expect((try opened?.get())?.count == 3)
        #expect(link.clients.count == 4 && link.enhancedClients.allSatisfy { $0.bearer.isEnhanced })

        let features = try #require(bench.peripheral.database.characteristics.first { $0.uuid == BluetoothUUID(0x2B29) })
        var written: [UInt8]?
        link.client.read(features.valueHandle) { written = try? $0.get() }
        bench.air.run()
        #expect(written == [0x06], "EATT (bit 1) and Multiple Handle Value Notification (bit 2)")

        let handles = readableHandles(bench)
        #expect(handles.count >= 5)
        var results: [UInt16: Result<[UInt8], GATTClientError>]?
        var used: Int?
        link.read(handles) { results = $0; used = $1 }
        // Before any answer: one request in flight on each of the four bearers, none queued.
        #expect(link.clients.map(\.proceduresPending) == [1, 1, 1, 1])
        bench.air.run()
        #expect(used == 4)
        #expect(results?.count == handles.count)
        #expect(results?[bench.device.bodySensorLocation.valueHandle].flatMap { try? $0.get() } == [HeartRateDevice.chest])
        #expect(results?.values.allSatisfy { (try? $0.get()) != nil } == true)

        link.disconnect()
        bench.air.run()
        #expect(link.clients.count == 1, "the enhanced bearers went with the link")
    }

    /// Writes and subscriptions spread over the bearers as reads do (any bearer may carry any
    /// request, Vol 3, Part G, 3.6), one request at a time on each (Part F, 3.3.2).
    @Test func aCentralSpreadsItsWritesAndSubscriptionsOverItsBearersOneRequestOnEach() throws {
        let bench = try AirBench()
        let address = try #require(bench.peripheralController.randomAddress)
        let link = try #require(try bench.connect(to: address)?.get())
        try encrypt(bench)
        var found: [RemoteService]?
        link.client.discoverAll { found = try? $0.get() }
        bench.air.run()
        link.openEnhancedBearers(count: 2) { _ in }
        bench.air.run()
        #expect(link.clients.count == 3)
        let notifying = try #require(found).flatMap(\.characteristics).filter {
            !$0.properties.isDisjoint(with: [.notify, .indicate]) && $0.clientConfigurationHandle != nil
        }
        #expect(notifying.count >= 3)

        var subscribed: [UInt16: Result<Void, GATTClientError>]?
        var used: Int?
        link.subscribe(notifying) { subscribed = $0; used = $1 }
        // Before any answer: one CCCD write in flight on each of the three bearers, none queued.
        #expect(link.clients.map(\.proceduresPending) == [1, 1, 1])
        bench.air.run()
        #expect(used == 3)
        #expect(subscribed?.count == notifying.count && subscribed?.values.allSatisfy { (try? $0.get()) != nil } == true)

        // The CCCDs written back to 0 with plain writes: spread likewise.
        let writes = notifying.compactMap { $0.clientConfigurationHandle.map { (handle: $0, value: [UInt8]([0, 0])) } }
        var written: [UInt16: Result<Void, GATTClientError>]?
        link.write(writes) { written = $0; used = $1 }
        #expect(link.clients.map(\.proceduresPending) == [1, 1, 1])
        bench.air.run()
        #expect(used == 3)
        #expect(written?.count == writes.count && written?.values.allSatisfy { (try? $0.get()) != nil } == true)
        link.disconnect()
        bench.air.run()
    }

    /// An enhanced bearer that closes under a read (either side may close one at any time)
    /// loses nothing: the read is made again on the unenhanced bearer.
    @Test func aReadLostWithAClosedBearerIsMadeAgainOnTheUnenhancedOne() throws {
        let bench = try AirBench()
        let address = try #require(bench.peripheralController.randomAddress)
        let link = try #require(try bench.connect(to: address)?.get())
        try encrypt(bench)
        link.openEnhancedBearers(count: 2) { _ in }
        bench.air.run()
        #expect(link.enhancedClients.count == 2)
        let handles = Array(readableHandles(bench).prefix(3))
        var results: [UInt16: Result<[UInt8], GATTClientError>]?
        link.read(handles) { found, _ in results = found }
        let closing = try #require(link.enhancedClients.first?.bearer.transport as? EnhancedATTBearer)
        closing.channel.disconnect()
        bench.air.run()
        #expect(link.enhancedClients.count == 1)
        #expect(results?.count == 3)
        #expect(results?.values.allSatisfy { (try? $0.get()) != nil } == true, "\(String(describing: results))")
        link.disconnect()
        bench.air.run()
    }

    /// A peer that refuses the bearers (here: the link is not encrypted, Part G, 3.6) leaves
    /// the unenhanced bearer, which then carries every read.
    @Test func refusedBearersLeaveTheUnenhancedOneForEveryRead() throws {
        let bench = try AirBench()
        let address = try #require(bench.peripheralController.randomAddress)
        let link = try #require(try bench.connect(to: address)?.get())
        var opened: Result<[GATTClient], GATTClientError>?
        link.openEnhancedBearers(count: 5) { opened = $0 }
        bench.air.run()
        #expect(opened.map { if case .failure(.notSent) = $0 { true } else { false } } == true)
        #expect(link.clients.count == 1)

        let handles = readableHandles(bench)
        var results: [UInt16: Result<[UInt8], GATTClientError>]?
        var used: Int?
        link.read(handles) { results = $0; used = $1 }
        #expect(link.client.proceduresPending == 1, "on the one bearer, one after another: the next once it is free")
        bench.air.run()
        #expect(used == 1)
        #expect(results?.values.allSatisfy { (try? $0.get()) != nil } == true && results?.count == handles.count)
        link.disconnect()
        bench.air.run()
    }

    /// The workflow (`blemu gatt --eatt`): auto goes on with one bearer when the peer refuses;
    /// require ends with the reason; off asks for nothing.
    @Test func theWorkflowFallsBackOnRefusalUnlessEATTIsRequired() throws {
        for use in [EATTUse.auto, .require, .off] {
            let bench = try AirBench()
            let own = BluetoothAddress("C0:DE:00:00:00:01")!
            let security = CentralSecurity(configuration: CentralSecurityConfiguration(),
                                           owner: BondOwner(device: "central", name: "blemu central", address: own),
                                           localAddress: LEAddress(own, isRandom: true), scheduler: bench.scheduler,
                                           logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }))
            bench.central.attach(security: security)
            let address = try #require(bench.peripheralController.randomAddress)
            let link = try #require(try bench.connect(to: address)?.get())
            // Our side thinks the link encrypted; the peripheral does not, and refuses (0x0008).
            security.encryptionChanged(on: link.handle, status: 0, enabled: true, keySize: 16)
            #expect(security.security(of: link.handle).isEncrypted)
            let workflow = GATTWorkflow(link: link, security: security, scheduler: bench.scheduler,
                                        logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }))
            workflow.eatt = use
            var notes: [String] = [], failures: [String] = [], went = false
            workflow.onNote = { notes.append($0) }
            workflow.onFailure = { failures.append($0) }
            workflow.openEnhancedBearers { went = true }
            bench.air.run()
            #expect(workflow.enhancedBearers == 0)
            switch use {
            case .auto:
                #expect(went && failures.isEmpty)
                #expect(notes.contains { $0.hasPrefix("eatt: enhanced bearers refused") }, "\(notes)")
                var used: Int?
                workflow.read(readableHandles(bench)) { _ in used = workflow.bearersUsed }
                bench.air.run()
                #expect(used == 1)
            case .require:
                #expect(!went && failures.count == 1 && failures.first?.hasPrefix("--eatt require: enhanced bearers refused") == true, "\(failures)")
            case .off:
                #expect(went && notes.isEmpty && failures.isEmpty)
            }
            link.disconnect()
            bench.air.run()
        }
    }

    /// What the central's unenhanced bearer receives for its client end.
    final class ClientEnd: ATTBearerEnd {
        var received: [[UInt8]] = []
        func receive(_ pdu: ArraySlice<UInt8>, opcode: UInt8) { received.append(Array(pdu)) }
        func bearerTimedOut(_ transaction: ATTTransaction) {}
    }

    /// Several values at once (`DeviceContext.notify(_:to:)`): one Multiple Handle Value
    /// Notification (Vol 3, Part F, 3.4.7.4) to a client that set Client Supported Features
    /// bit 2 (Vol 3, Part G, 7.2), plain notifications before it did.
    @Test func severalValuesGoInOneMultipleNotificationToAClientThatSetItsBit() throws {
        let bench = try AirBench()
        let address = try #require(bench.peripheralController.randomAddress)
        let link = try #require(try bench.connect(to: address)?.get())
        let database = bench.peripheral.database
        let measurement = try #require(database.characteristics.first { $0.uuid == BluetoothUUID(0x2A37) })
        let features = try #require(database.characteristics.first { $0.uuid == BluetoothUUID(0x2B29) })
        var written: [Result<Void, GATTClientError>] = []
        link.client.write(try #require(measurement.clientConfigurationHandle), [0x01, 0x00]) { written.append($0) }
        bench.air.run()
        let end = ClientEnd()
        link.bearer.client = end
        bench.peripheral.notify([(characteristic: measurement, value: [0x00, 60]), (characteristic: measurement, value: [0x00, 61])], to: nil)
        bench.air.run()
        let handle = Self.le(measurement.valueHandle)
        #expect(end.received.filter { $0.first == 0x1B } == [[0x1B] + handle + [0x00, 60], [0x1B] + handle + [0x00, 61]])

        link.bearer.client = link.client
        link.client.write(features.valueHandle, [0x04]) { written.append($0) }
        bench.air.run()
        #expect(written.count == 2 && written.allSatisfy { (try? $0.get()) != nil })
        link.bearer.client = end
        end.received = []
        bench.peripheral.notify([(characteristic: measurement, value: [0x00, 62]), (characteristic: measurement, value: [0x00, 63])], to: nil)
        bench.air.run()
        #expect(end.received.filter { $0.first == 0x1B || $0.first == 0x23 }
                    == [[0x23] + handle + [0x02, 0x00, 0x00, 62] + handle + [0x02, 0x00, 0x00, 63]])
        link.bearer.client = link.client
        link.disconnect()
        bench.air.run()
    }
}
