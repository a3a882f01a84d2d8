import BlemuBenchRig
import BlemuCentral
import BlemuChannels
import BlemuCore
import BlemuHCI
import BlemuHost
import Testing
@testable import HostTestSupport

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
        let app = Recorder()
        // The central's own API (`CentralLink.openChannel`), the groundwork of chat and bench.
        let channel = try #require(link.openChannel(spsm: spsm, parameters: ChannelParameters(mtu: 65535), delegate: app))
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
        _ = link.openChannel(spsm: encrypted, delegate: refusedApp)
        bench.air.run()
        #expect(refusedApp.closed == [.refused(0x0008)])

        // The device stops publishing: SPSM not supported.
        bench.peripheral.unpublishL2CAPChannel(spsm)
        let lateApp = Recorder()
        _ = link.openChannel(spsm: spsm, delegate: lateApp)
        bench.air.run()
        #expect(lateApp.closed == [.refused(0x0002)])

        // The link goes: the open channel closes on both sides.
        link.disconnect()
        bench.air.run()
        #expect(device.closed == [.linkClosed])
        #expect(app.closed == [.linkClosed])
    }

    /// Five Enhanced Credit Based Flow Control Mode channels in one request from the central
    /// (Vol 3, Part A, 4.25, 4.26), each echoing its own SDUs through the channel API; one
    /// reconfigured to a larger MTU (4.27) then carries an SDU the old MTU refused.
    @Test func aCentralOpensFiveEnhancedChannelsAndReconfiguresOne() throws {
        let bench = try AirBench()
        let device = Recorder()
        device.echo = true
        let spsm = try #require(bench.peripheral.publishL2CAPChannel(security: .none, parameters: ChannelParameters(mtu: 65535),
                                                                     delegate: device))
        let address = try #require(bench.peripheralController.randomAddress)
        let link = try #require(try bench.connect(to: address)?.get())
        let app = Recorder()
        let opened = link.openEnhancedChannels(spsm: spsm, count: 5, parameters: ChannelParameters(mtu: 512, mps: 128), delegate: app)
        #expect(opened.count == 5)
        bench.air.run()
        #expect(opened.allSatisfy { $0.state == .open && $0.mode == .enhanced } && device.opened.count == 5)
        #expect(link.channels.channels.count == 5)
        for (n, channel) in opened.enumerated() { #expect(channel.send([UInt8](repeating: UInt8(n), count: 300 + n))) }
        bench.air.run()
        #expect(app.received == (0..<5).map { [UInt8](repeating: UInt8($0), count: 300 + $0) })

        // The device's echo of 2000 bytes is past our MTU of 512 until we reconfigure.
        let big = [UInt8](repeating: 0xEE, count: 2000)
        #expect(opened[0].reconfigure(mtu: 4096, mps: 128))
        bench.air.run()
        #expect(opened[0].local.mtu == 4096)
        #expect(opened[0].send(big))
        bench.air.run()
        #expect(app.received.last == big && app.closed.isEmpty)

        opened[1].disconnect()
        bench.air.run()
        #expect(link.channels.channels.count == 4 && device.closed == [.disconnectedByPeer])
    }
}
