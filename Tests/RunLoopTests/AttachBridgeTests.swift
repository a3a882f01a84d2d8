import BlemuAttach
import BlemuRunLoop
import BlemuTransport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A connected pair of SOCK_SEQPACKET sockets: one packet per read and write, as /dev/vhci.
private func makePacketPair() -> (Int32, Int32) {
    var fds: [Int32] = [-1, -1]
    let result = socketpair(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &fds)
    precondition(result == 0, "socketpair failed: \(errno)")
    setNonblocking(fds[1])
    return (fds[0], fds[1])
}

/// One packet (one read) from a nonblocking packet socket, or nil when none waits; [] at end of file.
private func readPacket(_ fd: Int32) -> [UInt8]? {
    var buffer = [UInt8](repeating: 0, count: 70_000)
    let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
    guard n >= 0 else { return nil }
    return Array(buffer[0..<n])
}

/// The kernel's side of a fake /dev/vhci: the test end of a packet pair the bridge opens.
private final class FakeKernel {
    var opened: [Int32] = []
    var opens: Int { opened.count }
    var current: Int32 { opened.last ?? -1 }

    func open(_ loop: RunLoop) throws(TransportError) -> VirtualHCIDevice {
        let (mine, theirs) = makePacketPair()
        opened.append(theirs)
        return try VirtualHCIDevice(adopting: mine, path: "/dev/vhci", loop: loop)
    }

    func closeAll() { for fd in opened { close(fd) } }
}

private let resetCommand: [UInt8] = [0x01, 0x03, 0x0C, 0x00]
private let resetComplete: [UInt8] = [0x04, 0x0E, 0x04, 0x01, 0x03, 0x0C, 0x00]

@Suite struct VirtualHCIDeviceTests {
    @Test func asksForAPrimaryAdapterAndPassesPacketsOnlyOnceTheKernelNamedIt() throws {
        let loop = try RunLoop()
        let (mine, kernel) = makePacketPair()
        defer { close(kernel) }
        let device = try VirtualHCIDevice(adopting: mine, path: "/dev/vhci", loop: loop)
        defer { device.close() }
        var created: [UInt16] = []
        var packets: [FramedPacket] = []
        device.onCreated = { created.append($0) }
        device.onPacket = { packets.append(FramedPacket(type: $0, body: Array($1))) }
        #expect(readPacket(kernel) == [0xFF, 0x00], "the vendor packet: a primary adapter")
        #expect(!device.send(.event, [0x0E, 0x00]), "nothing goes to the kernel before the adapter exists")

        writeAll(kernel, [0x01, 0x02])  // not the answer: counted, not taken for it
        writeAll(kernel, [0xFF, 0x00, 0x07, 0x01])
        #expect(runUntil(loop) { !created.isEmpty })
        #expect(created == [0x0107])
        #expect(device.index == 0x0107)
        #expect(device.discardedBytes == 2)

        writeAll(kernel, resetCommand)
        #expect(runUntil(loop) { !packets.isEmpty })
        #expect(packets == [expected(resetCommand)])
        #expect(device.send(.event, Array(resetComplete.dropFirst())))
        #expect(readPacket(kernel) == resetComplete, "one write, one whole packet")
    }

    @Test func aMissingDeviceSaysToLoadTheModule() {
        let problem = VirtualHCIDevice.accessProblem(path: "/nonexistent/vhci")
        #expect(problem?.kind == .noSuchDevice)
        #expect(problem?.description.contains("sudo modprobe hci_vhci") == true)
    }
}

@Suite struct ControllerStandInTests {
    @Test func writeAuthenticatedPayloadTimeoutIsAnsweredWithSuccessForItsHandle() {
        // Connection_Handle 0x0040, timeout 3000 (30 s).
        let answer = ControllerStandIn.answer([0x7C, 0x0C, 0x04, 0x40, 0x00, 0xB8, 0x0B])
        // Command Complete (Vol 4, Part E, 7.7.14): 1 packet, the opcode, success, the handle.
        #expect(answer == [0x0E, 0x06, 0x01, 0x7C, 0x0C, 0x00, 0x40, 0x00])
    }

    @Test func aWrongParameterLengthIsRefusedWithInvalidParameters() {
        #expect(ControllerStandIn.answer([0x7C, 0x0C, 0x02, 0x40, 0x00]) == [0x0E, 0x04, 0x01, 0x7C, 0x0C, 0x12])
        #expect(ControllerStandIn.answer([0x7C, 0x0C, 0x04, 0x40, 0x00]) == [0x0E, 0x04, 0x01, 0x7C, 0x0C, 0x12])
    }

    @Test func everyOtherCommandGoesToTheController() {
        #expect(ControllerStandIn.answer([0x03, 0x0C, 0x00]) == nil)              // Reset
        #expect(ControllerStandIn.answer([0x7B, 0x0C, 0x02, 0x40, 0x00]) == nil)  // Read Authenticated Payload Timeout
        #expect(ControllerStandIn.answer([0x7C]) == nil)                          // truncated
        #expect(ControllerStandIn.answer([]) == nil)
    }
}

@Suite struct AttachBridgeTests {
    /// The bridge up on a fake controller (a Unix listener) and a fake /dev/vhci: returns the
    /// controller's accepted connection once the adapter is up.
    private func bringUp(_ bridge: AttachBridge, _ server: UnixServer, _ kernel: FakeKernel, _ loop: RunLoop,
                         index: UInt8, events: () -> [AttachEvent]) -> Int32 {
        var controller: Int32 = -1
        #expect(runUntil(loop) { controller = server.accept(); return controller >= 0 })
        var probe: [UInt8] = []
        #expect(runUntil(loop) { probe += readAvailable(controller); return probe.count >= 4 })
        #expect(probe == resetCommand, "the controller is asked to answer a reset first")
        let opensBefore = kernel.opens
        #expect(kernel.opens == opensBefore, "no adapter before the controller answered")
        writeAll(controller, resetComplete)
        #expect(runUntil(loop) { kernel.opens == opensBefore + 1 })
        #expect(readPacket(kernel.current) == [0xFF, 0x00])
        writeAll(kernel.current, [0xFF, 0x00, index, 0x00])
        #expect(runUntil(loop) { events().last == .adapterUp(name: "hci\(index)") })
        return controller
    }

    @Test func bridgesBothWaysAnswersWhatRootcanalCannotAndFollowsTheController() throws {
        let loop = try RunLoop()
        let server = UnixServer()
        defer { server.close() }
        let kernel = FakeKernel()
        defer { kernel.closeAll() }
        let bridge = AttachBridge(controller: .unix(path: server.path), loop: loop, initialBackoff: .milliseconds(20),
                                  maxBackoff: .milliseconds(80)) { () throws(TransportError) -> VirtualHCIDevice in
            try kernel.open(loop)
        }
        var events: [AttachEvent] = []
        var ended: String?
        bridge.onEvent = { events.append($0) }
        bridge.onEnded = { ended = $0 }
        bridge.start()
        var controller = bringUp(bridge, server, kernel, loop, index: 3) { events }
        #expect(bridge.adapterName == "hci3")

        // The kernel's commands go to the controller, its events back, byte for byte.
        let readBDAddr: [UInt8] = [0x01, 0x09, 0x10, 0x00]
        writeAll(kernel.current, readBDAddr)
        var got: [UInt8] = []
        #expect(runUntil(loop) { got += readAvailable(controller); return got.count >= 4 })
        #expect(got == readBDAddr)
        let complete: [UInt8] = [0x04, 0x0E, 0x0A, 0x01, 0x09, 0x10, 0x00, 1, 2, 3, 4, 5, 6]
        writeAll(controller, complete)
        var fromController: [UInt8]?
        #expect(runUntil(loop) { fromController = readPacket(kernel.current); return fromController != nil })
        #expect(fromController == complete)

        // Write Authenticated Payload Timeout: answered here, never sent on, said once.
        let timeout: [UInt8] = [0x01, 0x7C, 0x0C, 0x04, 0x40, 0x00, 0xB8, 0x0B]
        for _ in 0..<2 {
            writeAll(kernel.current, timeout)
            var answer: [UInt8]?
            #expect(runUntil(loop) { answer = readPacket(kernel.current); return answer != nil })
            #expect(answer == [0x04, 0x0E, 0x06, 0x01, 0x7C, 0x0C, 0x00, 0x40, 0x00])
        }
        run(loop, for: .milliseconds(30))
        #expect(readAvailable(controller).isEmpty, "the controller never sees it")
        #expect(events.filter { if case .answeredForController = $0 { true } else { false } }.count == 1)

        // The controller goes away: the adapter with it; it comes back: a new adapter.
        let firstKernel = kernel.current
        close(controller)
        #expect(runUntil(loop) { events.contains { if case .adapterRemoved(name: "hci3", _) = $0 { true } else { false } } })
        #expect(readPacket(firstKernel) == [], "/dev/vhci closed: the kernel unregisters hci3")
        controller = bringUp(bridge, server, kernel, loop, index: 4) { events }
        #expect(kernel.opens == 2)

        // Stopping removes the adapter and ends nothing.
        bridge.stop()
        #expect(events.last == .adapterRemoved(name: "hci4", reason: "stopped"))
        #expect(readPacket(kernel.current) == [])
        #expect(ended == nil)
        close(controller)
        #expect(loop.registeredCount == 0)
    }

    @Test func aControllerThatDoesNotAnswerTheResetEndsItWithoutAnAdapter() throws {
        let loop = try RunLoop()
        let server = UnixServer()
        defer { server.close() }
        let kernel = FakeKernel()
        defer { kernel.closeAll() }
        let bridge = AttachBridge(controller: .unix(path: server.path), loop: loop, probeTimeout: .milliseconds(100)) {
            () throws(TransportError) -> VirtualHCIDevice in try kernel.open(loop)
        }
        var ended: String?
        bridge.onEnded = { ended = $0 }
        bridge.start()
        var controller: Int32 = -1
        #expect(runUntil(loop) { controller = server.accept(); return controller >= 0 })
        defer { close(controller) }
        #expect(runUntil(loop) { ended != nil })
        #expect(ended?.contains("did not answer HCI_Reset") == true)
        #expect(kernel.opens == 0)
    }

    @Test func anUnreachableControllerAtStartEndsItWithTheTransportsReason() throws {
        let loop = try RunLoop()
        let kernel = FakeKernel()
        let bridge = AttachBridge(controller: .unix(path: "/nonexistent/controller.sock"), loop: loop) {
            () throws(TransportError) -> VirtualHCIDevice in try kernel.open(loop)
        }
        var ended: String?
        bridge.onEnded = { ended = $0 }
        bridge.start()
        #expect(runUntil(loop) { ended != nil })
        #expect(ended?.contains("no such socket") == true)
        #expect(kernel.opens == 0)
    }

    @Test func aDeviceThatCannotBeOpenedEndsItWithItsReason() throws {
        let loop = try RunLoop()
        let server = UnixServer()
        defer { server.close() }
        let bridge = AttachBridge(controller: .unix(path: server.path), loop: loop) {
            () throws(TransportError) -> VirtualHCIDevice in try VirtualHCIDevice.open(path: "/nonexistent/vhci", loop: loop)
        }
        var ended: String?
        bridge.onEnded = { ended = $0 }
        bridge.start()
        var controller: Int32 = -1
        #expect(runUntil(loop) { controller = server.accept(); return controller >= 0 })
        defer { close(controller) }
        #expect(runUntil(loop) { readAvailable(controller).count >= 4 })
        writeAll(controller, resetComplete)
        #expect(runUntil(loop) { ended != nil })
        #expect(ended?.contains("modprobe hci_vhci") == true)
    }
}
