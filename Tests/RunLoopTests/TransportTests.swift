import BlemuRunLoop
import BlemuTransport
import Testing

#if canImport(Glibc)
import Glibc
#endif

@Suite struct ControllerSpecTests {
    @Test(arguments: [
        ("hci0", ControllerSpec.hci(index: 0), "hci0"),
        ("hci12", .hci(index: 12), "hci12"),
        ("tcp:127.0.0.1:6402", .tcp(host: "127.0.0.1", port: 6402), "tcp:127.0.0.1:6402"),
        ("tcp:localhost", .tcp(host: "localhost", port: 6402), "tcp:localhost:6402"),
        ("tcp:[::1]:7000", .tcp(host: "::1", port: 7000), "tcp:[::1]:7000"),
        ("tcp:[fe80::1]", .tcp(host: "fe80::1", port: 6402), "tcp:[fe80::1]:6402"),
        ("unix:/tmp/rootcanal.sock", .unix(path: "/tmp/rootcanal.sock"), "unix:/tmp/rootcanal.sock"),
        ("serial:/dev/ttyACM0", .serial(device: "/dev/ttyACM0", baud: 115_200), "serial:/dev/ttyACM0:115200"),
        ("serial:/dev/ttyUSB1:1000000", .serial(device: "/dev/ttyUSB1", baud: 1_000_000), "serial:/dev/ttyUSB1:1000000"),
        ("serial:/dev/serial/by-path/pci-0000:00:14.0-usb-0:1:1.0-port0",
         .serial(device: "/dev/serial/by-path/pci-0000:00:14.0-usb-0:1:1.0-port0", baud: 115_200),
         "serial:/dev/serial/by-path/pci-0000:00:14.0-usb-0:1:1.0-port0:115200"),
        ("serial:/dev/serial/by-path/platform-3f980000.usb-usb-0:1.3:1.0-port0:1000000",
         .serial(device: "/dev/serial/by-path/platform-3f980000.usb-usb-0:1.3:1.0-port0", baud: 1_000_000),
         "serial:/dev/serial/by-path/platform-3f980000.usb-usb-0:1.3:1.0-port0:1000000"),
        // A path whose last field is letters alone is written with its rate.
        ("serial:/dev/odd:name:115200", .serial(device: "/dev/odd:name", baud: 115_200), "serial:/dev/odd:name:115200"),
    ])
    func parsesGoodSpecs(text: String, spec: ControllerSpec, canonical: String) throws {
        let parsed = try ControllerSpec(parsing: text)
        #expect(parsed == spec)
        #expect(parsed.description == canonical)
        #expect(try ControllerSpec(parsing: canonical) == spec, "the canonical form parses back")
    }

    @Test(arguments: [
        "", "hci", "hci-1", "hci70000", "hcix", "bluetooth0", "tcp:", "tcp::6402", "tcp:host:0",
        "tcp:host:65536", "tcp:host:port", "tcp:::1", "tcp:[::1", "tcp:[::1]x", "unix:", "serial:",
        "serial:/dev/ttyACM0:12345", "serial::115200", "TCP:127.0.0.1",
        "serial:/dev/ttyS0:abc", "serial:/dev/ttyS0:115k", "serial:/dev/ttyS0:",
    ])
    func rejectsBadSpecsSayingWhatIsAccepted(text: String) {
        let error = #expect(throws: TransportError.self) { try ControllerSpec(parsing: text) }
        #expect(error?.kind == .invalidSpec)
        #expect(error?.description.contains("use hciN, tcp:HOST[:PORT]") == true)
        #expect(error?.description.contains("unix:PATH or serial:DEVICE[:BAUD]") == true)
    }

    /// A baud that is not a number is named as a bad baud, not taken into the device path
    /// (`serial:/dev/ttyS0:abc` once meant the device `/dev/ttyS0:abc` at 115200).
    @Test(arguments: [
        ("serial:/dev/ttyS0:abc", "baud abc is not a number"),
        ("serial:/dev/ttyUSB0:115k", "baud 115k is not a number"),
        ("serial:/dev/ttyUSB0:1M", "baud 1M is not a number"),
        ("serial:/dev/ttyS0:12345", "baud 12345 is not supported"),
        ("serial:/dev/ttyS0:", "no baud rate after the last ':'"),
    ])
    func badBaudIsNamedAsSuch(text: String, problem: String) {
        let error = #expect(throws: TransportError.self) { try ControllerSpec(parsing: text) }
        #expect(error?.kind == .invalidSpec)
        #expect(error?.description.hasPrefix("invalid controller spec \"\(text)\" (\(problem)") == true,
                "\(error?.description ?? "no error")")
        if problem.hasPrefix("baud") {
            #expect(error?.description.contains("115200, 230400") == true, "the message lists the rates")
        }
    }
}

@Suite struct StreamTransportTests {
    @Test func roundTripOverASocketPair() throws {
        let loop = try RunLoop()
        let (transport, peer) = try streamTransportOverSocketPair(on: loop)
        defer { close(peer) }
        defer { transport.close() }
        var received: [FramedPacket] = []
        transport.onPacket = { type, body in received.append(FramedPacket(type: type, body: Array(body))) }

        let event = h4Packet(.event, payload: [0x01, 0x03, 0x0C, 0x00])
        let acl = h4Packet(.acl, payload: Array(0..<200))
        writeAll(peer, event + acl.prefix(50))
        #expect(runUntil(loop) { received.count == 1 })
        writeAll(peer, Array(acl.dropFirst(50)))
        #expect(runUntil(loop) { received.count == 2 })
        #expect(received == [expected(event), expected(acl)])

        #expect(transport.send(.command, [0x03, 0x0C, 0x00]))
        #expect(transport.send(.acl, [0x40, 0x00, 0x01, 0x00, 0xEE]))
        var echoed: [UInt8] = []
        #expect(runUntil(loop) {
            echoed += readAvailable(peer)
            return echoed.count == 4 + 6
        })
        #expect(echoed == [0x01, 0x03, 0x0C, 0x00, 0x02, 0x40, 0x00, 0x01, 0x00, 0xEE])
        #expect(transport.discardedBytes == 0)
    }

    @Test func partialWritesAreBufferedAndFlushedInOrder() throws {
        let loop = try RunLoop()
        let (transport, peer) = try streamTransportOverSocketPair(on: loop, kernelBufferSize: 4096,
                                                                  outputCapacity: 0)  // raised to one maximal packet
        defer { close(peer) }
        defer { transport.close() }
        #expect(transport.outputCapacity == H4Framer.maxPacketLength)

        // Numbered ACL packets until the bounded buffer refuses one.
        var sent: [[UInt8]] = []
        var refusedAt: Int?
        var sawBuffered = false
        for sequence in 0..<10_000 {
            let payload = [UInt8(truncatingIfNeeded: sequence), UInt8(truncatingIfNeeded: sequence >> 8)]
                + Array(repeating: UInt8(truncatingIfNeeded: sequence), count: 998)
            let body = Array(h4Packet(.acl, payload: payload).dropFirst())
            let before = transport.bufferedOutputCount
            if transport.send(.acl, body) {
                sent.append(body)
                if transport.bufferedOutputCount > 0 { sawBuffered = true }
            } else {
                #expect(transport.bufferedOutputCount == before, "a refused packet writes nothing")
                refusedAt = sequence
                break
            }
        }
        #expect(sawBuffered)
        #expect(refusedAt != nil)
        #expect(transport.bufferedOutputCount > transport.outputCapacity - 1005)

        // Drain the peer while the loop flushes on EPOLLOUT: every byte arrives, in order.
        var peerFramer = H4Framer()
        var got: [[UInt8]] = []
        #expect(runUntil(loop) {
            peerFramer.feed(readAvailable(peer)) { _, body in got.append(Array(body)) }
            return got.count == sent.count
        })
        #expect(got == sent)
        #expect(transport.bufferedOutputCount == 0)
        #expect(transport.send(.event, [0x0E, 0x00]), "room again once flushed")
    }

    @Test func endOfStreamReportsClosedOnce() throws {
        let loop = try RunLoop()
        let (transport, peer) = try streamTransportOverSocketPair(on: loop)
        var errors: [TransportError] = []
        transport.onClosed = { errors.append($0) }
        close(peer)
        #expect(runUntil(loop) { !errors.isEmpty })
        run(loop, for: .milliseconds(30))
        #expect(errors.count == 1)
        #expect(errors.first?.kind == .closedByPeer)
        #expect(errors.first?.description.contains("closed the connection") == true)
        #expect(!transport.isOpen)
        #expect(!transport.send(.command, [0x03, 0x0C, 0x00]))
        #expect(loop.registeredCount == 0)
    }

    @Test func writingToAClosedPeerReportsInsteadOfKillingTheProcess() throws {
        let loop = try RunLoop()
        let (transport, peer) = try streamTransportOverSocketPair(on: loop)
        var errors: [TransportError] = []
        transport.onClosed = { errors.append($0) }
        close(peer)
        // Without MSG_NOSIGNAL this would raise SIGPIPE and end the test run.
        var results: [Bool] = []
        for _ in 0..<3 { results.append(transport.send(.command, [0x03, 0x0C, 0x00])) }
        #expect(results.contains(false))
        #expect(errors.isEmpty, "reported on a later loop turn, never inside the caller's send")
        #expect(runUntil(loop) { !errors.isEmpty })
        #expect(errors.count == 1)
        #expect([.closedByPeer, .connectionReset].contains(errors.first?.kind))
    }

    @Test func closeIsSilentAndIdempotent() throws {
        let loop = try RunLoop()
        let (transport, peer) = try streamTransportOverSocketPair(on: loop)
        defer { close(peer) }
        var closedCalls = 0
        transport.onClosed = { _ in closedCalls += 1 }
        transport.close()
        transport.close()
        run(loop, for: .milliseconds(20))
        #expect(closedCalls == 0)
        #expect(loop.registeredCount == 0)
    }

    @Test func closeAfterAFailedSendCancelsTheReport() throws {
        let loop = try RunLoop()
        let (transport, peer) = try streamTransportOverSocketPair(on: loop)
        var closedCalls = 0
        transport.onClosed = { _ in closedCalls += 1 }
        close(peer)
        #expect(!transport.send(.command, [0x03, 0x0C, 0x00]), "EPIPE")
        transport.close()
        run(loop, for: .milliseconds(20))
        #expect(closedCalls == 0, "the caller closed it: nothing to report")
        #expect(loop.pendingTimerCount == 0)
    }

    @Test func droppingWithoutCloseStillUnregistersAndClosesTheFD() throws {
        let loop = try RunLoop()
        var transport: StreamTransport?
        let peer: Int32
        (transport, peer) = try streamTransportOverSocketPair(on: loop)
        defer { close(peer) }
        #expect(transport?.send(.command, [0x03, 0x0C, 0x00]) == true)
        #expect(loop.registeredCount == 1)
        transport = nil
        #expect(loop.registeredCount == 0)
        #expect(readAvailable(peer) == [0x01, 0x03, 0x0C, 0x00])
        var byte: UInt8 = 0
        #expect(read(peer, &byte, 1) == 0, "end of stream, not EAGAIN: the fd is closed")
    }

    @Test func readsPerWakeupAreBounded() throws {
        let loop = try RunLoop()
        let (transport, peer) = try streamTransportOverSocketPair(on: loop)
        defer { close(peer) }
        defer { transport.close() }
        var received = 0
        transport.onPacket = { _, _ in received += 1 }
        // 80 packets of 1 KiB in the socket: more than one wakeup's reads (4 x 16 KiB) take.
        let packet = h4Packet(.acl, payload: Array(repeating: 0x5A, count: 1024 - 5))
        writeAll(peer, Array([[UInt8]](repeating: packet, count: 80).joined()))
        loop.runOnce(timeout: .milliseconds(100))
        #expect(received > 0 && received <= 64, "one wakeup reads at most 64 KiB")
        #expect(runUntil(loop) { received == 80 }, "the rest on the next turns")
    }

    /// Every transport of a loop reads into the loop's one buffer: packets arriving on two
    /// controllers at once, split at odd places, each reach their own transport intact, and a
    /// handler that keeps a slice of what it was given keeps its bytes after later reads.
    @Test func transportsOfOneLoopShareItsReadBufferWithoutMixingBytes() throws {
        let loop = try RunLoop()
        let (first, firstPeer) = try streamTransportOverSocketPair(on: loop)
        let (second, secondPeer) = try streamTransportOverSocketPair(on: loop)
        defer { close(firstPeer); close(secondPeer) }
        defer { first.close(); second.close() }
        #expect(loop.readBuffer(atLeast: 1) === loop.readBuffer(atLeast: 16 * 1024))
        var firstReceived: [[UInt8]] = []
        var secondReceived: [[UInt8]] = []
        var keptSlices: [ArraySlice<UInt8>] = []
        first.onPacket = { _, body in firstReceived.append(Array(body)) }
        second.onPacket = { _, body in
            keptSlices.append(body)
            secondReceived.append(Array(body))
        }
        let firstPackets = (0..<20).map { h4Packet(.acl, payload: Array(repeating: UInt8($0), count: 100 + $0)) }
        let secondPackets = (0..<20).map { h4Packet(.acl, payload: Array(repeating: UInt8(0x80 + $0), count: 300 - $0)) }
        for (a, b) in zip(firstPackets, secondPackets) {
            writeAll(firstPeer, Array(a.prefix(7)))
            writeAll(secondPeer, Array(b.prefix(50)))
            loop.runOnce(timeout: .milliseconds(10))
            writeAll(firstPeer, Array(a.dropFirst(7)))
            writeAll(secondPeer, Array(b.dropFirst(50)))
            loop.runOnce(timeout: .milliseconds(10))
        }
        #expect(runUntil(loop) { firstReceived.count == 20 && secondReceived.count == 20 })
        #expect(firstReceived == firstPackets.map { Array($0.dropFirst()) })
        #expect(secondReceived == secondPackets.map { Array($0.dropFirst()) })
        #expect(keptSlices.map { Array($0) } == secondReceived, "a slice kept by a handler still holds its bytes")
    }

    @Test func packetHandlerMayCloseTheTransport() throws {
        let loop = try RunLoop()
        let (transport, peer) = try streamTransportOverSocketPair(on: loop)
        defer { close(peer) }
        var delivered = 0
        transport.onPacket = { _, _ in
            delivered += 1
            transport.close()
        }
        writeAll(peer, h4Packet(.event, payload: [1]) + h4Packet(.event, payload: [2]))
        #expect(runUntil(loop) { delivered > 0 })
        run(loop, for: .milliseconds(20))
        #expect(delivered == 1, "no packet after close")
    }

    @Test func unixListenerRoundTripThroughOpen() throws {
        let loop = try RunLoop()
        let server = UnixServer()
        defer { server.close() }
        guard case .success(let transport)? = openAndWait(.unix(path: server.path), on: loop) else {
            Issue.record("open failed")
            return
        }
        defer { transport.close() }
        let accepted = server.accept()
        #expect(accepted >= 0)
        defer { close(accepted) }
        var received: [FramedPacket] = []
        transport.onPacket = { received.append(FramedPacket(type: $0, body: Array($1))) }
        let event = h4Packet(.event, payload: [0x3E, 0x01])
        writeAll(accepted, event)
        #expect(runUntil(loop) { received.count == 1 })
        #expect(received == [expected(event)])
        #expect(transport.send(.command, [0x01, 0x10, 0x00]))
        var echoed: [UInt8] = []
        #expect(runUntil(loop) { echoed += readAvailable(accepted); return echoed.count == 4 })
        #expect(echoed == [0x01, 0x01, 0x10, 0x00])
    }

    @Test func tcpRoundTripThroughOpen() throws {
        let loop = try RunLoop()
        let server = TCPServer()
        defer { server.close() }
        guard case .success(let transport)? = openAndWait(.tcp(host: "127.0.0.1", port: server.port), on: loop) else {
            Issue.record("open failed")
            return
        }
        defer { transport.close() }
        var accepted: Int32 = -1
        #expect(runUntil(loop) { accepted = server.accept(); return accepted >= 0 })
        defer { close(accepted) }
        var received: [FramedPacket] = []
        transport.onPacket = { received.append(FramedPacket(type: $0, body: Array($1))) }
        let acl = h4Packet(.acl, payload: Array(repeating: 7, count: 1000))
        writeAll(accepted, acl)
        #expect(runUntil(loop) { received.count == 1 })
        #expect(received == [expected(acl)])
    }

    /// Linux acknowledges a small segment as it is read unless the connection went interactive,
    /// which only our own output makes it: quick ACKs are asked for after a read that follows
    /// output, not after every read (a system call each; Docs/PERFORMANCE.md, "System calls per
    /// request"). rootcanal writes the indicator and the body in two sends, as here.
    @Test func tcpAsksForQuickAcknowledgementsAfterOutputNotAfterEveryRead() throws {
        let loop = try RunLoop()
        let server = TCPServer()
        defer { server.close() }
        guard case .success(let opened)? = openAndWait(.tcp(host: "127.0.0.1", port: server.port), on: loop),
              let transport = opened as? StreamTransport else {
            Issue.record("open failed")
            return
        }
        defer { transport.close() }
        var accepted: Int32 = -1
        #expect(runUntil(loop) { accepted = server.accept(); return accepted >= 0 })
        defer { close(accepted) }
        var received = 0
        transport.onPacket = { _, _ in received += 1 }
        let event = h4Packet(.event, payload: [0x13, 0x05, 0x01, 0x40, 0x00, 0x01, 0x00])
        // Four packets, each in two reads, and nothing sent: asked once, at the first read.
        for count in 1...4 {
            writeAll(accepted, [event[0]])
            _ = runUntil(loop, limit: .milliseconds(30)) { false }  // the indicator read alone
            writeAll(accepted, Array(event.dropFirst()))
            #expect(runUntil(loop) { received == count })
        }
        #expect(transport.quickAcknowledgementRequests == 1)
        // An answer went out: the next read asks again, once.
        #expect(transport.send(.acl, h4Packet(.acl, payload: [0x01]).dropFirst()))
        for count in 5...6 {
            writeAll(accepted, event)
            #expect(runUntil(loop) { received == count })
        }
        #expect(transport.quickAcknowledgementRequests == 2)
    }

    @Test func serialOverAPseudoTerminal() throws {
        let loop = try RunLoop()
        var master: Int32 = -1
        var slave: Int32 = -1
        guard openpty(&master, &slave, nil, nil, nil) == 0 else {
            Issue.record("openpty failed: \(errno)")
            return
        }
        defer { close(master); close(slave) }
        setNonblocking(master)
        var name = [CChar](repeating: 0, count: 128)
        #expect(ttyname_r(slave, &name, name.count) == 0)
        let device = String(decoding: name.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        guard case .success(let transport)? = openAndWait(.serial(device: device, baud: 1_000_000), on: loop) else {
            Issue.record("open \(device) failed")
            return
        }
        defer { transport.close() }
        var received: [FramedPacket] = []
        transport.onPacket = { received.append(FramedPacket(type: $0, body: Array($1))) }
        let event = h4Packet(.event, payload: [0x0E, 0x04, 0x01, 0x03, 0x0C, 0x00])
        writeAll(master, [0xFF] + event)  // a stray byte first, as after a board reset
        #expect(runUntil(loop) { received.count == 1 })
        #expect(received == [expected(event)])
        #expect(transport.discardedBytes == 1)
        #expect(transport.send(.command, [0x03, 0x0C, 0x00]))
        var echoed: [UInt8] = []
        #expect(runUntil(loop) { echoed += readAvailable(master); return echoed.count >= 4 })
        #expect(echoed == [0x01, 0x03, 0x0C, 0x00], "raw mode: bytes pass unchanged")

        // The same port cannot be opened twice.
        let second = openAndWait(.serial(device: device, baud: 115_200), on: loop)
        guard case .failure(let error)? = second else {
            Issue.record("second open of \(device) succeeded")
            return
        }
        #expect(error.kind == .deviceBusy)
    }
}

@Suite struct TransportErrorTests {
    @Test func hciOnAKernelWithoutBluetoothSaysSo() throws {
        let loop = try RunLoop()
        let probe = socket(AF_BLUETOOTH_FOR_TESTS, Int32(SOCK_RAW.rawValue), 1)
        let kernelHasBluetooth = probe >= 0 || errno != EAFNOSUPPORT
        if probe >= 0 { close(probe) }
        let result = openAndWait(.hci(index: 0), on: loop)
        guard case .failure(let error)? = result else {
            // Only on a machine with Bluetooth, root and a powered-off hci0.
            #expect(kernelHasBluetooth)
            if case .success(let transport)? = result { transport.close() }
            return
        }
        if kernelHasBluetooth {
            #expect(error.kind != .noBluetoothSupport)
        } else {
            #expect(error.kind == .noBluetoothSupport)
            #expect(error.errnoCode == EAFNOSUPPORT)
            #expect(error.description == "hci0: this kernel has no Bluetooth support (EAFNOSUPPORT): use a machine with "
                + "Bluetooth, or a virtual controller (--controller tcp:127.0.0.1:6402 with rootcanal)")
        }
    }

    @Test func tcpToAClosedPortSaysStartRootcanal() throws {
        let port = closedTCPPort()
        let error = try openFailure(.tcp(host: "127.0.0.1", port: port))
        #expect(error.kind == .connectionRefused)
        #expect(error.description.hasPrefix("tcp:127.0.0.1:\(port): connection refused (ECONNREFUSED)"))
        // The README's own way of starting it.
        #expect(error.description.contains(
            "is rootcanal running? start it with `.venv/bin/python scripts/rootcanal_server.py --hci-port \(port)`"))
    }

    @Test func tcpThatNeverAnswersTimesOut() throws {
        let loop = try RunLoop()
        // A listener with backlog 0 and one connection waiting: further SYNs are dropped.
        let server = TCPServer(backlog: 0)
        defer { server.close() }
        let filler = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        defer { close(filler) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = server.port.bigEndian
        _ = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(filler, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        run(loop, for: .milliseconds(20))
        let start = loop.nowNanoseconds
        let result = openAndWait(.tcp(host: "127.0.0.1", port: server.port), on: loop, connectTimeout: .milliseconds(300))
        let elapsed = loop.nowNanoseconds - start
        guard case .failure(let error)? = result else {
            Issue.record("expected a timeout, got \(String(describing: result))")
            if case .success(let transport)? = result { transport.close() }
            return
        }
        #expect(error.kind == .timedOut)
        #expect(error.description.contains("no answer within 300 ms"))
        #expect(elapsed >= 290_000_000 && elapsed < 2_000_000_000)
        #expect(loop.registeredCount == 0, "the connecting socket is closed")
    }

    @Test func serialDeviceMissing() throws {
        let error = try openFailure(.serial(device: "/dev/nonexistent", baud: 115_200))
        #expect(error.kind == .noSuchDevice)
        #expect(error.description.hasPrefix("serial:/dev/nonexistent:115200: no such device (ENOENT): is the board plugged in?"))
    }

    @Test func serialOnSomethingThatIsNotATerminal() throws {
        let error = try openFailure(.serial(device: "/dev/null", baud: 115_200))
        #expect(error.kind == .notASerialPort)
        #expect(error.description.contains("not a serial port (ENOTTY)"))
    }

    @Test func unixSocketMissing() throws {
        let path = "/tmp/blemu-test-missing-\(getpid()).sock"
        let error = try openFailure(.unix(path: path))
        #expect(error.kind == .noSuchSocket)
        #expect(error.description.contains("no such socket (ENOENT): start the controller that listens on \(path)"))
    }

    @Test func unixPathTooLong() throws {
        let error = try openFailure(.unix(path: "/tmp/" + String(repeating: "x", count: 200)))
        #expect(error.description.contains("longer than the 107"))
    }

    @Test func cancelledOpenNeverCompletesAndClosesWhatItOpened() throws {
        let loop = try RunLoop()
        let server = UnixServer()
        defer { server.close() }
        var completions = 0
        let opening = ControllerTransports.open(.unix(path: server.path), on: loop) { _ in completions += 1 }
        opening.cancel()
        run(loop, for: .milliseconds(30))
        #expect(completions == 0)
        #expect(loop.registeredCount == 0)
        #expect(loop.pendingTimerCount == 0)
    }

    @Test func errnoNamesForMessages() {
        #expect(errnoName(ECONNREFUSED) == "ECONNREFUSED")
        #expect(errnoName(EAFNOSUPPORT) == "EAFNOSUPPORT")
        #expect(describe(errno: ENOENT) == "No such file or directory (ENOENT)")
        #expect(errnoName(4095) == "errno 4095")
    }
}

let AF_BLUETOOTH_FOR_TESTS: Int32 = 31

@Suite struct ControllerLinkTests {
    /// A capture (`--btsnoop`) is a tap on the packet path only while it is set: packets reach it
    /// before HCI, both ways, and once it is removed they go to HCI alone.
    @Test func aCaptureTapSeesEveryPacketOnlyWhileItIsSet() throws {
        let loop = try RunLoop()
        let server = UnixServer()
        defer { server.close() }
        let link = ControllerLink(spec: .unix(path: server.path), loop: loop)
        defer { link.stop() }
        var heard: [String] = []
        link.onPacket = { type, _ in heard.append("hci \(type)") }
        link.start()
        #expect(runUntil(loop) { link.isUp })
        let accepted = server.accept()
        defer { close(accepted) }
        link.onTraffic = { received, type, _ in heard.append("tap \(received ? "in" : "out") \(type)") }
        writeAll(accepted, h4Packet(.event, payload: [0x0E, 0x01]))
        #expect(runUntil(loop) { heard.count == 2 })
        #expect(link.send(.command, [0x03, 0x0C, 0x00]))
        #expect(heard == ["tap in event", "hci event", "tap out command"])
        link.onTraffic = nil
        writeAll(accepted, h4Packet(.event, payload: [0x0E, 0x01]))
        #expect(runUntil(loop) { heard.count == 4 })
        #expect(link.send(.command, [0x03, 0x0C, 0x00]))
        #expect(heard.suffix(1) == ["hci event"])
    }

    @Test func reconnectsAfterTheServerClosesTheConnection() throws {
        let loop = try RunLoop()
        let server = UnixServer()
        defer { server.close() }
        let link = ControllerLink(spec: .unix(path: server.path), loop: loop,
                                  initialBackoff: .milliseconds(20), maxBackoff: .milliseconds(80))
        var ups = 0
        var downs: [TransportError] = []
        var packets: [FramedPacket] = []
        link.onUp = { ups += 1 }
        link.onDown = { downs.append($0) }
        link.onPacket = { packets.append(FramedPacket(type: $0, body: Array($1))) }
        #expect(!link.send(.command, [0x03, 0x0C, 0x00]), "down before start")
        link.start()
        #expect(runUntil(loop) { link.isUp })
        #expect(ups == 1)

        var accepted = server.accept()
        #expect(accepted >= 0)
        let event = h4Packet(.event, payload: [0x0E, 0x01])
        writeAll(accepted, event)
        #expect(runUntil(loop) { packets.count == 1 })
        #expect(packets == [expected(event)])
        #expect(link.send(.command, [0x03, 0x0C, 0x00]))
        var command: [UInt8] = []
        #expect(runUntil(loop) { command += readAvailable(accepted); return command.count == 4 })
        #expect(command == [0x01, 0x03, 0x0C, 0x00])

        close(accepted)  // the controller goes away (unread data would make this a reset instead)
        #expect(runUntil(loop) { downs.count == 1 })
        #expect(!link.isUp)
        #expect(downs.first?.kind == .closedByPeer)
        #expect(!link.send(.command, [0x03, 0x0C, 0x00]), "send is refused while down")

        #expect(runUntil(loop) { ups == 2 }, "reconnects by itself")
        accepted = server.accept()
        #expect(accepted >= 0)
        writeAll(accepted, event)
        #expect(runUntil(loop) { packets.count == 2 })
        close(accepted)
        #expect(runUntil(loop) { ups == 3 && downs.count == 2 })

        link.stop()
        #expect(!link.isUp)
        run(loop, for: .milliseconds(60))
        #expect(ups == 3 && downs.count == 2, "nothing after stop")
        #expect(loop.registeredCount == 0)
        #expect(loop.pendingTimerCount == 0)
    }

    @Test func failedOpensBackOffExponentiallyThenComeUpWhenTheControllerAppears() throws {
        let loop = try RunLoop()
        let path = "/tmp/blemu-test-late-\(getpid())-\(UInt32.random(in: 0...UInt32.max)).sock"
        let link = ControllerLink(spec: .unix(path: path), loop: loop,
                                  initialBackoff: .milliseconds(10), maxBackoff: .milliseconds(40))
        var delays: [Duration] = []
        var failures: [TransportError] = []
        var ups = 0
        link.onOpenFailed = { error, delay in
            failures.append(error)
            delays.append(delay)
        }
        link.onUp = { ups += 1 }
        link.start()
        #expect(runUntil(loop) { delays.count >= 5 })
        #expect(Array(delays.prefix(5)) == [.milliseconds(10), .milliseconds(20), .milliseconds(40),
                                             .milliseconds(40), .milliseconds(40)])
        #expect(failures.allSatisfy { $0.kind == .noSuchSocket })
        #expect(link.lastError?.kind == .noSuchSocket)

        let server = UnixServer(path: path)
        defer { server.close() }
        #expect(runUntil(loop) { link.isUp })
        #expect(ups == 1)
        #expect(link.lastError == nil)
        link.stop()
    }

    /// A controller that accepts the connection and drops it at once is retried ever more
    /// slowly: an open that succeeds does not start the backoff over, a link that stays up does.
    @Test func immediateDropsBackOffAndOnlyAStableLinkStartsOver() throws {
        let loop = try RunLoop()
        let path = "/tmp/blemu-test-drop-\(getpid())-\(UInt32.random(in: 0...UInt32.max)).sock"
        let server = UnixServer(path: path)
        defer { server.close() }
        let link = ControllerLink(spec: .unix(path: path), loop: loop, initialBackoff: .milliseconds(10),
                                  maxBackoff: .milliseconds(80), stableAfter: .seconds(30))
        var ups = 0
        var downs = 0
        link.onUp = { ups += 1 }
        link.onDown = { _ in downs += 1 }
        link.start()
        for round in 1...3 {
            #expect(runUntil(loop) { ups == round })
            let accepted = server.accept()
            #expect(accepted >= 0)
            close(accepted)
            #expect(runUntil(loop) { downs == round })
        }
        #expect(link.currentBackoff == .milliseconds(80), "three drops at once: 10 -> 20 -> 40 -> 80 ms")
        link.stop()

        // The same, where a link counts as stable after 50 ms: one that stayed up 100 ms
        // starts the backoff over.
        let stable = ControllerLink(spec: .unix(path: path), loop: loop, initialBackoff: .milliseconds(10),
                                    maxBackoff: .milliseconds(80), stableAfter: .milliseconds(50))
        var stableUps = 0
        var stableDowns = 0
        stable.onUp = { stableUps += 1 }
        stable.onDown = { _ in stableDowns += 1 }
        stable.start()
        #expect(runUntil(loop) { stableUps == 1 })
        var accepted = server.accept()
        close(accepted)
        #expect(runUntil(loop) { stableDowns == 1 })
        #expect(runUntil(loop) { stableUps == 2 })
        accepted = server.accept()
        run(loop, for: .milliseconds(100))
        close(accepted)
        #expect(runUntil(loop) { stableDowns == 2 })
        #expect(stable.currentBackoff == .milliseconds(20), "after a stable link: the first delay again, then doubled")
        stable.stop()
    }

    @Test func stopDuringBackoffCancelsTheRetry() throws {
        let loop = try RunLoop()
        let link = ControllerLink(spec: .serial(device: "/dev/nonexistent", baud: 115_200), loop: loop,
                                  initialBackoff: .milliseconds(10))
        var failures = 0
        link.onOpenFailed = { _, _ in failures += 1 }
        link.start()
        #expect(runUntil(loop) { failures == 1 })
        link.stop()
        run(loop, for: .milliseconds(50))
        #expect(failures == 1)
        #expect(loop.pendingTimerCount == 0)
    }
}

/// Against a real rootcanal: `BLEMU_TEST_ROOTCANAL=tcp:127.0.0.1:6402 swift test --filter Rootcanal`.
@Suite(.enabled(if: TestEnvironment.value("BLEMU_TEST_ROOTCANAL") != nil))
struct RootcanalInteropTests {
    @Test func resetGetsCommandComplete() throws {
        let loop = try RunLoop()
        let spec = try ControllerSpec(parsing: TestEnvironment.value("BLEMU_TEST_ROOTCANAL") ?? "")
        let link = ControllerLink(spec: spec, loop: loop)
        var events: [[UInt8]] = []
        link.onPacket = { type, body in if type == .event { events.append(Array(body)) } }
        link.onUp = { _ = link.send(.command, [0x03, 0x0C, 0x00]) }  // HCI_Reset (Vol 4, Part E, 7.3.2)
        var problems: [String] = []
        link.onOpenFailed = { error, _ in problems.append("open failed: \(error)") }
        link.onDown = { problems.append("down: \($0)") }
        link.start()
        defer { link.stop() }
        #expect(runUntil(loop) { !events.isEmpty }, "\(problems), up: \(link.isUp)")
        // Command Complete: code 0x0E, length 4, Num_HCI_Command_Packets, opcode 0x0C03, status 0.
        #expect(events.first?.first == 0x0E)
        #expect(events.first.map { Array($0.dropFirst(3)) } == [0x03, 0x0C, 0x00])
    }
}

enum TestEnvironment {
    static func value(_ name: String) -> String? {
        getenv(name).map { String(cString: $0) }
    }
}
