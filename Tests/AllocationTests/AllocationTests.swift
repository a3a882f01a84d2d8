import BlemuATT
import BlemuBenchRig
import BlemuCore
import BlemuCrypto
import BlemuDevice
import BlemuDevices
import BlemuGATT
import BlemuHCI
@testable import BlemuHost
import CAllocationCounter
import Testing

/// The request path allocates nothing (Docs/PERFORMANCE.md, "Allocations"): each ATT request
/// through the whole in-process stack (HCI, L2CAP, the ATT server, the database, the device's
/// handlers) and each notification a device sends, counted with a malloc interposer on this
/// thread after a warm-up. An allocation that comes back fails here.
@Suite struct AllocationTests {
    static let iterations = 200

    /// Heap allocations of `iterations` runs of `body` after one warm-up run.
    func allocations(_ body: () -> Void) -> Int {
        body()
        blemu_allocation_counting_start()
        for _ in 0..<Self.iterations { body() }
        return blemu_allocation_counting_stop()
    }

    @Test func theCounterCountsAllocations() {
        var kept: [[UInt8]] = []
        let count = allocations { kept.append([UInt8](repeating: 1, count: 64 + kept.count)) }
        #expect(count >= Self.iterations)
        #expect(kept.count == Self.iterations + 1)
    }

    /// Log handlers pass every message through `VisibleText`: text with nothing to escape
    /// (nearly all of it) is checked and given back without a copy.
    @Test func visibleTextOfCleanTextAllocatesNothing() {
        let text = "connected to F0:F1:F2:F3:F4:F5: interval 30.0 ms, blemu Heart Rate °C ✓ — " + String(repeating: "x", count: 64)
        var total = 0
        #expect(allocations { total &+= VisibleText.make(text).utf8.count } == 0)
        #expect(total > 0)
    }

    @Test func cachedRead() throws {
        let rig = try Rig()
        let packet = Rig.acl([0x0A] + Rig.le(rig.device.bodySensorLocation.valueHandle))
        #expect(allocations { rig.request(packet) } == 0)
    }

    @Test func dynamicRead() throws {
        let rig = try Rig()
        let packet = Rig.acl([0x0A] + Rig.le(rig.device.battery.level.valueHandle))
        #expect(allocations { rig.request(packet) } == 0)
    }

    @Test func clientConfigurationRead() throws {
        let rig = try Rig()
        let packet = Rig.acl([0x0A] + Rig.le(rig.device.measurement.clientConfigurationHandle ?? 0))
        #expect(allocations { rig.request(packet) } == 0)
    }

    @Test func writeRequest() throws {
        let rig = try Rig()
        let packet = Rig.acl([0x12] + Rig.le(rig.device.controlPoint.valueHandle) + [HeartRateDevice.resetEnergyExpended])
        #expect(allocations { rig.request(packet) } == 0)
    }

    @Test func refusedWriteAndErrorResponse() throws {
        let rig = try Rig()
        // The device refuses 0x02 (Control Point Value Not Supported); 0xFFF0 is no handle.
        let refused = Rig.acl([0x12] + Rig.le(rig.device.controlPoint.valueHandle) + [0x02])
        let missing = Rig.acl([0x0A, 0xF0, 0xFF])
        #expect(allocations { rig.request(refused) } == 0)
        #expect(allocations { rig.request(missing) } == 0)
    }

    @Test func discovery() throws {
        let rig = try Rig(device: HeartRateDevice(seed: 42), recordsOutput: true)
        let services = Rig.acl([0x10, 0x01, 0x00, 0xFF, 0xFF, 0x00, 0x28])
        let characteristics = Rig.acl([0x08, 0x01, 0x00, 0xFF, 0xFF, 0x03, 0x28])
        let descriptors = Rig.acl([0x04, 0x01, 0x00, 0xFF, 0xFF])
        #expect(allocations { rig.request(services) } == 0)
        // What was measured is an answer: the services (Read By Group Type Response, 0x11) of
        // 16-bit UUIDs, 6 bytes each, as many as ATT_MTU 23 holds.
        // GAP 0x1800, GATT 0x1801 and the device's first service, Heart Rate 0x180D, as ever
        // (the stack's 128-bit Diagnostics service comes after the device's).
        let answer = Array((rig.output?.last ?? []).dropFirst(8))
        #expect(answer.first == 0x11 && answer.count == 20 && answer[1] == 6, "\(answer)")
        #expect(answer.count == 20 && [answer[6], answer[12], answer[18]] == [0x00, 0x01, 0x0D], "\(answer)")
        #expect(allocations { rig.request(characteristics) } == 0)
        #expect(allocations { rig.request(descriptors) } == 0)
    }

    @Test func deviceNotification() throws {
        let rig = try Rig()
        let cccd = rig.device.measurement.clientConfigurationHandle ?? 0
        rig.request(Rig.acl([0x12] + Rig.le(cccd) + [0x01, 0x00]))
        let measurement = HeartRateMeasurement(heartRate: 72, energyExpended: 10, rrIntervals: [800, 810])
        var sent = 0
        let count = allocations {
            if rig.peripheral.notify(rig.device.measurement, encode: { measurement.encode(into: &$0) }) { sent += 1 }
            rig.peripheral.hci.receiveEvent(rig.completed[...])
        }
        #expect(count == 0)
        #expect(sent == Self.iterations + 1)
    }

    // MARK: Every other request the server answers, on a device with long values (LongValueDevice)

    @Test func exchangeMTU() throws {
        let rig = try DeviceRig(device: LongValueDevice(), recordsOutput: true)
        let output = try #require(rig.output)
        // The first exchange sets ATT_MTU 23 (no change); each later one is answered the same.
        let packet = Rig.acl([0x02, 0x17, 0x00])
        let count = allocations { rig.request(packet) }
        #expect(count == 0)
        #expect(output.count(0x03) == Self.iterations + 1)
        #expect(Array(output.last.suffix(3)) == [0x03, 0x05, 0x02])
    }

    @Test func findByTypeValue() throws {
        let rig = try DeviceRig(device: LongValueDevice(), recordsOutput: true)
        let output = try #require(rig.output)
        let service = rig.device.service
        // The primary service 0xFFF0 by its UUID (Vol 3, Part G, 4.4.2).
        let packet = Rig.acl([0x06, 0x01, 0x00, 0xFF, 0xFF, 0x00, 0x28, 0xF0, 0xFF])
        #expect(allocations { rig.request(packet) } == 0)
        #expect(output.count(0x07) == Self.iterations + 1)
        #expect(Array(output.last.suffix(5)) == [0x07] + Rig.le(service.startHandle) + Rig.le(service.endHandle))
    }

    @Test func readByTypeOfAValue() throws {
        let rig = try DeviceRig(device: LongValueDevice(), recordsOutput: true)
        let output = try #require(rig.output)
        // Read Using Characteristic UUID (Vol 3, Part G, 4.8.2): a cached value and a long dynamic one.
        let cached = Rig.acl([0x08, 0x01, 0x00, 0xFF, 0xFF, 0xF1, 0xFF])
        let dynamic = Rig.acl([0x08, 0x01, 0x00, 0xFF, 0xFF, 0xF2, 0xFF])
        #expect(allocations { rig.request(cached) } == 0)
        #expect(allocations { rig.request(dynamic) } == 0)
        #expect(output.count(0x09) == 2 * (Self.iterations + 1))
        // 23 - 4 bytes of the value, after the length and the handle.
        let handle = rig.device.longDynamic.valueHandle
        #expect(Array(output.last.suffix(23)) == [0x09, 21] + Rig.le(handle) + (0..<19).map { UInt8($0) })
    }

    @Test func readBlobOfLongValues() throws {
        let rig = try DeviceRig(device: LongValueDevice(), recordsOutput: true)
        let output = try #require(rig.output)
        let cached = rig.device.longCached.valueHandle, dynamic = rig.device.longDynamic.valueHandle
        // A whole long read each: Read Request, then Read Blob at 22, 44, ... (Vol 3, Part G, 4.8.3).
        func longRead(_ handle: UInt16, _ length: Int) -> [[UInt8]] {
            [Rig.acl([0x0A] + Rig.le(handle))] + stride(from: 22, to: length, by: 22).map {
                Rig.acl([0x0C] + Rig.le(handle) + Rig.le(UInt16($0)))
            }
        }
        let cachedRead = longRead(cached, 100), dynamicRead = longRead(dynamic, 300)
        #expect(allocations { for packet in cachedRead { rig.request(packet) } } == 0)
        #expect(allocations { for packet in dynamicRead { rig.request(packet) } } == 0)
        #expect(output.count(0x0D) == (Self.iterations + 1) * (cachedRead.count + dynamicRead.count - 2))
        // The last blob of the dynamic value: bytes 286..<300.
        #expect(Array(output.last.suffix(15)) == [0x0D] + (286..<300).map { UInt8(truncatingIfNeeded: $0) })
    }

    @Test func readMultiple() throws {
        let rig = try DeviceRig(device: LongValueDevice(), recordsOutput: true)
        let output = try #require(rig.output)
        let handles = Rig.le(rig.device.shortDynamic.valueHandle) + Rig.le(rig.device.longCached.valueHandle)
        let multiple = Rig.acl([0x0E] + handles)
        let variable = Rig.acl([0x20] + handles)
        #expect(allocations { rig.request(multiple) } == 0)
        #expect(allocations { rig.request(variable) } == 0)
        #expect(output.count(0x0F) == Self.iterations + 1)
        #expect(output.count(0x21) == Self.iterations + 1)
        // 3.4.4.12: each value with its length, cut at ATT_MTU - 1.
        #expect(Array(output.last.suffix(23)) == [0x21, 0x02, 0x00, 0xAB, 0xCD, 100, 0] + (0..<16).map { UInt8($0) })
    }

    @Test func writeCommand() throws {
        let rig = try DeviceRig(device: LongValueDevice())
        let packet = Rig.acl([0x52] + Rig.le(rig.device.writable.valueHandle) + [1, 2, 3])
        #expect(allocations { rig.request(packet) } == 0)
        #expect(rig.device.writes == Self.iterations + 1)
        #expect(rig.device.value == [1, 2, 3])
    }

    @Test func fragmentedRequest() throws {
        let rig = try DeviceRig(device: LongValueDevice())
        // A Write Request in two ACL packets (a controller's buffers may be as small as 27
        // bytes, Vol 6, Part B, 2.4.2.21): gathered by L2CAP, with a timer for the last fragment.
        var frame: [UInt8] = [0x08, 0x00, 0x04, 0x00, 0x12] + Rig.le(rig.device.writable.valueHandle) + [1, 2, 3, 4, 5]
        frame[0] = UInt8(frame.count - 4)
        var first: [UInt8] = [], second: [UInt8] = []
        ACLPacket(handle: 0x0040, boundary: .firstFlushable, data: frame[..<6]).encode(into: &first)
        ACLPacket(handle: 0x0040, boundary: .continuing, data: frame[6...]).encode(into: &second)
        let count = allocations {
            rig.peripheral.hci.receiveACL(first[...])
            rig.request(second)
        }
        #expect(count == 0)
        #expect(rig.device.writes == Self.iterations + 1)
        #expect(rig.device.value == [1, 2, 3, 4, 5])
    }

    @Test func signedWriteCommand() throws {
        let rig = try DeviceRig(device: LongValueDevice())
        // The bonded central's CSRK, as the security layer hands it to the link's server.
        let csrk = (0..<16).map { UInt8($0 * 3) }
        let server = try #require(rig.peripheral.connections[0x0040]?.server)
        server.session.signing = ATTSigningState(signatureKey: csrk, lastCounter: nil)
        // Each signed with the next SignCounter (Vol 3, Part C, 10.4.2: a replay is dropped).
        let packets = (1...UInt32(Self.iterations + 1)).map { counter in
            let message = [0xD2] + Rig.le(rig.device.writable.valueHandle) + [9, 8, 7]
            return Rig.acl(message + ATTSignature.sign(message, counter: counter, csrk: csrk))
        }
        var next = 0
        let count = allocations {
            rig.request(packets[next])
            next += 1
        }
        #expect(count == 0)
        #expect(rig.device.writes == Self.iterations + 1)
        #expect(rig.device.value == [9, 8, 7])
        #expect(server.session.signing?.lastCounter == UInt32(Self.iterations + 1))
    }

    /// Allocations of `iterations` long writes to the writable value: `parts` (offset, bytes)
    /// prepared, then Execute Write with `flags` (0x01 write, 0x00 cancel).
    func longWrites(_ rig: DeviceRig<LongValueDevice>, _ parts: [(offset: Int, bytes: ArraySlice<UInt8>)], flags: UInt8) -> Int {
        let handle = rig.device.writable.valueHandle
        let prepared = parts.map { Rig.acl([0x16] + Rig.le(handle) + Rig.le(UInt16($0.offset)) + $0.bytes) }
        let execute = Rig.acl([0x18, flags])
        return allocations {
            for packet in prepared { rig.request(packet) }
            rig.request(execute)
        }
    }

    @Test func longWriteExecuted() throws {
        let rig = try DeviceRig(device: LongValueDevice(), recordsOutput: true)
        let output = try #require(rig.output)
        let value = (0..<60).map { UInt8($0 + 1) }
        // Parts of ATT_MTU - 5 = 18 bytes (Vol 3, Part G, 4.9.4), then Execute Write with flags 0x01.
        let parts = stride(from: 0, to: value.count, by: 18).map { ($0, value[$0..<min($0 + 18, value.count)]) }
        #expect(longWrites(rig, parts, flags: 0x01) == 0)
        #expect(output.count(0x17) == (Self.iterations + 1) * parts.count)
        #expect(output.count(0x19) == Self.iterations + 1)
        #expect(output.count(0x01) == 0)
        // The device saw the whole value once per long write, assembled.
        #expect(rig.device.writes == Self.iterations + 1)
        #expect(rig.device.value == value)
    }

    @Test func longWriteCancelled() throws {
        let rig = try DeviceRig(device: LongValueDevice(), recordsOutput: true)
        let output = try #require(rig.output)
        let bytes = [UInt8](repeating: 7, count: 18)[...]
        #expect(longWrites(rig, [(0, bytes), (18, bytes)], flags: 0x00) == 0)
        #expect(output.count(0x19) == Self.iterations + 1)
        #expect(rig.device.writes == 0)
    }

    @Test func longWriteRefusedAtExecute() throws {
        let rig = try DeviceRig(device: LongValueDevice(), recordsOutput: true)
        let output = try #require(rig.output)
        let bytes = [UInt8](repeating: 7, count: 18)[...]
        // A second part that starts past the end of the first: Invalid Offset at Execute (3.4.6.3).
        #expect(longWrites(rig, [(0, bytes), (40, bytes)], flags: 0x01) == 0)
        #expect(Array(output.last.suffix(5)) == [0x01, 0x18] + Rig.le(rig.device.writable.valueHandle) + [0x07])
        #expect(rig.device.writes == 0)
    }

    /// A rig with the test device whose central enabled `flags` (0x01 notifications, 0x02
    /// indications) in the CCCD of `characteristic` (the device's `updated` when nil).
    func subscribedRig(_ flags: UInt8, _ characteristic: ((DeviceRig<LongValueDevice>) -> Characteristic)? = nil) throws
        -> (rig: DeviceRig<LongValueDevice>, output: OutputRecorder, c: Characteristic) {
        let rig = try DeviceRig(device: LongValueDevice(), recordsOutput: true)
        let c = characteristic?(rig) ?? rig.device.updated
        rig.request(Rig.acl([0x12] + Rig.le(c.clientConfigurationHandle ?? 0) + [flags, 0x00]))
        return (rig, try #require(rig.output), c)
    }

    static let confirmation = Rig.acl([0x1E])

    /// The controller completes the indication sent, and the central confirms it.
    func confirm(_ rig: DeviceRig<LongValueDevice>) {
        rig.peripheral.hci.receiveEvent(rig.completed[...])
        rig.peripheral.hci.receiveACL(Self.confirmation[...])
    }

    @Test func deviceIndicationAndConfirmation() throws {
        let (rig, output, c) = try subscribedRig(0x02)
        var confirmed = 0
        let completion: IndicationCompletion = { _, outcome in if outcome == .confirmed { confirmed += 1 } }
        var taken = 0
        let count = allocations {
            if rig.peripheral.indicate(c, to: nil, completion: completion, encode: { $0.appendLE(UInt32(0xA1B2_C3D4)) }) { taken += 1 }
            confirm(rig)
        }
        #expect(count == 0)
        #expect(taken == Self.iterations + 1)
        #expect(confirmed == Self.iterations + 1)
        // Each went out only once the one before it was confirmed: one at a time (3.4.7.2).
        #expect(output.count(0x1D) == Self.iterations + 1)
        #expect(Array(output.last.suffix(7)) == [0x1D] + Rig.le(c.valueHandle) + [0xD4, 0xC3, 0xB2, 0xA1])
    }

    @Test func indicationsWaitingForConfirmation() throws {
        let (rig, output, c) = try subscribedRig(0x02)
        // Four at once: one in flight, three waiting; each confirmation sends the next.
        var taken = 0
        let count = allocations {
            for byte in 0..<4 as Range<UInt8> where rig.peripheral.indicate(c, encode: { $0.append(byte) }) { taken += 1 }
            for _ in 0..<4 { confirm(rig) }
        }
        #expect(count == 0)
        #expect(taken == 4 * (Self.iterations + 1))
        #expect(output.count(0x1D) == 4 * (Self.iterations + 1))
        #expect(Array(output.last.suffix(4)) == [0x1D] + Rig.le(c.valueHandle) + [3])
    }

    @Test func serviceChangedIndication() throws {
        let (rig, output, serviceChanged) = try subscribedRig(0x02) { $0.peripheral.standard.serviceChanged }
        let server = try #require(rig.peripheral.connections[0x0040]?.server)
        // A robust-caching client the database changed for: confirming makes it change-aware
        // (Vol 3, Part G, 2.5.2.1).
        server.session.clientSupportsRobustCaching = true
        server.session.becomeChangeUnaware()
        #expect(!server.isChangeAware)
        var taken = 0
        let count = allocations {
            if server.indicateServiceChanged(serviceChanged, range: 0x0010...0x0020) == .queued { taken += 1 }
            confirm(rig)
        }
        #expect(count == 0)
        #expect(taken == Self.iterations + 1)
        #expect(output.count(0x1D) == Self.iterations + 1)
        #expect(Array(output.last.suffix(7)) == [0x1D] + Rig.le(serviceChanged.valueHandle) + [0x10, 0x00, 0x20, 0x00])
        #expect(server.isChangeAware)
    }

    @Test func notificationsBeyondControllerCredits() throws {
        let (rig, output, c) = try subscribedRig(0x01)
        let value = [UInt8](repeating: 0x5A, count: 20)
        // The controller has 8 ACL buffers (Rig.answer): 12 notifications send 8 and queue 4;
        // completing the 8 sends the 4, completing those empties the link.
        let completed = [0x13, 0x05, 0x01, 0x40, 0x00, 0x0C, 0x00] as [UInt8]
        var taken = 0
        let count = allocations {
            for _ in 0..<12 where rig.peripheral.notify(c, value: value, to: nil) { taken += 1 }
            rig.peripheral.hci.receiveEvent(completed[...])
            rig.peripheral.hci.receiveEvent(completed[...])
        }
        #expect(count == 0)
        #expect(taken == 12 * (Self.iterations + 1))
        #expect(output.count(0x1B) == 12 * (Self.iterations + 1))
    }

    @Test func notificationsRefusedWhenTheQueueIsFull() throws {
        let (rig, output, c) = try subscribedRig(0x01)
        let completed = [0x13, 0x05, 0x01, 0x40, 0x00, 0x10, 0x00] as [UInt8]
        // 8 go out, 8 wait (HCIHost.bestEffortQueueLimit), the 17th is refused, not dropped:
        // `notify` says so and the device hears it is ready once room frees.
        var taken = 0, refused = 0
        let count = allocations {
            for byte in 0..<17 as Range<UInt8> {
                if rig.peripheral.notify(c, encode: { $0.append(byte) }) { taken += 1 } else { refused += 1 }
            }
            rig.peripheral.hci.receiveEvent(completed[...])
            rig.peripheral.hci.receiveEvent(completed[...])
        }
        #expect(count == 0)
        #expect(taken == 16 * (Self.iterations + 1))
        #expect(refused == Self.iterations + 1)
        #expect(rig.device.readyHeard == Self.iterations + 1)
        #expect(output.count(0x1B) == 16 * (Self.iterations + 1))
    }
}

/// What the heart-rate sensor lacks for these tests: long values (cached and dynamic), a value
/// written with Write Request, Write Command and long writes, and one that indicates. Its
/// handlers keep what they are given in place: an allocation of theirs would be counted too.
final class LongValueDevice: Device {
    static let deviceName = "allocation-test"
    static let summary = "long values, long writes and indications, for the allocation tests"
    let profile = DeviceProfile(defaultName: "Alloc", advertisedServices: [], appearance: 0)
    let longCached = Characteristic(0xFFF1, properties: [.read], cachedValue: (0..<100).map { UInt8($0) })
    let longDynamic = Characteristic(0xFFF2, properties: [.read], length: .variable(max: 300), onRead: { _, value in
        for byte in 0..<300 { value.append(UInt8(truncatingIfNeeded: byte)) }
        return nil
    })
    let shortDynamic = Characteristic(0xFFF5, properties: [.read], length: .fixed(2), onRead: { _, value in
        value.append(0xAB)
        value.append(0xCD)
        return nil
    })
    let writable = Characteristic(0xFFF3, properties: [.read, .write, .writeWithoutResponse, .authenticatedSignedWrites])
    let updated = Characteristic(0xFFF4, properties: [.notify, .indicate])
    lazy var service = Service(0xFFF0) { [longCached, longDynamic, writable, updated, shortDynamic] }
    /// The last value written, in room taken once.
    private var stored = [UInt8](repeating: 0, count: ValueLength.attributeMaximum)
    private var storedCount = 0
    private(set) var writes = 0
    private(set) var readyHeard = 0

    var value: [UInt8] { Array(stored[..<storedCount]) }
    var services: [Service] { [service] }

    init() {
        writable.onWrite = { [unowned self] request in
            for index in request.value.indices { self.stored[index] = request.value[index] }
            self.storedCount = request.value.count
            self.writes += 1
            return nil
        }
        writable.onRead = { [unowned self] _, value in
            value.append(contentsOf: self.stored[..<self.storedCount])
            return nil
        }
    }

    func start(context: DeviceContext) {}
    func peripheralIsReady() { readyHeard += 1 }
}
