import BlemuCentral
import BlemuChat
import BlemuChatProtocol
import BlemuCore
import BlemuDevices
import BlemuHCI
import BlemuHost
import BlemuSimulator
import Logging
import Testing

/// A blemu member and a chat host, each on its own simulated controller joined by
/// `SimulatedAir`: the member opens the host's chat channel when it has one, chats one frame a
/// SDU over it with back-pressure and nothing lost, and falls back to GATT's Frames otherwise.
final class ChatAir {
    let scheduler = ManualScheduler()
    let centralController = SimulatedController()
    let peripheralController = SimulatedController()
    let air: SimulatedAir
    let central: CentralHost
    let device: ChatDevice
    let peripheral: Peripheral
    let member: ChatMember
    var heardAtHost: [String] = []
    var heardAtMember: [String] = []

    init(host transport: ChatTransport, member memberTransport: ChatTransport) throws {
        let logger = Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })
        centralController.address = BluetoothAddress("C0:DE:00:00:00:01")!
        peripheralController.address = BluetoothAddress("C0:DE:00:00:00:02")!
        air = SimulatedAir(centralController, peripheralController)
        let a = centralController, b = peripheralController
        central = try CentralHost(on: ControllerHost(controller: "central", scheduler: scheduler, logger: logger, output: { a.output($0, $1) }))
        a.host = central.hci
        device = ChatDevice(transport: transport)
        device.hostName = "Host"
        peripheral = try Peripheral(device: device, configuration: PeripheralConfiguration(name: "Room", controller: "peripheral"),
                                    scheduler: scheduler, logger: logger, output: { b.output($0, $1) })
        b.deliver = { [unowned peripheral] in peripheral.receive(packetType: $0, packet: $1) }
        member = ChatMember(central: central, scheduler: scheduler, logger: logger, me: "fast", room: "Room", mtu: 517,
                            rejoinTimeout: .seconds(30))
        member.transport = memberTransport
        device.onHeard = { [unowned self] heard in
            if case let .message(id, text, _) = heard { self.heardAtHost.append("[\(id.sender)] \(text)") }
        }
        member.onHeard = { [unowned self] heard in
            if case let .message(id, text, _) = heard { self.heardAtMember.append("[\(id.sender)] \(text)") }
        }
        central.controller.controllerUp()
        peripheral.controllerUp()
        run()
    }

    func run() {
        for _ in 0..<50 { air.run() }
    }

    /// The member hears the host advertise (the simulator does not scan) and joins it.
    func join() throws {
        member.start()
        try advertise()
    }

    /// The member's central hears the host's advertisement.
    func advertise() throws {
        let address = try #require(peripheralController.randomAddress)
        let content = AdvertisingContent(name: "Room", serviceUUIDs: [ChatDevice.serviceUUID])
        central.onAdvertisement?(Advertisement(advertiser: LEAddress(address, isRandom: true), rssi: -40, isConnectable: true,
                                               content: content, lastSeen: 0), .new)
        run()
    }
}

@Suite struct ChatMemberChannelTests {
    /// 300 lines from the member reach the host whole, in order, once, over the channel (as
    /// SDUs: Frames is never subscribed to); the host's line reaches the member.
    @Test func aMemberChatsOverTheHostsChannel() throws {
        let room = try ChatAir(host: .auto, member: .auto)
        var joined = false
        room.member.onJoined = { joined = true }
        try room.join()
        #expect(joined)
        let channel = try #require(room.member.channel)
        #expect(channel.spsm == room.device.spsm && channel.state == .open)
        #expect(room.device.memberNames.count == 1 && room.device.channelMemberCount == 1)
        var sentLines: [String] = []
        for number in 1...300 {
            // Given as fast as the source allows: what does not fit waits (isBusy), never dropped.
            room.member.send(OutgoingChatMessage(id: ChatMessageID(sender: "fast", number: UInt32(number)), hops: 4, text: "line \(number)"))
            sentLines.append("[fast] line \(number)")
            if room.member.isBusy { room.run() }
        }
        room.run()
        #expect(room.heardAtHost == sentLines)
        #expect(!room.member.hasUndelivered)
        #expect(channel.sdusSent >= 301 && channel.sdusReceived >= 300)   // JOIN and the lines; an ACK each
        room.device.send("from the host")
        room.run()
        #expect(room.heardAtMember.last == "[Host] from the host")
    }

    /// A host without a channel (`--transport gatt`): the member chats over Frames.
    @Test func aMemberFallsBackToGATTWithoutAChannel() throws {
        let room = try ChatAir(host: .gatt, member: .auto)
        try room.join()
        #expect(room.member.channel == nil && room.device.memberNames.count == 1)
        room.member.send(OutgoingChatMessage(id: ChatMessageID(sender: "fast", number: 1), hops: 4, text: "over frames"))
        room.run()
        #expect(room.heardAtHost == ["[fast] over frames"])
        #expect(room.device.channelMemberCount == 0)
    }

    /// A member that would only use the channel (`--transport channel`) passes such a host over;
    /// one with `gatt` never opens a host's channel.
    @Test func transportChoosesTheWay() throws {
        let strict = try ChatAir(host: .gatt, member: .channel)
        var setAside: String?
        strict.member.onSetAside = { _, why in setAside = why }
        try strict.join()
        #expect(setAside?.contains("no chat channel") == true && strict.device.memberNames.isEmpty)
        let gatt = try ChatAir(host: .auto, member: .gatt)
        try gatt.join()
        #expect(gatt.member.channel == nil && gatt.device.memberNames.count == 1 && gatt.device.channelMemberCount == 0)
    }

    /// A hosting (auto) node is not told of a host it set aside: it would give way to a host it
    /// will not join and leave the room without one (two autos stayed apart; Docs/CHAT.md,
    /// "Two hosts meet"). A host not set aside is told.
    @Test func aHostSetAsideIsNoneToGiveWayTo() throws {
        let setAside = try ChatAir(host: .gatt, member: .channel)
        try setAside.join()
        #expect(setAside.member.setAside.until.count == 1)
        var told = 0
        setAside.member.watchForHosts { _ in told += 1 }
        try setAside.advertise()
        #expect(told == 0)
        let good = try ChatAir(host: .auto, member: .auto)
        good.member.watchForHosts { _ in told += 1 }
        try good.advertise()
        #expect(told == 1)
    }

    /// A node that gave way to another host and is not in its room within its rejoin time is
    /// gone (`onGone`: an auto node hosts again) rather than a member of no room for good.
    @Test func aNodeThatGaveWayAndGotNowhereIsGone() throws {
        let room = try ChatAir(host: .auto, member: .auto)
        var gone: String?
        room.member.onGone = { gone = $0 }
        room.member.watchForHosts { _ in }
        room.member.join(preferring: BluetoothAddress("C0:DE:00:00:00:99")!)
        try room.advertise()   // another host than the one it gave way to: passed by
        room.run()
        #expect(room.device.memberNames.isEmpty && gone == nil)
        room.scheduler.advance(by: .seconds(31))
        #expect(gone?.contains("not found again within") == true)
    }
}
