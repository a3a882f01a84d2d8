import BlemuChannels
import BlemuCore
import BlemuHCI
import BlemuL2CAP
import BlemuTestSupport
import Logging

/// One side's HCI as a wire to the other side's link: what a link sends waits in `outbox` until
/// `ChannelPair.flush` hands it over, so neither side is re-entered from inside a send (as with
/// a real controller). It can refuse best-effort PDUs, as HCI's bounded queue does.
final class WireLower: L2CAPLower {
    var outbox: [[UInt8]] = []
    /// Every PDU sent, kept for the tests to look at.
    var sent: [[UInt8]] = []
    /// Best-effort PDUs refused while set, as a full HCI queue refuses them.
    var refuseBestEffort = false
    var refused = 0

    func sendL2CAP(handle: UInt16, pdu: ArraySlice<UInt8>, priority: TransmitPriority) -> Bool {
        if refuseBestEffort, priority == .bestEffort {
            refused += 1
            return false
        }
        outbox.append(Array(pdu))
        sent.append(Array(pdu))
        return true
    }

    func send(_ command: HCICommand, completion: ((CommandResult) -> Void)?) -> Bool { true }

    /// The signalling commands sent, decoded.
    var signaling: [SignalingCommand] {
        sent.compactMap { pdu in
            guard pdu.count >= 4, pdu[2] == 0x05, pdu[3] == 0 else { return nil }
            return try? SignalingCommand(frame: pdu[4...])
        }
    }

    /// The K-frames sent on `cid` (their payloads).
    func frames(cid: UInt16) -> [[UInt8]] {
        sent.compactMap { pdu in
            guard pdu.count >= 4, UInt16(pdu[2]) | UInt16(pdu[3]) << 8 == cid else { return nil }
            return Array(pdu[4...])
        }
    }
}

/// What a channel's delegate heard.
final class ChannelRecorder: CreditBasedChannelDelegate {
    var opened: [CreditBasedChannel] = []
    var received: [[UInt8]] = []
    var closed: [ChannelCloseReason] = []
    var ready = 0
    /// Called with each SDU (to send from inside the callback, say).
    var onReceive: ((CreditBasedChannel, ArraySlice<UInt8>) -> Void)?

    func channelOpened(_ channel: CreditBasedChannel) { opened.append(channel) }
    func channel(_ channel: CreditBasedChannel, received sdu: ArraySlice<UInt8>) {
        received.append(Array(sdu))
        onReceive?(channel, sdu)
    }
    func channelClosed(_ channel: CreditBasedChannel, reason: ChannelCloseReason) { closed.append(reason) }
    func channelIsReady(_ channel: CreditBasedChannel) { ready += 1 }
}

/// Two links of one ACL connection joined in process: a central and a peripheral, each with its
/// credit based channels, the peripheral serving `servers`.
final class ChannelPair {
    let centralLower = WireLower()
    let peripheralLower = WireLower()
    let scheduler = ManualScheduler()
    let central: L2CAPLink
    let peripheral: L2CAPLink
    let centralServers = ChannelServers()
    let peripheralServers = ChannelServers()
    let centralChannels: CreditBasedChannels
    let peripheralChannels: CreditBasedChannels

    init(channelLimit: Int = CreditBasedChannels.defaultChannelLimit, receiveBudget: Int = CreditBasedChannels.defaultReceiveBudget,
         logger: Logger = Logger(label: "channels-test", factory: { _ in SwiftLogNoOpLogHandler() })) {
        central = L2CAPLink(handle: 0x0001, role: .central, context: L2CAPLinkContext(hci: centralLower, scheduler: scheduler, logger: logger))
        peripheral = L2CAPLink(handle: 0x0001, role: .peripheral,
                               context: L2CAPLinkContext(hci: peripheralLower, scheduler: scheduler, logger: logger))
        centralChannels = CreditBasedChannels(link: central, servers: centralServers, channelLimit: channelLimit,
                                                 receiveBudget: receiveBudget)
        peripheralChannels = CreditBasedChannels(link: peripheral, servers: peripheralServers, channelLimit: channelLimit,
                                                 receiveBudget: receiveBudget)
    }

    /// Hands over what both sides sent until neither sends more. Returns the PDUs handed over.
    @discardableResult
    func flush(limit: Int = 10_000_000) -> Int {
        var moved = 0
        while !(centralLower.outbox.isEmpty && peripheralLower.outbox.isEmpty), moved < limit {
            let toPeripheral = centralLower.outbox
            centralLower.outbox.removeAll()
            for pdu in toPeripheral { peripheral.receive(ACLPacket(handle: 0x0001, boundary: .firstFlushable, data: pdu[...])) }
            let toCentral = peripheralLower.outbox
            peripheralLower.outbox.removeAll()
            for pdu in toCentral { central.receive(ACLPacket(handle: 0x0001, boundary: .firstFlushable, data: pdu[...])) }
            moved += toPeripheral.count + toCentral.count
        }
        return moved
    }

    /// Sends a raw signalling command from the central's side to the peripheral's link.
    func centralSends(_ command: SignalingCommand) {
        var payload: [UInt8] = []
        command.encode(into: &payload)
        var frame: [UInt8] = []
        appendL2CAPFrame(cid: L2CAPChannel.leSignaling, payload: payload[...], to: &frame)
        peripheral.receive(ACLPacket(handle: 0x0001, boundary: .firstFlushable, data: frame[...]))
    }

    /// Sends a raw PDU on `cid` to the peripheral's link.
    func centralSendsFrame(cid: UInt16, _ payload: [UInt8]) {
        var frame: [UInt8] = []
        appendL2CAPFrame(cid: cid, payload: payload[...], to: &frame)
        peripheral.receive(ACLPacket(handle: 0x0001, boundary: .firstFlushable, data: frame[...]))
    }

    /// The last command the peripheral's side sent.
    var peripheralAnswer: SignalingCommand? { peripheralLower.signaling.last }
}
