import BlemuATT
import BlemuCore
import BlemuGATT
import Testing
@testable import BlemuGATTClient

let longUUID = BluetoothUUID("6E400001-B5A3-F393-E0A9-E50E24DCCA9E")!
let longCharacteristicUUID = BluetoothUUID("6E400003-B5A3-F393-E0A9-E50E24DCCA9E")!
let secondaryUUID = BluetoothUUID("6E400010-B5A3-F393-E0A9-E50E24DCCA9E")!

func hex(_ text: String) -> [UInt8] { Hex.parse(text) ?? [] }

/// A GATT client and blemu's own ATT server on one in-process bearer: what one sends, the
/// other receives when `pump()` runs. The link may go silent or tamper with what the server says.
final class Bearer: ATTServerDelegate {
    let scheduler = ManualScheduler()
    let database: GATTDatabase
    let server: ATTServer
    var client: GATTClient!
    var toServer: [[UInt8]] = []
    var toClient: [[UInt8]] = []
    /// Everything the client sent, in order.
    var clientSent: [[UInt8]] = []
    var serverSilent = false
    var tamper: ((inout [UInt8]) -> Void)?
    var unexpected: [String] = []
    var written: [(handle: UInt16, value: [UInt8])] = []
    var longValue: [UInt8] = (0..<300).map { UInt8(truncatingIfNeeded: $0 * 7) }

    let serviceChanged = Characteristic(GATTType.serviceChanged, properties: [.indicate], length: .fixed(4))
    let sensor: Characteristic
    let long: Characteristic
    let writable: Characteristic
    let battery: Service
    let custom: Service
    let secondary: Service

    init(serverRxMTU: Int = ATTServer.maximumMTU) throws {
        var box: Bearer!
        sensor = Characteristic(0x2A37, properties: [.notify, .indicate, .read], descriptors: [.userDescription("Sensor")],
                                onRead: { _, value in value.append(contentsOf: [0x06, 72]); return nil })
        long = Characteristic(longCharacteristicUUID, properties: [.read],
                              onRead: { _, value in value.append(contentsOf: box.longValue); return nil })
        writable = Characteristic(0x2A39, properties: [.write, .writeWithoutResponse], onWrite: { request in
            box.written.append((request.offset == 0 ? 0x2A39 : 0, Array(request.value)))
            return nil
        })
        let serviceChanged = self.serviceChanged
        let (sensor, long, writable) = (self.sensor, self.long, self.writable)
        secondary = Service(secondaryUUID, primary: false) {
            Characteristic(0x2A19, properties: [.read], cachedValue: [0x55])
        }
        battery = Service(0x180F) { Characteristic(0x2A19, properties: [.read], cachedValue: [0x64]) }
        custom = Service(longUUID, includes: [secondary]) {
            long
            writable
        }
        database = try GATTDatabase(services: [
            Service(0x1800) { Characteristic(0x2A00, properties: [.read], cachedValue: Array("bearer".utf8)) },
            Service(0x1801) { serviceChanged },
            secondary,
            Service(0x180D) { sensor },
            battery,
            custom,
        ])
        server = ATTServer(database: database, peer: ATTPeer(connectionHandle: 0x40, address: BluetoothAddress("C0:01:02:03:04:05")!),
                           scheduler: scheduler, serverRxMTU: serverRxMTU)
        box = self
        server.delegate = self
        client = GATTClient(scheduler: scheduler) { [unowned self] pdu in
            self.clientSent.append(pdu)
            self.toServer.append(pdu)
            return true
        }
        client.onUnexpected = { [unowned self] in self.unexpected.append($0) }
    }

    func pump() {
        while !toServer.isEmpty || !toClient.isEmpty {
            if !toServer.isEmpty {
                let pdu = toServer.removeFirst()
                if !serverSilent { server.receive(pdu[...]) }
            } else {
                var pdu = toClient.removeFirst()
                tamper?(&pdu)
                client.receive(pdu[...])
            }
        }
    }

    /// Starts a procedure, runs the bearer until it is quiet, and returns the result.
    func run<T>(_ start: (GATTClient, @escaping (Result<T, GATTClientError>) -> Void) -> Void) -> Result<T, GATTClientError>? {
        var result: Result<T, GATTClientError>?
        start(client) { result = $0 }
        pump()
        return result
    }

    // ATTServerDelegate
    func attServer(_ server: ATTServer, send pdu: ArraySlice<UInt8>, kind: ATTSendKind) -> Bool {
        toClient.append(Array(pdu))
        return true
    }
    func attServerTransactionTimedOut(_ server: ATTServer) {}
}

extension Result {
    var value: Success? { if case .success(let value) = self { return value } else { return nil } }
    var error: Failure? { if case .failure(let error) = self { return error } else { return nil } }
}

@Suite struct GATTClientDiscoveryTests {
    /// Vol 3, Part G, 4.4 – 4.7 against blemu's server: every service, include, characteristic
    /// and descriptor with the handles the server's database assigned.
    @Test func discoverAllFindsWhatTheServerDeclares() throws {
        let b = try Bearer()
        let services = try #require(b.run { $0.discoverAll(completion: $1) }?.value)
        // Every service, the secondary one (found through its include) in its handle order.
        #expect(services.map(\.uuid) == [BluetoothUUID(0x1800), BluetoothUUID(0x1801), secondaryUUID, BluetoothUUID(0x180D),
                                         BluetoothUUID(0x180F), longUUID])
        #expect(services.map(\.handles) == b.database.services.map { $0.startHandle...$0.endHandle })
        #expect(services.map(\.service.isPrimary) == b.database.services.map(\.isPrimary))
        #expect(services[2].characteristics.map(\.uuid) == [BluetoothUUID(0x2A19)])
        // The included secondary service has a 128-bit UUID: read from its declaration (4.5.1).
        let custom = try #require(services.last)
        #expect(custom.includes.map(\.service.uuid) == [secondaryUUID])
        #expect(custom.includes.first?.service.handles == b.secondary.startHandle...b.secondary.endHandle)
        #expect(custom.characteristics.map(\.uuid) == [longCharacteristicUUID, BluetoothUUID(0x2A39)])
        #expect(custom.characteristics.map(\.valueHandle) == [b.long.valueHandle, b.writable.valueHandle])
        #expect(custom.characteristics[1].properties == [.write, .writeWithoutResponse])
        let sensor = try #require(services.characteristic(BluetoothUUID(0x2A37)))
        #expect(sensor.descriptors.map(\.uuid) == [GATTType.clientConfiguration, GATTType.userDescription])
        #expect(sensor.clientConfigurationHandle == b.sensor.clientConfigurationHandle)
        #expect(b.client.services == services)
        #expect(b.unexpected.isEmpty)
    }

    @Test func primaryServiceByUUID() throws {
        let b = try Bearer()
        let found = try #require(b.run { $0.discoverPrimaryServices(BluetoothUUID(0x180F), completion: $1) }?.value)
        #expect(found == [DiscoveredService(uuid: BluetoothUUID(0x180F), handles: b.battery.startHandle...b.battery.endHandle)])
        let none = try #require(b.run { $0.discoverPrimaryServices(BluetoothUUID(0x1810), completion: $1) }?.value)
        #expect(none.isEmpty)
    }

    @Test func exchangeMTUSetsTheSmallerOfTheTwo() throws {
        let b = try Bearer(serverRxMTU: 185)
        #expect(b.run { $0.exchangeMTU(517, completion: $1) }?.value == 185)
        #expect(b.client.mtu == 185 && b.server.mtu == 185)
    }
}

@Suite struct GATTClientReadWriteTests {
    /// 4.8.3: at ATT_MTU 23 a 300-byte value takes a Read and 14 Read Blobs, and comes whole.
    @Test func longReadIsWhole() throws {
        let b = try Bearer()
        #expect(b.run { $0.read(b.long.valueHandle, completion: $1) }?.value == b.longValue)
        #expect(b.clientSent.filter { $0.first == 0x0C }.count == 300 / 22)
        // A value of exactly one response: the Read Blob that follows is answered empty or Not Long.
        b.longValue = Array(repeating: 9, count: 22)
        #expect(b.run { $0.read(b.long.valueHandle, completion: $1) }?.value == b.longValue)
        #expect(b.run { $0.read(b.sensor.valueHandle, completion: $1) }?.value == [0x06, 72])
    }

    @Test func errorsCarryTheATTErrorAndHandle() throws {
        let b = try Bearer()
        #expect(b.run { $0.read(0x0999, completion: $1) }?.error == .att(.invalidHandle, handle: 0x0999))
        #expect(b.run { $0.write(b.long.valueHandle, [1], completion: $1) }?.error == .att(.writeNotPermitted, handle: b.long.valueHandle))
    }

    @Test func readMultiple() throws {
        let b = try Bearer()
        let level = b.battery.characteristics[0].valueHandle
        #expect(b.run { $0.readMultiple([level, b.sensor.valueHandle], completion: $1) }?.value == [0x64, 0x06, 72])
        #expect(b.run { $0.readMultipleVariable([b.sensor.valueHandle, level], completion: $1) }?.value == [[0x06, 72], [0x64]])
    }

    /// 4.9.4: a value longer than ATT_MTU - 3 goes as Prepare Writes and one Execute Write.
    @Test func longWriteArrivesWhole() throws {
        let b = try Bearer()
        let value = (0..<100).map { UInt8($0) }
        #expect(b.run { $0.write(b.writable.valueHandle, value, completion: $1) }?.value != nil)
        #expect(b.written.map(\.value) == [value])
        #expect(b.clientSent.filter { $0.first == 0x16 }.count == 6)   // 18 bytes a part at MTU 23
        #expect(b.clientSent.last == [0x18, 0x01])
        // A short one is a plain Write Request.
        #expect(b.run { $0.write(b.writable.valueHandle, [1, 2], completion: $1) }?.value != nil)
        #expect(b.clientSent.last?.first == 0x12)
    }

    /// 4.9.5: an echo that differs cancels everything queued on the server.
    @Test func reliableWriteChecksEveryEcho() throws {
        let b = try Bearer()
        #expect(b.run { $0.reliableWrite([(b.writable.valueHandle, [1, 2, 3])], completion: $1) }?.value != nil)
        #expect(b.written.map(\.value) == [[1, 2, 3]])
        b.tamper = { pdu in if pdu.first == 0x17 { pdu[pdu.count - 1] ^= 0xFF } }
        let result = b.run { $0.reliableWrite([(b.writable.valueHandle, [4, 5, 6])], completion: $1) }
        #expect(result?.error == .echoMismatch(handle: b.writable.valueHandle, offset: 0))
        #expect(b.clientSent.last == [0x18, 0x00])
        #expect(b.written.count == 1)
    }

    @Test func writeWithoutResponseGoesAtOnceAndIsBounded() throws {
        let b = try Bearer()
        #expect((try? b.client.writeWithoutResponse(b.writable.valueHandle, [7]).get()) != nil)
        b.pump()
        #expect(b.written.map(\.value) == [[7]])
        #expect(b.client.writeWithoutResponse(b.writable.valueHandle, Array(repeating: 0, count: 21)).error != nil)
    }
}

@Suite struct GATTClientUpdateTests {
    @Test func notificationsAndIndicationsArriveAndIndicationsAreConfirmed() throws {
        let b = try Bearer()
        let services = try #require(b.run { $0.discoverAll(completion: $1) }?.value)
        let sensor = try #require(services.characteristic(BluetoothUUID(0x2A37)))
        var notified: [(UInt16, [UInt8])] = []
        var indicated: [(UInt16, [UInt8])] = []
        b.client.onNotification = { notified.append(($0, Array($1))) }
        b.client.onIndication = { indicated.append(($0, Array($1))) }
        #expect(b.run { $0.configure(sensor, notify: true, indicate: true, completion: $1) }?.value != nil)
        #expect(b.server.session.clientConfiguration(b.sensor) == 0x0003)
        #expect(b.server.notify(b.sensor, value: [1]) == .queued)
        #expect(b.server.indicate(b.sensor, value: [2]) == .queued)
        #expect(b.server.indicate(b.sensor, value: [3]) == .queued)
        b.pump()
        #expect(notified.map(\.1) == [[1]])
        // Both indications went out: the first was confirmed, so the second could follow.
        #expect(indicated.map(\.1) == [[2], [3]])
        #expect(b.server.indicationsWaiting == 0)
    }

    /// Vol 3, Part G, 7.1: Service Changed makes the client rediscover the range.
    @Test func serviceChangedRediscoversTheRange() throws {
        let b = try Bearer()
        let before = try #require(b.run { $0.discoverAll(completion: $1) }?.value)
        #expect(before.characteristic(GATTType.serviceChanged) != nil)
        #expect(b.run { $0.followServiceChanged(completion: $1) }?.value != nil)
        #expect(b.server.session.clientConfiguration(b.serviceChanged) == 0x0002)
        var changed: [ClosedRange<UInt16>] = []
        b.client.onServiceChanged = { changed.append($0) }
        let range = try #require(try b.database.setService(b.battery, present: false))
        _ = b.server.databaseChanged(range)
        var value: [UInt8] = []
        value.appendLE(range.lowerBound)
        value.appendLE(range.upperBound)
        #expect(b.server.indicate(b.serviceChanged, value: value) == .queued)
        b.pump()
        #expect(changed == [range])
        #expect(b.client.services.map(\.uuid) == before.map(\.uuid).filter { $0 != BluetoothUUID(0x180F) })
        _ = try b.database.setService(b.battery, present: true)
        _ = b.server.databaseChanged(range)
        #expect(b.server.indicate(b.serviceChanged, value: value) == .queued)
        b.pump()
        #expect(b.client.services == before)
    }
}

extension GATTClientUpdateTests {
    /// A range whose service includes one outside it: the included service is found again and
    /// replaces the copy held, however often the server says the range changed (it was added
    /// once more each time, so a server could grow the client's memory without bound).
    @Test func serviceChangedKeepsEachServiceOnce() throws {
        let b = try Bearer()
        let before = try #require(b.run { $0.discoverAll(completion: $1) }?.value)
        #expect(b.run { $0.followServiceChanged(completion: $1) }?.value != nil)
        var value: [UInt8] = []
        value.appendLE(b.custom.startHandle)
        value.appendLE(b.custom.endHandle)
        for _ in 0..<3 {
            #expect(b.server.indicate(b.serviceChanged, value: value) == .queued)
            b.pump()
        }
        #expect(b.client.services == before)
    }
}

@Suite struct GATTClientFailureTests {
    /// Vol 3, Part F, 3.3.3: 30 s without a response ends the procedure and every one waiting;
    /// nothing more is sent on the bearer.
    @Test func aSilentServerTimesOut() throws {
        let b = try Bearer()
        b.serverSilent = true
        var first: Result<[UInt8], GATTClientError>?
        var second: Result<[UInt8], GATTClientError>?
        var timeouts = 0
        b.client.onTimeout = { timeouts += 1 }
        b.client.read(b.sensor.valueHandle) { first = $0 }
        b.client.read(b.sensor.valueHandle) { second = $0 }
        b.pump()
        b.scheduler.advance(by: .seconds(29))
        #expect(first == nil && second == nil)
        b.scheduler.advance(by: .seconds(1))
        #expect(first?.error == .timeout && second?.error == .timeout)
        #expect(timeouts == 1)
        let sent = b.clientSent.count
        #expect(b.run { $0.read(1, completion: $1) }?.error == .timeout)
        #expect(b.clientSent.count == sent)
    }

    @Test func aWrongAnswerIsMalformedAndTheNextRequestStillRuns() throws {
        let b = try Bearer()
        b.tamper = { pdu in if pdu.first == 0x0B { pdu = [0x13] } }
        let result = b.run { $0.read(b.sensor.valueHandle, completion: $1) }
        guard case .malformedResponse = result?.error else {
            Issue.record("expected a malformed response, got \(String(describing: result))")
            return
        }
        b.tamper = nil
        #expect(b.run { $0.read(b.sensor.valueHandle, completion: $1) }?.value == [0x06, 72])
        // A response nobody asked for is reported, and harms nothing.
        b.client.receive([0x0B, 1, 2][...])
        b.client.receive([0x1D, 0x01][...])
        #expect(b.unexpected.count == 2)
    }

    @Test func truncatedResponsesAreMalformedNotTraps() throws {
        let b = try Bearer()
        for bad: [UInt8] in [[0x11], [0x11, 0x06, 1, 0], [0x11, 0x02, 1, 0], [0x09, 0x07, 1, 0, 0, 0, 0, 0, 0]] {
            b.tamper = { pdu in if pdu.first == 0x11 { pdu = bad } }
            let result = b.run { $0.discoverAll(completion: $1) }
            #expect(result?.error != nil, "\(bad)")
        }
    }

    /// A server that answers with the same handles again cannot keep the client walking.
    @Test func discoveryThatDoesNotMoveForwardEnds() throws {
        let b = try Bearer()
        b.tamper = { pdu in if pdu.first == 0x11 { pdu = hex("11 06 0100 0000 0018") } }
        guard case .malformedResponse = b.run({ $0.discoverPrimaryServices(completion: $1) })?.error else {
            Issue.record("expected a malformed response")
            return
        }
    }

    @Test func theQueueIsBoundedAndClosingEndsEverything() throws {
        let b = try Bearer()
        var results: [Result<[UInt8], GATTClientError>] = []
        for _ in 0..<(GATTClient.maxQueued + 2) { b.client.read(1) { results.append($0) } }
        #expect(results.map(\.error) == [.queueFull])
        b.client.close()
        #expect(results.count == GATTClient.maxQueued + 2)
        #expect(results.dropFirst().allSatisfy { $0.error == .disconnected })
        #expect(b.run { $0.read(1, completion: $1) }?.error == .disconnected)
    }
}
