import BlemuCore
import BlemuATT
import BlemuChannels
import BlemuDevices
import BlemuGATT
import BlemuHCI
import BlemuL2CAP
@testable import BlemuHost
import BlemuSimulator
import BlemuTestSupport
import Testing
@testable import HostTestSupport

/// The seams between a device's links (`DeviceLinks`), its advertising (`DeviceAdvertiser`) and
/// the `Peripheral` that composes them.
@Suite struct DeviceLinksTests {
    /// A link made in the central role is not the device's: disconnected with Remote User
    /// Terminated, never opened, not counted as refused for want of room.
    @Test func aLinkInTheCentralRoleIsClosedAndNotOpened() throws {
        let probe = ProbeDevice()
        let bench = try Bench(device: probe)
        bench.controller.connect(handle: 0x0040, peer: bench.central, central: true)
        #expect(bench.peripheral.connectionCount == 0 && bench.peripheral.links.connections[0x0040] == nil)
        #expect(probe.connected.isEmpty)
        #expect(bench.controller.commands(HCIOpcode.disconnect).map(\.parameters) == [[0x40, 0x00, 0x13]])
        #expect(bench.peripheral.statistics.linksRefused == 0)
    }

    /// The device keeps no object of its own beside a link: its table holds the link's one
    /// `LEConnection`, whose server (behind the device's fault stage) answers the link's ATT
    /// requests on its bearer, whose parameters follow LE Connection Update Complete (Vol 4,
    /// Part E, 7.7.65.3), and which leaves the table when the link closes.
    @Test func theLinkTableHoldsEachLinksOneConnectionUntilItCloses() throws {
        let bench = try Bench(device: ProbeDevice())
        bench.controller.connect(handle: 0x0040, peer: bench.central, interval: 24)
        let link = try #require(bench.peripheral.links.connections[0x0040])
        #expect(link.peer == ATTPeer(connectionHandle: 0x0040, address: LEAddress(bench.central, isRandom: true)))
        #expect(link.server?.peer == link.peer && link.stage?.server === link.server)
        // The link's requests reach its served database on its bearer (the stage steps in
        // front only while faults are planned).
        #expect(link.bearer.server === link.server)
        #expect(bench.att([0x02, 0x64, 0x00]) == [[0x03] + Bench.le(UInt16(ATTServer.maximumMTU))])
        #expect(link.bearer.mtu == 100 && bench.peripheral.attMTU(of: link.peer) == 100)
        #expect(link.parameters.interval == 24)
        // LE Connection Update Complete: status, handle, interval 40, latency 0, timeout 500.
        bench.controller.event(0x3E, [0x03, 0x00, 0x40, 0x00, 0x28, 0x00, 0x00, 0x00, 0xF4, 0x01])
        #expect(bench.peripheral.links.connections[0x0040] === link && link.parameters.interval == 40)
        bench.controller.disconnect(handle: 0x0040)
        #expect(bench.peripheral.links.connections[0x0040] == nil)
    }

    /// Links beyond the limit count in the device's statistics (the Diagnostics value's `links_refused`).
    @Test func linksRefusedForWantOfRoomAreCounted() throws {
        let bench = try Bench(device: ProbeDevice(), maxConnections: 1)
        bench.controller.connect(handle: 0x0040, peer: bench.central)
        bench.controller.connect(handle: 0x0041, peer: BluetoothAddress("F0:00:00:00:00:01")!)
        #expect(bench.peripheral.connectionCount == 1)
        #expect(bench.peripheral.statistics.linksRefused == 1)
    }

    /// A central sets the pace of its LE Remote Connection Parameter Requests (Vol 6, Part B,
    /// 5.1.7): each one the Core forbids is refused, but its line has the links' budget, ten a
    /// minute, the rest counted on the next line (Docs/REFERENCE.md, Budgets).
    @Test func aFloodOfRefusedConnectionParametersIsLoggedWithinTheBudget() throws {
        let log = CapturedLog()
        let bench = try Bench(device: ProbeDevice(), logger: log.logger)
        bench.controller.connect(handle: 0x0040, peer: bench.central)
        log.removeAll()
        // Interval minimum 40 above its maximum 24 (7.7.65.6).
        let forbidden: [UInt8] = [0x06, 0x40, 0x00, 0x28, 0x00, 0x18, 0x00, 0x00, 0x00, 0xF4, 0x01]
        for _ in 0..<500 { bench.controller.event(0x3E, forbidden) }
        #expect(bench.controller.commands(HCIOpcode.leRemoteConnectionParameterRequestNegativeReply).count == 500)
        let refused = log.messages.filter { $0.hasPrefix("refused connection parameters") }
        #expect(refused.count == 10)
        bench.scheduler.advance(by: .seconds(61))
        log.removeAll()
        bench.controller.event(0x3E, forbidden)
        #expect(log.messages.filter { $0.hasPrefix("refused connection parameters") }.last?.hasSuffix("(490 similar lines left out)") == true)
    }

    /// The advertiser asks the links whether another central may connect: a device with all
    /// its links open does not advertise, and advertises again when one closes.
    @Test func advertisingWaitsWhileTheLinksAreFull() throws {
        let bench = try Bench(device: ProbeDevice(), maxConnections: 1)
        #expect(bench.peripheral.isAdvertising)
        bench.controller.connect(handle: 0x0040, peer: bench.central)
        #expect(!bench.peripheral.isAdvertising)
        bench.controller.disconnect(handle: 0x0040)
        #expect(bench.peripheral.isAdvertising)
        #expect(bench.peripheral.advertisingInterval == AdvertisingTiming.defaultFastInterval)
    }
}

/// The control facade (`PeripheralControl`): what it plans, every link's server applies,
/// also on links opened after the plan was made.
@Suite struct PeripheralControlTests {
    final class Quiet: CreditBasedChannelDelegate {
        func channelOpened(_ channel: CreditBasedChannel) {}
        func channel(_ channel: CreditBasedChannel, received sdu: ArraySlice<UInt8>) {}
        func channelClosed(_ channel: CreditBasedChannel, reason: ChannelCloseReason) {}
        func channelIsReady(_ channel: CreditBasedChannel) {}
    }

    /// CIDs are per link (Vol 3, Part A, 2.1): two centrals' channels both have CID 0x0040 on
    /// the device. A channel fault names the link (handle or central's address) and hits only
    /// it; without a name it is refused while two links have the CID, and served once one has.
    @Test func aChannelFaultHitsTheLinkItNamesOnly() throws {
        let bench = try Bench(device: HeartRateDevice(seed: 1))
        let quiet = Quiet()
        let spsm = try #require(bench.peripheral.publishL2CAPChannel(security: .none, parameters: ChannelParameters(), delegate: quiet))
        let other = BluetoothAddress("F0:00:00:00:00:01")!
        bench.controller.connect(handle: 0x0040, peer: bench.central)
        bench.controller.connect(handle: 0x0041, peer: other)
        for handle: UInt16 in [0x0040, 0x0041] {
            // LE Credit Based Connection Request (Vol 3, Part A, 4.22): SPSM, our CID 0x0040, MTU and MPS 23, 1 credit.
            bench.controller.sendL2CAP(handle: handle, cid: L2CAPChannel.leSignaling,
                                       [0x14, 0x01, 0x0A, 0x00, UInt8(spsm & 0xFF), UInt8(spsm >> 8), 0x40, 0x00, 0x17, 0x00, 0x17, 0x00, 0x01, 0x00])
            let response = try #require(bench.controller.takeL2CAP(handle: handle, cid: L2CAPChannel.leSignaling).last)
            #expect(response[0] == 0x15 && response[4...5] == [0x40, 0x00], "the device's CID is 0x0040 on each link")
        }
        let control = bench.peripheral.control
        func stalled() -> [Bool] { control.linkSummaries.map { $0.channels.first?.creditsStalled ?? false } }

        let ambiguous = control.injectChannelFault(.stallCredits, cid: 0x0040)
        #expect(ambiguous?.contains("on 2 links (handles 64, 65)") == true, "\(String(describing: ambiguous))")
        #expect(stalled() == [false, false], "refused: neither link's channel touched")

        #expect(control.injectChannelFault(.stallCredits, cid: 0x0040, link: .peer(other)) == nil)
        #expect(stalled() == [false, true])
        #expect(control.injectChannelFault(.dropChannel, cid: 0x0040, link: .handle(0x0040)) == nil)
        // The Disconnection Request (4.6) goes on the named link only.
        #expect(bench.controller.takeL2CAP(handle: 0x0040, cid: L2CAPChannel.leSignaling).map { $0.first } == [0x06])
        #expect(bench.controller.takeL2CAP(handle: 0x0041, cid: L2CAPChannel.leSignaling).isEmpty)

        #expect(control.injectChannelFault(.dropChannel, cid: 0x0040, link: .handle(0x0099))?.contains("no link with handle 153") == true)
        #expect(control.injectChannelFault(.dropChannel, cid: 0x0040, link: .handle(0x0040))?.contains("on the link with handle 64") == true)
        // One link has the CID open now: the old form acts on it.
        #expect(control.injectChannelFault(.dropChannel, cid: 0x0040) == nil)
        #expect(bench.controller.takeL2CAP(handle: 0x0041, cid: L2CAPChannel.leSignaling).map { $0.first } == [0x06])
    }

    @Test func aFaultPlannedThroughTheControlFacadeReachesLinksOpenedLater() throws {
        let bench = try Bench(device: HeartRateDevice(seed: 1))
        let location = BluetoothUUID(0x2A38)   // Body Sensor Location, readable
        let handle = bench.handle(of: location)
        #expect(bench.peripheral.control.injectFault(.error(.unlikelyError), characteristic: location, count: 1) == nil)
        #expect(bench.peripheral.control.faults.planned.count == 1)
        bench.controller.connect(handle: 0x0040, peer: bench.central)
        let read: [UInt8] = [0x0A, UInt8(handle & 0xFF), UInt8(handle >> 8)]
        #expect(bench.att(read).last == [0x01, 0x0A, UInt8(handle & 0xFF), UInt8(handle >> 8), 0x0E])
        #expect(bench.att(read).last?.first == 0x0B, "count 1: the next read is served")
    }
}
