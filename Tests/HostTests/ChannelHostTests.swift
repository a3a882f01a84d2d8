import BlemuCentral
import BlemuChannels
import BlemuCore
import BlemuHCI
import BlemuHost
import Testing

/// A device's published L2CAP channel through both stacks (`AirBench`: a central and a
/// peripheral on two simulated controllers): the SPSM blemu assigns, a central opening a credit
/// based channel to it, SDUs up to 65535 bytes both ways through HCI's bounded queues (so K-frames
/// wait for room on both hosts), and the encrypted-only channel refused on a plain link.
@Suite struct ChannelHostTests {
    final class Recorder: CreditBasedChannelDelegate {
        var opened: [CreditBasedChannel] = []
        var received: [[UInt8]] = []
        var closed: [ChannelCloseReason] = []
        var echo = false
        func channelOpened(_ channel: CreditBasedChannel) { opened.append(channel) }
        func channel(_ channel: CreditBasedChannel, received sdu: ArraySlice<UInt8>) {
            received.append(Array(sdu))
            if echo { _ = channel.send(sdu) }
        }
        func channelClosed(_ channel: CreditBasedChannel, reason: ChannelCloseReason) { closed.append(reason) }
        func channelIsReady(_ channel: CreditBasedChannel) {}
    }

    @Test func aCentralOpensADevicesPublishedChannel() throws {
        let bench = try AirBench()
        let device = Recorder()
        device.echo = true
        let spsm = try #require(bench.peripheral.publishL2CAPChannel(security: .none, parameters: ChannelParameters(mtu: 65535),
                                                                     delegate: device))
        let encrypted = try #require(bench.peripheral.publishL2CAPChannel(security: .encrypted, parameters: ChannelParameters(),
                                                                          delegate: device))
        #expect(spsm == 0x0080 && encrypted == 0x0081)

        let address = try #require(bench.peripheralController.randomAddress)
        let link = try #require(try bench.connect(to: address)?.get())
        let channels = CreditBasedChannels(link: link.l2cap, servers: ChannelServers())
        let app = Recorder()
        let channel = try #require(channels.connect(spsm: spsm, parameters: ChannelParameters(mtu: 65535), delegate: app))
        bench.air.run()
        #expect(channel.state == .open && device.opened.count == 1)

        // Each SDU echoed by the device: many K-frames of at most 1020 bytes, more than HCI's
        // queue takes at once, so both hosts send again when their link has room.
        var sdus: [[UInt8]] = []
        for size in [1, 1000, 20_000, 65535] {
            let sdu = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ size) }
            sdus.append(sdu)
            #expect(channel.send(sdu))
            bench.air.run()
        }
        #expect(device.received == sdus)
        #expect(app.received == sdus)

        // Encrypted only: refused with Insufficient Encryption on this unencrypted link.
        let refusedApp = Recorder()
        _ = channels.connect(spsm: encrypted, delegate: refusedApp)
        bench.air.run()
        #expect(refusedApp.closed == [.refused(0x0008)])

        // The device stops publishing: SPSM not supported.
        bench.peripheral.unpublishL2CAPChannel(spsm)
        let lateApp = Recorder()
        _ = channels.connect(spsm: spsm, delegate: lateApp)
        bench.air.run()
        #expect(lateApp.closed == [.refused(0x0002)])

        // The link goes: the open channel closes on both sides.
        link.disconnect()
        bench.air.run()
        #expect(device.closed == [.linkClosed])
        #expect(app.closed == [.linkClosed])
    }
}
