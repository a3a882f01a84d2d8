import BlemuRunLoop
@testable import BlemuTransport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The user channel transport over a Unix SOCK_SEQPACKET pair: like the HCI socket, each read
/// is one packet and each write must be one, so the queueing and datagram parsing are exercised
/// without an adapter.
@Suite struct HCIUserChannelTransportTests {
    @Test func roundTripOnePacketPerDatagram() throws {
        let loop = try RunLoop()
        let (transport, peer) = try userChannelOverSeqpacketPair(on: loop, index: 3)
        defer { close(peer) }
        defer { transport.close() }
        #expect(transport.spec == .hci(index: 3))
        #expect(transport.queueCapacity == H4Framer.maxPacketLength)
        var received: [FramedPacket] = []
        transport.onPacket = { received.append(FramedPacket(type: $0, body: Array($1))) }

        let event = h4Packet(.event, payload: [0x01, 0x03, 0x0C, 0x00])
        let acl = h4Packet(.acl, payload: Array(0..<200))
        sendDatagram(peer, event)
        sendDatagram(peer, [0xFF, 0x01, 0x02])  // no such indicator: counted, not delivered
        sendDatagram(peer, acl)
        #expect(runUntil(loop) { received.count == 2 })
        #expect(received == [expected(event), expected(acl)])
        #expect(transport.discardedBytes == 3)

        #expect(transport.send(.command, [0x03, 0x0C, 0x00]))
        #expect(transport.send(.acl, [0x40, 0x00, 0x01, 0x00, 0xEE]))
        #expect(receiveDatagrams(peer) == [[0x01, 0x03, 0x0C, 0x00], [0x02, 0x40, 0x00, 0x01, 0x00, 0xEE]])
    }

    @Test func aFullSocketQueuesWholePacketsAndFlushesThemInOrder() throws {
        let loop = try RunLoop()
        let (transport, peer) = try userChannelOverSeqpacketPair(on: loop, kernelBufferSize: 4096)
        defer { close(peer) }
        defer { transport.close() }

        var sent: [[UInt8]] = []
        var refused = false
        for sequence in 0..<10_000 {
            let payload = [UInt8(truncatingIfNeeded: sequence), UInt8(truncatingIfNeeded: sequence >> 8)]
                + Array(repeating: UInt8(truncatingIfNeeded: sequence), count: 998)
            let packet = h4Packet(.acl, payload: payload)
            let before = transport.queuedBytes
            guard transport.send(.acl, Array(packet.dropFirst())) else {
                #expect(transport.queuedBytes == before, "a refused packet is not queued")
                refused = true
                break
            }
            sent.append(packet)
        }
        #expect(refused)
        #expect(transport.queuedBytes > transport.queueCapacity - 1005)

        var got: [[UInt8]] = []
        #expect(runUntil(loop) {
            got += receiveDatagrams(peer)
            return got.count == sent.count
        })
        #expect(got == sent, "every packet whole, in order")
        #expect(transport.queuedBytes == 0)
        #expect(transport.send(.event, [0x0E, 0x00]), "room again once flushed")
    }

    @Test func readsPerWakeupAreBounded() throws {
        let loop = try RunLoop()
        let (transport, peer) = try userChannelOverSeqpacketPair(on: loop)
        defer { close(peer) }
        defer { transport.close() }
        var received = 0
        transport.onPacket = { _, _ in received += 1 }
        for _ in 0..<40 { sendDatagram(peer, h4Packet(.event, payload: [0x00])) }
        loop.runOnce(timeout: .milliseconds(100))
        #expect(received == 16, "16 reads, one packet each, per wakeup")
        #expect(runUntil(loop) { received == 40 })
    }

    @Test func peerGoneIsReportedOnceAndSendFailsLater() throws {
        let loop = try RunLoop()
        let (transport, peer) = try userChannelOverSeqpacketPair(on: loop)
        var errors: [TransportError] = []
        transport.onClosed = { errors.append($0) }
        close(peer)
        #expect(!transport.send(.command, [0x03, 0x0C, 0x00]), "EPIPE, without SIGPIPE")
        #expect(errors.isEmpty, "reported on a later loop turn, never inside the caller's send")
        #expect(runUntil(loop) { !errors.isEmpty })
        run(loop, for: .milliseconds(20))
        #expect(errors.count == 1)
        #expect(errors.first?.kind == .connectionReset)
        // The kernel hangs up a user channel when the adapter goes: said as such, not as a TCP peer.
        #expect(errors.first?.description.contains("the adapter was removed") == true, "\(errors)")
        #expect(!transport.isOpen)
        #expect(loop.registeredCount == 0)
    }

    @Test func closeIsSilentAndDroppingWithoutCloseReleasesTheSocket() throws {
        let loop = try RunLoop()
        let (closed, firstPeer) = try userChannelOverSeqpacketPair(on: loop)
        defer { close(firstPeer) }
        var closedCalls = 0
        closed.onClosed = { _ in closedCalls += 1 }
        closed.close()
        closed.close()
        #expect(!closed.send(.command, [0x03, 0x0C, 0x00]))

        var dropped: HCIUserChannelTransport?
        let secondPeer: Int32
        (dropped, secondPeer) = try userChannelOverSeqpacketPair(on: loop, index: 1)
        defer { close(secondPeer) }
        dropped?.onClosed = { _ in closedCalls += 1 }
        #expect(loop.registeredCount == 1)
        dropped = nil
        #expect(loop.registeredCount == 0)
        var byte: UInt8 = 0
        #expect(recv(secondPeer, &byte, 1, Int32(MSG_DONTWAIT)) == 0, "end of stream: the socket is closed")
        run(loop, for: .milliseconds(20))
        #expect(closedCalls == 0)
    }
}

/// A user channel transport (smallest queue) over one end of a fresh SOCK_SEQPACKET pair, and
/// the other end for the test to send, receive and close.
func userChannelOverSeqpacketPair(on loop: RunLoop, index: UInt16 = 0, kernelBufferSize: Int32? = nil) throws
    -> (transport: HCIUserChannelTransport, peer: Int32)
{
    var fds: [Int32] = [-1, -1]
    let result = socketpair(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &fds)
    precondition(result == 0, "socketpair failed: \(errno)")
    let (mine, peer) = (fds[0], fds[1])
    if let kernelBufferSize { shrinkSocketBuffers(sender: mine, receiver: peer, to: kernelBufferSize) }
    do {
        return (try HCIUserChannelTransport(adopting: mine, index: index, loop: loop, queueCapacity: 0), peer)
    } catch {
        close(peer)
        throw error
    }
}

func sendDatagram(_ fd: Int32, _ bytes: [UInt8]) {
    let written = bytes.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, 0) }
    precondition(written == bytes.count, "send failed: \(errno)")
}

/// The datagrams waiting on `fd` now, each as read.
func receiveDatagrams(_ fd: Int32) -> [[UInt8]] {
    var out: [[UInt8]] = []
    var buffer = [UInt8](repeating: 0, count: H4Framer.maxPacketLength)
    while true {
        let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
        guard count > 0 else { return out }
        out.append(Array(buffer[0..<count]))
    }
}
