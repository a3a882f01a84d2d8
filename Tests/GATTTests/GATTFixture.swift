import BlemuATT
import BlemuCore
import Testing
@testable import BlemuGATT

func bytes(_ hex: String) -> [UInt8] {
    guard let parsed = Hex.parse(hex) else {
        Issue.record("bad hex in test: \(hex)")
        return []
    }
    return parsed
}

/// 6E400001-B5A3-F393-E0A9-E50E24DCCA9E and its little-endian wire form (Vol 3, Part F, 3.2.1).
let longService = BluetoothUUID("6E400001-B5A3-F393-E0A9-E50E24DCCA9E")!
let longServiceWire = bytes("9ECADC24 0EE5A9E0 93F3A3B5 0100406E")
let longCharacteristic = BluetoothUUID("6E400003-B5A3-F393-E0A9-E50E24DCCA9E")!
let longCharacteristicWire = bytes("9ECADC24 0EE5A9E0 93F3A3B5 0300406E")
let customDescriptor = BluetoothUUID("6E400099-B5A3-F393-E0A9-E50E24DCCA9E")!
let customDescriptorWire = bytes("9ECADC24 0EE5A9E0 93F3A3B5 9900406E")

let deviceName = Array("blemu test device with a long name".utf8)

/// What the device's handlers saw.
final class DeviceLog {
    var dynamicReads = 0
    /// Offsets the long characteristic's onRead was asked for, in order.
    var longReadOffsets: [Int] = []
    var writes: [(handle: UInt16, request: WriteRequest)] = []
    var writeError: ATTError?
    /// Called inside the dynamic characteristic's onRead (to model a device reacting to a read).
    var duringRead: (() -> Void)?

    /// The long characteristic's value: 100 bytes whose content depends on how often it was read,
    /// so two reads of it never return the same bytes.
    static func longValue(version: Int) -> [UInt8] {
        (0..<100).map { UInt8(truncatingIfNeeded: $0 &+ version &* 37) }
    }
}

extension ATTServer {
    /// A test's delegate hears what a link's owner always hears, and watches every request too
    /// (as the device does while someone watches its events).
    func record<Recorder: ATTServerDelegate & ATTServerObserver>(by recorder: Recorder) {
        delegate = recorder
        watch.install(recorder)
    }
}

/// The records of a fake link.
final class RecordingDelegate: ATTServerDelegate, ATTServerObserver {
    struct Sent {
        let pdu: [UInt8]
        let kind: ATTSendKind
        /// The server's ATT_MTU when the PDU was handed over.
        let mtu: Int
    }
    var sent: [Sent] = []
    var accepts = true
    var answered: [(opcode: UInt8, handle: UInt16, error: ATTError?)] = []
    var mtuChanges: [Int] = []
    var configured: [(characteristic: Characteristic, old: UInt16, new: UInt16)] = []
    var wrote: [(characteristic: Characteristic, count: Int, withResponse: Bool)] = []
    var timeouts = 0
    var acceptedCounters: [UInt32] = []
    var droppedSignedWrites: [SignedWriteDrop] = []
    func attServer(_ server: ATTServer, acceptedSignCounter counter: UInt32) { acceptedCounters.append(counter) }
    func attServer(_ server: ATTServer, droppedSignedWrite reason: SignedWriteDrop, handle: UInt16) {
        droppedSignedWrites.append(reason)
    }

    func attServer(_ server: ATTServer, send pdu: ArraySlice<UInt8>, kind: ATTSendKind) -> Bool {
        sent.append(Sent(pdu: Array(pdu), kind: kind, mtu: server.mtu))
        return accepts
    }
    func attServer(_ server: ATTServer, answered opcode: UInt8, handle: UInt16, error: ATTError?) {
        answered.append((opcode, handle, error))
    }
    func attServer(_ server: ATTServer, mtuChanged mtu: Int) { mtuChanges.append(mtu) }
    func attServer(_ server: ATTServer, configured characteristic: Characteristic, from old: UInt16, to new: UInt16) {
        configured.append((characteristic, old, new))
    }
    func attServer(_ server: ATTServer, wrote characteristic: Characteristic, request: WriteRequest, prepared: Bool) {
        wrote.append((characteristic, request.value.count, request.withResponse))
    }
    func attServerTransactionTimedOut(_ server: ATTServer) { timeouts += 1 }
    var roomSignals = 0
    func attServerIndicationQueueHasRoom(_ server: ATTServer) { roomSignals += 1 }
    var nonAtomicExecutes: [(written: Int, error: ATTError, handle: UInt16)] = []
    func attServer(_ server: ATTServer, executeWriteRefusedAfter written: Int, error: ATTError, handle: UInt16) {
        nonAtomicExecutes.append((written, error, handle))
    }
}

/// A small device, declared the way a device author would, and its handle map:
///
///     1  primary 0x1800 (end 3)          | 16 decl fixed(2) 0x2A6E [read, write]
///     2  decl  3 Device Name (cached)    | 17 value
///     4  secondary 0x180F (end 6)        | 18 decl 0x2A3A [notify]
///     5  decl  6 Battery Level (cached)  | 19 value  20 CCCD  21 User Description  22 Presentation Format
///     7  primary 0x180D (end 22)         | 23 primary 6E400001-… (end 27)
///     8  include of 4…6                  | 24 decl 6E400003-… [read]  25 value, 100 bytes, dynamic
///     9  decl 0x2A38 [read] 10 dynamic   | 26 descriptor 6E400099-… (128-bit type)  27 User Description
///     11 decl 0x2A37 [notify, indicate]  | 28 primary 0x180A (end 30)
///     12 value  13 CCCD                  | 29 decl 0x2A29 [read] 30 value (cached "blemu")
///     14 decl 0x2A39 [write, write without response]  15 value
final class Fixture {
    let log = DeviceLog()
    let scheduler = ManualScheduler()
    let delegate = RecordingDelegate()
    let database: GATTDatabase
    let server: ATTServer
    let peer = ATTPeer(connectionHandle: 0x0040, address: BluetoothAddress("F0:F1:F2:F3:F4:F5")!)

    let nameCharacteristic: Characteristic
    let batteryLevel: Characteristic
    let dynamicRead: Characteristic
    let notifyIndicate: Characteristic
    let writable: Characteristic
    let fixedLength: Characteristic
    let notifyOnly: Characteristic
    let long: Characteristic
    let manufacturer: Characteristic
    let gap: Service
    let battery: Service
    let heartRate: Service
    let custom: Service
    let deviceInformation: Service

    init() throws {
        let log = self.log
        nameCharacteristic = Characteristic(0x2A00, properties: [.read], cachedValue: deviceName)
        batteryLevel = Characteristic(0x2A19, properties: [.read], cachedValue: [0x64])
        dynamicRead = Characteristic(0x2A38, properties: [.read], onRead: { _, value in
            log.dynamicReads += 1
            log.duringRead?()
            value.append(0x01)
            return nil
        })
        notifyIndicate = Characteristic(0x2A37, properties: [.notify, .indicate])
        writable = Characteristic(0x2A39, properties: [.write, .writeWithoutResponse], onWrite: { request in
            log.writes.append((0x0F, request))
            return log.writeError
        })
        fixedLength = Characteristic(0x2A6E, properties: [.read, .write], length: .fixed(2),
                                     onRead: { _, value in value.appendLE(UInt16(0x1234)); return nil },
                                     onWrite: { request in
                                         log.writes.append((0x11, request))
                                         return nil
                                     })
        notifyOnly = Characteristic(0x2A3A, properties: [.notify], descriptors: [
            .userDescription("Notify"),
            .presentationFormat(format: 0x04, unit: 0x27AD),
        ])
        long = Characteristic(longCharacteristic, properties: [.read],
                              descriptors: [Descriptor(uuid: customDescriptor, value: [1, 2, 3]), .userDescription("Long")],
                              onRead: { request, value in
                                  log.longReadOffsets.append(request.offset)
                                  value.append(contentsOf: DeviceLog.longValue(version: log.longReadOffsets.count))
                                  return nil
                              })
        manufacturer = Characteristic(0x2A29, properties: [.read], cachedValue: Array("blemu".utf8))
        let (name, level, dynamic, both, writable, fixed, notifyOnly, long, manufacturer) =
            (nameCharacteristic, batteryLevel, dynamicRead, notifyIndicate, self.writable, fixedLength,
             self.notifyOnly, self.long, self.manufacturer)
        gap = Service(0x1800) { name }
        battery = Service(0x180F, primary: false) { level }
        heartRate = Service(0x180D, includes: [battery]) {
            dynamic
            both
            writable
            fixed
            notifyOnly
        }
        custom = Service(longService) { long }
        deviceInformation = Service(0x180A) { manufacturer }
        database = try GATTDatabase(services: [gap, battery, heartRate, custom, deviceInformation])
        server = ATTServer(database: database, peer: peer, scheduler: scheduler)
        server.record(by: delegate)
    }

    /// Sends one PDU from the client and returns the response PDUs the server sent for it.
    @discardableResult
    func request(_ pdu: [UInt8]) -> [[UInt8]] {
        let before = delegate.sent.count
        server.receive(pdu[...])
        return delegate.sent[before...].filter { $0.kind == .response }.map(\.pdu)
    }

    @discardableResult
    func request(_ hex: String) -> [[UInt8]] { request(bytes(hex)) }

    /// Exchange MTU, discarding the response.
    func exchangeMTU(_ mtu: UInt16) {
        var pdu: [UInt8] = [0x02]
        pdu.appendLE(mtu)
        request(pdu)
        #expect(server.mtu == Int(min(max(mtu, 23), 517)))
    }

    /// Write Request to a CCCD, expecting a Write Response.
    func configure(_ cccd: UInt16, _ value: UInt16, sourceLocation: SourceLocation = #_sourceLocation) {
        var pdu: [UInt8] = [0x12]
        pdu.appendLE(cccd)
        pdu.appendLE(value)
        #expect(request(pdu) == [[0x13]], sourceLocation: sourceLocation)
    }

    /// The PDUs sent of one kind, in order.
    func sent(_ kind: ATTSendKind) -> [[UInt8]] { delegate.sent.filter { $0.kind == kind }.map(\.pdu) }
}

/// An Error Response (Vol 3, Part F, 3.4.1.1) as bytes.
func errorResponse(_ opcode: UInt8, _ handle: UInt16, _ error: ATTError) -> [[UInt8]] {
    var pdu: [UInt8] = [0x01, opcode]
    pdu.appendLE(handle)
    pdu.append(error.rawValue)
    return [pdu]
}
